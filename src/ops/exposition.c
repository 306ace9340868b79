/* exposition.c: GET /metrics. */
#include "sluice/ops/exposition.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/ops/procstat.h"
#include "sluice/net/query.h"
#include "sluice/ops/stats.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sl_build_config.h"

/* ---- llama-server's families, relabelled ---- */

/*
 * name: as llama-server spells it ("llamacpp:prompt_tokens_total"); out:
 * as sluice shows it, passing promtool's lint: colons (reserved for
 * recording rules) become underscores, and a counter ends in _total.
 */
struct family {
	char *name, *out, *help, *type;
	struct sl_text samples;
};

struct sl_families {
	struct family *items;
	unsigned n;
};

struct sl_families *sl_families_new(void)
{
	return sl_xcalloc(1, sizeof(struct sl_families));
}

void sl_families_free(struct sl_families *f)
{
	for (unsigned i = 0; i < f->n; i++) {
		free(f->items[i].name);
		free(f->items[i].out);
		free(f->items[i].help);
		free(f->items[i].type);
		sl_text_free(&f->items[i].samples);
	}
	free(f->items);
	free(f);
}

static struct family *family_find(struct sl_families *f, const char *name,
                                  size_t len)
{
	for (unsigned i = 0; i < f->n; i++)
		if (strlen(f->items[i].name) == len &&
		    strncmp(f->items[i].name, name, len) == 0)
			return &f->items[i];
	return NULL;
}

static struct family *family_get(struct sl_families *f, const char *name,
                                 size_t len)
{
	struct family *fam = family_find(f, name, len);
	if (fam)
		return fam;
	f->items = sl_xrealloc(f->items, (f->n + 1) * sizeof(*f->items));
	fam = &f->items[f->n++];
	memset(fam, 0, sizeof(*fam));
	fam->name = sl_xasprintf("%.*s", (int)len, name);
	fam->out = sl_xstrdup(fam->name);
	for (char *p = fam->out; *p; p++)
		if (*p == ':')
			*p = '_';
	return fam;
}

/* A counter's exposed name ends in _total. */
static void name_counter(struct family *fam)
{
	size_t n = strlen(fam->out);
	if (n >= 6 && strcmp(fam->out + n - 6, "_total") == 0)
		return;
	char *out = sl_xasprintf("%s_total", fam->out);
	free(fam->out);
	fam->out = out;
}

/* The family a sample belongs to: its name, or that less a suffix. */
static struct family *family_of_sample(struct sl_families *f, const char *name,
                                       size_t len)
{
	struct family *fam = family_find(f, name, len);
	static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
	for (size_t i = 0; !fam && i < SL_ARRAY_SIZE(suffixes); i++) {
		size_t sl = strlen(suffixes[i]);
		if (len > sl && strncmp(name + len - sl, suffixes[i], sl) == 0)
			fam = family_find(f, name, len - sl);
	}
	return fam ? fam : family_get(f, name, len);
}

static void add_line(struct sl_families *f, const char *line, size_t len,
                     const char *upstream)
{
	if (len == 0)
		return;
	if (line[0] == '#') {
		/* "# HELP name text" or "# TYPE name type"; others ignored */
		bool help = len > 7 && strncmp(line, "# HELP ", 7) == 0;
		bool type = len > 7 && strncmp(line, "# TYPE ", 7) == 0;
		if (!help && !type)
			return;
		const char *name = line + 7;
		const char *sp = memchr(name, ' ', len - 7);
		if (!sp)
			return;
		struct family *fam = family_get(f, name, (size_t)(sp - name));
		char **slot = help ? &fam->help : &fam->type;
		if (!*slot)
			*slot = sl_xasprintf(
			    "%.*s", (int)(len - (size_t)(sp + 1 - line)),
			    sp + 1);
		if (type && strcmp(fam->type, "counter") == 0)
			name_counter(fam);
		return;
	}
	size_t name_len = strcspn(line, "{ ");
	if (name_len == 0 || name_len >= len)
		return;
	struct family *fam = family_of_sample(f, line, name_len);
	const char *rest = line + name_len;
	size_t rest_len = len - name_len;
	/* The sample's name as shown: the family's, plus any suffix. */
	size_t base = strlen(fam->name);
	const char *suffix = name_len > base ? line + base : "";
	size_t suffix_len = name_len > base ? name_len - base : 0;
	if (*rest == '{') {
		bool empty = rest_len > 1 && rest[1] == '}';
		sl_text_printf(&fam->samples, "%s%.*s{upstream=\"%s\"%s%.*s\n",
		               fam->out, (int)suffix_len, suffix, upstream,
		               empty ? "" : ",", (int)(rest_len - 1), rest + 1);
	} else {
		sl_text_printf(&fam->samples, "%s%.*s{upstream=\"%s\"}%.*s\n",
		               fam->out, (int)suffix_len, suffix, upstream,
		               (int)rest_len, rest);
	}
}

void sl_families_add(struct sl_families *f, const char *text,
                     const char *upstream)
{
	char label[256];
	sl_label_escape(upstream, label, sizeof(label));
	while (*text) {
		size_t len = strcspn(text, "\n");
		size_t trimmed = len;
		while (trimmed > 0 && text[trimmed - 1] == '\r')
			trimmed--;
		add_line(f, text, trimmed, label);
		text += len + (text[len] == '\n');
	}
}

void sl_families_write(const struct sl_families *f, struct sl_text *t)
{
	for (unsigned i = 0; i < f->n; i++) {
		const struct family *fam = &f->items[i];
		if (fam->samples.len == 0)
			continue;
		if (fam->help)
			sl_text_printf(t, "# HELP %s %s\n", fam->out,
			               fam->help);
		if (fam->type)
			sl_text_printf(t, "# TYPE %s %s\n", fam->out,
			               fam->type);
		sl_text_printf(t, "%.*s", (int)fam->samples.len,
		               fam->samples.data);
	}
}

/* ---- sluice's own ---- */

static const char *const class_names[SL_CLASS_COUNT] = {"urgent", "normal",
                                                        "batch"};

static void expose_requests(struct sl_stats *s, struct sl_text *t)
{
	sl_expose_family(t, "sluice_requests_total", "counter",
	                 "Requests answered, by endpoint and HTTP status "
	                 "(499: the client left first).");
	for (int e = 0; e < SL_EP_COUNT; e++) {
		for (int i = 0; i <= SL_STATS_CODES; i++) {
			if (s->requests[e][i].n == 0)
				continue;
			char code[16];
			if (i == SL_STATS_CODES)
				snprintf(code, sizeof(code), "other");
			else
				snprintf(code, sizeof(code), "%d",
				         s->requests[e][i].code);
			sl_text_printf(t,
			               "sluice_requests_total{endpoint=\"%s\","
			               "code=\"%s\"} %llu\n",
			               sl_stats_endpoint_name(e), code,
			               (unsigned long long)s->requests[e][i].n);
		}
	}
	sl_expose_family(t, "sluice_rejected_total", "counter",
	                 "Requests sluice refused, by reason.");
	for (int r = 0; r < SL_REJECT_COUNT; r++)
		sl_text_printf(t, "sluice_rejected_total{reason=\"%s\"} %llu\n",
		               sl_stats_reason_name(r),
		               (unsigned long long)s->rejected[r]);
	sl_expose_family(t, "sluice_cancelled_total", "counter",
	                 "Requests whose client left, by where they were.");
	sl_text_printf(t, "sluice_cancelled_total{stage=\"queued\"} %llu\n",
	               (unsigned long long)s->cancelled_queued);
	sl_text_printf(t, "sluice_cancelled_total{stage=\"inflight\"} %llu\n",
	               (unsigned long long)s->cancelled_inflight);
	sl_expose_family(t, "sluice_generated_tokens_total", "counter",
	                 "Tokens generated for sluice's clients.");
	sl_text_printf(t, "sluice_generated_tokens_total %llu\n",
	               (unsigned long long)s->generated_tokens);
}

/* The label value naming the model an upstream serves. */
static void model_label(const struct sl_exposition *ex,
                        const struct sl_upstream *u, char *out, size_t size)
{
	const struct sl_model *m = sl_registry_model_of(ex->registry, u);
	sl_label_escape(m ? m->name : "", out, size);
}

/*
 * Slots busy as llama-server reports them against sluice's own count, for
 * the upstreams whose occupancy is polled (fleet/upstream.h, "Occupancy").
 */
static void expose_occupancy(struct sl_exposition *ex, struct sl_text *t)
{
	static const struct {
		const char *name, *type, *help;
	} families[] = {
	    {"sluice_upstream_slots_busy", "gauge",
	     "Slots busy on a polled upstream: as its last poll found them "
	     "(source=\"llama-server\"), and sluice's own requests there "
	     "now (source=\"sluice\")."},
	    {"sluice_upstream_requests_deferred", "gauge",
	     "Requests waiting in a polled llama-server's own queue, as its "
	     "last poll found them."},
	    {"sluice_upstream_occupancy_polls_total", "counter",
	     "Polls of an upstream's occupancy (/metrics or /slots), by "
	     "result."},
	};
	for (size_t k = 0; k < SL_ARRAY_SIZE(families); k++) {
		sl_expose_family(t, families[k].name, families[k].type,
		                 families[k].help);
		for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
			const struct sl_upstream *u = ex->upstreams[i];
			if (!u || !sl_occupancy_polled(u))
				continue;
			const struct sl_occupancy *o = &u->occupancy;
			char l[640], label[256], model[256];
			sl_label_escape(u->name, label, sizeof(label));
			model_label(ex, u, model, sizeof(model));
			snprintf(l, sizeof(l), "upstream=\"%s\",model=\"%s\"",
			         label, model);
			const char *f = families[k].name;
			if (k == 0) {
				sl_text_printf(t,
				               "%s{%s,source=\"llama-server\"} "
				               "%u\n",
				               f, l, o->processing);
				sl_text_printf(t,
				               "%s{%s,source=\"sluice\"} %u\n",
				               f, l, u->inflight);
			} else if (k == 1) {
				sl_text_printf(t, "%s{%s} %u\n", f, l,
				               o->deferred);
			} else {
				sl_text_printf(t, "%s{%s,result=\"ok\"} %llu\n",
				               f, l, o->reads);
				sl_text_printf(
				    t, "%s{%s,result=\"failed\"} %llu\n", f, l,
				    o->failures);
			}
		}
	}
}

static void expose_upstreams(struct sl_exposition *ex, struct sl_text *t)
{
	static const struct {
		const char *name, *type, *help;
	} families[] = {
	    {"sluice_upstream_restarts_total", "counter",
	     "Relaunches of a managed llama-server after it exited."},
	    {"sluice_upstream_slots", "gauge",
	     "Requests an upstream takes at once."},
	    {"sluice_upstream_up", "gauge", "1 when an upstream is ready."},
	    {"sluice_upstream_ejections_total", "counter",
	     "Times an upstream was ejected after failures in a row."},
	    {"sluice_upstream_ejected", "gauge",
	     "1 while an upstream is ejected."},
	};
	for (size_t k = 0; k < SL_ARRAY_SIZE(families); k++) {
		sl_expose_family(t, families[k].name, families[k].type,
		                 families[k].help);
		for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
			const struct sl_upstream *u = ex->upstreams[i];
			if (!u)
				continue;
			char label[256], model[256];
			sl_label_escape(u->name, label, sizeof(label));
			model_label(ex, u, model, sizeof(model));
			unsigned long long v[] = {u->restarts, u->total_slots,
			                          sl_upstream_is_ready(u),
			                          u->outlier.ejections,
			                          u->outlier.ejected};
			sl_text_printf(t,
			               "%s{upstream=\"%s\",model=\"%s\"} "
			               "%llu\n",
			               families[k].name, label, model, v[k]);
		}
	}
	expose_occupancy(ex, t);
	sl_expose_family(t, "sluice_upstream_retries_total", "counter",
	                 "Requests sent again after failing on an upstream "
	                 "before any byte reached the client.");
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = ex->upstreams[i];
		if (!u)
			continue;
		char label[256], model[256];
		sl_label_escape(u->name, label, sizeof(label));
		model_label(ex, u, model, sizeof(model));
		for (int r = 0; r < SL_RETRY_REASONS; r++)
			sl_text_printf(
			    t,
			    "sluice_upstream_retries_total{upstream=\"%s\","
			    "model=\"%s\",reason=\"%s\"} %llu\n",
			    label, model, sl_retry_reason_name(r),
			    u->retries[r]);
	}
}

/* Prefix affinity (affinity.h): how its picks among replicas went. */
static void expose_affinity(struct sl_exposition *ex, struct sl_text *t)
{
	if (!*ex->affinity)
		return;
	sl_expose_family(t, "sluice_affinity_picks_total", "counter",
	                 "Picks among two or more replicas by prompt prefix: "
	                 "hit (sent where the prefix is), busy (that replica "
	                 "could not take it: full, or beyond "
	                 "--affinity-margin), miss (no replica had it).");
	for (int r = 0; r < SL_AFFINITY_RESULTS; r++)
		sl_text_printf(t,
		               "sluice_affinity_picks_total{result=\"%s\"} "
		               "%llu\n",
		               sl_affinity_result_name(r),
		               ex->affinity_picks[r]);
}

/* DNS discovery (discovery.h): each --upstream-dns name's lookups. */
static void expose_dns(struct sl_exposition *ex, struct sl_text *t)
{
	if (*ex->n_discoveries == 0)
		return;
	sl_expose_family(t, "sluice_dns_lookups_total", "counter",
	                 "Lookups of an --upstream-dns name, by how they "
	                 "ended.");
	for (unsigned i = 0; i < *ex->n_discoveries; i++) {
		const struct sl_discovery *d = (*ex->discoveries)[i];
		if (!d)
			continue;
		char label[SL_DISCOVERY_NAME_MAX * 2 + 16];
		sl_label_escape(sl_discovery_target(d), label, sizeof(label));
		for (int r = 0; r < SL_DNS_RESULTS; r++)
			sl_text_printf(t,
			               "sluice_dns_lookups_total{name=\"%s\","
			               "result=\"%s\"} %llu\n",
			               label, sl_dns_result_name(r),
			               sl_discovery_lookups(d, r));
	}
	sl_expose_family(t, "sluice_dns_addresses", "gauge",
	                 "Addresses an --upstream-dns name has now.");
	for (unsigned i = 0; i < *ex->n_discoveries; i++) {
		const struct sl_discovery *d = (*ex->discoveries)[i];
		if (!d)
			continue;
		char label[SL_DISCOVERY_NAME_MAX * 2 + 16];
		sl_label_escape(sl_discovery_target(d), label, sizeof(label));
		sl_text_printf(t, "sluice_dns_addresses{name=\"%s\"} %u\n",
		               label, sl_discovery_count(d));
	}
}

/*
 * Service levels (sched/README.md, "Deadlines"): each request with one,
 * by priority class, key ("" without one) and outcome; and how far the
 * predicted TTFT was from the actual one.
 */
static void expose_slo(struct sl_exposition *ex, struct sl_text *t)
{
	_Static_assert(SL_CLASS_COUNT == 3 && SL_SLO_OUTCOMES == 3,
	               "struct sl_tenant's slo[][] has this shape");
	const struct sl_stats *s = ex->stats;
	sl_expose_family(t, "sluice_slo_requests_total", "counter",
	                 "Requests with a service level (X-SLO-TTFT-Ms, "
	                 "X-SLO-TPOT-Ms, a key's, a model's or --slo-ttft's), "
	                 "by priority, key and outcome: met, missed (served "
	                 "late) or shed (refused as out of reach).");
	for (int c = 0; c < SL_CLASS_COUNT; c++)
		for (int o = 0; o < SL_SLO_OUTCOMES; o++)
			sl_text_printf(
			    t,
			    "sluice_slo_requests_total{priority=\"%s\","
			    "key=\"\",outcome=\"%s\"} %llu\n",
			    class_names[c], sl_slo_outcome_name(o),
			    (unsigned long long)s->slo[c][o]);
	for (const struct sl_tenant *x = ex->tenants ? ex->tenants->list : NULL;
	     x; x = x->next)
		for (int c = 0; c < SL_CLASS_COUNT; c++)
			for (int o = 0; o < SL_SLO_OUTCOMES; o++) {
				if (!x->slo[c][o])
					continue;
				sl_text_printf(
				    t,
				    "sluice_slo_requests_total{priority=\"%s\","
				    "key=\"%s\",outcome=\"%s\"} %llu\n",
				    class_names[c], x->name,
				    sl_slo_outcome_name(o),
				    (unsigned long long)x->slo[c][o]);
			}
	sl_expose_family(t, "sluice_slo_ttft_prediction_ratio", "histogram",
	                 "Each request's predicted time to first token over "
	                 "its actual one (1: exact).");
	sl_expose_histogram(t, "sluice_slo_ttft_prediction_ratio", "",
	                    &s->ttft_prediction);
}

static void expose_by_class(struct sl_text *t, const char *name,
                            const char *help, struct sl_histogram *h)
{
	sl_expose_family(t, name, "histogram", help);
	for (int c = 0; c < SL_CLASS_COUNT; c++) {
		char labels[32];
		snprintf(labels, sizeof(labels), "priority=\"%s\"",
		         class_names[c]);
		sl_expose_histogram(t, name, labels, &h[c]);
	}
}

void sl_exposition_prometheus(struct sl_exposition *ex, struct sl_text *t)
{
	struct sl_stats *s = ex->stats;
	/* Read first, so that the memory this exposition takes as it grows
	 * is not in the figures. */
	struct sl_procstat proc;
	sl_procstat_read(&proc);
	expose_requests(s, t);
	sl_tenants_write_metrics(ex->tenants, t);
	sl_tenants_write_fairness(ex->tenants, t);
	expose_slo(ex, t);
	sl_expose_family(t, "sluice_connections_refused_total", "counter",
	                 "Connections refused over --max-connections.");
	sl_text_printf(t, "sluice_connections_refused_total %llu\n",
	               (unsigned long long)ex->http->refused_connections);
	expose_upstreams(ex, t);
	expose_dns(ex, t);
	expose_affinity(ex, t);
	sl_trace_write_metrics(ex->tracer, t);

	/* Each model has its own queue (app/app_models.c). */
	sl_expose_family(t, "sluice_queue_depth", "gauge",
	                 "Requests waiting in sluice's queue, by priority and "
	                 "model.");
	unsigned reserve = 0;
	for (unsigned i = 0; i < ex->registry->n_models; i++) {
		const struct sl_model *m = ex->registry->models[i];
		char model[256];
		sl_label_escape(m->name, model, sizeof(model));
		reserve += sl_sched_urgent_reserve(&m->sched);
		/* The scheduler counts its classes from batch up. */
		for (int c = 0; c < SL_CLASS_COUNT; c++)
			sl_text_printf(
			    t,
			    "sluice_queue_depth{priority=\"%s\",model=\"%s\"} "
			    "%u\n",
			    class_names[c], model,
			    m->sched.class_count[SL_CLASS_COUNT - 1 - c]);
	}
	unsigned inflight = 0;
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++)
		if (ex->upstreams[i])
			inflight += ex->upstreams[i]->inflight;
	/* One series per state, 1 for the one the model is in (model.h). */
	sl_expose_family(t, "sluice_model_state", "gauge",
	                 "1 for the state each model is in: stopped, starting, "
	                 "ready, stopping or down.");
	for (unsigned i = 0; i < ex->registry->n_models; i++) {
		const struct sl_model *m = ex->registry->models[i];
		char model[256];
		sl_label_escape(m->name, model, sizeof(model));
		const char *now = sl_model_state(m);
		for (const char *const *st = sl_model_states; *st; st++)
			sl_text_printf(t,
			               "sluice_model_state{model=\"%s\","
			               "state=\"%s\"} %d\n",
			               model, *st, strcmp(*st, now) == 0);
	}
	sl_expose_family(t, "sluice_model_loads_cancelled_total", "counter",
	                 "Loads on demand stopped because every request "
	                 "waiting for them left.");
	for (unsigned i = 0; i < ex->registry->n_models; i++) {
		const struct sl_model *m = ex->registry->models[i];
		char model[256];
		sl_label_escape(m->name, model, sizeof(model));
		sl_text_printf(
		    t,
		    "sluice_model_loads_cancelled_total{model=\"%s\"} "
		    "%llu\n",
		    model, (unsigned long long)m->loads_cancelled);
	}
	sl_expose_family(t, "sluice_inflight", "gauge",
	                 "Requests sent to upstreams and not finished.");
	sl_text_printf(t, "sluice_inflight %u\n", inflight);
	sl_expose_family(t, "sluice_urgent_reserve", "gauge",
	                 "Free slots kept for urgent requests now.");
	sl_text_printf(t, "sluice_urgent_reserve %u\n", reserve);
	sl_expose_family(t, "sluice_connections", "gauge",
	                 "Open client connections.");
	sl_text_printf(t, "sluice_connections %u\n", ex->http->n_conns);
	sl_expose_family(t, "sluice_body_memory_bytes", "gauge",
	                 "Memory reserved by the request bodies being read; "
	                 "at most --max-body-memory.");
	sl_text_printf(t, "sluice_body_memory_bytes %zu\n",
	               ex->http->body_memory);

	expose_by_class(t, "sluice_queue_wait_seconds",
	                "Time spent in sluice's queue, batching window "
	                "included.",
	                s->queue_wait);
	expose_by_class(t, "sluice_time_to_first_token_seconds",
	                "From a request's first byte to its first generated "
	                "token.",
	                s->ttft);
	sl_expose_family(t, "sluice_request_duration_seconds", "histogram",
	                 "From a request's first byte to its last response "
	                 "byte.");
	for (int e = 0; e < SL_EP_COUNT; e++) {
		if (s->duration[e].count == 0)
			continue;
		char labels[64];
		snprintf(labels, sizeof(labels), "endpoint=\"%s\"",
		         sl_stats_endpoint_name(e));
		sl_expose_histogram(t, "sluice_request_duration_seconds",
		                    labels, &s->duration[e]);
	}
	sl_expose_family(t, "sluice_inter_token_seconds", "histogram",
	                 "Gaps between consecutive tokens of a generation.");
	sl_expose_histogram(t, "sluice_inter_token_seconds", "",
	                    &s->inter_token);
	sl_expose_family(t, "sluice_batch_size", "histogram",
	                 "Requests per batch leaving sluice's queue.");
	sl_expose_histogram(t, "sluice_batch_size", "", &s->batch_size);
	sl_procstat_expose(&proc, t);
	sl_procstat_expose_build_info(t);
}

json_t *sl_exposition_summary(struct sl_exposition *ex)
{
	struct sl_stats *s = ex->stats;
	struct sl_histogram ttft;
	sl_hist_init(&ttft, s->ttft[0].min_exp);
	for (int c = 0; c < SL_CLASS_COUNT; c++)
		sl_hist_merge(&ttft, &s->ttft[c]);
	json_t *ups = json_array();
	unsigned inflight = 0;
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = ex->upstreams[i];
		if (!u)
			continue;
		inflight += u->inflight;
		json_t *j = sl_upstream_json(u);
		json_object_set_new(j, "inflight", json_integer(u->inflight));
		json_array_append_new(ups, j);
	}
	const struct sl_histogram *lat = &s->generation;
	struct sl_procstat proc;
	sl_procstat_read(&proc);
	return json_pack(
	    "{s:i, s:i, s:I, s:f, s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:o, s:o}",
	    "queue_depth", (int)sl_registry_queue_depth(ex->registry),
	    "inflight", (int)inflight, "requests", (json_int_t)lat->count,
	    "p50_latency_ms", sl_hist_quantile(lat, 0.50) * 1000,
	    "p95_latency_ms", sl_hist_quantile(lat, 0.95) * 1000,
	    "p99_latency_ms", sl_hist_quantile(lat, 0.99) * 1000, "p99_ttft_ms",
	    sl_hist_quantile(&ttft, 0.99) * 1000, "batches",
	    (json_int_t)s->batches, "avg_batch_size",
	    s->batches ? (double)s->batched / (double)s->batches : 0.0,
	    "tokens_per_second", sl_stats_token_rate(s, uv_now(ex->loop)),
	    "quantile_error_bound", 1.0 / SL_HIST_SUB, "upstreams", ups,
	    "process", sl_procstat_json(&proc));
}

/* ---- answering, with llama-server's metrics ---- */

struct sl_metrics_waiter {
	struct sl_http_request *req;
	struct sl_metrics_waiter *prev, *next;
};

static void respond_prometheus(struct sl_exposition *ex,
                               struct sl_http_request *req)
{
	struct sl_text t = {0};
	sl_exposition_prometheus(ex, &t);
	struct sl_families *f = sl_families_new();
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = ex->upstreams[i];
		if (u && u->managed && u->metrics_text)
			sl_families_add(f, u->metrics_text, u->name);
	}
	sl_families_write(f, &t);
	sl_families_free(f);
	sl_http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8",
	                "Cache-Control: no-store\r\n", t.data ? t.data : "",
	                t.len);
	sl_text_free(&t);
}

static void waiter_unlink(struct sl_exposition *ex, struct sl_metrics_waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		ex->waiters = w->next;
	if (w->next)
		w->next->prev = w->prev;
}

/* The client left: its waiter stays listed, and is skipped and freed
 * when the fetch ends (or at shutdown, after every connection closed). */
static void on_waiter_abort(struct sl_http_request *req)
{
	struct sl_metrics_waiter *w = req->handler_data;
	w->req = NULL;
}

static void answer_waiters(struct sl_exposition *ex)
{
	while (ex->waiters) {
		struct sl_metrics_waiter *w = ex->waiters;
		waiter_unlink(ex, w);
		if (w->req) {
			w->req->on_abort = NULL;
			respond_prometheus(ex, w->req);
		}
		free(w);
	}
}

static void on_upstream_metrics(struct sl_get *g, long status, const char *err)
{
	struct sl_upstream *u =
	    sl_container_of(g, struct sl_upstream, metrics_get);
	struct sl_exposition *ex = g->data;
	if (status == 200) {
		free(u->metrics_text);
		u->metrics_text = sl_xstrdup(g->body ? g->body : "");
		u->metrics_ms = uv_now(u->loop);
	} else {
		sl_debug("llama-server metrics from %s: %s", u->url,
		         err ? err : "not 200");
	}
	if (--ex->fetching == 0)
		answer_waiters(ex);
}

/* Starts refreshing stale caches; returns how many fetches run. */
static unsigned refresh_upstream_metrics(struct sl_exposition *ex)
{
	uint64_t now = uv_now(ex->loop);
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		struct sl_upstream *u = ex->upstreams[i];
		if (!u || !u->managed || !sl_upstream_is_ready(u) ||
		    sl_get_busy(&u->metrics_get) ||
		    (u->metrics_text &&
		     now - u->metrics_ms < SL_UPSTREAM_METRICS_TTL_MS))
			continue;
		char *url = sl_xasprintf("%s/metrics", u->request_url);
		u->metrics_get.data = ex;
		if (sl_get_start(ex->curl, &u->metrics_get, url, u->api_key,
		                 SL_UPSTREAM_METRICS_TIMEOUT_MS,
		                 on_upstream_metrics) == 0)
			ex->fetching++;
		free(url);
	}
	return ex->fetching;
}

static bool wants_json(const struct sl_http_request *req)
{
	const char *accept = sl_http_header(req, "Accept");
	if (accept && strcasestr(accept, "application/json"))
		return true;
	char format[8];
	struct sl_query_param p =
	    sl_query_get(req->query, "format", format, sizeof(format));
	return p.found && !p.cut && strcmp(format, "json") == 0;
}

void sl_exposition_handle(struct sl_exposition *ex, struct sl_http_request *req)
{
	if (wants_json(req)) {
		json_t *doc = sl_exposition_summary(ex);
		char *body =
		    json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(6));
		json_decref(doc);
		sl_http_respond(req, 200, SL_HTTP_JSON,
		                "Cache-Control: no-store\r\n", body,
		                strlen(body));
		free(body);
		return;
	}
	if (refresh_upstream_metrics(ex) == 0) {
		respond_prometheus(ex, req);
		return;
	}
	struct sl_metrics_waiter *w = sl_xcalloc(1, sizeof(*w));
	w->req = req;
	w->next = ex->waiters;
	if (w->next)
		w->next->prev = w;
	ex->waiters = w;
	req->handler_data = w;
	req->on_abort = on_waiter_abort;
}

void sl_exposition_close(struct sl_exposition *ex)
{
	while (ex->waiters) {
		struct sl_metrics_waiter *w = ex->waiters;
		waiter_unlink(ex, w);
		free(w);
	}
}

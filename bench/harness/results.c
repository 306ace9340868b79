/*
 * results.c: a run's records made into its figures (the RUN object of
 * bench/harness/README.md).
 *
 * Only measured requests count: those whose intended start came after the
 * warm-up. Latencies run from each request's intended start: time to first
 * token (TTFT), end to end (E2EL), and time per output token after the
 * first (TPOT = (E2EL - TTFT) / (tokens - 1)). A request is good when it
 * was answered whole and met every SLO given; goodput is good requests per
 * second. Fairness is Jain's index over the tenants' service (input and
 * output tokens served) divided by their weights: 1 when every tenant got
 * service in proportion to its weight, 1/n when one got it all.
 *
 * Under SLOs (--slo, or a class of --slo-mix per conversation) each
 * request is judged by its own SLOs. Its last answer puts it in one
 * outcome: served (2xx, whole), shed (429 or 503 with an "slo_" reason),
 * refused otherwise (429 or 503), other (failed), or left on purpose;
 * admitted is served or other: sluice did not refuse it. Attainment is
 * the share that met their SLOs, of those that wanted an answer and of
 * those admitted. The predictor's error is |predicted - actual| / actual
 * over the requests whose answer carried sluice's predicted TTFT and
 * whose TTFT was measured (results_actual_ttft_ms).
 */
#include "harness.h"

#include "sluice/base/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct figures {
	struct bs_samples ttft, tpot, e2el, queue, upstream, server_ttft, lag;
	struct bs_samples pred_error, pred_signed; /* relative, see above */
	uint64_t n, completed, failed, good, input_tokens, output_tokens;
	uint64_t cached_tokens, prompt_tokens_timed;
	uint64_t status_2xx, status_429, status_503, status_other;
	uint64_t retry_after, retried, retried_ok, cancelled, left;
	uint64_t shed, refused, admitted;
};

static void figures_free(struct figures *f)
{
	struct bs_samples *all[] = {&f->ttft,  &f->tpot,       &f->e2el,
	                            &f->queue, &f->upstream,   &f->server_ttft,
	                            &f->lag,   &f->pred_error, &f->pred_signed};
	for (size_t i = 0; i < SL_ARRAY_SIZE(all); i++)
		bs_free(all[i]);
}

static double ms(uint64_t from, uint64_t to)
{
	return (double)(to - from) / 1e6;
}

/*
 * Streams only: a plain answer comes whole, and the time from its first
 * byte to its last is no time per token. A stream's events with text are
 * counted in tokens_seen; a plain answer has none.
 */
double results_tpot_ms(const struct record *rec)
{
	if (!rec->first_ns || rec->output_tokens < 2 || !rec->tokens_seen)
		return NAN;
	return ms(rec->first_ns, rec->end_ns) / (rec->output_tokens - 1);
}

/*
 * The TTFT that sluice's prediction is held to, in ms: a stream's first
 * token from the send of the attempt answered (sluice predicts from the
 * request's arrival, which on a local link is the send); a plain answer's
 * from sluice's own Server-Timing, queue plus ttft (arrival to dispatch,
 * dispatch to first token), when it sent both. NAN otherwise: a plain
 * answer's first byte is its last token, not its first.
 */
double results_actual_ttft_ms(const struct bench *b, const struct record *rec)
{
	if (b->o.stream)
		return rec->tokens_seen && rec->first_ns >= rec->try_sent_ns
		           ? ms(rec->try_sent_ns, rec->first_ns)
		           : NAN;
	if (!isnan(rec->queue_ms) && !isnan(rec->server_ttft_ms))
		return rec->queue_ms + rec->server_ttft_ms;
	return NAN;
}

double results_relative_error(const struct bench *b, const struct record *rec)
{
	return slo_relative_error(rec->predicted_ms,
	                          results_actual_ttft_ms(b, rec));
}

bool results_meets(const struct bench *b, const struct record *rec)
{
	const struct slo *slo = options_slo_of(&b->o, rec->slo_class);
	if (!rec->ok || rec->cancelled)
		return false;
	if (slo->ttft_ms > 0 &&
	    !(rec->first_ns &&
	      ms(rec->intended_ns, rec->first_ns) <= slo->ttft_ms))
		return false;
	double tpot = results_tpot_ms(rec);
	if (slo->tpot_ms > 0 && !isnan(tpot) && tpot > slo->tpot_ms)
		return false;
	if (slo->e2el_ms > 0 &&
	    ms(rec->intended_ns, rec->end_ns) > slo->e2el_ms)
		return false;
	return true;
}

static bool refused_status(int status)
{
	return status == 429 || status == 503;
}

static void add(struct figures *f, const struct bench *b,
                const struct record *rec)
{
	f->n++;
	if (!rec->ok && !rec->cancelled && refused_status(rec->status)) {
		if (slo_is_shed(rec->reason))
			f->shed++;
		else
			f->refused++;
	} else if (!rec->cancelled) {
		f->admitted++;
	}
	double e = results_relative_error(b, rec);
	if (!isnan(e)) {
		bs_add(&f->pred_signed, e);
		bs_add(&f->pred_error, fabs(e));
	}
	/* Each request in one bucket: left on purpose, answered whole,
	 * refused (429, 503), or failed otherwise (a status, a broken
	 * connection, an answer cut short). */
	if (rec->cancelled)
		f->left++;
	else if (rec->ok)
		f->status_2xx++;
	else if (rec->status == 429)
		f->status_429++;
	else if (rec->status == 503)
		f->status_503++;
	else
		f->status_other++;
	f->retry_after += rec->retry_after;
	f->retried += rec->retries > 0;
	f->retried_ok += rec->retries > 0 && rec->ok;
	f->cancelled += rec->cancelled;
	if (rec->sent_ns)
		bs_add(&f->lag, ms(rec->intended_ns, rec->sent_ns));
	if (!isnan(rec->queue_ms))
		bs_add(&f->queue, rec->queue_ms);
	if (!isnan(rec->upstream_ms))
		bs_add(&f->upstream, rec->upstream_ms);
	if (!isnan(rec->server_ttft_ms))
		bs_add(&f->server_ttft, rec->server_ttft_ms);
	if (!rec->ok || rec->cancelled) {
		f->failed += !rec->cancelled; /* left is neither */
		return;
	}
	f->completed++;
	f->good += results_meets(b, rec);
	f->input_tokens += rec->input_tokens;
	f->output_tokens += rec->output_tokens;
	f->cached_tokens += rec->cached_tokens;
	if (rec->first_ns)
		bs_add(&f->ttft, ms(rec->intended_ns, rec->first_ns));
	bs_add(&f->e2el, ms(rec->intended_ns, rec->end_ns));
	double tpot = results_tpot_ms(rec);
	if (!isnan(tpot))
		bs_add(&f->tpot, tpot);
}

static json_t *num(double v)
{
	return isnan(v) || isinf(v) ? json_null() : json_real(v);
}

static double stddev(const struct bs_samples *s)
{
	if (s->n < 2)
		return s->n ? 0 : NAN;
	double mean = bs_mean(s), sum = 0;
	for (size_t i = 0; i < s->n; i++)
		sum += (s->v[i] - mean) * (s->v[i] - mean);
	return sqrt(sum / (double)(s->n - 1));
}

/* mean_X_ms, median_X_ms, std_X_ms, p90_X_ms, p95_X_ms, p99_X_ms. */
static void put_latency(json_t *j, const char *name, struct bs_samples *s)
{
	char key[48];
	snprintf(key, sizeof(key), "mean_%s_ms", name);
	json_object_set_new(j, key, num(bs_mean(s)));
	snprintf(key, sizeof(key), "median_%s_ms", name);
	json_object_set_new(j, key, num(bs_percentile(s, 50)));
	snprintf(key, sizeof(key), "std_%s_ms", name);
	json_object_set_new(j, key, num(stddev(s)));
	static const int ps[] = {90, 95, 99};
	for (size_t i = 0; i < SL_ARRAY_SIZE(ps); i++) {
		snprintf(key, sizeof(key), "p%d_%s_ms", ps[i], name);
		json_object_set_new(j, key, num(bs_percentile(s, ps[i])));
	}
}

static json_t *spread(struct bs_samples *s)
{
	if (s->n == 0)
		return json_null();
	return json_pack("{s:o, s:o, s:o}", "mean", num(bs_mean(s)), "p50",
	                 num(bs_percentile(s, 50)), "p99",
	                 num(bs_percentile(s, 99)));
}

/* The figures every group has. */
static json_t *group_json(struct figures *f, double seconds)
{
	json_t *j =
	    json_pack("{s:I, s:I, s:I, s:o, s:o, s:o, s:I}", "num_prompts",
	              (json_int_t)f->n, "completed", (json_int_t)f->completed,
	              "failed", (json_int_t)f->failed, "request_throughput",
	              num(bs_rate(f->completed, seconds)), "request_goodput",
	              num(bs_rate(f->good, seconds)), "output_throughput",
	              num(bs_rate(f->output_tokens, seconds)), "service_tokens",
	              (json_int_t)(f->input_tokens + f->output_tokens));
	put_latency(j, "ttft", &f->ttft);
	put_latency(j, "tpot", &f->tpot);
	put_latency(j, "e2el", &f->e2el);
	return j;
}

static json_t *outcome_json(const struct figures *f)
{
	return json_pack(
	    "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "2xx",
	    (json_int_t)f->status_2xx, "429", (json_int_t)f->status_429, "503",
	    (json_int_t)f->status_503, "other", (json_int_t)f->status_other,
	    "left", (json_int_t)f->left, "retry_after",
	    (json_int_t)f->retry_after, "retried", (json_int_t)f->retried,
	    "retried_ok", (json_int_t)f->retried_ok);
}

static bool measured(const struct record *rec)
{
	return !rec->warmup;
}

/* Figures for the records whose key(rec) == k, one group per key. */
static json_t *groups_by(const struct bench *b, const struct run *r,
                         int (*key)(const struct record *), int n_keys,
                         const char *(*name)(const struct bench *, int),
                         double seconds, json_t *outcomes)
{
	json_t *out = json_object();
	for (int k = 0; k < n_keys; k++) {
		struct figures f = {0};
		for (size_t i = 0; i < r->n_recs; i++)
			if (measured(&r->recs[i]) && key(&r->recs[i]) == k)
				add(&f, b, &r->recs[i]);
		if (f.n) {
			json_object_set_new(out, name(b, k),
			                    group_json(&f, seconds));
			if (outcomes)
				json_object_set_new(outcomes, name(b, k),
				                    outcome_json(&f));
		}
		figures_free(&f);
	}
	return out;
}

static int tenant_key(const struct record *rec)
{
	return rec->tenant;
}
static int model_key(const struct record *rec)
{
	return rec->model;
}
static int prio_key(const struct record *rec)
{
	return rec->prio;
}
static const char *tenant_name(const struct bench *b, int k)
{
	return b->o.tenants[k].name;
}
static const char *model_name(const struct bench *b, int k)
{
	return b->o.models[k];
}
static const char *prio_name(const struct bench *b, int k)
{
	(void)b;
	return prio_names[k];
}

/* Jain's index over the tenants' service per unit of weight. */
static json_t *fairness(const struct bench *b, json_t *tenants)
{
	if (b->o.n_tenants < 2)
		return json_null();
	double sum = 0, sq = 0;
	json_t *weights = json_object();
	for (unsigned i = 0; i < b->o.n_tenants; i++) {
		const struct tenant *t = &b->o.tenants[i];
		json_t *g = json_object_get(tenants, t->name);
		double x = (double)json_integer_value(
		               json_object_get(g, "service_tokens")) /
		           t->weight;
		sum += x;
		sq += x * x;
		json_object_set_new(weights, t->name, json_real(t->weight));
	}
	double jain = sq > 0 ? sum * sum / (b->o.n_tenants * sq) : NAN;
	return json_pack("{s:o, s:s, s:o}", "jain_index", num(jain), "over",
	                 "tenant", "weights", weights);
}

static json_t *scraped_json(const struct scraped *tab, unsigned n)
{
	if (n == 0)
		return json_null();
	json_t *j = json_object();
	for (unsigned i = 0; i < n; i++)
		json_object_set_new(
		    j, tab[i].name,
		    json_pack("{s:f, s:f, s:f, s:f, s:I}", "min", tab[i].min,
		              "mean", tab[i].sum / tab[i].n, "max", tab[i].max,
		              "increase", tab[i].last - tab[i].first, "samples",
		              (json_int_t)tab[i].n));
	return j;
}

/* The cancellation scenario: did each left request's slot come free? */
static json_t *cancel_json(const struct run *r)
{
	uint64_t left = 0, freed = 0, running = 0, unknown = 0;
	struct bs_samples after = {0};
	for (size_t i = 0; i < r->n_recs; i++) {
		const struct record *rec = &r->recs[i];
		if (!rec->cancelled)
			continue;
		left++;
		freed += rec->slot_freed == 1;
		running += rec->slot_freed == 0;
		unknown += rec->slot_freed == -1;
		if (rec->slot_freed == 1)
			bs_add(&after, ms(rec->left_ns, rec->freed_ns));
	}
	json_t *j = json_pack(
	    "{s:I, s:I, s:I, s:I, s:o}", "left", (json_int_t)left, "slot_freed",
	    (json_int_t)freed, "still_running", (json_int_t)running, "unknown",
	    (json_int_t)unknown, "freed_after_ms", spread(&after));
	bs_free(&after);
	return j;
}

/*
 * Model swaps: each model's first answer (its cold start, on-demand
 * loading included) and the requests whose model differs from the one
 * sent just before them, against those that follow their own model.
 */
static json_t *swap_json(const struct bench *b, const struct run *r)
{
	json_t *cold = json_object();
	struct bs_samples switched = {0}, same = {0};
	bool seen[MAX_MODELS] = {0};
	int prev = -1;
	for (size_t i = 0; i < r->n_recs; i++) {
		const struct record *rec = &r->recs[i];
		if (rec->model < 0)
			continue;
		double ttft = rec->ok && rec->first_ns
		                  ? ms(rec->intended_ns, rec->first_ns)
		                  : NAN;
		if (!seen[rec->model]) {
			seen[rec->model] = true;
			json_object_set_new(cold, b->o.models[rec->model],
			                    num(ttft));
		} else if (!isnan(ttft) && !rec->warmup) {
			bs_add(rec->model != prev ? &switched : &same, ttft);
		}
		prev = rec->model;
	}
	json_t *j =
	    json_pack("{s:o, s:I, s:o, s:o}", "cold_ttft_ms", cold, "switches",
	              (json_int_t)switched.n, "switch_ttft_ms",
	              spread(&switched), "same_model_ttft_ms", spread(&same));
	bs_free(&switched);
	bs_free(&same);
	return j;
}

/* Failover: what the kill cost, from the requests out at that moment. */
static json_t *failover_json(const struct run *r)
{
	if (!r->killed)
		return json_pack("{s:b}", "killed", 0);
	uint64_t out = 0, failed = 0, ok_after = 0, failed_after = 0;
	for (size_t i = 0; i < r->n_recs; i++) {
		const struct record *rec = &r->recs[i];
		uint64_t end = rec->end_ns ? rec->end_ns : rec->left_ns;
		bool was_out = rec->sent_ns && rec->sent_ns <= r->killed_ns &&
		               (!end || end >= r->killed_ns);
		if (was_out) {
			out++;
			failed += !rec->ok;
		} else if (rec->sent_ns > r->killed_ns) {
			ok_after += rec->ok;
			failed_after += !rec->ok;
		}
	}
	double retries = NAN;
	for (unsigned i = 0; i < r->n_sluice_m; i++)
		if (!strcmp(r->sluice_m[i].name,
		            "sluice_upstream_retries_total"))
			retries = r->sluice_m[i].last - r->sluice_m[i].first;
	return json_pack(
	    "{s:b, s:f, s:I, s:I, s:I, s:I, s:o}", "killed", 1, "at_s",
	    ms(r->start_ns, r->killed_ns) / 1000, "in_flight", (json_int_t)out,
	    "lost", (json_int_t)failed, "completed_after", (json_int_t)ok_after,
	    "failed_after", (json_int_t)failed_after, "sluice_retries",
	    num(retries));
}

/*
 * Trust: sluice-bench's figures against llama-server's own timings in
 * each answer. TTFT minus prompt_ms is what the network, the HTTP layers
 * and any queue add to llama-server's prompt time; the tokens counted
 * must equal predicted_n exactly.
 */
static json_t *timings_json(const struct run *r)
{
	struct bs_samples gap = {0};
	uint64_t same = 0, differ = 0;
	for (size_t i = 0; i < r->n_recs; i++) {
		const struct record *rec = &r->recs[i];
		/* From the send: the bench's own lag and a refusal's wait
		 * are not llama-server's. */
		if (rec->warmup || !rec->ok || rec->cancelled ||
		    rec->retries > 0 || isnan(rec->llama_prompt_ms))
			continue;
		if (rec->first_ns)
			bs_add(&gap, ms(rec->sent_ns, rec->first_ns) -
			                 rec->llama_prompt_ms);
		if (!isnan(rec->llama_predicted_n)) {
			bool eq = rec->output_tokens ==
			          (uint32_t)rec->llama_predicted_n;
			same += eq;
			differ += !eq;
		}
	}
	json_t *j =
	    gap.n || same || differ
	        ? json_pack("{s:I, s:o, s:I, s:I}", "requests",
	                    (json_int_t)gap.n, "ttft_minus_prompt_ms",
	                    spread(&gap), "tokens_match", (json_int_t)same,
	                    "tokens_differ", (json_int_t)differ)
	        : json_null();
	bs_free(&gap);
	return j;
}

static double seconds_of(const struct bench *b, const struct run *r)
{
	uint64_t from = r->start_ns + (uint64_t)(b->o.warmup_s * 1e9);
	return r->end_ns > from ? ms(from, r->end_ns) / 1000 : 0;
}

double results_goodput_fraction(const struct bench *b, const struct run *r)
{
	uint64_t n = 0, good = 0;
	for (size_t i = 0; i < r->n_recs; i++)
		if (measured(&r->recs[i]) && !r->recs[i].cancelled) {
			n++;
			good += results_meets(b, &r->recs[i]);
		}
	return n ? (double)good / (double)n : NAN;
}

static json_t *slo_json(const struct slo *s)
{
	return json_pack(
	    "{s:o, s:o, s:o}", "ttft_ms",
	    s->ttft_ms ? json_real(s->ttft_ms) : json_null(), "tpot_ms",
	    s->tpot_ms ? json_real(s->tpot_ms) : json_null(), "e2el_ms",
	    s->e2el_ms ? json_real(s->e2el_ms) : json_null());
}

/* ---- SLO classes, refusals and the predictor ---- */

static json_t *predictor_json(struct figures *f)
{
	if (f->pred_error.n == 0)
		return json_null();
	return json_pack(
	    "{s:I, s:o, s:o, s:o}", "requests", (json_int_t)f->pred_error.n,
	    "median_error", num(bs_percentile(&f->pred_error, 50)), "p90_error",
	    num(bs_percentile(&f->pred_error, 90)), "median_signed_error",
	    num(bs_percentile(&f->pred_signed, 50)));
}

static double share_of(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : NAN;
}

/* One SLO class's figures: class k of --slo-mix, or (k < 0) every
 * request under --slo. */
static json_t *slo_class_json(const struct bench *b, const struct run *r, int k,
                              double seconds)
{
	struct figures f = {0};
	for (size_t i = 0; i < r->n_recs; i++)
		if (measured(&r->recs[i]) &&
		    (k < 0 || r->recs[i].slo_class == k))
			add(&f, b, &r->recs[i]);
	json_t *j = json_pack(
	    "{s:o, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "slo",
	    slo_json(options_slo_of(&b->o, k)), "share",
	    k >= 0 ? b->o.slo_classes[k].share : 1.0, "num_prompts",
	    (json_int_t)f.n, "served", (json_int_t)f.status_2xx, "shed",
	    (json_int_t)f.shed, "refused", (json_int_t)f.refused, "other",
	    (json_int_t)f.status_other, "left", (json_int_t)f.left, "admitted",
	    (json_int_t)f.admitted, "met", (json_int_t)f.good);
	json_object_set_new(j, "attainment",
	                    num(share_of(f.good, f.n - f.left)));
	json_object_set_new(j, "admitted_attainment",
	                    num(share_of(f.good, f.admitted)));
	json_object_set_new(j, "request_goodput",
	                    num(bs_rate(f.good, seconds)));
	json_object_set_new(j, "median_ttft_ms",
	                    num(bs_percentile(&f.ttft, 50)));
	json_object_set_new(j, "p99_ttft_ms", num(bs_percentile(&f.ttft, 99)));
	json_object_set_new(j, "median_predictor_error",
	                    num(bs_percentile(&f.pred_error, 50)));
	json_object_set_new(j, "p90_predictor_error",
	                    num(bs_percentile(&f.pred_error, 90)));
	figures_free(&f);
	return j;
}

/* Every class of --slo-mix, or "default" for --slo; null without SLOs. */
static json_t *slo_classes_json(const struct bench *b, const struct run *r,
                                double seconds)
{
	const struct options *o = &b->o;
	if (!options_have_slo(o))
		return json_null();
	json_t *j = json_object();
	if (o->n_slo_classes == 0)
		json_object_set_new(j, "default",
		                    slo_class_json(b, r, -1, seconds));
	for (unsigned k = 0; k < o->n_slo_classes; k++)
		json_object_set_new(j, o->slo_classes[k].name,
		                    slo_class_json(b, r, (int)k, seconds));
	return j;
}

/* A kind of refusal: its status, and its reason when it gave one. */
static void refusal_kind(const struct refusal *f, char *out, size_t len)
{
	snprintf(out, len, "%d%s%s", f->status, f->reason[0] ? " " : "",
	         f->reason);
}

/* The figures of n refusals. */
static json_t *refusal_figures(const struct refusal *f, size_t n)
{
	struct bs_samples lat = {0};
	uint64_t with = 0;
	for (size_t i = 0; i < n; i++) {
		bs_add(&lat, f[i].ms);
		with += f[i].retry_after;
	}
	json_t *j = json_pack("{s:I, s:I, s:o, s:o, s:o}", "count",
	                      (json_int_t)n, "retry_after", (json_int_t)with,
	                      "retry_after_share", num(share_of(with, n)),
	                      "median_ms", num(bs_percentile(&lat, 50)),
	                      "p99_ms", num(bs_percentile(&lat, 99)));
	bs_free(&lat);
	return j;
}

static int by_kind(const void *a, const void *b)
{
	const struct refusal *x = a, *y = b;
	if (x->status != y->status)
		return x->status < y->status ? -1 : 1;
	return strcmp(x->reason, y->reason);
}

/*
 * Every refusal of the run's measured requests, each attempt's: how long
 * it took (send to head) and whether it carried Retry-After, all and by
 * kind ("429", "429 slo_ttft", "503 slo_deadline"). Kinds are whatever
 * reasons the server gave: sorted, then taken run by run, whatever their
 * number.
 */
static json_t *refusals_json(const struct run *r)
{
	size_t n = r->n_refusals;
	if (n == 0)
		return json_null();
	json_t *j = refusal_figures(r->refusals, n);
	struct refusal *sorted = sl_xmalloc(n * sizeof(*sorted));
	memcpy(sorted, r->refusals, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), by_kind);
	json_t *by = json_object();
	for (size_t i = 0, k; i < n; i = k) {
		for (k = i + 1; k < n && !by_kind(&sorted[i], &sorted[k]); k++)
			;
		char kind[SLO_REASON_MAX + 16];
		refusal_kind(&sorted[i], kind, sizeof(kind));
		json_object_set_new(by, kind,
		                    refusal_figures(sorted + i, k - i));
	}
	free(sorted);
	json_object_set_new(j, "by_kind", by);
	return j;
}

/* The headline figures of the SLO objects, at the run's top level where
 * repetitions, the search and `compare` read them. */
static void put_slo_figures(json_t *j, struct figures *f, json_t *refusals)
{
	json_object_set_new(j, "shed", json_integer((json_int_t)f->shed));
	json_object_set_new(j, "admitted_attainment",
	                    num(share_of(f->good, f->admitted)));
	json_object_set_new(j, "median_predictor_error",
	                    num(bs_percentile(&f->pred_error, 50)));
	json_object_set_new(j, "p90_predictor_error",
	                    num(bs_percentile(&f->pred_error, 90)));
	json_t *med = json_object_get(refusals, "median_ms");
	json_t *p99 = json_object_get(refusals, "p99_ms");
	json_object_set_new(j, "median_refusal_ms",
	                    med ? json_incref(med) : json_null());
	json_object_set_new(j, "p99_refusal_ms",
	                    p99 ? json_incref(p99) : json_null());
}

/* The Markdown table's figures, under the names they always had. */
static void put_table(json_t *j, struct run *r, struct figures *f,
                      double seconds)
{
	json_object_set_new(j, "concurrency", json_integer(r->concurrency));
	json_object_set_new(j, "rate", json_real(r->rate));
	json_object_set_new(j, "requests", json_integer((json_int_t)f->n));
	json_object_set_new(j, "success",
	                    json_integer((json_int_t)f->completed));
	json_object_set_new(j, "fail", json_integer((json_int_t)f->failed));
	json_object_set_new(j, "avg_latency_ms", num(bs_mean(&f->e2el)));
	json_object_set_new(j, "p50_latency_ms",
	                    num(bs_percentile(&f->e2el, 50)));
	json_object_set_new(j, "p95_latency_ms",
	                    num(bs_percentile(&f->e2el, 95)));
	json_object_set_new(j, "p99_latency_ms",
	                    num(bs_percentile(&f->e2el, 99)));
	json_object_set_new(j, "req_per_s",
	                    num(bs_rate(f->completed, seconds)));
	json_object_set_new(j, "ttft_p50_ms", num(bs_percentile(&f->ttft, 50)));
	json_object_set_new(j, "ttft_p99_ms", num(bs_percentile(&f->ttft, 99)));
	json_object_set_new(j, "itl_p99_ms", num(bs_percentile(&r->itl, 99)));
	json_object_set_new(j, "output_tokens_per_s",
	                    num(bs_rate(f->output_tokens, seconds)));
	json_object_set_new(j, "avg_batch_size", num(r->avg_batch_size));
	json_object_set_new(j, "batches", num(r->batches));
	json_object_set_new(j, "elapsed_s", json_real(seconds));
}

/*
 * The gamma shape of the arrivals: 1 for Poisson; null for a closed loop
 * and for constant gaps, whose shape is infinite: JSON has no infinity,
 * jansson makes no number of it, and json_pack then makes no run object.
 */
static json_t *burstiness_json(const struct options *o, const struct run *r)
{
	if (r->rate <= 0 || o->arrivals == ARR_CONSTANT)
		return json_null();
	return json_real(o->arrivals == ARR_GAMMA ? o->burstiness : 1);
}

json_t *results_run(const struct bench *b, struct run *r)
{
	const struct options *o = &b->o;
	double seconds = seconds_of(b, r);
	struct figures f = {0};
	for (size_t i = 0; i < r->n_recs; i++)
		if (measured(&r->recs[i]))
			add(&f, b, &r->recs[i]);
	json_t *j = json_pack(
	    "{s:s, s:i, s:i, s:o, s:o, s:o, s:I, s:I, s:I, s:f, s:I, s:I}",
	    "label", o->label, "level", (int)r->level, "repeat", (int)r->repeat,
	    "max_concurrency",
	    r->concurrency ? json_integer(r->concurrency) : json_null(),
	    "request_rate", r->rate > 0 ? json_real(r->rate) : json_null(),
	    "burstiness", burstiness_json(o, r), "num_prompts", (json_int_t)f.n,
	    "completed", (json_int_t)f.completed, "failed",
	    (json_int_t)f.failed, "duration", seconds, "total_input_tokens",
	    (json_int_t)f.input_tokens, "total_output_tokens",
	    (json_int_t)f.output_tokens);
	json_object_set_new(j, "request_throughput",
	                    num(bs_rate(f.completed, seconds)));
	json_object_set_new(j, "request_goodput",
	                    num(bs_rate(f.good, seconds)));
	json_object_set_new(j, "output_throughput",
	                    num(bs_rate(f.output_tokens, seconds)));
	json_object_set_new(
	    j, "total_token_throughput",
	    num(bs_rate(f.input_tokens + f.output_tokens, seconds)));
	put_latency(j, "ttft", &f.ttft);
	put_latency(j, "tpot", &f.tpot);
	put_latency(j, "itl", &r->itl);
	put_latency(j, "e2el", &f.e2el);
	json_object_set_new(j, "slo", slo_json(&o->slo));
	/* Of the requests that wanted an answer: those left on purpose
	 * cannot meet an SLO and are no server's failing. */
	uint64_t wanted = f.n - f.cancelled;
	json_object_set_new(
	    j, "goodput_fraction",
	    num(wanted ? (double)f.good / (double)wanted : NAN));
	json_object_set_new(j, "cancelled",
	                    json_integer((json_int_t)f.cancelled));
	json_object_set_new(j, "dropped", json_integer((json_int_t)r->dropped));
	json_object_set_new(j, "mean_schedule_lag_ms", num(bs_mean(&f.lag)));
	json_object_set_new(j, "p99_schedule_lag_ms",
	                    num(bs_percentile(&f.lag, 99)));
	json_t *outcomes = json_object();
	json_object_set_new(outcomes, "all", outcome_json(&f));
	json_t *groups = json_object();
	json_object_set_new(
	    groups, "priority",
	    groups_by(b, r, prio_key, N_PRIOS, prio_name, seconds, outcomes));
	if (o->n_tenants)
		json_object_set_new(groups, "tenant",
		                    groups_by(b, r, tenant_key,
		                              (int)o->n_tenants, tenant_name,
		                              seconds, NULL));
	if (o->n_models)
		json_object_set_new(groups, "model",
		                    groups_by(b, r, model_key, (int)o->n_models,
		                              model_name, seconds, NULL));
	json_object_set_new(j, "fairness",
	                    fairness(b, json_object_get(groups, "tenant")));
	json_object_set_new(j, "groups", groups);
	json_object_set_new(j, "outcomes", outcomes);
	json_object_set_new(j, "slo_classes", slo_classes_json(b, r, seconds));
	json_t *refusals = refusals_json(r);
	put_slo_figures(j, &f, refusals);
	json_object_set_new(j, "refusals", refusals);
	json_object_set_new(j, "predictor", predictor_json(&f));
	json_object_set_new(j, "server_timing",
	                    f.queue.n || f.upstream.n
	                        ? json_pack("{s:o, s:o, s:o}", "queue",
	                                    spread(&f.queue), "upstream",
	                                    spread(&f.upstream), "ttft",
	                                    spread(&f.server_ttft))
	                        : json_null());
	json_object_set_new(j, "scrape",
	                    json_pack("{s:o, s:o}", "sluice",
	                              scraped_json(r->sluice_m, r->n_sluice_m),
	                              "llama",
	                              scraped_json(r->llama_m, r->n_llama_m)));
	json_object_set_new(j, "cache",
	                    json_pack("{s:I, s:I}", "cached_prompt_tokens",
	                              (json_int_t)f.cached_tokens,
	                              "prompt_tokens",
	                              (json_int_t)f.input_tokens));
	json_object_set_new(j, "llama_timings", timings_json(r));
	json_t *scenarios = json_object();
	if (o->cancel_share > 0)
		json_object_set_new(scenarios, "cancel", cancel_json(r));
	if (o->n_models > 1)
		json_object_set_new(scenarios, "swap", swap_json(b, r));
	if (o->kill_at_s > 0)
		json_object_set_new(scenarios, "failover", failover_json(r));
	json_object_set_new(j, "scenarios", scenarios);
	put_table(j, r, &f, seconds);
	figures_free(&f);
	return j;
}

/* Mean, spread and CV of every numeric run-level field over one level's
 * repeats. */
static json_t *level_repeats(const struct bench *b, unsigned level)
{
	json_t *metrics = json_object();
	const struct run *first = NULL;
	for (unsigned i = 0; i < b->n_runs && !first; i++)
		if (b->runs[i].level == level)
			first = &b->runs[i];
	const char *key;
	json_t *v;
	json_object_foreach(first ? first->doc : NULL, key, v)
	{
		if (!json_is_number(v) || !strcmp(key, "level") ||
		    !strcmp(key, "repeat"))
			continue;
		struct bs_samples s = {0};
		for (unsigned i = 0; i < b->n_runs; i++) {
			json_t *x = json_object_get(b->runs[i].doc, key);
			if (json_is_number(x) && b->runs[i].level == level)
				bs_add(&s, json_number_value(x));
		}
		double mean = bs_mean(&s), sd = stddev(&s);
		json_object_set_new(
		    metrics, key,
		    json_pack("{s:o, s:o, s:o, s:I}", "mean", num(mean), "std",
		              num(sd), "cv",
		              num(mean != 0 ? sd / fabs(mean) : NAN), "n",
		              (json_int_t)s.n));
		bs_free(&s);
	}
	return metrics;
}

json_t *results_repeats(const struct bench *b)
{
	unsigned levels = 0;
	for (unsigned i = 0; i < b->n_runs; i++)
		levels = SL_MAX(levels, b->runs[i].level + 1);
	json_t *all = json_array();
	for (unsigned l = 0; l < levels; l++)
		json_array_append_new(all, json_pack("{s:i, s:o}", "level",
		                                     (int)l, "metrics",
		                                     level_repeats(b, l)));
	return json_pack("{s:o, s:o}", "metrics", level_repeats(b, 0), "levels",
	                 all);
}

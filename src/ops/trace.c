/*
 * trace.c: the tracer: requests' traces begun and ended, and their spans
 * exported in batches (see trace.h).
 *
 * The ring holds records (otlp.h), each one request's one to three spans;
 * it is counted in spans, as OTEL_BSP_MAX_QUEUE_SIZE counts them, and
 * has room for as many records as that (one span each, at worst). An
 * export encodes its batch at once and frees the records it took, so the
 * ring never waits on the network: only the encoded body travels, one at
 * a time.
 */
#include "sluice/ops/trace.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/config/otel_syntax.h"
#include "sluice/sched/sched.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The service.name spans carry when neither option names one. */
#define SL_TRACE_SERVICE_DEFAULT "sluice"

struct sl_tracer {
	uv_loop_t *loop;
	struct sl_curl *curl;
	uv_timer_t timer; /* the schedule; at shutdown, the deadline */

	/* Settings, from the options. */
	char *url, *url_shown;
	enum sl_otel_protocol protocol;
	struct curl_slist *headers;
	enum sl_otel_sampler sampler;
	double ratio;
	unsigned schedule_ms, max_spans, max_batch;
	long timeout_ms; /* one export */
	struct sl_otel_pair *attributes;
	unsigned n_attributes;
	struct sl_otlp_resource resource;

	struct sl_trace_rng rng;
	/* Unix time less the monotonic clock, in ns: spans' times are Unix. */
	int64_t wall_offset_ns;

	/* Records waiting: `count` from `head`, `spans` spans in all. */
	struct sl_trace_record *ring;
	unsigned cap, head, count, spans;
	struct sl_trace_record **batch; /* max_batch pointers, for encoding */

	/* The export in flight. */
	bool exporting;
	struct sl_transfer transfer;
	char *body;
	unsigned body_spans;
	char error[CURL_ERROR_SIZE];
	bool failing; /* the last export failed: said once, until one works */

	/* Shutdown. */
	bool draining;
	uint64_t deadline_ms;
	void (*on_drained)(void *);
	void *drained_data;

	uint64_t exported, dropped[SL_TRACE_DROP_REASONS];
};

static const char *const drop_reasons[SL_TRACE_DROP_REASONS] = {
    [SL_TRACE_DROP_QUEUE_FULL] = "queue_full",
    [SL_TRACE_DROP_EXPORT_FAILED] = "export_failed",
    [SL_TRACE_DROP_SHUTDOWN] = "shutdown",
};

static void note_wall_offset(struct sl_tracer *t)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t wall = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	t->wall_offset_ns = wall - (int64_t)sl_now_ns();
}

static uint64_t wall_ns(const struct sl_tracer *t, uint64_t mono_ns)
{
	return mono_ns ? (uint64_t)((int64_t)mono_ns + t->wall_offset_ns) : 0;
}

/* ---- start ---- */

/* The header lines every export carries. Returns 0 or SL_EINVAL. */
static int make_headers(struct sl_tracer *t, const struct sl_config *cfg,
                        char *err, size_t size)
{
	t->headers = curl_slist_append(
	    NULL, t->protocol == SL_OTEL_HTTP_JSON
	              ? "Content-Type: application/json"
	              : "Content-Type: application/x-protobuf");
	/* libcurl's own "Expect: 100-continue" would cost a round trip. */
	t->headers = curl_slist_append(t->headers, "Expect:");
	struct sl_otel_pair *pairs;
	unsigned n;
	char why[SL_OTEL_KEY_MAX + 128];
	if (sl_otel_pairs_parse(cfg->otel_headers, true, &pairs, &n, why,
	                        sizeof(why)) != 0) {
		snprintf(err, size, "--otel-exporter-otlp-headers: %s", why);
		return SL_EINVAL;
	}
	for (unsigned i = 0; i < n; i++) {
		char *line =
		    sl_xasprintf("%s: %s", pairs[i].key, pairs[i].value);
		t->headers = curl_slist_append(t->headers, line);
		explicit_bzero(line, strlen(line));
		free(line);
	}
	sl_otel_pairs_free(pairs, n);
	return 0;
}

/* service.name: the option's, else the resource's, else sluice. */
static int make_resource(struct sl_tracer *t, const struct sl_config *cfg,
                         char *err, size_t size)
{
	char why[SL_OTEL_KEY_MAX + 128];
	struct sl_otel_pair *pairs;
	unsigned n;
	if (sl_otel_pairs_parse(cfg->otel_resource_attributes, false, &pairs,
	                        &n, why, sizeof(why)) != 0) {
		snprintf(err, size, "--otel-resource-attributes: %s", why);
		return SL_EINVAL;
	}
	const char *name = SL_TRACE_SERVICE_DEFAULT;
	for (unsigned i = 0; i < n; i++)
		if (strcmp(pairs[i].key, "service.name") == 0)
			name = pairs[i].value;
	if (cfg->otel_service_name[0])
		name = cfg->otel_service_name;
	t->resource.service_name = sl_xstrdup(name);
	t->attributes = pairs;
	t->n_attributes = n;
	t->resource.attributes = pairs;
	t->resource.n_attributes = n;
	return 0;
}

int sl_tracer_new(uv_loop_t *loop, struct sl_curl *curl,
                  const struct sl_config *cfg, struct sl_tracer **out,
                  char *err, size_t size)
{
	*out = NULL;
	char *url =
	    sl_otel_traces_url(cfg->otel_endpoint, cfg->otel_traces_endpoint);
	if (!url || cfg->otel_sdk_disabled) {
		free(url);
		return 0;
	}
	struct sl_tracer *t = sl_xcalloc(1, sizeof(*t));
	t->loop = loop;
	t->curl = curl;
	t->url = url;
	t->url_shown = sl_url_shown(url);
	t->protocol = (enum sl_otel_protocol)cfg->otel_protocol;
	t->sampler = (enum sl_otel_sampler)cfg->otel_sampler;
	t->ratio = cfg->otel_sampler_arg;
	t->schedule_ms = cfg->otel_bsp_schedule_delay_ms;
	t->max_spans = cfg->otel_bsp_max_queue_size;
	t->max_batch = cfg->otel_bsp_max_export_batch_size;
	t->timeout_ms =
	    (long)SL_MIN(cfg->otel_timeout_ms, cfg->otel_bsp_export_timeout_ms);
	if (make_headers(t, cfg, err, size) != 0 ||
	    make_resource(t, cfg, err, size) != 0) {
		curl_slist_free_all(t->headers);
		free(t->url);
		free(t->url_shown);
		free(t);
		return SL_EINVAL;
	}
	t->cap = t->max_spans;
	t->ring = sl_xcalloc(t->cap, sizeof(*t->ring));
	t->batch = sl_xcalloc(t->max_batch, sizeof(*t->batch));
	sl_trace_rng_seed(&t->rng);
	note_wall_offset(t);
	uv_timer_init(loop, &t->timer);
	t->timer.data = t;
	*out = t;
	return 0;
}

const char *sl_tracer_url_shown(const struct sl_tracer *t)
{
	return t->url_shown;
}

/* ---- each request ---- */

void sl_trace_begin(struct sl_tracer *t, struct sl_http_request *req,
                    const char *route)
{
	if (!t || req->info.trace)
		return;
	struct sl_trace_span *sp = sl_xcalloc(1, sizeof(*sp));
	struct sl_trace_parent parent;
	bool has_parent = sl_traceparent_parse(
	                      sl_http_header(req, "traceparent"), &parent) == 0;
	if (has_parent) {
		memcpy(sp->trace_id, parent.trace_id, SL_TRACE_ID_BYTES);
		memcpy(sp->parent_id, parent.span_id, SL_SPAN_ID_BYTES);
	} else {
		sl_trace_rng_id(&t->rng, sp->trace_id, SL_TRACE_ID_BYTES);
	}
	sl_trace_rng_id(&t->rng, sp->span_id, SL_SPAN_ID_BYTES);
	sl_trace_rng_id(&t->rng, sp->upstream_id, SL_SPAN_ID_BYTES);
	sl_trace_rng_id(&t->rng, sp->queue_id, SL_SPAN_ID_BYTES);
	sp->has_parent = has_parent;
	sp->sampled = sl_trace_sampled(t->sampler, t->ratio, sp->trace_id,
	                               has_parent ? &parent : NULL);
	sp->route = route;
	sp->max_tokens = -1;
	req->info.trace = sp;
}

bool sl_trace_traceparent(const struct sl_http_request *req, char *out)
{
	const struct sl_trace_span *sp = req->info.trace;
	if (!sp)
		return false;
	sl_traceparent_format(out, sp->trace_id, sp->upstream_id,
	                      sp->sampled ? SL_TRACE_FLAG_SAMPLED : 0);
	return true;
}

const char *sl_trace_tracestate(const struct sl_http_request *req)
{
	const struct sl_trace_span *sp = req->info.trace;
	if (!sp || !sp->has_parent)
		return NULL;
	const char *state = sl_http_header(req, "tracestate");
	if (!state || !state[0] || strlen(state) > SL_TRACESTATE_MAX)
		return NULL;
	return state;
}

static void export_now(struct sl_tracer *t);

static void on_timer(uv_timer_t *h)
{
	struct sl_tracer *t = h->data;
	export_now(t);
}

/* The next export: after the schedule's delay, or at once. */
static void arm(struct sl_tracer *t, uint64_t in_ms)
{
	uv_timer_start(&t->timer, on_timer, in_ms, t->schedule_ms);
	/* Waiting spans alone must not keep the loop running. */
	uv_unref((uv_handle_t *)&t->timer);
}

void sl_trace_finish(struct sl_tracer *t, struct sl_http_request *req,
                     const char *outcome)
{
	const struct sl_trace_span *sp = req->info.trace;
	if (!t || !sp || !sp->sampled)
		return;
	const struct sl_request_info *in = &req->info;
	unsigned spans = 1 + (sp->queued_ns != 0) + (sp->dispatched_ns != 0);
	if (t->spans + spans > t->max_spans || t->count == t->cap) {
		t->dropped[SL_TRACE_DROP_QUEUE_FULL] += spans;
		return;
	}
	struct sl_trace_record *r = &t->ring[(t->head + t->count) % t->cap];
	memset(r, 0, sizeof(*r));
	r->span = *sp;
	uint64_t now = sl_now_ns();
	/* A plain answer's first token is known as a time to it only. */
	if (!r->span.first_token_ns && in->ttft_ms >= 0)
		r->span.first_token_ns =
		    req->start_ns + (uint64_t)in->ttft_ms * 1000000u;
	r->span.queued_ns = wall_ns(t, r->span.queued_ns);
	r->span.dispatched_ns = wall_ns(t, r->span.dispatched_ns);
	r->span.first_token_ns = wall_ns(t, r->span.first_token_ns);
	r->span.upstream_end_ns = wall_ns(t, r->span.upstream_end_ns);
	r->start_ns = wall_ns(t, req->start_ns);
	r->end_ns = wall_ns(t, now);
	const char *state = sl_trace_tracestate(req);
	r->trace_state = state ? sl_xstrdup(state) : NULL;
	r->method = req->path ? llhttp_method_name(req->method) : "_OTHER";
	r->status = req->status ? req->status : 499;
	struct sl_join up = SL_JOIN(r->upstream);
	sl_join_str(&up, in->upstream);
	bool counted = sp->operation && sp->dispatched_ns;
	r->input_tokens = counted ? (int64_t)in->prompt_tokens : -1;
	r->output_tokens = counted ? (int64_t)in->tokens : -1;
	r->priority = in->has_priority ? sl_priority_class(in->priority) : NULL;
	r->queue_ms = in->queue_ms;
	r->batch_size = in->batch_size;
	r->tenant = in->key;
	r->outcome = outcome;
	r->reason = in->reject_reason;
	struct sl_join id = SL_JOIN(r->request_id);
	sl_join_str(&id, req->id);
	t->count++;
	t->spans += spans;
	/* A full batch goes at the loop's next turn, not in this callback. */
	if (t->spans >= t->max_batch && !t->exporting && !t->draining)
		arm(t, 0);
	else if (!t->draining && !uv_is_active((uv_handle_t *)&t->timer))
		arm(t, t->schedule_ms);
}

/* ---- exports ---- */

/* The collector's answer is not read: only its status counts. */
static size_t discard(char *data, size_t size, size_t n, void *arg)
{
	(void)data;
	(void)arg;
	return size * n;
}

static void drained(struct sl_tracer *t);

static void on_export_done(struct sl_transfer *tr, CURLcode result)
{
	struct sl_tracer *t = tr->data;
	long status = 0;
	if (result == CURLE_OK)
		curl_easy_getinfo(tr->easy, CURLINFO_RESPONSE_CODE, &status);
	sl_curl_easy_done(t->curl, tr->easy);
	tr->easy = NULL;
	free(t->body);
	t->body = NULL;
	t->exporting = false;
	if (status >= 200 && status < 300) {
		t->exported += t->body_spans;
		if (t->failing)
			sl_info("traces: %s accepts spans again", t->url_shown);
		t->failing = false;
	} else {
		t->dropped[SL_TRACE_DROP_EXPORT_FAILED] += t->body_spans;
		if (!t->failing) {
			char why[CURL_ERROR_SIZE + 32];
			if (result != CURLE_OK)
				snprintf(why, sizeof(why), "%s",
				         t->error[0]
				             ? t->error
				             : curl_easy_strerror(result));
			else
				snprintf(why, sizeof(why), "HTTP %ld", status);
			sl_warn("traces: export to %s failed (%s): its %u "
			        "spans are dropped, as are those of the next "
			        "exports that fail "
			        "(sluice_trace_spans_dropped_total)",
			        t->url_shown, why, t->body_spans);
		}
		t->failing = true;
	}
	t->body_spans = 0;
	if (t->draining) {
		if (t->count > 0 && uv_now(t->loop) < t->deadline_ms)
			export_now(t);
		else
			drained(t);
		return;
	}
	/* More than a batch came meanwhile: on with it at once. */
	if (t->spans >= t->max_batch)
		arm(t, 0);
}

/* The records the next export takes, at most max_batch spans. */
static unsigned take_batch(struct sl_tracer *t, unsigned *spans)
{
	unsigned n = 0;
	*spans = 0;
	while (n < t->count) {
		struct sl_trace_record *r = &t->ring[(t->head + n) % t->cap];
		unsigned k = sl_trace_record_spans(r);
		if (n > 0 && *spans + k > t->max_batch)
			break;
		t->batch[n++] = r;
		*spans += k;
		if (*spans >= t->max_batch)
			break;
	}
	return n;
}

static void export_now(struct sl_tracer *t)
{
	if (t->exporting || t->count == 0)
		return;
	note_wall_offset(t);
	unsigned spans;
	unsigned n = take_batch(t, &spans);
	size_t len;
	sl_otlp_encode(t->protocol, &t->resource, t->batch, n, &t->body, &len);
	for (unsigned i = 0; i < n; i++) {
		free(t->batch[i]->trace_state);
		t->batch[i]->trace_state = NULL;
	}
	t->head = (t->head + n) % t->cap;
	t->count -= n;
	t->spans -= spans;
	t->body_spans = spans;

	CURL *e = sl_curl_easy(t->curl);
	long timeout = t->timeout_ms;
	if (t->draining) {
		uint64_t now = uv_now(t->loop);
		uint64_t left = t->deadline_ms > now ? t->deadline_ms - now : 1;
		timeout = (long)SL_MIN((uint64_t)timeout, left);
	}
	t->error[0] = '\0';
	t->transfer = (struct sl_transfer){
	    .easy = e, .on_done = on_export_done, .data = t};
	if (e) {
		curl_easy_setopt(e, CURLOPT_URL, t->url);
		curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
		/* As upstreams: no http_proxy meant for the world. */
		curl_easy_setopt(e, CURLOPT_PROXY, "");
		curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
		                 (curl_off_t)len);
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
		curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
	}
	t->exporting = true;
	if (!e || sl_curl_start(t->curl, &t->transfer) != 0) {
		snprintf(t->error, sizeof(t->error),
		         "libcurl could not start the export");
		/* Ends as a failed export would, but from the loop. */
		t->exporting = false;
		sl_curl_easy_done(t->curl, e);
		t->transfer.easy = NULL;
		free(t->body);
		t->body = NULL;
		t->dropped[SL_TRACE_DROP_EXPORT_FAILED] += spans;
		t->body_spans = 0;
	}
}

/* ---- shutdown ---- */

static void drop_waiting(struct sl_tracer *t)
{
	while (t->count > 0) {
		struct sl_trace_record *r = &t->ring[t->head];
		free(r->trace_state);
		r->trace_state = NULL;
		t->head = (t->head + 1) % t->cap;
		t->count--;
	}
	t->dropped[SL_TRACE_DROP_SHUTDOWN] += t->spans;
	t->spans = 0;
}

static void on_drain_timer(uv_timer_t *h);

/* The drain is over: what is left is dropped, and the owner told. */
static void drained(struct sl_tracer *t)
{
	drop_waiting(t);
	uv_timer_stop(&t->timer);
	void (*done)(void *) = t->on_drained;
	t->on_drained = NULL;
	if (done)
		done(t->drained_data);
}

static void on_drain_timer(uv_timer_t *h)
{
	struct sl_tracer *t = h->data;
	if (t->exporting) {
		/* The deadline came first: the export is given up. */
		sl_curl_abort(t->curl, &t->transfer);
		sl_curl_easy_done(t->curl, t->transfer.easy);
		t->transfer.easy = NULL;
		free(t->body);
		t->body = NULL;
		t->exporting = false;
		t->dropped[SL_TRACE_DROP_SHUTDOWN] += t->body_spans;
		t->body_spans = 0;
	}
	drained(t);
}

void sl_tracer_drain(struct sl_tracer *t, uint64_t deadline_ms,
                     void (*done)(void *), void *data)
{
	t->draining = true;
	t->deadline_ms = deadline_ms;
	t->on_drained = done;
	t->drained_data = data;
	uint64_t now = uv_now(t->loop);
	uint64_t left = deadline_ms > now ? deadline_ms - now : 0;
	/* At the deadline, or now when nothing waits: from the loop. */
	bool idle = !t->exporting && t->count == 0;
	uv_timer_start(&t->timer, on_drain_timer, idle ? 0 : left, 0);
	uv_ref((uv_handle_t *)&t->timer);
	if (left > 0)
		export_now(t);
}

static void on_closed(uv_handle_t *h)
{
	struct sl_tracer *t = h->data;
	free(t->ring);
	free(t->batch);
	curl_slist_free_all(t->headers);
	sl_otel_pairs_free(t->attributes, t->n_attributes);
	free((char *)t->resource.service_name);
	free(t->url);
	free(t->url_shown);
	free(t);
}

void sl_tracer_close(struct sl_tracer *t)
{
	if (!t)
		return;
	if (t->exporting) {
		sl_curl_abort(t->curl, &t->transfer);
		sl_curl_easy_done(t->curl, t->transfer.easy);
		free(t->body);
		t->exporting = false;
	}
	drop_waiting(t);
	uv_close((uv_handle_t *)&t->timer, on_closed);
}

/* ---- /metrics ---- */

void sl_trace_write_metrics(const struct sl_tracer *t, struct sl_text *out)
{
	if (!t)
		return;
	sl_expose_family(out, "sluice_trace_spans_exported_total", "counter",
	                 "Spans the collector accepted (--otel-exporter-otlp-"
	                 "endpoint).");
	sl_text_printf(out, "sluice_trace_spans_exported_total %llu\n",
	               (unsigned long long)t->exported);
	sl_expose_family(out, "sluice_trace_spans_dropped_total", "counter",
	                 "Spans never exported, by reason.");
	for (int i = 0; i < SL_TRACE_DROP_REASONS; i++)
		sl_text_printf(
		    out,
		    "sluice_trace_spans_dropped_total{reason=\"%s\"} "
		    "%llu\n",
		    drop_reasons[i], (unsigned long long)t->dropped[i]);
	sl_expose_family(out, "sluice_trace_spans_queued", "gauge",
	                 "Spans waiting for an export.");
	sl_text_printf(out, "sluice_trace_spans_queued %u\n", t->spans);
}

/* status.c: the status page and its document (see status.h). */
#include "sluice/ops/status.h"

#include "sluice/base/common.h"
#include "sluice/sched/sched.h"
#include "sluice/tenants/keys.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The page and its header, written by status_embed.py at build time. */
#include "status_page.h"

/* Paths whose requests the last requests leave out (status.h). */
static const char *const unlisted[] = {
    "/health",   "/v1/health", "/ready",       "/metrics",
    "/v1/usage", "/status",    "/status.json",
};

/* Priority classes as the page shows them, most urgent first. */
static const char *const class_names[SL_SCHED_CLASSES] = {"urgent", "normal",
                                                          "batch"};

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Copies s (NULL: "") into a fixed field, cut to fit. */
static void copy_field(char *out, size_t size, const char *s)
{
	struct sl_join j = {.p = out, .cap = size};
	out[0] = '\0';
	if (s)
		sl_join_mem(&j, s, strnlen(s, size - 1));
}

/* ---- the history ---- */

/* Every priority class's time to first token, merged. */
static void ttft_now(const struct sl_stats *s, struct sl_histogram *out)
{
	sl_hist_init(out, s->ttft[0].min_exp);
	for (int c = 0; c < SL_CLASS_COUNT; c++)
		sl_hist_merge(out, &s->ttft[c]);
}

/* a less b, bucket by bucket: what b's owner recorded since. */
static void hist_since(struct sl_histogram *a, const struct sl_histogram *b)
{
	for (unsigned i = 0; i < SL_HIST_BUCKETS; i++)
		a->buckets[i] -= b->buckets[i];
	a->below -= b->below;
	a->above -= b->above;
	a->count -= b->count;
	a->sum -= b->sum;
}

void sl_status_sample(struct sl_status *st)
{
	const struct sl_exposition *ex = st->ex;
	uint64_t now = uv_now(ex->loop);
	struct sl_status_sample *p =
	    &st->samples[st->taken % SL_STATUS_SAMPLES];
	st->taken++;
	memset(p, 0, sizeof(*p));
	p->t_ms = now - st->start_ms;
	p->requests = st->since_requests;
	p->failed = st->since_failed;
	st->since_requests = st->since_failed = 0;
	p->tokens = (uint32_t)(ex->stats->generated_tokens - st->last_tokens);
	st->last_tokens = ex->stats->generated_tokens;
	p->queued = sl_registry_queue_depth(ex->registry);
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = ex->upstreams[i];
		if (!u)
			continue;
		p->busy += u->inflight;
		p->slots += u->total_slots;
	}
	struct sl_histogram now_ttft;
	ttft_now(ex->stats, &now_ttft);
	struct sl_histogram since = now_ttft;
	hist_since(&since, &st->last_ttft);
	st->last_ttft = now_ttft;
	p->ttft_p50_ms = p->ttft_p99_ms = -1;
	if (since.count > 0) {
		p->ttft_p50_ms = (float)(sl_hist_quantile(&since, 0.50) * 1000);
		p->ttft_p99_ms = (float)(sl_hist_quantile(&since, 0.99) * 1000);
	}
}

static void on_sample(uv_timer_t *t)
{
	sl_status_sample(t->data);
}

int sl_status_start(struct sl_status *st, struct sl_exposition *ex,
                    uint64_t start_ms)
{
	memset(st, 0, sizeof(*st));
	st->ex = ex;
	st->start_ms = start_ms;
	st->last_tokens = ex->stats->generated_tokens;
	ttft_now(ex->stats, &st->last_ttft);
	int rc = uv_timer_init(ex->loop, &st->timer);
	if (rc < 0)
		return rc;
	st->timer.data = st;
	rc = uv_timer_start(&st->timer, on_sample, SL_STATUS_SAMPLE_MS,
	                    SL_STATUS_SAMPLE_MS);
	/* A sample never keeps sluice running: only what it serves does. */
	uv_unref((uv_handle_t *)&st->timer);
	return rc;
}

void sl_status_close(struct sl_status *st)
{
	if (st->ex && !uv_is_closing((uv_handle_t *)&st->timer))
		uv_close((uv_handle_t *)&st->timer, NULL);
}

/* ---- the last requests ---- */

static bool is_listed(const char *path)
{
	if (!path)
		return true; /* refused while being read: the client's to see */
	for (size_t i = 0; i < SL_ARRAY_SIZE(unlisted); i++)
		if (strcmp(path, unlisted[i]) == 0)
			return false;
	return true;
}

void sl_status_record(struct sl_status *st, const struct sl_http_request *req,
                      const char *outcome, double seconds)
{
	if (!is_listed(req->path))
		return;
	const struct sl_request_info *in = &req->info;
	struct sl_status_request *r =
	    &st->recent[st->listed % SL_STATUS_RECENT];
	st->listed++;
	r->seq = st->listed;
	r->at_ms = wall_ms();
	r->status = req->status ? req->status : 499;
	r->queue_ms = in->queue_ms;
	r->ttft_ms = in->ttft_ms;
	r->total_ms = (int64_t)(seconds * 1000);
	r->tokens = in->tokens;
	copy_field(r->method, sizeof(r->method),
	           req->path ? llhttp_method_name(req->method) : NULL);
	copy_field(r->path, sizeof(r->path), req->path);
	copy_field(r->model, sizeof(r->model), in->model);
	copy_field(r->key, sizeof(r->key), in->key);
	copy_field(r->priority, sizeof(r->priority),
	           in->has_priority ? sl_priority_class(in->priority) : NULL);
	copy_field(r->outcome, sizeof(r->outcome), outcome);
	copy_field(r->reason, sizeof(r->reason), in->reject_reason);
	copy_field(r->upstream, sizeof(r->upstream), in->upstream);
	st->since_requests++;
	if (outcome && (strcmp(outcome, "failed") == 0 ||
	                strcmp(outcome, "rejected") == 0))
		st->since_failed++;
}

/*
 * Generated tokens a second after the first: (tokens - 1) over the time
 * from the first token to the end, the inverse of the time per output
 * token; null where there is no such time.
 */
static json_t *tokens_per_s(const struct sl_status_request *r)
{
	if (r->tokens < 2 || r->ttft_ms < 0 || r->total_ms <= r->ttft_ms)
		return json_null();
	return json_real((double)(r->tokens - 1) * 1000.0 /
	                 (double)(r->total_ms - r->ttft_ms));
}

static json_t *ms_or_null(int64_t ms)
{
	return ms >= 0 ? json_integer(ms) : json_null();
}

static json_t *recent_json(const struct sl_status *st)
{
	json_t *a = json_array();
	uint64_t n = SL_MIN(st->listed, (uint64_t)SL_STATUS_RECENT);
	/* Newest first, as a person reads a log upside down. */
	for (uint64_t i = 0; i < n; i++) {
		const struct sl_status_request *r =
		    &st->recent[(st->listed - 1 - i) % SL_STATUS_RECENT];
		json_array_append_new(
		    a,
		    json_pack("{s:I, s:I, s:s, s:s, s:s, s:s, s:s, s:i, s:s, "
		              "s:s, s:o, s:o, s:o, s:I, s:o, s:s}",
		              "seq", (json_int_t)r->seq, "at_ms",
		              (json_int_t)r->at_ms, "method", r->method, "path",
		              r->path, "model", r->model, "key", r->key,
		              "priority", r->priority, "status", r->status,
		              "outcome", r->outcome, "reason", r->reason,
		              "queue_ms", ms_or_null(r->queue_ms), "ttft_ms",
		              ms_or_null(r->ttft_ms), "total_ms",
		              ms_or_null(r->total_ms), "tokens",
		              (json_int_t)r->tokens, "tokens_per_s",
		              tokens_per_s(r), "upstream", r->upstream));
	}
	return a;
}

/* ---- the rest of the document ---- */

static json_t *quantile_or_null(float ms)
{
	return ms >= 0 ? json_real(ms) : json_null();
}

/* The samples, oldest first, as one array per field (compact to send). */
static json_t *history_json(const struct sl_status *st)
{
	json_t *t = json_array(), *req = json_array(), *failed = json_array(),
	       *tokens = json_array(), *queued = json_array(),
	       *busy = json_array(), *slots = json_array(), *p50 = json_array(),
	       *p99 = json_array();
	uint64_t n = SL_MIN(st->taken, (uint64_t)SL_STATUS_SAMPLES);
	for (uint64_t i = st->taken - n; i < st->taken; i++) {
		const struct sl_status_sample *p =
		    &st->samples[i % SL_STATUS_SAMPLES];
		json_array_append_new(t, json_integer((json_int_t)p->t_ms));
		json_array_append_new(req, json_integer(p->requests));
		json_array_append_new(failed, json_integer(p->failed));
		json_array_append_new(tokens, json_integer(p->tokens));
		json_array_append_new(queued, json_integer(p->queued));
		json_array_append_new(busy, json_integer(p->busy));
		json_array_append_new(slots, json_integer(p->slots));
		json_array_append_new(p50, quantile_or_null(p->ttft_p50_ms));
		json_array_append_new(p99, quantile_or_null(p->ttft_p99_ms));
	}
	return json_pack("{s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
	                 "s:o}",
	                 "sample_ms", SL_STATUS_SAMPLE_MS, "samples",
	                 SL_STATUS_SAMPLES, "t_ms", t, "requests", req,
	                 "failed", failed, "tokens", tokens, "queued", queued,
	                 "busy", busy, "slots", slots, "ttft_p50_ms", p50,
	                 "ttft_p99_ms", p99);
}

/* Each model's queue by priority, its reserves and its slots. */
static json_t *models_json(const struct sl_status *st)
{
	const struct sl_exposition *ex = st->ex;
	json_t *a = json_array();
	for (unsigned i = 0; i < ex->registry->n_models; i++) {
		const struct sl_model *m = ex->registry->models[i];
		json_t *queue = json_object();
		/* The scheduler counts its classes from batch up. */
		for (int c = 0; c < SL_SCHED_CLASSES; c++)
			json_object_set_new(
			    queue, class_names[c],
			    json_integer(m->sched.class_count[SL_SCHED_CLASSES -
			                                      1 - c]));
		unsigned slots = 0, busy = 0;
		for (unsigned k = 0; k < m->pool.n; k++) {
			slots += m->pool.members[k]->total_slots;
			busy += m->pool.members[k]->inflight;
		}
		json_array_append_new(
		    a, json_pack("{s:s, s:o, s:I, s:I, s:I, s:I}", "name",
		                 m->name, "queue", queue, "urgent_reserve",
		                 (json_int_t)sl_sched_urgent_reserve(&m->sched),
		                 "fair_reserve",
		                 (json_int_t)(m->sched.cfg.fair
		                                  ? m->sched.cfg.fair_reserve
		                                  : 0),
		                 "slots", (json_int_t)slots, "busy",
		                 (json_int_t)busy));
	}
	return a;
}

/* What a bucket holds now, refilled on a copy; null without a limit. */
static json_t *bucket_left(const struct sl_bucket *b, unsigned limit,
                           uint64_t now_ms)
{
	if (!limit)
		return json_null();
	struct sl_bucket copy = *b;
	sl_bucket_refill(&copy, limit, now_ms);
	return json_integer((json_int_t)sl_bucket_remaining(&copy));
}

/* Each tenant's last minute against its key's limits (0: none). */
static json_t *tenants_json(const struct sl_status *st)
{
	const struct sl_exposition *ex = st->ex;
	uint64_t now = uv_now(ex->loop);
	json_t *a = json_array();
	for (const struct sl_tenant *x = ex->tenants ? ex->tenants->list : NULL;
	     x; x = x->next) {
		uint64_t requests = 0, prompt = 0, completion = 0;
		for (const struct sl_usage *u = x->usage; u; u = u->next) {
			requests += u->requests;
			prompt += u->prompt_tokens;
			completion += u->completion_tokens;
		}
		json_array_append_new(
		    a,
		    json_pack(
		        "{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, "
		        "s:I, s:I, s:I}",
		        "name", x->name, "revoked", x->revoked, "rpm",
		        (json_int_t)x->rpm, "tpm", (json_int_t)x->tpm,
		        "max_concurrent", (json_int_t)x->max_concurrent,
		        "in_flight", (json_int_t)x->in_flight,
		        "requests_last_minute",
		        (json_int_t)sl_minute_sum(&x->minute_requests, now),
		        "tokens_last_minute",
		        (json_int_t)sl_minute_sum(&x->minute_tokens, now),
		        "requests_left", bucket_left(&x->requests, x->rpm, now),
		        "tokens_left", bucket_left(&x->tokens, x->tpm, now),
		        "requests", (json_int_t)requests, "prompt_tokens",
		        (json_int_t)prompt, "completion_tokens",
		        (json_int_t)completion));
	}
	return a;
}

json_t *sl_status_json(struct sl_status *st, json_t *health)
{
	return json_pack("{s:o, s:o, s:I, s:I, s:o, s:o, s:o, s:o}", "health",
	                 health, "metrics", sl_exposition_summary(st->ex),
	                 "now_ms", (json_int_t)wall_ms(), "listed",
	                 (json_int_t)st->listed, "models", models_json(st),
	                 "tenants", tenants_json(st), "recent", recent_json(st),
	                 "history", history_json(st));
}

/* ---- answering ---- */

void sl_status_respond_json(struct sl_status *st, struct sl_http_request *req,
                            json_t *health)
{
	json_t *doc = sl_status_json(st, health);
	/* Numbers as /health writes them, so that its part reads the same. */
	char *body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (!body)
		abort(); /* only when memory is gone: sl_xmalloc's rule */
	sl_http_respond(req, 200, SL_HTTP_JSON, "Cache-Control: no-store\r\n",
	                body, strlen(body));
	free(body);
}

void sl_status_respond_page(struct sl_http_request *req)
{
	/*
	 * Its own inline script and style, by hash, and fetches to its own
	 * origin; nothing else, not even a frame around it.
	 */
	static const char headers[] =
	    "Cache-Control: no-store\r\n"
	    "Content-Security-Policy: default-src 'none'; "
	    "script-src " SL_STATUS_PAGE_SCRIPT_HASH
	    "; style-src " SL_STATUS_PAGE_STYLE_HASH
	    "; connect-src 'self'; img-src data:; base-uri 'none'; "
	    "form-action 'none'; frame-ancestors 'none'\r\n"
	    "X-Content-Type-Options: nosniff\r\n"
	    "Referrer-Policy: no-referrer\r\n";
	sl_http_respond(req, 200, "text/html; charset=utf-8", headers,
	                sl_status_page, sizeof(sl_status_page));
}

/*
 * proxy_slo.c: an exchange's deadlines (sched/README.md, "Deadlines").
 *
 * A request's service level comes from its headers (X-SLO-TTFT-Ms and
 * X-SLO-TPOT-Ms, the Gateway API Inference Extension's names, never sent
 * upstream), else its key's slo:, its model's slo:, or --slo-ttft and
 * --slo-tpot for its priority class. Every queued request gets a predicted
 * TTFT and TPOT (latency.h) as it arrives; one with a service level it is
 * predicted to miss is refused at once (429, Retry-After: when it could be
 * met), and one whose level goes out of reach while it waits leaves the
 * queue then (503). Neither is charged to its key. Here also: the run each
 * dispatched request keeps in its upstream's latency model, the sample its
 * answer teaches the model and the calibration, and what its outcome is
 * judged on (counted as the request finishes: sl_stats_finished).
 */
#include "proxy_impl.h"

#include "sluice/base/log.h"
#include "sluice/ops/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the service level ---- */

/*
 * One header's level: whole milliseconds within the bounds of config.h, or
 * absent (0). Returns false with a reason when it is present and bad.
 */
static bool header_level(const struct sl_http_request *req, const char *name,
                         uint64_t *out, char *why, size_t size)
{
	const char *v = sl_http_header(req, name);
	*out = 0;
	if (!v)
		return true;
	uint64_t n = 0;
	const char *p = v;
	while (*p >= '0' && *p <= '9' && n <= SL_SLO_MAX_MS)
		n = n * 10 + (uint64_t)(*p++ - '0');
	if (p == v || *p || n < SL_SLO_MIN_MS || n > SL_SLO_MAX_MS) {
		snprintf(why, size,
		         "%s: expected whole milliseconds from %u to %u, got "
		         "\"%.40s\"",
		         name, SL_SLO_MIN_MS, SL_SLO_MAX_MS, v);
		return false;
	}
	*out = n;
	return true;
}

bool exchange_slo_headers(const struct sl_http_request *req, struct sl_slo *out,
                          char *why, size_t size)
{
	return header_level(req, SL_SLO_TTFT_HEADER, &out->ttft_ms, why,
	                    size) &&
	       header_level(req, SL_SLO_TPOT_HEADER, &out->tpot_ms, why, size);
}

/* The configuration's class index (batch, normal, urgent) of a priority. */
static unsigned slo_class(double priority)
{
	if (priority >= SL_PRIORITY_URGENT)
		return 2;
	return priority >= SL_PRIORITY_NORMAL ? 1 : 0;
}

/* The first level set of those given, in order of precedence. */
static uint64_t first_set(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	return a ? a : b ? b : c ? c : d;
}

void exchange_slo_resolve(struct exchange *x, const struct sl_slo *asked)
{
	static const struct sl_slo none;
	const struct sl_tenant *t = x->req->info.tenant;
	const struct sl_slo *key = t && t->key ? &t->key->slo : &none;
	const struct sl_slo *model =
	    x->model->conf ? &x->model->conf->slo : &none;
	const struct sl_config *cfg = x->relay->cfg;
	unsigned c = slo_class(x->priority);
	x->slo.ttft_ms = first_set(asked->ttft_ms, key->ttft_ms, model->ttft_ms,
	                           cfg->slo_ttft.ms[c]);
	x->slo.tpot_ms = first_set(asked->tpot_ms, key->tpot_ms, model->tpot_ms,
	                           cfg->slo_tpot.ms[c]);
	x->req->info.slo_ttft_ms = x->slo.ttft_ms;
	x->req->info.slo_tpot_ms = x->slo.tpot_ms;
}

static bool has_slo(const struct exchange *x)
{
	return x->slo.ttft_ms || x->slo.tpot_ms;
}

/* ---- refusals ---- */

/*
 * Answers a request its level is out of reach for: `status` (429 at
 * arrival, 503 from the queue) with Retry-After, a JSON error whose
 * "reason" names the level, and nothing charged to its key.
 */
static void refuse(struct exchange *x, int status, const char *reason,
                   uint64_t retry_ms, const char *message)
{
	retry_ms = SL_MAX(retry_ms, (uint64_t)SL_SCHED_RETRY_MIN_MS);
	retry_ms = SL_MIN(retry_ms, (uint64_t)SL_SCHED_RETRY_MAX_MS);
	snprintf(x->sched_headers, sizeof(x->sched_headers),
	         "Retry-After: %u\r\nretry-after-ms: %llu\r\n",
	         sl_sched_retry_after_s(retry_ms),
	         (unsigned long long)retry_ms);
	struct sl_request_info *info = &x->req->info;
	info->reject_reason = reason;
	info->outcome = "rejected";
	info->refunded = true;
	exchange_note_totals(x);
	json_t *doc = json_pack(
	    "{s:{s:s, s:s, s:i, s:s}}", "error", "message", message, "type",
	    status == 429 ? "rate_limit_error" : "unavailable_error", "code",
	    status, "reason", reason);
	char *body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!body)
		abort(); /* only when memory is gone: sl_xmalloc's rule */
	sl_http_respond(x->req, status, SL_HTTP_JSON, exchange_own_headers(x),
	                body, strlen(body));
	free(body);
	exchange_client_done(x);
}

/* The latency a request like x's would be predicted now. */
static void predict_now(struct exchange *x, uint64_t now_ms,
                        struct sl_latency *out)
{
	x->ask.slo_ttft_ms = x->slo.ttft_ms;
	sl_latency_predict(x->model, &x->ask, now_ms, out);
}

bool exchange_slo_admit(struct exchange *x, uint64_t now_ms)
{
	struct sl_latency *l = &x->predicted;
	predict_now(x, now_ms, l);
	x->has_prediction = true;
	x->item.service_ms = l->service_ms;
	x->item.stall_ms = l->prefill_ms * SL_MAX(x->ask.outputs, 1.0);
	x->item.slo_start_ms = l->slo_start_ms;
	x->req->info.predicted_ttft_ms = (int64_t)llround(l->ttft_ms);
	sl_debug("%s: predicted TTFT %.0f ms (wait %.0f behind %u, first "
	         "%.0f), hold %.0f ms for %.0f tokens at %.2f ms",
	         x->id, l->ttft_ms, l->wait_ms, l->ahead, l->first_ms,
	         l->hold_ms, l->out_tokens, l->tpot_ms);
	/* Nothing is refused on a guess: only on what answers taught. */
	if (!l->known)
		return true;
	char message[320];
	if (x->slo.ttft_ms && l->ttft_admit_ms > (double)x->slo.ttft_ms) {
		double late = l->ttft_admit_ms - (double)x->slo.ttft_ms;
		snprintf(
		    message, sizeof(message),
		    "sluice predicts a time to first token of up to %.0f ms "
		    "for this request (%.0f ms waiting for a slot, %u "
		    "requests ahead), beyond its service level of %llu ms; "
		    "retry in %.1f s",
		    l->ttft_admit_ms, l->wait_ms, l->ahead,
		    (unsigned long long)x->slo.ttft_ms,
		    SL_MAX(late, (double)SL_SCHED_RETRY_MIN_MS) / 1000);
		refuse(x, 429, "slo_ttft", (uint64_t)ceil(late), message);
		return false;
	}
	if (x->slo.tpot_ms && l->tpot_ms > (double)x->slo.tpot_ms) {
		/* Fewer run once what is ahead has gone: about its wait. */
		snprintf(message, sizeof(message),
		         "sluice predicts %.2f ms per output token for this "
		         "request at the concurrency it would meet, beyond its "
		         "service level of %llu ms (X-SLO-TPOT-Ms)",
		         l->tpot_ms, (unsigned long long)x->slo.tpot_ms);
		refuse(x, 429, "slo_tpot", (uint64_t)ceil(l->wait_ms), message);
		return false;
	}
	return true;
}

void sl_proxy_late(void *ctx, struct sl_sched_item *item, uint64_t now_ms)
{
	struct sl_model *m = ctx;
	struct exchange *x = sl_container_of(item, struct exchange, item);
	uint64_t waited = now_ms - x->arrived_ms;
	exchange_refused_from_queue(x, now_ms);
	sl_stats_queued(x->relay->stats, x->priority, -1);
	/*
	 * Its TTFT would have been past its level: an admission on a
	 * prediction too low, which the calibration must learn of too, or
	 * it would learn only from the requests that made it.
	 */
	sl_predict_calib_observe(&m->calib, x->predicted.ttft_ms,
	                         (double)x->slo.ttft_ms + 1);
	struct sl_latency now;
	predict_now(x, now_ms, &now);
	double late = now.ttft_admit_ms - (double)x->slo.ttft_ms;
	char message[320];
	snprintf(message, sizeof(message),
	         "the request waited %llu ms in sluice's queue and can no "
	         "longer get its first token within its service level of %llu "
	         "ms (its answer takes about %.0f ms once it has a slot); "
	         "retry in %.1f s",
	         (unsigned long long)waited, (unsigned long long)x->slo.ttft_ms,
	         x->predicted.first_ms,
	         SL_MAX(late, (double)SL_SCHED_RETRY_MIN_MS) / 1000);
	refuse(x, 503, "slo_deadline", late > 0 ? (uint64_t)ceil(late) : 0,
	       message);
	x->relay->hooks->model_left(m, "its last request's deadline passed",
	                            SL_SCHED_RETRY_MIN_MS);
	exchange_release(x);
}

/* ---- the upstream's latency model ---- */

/*
 * Its service level as a pick among replicas weighs it (pool.h): in *out,
 * returned; NULL for a request without one.
 */
const struct sl_pool_slo *exchange_slo_pick(const struct exchange *x,
                                            uint64_t now_ms,
                                            struct sl_pool_slo *out)
{
	if (!has_slo(x))
		return NULL;
	double deadline = (double)(x->arrived_ms + x->slo.ttft_ms);
	*out = (struct sl_pool_slo){
	    .has_ttft = x->slo.ttft_ms > 0,
	    .has_tpot = x->slo.tpot_ms > 0,
	    .ttft_left_ms = deadline - (double)now_ms,
	    .tpot_ms = (double)x->slo.tpot_ms,
	    .prompt_bytes = x->ask.prompt_bytes,
	    .out_tokens = x->predicted.out_tokens,
	};
	return out;
}

/* Sequences u runs: sluice's own, and others' where its poll says. */
static unsigned busy_on(const struct sl_upstream *u)
{
	return u->inflight + (sl_occupancy_polled(u) ? u->occupancy.others : 0);
}

void exchange_slo_taken(struct exchange *x, struct sl_upstream *u)
{
	uint64_t now = uv_now(x->relay->loop);
	sl_predict_busy(&u->predict, busy_on(u), now);
	if (!x->has_prediction)
		return;
	double hold = sl_latency_hold_on(u, &x->ask, &x->predicted, busy_on(u));
	sl_predict_run_start(&u->predict, &x->run, (double)now + hold, now);
	sl_predict_run_prefill(&u->predict, &x->run,
	                       x->predicted.prefill_ms *
	                           SL_MAX(x->ask.outputs, 1.0));
}

void exchange_slo_first_token(struct exchange *x, double ttft_s)
{
	if (!x->has_prediction || !(ttft_s > 0))
		return;
	double ttft_ms = ttft_s * 1000;
	sl_stats_prediction(x->relay->stats, x->predicted.ttft_ms / ttft_ms);
	/*
	 * Each part of it teaches the model's bias (predict.h), from the
	 * requests admission decides on: those with a TTFT level, whose
	 * waits are short. A wait of tens of seconds in a deep queue is
	 * learned from that long after it was predicted, and by then the
	 * bias would have been pushed the same way by all the predictions
	 * made since, overshooting (measured: predictions at four times
	 * capacity without levels fell from 50% high to 56% low).
	 */
	double waited = x->dispatched_ms > x->arrived_ms
	                    ? (double)(x->dispatched_ms - x->arrived_ms)
	                    : 0;
	if (x->slo.ttft_ms)
		sl_predict_bias_observe(
		    &x->model->bias, x->predicted.raw_wait_ms, waited,
		    x->predicted.raw_first_ms, ttft_ms - waited);
	/*
	 * The calibration learns from the predictions admission turns on:
	 * those of requests with a TTFT level, at least half of it. Far
	 * below it, a prediction of a few milliseconds against an answer
	 * that took a few more is noise, and a ratio of it would say little
	 * of a request near its level.
	 */
	if (x->slo.ttft_ms &&
	    x->predicted.ttft_ms >=
	        SL_PREDICT_CALIB_RELEVANT * (double)x->slo.ttft_ms)
		sl_predict_calib_observe(&x->model->calib, x->predicted.ttft_ms,
		                         ttft_ms);
	struct sl_upstream *u = x->upstream;
	if (!u || !x->run.running)
		return;
	/* What is left: its tokens at the pace of what runs there now. */
	uint64_t now = uv_now(x->relay->loop);
	double left = x->predicted.out_tokens *
	              sl_predict_tpot_ms(&u->predict, (double)busy_on(u));
	sl_predict_run_first(&u->predict, &x->run, (double)now + left, now);
}

/*
 * Tokens came: its end predicted anew at the pace it has gone since its
 * first token, so that a machine that slowed down (or sped up) is seen in
 * the waits predicted behind it without waiting for an answer to end. The
 * pace seen is weighed against the model's as SL_PREDICT_PACE_PRIOR
 * tokens at it: the first tokens often come in one burst (a busy machine
 * coalesces them into one read), whose pace alone would say the answer is
 * nearly done. O(1) a read of tokens.
 */
void exchange_slo_progress(struct exchange *x)
{
	struct sl_upstream *u = x->upstream;
	if (!u || !x->run.running || x->tokens_seen < 2 ||
	    x->last_token_ns <= x->first_token_ns)
		return;
	double seen = (double)(x->tokens_seen - 1);
	double took = (double)(x->last_token_ns - x->first_token_ns) / 1e6;
	double model = sl_predict_tpot_ms(&u->predict, (double)busy_on(u));
	double per_token = (took + SL_PREDICT_PACE_PRIOR * model) /
	                   (seen + SL_PREDICT_PACE_PRIOR);
	double out = x->predicted.out_tokens * SL_MAX(x->ask.outputs, 1.0);
	double left = SL_MAX(out - (double)x->tokens_seen, 0.0) * per_token;
	x->run.end_ms = (double)uv_now(x->relay->loop) + left;
}

void exchange_slo_let_go(struct exchange *x)
{
	struct sl_upstream *u = x->upstream;
	uint64_t now = uv_now(x->relay->loop);
	double k = sl_predict_run_end(&u->predict, &x->run, now);
	/* A whole answer teaches the model; its end's count is its own. */
	if (x->has_timings && x->has_prediction) {
		/*
		 * Its first token: as it came, from a stream; for a plain
		 * answer, its end less llama-server's own time generating
		 * (as proxy_answer.c times its TTFT).
		 */
		double hold = (double)(now - x->dispatched_ms);
		double first =
		    hold - x->timings.predicted_n * x->timings.per_token_ms;
		if (x->first_token_ns &&
		    x->first_token_ns >= x->dispatched_ns &&
		    exchange_upstream_streams(x))
			first = (double)(x->first_token_ns - x->dispatched_ns) /
			        1e6;
		struct sl_predict_sample s = {
		    .prompt_n = x->timings.prompt_n,
		    .cache_n = x->timings.cache_n,
		    .prompt_ms = x->timings.prompt_ms,
		    .predicted_n = x->timings.predicted_n,
		    .per_token_ms = x->timings.per_token_ms,
		    .decoding = k,
		    .hold_ms = hold,
		    .first_ms = first,
		    .prompt_bytes = (double)x->body_len,
		};
		sl_predict_observe(&u->predict, &s);
		sl_predict_output_observe(&x->model->output, x->ask.max_tokens,
		                          x->timings.predicted_n);
	}
	x->has_timings = false;
}

void exchange_slo_busy(struct exchange *x, struct sl_upstream *u)
{
	sl_predict_busy(&u->predict, busy_on(u), uv_now(x->relay->loop));
}

/* ---- the outcome ---- */

/*
 * The time per output token it got, for its outcome (counted as the
 * request finishes: sl_stats_finished): from its stream's token times, or
 * llama-server's own timings of a plain answer.
 */
void exchange_slo_note(struct exchange *x)
{
	double tpot = -1;
	if (x->tokens_seen >= 2 && x->last_token_ns > x->first_token_ns)
		tpot = (double)(x->last_token_ns - x->first_token_ns) / 1e6 /
		       (double)(x->tokens_seen - 1);
	else if (x->timings.per_token_ms > 0)
		tpot = x->timings.per_token_ms;
	x->req->info.tpot_ms = tpot;
}

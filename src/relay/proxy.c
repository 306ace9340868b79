/*
 * proxy.c: an exchange's life, from a client's request to its release.
 *
 * An exchange lives from a request's validation to the end of its upstream
 * transfer. It is freed when three things are over: the client side (the
 * response is complete, or the client is gone), the transfer (done, or
 * aborted), and a wait in the queue if it had one. Each callback ends one
 * of them and then calls exchange_release(). The relay keeps every exchange
 * on a list, so that shutdown can end them all before the upstreams they
 * point to go away. Here: the request's target and queueing (or its
 * answer at once: a fan-out to every upstream, an unknown model), the
 * scheduler's dispatch, expiry and shedding, the end of all exchanges at
 * shutdown, and the timer. The other pieces are named in proxy_impl.h.
 *
 * Timers: one per exchange. Until the first response byte it enforces
 * --upstream-timeout; from then on --upstream-idle-timeout between bytes,
 * measured lazily (each byte only records the time; the timer re-arms
 * itself for the remainder when it fires early). While the transfer is
 * paused for a slow client, silence is the client's doing, not the
 * upstream's, and does not count.
 */
#include "proxy_impl.h"

#include "sluice/base/log.h"
#include "sluice/fleet/fanout.h"
#include "sluice/net/query.h"
#include "sluice/ops/stats.h"
#include "sluice/relay/request.h"
#include "sluice/relay/access.h"

#include <inttypes.h>
#include <jansson.h>
#include <xxhash.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Whether the answer is a relayed plain one of a generation: it comes
 * whole once generated, so its first byte is its last.
 */
static bool relayed_generation(const struct exchange *x)
{
	return !exchange_upstream_streams(x) &&
	       x->ep->stream_end != SL_END_NONE;
}

/* Time allowed for the first response byte, and the option that set it. */
uint64_t exchange_first_byte_ms(const struct exchange *x, const char **option)
{
	const struct sl_config *cfg = x->relay->cfg;
	bool plain = relayed_generation(x);
	if (option)
		*option =
		    plain ? "--upstream-plain-timeout" : "--upstream-timeout";
	return plain ? cfg->upstream_plain_timeout_ms
	             : cfg->upstream_timeout_ms;
}

/* The first-byte or idle deadline. */
void exchange_on_timer(uv_timer_t *t)
{
	struct exchange *x = t->data;
	const struct sl_config *cfg = x->relay->cfg;
	/* A watch lasts as long as the upstream and the client want. */
	if (!exchange_transfer_active(x) || x->ep->watch)
		return;
	uint64_t now = uv_now(x->relay->loop);
	if (x->quieting && now >= x->quiet_end_ms) {
		sl_debug("%s: the plain answer its client left runs on after "
		         "%u ms: its upstream takes new work again",
		         x->id, SL_STREAM_UPSTREAM_QUIET_MS);
		exchange_quiet_end(x);
		sl_relay_kick_scheduler(x->relay);
	}
	/*
	 * Early for a quiet spell's end: the first byte's time is not up.
	 * A left answer whose bytes came after its client left is timed
	 * between bytes, as an answer under way is.
	 */
	bool waiting = x->mode == MODE_WAITING && !x->left_bytes;
	if (waiting && !x->paused) {
		uint64_t due =
		    x->dispatched_ms + exchange_first_byte_ms(x, NULL);
		if (now < due) {
			if (x->quieting)
				due = SL_MIN(due, x->quiet_end_ms);
			uv_timer_start(t, exchange_on_timer, due - now, 0);
			return;
		}
	}
	if (!waiting || x->paused) {
		uint64_t quiet = x->paused ? 0 : now - x->last_byte_ms;
		if (quiet < cfg->upstream_idle_timeout_ms) {
			uv_timer_start(&x->timer, exchange_on_timer,
			               cfg->upstream_idle_timeout_ms - quiet,
			               0);
			return;
		}
	}
	const char *option;
	uint64_t first_ms = exchange_first_byte_ms(x, &option);
	if (waiting)
		snprintf(x->error, sizeof(x->error),
		         "no answer within %s (%.1f s)", option,
		         (double)first_ms / 1000.0);
	else
		snprintf(x->error, sizeof(x->error),
		         "upstream silent for --upstream-idle-timeout (%.1f s)",
		         (double)cfg->upstream_idle_timeout_ms / 1000.0);
	exchange_transfer_abort(x);
	sl_warn("%s: %s", x->id, x->error);
	if (x->req)
		exchange_finish_client(x, CURLE_OPERATION_TIMEDOUT);
	exchange_release(x);
}

static void on_timer_closed(uv_handle_t *h)
{
	struct exchange *x = h->data;
	if (x->mode == MODE_SSE)
		sl_sse_free(&x->sse);
	if (x->answer)
		sl_assembler_free(x->answer);
	free(x->answer);
	sl_event_shape_free(&x->shape);
	json_decref(x->final);
	free(x->body);
	free(x->target);
	free(x->passed);
	free(x->accept_encoding);
	free(x->content_type);
	free(x->passed_request);
	free(x->h1_headers);
	free(x->kept.p);
	sl_h1_request_free(&x->h1);
	x->relay->hooks->model_release(x->model);
	free(x);
}

/* Frees the exchange once the client side and the transfer are both over. */
void exchange_release(struct exchange *x)
{
	struct sl_relay *relay = x->relay;
	if (x->req || exchange_transfer_active(x) ||
	    sl_sched_queued(&x->item) || x->fanout || x->released)
		return;
	x->released = true;
	exchange_coalesce_unlink(x);
	if (x->left_plain)
		exchange_judge_left_plain(x);
	if (x->prev)
		x->prev->next = x->next;
	else
		relay->exchange_list = x->next;
	if (x->next)
		x->next->prev = x->prev;
	relay->exchanges--;
	if (x->ep->watch)
		relay->watches--;
	sl_curl_easy_done(relay->curl, x->transfer.easy);
	curl_slist_free_all(x->headers);
	if (x->model) {
		exchange_charge(x); /* the final counts, from its usage */
		sl_sched_release(&x->model->sched, &x->item);
	}
	uv_close((uv_handle_t *)&x->timer, on_timer_closed);
	if (x->upstream) {
		if (x->left)
			sl_debug("%s: the answer its client left ended %" PRIu64
			         " ms after it left",
			         x->id, uv_now(relay->loop) - x->left_ms);
		/* A slot is free: the queue's top may go. */
		exchange_upstream_let_go(x);
		x->relay->hooks->model_used(x->model);
		sl_relay_kick_scheduler(relay);
	}
	relay->hooks->maybe_drained(relay->owner);
}

/*
 * A request refused from the queue, or refused its place back in it after
 * a failed attempt: its Server-Timing says what it waited since it
 * arrived, as a dispatch would have.
 */
void exchange_refused_from_queue(struct exchange *x, uint64_t now_ms)
{
	x->queue_ms = (int64_t)(now_ms - x->arrived_ms);
}

void sl_proxy_end_all(struct sl_relay *relay)
{
	struct exchange *x, *next;
	/* The queue first, so that no slot freed below dispatches from it. */
	for (x = relay->exchange_list; x; x = next) {
		next = x->next;
		if (!sl_sched_queued(&x->item))
			continue;
		sl_sched_remove(&x->model->sched, &x->item);
		sl_stats_queued(relay->stats, x->priority, -1);
		exchange_refused_from_queue(x, uv_now(relay->loop));
		snprintf(x->sched_headers, sizeof(x->sched_headers), "%s",
		         SL_PROXY_UNAVAILABLE_RETRY);
		exchange_respond_error(x, 503, "unavailable_error",
		                       SL_PROXY_DRAIN_MESSAGE);
		exchange_release(x);
	}
	for (x = relay->exchange_list; x; x = next) {
		next = x->next;
		exchange_transfer_abort(x);
		uv_timer_stop(&x->timer);
		/*
		 * Nothing sent yet: 503. A started stream: an error event and
		 * its end. A plain body already half relayed can only be cut,
		 * which exchange_fail() does by closing the connection.
		 */
		if (x->fanout) {
			sl_fanout_free(x->fanout);
			x->fanout = NULL;
		}
		if (x->req && !x->head_sent)
			snprintf(x->sched_headers, sizeof(x->sched_headers),
			         "%s", SL_PROXY_UNAVAILABLE_RETRY);
		exchange_fail(x, 503, SL_PROXY_DRAIN_MESSAGE);
		exchange_release(x);
	}
}

void sl_proxy_end_watches(struct sl_relay *relay, const struct sl_upstream *u,
                          const char *why)
{
	struct exchange *x, *next;
	for (x = relay->exchange_list; x; x = next) {
		next = x->next;
		if (!x->ep->watch || (u && x->upstream != u))
			continue;
		exchange_transfer_abort(x);
		uv_timer_stop(&x->timer);
		if (x->req && x->head_sent) {
			/* What was relayed stands: the answer just ends. */
			exchange_note_totals(x);
			sl_http_stream_end(x->req);
			exchange_client_done(x);
		} else if (x->req) {
			snprintf(x->sched_headers, sizeof(x->sched_headers),
			         "%s", SL_PROXY_UNAVAILABLE_RETRY);
			exchange_respond_error(x, 503, "unavailable_error",
			                       why);
		}
		exchange_release(x);
	}
}

void sl_proxy_fail_queued(struct sl_relay *relay, struct sl_model *m,
                          const char *message)
{
	struct exchange *x, *next;
	for (x = relay->exchange_list; x; x = next) {
		next = x->next;
		if (x->model != m || !sl_sched_queued(&x->item))
			continue;
		sl_sched_remove(&m->sched, &x->item);
		sl_stats_queued(relay->stats, x->priority, -1);
		exchange_refused_from_queue(x, uv_now(relay->loop));
		snprintf(x->sched_headers, sizeof(x->sched_headers), "%s",
		         SL_PROXY_UNAVAILABLE_RETRY);
		exchange_respond_error(x, 503, "unavailable_error", message);
		exchange_release(x);
	}
}

void sl_proxy_abort_all(struct sl_relay *relay)
{
	while (relay->exchange_list) {
		struct exchange *x = relay->exchange_list;
		if (sl_sched_queued(&x->item)) {
			sl_sched_remove(&x->model->sched, &x->item);
			sl_stats_queued(relay->stats, x->priority, -1);
		}
		exchange_transfer_abort(x);
		if (x->fanout) {
			sl_fanout_free(x->fanout);
			x->fanout = NULL;
		}
		uv_timer_stop(&x->timer);
		exchange_client_done(x); /* every connection is closed by now */
		exchange_release(x);
	}
}

static struct exchange *exchange_of(struct sl_sched_item *item)
{
	return sl_container_of(item, struct exchange, item);
}

/*
 * The queue counted a free slot for the exchange, and the pick found none
 * (the two should agree, but a count and a pick apart may not: an upstream
 * that turned suspect or ejected between them, say). Rather than fail, it
 * goes back to its place, as a failed attempt does (exchange_try_again);
 * the scheduler then dispatches no more in this run (sched.h,
 * sl_sched_requeue), and its --queue-timeout still holds. Said once a
 * request, at the warning level: each later run may try it again.
 */
static void back_in_line(struct exchange *x, uint64_t now_ms, const char *why)
{
	struct sl_relay *relay = x->relay;
	if (x->sent_back)
		sl_debug("%s: no upstream took it from the queue, again: %s",
		         x->id, why);
	else
		sl_warn("%s: no upstream took it from the queue (%s); it waits "
		        "in its place",
		        x->id, why);
	x->sent_back = true;
	if (sl_sched_requeue(&x->model->sched, &x->item, now_ms) == 0)
		return;
	/* Its place was taken by a more urgent arrival meanwhile. */
	sl_stats_queued(relay->stats, x->priority, -1);
	uint64_t retry = sl_sched_retry_after_ms(&x->model->sched, now_ms);
	exchange_refused_from_queue(x, now_ms);
	snprintf(x->sched_headers, sizeof(x->sched_headers),
	         "Retry-After: %u\r\nretry-after-ms: %llu\r\n",
	         sl_sched_retry_after_s(retry), (unsigned long long)retry);
	x->req->info.reject_reason = "queue_full";
	exchange_respond_error(
	    x, 503, "unavailable_error",
	    "no upstream could take the request and sluice's "
	    "queue is full of more urgent requests");
	exchange_release(x);
}

void sl_proxy_dispatch(void *ctx, struct sl_sched_item **items, unsigned n,
                       uint64_t now_ms)
{
	struct sl_model *m = ctx;
	/* A batch is never empty (sched.c), and all of it is one relay's. */
	struct sl_relay *relay = exchange_of(items[0])->relay;
	sl_stats_batch(relay->stats, n);
	for (unsigned i = 0; i < n; i++) {
		struct exchange *x = exchange_of(items[i]);
		char why[160];
		struct sl_pool_slo slo;
		struct sl_upstream *u = relay->hooks->pick_upstream(
		    relay->owner, m, true, x->failed_on, &x->affinity,
		    exchange_slo_pick(x, now_ms, &slo), why, sizeof(why));
		if (!u) {
			back_in_line(x, now_ms, why);
			continue;
		}
		x->queue_ms = (int64_t)(now_ms - x->arrived_ms);
		x->attempt_charged = x->item.cost; /* charged as it left */
		x->batch_size = n;
		x->req->info.queue_ms = x->queue_ms;
		x->req->info.batch_size = n;
		sl_stats_queued(relay->stats, x->priority, -1);
		sl_stats_queue_wait(relay->stats, x->priority,
		                    (double)x->queue_ms / 1000.0);
		struct sl_join h = SL_JOIN(x->sched_headers);
		sl_join_str(&h, "X-Queue-Ms: ");
		sl_join_u64(&h, (uint64_t)SL_MAX(x->queue_ms, (int64_t)0));
		sl_join_str(&h, "\r\nX-Batch-Size: ");
		sl_join_u64(&h, n);
		sl_join_str(&h, "\r\n");
		exchange_start_or_fail(x, u);
	}
	relay->hooks->model_used(m);
}

void sl_proxy_expire(void *ctx, struct sl_sched_item *item, uint64_t now_ms)
{
	struct sl_model *m = ctx;
	struct exchange *x = exchange_of(item);
	struct sl_relay *relay = x->relay;
	uint64_t waited = now_ms - x->arrived_ms;
	exchange_refused_from_queue(x, now_ms);
	sl_stats_queued(relay->stats, x->priority, -1);
	uint64_t retry = sl_sched_retry_after_ms(&m->sched, now_ms);
	snprintf(x->sched_headers, sizeof(x->sched_headers),
	         "X-Queue-Ms: %llu\r\nRetry-After: %u\r\n"
	         "retry-after-ms: %llu\r\n",
	         (unsigned long long)waited, sl_sched_retry_after_s(retry),
	         (unsigned long long)retry);
	x->req->info.reject_reason = "queue_timeout";
	relay->hooks->model_left(m, "its last request's queue-timeout passed",
	                         retry);
	char message[160];
	snprintf(message, sizeof(message),
	         "the request waited %.1f s in sluice's queue without a free "
	         "slot on a ready upstream (--queue-timeout %.1f s)",
	         (double)waited / 1000.0,
	         (double)m->sched.cfg.queue_timeout_ms / 1000.0);
	exchange_respond_error(x, 503, "unavailable_error", message);
	exchange_release(x);
}

/*
 * 429 with Retry-After: the queue is full, of requests at least as urgent.
 * Each refused client is told its own time to come back (see
 * sl_sched_retry_after_ms), in whole seconds and, for the OpenAI SDKs,
 * which honour it first, in milliseconds: returned.
 */
static uint64_t refuse_queue_full(struct sl_relay *relay, struct exchange *x,
                                  uint64_t now_ms, bool displaced)
{
	uint64_t retry_ms = sl_sched_retry_after_ms(&x->model->sched, now_ms);
	unsigned retry = sl_sched_retry_after_s(retry_ms);
	exchange_refused_from_queue(x, now_ms);
	snprintf(x->sched_headers, sizeof(x->sched_headers),
	         "Retry-After: %u\r\nretry-after-ms: %llu\r\n", retry,
	         (unsigned long long)retry_ms);
	char message[200];
	snprintf(message, sizeof(message),
	         "sluice's queue is full (%u requests waiting, --max-queue)%s; "
	         "retry in %.1f s",
	         sl_sched_depth(&x->model->sched),
	         displaced ? " and a more urgent request took this one's place"
	                   : "",
	         (double)retry_ms / 1000.0);
	x->req->info.reject_reason = "queue_full";
	exchange_respond_error(x, 429, "rate_limit_error", message);
	exchange_release(x);
	return retry_ms;
}

void sl_proxy_shed(void *ctx, struct sl_sched_item *item, uint64_t now_ms)
{
	struct sl_relay *relay = exchange_of(item)->relay;
	struct exchange *x = exchange_of(item);
	struct sl_model *m = x->model; /* held by the queue's newcomer */
	sl_stats_queued(relay->stats, x->priority, -1);
	uint64_t retry_ms = refuse_queue_full(relay, x, now_ms, true);
	relay->hooks->model_left(
	    m, "its last request was shed for a more urgent one", retry_ms);
}

/*
 * Its flow for fair queuing (--fairness, sched.h): its tenant, with its
 * key's weight, or its client's address; requests without a key share
 * flow 0. Its cost, charged when it leaves the queue, is its prompt
 * estimated from its body's size.
 */
static void set_flow(struct sl_relay *relay, struct exchange *x)
{
	const struct sl_http_request *req = x->req;
	x->item.flow_id = 0;
	x->item.weight = 1;
	if (relay->cfg->fairness == SL_FAIRNESS_KEY && req->info.tenant) {
		x->item.flow_id = (uint64_t)(uintptr_t)req->info.tenant;
		x->item.weight = req->info.tenant->weight;
	} else if (relay->cfg->fairness == SL_FAIRNESS_ADDRESS) {
		/* Odd, so that no address shares flow 0 with "unknown". */
		x->item.flow_id =
		    XXH3_64bits(req->client, strlen(req->client)) | 1;
	}
	x->item.cost = (double)(x->body_len / SL_KEYS_BYTES_PER_TOKEN) *
	               SL_SCHED_SERVICE_PROMPT_TOKEN;
}

/*
 * Charges the exchange's flow what its attempt has cost so far beyond
 * what was charged: its prompt (as llama-server counted it, else the
 * estimate charged at dispatch) and the tokens generated. Called as reads
 * end and when it is released; only ever adds, so an estimate above the
 * count stays charged.
 */
void exchange_charge(struct exchange *x)
{
	uint64_t prompt_tokens = exchange_prompt_tokens(x);
	double prompt = prompt_tokens > 0 ? (double)prompt_tokens *
	                                        SL_SCHED_SERVICE_PROMPT_TOKEN
	                                  : x->item.cost;
	double out = (double)SL_MAX(x->tokens_seen, x->tokens_final) *
	             SL_SCHED_SERVICE_OUTPUT_TOKEN;
	double service = prompt + out;
	if (!x->model || !(service > x->attempt_charged))
		return;
	sl_sched_charge(&x->model->sched, &x->item,
	                service - x->attempt_charged);
	x->attempt_charged = service;
}

/*
 * Queues a scheduled exchange, or answers 429 when the queue is full or
 * its service level is predicted out of reach (proxy_slo.c).
 */
static void enqueue(struct sl_relay *relay, struct exchange *x,
                    const struct sl_request *checked)
{
	/*
	 * The loop's time was read when this iteration began, before this
	 * request and those ahead of it in the iteration were parsed: read
	 * it again, or the queue timeout would count time not spent queued.
	 */
	uv_update_time(relay->loop);
	x->arrived_ms = uv_now(relay->loop);
	set_flow(relay, x);
	x->ask = (struct sl_latency_ask){
	    .prompt_bytes = (double)x->body_len,
	    .max_tokens = (double)checked->max_tokens,
	    .outputs = (double)SL_MAX(checked->outputs, 1u),
	    .priority = x->priority,
	};
	if (!exchange_slo_admit(x, x->arrived_ms)) {
		exchange_release(x);
		return;
	}
	if (sl_sched_push(&x->model->sched, &x->item, x->priority,
	                  x->arrived_ms) == 0) {
		sl_stats_queued(relay->stats, x->priority, +1);
		exchange_trace_queued(x);
		sl_relay_kick_scheduler(relay);
		return;
	}
	refuse_queue_full(relay, x, x->arrived_ms, false);
}

/* The upstream /health calls `name`, or NULL. */
static struct sl_upstream *find_upstream(struct sl_relay *relay,
                                         const char *name)
{
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++)
		if (relay->upstreams[i] &&
		    strcmp(relay->upstreams[i]->name, name) == 0)
			return relay->upstreams[i];
	return NULL;
}

/* Every upstream of model `m`, in the order of the list; how many. */
static unsigned model_upstreams(const struct sl_model *m,
                                struct sl_upstream *out[SL_POOL_MAX])
{
	for (unsigned i = 0; i < m->pool.n; i++)
		out[i] = m->pool.members[i];
	return m->pool.n;
}

/*
 * 404 in OpenAI's own words for a model nobody serves, so that SDKs raise
 * their NotFoundError. A long name is quoted cut short.
 */
void sl_proxy_respond_unknown_model(struct sl_http_request *req,
                                    const char *name)
{
	size_t shown = strlen(name);
	if (shown > SL_MODEL_NAME_MAX) {
		shown = SL_MODEL_NAME_MAX;
		/* Cut between characters: the message stays valid UTF-8. */
		while (shown > 0 && (name[shown] & 0xc0) == 0x80)
			shown--;
	}
	char *message =
	    sl_xasprintf("The model `%.*s%s` does not exist.", (int)shown, name,
	                 name[shown] ? "..." : "");
	json_t *doc = json_pack("{s:{s:s, s:s, s:s, s:s}}", "error", "message",
	                        message, "type", "invalid_request_error",
	                        "param", "model", "code", "model_not_found");
	free(message);
	char *body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!body)
		abort(); /* only when memory is gone: sl_xmalloc's rule */
	sl_http_respond(req, 404, SL_HTTP_JSON, NULL, body, strlen(body));
	free(body);
}

/* The fanout's parts are all in: the array goes to the client. */
static void on_fanout_done(struct sl_fanout *f, void *data)
{
	struct exchange *x = data;
	size_t len;
	char *body = sl_fanout_json(f, &len);
	/* The array says what each upstream did; 502 when none answered. */
	int status = sl_fanout_answered(f) > 0 ? 200 : 502;
	sl_fanout_free(f);
	x->fanout = NULL;
	if (x->req) {
		exchange_note_totals(x);
		sl_http_respond(x->req, status, SL_HTTP_JSON, NULL, body, len);
		exchange_client_done(x);
	}
	free(body);
	exchange_release(x);
}

static struct exchange *exchange_new(struct sl_relay *relay, struct sl_model *m,
                                     struct sl_http_request *req,
                                     const struct sl_endpoint *ep,
                                     double priority)
{
	struct exchange *x = sl_xcalloc(1, sizeof(*x));
	x->relay = relay;
	x->model = m;
	relay->hooks->model_ref(
	    m); /* a reload frees a removed model after this */
	x->req = req;
	x->ep = ep;
	x->priority = priority;
	x->queue_ms = -1;
	/* Also for one never queued: a retry queues it (exchange_try_again). */
	x->arrived_ms = uv_now(relay->loop);
	x->item.heap_index = SL_SCHED_NOT_QUEUED;
	struct sl_join id = SL_JOIN(x->id);
	sl_join_str(&id, req->id);
	uv_timer_init(relay->loop, &x->timer);
	x->timer.data = x;
	x->next = relay->exchange_list;
	if (x->next)
		x->next->prev = x;
	relay->exchange_list = x;
	relay->exchanges++;
	if (ep->watch)
		relay->watches++;
	req->handler_data = x;
	req->on_abort = exchange_on_client_abort;
	req->on_drain = exchange_on_client_drain;
	return x;
}

/*
 * The path and query the upstream gets: the endpoint's upstream path, or
 * the client's own path where the endpoint matches many (the UI's assets,
 * /slots/{id}), with the query as the client sent it.
 */
static char *upstream_target(const struct sl_endpoint *ep,
                             const struct sl_http_request *req,
                             const char *query)
{
	const char *path =
	    ep->upstream_path && !ep->prefix ? ep->upstream_path : req->path;
	return query[0] ? sl_xasprintf("%s?%s", path, query) : sl_xstrdup(path);
}

void sl_proxy_handle(struct sl_relay *relay, struct sl_http_request *req,
                     const struct sl_endpoint *ep)
{
	struct sl_request checked;
	/* auto decides when the exchange is dispatched
	 * (exchange_upstream_take). */
	const struct sl_request_options opts = {
	    .max_tokens_cap = relay->cfg->max_tokens_cap,
	    .stream_upstream =
	        relay->cfg->stream_upstream == SL_STREAM_UPSTREAM_ON,
	};
	if (sl_request_validate(&checked, ep, sl_http_header(req, "X-Priority"),
	                        req->body, req->body_len, &opts) != 0) {
		sl_http_respond_error(req, checked.status,
		                      "invalid_request_error", NULL, "%s",
		                      checked.error);
		return;
	}
	double priority = checked.priority;
	/* A service level of its own (proxy_slo.c): where it is queued. */
	struct sl_slo asked = {0, 0};
	char slo_why[160];
	if (ep->scheduled &&
	    !exchange_slo_headers(req, &asked, slo_why, sizeof(slo_why))) {
		sl_request_free(&checked);
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
		                      "%s", slo_why);
		return;
	}

	/*
	 * Which model: the body's "model", or for a request without a JSON
	 * body "?model=NAME" (as llama-server's router mode takes it), else
	 * the default. The parameter is sluice's only where models are
	 * named; otherwise the query goes upstream as it came.
	 */
	char model_param[SL_MODEL_NAME_MAX + 2];
	struct sl_query_param by_model = {0};
	char *query = NULL;
	if (relay->registry->model_section && !ep->json_body)
		by_model = sl_query_take(req->query, "model", model_param,
		                         sizeof(model_param), &query);
	else
		query = sl_xstrdup(req->query);
	bool model_named = by_model.found;
	/* "?upstream=NAME" picks one upstream; a GET without it asks all. */
	char name[256];
	struct sl_query_param by_upstream = {0};
	if (ep->per_upstream) {
		char *rest = NULL;
		by_upstream =
		    sl_query_take(query, "upstream", name, sizeof(name), &rest);
		free(query);
		query = rest;
	}
	bool named = by_upstream.found;
	/* A NUL byte (%00) would cut the name short: it names nothing. */
	if (by_model.nul || by_upstream.nul) {
		free(query);
		sl_request_free(&checked);
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
		                      "the query's %s holds a NUL byte (%%00)",
		                      by_model.nul ? "model" : "upstream");
		return;
	}
	struct sl_upstream *pinned = NULL;
	if (named && !(pinned = find_upstream(relay, name))) {
		free(query);
		sl_request_free(&checked);
		sl_http_respond_error(req, 404, "not_found_error", NULL,
		                      "no upstream named \"%s\"; /health lists "
		                      "the upstreams by name",
		                      name);
		return;
	}
	const char *wanted = model_named ? model_param : checked.model;
	struct sl_model *m = sl_registry_find(relay->registry, wanted);
	if (pinned && !model_named && !checked.model)
		m = sl_registry_model_of(relay->registry,
		                         pinned); /* the upstream's own */
	if (!m ||
	    (pinned && m != sl_registry_model_of(relay->registry, pinned))) {
		free(query);
		if (!m)
			sl_proxy_respond_unknown_model(req, wanted);
		else
			sl_http_respond_error(
			    req, 400, "invalid_request_error", NULL,
			    "upstream %s does not serve model "
			    "%s; /health lists each model's "
			    "upstreams",
			    pinned->name, m->name);
		sl_request_free(&checked);
		return;
	}
	/* The caller's key (keys.h): its models, priority and limits. */
	if (!sl_access_admit(relay, req, ep->scheduled, &priority, &checked, m,
	                     wanted)) {
		free(query);
		sl_request_free(&checked);
		return;
	}
	struct sl_upstream *ups[SL_POOL_MAX];
	unsigned n_ups = model_upstreams(m, ups);
	/* Changing one llama-server's state must say which. */
	if (ep->per_upstream && ep->method != HTTP_GET && !named && n_ups > 1) {
		free(query);
		sl_request_free(&checked);
		sl_http_respond_error(
		    req, 400, "invalid_request_error", NULL,
		    "%s %s acts on one llama-server and sluice "
		    "has %u: name it with ?upstream=NAME "
		    "(/health lists them)",
		    llhttp_method_name(req->method), req->path, n_ups);
		return;
	}
	if (ep->per_upstream && ep->method == HTTP_GET && !named && n_ups > 1 &&
	    !*relay->stopping) {
		struct exchange *x = exchange_new(relay, m, req, ep, priority);
		exchange_trace_start(x, &checked, m);
		char *target = upstream_target(ep, req, query);
		x->fanout = sl_fanout_start(relay->curl, ups, n_ups, target,
		                            SL_PROXY_FANOUT_TIMEOUT_MS,
		                            on_fanout_done, x);
		free(target);
		free(query);
		sl_request_free(&checked);
		if (sl_fanout_pending(x->fanout) == 0)
			on_fanout_done(x->fanout, x);
		return;
	}

	/*
	 * With no upstream ready, what needs a slot waits for one that is
	 * expected (sl_app_upstream_expected: starting, restarting, being
	 * checked after a failure) in the queue, within --queue-timeout.
	 * When every upstream is down, waiting helps nobody, so say so now.
	 * What skips the queue (/tokenize, /props) is not held either: it
	 * gets 503 with Retry-After, which says when to ask again.
	 */
	char why[SL_MODEL_NAME_MAX + 96];
	struct sl_upstream *u = relay->hooks->pick_upstream(
	    relay->owner, m, false, NULL, NULL, NULL, why, sizeof(why));
	bool wait = !u && ep->scheduled &&
	            relay->hooks->upstream_expected(relay->owner, m);
	if (pinned) {
		u = sl_upstream_is_ready(pinned) ? pinned : NULL;
		wait = false;
		snprintf(why, sizeof(why), "upstream %s is %s", pinned->name,
		         sl_upstream_state_name(pinned->state));
	}
	if (*relay->stopping) {
		u = NULL;
		wait = false;
		snprintf(why, sizeof(why), "sluice is shutting down");
	}
	if (!u && !wait) {
		free(query);
		sl_request_free(&checked);
		sl_http_respond_error(req, 503, "unavailable_error",
		                      SL_PROXY_UNAVAILABLE_RETRY, "%s", why);
		return;
	}
	if (ep->watch && relay->watches >= SL_PROXY_WATCHES_MAX) {
		free(query);
		sl_request_free(&checked);
		sl_http_respond_error(
		    req, 503, "unavailable_error", SL_PROXY_UNAVAILABLE_RETRY,
		    "%u watches (GET /models/sse, GET /v1/stream) are open, "
		    "sluice's most: each holds an upstream connection",
		    SL_PROXY_WATCHES_MAX);
		return;
	}

	struct exchange *x = exchange_new(relay, m, req, ep, priority);
	exchange_trace_start(x, &checked, m);
	x->pinned = pinned != NULL;
	if (ep->scheduled) {
		req->info.has_priority = true;
		req->info.priority = priority;
	}
	x->target = upstream_target(ep, req, query);
	free(query);
	if (ep->json_body) {
		x->body = checked.body; /* the exchange owns it now */
		x->body_len = checked.body_len;
		x->affinity.n = checked.affinity.n;
		memcpy(x->affinity.hash, checked.affinity.hash,
		       checked.affinity.n * sizeof(*checked.affinity.hash));
		x->has_body = true;
		free(checked.model);
	} else if (ep->method == HTTP_POST) {
		/* Relayed as written, with its type: llama-server judges it. */
		const char *type = sl_http_header(req, "Content-Type");
		if (type && type[0])
			x->content_type = sl_xstrdup(type);
		x->body = sl_xmalloc(req->body_len + 1);
		memcpy(x->body, req->body ? req->body : "", req->body_len);
		x->body[req->body_len] = '\0';
		x->body_len = req->body_len;
		x->has_body = true;
		sl_request_free(&checked);
	}
	if (ep == &sl_proxy_ui_endpoint) {
		const char *ae = sl_http_header(req, "Accept-Encoding");
		if (ae)
			x->accept_encoding = sl_xstrdup(ae);
	}
	x->stream = checked.stream;
	x->passed_request = exchange_passed_request_headers(ep, req, x->stream);
	x->resumable = x->stream && (ep->pass & SL_PASS_CONVERSATION) &&
	               sl_http_header(req, "X-Conversation-Id");
	x->assemble = checked.assemble;
	x->assemblable = checked.assemblable;
	x->assemble_kind = checked.assemble_kind;
	x->return_tokens = checked.return_tokens;
	x->choices = checked.choices;
	if (x->assemble) {
		x->answer = sl_xmalloc(sizeof(*x->answer));
		sl_assembler_init(x->answer, checked.assemble_kind,
		                  checked.return_tokens);
	}
	if (ep->scheduled) {
		exchange_slo_resolve(x, &asked);
		enqueue(relay, x, &checked);
		relay->hooks->model_demand(relay->owner,
		                           m); /* a stopped model starts */
	} else {
		exchange_start_or_fail(x, u);
	}
}

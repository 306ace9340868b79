/*
 * proxy_retry.c: the end of a transfer, and what follows it.
 *
 * A transfer ends in an answer for the client, or in a failure that
 * --retries may resend to another upstream (or put back in the queue,
 * before any byte reached the client), and in either case in a verdict on
 * the upstream: a failure or 5xx counts toward its suspicion. The native
 * client's results are mapped to libcurl's codes here, so that the policy
 * is the same whichever client carried the request.
 */
#include "proxy_impl.h"

#include "sluice/base/log.h"
#include "sluice/ops/stats.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * Whether a stream is whole when its transfer ends: /completion's once
 * every prompt stopped; those that end with the transfer always. (The
 * OpenAI streams end at [DONE], before the transfer does.)
 */
static bool native_stream_complete(const struct exchange *x)
{
	/* A stream where none was expected has no end marker either. */
	if (x->ep->stream_end == SL_END_EOF || x->ep->stream_end == SL_END_NONE)
		return true;
	return x->ep->stream_end == SL_END_STOP && x->stopped > 0 &&
	       x->stopped >= x->prompts;
}

/*
 * The client's end, once the transfer is over; for a stream, after its
 * last event was read (sl_sse_finish in exchange_on_transfer_done).
 */
void exchange_finish_client(struct exchange *x, CURLcode result)
{
	/* An empty body: the head, unless it cannot be relayed. */
	if (result == CURLE_OK && x->mode == MODE_WAITING &&
	    !exchange_start_response(x))
		return;
	if (result == CURLE_OK && x->mode == MODE_BODY) {
		exchange_count_answer(x);
		exchange_note_totals(x);
		sl_http_stream_end(x->req);
		exchange_client_done(x);
		return;
	}
	if (result == CURLE_OK && x->mode == MODE_SSE) {
		if (native_stream_complete(x))
			exchange_end_ok(x);
		else
			exchange_fail(
			    x, 502,
			    "upstream closed the stream before its end");
		return;
	}
	char message[CURL_ERROR_SIZE + 64];
	snprintf(message, sizeof(message), "upstream request failed: %s",
	         x->error[0] ? x->error : curl_easy_strerror(result));
	exchange_fail(x, result == CURLE_OPERATION_TIMEDOUT ? 504 : 502,
	              message);
}

/*
 * Failures of the connection rather than answers: refused, reset, nothing
 * or only part of the answer received. A retry may cure them.
 */
static bool transport_failure(CURLcode result)
{
	switch (result) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE: return true;
	default: return false;
	}
}

/*
 * Undoes a dispatch: the exchange holds no upstream slot, no transfer and
 * nothing read from it, as if it had never left the queue. The next
 * dispatch builds a fresh easy handle and header list.
 */
static void reset_for_retry(struct exchange *x)
{
	exchange_coalesce_unlink(x);
	x->read_tokens = x->read_others = 0;
	x->tick_read = x->tick_empty = false;
	x->read_end_ns = 0;
	sl_curl_easy_done(x->relay->curl, x->transfer.easy);
	x->transfer.easy = NULL;
	curl_slist_free_all(x->headers);
	x->headers = NULL;
	free(x->h1_headers);
	x->h1_headers = NULL;
	x->error[0] = '\0';
	x->passed_len = 0;
	x->connection[0] = '\0';
	x->connection_overflow = false;
	if (x->mode == MODE_SSE)
		sl_sse_free(&x->sse);
	if (x->assemble) {
		enum sl_assemble_kind kind = x->answer->kind;
		bool return_tokens = x->answer->return_tokens;
		sl_assembler_free(x->answer);
		sl_assembler_init(x->answer, kind, return_tokens);
	}
	x->answer_bytes = 0;
	free(x->kept.p);
	x->kept.p = NULL;
	x->kept.len = x->kept.cap = 0;
	x->kept.over = x->kept.prefix = x->keep = false;
	json_decref(x->final);
	x->final = NULL;
	x->mode = MODE_WAITING;
	x->paused = false;
	x->first_token_ns = x->last_token_ns = 0;
	x->tokens_seen = x->tokens_final = 0;
	x->prompt_sum = x->prompt_last = 0;
	x->prompt_summed = false;
	x->attempt_charged = 0; /* the next attempt costs its upstream anew */
	x->prompts = x->stopped = 0;
	x->has_timings = false; /* the failed attempt teaches nothing */
	exchange_upstream_let_go(x);
	x->upstream = NULL;
	x->req->info.upstream[0] = '\0';
	x->req->info.ttft_ms = -1;
}

/* What a transfer's failure said, for the log. */
static void describe_failure(const struct exchange *x, CURLcode result,
                             char *buf, size_t size)
{
	snprintf(buf, size, "%s failed: %s", x->id,
	         result == CURLE_OK ? "the stream ended before its end"
	         : x->error[0]      ? x->error
	                            : curl_easy_strerror(result));
}

/*
 * Whether the transfer ended because the connection failed: then the
 * upstream turns suspect, so that nothing more is sent to it until a probe
 * says it answers, and no request is thrown at a dead port (the slot that
 * a failed stream frees would otherwise go straight to it).
 */
static bool connection_failed(const struct exchange *x, CURLcode result)
{
	if (x->ended || x->gave_up || x->left)
		return false; /* the answer was whole, or sluice cut it */
	return transport_failure(result) ||
	       (result == CURLE_OK && x->mode == MODE_SSE &&
	        !native_stream_complete(x));
}

/*
 * A request whose upstream failed at the transport level before any byte
 * reached its client goes back to its place in the queue, to be sent again
 * when an upstream is ready (or to get 503 when its queue time runs out),
 * preferably not to the upstream that failed: after a transport failure
 * it is suspect by now, and after a 5xx it is avoided while another is
 * ready. A refused connection means the request was never sent, so it may
 * be sent again as often as that happens; any other failure (a reset, a
 * 5xx held by exchange_hold_5xx) uses up one of --retries, since llama-server
 * may have started working on it. Returns true when the exchange was requeued
 * (or refused because the queue was full).
 */
bool exchange_try_again(struct exchange *x, CURLcode result)
{
	struct sl_relay *relay = x->relay;
	/* One for a named upstream (?upstream=) may go to no other. */
	if (!x->req || x->head_sent || x->ended || x->gave_up || x->pinned)
		return false;
	bool refused = result == CURLE_COULDNT_CONNECT;
	enum sl_retry_reason reason;
	if (x->failed_status)
		reason = SL_RETRY_5XX; /* exchange_hold_5xx checked the count */
	else if (!connection_failed(x, result))
		return false;
	else if (refused)
		reason = SL_RETRY_REFUSED;
	else if (x->retries < relay->cfg->retries)
		reason = SL_RETRY_TRANSPORT;
	else
		return false;
	char why[SL_HTTP_REQUEST_ID_MAX + CURL_ERROR_SIZE + 64];
	if (x->failed_status)
		snprintf(why, sizeof(why), "it answered %ld", x->failed_status);
	else
		describe_failure(x, result, why, sizeof(why));
	sl_warn("%s: upstream %s%s failed before any byte reached the client "
	        "(%s); queued to be sent again",
	        x->id, x->upstream->url, x->target, why);
	x->retries += !refused;
	x->upstream->retries[reason]++;
	x->failed_on = x->upstream;
	x->failed_status = 0;
	reset_for_retry(x);
	uint64_t now = uv_now(relay->loop);
	if (sl_sched_requeue(&x->model->sched, &x->item, now) != 0) {
		uint64_t retry = sl_sched_retry_after_ms(&x->model->sched, now);
		exchange_refused_from_queue(x, now);
		snprintf(x->sched_headers, sizeof(x->sched_headers),
		         "Retry-After: %u\r\nretry-after-ms: %llu\r\n",
		         sl_sched_retry_after_s(retry),
		         (unsigned long long)retry);
		x->req->info.reject_reason = "queue_full";
		exchange_respond_error(
		    x, 503, "unavailable_error",
		    "the upstream failed and sluice's queue is full "
		    "of more urgent requests");
		exchange_release(x);
		sl_relay_kick_scheduler(relay); /* the slot it held is free */
		return true;
	}
	sl_stats_queued(relay->stats, x->priority, +1);
	sl_relay_kick_scheduler(relay);
	return true;
}

/*
 * What the attempt says of its upstream's health: a connection failure
 * makes it suspect, and that or a 5xx counts towards its ejection; a whole
 * answer restarts the count. An answer sluice cut short says nothing.
 */
static void note_outcome(struct exchange *x, CURLcode result)
{
	char why[SL_HTTP_REQUEST_ID_MAX + CURL_ERROR_SIZE + 64];
	if (connection_failed(x, result)) {
		describe_failure(x, result, why, sizeof(why));
		sl_upstream_suspect(x->upstream, why);
		sl_upstream_request_failed(x->upstream, why);
		return;
	}
	if (result != CURLE_OK && !x->failed_status)
		return;
	long status =
	    x->failed_status ? x->failed_status : exchange_upstream_status(x);
	if (status >= 500) {
		snprintf(why, sizeof(why), "%s: it answered %ld", x->id,
		         status);
		sl_upstream_request_failed(x->upstream, why);
	} else {
		sl_upstream_request_ok(x->upstream);
	}
}

void exchange_on_transfer_done(struct sl_transfer *t, CURLcode result)
{
	struct exchange *x = t->data;
	uv_timer_stop(&x->timer);
	/* The stream's last event may be what ends it. */
	if (x->req && result == CURLE_OK && x->mode == MODE_SSE)
		sl_sse_finish(&x->sse, exchange_on_event, x);
	/* An empty 5xx body: no byte came, so hold it here. */
	if (x->req && result == CURLE_OK && x->mode == MODE_WAITING)
		exchange_hold_5xx(x);
	note_outcome(x, result);
	exchange_trace_transfer_done(x);
	if (exchange_try_again(x, result))
		return;
	if (result != CURLE_OK && !x->ended && !x->gave_up && !x->left)
		sl_warn("%s: upstream %s%s: %s", x->id, x->upstream->url,
		        x->target,
		        x->error[0] ? x->error : curl_easy_strerror(result));
	if (x->req)
		exchange_finish_client(x, result);
	exchange_release(x);
}

/*
 * The native client's end, in libcurl's terms, so that what follows
 * (retries, suspicion, the client's answer) is the same for both.
 */
static CURLcode native_result(enum sl_h1_result r)
{
	switch (r) {
	case SL_H1_OK: return CURLE_OK;
	case SL_H1_REFUSED: return CURLE_COULDNT_CONNECT;
	case SL_H1_UNRESOLVED: return CURLE_COULDNT_RESOLVE_HOST;
	case SL_H1_CONNECT_TIMEOUT: return CURLE_OPERATION_TIMEDOUT;
	case SL_H1_SEND_FAILED: return CURLE_SEND_ERROR;
	case SL_H1_NOTHING: return CURLE_GOT_NOTHING;
	case SL_H1_PARTIAL: return CURLE_PARTIAL_FILE;
	case SL_H1_BAD_RESPONSE: return CURLE_WEIRD_SERVER_REPLY;
	case SL_H1_STOPPED: return CURLE_WRITE_ERROR;
	}
	return CURLE_RECV_ERROR;
}

void exchange_on_native_done(struct sl_h1_request *r, enum sl_h1_result result)
{
	struct exchange *x = r->data;
	if (r->error[0])
		snprintf(x->error, sizeof(x->error), "%s", r->error);
	exchange_on_transfer_done(&x->transfer, native_result(result));
}

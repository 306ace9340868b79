/*
 * proxy_leaving.c: a client that leaves while its upstream generates.
 *
 * llama-server (0.7.0, measured) stops a stream at its next token when the
 * connection closes, but a plain answer only when its HTTP thread's 1 s
 * wait for results times out, which every result in its shared queue
 * re-arms. So sluice half-closes the upstream connection (the leave that
 * llama-server sees) and reads the answer to its end, so that the slot
 * stays counted until llama-server has let go of it. A plain answer left
 * beside another stream could run on; so sluice asks for streams on such
 * an upstream (--stream-upstream auto) and keeps it quiet for a while
 * after a relayed plain answer is left (src/relay/README.md, "Plain
 * answers, and clients that leave").
 */
#include "proxy_impl.h"

#include "sluice/base/log.h"
#include "sluice/fleet/fanout.h"
#include "sluice/ops/stats.h"
#include "sluice/relay/request.h"

#include <inttypes.h>
#include <stdlib.h>

/* Whether llama-server was asked for a stream: its client leaving stops it. */
bool exchange_upstream_streams(const struct exchange *x)
{
	return x->stream || x->assemble;
}

/*
 * ---- Leaving ----
 *
 * A client that leaves while llama-server generates its answer must stop
 * the generation, and its slot must stay counted as taken until
 * llama-server has let go of it: a request sent there sooner would wait
 * in llama-server's own queue, where sluice's priorities do not reach.
 *
 * So sluice half-closes the upstream connection (sl_h1_half_close,
 * sl_curl_half_close) and reads the answer on to its end. llama-server
 * takes the half-close for its client leaving (measured on 0.7.0): a
 * stream stops at its next token and the connection closes; a plain
 * answer stops the next time its HTTP thread's one-second wait for
 * results passes without a result, anyone's, and answers an empty 200.
 * Either end frees the exchange, and with it the slot.
 *
 * That wait is the difficulty: while anything else on the same
 * llama-server produces results (each token of a stream is one), a plain
 * answer is never stopped. Under --stream-upstream auto, therefore:
 *   - a plain answer is asked for as a stream, and assembled, when the
 *     upstream it is sent to has a stream in flight, or had a client's
 *     stream within SL_STREAM_UPSTREAM_WINDOW_S (exchange_plain_as_stream):
 *     there its client leaving could not be noticed otherwise;
 *   - elsewhere it is relayed as it comes, which costs llama-server much
 *     less (a stream costs it a chunk per token). When its client leaves
 *     and no client's stream runs there, its upstream turns quiet: it
 *     takes no new work that needs a slot until the answer ends, for
 *     SL_STREAM_UPSTREAM_QUIET_MS at most, so that what runs there
 *     finishes, a second passes without a result, and llama-server stops
 *     it;
 *   - a left plain answer that cost llama-server SL_STREAM_UPSTREAM_LEFT_MS
 *     or more starts the window on its upstream too: clients that leave
 *     tend to do so again (timeouts under load), and a stream stops
 *     without a quiet spell.
 * What is left: a plain answer relayed beside a client's stream (sent
 * before the stream started, or one that no assembler can build:
 * /v1/messages, the Responses API, any under --stream-upstream off),
 * whose client leaves while streams run there. It stops once they pause
 * for a second (or at its end); its slot stays taken until then.
 */

/*
 * Whether a plain answer sent to `u` now is asked for as a stream. Also
 * while sluice polls u's occupancy (fleet/upstream.h, "Occupancy"): each
 * poll is a task whose result re-arms llama-server's wait, so a left
 * plain answer there would run on for as long as requests wait (a quiet
 * spell pauses the polls, but holds the queue up to let it go).
 */
bool exchange_plain_as_stream(const struct sl_relay *relay,
                              const struct sl_upstream *u)
{
	switch (relay->cfg->stream_upstream) {
	case SL_STREAM_UPSTREAM_ON: return true;
	case SL_STREAM_UPSTREAM_OFF: return false;
	default:
		return u->streams > 0 || sl_occupancy_polling(u) ||
		       uv_now(relay->loop) < u->plain_streams_until_ms;
	}
}

/*
 * The exchange, validated to be relayed plain, is asked for as a stream
 * and assembled after all; it stays plain if its body cannot be spliced
 * (never: the body is sluice's own).
 */
void exchange_ask_for_stream(struct exchange *x)
{
	char *body;
	size_t len;
	if (sl_request_stream_body(x->assemble_kind, x->body, x->body_len,
	                           &body, &len) != 0)
		return;
	free(x->body);
	x->body = body;
	x->body_len = len;
	x->assemble = true;
	x->answer = sl_xmalloc(sizeof(*x->answer));
	sl_assembler_init(x->answer, x->assemble_kind, x->return_tokens);
}

/*
 * --stream-upstream auto: a client left a plain answer that cost
 * llama-server SL_STREAM_UPSTREAM_LEFT_MS or more.
 */
static void note_plain_left(struct exchange *x)
{
	struct sl_upstream *u = x->upstream;
	uint64_t now = uv_now(x->relay->loop);
	if (now >= u->plain_streams_until_ms)
		sl_info("a client left a plain answer llama-server was "
		        "generating: plain answers sent to %s are asked for as "
		        "streams for %u s, so that leaving stops them at once "
		        "(--stream-upstream auto)",
		        u->name, SL_STREAM_UPSTREAM_WINDOW_S);
	u->plain_streams_until_ms =
	    now + SL_STREAM_UPSTREAM_WINDOW_S * UINT64_C(1000);
}

/*
 * A client left a relayed plain answer that llama-server was generating:
 * whether that is worth asking for the next ones as streams depends on
 * what it costs: at once if it had been generating for
 * SL_STREAM_UPSTREAM_LEFT_MS already, else when it ends.
 */
static void plain_left(struct exchange *x)
{
	uint64_t ran = x->left_ms - x->dispatched_ms;
	sl_debug("%s: its client left a plain answer llama-server had been "
	         "generating for %" PRIu64 " ms",
	         x->id, ran);
	if (ran >= SL_STREAM_UPSTREAM_LEFT_MS)
		note_plain_left(x);
	else
		x->left_plain = true;
}

/*
 * A left plain answer has ended (plain_left): how long it ran on. One
 * that sluice's shutdown ended says nothing of what it would have cost.
 */
void exchange_judge_left_plain(struct exchange *x)
{
	if (*x->relay->stopping)
		return;
	uint64_t after = uv_now(x->relay->loop) - x->left_ms;
	sl_debug("%s: the plain answer its client left ran on for %" PRIu64
	         " ms",
	         x->id, after);
	if (after >= SL_STREAM_UPSTREAM_LEFT_MS)
		note_plain_left(x);
}

/* The upstream of a left plain answer takes no new work for a while. */
static void quiet_start(struct exchange *x)
{
	uint64_t now = uv_now(x->relay->loop);
	x->quieting = true;
	x->quiet_end_ms = now + SL_STREAM_UPSTREAM_QUIET_MS;
	x->upstream->quiet++;
	/* The timer ends the spell (exchange_on_timer), unless it is due
	 * sooner. */
	uint64_t due = uv_timer_get_due_in(&x->timer);
	if (due == 0 || due > SL_STREAM_UPSTREAM_QUIET_MS)
		uv_timer_start(&x->timer, exchange_on_timer,
		               SL_STREAM_UPSTREAM_QUIET_MS, 0);
}

/* The quiet spell is over; the caller lets the queue move. */
void exchange_quiet_end(struct exchange *x)
{
	if (!x->quieting)
		return;
	x->quieting = false;
	x->upstream->quiet--;
}

/*
 * The exchange lets go of its upstream's slot (it ended, or goes back to
 * the queue). A client's stream that ends keeps plain answers to that
 * upstream streamed for the window after it.
 */
void exchange_upstream_let_go(struct exchange *x)
{
	struct sl_upstream *u = x->upstream;
	if (x->ep->watch) {
		u->watches--;
		return;
	}
	exchange_quiet_end(x);
	exchange_upstream_started(x);
	if (x->counts_stream) {
		x->counts_stream = false;
		u->streams--;
	}
	if (x->stream)
		u->plain_streams_until_ms =
		    uv_now(x->relay->loop) +
		    SL_STREAM_UPSTREAM_WINDOW_S * UINT64_C(1000);
	exchange_slo_let_go(x);
	u->inflight--;
	exchange_slo_busy(x, u);
	/* Others may have taken the slot, or freed theirs: ask again. */
	sl_occupancy_answer_ended(u);
}

/*
 * The client left while the upstream had the request: stops the
 * generation as above and reads the answer on to its end. Returns false
 * when the request has not gone out whole yet (waiting for a connection,
 * connecting): closing it is then all it takes.
 */
static bool leave_upstream(struct exchange *x)
{
	bool plain = !exchange_upstream_streams(x);
	/*
	 * Reading on first: libcurl stops watching the socket of a transfer
	 * it paused, and learns it again (sl_curl_half_close) when resumed.
	 */
	bool held = x->coalesced;
	exchange_coalesce_unlink(x);
	if (x->paused || held)
		exchange_transfer_resume(x);
	/*
	 * A plain answer's bytes come once it is generated whole: nothing
	 * to stop, and the connection stays worth keeping. A resumable
	 * stream (X-Conversation-Id) is generated to its end whatever its
	 * client does, for GET /v1/stream: llama-server keeps it, and its
	 * end is read here too, once it has been sent.
	 */
	if (x->resumable) {
		bool sent =
		    x->native ? sl_h1_sent(&x->h1) : sl_curl_sent(&x->transfer);
		if (!sent)
			return false;
	} else if (!(plain && x->mode == MODE_BODY)) {
		bool half = x->native ? sl_h1_half_close(&x->h1)
		                      : sl_curl_half_close(&x->transfer);
		if (!half)
			return false;
	}
	x->left = true;
	x->left_ms = uv_now(x->relay->loop);
	sl_debug("%s: client left; %s and its answer read to its end", x->id,
	         x->resumable ? "its stream is resumable (kept by llama-server)"
	                      : "the upstream is told (its connection "
	                        "half-closed)");
	if (plain && x->mode == MODE_WAITING) {
		if (x->assemblable &&
		    x->relay->cfg->stream_upstream == SL_STREAM_UPSTREAM_AUTO)
			plain_left(x);
		/* Beside a client's stream, a quiet spell could not help: its
		 * tokens keep coming. */
		if (x->upstream->streams == 0)
			quiet_start(x);
	}
	return true;
}

/* HTTP server: the client went away before its response was complete. */
void exchange_on_client_abort(struct sl_http_request *req)
{
	struct exchange *x = req->handler_data;
	bool queued = sl_sched_queued(&x->item);
	exchange_note_totals(x);
	req->info.cancel_stage = queued ? "queued" : "inflight";
	exchange_client_done(x);
	if (queued) {
		sl_sched_remove(&x->model->sched, &x->item);
		sl_stats_queued(x->relay->stats, x->priority, -1);
		x->relay->hooks->model_left(
		    x->model, "its last request's client left", 0);
	}
	if (x->fanout) {
		sl_fanout_free(x->fanout);
		x->fanout = NULL;
	}
	/*
	 * What holds a slot is stopped with care; the rest is cut. A watch
	 * never ends by itself: its client leaving ends it. A plain answer
	 * left before it came, and a resumable stream (generated to its
	 * end), are charged their reservation: their usage is never read
	 * (keys.h, sl_ending).
	 */
	bool unread =
	    (!exchange_upstream_streams(x) && x->mode == MODE_WAITING) ||
	    x->resumable;
	if (exchange_transfer_active(x) && x->ep->scheduled && !x->ep->watch &&
	    leave_upstream(x)) {
		req->info.ran_on = unread;
		return;
	}
	sl_debug("%s: client left; cancelling its request", x->id);
	exchange_transfer_abort(x);
	exchange_release(x);
}

/* HTTP server: the client caught up; let the upstream talk again. */
void exchange_on_client_drain(struct sl_http_request *req)
{
	struct exchange *x = req->handler_data;
	if (!x->paused || !exchange_transfer_active(x))
		return;
	exchange_transfer_resume(x);
}

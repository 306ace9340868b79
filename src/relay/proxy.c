/*
 * proxy.c: exchanges between clients and upstreams.
 *
 * An exchange lives from a request's validation to the end of its upstream
 * transfer. It is freed when three things are over: the client side (the
 * response is complete, or the client is gone), the transfer (done, or
 * aborted), and a wait in the queue if it had one. Each callback below ends
 * one of them and then calls exchange_release(). The app keeps every
 * exchange on a list, so that shutdown can end them all before the
 * upstreams they point to go away.
 *
 * Transfers: to an http:// upstream through sluice's own client
 * (h1_client.h), unless --upstream-client curl; to an https:// one through
 * libcurl. Both drive the same callbacks (header lines, body bytes, done
 * with a CURLcode: the native client's results are mapped to libcurl's),
 * so that retries, suspicion and the client's answer do not depend on
 * which carried the request. One difference: libcurl keeps a chunk the
 * client is too slow for (CURL_WRITEFUNC_PAUSE), the native client
 * delivers what it has read and then stops reading.
 *
 * Events: every Server-Sent Event from an upstream is parsed once, to learn
 * when tokens arrive (time to first token, gaps, counts), whether it ends
 * the stream, and whether it is an error; then it is relayed as it came,
 * gathered into one answer (assemble.h), or turned into /generate's shape.
 *
 * Timers: one per exchange. Until the first response byte it enforces
 * --upstream-timeout; from then on --upstream-idle-timeout between bytes,
 * measured lazily (each byte only records the time; the timer re-arms
 * itself for the remainder when it fires early). While the transfer is
 * paused for a slow client, silence is the client's doing, not the
 * upstream's, and does not count.
 */
#include "sluice/relay/proxy.h"

#include "sluice/tenants/access.h"
#include "sluice/json/assemble.h"
#include "sluice/base/common.h"
#include "sluice/json/event_scan.h"
#include "sluice/fleet/fanout.h"
#include "sluice/net/h1_client.h"
#include "sluice/base/log.h"
#include "sluice/json/native_api.h"
#include "sluice/net/query.h"
#include "sluice/relay/request.h"
#include "sluice/net/sse.h"
#include "sluice/ops/stats.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*
 * How the upstream events that are rebuilt (/generate's), and answers
 * assembled from events, are parsed into objects; every other event is
 * only scanned (event_scan.h).
 * JSON_DECODE_ANY: a prompt array's stream opens with "null". JSON_ALLOW_NUL:
 * "\u0000" is valid JSON, and text (or a final event echoing a prompt) may hold
 * it; without the flag the whole event would be dropped. Strings are then read
 * with their length (json_string_length), never as C strings.
 */
#define EVENT_JSON_FLAGS (JSON_DECODE_ANY | JSON_ALLOW_NUL)

/*
 * How long each upstream has to answer a fanned-out GET /props or /slots:
 * llama-server answers both from its HTTP thread at once, so one that
 * takes longer is reported as failed rather than hold the whole answer for
 * --upstream-timeout.
 */
#define SL_PROXY_FANOUT_TIMEOUT_MS 10000L

/* Largest non-streamed answer sluice assembles from an upstream stream. */
#define SL_PROXY_MAX_ANSWER (64u * 1024 * 1024)
/* The final 503 of every request still in flight when a drain times out. */
#define SL_PROXY_DRAIN_MESSAGE "sluice is shutting down: --drain-timeout passed"
/*
 * Retry-After for a 503 whose end nobody can predict (no upstream ready,
 * shutting down): the one-second hint clients have always had.
 */
#define SL_PROXY_UNAVAILABLE_RETRY "Retry-After: 1\r\nretry-after-ms: 1000\r\n"

enum relay_mode {
	MODE_WAITING, /* no response byte yet */
	MODE_BODY,    /* relaying a plain body */
	MODE_SSE,     /* reading events one by one */
};

struct exchange {
	struct sl_app *app;
	struct exchange *prev, *next; /* the app's list */
	/*
	 * Coalescing (--stream-coalesce): while tokens come about as fast as
	 * the window or faster, the transfer stays paused on the app's list
	 * (co_prev, co_next), and each tick of the app's one timer reads it
	 * once (sl_h1_read_paused), taking what came since at once.
	 */
	struct exchange *co_prev, *co_next;
	uint64_t co_tick; /* the tick that put it on the list */
	bool coalesced;
	bool tick_read;  /* the read being scanned is a tick's */
	bool tick_empty; /* the last tick found nothing to read */
	/* In the read being scanned: plain token events, and other events. */
	unsigned read_tokens, read_others;
	uint64_t read_end_ns;        /* when the last read of tokens ended */
	struct sl_http_request *req; /* NULL once the client side is over */
	const struct sl_endpoint *ep;
	struct sl_model *model;       /* whose queue and upstreams */
	struct sl_upstream *upstream; /* set when dispatched */
	char *target;                 /* upstream path and query, malloc'd */
	char *body;                   /* what is sent upstream */
	size_t body_len;
	struct sl_affinity_key affinity; /* its prompt's prefix (affinity.h) */
	bool has_body;                   /* body goes upstream (a POST) */
	char *content_type; /* of a body relayed as written: the client's */
	char *accept_encoding;           /* the UI's: relayed, so gzip passes */
	/* The client's headers that go upstream (enum sl_pass), or NULL. */
	char *passed_request;
	/*
	 * A stream asked for with X-Conversation-Id: llama-server keeps it
	 * for GET /v1/stream and finishes it when its client leaves.
	 */
	bool resumable;
	struct sl_fanout *fanout;        /* a GET asked of every upstream */
	char id[SL_HTTP_REQUEST_ID_MAX + 1];

	struct sl_sched_item item; /* while waiting in sluice's queue */
	double priority;
	uint64_t arrived_ms;
	int64_t queue_ms; /* -1 until dispatched */
	uint64_t dispatched_ms; /* when its request went upstream */
	/*
	 * Its client left while the upstream had its request: the
	 * connection is half-closed and the answer read to its end, which is
	 * when llama-server has let go of the slot ("Leaving", below).
	 */
	bool left;
	uint64_t left_ms;
	bool left_bytes; /* bytes of its answer came after it left */
	/*
	 * A relayed plain answer left after llama-server had been generating
	 * it for less than SL_STREAM_UPSTREAM_LEFT_MS: how long it runs on is
	 * judged when it ends (judge_left_plain).
	 */
	bool left_plain;
	/* It keeps its upstream quiet until quiet_end_ms ("Leaving"). */
	bool quieting;
	uint64_t quiet_end_ms;
	bool counts_stream; /* counted in its upstream's streams */
	unsigned batch_size;
	/* X-Queue-Ms and X-Batch-Size once known; Retry-After on refusals. */
	char sched_headers[160];

	bool stream;   /* the client wants events */
	bool assemble; /* it wants one answer, built from upstream events */
	/*
	 * It wants one answer that a stream would let its client stop, and
	 * how that answer would be assembled (ask_for_stream).
	 */
	bool assemblable;
	enum sl_assemble_kind assemble_kind;
	bool return_tokens;
	/* While assemble: allocated then, as most answers are relayed. */
	struct sl_assembler *answer;
	size_t answer_bytes;
	/* The stream's plain token events, learned to skip their scans. */
	struct sl_event_shape shape;
	json_t *final; /* /generate streams: the event with "stop": true */

	/*
	 * The upstream side: a libcurl transfer, or (native) a request of
	 * sluice's own client (h1_client.h) with its header lines.
	 */
	bool native;
	struct sl_transfer transfer;
	struct curl_slist *headers;
	struct sl_h1_request h1;
	char *h1_headers;
	/*
	 * The upstream's response header lines worth passing on, "Name:
	 * value\r\n" each (at most SL_PROXY_PASSED_HEADERS_MAX bytes), and the
	 * names its Connection header lists, which are hop-by-hop too.
	 */
	char *passed;
	size_t passed_len;
	char connection[SL_PROXY_CONNECTION_MAX + 1];
	bool connection_overflow; /* the list was too long: pass nothing */
	char error[CURL_ERROR_SIZE];
	uv_timer_t timer;
	uint64_t last_byte_ms;
	bool released;
	/* Resends after failures that used one up (--retries). */
	unsigned retries;
	/*
	 * The upstream the last attempt failed on, avoided by the next while
	 * another is ready; only compared, never followed.
	 */
	const struct sl_upstream *failed_on;
	long failed_status; /* its 5xx, kept from the client to resend */
	bool pinned;        /* for the upstream the client named (?upstream=) */

	enum relay_mode mode;
	bool head_sent; /* the client's response has begun */
	struct sl_sse sse;
	/*
	 * While a piece of the upstream's body is scanned (feed_data: NULL
	 * otherwise), the relayed events found in the read it came from so
	 * far, written together when the read is done: one write per read,
	 * not per event. libcurl says only where a piece ends, the native
	 * client also where its read does (on_native_read_end), and
	 * llama-server sends each event as its own chunk.
	 */
	const char *feed_data;
	size_t feed_len;
	uv_buf_t relay[SL_HTTP_WRITEV_MAX];
	unsigned relay_n;
	/*
	 * A relayed plain answer of a generation, kept (at most
	 * SL_PROXY_ANSWER_KEEP_MAX bytes) so that its usage can be read at
	 * its end: the token counts the access log, metrics and tenants get
	 * from a stream's last events otherwise.
	 */
	bool keep;
	struct {
		char *p;
		size_t len, cap;
		bool over;   /* past the bound: dropped, not counted */
		bool prefix; /* only its start (SL_PROXY_USAGE_PREFIX_MAX) */
	} kept;
	bool ended;   /* the stream's end went out as it should */
	bool gave_up; /* sluice stopped relaying: the transfer must stop too */
	bool paused;  /* the transfer waits for the client to catch up */

	/* What was seen of the generation. */
	uint64_t first_token_ns, last_token_ns;
	uint64_t tokens_seen, tokens_final;
	uint64_t prompt_tokens;    /* as the upstream counted them */
	unsigned prompts, stopped; /* native streams: indexes seen, ended */
};

static void exchange_release(struct exchange *x);
static void on_timer(uv_timer_t *t);

/* ---- the upstream transport: libcurl or sluice's own client ---- */

static bool transfer_active(const struct exchange *x)
{
	return x->native ? x->h1.active : x->transfer.active;
}

/* Stops the transfer without its done callback; closes its connection. */
static void transfer_abort(struct exchange *x)
{
	if (x->native)
		sl_h1_abort(&x->h1);
	else
		sl_curl_abort(&x->app->curl, &x->transfer);
}

/* Lets a paused transfer go on (once its coalescing wait is over too). */
static void transfer_resume(struct exchange *x)
{
	x->paused = false;
	x->last_byte_ms = uv_now(&x->app->loop);
	if (x->native) {
		if (!x->coalesced)
			sl_h1_resume(&x->h1);
		return;
	}
	/* May call on_upstream_data before it returns: state is updated. */
	curl_easy_pause(x->transfer.easy, CURLPAUSE_CONT);
}

/* Takes x off the app's coalescing list, if it is on it. */
static void coalesce_unlink(struct exchange *x)
{
	if (!x->coalesced)
		return;
	x->coalesced = false;
	if (x->co_prev)
		x->co_prev->co_next = x->co_next;
	else
		x->app->coalesced = x->co_next;
	if (x->co_next)
		x->co_next->co_prev = x->co_prev;
	else
		x->app->coalesced_last = x->co_prev;
	x->co_prev = x->co_next = NULL;
}

static long upstream_status(const struct exchange *x)
{
	long status = 0;
	if (x->native)
		return x->h1.status;
	curl_easy_getinfo(x->transfer.easy, CURLINFO_RESPONSE_CODE, &status);
	return status;
}

/* ---- the client side ---- */

/* The totals the access log and metrics want, while req is still valid. */
static void note_totals(struct exchange *x)
{
	struct sl_request_info *info = &x->req->info;
	if (x->tokens_final > x->tokens_seen) {
		sl_stats_tokens(&x->app->stats,
		                x->tokens_final - x->tokens_seen,
		                uv_now(&x->app->loop));
		x->tokens_seen = x->tokens_final;
	}
	info->tokens = (unsigned)x->tokens_seen;
	info->prompt_tokens = (unsigned)x->prompt_tokens;
}

/* The client side is over: no more calls to the HTTP server about it. */
static void client_done(struct exchange *x)
{
	x->req = NULL;
}

static void respond_error(struct exchange *x, int status, const char *type,
                          const char *message)
{
	note_totals(x);
	if (!x->req->info.outcome)
		x->req->info.outcome = status >= 500 ? "failed" : "rejected";
	sl_http_respond_error(x->req, status, type, x->sched_headers, "%s",
	                      message);
	client_done(x);
}

/* One event, one chunk; `name` NULL for an event without a name. */
static void write_named_event(struct exchange *x, const char *name, json_t *doc)
{
	char *text = json_dumps(doc, JSON_COMPACT);
	char *event = sl_xasprintf("%s%s%sdata: %s\n\n", name ? "event: " : "",
	                           name ? name : "", name ? "\n" : "", text);
	sl_http_stream_write(x->req, event, strlen(event));
	free(event);
	free(text);
}

static void write_event(struct exchange *x, json_t *doc)
{
	write_named_event(x, NULL, doc);
}

/*
 * An SSE event with an OpenAI-shaped error, then the end of the stream. The
 * streams of typed events (Anthropic's, the Responses API's) get it as an
 * "error" event of their own kind, which their clients read.
 */
static void end_stream_with_error(struct exchange *x, int code,
                                  const char *message)
{
	json_t *j = json_pack(
	    "{s:{s:s, s:s, s:i}}", "error", "message", message, "type",
	    code == 503 ? "unavailable_error" : "server_error", "code", code);
	bool typed = x->ep->stream_end == SL_END_EOF;
	if (typed)
		json_object_set_new(j, "type", json_string("error"));
	write_named_event(x, typed ? "error" : NULL, j);
	json_decref(j);
	note_totals(x);
	x->req->info.outcome = "failed";
	sl_http_stream_end(x->req);
	client_done(x);
}

static void relay_flush(struct exchange *x);

/* Whatever response the client is owed, for a stream sluice gives up on. */
static void fail(struct exchange *x, int status, const char *message)
{
	x->gave_up = true;
	/* What came before the failure, the client gets before it. */
	relay_flush(x);
	if (!x->req)
		return;
	if (!x->head_sent)
		respond_error(x, status,
		              status == 504   ? "timeout_error"
		              : status == 503 ? "unavailable_error"
		                              : "server_error",
		              message);
	else if (x->mode == MODE_SSE)
		end_stream_with_error(x, status, message);
	else {
		/* A plain body cut short can only be shown by closing. */
		note_totals(x);
		x->req->info.outcome = "failed";
		sl_http_abort(x->req);
		client_done(x);
	}
}

/* Whether llama-server was asked for a stream: its client leaving stops it. */
static bool upstream_streams(const struct exchange *x)
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
 *     stream within SL_STREAM_UPSTREAM_WINDOW_S (plain_as_stream):
 *     there its client leaving could not be noticed otherwise;
 *   - elsewhere it is relayed as it comes, which costs llama-server much
 *     less (a chunk per token, bench/RESULTS.md). When its client leaves
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

/* Whether a plain answer sent to `u` now is asked for as a stream. */
static bool plain_as_stream(const struct sl_app *app,
                            const struct sl_upstream *u)
{
	switch (app->cfg->stream_upstream) {
	case SL_STREAM_UPSTREAM_ON: return true;
	case SL_STREAM_UPSTREAM_OFF: return false;
	default:
		return u->streams > 0 ||
		       uv_now(&app->loop) < u->plain_streams_until_ms;
	}
}

/*
 * The exchange, validated to be relayed plain, is asked for as a stream
 * and assembled after all; it stays plain if its body cannot be spliced
 * (never: the body is sluice's own).
 */
static void ask_for_stream(struct exchange *x)
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
	uint64_t now = uv_now(&x->app->loop);
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
static void judge_left_plain(struct exchange *x)
{
	if (x->app->stopping)
		return;
	uint64_t after = uv_now(&x->app->loop) - x->left_ms;
	sl_debug("%s: the plain answer its client left ran on for %" PRIu64
	         " ms",
	         x->id, after);
	if (after >= SL_STREAM_UPSTREAM_LEFT_MS)
		note_plain_left(x);
}

/* The upstream of a left plain answer takes no new work for a while. */
static void quiet_start(struct exchange *x)
{
	uint64_t now = uv_now(&x->app->loop);
	x->quieting = true;
	x->quiet_end_ms = now + SL_STREAM_UPSTREAM_QUIET_MS;
	x->upstream->quiet++;
	/* The timer ends the spell (on_timer), unless it is due sooner. */
	uint64_t due = uv_timer_get_due_in(&x->timer);
	if (due == 0 || due > SL_STREAM_UPSTREAM_QUIET_MS)
		uv_timer_start(&x->timer, on_timer, SL_STREAM_UPSTREAM_QUIET_MS,
		               0);
}

/* The quiet spell is over; the caller lets the queue move. */
static void quiet_end(struct exchange *x)
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
static void upstream_let_go(struct exchange *x)
{
	struct sl_upstream *u = x->upstream;
	if (x->ep->watch) {
		u->watches--;
		return;
	}
	quiet_end(x);
	if (x->counts_stream) {
		x->counts_stream = false;
		u->streams--;
	}
	if (x->stream)
		u->plain_streams_until_ms =
		    uv_now(&x->app->loop) +
		    SL_STREAM_UPSTREAM_WINDOW_S * UINT64_C(1000);
	u->inflight--;
}

/*
 * The client left while the upstream had the request: stops the
 * generation as above and reads the answer on to its end. Returns false
 * when the request has not gone out whole yet (waiting for a connection,
 * connecting): closing it is then all it takes.
 */
static bool leave_upstream(struct exchange *x)
{
	bool plain = !upstream_streams(x);
	/*
	 * Reading on first: libcurl stops watching the socket of a transfer
	 * it paused, and learns it again (sl_curl_half_close) when resumed.
	 */
	bool held = x->coalesced;
	coalesce_unlink(x);
	if (x->paused || held)
		transfer_resume(x);
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
	x->left_ms = uv_now(&x->app->loop);
	sl_debug("%s: client left; %s and its answer read to its end", x->id,
	         x->resumable ? "its stream is resumable (kept by llama-server)"
	                      : "the upstream is told (its connection "
	                        "half-closed)");
	if (plain && x->mode == MODE_WAITING) {
		if (x->assemblable &&
		    x->app->cfg->stream_upstream == SL_STREAM_UPSTREAM_AUTO)
			plain_left(x);
		/* Beside a client's stream, a quiet spell could not help: its
		 * tokens keep coming. */
		if (x->upstream->streams == 0)
			quiet_start(x);
	}
	return true;
}

/* HTTP server: the client went away before its response was complete. */
static void on_client_abort(struct sl_http_request *req)
{
	struct exchange *x = req->handler_data;
	bool queued = sl_sched_queued(&x->item);
	note_totals(x);
	req->info.cancel_stage = queued ? "queued" : "inflight";
	client_done(x);
	if (queued) {
		sl_sched_remove(&x->model->sched, &x->item);
		sl_stats_queued(&x->app->stats, x->priority, -1);
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
	    (!upstream_streams(x) && x->mode == MODE_WAITING) || x->resumable;
	if (transfer_active(x) && x->ep->scheduled && !x->ep->watch &&
	    leave_upstream(x)) {
		req->info.ran_on = unread;
		return;
	}
	sl_debug("%s: client left; cancelling its request", x->id);
	transfer_abort(x);
	exchange_release(x);
}

/* HTTP server: the client caught up; let the upstream talk again. */
static void on_client_drain(struct sl_http_request *req)
{
	struct exchange *x = req->handler_data;
	if (!x->paused || !transfer_active(x))
		return;
	transfer_resume(x);
}

/* ---- watching the generation ---- */

static void token_arrived(struct exchange *x, uint64_t n)
{
	struct sl_stats *st = &x->app->stats;
	uint64_t now = sl_now_ns();
	if (!x->first_token_ns) {
		x->first_token_ns = now;
		double ttft = (double)(now - x->req->start_ns) / 1e9;
		x->req->info.ttft_ms = (int64_t)(ttft * 1000);
		sl_stats_first_token(st, x->priority, ttft);
	} else {
		sl_stats_inter_token(st,
		                     (double)(now - x->last_token_ns) / 1e9);
	}
	x->last_token_ns = now;
	x->tokens_seen += n;
	sl_stats_tokens(st, n, uv_now(&x->app->loop));
}

/* What one scanned event says about the generation: tokens, ends, counts. */
static void observe(struct exchange *x, const struct sl_event_facts *f)
{
	for (unsigned i = 0; i < f->arrivals; i++)
		token_arrived(x, f->per_arrival);
	if (f->has_count)
		x->tokens_final = (uint64_t)f->count;
	/* Native prompts each end with their own count: they add up. */
	if (f->has_prompt && f->prompt_tokens > 0)
		x->prompt_tokens =
		    x->ep->stream_end == SL_END_STOP
		        ? x->prompt_tokens + (uint64_t)f->prompt_tokens
		        : (uint64_t)f->prompt_tokens;
	if (x->ep->stream_end != SL_END_STOP)
		return;
	x->prompts = SL_MAX(x->prompts, (unsigned)f->index + 1);
	if (f->final) {
		x->stopped++;
		x->tokens_final += (uint64_t)f->tokens_predicted;
	}
}

/* The shape of the events an endpoint's stream carries. */
static enum sl_event_dialect dialect_of(const struct exchange *x)
{
	switch (x->ep->stream_end) {
	case SL_END_STOP: return SL_DIALECT_NATIVE;
	case SL_END_EOF: return SL_DIALECT_TYPED;
	default: return SL_DIALECT_OPENAI;
	}
}

/* ---- answering ---- */

static double ms_since(uint64_t start_ns)
{
	return (double)(sl_now_ns() - start_ns) / 1e6;
}

/*
 * /generate's totals, for its answer and its last event. `text` is a JSON
 * string (borrowed), or NULL for ""; kept as a JSON value, not a C string,
 * so that a NUL in it does not cut it short.
 */
static json_t *generate_totals(struct exchange *x, json_t *text, json_t *final)
{
	return json_pack("{s:s, s:o, s:I, s:s, s:I, s:I, s:i}", "id", x->id,
	                 "text", text ? json_incref(text) : json_string(""),
	                 "tokens", (json_int_t)x->tokens_seen, "finish_reason",
	                 sl_finish_reason(final), "queue_ms",
	                 (json_int_t)x->queue_ms, "latency_ms",
	                 (json_int_t)ms_since(x->req->start_ns), "batch_size",
	                 (int)x->batch_size);
}

static void respond_json(struct exchange *x, int status, json_t *doc)
{
	char *body = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY);
	sl_http_respond(x->req, status, SL_HTTP_JSON, x->sched_headers, body,
	                strlen(body));
	free(body);
	client_done(x);
}

/*
 * The assembled answer, in the shape the client's API promises: relayed
 * APIs get the assembler's bytes unchanged; /generate and /infer take the
 * content and totals from it, parsed once here.
 */
static void finish_answer(struct exchange *x)
{
	x->ended = true;
	size_t n;
	char *body = sl_assembler_result(x->answer, &n);
	if (!body) {
		respond_error(x, 502, "server_error",
		              "upstream ended its answer without any content");
		return;
	}
	note_totals(x);
	int status = sl_assembler_status(x->answer);
	/* An upstream error is relayed as written, whatever the API. */
	if (status != 200 || x->ep->api == SL_API_RELAY) {
		sl_http_respond(x->req, status, SL_HTTP_JSON, x->sched_headers,
		                body, n);
		free(body);
		client_done(x);
		return;
	}
	json_t *doc = json_loadb(body, n, EVENT_JSON_FLAGS, NULL);
	free(body);
	json_t *text = json_object_get(doc, "content");
	if (!json_is_string(text))
		text = NULL;
	json_t *out = NULL;
	if (x->ep->api == SL_API_GENERATE)
		out = generate_totals(x, text, doc);
	else
		out = json_pack("{s:o, s:s}", "response",
		                text ? json_incref(text) : json_string(""),
		                "id", x->id);
	respond_json(x, 200, out ? out : doc);
	json_decref(out);
	json_decref(doc);
}

/* The stream ended as it should: its end goes to the client. */
static void end_ok(struct exchange *x)
{
	x->ended = true;
	if (x->assemble) {
		finish_answer(x);
		return;
	}
	if (x->ep->api == SL_API_GENERATE) {
		json_t *totals = generate_totals(x, NULL, x->final);
		write_event(x, totals);
		json_decref(totals);
	}
	note_totals(x);
	/* The events held back and the body's end, in one write. */
	sl_http_stream_end_with(x->req, x->relay, x->relay_n);
	x->relay_n = 0;
	client_done(x);
}

static int assemble_event(struct exchange *x, const char *event, size_t len);

/* An error event from upstream: passed on in the client's form. */
static void upstream_error_event(struct exchange *x, const char *event,
                                 size_t len)
{
	x->ended = true;
	if (x->assemble) {
		/* The assembler answers with the error as llama-server wrote
		 * it. */
		if (assemble_event(x, event, len) != 0) {
			fail(x, 502,
			     "upstream sent an event sluice cannot read");
			return;
		}
		x->req->info.outcome = "failed";
		finish_answer(x);
		return;
	}
	sl_http_stream_write(x->req, event, len);
	note_totals(x);
	x->req->info.outcome = "failed";
	sl_http_stream_end(x->req);
	client_done(x);
}

/*
 * /generate streams: {"id", "text"} per piece of text. Its events are
 * rebuilt, so this API alone parses each event into objects.
 */
static void generate_event(struct exchange *x, const char *data, size_t len)
{
	json_t *doc = json_loadb(data, len, EVENT_JSON_FLAGS, NULL);
	if (json_is_true(json_object_get(doc, "stop"))) {
		json_decref(x->final);
		x->final = json_incref(doc);
	} else {
		json_t *content = json_object_get(doc, "content");
		if (json_is_string(content) &&
		    json_string_length(content) > 0) {
			json_t *ev = json_pack("{s:s, s:O}", "id", x->id,
			                       "text", content);
			write_event(x, ev);
			json_decref(ev);
		}
	}
	json_decref(doc);
}

/* An event's data, malloc'd; NULL for an event without data. */
static char *event_data(const char *event, size_t len)
{
	char probe[1];
	long n = sl_sse_event_data(event, len, probe, sizeof(probe));
	if (n < 0)
		return NULL;
	char *data = sl_xmalloc((size_t)n + 1);
	sl_sse_event_data(event, len, data, (size_t)n + 1);
	return data;
}

/*
 * The data of an event with one data line, as a slice of the event itself:
 * llama-server's events all are ("data: {...}", after an "event: " line in
 * Anthropic's and the Responses API's streams), and reading them in place
 * saves a copy per event. The value is what sl_sse_event_data() would give.
 * Returns false for an event with no data line or several.
 */
static bool single_data_line(const char *event, size_t len, const char **data,
                             size_t *data_len)
{
	/* llama-server's usual shape first, checked with memchr:
	 * "data: " VALUE LF LF, no other line break in VALUE. */
	if (len >= 8 && memcmp(event, "data: ", 6) == 0 &&
	    event[len - 2] == '\n' && event[len - 1] == '\n' &&
	    !memchr(event + 6, '\n', len - 8) &&
	    !memchr(event + 6, '\r', len - 8)) {
		*data = event + 6;
		*data_len = len - 8;
		return true;
	}
	const char *p = event, *end = event + len;
	bool found = false;
	while (p < end) {
		const char *eol = p;
		while (eol < end && *eol != '\r' && *eol != '\n')
			eol++;
		if (eol - p >= 5 && memcmp(p, "data:", 5) == 0) {
			if (found)
				return false;
			found = true;
			const char *v = p + 5;
			if (v < eol && *v == ' ')
				v++;
			*data = v;
			*data_len = (size_t)(eol - v);
		}
		p = eol;
		if (p < end && *p == '\r')
			p++;
		if (p < end && *p == '\n')
			p++;
	}
	return found;
}

/* Hands one event's data, as written, to the assembler. */
static int assemble_event(struct exchange *x, const char *event, size_t len)
{
	const char *data;
	size_t n;
	if (single_data_line(event, len, &data, &n))
		return sl_assembler_add(x->answer, data, n);
	char *copy = event_data(event, len);
	int rc = copy ? sl_assembler_add(x->answer, copy, strlen(copy)) : 0;
	free(copy);
	return rc;
}

/* Writes the relayed events held back so far, each its own chunk. */
static void relay_flush(struct exchange *x)
{
	if (x->relay_n > 0 && x->req)
		sl_http_stream_writev(x->req, x->relay, x->relay_n);
	x->relay_n = 0;
}

/*
 * Relays one event unchanged. An event inside the read being scanned is
 * held until the read is done (or SL_HTTP_WRITEV_MAX are held); one from
 * the framer's buffer (an event split across reads) is valid only now, so
 * it goes out at once, after those held before it.
 */
static void relay_event(struct exchange *x, const char *event, size_t len)
{
	uintptr_t from = (uintptr_t)x->feed_data, at = (uintptr_t)event;
	bool in_read =
	    x->feed_data && at >= from && at + len <= from + x->feed_len;
	if (!in_read || x->relay_n == SL_HTTP_WRITEV_MAX)
		relay_flush(x);
	if (!in_read) {
		sl_http_stream_write(x->req, event, len);
		return;
	}
	x->relay[x->relay_n++] = uv_buf_init((char *)event, (unsigned)len);
}

/*
 * One upstream event: recognised from its data (matched to the stream's
 * shape, else scanned without allocation for llama-server's token events),
 * then relayed, assembled or rebuilt.
 */
static int on_event(const char *event, size_t len, void *arg)
{
	struct exchange *x = arg;
	if (x->ended || x->gave_up || !x->req)
		return 0;
	const char *data = NULL;
	size_t n = 0;
	char *copy = NULL;
	if (!single_data_line(event, len, &data, &n)) {
		copy = event_data(event, len);
		data = copy;
		n = copy ? strlen(copy) : 0;
	}
	struct sl_jscan scan;
	scan.tok = scan.inline_tok;
	struct sl_event_facts facts = {.piece = -1};
	struct sl_event_match match = {0};
	if (data)
		sl_event_read(&x->shape, &scan, data, n, dialect_of(x), &facts,
		              &match);
	if (facts.error) {
		relay_flush(x);
		upstream_error_event(x, event, len);
		goto done;
	}
	if (facts.object)
		observe(x, &facts);
	/* A token event: matched to the stream's shape, or scanned. */
	if (match.piece || facts.piece >= 0)
		x->read_tokens++;
	else
		x->read_others++;
	if (x->assemble) {
		x->answer_bytes += len;
		if (x->answer_bytes > SL_PROXY_MAX_ANSWER)
			fail(x, 502, "upstream answer too large to assemble");
		else if (match.piece
		             ? sl_assembler_add_piece(x->answer, data, n,
		                                      &facts, &match) != 0
		             : facts.json && sl_assembler_add_scanned(
		                                 x->answer, &scan) != 0)
			fail(x, 502,
			     "upstream sent an event sluice cannot read");
	} else if (x->ep->api == SL_API_GENERATE) {
		if (facts.object)
			generate_event(x, data, n);
	} else {
		relay_event(x, event, len);
	}
	if (facts.done && x->req && !x->ended)
		end_ok(x);
done:
	sl_jscan_free(&scan);
	free(copy);
	return 0;
}

/* ---- header fields ---- */

/* RFC 9110, 5.6.2: the characters of a token, such as a field name. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool name_is(const char *name, size_t len, const char *literal)
{
	return strlen(literal) == len && strncasecmp(name, literal, len) == 0;
}

static bool name_has_prefix(const char *name, size_t len, const char *prefix)
{
	size_t n = strlen(prefix);
	return len >= n && strncasecmp(name, prefix, n) == 0;
}

/* ---- the client's headers that go upstream ---- */

/* The prefix of the headers /cors-proxy sends its target, less it. */
#define PROXY_HEADER_PREFIX "X-Llama-Server-Proxy-Header-"

/*
 * Whether the client's header `name` goes upstream on an endpoint that
 * passes `pass` (enum sl_pass); `stream`: the client asked for a stream.
 */
static bool request_header_passes(unsigned pass, const char *name, bool stream)
{
	size_t len = strlen(name);
	if ((pass & SL_PASS_CONVERSATION) && stream &&
	    name_is(name, len, "X-Conversation-Id"))
		return true;
	if ((pass & SL_PASS_TOOL) && (name_is(name, len, "X-Tool-Cwd") ||
	                              name_is(name, len, "X-Tool-Runtime") ||
	                              name_is(name, len, "X-Resp-Type")))
		return true;
	/* A bare prefix names no header: llama-server skips it too. */
	return (pass & SL_PASS_PROXY_HEADERS) &&
	       len > sizeof(PROXY_HEADER_PREFIX) - 1 &&
	       name_has_prefix(name, len, PROXY_HEADER_PREFIX);
}

/*
 * The client's header lines that go upstream ("Name: value\r\n" each, as
 * the client wrote them; its HTTP parser checked them), or NULL for none.
 * Bounded by --max-header-size. Malloc'd.
 */
static char *passed_request_headers(const struct sl_endpoint *ep,
                                    const struct sl_http_request *req,
                                    bool stream)
{
	if (!ep->pass)
		return NULL;
	size_t size = 1;
	for (unsigned i = 0; i < req->n_headers; i++) {
		const struct sl_http_header *h = &req->headers[i];
		if (request_header_passes(ep->pass, h->name, stream))
			size += strlen(h->name) + 2 + h->value_len + 2;
	}
	if (size == 1)
		return NULL;
	struct sl_join j = {.p = sl_xmalloc(size), .cap = size};
	for (unsigned i = 0; i < req->n_headers; i++) {
		const struct sl_http_header *h = &req->headers[i];
		if (!request_header_passes(ep->pass, h->name, stream))
			continue;
		sl_join_str(&j, h->name);
		sl_join_str(&j, ": ");
		sl_join_mem(&j, h->value, h->value_len);
		sl_join_str(&j, "\r\n");
	}
	return j.p;
}

/* ---- the upstream's response headers ---- */

/*
 * Whether a field is not passed on: hop-by-hop (RFC 9110, 7.6.1: they
 * describe the upstream connection, not the answer), or one sluice writes
 * itself (its own framing, Server, Date, CORS and scheduling headers; and
 * for a stream the cache headers it adds).
 */
static bool header_always_withheld(const char *name, size_t len)
{
#define NAME(s)                                                                \
	{                                                                      \
		s, sizeof(s) - 1                                               \
	}
	/* With their lengths: this runs for every header line. */
	static const struct {
		const char *name;
		size_t len;
	} withheld[] = {
	    NAME("Connection"),
	    NAME("Keep-Alive"),
	    NAME("TE"),
	    NAME("Trailer"),
	    NAME("Transfer-Encoding"),
	    NAME("Upgrade"),
	    NAME("Server"),
	    NAME("Date"),
	    NAME("Content-Length"),
	    NAME("Content-Type"),
	    NAME("X-Request-Id"),
	    NAME("X-Queue-Ms"),
	    NAME("X-Batch-Size"),
	    NAME("Retry-After"),
	    NAME("retry-after-ms"),
	};
#undef NAME
	for (size_t i = 0; i < SL_ARRAY_SIZE(withheld); i++)
		if (withheld[i].len == len &&
		    strncasecmp(name, withheld[i].name, len) == 0)
			return true;
	return name_has_prefix(name, len, "Proxy-") ||
	       name_has_prefix(name, len, "Access-Control-");
}

/* The rest, known once the whole head is in: the mode and Connection. */
static bool header_withheld(const struct exchange *x, const char *name,
                            size_t len)
{
	if (x->mode == MODE_SSE && (name_is(name, len, "Cache-Control") ||
	                            name_is(name, len, "X-Accel-Buffering")))
		return true;
	/* The names the upstream's Connection header lists. */
	const char *p = x->connection;
	while (*p) {
		while (*p == ',' || *p == ' ' || *p == '\t')
			p++;
		size_t n = strcspn(p, ", \t");
		if (n && n == len && strncasecmp(p, name, len) == 0)
			return true;
		p += n;
	}
	return false;
}

/*
 * CURLOPT_HEADERFUNCTION: one line of the upstream's head. The lines worth
 * keeping are stored; which of them reach the client is decided once the
 * whole head is in (start_response), since a Connection header may come
 * last. A line that is malformed, overlong or holds bytes a head may not
 * carry is dropped, never the answer: the upstream's headers are extras.
 */
static size_t on_upstream_header(char *line, size_t size, size_t n, void *arg)
{
	struct exchange *x = arg;
	size_t len = size * n;
	if (x->mode != MODE_WAITING)
		return len; /* trailers after a chunked body */
	if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
		/* A new head (after a 1xx): only the last one counts. */
		x->passed_len = 0;
		x->connection[0] = '\0';
		x->connection_overflow = false;
		return len;
	}
	size_t end = len;
	while (end && (line[end - 1] == '\r' || line[end - 1] == '\n'))
		end--;
	const char *colon = memchr(line, ':', end);
	if (!colon || colon == line)
		return len; /* the blank line, a fold, or junk */
	size_t name_len = (size_t)(colon - line);
	for (size_t i = 0; i < name_len; i++)
		if (!is_tchar((unsigned char)line[i]))
			return len;
	bool connection = name_is(line, name_len, "Connection");
	/* Most of llama-server's own lines: not even read further. */
	if (!connection && header_always_withheld(line, name_len))
		return len;
	const char *v = colon + 1;
	while (v < line + end && (*v == ' ' || *v == '\t'))
		v++;
	size_t v_len = (size_t)(line + end - v);
	while (v_len && (v[v_len - 1] == ' ' || v[v_len - 1] == '\t'))
		v_len--;
	if (v_len > SL_PROXY_PASSED_VALUE_MAX)
		return len;
	char value[SL_PROXY_PASSED_VALUE_MAX + 1];
	memcpy(value, v, v_len);
	value[v_len] = '\0';
	if (!sl_http_field_value_ok(value, SL_PROXY_PASSED_VALUE_MAX))
		return len;
	if (connection) {
		size_t have = strlen(x->connection);
		if (have + 1 + v_len > SL_PROXY_CONNECTION_MAX) {
			sl_debug(
			    "%s: upstream's Connection list over %u bytes: "
			    "none of its headers is passed on",
			    x->id, SL_PROXY_CONNECTION_MAX);
			x->connection_overflow = true;
			return len;
		}
		char *out = x->connection + have;
		if (have)
			*out++ = ',';
		memcpy(out, value, v_len + 1);
		return len;
	}
	size_t need = name_len + 2 + v_len + 2;
	if (x->passed_len + need > SL_PROXY_PASSED_HEADERS_MAX) {
		sl_debug("%s: upstream header %.*s dropped: over %u bytes of "
		         "passed headers",
		         x->id, (int)name_len, line,
		         SL_PROXY_PASSED_HEADERS_MAX);
		return len;
	}
	/* Grown line by line: an answer holds what it passes, no more. */
	x->passed = sl_xrealloc(x->passed, x->passed_len + need + 1);
	char *out = x->passed + x->passed_len;
	memcpy(out, line, name_len);
	memcpy(out + name_len, ": ", 2);
	memcpy(out + name_len + 2, value, v_len);
	memcpy(out + name_len + 2 + v_len, "\r\n", 2);
	x->passed_len += need;
	x->passed[x->passed_len] = '\0';
	return len;
}

/*
 * The head's extra lines for the client: the upstream's passed headers
 * (now that the mode is known), then `own`. Malloc'd.
 */
static char *response_extras(const struct exchange *x, const char *own)
{
	size_t cap = x->passed_len + strlen(own) + 1;
	char *out = sl_xmalloc(cap);
	size_t k = 0;
	size_t passed = x->connection_overflow ? 0 : x->passed_len;
	for (size_t i = 0; i < passed;) {
		const char *line = x->passed + i;
		const char *eol = strstr(line, "\r\n");
		size_t line_len = (size_t)(eol - line) + 2;
		size_t name_len = (size_t)(strchr(line, ':') - line);
		if (!header_withheld(x, line, name_len)) {
			memcpy(out + k, line, line_len);
			k += line_len;
		}
		i += line_len;
	}
	memcpy(out + k, own, strlen(own) + 1);
	return out;
}

/*
 * The first byte: answer the client's head in the right mode. Returns
 * false when the upstream's head cannot be relayed (the client got 502).
 */
static bool start_response(struct exchange *x)
{
	const struct sl_config *cfg = x->app->cfg;
	long status = upstream_status(x);
	char *ctype = NULL;
	curl_off_t length = -1;
	if (x->native) {
		ctype = x->h1.content_type;
		length = x->h1.content_length;
	} else {
		curl_easy_getinfo(x->transfer.easy, CURLINFO_CONTENT_TYPE,
		                  &ctype);
		curl_easy_getinfo(x->transfer.easy,
		                  CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
	}
	/* Both go into the client's head: only sane values do. */
	if (status < 200 || status > 599) {
		char message[96];
		snprintf(message, sizeof(message),
		         "upstream answered with status %ld", status);
		fail(x, 502, message);
		return false;
	}
	if (ctype && !sl_http_field_value_ok(ctype, SL_HTTP_CONTENT_TYPE_MAX)) {
		fail(x, 502,
		     "upstream answered with an invalid or overlong "
		     "Content-Type");
		return false;
	}
	/* From now on the upstream may not fall silent for long. */
	uv_timer_start(&x->timer, on_timer, cfg->upstream_idle_timeout_ms, 0);
	if ((x->stream || x->assemble) && status == 200 && ctype &&
	    strncmp(ctype, "text/event-stream", 17) == 0) {
		x->mode = MODE_SSE;
		sl_sse_init(&x->sse, SL_SSE_MAX_EVENT);
		if (x->assemble)
			return true; /* answered once the stream is complete */
		x->head_sent = true;
		char own[sizeof(x->sched_headers) + 64];
		snprintf(own, sizeof(own),
		         "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
		         "%s",
		         x->sched_headers);
		char *extra = response_extras(x, own);
		sl_http_stream_start(x->req, 200, "text/event-stream", extra,
		                     -1);
		free(extra);
		return true;
	}
	x->mode = MODE_BODY;
	x->head_sent = true;
	/*
	 * A generation's answer is kept whole for its counts; that of another
	 * slot user (embeddings, rerank) only in part, for the usage that
	 * leads its vectors or results.
	 */
	x->keep = status == 200 &&
	          (x->ep->stream_end != SL_END_NONE || x->ep->scheduled);
	x->kept.prefix = x->ep->stream_end == SL_END_NONE;
	if (status >= 400)
		x->req->info.outcome = "failed"; /* llama-server said no */
	char *extra = response_extras(x, x->sched_headers);
	sl_http_stream_start(x->req, (int)status,
	                     ctype ? ctype : "application/octet-stream", extra,
	                     length);
	free(extra);
	return true;
}

/*
 * Whether the upstream's 5xx, before any byte of it went to the client,
 * is kept from the client so that the request is sent again. Only a
 * queued generation request is, since sluice owns its body and its
 * place; one for a named upstream (?upstream=) may go to no other.
 */
static bool hold_5xx(struct exchange *x)
{
	long status = upstream_status(x);
	if (status < 500 || status > 599 || !x->req || x->head_sent ||
	    x->pinned || !x->ep->scheduled ||
	    x->retries >= x->app->cfg->retries)
		return false;
	x->failed_status = status;
	return true;
}

/* A relayed plain answer's bytes, kept to be counted at its end. */
static void keep_answer(struct exchange *x, const char *data, size_t len)
{
	if (!x->keep || x->kept.over)
		return;
	if (x->kept.prefix)
		len = SL_MIN(len, SL_PROXY_USAGE_PREFIX_MAX - x->kept.len);
	if (len == 0)
		return;
	if (len > SL_PROXY_ANSWER_KEEP_MAX - x->kept.len) {
		sl_debug("%s: answer past %u bytes: its tokens go uncounted",
		         x->id, SL_PROXY_ANSWER_KEEP_MAX);
		x->kept.over = true;
		free(x->kept.p);
		x->kept.p = NULL;
		x->kept.len = x->kept.cap = 0;
		return;
	}
	size_t need = x->kept.len + len;
	if (need > x->kept.cap) {
		size_t cap =
		    SL_MAX(need, SL_MAX(x->kept.cap * 2,
		                        (size_t)SL_PROXY_ANSWER_KEEP_MIN));
		x->kept.cap = SL_MIN(cap, (size_t)SL_PROXY_ANSWER_KEEP_MAX);
		x->kept.p = sl_xrealloc(x->kept.p, x->kept.cap);
	}
	memcpy(x->kept.p + x->kept.len, data, len);
	x->kept.len = need;
}

/*
 * The prompt tokens of an answer kept in part (embeddings, rerank): the
 * OpenAI forms' usage, which llama-server writes before the vectors or
 * results. Its native /embedding answer has none, and goes uncounted.
 */
static void count_leading_usage(struct exchange *x)
{
	static const struct sl_jscan_key usage = SL_JSCAN_KEY("usage");
	size_t start, end;
	if (!sl_jscan_leading_member(x->kept.p, x->kept.len, &usage, &start,
	                             &end))
		return;
	struct sl_jscan s;
	if (sl_jscan_parse(&s, x->kept.p + start, end - start,
	                   (unsigned)(end - start) + 1) == 0) {
		long n = sl_jscan_small_uint(
		    &s, sl_jscan_get(&s, 0, "prompt_tokens"));
		if (n > 0)
			x->prompt_tokens = (uint64_t)n;
	}
	sl_jscan_free(&s);
}

/*
 * A relayed plain answer's token counts: its usage (OpenAI, Anthropic,
 * Responses) or tokens_predicted and tokens_evaluated (native), read as
 * from a stream's last event. A native answer to several prompts (an
 * array) goes uncounted.
 */
static void count_answer(struct exchange *x)
{
	if (!x->keep || x->kept.over)
		return;
	if (x->kept.prefix) {
		count_leading_usage(x);
		return;
	}
	struct sl_jscan s;
	struct sl_event_facts f;
	sl_event_scan_answer(&s, x->kept.p, x->kept.len, dialect_of(x), &f);
	if (f.has_count && f.count > 0)
		x->tokens_final = (uint64_t)f.count;
	if (f.final && f.tokens_predicted > 0)
		x->tokens_final = (uint64_t)f.tokens_predicted;
	if (f.has_prompt && f.prompt_tokens > 0)
		x->prompt_tokens = (uint64_t)f.prompt_tokens;
	/*
	 * Time to first token: llama-server times the generation from its
	 * first token to the answer (timings.predicted_ms), so the answer's
	 * arrival less that is when the first token came.
	 */
	double predicted_ms;
	int ms =
	    sl_jscan_get(&s, sl_jscan_get(&s, 0, "timings"), "predicted_ms");
	if (x->tokens_final > 0 && sl_jscan_number(&s, ms, &predicted_ms) &&
	    predicted_ms >= 0) {
		double took = (double)(sl_now_ns() - x->req->start_ns) / 1e9;
		double ttft = SL_MAX(took - predicted_ms / 1000, 0.0);
		x->req->info.ttft_ms = (int64_t)(ttft * 1000);
		sl_stats_first_token(&x->app->stats, x->priority, ttft);
	}
	sl_jscan_free(&s);
}

/*
 * The end of one upstream read: the events held from it go out, and a
 * stream's head with them even if no whole event came yet.
 */
static void flush_read(struct exchange *x)
{
	relay_flush(x);
	if (x->req && x->head_sent)
		sl_http_flush(x->req);
}

/*
 * The client reads slower than the upstream writes: the transfer stops
 * until the client has caught up (on_client_drain).
 */
static void pause_for_client(struct exchange *x)
{
	x->paused = true;
	sl_http_want_drain(x->req);
	sl_debug("%s: its client reads slower than the upstream writes: "
	         "reading paused until it catches up",
	         x->id);
}

/* CURLOPT_WRITEFUNCTION: the upstream's body, as it arrives. */
static size_t on_upstream_data(char *data, size_t size, size_t n, void *arg)
{
	struct exchange *x = arg;
	size_t len = size * n;
	/*
	 * With the client side over, bytes after the stream's end are taken;
	 * otherwise sluice gave up on this answer, and 0 ends the transfer so
	 * that llama-server stops generating it.
	 */
	if (!x->req) {
		/* A left answer read to its end: its bytes keep it alive. */
		x->last_byte_ms = uv_now(&x->app->loop);
		x->left_bytes = true;
		return x->gave_up ? 0 : len;
	}
	/* Back-pressure: leave the bytes with libcurl until the client reads
	 * (the native client pauses after the bytes, on_native_body). */
	if (!x->native && sl_http_backlog(x->req) > SL_HTTP_BACKLOG_HIGH) {
		pause_for_client(x);
		return CURL_WRITEFUNC_PAUSE;
	}
	x->last_byte_ms = uv_now(&x->app->loop);
	if (x->mode == MODE_WAITING && hold_5xx(x))
		return 0; /* ends the transfer; on_transfer_done resends */
	if (x->mode == MODE_WAITING && !start_response(x))
		return 0;
	if (x->mode == MODE_BODY) {
		keep_answer(x, data, len);
		sl_http_stream_write(x->req, data, len);
		return len;
	}
	x->feed_data = data;
	x->feed_len = len;
	int rc = sl_sse_feed(&x->sse, data, len, on_event, x);
	/* The native client says when its read is done: the events wait
	 * until then (on_native_read_end). */
	if (!x->native)
		flush_read(x);
	x->feed_data = NULL;
	if (rc != 0) {
		fail(x, 502, "upstream sent an oversized event");
		return 0;
	}
	return x->gave_up ? 0 : len;
}

/* ---- the end of a transfer ---- */

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
 * last event was read (sl_sse_finish in on_transfer_done).
 */
static void finish_client(struct exchange *x, CURLcode result)
{
	/* An empty body: the head, unless it cannot be relayed. */
	if (result == CURLE_OK && x->mode == MODE_WAITING && !start_response(x))
		return;
	if (result == CURLE_OK && x->mode == MODE_BODY) {
		count_answer(x);
		note_totals(x);
		sl_http_stream_end(x->req);
		client_done(x);
		return;
	}
	if (result == CURLE_OK && x->mode == MODE_SSE) {
		if (native_stream_complete(x))
			end_ok(x);
		else
			fail(x, 502,
			     "upstream closed the stream before its end");
		return;
	}
	char message[CURL_ERROR_SIZE + 64];
	snprintf(message, sizeof(message), "upstream request failed: %s",
	         x->error[0] ? x->error : curl_easy_strerror(result));
	fail(x, result == CURLE_OPERATION_TIMEDOUT ? 504 : 502, message);
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
	coalesce_unlink(x);
	x->read_tokens = x->read_others = 0;
	x->tick_read = x->tick_empty = false;
	x->read_end_ns = 0;
	sl_curl_easy_done(&x->app->curl, x->transfer.easy);
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
	x->prompt_tokens = 0;
	x->prompts = x->stopped = 0;
	upstream_let_go(x);
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
 * 5xx held by hold_5xx) uses up one of --retries, since llama-server may
 * have started working on it. Returns true when the exchange was requeued
 * (or refused because the queue was full).
 */
static bool try_again(struct exchange *x, CURLcode result)
{
	struct sl_app *app = x->app;
	/* One for a named upstream (?upstream=) may go to no other. */
	if (!x->req || x->head_sent || x->ended || x->gave_up || x->pinned)
		return false;
	bool refused = result == CURLE_COULDNT_CONNECT;
	enum sl_retry_reason reason;
	if (x->failed_status)
		reason = SL_RETRY_5XX; /* hold_5xx checked the count */
	else if (!connection_failed(x, result))
		return false;
	else if (refused)
		reason = SL_RETRY_REFUSED;
	else if (x->retries < app->cfg->retries)
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
	uint64_t now = uv_now(&app->loop);
	if (sl_sched_requeue(&x->model->sched, &x->item, now) != 0) {
		uint64_t retry = sl_sched_retry_after_ms(&x->model->sched, now);
		snprintf(x->sched_headers, sizeof(x->sched_headers),
		         "Retry-After: %u\r\nretry-after-ms: %llu\r\n",
		         sl_sched_retry_after_s(retry),
		         (unsigned long long)retry);
		x->req->info.reject_reason = "queue_full";
		respond_error(x, 503, "unavailable_error",
		              "the upstream failed and sluice's queue is full "
		              "of more urgent requests");
		exchange_release(x);
		sl_app_kick_scheduler(app); /* the slot it held is free */
		return true;
	}
	sl_stats_queued(&app->stats, x->priority, +1);
	sl_app_kick_scheduler(app);
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
	long status = x->failed_status ? x->failed_status : upstream_status(x);
	if (status >= 500) {
		snprintf(why, sizeof(why), "%s: it answered %ld", x->id,
		         status);
		sl_upstream_request_failed(x->upstream, why);
	} else {
		sl_upstream_request_ok(x->upstream);
	}
}

static void on_transfer_done(struct sl_transfer *t, CURLcode result)
{
	struct exchange *x = t->data;
	uv_timer_stop(&x->timer);
	/* The stream's last event may be what ends it. */
	if (x->req && result == CURLE_OK && x->mode == MODE_SSE)
		sl_sse_finish(&x->sse, on_event, x);
	/* An empty 5xx body: no byte came, so hold it here. */
	if (x->req && result == CURLE_OK && x->mode == MODE_WAITING)
		hold_5xx(x);
	note_outcome(x, result);
	if (try_again(x, result))
		return;
	if (result != CURLE_OK && !x->ended && !x->gave_up && !x->left)
		sl_warn("%s: upstream %s%s: %s", x->id, x->upstream->url,
		        x->target,
		        x->error[0] ? x->error : curl_easy_strerror(result));
	if (x->req)
		finish_client(x, result);
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

static void on_native_done(struct sl_h1_request *r, enum sl_h1_result result)
{
	struct exchange *x = r->data;
	if (r->error[0])
		snprintf(x->error, sizeof(x->error), "%s", r->error);
	on_transfer_done(&x->transfer, native_result(result));
}

static int on_native_header(struct sl_h1_request *r, const char *line,
                            size_t len)
{
	on_upstream_header((char *)line, 1, len, r->data);
	return SL_H1_GO_ON;
}

/*
 * The native client's body bytes. They are taken whole, even by a slow
 * client; then, at the read's end, reading stops until the client has
 * caught up, so that at most one read (SL_H1_READ_BUF) more than the
 * high-water mark waits.
 */
static int on_native_body(struct sl_h1_request *r, const char *data, size_t len)
{
	struct exchange *x = r->data;
	if (on_upstream_data((char *)data, 1, len, x) != len)
		return SL_H1_STOP;
	return SL_H1_GO_ON;
}

static void coalesce_hold(struct exchange *x);

/*
 * A tick of the coalescing timer: each stream that was on the list before
 * it is read once, in the order they came. What a read relays decides, in
 * maybe_coalesce(), whether the stream waits for the next tick (put back
 * at the list's end with this tick's number, so this loop stops before
 * it). A tick that finds nothing keeps the stream for one more: at about
 * one token per window, ticks and tokens drift in and out of step, and an
 * empty read costs less than watching the socket again and leaving it
 * once more. A second empty tick in a row means the stream has slowed: it
 * is watched again, as are the streams paused for their client.
 */
static void on_coalesce_timer(uv_timer_t *t)
{
	struct sl_app *app = t->data;
	uint64_t tick = ++app->coalesce_tick;
	struct exchange *x;
	while ((x = app->coalesced) != NULL && x->co_tick != tick) {
		coalesce_unlink(x);
		if (x->paused || !transfer_active(x))
			continue; /* transfer_resume() reads on */
		x->tick_read = true;
		/* Read: x may be over now, and is not touched again. */
		if (sl_h1_read_paused(&x->h1) == SL_H1_READ_DONE)
			continue;
		x->tick_read = false;
		if (!x->tick_empty && sl_sched_depth(&x->model->sched) == 0) {
			x->tick_empty = true;
			coalesce_hold(x);
		} else {
			x->tick_empty = false;
			sl_h1_resume(&x->h1);
		}
	}
	if (app->coalesced)
		uv_timer_start(&app->coalesce_timer, on_coalesce_timer,
		               app->cfg->stream_coalesce_ms, 0);
}

/*
 * After a read of a stream: whether its transfer stays paused until the
 * coalescing timer's next tick, which reads it then. Only after a read of
 * plain tokens alone, and only while they come about as fast as the
 * window or faster (two or more in the read, or the read within two
 * windows of the last; a tick's read that found any). A stream at a
 * human pace is never held, and one that slows down is watched again
 * (on_coalesce_timer). Held streams cost one wakeup per tick between
 * them, and no system call beyond their reads and writes: the first hold
 * leaves a socket that libuv drops from epoll at its next arrival, and it
 * stays dropped while ticks read it. Any other event (the first, with the
 * role; the finish, the usage; an error) is followed by no wait: a finish
 * that came during a wait goes out at the tick, and what follows it (the
 * end of the stream, the slot it frees) as soon as llama-server sends it.
 * Nor is a stream held while requests for its model wait in the queue:
 * the end of a generation could come during the wait, and its slot would
 * then sit idle until the wait is over.
 */
static bool holds(struct exchange *x, unsigned tokens, unsigned others,
                  bool tick_read)
{
	uint64_t window_ms = x->app->cfg->stream_coalesce_ms;
	if (tokens == 0 || others > 0 || window_ms == 0 ||
	    x->mode != MODE_SSE || !x->req || x->ended || x->gave_up ||
	    x->paused || x->coalesced || !transfer_active(x) ||
	    sl_sched_depth(&x->model->sched) > 0)
		return false;
	uint64_t now = sl_now_ns(), last = x->read_end_ns;
	x->read_end_ns = now;
	return tick_read || tokens >= 2 ||
	       (last != 0 && now - last < window_ms * 2000000);
}

static void maybe_coalesce(struct exchange *x)
{
	unsigned tokens = x->read_tokens, others = x->read_others;
	bool tick_read = x->tick_read;
	x->read_tokens = x->read_others = 0;
	x->tick_read = false;
	if (!holds(x, tokens, others, tick_read)) {
		/* Read by a tick, and not held again: watched from now on. */
		if (tick_read && !x->paused && transfer_active(x))
			sl_h1_resume(&x->h1);
		return;
	}
	x->tick_empty = false;
	coalesce_hold(x);
}

/* Puts x at the end of the list, paused until the timer's next tick. */
static void coalesce_hold(struct exchange *x)
{
	struct sl_app *app = x->app;
	x->coalesced = true;
	x->co_tick = app->coalesce_tick;
	x->co_next = NULL;
	x->co_prev = app->coalesced_last;
	if (app->coalesced_last)
		app->coalesced_last->co_next = x;
	else
		app->coalesced = x;
	app->coalesced_last = x;
	sl_h1_pause(&x->h1);
	if (!uv_is_active((uv_handle_t *)&app->coalesce_timer))
		uv_timer_start(&app->coalesce_timer, on_coalesce_timer,
		               app->cfg->stream_coalesce_ms, 0);
}

/*
 * The native client's read is done: what was held of it is written, and
 * reading stops if the client has fallen behind.
 */
static void on_native_read_end(struct sl_h1_request *r)
{
	struct exchange *x = r->data;
	flush_read(x);
	if (x->req && !x->paused &&
	    sl_http_backlog(x->req) > SL_HTTP_BACKLOG_HIGH) {
		pause_for_client(x);
		sl_h1_pause(r);
	}
	maybe_coalesce(x);
}

/*
 * Whether the answer is a relayed plain one of a generation: it comes
 * whole once generated, so its first byte is its last.
 */
static bool relayed_generation(const struct exchange *x)
{
	return !upstream_streams(x) && x->ep->stream_end != SL_END_NONE;
}

/* Time allowed for the first response byte, and the option that set it. */
static uint64_t first_byte_ms(const struct exchange *x, const char **option)
{
	const struct sl_config *cfg = x->app->cfg;
	bool plain = relayed_generation(x);
	if (option)
		*option =
		    plain ? "--upstream-plain-timeout" : "--upstream-timeout";
	return plain ? cfg->upstream_plain_timeout_ms
	             : cfg->upstream_timeout_ms;
}

/* The first-byte or idle deadline. */
static void on_timer(uv_timer_t *t)
{
	struct exchange *x = t->data;
	const struct sl_config *cfg = x->app->cfg;
	/* A watch lasts as long as the upstream and the client want. */
	if (!transfer_active(x) || x->ep->watch)
		return;
	uint64_t now = uv_now(&x->app->loop);
	if (x->quieting && now >= x->quiet_end_ms) {
		sl_debug("%s: the plain answer its client left runs on after "
		         "%u ms: its upstream takes new work again",
		         x->id, SL_STREAM_UPSTREAM_QUIET_MS);
		quiet_end(x);
		sl_app_kick_scheduler(x->app);
	}
	/*
	 * Early for a quiet spell's end: the first byte's time is not up.
	 * A left answer whose bytes came after its client left is timed
	 * between bytes, as an answer under way is.
	 */
	bool waiting = x->mode == MODE_WAITING && !x->left_bytes;
	if (waiting && !x->paused) {
		uint64_t due = x->dispatched_ms + first_byte_ms(x, NULL);
		if (now < due) {
			if (x->quieting)
				due = SL_MIN(due, x->quiet_end_ms);
			uv_timer_start(t, on_timer, due - now, 0);
			return;
		}
	}
	if (!waiting || x->paused) {
		uint64_t quiet = x->paused ? 0 : now - x->last_byte_ms;
		if (quiet < cfg->upstream_idle_timeout_ms) {
			uv_timer_start(&x->timer, on_timer,
			               cfg->upstream_idle_timeout_ms - quiet,
			               0);
			return;
		}
	}
	const char *option;
	uint64_t first_ms = first_byte_ms(x, &option);
	if (waiting)
		snprintf(x->error, sizeof(x->error),
		         "no answer within %s (%.1f s)", option,
		         (double)first_ms / 1000.0);
	else
		snprintf(x->error, sizeof(x->error),
		         "upstream silent for --upstream-idle-timeout (%.1f s)",
		         (double)cfg->upstream_idle_timeout_ms / 1000.0);
	transfer_abort(x);
	sl_warn("%s: %s", x->id, x->error);
	if (x->req)
		finish_client(x, CURLE_OPERATION_TIMEDOUT);
	exchange_release(x);
}

/* ---- lifetime ---- */

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
	sl_app_model_release(x->model);
	free(x);
}

/* Frees the exchange once the client side and the transfer are both over. */
static void exchange_release(struct exchange *x)
{
	struct sl_app *app = x->app;
	if (x->req || transfer_active(x) || sl_sched_queued(&x->item) ||
	    x->fanout || x->released)
		return;
	x->released = true;
	coalesce_unlink(x);
	if (x->left_plain)
		judge_left_plain(x);
	if (x->prev)
		x->prev->next = x->next;
	else
		app->exchange_list = x->next;
	if (x->next)
		x->next->prev = x->prev;
	app->exchanges--;
	if (x->ep->watch)
		app->watches--;
	sl_curl_easy_done(&app->curl, x->transfer.easy);
	curl_slist_free_all(x->headers);
	uv_close((uv_handle_t *)&x->timer, on_timer_closed);
	if (x->upstream) {
		if (x->left)
			sl_debug("%s: the answer its client left ended %" PRIu64
			         " ms after it left",
			         x->id, uv_now(&app->loop) - x->left_ms);
		/* A slot is free: the queue's top may go. */
		upstream_let_go(x);
		sl_app_model_used(x->model);
		sl_app_kick_scheduler(app);
	}
	sl_app_maybe_drained(app);
}

void sl_proxy_end_all(struct sl_app *app)
{
	struct exchange *x, *next;
	/* The queue first, so that no slot freed below dispatches from it. */
	for (x = app->exchange_list; x; x = next) {
		next = x->next;
		if (!sl_sched_queued(&x->item))
			continue;
		sl_sched_remove(&x->model->sched, &x->item);
		sl_stats_queued(&app->stats, x->priority, -1);
		snprintf(x->sched_headers, sizeof(x->sched_headers), "%s",
		         SL_PROXY_UNAVAILABLE_RETRY);
		respond_error(x, 503, "unavailable_error",
		              SL_PROXY_DRAIN_MESSAGE);
		exchange_release(x);
	}
	for (x = app->exchange_list; x; x = next) {
		next = x->next;
		transfer_abort(x);
		uv_timer_stop(&x->timer);
		/*
		 * Nothing sent yet: 503. A started stream: an error event and
		 * its end. A plain body already half relayed can only be cut,
		 * which fail() does by closing the connection.
		 */
		if (x->fanout) {
			sl_fanout_free(x->fanout);
			x->fanout = NULL;
		}
		if (x->req && !x->head_sent)
			snprintf(x->sched_headers, sizeof(x->sched_headers),
			         "%s", SL_PROXY_UNAVAILABLE_RETRY);
		fail(x, 503, SL_PROXY_DRAIN_MESSAGE);
		exchange_release(x);
	}
}

void sl_proxy_end_watches(struct sl_app *app, const struct sl_upstream *u,
                          const char *why)
{
	struct exchange *x, *next;
	for (x = app->exchange_list; x; x = next) {
		next = x->next;
		if (!x->ep->watch || (u && x->upstream != u))
			continue;
		transfer_abort(x);
		uv_timer_stop(&x->timer);
		if (x->req && x->head_sent) {
			/* What was relayed stands: the answer just ends. */
			note_totals(x);
			sl_http_stream_end(x->req);
			client_done(x);
		} else if (x->req) {
			snprintf(x->sched_headers, sizeof(x->sched_headers),
			         "%s", SL_PROXY_UNAVAILABLE_RETRY);
			respond_error(x, 503, "unavailable_error", why);
		}
		exchange_release(x);
	}
}

void sl_proxy_fail_queued(struct sl_model *m, const char *message)
{
	struct sl_app *app = m->app;
	struct exchange *x, *next;
	for (x = app->exchange_list; x; x = next) {
		next = x->next;
		if (x->model != m || !sl_sched_queued(&x->item))
			continue;
		sl_sched_remove(&m->sched, &x->item);
		sl_stats_queued(&app->stats, x->priority, -1);
		snprintf(x->sched_headers, sizeof(x->sched_headers), "%s",
		         SL_PROXY_UNAVAILABLE_RETRY);
		respond_error(x, 503, "unavailable_error", message);
		exchange_release(x);
	}
}

void sl_proxy_abort_all(struct sl_app *app)
{
	while (app->exchange_list) {
		struct exchange *x = app->exchange_list;
		if (sl_sched_queued(&x->item)) {
			sl_sched_remove(&x->model->sched, &x->item);
			sl_stats_queued(&app->stats, x->priority, -1);
		}
		transfer_abort(x);
		if (x->fanout) {
			sl_fanout_free(x->fanout);
			x->fanout = NULL;
		}
		uv_timer_stop(&x->timer);
		client_done(x); /* every connection is closed by now */
		exchange_release(x);
	}
}

/* ---- starting ---- */

/*
 * The exchange takes a slot of `u`, as a stream or not ("Leaving"); a
 * watch takes none.
 */
static void upstream_take(struct exchange *x, struct sl_upstream *u)
{
	x->upstream = u;
	x->dispatched_ms = uv_now(&x->app->loop);
	if (x->ep->watch) {
		u->watches++;
		return;
	}
	u->inflight++;
	if (x->assemblable && !x->assemble && plain_as_stream(x->app, u))
		ask_for_stream(x);
	/* Only clients' streams: plain answers assembled from streams where
	 * clients' ran would keep one another so for ever. */
	if (x->stream) {
		x->counts_stream = true;
		u->streams++;
	}
}

/* The method upstream: the endpoint's own (a HEAD goes as a GET). */
static const char *upstream_method(const struct exchange *x)
{
	if (x->ep->method == HTTP_DELETE)
		return "DELETE";
	return x->has_body ? "POST" : "GET";
}

/* A body relayed as written goes with its own type; sluice's are JSON. */
static const char *upstream_content_type(const struct exchange *x)
{
	return x->content_type ? x->content_type : "application/json";
}

/*
 * The native client's request: the same header lines libcurl is given
 * below, as one string.
 */
static int start_native(struct exchange *x, struct sl_upstream *u)
{
	const struct sl_config *cfg = x->app->cfg;
	struct sl_h1_request *r = &x->h1;
	free(x->h1_headers);
	static const char type_name[] = "Content-Type: ";
	static const char id_name[] = "X-Request-Id: ";
	static const char encoding[] = "Accept-Encoding: ";
	static const char bearer[] = "Authorization: Bearer ";
	const char *type = upstream_content_type(x);
	size_t size = sizeof(type_name) + strlen(type) + 2 + sizeof(id_name) +
	              strlen(x->id) + 2;
	if (x->accept_encoding)
		size += sizeof(encoding) + strlen(x->accept_encoding) + 2;
	if (u->api_key)
		size += sizeof(bearer) + strlen(u->api_key) + 2;
	if (x->passed_request)
		size += strlen(x->passed_request);
	struct sl_join j = {.p = sl_xmalloc(size), .cap = size};
	sl_join_str(&j, type_name);
	sl_join_str(&j, type);
	sl_join_str(&j, "\r\n");
	sl_join_str(&j, id_name);
	sl_join_str(&j, x->id);
	sl_join_str(&j, "\r\n");
	if (x->accept_encoding) {
		sl_join_str(&j, encoding);
		sl_join_str(&j, x->accept_encoding);
		sl_join_str(&j, "\r\n");
	}
	if (u->api_key) {
		sl_join_str(&j, bearer);
		sl_join_str(&j, u->api_key);
		sl_join_str(&j, "\r\n");
	}
	if (x->passed_request)
		sl_join_str(&j, x->passed_request);
	x->h1_headers = j.p;
	r->method = upstream_method(x);
	r->target = x->target;
	r->headers = x->h1_headers;
	r->body = x->body;
	r->body_len = x->body_len;
	r->has_body = x->has_body;
	r->connect_timeout_ms = cfg->upstream_connect_timeout_ms;
	r->on_header = on_native_header;
	r->on_body = on_native_body;
	r->on_read_end = on_native_read_end;
	r->on_done = on_native_done;
	r->data = x;
	/*
	 * The pool's bound: the slots and the spares, less the spare that
	 * the health check takes (libcurl keeps that connection open between
	 * checks, outside this pool), so that both together stay within
	 * SL_UPSTREAM_SPARE_CONNS of the slots, as through libcurl alone.
	 * The watches open add theirs, which they hold for long.
	 */
	int rc = sl_h1_start(&x->app->h1, r, u->request_url,
	                     u->total_slots + SL_UPSTREAM_SPARE_CONNS - 1 +
	                         x->app->watches);
	if (rc == 0)
		uv_timer_start(&x->timer, on_timer, first_byte_ms(x, NULL), 0);
	return rc;
}

/* Builds and starts the upstream transfer. Returns 0 or an error. */
static int start_transfer(struct exchange *x, struct sl_upstream *u)
{
	const struct sl_config *cfg = x->app->cfg;
	/* The next tie goes to the upstream after this one. */
	x->app->next_upstream = u->index + 1;
	x->transfer.on_done = on_transfer_done;
	x->transfer.data = x;
	upstream_take(x, u);
	struct sl_join upstream = SL_JOIN(x->req->info.upstream);
	sl_join_str(&upstream, u->url);
	/* A URL the native client cannot take (https) goes to libcurl. */
	x->native = cfg->upstream_client == SL_UPSTREAM_CLIENT_NATIVE;
	if (x->native && start_native(x, u) == 0)
		return 0;
	x->native = false;
	CURL *e = sl_curl_easy(&x->app->curl);
	if (!e)
		return SL_ECURL;
	x->transfer.easy = e;

	char *url = sl_xconcat(u->request_url, x->target);
	curl_easy_setopt(e, CURLOPT_URL, url);
	free(url);
	sl_curl_common_options(e);
	if (x->ep->method == HTTP_DELETE)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
	x->headers = curl_slist_append(x->headers, "Expect:");
	char *type = sl_xconcat("Content-Type: ", upstream_content_type(x));
	x->headers = curl_slist_append(x->headers, type);
	free(type);
	char *id = sl_xconcat("X-Request-Id: ", x->id);
	x->headers = curl_slist_append(x->headers, id);
	free(id);
	if (x->accept_encoding) {
		/* Relayed as sent: libcurl does not decode it (no
		 * CURLOPT_ACCEPT_ENCODING), so Content-Encoding passes too. */
		char *ae = sl_xconcat("Accept-Encoding: ", x->accept_encoding);
		x->headers = curl_slist_append(x->headers, ae);
		free(ae);
	}
	if (u->api_key) {
		char *auth = sl_xconcat("Authorization: Bearer ", u->api_key);
		x->headers = curl_slist_append(x->headers, auth);
		free(auth);
	}
	/* The passed lines, one list entry each, without their CRLF. */
	for (const char *p = x->passed_request; p && *p;) {
		const char *eol = strstr(p, "\r\n");
		char *line = sl_xasprintf("%.*s", (int)(eol - p), p);
		x->headers = curl_slist_append(x->headers, line);
		free(line);
		p = eol + 2;
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
	if (x->has_body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
		                 (curl_off_t)x->body_len);
	}
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
	                 (long)cfg->upstream_connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_upstream_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_upstream_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->error);

	uv_timer_start(&x->timer, on_timer, first_byte_ms(x, NULL), 0);
	return sl_curl_start(&x->app->curl, &x->transfer);
}

/* Starts at once, or answers 502 and lets the exchange go. */
static void start_or_fail(struct exchange *x, struct sl_upstream *u)
{
	if (u && start_transfer(x, u) == 0)
		return;
	x->transfer.active = false;
	x->h1.active = false;
	respond_error(x, 502, "server_error",
	              "cannot start the upstream request");
	exchange_release(x);
}

static struct exchange *exchange_of(struct sl_sched_item *item)
{
	return sl_container_of(item, struct exchange, item);
}

void sl_proxy_dispatch(void *ctx, struct sl_sched_item **items, unsigned n,
                       uint64_t now_ms)
{
	struct sl_model *m = ctx;
	struct sl_app *app = m->app;
	sl_stats_batch(&app->stats, n);
	for (unsigned i = 0; i < n; i++) {
		struct exchange *x = exchange_of(items[i]);
		x->queue_ms = (int64_t)(now_ms - x->arrived_ms);
		x->batch_size = n;
		x->req->info.queue_ms = x->queue_ms;
		x->req->info.batch_size = n;
		sl_stats_queued(&app->stats, x->priority, -1);
		sl_stats_queue_wait(&app->stats, x->priority,
		                    (double)x->queue_ms / 1000.0);
		struct sl_join h = SL_JOIN(x->sched_headers);
		sl_join_str(&h, "X-Queue-Ms: ");
		sl_join_u64(&h, (uint64_t)SL_MAX(x->queue_ms, (int64_t)0));
		sl_join_str(&h, "\r\nX-Batch-Size: ");
		sl_join_u64(&h, n);
		sl_join_str(&h, "\r\n");
		char why[160];
		start_or_fail(
		    x, sl_app_pick_upstream(app, m, true, x->failed_on,
		                            &x->affinity, why, sizeof(why)));
	}
	sl_app_model_used(m);
}

void sl_proxy_expire(void *ctx, struct sl_sched_item *item, uint64_t now_ms)
{
	struct sl_model *m = ctx;
	struct sl_app *app = m->app;
	struct exchange *x = exchange_of(item);
	uint64_t waited = now_ms - x->arrived_ms;
	sl_stats_queued(&app->stats, x->priority, -1);
	uint64_t retry = sl_sched_retry_after_ms(&m->sched, now_ms);
	snprintf(x->sched_headers, sizeof(x->sched_headers),
	         "X-Queue-Ms: %llu\r\nRetry-After: %u\r\n"
	         "retry-after-ms: %llu\r\n",
	         (unsigned long long)waited, sl_sched_retry_after_s(retry),
	         (unsigned long long)retry);
	x->req->info.reject_reason = "queue_timeout";
	char message[160];
	snprintf(message, sizeof(message),
	         "the request waited %.1f s in sluice's queue without a free "
	         "slot on a ready upstream (--queue-timeout %.1f s)",
	         (double)waited / 1000.0,
	         (double)m->sched.cfg.queue_timeout_ms / 1000.0);
	respond_error(x, 503, "unavailable_error", message);
	exchange_release(x);
}

/*
 * 429 with Retry-After: the queue is full, of requests at least as urgent.
 * Each refused client is told its own time to come back (see
 * sl_sched_retry_after_ms), in whole seconds and, for the OpenAI SDKs,
 * which honour it first, in milliseconds.
 */
static void refuse_queue_full(struct sl_app *app, struct exchange *x,
                              uint64_t now_ms, bool displaced)
{
	uint64_t retry_ms = sl_sched_retry_after_ms(&x->model->sched, now_ms);
	unsigned retry = sl_sched_retry_after_s(retry_ms);
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
	respond_error(x, 429, "rate_limit_error", message);
	exchange_release(x);
}

void sl_proxy_shed(void *ctx, struct sl_sched_item *item, uint64_t now_ms)
{
	struct sl_app *app = ((struct sl_model *)ctx)->app;
	struct exchange *x = exchange_of(item);
	sl_stats_queued(&app->stats, x->priority, -1);
	refuse_queue_full(app, x, now_ms, true);
}

/* Queues a scheduled exchange, or answers 429 when the queue is full. */
static void enqueue(struct sl_app *app, struct exchange *x)
{
	/*
	 * The loop's time was read when this iteration began, before this
	 * request and those ahead of it in the iteration were parsed: read
	 * it again, or the queue timeout would count time not spent queued.
	 */
	uv_update_time(&app->loop);
	x->arrived_ms = uv_now(&app->loop);
	if (sl_sched_push(&x->model->sched, &x->item, x->priority,
	                  x->arrived_ms) == 0) {
		sl_stats_queued(&app->stats, x->priority, +1);
		sl_app_kick_scheduler(app);
		return;
	}
	refuse_queue_full(app, x, x->arrived_ms, false);
}

/* ---- which upstream ---- */

/* The upstream /health calls `name`, or NULL. */
static struct sl_upstream *find_upstream(struct sl_app *app, const char *name)
{
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++)
		if (app->upstreams[i] &&
		    strcmp(app->upstreams[i]->name, name) == 0)
			return app->upstreams[i];
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
		note_totals(x);
		sl_http_respond(x->req, status, SL_HTTP_JSON, NULL, body, len);
		client_done(x);
	}
	free(body);
	exchange_release(x);
}

/* ---- starting an exchange ---- */

static struct exchange *exchange_new(struct sl_app *app, struct sl_model *m,
                                     struct sl_http_request *req,
                                     const struct sl_endpoint *ep,
                                     double priority)
{
	struct exchange *x = sl_xcalloc(1, sizeof(*x));
	x->app = app;
	x->model = m;
	sl_app_model_ref(m); /* a reload frees a removed model after this */
	x->req = req;
	x->ep = ep;
	x->priority = priority;
	x->queue_ms = -1;
	/* Also for one never queued: a retry queues it (try_again). */
	x->arrived_ms = uv_now(&app->loop);
	x->item.heap_index = SL_SCHED_NOT_QUEUED;
	struct sl_join id = SL_JOIN(x->id);
	sl_join_str(&id, req->id);
	uv_timer_init(&app->loop, &x->timer);
	x->timer.data = x;
	x->next = app->exchange_list;
	if (x->next)
		x->next->prev = x;
	app->exchange_list = x;
	app->exchanges++;
	if (ep->watch)
		app->watches++;
	req->handler_data = x;
	req->on_abort = on_client_abort;
	req->on_drain = on_client_drain;
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

void sl_proxy_handle(struct sl_app *app, struct sl_http_request *req,
                     const struct sl_endpoint *ep)
{
	struct sl_request checked;
	/* auto decides when the exchange is dispatched (upstream_take). */
	const struct sl_request_options opts = {
	    .max_tokens_cap = app->cfg->max_tokens_cap,
	    .stream_upstream =
	        app->cfg->stream_upstream == SL_STREAM_UPSTREAM_ON,
	};
	if (sl_request_validate(&checked, ep, sl_http_header(req, "X-Priority"),
	                        req->body, req->body_len, &opts) != 0) {
		sl_http_respond_error(req, checked.status,
		                      "invalid_request_error", NULL, "%s",
		                      checked.error);
		return;
	}
	double priority = checked.priority;

	/*
	 * Which model: the body's "model", or for a request without a JSON
	 * body "?model=NAME" (as llama-server's router mode takes it), else
	 * the default. The parameter is sluice's only where models are
	 * named; otherwise the query goes upstream as it came.
	 */
	char model_param[SL_MODEL_NAME_MAX + 2];
	struct sl_query_param by_model = {0};
	char *query = NULL;
	if (app->model_section && !ep->json_body)
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
	if (named && !(pinned = find_upstream(app, name))) {
		free(query);
		sl_request_free(&checked);
		sl_http_respond_error(req, 404, "not_found_error", NULL,
		                      "no upstream named \"%s\"; /health lists "
		                      "the upstreams by name",
		                      name);
		return;
	}
	const char *wanted = model_named ? model_param : checked.model;
	struct sl_model *m = sl_app_find_model(app, wanted);
	if (pinned && !model_named && !checked.model)
		m = sl_app_model_of(app, pinned); /* the upstream's own */
	if (!m || (pinned && m != sl_app_model_of(app, pinned))) {
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
	if (!sl_access_admit(app, req, ep->scheduled, &priority, &checked, m,
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
	    !app->stopping) {
		struct exchange *x = exchange_new(app, m, req, ep, priority);
		char *target = upstream_target(ep, req, query);
		x->fanout = sl_fanout_start(&app->curl, ups, n_ups, target,
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
	 * With no upstream ready, waiting helps nobody, so say so now: while
	 * the first start is under way, or when every upstream is down. One
	 * that is restarting or being checked after a failure is expected
	 * back: what needs a slot waits for it in the queue.
	 */
	char why[SL_MODEL_NAME_MAX + 96];
	struct sl_upstream *u =
	    sl_app_pick_upstream(app, m, false, NULL, NULL, why, sizeof(why));
	bool wait = !u && ep->scheduled && sl_app_upstream_expected(app, m);
	if (pinned) {
		u = sl_upstream_is_ready(pinned) ? pinned : NULL;
		wait = false;
		snprintf(why, sizeof(why), "upstream %s is %s", pinned->name,
		         sl_upstream_state_name(pinned->state));
	}
	if (app->stopping) {
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
	if (ep->watch && app->watches >= SL_PROXY_WATCHES_MAX) {
		free(query);
		sl_request_free(&checked);
		sl_http_respond_error(
		    req, 503, "unavailable_error", SL_PROXY_UNAVAILABLE_RETRY,
		    "%u watches (GET /models/sse, GET /v1/stream) are open, "
		    "sluice's most: each holds an upstream connection",
		    SL_PROXY_WATCHES_MAX);
		return;
	}

	struct exchange *x = exchange_new(app, m, req, ep, priority);
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
	x->passed_request = passed_request_headers(ep, req, x->stream);
	x->resumable = x->stream && (ep->pass & SL_PASS_CONVERSATION) &&
	               sl_http_header(req, "X-Conversation-Id");
	x->assemble = checked.assemble;
	x->assemblable = checked.assemblable;
	x->assemble_kind = checked.assemble_kind;
	x->return_tokens = checked.return_tokens;
	if (x->assemble) {
		x->answer = sl_xmalloc(sizeof(*x->answer));
		sl_assembler_init(x->answer, checked.assemble_kind,
		                  checked.return_tokens);
	}
	if (ep->scheduled) {
		enqueue(app, x);
		sl_app_model_demand(app, m); /* a stopped model starts */
	} else {
		start_or_fail(x, u);
	}
}

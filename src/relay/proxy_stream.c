/*
 * proxy_stream.c: the upstream's body, relayed event by event.
 *
 * Every Server-Sent Event from an upstream is parsed once, to learn when
 * tokens arrive (time to first token, gaps, counts), whether it ends the
 * stream, and whether it is an error; then it is relayed as it came,
 * gathered into one answer (assemble.h), or turned into /generate's shape.
 * Relayed events are written once per read, and --stream-coalesce holds a
 * fast stream's reads for a window to write more at once. A plain body
 * passes through here too, on its way to the client or to be kept.
 */
#include "proxy_impl.h"

#include "sluice/base/log.h"
#include "sluice/ops/stats.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int assemble_event(struct exchange *x, const char *event, size_t len);

static void coalesce_hold(struct exchange *x);

/* Takes x off the app's coalescing list, if it is on it. */
void exchange_coalesce_unlink(struct exchange *x)
{
	if (!x->coalesced)
		return;
	x->coalesced = false;
	if (x->co_prev)
		x->co_prev->co_next = x->co_next;
	else
		x->relay->coalesced = x->co_next;
	if (x->co_next)
		x->co_next->co_prev = x->co_prev;
	else
		x->relay->coalesced_last = x->co_prev;
	x->co_prev = x->co_next = NULL;
}

static void token_arrived(struct exchange *x, uint64_t n)
{
	struct sl_stats *st = x->relay->stats;
	uint64_t now = sl_now_ns();
	if (!x->first_token_ns) {
		x->first_token_ns = now;
		double ttft = (double)(now - x->req->start_ns) / 1e9;
		x->req->info.ttft_ms = (int64_t)(ttft * 1000);
		sl_stats_first_token(st, x->priority, ttft);
		exchange_slo_first_token(x, ttft);
	} else {
		sl_stats_inter_token(st,
		                     (double)(now - x->last_token_ns) / 1e9);
	}
	x->last_token_ns = now;
	x->tokens_seen += n;
	exchange_slo_progress(x);
	sl_stats_tokens(st, n, uv_now(x->relay->loop));
}

/* What one scanned event says about the generation: tokens, ends, counts. */
static void observe(struct exchange *x, const struct sl_event_facts *f)
{
	for (unsigned i = 0; i < f->arrivals; i++)
		token_arrived(x, f->per_arrival);
	exchange_count_event(x, f, 1);
	if (f->has_timings) {
		x->has_timings = true;
		x->timings = f->timings;
	}
	if (x->ep->stream_end != SL_END_STOP)
		return;
	x->prompts = SL_MAX(x->prompts, (unsigned)f->index + 1);
	if (f->final)
		x->stopped++;
}

/* The shape of the events an endpoint's stream carries. */
enum sl_event_dialect exchange_dialect_of(const struct exchange *x)
{
	switch (x->ep->stream_end) {
	case SL_END_STOP: return SL_DIALECT_NATIVE;
	case SL_END_EOF: return SL_DIALECT_TYPED;
	default: return SL_DIALECT_OPENAI;
	}
}

/* An error event from upstream: passed on in the client's form. */
static void upstream_error_event(struct exchange *x, const char *event,
                                 size_t len)
{
	x->ended = true;
	if (x->assemble) {
		/* The assembler answers with the error as llama-server wrote
		 * it. */
		if (assemble_event(x, event, len) != 0) {
			exchange_fail(
			    x, 502,
			    "upstream sent an event sluice cannot read");
			return;
		}
		x->req->info.outcome = "failed";
		exchange_finish_answer(x);
		return;
	}
	sl_http_stream_write(x->req, event, len);
	exchange_note_totals(x);
	x->req->info.outcome = "failed";
	sl_http_stream_end(x->req);
	exchange_client_done(x);
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
			exchange_write_event(x, ev);
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
void exchange_relay_flush(struct exchange *x)
{
	if (x->relay_n > 0 && x->req)
		sl_http_stream_writev(x->req, x->relayed, x->relay_n);
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
		exchange_relay_flush(x);
	if (!in_read) {
		sl_http_stream_write(x->req, event, len);
		return;
	}
	x->relayed[x->relay_n++] = uv_buf_init((char *)event, (unsigned)len);
}

/*
 * One upstream event: recognised from its data (matched to the stream's
 * shape, else scanned without allocation for llama-server's token events),
 * then relayed, assembled or rebuilt.
 */
int exchange_on_event(const char *event, size_t len, void *arg)
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
		sl_event_read(&x->shape, &scan, data, n, exchange_dialect_of(x),
		              &facts, &match);
	/* A scanned event other than a plain token: what a trace reads. */
	if (facts.object && !match.piece && facts.piece < 0 &&
	    exchange_trace(x))
		exchange_trace_event(x, &scan);
	if (facts.error) {
		exchange_relay_flush(x);
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
			exchange_fail(x, 502,
			              "upstream answer too large to assemble");
		else if (match.piece
		             ? sl_assembler_add_piece(x->answer, data, n,
		                                      &facts, &match) != 0
		             : facts.json && sl_assembler_add_scanned(
		                                 x->answer, &scan) != 0)
			exchange_fail(
			    x, 502,
			    "upstream sent an event sluice cannot read");
	} else if (x->ep->api == SL_API_GENERATE) {
		if (facts.object)
			generate_event(x, data, n);
	} else {
		relay_event(x, event, len);
	}
	if (facts.done && x->req && !x->ended)
		exchange_end_ok(x);
done:
	sl_jscan_free(&scan);
	free(copy);
	return 0;
}

/*
 * The end of one upstream read: the events held from it go out, and a
 * stream's head with them even if no whole event came yet.
 */
static void flush_read(struct exchange *x)
{
	exchange_charge(x);
	exchange_relay_flush(x);
	if (x->req && x->head_sent)
		sl_http_flush(x->req);
}

/*
 * The client reads slower than the upstream writes: the transfer stops
 * until the client has caught up (exchange_on_client_drain).
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
size_t exchange_on_upstream_data(char *data, size_t size, size_t n, void *arg)
{
	struct exchange *x = arg;
	size_t len = size * n;
	exchange_upstream_started(x);
	/*
	 * With the client side over, bytes after the stream's end are taken;
	 * otherwise sluice gave up on this answer, and 0 ends the transfer so
	 * that llama-server stops generating it.
	 */
	if (!x->req) {
		/* A left answer read to its end: its bytes keep it alive. */
		x->last_byte_ms = uv_now(x->relay->loop);
		x->left_bytes = true;
		return x->gave_up ? 0 : len;
	}
	/* Back-pressure: leave the bytes with libcurl until the client reads
	 * (the native client pauses after the bytes, exchange_on_native_body).
	 */
	if (!x->native && sl_http_backlog(x->req) > SL_HTTP_BACKLOG_HIGH) {
		pause_for_client(x);
		return CURL_WRITEFUNC_PAUSE;
	}
	x->last_byte_ms = uv_now(x->relay->loop);
	if (x->mode == MODE_WAITING && exchange_hold_5xx(x))
		return 0; /* ends the transfer; exchange_on_transfer_done
		             resends */
	if (x->mode == MODE_WAITING && !exchange_start_response(x))
		return 0;
	if (x->mode == MODE_BODY) {
		exchange_keep_answer(x, data, len);
		sl_http_stream_write(x->req, data, len);
		return len;
	}
	x->feed_data = data;
	x->feed_len = len;
	int rc = sl_sse_feed(&x->sse, data, len, exchange_on_event, x);
	/* The native client says when its read is done: the events wait
	 * until then (exchange_on_native_read_end). */
	if (!x->native)
		flush_read(x);
	x->feed_data = NULL;
	if (rc != 0) {
		exchange_fail(x, 502, "upstream sent an oversized event");
		return 0;
	}
	return x->gave_up ? 0 : len;
}

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
	struct sl_relay *relay = t->data;
	uint64_t tick = ++relay->coalesce_tick;
	struct exchange *x;
	while ((x = relay->coalesced) != NULL && x->co_tick != tick) {
		exchange_coalesce_unlink(x);
		if (x->paused || !exchange_transfer_active(x))
			continue; /* exchange_transfer_resume() reads on */
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
	if (relay->coalesced)
		uv_timer_start(&relay->coalesce_timer, on_coalesce_timer,
		               relay->cfg->stream_coalesce_ms, 0);
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
bool exchange_holds(struct exchange *x, unsigned tokens, unsigned others,
                    bool tick_read)
{
	uint64_t window_ms = x->relay->cfg->stream_coalesce_ms;
	if (tokens == 0 || others > 0 || window_ms == 0 ||
	    x->mode != MODE_SSE || !x->req || x->ended || x->gave_up ||
	    x->paused || x->coalesced || !exchange_transfer_active(x) ||
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
	if (!exchange_holds(x, tokens, others, tick_read)) {
		/* Read by a tick, and not held again: watched from now on. */
		if (tick_read && !x->paused && exchange_transfer_active(x))
			sl_h1_resume(&x->h1);
		return;
	}
	x->tick_empty = false;
	coalesce_hold(x);
}

/* Puts x at the end of the list, paused until the timer's next tick. */
static void coalesce_hold(struct exchange *x)
{
	struct sl_relay *relay = x->relay;
	x->coalesced = true;
	x->co_tick = relay->coalesce_tick;
	x->co_next = NULL;
	x->co_prev = relay->coalesced_last;
	if (relay->coalesced_last)
		relay->coalesced_last->co_next = x;
	else
		relay->coalesced = x;
	relay->coalesced_last = x;
	sl_h1_pause(&x->h1);
	if (!uv_is_active((uv_handle_t *)&relay->coalesce_timer))
		uv_timer_start(&relay->coalesce_timer, on_coalesce_timer,
		               relay->cfg->stream_coalesce_ms, 0);
}

/*
 * The native client's read is done: what was held of it is written, and
 * reading stops if the client has fallen behind.
 */
void exchange_on_native_read_end(struct sl_h1_request *r)
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

/*
 * http.c: connections, request parsing with llhttp, limits, timeouts and
 * response writing.
 *
 * A connection moves through phases: IDLE (waiting for a request's first
 * byte), HEADERS, BODY, HANDLING (the handler has the request), and LINGER
 * (an error was sent and the connection is closing). One timer per
 * connection enforces the deadline of the current phase; header and body
 * deadlines are set once per phase, so a client that drips a byte at a time
 * still runs out of time.
 *
 * Input: reads land in the server's shared buffer and are parsed at once.
 * Bytes that cannot be parsed yet (the next pipelined request while one is
 * being answered, or while earlier answers wait for the client to read
 * them: see pipeline_blocked) are kept in the connection's `pending`
 * buffer, bounded by SL_HTTP_PENDING_MAX; when it is full, reading pauses.
 * Before llhttp sees any byte, the frame scanner (http_frame.c, struct
 * sl_http_frame in the connection) decides where each part of a request
 * ends and refuses what RFC 9112 says a server must refuse, so that the
 * llhttp version linked does not matter. The llhttp callbacks tell it where
 * the head ended and how long each chunk is.
 *
 * Once a head is parsed, the request rules (http_rules.c: Host, transfer
 * codings, the absolute-form target) judge what it says; this file applies
 * their verdicts and the limits. A head with a body after it pauses the
 * parser (on_headers_complete returns HPE_PAUSED, as on_message_complete
 * does) so that, outside llhttp's callbacks, the owner's on_head may
 * answer it and the body memory is reserved (body_begin) before a byte of
 * the body is read.
 *
 * Closing: uv_close() on both handles; the request in flight, if any, gets
 * on_abort from the close callback, always from the loop and never from
 * inside a call the handler made. Memory is freed when the last handle has
 * closed.
 */
#include "sluice/net/http.h"

#include "sluice/base/common.h"
#include "sluice/net/http_frame.h"
#include "sluice/net/http_rules.h"
#include "sluice/base/log.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sl_build_config.h"

enum conn_phase {
	PHASE_IDLE,
	PHASE_HEADERS,
	PHASE_BODY,
	PHASE_HANDLING,
	PHASE_LINGER,
};

/* Parse-time state of a request, around the part handlers see. */
struct request_state {
	struct sl_http_request pub;
	char *arena; /* target, path, header names and values, NUL-separated */
	size_t arena_len, arena_cap;
	size_t header_bytes; /* counted against max_header_bytes */
	uint32_t target_off, path_off, query_off;
	uint32_t name_off[SL_HTTP_MAX_HEADERS];
	uint32_t value_off[SL_HTTP_MAX_HEADERS];
	bool in_field;     /* inside a header name */
	bool identified;   /* request id and client set */
	bool seen_header;  /* past the request target */
	bool headers_done; /* later fields are trailers: counted, dropped */
	/*
	 * The response has no body: a HEAD request's, or one whose status
	 * has none (1xx, 204, 304: status_has_body).
	 */
	bool head_only;
	size_t body_cap;
	/* Body memory this request holds while its body is read (http.h). */
	size_t body_reserved;
	bool keep_alive; /* decided when the message completed */
	bool http10;     /* HTTP/1.0 client: no chunked responses */
	bool chunked;    /* the streamed response is chunked */
	bool dispatched;
	bool finished; /* request_finished() ran */
	/*
	 * A streamed response's head, held until the first body bytes (or the
	 * end, or sl_http_flush) so that both leave in one system call: on
	 * loopback each write wakes the client once more.
	 */
	char *held_head;
	size_t held_head_len;
};

struct sl_http_conn {
	uv_tcp_t tcp;
	/*
	 * The connection's one deadline (header, body, idle, send or linger
	 * time, by phase), kept lazily: set_timer() only moves `deadline`
	 * when the running timer fires no later than it, and on_timer() waits
	 * out what is left; stop_timer() only clears it. Most requests then
	 * start and stop no timer at all, where each phase used to.
	 * TIMER_NONE: no deadline (deadline), no timer running (armed).
	 */
	uv_timer_t timer;
	uint64_t deadline; /* uv_now() milliseconds */
	uint64_t armed;    /* when the running timer fires */
	uv_shutdown_t shutdown_req;
	llhttp_t parser;
	struct sl_http_server *server;
	struct sl_http_conn *prev, *next;
	enum conn_phase phase;
	struct request_state *req; /* NULL between requests */
	/* The TCP peer, read once at accept; family 0 when unknown. */
	struct sl_ip peer;
	char peer_text[SL_CLIENT_ADDR_MAX]; /* "" when unknown */

	char *pending; /* SL_HTTP_PENDING_MAX bytes once allocated */
	size_t pending_len;

	size_t backlog;         /* bytes in uv_write requests not yet done */
	unsigned reject_status; /* set by a parser callback that refuses */
	const char *reject_message;
	bool head_paused; /* the parser paused after a head a body follows */
	struct sl_http_frame frame; /* where the parts of a request end */
	unsigned open_handles;
	bool reading;
	bool parsing;             /* inside conn_parse(): do not re-enter */
	bool closing;             /* uv_close() called */
	bool finish_when_flushed; /* linger once the backlog is written */
	uint64_t linger_since;    /* loop time the linger began (FIN sent) */
	bool shutdown_started;
	bool peer_closed;   /* EOF seen while flushing a final response */
	bool draining_wait; /* drain callback owed once below the low mark */
	bool flush_wait;    /* next request waits for the backlog to drain */
	uint64_t write_progress_ms; /* loop time of the last write done */
};

static const llhttp_settings_t parser_settings;

static void conn_pump(struct sl_http_conn *c);
static void conn_update_reading(struct sl_http_conn *c);
static void conn_close(struct sl_http_conn *c);
static void conn_finish(struct sl_http_conn *c);

/* ---- small helpers ---- */

/*
 * RFC 9110's reason phrases (15), with RFC 6585's 429 and 431, RFC 7725's
 * 451 and nginx's 499 (a client that closed before the answer, in the
 * access log). An upstream's status is relayed with its phrase from here:
 * llama-server's own phrase is not kept.
 */
const char *sl_http_reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 101: return "Switching Protocols";
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 203: return "Non-Authoritative Information";
	case 204: return "No Content";
	case 205: return "Reset Content";
	case 206: return "Partial Content";
	case 300: return "Multiple Choices";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 303: return "See Other";
	case 304: return "Not Modified";
	case 305: return "Use Proxy";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 402: return "Payment Required";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 406: return "Not Acceptable";
	case 407: return "Proxy Authentication Required";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 410: return "Gone";
	case 411: return "Length Required";
	case 412: return "Precondition Failed";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 415: return "Unsupported Media Type";
	case 416: return "Range Not Satisfiable";
	case 417: return "Expectation Failed";
	case 421: return "Misdirected Request";
	case 422: return "Unprocessable Content";
	case 426: return "Upgrade Required";
	case 428: return "Precondition Required";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 451: return "Unavailable For Legal Reasons";
	case 499: return "Client Closed Request";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	default: return "Unknown";
	}
}

/*
 * RFC 9110, 6.4.1: 1xx, 204 and 304 answers end with their head, so they
 * carry neither Content-Length nor chunked framing (a client would read
 * the terminating chunk as the start of the next answer).
 */
static bool status_has_body(int status)
{
	return status >= 200 && status != 204 && status != 304;
}

void sl_http_limits_default(struct sl_http_limits *l)
{
	l->max_header_bytes = SL_HTTP_MAX_HEADER_BYTES;
	l->max_headers = SL_HTTP_MAX_HEADERS;
	l->max_body = SL_HTTP_MAX_BODY;
	l->max_body_memory = SL_HTTP_MAX_BODY_MEMORY;
	l->header_timeout_ms = SL_HTTP_HEADER_TIMEOUT_MS;
	l->body_timeout_ms = SL_HTTP_BODY_TIMEOUT_MS;
	l->idle_timeout_ms = SL_HTTP_IDLE_TIMEOUT_MS;
	l->send_timeout_ms = SL_HTTP_SEND_TIMEOUT_MS;
	l->max_connections = SL_HTTP_MAX_CONNECTIONS;
	l->server_name = NULL;
	l->cors_origins = NULL; /* no CORS unless the owner asks for it */
	l->n_cors_origins = 0;
	l->trusted_proxies = NULL; /* no proxy believed unless named */
	l->n_trusted_proxies = 0;
}

static struct request_state *state_of(struct sl_http_request *req)
{
	return sl_container_of(req, struct request_state, pub);
}

static const char *http_date(struct sl_http_server *s)
{
	time_t now = time(NULL);
	if ((uint64_t)now != s->date_sec) {
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(s->date, sizeof(s->date), "%a, %d %b %Y %H:%M:%S GMT",
		         &tm);
		s->date_sec = (uint64_t)now;
	}
	return s->date;
}

#define TIMER_NONE UINT64_MAX

static void on_timer(uv_timer_t *t);

/* on_timer() runs once `ms` have passed, unless set again or stopped. */
static void set_timer(struct sl_http_conn *c, uint64_t ms)
{
	uint64_t now = uv_now(c->server->loop);
	c->deadline = now + ms;
	if (c->armed <= c->deadline)
		return; /* it fires first, and waits out the rest */
	c->armed = c->deadline;
	uv_timer_start(&c->timer, on_timer, ms, 0);
}

static void stop_timer(struct sl_http_conn *c)
{
	c->deadline = TIMER_NONE;
}

/* ---- request memory ---- */

static void request_free(struct request_state *st);

/*
 * The request's end, reported once: completed or not. Also where a
 * dispatched request stops counting as busy.
 */
static void request_finished(struct sl_http_conn *c, struct request_state *st,
                             bool completed)
{
	struct sl_http_server *s = c->server;
	if (st->finished)
		return;
	st->finished = true;
	if (st->dispatched)
		s->n_busy--;
	if (s->on_finish)
		s->on_finish(&st->pub, completed, s->handler_data);
}

/* The body memory st holds goes back to the server (http.h, "body memory"). */
static void body_release(struct request_state *st)
{
	struct sl_http_server *s = st->pub.conn->server;
	s->body_memory -= st->body_reserved;
	st->body_reserved = 0;
}

static void request_free(struct request_state *st)
{
	if (!st)
		return;
	body_release(st);
	free(st->arena);
	free(st->pub.body);
	free(st->held_head);
	free(st);
}

static int arena_append(struct sl_http_conn *c, const char *data, size_t len)
{
	struct request_state *st = c->req;
	size_t need = st->arena_len + len + 1;
	if (need > st->arena_cap) {
		size_t cap = st->arena_cap ? st->arena_cap : 512;
		while (cap < need)
			cap *= 2;
		st->arena = sl_xrealloc(st->arena, cap);
		st->arena_cap = cap;
	}
	memcpy(st->arena + st->arena_len, data, len);
	st->arena_len += len;
	return 0;
}

static int arena_terminate(struct sl_http_conn *c)
{
	return arena_append(c, "", 1);
}

/* Counts header bytes; refuses with 414 or 431 past the limit. */
static int count_header_bytes(struct sl_http_conn *c, size_t len)
{
	struct request_state *st = c->req;
	st->header_bytes += len;
	if (st->header_bytes <= c->server->limits.max_header_bytes)
		return 0;
	if (!st->seen_header) {
		c->reject_status = 414;
		c->reject_message = "request target too long";
	} else {
		c->reject_status = 431;
		c->reject_message = "request line and headers too large";
	}
	return HPE_USER;
}

/* ---- llhttp callbacks ---- */

static struct sl_http_conn *conn_of(llhttp_t *p)
{
	return p->data;
}

/* A new request's memory; the previous one, if any, is done with. */
static void request_begin(struct sl_http_conn *c)
{
	request_free(c->req);
	c->req = sl_xcalloc(1, sizeof(*c->req));
	c->req->pub.conn = c;
	c->req->pub.start_ns = sl_now_ns();
	c->req->pub.info.queue_ms = -1;
	c->req->pub.info.ttft_ms = -1;
	memcpy(c->req->pub.client, c->peer_text, sizeof(c->peer_text));
}

static int on_message_begin(llhttp_t *p)
{
	struct sl_http_conn *c = conn_of(p);
	request_begin(c);
	c->phase = PHASE_HEADERS;
	set_timer(c, c->server->limits.header_timeout_ms);
	/* The request line's fixed parts: method, spaces, version, CRLF. */
	return count_header_bytes(c, 16);
}

static int on_url(llhttp_t *p, const char *at, size_t len)
{
	struct sl_http_conn *c = conn_of(p);
	int rc = count_header_bytes(c, len);
	return rc ? rc : arena_append(c, at, len);
}

static int on_url_complete(llhttp_t *p)
{
	struct sl_http_conn *c = conn_of(p);
	struct request_state *st = c->req;
	arena_terminate(c);
	/* A second copy split at '?': path and query, each NUL-terminated. */
	size_t target_len = st->arena_len - 1 - st->target_off;
	char *target = sl_xmalloc(target_len + 1);
	memcpy(target, st->arena + st->target_off, target_len + 1);
	const char *from = sl_http_rule_absolute_form_path(target);
	if (!from)
		from = target;
	size_t path_len = strcspn(from, "?");
	st->path_off = (uint32_t)st->arena_len;
	if (path_len == 0)
		arena_append(c, "/", 1); /* "http://host" and "http://host?q" */
	else
		arena_append(c, from, path_len);
	arena_terminate(c);
	st->query_off = (uint32_t)st->arena_len;
	if (from[path_len] == '?')
		arena_append(c, from + path_len + 1,
		             strlen(from + path_len + 1));
	arena_terminate(c);
	free(target);
	st->seen_header = true;
	return 0;
}

/* Refuses with 400: for what llhttp 8 (Debian bookworm's) lets through. */
static int refuse_malformed(struct sl_http_conn *c, const char *why)
{
	c->reject_status = 400;
	c->reject_message = why;
	return HPE_USER;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
	struct sl_http_conn *c = conn_of(p);
	struct request_state *st = c->req;
	/*
	 * "Host : x" must be refused (RFC 9112, 5.1): proxies disagree on what
	 * it means. llhttp 8 passes the space on as part of the name.
	 */
	if (memchr(at, ' ', len) || memchr(at, '\t', len))
		return refuse_malformed(c, "malformed HTTP request: "
		                           "whitespace in a header name");
	/*
	 * Trailers of a chunked body come through here too, after the headers
	 * were resolved: they count against the limit and are dropped, as
	 * sluice has no use for them.
	 */
	if (st->headers_done)
		return count_header_bytes(c, len);
	if (!st->in_field) {
		if (st->pub.n_headers >= c->server->limits.max_headers) {
			c->reject_status = 431;
			c->reject_message = "too many header fields";
			return HPE_USER;
		}
		st->name_off[st->pub.n_headers] = (uint32_t)st->arena_len;
		st->in_field = true;
		/* Colon, space and CRLF of each field count too. */
		int rc = count_header_bytes(c, 4);
		if (rc)
			return rc;
	}
	int rc = count_header_bytes(c, len);
	return rc ? rc : arena_append(c, at, len);
}

static int on_header_field_complete(llhttp_t *p)
{
	struct sl_http_conn *c = conn_of(p);
	struct request_state *st = c->req;
	if (st->headers_done)
		return 0;
	arena_terminate(c);
	st->value_off[st->pub.n_headers] = (uint32_t)st->arena_len;
	st->in_field = false;
	return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
	struct sl_http_conn *c = conn_of(p);
	int rc = count_header_bytes(c, len);
	if (rc || c->req->headers_done)
		return rc;
	return arena_append(c, at, len);
}

static int on_header_value_complete(llhttp_t *p)
{
	struct sl_http_conn *c = conn_of(p);
	struct request_state *st = c->req;
	if (st->headers_done)
		return 0;
	unsigned i = st->pub.n_headers++;
	/*
	 * RFC 9110, 5.5: whitespace around a field value is not part of it.
	 * llhttp drops what leads and keeps what trails, so that
	 * "Authorization: Bearer KEY " would carry the key "KEY ".
	 */
	while (st->arena_len > st->value_off[i] &&
	       (st->arena[st->arena_len - 1] == ' ' ||
	        st->arena[st->arena_len - 1] == '\t'))
		st->arena_len--;
	st->pub.headers[i].value_len = st->arena_len - st->value_off[i];
	arena_terminate(c);
	return 0;
}

/* The arena no longer moves once the headers are in: point into it. */
static void resolve_pointers(struct request_state *st)
{
	st->pub.target = st->arena + st->target_off;
	st->pub.path = st->arena + st->path_off;
	st->pub.query = st->arena + st->query_off;
	for (unsigned i = 0; i < st->pub.n_headers; i++) {
		st->pub.headers[i].name = st->arena + st->name_off[i];
		st->pub.headers[i].value = st->arena + st->value_off[i];
	}
}

static int conn_write_raw(struct sl_http_conn *c, const uv_buf_t *bufs,
                          unsigned n);

static int on_headers_complete(llhttp_t *p)
{
	struct sl_http_conn *c = conn_of(p);
	struct request_state *st = c->req;
	const struct sl_http_limits *lim = &c->server->limits;
	resolve_pointers(st);
	st->headers_done = true;
	st->pub.method = (llhttp_method_t)llhttp_get_method(p);
	st->head_only = st->pub.method == HTTP_HEAD;
	st->http10 =
	    llhttp_get_http_major(p) == 1 && llhttp_get_http_minor(p) == 0;

	bool has_length = (p->flags & F_CONTENT_LENGTH) != 0;
	bool chunked = (p->flags & F_CHUNKED) != 0;
	const char *why = NULL;
	unsigned status = sl_http_rule_host(st->pub.headers, st->pub.n_headers,
	                                    st->http10, &why);
	if (!status)
		status = sl_http_rule_transfer_coding(
		    st->pub.headers, st->pub.n_headers, st->http10, &why);
	if (status) {
		c->reject_status = status;
		c->reject_message = why;
		return -1;
	}
	/* The head was fed whole: the body, if any, is scanned from here. */
	sl_http_frame_head_done(&c->frame, chunked);
	if (has_length && p->content_length > lim->max_body) {
		c->reject_status = 413;
		c->reject_message = "request body too large";
		return -1;
	}
	if (has_length && p->content_length > 0)
		st->body_cap = (size_t)p->content_length;

	const char *expect = sl_http_header(&st->pub, "Expect");
	if (expect && strcasecmp(expect, "100-continue") != 0) {
		c->reject_status = 417;
		c->reject_message = "only \"Expect: 100-continue\" is "
		                    "supported";
		return -1;
	}
	if (!chunked && !(has_length && p->content_length > 0))
		return 0;
	/* A body follows: body_begin() decides on it, outside llhttp. */
	c->head_paused = true;
	return HPE_PAUSED;
}

static int on_chunk_header(llhttp_t *p)
{
	struct sl_http_conn *c = conn_of(p);
	/*
	 * A chunk that would take the body past the limit is refused from its
	 * size line, as nginx does, rather than after its data (which may
	 * never come: the body timeout would answer instead).
	 */
	if (p->content_length >
	    c->server->limits.max_body - c->req->pub.body_len) {
		c->reject_status = 413;
		c->reject_message = "request body too large";
		return -1;
	}
	/* Fed exactly one chunk-size line: what follows is data or trailers. */
	sl_http_frame_chunk(&c->frame, p->content_length);
	return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
	struct sl_http_conn *c = conn_of(p);
	struct request_state *st = c->req;
	size_t max = c->server->limits.max_body;
	if (st->pub.body_len + len > max) {
		c->reject_status = 413;
		c->reject_message = "request body too large";
		return HPE_USER;
	}
	size_t need = st->pub.body_len + len + 1;
	if (need > st->body_cap + 1 || !st->pub.body) {
		size_t cap = SL_MAX(st->body_cap, (size_t)1024);
		while (cap + 1 < need)
			cap *= 2;
		cap = SL_MIN(cap, max);
		st->pub.body = sl_xrealloc(st->pub.body, cap + 1);
		st->body_cap = cap;
	}
	memcpy(st->pub.body + st->pub.body_len, at, len);
	st->pub.body_len += len;
	st->pub.body[st->pub.body_len] = '\0';
	return 0;
}

static int on_message_complete(llhttp_t *p)
{
	struct sl_http_conn *c = conn_of(p);
	struct request_state *st = c->req;
	if (!st->pub.body)
		st->pub.body = sl_xcalloc(1, 1);
	/* The body is the request's now, bounded by the handler's limits. */
	body_release(st);
	/* After an upgrade request the parser cannot go on: close after. */
	st->keep_alive = llhttp_should_keep_alive(p) && !p->upgrade &&
	                 !c->server->closing && !c->server->draining;
	stop_timer(c);
	c->phase = PHASE_HANDLING;
	/* The next bytes are the next request's: scan its head. */
	sl_http_frame_reset(&c->frame);
	/* Never llhttp_pause() inside a callback; returning this pauses. */
	return HPE_PAUSED;
}

static const llhttp_settings_t parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_url_complete = on_url_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_header = on_chunk_header,
    .on_message_complete = on_message_complete,
};

const char *sl_http_header(const struct sl_http_request *req, const char *name)
{
	/*
	 * The first characters, with ASCII letters' case bit set, pass over
	 * most names before strcasecmp (a request is looked up a dozen times
	 * or more); names equal but for case always agree on them.
	 */
	unsigned first = (unsigned char)name[0] | 0x20u;
	for (unsigned i = 0; i < req->n_headers; i++) {
		const char *have = req->headers[i].name;
		if (have && ((unsigned char)have[0] | 0x20u) == first &&
		    strcasecmp(have, name) == 0)
			return req->headers[i].value;
	}
	return NULL;
}

/* ---- CORS ---- */

/* The request's Origin when it may be echoed into a head, else NULL. */
static const char *request_origin(const struct sl_http_request *req)
{
	const char *origin = req ? sl_http_header(req, "Origin") : NULL;
	if (origin &&
	    (!origin[0] || !sl_http_field_value_ok(origin, SL_HTTP_ORIGIN_MAX)))
		return NULL;
	return origin;
}

/*
 * Whether an origin is one of this machine's: http or https, host
 * localhost, 127.0.0.1 or [::1], any port, as llama-server 0.7.0's
 * --cors-origins localhost takes them (measured). Its parser also takes a
 * path and user info ("http://a@localhost/x"), which no browser sends in
 * an Origin; this one takes the serialised origin only (RFC 6454).
 */
static bool origin_is_localhost(const char *origin)
{
	const char *host;
	if (strncmp(origin, "http://", 7) == 0)
		host = origin + 7;
	else if (strncmp(origin, "https://", 8) == 0)
		host = origin + 8;
	else
		return false;
	static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(hosts); i++) {
		size_t n = strlen(hosts[i]);
		if (strncmp(host, hosts[i], n) != 0)
			continue;
		const char *port = host + n;
		if (*port == '\0')
			return true;
		/* ":" and a port of up to five digits. */
		size_t digits = strspn(port + 1, "0123456789");
		return *port == ':' && digits >= 1 && digits <= 5 &&
		       port[1 + digits] == '\0';
	}
	return false;
}

/* See sl_http_cors_origin(); `req` may be NULL (refused before a request). */
static const char *cors_allowed(const struct sl_http_limits *l,
                                const struct sl_http_request *req)
{
	if (l->n_cors_origins == 0)
		return NULL;
	const char *origin = request_origin(req);
	if (l->n_cors_origins == 1 && strcmp(l->cors_origins[0], "*") == 0)
		return origin ? origin : "*";
	if (!origin)
		return NULL;
	if (l->n_cors_origins == 1 &&
	    strcmp(l->cors_origins[0], "localhost") == 0)
		return origin_is_localhost(origin) ? origin : NULL;
	/* Origins are compared exactly: RFC 6454 serialises them one way. */
	for (unsigned i = 0; i < l->n_cors_origins; i++)
		if (strcmp(l->cors_origins[i], origin) == 0)
			return origin;
	return NULL;
}

const char *sl_http_cors_origin(const struct sl_http_request *req)
{
	return cors_allowed(&req->conn->server->limits, req);
}

/* ---- writing ---- */

struct write_req {
	uv_write_t w;
	struct sl_http_conn *conn;
	size_t len;
	char data[];
};

static void maybe_linger(struct sl_http_conn *c);

static void on_write_done(uv_write_t *w, int status)
{
	struct write_req *wr = sl_container_of(w, struct write_req, w);
	struct sl_http_conn *c = wr->conn;
	c->backlog -= wr->len;
	c->write_progress_ms = uv_now(c->server->loop);
	free(wr);
	if (status < 0) {
		conn_close(c);
		return;
	}
	if (c->draining_wait && !c->closing &&
	    c->backlog <= SL_HTTP_BACKLOG_LOW && c->req &&
	    c->req->pub.on_drain) {
		c->draining_wait = false;
		c->req->pub.on_drain(&c->req->pub);
	}
	if (c->flush_wait && !c->closing &&
	    c->backlog <= SL_HTTP_PIPELINE_BACKLOG) {
		/* From the timer, as request_complete does: see there. */
		c->flush_wait = false;
		set_timer(c, 0);
	}
	maybe_linger(c);
}

/*
 * Writes bufs in order: directly when nothing is queued, else (or for what
 * the socket did not take) through a copied uv_write request.
 */
static int conn_write_raw(struct sl_http_conn *c, const uv_buf_t *bufs,
                          unsigned n)
{
	if (c->closing)
		return UV_ECANCELED;
	size_t total = 0;
	for (unsigned i = 0; i < n; i++)
		total += bufs[i].len;
	if (c->req)
		c->req->pub.bytes_sent += total;
	size_t done = 0;
	if (c->backlog == 0) {
		int r = uv_try_write((uv_stream_t *)&c->tcp, bufs, n);
		if (r < 0 && r != UV_EAGAIN && r != UV_ENOSYS) {
			conn_close(c);
			return r;
		}
		done = r > 0 ? (size_t)r : 0;
	}
	if (done == total)
		return 0;

	size_t rest = total - done;
	struct write_req *wr = sl_xmalloc(sizeof(*wr) + rest);
	wr->conn = c;
	wr->len = rest;
	sl_bufs_copy_tail(wr->data, bufs, n, done);
	uv_buf_t b = uv_buf_init(wr->data, (unsigned)rest);
	int r = uv_write(&wr->w, (uv_stream_t *)&c->tcp, &b, 1, on_write_done);
	if (r < 0) {
		free(wr);
		conn_close(c);
		return r;
	}
	/* Queued bytes while answering: watch that the client takes them. */
	if (c->backlog == 0 &&
	    (c->phase == PHASE_HANDLING || c->phase == PHASE_LINGER)) {
		c->write_progress_ms = uv_now(c->server->loop);
		if (c->deadline == TIMER_NONE)
			set_timer(c, c->server->limits.send_timeout_ms);
	}
	c->backlog += rest;
	return 0;
}

/*
 * conn_write_raw, with the held head (if any) in front of bufs: the head
 * and the body's first bytes go out together.
 */
static int conn_write(struct sl_http_conn *c, const uv_buf_t *bufs, unsigned n)
{
	struct request_state *st = c->req;
	if (!st || !st->held_head)
		return n ? conn_write_raw(c, bufs, n) : 0;
	/* The head, and write_chunk's most: a size line, the pieces, CRLF
	 * and the last chunk. */
	uv_buf_t all[1 + SL_HTTP_WRITEV_MAX + 3];
	if (n >= sizeof(all) / sizeof(all[0]))
		return UV_EINVAL;
	all[0] = uv_buf_init(st->held_head, (unsigned)st->held_head_len);
	if (n)
		memcpy(all + 1, bufs, n * sizeof(*bufs));
	int rc = conn_write_raw(c, all, n + 1);
	free(st->held_head);
	st->held_head = NULL;
	return rc;
}

/*
 * Formats a response head; the caller frees it. body_len < 0: chunked.
 * Every value is copied whole (no fixed buffers that could cut a CRLF off);
 * a content type that could break the head's framing is replaced.
 */
static char *format_head(struct sl_http_conn *c, int status,
                         const char *content_type, const char *extra,
                         long long body_len, bool keep_alive, size_t *len)
{
	struct request_state *st = c->req;
	char length[48] = ""; /* fits any long long */
	struct sl_join lj = SL_JOIN(length);
	if (!status_has_body(status)) {
		/* No framing: the answer is its head (see status_has_body). */
	} else if (body_len >= 0) {
		sl_join_str(&lj, "Content-Length: ");
		sl_join_u64(&lj, (uint64_t)body_len);
		sl_join_str(&lj, "\r\n");
	} else if (!(st && st->http10)) {
		/* HTTP/1.0 has neither: the body ends with the close. */
		sl_join_str(&lj, "Transfer-Encoding: chunked\r\n");
	}
	if (content_type &&
	    !sl_http_field_value_ok(content_type, SL_HTTP_CONTENT_TYPE_MAX)) {
		sl_debug(
		    "http: a Content-Type of %zu bytes is over %u bytes or "
		    "holds control bytes; sending %s instead",
		    strlen(content_type), SL_HTTP_CONTENT_TYPE_MAX,
		    SL_HTTP_CONTENT_TYPE_FALLBACK);
		content_type = SL_HTTP_CONTENT_TYPE_FALLBACK;
	}
	/* The id is sluice's own or was checked in assign_request_id. */
	bool has_id = st && st->pub.id[0];
	const char *server = c->server->limits.server_name;
	/*
	 * CORS goes on every head written here, so that no answer (an error
	 * sluice raises while parsing included) can lack it. The Origin was
	 * checked in request_origin() before it is echoed.
	 */
	bool cors_on = c->server->limits.n_cors_origins > 0;
	const char *acao =
	    cors_allowed(&c->server->limits, st ? &st->pub : NULL);
	/*
	 * Joined from pieces rather than printed: a head is written for every
	 * request, and printf's parsing of a long format was the larger part
	 * of its cost.
	 */
	/* Every caller passes a three-digit status; a longer one is cut. */
	char status_text[8];
	struct sl_join sj = SL_JOIN(status_text);
	sl_join_u64(&sj, (uint64_t)SL_MAX(status, 0));
	sl_join_str(&sj, " ");
	size_t status_len = sj.len;
	const char *pieces[] = {
	    "HTTP/1.1 ",
	    status_text,
	    sl_http_reason(status),
	    "\r\nServer: ",
	    server ? server : "sluice/" SL_VERSION,
	    "\r\nDate: ",
	    http_date(c->server),
	    "\r\n",
	    content_type ? "Content-Type: " : "",
	    content_type ? content_type : "",
	    content_type ? "\r\n" : "",
	    length,
	    keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n",
	    has_id ? "X-Request-Id: " : "",
	    has_id ? st->pub.id : "",
	    has_id ? "\r\n" : "",
	    acao ? "Access-Control-Allow-Origin: " : "",
	    acao ? acao : "",
	    acao ? "\r\n" : "",
	    cors_on ? "Vary: Origin\r\n" : "",
	    st ? st->pub.own_headers : "",
	    extra ? extra : "",
	    "\r\n",
	};
	enum { N_PIECES = sizeof(pieces) / sizeof(pieces[0]) };
	size_t piece_len[N_PIECES];
	size_t total = 0;
	for (size_t i = 0; i < N_PIECES; i++) {
		piece_len[i] = i == 1 ? status_len : strlen(pieces[i]);
		total += piece_len[i];
	}
	char *head = sl_xmalloc(total + 1);
	char *out = head;
	for (size_t i = 0; i < N_PIECES; i++) {
		memcpy(out, pieces[i], piece_len[i]);
		out += piece_len[i];
	}
	*out = '\0';
	*len = total;
	if (st)
		st->pub.status = status;
	return head;
}

/*
 * Whether the connection stays open after the current response: what the
 * request asked for, unless the server is draining or closing. The head
 * says the same, so that a client is told "close" before it happens.
 */
static bool will_keep_alive(const struct sl_http_conn *c)
{
	return c->req->keep_alive && !c->server->closing &&
	       !c->server->draining;
}

/* The response is fully queued: on to the next request, or close. */
static void request_complete(struct sl_http_conn *c)
{
	struct request_state *st = c->req;
	bool keep_alive = will_keep_alive(c);
	request_finished(c, st, true);
	c->req = NULL;
	c->draining_wait = false;
	request_free(st);
	if (c->closing)
		return;
	if (!keep_alive) {
		conn_finish(c);
		return;
	}
	c->phase = PHASE_IDLE;
	/*
	 * A pipelined request already read is parsed from the timer, on the
	 * next loop iteration: a response can complete inside a libcurl
	 * callback, where dispatching a new request must not happen. When a
	 * parse loop is running, it goes on by itself.
	 */
	bool next_waiting = c->pending_len > 0 && !c->parsing;
	set_timer(c, next_waiting ? 0 : c->server->limits.idle_timeout_ms);
	conn_update_reading(c);
}

static bool can_respond(struct sl_http_request *req)
{
	struct request_state *st = state_of(req);
	return st->dispatched && !req->conn->closing;
}

/*
 * A final call (respond, stream end, abort) on a connection already
 * closing: the response cannot go out, but the handler is done with the
 * request all the same, so it hears nothing more about it.
 */
static void detach_handler(struct sl_http_request *req)
{
	req->on_abort = NULL;
	req->on_drain = NULL;
	req->handler_data = NULL;
}

void sl_http_respond(struct sl_http_request *req, int status,
                     const char *content_type, const char *extra_headers,
                     const void *body, size_t len)
{
	struct sl_http_conn *c = req->conn;
	struct request_state *st = state_of(req);
	if (!can_respond(req)) {
		detach_handler(req);
		return;
	}
	if (!status_has_body(status))
		st->head_only = true;
	size_t head_len;
	char *head = format_head(c, status, content_type, extra_headers,
	                         (long long)len, will_keep_alive(c), &head_len);
	uv_buf_t bufs[2] = {uv_buf_init(head, (unsigned)head_len),
	                    uv_buf_init((char *)body, (unsigned)len)};
	conn_write_raw(c, bufs, len && !st->head_only ? 2 : 1);
	free(head);
	request_complete(c);
}

static char *error_body(int status, const char *type, const char *message,
                        size_t *len)
{
	json_t *j = json_pack("{s:{s:s, s:s, s:i}}", "error", "message",
	                      message, "type", type, "code", status);
	char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!body)
		body = sl_xasprintf("{\"error\":{\"message\":\"%s\",\"type\":"
		                    "\"%s\",\"code\":%d}}",
		                    "(message not valid UTF-8)", type, status);
	*len = strlen(body);
	return body;
}

void sl_http_respond_error(struct sl_http_request *req, int status,
                           const char *type, const char *extra_headers,
                           const char *fmt, ...)
{
	char message[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	size_t len;
	char *body = error_body(status, type, message, &len);
	sl_http_respond(req, status, SL_HTTP_JSON, extra_headers, body, len);
	free(body);
}

int sl_http_stream_start(struct sl_http_request *req, int status,
                         const char *content_type, const char *extra_headers,
                         long long content_length)
{
	struct sl_http_conn *c = req->conn;
	struct request_state *st = state_of(req);
	if (!can_respond(req))
		return UV_ECANCELED;
	if (!status_has_body(status))
		st->head_only = true; /* and content_length means nothing */
	st->chunked = content_length < 0 && !st->http10 && !st->head_only;
	if (content_length < 0 && st->http10 && !st->head_only)
		st->keep_alive = false; /* the body ends with the connection */
	size_t len;
	free(st->held_head);
	st->held_head = format_head(c, status, content_type, extra_headers,
	                            content_length, will_keep_alive(c), &len);
	st->held_head_len = len;
	return 0;
}

int sl_http_flush(struct sl_http_request *req)
{
	if (!can_respond(req))
		return UV_ECANCELED;
	return conn_write(req->conn, NULL, 0);
}

/*
 * A chunk's size line, "%zx\r\n" without printf's cost (it is written for
 * every relayed event); `line` has room for 16 digits and CRLF. Returns
 * its length.
 */
static unsigned chunk_size_line(char *line, size_t size)
{
	char digits[16];
	unsigned n = 0;
	do {
		digits[n++] = "0123456789abcdef"[size & 0xf];
		size >>= 4;
	} while (size > 0);
	for (unsigned i = 0; i < n; i++)
		line[i] = digits[n - 1 - i];
	line[n] = '\r';
	line[n + 1] = '\n';
	return n + 2;
}

/*
 * Writes n pieces as one chunk (its size line, the pieces, CRLF) and, when
 * `last`, the chunk that ends the body, all in one write to the socket.
 * Where chunks end means nothing to the client (an SSE event is framed by
 * its blank line), and one size line instead of one per piece spares the
 * kernel two buffers per piece.
 */
static int write_chunk(struct sl_http_request *req, const uv_buf_t *pieces,
                       unsigned n, bool last)
{
	struct sl_http_conn *c = req->conn;
	struct request_state *st = state_of(req);
	/* A HEAD response's body is never written: its head goes now. */
	if (st->head_only)
		n = 0;
	if (n > SL_HTTP_WRITEV_MAX)
		return UV_EINVAL;
	char size[20];
	uv_buf_t bufs[SL_HTTP_WRITEV_MAX + 3];
	unsigned k = st->chunked;
	size_t total = 0;
	for (unsigned i = 0; i < n; i++) {
		/* An empty chunk would end the stream. */
		if (pieces[i].len == 0)
			continue;
		bufs[k++] = pieces[i];
		total += pieces[i].len;
	}
	if (total == 0)
		k = 0;
	else if (st->chunked) {
		bufs[0] = uv_buf_init(size, chunk_size_line(size, total));
		bufs[k++] = uv_buf_init("\r\n", 2);
	}
	if (last && st->chunked && !st->head_only)
		bufs[k++] = uv_buf_init("0\r\n\r\n", 5);
	/* Nothing to write but a held head: it goes only with the end. */
	if (k == 0 && !last && !st->head_only)
		return 0;
	int rc = conn_write(c, bufs, k);
	if (rc == 0 && c->backlog > SL_HTTP_BACKLOG_HIGH)
		c->draining_wait = true;
	return rc;
}

int sl_http_stream_writev(struct sl_http_request *req, const uv_buf_t *pieces,
                          unsigned n)
{
	if (!can_respond(req))
		return UV_ECANCELED;
	return write_chunk(req, pieces, n, false);
}

int sl_http_stream_write(struct sl_http_request *req, const void *data,
                         size_t len)
{
	uv_buf_t piece = uv_buf_init((char *)data, (unsigned)len);
	return sl_http_stream_writev(req, &piece, 1);
}

void sl_http_stream_end_with(struct sl_http_request *req,
                             const uv_buf_t *pieces, unsigned n)
{
	if (!can_respond(req)) {
		detach_handler(req);
		return;
	}
	write_chunk(req, pieces, n, true);
	request_complete(req->conn);
}

void sl_http_stream_end(struct sl_http_request *req)
{
	sl_http_stream_end_with(req, NULL, 0);
}

void sl_http_abort(struct sl_http_request *req)
{
	struct sl_http_conn *c = req->conn;
	(void)state_of(req);
	/* Not the handler's to hear about: it asked for this. */
	detach_handler(req);
	if (!can_respond(req))
		return;
	conn_close(c);
}

size_t sl_http_backlog(const struct sl_http_request *req)
{
	return req->conn->backlog;
}

void sl_http_want_drain(struct sl_http_request *req)
{
	req->conn->draining_wait = true;
}

/* ---- errors sluice raises while parsing ---- */

/* Answers `status` with Connection: close and lingers; no handler saw it. */
static void assign_request_id(struct sl_http_server *s,
                              struct request_state *st);

/* conn_reject() with header lines (each ending in CRLF) added, or NULL. */
static void conn_reject_with(struct sl_http_conn *c, int status,
                             const char *extra_headers, const char *message)
{
	/* A refused request is traced like any other: it gets an id too. */
	if (c->req && !c->req->pub.id[0])
		assign_request_id(c->server, c->req);
	const char *type = status == 408   ? "timeout_error"
	                   : status >= 500 ? "server_error"
	                                   : "invalid_request_error";
	size_t body_len, head_len;
	char *body = error_body(status, type, message, &body_len);
	char *head = format_head(c, status, SL_HTTP_JSON, extra_headers,
	                         (long long)body_len, false, &head_len);
	uv_buf_t bufs[2] = {uv_buf_init(head, (unsigned)head_len),
	                    uv_buf_init(body, (unsigned)body_len)};
	conn_write_raw(c, bufs, 2);
	free(head);
	free(body);
	if (c->req) {
		c->req->pub.info.outcome = "rejected";
		request_finished(c, c->req, true);
	}
	request_free(c->req);
	c->req = NULL;
	sl_debug("http: answered %d and closing: %s", status, message);
	conn_finish(c);
}

static void conn_reject(struct sl_http_conn *c, int status, const char *message)
{
	conn_reject_with(c, status, NULL, message);
}

/* ---- the read side ---- */

/* A request id: the client's when sane, else 16 random-looking hex digits. */
static void assign_request_id(struct sl_http_server *s,
                              struct request_state *st)
{
	const char *given = sl_http_header(&st->pub, "X-Request-Id");
	if (given) {
		size_t n = strlen(given);
		bool sane = n > 0 && n <= SL_HTTP_REQUEST_ID_MAX;
		for (size_t i = 0; sane && i < n; i++)
			sane = given[i] > 0x20 && given[i] < 0x7f;
		if (sane) {
			memcpy(st->pub.id, given, n + 1);
			return;
		}
	}
	/* splitmix64 over a per-process random seed and a counter */
	uint64_t z = s->id_seed + ++s->request_counter * 0x9e3779b97f4a7c15u;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	z ^= z >> 31;
	/* "%016llx", without printf's reading of a format per request */
	for (int i = 15; i >= 0; i--, z >>= 4)
		st->pub.id[i] = "0123456789abcdef"[z & 0xf];
	st->pub.id[16] = '\0';
}

/*
 * The client behind a trusted proxy, from X-Forwarded-For; only requests
 * shown to on_head or the handler get this far, so one refused while it
 * is parsed keeps the peer.
 */
static void resolve_client(struct sl_http_conn *c, struct request_state *st)
{
	const struct sl_http_limits *l = &c->server->limits;
	if (l->n_trusted_proxies == 0)
		return;
	struct sl_ip client = sl_client_addr_resolve(
	    l->trusted_proxies, l->n_trusted_proxies, &c->peer, st->pub.headers,
	    st->pub.n_headers);
	sl_ip_format(&client, st->pub.client, sizeof(st->pub.client));
}

/* The request's id and client, once: at its head when it has a body. */
static void identify(struct sl_http_conn *c, struct request_state *st)
{
	if (st->identified)
		return;
	st->identified = true;
	assign_request_id(c->server, st);
	resolve_client(c, st);
}

static void dispatch(struct sl_http_conn *c)
{
	struct request_state *st = c->req;
	llhttp_resume(&c->parser);
	identify(c, st);
	st->dispatched = true;
	c->server->n_busy++;
	c->server->handler(&st->pub, c->server->handler_data);
}

/*
 * Shows a head to on_head (http.h). The request is answerable as a
 * dispatched one while on_head runs; true when on_head let it through.
 */
static bool head_passes(struct sl_http_conn *c)
{
	struct sl_http_server *s = c->server;
	struct request_state *st = c->req;
	identify(c, st);
	/* An answer now leaves the body unread: the connection closes. */
	st->keep_alive = false;
	st->dispatched = true;
	s->n_busy++;
	if (s->on_head(&st->pub, s->handler_data)) {
		st->dispatched = false;
		s->n_busy--;
		return true;
	}
	if (c->req == st && !c->closing) {
		/* on_head broke its contract: refused, not left hanging. */
		sl_warn("http: a request's head was refused without an "
		        "answer; answering 500");
		conn_reject(c, 500, "internal error");
	}
	return false;
}

/*
 * A head is parsed and a body follows: on_head sees it, then the body gets
 * its body memory (http.h) or the request is refused with 503. Returns
 * true when the body is to be read now; else the request has been answered
 * and the connection is closing.
 */
static bool body_begin(struct sl_http_conn *c)
{
	struct sl_http_server *s = c->server;
	struct request_state *st = c->req;
	const struct sl_http_limits *lim = &s->limits;
	if (s->on_head && !head_passes(c))
		return false;
	/* A chunked body's length is known at its end only: --max-body. */
	bool chunked = (c->parser.flags & F_CHUNKED) != 0;
	size_t want =
	    chunked ? lim->max_body : (size_t)c->parser.content_length;
	if (want > lim->max_body_memory - s->body_memory) {
		sl_debug(
		    "http: a body of up to %zu bytes would take the memory "
		    "of bodies being read past --max-body-memory (%zu of "
		    "%zu in use)",
		    want, s->body_memory, lim->max_body_memory);
		st->pub.info.reject_reason = "body_memory";
		char retry[80];
		snprintf(retry, sizeof(retry),
		         "Retry-After: %u\r\nretry-after-ms: %u\r\n",
		         SL_HTTP_BODY_MEMORY_RETRY_S,
		         SL_HTTP_BODY_MEMORY_RETRY_S * 1000);
		conn_reject_with(c, 503, retry,
		                 "sluice is reading too many request bodies "
		                 "at once; retry shortly");
		return false;
	}
	s->body_memory += want;
	st->body_reserved = want;
	/* Only now may the client send what it held back for our word. */
	const char *expect = sl_http_header(&st->pub, "Expect");
	if (expect && !st->http10) {
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		uv_buf_t b = uv_buf_init((char *)cont, sizeof(cont) - 1);
		conn_write_raw(c, &b, 1);
	}
	c->phase = PHASE_BODY;
	set_timer(c, lim->body_timeout_ms);
	return true;
}

/*
 * Whether the next request must wait: a client that pipelines requests
 * without reading the answers would have sluice queue answer after answer
 * in memory. Parsing stops until the backlog is down to
 * SL_HTTP_PIPELINE_BACKLOG again; see on_write_done.
 */
static bool pipeline_blocked(const struct sl_http_conn *c)
{
	return c->phase == PHASE_IDLE && c->backlog > SL_HTTP_PIPELINE_BACKLOG;
}

static void arm_send_timeout(struct sl_http_conn *c);

/* Refuses what the scanner or llhttp would not take, and closes. */
static void conn_refuse(struct sl_http_conn *c, unsigned status,
                        const char *message)
{
	if (status == SL_HTTP_FRAME_CLOSE_SILENTLY) {
		/* Not an HTTP/1.x request: no access log line, no status. */
		sl_debug("http: closing without an answer: %s", message);
		conn_close(c);
		return;
	}
	/* Refused before llhttp saw a request begin: traced all the same. */
	if (!c->req)
		request_begin(c);
	conn_reject(c, (int)status, message);
}

/*
 * llhttp_execute() over the bytes the scanner allowed, with an HTTP/1.2 to
 * 1.9 version digit read as 1 (http_frame.h, fold_minor): llhttp refuses
 * those versions, and every rule after follows from the version it saw,
 * so the request is then HTTP/1.1 throughout (keep-alive, chunked bodies).
 * llhttp takes the two pieces as it takes a read split there.
 */
static llhttp_errno_t parser_feed(struct sl_http_conn *c, const char *p,
                                  size_t n)
{
	if (!c->frame.fold_minor)
		return llhttp_execute(&c->parser, p, n);
	c->frame.fold_minor = false;
	llhttp_errno_t e = HPE_OK;
	if (n > 1)
		e = llhttp_execute(&c->parser, p, n - 1);
	return e == HPE_OK ? llhttp_execute(&c->parser, "1", 1) : e;
}

/*
 * Parses data and dispatches the requests in it until one is being
 * answered, the data runs out, the connection closes or the client must
 * read its answers first. Returns the bytes consumed.
 */
static size_t conn_parse(struct sl_http_conn *c, const char *data, size_t len)
{
	size_t off = 0;
	c->parsing = true;
	while (off < len && !c->closing && c->phase <= PHASE_BODY) {
		if (pipeline_blocked(c)) {
			c->flush_wait = true;
			arm_send_timeout(c);
			break;
		}
		size_t feed =
		    sl_http_frame_scan(&c->frame, data + off, len - off,
		                       c->req ? &c->req->header_bytes : NULL,
		                       c->server->limits.max_header_bytes);
		llhttp_errno_t e = HPE_OK;
		if (feed > 0)
			e = parser_feed(c, data + off, feed);
		if (c->closing)
			break;
		if (e == HPE_PAUSED) {
			off = (size_t)(llhttp_get_error_pos(&c->parser) - data);
			if (!c->head_paused) {
				dispatch(c);
				continue;
			}
			c->head_paused = false;
			llhttp_resume(&c->parser);
			if (!body_begin(c)) {
				off = len; /* answered: the rest is discarded */
				break;
			}
			continue;
		}
		if (e == HPE_OK) {
			off += feed;
			if (c->frame.status) {
				conn_refuse(c, c->frame.status,
				            c->frame.message);
				off = len;
			}
			if (feed == 0)
				break; /* a CR waits for the next read */
			continue;
		}
		if (c->reject_status)
			conn_refuse(c, c->reject_status, c->reject_message);
		else {
			char msg[160];
			snprintf(msg, sizeof(msg), "malformed HTTP request: %s",
			         llhttp_get_error_reason(&c->parser));
			conn_refuse(c, 400, msg);
		}
		off = len;
	}
	c->parsing = false;
	return off;
}

/* Parses what `pending` holds, when nothing is being answered. */
static void conn_pump(struct sl_http_conn *c)
{
	if (c->parsing || c->closing || c->phase > PHASE_BODY ||
	    c->pending_len == 0)
		return;
	size_t used = conn_parse(c, c->pending, c->pending_len);
	if (c->closing)
		return;
	memmove(c->pending, c->pending + used, c->pending_len - used);
	c->pending_len -= used;
}

static void pending_append(struct sl_http_conn *c, const char *data, size_t len)
{
	if (!c->pending)
		c->pending = sl_xmalloc(SL_HTTP_PENDING_MAX);
	/* The caller never passes more than fits; see conn_update_reading. */
	len = SL_MIN(len, SL_HTTP_PENDING_MAX - c->pending_len);
	memcpy(c->pending + c->pending_len, data, len);
	c->pending_len += len;
}

/*
 * Input while lingering is discarded. A client still sending (the body of
 * a request refused at its head, say) has until it has been quiet for
 * SL_HTTP_LINGER_MS, so that it reads the answer rather than a reset when
 * it sends all before it reads, but no longer than the body timeout in all.
 */
static void linger_on(struct sl_http_conn *c)
{
	if (!c->shutdown_started)
		return; /* still sending the answer: the send timeout runs */
	uint64_t lingered = uv_now(c->server->loop) - c->linger_since;
	if (lingered + SL_HTTP_LINGER_MS <= c->server->limits.body_timeout_ms)
		set_timer(c, SL_HTTP_LINGER_MS);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct sl_http_conn *c = h->data;
	(void)suggested;
	if (c->pending_len == 0 || c->phase == PHASE_LINGER) {
		*buf = uv_buf_init(c->server->read_buf, SL_HTTP_READ_BUF);
		return;
	}
	size_t room = SL_HTTP_PENDING_MAX - c->pending_len;
	*buf = uv_buf_init(c->pending + c->pending_len, (unsigned)room);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	struct sl_http_conn *c = stream->data;
	if (nread < 0) {
		if (nread == UV_EOF && c->phase == PHASE_LINGER &&
		    !c->shutdown_started) {
			/* Finish sending the error first, then close. */
			c->peer_closed = true;
			uv_read_stop(stream);
			c->reading = false;
			return;
		}
		/* EOF or error: a client that leaves cancels its request. */
		conn_close(c);
		return;
	}
	if (nread == 0 || c->closing)
		return;
	if (c->phase == PHASE_LINGER) {
		linger_on(c);
		return; /* discard */
	}
	if (buf->base == c->server->read_buf) {
		size_t used = conn_parse(c, buf->base, (size_t)nread);
		if (!c->closing && used < (size_t)nread)
			pending_append(c, buf->base + used,
			               (size_t)nread - used);
	} else {
		c->pending_len += (size_t)nread;
		conn_pump(c);
	}
	conn_update_reading(c);
}

static void conn_update_reading(struct sl_http_conn *c)
{
	if (c->closing)
		return;
	bool want = !c->peer_closed && (c->phase == PHASE_LINGER ||
	                                c->pending_len < SL_HTTP_PENDING_MAX);
	if (want && !c->reading) {
		if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) ==
		    0)
			c->reading = true;
	} else if (!want && c->reading) {
		uv_read_stop((uv_stream_t *)&c->tcp);
		c->reading = false;
	}
}

/*
 * The send timeout: closes a client that took no response bytes for
 * send_timeout_ms, else sets the timer for when it would be that long.
 */
static void arm_send_timeout(struct sl_http_conn *c)
{
	if (c->backlog == 0)
		return;
	uint64_t idle = uv_now(c->server->loop) - c->write_progress_ms;
	uint64_t limit = c->server->limits.send_timeout_ms;
	if (idle >= limit) {
		sl_debug("http: client took no bytes for %llu ms; closing",
		         (unsigned long long)idle);
		conn_close(c);
	} else {
		set_timer(c, limit - idle);
	}
}

static void on_timer(uv_timer_t *t)
{
	struct sl_http_conn *c = t->data;
	uint64_t now = uv_now(c->server->loop);
	c->armed = TIMER_NONE;
	if (c->deadline == TIMER_NONE)
		return;
	if (now < c->deadline) {
		c->armed = c->deadline;
		uv_timer_start(t, on_timer, c->deadline - now, 0);
		return;
	}
	c->deadline = TIMER_NONE;
	switch (c->phase) {
	case PHASE_HEADERS:
		conn_reject(c, 408, "request headers not received in time");
		break;
	case PHASE_BODY:
		conn_reject(c, 408, "request body not received in time");
		break;
	case PHASE_IDLE:
		if (c->flush_wait) {
			/* Waiting for the client to read: the send timeout. */
			arm_send_timeout(c);
			break;
		}
		if (c->pending_len > 0) {
			/* scheduled by request_complete: the next request */
			set_timer(c, c->server->limits.idle_timeout_ms);
			conn_pump(c);
			conn_update_reading(c);
			break;
		}
		/* keep-alive idle, or a client that never spoke */
		conn_close(c);
		break;
	case PHASE_LINGER:
		if (c->shutdown_started) {
			conn_close(c); /* the client did not finish in time */
			break;
		}
		/* Still flushing the last response: as while handling. */
		SL_FALLTHROUGH;
	case PHASE_HANDLING: arm_send_timeout(c); break;
	}
}

/* ---- closing ---- */

/* The end of sl_http_server_close(): nothing left open. */
static void server_maybe_closed(struct sl_http_server *s)
{
	if (!s->closing || s->n_conns > 0 || s->open_handles > 0)
		return;
	free(s->read_buf);
	s->read_buf = NULL;
	if (s->on_closed)
		s->on_closed(s);
}

static void on_conn_closed(uv_handle_t *h)
{
	struct sl_http_conn *c = h->data;
	if (--c->open_handles > 0)
		return;
	struct sl_http_server *s = c->server;
	struct request_state *st = c->req;
	if (st && st->dispatched) {
		if (st->pub.on_abort)
			st->pub.on_abort(&st->pub);
		request_finished(c, st, false);
	}
	request_free(st);
	free(c->pending);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->n_conns--;
	free(c);
	server_maybe_closed(s);
	if (s->n_conns == 0 && s->draining && !s->closing && s->on_empty)
		s->on_empty(s);
}

static void conn_close(struct sl_http_conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
	uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	struct sl_http_conn *c = req->data;
	if (status < 0)
		conn_close(c);
	/* else keep reading until EOF or the linger timer */
}

static void maybe_linger(struct sl_http_conn *c)
{
	if (!c->finish_when_flushed || c->backlog > 0 || c->shutdown_started ||
	    c->closing)
		return;
	c->shutdown_started = true;
	c->shutdown_req.data = c;
	if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp,
	                on_shutdown) != 0) {
		conn_close(c);
		return;
	}
	if (c->peer_closed) {
		conn_close(c);
		return;
	}
	c->linger_since = uv_now(c->server->loop);
	set_timer(c, SL_HTTP_LINGER_MS);
}

/* Sends what is queued, then FIN, then discards input for a moment. */
static void conn_finish(struct sl_http_conn *c)
{
	if (c->closing)
		return;
	c->phase = PHASE_LINGER;
	c->finish_when_flushed = true;
	/* Until the response is flushed, the send timeout applies. */
	c->write_progress_ms = uv_now(c->server->loop);
	set_timer(c, c->server->limits.send_timeout_ms);
	conn_update_reading(c);
	maybe_linger(c);
}

/* ---- accepting ---- */

/* A new connection in the server's list, its handles initialised. */
static struct sl_http_conn *conn_new(struct sl_http_server *s)
{
	struct sl_http_conn *c = sl_xcalloc(1, sizeof(*c));
	c->server = s;
	uv_tcp_init(s->loop, &c->tcp);
	uv_timer_init(s->loop, &c->timer);
	c->deadline = c->armed = TIMER_NONE;
	c->tcp.data = c;
	c->timer.data = c;
	c->open_handles = 2;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->n_conns++;
	return c;
}

/* Starts a connection whose socket is open: the limit, then reading. */
static void conn_start(struct sl_http_conn *c)
{
	struct sl_http_server *s = c->server;
	/* Without it each streamed chunk can wait ~40 ms on delayed ACKs. */
	uv_tcp_nodelay(&c->tcp, 1);
	/* Once per connection: every request on it has the same peer. */
	struct sockaddr_storage addr;
	int addr_len = sizeof(addr);
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&addr, &addr_len) ==
	        0 &&
	    sl_ip_from_sockaddr((struct sockaddr *)&addr, &c->peer) == 0)
		sl_ip_format(&c->peer, c->peer_text, sizeof(c->peer_text));
	llhttp_init(&c->parser, HTTP_REQUEST, &parser_settings);
	c->parser.data = c;
	c->phase = PHASE_IDLE;
	if (s->n_conns > s->limits.max_connections) {
		sl_warn("http: refusing a connection: %u open, the limit is "
		        "--max-connections %u",
		        s->n_conns - 1, s->limits.max_connections);
		s->refused_connections++;
		conn_reject(c, 503, "too many open connections");
		return;
	}
	/* A new client has the header timeout to send its first request. */
	set_timer(c, s->limits.header_timeout_ms);
	conn_update_reading(c);
}

static void on_connection(uv_stream_t *listener, int status)
{
	struct sl_http_server *s = listener->data;
	if (status < 0) {
		sl_warn("http: accept failed: %s", uv_strerror(status));
		return;
	}
	struct sl_http_conn *c = conn_new(s);
	if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
		conn_close(c);
		return;
	}
	conn_start(c);
}

int sl_http_server_adopt(struct sl_http_server *s, uv_os_sock_t fd)
{
	if (!s->read_buf || s->closing)
		return UV_EINVAL;
	struct sl_http_conn *c = conn_new(s);
	int rc = uv_tcp_open(&c->tcp, fd);
	if (rc != 0) {
		conn_close(c); /* the handle never owned fd */
		return rc;
	}
	conn_start(c);
	return 0;
}

int sl_http_server_listen(struct sl_http_server *s, uv_loop_t *loop,
                          const char *host, unsigned port,
                          const struct sl_http_limits *limits,
                          sl_http_handler handler, void *data)
{
	memset(s, 0, sizeof(*s));
	s->loop = loop;
	s->limits = *limits;
	if (s->limits.server_name &&
	    !sl_http_field_value_ok(s->limits.server_name,
	                            SL_HTTP_CONTENT_TYPE_MAX)) {
		sl_warn("http: the server name holds control bytes or is too "
		        "long; using sluice's own");
		s->limits.server_name = NULL;
	}
	/* The per-request arrays are sized for the compiled-in maximum. */
	s->limits.max_headers =
	    SL_MIN(s->limits.max_headers, SL_HTTP_MAX_HEADERS);
	/* Less than one body's worth would refuse every largest body. */
	s->limits.max_body_memory =
	    SL_MAX(s->limits.max_body_memory, s->limits.max_body);
	s->handler = handler;
	s->handler_data = data;
	if (uv_random(NULL, NULL, &s->id_seed, sizeof(s->id_seed), 0, NULL))
		s->id_seed = sl_now_ns();

	struct sockaddr_storage addr;
	int rc = uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&addr);
	if (rc != 0)
		rc = uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&addr);
	if (rc != 0)
		return rc;

	uv_tcp_init(loop, &s->listener);
	s->listener.data = s;
	s->open_handles = 1;
	rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&s->listener, SOMAXCONN,
		               on_connection);
	if (rc != 0)
		return rc; /* the caller closes with sl_http_server_close */
	s->read_buf = sl_xmalloc(SL_HTTP_READ_BUF);
	s->listening = true;
	return 0;
}

unsigned sl_http_server_port(const struct sl_http_server *s)
{
	struct sockaddr_storage addr;
	int len = sizeof(addr);
	if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&addr, &len))
		return 0;
	if (addr.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
	return ntohs(((struct sockaddr_in *)&addr)->sin_port);
}

unsigned sl_http_server_busy(const struct sl_http_server *s)
{
	return s->n_busy;
}

void sl_http_server_drain(struct sl_http_server *s)
{
	s->draining = true;
	struct sl_http_conn *next;
	for (struct sl_http_conn *c = s->conns; c; c = next) {
		next = c->next;
		if (c->phase == PHASE_IDLE && c->pending_len == 0)
			conn_close(c);
	}
}

static void on_listener_closed(uv_handle_t *h)
{
	struct sl_http_server *s = h->data;
	s->open_handles--;
	server_maybe_closed(s);
}

void sl_http_server_stop_accepting(struct sl_http_server *s)
{
	if (s->open_handles > 0 && !uv_is_closing((uv_handle_t *)&s->listener))
		uv_close((uv_handle_t *)&s->listener, on_listener_closed);
	s->listening = false;
}

void sl_http_server_close(struct sl_http_server *s,
                          void (*on_closed)(struct sl_http_server *))
{
	s->closing = true;
	s->on_closed = on_closed;
	sl_http_server_stop_accepting(s);
	for (struct sl_http_conn *c = s->conns; c; c = c->next)
		conn_close(c);
	server_maybe_closed(s);
}

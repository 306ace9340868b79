/*
 * http_write.c: responses: their heads (status line, Date, CORS, the
 * request's own header lines), the writes to the socket and the backlog
 * they leave, streamed bodies (chunked, or to the close for HTTP/1.0),
 * the end of a request once its answer is queued, and the answers sluice
 * gives itself to a request it refuses while reading it. Separate from
 * reading (http_read.c): a handler answers from any loop callback, long
 * after its request was read, and only the connection's phase, timer and
 * end (http.c) tie the two together.
 */
#include "sluice/net/http.h"

#include "sluice/base/common.h"
#include "sluice/net/http_rules.h"
#include "sluice/base/log.h"

#include "http_impl.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_build_config.h"

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

static void on_write_done(uv_write_t *w, int status)
{
	struct write_req *wr = sl_container_of(w, struct write_req, w);
	struct sl_http_conn *c = wr->conn;
	c->backlog -= wr->len;
	c->write_progress_ms = uv_now(c->server->loop);
	free(wr);
	if (status < 0) {
		sl_http_conn_close(c);
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
		sl_http_set_timer(c, 0);
	}
	sl_http_maybe_linger(c);
}

/*
 * Writes bufs in order: directly when nothing is queued, else (or for what
 * the socket did not take) through a copied uv_write request.
 */
int sl_http_conn_write_raw(struct sl_http_conn *c, const uv_buf_t *bufs,
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
			sl_http_conn_close(c);
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
		sl_http_conn_close(c);
		return r;
	}
	/* Queued bytes while answering: watch that the client takes them. */
	if (c->backlog == 0 &&
	    (c->phase == PHASE_HANDLING || c->phase == PHASE_LINGER)) {
		c->write_progress_ms = uv_now(c->server->loop);
		if (c->deadline == TIMER_NONE)
			sl_http_set_timer(c, c->server->limits.send_timeout_ms);
	}
	c->backlog += rest;
	return 0;
}

/*
 * sl_http_conn_write_raw, with the held head (if any) in front of bufs: the
 * head and the body's first bytes go out together.
 */
static int conn_write(struct sl_http_conn *c, const uv_buf_t *bufs, unsigned n)
{
	struct request_state *st = c->req;
	if (!st || !st->held_head)
		return n ? sl_http_conn_write_raw(c, bufs, n) : 0;
	/* The head, and write_chunk's most: a size line, the pieces, CRLF
	 * and the last chunk. */
	uv_buf_t all[1 + SL_HTTP_WRITEV_MAX + 3];
	if (n >= sizeof(all) / sizeof(all[0]))
		return UV_EINVAL;
	all[0] = uv_buf_init(st->held_head, (unsigned)st->held_head_len);
	if (n)
		memcpy(all + 1, bufs, n * sizeof(*bufs));
	int rc = sl_http_conn_write_raw(c, all, n + 1);
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
	/* The id is sluice's own or was checked in sl_http_assign_request_id.
	 */
	bool has_id = st && st->pub.id[0];
	const char *server = c->server->limits.server_name;
	/*
	 * CORS goes on every head written here, so that no answer (an error
	 * sluice raises while parsing included) can lack it. The Origin was
	 * checked in request_origin() before it is echoed.
	 */
	bool cors_on = c->server->limits.n_cors_origins > 0;
	/* Announced on the chunked head whose end carries them. */
	bool trailers =
	    st && st->trailers && status_has_body(status) && body_len < 0;
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
	    trailers ? "Trailer: " : "",
	    trailers ? st->pub.trailer : "",
	    trailers ? "\r\n" : "",
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
	sl_http_request_finished(c, st, true);
	c->req = NULL;
	c->draining_wait = false;
	sl_http_request_free(st);
	if (c->closing)
		return;
	if (!keep_alive) {
		sl_http_conn_finish(c);
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
	sl_http_set_timer(c,
	                  next_waiting ? 0 : c->server->limits.idle_timeout_ms);
	sl_http_conn_update_reading(c);
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
	sl_http_conn_write_raw(c, bufs, len && !st->head_only ? 2 : 1);
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
	st->trailers = st->chunked && req->trailer && req->on_trailers &&
	               sl_http_te_trailers(req->headers, req->n_headers);
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
	/* The last chunk, its trailer fields and the blank line. */
	char end[3 + SL_HTTP_TRAILERS_MAX + 2];
	if (last && st->chunked && !st->head_only && st->trailers) {
		size_t n_fields =
		    req->on_trailers(req, end + 3, SL_HTTP_TRAILERS_MAX);
		/* A handler's bug: no trailers, but the framing kept. */
		if (n_fields > SL_HTTP_TRAILERS_MAX)
			n_fields = 0;
		memcpy(end, "0\r\n", 3);
		memcpy(end + 3 + n_fields, "\r\n", 2);
		bufs[k++] = uv_buf_init(end, (unsigned)(3 + n_fields + 2));
	} else if (last && st->chunked && !st->head_only) {
		bufs[k++] = uv_buf_init("0\r\n\r\n", 5);
	}
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
	sl_http_conn_close(c);
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

/*
 * sl_http_conn_reject() with header lines (each ending in CRLF) added, or
 * NULL.
 */
void sl_http_conn_reject_with(struct sl_http_conn *c, int status,
                              const char *extra_headers, const char *message)
{
	/* A refused request is traced like any other: it gets an id too. */
	if (c->req && !c->req->pub.id[0])
		sl_http_assign_request_id(c->server, c->req);
	const char *type = status == 408   ? "timeout_error"
	                   : status >= 500 ? "server_error"
	                                   : "invalid_request_error";
	size_t body_len, head_len;
	char *body = error_body(status, type, message, &body_len);
	char *head = format_head(c, status, SL_HTTP_JSON, extra_headers,
	                         (long long)body_len, false, &head_len);
	uv_buf_t bufs[2] = {uv_buf_init(head, (unsigned)head_len),
	                    uv_buf_init(body, (unsigned)body_len)};
	sl_http_conn_write_raw(c, bufs, 2);
	free(head);
	free(body);
	if (c->req) {
		c->req->pub.info.outcome = "rejected";
		sl_http_request_finished(c, c->req, true);
	}
	sl_http_request_free(c->req);
	c->req = NULL;
	sl_debug("http: answered %d and closing: %s", status, message);
	sl_http_conn_finish(c);
}

/* Answers `status` with Connection: close and lingers; no handler saw it. */
void sl_http_conn_reject(struct sl_http_conn *c, int status,
                         const char *message)
{
	sl_http_conn_reject_with(c, status, NULL, message);
}

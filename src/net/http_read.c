/*
 * http_read.c: a connection's input: reads, the requests parsed from them
 * with their bodies, and each request handed to on_head and the handler.
 * It owns a request's parse-time state from its first byte to its end, the
 * header and body limits, and the body memory (http.h) a body holds while
 * it is read. Separate from writing (http_write.c), which answers a request
 * whenever the handler does, and from the connection's life (http.c).
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
 */
#include "sluice/net/http.h"

#include "sluice/base/common.h"
#include "sluice/net/http_frame.h"
#include "sluice/net/http_rules.h"
#include "sluice/base/log.h"

#include "http_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- request memory ---- */

/*
 * The request's end, reported once: completed or not. Also where a
 * dispatched request stops counting as busy.
 */
void sl_http_request_finished(struct sl_http_conn *c, struct request_state *st,
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

void sl_http_request_free(struct request_state *st)
{
	if (!st)
		return;
	body_release(st);
	free(st->arena);
	free(st->pub.body);
	free(st->pub.info.trace);
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
	sl_http_request_free(c->req);
	c->req = sl_xcalloc(1, sizeof(*c->req));
	c->req->pub.conn = c;
	c->req->pub.start_ns = sl_now_ns();
	c->req->pub.info.queue_ms = -1;
	c->req->pub.info.ttft_ms = -1;
	c->req->pub.info.predicted_ttft_ms = -1;
	c->req->pub.info.tpot_ms = -1;
	memcpy(c->req->pub.client, c->peer_text, sizeof(c->peer_text));
}

static int on_message_begin(llhttp_t *p)
{
	struct sl_http_conn *c = conn_of(p);
	request_begin(c);
	c->phase = PHASE_HEADERS;
	sl_http_set_timer(c, c->server->limits.header_timeout_ms);
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
	sl_http_stop_timer(c);
	c->phase = PHASE_HANDLING;
	/* The next bytes are the next request's: scan its head. */
	sl_http_frame_reset(&c->frame);
	/* Never llhttp_pause() inside a callback; returning this pauses. */
	return HPE_PAUSED;
}

const llhttp_settings_t sl_http_parser_settings = {
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

/* ---- the read side ---- */

/* A request id: the client's when sane, else 16 random-looking hex digits. */
void sl_http_assign_request_id(struct sl_http_server *s,
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
	sl_http_assign_request_id(c->server, st);
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
		sl_http_conn_reject(c, 500, "internal error");
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
		sl_http_conn_reject_with(
		    c, 503, retry,
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
		sl_http_conn_write_raw(c, &b, 1);
	}
	c->phase = PHASE_BODY;
	sl_http_set_timer(c, lim->body_timeout_ms);
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

/* Refuses what the scanner or llhttp would not take, and closes. */
static void conn_refuse(struct sl_http_conn *c, unsigned status,
                        const char *message)
{
	if (status == SL_HTTP_FRAME_CLOSE_SILENTLY) {
		/* Not an HTTP/1.x request: no access log line, no status. */
		sl_debug("http: closing without an answer: %s", message);
		sl_http_conn_close(c);
		return;
	}
	/* Refused before llhttp saw a request begin: traced all the same. */
	if (!c->req)
		request_begin(c);
	sl_http_conn_reject(c, (int)status, message);
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
			sl_http_arm_send_timeout(c);
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
void sl_http_conn_pump(struct sl_http_conn *c)
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
	/* The caller never passes more than fits; see
	 * sl_http_conn_update_reading. */
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
		sl_http_set_timer(c, SL_HTTP_LINGER_MS);
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
		sl_http_conn_close(c);
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
		sl_http_conn_pump(c);
	}
	sl_http_conn_update_reading(c);
}

void sl_http_conn_update_reading(struct sl_http_conn *c)
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

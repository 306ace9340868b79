/*
 * h1_client.c: pooled keep-alive HTTP/1.1 connections to plain http://
 * upstreams, one request at a time on each (see h1_client.h).
 *
 * A request is written with one uv_write (head and body as two buffers)
 * and its response parsed by llhttp as it is read. The parser's
 * on_message_complete pauses it, so that the end of a response is handled
 * after llhttp_execute() returns, outside every parser callback: the
 * connection goes back to its pool (or closes), and only then does on_done
 * run, which may at once start the next request on the same connection.
 */
#include "sluice/net/h1_client.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

struct sl_h1_pool {
	struct sl_h1 *h1;
	struct sl_h1_pool *next;
	char *url;       /* the key: the base URL as the owner gave it */
	char *authority; /* "host[:port]" as written, for the Host header */
	char *name;      /* the host, without IPv6 brackets */
	char *prefix;    /* the URL's path, "" for none */
	char port[8];
	/* The host's addresses; addr_at: the one new connections try first. */
	struct sockaddr_storage addrs[SL_H1_ADDRS_MAX];
	unsigned n_addrs, addr_at;
	bool resolved;  /* addrs holds at least one address */
	bool resolving; /* gai is running */
	uv_getaddrinfo_t gai;
	struct sl_h1_conn *idle; /* newest first: the warmest is reused */
	unsigned conns;          /* connecting, busy and idle */
	/*
	 * Connections left for the peer to close (not counted in conns: the
	 * peer is done with them), and whether it closes every connection
	 * after a chunked answer (see peer_closing).
	 */
	struct sl_h1_conn *draining;
	bool streams_close;
	unsigned streams_kept; /* chunked answers found still open, to
	                          SL_H1_STREAM_PEEKS */
	unsigned max_conns;
	struct sl_h1_request *wait_head, *wait_tail;
};

enum conn_state {
	CONN_CONNECTING,
	CONN_BUSY,
	CONN_IDLE,
	CONN_DRAINING, /* answered; waiting for the peer's close */
	CONN_CLOSING,
};

struct sl_h1_conn {
	uv_tcp_t tcp;
	uv_timer_t timer; /* connect timeout, idle timeout, deferred error */
	/*
	 * The idle timeout is checked lazily: the timer, once armed for it,
	 * is left running while the connection serves requests (sparing two
	 * timer-heap operations per request) and, when it fires, closes the
	 * connection only if it has been idle since idle_since for
	 * SL_H1_IDLE_MS, else waits out the rest.
	 */
	bool idle_armed;
	uint64_t idle_since;
	uv_connect_t connect;
	struct sl_h1_pool *pool;
	struct sl_h1_conn *idle_next; /* the pool's idle or draining list */
	struct sl_h1_request *req;    /* the request on it, or NULL */
	enum conn_state state;
	unsigned open_handles;
	unsigned served;      /* responses read whole on it */
	unsigned addr;        /* the index in its pool's addrs */
	bool after_chunked;   /* the last answer on it was chunked */
	uint64_t answered_ms; /* when the last answer on it ended */
	int deferred_error;   /* a connect or write failure, for the timer */
	bool reading;
	llhttp_t parser;
	size_t head_bytes; /* of the current response's head */
	bool got_byte;     /* a byte of the current response arrived */
	bool complete;     /* the current response was read to its end */
	bool stopped;      /* the owner returned SL_H1_STOP */
	bool head_too_big;
	/* scrub_head(): the head's end was seen; line-end bytes in a row. */
	bool head_scrubbed;
	unsigned char line_ends;
	/* The header line being gathered, "Name: value". */
	char *line;
	size_t line_len, line_cap, name_len;
	bool in_value;
	/*
	 * sl_h1_half_close(): sluice sends nothing more; the answer is read
	 * to its end, and the connection is not kept after it.
	 */
	bool half_closed;
	uv_shutdown_t shutdown;
};

/* What uv_try_write left of a request, on its way out; freed when done. */
struct head_write {
	uv_write_t req;
	char head[];
};

const char *sl_h1_result_name(enum sl_h1_result r)
{
	switch (r) {
	case SL_H1_OK: return "ok";
	case SL_H1_REFUSED: return "refused";
	case SL_H1_UNRESOLVED: return "unresolved";
	case SL_H1_CONNECT_TIMEOUT: return "connect_timeout";
	case SL_H1_SEND_FAILED: return "send_failed";
	case SL_H1_NOTHING: return "nothing";
	case SL_H1_PARTIAL: return "partial";
	case SL_H1_BAD_RESPONSE: return "bad_response";
	case SL_H1_STOPPED: return "stopped";
	}
	return "?";
}

static void conn_send(struct sl_h1_conn *c, struct sl_h1_request *r);
static void pool_kick(struct sl_h1_pool *p);

/* ---- requests ---- */

static void request_done(struct sl_h1_request *r, enum sl_h1_result result)
{
	r->active = false;
	r->paused = false;
	r->conn = NULL;
	r->on_done(r, result);
}

static void wait_push(struct sl_h1_pool *p, struct sl_h1_request *r, bool front)
{
	r->wait_next = NULL;
	if (!p->wait_head) {
		p->wait_head = p->wait_tail = r;
	} else if (front) {
		r->wait_next = p->wait_head;
		p->wait_head = r;
	} else {
		p->wait_tail->wait_next = r;
		p->wait_tail = r;
	}
}

static struct sl_h1_request *wait_pop(struct sl_h1_pool *p)
{
	struct sl_h1_request *r = p->wait_head;
	if (r) {
		p->wait_head = r->wait_next;
		if (!p->wait_head)
			p->wait_tail = NULL;
		r->wait_next = NULL;
	}
	return r;
}

static void wait_remove(struct sl_h1_pool *p, struct sl_h1_request *r)
{
	struct sl_h1_request *prev = NULL;
	for (struct sl_h1_request *w = p->wait_head; w; w = w->wait_next) {
		if (w != r) {
			prev = w;
			continue;
		}
		if (prev)
			prev->wait_next = r->wait_next;
		else
			p->wait_head = r->wait_next;
		if (p->wait_tail == r)
			p->wait_tail = prev;
		r->wait_next = NULL;
		return;
	}
}

/* ---- connections ---- */

static void on_conn_handle_closed(uv_handle_t *h)
{
	struct sl_h1_conn *c = h->data;
	if (--c->open_handles == 0) {
		free(c->line);
		free(c);
	}
}

static void list_remove(struct sl_h1_conn **list, struct sl_h1_conn *c)
{
	struct sl_h1_conn **at = list;
	while (*at && *at != c)
		at = &(*at)->idle_next;
	if (*at)
		*at = c->idle_next;
	c->idle_next = NULL;
}

/*
 * Closes the connection (its request, if any, was detached by the caller)
 * and frees its place in the pool. Waiting requests are the caller's to
 * move on (pool_kick), once it is done with the pool.
 */
static void conn_close(struct sl_h1_conn *c)
{
	if (c->state == CONN_CLOSING)
		return;
	if (c->state == CONN_IDLE)
		list_remove(&c->pool->idle, c);
	if (c->state == CONN_DRAINING)
		list_remove(&c->pool->draining, c);
	else
		c->pool->conns--;
	c->state = CONN_CLOSING;
	uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
	uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

/* Takes the request off its connection. */
static struct sl_h1_request *conn_detach(struct sl_h1_conn *c)
{
	struct sl_h1_request *r = c->req;
	c->req = NULL;
	if (r)
		r->conn = NULL;
	return r;
}

static void read_on(struct sl_h1_conn *c, bool on);

static void on_idle_timer(uv_timer_t *t);

/* A response was read whole on a connection worth keeping. */
static void conn_idle(struct sl_h1_conn *c)
{
	struct sl_h1_pool *p = c->pool;
	c->state = CONN_IDLE;
	/* Read while idle, so that a peer's close is seen at once. */
	read_on(c, true);
	struct sl_h1_request *w = wait_pop(p);
	if (w) {
		conn_send(c, w);
		return;
	}
	c->idle_next = p->idle;
	p->idle = c;
	c->idle_since = uv_now(c->timer.loop);
	if (!c->idle_armed) {
		c->idle_armed = true;
		uv_timer_start(&c->timer, on_idle_timer, SL_H1_IDLE_MS, 0);
	}
}

/*
 * The peer closed a connection right after a chunked answer on it: it
 * does so after every one (llama-server 0.7.0 does, after each stream).
 * From now on such connections are not reused but left for the peer to
 * close, which spares each next request a write in vain and a resend.
 * A drained connection that the peer keeps open unlearns it
 * (on_idle_timer): an upstream restarted as another version, or a close
 * that was not about the answer after all.
 */
static void learn_streams_close(struct sl_h1_pool *p)
{
	if (p->streams_close)
		return;
	p->streams_close = true;
	sl_debug("upstream %s closes its connection after each chunked "
	         "answer: those connections are left for it to close",
	         p->url);
}

/*
 * Whether the peer's close of `c`, seen now, came right after a chunked
 * answer: only such a close says that the peer closes after each. One
 * that comes a while later is its idle timeout, or its end (a restart).
 */
static bool closed_after_stream(const struct sl_h1_conn *c)
{
	return c->after_chunked &&
	       uv_now(c->timer.loop) - c->answered_ms < SL_H1_STREAM_CLOSE_MS;
}

/* Leaves `c`, answered, for the peer to close; it no longer counts. */
static void conn_drain(struct sl_h1_conn *c)
{
	struct sl_h1_pool *p = c->pool;
	c->state = CONN_DRAINING;
	p->conns--;
	c->idle_next = p->draining;
	p->draining = c;
	read_on(c, true);
	/* Closed by sluice if the peer does not after all. */
	c->idle_armed = false;
	uv_timer_start(&c->timer, on_idle_timer, SL_H1_IDLE_MS, 0);
}

/* The request on `c` ended: the connection is kept or closed first. */
static void conn_finish(struct sl_h1_conn *c, bool keep, bool chunked,
                        enum sl_h1_result result)
{
	struct sl_h1_pool *p = c->pool;
	struct sl_h1_request *r = conn_detach(c);
	if (keep && result == SL_H1_OK && !c->half_closed && !p->h1->closing) {
		c->served++;
		c->after_chunked = chunked;
		c->answered_ms = uv_now(c->timer.loop);
		if (chunked && p->streams_close) {
			conn_drain(c);
			pool_kick(p);
		} else {
			conn_idle(c);
		}
	} else {
		conn_close(c);
		pool_kick(p);
	}
	request_done(r, result);
}

static void conn_open(struct sl_h1_pool *p, struct sl_h1_request *r);

/*
 * The request on `c` was written to a kept connection that the peer had
 * closed (no byte of an answer came): nothing was processed, so it is
 * sent once more, on a fresh connection. Returns false when that does not
 * apply.
 */
static bool resend_if_stale(struct sl_h1_conn *c)
{
	struct sl_h1_request *r = c->req;
	/* A half-closed one was given up on: it is not sent again. */
	if (!r || c->got_byte || c->served == 0 || r->resent || c->half_closed)
		return false;
	struct sl_h1_pool *p = c->pool;
	if (closed_after_stream(c))
		learn_streams_close(p);
	sl_debug("upstream %s: a kept connection was closed by the peer; "
	         "sending the request again on a new one",
	         p->url);
	r->resent = true;
	conn_detach(c);
	conn_close(c);
	if (p->conns < p->max_conns)
		conn_open(p, r);
	else
		wait_push(p, r, true);
	pool_kick(p);
	return true;
}

/* The connection failed; its request (if any) ends with `result`. */
static void conn_fail(struct sl_h1_conn *c, enum sl_h1_result result,
                      const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void conn_fail(struct sl_h1_conn *c, enum sl_h1_result result,
                      const char *fmt, ...)
{
	struct sl_h1_pool *p = c->pool;
	struct sl_h1_request *r = conn_detach(c);
	conn_close(c);
	if (r) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->error, sizeof(r->error), fmt, ap);
		va_end(ap);
	}
	pool_kick(p);
	if (r)
		request_done(r, result);
}

/* ---- the parser ---- */

static struct sl_h1_conn *conn_of(llhttp_t *parser)
{
	return parser->data;
}

/* Counts head bytes; false (and HPE_USER) past SL_H1_HEAD_MAX. */
static bool head_fits(struct sl_h1_conn *c, size_t len)
{
	c->head_bytes += len;
	if (c->head_bytes <= SL_H1_HEAD_MAX)
		return true;
	c->head_too_big = true;
	return false;
}

static void line_append(struct sl_h1_conn *c, const char *at, size_t len)
{
	if (c->line_len + len > c->line_cap) {
		c->line_cap = SL_MAX(c->line_len + len, 2 * c->line_cap);
		c->line_cap = SL_MAX(c->line_cap, 256u);
		c->line = sl_xrealloc(c->line, c->line_cap);
	}
	memcpy(c->line + c->line_len, at, len);
	c->line_len += len;
}

static int on_message_begin(llhttp_t *parser)
{
	struct sl_h1_conn *c = conn_of(parser);
	c->head_bytes = 0;
	c->line_len = 0;
	c->in_value = false;
	return 0;
}

static int on_status(llhttp_t *parser, const char *at, size_t len)
{
	(void)at;
	return head_fits(conn_of(parser), len) ? 0 : HPE_USER;
}

static int on_status_complete(llhttp_t *parser)
{
	struct sl_h1_conn *c = conn_of(parser);
	c->req->status = parser->status_code;
	return 0;
}

static int on_header_field(llhttp_t *parser, const char *at, size_t len)
{
	struct sl_h1_conn *c = conn_of(parser);
	if (!head_fits(c, len))
		return HPE_USER;
	if (c->in_value) {
		c->line_len = 0;
		c->in_value = false;
	}
	line_append(c, at, len);
	return 0;
}

static int on_header_field_complete(llhttp_t *parser)
{
	struct sl_h1_conn *c = conn_of(parser);
	c->name_len = c->line_len;
	line_append(c, ": ", 2);
	c->in_value = true;
	return 0;
}

static int on_header_value(llhttp_t *parser, const char *at, size_t len)
{
	struct sl_h1_conn *c = conn_of(parser);
	if (!head_fits(c, len))
		return HPE_USER;
	line_append(c, at, len);
	return 0;
}

static int on_header_value_complete(llhttp_t *parser)
{
	struct sl_h1_conn *c = conn_of(parser);
	struct sl_h1_request *r = c->req;
	if (parser->status_code < 200)
		return 0; /* a 1xx's lines are not the answer's */
	if (c->name_len == 12 &&
	    strncasecmp(c->line, "Content-Type", 12) == 0) {
		size_t n = c->line_len - 14;
		free(r->content_type);
		r->content_type = sl_xmalloc(n + 1);
		memcpy(r->content_type, c->line + 14, n);
		r->content_type[n] = '\0';
	}
	if (r->on_header && r->on_header(r, c->line, c->line_len) != 0) {
		c->stopped = true;
		return HPE_USER;
	}
	return 0;
}

static int on_headers_complete(llhttp_t *parser)
{
	struct sl_h1_conn *c = conn_of(parser);
	/*
	 * RFC 9110, 6.4.1: a 204 or 304 ends with its head, whatever its
	 * Content-Length says (a 304's may give the length of what it stands
	 * for); llhttp 8 reads that many bytes unless told. 1 tells it.
	 */
	if (parser->status_code == 204 || parser->status_code == 304)
		return 1;
	if ((parser->flags & F_CONTENT_LENGTH) && !(parser->flags & F_CHUNKED))
		c->req->content_length = (int64_t)parser->content_length;
	return 0;
}

static int on_body(llhttp_t *parser, const char *at, size_t len)
{
	struct sl_h1_conn *c = conn_of(parser);
	struct sl_h1_request *r = c->req;
	if (r->on_body(r, at, len) != 0) {
		c->stopped = true;
		return HPE_USER;
	}
	return 0;
}

static int on_message_complete(llhttp_t *parser)
{
	struct sl_h1_conn *c = conn_of(parser);
	if (parser->status_code < 200) {
		/* An interim answer: the real one follows on the wire. */
		c->req->status = 0;
		return 0;
	}
	c->complete = true;
	/* The end is handled once llhttp_execute() has returned. */
	return HPE_PAUSED;
}

static const llhttp_settings_t parser_settings = {
    .on_message_begin = on_message_begin,
    .on_status = on_status,
    .on_status_complete = on_status_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	struct sl_h1_conn *c = h->data;
	/* Each read is parsed whole, and handed over, before the next one
	 * (of any connection) starts: the shared buffer is free. */
	struct sl_h1 *h1 = c->pool->h1;
	*buf = uv_buf_init(h1->in, sizeof(h1->in));
}

/* The peer closed or reset the connection (status < 0) mid-request. */
static void conn_ended(struct sl_h1_conn *c, int status)
{
	if (resend_if_stale(c))
		return;
	if (status == UV_EOF && c->got_byte) {
		/* A body that runs to the close ends here. */
		llhttp_finish(&c->parser);
		if (c->complete) {
			conn_finish(c, false, false, SL_H1_OK);
			return;
		}
	}
	const char *how =
	    status == UV_EOF ? "closed the connection" : "reset the connection";
	if (c->stopped)
		conn_fail(c, SL_H1_STOPPED,
		          "sluice stopped reading the answer");
	else if (c->got_byte)
		conn_fail(c, SL_H1_PARTIAL,
		          "upstream %s before the end of its answer%s%s", how,
		          status == UV_EOF ? "" : ": ",
		          status == UV_EOF ? "" : uv_strerror(status));
	else
		conn_fail(c, SL_H1_NOTHING, "upstream %s before answering%s%s",
		          how, status == UV_EOF ? "" : ": ",
		          status == UV_EOF ? "" : uv_strerror(status));
}

/*
 * A control byte in a header value makes llhttp refuse the whole answer,
 * where libcurl hands the line over and sluice drops it (proxy.c: the
 * upstream's headers are extras, never a reason to fail an answer). Only
 * llhttp's lenient mode takes such bytes, and it also relaxes the checks
 * that frame a message (Content-Length with Transfer-Encoding), so instead
 * each such byte of the head becomes 0xFF: an obs-text byte, which llhttp
 * accepts and sluice's own field checks refuse, as they refused the
 * control byte. The head ends at LF, optional CR, LF, across reads; line
 * ends are left alone, and nothing after the head is touched.
 */
static void scrub_head(struct sl_h1_conn *c, char *buf, size_t n)
{
	/* In locals, and the common byte first: this runs on every head. */
	unsigned char ends = c->line_ends;
	bool done = c->head_scrubbed;
	for (size_t i = 0; i < n && !done; i++) {
		/* A run of printable bytes only ends a line's CR LF count. */
		size_t run = sl_printable_span(buf + i, n - i);
		if (run > 0) {
			ends = 0;
			i += run;
			if (i == n)
				break;
		}
		unsigned char b = (unsigned char)buf[i];
		if (b >= 0x20 && b != 0x7f) {
			ends = 0;
		} else if (b == '\n') {
			done = ends > 0;
			ends = 1;
		} else if (b == '\r') {
			ends = ends ? 2 : 0;
		} else {
			ends = 0;
			if (b != '\t')
				buf[i] = (char)0xff;
		}
	}
	c->line_ends = ends;
	c->head_scrubbed = done;
}

/*
 * Whether the peer has closed (or sent more on) a connection whose answer
 * just ended. llama-server 0.7.0 closes the connection after every
 * streamed (chunked) answer, its Keep-Alive header notwithstanding, and
 * the close is usually in the socket already. Kept, the connection would
 * be handed at once to the next request (a freed slot dispatches one
 * before this read returns), which would then be written in vain and sent
 * again on a new connection. One peek after a chunked answer spares that,
 * until one close is seen or SL_H1_STREAM_PEEKS answers have shown that
 * the upstream keeps them (sluice's own mock does); answers with a length
 * keep their connection without it.
 */
static bool peer_closing(struct sl_h1_conn *c)
{
	struct sl_h1_pool *p = c->pool;
	if (p->streams_close)
		return false; /* known: the connection is drained anyway */
	if (p->streams_kept >= SL_H1_STREAM_PEEKS)
		return false; /* known: it keeps them */
	uv_os_fd_t fd;
	char b;
	if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
		return true;
	if (recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0)
		return true;
	p->streams_kept++;
	return false;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct sl_h1_conn *c = s->data;
	if (nread == 0 || c->state == CONN_CLOSING)
		return;
	if (!c->req) {
		/* Idle: the peer closed it, or sent what nobody asked for. */
		if (c->state == CONN_IDLE) {
			sl_debug("upstream %s: a kept connection %s",
			         c->pool->url,
			         nread < 0 ? "was closed by the peer"
			                   : "got bytes nobody asked for");
			if (nread < 0 && closed_after_stream(c))
				learn_streams_close(c->pool);
		}
		conn_close(c);
		return;
	}
	if (nread < 0) {
		conn_ended(c, (int)nread);
		return;
	}
	c->got_byte = true;
	scrub_head(c, buf->base, (size_t)nread);
	llhttp_errno_t err =
	    llhttp_execute(&c->parser, buf->base, (size_t)nread);
	if (c->req && c->req->on_read_end)
		c->req->on_read_end(c->req);
	if (c->complete) {
		/* Bytes past the answer: the connection cannot be trusted. */
		bool whole =
		    llhttp_get_error_pos(&c->parser) == buf->base + nread;
		bool keep = llhttp_should_keep_alive(&c->parser);
		bool chunked = c->parser.flags & F_CHUNKED;
		bool closing = whole && keep && chunked && peer_closing(c);
		if (closing)
			learn_streams_close(c->pool);
		if (!whole || !keep || closing)
			sl_debug("upstream %s: connection not kept: %s",
			         c->pool->url,
			         !whole ? "bytes came after the answer"
			         : !keep
			             ? "the answer ends it"
			             : "the peer closed it after the answer");
		keep = keep && !closing;
		conn_finish(c, whole && keep, chunked, SL_H1_OK);
		return;
	}
	if (err == HPE_OK)
		return;
	if (c->stopped)
		conn_fail(c, SL_H1_STOPPED,
		          "sluice stopped reading the answer");
	else if (c->head_too_big)
		conn_fail(c, SL_H1_BAD_RESPONSE,
		          "upstream's response head is over %u bytes",
		          SL_H1_HEAD_MAX);
	else
		conn_fail(c, SL_H1_BAD_RESPONSE,
		          "upstream answered with an invalid HTTP response: %s",
		          llhttp_get_error_reason(&c->parser));
}

static void read_on(struct sl_h1_conn *c, bool on)
{
	if (on == c->reading)
		return;
	c->reading = on;
	if (on)
		uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
	else
		uv_read_stop((uv_stream_t *)&c->tcp);
}

/* ---- writing ---- */

static void on_written(uv_write_t *w, int status)
{
	struct sl_h1_conn *c = w->handle->data;
	free(sl_container_of(w, struct head_write, req));
	if (status >= 0 || status == UV_ECANCELED || c->state != CONN_BUSY ||
	    !c->req)
		return;
	if (!resend_if_stale(c))
		conn_fail(c, SL_H1_SEND_FAILED,
		          "writing the request to upstream failed: %s",
		          uv_strerror(status));
}

/* uv_write() refused the request at once (conn_send). */
static void on_send_failed(uv_timer_t *t)
{
	struct sl_h1_conn *c = t->data;
	if (!resend_if_stale(c))
		conn_fail(c, SL_H1_SEND_FAILED,
		          "writing the request to upstream failed: %s",
		          uv_strerror(c->deferred_error));
}

/*
 * Writes a request's pieces. Most requests fit the socket's buffer at once:
 * written here, they need no write request, and libuv no change to the
 * connection's poll (the end of each uv_write() stops watching for POLLOUT,
 * an epoll_ctl per request). What does not fit is copied and queued.
 */
static int write_request(struct sl_h1_conn *c, const uv_buf_t *bufs, unsigned n)
{
	size_t total = 0;
	for (unsigned i = 0; i < n; i++)
		total += bufs[i].len;
	int rc = uv_try_write((uv_stream_t *)&c->tcp, bufs, n);
	if (rc == UV_EAGAIN)
		rc = 0;
	if (rc < 0)
		return rc;
	size_t rest = total - (size_t)rc;
	if (rest == 0)
		return 0;
	struct head_write *w = sl_xmalloc(sizeof(*w) + rest);
	sl_bufs_copy_tail(w->head, bufs, n, (size_t)rc);
	uv_buf_t b = uv_buf_init(w->head, (unsigned)rest);
	rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written);
	if (rc != 0)
		free(w);
	return rc;
}

/* Writes r's head and body on `c`, which is connected and free. */
static void conn_send(struct sl_h1_conn *c, struct sl_h1_request *r)
{
	struct sl_h1_pool *p = c->pool;
	/* A pending idle timeout may stay: on_idle_timer sees it busy. */
	if (!c->idle_armed)
		uv_timer_stop(&c->timer);
	c->state = CONN_BUSY;
	c->req = r;
	r->conn = c;
	c->got_byte = c->complete = c->stopped = c->head_too_big = false;
	c->head_scrubbed = false;
	c->line_ends = 0;
	llhttp_init(&c->parser, HTTP_RESPONSE, &parser_settings);
	c->parser.data = c;
	if (r->paused)
		read_on(c, false);

	const char *headers = r->headers ? r->headers : "";
	size_t cap = strlen(r->method) + strlen(p->prefix) + strlen(r->target) +
	             strlen(p->authority) + strlen(headers) + 96;
	char small[SL_H1_HEAD_INLINE];
	char *head = cap <= sizeof(small) ? small : sl_xmalloc(cap);
	struct sl_join j = {.p = head, .cap = cap};
	sl_join_str(&j, r->method);
	sl_join_str(&j, " ");
	sl_join_str(&j, p->prefix);
	sl_join_str(&j, r->target);
	sl_join_str(&j, " HTTP/1.1\r\nHost: ");
	sl_join_str(&j, p->authority);
	sl_join_str(&j, "\r\n");
	sl_join_str(&j, headers);
	if (r->has_body) {
		sl_join_str(&j, "Content-Length: ");
		sl_join_u64(&j, r->body_len);
		sl_join_str(&j, "\r\n");
	}
	sl_join_str(&j, "\r\n");
	uv_buf_t bufs[2] = {
	    uv_buf_init(head, (unsigned)j.len),
	    uv_buf_init((char *)(r->body ? r->body : ""),
	                (unsigned)r->body_len),
	};
	unsigned nbufs = r->has_body && r->body_len ? 2 : 1;
	int rc = write_request(c, bufs, nbufs);
	if (head != small)
		free(head);
	if (rc == 0)
		return;
	/* Handled from the loop: sl_h1_start never calls on_done. */
	c->deferred_error = rc;
	c->idle_armed = false;
	uv_timer_start(&c->timer, on_send_failed, 0, 0);
}

/* ---- connecting ---- */

/*
 * A connection attempt failed. A name with several addresses (localhost:
 * ::1 and 127.0.0.1) gets each tried in turn, as libcurl does, before the
 * request fails; the pool then starts from the next one. Returns true when
 * the request went on to another address.
 */
static bool try_next_address(struct sl_h1_conn *c)
{
	struct sl_h1_pool *p = c->pool;
	struct sl_h1_request *r = c->req;
	if (!r || ++r->addr_tries >= p->n_addrs)
		return false;
	if (p->addr_at == c->addr)
		p->addr_at = (c->addr + 1) % p->n_addrs;
	sl_debug("upstream %s: connecting failed; trying its next address",
	         p->url);
	conn_detach(c);
	conn_close(c);
	conn_open(p, r);
	return true;
}

static void on_connect_timer(uv_timer_t *t)
{
	struct sl_h1_conn *c = t->data;
	struct sl_h1_request *r = c->req;
	if (try_next_address(c))
		return;
	if (c->deferred_error)
		conn_fail(c, SL_H1_REFUSED, "cannot connect to upstream %s: %s",
		          c->pool->authority, uv_strerror(c->deferred_error));
	else
		conn_fail(c, SL_H1_CONNECT_TIMEOUT,
		          "no connection to upstream %s within %.1f s",
		          c->pool->authority,
		          r ? (double)r->connect_timeout_ms / 1000.0 : 0.0);
}

static void on_idle_timer(uv_timer_t *t)
{
	struct sl_h1_conn *c = t->data;
	c->idle_armed = false;
	/* Busy again: conn_idle arms it anew once it is idle. */
	if (c->state == CONN_BUSY)
		return;
	if (c->state == CONN_IDLE) {
		uint64_t idle = uv_now(t->loop) - c->idle_since;
		if (idle < SL_H1_IDLE_MS) {
			c->idle_armed = true;
			uv_timer_start(t, on_idle_timer, SL_H1_IDLE_MS - idle,
			               0);
			return;
		}
	}
	if (c->state == CONN_DRAINING && c->pool->streams_close) {
		/*
		 * Left for the peer to close, and still open: it keeps its
		 * connections after chunked answers, so they are reused again
		 * (and peeked at again, to learn it anew if it changes).
		 * Otherwise each answer would open a connection and leave
		 * one open here, thousands under load.
		 */
		c->pool->streams_close = false;
		c->pool->streams_kept = 0;
		sl_debug("upstream %s kept a connection open after a chunked "
		         "answer: connections are reused after them again",
		         c->pool->url);
	}
	sl_debug("upstream %s: closing a connection idle for %u ms",
	         c->pool->url, SL_H1_IDLE_MS);
	conn_close(c);
}

static void on_connect(uv_connect_t *req, int status)
{
	struct sl_h1_conn *c = req->handle->data;
	if (status == UV_ECANCELED || c->state == CONN_CLOSING)
		return;
	uv_timer_stop(&c->timer);
	if (status < 0 && try_next_address(c))
		return;
	if (status < 0) {
		conn_fail(c, SL_H1_REFUSED, "cannot connect to upstream %s: %s",
		          c->pool->authority, uv_strerror(status));
		return;
	}
	read_on(c, true);
	conn_send(c, c->req);
}

/* Opens a new connection for `r`; the pool has room for it. */
static void conn_open(struct sl_h1_pool *p, struct sl_h1_request *r)
{
	struct sl_h1_conn *c = sl_xcalloc(1, sizeof(*c));
	uv_loop_t *loop = p->h1->loop;
	c->pool = p;
	c->state = CONN_CONNECTING;
	c->req = r;
	r->conn = c;
	p->conns++;
	sl_debug("upstream %s: opening connection %u of at most %u", p->url,
	         p->conns, p->max_conns);
	uv_tcp_init(loop, &c->tcp);
	uv_timer_init(loop, &c->timer);
	c->tcp.data = c;
	c->timer.data = c;
	c->open_handles = 2;
	/* Tokens go out in small writes: Nagle would hold each one back. */
	uv_tcp_nodelay(&c->tcp, 1);
	c->addr = p->addr_at;
	int rc = uv_tcp_connect(&c->connect, &c->tcp,
	                        (const struct sockaddr *)&p->addrs[c->addr],
	                        on_connect);
	if (rc != 0) {
		/* Reported from the loop: sl_h1_start never calls on_done. */
		c->deferred_error = rc;
		uv_timer_start(&c->timer, on_connect_timer, 0, 0);
		return;
	}
	uv_timer_start(&c->timer, on_connect_timer, r->connect_timeout_ms, 0);
}

/* ---- pools ---- */

static void pool_free(struct sl_h1_pool *p);

static void on_resolved(uv_getaddrinfo_t *gai, int status,
                        struct addrinfo *res);

/* Moves waiting requests on: onto idle or new connections, or resolves. */
static void pool_kick(struct sl_h1_pool *p)
{
	if (!p->resolved) {
		if (p->wait_head && !p->resolving && !p->h1->closing) {
			struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
			p->resolving = true;
			int rc =
			    uv_getaddrinfo(p->h1->loop, &p->gai, on_resolved,
			                   p->name, p->port, &hints);
			if (rc != 0) {
				/* The requests wait for the next kick (a new
				 * request tries again) or their timeout. */
				p->resolving = false;
				sl_warn("upstream %s: cannot start resolving "
				        "%s: %s",
				        p->url, p->name, uv_strerror(rc));
			}
		}
		return;
	}
	while (p->wait_head) {
		if (p->idle) {
			struct sl_h1_conn *c = p->idle;
			p->idle = c->idle_next;
			c->idle_next = NULL;
			conn_send(c, wait_pop(p));
		} else if (p->conns < p->max_conns) {
			conn_open(p, wait_pop(p));
		} else {
			return;
		}
	}
}

static void on_resolved(uv_getaddrinfo_t *gai, int status, struct addrinfo *res)
{
	struct sl_h1_pool *p = sl_container_of(gai, struct sl_h1_pool, gai);
	p->resolving = false;
	if (p->h1->closing) {
		/* sl_h1_close() left this pool for its lookup to end. */
		uv_freeaddrinfo(res);
		struct sl_h1_pool **at = &p->h1->pools;
		while (*at != p)
			at = &(*at)->next;
		*at = p->next;
		pool_free(p);
		return;
	}
	p->n_addrs = p->addr_at = 0;
	for (struct addrinfo *a = status == 0 ? res : NULL;
	     a && p->n_addrs < SL_H1_ADDRS_MAX; a = a->ai_next) {
		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		memcpy(&p->addrs[p->n_addrs++], a->ai_addr, a->ai_addrlen);
	}
	p->resolved = p->n_addrs > 0;
	uv_freeaddrinfo(res);
	if (p->resolved) {
		pool_kick(p);
		return;
	}
	/*
	 * The name did not resolve: the requests waiting for it fail, and
	 * the next request tries again. The list is taken first, since an
	 * on_done may start a request (and a new lookup) for this pool.
	 */
	struct sl_h1_request *r = p->wait_head, *next;
	p->wait_head = p->wait_tail = NULL;
	for (; r; r = next) {
		next = r->wait_next;
		r->wait_next = NULL;
		snprintf(r->error, sizeof(r->error),
		         "cannot resolve upstream host %s: %s", p->name,
		         uv_strerror(status));
		request_done(r, SL_H1_UNRESOLVED);
	}
}

static void pool_free(struct sl_h1_pool *p)
{
	free(p->url);
	free(p->authority);
	free(p->name);
	free(p->prefix);
	free(p);
}

/*
 * Parses "http://host[:port][/path]" into p. Returns false for anything
 * else (userinfo, an empty host, a bad port).
 */
static bool parse_url(struct sl_h1_pool *p, const char *url)
{
	if (strncasecmp(url, "http://", 7) != 0)
		return false;
	const char *a = url + 7;
	size_t alen = strcspn(a, "/?#");
	if (alen == 0 || memchr(a, '@', alen))
		return false;
	const char *host = a, *port = NULL;
	size_t hlen = alen;
	if (a[0] == '[') {
		const char *close = memchr(a, ']', alen);
		if (!close)
			return false;
		host = a + 1;
		hlen = (size_t)(close - host);
		if (close + 1 < a + alen) {
			if (close[1] != ':')
				return false;
			port = close + 2;
		}
	} else {
		const char *colon = memchr(a, ':', alen);
		if (colon) {
			hlen = (size_t)(colon - a);
			port = colon + 1;
		}
	}
	size_t plen = port ? (size_t)(a + alen - port) : 0;
	if (hlen == 0 || (port && (plen == 0 || plen > 5)))
		return false;
	unsigned long n = 80;
	if (port) {
		n = 0;
		for (size_t i = 0; i < plen; i++) {
			if (port[i] < '0' || port[i] > '9')
				return false;
			n = n * 10 + (unsigned long)(port[i] - '0');
		}
		if (n == 0 || n > 65535)
			return false;
	}
	snprintf(p->port, sizeof(p->port), "%lu", n);
	p->name = sl_xmalloc(hlen + 1);
	memcpy(p->name, host, hlen);
	p->name[hlen] = '\0';
	p->authority = sl_xmalloc(alen + 1);
	memcpy(p->authority, a, alen);
	p->authority[alen] = '\0';
	p->prefix = sl_xstrdup(a + alen);
	/* A numeric address needs no resolving. */
	struct sockaddr_in *v4 = (struct sockaddr_in *)&p->addrs[0];
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&p->addrs[0];
	if (uv_ip4_addr(p->name, (int)n, v4) == 0 ||
	    uv_ip6_addr(p->name, (int)n, v6) == 0) {
		p->resolved = true;
		p->n_addrs = 1;
	}
	return true;
}

static bool pool_empty(const struct sl_h1_pool *p)
{
	return p->conns == 0 && !p->draining && !p->wait_head && !p->resolving;
}

/*
 * Drops the pools nobody uses any more (a managed llama-server gets a new
 * port at each restart, so its old URL's pool stays empty for good).
 * Called only where no pool pointer is held.
 */
static void pools_sweep(struct sl_h1 *h)
{
	struct sl_h1_pool **at = &h->pools;
	while (*at) {
		struct sl_h1_pool *p = *at;
		if (pool_empty(p)) {
			*at = p->next;
			pool_free(p);
		} else {
			at = &p->next;
		}
	}
}

static struct sl_h1_pool *pool_get(struct sl_h1 *h, const char *url)
{
	for (struct sl_h1_pool *p = h->pools; p; p = p->next)
		if (strcmp(p->url, url) == 0)
			return p;
	struct sl_h1_pool *p = sl_xcalloc(1, sizeof(*p));
	if (!parse_url(p, url)) {
		pool_free(p);
		return NULL;
	}
	pools_sweep(h);
	p->h1 = h;
	p->url = sl_xstrdup(url);
	p->next = h->pools;
	h->pools = p;
	return p;
}

/* ---- the interface ---- */

void sl_h1_init(struct sl_h1 *h, uv_loop_t *loop)
{
	memset(h, 0, sizeof(*h));
	h->loop = loop;
}

void sl_h1_close(struct sl_h1 *h)
{
	h->closing = true;
	for (struct sl_h1_pool *p = h->pools; p; p = p->next) {
		while (p->idle)
			conn_close(p->idle);
		while (p->draining)
			conn_close(p->draining);
		if (p->resolving)
			uv_cancel((uv_req_t *)&p->gai);
		if (p->conns)
			sl_warn("upstream %s: %u connections still busy at "
			        "shutdown",
			        p->url, p->conns);
	}
	/*
	 * A pool still resolving stays until its lookup ends: on_resolved
	 * runs whether or not uv_cancel() stopped the lookup, and frees it.
	 */
	struct sl_h1_pool **at = &h->pools;
	while (*at) {
		struct sl_h1_pool *p = *at;
		if (p->conns == 0 && !p->draining && !p->resolving) {
			*at = p->next;
			pool_free(p);
		} else {
			at = &p->next;
		}
	}
}

bool sl_h1_supports(const char *base_url)
{
	struct sl_h1_pool p = {0};
	bool ok = parse_url(&p, base_url);
	free(p.name);
	free(p.authority);
	free(p.prefix);
	return ok;
}

int sl_h1_start(struct sl_h1 *h, struct sl_h1_request *r, const char *base_url,
                unsigned max_conns)
{
	struct sl_h1_pool *p = pool_get(h, base_url);
	if (!p)
		return SL_EINVAL;
	p->max_conns = max_conns ? max_conns : 1;
	r->pool = p;
	r->conn = NULL;
	r->wait_next = NULL;
	r->status = 0;
	r->content_length = -1;
	free(r->content_type);
	r->content_type = NULL;
	r->error[0] = '\0';
	r->active = true;
	r->paused = false;
	r->resent = false;
	r->addr_tries = 0;
	if (p->resolved && p->idle && !p->wait_head) {
		struct sl_h1_conn *c = p->idle;
		p->idle = c->idle_next;
		c->idle_next = NULL;
		conn_send(c, r);
	} else if (p->resolved && !p->wait_head && p->conns < p->max_conns) {
		conn_open(p, r);
	} else {
		wait_push(p, r, false);
		pool_kick(p);
	}
	return 0;
}

void sl_h1_abort(struct sl_h1_request *r)
{
	if (!r->active)
		return;
	r->active = false;
	r->paused = false;
	struct sl_h1_pool *p = r->pool;
	struct sl_h1_conn *c = r->conn;
	if (c) {
		/* An answer not read to its end leaves the connection unusable;
		 * closing it is also what stops llama-server generating. */
		conn_detach(c);
		conn_close(c);
		pool_kick(p);
	} else {
		wait_remove(p, r);
	}
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	/* Nothing to do: a failure means the connection is going anyway,
	 * and its read reports how. */
	(void)req;
	(void)status;
}

bool sl_h1_sent(const struct sl_h1_request *r)
{
	return r->active && r->conn && r->conn->state == CONN_BUSY;
}

bool sl_h1_half_close(struct sl_h1_request *r)
{
	struct sl_h1_conn *c = r->conn;
	if (!sl_h1_sent(r))
		return false;
	if (!c->half_closed) {
		/* After the request's bytes: uv_shutdown waits for the
		 * writes queued before it. */
		if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp,
		                on_shutdown) != 0)
			return false;
		c->half_closed = true;
	}
	return true;
}

void sl_h1_pause(struct sl_h1_request *r)
{
	r->paused = true;
	if (r->conn && r->conn->state == CONN_BUSY)
		read_on(r->conn, false);
}

void sl_h1_resume(struct sl_h1_request *r)
{
	if (!r->paused)
		return;
	r->paused = false;
	if (r->conn && r->conn->state == CONN_BUSY)
		read_on(r->conn, true);
}

enum sl_h1_read sl_h1_read_paused(struct sl_h1_request *r)
{
	struct sl_h1_conn *c = r->conn;
	uv_os_fd_t fd;
	if (!r->paused || !c || c->state != CONN_BUSY || c->reading ||
	    uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
		return SL_H1_READ_NONE;
	char *in = c->pool->h1->in;
	ssize_t n;
	do
		n = recv(fd, in, SL_H1_READ_BUF, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return SL_H1_READ_NOTHING;
	/* As libuv would have delivered it: 0 is the peer's close. */
	uv_buf_t buf = uv_buf_init(in, SL_H1_READ_BUF);
	on_read((uv_stream_t *)&c->tcp,
	        n > 0    ? n
	        : n == 0 ? UV_EOF
	                 : uv_translate_sys_error(errno),
	        &buf);
	return SL_H1_READ_DONE;
}

void sl_h1_request_free(struct sl_h1_request *r)
{
	free(r->content_type);
	r->content_type = NULL;
}

unsigned sl_h1_pool_conns(const struct sl_h1 *h, const char *base_url)
{
	for (const struct sl_h1_pool *p = h->pools; p; p = p->next)
		if (strcmp(p->url, base_url) == 0)
			return p->conns;
	return 0;
}

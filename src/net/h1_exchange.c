/*
 * h1_exchange.c: one exchange on a connection of the client's pool
 * (h1_client.c): the request written, the response read and parsed, and
 * the calls that act on an exchange under way (pause, resume, read_paused,
 * half-close). Separate from the pool: it works on the one connection it
 * is given, and hands the end of each exchange back to the pool
 * (sl_h1_conn_finish, sl_h1_conn_fail, sl_h1_resend_if_stale), which
 * decides what becomes of the connection.
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

#include "h1_client_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* What uv_try_write left of a request, on its way out; freed when done. */
struct head_write {
	uv_write_t req;
	char head[];
};

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
	if (sl_h1_resend_if_stale(c))
		return;
	if (status == UV_EOF && c->got_byte) {
		/* A body that runs to the close ends here. */
		llhttp_finish(&c->parser);
		if (c->complete) {
			sl_h1_conn_finish(c, false, false, SL_H1_OK);
			return;
		}
	}
	const char *how =
	    status == UV_EOF ? "closed the connection" : "reset the connection";
	if (c->stopped)
		sl_h1_conn_fail(c, SL_H1_STOPPED,
		                "sluice stopped reading the answer");
	else if (c->got_byte)
		sl_h1_conn_fail(c, SL_H1_PARTIAL,
		                "upstream %s before the end of its answer%s%s",
		                how, status == UV_EOF ? "" : ": ",
		                status == UV_EOF ? "" : uv_strerror(status));
	else
		sl_h1_conn_fail(c, SL_H1_NOTHING,
		                "upstream %s before answering%s%s", how,
		                status == UV_EOF ? "" : ": ",
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
			if (nread < 0 && sl_h1_closed_after_stream(c))
				sl_h1_learn_streams_close(c->pool);
		}
		sl_h1_conn_close(c);
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
			sl_h1_learn_streams_close(c->pool);
		if (!whole || !keep || closing)
			sl_debug("upstream %s: connection not kept: %s",
			         c->pool->url,
			         !whole ? "bytes came after the answer"
			         : !keep
			             ? "the answer ends it"
			             : "the peer closed it after the answer");
		keep = keep && !closing;
		sl_h1_conn_finish(c, whole && keep, chunked, SL_H1_OK);
		return;
	}
	if (err == HPE_OK)
		return;
	if (c->stopped)
		sl_h1_conn_fail(c, SL_H1_STOPPED,
		                "sluice stopped reading the answer");
	else if (c->head_too_big)
		sl_h1_conn_fail(c, SL_H1_BAD_RESPONSE,
		                "upstream's response head is over %u bytes",
		                SL_H1_HEAD_MAX);
	else
		sl_h1_conn_fail(
		    c, SL_H1_BAD_RESPONSE,
		    "upstream answered with an invalid HTTP response: %s",
		    llhttp_get_error_reason(&c->parser));
}

void sl_h1_read_on(struct sl_h1_conn *c, bool on)
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
	if (!sl_h1_resend_if_stale(c))
		sl_h1_conn_fail(c, SL_H1_SEND_FAILED,
		                "writing the request to upstream failed: %s",
		                uv_strerror(status));
}

/* uv_write() refused the request at once (sl_h1_conn_send). */
static void on_send_failed(uv_timer_t *t)
{
	struct sl_h1_conn *c = t->data;
	if (!sl_h1_resend_if_stale(c))
		sl_h1_conn_fail(c, SL_H1_SEND_FAILED,
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
void sl_h1_conn_send(struct sl_h1_conn *c, struct sl_h1_request *r)
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
		sl_h1_read_on(c, false);

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

/* ---- an exchange under way ---- */

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
		sl_h1_read_on(r->conn, false);
}

void sl_h1_resume(struct sl_h1_request *r)
{
	if (!r->paused)
		return;
	r->paused = false;
	if (r->conn && r->conn->state == CONN_BUSY)
		sl_h1_read_on(r->conn, true);
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

/*
 * http.c: the server and its connections: listening and accepting, the
 * limits' defaults, each connection's phases and its one timer, the
 * lingering close and closing. Reading and parsing requests is
 * http_read.c's, writing answers http_write.c's; the connection they share
 * is declared in http_impl.h.
 *
 * A connection moves through phases: IDLE (waiting for a request's first
 * byte), HEADERS, BODY, HANDLING (the handler has the request), and LINGER
 * (an error was sent and the connection is closing). One timer per
 * connection enforces the deadline of the current phase; header and body
 * deadlines are set once per phase, so a client that drips a byte at a time
 * still runs out of time.
 *
 * Closing: uv_close() on both handles; the request in flight, if any, gets
 * on_abort from the close callback, always from the loop and never from
 * inside a call the handler made. Memory is freed when the last handle has
 * closed.
 */
#include "sluice/net/http.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"

#include "http_impl.h"

#include <stdlib.h>
#include <string.h>

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

/* ---- the timer ---- */

static void on_timer(uv_timer_t *t);

/* on_timer() runs once `ms` have passed, unless set again or stopped. */
void sl_http_set_timer(struct sl_http_conn *c, uint64_t ms)
{
	uint64_t now = uv_now(c->server->loop);
	c->deadline = now + ms;
	if (c->armed <= c->deadline)
		return; /* it fires first, and waits out the rest */
	c->armed = c->deadline;
	uv_timer_start(&c->timer, on_timer, ms, 0);
}

void sl_http_stop_timer(struct sl_http_conn *c)
{
	c->deadline = TIMER_NONE;
}

/*
 * The send timeout: closes a client that took no response bytes for
 * send_timeout_ms, else sets the timer for when it would be that long.
 */
void sl_http_arm_send_timeout(struct sl_http_conn *c)
{
	if (c->backlog == 0)
		return;
	uint64_t idle = uv_now(c->server->loop) - c->write_progress_ms;
	uint64_t limit = c->server->limits.send_timeout_ms;
	if (idle >= limit) {
		sl_debug("http: client took no bytes for %llu ms; closing",
		         (unsigned long long)idle);
		sl_http_conn_close(c);
	} else {
		sl_http_set_timer(c, limit - idle);
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
		sl_http_conn_reject(c, 408,
		                    "request headers not received in time");
		break;
	case PHASE_BODY:
		sl_http_conn_reject(c, 408,
		                    "request body not received in time");
		break;
	case PHASE_IDLE:
		if (c->flush_wait) {
			/* Waiting for the client to read: the send timeout. */
			sl_http_arm_send_timeout(c);
			break;
		}
		if (c->pending_len > 0) {
			/* scheduled by request_complete: the next request */
			sl_http_set_timer(c, c->server->limits.idle_timeout_ms);
			sl_http_conn_pump(c);
			sl_http_conn_update_reading(c);
			break;
		}
		/* keep-alive idle, or a client that never spoke */
		sl_http_conn_close(c);
		break;
	case PHASE_LINGER:
		if (c->shutdown_started) {
			/* the client did not finish in time */
			sl_http_conn_close(c);
			break;
		}
		/* Still flushing the last response: as while handling. */
		SL_FALLTHROUGH;
	case PHASE_HANDLING: sl_http_arm_send_timeout(c); break;
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
		sl_http_request_finished(c, st, false);
	}
	sl_http_request_free(st);
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

void sl_http_conn_close(struct sl_http_conn *c)
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
		sl_http_conn_close(c);
	/* else keep reading until EOF or the linger timer */
}

void sl_http_maybe_linger(struct sl_http_conn *c)
{
	if (!c->finish_when_flushed || c->backlog > 0 || c->shutdown_started ||
	    c->closing)
		return;
	c->shutdown_started = true;
	c->shutdown_req.data = c;
	if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp,
	                on_shutdown) != 0) {
		sl_http_conn_close(c);
		return;
	}
	if (c->peer_closed) {
		sl_http_conn_close(c);
		return;
	}
	c->linger_since = uv_now(c->server->loop);
	sl_http_set_timer(c, SL_HTTP_LINGER_MS);
}

/* Sends what is queued, then FIN, then discards input for a moment. */
void sl_http_conn_finish(struct sl_http_conn *c)
{
	if (c->closing)
		return;
	c->phase = PHASE_LINGER;
	c->finish_when_flushed = true;
	/* Until the response is flushed, the send timeout applies. */
	c->write_progress_ms = uv_now(c->server->loop);
	sl_http_set_timer(c, c->server->limits.send_timeout_ms);
	sl_http_conn_update_reading(c);
	sl_http_maybe_linger(c);
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
	llhttp_init(&c->parser, HTTP_REQUEST, &sl_http_parser_settings);
	c->parser.data = c;
	c->phase = PHASE_IDLE;
	if (s->n_conns > s->limits.max_connections) {
		sl_warn("http: refusing a connection: %u open, the limit is "
		        "--max-connections %u",
		        s->n_conns - 1, s->limits.max_connections);
		s->refused_connections++;
		sl_http_conn_reject(c, 503, "too many open connections");
		return;
	}
	/* A new client has the header timeout to send its first request. */
	sl_http_set_timer(c, s->limits.header_timeout_ms);
	sl_http_conn_update_reading(c);
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
		sl_http_conn_close(c);
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
		sl_http_conn_close(c); /* the handle never owned fd */
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
			sl_http_conn_close(c);
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
		sl_http_conn_close(c);
	server_maybe_closed(s);
}

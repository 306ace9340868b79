/*
 * test_http.c: the HTTP/1.1 server, fed raw bytes over loopback.
 *
 * The server runs on its own libuv loop in a second thread with a stub
 * handler; the test thread is a deliberately simple blocking client. Each
 * case checks the status line, whether the connection closed, and how many
 * requests reached the handler (none, for every request that must be
 * refused: "nothing forwarded").
 */
#include "sluice/net/http.h"

#include "sluice/base/common.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the server thread ---- */

struct server {
	uv_loop_t loop;
	uv_async_t stop;
	uv_async_t adopt; /* hands adopt_fd to sl_http_server_adopt() */
	atomic_int adopt_fd;
	atomic_int adopt_rc;
	struct sl_http_server http;
	pthread_t thread;
	unsigned port;
	atomic_int handled;
	atomic_int heads; /* seen by on_head */
	atomic_int closed;
};

struct delayed {
	uv_timer_t timer;
	struct sl_http_request *req;
	char body[64];
};

static void on_delayed_closed(uv_handle_t *h)
{
	free(h->data);
}

static void on_delay(uv_timer_t *t)
{
	struct delayed *d = t->data;
	if (d->req)
		sl_http_respond(d->req, 200, "text/plain", NULL, d->body,
		                strlen(d->body));
	uv_close((uv_handle_t *)t, on_delayed_closed);
}

static void on_delayed_abort(struct sl_http_request *req)
{
	struct delayed *d = req->handler_data;
	d->req = NULL;
}

/* A Content-Type of `len` bytes: "text/plain; x=yyy...". */
static char *long_type(size_t len)
{
	char *t = sl_xmalloc(len + 1);
	memset(t, 'y', len);
	memcpy(t, "text/plain; x=", 14);
	t[len] = '\0';
	return t;
}

/* The hostile content types /ctype?N answers with, and what goes out. */
static const struct {
	size_t long_len; /* > 0: a long_type() of this length */
	const char *type;
	bool kept; /* sent as is, else replaced by the fallback */
} ctypes[] = {
    {120, NULL, true}, /* 112+ bytes broke the head before */
    {SL_HTTP_CONTENT_TYPE_MAX, NULL, true},
    {SL_HTTP_CONTENT_TYPE_MAX + 1, NULL, false},
    {4000, NULL, false},
    {0, "text/plain\r\nX-Injected: yes", false},
    {0, "text/plain\nX-Injected: yes", false},
    {0, "text/plain\x01\x7f", false},
    {0, "text/plain; charset=\"utf-8\"\t", true},
};

/* The body /big?N answers: BIG_BODY bytes, "N:" and then 'b's. */
#define BIG_BODY (32u * 1024)

/* /streamtrailers' trailer: its path, so the request is the one asked. */
static size_t test_trailers(struct sl_http_request *req, char *out, size_t size)
{
	int n = snprintf(out, size, "X-Done: %s\r\n", req->path);
	return n > 0 ? (size_t)n : 0;
}

/*
 * /header?NAME answers "[value]" of header NAME, or "none";
 * /echo answers "<method> <target> <body length>:<body>" at once;
 * /slow?NAME answers NAME after 50 ms; /id answers the request id;
 * /stream answers three chunks; /streamtrailers one, then an X-Done
 * trailer where the client accepts trailers; /path and / answer "path=P
 * query=Q"; /big?N answers BIG_BODY bytes; /ctype?N answers "ok" with
 * ctypes[N].
 */
static void handler(struct sl_http_request *req, void *data)
{
	struct server *s = data;
	atomic_fetch_add(&s->handled, 1);
	if (strcmp(req->path, "/path") == 0 || strcmp(req->path, "/") == 0) {
		char *body =
		    sl_xasprintf("path=%s query=%s", req->path, req->query);
		sl_http_respond(req, 200, "text/plain", NULL, body,
		                strlen(body));
		free(body);
		return;
	}
	if (strcmp(req->path, "/big") == 0) {
		char *body = sl_xmalloc(BIG_BODY);
		memset(body, 'b', BIG_BODY);
		int n = snprintf(body, 32, "%s:", req->query);
		body[n] = 'b'; /* no NUL inside */
		sl_http_respond(req, 200, "text/plain", NULL, body, BIG_BODY);
		free(body);
		return;
	}
	if (strcmp(req->path, "/ctype") == 0) {
		unsigned i = (unsigned)atoi(req->query);
		char *type = ctypes[i].long_len
		                 ? long_type(ctypes[i].long_len)
		                 : sl_xasprintf("%s", ctypes[i].type);
		sl_http_respond(req, 200, type, NULL, "ok", 2);
		free(type);
		return;
	}
	if (strcmp(req->path, "/slow") == 0) {
		struct delayed *d = sl_xcalloc(1, sizeof(*d));
		d->req = req;
		snprintf(d->body, sizeof(d->body), "%s", req->query);
		uv_timer_init(s->http.loop, &d->timer);
		d->timer.data = d;
		req->handler_data = d;
		req->on_abort = on_delayed_abort;
		uv_timer_start(&d->timer, on_delay, 50, 0);
		return;
	}
	if (strcmp(req->path, "/header") == 0) {
		const char *v = sl_http_header(req, req->query);
		char *body = v ? sl_xasprintf("[%s]", v) : sl_xasprintf("none");
		sl_http_respond(req, 200, "text/plain", NULL, body,
		                strlen(body));
		free(body);
		return;
	}
	if (strcmp(req->path, "/id") == 0) {
		sl_http_respond(req, 200, "text/plain", NULL, req->id,
		                strlen(req->id));
		return;
	}
	if (strcmp(req->path, "/error") == 0) {
		sl_http_respond_error(req, 404, "not_found_error", NULL,
		                      "nothing at %s", req->path);
		return;
	}
	if (strcmp(req->path, "/streamv") == 0) {
		uv_buf_t pieces[] = {
		    uv_buf_init("a,", 2), uv_buf_init("", 0),
		    uv_buf_init("bc,", 3), uv_buf_init("d", 1),
		    uv_buf_init(",abcdefghijklmnopqrstuvwxyz", 27)};
		sl_http_stream_start(req, 200, "text/plain", NULL, -1);
		sl_http_stream_writev(req, pieces, 5);
		sl_http_stream_end(req);
		return;
	}
	if (strcmp(req->path, "/streamend") == 0) {
		/* The last pieces go with the end; empty ones are dropped. */
		uv_buf_t first = uv_buf_init("x,", 2);
		uv_buf_t last[] = {uv_buf_init("y,", 2), uv_buf_init("", 0),
		                   uv_buf_init("z", 1)};
		sl_http_stream_start(req, 200, "text/plain", NULL, -1);
		sl_http_stream_writev(req, &first, 1);
		sl_http_stream_end_with(req, last, 3);
		return;
	}
	if (strcmp(req->path, "/streamempty") == 0) {
		/* Nothing but the head and the end: none of it is a chunk. */
		uv_buf_t empty = uv_buf_init("", 0);
		sl_http_stream_start(req, 200, "text/plain", NULL, -1);
		sl_http_stream_end_with(req, &empty, 1);
		return;
	}
	if (strcmp(req->path, "/streamtrailers") == 0) {
		/* Trailers for a client that accepts them, as the relay's. */
		req->trailer = "X-Done";
		req->on_trailers = test_trailers;
		sl_http_stream_start(req, 200, "text/plain", NULL, -1);
		sl_http_stream_write(req, "one", 3);
		sl_http_stream_end(req);
		return;
	}
	if (strcmp(req->path, "/stream") == 0) {
		sl_http_stream_start(req, 200, "text/plain", NULL, -1);
		sl_http_stream_write(req, "one,", 4);
		sl_http_stream_write(req, "two,", 4);
		sl_http_stream_write(req, "three", 5);
		sl_http_stream_end(req);
		return;
	}
	char *body =
	    sl_xasprintf("%s %s %zu:%s", llhttp_method_name(req->method),
	                 req->target, req->body_len, req->body);
	sl_http_respond(req, 200, "text/plain", NULL, body, strlen(body));
	free(body);
}

/*
 * on_head, as the routes' key check: /locked needs "X-Key: good" and is
 * refused 401 without it; any other head goes on. It never sees a body.
 */
static bool on_head(struct sl_http_request *req, void *data)
{
	struct server *s = data;
	atomic_fetch_add(&s->heads, 1);
	ASSERT(req->body == NULL);
	ASSERT(req->id[0] != '\0');
	const char *key = sl_http_header(req, "X-Key");
	if (strcmp(req->path, "/locked") != 0 ||
	    (key && strcmp(key, "good") == 0))
		return true;
	sl_http_respond_error(req, 401, "authentication_error", NULL,
	                      "Invalid API Key");
	return false;
}

static void on_server_closed(struct sl_http_server *h)
{
	struct server *s = sl_container_of(h, struct server, http);
	atomic_store(&s->closed, 1);
}

static void on_stop(uv_async_t *a)
{
	struct server *s = a->data;
	sl_http_server_close(&s->http, on_server_closed);
	uv_close((uv_handle_t *)a, NULL);
	uv_close((uv_handle_t *)&s->adopt, NULL);
}

static void on_adopt(uv_async_t *a)
{
	struct server *s = a->data;
	int rc = sl_http_server_adopt(&s->http, atomic_load(&s->adopt_fd));
	atomic_store(&s->adopt_rc, rc == 0 ? 1 : rc);
}

static void *server_main(void *arg)
{
	struct server *s = arg;
	uv_run(&s->loop, UV_RUN_DEFAULT);
	return NULL;
}

static struct server *server_start(const struct sl_http_limits *limits)
{
	struct server *s = sl_xcalloc(1, sizeof(*s));
	ASSERT_EQ(uv_loop_init(&s->loop), 0);
	ASSERT_EQ(uv_async_init(&s->loop, &s->stop, on_stop), 0);
	s->stop.data = s;
	ASSERT_EQ(uv_async_init(&s->loop, &s->adopt, on_adopt), 0);
	s->adopt.data = s;
	ASSERT_EQ(sl_http_server_listen(&s->http, &s->loop, "127.0.0.1", 0,
	                                limits, handler, s),
	          0);
	s->http.on_head = on_head;
	s->port = sl_http_server_port(&s->http);
	ASSERT(s->port > 0);
	ASSERT_EQ(pthread_create(&s->thread, NULL, server_main, s), 0);
	return s;
}

static void server_stop(struct server *s)
{
	uv_async_send(&s->stop);
	pthread_join(s->thread, NULL);
	ASSERT_EQ(atomic_load(&s->closed), 1);
	/* Every handle closed: nothing leaked. */
	ASSERT_EQ(uv_loop_close(&s->loop), 0);
	free(s);
}

static void small_limits(struct sl_http_limits *l)
{
	sl_http_limits_default(l);
	l->max_body = 1024;
	l->max_header_bytes = 2048;
	l->max_headers = 10;
}

/* ---- the blocking client ---- */

static int client(unsigned port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_port = htons((uint16_t)port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	ASSERT_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void send_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return; /* the server may close on us: that is tested */
		data += n;
		len -= (size_t)n;
	}
}

static void send_str(int fd, const char *s)
{
	send_all(fd, s, strlen(s));
}

static uint64_t now_ms(void)
{
	return sl_now_ms();
}

/*
 * Waits up to timeout_ms for bytes; returns what one read brought (0 on
 * timeout or EOF, which sets *eof). The buffer is NUL-terminated.
 */
static size_t recv_for(int fd, char *buf, size_t size, int timeout_ms,
                       bool *eof)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	*eof = false;
	buf[0] = '\0';
	if (poll(&p, 1, timeout_ms) <= 0)
		return 0;
	ssize_t n = recv(fd, buf, size - 1, 0);
	if (n <= 0) {
		*eof = true;
		return 0;
	}
	buf[n] = '\0';
	return (size_t)n;
}

struct response {
	int status;
	char head[4096];
	char body[65536];
	size_t body_len;
};

/* Reads more into buf until it holds at least `need` bytes; fails if not. */
static void ensure(int fd, char *buf, size_t size, size_t *used, size_t need)
{
	while (*used < need) {
		bool eof;
		size_t n = recv_for(fd, buf + *used, size - *used, 5000, &eof);
		if (n == 0)
			TEST_FAIL(
			    "response cut short after %zu bytes: \"%.*s\"",
			    *used, (int)*used, buf);
		*used += n;
	}
}

/* The offset just past the next CRLF at or after pos, reading as needed. */
static size_t line_end(int fd, char *buf, size_t size, size_t *used, size_t pos)
{
	for (;;) {
		for (size_t i = pos; i + 1 < *used; i++)
			if (buf[i] == '\r' && buf[i + 1] == '\n')
				return i + 2;
		ensure(fd, buf, size, used, *used + 1);
	}
}

/*
 * Reads exactly one response (Content-Length or chunked) from fd; `carry`
 * holds bytes read past the previous response and gets those past this one.
 * A response to HEAD is recognised by the request id "X-Test-Head".
 */
static void read_response(int fd, struct response *r, char *carry,
                          size_t *carry_len)
{
	static char buf[262144];
	size_t used = *carry_len;
	memcpy(buf, carry, used);
	size_t head_len = 0;
	while (head_len == 0) {
		for (size_t i = 0; i + 3 < used && !head_len; i++)
			if (memcmp(buf + i, "\r\n\r\n", 4) == 0)
				head_len = i + 4;
		if (!head_len)
			ensure(fd, buf, sizeof(buf), &used, used + 1);
	}
	ASSERT(head_len < sizeof(r->head));
	memcpy(r->head, buf, head_len);
	r->head[head_len] = '\0';
	ASSERT_EQ(sscanf(r->head, "HTTP/1.1 %d", &r->status), 1);

	const char *cl = strcasestr(r->head, "\r\nContent-Length: ");
	bool head_request = strstr(r->head, "X-Test-Head") != NULL;
	size_t pos = head_len;
	r->body_len = 0;
	if (head_request) {
		/* no body */
	} else if (cl) {
		size_t want = strtoul(cl + 18, NULL, 10);
		ensure(fd, buf, sizeof(buf), &used, pos + want);
		memcpy(r->body, buf + pos, want);
		r->body_len = want;
		pos += want;
	} else {
		ASSERT_CONTAINS(r->head, "Transfer-Encoding: chunked");
		for (;;) {
			size_t data =
			    line_end(fd, buf, sizeof(buf), &used, pos);
			size_t chunk = strtoul(buf + pos, NULL, 16);
			ensure(fd, buf, sizeof(buf), &used, data + chunk + 2);
			ASSERT(r->body_len + chunk < sizeof(r->body));
			memcpy(r->body + r->body_len, buf + data, chunk);
			r->body_len += chunk;
			pos = data + chunk + 2;
			if (chunk == 0)
				break;
		}
	}
	r->body[r->body_len] = '\0';
	*carry_len = used - pos;
	memmove(carry, buf + pos, *carry_len);
}

/* Sends `request` on a new connection: one response, then EOF or not. */
static void exchange(struct server *s, const char *request, struct response *r,
                     bool *closed)
{
	int fd = client(s->port);
	send_str(fd, request);
	char carry[65536];
	size_t carry_len = 0;
	read_response(fd, r, carry, &carry_len);
	char more[256];
	bool eof;
	recv_for(fd, more, sizeof(more), 300, &eof);
	*closed = eof;
	close(fd);
}

/* A refused request: this status, connection closed, handler never ran. */
static void expect_refused(struct server *s, const char *request, int status,
                           const char *message_part)
{
	int before = atomic_load(&s->handled);
	struct response r;
	bool closed;
	exchange(s, request, &r, &closed);
	if (r.status != status)
		TEST_FAIL("expected %d, got %d for: %.60s", status, r.status,
		          request);
	ASSERT(closed);
	ASSERT_CONTAINS(r.head, "Connection: close");
	ASSERT_CONTAINS(r.head, "X-Request-Id: "); /* traced like the rest */
	ASSERT_CONTAINS(r.body, "\"error\"");
	ASSERT_CONTAINS(r.body, message_part);
	ASSERT_EQ(atomic_load(&s->handled), before);
}

static char *repeat(const char *unit, size_t times)
{
	size_t n = strlen(unit);
	char *s = sl_xmalloc(n * times + 1);
	for (size_t i = 0; i < times; i++)
		memcpy(s + i * n, unit, n);
	s[n * times] = '\0';
	return s;
}

/* ---- the cases ---- */

static void test_keep_alive_and_pipelining(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	int fd = client(s->port);
	char carry[65536];
	size_t carry_len = 0;
	struct response r;

	send_str(fd, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
	read_response(fd, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	ASSERT_CONTAINS(r.head, "Connection: keep-alive");
	ASSERT_STR_EQ(r.body, "GET /echo 0:");

	/* Three at once, the first answered last: answers stay in order. */
	send_str(fd, "GET /slow?first HTTP/1.1\r\nHost: x\r\n\r\n"
	             "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
	             "\r\nhello"
	             "GET /slow?third HTTP/1.1\r\nHost: x\r\n\r\n");
	const char *want[] = {"first", "POST /echo 5:hello", "third"};
	for (int i = 0; i < 3; i++) {
		read_response(fd, &r, carry, &carry_len);
		ASSERT_EQ(r.status, 200);
		ASSERT_STR_EQ(r.body, want[i]);
		ASSERT_CONTAINS(r.head, "Connection: keep-alive");
	}
	/* Still open and usable afterwards. */
	send_str(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
	read_response(fd, &r, carry, &carry_len);
	ASSERT_CONTAINS(r.head, "Transfer-Encoding: chunked");
	ASSERT_STR_EQ(r.body, "one,two,three");
	ASSERT_EQ(carry_len, 0);
	close(fd);
	server_stop(s);
}

/* Reads a whole response as raw bytes, until `end` or EOF. */
static void read_raw(int fd, char *buf, size_t size, const char *end)
{
	size_t used = 0;
	bool eof = false;
	buf[0] = '\0';
	while (!eof && !(end && strstr(buf, end)) && used + 1 < size) {
		size_t n = recv_for(fd, buf + used, size - used, 5000, &eof);
		if (n == 0 && !eof)
			TEST_FAIL("no more bytes; have: %s", buf);
		used += n;
	}
}

/*
 * The raw body of one request on a new connection: read up to the last
 * chunk for HTTP/1.1, to the close otherwise. `buf` holds the whole
 * response.
 */
static const char *raw_body(const struct server *s, const char *request,
                            char *buf, size_t size)
{
	int fd = client(s->port);
	send_str(fd, request);
	/* A request that asks for the close is read to it. */
	bool to_close = !strstr(request, "HTTP/1.1") ||
	                strstr(request, "Connection: close");
	read_raw(fd, buf, size, to_close ? NULL : "\r\n0\r\n\r\n");
	close(fd);
	const char *body = strstr(buf, "\r\n\r\n");
	ASSERT(body);
	return body + 4;
}

/* sl_http_stream_writev: the pieces joined in one chunk; none empty. */
static void test_stream_writev(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	char buf[4096];
	ASSERT_STR_EQ(raw_body(s, "GET /streamv HTTP/1.1\r\nHost: x\r\n\r\n",
	                       buf, sizeof(buf)),
	              "21\r\na,bc,d,abcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n");
	/* HTTP/1.0: no chunks, the pieces as they are, then the close. */
	ASSERT_STR_EQ(
	    raw_body(s, "GET /streamv HTTP/1.0\r\n\r\n", buf, sizeof(buf)),
	    "a,bc,d,abcdefghijklmnopqrstuvwxyz");
	/* sl_http_stream_end_with: the last pieces in one chunk, then the
	 * end; with none, the end alone; for HEAD, the head only. */
	ASSERT_STR_EQ(raw_body(s, "GET /streamend HTTP/1.1\r\nHost: x\r\n\r\n",
	                       buf, sizeof(buf)),
	              "2\r\nx,\r\n3\r\ny,z\r\n0\r\n\r\n");
	ASSERT_STR_EQ(raw_body(s,
	                       "GET /streamempty HTTP/1.1\r\nHost: x\r\n\r\n",
	                       buf, sizeof(buf)),
	              "0\r\n\r\n");
	ASSERT_STR_EQ(
	    raw_body(s, "HEAD /streamend HTTP/1.0\r\n\r\n", buf, sizeof(buf)),
	    "");
	ASSERT(strstr(buf, "HTTP/1.1 200 OK\r\n") == buf);
	server_stop(s);
}

/* sl_http_te_trailers: which TE fields accept trailers. */
static void test_te_trailers_parsing(void)
{
	static const struct {
		const char *value;
		bool accepts;
	} cases[] = {
	    {"trailers", true},
	    {"Trailers", true},
	    {"TRAILERS", true},
	    {"  trailers  ", true},
	    {"trailers, deflate;q=0.5", true},
	    {"deflate;q=0.5, trailers", true},
	    {"gzip,trailers", true},
	    {",,trailers,", true},
	    {"deflate ; q=0.5 ,\ttrailers", true},
	    {"x;a=\"q\\\"\", trailers", true}, /* an escaped quote */
	    {"", false},
	    {"deflate;q=0.5", false},
	    {"trailer", false},
	    {"trailerss", false},
	    {"xtrailers", false},
	    {"trailers;q=0.5", false}, /* "trailers" takes no weight */
	    {"trailers x", false},
	    {"deflate;x=\"a, trailers, b\"", false}, /* inside quotes */
	    {"deflate;x=\"a,\\\" trailers\"", false},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		struct sl_http_header h = {"TE", cases[i].value,
		                           strlen(cases[i].value)};
		if (sl_http_te_trailers(&h, 1) != cases[i].accepts)
			TEST_FAIL("TE: %s: expected %s", cases[i].value,
			          cases[i].accepts ? "trailers" : "none");
	}
	/* Any of several TE fields; the name in any case; no other field. */
	struct sl_http_header several[] = {{"te", "gzip", 4},
	                                   {"Accept", "trailers", 8},
	                                   {"Te", "trailers", 8}};
	ASSERT(sl_http_te_trailers(several, 3));
	ASSERT(!sl_http_te_trailers(several, 2));
	/* A value is read to its length, not to a NUL. */
	struct sl_http_header cut = {"TE", "trailersX", 8};
	ASSERT(sl_http_te_trailers(&cut, 1));
}

/*
 * A chunked answer's trailers: announced and written only for a client
 * that sent "TE: trailers", on HTTP/1.1 and with a body; without it, the
 * bytes of an answer without trailers.
 */
static void test_trailers_only_when_asked(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	char buf[4096];
	const char *body;
	body = raw_body(s,
	                "GET /streamtrailers HTTP/1.1\r\nHost: x\r\n"
	                "TE: deflate;q=0.5, trailers\r\nConnection: close\r\n"
	                "\r\n",
	                buf, sizeof(buf));
	ASSERT_STR_EQ(body, "3\r\none\r\n0\r\nX-Done: /streamtrailers\r\n\r\n");
	ASSERT(strstr(buf, "\r\nTransfer-Encoding: chunked\r\n"));
	ASSERT(strstr(buf, "\r\nTrailer: X-Done\r\n"));
	/* Without TE, or a TE without trailers: no Trailer, the plain end. */
	static const char *const unasked[] = {
	    "GET /streamtrailers HTTP/1.1\r\nHost: x\r\n"
	    "Connection: close\r\n\r\n",
	    "GET /streamtrailers HTTP/1.1\r\nHost: x\r\nTE: deflate\r\n"
	    "Connection: close\r\n\r\n",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(unasked); i++) {
		body = raw_body(s, unasked[i], buf, sizeof(buf));
		ASSERT_STR_EQ(body, "3\r\none\r\n0\r\n\r\n");
		ASSERT(!strstr(buf, "Trailer"));
	}
	/* HTTP/1.0 has no chunks to carry them; HEAD no body. */
	body =
	    raw_body(s, "GET /streamtrailers HTTP/1.0\r\nTE: trailers\r\n\r\n",
	             buf, sizeof(buf));
	ASSERT_STR_EQ(body, "one");
	ASSERT(!strstr(buf, "Trailer"));
	body = raw_body(s,
	                "HEAD /streamtrailers HTTP/1.1\r\nHost: x\r\n"
	                "TE: trailers\r\nConnection: close\r\n\r\n",
	                buf, sizeof(buf));
	ASSERT_STR_EQ(body, "");
	ASSERT(!strstr(buf, "Trailer"));
	/* A chunked answer whose handler has none: as ever. */
	body = raw_body(s,
	                "GET /stream HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n"
	                "Connection: close\r\n\r\n",
	                buf, sizeof(buf));
	ASSERT_STR_EQ(body,
	              "4\r\none,\r\n4\r\ntwo,\r\n5\r\nthree\r\n0\r\n\r\n");
	ASSERT(!strstr(buf, "Trailer"));
	server_stop(s);
}

static void test_chunked_body_and_trailers(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	struct response r;
	bool closed;
	exchange(s,
	         "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
	         "chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n"
	         "X-Trailer: dropped\r\n\r\n",
	         &r, &closed);
	ASSERT_EQ(r.status, 200);
	ASSERT_STR_EQ(r.body, "POST /echo 11:hello world");
	ASSERT(!closed);
	server_stop(s);
}

static void test_size_limits(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);

	char *big = repeat("a", 3000);
	char *req = sl_xasprintf("GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: %s"
	                         "\r\n\r\n",
	                         big);
	expect_refused(s, req, 431, "headers too large");
	free(req);

	req = sl_xasprintf("GET /%s HTTP/1.1\r\nHost: x\r\n\r\n", big);
	expect_refused(s, req, 414, "request target too long");
	free(req);
	free(big);

	char *many = repeat("X-H: 1\r\n", 11);
	req = sl_xasprintf("GET /echo HTTP/1.1\r\n%s\r\n", many);
	expect_refused(s, req, 431, "too many header fields");
	free(req);
	free(many);

	/* Refused from the Content-Length alone, the body never read. */
	expect_refused(s,
	               "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: "
	               "1025\r\n\r\n",
	               413, "body too large");
	/* Chunked: refused when the chunks add up past the limit. */
	char *chunk = repeat("b", 600);
	req = sl_xasprintf("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                   "Transfer-Encoding: chunked\r\n\r\n"
	                   "258\r\n%s\r\n258\r\n%s\r\n0\r\n\r\n",
	                   chunk, chunk);
	expect_refused(s, req, 413, "body too large");
	free(req);
	free(chunk);

	/* Exactly at the limits is fine. */
	char *max_body = repeat("c", 1024);
	req = sl_xasprintf("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                   "Content-Length: 1024\r\n\r\n%s",
	                   max_body);
	struct response r;
	bool closed;
	exchange(s, req, &r, &closed);
	ASSERT_EQ(r.status, 200);
	ASSERT_CONTAINS(r.body, "POST /echo 1024:ccc");
	free(req);
	free(max_body);
	server_stop(s);
}

static void test_smuggling_is_refused(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	static const char *const cases[] = {
	    /* Content-Length and Transfer-Encoding together */
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /echo HTTP/1.1"
	    "\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
	    "\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
	    /* duplicate Content-Length, equal or not */
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
	    "Content-Length: 3\r\n\r\nabc",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
	    "Content-Length: 5\r\n\r\nabcde",
	    /* malformed Content-Length */
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3a\r\n\r\n"
	    "abc",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -3\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n",
	    /* bad chunk sizes */
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
	    "\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
	    "\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
	    "\r\n\r\n5\r\nhelloXX0\r\n\r\n",
	    /* chunked not last, or not quite "chunked" */
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked,"
	    " identity\r\n\r\n0\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked"
	    "\r\n\r\n0\r\n\r\n",
	    /* bare LF line endings and a space before the colon */
	    "GET /echo HTTP/1.1\nHost: x\n\n",
	    "GET /echo HTTP/1.1\r\nHost : x\r\n\r\n",
	    /* not HTTP at all */
	    "HELLO\r\n\r\n",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++)
		expect_refused(s, cases[i], 400, "malformed HTTP request");

	/* A chunk terminator split across reads is checked all the same. */
	const char *head =
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
	    "chunked\r\n\r\n5\r\nhello\r";
	for (int bad = 0; bad < 2; bad++) {
		int before = atomic_load(&s->handled);
		int fd = client(s->port);
		send_str(fd, head);
		char buf[4096];
		bool eof;
		recv_for(fd, buf, sizeof(buf), 100, &eof); /* a separate read */
		send_str(fd, bad ? "X0\r\n\r\n" : "\n0\r\n\r\n");
		recv_for(fd, buf, sizeof(buf), 2000, &eof);
		ASSERT_CONTAINS(buf, bad ? "HTTP/1.1 400 " : "HTTP/1.1 200 ");
		ASSERT_EQ(atomic_load(&s->handled), before + !bad);
		close(fd);
	}
	server_stop(s);
}

static void test_expect_continue(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	int fd = client(s->port);
	send_str(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
	             "Expect: 100-continue\r\n\r\n");
	char buf[256];
	bool eof;
	recv_for(fd, buf, sizeof(buf), 2000, &eof);
	ASSERT_STR_EQ(buf, "HTTP/1.1 100 Continue\r\n\r\n");
	send_str(fd, "data");
	char carry[65536];
	size_t carry_len = 0;
	struct response r;
	read_response(fd, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	ASSERT_STR_EQ(r.body, "POST /echo 4:data");
	close(fd);

	expect_refused(s,
	               "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
	               "Expect: something-else\r\n\r\ndata",
	               417, "100-continue");
	/* Too large: refused before the client sends its body. */
	expect_refused(s,
	               "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: "
	               "4096\r\nExpect: 100-continue\r\n\r\n",
	               413, "too large");
	server_stop(s);
}

static void test_timeouts(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	l.header_timeout_ms = 400;
	l.body_timeout_ms = 400;
	l.idle_timeout_ms = 400;
	struct server *s = server_start(&l);

	/* Headers dripped a byte every 50 ms: the limit is on the total. */
	int fd = client(s->port);
	uint64_t start = now_ms();
	const char *drip = "GET /echo HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaa"
	                   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
	char buf[4096];
	bool eof = false;
	size_t got = 0;
	for (const char *p = drip; *p && got == 0; p++) {
		send_all(fd, p, 1);
		got = recv_for(fd, buf, sizeof(buf), 50, &eof);
	}
	if (got == 0)
		got = recv_for(fd, buf, sizeof(buf), 2000, &eof);
	uint64_t took = now_ms() - start;
	ASSERT_CONTAINS(buf, "HTTP/1.1 408 ");
	ASSERT(took >= 380 && took < 2000);
	close(fd);

	/* A body that stalls halfway. */
	fd = client(s->port);
	send_str(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10"
	             "\r\n\r\nhalf");
	recv_for(fd, buf, sizeof(buf), 2000, &eof);
	ASSERT_CONTAINS(buf, "HTTP/1.1 408 ");
	ASSERT_CONTAINS(buf, "body not received in time");
	close(fd);

	/* Keep-alive idle: closed without a word. */
	fd = client(s->port);
	char carry[65536];
	size_t carry_len = 0;
	struct response r;
	send_str(fd, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
	read_response(fd, &r, carry, &carry_len);
	start = now_ms();
	got = recv_for(fd, buf, sizeof(buf), 3000, &eof);
	ASSERT_EQ(got, 0);
	ASSERT(eof);
	if (now_ms() - start < 350)
		TEST_FAIL("closed after %llu ms",
		          (unsigned long long)(now_ms() - start));
	close(fd);
	ASSERT_EQ(atomic_load(&s->handled), 1);
	server_stop(s);
}

static void test_head_http10_and_ids(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	int fd = client(s->port);
	char carry[65536];
	size_t carry_len = 0;
	struct response r;

	/* HEAD: the head says how long, no body follows. */
	send_str(fd,
	         "HEAD /echo HTTP/1.1\r\nHost: x\r\nX-Request-Id: X-Test-Head"
	         "\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
	read_response(fd, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	ASSERT_CONTAINS(r.head, "Content-Length: 13\r\n"); /* "HEAD /echo 0:" */
	ASSERT_EQ(r.body_len, 0);
	read_response(fd, &r, carry, &carry_len);
	ASSERT_STR_EQ(r.body, "GET /echo 0:");
	close(fd);

	bool closed;
	exchange(s, "GET /echo HTTP/1.0\r\n\r\n", &r, &closed);
	ASSERT_CONTAINS(r.head, "Connection: close");
	ASSERT(closed);

	exchange(
	    s,
	    "GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: trace-42/a\r\n\r\n",
	    &r, &closed);
	ASSERT_STR_EQ(r.body, "trace-42/a");
	ASSERT_CONTAINS(r.head, "X-Request-Id: trace-42/a\r\n");
	/* Too long, or unprintable: replaced by sluice's own. */
	char *long_id = repeat("i", SL_HTTP_REQUEST_ID_MAX + 1);
	char *req = sl_xasprintf(
	    "GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\n\r\n", long_id);
	exchange(s, req, &r, &closed);
	ASSERT_EQ(r.body_len, 16);
	free(req);
	free(long_id);
	exchange(s, "GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: a b\r\n\r\n",
	         &r, &closed);
	ASSERT_EQ(r.body_len, 16);
	char other[32];
	memcpy(other, r.body, 17); /* 16 hex digits and the NUL */
	exchange(s, "GET /id HTTP/1.1\r\nHost: x\r\n\r\n", &r, &closed);
	ASSERT_EQ(r.body_len, 16);
	ASSERT(strcmp(other, r.body) != 0);
	server_stop(s);
}

static void test_max_connections(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	l.max_connections = 2;
	struct server *s = server_start(&l);
	int a = client(s->port), b = client(s->port);
	char carry[65536];
	size_t carry_len = 0;
	struct response r;
	/* Both admitted connections work... */
	send_str(a, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
	read_response(a, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	send_str(b, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
	read_response(b, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	/* ...the third is refused. */
	int c = client(s->port);
	read_response(c, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 503);
	ASSERT_CONTAINS(r.body, "too many open connections");
	close(c);
	close(a);
	close(b);
	server_stop(s);
}

/* A request closed without any answer: no bytes, EOF, handler never ran. */
static void expect_no_answer(struct server *s, const char *request)
{
	int before = atomic_load(&s->handled);
	int fd = client(s->port);
	send_str(fd, request);
	char buf[256];
	bool eof;
	size_t n = recv_for(fd, buf, sizeof(buf), 5000, &eof);
	if (n != 0 || !eof)
		TEST_FAIL("expected a close without an answer for: %.60s; got "
		          "\"%.60s\"",
		          request, buf);
	ASSERT_EQ(atomic_load(&s->handled), before);
	close(fd);
}

/* Each request answered 200 on its own connection, kept open. */
static void expect_ok(struct server *s, const char *request, const char *body)
{
	struct response r;
	bool closed;
	exchange(s, request, &r, &closed);
	if (r.status != 200)
		TEST_FAIL("expected 200, got %d for: %.60s", r.status, request);
	ASSERT(!closed);
	if (body)
		ASSERT_STR_EQ(r.body, body);
}

static void test_bare_cr_and_lf_are_refused(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	static const char *const cases[] = {
	    /* CVE-2025-23167: llhttp 8 ends the head at "\r\n\r" + any byte */
	    "GET /echo HTTP/1.1\r\nHost: x\r\n\rXPOST /echo HTTP/1.1\r\n"
	    "Host: x\r\nContent-Length: 36\r\n\r\n{\"prompt\":\"SMUGGLED\","
	    "\"max_tokens\":2}",
	    /* the same at the end of chunked trailers */
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
	    "\r\n0\r\n\rXGET /echo HTTP/1.1\r\nHost: x\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
	    "\r\n0\r\nX-T: 1\r\n\rXGET /echo HTTP/1.1\r\nHost: x\r\n\r\n",
	    /* and of a chunk-size line */
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
	    "\r\n5\rXhello\r\n0\r\n\r\n",
	    /* bare CR or LF anywhere else in the head */
	    "GET /echo HTTP/1.1\rXHost: x\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: x\rY\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: x\r\nX-A: 1\n\r\n",
	    "\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n",
	    "\r\n\r\n\r\n\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++)
		expect_refused(s, cases[i], 400, "malformed HTTP request");

	/* The byte after a CR comes in a later read: judged all the same. */
	for (int bad = 0; bad < 2; bad++) {
		int before = atomic_load(&s->handled);
		int fd = client(s->port);
		send_str(fd, "GET /echo HTTP/1.1\r\nHost: x\r\n\r");
		char buf[4096];
		bool eof;
		recv_for(fd, buf, sizeof(buf), 100, &eof); /* a separate read */
		send_str(fd,
		         bad ? "XGET /echo HTTP/1.1\r\nHost: x\r\n\r\n" : "\n");
		recv_for(fd, buf, sizeof(buf), 2000, &eof);
		ASSERT_CONTAINS(buf, bad ? "HTTP/1.1 400 " : "HTTP/1.1 200 ");
		ASSERT_EQ(atomic_load(&s->handled), before + !bad);
		close(fd);
	}
	/* Up to a few empty lines before a request line are ignored. */
	expect_ok(s, "\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n",
	          "GET /echo 0:");
	server_stop(s);
}

static void test_strict_request_rules(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	static const char *const bad[] = {
	    /* Host: missing on HTTP/1.1, twice, or not a host */
	    "GET /echo HTTP/1.1\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: a/b\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: a b\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: a@b\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: x:80a\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: [::1\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: %zz\r\n\r\n",
	    /* obs-fold, an empty header name */
	    "GET /echo HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n",
	    "GET /echo HTTP/1.1\r\nHost: x\r\n: b\r\n\r\n",
	    /* the request line's spaces */
	    "GET  /echo HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /echo  HTTP/1.1\r\nHost: x\r\n\r\n",
	    " GET /echo HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /echo HTTP/1.1 \r\nHost: x\r\n\r\n",
	    "GET /echo \r\nHost: x\r\n\r\n",
	    "GET\t/echo HTTP/1.1\r\nHost: x\r\n\r\n",
	    /* control and non-ASCII bytes in the target */
	    "GET /ec\x01ho HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /ec\x7fho HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /echo\x80 HTTP/1.1\r\nHost: x\r\n\r\n",
	    /* chunked not last, twice, with parameters, or in HTTP/1.0 */
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, "
	    "gzip\r\n\r\n0\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, "
	    "chunked\r\n\r\n0\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked;a=b"
	    "\r\n\r\n0\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n"
	    "\r\n0\r\n\r\n",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: , chunked"
	    "\r\n\r\n0\r\n\r\n",
	    "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "5\r\nhello\r\n0\r\n\r\n",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad); i++)
		expect_refused(s, bad[i], 400, "malformed HTTP request");

	/* Other codings before a final chunked: 501, across fields too. */
	static const char *const codings[] = {
	    "gzip, chunked",
	    "identity, chunked",
	    "gzip\r\nTransfer-Encoding: chunked",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(codings); i++) {
		char *req = sl_xasprintf(
		    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: %s"
		    "\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		    codings[i]);
		expect_refused(s, req, 501, "not supported");
		free(req);
	}

	/* Other major versions: 505, with its reason phrase. */
	static const char *const versions[] = {"2.0", "3.0", "9.9"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(versions); i++) {
		char *req = sl_xasprintf("GET /echo HTTP/%s\r\nHost: x\r\n\r\n",
		                         versions[i]);
		expect_refused(s, req, 505, "HTTP/1.1");
		struct response r;
		bool closed;
		exchange(s, req, &r, &closed);
		ASSERT_CONTAINS(r.head,
		                "HTTP/1.1 505 HTTP Version Not Supported\r\n");
		free(req);
	}

	/* HTTP/0.9: no answer it could read as one; just the close. */
	expect_no_answer(s, "GET /echo\r\n");
	expect_no_answer(s, "GET /echo HTTP/0.9\r\nHost: x\r\n\r\n");
	expect_no_answer(s, "GET /echo HTTP/0.1\r\n\r\n");
	/* Versions that are no version: 400, whatever digit they begin. */
	static const char *const malformed[] = {"01.1", "00.9", "0",   "011",
	                                        "21.1", "2",    "11.1"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(malformed); i++) {
		char *req = sl_xasprintf("GET /echo HTTP/%s\r\nHost: x\r\n\r\n",
		                         malformed[i]);
		expect_refused(s, req, 400, "malformed HTTP request");
		free(req);
	}

	/* Chunk extensions count against the header limit (2048 here). */
	char *ext = repeat("e", 3000);
	char *req = sl_xasprintf("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                         "Transfer-Encoding: chunked\r\n\r\n"
	                         "5;%s\r\nhello\r\n0\r\n\r\n",
	                         ext);
	expect_refused(s, req, 431, "chunk extensions too large");
	free(req);
	free(ext);

	/* What the rules allow. */
	expect_ok(s, "GET /echo HTTP/1.1\r\nHost:\r\n\r\n", "GET /echo 0:");
	expect_ok(s, "GET /echo HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
	          "GET /echo 0:");
	expect_ok(s, "GET /echo HTTP/1.1\r\nHost: a.b-c_d~%41:\r\n\r\n",
	          "GET /echo 0:");
	expect_ok(s, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1:80 \r\n\r\n",
	          "GET /echo 0:");
	expect_ok(s,
	          "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
	          "Chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\n\r\n",
	          "POST /echo 5:hello");
	expect_ok(s, "GET /echo?a=%C3%A9 HTTP/1.1\r\nHost: x\r\n\r\n",
	          "GET /echo?a=%C3%A9 0:");
	struct response r;
	bool closed;
	exchange(s, "GET /echo HTTP/1.0\r\n\r\n", &r, &closed);
	ASSERT_EQ(r.status, 200);
	ASSERT(closed);

	/* Absolute-form targets: path and query come from the target. */
	expect_ok(s,
	          "POST http://h:1/path?x=1 HTTP/1.1\r\nHost: h:1\r\n"
	          "Content-Length: 2\r\n\r\nhi",
	          "path=/path query=x=1");
	expect_ok(s, "GET https://h HTTP/1.1\r\nHost: h\r\n\r\n",
	          "path=/ query=");
	expect_ok(s, "GET HTTP://h?q HTTP/1.1\r\nHost: h\r\n\r\n",
	          "path=/ query=q");
	ASSERT_EQ(atomic_load(&s->handled), 10);
	server_stop(s);
}

/* A client socket with small kernel buffers, so that it fills fast. */
static int client_small_buffers(unsigned port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT(fd >= 0);
	int size = 16 * 1024;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_port = htons((uint16_t)port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	ASSERT_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

struct sender {
	int fd;
	const char *data;
	size_t len;
};

static void *send_rest(void *arg)
{
	struct sender *sd = arg;
	send_all(sd->fd, sd->data, sd->len);
	return NULL;
}

/*
 * Sends until the server stops reading (the socket stays unwritable for a
 * second, or the server closes it); returns the bytes sent. Fails if the server
 * read everything.
 */
static size_t send_until_stopped(int fd, const char *data, size_t total)
{
	size_t sent = 0;
	bool stopped = false;
	uint64_t deadline = now_ms() + 30000;
	while (sent < total && !stopped && now_ms() < deadline) {
		ssize_t n = send(fd, data + sent, total - sent,
		                 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
			return sent; /* closed on us: stopped reading, surely */
		ASSERT(n < 0 && (errno == EAGAIN || errno == EINTR));
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		stopped = poll(&p, 1, 1000) == 0;
	}
	if (!stopped)
		TEST_FAIL("the server read all %zu of %zu bytes sent", sent,
		          total);
	return sent;
}

/* The most a TCP socket's send buffer grows to: tcp_wmem's maximum. */
static size_t kernel_send_buffer_max(void)
{
	unsigned long lo, def, max = 4ul << 20; /* Linux's default */
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
	if (f) {
		if (fscanf(f, "%lu %lu %lu", &lo, &def, &max) != 3)
			max = 4ul << 20;
		fclose(f);
	}
	return max;
}

/* REQUESTS pipelined GET /big requests of about 1 KiB each. */
static char *big_requests(unsigned requests, size_t *total)
{
	char *pad = repeat("p", 1000);
	size_t cap = (size_t)requests * 1100;
	char *all = sl_xmalloc(cap);
	*total = 0;
	for (unsigned i = 0; i < requests; i++)
		*total += (size_t)snprintf(all + *total, cap - *total,
		                           "GET /big?%u HTTP/1.1\r\nHost: x\r\n"
		                           "X-Pad: %s\r\n\r\n",
		                           i, pad);
	free(pad);
	return all;
}

/*
 * A client pipelines many requests with large answers and reads none:
 * sluice stops reading its requests once a few answers wait, instead of
 * queueing all of them in memory; when the client reads, every answer
 * comes, in order.
 */
static void test_pipelining_is_bounded(void)
{
	enum { REQUESTS = 2000 };
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	/* About 1 KiB a request: 2 MB in all, more than any buffer holds. */
	size_t total;
	char *all = big_requests(REQUESTS, &total);
	int fd = client_small_buffers(s->port);
	size_t sent = send_until_stopped(fd, all, total);
	/*
	 * The answers made so far fit in the kernel's send buffer (at most
	 * tcp_wmem's maximum), the client's small receive buffer, and the
	 * pipeline bound; without the bound, one per request read.
	 */
	int ran = atomic_load(&s->handled);
	size_t bound = (kernel_send_buffer_max() + 256 * 1024) / BIG_BODY + 4;
	fprintf(stderr,
	        "  %d of %d requests answered before the client read (%zu "
	        "bytes sent; at most %zu may be)\n",
	        ran, REQUESTS, sent, bound);
	ASSERT((size_t)ran <= bound);
	ASSERT(ran < REQUESTS / 2);

	/* Now the client reads, and sends the rest meanwhile. */
	struct sender sd = {fd, all + sent, total - sent};
	pthread_t t;
	ASSERT_EQ(pthread_create(&t, NULL, send_rest, &sd), 0);
	static char carry[262144];
	size_t carry_len = 0;
	static struct response r;
	for (unsigned i = 0; i < REQUESTS; i++) {
		read_response(fd, &r, carry, &carry_len);
		ASSERT_EQ(r.status, 200);
		ASSERT_EQ(r.body_len, BIG_BODY);
		char want[32];
		snprintf(want, sizeof(want), "%u:b", i);
		if (strncmp(r.body, want, strlen(want)) != 0)
			TEST_FAIL("answer %u begins \"%.10s\"", i, r.body);
	}
	pthread_join(t, NULL);
	ASSERT_EQ(atomic_load(&s->handled), REQUESTS);
	close(fd);
	free(all);
	server_stop(s);
}

/*
 * While a connection waits for its client to read, the send timeout
 * applies (not the much longer idle timeout): a client that never reads is
 * dropped, which shows as a reset on its socket.
 */
static void test_pipelining_wait_has_the_send_timeout(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	l.send_timeout_ms = 300;
	l.idle_timeout_ms = 600000;
	struct server *s = server_start(&l);
	size_t total;
	char *all = big_requests(2000, &total);
	int fd = client_small_buffers(s->port);
	send_until_stopped(fd, all, total);
	/* Only a hang-up or an error: the client still reads nothing. */
	struct pollfd p = {.fd = fd, .events = 0};
	ASSERT_EQ(poll(&p, 1, 20000), 1);
	ASSERT(p.revents & (POLLHUP | POLLERR));
	close(fd);
	free(all);
	server_stop(s);
}

/* A socketpair end handed to the server is served like a TCP client. */
static void test_adopted_socket(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	int sv[2];
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	atomic_store(&s->adopt_fd, sv[1]);
	uv_async_send(&s->adopt);
	uint64_t deadline = now_ms() + 5000;
	while (atomic_load(&s->adopt_rc) == 0 && now_ms() < deadline)
		poll(NULL, 0, 1);
	ASSERT_EQ(atomic_load(&s->adopt_rc), 1);
	send_str(sv[0], "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"
	                "GET /echo?two HTTP/1.1\r\nHost: x\r\n"
	                "Connection: close\r\n\r\n");
	char carry[65536];
	size_t carry_len = 0;
	struct response r;
	read_response(sv[0], &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	ASSERT_STR_EQ(r.body, "GET /echo 0:");
	read_response(sv[0], &r, carry, &carry_len);
	ASSERT_STR_EQ(r.body, "GET /echo?two 0:");
	char buf[64];
	bool eof;
	recv_for(sv[0], buf, sizeof(buf), 5000, &eof);
	ASSERT(eof); /* closed as asked: the server owned the socket */
	close(sv[0]);
	server_stop(s);
}

/*
 * Content types an upstream might send: too long, or with CR, LF or other
 * control bytes. The head stays well framed (the next response on the same
 * connection parses), and what cannot go out whole is replaced.
 */
static void test_hostile_content_types(void)
{
	ASSERT(sl_http_field_value_ok("text/plain; charset=utf-8", 256));
	ASSERT(sl_http_field_value_ok("", 0));
	ASSERT(sl_http_field_value_ok("a\tb c", 5));
	ASSERT(!sl_http_field_value_ok("abcdef", 5));
	ASSERT(!sl_http_field_value_ok("a\r\nb", 256));
	ASSERT(!sl_http_field_value_ok("a\nb", 256));
	ASSERT(!sl_http_field_value_ok("a\x01", 256));
	ASSERT(!sl_http_field_value_ok("a\x7f", 256));
	ASSERT(!sl_http_field_value_ok("caf\xc3\xa9", 256));

	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	int fd = client(s->port);
	static char carry[262144];
	size_t carry_len = 0;
	static struct response r;
	for (unsigned i = 0; i < SL_ARRAY_SIZE(ctypes); i++) {
		char *req =
		    sl_xasprintf("GET /ctype?%u HTTP/1.1\r\nHost: x\r\n\r\n"
		                 "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n",
		                 i);
		send_str(fd, req);
		free(req);
		read_response(fd, &r, carry, &carry_len);
		ASSERT_EQ(r.status, 200);
		ASSERT_STR_EQ(r.body, "ok");
		ASSERT(strstr(r.head, "X-Injected") == NULL);
		char *type = ctypes[i].long_len
		                 ? long_type(ctypes[i].long_len)
		                 : sl_xasprintf("%s", ctypes[i].type);
		char *line = sl_xasprintf(
		    "\r\nContent-Type: %s\r\n",
		    ctypes[i].kept ? type : SL_HTTP_CONTENT_TYPE_FALLBACK);
		if (!strstr(r.head, line))
			TEST_FAIL("case %u: no \"%.40s...\" in the head", i,
			          line + 2);
		free(line);
		free(type);
		/* The next response on the connection is where it should be. */
		read_response(fd, &r, carry, &carry_len);
		ASSERT_EQ(r.status, 200);
		ASSERT_STR_EQ(r.body, "GET /echo 0:");
	}
	ASSERT_EQ(carry_len, 0);
	close(fd);
	server_stop(s);
}

/* The head of one answer to `request`, sent on a new connection. */
static void head_for(struct server *s, const char *request, struct response *r)
{
	bool closed;
	exchange(s, request, r, &closed);
}

static void assert_lacks(const char *head, const char *what)
{
	if (strstr(head, what))
		TEST_FAIL("unexpected \"%s\" in:\n%s", what, head);
}

static void test_cors_on_every_answer(void)
{
	struct response r;
	/* Off by default: no CORS header at all. */
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	head_for(s, "GET /echo HTTP/1.1\r\nHost: x\r\nOrigin: http://o\r\n\r\n",
	         &r);
	assert_lacks(r.head, "Access-Control");
	assert_lacks(r.head, "Vary");
	server_stop(s);

	/* "*": the Origin echoed, or "*" without one; on every kind of answer.
	 */
	char *any[] = {"*"};
	l.cors_origins = any;
	l.n_cors_origins = 1;
	s = server_start(&l);
	head_for(s,
	         "GET /echo HTTP/1.1\r\nHost: x\r\nOrigin: http://o:1\r\n\r\n",
	         &r);
	ASSERT_EQ(r.status, 200);
	ASSERT_CONTAINS(r.head,
	                "\r\nAccess-Control-Allow-Origin: http://o:1\r\n"
	                "Vary: Origin\r\n");
	head_for(s, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", &r);
	ASSERT_CONTAINS(r.head, "\r\nAccess-Control-Allow-Origin: *\r\n");
	/* An error from the handler, in llama-server's Content-Type. */
	head_for(s,
	         "GET /error HTTP/1.1\r\nHost: x\r\nOrigin: http://o\r\n\r\n",
	         &r);
	ASSERT_EQ(r.status, 404);
	ASSERT_CONTAINS(
	    r.head, "\r\nContent-Type: application/json; charset=utf-8\r\n");
	ASSERT_CONTAINS(r.head,
	                "\r\nAccess-Control-Allow-Origin: http://o\r\n");
	ASSERT_STR_EQ(r.body, "{\"error\":{\"message\":\"nothing at /error\","
	                      "\"type\":\"not_found_error\",\"code\":404}}");
	/* A streamed answer. */
	head_for(s,
	         "GET /stream HTTP/1.1\r\nHost: x\r\nOrigin: http://o\r\n\r\n",
	         &r);
	ASSERT_STR_EQ(r.body, "one,two,three");
	ASSERT_CONTAINS(r.head,
	                "\r\nAccess-Control-Allow-Origin: http://o\r\n");
	/* A refusal the server writes itself while parsing (body too big). */
	head_for(s,
	         "POST /echo HTTP/1.1\r\nHost: x\r\nOrigin: http://o\r\n"
	         "Content-Length: 5000\r\n\r\n",
	         &r);
	ASSERT_EQ(r.status, 413);
	ASSERT_CONTAINS(
	    r.head, "\r\nContent-Type: application/json; charset=utf-8\r\n");
	ASSERT_CONTAINS(r.head,
	                "\r\nAccess-Control-Allow-Origin: http://o\r\n");
	/* An Origin too long to echo counts as none. */
	char *long_origin = repeat("o", SL_HTTP_ORIGIN_MAX + 1);
	char *req = sl_xasprintf(
	    "GET /echo HTTP/1.1\r\nHost: x\r\nOrigin: %s\r\n\r\n", long_origin);
	head_for(s, req, &r);
	ASSERT_CONTAINS(r.head, "\r\nAccess-Control-Allow-Origin: *\r\n");
	assert_lacks(r.head, "ooooo");
	free(req);
	free(long_origin);
	server_stop(s);

	/* A refusal before any request: over --max-connections. */
	l.max_connections = 1;
	s = server_start(&l);
	int a = client(s->port);
	send_str(a, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
	char carry[65536];
	size_t carry_len = 0;
	read_response(a, &r, carry, &carry_len);
	int b = client(s->port);
	carry_len = 0;
	read_response(b, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 503);
	ASSERT_CONTAINS(r.head, "\r\nAccess-Control-Allow-Origin: *\r\n");
	close(a);
	close(b);
	server_stop(s);

	/* A list: only its origins are echoed, exactly; Vary on all. */
	small_limits(&l);
	char *list[] = {"http://a.example", "https://b.example:8443"};
	l.cors_origins = list;
	l.n_cors_origins = 2;
	s = server_start(&l);
	head_for(s,
	         "GET /echo HTTP/1.1\r\nHost: x\r\n"
	         "Origin: https://b.example:8443\r\n\r\n",
	         &r);
	ASSERT_CONTAINS(r.head, "\r\nAccess-Control-Allow-Origin: "
	                        "https://b.example:8443\r\nVary: Origin\r\n");
	static const char *const refused[] = {
	    "http://c.example", "https://b.example", "http://a.example.evil",
	    "HTTP://A.EXAMPLE"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(refused); i++) {
		req = sl_xasprintf(
		    "GET /error HTTP/1.1\r\nHost: x\r\nOrigin: %s\r\n\r\n",
		    refused[i]);
		head_for(s, req, &r);
		free(req);
		ASSERT_EQ(r.status, 404);
		assert_lacks(r.head, "Access-Control");
		ASSERT_CONTAINS(r.head, "\r\nVary: Origin\r\n");
	}
	head_for(s, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", &r);
	assert_lacks(r.head, "Access-Control");
	server_stop(s);
}

/*
 * A request with a body is judged on its head: one refused there is
 * answered before any of its body is sent, is never handled, and closes
 * its connection (its body stands before any next request).
 */
static void test_head_is_judged_before_the_body(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	int handled = atomic_load(&s->handled);
	struct response r;
	char carry[65536];
	size_t carry_len = 0;

	/* No body sent at all: the 401 comes from the head alone. */
	int fd = client(s->port);
	send_str(fd, "POST /locked HTTP/1.1\r\nHost: x\r\nContent-Length: "
	             "1000\r\nX-Request-Id: t-1\r\n\r\n");
	read_response(fd, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 401);
	ASSERT_CONTAINS(r.head, "Connection: close");
	ASSERT_CONTAINS(r.head, "X-Request-Id: t-1\r\n");
	ASSERT_STR_EQ(r.body,
	              "{\"error\":{\"message\":\"Invalid API Key\","
	              "\"type\":\"authentication_error\",\"code\":401}}");
	char buf[4096];
	bool eof;
	recv_for(fd, buf, sizeof(buf), 2000, &eof);
	ASSERT(eof);
	close(fd);

	/* Expect: 100-continue gets the refusal instead of the 100. */
	fd = client(s->port);
	send_str(fd, "POST /locked HTTP/1.1\r\nHost: x\r\nContent-Length: "
	             "4\r\nExpect: 100-continue\r\n\r\n");
	recv_for(fd, buf, sizeof(buf), 5000, &eof);
	ASSERT_EQ(strncmp(buf, "HTTP/1.1 401 ", 13), 0);
	close(fd);

	/*
	 * A client that sends its whole body before it reads, slowly: sluice
	 * reads on (and drops) what it sends until it is quiet, so that no
	 * send fails on a closed connection and the answer is read. Each
	 * piece comes after longer than SL_HTTP_LINGER_MS would allow in all.
	 */
	fd = client(s->port);
	send_str(fd, "POST /locked HTTP/1.1\r\nHost: x\r\nContent-Length: "
	             "1000\r\n\r\n");
	char piece[250];
	memset(piece, 'p', sizeof(piece));
	for (int i = 0; i < 4; i++) {
		struct timespec pause = {0, (SL_HTTP_LINGER_MS / 3) * 1000000L};
		nanosleep(&pause, NULL); /* the client's pace, not a wait */
		ASSERT_EQ(send(fd, piece, sizeof(piece), MSG_NOSIGNAL),
		          (long long)sizeof(piece));
	}
	carry_len = 0;
	read_response(fd, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 401);
	recv_for(fd, buf, sizeof(buf), 5000, &eof);
	ASSERT(eof);
	close(fd);

	/* A chunked body, and a body with a request behind it: the same. */
	expect_refused(s,
	               "POST /locked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
	               "chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	               401, "Invalid API Key");
	expect_refused(s,
	               "POST /locked HTTP/1.1\r\nHost: x\r\nContent-Length: "
	               "4\r\n\r\ndataGET /echo HTTP/1.1\r\nHost: x\r\n\r\n",
	               401, "Invalid API Key");
	ASSERT_EQ(atomic_load(&s->handled), handled);

	/* With the key, as before: the 100, the body, the handler. */
	fd = client(s->port);
	send_str(fd, "POST /locked HTTP/1.1\r\nHost: x\r\nContent-Length: "
	             "4\r\nX-Key: good\r\nExpect: 100-continue\r\n\r\n");
	recv_for(fd, buf, sizeof(buf), 5000, &eof);
	ASSERT_STR_EQ(buf, "HTTP/1.1 100 Continue\r\n\r\n");
	send_str(fd, "data");
	carry_len = 0;
	read_response(fd, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	ASSERT_CONTAINS(r.head, "Connection: keep-alive");
	ASSERT_STR_EQ(r.body, "POST /locked 4:data");
	close(fd);

	/* A request without a body goes to the handler, unseen by on_head. */
	int heads = atomic_load(&s->heads);
	expect_ok(s, "POST /locked HTTP/1.1\r\nHost: x\r\n\r\n",
	          "POST /locked 0:");
	expect_ok(s,
	          "POST /locked HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
	          "\r\n",
	          "POST /locked 0:");
	ASSERT_EQ(atomic_load(&s->heads), heads);
	ASSERT_EQ(atomic_load(&s->handled), handled + 3);
	server_stop(s);
}

/*
 * Sends a head with "Expect: 100-continue" on a new connection; returns
 * the connection and puts the first answer's bytes in buf.
 */
static int expect_100(const struct server *s, const char *head, char *buf,
                      size_t size)
{
	int fd = client(s->port);
	send_str(fd, head);
	bool eof;
	recv_for(fd, buf, size, 5000, &eof);
	return fd;
}

#define BODY_1024                                                              \
	"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n"           \
	"Expect: 100-continue\r\n\r\n"

/*
 * Bodies being read hold at most max_body_memory together: each reserves
 * its length (max_body when chunked) from its head; one that would go past
 * is answered 503 with Retry-After before it is read, and the memory comes
 * back when a body is in or its connection goes.
 */
static void test_body_memory_is_bounded(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	l.max_body_memory = 2048; /* two bodies of max_body (1024) */
	struct server *s = server_start(&l);
	char buf[4096];
	char *body = repeat("d", 1024);

	/* Two bodies take it all (the 100 says each was admitted). */
	int a = expect_100(s, BODY_1024, buf, sizeof(buf));
	ASSERT_STR_EQ(buf, "HTTP/1.1 100 Continue\r\n\r\n");
	send_all(a, body, 10);
	int b = expect_100(s, BODY_1024, buf, sizeof(buf));
	ASSERT_STR_EQ(buf, "HTTP/1.1 100 Continue\r\n\r\n");

	/* A third, however small, and a chunked one: 503, Retry-After. */
	static const char *const refused[] = {
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
	    "\r\n\r\n1\r\nx\r\n0\r\n\r\n",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(refused); i++) {
		struct response r;
		bool closed;
		exchange(s, refused[i], &r, &closed);
		ASSERT_EQ(r.status, 503);
		ASSERT(closed);
		ASSERT_CONTAINS(r.head, "\r\nRetry-After: 1\r\n"
		                        "retry-after-ms: 1000\r\n");
		ASSERT_CONTAINS(r.body, "too many request bodies");
	}
	/* Requests without a body are served all the same. */
	expect_ok(s, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", "GET /echo 0:");

	/* A body once admitted is read whole. */
	send_all(a, body + 10, 1014);
	char carry[65536];
	size_t carry_len = 0;
	struct response r;
	read_response(a, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	ASSERT_CONTAINS(r.body, "POST /echo 1024:dddd");
	/* Its memory came back when it was in: a new body is admitted. */
	int c = expect_100(s, BODY_1024, buf, sizeof(buf));
	ASSERT_STR_EQ(buf, "HTTP/1.1 100 Continue\r\n\r\n");

	/* A client that leaves mid-body gives its memory back too. */
	close(b);
	uint64_t deadline = now_ms() + 5000;
	int d = -1;
	while (d < 0) {
		d = expect_100(s, BODY_1024, buf, sizeof(buf));
		if (strcmp(buf, "HTTP/1.1 100 Continue\r\n\r\n") == 0)
			break;
		ASSERT_CONTAINS(buf, "HTTP/1.1 503 ");
		close(d);
		d = -1;
		if (now_ms() > deadline)
			TEST_FAIL(
			    "the memory of a body left halfway never came "
			    "back");
	}
	send_all(c, body, 1024);
	send_all(d, body, 1024);
	carry_len = 0;
	read_response(c, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	carry_len = 0;
	read_response(d, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	close(a);
	close(c);
	close(d);
	free(body);
	server_stop(s);
}

/*
 * A chunk whose size takes the body past max_body is refused when its size
 * line arrives, its data never sent (as nginx does), not after the body
 * timeout.
 */
static void test_chunk_over_the_limit_is_refused_at_its_size(void)
{
	struct sl_http_limits l;
	small_limits(&l); /* max_body 1024; the body timeout stays 30 s */
	struct server *s = server_start(&l);
	expect_refused(s,
	               "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
	               "chunked\r\n\r\n401\r\n",
	               413, "body too large");
	char *half = repeat("h", 512);
	char *req = sl_xasprintf("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                         "Transfer-Encoding: chunked\r\n\r\n"
	                         "200\r\n%s\r\n201\r\n",
	                         half);
	expect_refused(s, req, 413, "body too large");
	free(req);
	/* Exactly at the limit is fine. */
	req = sl_xasprintf("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                   "Transfer-Encoding: chunked\r\n\r\n"
	                   "200\r\n%s\r\n200\r\n%s\r\n0\r\n\r\n",
	                   half, half);
	struct response r;
	bool closed;
	exchange(s, req, &r, &closed);
	ASSERT_EQ(r.status, 200);
	ASSERT_CONTAINS(r.body, "POST /echo 1024:hhh");
	free(req);
	free(half);
	server_stop(s);
}

/* RFC 9110, 5.5: whitespace around a field value is not part of it. */
static void test_header_values_are_trimmed(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	static const struct {
		const char *line, *want;
	} cases[] = {
	    {"X-V: value \t \r\n", "[value]"},
	    {"X-V:\t \tvalue\r\n", "[value]"},
	    {"X-V: \t a b\t c\t \r\n", "[a b\t c]"},
	    {"X-V:  \t \r\n", "[]"},
	    {"X-V:\r\n", "[]"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		char *req = sl_xasprintf(
		    "GET /header?X-V HTTP/1.1\r\nHost: x\r\n%s\r\n",
		    cases[i].line);
		expect_ok(s, req, cases[i].want);
		free(req);
	}
	server_stop(s);
}

/*
 * RFC 9110, 2.5: HTTP/1.2 to HTTP/1.9 are answered as HTTP/1.1, with all
 * its rules: keep-alive by default, chunked bodies, a Host required.
 */
static void test_higher_minor_versions_are_http11(void)
{
	struct sl_http_limits l;
	small_limits(&l);
	struct server *s = server_start(&l);
	int fd = client(s->port);
	char carry[65536];
	size_t carry_len = 0;
	struct response r;
	send_str(fd, "GET /echo HTTP/1.2\r\nHost: x\r\n\r\n"
	             "POST /echo HTTP/1.9\r\nHost: x\r\nTransfer-Encoding: "
	             "chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
	read_response(fd, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	ASSERT_EQ(strncmp(r.head, "HTTP/1.1 200 OK\r\n", 17), 0);
	ASSERT_CONTAINS(r.head, "Connection: keep-alive");
	ASSERT_STR_EQ(r.body, "GET /echo 0:");
	read_response(fd, &r, carry, &carry_len);
	ASSERT_EQ(r.status, 200);
	ASSERT_STR_EQ(r.body, "POST /echo 5:hello");
	/* Still open: a third on the same connection. */
	send_str(fd, "GET /echo HTTP/1.5\r\nHost: x\r\n\r\n");
	read_response(fd, &r, carry, &carry_len);
	ASSERT_STR_EQ(r.body, "GET /echo 0:");
	close(fd);

	bool closed;
	exchange(s,
	         "GET /echo HTTP/1.2\r\nHost: x\r\nConnection: close"
	         "\r\n\r\n",
	         &r, &closed);
	ASSERT_EQ(r.status, 200);
	ASSERT(closed);
	/* HTTP/1.1's rules hold: exactly one Host. */
	expect_refused(s, "GET /echo HTTP/1.2\r\n\r\n", 400,
	               "malformed HTTP request");
	/* One digit each (RFC 9112, 2.3). */
	expect_refused(s, "GET /echo HTTP/1.23\r\nHost: x\r\n\r\n", 400,
	               "malformed HTTP request");
	server_stop(s);
}

int main(void)
{
	RUN(test_keep_alive_and_pipelining);
	RUN(test_chunked_body_and_trailers);
	RUN(test_stream_writev);
	RUN(test_te_trailers_parsing);
	RUN(test_trailers_only_when_asked);
	RUN(test_size_limits);
	RUN(test_smuggling_is_refused);
	RUN(test_expect_continue);
	RUN(test_timeouts);
	RUN(test_head_http10_and_ids);
	RUN(test_max_connections);
	RUN(test_bare_cr_and_lf_are_refused);
	RUN(test_strict_request_rules);
	RUN(test_pipelining_is_bounded);
	RUN(test_pipelining_wait_has_the_send_timeout);
	RUN(test_hostile_content_types);
	RUN(test_adopted_socket);
	RUN(test_cors_on_every_answer);
	RUN(test_head_is_judged_before_the_body);
	RUN(test_body_memory_is_bounded);
	RUN(test_chunk_over_the_limit_is_refused_at_its_size);
	RUN(test_header_values_are_trimmed);
	RUN(test_higher_minor_versions_are_http11);
	return 0;
}

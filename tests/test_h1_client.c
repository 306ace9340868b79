/*
 * test_h1_client.c: sluice's HTTP/1.1 upstream client against a scripted
 * server in the same loop, over real sockets on 127.0.0.1.
 *
 * The server answers each request it receives (counted across its
 * connections) with the next step of the test's script: an answer, an
 * answer and then a close, a close without a byte (what a kept connection
 * that the peer timed out looks like to the request written to it), or an
 * answer left hanging. It counts the connections it accepted and those
 * the client closed, which is what the pool's behaviour is judged by.
 */
#include "sluice/net/h1_client.h"

#include "sluice/base/common.h"
#include "test.h"

#include <stdbool.h>
#include <uv.h>

/* A test that needs longer than this has hung. */
#define TEST_DEADLINE_MS 10000

enum action {
	REPLY,       /* write the answer; keep the connection */
	REPLY_CLOSE, /* write the answer, then close */
	DROP,        /* close without a byte */
	HOLD,        /* write the answer, then neither more nor a close */
};

struct step {
	enum action action;
	const char *answer;
};

struct server {
	uv_tcp_t listener;
	int port;
	const struct step *script;
	unsigned steps;
	unsigned accepted;    /* connections */
	unsigned requests;    /* requests read whole */
	unsigned peer_closed; /* connections the client closed */
	struct sconn *conns[16];
	char last_request[4096];
};

struct sconn {
	uv_tcp_t tcp;
	uv_write_t write;
	char buf[8192];
	size_t len;
	bool close_after_write;
	bool closing;
};

static uv_loop_t loop;
static struct server server;

static void on_sconn_closed(uv_handle_t *h)
{
	struct sconn *c = sl_container_of((uv_tcp_t *)h, struct sconn, tcp);
	for (unsigned i = 0; i < SL_ARRAY_SIZE(server.conns); i++)
		if (server.conns[i] == c)
			server.conns[i] = NULL;
	free(c);
}

static void sconn_close(struct sconn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	uv_close((uv_handle_t *)&c->tcp, on_sconn_closed);
}

static void on_server_written(uv_write_t *w, int status)
{
	(void)status;
	struct sconn *c = sl_container_of(w, struct sconn, write);
	if (c->close_after_write)
		sconn_close(c);
}

static void server_write(struct sconn *c, const char *text, bool then_close)
{
	c->close_after_write = then_close;
	uv_buf_t b = uv_buf_init((char *)text, (unsigned)strlen(text));
	ASSERT_EQ(uv_write(&c->write, (uv_stream_t *)&c->tcp, &b, 1,
	                   on_server_written),
	          0);
}

/* Length of a whole request at the start of buf, or 0. */
static size_t whole_request(const char *buf, size_t len)
{
	const char *end = memmem(buf, len, "\r\n\r\n", 4);
	if (!end)
		return 0;
	size_t head = (size_t)(end - buf) + 4;
	size_t body = 0;
	const char *cl = memmem(buf, head, "Content-Length: ", 16);
	if (cl)
		body = strtoul(cl + 16, NULL, 10);
	return len >= head + body ? head + body : 0;
}

static void server_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	struct sconn *c = sl_container_of((uv_tcp_t *)h, struct sconn, tcp);
	*buf =
	    uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
}

static void server_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	(void)buf;
	struct sconn *c = sl_container_of((uv_tcp_t *)s, struct sconn, tcp);
	if (nread < 0) {
		server.peer_closed++;
		sconn_close(c);
		return;
	}
	c->len += (size_t)nread;
	size_t n = whole_request(c->buf, c->len);
	if (n == 0)
		return;
	ASSERT(n < sizeof(server.last_request));
	memcpy(server.last_request, c->buf, n);
	server.last_request[n] = '\0';
	memmove(c->buf, c->buf + n, c->len - n);
	c->len -= n;
	ASSERT(server.requests < server.steps);
	const struct step *st = &server.script[server.requests++];
	switch (st->action) {
	case REPLY: server_write(c, st->answer, false); break;
	case REPLY_CLOSE: server_write(c, st->answer, true); break;
	case DROP: sconn_close(c); break;
	case HOLD: server_write(c, st->answer, false); break;
	}
}

static void on_connection(uv_stream_t *l, int status)
{
	ASSERT_EQ(status, 0);
	struct sconn *c = calloc(1, sizeof(*c));
	uv_tcp_init(&loop, &c->tcp);
	ASSERT_EQ(uv_accept(l, (uv_stream_t *)&c->tcp), 0);
	ASSERT(server.accepted < SL_ARRAY_SIZE(server.conns));
	server.conns[server.accepted++] = c;
	uv_read_start((uv_stream_t *)&c->tcp, server_alloc, server_read);
}

static void server_start(const struct step *script, unsigned steps)
{
	memset(&server, 0, sizeof(server));
	server.script = script;
	server.steps = steps;
	struct sockaddr_in addr;
	uv_ip4_addr("127.0.0.1", 0, &addr);
	uv_tcp_init(&loop, &server.listener);
	ASSERT_EQ(uv_tcp_bind(&server.listener, (struct sockaddr *)&addr, 0),
	          0);
	ASSERT_EQ(uv_listen((uv_stream_t *)&server.listener, 16, on_connection),
	          0);
	struct sockaddr_in bound;
	int len = sizeof(bound);
	uv_tcp_getsockname(&server.listener, (struct sockaddr *)&bound, &len);
	server.port = ntohs(bound.sin_port);
}

/* ---- the client's side ---- */

struct call {
	struct sl_h1_request r;
	char body[256 * 1024];
	size_t body_len;
	char headers[1024];
	bool done;
	enum sl_h1_result result;
	unsigned done_calls;
	bool stop_at_body;  /* on_body returns SL_H1_STOP */
	bool pause_at_body; /* the first piece pauses the request */
	unsigned pieces;
	unsigned read_ends;       /* on_read_end calls */
	unsigned pieces_read_end; /* pieces when on_read_end last ran */
	unsigned pieces_at_done;  /* pieces when on_done ran */
	bool read_end_after_done;
};

static int call_header(struct sl_h1_request *r, const char *line, size_t len)
{
	struct call *c = r->data;
	size_t have = strlen(c->headers);
	ASSERT(have + len + 2 < sizeof(c->headers));
	memcpy(c->headers + have, line, len);
	memcpy(c->headers + have + len, "\n", 2);
	return SL_H1_GO_ON;
}

static int call_body(struct sl_h1_request *r, const char *data, size_t len)
{
	struct call *c = r->data;
	ASSERT(c->body_len + len <= sizeof(c->body));
	memcpy(c->body + c->body_len, data, len);
	c->body_len += len;
	if (c->pause_at_body && c->pieces == 0)
		sl_h1_pause(r);
	c->pieces++;
	return c->stop_at_body ? SL_H1_STOP : SL_H1_GO_ON;
}

static void call_read_end(struct sl_h1_request *r)
{
	struct call *c = r->data;
	c->read_ends++;
	c->pieces_read_end = c->pieces;
	c->read_end_after_done |= c->done;
}

static void call_done(struct sl_h1_request *r, enum sl_h1_result result)
{
	struct call *c = r->data;
	c->done = true;
	c->pieces_at_done = c->pieces;
	c->done_calls++;
	c->result = result;
	c->body[c->body_len] = '\0';
}

static void call_init(struct call *c, const char *method, const char *target)
{
	memset(c, 0, sizeof(*c));
	c->r.method = method;
	c->r.target = target;
	c->r.connect_timeout_ms = 2000;
	c->r.on_header = call_header;
	c->r.on_body = call_body;
	c->r.on_done = call_done;
	c->r.on_read_end = call_read_end;
	c->r.data = c;
}

/* Wakes the loop now and then, so that a hung test sees its deadline. */
static uv_timer_t tick;

static void on_tick(uv_timer_t *t)
{
	(void)t;
}

/* Runs the loop until *flag, failing the test after TEST_DEADLINE_MS. */
static void run_until(const bool *flag)
{
	uint64_t until = uv_now(&loop) + TEST_DEADLINE_MS;
	while (!*flag) {
		if (uv_now(&loop) > until)
			TEST_FAIL("deadline passed");
		uv_run(&loop, UV_RUN_ONCE);
	}
}

/* Runs the loop until *count reaches n, within TEST_DEADLINE_MS. */
static void run_until_count(const unsigned *count, unsigned n)
{
	uint64_t until = uv_now(&loop) + TEST_DEADLINE_MS;
	while (*count < n) {
		if (uv_now(&loop) > until)
			TEST_FAIL("deadline passed");
		uv_run(&loop, UV_RUN_ONCE);
	}
}

static struct sl_h1 client;
static char base_url[64];

static void setup(const struct step *script, unsigned steps)
{
	ASSERT_EQ(uv_loop_init(&loop), 0);
	server_start(script, steps);
	uv_timer_init(&loop, &tick);
	uv_timer_start(&tick, on_tick, 50, 50);
	sl_h1_init(&client, &loop);
	snprintf(base_url, sizeof(base_url), "http://127.0.0.1:%d/base",
	         server.port);
}

/* Everything closes and the loop has nothing left: nothing leaked. */
static void teardown(void)
{
	sl_h1_close(&client);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_close((uv_handle_t *)&server.listener, NULL);
	for (unsigned i = 0; i < SL_ARRAY_SIZE(server.conns); i++)
		if (server.conns[i])
			sconn_close(server.conns[i]);
	uv_run(&loop, UV_RUN_DEFAULT);
	ASSERT_EQ(uv_loop_close(&loop), 0);
}

/* Runs one call to its end and checks on_done ran once. */
static void run_call(struct call *c)
{
	ASSERT_EQ(sl_h1_start(&client, &c->r, base_url, 4), 0);
	run_until(&c->done);
	ASSERT_EQ(c->done_calls, 1);
	ASSERT(!c->r.active);
}

#define PLAIN(body)                                                            \
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"                \
	"Content-Length: " #body "\r\n\r\n"

static void test_content_length_and_reuse(void)
{
	static const struct step script[] = {
	    {REPLY, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	            "Content-Length: 11\r\nX-Test: one\r\n\r\n{\"a\":\"one\"}"},
	    {REPLY, "HTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\ntwo"},
	};
	setup(script, 2);
	struct call c;
	call_init(&c, "POST", "/completion?x=1");
	c.r.headers = "X-Request-Id: abc\r\n";
	c.r.body = "{\"prompt\":\"hi\"}";
	c.r.body_len = strlen(c.r.body);
	c.r.has_body = true;
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_OK);
	ASSERT_EQ(c.r.status, 200);
	ASSERT_EQ(c.r.content_length, 11);
	ASSERT_STR_EQ(c.r.content_type, "application/json");
	ASSERT_STR_EQ(c.body, "{\"a\":\"one\"}");
	ASSERT_STR_EQ(c.headers, "Content-Type: application/json\n"
	                         "Content-Length: 11\nX-Test: one\n");
	char want[256];
	snprintf(want, sizeof(want),
	         "POST /base/completion?x=1 HTTP/1.1\r\n"
	         "Host: 127.0.0.1:%d\r\nX-Request-Id: abc\r\n"
	         "Content-Length: 15\r\n\r\n{\"prompt\":\"hi\"}",
	         server.port);
	ASSERT_STR_EQ(server.last_request, want);
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 1);

	/* The second request goes on the same connection. */
	sl_h1_request_free(&c.r);
	call_init(&c, "GET", "/props");
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_OK);
	ASSERT_EQ(c.r.status, 201);
	ASSERT(c.r.content_type == NULL);
	ASSERT_STR_EQ(c.body, "two");
	ASSERT_EQ(server.accepted, 1);
	ASSERT_EQ(server.requests, 2);
	snprintf(want, sizeof(want),
	         "GET /base/props HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n",
	         server.port);
	ASSERT_STR_EQ(server.last_request, want);
	sl_h1_request_free(&c.r);
	teardown();
}

static void test_chunked(void)
{
	static const struct step script[] = {
	    {REPLY, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	            "Transfer-Encoding: chunked\r\n\r\n"
	            "f\r\ndata: {\"a\":1}\n\n\r\n"
	            "f\r\ndata: {\"b\":2}\n\n\r\n0\r\n\r\n"},
	    {REPLY, PLAIN(2) "ok"},
	};
	setup(script, 2);
	struct call c;
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_OK);
	ASSERT_EQ(c.r.content_length, -1);
	ASSERT_STR_EQ(c.r.content_type, "text/event-stream");
	ASSERT_STR_EQ(c.body, "data: {\"a\":1}\n\ndata: {\"b\":2}\n\n");
	/* Every piece was followed by the end of its read before on_done,
	 * which an owner holding pieces until then relies on. */
	ASSERT(c.read_ends >= 1);
	ASSERT_EQ(c.pieces_read_end, c.pieces_at_done);
	ASSERT_EQ(c.pieces_at_done, 2);
	ASSERT(!c.read_end_after_done);
	/* A chunked answer read to its end leaves the connection usable. */
	sl_h1_request_free(&c.r);
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_STR_EQ(c.body, "ok");
	ASSERT_EQ(server.accepted, 1);
	sl_h1_request_free(&c.r);
	teardown();
}

static void test_connection_close(void)
{
	static const struct step script[] = {
	    {REPLY, "HTTP/1.1 200 OK\r\nConnection: close\r\n"
	            "Content-Length: 2\r\n\r\nhi"},
	    {REPLY_CLOSE, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nho"},
	    {REPLY, PLAIN(2) "hu"},
	};
	setup(script, 3);
	struct call c;
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_OK);
	ASSERT_STR_EQ(c.body, "hi");
	/* Closed by the client at once: the answer said so. */
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 0);
	sl_h1_request_free(&c.r);
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_STR_EQ(c.body, "ho");
	/* HTTP/1.0 without keep-alive: not kept either. */
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 0);
	sl_h1_request_free(&c.r);
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_STR_EQ(c.body, "hu");
	ASSERT_EQ(server.accepted, 3);
	sl_h1_request_free(&c.r);
	teardown();
}

static void test_body_to_the_close(void)
{
	static const struct step script[] = {
	    {REPLY_CLOSE, "HTTP/1.1 200 OK\r\n\r\nall of it"},
	};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_OK);
	ASSERT_STR_EQ(c.body, "all of it");
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 0);
	sl_h1_request_free(&c.r);
	teardown();
}

static void test_stale_connection_is_retried(void)
{
	static const struct step script[] = {
	    {REPLY, PLAIN(3) "one"},
	    {DROP, NULL},
	    {REPLY, PLAIN(3) "two"},
	    {DROP, NULL},
	};
	setup(script, 4);
	struct call c;
	call_init(&c, "POST", "/x");
	c.r.body = "{}";
	c.r.body_len = 2;
	c.r.has_body = true;
	run_call(&c);
	ASSERT_STR_EQ(c.body, "one");
	/* The kept connection is closed as the request reaches it. */
	sl_h1_request_free(&c.r);
	call_init(&c, "POST", "/x");
	c.r.body = "{}";
	c.r.body_len = 2;
	c.r.has_body = true;
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_OK);
	ASSERT_STR_EQ(c.body, "two");
	ASSERT_EQ(server.accepted, 2);
	ASSERT_EQ(server.requests, 3);
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 1);
	sl_h1_request_free(&c.r);
	teardown();
}

#define CHUNKED(text)                                                          \
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"                \
	"2\r\n" text "\r\n0\r\n\r\n"

/*
 * An upstream that closes its connection after a chunked answer (as
 * llama-server does after a stream) is learned: its later chunked
 * answers' connections are left for it to close, not reused.
 */
static void test_streams_close_is_learned(void)
{
	static const struct step script[] = {
	    {REPLY_CLOSE, CHUNKED("s1")}, {REPLY, CHUNKED("s2")},
	    {REPLY, CHUNKED("s3")},       {REPLY, PLAIN(2) "p1"},
	    {REPLY, PLAIN(2) "p2"},
	};
	setup(script, 5);
	struct call c;
	const char *want[] = {"s1", "s2", "s3", "p1", "p2"};
	for (int i = 0; i < 5; i++) {
		call_init(&c, "GET", "/");
		run_call(&c);
		ASSERT_EQ(c.result, SL_H1_OK);
		ASSERT_STR_EQ(c.body, want[i]);
		sl_h1_request_free(&c.r);
	}
	/*
	 * s1's connection closed; s2's was kept open by the server but not
	 * reused; s3's neither; p1's was, for p2.
	 */
	ASSERT_EQ(server.accepted, 4);
	ASSERT_EQ(server.requests, 5);
	teardown();
}

/* Runs a call for `text`'s chunked or plain answer and checks it. */
static void call_for(const char *want)
{
	struct call c;
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_OK);
	ASSERT_STR_EQ(c.body, want);
	sl_h1_request_free(&c.r);
}

/*
 * A connection left for the peer to close that the peer keeps open (an
 * upstream restarted as one that keeps them) unlearns it: once sluice
 * closes it for its idleness, chunked answers' connections are reused
 * again, where each would otherwise open one and leave one open.
 */
static void test_streams_close_is_unlearned(void)
{
	static const struct step script[] = {
	    {REPLY_CLOSE, CHUNKED("s1")},
	    {REPLY, CHUNKED("s2")},
	    {REPLY, CHUNKED("s3")},
	    {REPLY, CHUNKED("s4")},
	};
	setup(script, 4);
	call_for("s1");
	call_for("s2");
	/* s1's close was learned: s2's connection is left for the server
	 * (no longer the pool's), which keeps it. */
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 0);
	ASSERT_EQ(server.accepted, 2);
	run_until_count(&server.peer_closed, 1);
	call_for("s3");
	call_for("s4");
	ASSERT_EQ(server.accepted, 3);
	ASSERT_EQ(server.requests, 4);
	teardown();
}

static bool waited;

static void on_waited(uv_timer_t *t)
{
	(void)t;
	waited = true;
}

/* Runs the loop for `ms`: a connection's idleness is what is tested. */
static void run_for(uint64_t ms)
{
	uv_timer_t t;
	waited = false;
	uv_timer_init(&loop, &t);
	uv_timer_start(&t, on_waited, ms, 0);
	run_until(&waited);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&loop, UV_RUN_NOWAIT);
}

/*
 * A kept connection that the peer closes a while after a chunked answer
 * (its idle timeout, or its end) teaches nothing: the next chunked
 * answer's connection is kept and reused.
 */
static void test_late_close_teaches_nothing(void)
{
	static const struct step script[] = {
	    {REPLY, CHUNKED("s1")},
	    {REPLY, CHUNKED("s2")},
	    {REPLY, PLAIN(2) "p1"},
	};
	setup(script, 3);
	call_for("s1");
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 1);
	run_for(2 * SL_H1_STREAM_CLOSE_MS);
	ASSERT(server.conns[0] != NULL);
	sconn_close(server.conns[0]);
	uint64_t until = uv_now(&loop) + TEST_DEADLINE_MS;
	while (sl_h1_pool_conns(&client, base_url) > 0) {
		if (uv_now(&loop) > until)
			TEST_FAIL("deadline passed");
		uv_run(&loop, UV_RUN_ONCE);
	}
	call_for("s2");
	call_for("p1");
	ASSERT_EQ(server.accepted, 2);
	ASSERT_EQ(server.requests, 3);
	teardown();
}

/*
 * A request written to a kept connection that the peer closed a while
 * after its chunked answer (a restart) is sent again, and teaches
 * nothing: the next chunked answer's connection is kept and reused.
 */
static void test_stale_after_a_while_teaches_nothing(void)
{
	static const struct step script[] = {
	    {REPLY, CHUNKED("s1")},
	    {DROP, NULL},
	    {REPLY, CHUNKED("s2")},
	    {REPLY, PLAIN(2) "p1"},
	};
	setup(script, 4);
	call_for("s1");
	run_for(2 * SL_H1_STREAM_CLOSE_MS);
	call_for("s2");
	call_for("p1");
	ASSERT_EQ(server.accepted, 2);
	ASSERT_EQ(server.requests, 4);
	teardown();
}

/* On a fresh connection, a close before any byte is the upstream's. */
static void test_fresh_connection_closed_is_nothing(void)
{
	static const struct step script[] = {{DROP, NULL}};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_NOTHING);
	ASSERT_CONTAINS(c.r.error, "before answering");
	ASSERT_EQ(server.requests, 1);
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 0);
	sl_h1_request_free(&c.r);
	teardown();
}

/*
 * Reads a paused call by sl_h1_read_paused() alone until it is done, and
 * checks that every read after the pause came from those calls: the
 * socket was not watched again.
 */
static void read_by_hand(struct call *c)
{
	run_until_count(&c->pieces, 1);
	ASSERT(c->r.paused);
	unsigned read_ends = c->read_ends, reads = 0;
	uint64_t until = uv_now(&loop) + TEST_DEADLINE_MS;
	while (!c->done) {
		if (uv_now(&loop) > until)
			TEST_FAIL("deadline passed");
		unsigned pieces = c->pieces;
		enum sl_h1_read got = sl_h1_read_paused(&c->r);
		ASSERT(got != SL_H1_READ_NONE);
		if (got == SL_H1_READ_NOTHING)
			ASSERT_EQ(c->pieces, pieces);
		else
			reads++;
		/* The server's writes, and nothing of the client's socket. */
		uv_run(&loop, UV_RUN_NOWAIT);
	}
	ASSERT_EQ(c->done_calls, 1);
	ASSERT(reads >= 1);
	/* The last read ends the answer: it may make no read end of its own. */
	ASSERT(c->read_ends - read_ends == reads ||
	       c->read_ends - read_ends + 1 == reads);
	/* Done: nothing is left to read. */
	ASSERT_EQ(sl_h1_read_paused(&c->r), SL_H1_READ_NONE);
}

/*
 * Closed midway: partial, not a whole answer. By hand, the read that
 * finds the close is sl_h1_read_paused()'s.
 */
static void check_partial(bool by_hand)
{
	static const struct step script[] = {
	    {REPLY_CLOSE, PLAIN(10) "only"},
	};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	if (by_hand) {
		c.pause_at_body = true;
		ASSERT_EQ(sl_h1_start(&client, &c.r, base_url, 4), 0);
		read_by_hand(&c);
	} else {
		run_call(&c);
	}
	ASSERT_EQ(c.result, SL_H1_PARTIAL);
	ASSERT_STR_EQ(c.body, "only");
	ASSERT_CONTAINS(c.r.error, "before the end of its answer");
	sl_h1_request_free(&c.r);
	teardown();
}

static void test_partial(void)
{
	check_partial(false);
}

static void test_refused(void)
{
	static const struct step script[] = {{REPLY, PLAIN(0)}};
	setup(script, 1);
	/* A port nobody listens on: the server's, once it is closed. */
	uv_close((uv_handle_t *)&server.listener, NULL);
	uv_run(&loop, UV_RUN_NOWAIT);
	struct call c;
	call_init(&c, "GET", "/");
	ASSERT_EQ(sl_h1_start(&client, &c.r, base_url, 4), 0);
	/* on_done never runs inside sl_h1_start. */
	ASSERT(!c.done);
	run_until(&c.done);
	ASSERT_EQ(c.result, SL_H1_REFUSED);
	ASSERT_CONTAINS(c.r.error, "cannot connect to upstream 127.0.0.1:");
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 0);
	sl_h1_request_free(&c.r);
	sl_h1_close(&client);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	ASSERT_EQ(uv_loop_close(&loop), 0);
}

static void test_oversized_head(void)
{
	static char answer[SL_H1_HEAD_MAX + 256];
	int n = snprintf(answer, sizeof(answer), "HTTP/1.1 200 OK\r\nX-Big: ");
	memset(answer + n, 'a', SL_H1_HEAD_MAX);
	strcpy(answer + n + SL_H1_HEAD_MAX, "\r\nContent-Length: 0\r\n\r\n");
	const struct step script[] = {{HOLD, answer}};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_BAD_RESPONSE);
	ASSERT_CONTAINS(c.r.error, "response head is over");
	/* The connection is not kept: the server sees it close. */
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 0);
	run_until_count(&server.peer_closed, 1);
	sl_h1_request_free(&c.r);
	teardown();
}

/*
 * A control byte in a header value becomes 0xFF (sluice's checks drop the
 * line); the body's bytes are left as they are.
 */
static void test_control_byte_in_a_header(void)
{
	static const struct step script[] = {
	    {REPLY, "HTTP/1.1 200 OK\r\nX-Bad: a\001b\r\n"
	            "Content-Length: 3\r\n\r\na\001b"},
	};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	run_call(&c);
	if (c.result != SL_H1_OK)
		TEST_FAIL("%s", c.r.error);
	ASSERT_STR_EQ(c.headers, "X-Bad: a\377b\nContent-Length: 3\n");
	ASSERT_EQ(c.body_len, 3);
	ASSERT(memcmp(c.body, "a\001b", 3) == 0);
	sl_h1_request_free(&c.r);
	teardown();
}

static void test_malformed(void)
{
	static const struct step script[] = {
	    {HOLD, "SSH-2.0-OpenSSH_9.2\r\n"},
	};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_BAD_RESPONSE);
	ASSERT_CONTAINS(c.r.error, "answered with an invalid HTTP response");
	sl_h1_request_free(&c.r);
	teardown();
}

static struct call *to_abort;

static void abort_soon(uv_timer_t *t)
{
	sl_h1_abort(&to_abort->r);
	uv_close((uv_handle_t *)t, NULL);
}

/* Aborted midway: no on_done, and the connection closes. */
static void test_abort_mid_body(void)
{
	static const struct step script[] = {
	    {HOLD, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	           "5\r\nfirst\r\n"},
	};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	ASSERT_EQ(sl_h1_start(&client, &c.r, base_url, 4), 0);
	run_until_count(&c.pieces, 1);
	ASSERT_STR_EQ(c.body, "first");
	to_abort = &c;
	uv_timer_t t;
	uv_timer_init(&loop, &t);
	uv_timer_start(&t, abort_soon, 0, 0);
	run_until_count(&server.peer_closed, 1);
	ASSERT(!c.done);
	ASSERT(!c.r.active);
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 0);
	sl_h1_request_free(&c.r);
	teardown();
}

/* The owner's SL_H1_STOP ends the request, and its connection. */
static void test_stop(void)
{
	static const struct step script[] = {
	    {HOLD, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	           "5\r\nfirst\r\n"},
	};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	c.stop_at_body = true;
	run_call(&c);
	ASSERT_EQ(c.result, SL_H1_STOPPED);
	run_until_count(&server.peer_closed, 1);
	sl_h1_request_free(&c.r);
	teardown();
}

static void resume_soon(uv_timer_t *t)
{
	sl_h1_resume(&to_abort->r);
	uv_close((uv_handle_t *)t, NULL);
}

/* Paused after the first piece, the rest comes after the resume. */
/* An answer of 100 KiB, which takes several reads. */
static const char *big_answer(void)
{
	static char answer[128 * 1024];
	int n = snprintf(answer, sizeof(answer),
	                 "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n",
	                 100 * 1024);
	memset(answer + n, 'x', 100 * 1024);
	return answer;
}

static void test_pause_resume(void)
{
	const struct step script[] = {{REPLY, big_answer()}};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	c.pause_at_body = true;
	ASSERT_EQ(sl_h1_start(&client, &c.r, base_url, 4), 0);
	run_until_count(&c.pieces, 1);
	ASSERT(c.r.paused);
	to_abort = &c;
	uv_timer_t t;
	uv_timer_init(&loop, &t);
	uv_timer_start(&t, resume_soon, 10, 0);
	run_until(&c.done);
	ASSERT_EQ(c.result, SL_H1_OK);
	ASSERT_EQ(c.body_len, 100 * 1024);
	ASSERT(c.pieces >= 2);
	/* A read's end after each read's pieces, the paused one's too. */
	ASSERT(c.read_ends >= 2);
	ASSERT_EQ(c.pieces_read_end, c.pieces_at_done);
	sl_h1_request_free(&c.r);
	teardown();
}

/* A paused answer read by hand, without its socket watched, to its end. */
static void test_read_paused(void)
{
	const struct step script[] = {{REPLY, big_answer()}};
	setup(script, 1);
	struct call c;
	call_init(&c, "GET", "/");
	/* Not paused: nothing to read by hand. */
	ASSERT_EQ(sl_h1_read_paused(&c.r), SL_H1_READ_NONE);
	c.pause_at_body = true;
	ASSERT_EQ(sl_h1_start(&client, &c.r, base_url, 4), 0);
	read_by_hand(&c);
	ASSERT_EQ(c.result, SL_H1_OK);
	ASSERT_EQ(c.body_len, 100 * 1024);
	ASSERT(c.pieces >= 2);
	sl_h1_request_free(&c.r);
	teardown();
}

static void test_read_paused_close(void)
{
	check_partial(true);
}

/* Beyond the pool's bound, requests wait for a connection. */
static void test_bound_and_queue(void)
{
	static const struct step script[] = {
	    {REPLY, PLAIN(1) "a"},
	    {REPLY, PLAIN(1) "b"},
	    {REPLY, PLAIN(1) "c"},
	};
	setup(script, 3);
	struct call calls[3];
	for (int i = 0; i < 3; i++) {
		call_init(&calls[i], "GET", "/");
		ASSERT_EQ(sl_h1_start(&client, &calls[i].r, base_url, 2), 0);
	}
	ASSERT_EQ(sl_h1_pool_conns(&client, base_url), 2);
	for (int i = 0; i < 3; i++) {
		run_until(&calls[i].done);
		ASSERT_EQ(calls[i].result, SL_H1_OK);
		sl_h1_request_free(&calls[i].r);
	}
	ASSERT_EQ(server.accepted, 2);
	ASSERT_EQ(server.requests, 3);
	teardown();
}

/* Fails the test with why the request failed, when it did. */
static void assert_ok(const struct call *c)
{
	if (c->result != SL_H1_OK)
		TEST_FAIL("the request failed (%s): %s",
		          sl_h1_result_name(c->result), c->r.error);
}

/* GETs / from the scripted server by the name host; checks the answer. */
static void get_by_name(const char *host)
{
	char authority[64], url[sizeof(authority) + 7];
	snprintf(authority, sizeof(authority), "%s:%d", host, server.port);
	snprintf(url, sizeof(url), "http://%s", authority);
	struct call c;
	call_init(&c, "GET", "/");
	ASSERT_EQ(sl_h1_start(&client, &c.r, url, 4), 0);
	run_until(&c.done);
	assert_ok(&c);
	ASSERT_STR_EQ(c.body, "ok");
	char want[128];
	snprintf(want, sizeof(want), "GET / HTTP/1.1\r\nHost: %s\r\n\r\n",
	         authority);
	ASSERT_STR_EQ(server.last_request, want);
	sl_h1_request_free(&c.r);
}

/*
 * A host that is not an address is resolved, then connected to. "127.1" is
 * one this test controls: not an address to the URL's parser (inet_pton
 * wants four parts), so the pool resolves it, and getaddrinfo reads it as
 * 127.0.0.1 by itself (inet_aton's short form), asking neither /etc/hosts
 * nor DNS, which a minimal root may lack.
 */
static void test_name_resolved(void)
{
	static const struct step script[] = {{REPLY, PLAIN(2) "ok"}};
	setup(script, 1);
	get_by_name("127.1");
	teardown();
}

/*
 * Whether /etc/hosts names localhost as both 127.0.0.1 and ::1: the
 * system's resolver then answers "localhost" from it with two addresses.
 */
static bool hosts_name_localhost_twice(void)
{
	FILE *f = fopen("/etc/hosts", "r");
	if (!f)
		return false;
	bool v4 = false, v6 = false;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "#")] = '\0';
		char *save = NULL;
		const char *addr = strtok_r(line, " \t\r\n", &save);
		const char *name;
		while (addr && (name = strtok_r(NULL, " \t\r\n", &save))) {
			if (strcmp(name, "localhost") == 0) {
				v4 |= strcmp(addr, "127.0.0.1") == 0;
				v6 |= strcmp(addr, "::1") == 0;
			}
		}
	}
	fclose(f);
	return v4 && v6;
}

/*
 * Each of a name's addresses is tried in turn: localhost may name ::1
 * first, and the server is on 127.0.0.1 only. Run only where /etc/hosts
 * says so (a minimal root has no /etc/hosts, and the test asks no DNS).
 */
static void test_each_address_tried(void)
{
	if (!hosts_name_localhost_twice()) {
		fputs("   skipped: /etc/hosts does not name localhost as both "
		      "127.0.0.1 and ::1\n",
		      stderr);
		return;
	}
	static const struct step script[] = {{REPLY, PLAIN(2) "ok"}};
	setup(script, 1);
	get_by_name("localhost");
	teardown();
}

static void test_urls(void)
{
	ASSERT(sl_h1_supports("http://127.0.0.1:8080"));
	ASSERT(sl_h1_supports("http://[::1]:8080/v"));
	ASSERT(sl_h1_supports("http://localhost"));
	ASSERT(!sl_h1_supports("https://127.0.0.1:8080"));
	ASSERT(!sl_h1_supports("http://user@host:1"));
	ASSERT(!sl_h1_supports("http://host:99999"));
	ASSERT(!sl_h1_supports("http://:80"));
}

int main(void)
{
	RUN(test_urls);
	RUN(test_content_length_and_reuse);
	RUN(test_chunked);
	RUN(test_connection_close);
	RUN(test_body_to_the_close);
	RUN(test_stale_connection_is_retried);
	RUN(test_streams_close_is_learned);
	RUN(test_streams_close_is_unlearned);
	RUN(test_late_close_teaches_nothing);
	RUN(test_stale_after_a_while_teaches_nothing);
	RUN(test_fresh_connection_closed_is_nothing);
	RUN(test_partial);
	RUN(test_refused);
	RUN(test_oversized_head);
	RUN(test_control_byte_in_a_header);
	RUN(test_malformed);
	RUN(test_abort_mid_body);
	RUN(test_stop);
	RUN(test_pause_resume);
	RUN(test_read_paused);
	RUN(test_read_paused_close);
	RUN(test_bound_and_queue);
	RUN(test_name_resolved);
	RUN(test_each_address_tried);
	return 0;
}

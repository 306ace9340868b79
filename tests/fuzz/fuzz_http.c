/*
 * fuzz_http.c: whole client connections against sluice's HTTP server.
 *
 * Each input is the byte stream one client sends on one connection. It goes
 * to the real server (src/net/http.c, listening on 127.0.0.1 in this process)
 * over a real loopback socket, cut into pieces at points the input itself
 * chooses, with the loop run between pieces so that the parser sees the
 * stream split as a network would split it. Then the client stops sending
 * and the connection must close: a connection that stays open past the
 * deadline is a hang, reported as a crash.
 *
 * The handler answers in one of three ways, by the request's path, so that
 * pipelined requests meet a response that is complete at once, one that is
 * streamed in chunks, and one that comes later from a timer. The head of a
 * request with a body under /refused is answered at once, its body unread,
 * as the routes answer one without its key.
 *
 * Input layout: the bytes to send, then (when the input is long enough) its
 * last SPLIT_SEED_BYTES bytes also seed the choice of split points. They are
 * sent too: a seed cut off would make inputs harder to read and minimise.
 */
#include "fuzz.h"
#include "sluice/net/http.h"
#include "sluice/base/log.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* Trailing bytes that seed the split points. */
#define SPLIT_SEED_BYTES 4
/* At most this many pieces per input: enough to split every phase. */
#define MAX_PIECES 16
/* Loop passes without news after which the loop counts as quiet. */
#define QUIET_PASSES 3
/* Loop passes per wait at most, so a busy loop cannot spin forever. */
#define MAX_PASSES 1000
/*
 * How long a connection may stay open after the client stopped sending.
 * Far above anything the server needs (it answers from memory), far below
 * its own timeouts, so only a real hang reaches it.
 */
#define CLOSE_DEADLINE_MS 5000

static uv_loop_t loop;
static struct sl_http_server server;
static unsigned server_port;
/* Bumped by every callback, to tell when the loop has gone quiet. */
static uint64_t progress;

/* ---- the server side: a handler with three ways to answer ---- */

struct later {
	uv_timer_t timer;
	struct sl_http_request *req; /* NULL once the client is gone */
};

static void later_closed(uv_handle_t *h)
{
	free(h->data);
}

static void later_fire(uv_timer_t *t)
{
	struct later *l = t->data;
	progress++;
	if (l->req)
		sl_http_respond(l->req, 200, "text/plain", NULL, "later\n", 6);
	uv_close((uv_handle_t *)&l->timer, later_closed);
}

static void later_abort(struct sl_http_request *req)
{
	struct later *l = req->handler_data;
	l->req = NULL; /* the timer still fires, and frees l */
}

static void handle(struct sl_http_request *req, void *data)
{
	progress++;
	if (strncmp(req->path, "/stream", 7) == 0) {
		if (sl_http_stream_start(req, 200, "text/event-stream", NULL,
		                         -1) != 0)
			return;
		/* A write to a client that is gone ends the response. */
		if (sl_http_stream_write(req, "data: 1\n\n", 9) != 0 ||
		    sl_http_stream_write(req, req->body, req->body_len) != 0)
			return;
		sl_http_stream_end(req);
	} else if (strncmp(req->path, "/later", 6) == 0) {
		struct later *l = calloc(1, sizeof(*l));
		assert(l);
		uv_timer_init(&loop, &l->timer);
		l->timer.data = l;
		l->req = req;
		req->handler_data = l;
		req->on_abort = later_abort;
		uv_timer_start(&l->timer, later_fire, 0, 0);
	} else {
		sl_http_respond(req, 200, "application/octet-stream", NULL,
		                req->body, req->body_len);
	}
}

static bool head(struct sl_http_request *req, void *data)
{
	(void)data;
	progress++;
	if (strncmp(req->path, "/refused", 8) != 0)
		return true;
	sl_http_respond(req, 401, "text/plain", NULL, "no key\n", 7);
	return false;
}

static void start_server(void)
{
	/* Refusals are logged at info: quiet, or the log is all one sees. */
	sl_log_setup(SL_LOG_ERROR, SL_LOG_TEXT);
	if (uv_loop_init(&loop) != 0)
		abort();
	struct sl_http_limits limits;
	sl_http_limits_default(&limits);
	/* Small limits, so that inputs of a few KiB reach them. */
	limits.max_header_bytes = 2048;
	limits.max_headers = 16;
	limits.max_body = 4096;
	if (sl_http_server_listen(&server, &loop, "127.0.0.1", 0, &limits,
	                          handle, NULL) != 0)
		abort();
	server.on_head = head;
	server_port = sl_http_server_port(&server);
}

/* ---- the client side: one loopback connection per input ---- */

struct client {
	uv_tcp_t tcp;
	uv_connect_t connect;
	uv_write_t write;
	uv_shutdown_t shutdown;
	uv_timer_t deadline;
	bool connected, written, ended, closed, deadline_closed;
	int status; /* of the last request made */
};

static void on_connect(uv_connect_t *c, int status)
{
	struct client *cl = c->data;
	progress++;
	cl->connected = true;
	cl->status = status;
}

static void on_write(uv_write_t *w, int status)
{
	struct client *cl = w->data;
	progress++;
	cl->written = true;
	cl->status = status;
}

static void on_shutdown(uv_shutdown_t *s, int status)
{
	progress++;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char bytes[64 * 1024];
	*buf = uv_buf_init(bytes, sizeof(bytes));
}

/* Responses are read and dropped; only the end of the stream matters. */
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct client *cl = s->data;
	progress++;
	if (nread < 0) {
		cl->ended = true;
		uv_read_stop(s);
	}
}

static void on_closed(uv_handle_t *h)
{
	struct client *cl = h->data;
	cl->closed = true;
}

static void on_deadline_closed(uv_handle_t *h)
{
	struct client *cl = h->data;
	cl->deadline_closed = true;
}

static void on_deadline(uv_timer_t *t)
{
	fprintf(stderr,
	        "fuzz_http: the connection is still open %d ms after "
	        "the client stopped sending\n",
	        CLOSE_DEADLINE_MS);
	abort();
}

/* Runs the loop until `*flag` is set; false if it never is. */
static bool run_until(const bool *flag)
{
	for (int i = 0; i < MAX_PASSES * 100 && !*flag; i++)
		uv_run(&loop, UV_RUN_ONCE);
	return *flag;
}

/* Runs the loop until QUIET_PASSES passes in a row bring no callback. */
static void run_until_quiet(void)
{
	int quiet = 0;
	for (int i = 0; i < MAX_PASSES && quiet < QUIET_PASSES; i++) {
		uint64_t before = progress;
		uv_run(&loop, UV_RUN_NOWAIT);
		quiet = progress == before ? quiet + 1 : 0;
	}
}

/* Fills cuts[] with sorted cut points in (0, size); returns how many. */
static size_t split_points(const uint8_t *data, size_t size, size_t *cuts)
{
	if (size < 2 * SPLIT_SEED_BYTES)
		return 0;
	uint32_t seed = 0;
	memcpy(&seed, data + size - SPLIT_SEED_BYTES, SPLIT_SEED_BYTES);
	size_t n = fuzz_next_random(&seed) % MAX_PIECES;
	for (size_t i = 0; i < n; i++)
		cuts[i] = 1 + fuzz_next_random(&seed) % (size - 1);
	/* Insertion sort: n is at most MAX_PIECES. */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
			size_t t = cuts[j];
			cuts[j] = cuts[j - 1];
			cuts[j - 1] = t;
		}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!server_port)
		start_server();

	struct client cl = {0};
	uv_tcp_init(&loop, &cl.tcp);
	cl.tcp.data = &cl;
	cl.connect.data = &cl;
	cl.write.data = &cl;
	struct sockaddr_in addr;
	uv_ip4_addr("127.0.0.1", (int)server_port, &addr);
	if (uv_tcp_connect(&cl.connect, &cl.tcp, (struct sockaddr *)&addr,
	                   on_connect) != 0 ||
	    !run_until(&cl.connected) || cl.status != 0)
		abort();
	uv_read_start((uv_stream_t *)&cl.tcp, on_alloc, on_read);

	size_t cuts[MAX_PIECES + 1];
	size_t n = split_points(data, size, cuts);
	cuts[n++] = size;
	size_t from = 0;
	for (size_t i = 0; i < n && !cl.ended; i++) {
		if (cuts[i] <= from)
			continue;
		uv_buf_t piece = uv_buf_init((char *)data + from,
		                             (unsigned)(cuts[i] - from));
		from = cuts[i];
		cl.written = false;
		if (uv_write(&cl.write, (uv_stream_t *)&cl.tcp, &piece, 1,
		             on_write) != 0)
			break;
		run_until(&cl.written);
		if (cl.status != 0) /* the server closed first */
			break;
		run_until_quiet();
	}

	/* The client is done sending: the server must now close. */
	uv_timer_init(&loop, &cl.deadline);
	cl.deadline.data = &cl;
	uv_timer_start(&cl.deadline, on_deadline, CLOSE_DEADLINE_MS, 0);
	if (!cl.ended &&
	    uv_shutdown(&cl.shutdown, (uv_stream_t *)&cl.tcp, on_shutdown) == 0)
		run_until(&cl.ended);
	while (!cl.ended && uv_run(&loop, UV_RUN_ONCE))
		;
	uv_close((uv_handle_t *)&cl.deadline, on_deadline_closed);
	uv_close((uv_handle_t *)&cl.tcp, on_closed);
	run_until(&cl.closed);
	run_until(&cl.deadline_closed);
	/* Every server-side handle of this connection is gone too. */
	for (int i = 0; i < MAX_PASSES && server.n_conns > 0; i++)
		uv_run(&loop, UV_RUN_ONCE);
	if (server.n_conns != 0 || server.n_busy != 0) {
		fprintf(stderr,
		        "fuzz_http: %u connections, %u requests left "
		        "after the client closed\n",
		        server.n_conns, server.n_busy);
		abort();
	}
	return 0;
}

/*
 * h1_client.h: sluice's own HTTP/1.1 client, for the exchanges it relays to
 * plain http:// upstreams.
 *
 * libcurl does a great deal of work per transfer that a relay to a known
 * llama-server does not need (option handling, connection liveness polls,
 * a socket callback that restarts its poll handle for every transfer).
 * This client does only what sluice uses: one request at a time on pooled
 * keep-alive connections, a response parsed by llhttp (chunked decoding
 * included), callbacks for each header line and each piece of the body, and
 * a result that tells a refused connection from one that failed midway.
 * libcurl keeps everything else (https, health checks, /props, fan-outs).
 *
 * What it owns: a pool per upstream base URL (its addresses, resolved once
 * if it is a name; its idle connections, newest first; the requests waiting
 * for a connection); each connection's socket, timer and parser. The owner
 * owns each sl_h1_request and what its fields point to.
 *
 * A request's states:
 *   waiting     in its pool's queue, for the address or for a connection
 *               (the pool is at its bound)
 *   connecting  a fresh connection is being opened for it
 *   exchanging  its head and body are written, its response is read
 *   done        on_done ran (or sl_h1_abort was called): inactive
 *
 * A connection's states: connecting, busy (one request on it), idle (in
 * the pool, read from so that a peer's close is seen at once), draining
 * (answered, left for a peer that closes after chunked answers to close;
 * no longer counted against the bound), closing.
 *
 * Invariants:
 *   - a pool never holds more than its bound of connections, counting
 *     those connecting, busy and idle;
 *   - an idle connection has read a whole response and nothing after it,
 *     and the last response allowed keep-alive;
 *   - a connection is freed only from the close callbacks of its handles.
 *
 * Re-entrancy, relied on here and by callers (the same as for libcurl,
 * curl_loop.h):
 *   - on_header and on_body run inside the parser: there, never call
 *     sl_h1_start(), sl_h1_abort() or sl_h1_half_close(); return
 *     SL_H1_STOP instead, and the
 *     request ends through on_done. sl_h1_pause() is allowed.
 *   - on_done runs from the loop, never inside sl_h1_start(), sl_h1_abort()
 *     or sl_h1_resume(); it may start, abort and free requests, its own
 *     included.
 *   - sl_h1_read_paused() reads as the loop would: every callback, on_done
 *     included, may run inside it, so it is called from the loop (a
 *     timer), never from the callbacks.
 *
 * Glossary:
 *   pool        one upstream base URL's connections and waiting requests
 *   streams     a pool's upstream closes its connection after every
 *   close       chunked answer (llama-server 0.7.0 does after each stream,
 *               whatever its Keep-Alive header says): learned from the
 *               first such close, after which those connections drain
 *   stale       an idle keep-alive connection that the peer closed while
 *               sluice had not yet noticed: a request written to it gets
 *               EOF or a reset before any byte; nothing was processed, so
 *               it is sent once more on a fresh connection
 */
#ifndef SLUICE_H1_CLIENT_H
#define SLUICE_H1_CLIENT_H

#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/*
 * The largest response head (status line and header lines) accepted, in
 * bytes. llama-server's are a few hundred bytes; more is not an answer
 * sluice should hold in memory.
 */
#define SL_H1_HEAD_MAX (32u * 1024)

/*
 * A request head up to this size is built on the stack; llama-server's
 * requests from sluice are about 150 bytes.
 */
#define SL_H1_HEAD_INLINE 1024

/*
 * The read buffer, one for the whole client (struct sl_h1), not one per
 * connection: every read is parsed whole, and its pieces handed to the
 * owner, before the next read starts (on_read_end says when), so no
 * connection needs bytes of its own between reads. A streamed token is a
 * few hundred bytes, a plain answer can be megabytes: 64 KiB takes either
 * in few reads, and costs 64 KiB once rather than per stream (it was per
 * connection, and made up most of the memory of each active stream).
 */
#define SL_H1_READ_BUF (64u * 1024)

/*
 * How long an idle connection is kept. llama-server (cpp-httplib) closes a
 * keep-alive connection idle for 5 s; closing ours well before that keeps
 * the race with its close rare (a request written to a connection the peer
 * is closing is sent again, but costs a round trip).
 */
#define SL_H1_IDLE_MS 2000

/*
 * Addresses kept per upstream host name, tried in turn when connecting
 * fails; a name for an upstream rarely has more than its IPv4 and IPv6.
 */
#define SL_H1_ADDRS_MAX 8

/*
 * The largest TCP segment sluice takes from an upstream (TCP_MAXSEG, set
 * before connecting, so that its SYN announces it), for every upstream
 * connection, libcurl's too (sl_upstream_socket).
 *
 * Why: over loopback, where llama-server usually is, a segment may be
 * 64 KB. While a slow client holds a stream back, sluice stops reading,
 * the upstream's window closes, and its kernel probes the closed window
 * at intervals that double up to two minutes. When sluice reads again,
 * its receive buffer, sized by the kernel for the small events that came
 * last, may reopen the window smaller than one such segment, and Linux
 * then sends nothing until its next probe (measured: a stream held back
 * for 40 s stood still for 29 s once its client caught up, two runs in
 * three; the same after its client left, so that llama-server generated
 * on, unheard, and a drain waited for it). The window reopens by what
 * sluice then reads, most of a receive buffer (45 KB in those runs): 8 KB
 * segments fit in it.
 */
#define SL_UPSTREAM_MSS 8192

/*
 * Prepares a socket for an upstream connection before it connects: the
 * segment size above. A failure is only logged at debug level: the
 * connection works without it.
 */
void sl_upstream_socket(uv_os_sock_t fd);

/*
 * Chunked answers after which an upstream whose connections were still
 * open at each one's end is taken to keep them: from then on the peek for
 * its close (h1_exchange.c, peer_closing) is spared, a system call per
 * streamed answer. A close that comes later is still learnt when the idle
 * connection reads it.
 */
#define SL_H1_STREAM_PEEKS 64

/*
 * How soon after a chunked answer the peer's close of a kept connection
 * (read while it is idle, or by the request written to it) must come to
 * say that the peer closes after every such answer (as llama-server 0.7.0
 * does, at once). A later close is its idle timeout or a restart, and
 * teaches nothing. Generous against a busy machine's stalls: a lesson
 * learnt from a restart after all is unlearnt within SL_H1_IDLE_MS.
 */
#define SL_H1_STREAM_CLOSE_MS 250

/* Room for a result's message in sl_h1_request.error. */
#define SL_H1_ERROR_MAX 256

/* What on_header and on_body return. */
enum {
	SL_H1_GO_ON = 0,
	SL_H1_STOP = 1, /* end the request now: it is done with SL_H1_STOPPED */
};

/* How a request ended; error says more for all but OK and STOPPED. */
enum sl_h1_result {
	SL_H1_OK,              /* the whole response was read */
	SL_H1_REFUSED,         /* could not connect: nothing was sent */
	SL_H1_UNRESOLVED,      /* the upstream's host name did not resolve */
	SL_H1_CONNECT_TIMEOUT, /* no connection within connect_timeout_ms */
	SL_H1_SEND_FAILED,     /* writing the request failed */
	SL_H1_NOTHING,         /* closed or reset before any response byte */
	SL_H1_PARTIAL,         /* closed or reset before the response's end */
	SL_H1_BAD_RESPONSE,    /* not HTTP/1.x, malformed, or head too large */
	SL_H1_STOPPED,         /* on_header or on_body returned SL_H1_STOP */
};

/* A name for the log and the tests. */
const char *sl_h1_result_name(enum sl_h1_result r);

struct sl_h1_pool;
struct sl_h1_conn;

/* The client: one per loop. */
struct sl_h1 {
	uv_loop_t *loop;
	struct sl_h1_pool *pools;
	bool closing; /* sl_h1_close() was called: nothing is kept idle */
	/*
	 * Every connection reads into this (see SL_H1_READ_BUF); the owner
	 * must copy what it keeps of a piece past on_read_end.
	 */
	char in[SL_H1_READ_BUF];
};

struct sl_h1_request;

/*
 * One response header line, "Name: value" (without CRLF; a line in
 * several pieces on the wire is delivered whole). 1xx responses' lines are
 * not delivered.
 */
typedef int (*sl_h1_header_cb)(struct sl_h1_request *r, const char *line,
                               size_t len);
/* A piece of the body, decoded (chunk framing removed). */
typedef int (*sl_h1_body_cb)(struct sl_h1_request *r, const char *data,
                             size_t len);
typedef void (*sl_h1_done_cb)(struct sl_h1_request *r,
                              enum sl_h1_result result);
/*
 * One read's bytes have all been handed to on_header and on_body; it runs
 * before on_done when the response ended within them. The pieces of a
 * read stay valid until then, so an owner may hold several and write them
 * together here. Like on_done, it runs outside the parser.
 */
typedef void (*sl_h1_read_end_cb)(struct sl_h1_request *r);

struct sl_h1_request {
	/* Set by the owner before sl_h1_start; valid until done or abort. */
	const char *method;  /* "GET", "POST" */
	const char *target;  /* path and query, appended to the URL's path */
	const char *headers; /* "Name: value\r\n" lines, or NULL */
	const char *body;    /* sent with a Content-Length when has_body */
	size_t body_len;
	bool has_body;
	uint64_t connect_timeout_ms;
	sl_h1_header_cb on_header; /* NULL: headers are not wanted */
	sl_h1_body_cb on_body;
	sl_h1_done_cb on_done;
	sl_h1_read_end_cb on_read_end; /* NULL: not wanted */
	void *data;                    /* the owner's */

	/* The response, as far as it came; reset by sl_h1_start. */
	int status;             /* 0 until the status line is in */
	int64_t content_length; /* -1: none (chunked, or to the close) */
	char *content_type;     /* the last Content-Type's value, or NULL */
	char error[SL_H1_ERROR_MAX]; /* why it failed; "" when it did not */

	/* The client's. */
	struct sl_h1_pool *pool;
	struct sl_h1_conn *conn;         /* NULL while waiting */
	struct sl_h1_request *wait_next; /* the pool's queue */
	bool active;                     /* started, not done nor aborted */
	bool paused;                     /* sl_h1_pause() */
	bool resent;                     /* sent again after a stale conn */
	unsigned addr_tries;             /* addresses that failed to connect */
};

void sl_h1_init(struct sl_h1 *h, uv_loop_t *loop);

/*
 * Closes every idle connection and lets each pool go once empty; requests
 * must all be done or aborted. Memory is freed from close callbacks, so
 * run the loop afterwards.
 */
void sl_h1_close(struct sl_h1 *h);

/* Whether `base_url` is one this client serves: "http://host[:port][/path]". */
bool sl_h1_supports(const char *base_url);

/*
 * Starts `r` against `base_url` (no trailing '/'; the target follows it),
 * on a pooled connection if one is idle, else on a new one while the pool
 * holds fewer than max_conns (at least 1), else after the requests queued
 * before it. Returns 0, or SL_EINVAL for a URL sl_h1_supports() refuses;
 * on_done then never runs.
 */
int sl_h1_start(struct sl_h1 *h, struct sl_h1_request *r, const char *base_url,
                unsigned max_conns);

/*
 * Ends an active request at once, without on_done: its connection is
 * closed (that is how llama-server learns to stop generating). Does
 * nothing for an inactive one.
 */
void sl_h1_abort(struct sl_h1_request *r);

/*
 * Tells the upstream that sluice will send nothing more on the request's
 * connection (a TCP half-close, after the request's bytes), while its
 * answer is still read and delivered to the end: llama-server takes the
 * half-close for its client leaving, stops the generation, and ends its
 * answer (a stream at its next token; a plain answer at its next check,
 * with an empty 200), so its end says when the slot is free. The
 * connection is not kept afterwards. Returns false, doing nothing, when
 * the request is not on a connection that has sent it (waiting, or still
 * connecting: nothing reached the upstream, so sl_h1_abort() is enough).
 */
bool sl_h1_half_close(struct sl_h1_request *r);

/*
 * Whether the request is on a connection that has sent it (or is sending
 * it): the upstream has it, or will; false while it waits or connects.
 */
bool sl_h1_sent(const struct sl_h1_request *r);

/*
 * Stops reading the request's response (the client is slow); bytes
 * already read are still delivered. sl_h1_resume() reads on. Silence while
 * paused is the owner's to time, not the client's.
 */
void sl_h1_pause(struct sl_h1_request *r);
void sl_h1_resume(struct sl_h1_request *r);

/*
 * For a paused request: reads once what has come on its connection,
 * without waiting and without watching the socket, and delivers it as a
 * read would (on_header, on_body, on_read_end, on_done). A caller that
 * keeps a fast stream paused and reads it this way on its own timer wakes
 * once per tick for all such streams, where a watched socket would wake
 * the loop for each arrival (and resuming it would cost system calls to
 * watch it again). Returns SL_H1_READ_NOTHING when nothing had come (r is
 * untouched, still paused); SL_H1_READ_DONE when bytes, the end or an
 * error were delivered: the callbacks may have ended and freed r, so the
 * caller must not touch it unless it knows otherwise; SL_H1_READ_NONE
 * when r is not paused on a connection that is reading an answer.
 */
enum sl_h1_read { SL_H1_READ_NONE, SL_H1_READ_NOTHING, SL_H1_READ_DONE };
enum sl_h1_read sl_h1_read_paused(struct sl_h1_request *r);

/* Frees what the response holds (content_type); r must be inactive. */
void sl_h1_request_free(struct sl_h1_request *r);

/* Connections open in the pool for `base_url` (busy and idle), for tests. */
unsigned sl_h1_pool_conns(const struct sl_h1 *h, const char *base_url);

#endif

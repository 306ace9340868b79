/*
 * h1_client_impl.h: what the two pieces of sluice's HTTP/1.1 client share
 * and no other module sees: the pool and the connection, and the calls
 * between the pool and its connections (h1_client.c) and one exchange on
 * a connection (h1_exchange.c). The client's interface is
 * sluice/net/h1_client.h.
 */
#ifndef SLUICE_H1_CLIENT_IMPL_H
#define SLUICE_H1_CLIENT_IMPL_H

#include "sluice/net/h1_client.h"

#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

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

/* ---- h1_client.c: the pool's side of an exchange's end ---- */

/*
 * Closes the connection (its request, if any, was detached by the caller)
 * and frees its place in the pool.
 */
void sl_h1_conn_close(struct sl_h1_conn *c);
/* The request on `c` ended: the connection is kept or closed first. */
void sl_h1_conn_finish(struct sl_h1_conn *c, bool keep, bool chunked,
                       enum sl_h1_result result);
/* Sends the request again on a fresh connection if `c` was stale. */
bool sl_h1_resend_if_stale(struct sl_h1_conn *c);
/* The connection failed; its request (if any) ends with `result`. */
void sl_h1_conn_fail(struct sl_h1_conn *c, enum sl_h1_result result,
                     const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The peer closes every connection after a chunked answer (h1_client.h). */
void sl_h1_learn_streams_close(struct sl_h1_pool *p);
/* Whether the peer closed `c` right after a chunked answer on it. */
bool sl_h1_closed_after_stream(const struct sl_h1_conn *c);

/* ---- h1_exchange.c: one exchange on a connection ---- */

/* Writes r's head and body on `c`, which is connected and free. */
void sl_h1_conn_send(struct sl_h1_conn *c, struct sl_h1_request *r);
/* Watches the socket for reads, or stops. */
void sl_h1_read_on(struct sl_h1_conn *c, bool on);

#endif

/*
 * http_impl.h: what the pieces of sluice's HTTP server (http.c,
 * http_read.c, http_write.c) share and no other module sees: a connection,
 * the parse-time state of its request, and the calls each piece makes into
 * the others. The server's interface is sluice/net/http.h.
 */
#ifndef SLUICE_HTTP_IMPL_H
#define SLUICE_HTTP_IMPL_H

#include "sluice/net/http.h"

#include "sluice/net/client_addr.h"
#include "sluice/net/http_frame.h"

#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

enum conn_phase {
	PHASE_IDLE,
	PHASE_HEADERS,
	PHASE_BODY,
	PHASE_HANDLING,
	PHASE_LINGER,
};

/* Parse-time state of a request, around the part handlers see. */
struct request_state {
	struct sl_http_request pub;
	char *arena; /* target, path, header names and values, NUL-separated */
	size_t arena_len, arena_cap;
	size_t header_bytes; /* counted against max_header_bytes */
	uint32_t target_off, path_off, query_off;
	uint32_t name_off[SL_HTTP_MAX_HEADERS];
	uint32_t value_off[SL_HTTP_MAX_HEADERS];
	bool in_field;     /* inside a header name */
	bool identified;   /* request id and client set */
	bool seen_header;  /* past the request target */
	bool headers_done; /* later fields are trailers: counted, dropped */
	/*
	 * The response has no body: a HEAD request's, or one whose status
	 * has none (1xx, 204, 304: status_has_body).
	 */
	bool head_only;
	size_t body_cap;
	/* Body memory this request holds while its body is read (http.h). */
	size_t body_reserved;
	bool keep_alive; /* decided when the message completed */
	bool http10;     /* HTTP/1.0 client: no chunked responses */
	bool chunked;    /* the streamed response is chunked */
	/* ... and ends with trailers: its head says which (Trailer). */
	bool trailers;
	bool dispatched;
	bool finished; /* sl_http_request_finished() ran */
	/*
	 * A streamed response's head, held until the first body bytes (or the
	 * end, or sl_http_flush) so that both leave in one system call: on
	 * loopback each write wakes the client once more.
	 */
	char *held_head;
	size_t held_head_len;
};

struct sl_http_conn {
	uv_tcp_t tcp;
	/*
	 * The connection's one deadline (header, body, idle, send or linger
	 * time, by phase), kept lazily: sl_http_set_timer() only moves
	 * `deadline` when the running timer fires no later than it, and
	 * on_timer() waits out what is left; sl_http_stop_timer() only clears
	 * it. Most requests then start and stop no timer at all, where each
	 * phase used to. TIMER_NONE: no deadline (deadline), no timer running
	 * (armed).
	 */
	uv_timer_t timer;
	uint64_t deadline; /* uv_now() milliseconds */
	uint64_t armed;    /* when the running timer fires */
	uv_shutdown_t shutdown_req;
	llhttp_t parser;
	struct sl_http_server *server;
	struct sl_http_conn *prev, *next;
	enum conn_phase phase;
	struct request_state *req; /* NULL between requests */
	/* The TCP peer, read once at accept; family 0 when unknown. */
	struct sl_ip peer;
	char peer_text[SL_CLIENT_ADDR_MAX]; /* "" when unknown */

	char *pending; /* SL_HTTP_PENDING_MAX bytes once allocated */
	size_t pending_len;

	size_t backlog;         /* bytes in uv_write requests not yet done */
	unsigned reject_status; /* set by a parser callback that refuses */
	const char *reject_message;
	bool head_paused; /* the parser paused after a head a body follows */
	struct sl_http_frame frame; /* where the parts of a request end */
	unsigned open_handles;
	bool reading;
	bool parsing;             /* inside conn_parse(): do not re-enter */
	bool closing;             /* uv_close() called */
	bool finish_when_flushed; /* linger once the backlog is written */
	uint64_t linger_since;    /* loop time the linger began (FIN sent) */
	bool shutdown_started;
	bool peer_closed;   /* EOF seen while flushing a final response */
	bool draining_wait; /* drain callback owed once below the low mark */
	bool flush_wait;    /* next request waits for the backlog to drain */
	uint64_t write_progress_ms; /* loop time of the last write done */
};

/* No deadline, or no timer running: see the timer in struct sl_http_conn. */
#define TIMER_NONE UINT64_MAX

/* ---- http.c: the connection's timer, and its end ---- */

/*
 * The connection's deadline: it fires once `ms` have passed, unless set
 * again or stopped; what it does then depends on the phase.
 */
void sl_http_set_timer(struct sl_http_conn *c, uint64_t ms);
void sl_http_stop_timer(struct sl_http_conn *c);
/* Closes a client that took no response bytes for send_timeout_ms. */
void sl_http_arm_send_timeout(struct sl_http_conn *c);
/* Closes both handles; a request in flight hears on_abort from the loop. */
void sl_http_conn_close(struct sl_http_conn *c);
/* Sends what is queued, then FIN, then discards input for a moment. */
void sl_http_conn_finish(struct sl_http_conn *c);
/* The FIN of sl_http_conn_finish(), once the backlog is written. */
void sl_http_maybe_linger(struct sl_http_conn *c);

/* ---- http_read.c: reading and parsing requests ---- */

/* The llhttp callbacks that build a connection's request. */
extern const llhttp_settings_t sl_http_parser_settings;
/* The request's end, reported once: completed or not. */
void sl_http_request_finished(struct sl_http_conn *c, struct request_state *st,
                              bool completed);
/* Frees a request's state, giving back the body memory it holds. */
void sl_http_request_free(struct request_state *st);
/* A request id: the client's when sane, else 16 random-looking hex digits. */
void sl_http_assign_request_id(struct sl_http_server *s,
                               struct request_state *st);
/* Parses what `pending` holds, when nothing is being answered. */
void sl_http_conn_pump(struct sl_http_conn *c);
/* Reads while there is room for the bytes, stops while there is none. */
void sl_http_conn_update_reading(struct sl_http_conn *c);

/* ---- http_write.c: writing responses ---- */

/* Writes bufs in order, now or through a copied uv_write request. */
int sl_http_conn_write_raw(struct sl_http_conn *c, const uv_buf_t *bufs,
                           unsigned n);
/* Answers `status` with Connection: close and lingers; no handler saw it. */
void sl_http_conn_reject(struct sl_http_conn *c, int status,
                         const char *message);
/*
 * sl_http_conn_reject() with header lines (each ending in CRLF) added, or
 * NULL.
 */
void sl_http_conn_reject_with(struct sl_http_conn *c, int status,
                              const char *extra_headers, const char *message);

#endif

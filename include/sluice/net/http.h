/*
 * http.h: sluice's HTTP/1.1 server on libuv and llhttp.
 *
 * The server owns the listening socket and every client connection. It
 * parses requests with llhttp, enforces the limits below, and hands each
 * complete request to one handler function. The handler answers through the
 * sl_http_respond*() and sl_http_stream_*() calls, at once or later from any
 * loop callback. Pipelined requests are answered in order: the next one is
 * parsed only when the current response is complete and no more than
 * SL_HTTP_PIPELINE_BACKLOG bytes of answers wait for the client.
 *
 * Glossary:
 *   request   one parsed HTTP request; lives inside its connection from
 *             dispatch until its response is complete (or the client has
 *             gone, which the handler learns from on_abort).
 *   backlog   response bytes handed to libuv but not yet written to the
 *             socket; the handler reads it to apply back-pressure.
 *   linger    after an error response that closes the connection, sluice
 *             stops sending (FIN), then reads and discards what the client
 *             still sends until it has been quiet for a moment (at most
 *             the body timeout), so that the client reads the error
 *             instead of a connection reset.
 *   head      the request line and headers. A request with a body is shown
 *             to on_head (when set) once its head is parsed and before any
 *             of its body is read, so that a request its handler would
 *             refuse anyway (no valid key) costs no body memory.
 *   body      the bytes of the bodies being read: each request with a body
 *   memory    reserves its Content-Length (--max-body for a chunked one)
 *             when its head is admitted and gives it back once the body is
 *             complete (it then belongs to the request) or the request
 *             ends. A head whose reservation would take the total past
 *             max_body_memory is answered 503 with Retry-After before any
 *             of its body is read; a body once admitted always has its
 *             memory, so it is never paused or cut off for want of it.
 */
#ifndef SLUICE_HTTP_H
#define SLUICE_HTTP_H

#include "sluice/net/client_addr.h"
#include "sluice/base/common.h"
/* struct sl_http_header and sl_http_field_value_ok() live there. */
#include "sluice/net/http_rules.h"

#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/*
 * Defaults for the limits, each overridable by an option. 16 KiB of request
 * line and headers and 100 headers are far above what API clients send and
 * close to what nginx and h2o allow; 1 MiB of body holds any sane prompt.
 */
#define SL_HTTP_MAX_HEADER_BYTES (16u * 1024)
#define SL_HTTP_MAX_HEADERS 100u
#define SL_HTTP_MAX_BODY (1024u * 1024)
/*
 * What the bodies being read may hold together (see "body memory" above):
 * each body is --max-body at most, but 10,000 connections each sending 1 MiB
 * less a byte would hold 10 GiB. 256 MiB admits 256 bodies of the default
 * --max-body at once, more than the slots that will serve them.
 */
#define SL_HTTP_MAX_BODY_MEMORY (256u * 1024 * 1024)
/*
 * Retry-After of the 503 that refuses a body while body memory is spent:
 * bodies on a loopback or LAN arrive in milliseconds, so room comes back
 * soon; one second is the smallest the header can say.
 */
#define SL_HTTP_BODY_MEMORY_RETRY_S 1u
#define SL_HTTP_HEADER_TIMEOUT_MS 10000u
#define SL_HTTP_BODY_TIMEOUT_MS 30000u
#define SL_HTTP_IDLE_TIMEOUT_MS 60000u
/* A client that takes no response bytes for this long is dropped. */
#define SL_HTTP_SEND_TIMEOUT_MS 60000u
#define SL_HTTP_MAX_CONNECTIONS 10000u
/* Client-sent request ids longer than this are replaced by our own. */
#define SL_HTTP_REQUEST_ID_MAX 128u
/* Bytes read ahead while a request is being answered (pipelining). */
#define SL_HTTP_PENDING_MAX (64u * 1024)
/*
 * How long a lingering close waits for the client to go quiet: each read
 * while it lingers waits this long again, up to the body timeout in all.
 */
#define SL_HTTP_LINGER_MS 2000u
/* The one read buffer all connections share; reads are handled at once. */
#define SL_HTTP_READ_BUF (64u * 1024)
/*
 * Back-pressure marks for a response being streamed: above HIGH the handler
 * should stop producing; on_drain tells it when the backlog is down to LOW.
 */
#define SL_HTTP_BACKLOG_HIGH (64u * 1024)
#define SL_HTTP_BACKLOG_LOW (16u * 1024)
/*
 * A connection does not start its next pipelined request while more than
 * this many response bytes wait for its client: a client that pipelines
 * thousands of cheap requests without reading would otherwise have sluice
 * hold every answer in memory. With the read-ahead (SL_HTTP_PENDING_MAX)
 * this bounds what one connection costs, whatever it sends. One bound of
 * the streaming marks' size: a normal client reading its answers never
 * waits on it.
 */
#define SL_HTTP_PIPELINE_BACKLOG (64u * 1024)
/*
 * Content types longer than this, or holding bytes outside VCHAR, SP and
 * HTAB, are not copied into a response head (they come from upstreams);
 * SL_HTTP_CONTENT_TYPE_FALLBACK goes out instead.
 */
#define SL_HTTP_CONTENT_TYPE_MAX 256u
#define SL_HTTP_CONTENT_TYPE_FALLBACK "application/octet-stream"
/*
 * The Content-Type of every JSON body sluice writes itself (errors, health,
 * assembled answers): llama-server's, so that a client cannot tell which of
 * the two answered by the header alone.
 */
#define SL_HTTP_JSON "application/json; charset=utf-8"
/*
 * An Origin header longer than this, or holding bytes that may not go back
 * into a response head, is treated as absent. An origin is a scheme, a host
 * name (253 bytes at most) and a port: 512 leaves room for all three.
 */
#define SL_HTTP_ORIGIN_MAX 512u
/*
 * A request's own header lines (sl_http_request.own_headers): the six
 * x-ratelimit-* lines with the largest values, Retry-After and X-Priority
 * take under 400 bytes.
 */
#define SL_HTTP_OWN_HEADERS_MAX 512u
/*
 * The most a chunked answer's trailer fields take (sl_http_trailers_cb):
 * sluice's Server-Timing trailer, two metrics of at most 20 digits each,
 * takes under 80 bytes.
 */
#define SL_HTTP_TRAILERS_MAX 256u

struct sl_http_limits {
	size_t max_header_bytes;
	unsigned max_headers;
	size_t max_body;
	/* body memory (see the glossary); at least max_body */
	size_t max_body_memory;
	uint64_t header_timeout_ms;
	uint64_t body_timeout_ms;
	uint64_t idle_timeout_ms;
	uint64_t send_timeout_ms;
	unsigned max_connections;
	const char *server_name; /* the Server header; NULL: sluice/VERSION */
	/*
	 * CORS: the web origins whose pages may read sluice's answers; the
	 * array must outlive the server. Empty (n_cors_origins 0): no CORS
	 * header on any answer. A single "*": any origin; the request's
	 * Origin is echoed (llama-server does the same, which lets a page
	 * send credentials), or "*" without one. A single "localhost": the
	 * Origin is echoed when it is http(s) on localhost, 127.0.0.1 or
	 * [::1], any port (llama-server's --cors-origins localhost).
	 * Otherwise a list of exact origins ("https://app.example:8443"): the
	 * Origin is echoed when it is in the list, else no CORS header.
	 * With CORS on, every answer
	 * also says "Vary: Origin", since its headers depend on it.
	 */
	char *const *cors_origins;
	unsigned n_cors_origins;
	/*
	 * Proxies whose X-Forwarded-For sets a request's client address (see
	 * client_addr.h); the array must outlive the server. None: the TCP
	 * peer is every request's client.
	 */
	const struct sl_cidr *trusted_proxies;
	unsigned n_trusted_proxies;
};

struct sl_http_conn;
struct sl_http_request;

/*
 * What the handler learned about a request, for the access log and the
 * metrics: read when the request finishes. Fields left alone keep their
 * "unknown" values.
 */
struct sl_trace_span;
struct sl_request_info {
	bool has_priority;
	double priority;
	int64_t queue_ms;          /* -1: not queued */
	int64_t ttft_ms;           /* -1: no token */
	int64_t predicted_ttft_ms; /* -1: none predicted (latency.h) */
	/*
	 * Its service level (0s: none; sched/README.md) and the time per
	 * output token it got (-1: not known), for its outcome's count.
	 */
	uint64_t slo_ttft_ms, slo_tpot_ms;
	double tpot_ms;
	unsigned tokens;           /* generated */
	unsigned batch_size;       /* 0: not batched */
	char upstream[96];         /* "" when none */
	const char *outcome;       /* NULL: judged from the status */
	const char *reject_reason; /* NULL: judged from the status */
	const char *cancel_stage;  /* "queued" or "inflight" if cancelled */
	/*
	 * The tenant (keys.h) whose key the request carries, or NULL; its
	 * name lives as long as sluice. `counted`: it holds one of the
	 * tenant's concurrent places until it ends. `prompt_tokens`: as the
	 * upstream counted them. `model`: the name of the model that serves it
	 * ("" until admitted: sl_access_admit), for the usage labels and the
	 * status page. `tokens_reserved`: what it took from the tenant's
	 * tokens bucket when admitted; `ran_on`: its client left a plain
	 * answer that llama-server goes on with (keys.h, sl_ending).
	 */
	struct sl_tenant *tenant;
	const char *key;
	bool counted, ran_on;
	/* Refused as out of its service level's reach: not charged. */
	bool refunded;
	double tokens_reserved;
	unsigned prompt_tokens;
	char model[128];
	/*
	 * Its trace (ops/otlp.h), while tracing is on and it goes to a
	 * relayed endpoint; NULL otherwise. Malloc'd by the tracer, freed
	 * with the request.
	 */
	struct sl_trace_span *trace;
};

typedef void (*sl_http_abort_cb)(struct sl_http_request *req);
typedef void (*sl_http_drain_cb)(struct sl_http_request *req);
/*
 * Writes a chunked answer's trailer fields ("Name: value\r\n" each, only
 * the names sl_http_request.trailer announced) into `out`, at most `size`
 * bytes; returns how many it wrote (0: none). Called once, as the body
 * ends (sl_http_stream_end*), with `req` still the handler's.
 */
typedef size_t (*sl_http_trailers_cb)(struct sl_http_request *req, char *out,
                                      size_t size);

struct sl_http_request {
	struct sl_http_conn *conn;
	llhttp_method_t method;
	const char *target; /* request target as sent, NUL-terminated */
	const char *path;   /* target up to '?', NUL-terminated */
	const char *query;  /* after '?', or "" */
	struct sl_http_header headers[SL_HTTP_MAX_HEADERS];
	unsigned n_headers;
	char *body; /* NUL-terminated; body_len bytes */
	size_t body_len;
	char id[SL_HTTP_REQUEST_ID_MAX + 1]; /* X-Request-Id */
	/*
	 * Who sent the request, as text: the connection's peer, or the
	 * address X-Forwarded-For names when the peer is a trusted proxy
	 * (client_addr.h); "" when unknown (a socket that is not TCP). Set
	 * from the peer when the request begins and from the header when
	 * it is dispatched. It is logged, and it is what per-client limits
	 * would key on; sluice has no per-address limit yet.
	 */
	char client[SL_CLIENT_ADDR_MAX];
	/*
	 * Header lines ("Name: value\r\n" each) that every response to this
	 * request carries, whoever writes it: a tenant's rate-limit headers
	 * and the X-Priority it got (keys.h). "" for none.
	 */
	char own_headers[SL_HTTP_OWN_HEADERS_MAX];
	uint64_t start_ns; /* first byte of the request */
	struct sl_request_info info;
	size_t bytes_sent; /* response bytes, head included */
	int status;        /* of the response, once begun */

	/* Set by the handler when it answers later. */
	sl_http_abort_cb on_abort; /* the client went away first */
	sl_http_drain_cb on_drain; /* backlog fell below the low-water mark */
	void *handler_data;
	/*
	 * Trailers (RFC 9110, 6.5), set before sl_http_stream_start() by a
	 * handler that can end a chunked answer with fields of its own:
	 * `trailer` names them for the head's Trailer field ("Server-Timing")
	 * and on_trailers writes them at the end. Used only where the client
	 * accepts trailers (TE: trailers, sl_http_te_trailers) and the answer
	 * is chunked (HTTP/1.1, with a body); elsewhere the answer's bytes
	 * are what they would be without them. NULL: none.
	 */
	const char *trailer;
	sl_http_trailers_cb on_trailers;
};

typedef void (*sl_http_handler)(struct sl_http_request *req, void *data);
/*
 * Called once per request that ends: `completed` when its response went
 * out whole, else the client left first. Also for requests refused while
 * being parsed (their path may be NULL). `req` is valid during the call.
 */
typedef void (*sl_http_finish_cb)(struct sl_http_request *req, bool completed,
                                  void *data);
/*
 * Shown the head of a request with a body, before any of the body is read
 * (see "head" in the glossary): `req` has its method, target, headers, id
 * and client; its body is NULL. Returns true to read the body and hand the
 * request to the handler as usual; or answers `req` at once (as a handler
 * would, e.g. sl_http_respond_error) and returns false: the body is then
 * never read, and the connection closes after the answer (its head says
 * "Connection: close"), since the unread body stands before any next
 * request. A request without a body goes straight to the handler.
 */
typedef bool (*sl_http_head_cb)(struct sl_http_request *req, void *data);

struct sl_http_server {
	uv_loop_t *loop;
	uv_tcp_t listener;
	struct sl_http_limits limits;
	sl_http_handler handler;
	sl_http_finish_cb on_finish;
	sl_http_head_cb on_head; /* set by the owner, or NULL: none */
	void *handler_data;
	uint64_t refused_connections; /* over --max-connections */
	struct sl_http_conn *conns;   /* all open connections, a list */
	unsigned n_conns;
	unsigned n_busy; /* requests dispatched and not yet answered */
	bool listening;
	bool draining; /* answering what is in flight, then closing */
	bool closing;
	void (*on_closed)(struct sl_http_server *);
	/*
	 * Set by the owner, or NULL: called when the last connection has
	 * closed while draining, from that connection's close callback (so
	 * the owner should act from a later loop turn).
	 */
	void (*on_empty)(struct sl_http_server *);
	unsigned open_handles; /* the listener, until it closes */
	char *read_buf;        /* SL_HTTP_READ_BUF bytes */
	uint64_t request_counter;
	uint64_t id_seed;
	char date[40]; /* cached Date header value */
	uint64_t date_sec;
	/* body memory (see the glossary) reserved now, in bytes */
	size_t body_memory;
};

void sl_http_limits_default(struct sl_http_limits *l);

/*
 * Listens on host:port (port 0: any free one; sl_http_server_port() tells
 * which). Returns 0 or a negative libuv code (e.g. UV_EADDRINUSE).
 */
int sl_http_server_listen(struct sl_http_server *s, uv_loop_t *loop,
                          const char *host, unsigned port,
                          const struct sl_http_limits *limits,
                          sl_http_handler handler, void *data);

unsigned sl_http_server_port(const struct sl_http_server *s);

/*
 * Serves a connected stream socket that did not come through the listener
 * (a socketpair end, for tests and fuzzing), as if just accepted; call it
 * on the server's loop, after sl_http_server_listen() succeeded. On success
 * the server owns fd and closes it; on error (a negative libuv code) the
 * caller keeps it.
 */
int sl_http_server_adopt(struct sl_http_server *s, uv_os_sock_t fd);

/* Stops accepting new connections; open ones carry on. */
void sl_http_server_stop_accepting(struct sl_http_server *s);

/* Number of requests dispatched and not yet answered. */
unsigned sl_http_server_busy(const struct sl_http_server *s);

/*
 * Graceful shutdown, first step: closes idle connections, and every other
 * after its current response. New connections are still accepted (each
 * closed after one response), so that health checks can hear that sluice
 * is draining.
 */
void sl_http_server_drain(struct sl_http_server *s);

/*
 * Closes the listener and every connection (requests in flight are aborted
 * through their on_abort). on_closed runs when all handles are closed.
 */
void sl_http_server_close(struct sl_http_server *s,
                          void (*on_closed)(struct sl_http_server *));

/* The value of header `name` (case-insensitive), or NULL. */
const char *sl_http_header(const struct sl_http_request *req, const char *name);

/*
 * What Access-Control-Allow-Origin says on req's answers: the request's
 * Origin, "*", or NULL when its answers carry no CORS header (CORS off, or
 * an Origin not in the list). Points into req or the limits; valid while
 * req is.
 */
const char *sl_http_cors_origin(const struct sl_http_request *req);

/*
 * A complete response. `extra_headers` is NULL or preformatted lines, each
 * ending in "\r\n". The body is copied when needed; the caller keeps it.
 * After this call `req` belongs to the server again: do not touch it.
 */
void sl_http_respond(struct sl_http_request *req, int status,
                     const char *content_type, const char *extra_headers,
                     const void *body, size_t len);

/*
 * An error in OpenAI's shape: {"error":{"message","type","code"}}, where
 * code is the status. `type` is e.g. "invalid_request_error". The
 * Content-Type is SL_HTTP_ERROR_CONTENT_TYPE.
 */
void sl_http_respond_error(struct sl_http_request *req, int status,
                           const char *type, const char *extra_headers,
                           const char *fmt, ...) SL_PRINTF(5, 6);

/*
 * A response sent as it is produced: start it, write, end it. With
 * content_length < 0 the body is chunked and each write is one chunk; else
 * exactly content_length bytes must follow. Writes return 0, or a negative
 * code when the client is gone (the handler then also gets on_abort). After
 * sl_http_stream_end() `req` belongs to the server again.
 *
 * A chunked answer ends with the trailers the request's on_trailers
 * writes, where the client accepts them (see sl_http_request.trailer).
 *
 * The head is held until the first body bytes, the end or
 * sl_http_flush(), and leaves with them in one write: a handler that
 * starts a response and may write nothing before it returns to the loop
 * calls sl_http_flush() so the client is not kept waiting for the head.
 */
int sl_http_stream_start(struct sl_http_request *req, int status,
                         const char *content_type, const char *extra_headers,
                         long long content_length);
int sl_http_stream_write(struct sl_http_request *req, const void *data,
                         size_t len);

void sl_http_stream_end(struct sl_http_request *req);

/*
 * sl_http_stream_end() with n last pieces (at most SL_HTTP_WRITEV_MAX),
 * joined as by sl_http_stream_writev(): the last events and the body's
 * end leave in one write, and the client is woken once for them.
 */
void sl_http_stream_end_with(struct sl_http_request *req,
                             const uv_buf_t *pieces, unsigned n);

/* Writes a held head now (see above); 0, or as sl_http_stream_write(). */
int sl_http_flush(struct sl_http_request *req);

/*
 * The most pieces one sl_http_stream_writev() takes: a relay holds the
 * events of one upstream read up to this many (64 events of about 250
 * bytes fill a 16 KiB read).
 */
#define SL_HTTP_WRITEV_MAX 64

/*
 * Writes n (at most SL_HTTP_WRITEV_MAX) pieces at once, joined in one
 * chunk, in one write to the socket: a relay that has several events in
 * hand pays one system call, not one per event. Returns as
 * sl_http_stream_write(); UV_EINVAL for too many pieces.
 */
int sl_http_stream_writev(struct sl_http_request *req, const uv_buf_t *pieces,
                          unsigned n);

/*
 * Gives up on a response already started (the upstream failed mid-body):
 * closes the connection, so the client sees a truncated body rather than a
 * complete one. `req` belongs to the server again; on_abort is not called.
 */
void sl_http_abort(struct sl_http_request *req);

/* Response bytes queued in sluice for this request's client. */
size_t sl_http_backlog(const struct sl_http_request *req);

/*
 * Asks for on_drain once the backlog falls to SL_HTTP_BACKLOG_LOW: for a
 * handler that stopped producing because the backlog was high.
 */
void sl_http_want_drain(struct sl_http_request *req);

/* Standard reason phrase ("Not Found"); "Unknown" for odd codes. */
const char *sl_http_reason(int status);

#endif

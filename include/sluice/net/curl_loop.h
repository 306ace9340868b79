/*
 * curl_loop.h: libcurl's multi interface driven by sluice's libuv loop.
 *
 * One struct sl_curl per loop. libcurl tells us which sockets to watch
 * (CURLMOPT_SOCKETFUNCTION) and when to time out (CURLMOPT_TIMERFUNCTION);
 * we watch them with uv_poll_t handles and one uv_timer_t, and hand events
 * back with curl_multi_socket_action(). Finished transfers are reported
 * through each transfer's on_done callback.
 *
 * Re-entrancy rules relied on here and by callers:
 *   - on_done runs outside every libcurl callback, so it may start, abort
 *     and clean up transfers, its own included;
 *   - inside a libcurl callback (write, header, ...) never call
 *     sl_curl_start() or sl_curl_abort(); return an error code from the
 *     callback instead, and the transfer ends through on_done.
 *
 * Glossary:
 *   transfer  one HTTP exchange with an upstream: a CURL easy handle plus
 *             the owner's completion callback.
 *   sl_get    a small GET whose body is collected in memory (health checks,
 *             /props), bounded by SL_GET_BODY_MAX.
 */
#ifndef SLUICE_CURL_LOOP_H
#define SLUICE_CURL_LOOP_H

#include <curl/curl.h>
#include <stdbool.h>
#include <uv.h>

/*
 * Easy handles kept for reuse between transfers. An easy handle holds its
 * receive buffer and defaults; making one per request and freeing it after
 * costs more than resetting one. 64 covers the transfers that finish
 * together under load; beyond that handles are freed as before.
 */
#define SL_CURL_EASY_POOL 64

struct sl_curl {
	CURLM *multi;
	uv_loop_t *loop;
	uv_timer_t timer;
	unsigned open_handles; /* the timer and every socket's poll handle */
	void (*on_closed)(struct sl_curl *);
	CURL *pool[SL_CURL_EASY_POOL]; /* reset, idle easy handles */
	unsigned pooled;
};

struct sl_transfer;
typedef void (*sl_transfer_done_cb)(struct sl_transfer *t, CURLcode result);

struct sl_transfer {
	CURL *easy;
	sl_transfer_done_cb on_done;
	void *data;  /* the owner's */
	bool active; /* added to the multi handle and not yet done */
	/*
	 * The socket libcurl last watched for it, and whether only for
	 * reading (its request is sent, the answer awaited): libcurl's
	 * CURLINFO_ACTIVESOCKET says nothing while a transfer runs, so
	 * sl_curl_half_close() learns them from the socket callback.
	 */
	curl_socket_t fd;
	bool reading;
};

int sl_curl_init(struct sl_curl *c, uv_loop_t *loop);

/*
 * Closes the multi handle and the loop handles; every transfer must have
 * finished or been aborted. on_closed runs once the last handle has closed.
 */
void sl_curl_close(struct sl_curl *c, void (*on_closed)(struct sl_curl *));

/*
 * Options every upstream transfer gets: no signals, no proxy (upstreams are
 * reached directly, whatever http_proxy says), HTTP/1.1, TCP_NODELAY, and
 * the segment size of sl_upstream_socket (net/h1_client.h).
 */
void sl_curl_common_options(CURL *easy);

/*
 * An easy handle with every option at its default (a reused one, when one
 * is idle), owned by the caller; NULL when libcurl cannot make one.
 */
CURL *sl_curl_easy(struct sl_curl *c);

/*
 * Gives back an easy handle that is in no multi handle (NULL is fine): it
 * is reset for the next transfer, or freed when the pool is full. A
 * transfer removed before its end has had its connection closed already,
 * so a reused handle carries nothing of it.
 */
void sl_curl_easy_done(struct sl_curl *c, CURL *easy);

/* Starts t->easy (configured by the caller). Returns 0 or SL_ECURL. */
int sl_curl_start(struct sl_curl *c, struct sl_transfer *t);

/*
 * Stops an active transfer at once, without calling on_done. libcurl closes
 * its connection, which is how llama-server learns to stop generating.
 */
void sl_curl_abort(struct sl_curl *c, struct sl_transfer *t);

/*
 * As sl_h1_half_close() (h1_client.h): once the request is sent (libcurl
 * watches its socket for reading only), the socket is shut for writing
 * while libcurl reads the answer to its end, and the connection is not
 * reused. Returns false, doing nothing, before that (connecting, or the
 * request not all sent): then sl_curl_abort() is what stops it.
 */
bool sl_curl_half_close(struct sl_transfer *t);

/*
 * Whether libcurl has sent the transfer's request whole (it watches the
 * socket for reading only): the upstream has it.
 */
bool sl_curl_sent(const struct sl_transfer *t);

/* Largest body an sl_get keeps; more fails the GET. */
#define SL_GET_BODY_MAX (1u << 20)

struct sl_get;
/* status: the HTTP status, or 0 when no response came (err says why). */
typedef void (*sl_get_cb)(struct sl_get *g, long status, const char *err);

struct sl_get {
	struct sl_transfer transfer;
	struct curl_slist *headers;
	char *body; /* NUL-terminated, owned by the sl_get */
	size_t body_len;
	sl_get_cb cb;
	void *data; /* the caller's: sl_get_start leaves it as it is */
	char error[CURL_ERROR_SIZE];
};

/*
 * GETs `url`, with "Authorization: Bearer <api_key>" when api_key is not
 * NULL, giving up after timeout_ms. The sl_get must be idle (not
 * sl_get_busy). cb runs once, from the loop; g->body is valid until the next
 * start or sl_get_reset.
 */
int sl_get_start(struct sl_curl *c, struct sl_get *g, const char *url,
                 const char *api_key, long timeout_ms, sl_get_cb cb);
bool sl_get_busy(const struct sl_get *g);
/* Aborts a running GET (no callback) and frees its memory. */
void sl_get_reset(struct sl_curl *c, struct sl_get *g);

#endif

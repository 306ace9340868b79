/*
 * http.h: sluice-bench's side exchanges (/metrics, /slots, /tokenize) on
 * libsluice's own HTTP/1.1 client: one request, its answer kept whole,
 * bounded in size and in time.
 *
 * sluice-bench speaks HTTP/1.1 through sl_h1 (include/sluice/net/
 * h1_client.h) rather than libcurl: Debian's libcurl brings some thirty
 * libraries whose loading alone takes longer than the bench's whole start
 * should (bench/RESULTS.md). Plain http:// only: measure a gateway behind
 * its TLS terminator, not through it.
 */
#ifndef SLUICE_BENCH_HTTP_H
#define SLUICE_BENCH_HTTP_H

#include "sluice/net/h1_client.h"

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

/* Largest answer a call keeps; more fails it. */
#define HB_BODY_MAX (16u * 1024 * 1024)
/* Connections to one target at most, across every request of a run. */
#define HB_MAX_CONNS 100000u
/* Time to connect, for every exchange. */
#define HB_CONNECT_TIMEOUT_MS 5000

struct hb_call;
/* status: the HTTP status, or 0 when no answer came (err says why). */
typedef void (*hb_call_cb)(struct hb_call *c, int status, const char *err);

struct hb_call {
	struct sl_h1 *h1;
	struct sl_h1_request r;
	uv_timer_t timer; /* the deadline */
	char *headers, *request_body, *target;
	char *body; /* the answer, NUL-terminated */
	size_t len;
	hb_call_cb cb;
	void (*on_closed)(struct hb_call *);
	void *data; /* the caller's */
	bool busy;
	char error[SL_H1_ERROR_MAX];
};

/*
 * Whether url is one sluice-bench can reach (http://host[:port][/path]);
 * when not, says why in err.
 */
bool hb_url_ok(const char *url, char *err, size_t errlen);

void hb_call_init(struct hb_call *c, struct sl_h1 *h1, uv_loop_t *loop);
/*
 * Sends METHOD base_url+target with "Authorization: Bearer key" when key
 * is not NULL and body (JSON) when not NULL; cb runs once, from the loop.
 * Returns 0, or -1 when the call is busy or the URL is refused.
 */
int hb_call_start(struct hb_call *c, const char *method, const char *base_url,
                  const char *target, const char *key, const char *body,
                  uint64_t timeout_ms, hb_call_cb cb);
/* Stops a call under way (no callback). */
void hb_call_abort(struct hb_call *c);
/* Aborts it and closes its timer; on_closed(c) runs once that is done. */
void hb_call_close(struct hb_call *c, void (*on_closed)(struct hb_call *));

#endif

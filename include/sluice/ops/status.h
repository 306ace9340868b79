/*
 * status.h: GET /status, a live page for a person, and GET /status.json,
 * the document it reads every second.
 *
 * The module owns two bounded rings and the page. The last requests: one
 * entry per request that ends (but those of the health checks, /metrics
 * and the status page itself), the newest SL_STATUS_RECENT kept, each a
 * few fixed fields copied in O(1): never a key, a prompt or an answer,
 * only the key's name. The last minutes: a sample every
 * SL_STATUS_SAMPLE_MS (a timer, unreferenced, so that it never holds the
 * loop open) of the counters that /metrics reads and of the queue and
 * slots, the newest SL_STATUS_SAMPLES kept. A request costs the ring's
 * copy and two counter increments; a sample costs a pass over the
 * upstreams, the models and the time-to-first-token histograms.
 *
 * The document does not gather what /health and /metrics know again: it
 * carries /health's document (built by the routes, which own it) and
 * /metrics' JSON summary (sl_exposition_summary) whole, under "health"
 * and "metrics", beside what only the page needs: each model's queue by
 * priority and reserves, each tenant's last minute against its limits,
 * the last requests and the history. src/ops/README.md ("The status
 * page") lists its fields.
 *
 * The page is src/ops/status.html, embedded at build time
 * (status_embed.py), served with a Content-Security-Policy that allows
 * its own inline script and style only, by their SHA-256, and fetches
 * to its own origin: it loads nothing else.
 *
 * Glossary:
 *   listed   a request the last requests show: any but those to
 *            /health, /v1/health, /ready, /metrics, /v1/usage, /status
 *            and /status.json (a page polling them would fill the ring
 *            with itself).
 *   sample   one point of the history: the listed requests ended and
 *            the tokens generated since the previous sample, and the
 *            queue, busy and total slots and TTFT quantiles at its time.
 */
#ifndef SLUICE_STATUS_H
#define SLUICE_STATUS_H

#include "sluice/base/metrics.h"
#include "sluice/net/http.h"
#include "sluice/ops/exposition.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* Last requests kept: a screen's table, with room to scroll a little. */
#define SL_STATUS_RECENT 50
/* One sample a second: what a chart of the last minutes needs. */
#define SL_STATUS_SAMPLE_MS 1000
/* Samples kept: five minutes, about 40 bytes each. */
#define SL_STATUS_SAMPLES 300
/* Bytes kept of a listed request's path and upstream: longer are cut. */
#define SL_STATUS_PATH_MAX 64
#define SL_STATUS_UPSTREAM_MAX 96

/* One of the last requests: what the access log says of it, and less. */
struct sl_status_request {
	uint64_t seq;   /* 1 for the first listed request, then on */
	uint64_t at_ms; /* when it ended, wall clock (Unix ms) */
	int status;     /* 499: its client left first */
	int64_t queue_ms, ttft_ms, total_ms; /* -1: does not apply */
	unsigned tokens;
	char method[16];
	char path[SL_STATUS_PATH_MAX];
	char model[128]; /* "" when it was not admitted to a model */
	char key[SL_KEYS_NAME_MAX + 1]; /* the key's name; "" without one */
	char priority[8];               /* "" when it has none */
	char outcome[16];
	char reason[24]; /* why sluice refused it, "" otherwise */
	char upstream[SL_STATUS_UPSTREAM_MAX];
};

/* One sample of the history; see the glossary. */
struct sl_status_sample {
	uint64_t t_ms; /* since sluice started */
	uint32_t requests, failed, tokens;
	uint32_t queued, busy, slots;
	/* Of the first tokens since the previous sample; < 0: none came. */
	float ttft_p50_ms, ttft_p99_ms;
};

struct sl_status {
	struct sl_exposition *ex; /* what /metrics reads, lent at start */
	uv_timer_t timer;
	uint64_t start_ms; /* the loop's time when sluice started */
	struct sl_status_request recent[SL_STATUS_RECENT];
	uint64_t listed; /* listed requests so far: the last one's seq */
	struct sl_status_sample samples[SL_STATUS_SAMPLES];
	uint64_t taken; /* samples taken so far */
	/* Since the last sample: listed requests, those failed or refused. */
	uint32_t since_requests, since_failed;
	/* The counters at the last sample, for the differences. */
	uint64_t last_tokens;
	struct sl_histogram last_ttft;
};

/*
 * Starts the sampling timer on ex->loop (the loop's time now is sluice's
 * start). `ex` must outlive the status. Returns 0 or a libuv error.
 */
int sl_status_start(struct sl_status *st, struct sl_exposition *ex,
                    uint64_t start_ms);

/* Closes the timer (on shutdown); the loop frees nothing else of it. */
void sl_status_close(struct sl_status *st);

/*
 * A request ended (the HTTP server's on_finish): listed unless it is one
 * of the glossary's unlisted paths. `outcome` as sl_stats_finished()
 * judged it; `seconds` from its first byte to its end.
 */
void sl_status_record(struct sl_status *st, const struct sl_http_request *req,
                      const char *outcome, double seconds);

/* Takes one sample now (the timer's work; for the unit tests too). */
void sl_status_sample(struct sl_status *st);

/*
 * The document: a new object carrying `health` (taken over) and the
 * metrics summary, with the rest (see the top).
 */
json_t *sl_status_json(struct sl_status *st, json_t *health);

/* GET /status.json: answers req with sl_status_json(st, health). */
void sl_status_respond_json(struct sl_status *st, struct sl_http_request *req,
                            json_t *health);

/* GET /status: answers req with the page. */
void sl_status_respond_page(struct sl_http_request *req);

#endif

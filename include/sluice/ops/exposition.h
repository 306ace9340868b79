/*
 * exposition.h: GET /metrics, in Prometheus' text format or as a JSON
 * summary, and the relay of each managed llama-server's own metrics.
 *
 * llama-server's metrics (llamacpp:*) are fetched asynchronously, never
 * blocking the loop, and cached for SL_UPSTREAM_METRICS_TTL_MS: a /metrics
 * request that finds the cache stale waits for the refresh (at most
 * SL_UPSTREAM_METRICS_TIMEOUT_MS), together with any other request that
 * arrives meanwhile, and then gets whatever the cache holds.
 */
#ifndef SLUICE_EXPOSITION_H
#define SLUICE_EXPOSITION_H

#include "sluice/app.h"
#include "sluice/net/http.h"
#include "sluice/base/metrics.h"

#define SL_UPSTREAM_METRICS_TTL_MS 1000
#define SL_UPSTREAM_METRICS_TIMEOUT_MS 1000

/* The handler for GET /metrics. */
void sl_exposition_handle(struct sl_app *app, struct sl_http_request *req);

/* sluice's own metrics, in Prometheus text format (for tests too): its
 * traffic, then what the process costs and sluice_build_info (procstat.h). */
void sl_exposition_prometheus(struct sl_app *app, struct sl_text *t);

/* The JSON summary: a new object. */
json_t *sl_exposition_summary(struct sl_app *app);

/* Ends any /metrics requests still waiting (at shutdown). */
void sl_exposition_close(struct sl_app *app);

/*
 * Rewrites one upstream's exposition into per-family groups, adding an
 * upstream label to every sample and renaming for promtool's lint
 * ("llamacpp:n_tokens_max", a counter, becomes "llamacpp_n_tokens_max_total").
 * Exposed for the unit tests.
 */
struct sl_families;
struct sl_families *sl_families_new(void);
void sl_families_add(struct sl_families *f, const char *text,
                     const char *upstream);
void sl_families_write(const struct sl_families *f, struct sl_text *t);
void sl_families_free(struct sl_families *f);

#endif

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

#include "sluice/base/metrics.h"
#include "sluice/fleet/affinity.h"
#include "sluice/fleet/discovery.h"
#include "sluice/fleet/model.h"
#include "sluice/fleet/registry.h"
#include "sluice/fleet/upstream.h"
#include "sluice/net/curl_loop.h"
#include "sluice/net/http.h"
#include "sluice/ops/stats.h"
#include "sluice/ops/trace.h"
#include "sluice/tenants/keys.h"

#include <jansson.h>

#define SL_UPSTREAM_METRICS_TTL_MS 1000
#define SL_UPSTREAM_METRICS_TIMEOUT_MS 1000

struct sl_metrics_waiter;

/*
 * What /metrics reads of the app, lent once at start-up (the pointers),
 * and its own state. So ops reads the app's tables without including
 * the wiring's app_state.h, which sits above it.
 */
struct sl_exposition {
	uv_loop_t *loop;
	struct sl_curl *curl;
	struct sl_stats *stats;
	struct sl_tenants *tenants;
	const struct sl_http_server *http;
	/* SL_MAX_UPSTREAMS slots, dense from the first (app_state.h). */
	struct sl_upstream *const *upstreams;
	const struct sl_registry *registry; /* the models */
	struct sl_discovery **const *discoveries;
	const unsigned *n_discoveries;
	struct sl_affinity *const *affinity;      /* NULL with --affinity off */
	const unsigned long long *affinity_picks; /* SL_AFFINITY_RESULTS */
	const struct sl_tracer *tracer;           /* NULL: traces off */
	/* /metrics requests waiting for llama-server's, and fetches running. */
	struct sl_metrics_waiter *waiters;
	unsigned fetching;
};

/* The handler for GET /metrics. */
void sl_exposition_handle(struct sl_exposition *ex,
                          struct sl_http_request *req);

/* sluice's own metrics, in Prometheus text format (for tests too): its
 * traffic, then what the process costs and sluice_build_info (procstat.h). */
void sl_exposition_prometheus(struct sl_exposition *ex, struct sl_text *t);

/* The JSON summary: a new object. */
json_t *sl_exposition_summary(struct sl_exposition *ex);

/* Ends any /metrics requests still waiting (at shutdown). */
void sl_exposition_close(struct sl_exposition *ex);

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

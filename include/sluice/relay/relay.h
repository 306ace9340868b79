/*
 * relay.h: what the relay (access.c, proxy*.c) is lent by the app, and
 * what it asks of it.
 *
 * The relay sits below the app: it reads the app's loop, configuration,
 * upstream clients, counters and key table through the pointers here, set
 * once at start-up, reads the models in the registry below it, and asks
 * the app for what only the app decides (which upstream takes a request,
 * whether a model should load, when the schedulers run, whether a drain
 * is over) through `hooks`, never by including the wiring's headers
 * (src/app/). The exchanges themselves, and the coalescing of fast
 * streams, are the relay's own.
 */
#ifndef SLUICE_RELAY_H
#define SLUICE_RELAY_H

#include "sluice/config/config.h"
#include "sluice/fleet/registry.h"
#include "sluice/net/curl_loop.h"
#include "sluice/net/h1_client.h"
#include "sluice/ops/stats.h"
#include "sluice/tenants/keys.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct exchange;
struct sl_affinity_key;
struct sl_pool_slo;
struct sl_model;
struct sl_upstream;
struct sl_tracer;

/* The app's answers, each with the app as `owner` (app_models.h, app.h). */
struct sl_relay_hooks {
	/* The upstream that takes a request of `m` (sl_app_pick_upstream). */
	struct sl_upstream *(*pick_upstream)(void *owner,
	                                     const struct sl_model *m,
	                                     bool need_slot,
	                                     const struct sl_upstream *avoid,
	                                     const struct sl_affinity_key *key,
	                                     const struct sl_pool_slo *slo,
	                                     char *why, size_t size);
	/* Whether `m` will have an upstream (sl_app_upstream_expected). */
	bool (*upstream_expected)(void *owner, const struct sl_model *m);
	/* A request waits for `m`: load it if it is not (loading on demand). */
	void (*model_demand)(void *owner, struct sl_model *m);
	/* Every model's scheduler may act now. */
	void (*kick_scheduler)(void *owner);
	/* A request finished: a drain may be over. */
	void (*maybe_drained)(void *owner);
	/* An exchange holds `m`, lets it go, used it (sl_app_model_ref...). */
	void (*model_ref)(struct sl_model *m);
	void (*model_release)(struct sl_model *m);
	void (*model_used)(struct sl_model *m);
	/* A queued request of `m` left unserved (sl_app_model_left). */
	void (*model_left)(struct sl_model *m, const char *why,
	                   uint64_t retry_ms);
};

struct sl_relay {
	const struct sl_relay_hooks *hooks;
	void *owner; /* the app */

	/* Lent by the app, for as long as it runs. */
	uv_loop_t *loop;
	const struct sl_config *cfg;
	struct sl_curl *curl;
	struct sl_h1 *h1; /* exchanges with http:// upstreams */
	struct sl_stats *stats;
	struct sl_tenants *tenants;
	/* Its upstreams, dense (app_state.h), and where a round-robin starts. */
	struct sl_upstream *const *upstreams;
	const unsigned *n_upstreams;
	unsigned *next_upstream;
	const struct sl_registry *registry; /* the models (registry.h) */
	const bool *stopping;               /* draining, then closing */
	struct sl_tracer *tracer;           /* NULL: traces off (trace.h) */

	/* The relay's own. */
	unsigned exchanges; /* relayed requests not yet finished */
	unsigned watches;   /* of them, watches (SL_PROXY_WATCHES_MAX) */
	struct exchange *exchange_list; /* all of them */
	/*
	 * Streams waiting out --stream-coalesce, oldest first, and the timer
	 * whose ticks read them (proxy_stream.c); each tick numbers its own.
	 * The timer is the app's to open and close, as its other handles.
	 */
	struct exchange *coalesced, *coalesced_last;
	uv_timer_t coalesce_timer;
	uint64_t coalesce_tick;
};

/* A hook, called as a function of the relay. */
static inline void sl_relay_kick_scheduler(struct sl_relay *r)
{
	r->hooks->kick_scheduler(r->owner);
}

#endif

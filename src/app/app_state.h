/*
 * app_state.h: one running sluice, as the pieces of the wiring share it:
 * the loop, the HTTP front end, the models and their upstreams, and how
 * far a start, a reload or a stop has come.
 *
 * The wiring (src/app/) is in pieces, each of which includes only those
 * listed below it here (tests/check_layers.py refuses a loop):
 *
 *   main.c           options, the one-shot actions, then sl_app_run (app.h)
 *   app.c            start-up and shutdown, and the hooks through which
 *                    the relay and the upstreams reach the pieces below
 *   routes.c         which handler answers which method and path; /health
 *   models_api.c     llama-server's router endpoints, with a models: section
 *   app_reload.c     SIGHUP: the keys and the models reloaded
 *   app_discovery.c  upstreams that DNS adds and removes
 *   app_models.c     the models: loads, unloads, their upstreams' events
 *   app_upstreams.c  the table of upstreams: added, drained, stopped
 *   app_state.h      this struct, which every piece reads and writes
 *
 * A lower piece that must tell a higher one something is handed a
 * callback, as the layers below are: every upstream is made with the
 * hooks app.c composes (upstream_hooks: app_models.c's handlers, and
 * app.c's own where a failure at start-up stops sluice and a stopped
 * upstream may end a shutdown); a load that fails at start-up returns its
 * error to app.c, which stops sluice.
 */
#ifndef SLUICE_APP_STATE_H
#define SLUICE_APP_STATE_H

#include "sluice/config/config.h"
#include "sluice/fleet/model.h"
#include "sluice/fleet/registry.h"
#include "sluice/ops/exposition.h"
#include "sluice/ops/status.h"
#include "sluice/relay/relay.h"
#include "sluice/net/curl_loop.h"
#include "sluice/fleet/discovery.h"
#include "sluice/net/h1_client.h"
#include "sluice/net/http.h"
#include "sluice/tenants/keys.h"
#include "sluice/config/models_config.h"
#include "sluice/fleet/pool.h"
#include "sluice/sched/sched.h"
#include "sluice/ops/stats.h"
#include "sluice/ops/trace.h"
#include "sluice/fleet/upstream.h"

#include <stdbool.h>
#include <uv.h>

/* What managed llama-servers were started with before a reload. */
struct sl_old_launch;

struct sl_app {
	uv_loop_t loop;
	const struct sl_config *cfg;
	struct sl_curl curl;
	struct sl_h1 h1; /* exchanges with http:// upstreams (the relay) */
	struct sl_http_server http;
	uv_signal_t sigint, sigterm;
	/* What every upstream is made with (app.c; app_upstreams.c). */
	const struct sl_upstream_hooks *upstream_hooks;
	/*
	 * SIGHUP reloads the keys and the models: the configuration is read
	 * again in a worker thread (reload_work, while `reloading`), and the
	 * new key table swapped in and the models' changes applied on the
	 * loop.
	 */
	uv_signal_t sighup;
	uv_work_t reload_work;
	struct sl_config *reload_cfg; /* what the worker read */
	int reload_rc;
	char reload_err[512];
	bool reloading;
	bool reload_again; /* another SIGHUP came during the reload */
	/*
	 * A reload replaces the models as well (registry.h, retired); the
	 * launch settings that running llama-servers still point to wait in
	 * `old_launches` until those have stopped.
	 */
	struct sl_old_launch *old_launches;
	struct sl_tenants tenants; /* keys: and their state (keys.h) */

	/* Dense: upstreams[i]->index == i, for i < n_upstreams. */
	struct sl_upstream *upstreams[SL_MAX_UPSTREAMS];
	unsigned n_upstreams;        /* not yet stopped */
	struct sl_registry registry; /* the models (registry.h) */
	bool started;                /* start-up is over */
	uint64_t created_s; /* Unix time sluice started: /v1/models' created */
	/*
	 * Every discovery open: each --upstream-dns and each model's dns:
	 * (also its sl_model.discovery); NULL once closed (discovery.h).
	 */
	struct sl_discovery **discoveries;
	unsigned n_discoveries;
	bool upstreams_full;    /* an address found no room; logged once */
	unsigned next_upstream; /* round-robin start among equals */
	/*
	 * The relay (relay.h): what it is lent of the above, its hooks into
	 * the app, and its own exchanges.
	 */
	struct sl_relay relay;
	/* Writes the log's held lines once per turn of the loop (log.h). */
	uv_prepare_t log_turn;
	struct sl_stats stats;
	/*
	 * Prefix affinity (affinity.h): which replica served which prompt
	 * prefixes, for every model (a pick only matches its own model's
	 * replicas); NULL with --affinity off. And how its picks went.
	 */
	struct sl_affinity *affinity;
	unsigned long long affinity_picks[SL_AFFINITY_RESULTS];
	/* --trusted-proxy, parsed: the HTTP server's limits point here. */
	struct sl_cidr *trusted_proxies;
	unsigned n_trusted_proxies;
	/* /metrics (exposition.h): what it reads of the above, and its own. */
	struct sl_exposition exposition;
	/* /status (status.h): the last requests and minutes, for the page. */
	struct sl_status status;
	bool force_stop; /* a second signal: SIGKILL llama-server */
	uv_timer_t drain_timer;
	uv_timer_t flush_timer; /* the grace for the last responses */
	uv_timer_t reap_timer;  /* stops drained upstreams (DNS discovery) */
	bool flushing;          /* waiting for the last connections to close */
	bool ending_all;        /* sl_proxy_end_all() is running */
	bool demo;              /* serving the demo model */
	bool announced;         /* "ready" has been logged */
	bool stopping;          /* draining, then closing */
	bool front_closing;     /* the HTTP server is being closed */
	int exit_code;
	uint64_t start_ms;
	char listen_url[96];
	/*
	 * Traces (trace.h), or NULL when off; at shutdown its spans are
	 * flushed (`tracer_flushing`) before libcurl closes.
	 */
	struct sl_tracer *tracer;
	bool tracer_flushing;
	uint64_t stop_ms; /* when the stop began: the flush's deadline */
};

/*
 * Launch settings that llama-servers started before a reload still point
 * to (sl_upstream.cfg): freed once none of those is left.
 */
struct sl_old_launch {
	struct sl_config *cfg;
	struct sl_strlist args; /* cfg->llama_args */
	struct sl_old_launch *next;
};

#endif

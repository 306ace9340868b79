/*
 * app.h: one running sluice: the loop, the HTTP front end, the models and
 * their upstreams, and the order in which they start and stop.
 *
 * SIGHUP reads the configuration again and applies its keys and models
 * (app_reload.c); every other option stays as started.
 *
 * Start: the listener opens first (so a port clash fails fast), then each
 * model's upstreams start (a model started on demand waits for a request;
 * see struct sl_model). Stop (SIGINT, SIGTERM, or a fatal start-up error): the
 * listener and connections close, every managed llama-server gets SIGTERM
 * and then SIGKILL after --stop-timeout, and once every handle has closed
 * the loop ends. A second signal while stopping kills llama-server at once.
 */
#ifndef SLUICE_APP_H
#define SLUICE_APP_H

#include "sluice/config/config.h"
#include "sluice/fleet/model.h"
#include "sluice/fleet/registry.h"
#include "sluice/ops/exposition.h"
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
#include "sluice/fleet/upstream.h"

#include <stdbool.h>
#include <uv.h>

struct sl_app;

/* What managed llama-servers were started with before a reload. */
struct sl_old_launch;

struct sl_app {
	uv_loop_t loop;
	const struct sl_config *cfg;
	struct sl_curl curl;
	struct sl_h1 h1; /* exchanges with http:// upstreams (the relay) */
	struct sl_http_server http;
	uv_signal_t sigint, sigterm;
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
	unsigned n_upstreams; /* not yet stopped */
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
	bool force_stop;           /* a second signal: SIGKILL llama-server */
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
};

/* Runs sluice until it stops; returns the process exit status. */
int sl_app_run(const struct sl_config *cfg);

/*
 * Starts the shutdown described above, with the given exit status. With
 * status 0 it drains first: no new connections, idle ones closed, requests
 * in flight finish within --drain-timeout. When it passes, each request
 * still owed an answer gets 503 (or, for a stream under way, an error event
 * and its end), and the front closes once those went out.
 */
void sl_app_stop(struct sl_app *app, int exit_code);

/* Called when a request finishes: ends a drain once nothing is left. */
void sl_app_maybe_drained(struct sl_app *app);

/*
 * The ready upstream of `m` with the most room (fewest requests in flight
 * per slot; ties in turn), or NULL with the reason, for the client, in
 * `why` (see sl_pool_pick). Ties go in turn from next_upstream, which the
 * caller advances past the one it sends a request to (a pick only to see
 * that one is ready takes no turn). With a prefix-affinity `key` (or NULL:
 * a pick only to see that one is ready) and --affinity on, the replica
 * that served the request's prefix is preferred within --affinity-margin,
 * and the choice is remembered for the prefixes that follow. With `slo`
 * (or NULL), a request's service level: the replica with the most
 * predicted headroom (sl_pool_pick).
 */
struct sl_upstream *
sl_app_pick_upstream(struct sl_app *app, const struct sl_model *m,
                     bool need_slot, const struct sl_upstream *avoid,
                     const struct sl_affinity_key *key,
                     const struct sl_pool_slo *slo, char *why, size_t size);

/*
 * Whether an upstream of `m` that cannot take work now is expected soon:
 * one starting (a managed llama-server loading its model, at start-up or
 * later; a remote one under its first check, also one DNS discovery just
 * found: when a name's answer moves from one address to another, the old
 * one drains while the new one is checked), a managed llama-server
 * restarting after it exited, or a ready one marked suspect and being
 * checked, or ejected for a while after failures; or a managed model of a
 * models: section that loads on demand. New requests that need a slot
 * then wait in the queue rather than get 503.
 */
bool sl_app_upstream_expected(const struct sl_app *app,
                              const struct sl_model *m);

/*
 * Loading on demand. A request that needs a slot of a managed model that
 * is not running waits in the model's queue and asks for it here (its
 * X-Queue-Ms shows the start); the model is wanted while a request waits. With
 * --max-loaded models running, the least recently used idle one (nothing
 * queued, nothing in flight) is stopped first, and the start waits until it
 * has; when none is idle, the start waits until one is. A model that idles
 * idle-timeout is stopped.
 */
void sl_app_model_demand(struct sl_app *app, struct sl_model *m);

/*
 * The admin's load and unload (llama-server router mode's POST
 * /models/load and /models/unload, models_api.h): a managed model of a
 * models: section starts now, when --max-loaded and --memory-budget leave
 * room; or stops now, when nothing of it is queued or in flight (a model
 * is never stopped under a request). A model already in the state asked
 * for is left as it is. Returns 0, or SL_EINVAL with the reason, for the
 * client, in `why`.
 */
int sl_app_model_load(struct sl_app *app, struct sl_model *m, char *why,
                      size_t size);
int sl_app_model_unload(struct sl_app *app, struct sl_model *m, char *why,
                        size_t size);

/*
 * An exchange (proxy.c) holds `m` from its start to its end: a model a
 * reload removed is freed only once the last one let go.
 */
void sl_app_model_ref(struct sl_model *m);
void sl_app_model_release(struct sl_model *m);

/* A request of `m` was dispatched or finished: it is in use. */
void sl_app_model_used(struct sl_model *m);

/*
 * A queued request of `m` left without being served (`why`, a static
 * string: its client left, its queue-timeout passed, it was shed), told
 * to come back in `retry_ms` (0: told nothing). When nobody waits for `m`
 * any more and it is still loading on demand, its load is stopped once
 * that time and SL_LOAD_CANCEL_GRACE_MS have passed without a request.
 */
void sl_app_model_left(struct sl_model *m, const char *why,
                       uint64_t retry_ms);

/*
 * A remote upstream at `url` of model `m`, started: checked, and used
 * once ready. `origin` ("dns:NAME:PORT") says where it came from, for
 * /health. Returns it, or NULL when SL_MAX_UPSTREAMS are there already
 * (logged once until one goes).
 */
struct sl_upstream *sl_app_add_upstream(struct sl_app *app, struct sl_model *m,
                                        const char *url, const char *origin);

/*
 * Lets `u` go: it drains (no new work; what runs there finishes), then it
 * is stopped and leaves app->upstreams, whose later entries move down.
 */
void sl_app_retire_upstream(struct sl_app *app, struct sl_upstream *u);

/*
 * Lets every model's scheduler act now (after a push, a removal, a freed
 * slot): a few models, each O(1) when it has nothing to do.
 */
void sl_app_kick_scheduler(struct sl_app *app);

/* The /health document: a new JSON object. */
json_t *sl_app_health_json(const struct sl_app *app, bool *any_ready);

#endif

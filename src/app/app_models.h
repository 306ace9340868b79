/*
 * app_models.h: the models sluice serves (app_models.c): the table, loads
 * and unloads, each model's scheduler, and their upstreams' events.
 */
#ifndef SLUICE_APP_MODELS_H
#define SLUICE_APP_MODELS_H

#include "app_state.h"

#include <stdbool.h>
#include <uv.h>

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
void sl_app_model_left(struct sl_model *m, const char *why, uint64_t retry_ms);

/*
 * Lets every model's scheduler act now (after a push, a removal, a freed
 * slot): a few models, each O(1) when it has nothing to do.
 */
void sl_app_kick_scheduler(struct sl_app *app);

/*
 * "sluice is ready on URL", logged once: when the first upstream is ready,
 * or at start-up when there is none to wait for.
 */
void app_announce_ready(struct sl_app *app);

/* A new model of the table (`name` is taken; conf may be NULL). */
struct sl_model *app_model_new(struct sl_app *app, char *name,
                               const struct sl_model_config *conf);
void app_model_free(struct sl_model *m);

/*
 * What a managed model's llama-servers are started with (m->upstream_cfg,
 * m->llama_args).
 */
void app_plan_upstream_cfg(struct sl_model *m);

/*
 * Starts the llama-servers of managed model `m` (`why` for the log).
 * Returns 0, or the error of the first that could not start: after
 * start-up the model is stopped again; at start-up (app->started false)
 * the caller stops sluice.
 */
int app_load(struct sl_app *app, struct sl_model *m, const char *why);

/*
 * Starts `m` now, unless it waits for a request (preload: false, or no
 * room): returns 0, or app_load's error.
 */
int app_preload(struct sl_app *app, struct sl_model *m, const char *why);

/*
 * Starts what waiting requests want, within --max-loaded and
 * --memory-budget.
 */
void app_start_wanted(struct sl_app *app);

/* A loaded model's idle-timeout passed. */
void app_on_idle_timer(uv_timer_t *t);

/* Lets every upstream of `m` from `origin` (NULL: any) drain and go. */
void app_retire_pool(struct sl_model *m, const char *origin);

/* Stops following `m`'s DNS name; the upstreams it found go. */
void app_close_model_discovery(struct sl_model *m);

/* A model the configuration no longer has: it goes (see app_models.c). */
void app_remove_model(struct sl_app *app, struct sl_model *m);

/* Frees `m` if it is removed and nothing refers to it any more. */
void app_maybe_free_model(struct sl_model *m);

/* Closes the timers of `m` (APP_MODEL_TIMERS of them), each with `cb`. */
#define APP_MODEL_TIMERS 3
void app_close_model_timers(struct sl_model *m, uv_close_cb cb);

/*
 * The upstreams' events (upstream.h, struct sl_upstream_hooks), as they
 * concern the models; app.c composes them into the hooks.
 * app_upstream_fatal returns whether it dealt with the failure (a model
 * started after start-up stops, and its queued requests fail); when not,
 * it was a first start, and sluice stops. app_upstream_stopped takes the
 * upstream out of its model and the table.
 */
void app_upstream_changed(struct sl_upstream *u, enum sl_upstream_state old);
bool app_upstream_fatal(struct sl_upstream *u, const char *why);
void app_upstream_stopped(struct sl_upstream *u);
bool app_may_eject(const struct sl_upstream *u);
bool app_upstream_waiting(const struct sl_upstream *u);
void app_upstream_capacity(struct sl_upstream *u);

#endif

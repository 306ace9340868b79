/*
 * app_upstreams.h: the table of upstreams (app_state.h, `upstreams`,
 * dense): each one added, started, drained and stopped (app_upstreams.c).
 */
#ifndef SLUICE_APP_UPSTREAMS_H
#define SLUICE_APP_UPSTREAMS_H

#include "app_state.h"

/*
 * Starts one upstream of `m`: a managed llama-server when url is NULL.
 * `name`, when given, replaces the upstream's own ("managed" or its URL)
 * in /health, the metrics and ?upstream=. Returns 0, or SL_EINVAL (the
 * table or the model's pool is full) or the start's error, logged.
 */
int app_add_upstream(struct sl_app *app, struct sl_model *m, const char *url,
                     const char *name);

/*
 * A remote upstream at `url` of model `m`, started: checked, and used
 * once ready. `origin` ("dns:NAME:PORT") says where it came from, for
 * /health. Returns it, or NULL when SL_MAX_UPSTREAMS are there already
 * (logged once until one goes).
 */
struct sl_upstream *sl_app_add_upstream(struct sl_app *app, struct sl_model *m,
                                        const char *url, const char *origin);

/* `u` stopped: it leaves the table, whose later entries move down. */
void app_drop_upstream(struct sl_app *app, struct sl_upstream *u);

/*
 * Lets `u` go: it drains (no new work; what runs there finishes), then it
 * is stopped and leaves app->upstreams, whose later entries move down.
 */
void sl_app_retire_upstream(struct sl_app *app, struct sl_upstream *u);

/* Stops, from the reap timer, the draining upstreams with nothing left. */
void app_stop_drained(struct sl_app *app);

/* Frees the old launch settings no upstream points to any more. */
void app_free_old_launches(struct sl_app *app);

#endif

/*
 * app_impl.h: what the pieces of the app share (app.h is what the rest of
 * sluice sees).
 *
 * app.c starts sluice, wires the modules together and stops it;
 * app_models.c keeps the model table and loads and unloads models;
 * app_discovery.c follows upstreams that DNS adds and removes;
 * app_reload.c applies a SIGHUP's configuration.
 */
#ifndef SLUICE_APP_IMPL_H
#define SLUICE_APP_IMPL_H

#include "app.h"

/*
 * Launch settings that llama-servers started before a reload still point
 * to (sl_upstream.cfg): freed once none of those is left.
 */
struct sl_old_launch {
	struct sl_config *cfg;
	struct sl_strlist args; /* cfg->llama_args */
	struct sl_old_launch *next;
};

/*
 * The functions one piece calls in another, by the piece that defines
 * them; each is described where it is defined.
 */
/* app.c */
void app_maybe_done(struct sl_app *app);
void app_plan_upstream_cfg(struct sl_model *m);
int app_start_models(struct sl_app *app);
void app_warn_if_locked(const struct sl_app *app, const char *when,
                        const struct sl_keys *keys);
void app_warn_unknown_models(const struct sl_app *app, const char *when);

/* app_models.c */
void app_announce_ready(struct sl_app *app);
void app_on_idle_timer(uv_timer_t *t);
void app_load(struct sl_app *app, struct sl_model *m, const char *why);
void app_start_wanted(struct sl_app *app);
void app_on_upstream_stopped(struct sl_upstream *u);
extern const struct sl_upstream_hooks app_upstream_hooks;
extern const struct sl_relay_hooks app_relay_hooks;
/* Points app->exposition at what /metrics reads (exposition.h). */
void app_lend_exposition(struct sl_app *app);
struct sl_model *app_model_new(struct sl_app *app, char *name,
                               const struct sl_model_config *conf);
void app_model_free(struct sl_model *m);
int app_add_upstream(struct sl_app *app, struct sl_model *m, const char *url,
                     const char *name);
void app_preload(struct sl_app *app, struct sl_model *m, const char *why);
void app_maybe_free_model(struct sl_model *m);
/* Closes the timers of `m` (APP_MODEL_TIMERS of them), each with `cb`. */
#define APP_MODEL_TIMERS 3
void app_close_model_timers(struct sl_model *m, uv_close_cb cb);
void app_retire_pool(struct sl_model *m, const char *origin);
void app_close_model_discovery(struct sl_model *m);
void app_remove_model(struct sl_app *app, struct sl_model *m);

/* app_discovery.c */
void app_stop_drained(struct sl_app *app);
struct sl_discovery *app_follow(struct sl_app *app, struct sl_model *m,
                                const char *target);
int app_start_discoveries(struct sl_app *app);
void app_close_discoveries(struct sl_app *app);

/* app_reload.c */
void app_free_old_launches(struct sl_app *app);
void app_on_sighup(uv_signal_t *h, int signum);

#endif

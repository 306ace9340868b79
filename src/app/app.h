/*
 * app.h: one running sluice: the loop, the HTTP front end, the models and
 * their upstreams, and the order in which they start and stop.
 *
 * SIGHUP reads the configuration again and applies its keys and models
 * (app_reload.c); every other option stays as started. app_state.h says
 * how the wiring is put together.
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

struct sl_app;

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

#endif

/*
 * app_reload.h: SIGHUP: the keys and the models reloaded (app_reload.c),
 * and the warnings a configuration's keys get, at start and at each
 * reload.
 */
#ifndef SLUICE_APP_RELOAD_H
#define SLUICE_APP_RELOAD_H

#include "app_state.h"

/* The SIGHUP handler (app->sighup.data is the app). */
void app_on_sighup(uv_signal_t *h, int signum);

/*
 * Warnings, each prefixed with `when` ("" at start, "SIGHUP: " after a
 * reload): a keys: section with no key locks every client out; a key
 * names a model sluice does not serve.
 */
void app_warn_if_locked(const struct sl_app *app, const char *when,
                        const struct sl_keys *keys);
void app_warn_unknown_models(const struct sl_app *app, const char *when);

#endif

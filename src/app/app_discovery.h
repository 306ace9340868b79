/*
 * app_discovery.h: upstreams that DNS adds and removes (app_discovery.c).
 */
#ifndef SLUICE_APP_DISCOVERY_H
#define SLUICE_APP_DISCOVERY_H

#include "app_state.h"

/*
 * A discovery of `target` whose addresses join model `m`, started; NULL,
 * logged, when it cannot be.
 */
struct sl_discovery *app_follow(struct sl_app *app, struct sl_model *m,
                                const char *target);

/* Every discovery of the configuration, started: 0 or SL_EINVAL. */
int app_start_discoveries(struct sl_app *app);

/* Stopping: the upstreams stay as they are now. */
void app_close_discoveries(struct sl_app *app);

#endif

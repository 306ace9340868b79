/*
 * models_api.h: llama-server's router endpoints, where a models: section
 * makes sluice the router.
 *
 * llama-server's router mode (--models-dir, --models-preset) runs one
 * llama-server per model, on demand, and lets its admin act on them:
 * POST /models/load and POST /models/unload {"model": NAME}, POST /models
 * {"model": REPO} (download one from Hugging Face), DELETE
 * /models?model=NAME (delete a downloaded one), and GET /models/sse (the
 * models' state changes as events). Without a models: section sluice
 * relays these to its upstream, router or not (endpoints.c). With one,
 * sluice is the router, and they mean:
 *
 *   POST /models/load     a managed model starts now, as a request naming
 *                         it would start it, when --max-loaded and
 *                         --memory-budget leave room
 *   POST /models/unload   a managed model stops now, when nothing of it
 *                         is queued or in flight
 *   POST /models          501: the models are the configuration file's
 *   DELETE /models        (edit it, then SIGHUP)
 *   GET /models/sse       501: /v1/models and /health say the states
 *
 * Load and unload answer {"success": true}, as llama-server does, also
 * when the model is in that state already. Each is an admin action, as
 * through any upstream (routes.c checks the key first).
 */
#ifndef SLUICE_MODELS_API_H
#define SLUICE_MODELS_API_H

#include "app_state.h"
#include "sluice/net/http.h"
#include "sluice/relay/proxy.h"

#include <stdbool.h>

/* Whether sluice answers `ep` itself: a router endpoint, with models:. */
bool sl_models_api_owns(const struct sl_app *app, const struct sl_endpoint *ep);

/* Answers req, a request for endpoint ep that sl_models_api_owns. */
void sl_models_api_handle(struct sl_app *app, struct sl_http_request *req,
                          const struct sl_endpoint *ep);

#endif

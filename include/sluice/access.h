/*
 * access.h: who may call what, and from which web origins.
 *
 * Clients' keys (--api-key, --api-key-file) guard every endpoint but the
 * health checks; the admin key (--admin-key) guards what changes
 * llama-server's state and, when set, /metrics. CORS follows llama-server:
 * preflights are answered without a key, and every answer names the
 * allowed origin (--cors-origin). These keys are the clients'; the key sluice
 * uses upstream is another and never leaves sluice.
 */
#ifndef SLUICE_ACCESS_H
#define SLUICE_ACCESS_H

#include "sluice/app.h"
#include "sluice/http.h"

#include <stdbool.h>

enum sl_access {
	SL_ACCESS_PUBLIC,  /* /health, /ready, /v1/health: no key */
	SL_ACCESS_CLIENT,  /* a client key, when any is set */
	SL_ACCESS_METRICS, /* /metrics: the admin key when set, else CLIENT */
	SL_ACCESS_ADMIN,   /* changes llama-server's state: the admin key */
};

/*
 * Whether req may use an endpoint of the given level. When not, it has
 * been answered (401 without a valid key, 403 for an admin action without
 * the admin key) and belongs to the server again.
 */
bool sl_access_allow(struct sl_app *app, struct sl_http_request *req,
                     enum sl_access level);

/*
 * Answers req when it is a CORS preflight (OPTIONS) and returns true;
 * false for any other request.
 */
bool sl_access_preflight(struct sl_app *app, struct sl_http_request *req);

#endif

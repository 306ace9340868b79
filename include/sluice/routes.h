/*
 * routes.h: which handler answers which method and path.
 *
 * Unknown paths get 404, known paths with another method 405 with an Allow
 * header, both as OpenAI-shaped errors. HEAD is answered wherever GET is.
 */
#ifndef SLUICE_ROUTES_H
#define SLUICE_ROUTES_H

#include "sluice/app.h"
#include "sluice/http.h"

/* The HTTP server's handler; `data` is the struct sl_app. */
void sl_routes_dispatch(struct sl_http_request *req, void *data);

#endif

/*
 * routes.h: which handler answers which method and path.
 *
 * Unknown paths get 404, known paths with another method 405 with an Allow
 * header, both as OpenAI-shaped errors. HEAD is answered wherever GET is.
 */
#ifndef SLUICE_ROUTES_H
#define SLUICE_ROUTES_H

#include "sluice/net/http.h"

#include <stdbool.h>

/* The HTTP server's handler; `data` is the struct sl_app. */
void sl_routes_dispatch(struct sl_http_request *req, void *data);

/*
 * The HTTP server's on_head (http.h): the access check that
 * sl_routes_dispatch() makes first, made on a request's head before its
 * body is read. A request that would be refused for its key (401, 403) is
 * answered now, exactly so; any other goes on (returns true), to be
 * checked again and handled once whole.
 */
bool sl_routes_head(struct sl_http_request *req, void *data);

#endif

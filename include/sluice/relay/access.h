/*
 * access.h: who may call what, and from which web origins.
 *
 * Clients' keys (--api-key, --api-key-file) guard every endpoint but the
 * health checks; the admin key (--admin-key) guards what changes
 * llama-server's state and, when set, /metrics. CORS follows llama-server:
 * preflights are answered without a key, and every answer names the
 * allowed origin (--cors-origin). The configuration file's keys: (keys.h)
 * are client keys too, each naming a tenant with its own models, priority
 * and limits (sl_access_admit). These keys are the clients'; the key sluice
 * uses upstream is another and never leaves sluice.
 */
#ifndef SLUICE_ACCESS_H
#define SLUICE_ACCESS_H

#include "sluice/fleet/model.h"
#include "sluice/net/http.h"
#include "sluice/relay/relay.h"
#include "sluice/tenants/keys.h"

#include <stdbool.h>

enum sl_access {
	SL_ACCESS_PUBLIC,  /* /health, /ready, /v1/health: no key */
	SL_ACCESS_CLIENT,  /* a client key, when any is set */
	SL_ACCESS_METRICS, /* /metrics: the admin key when set, else CLIENT */
	SL_ACCESS_ADMIN,   /* changes llama-server's state: the admin key */
	/*
	 * /status and its document: as METRICS, and the key may also come
	 * as the password of HTTP Basic credentials (any user name), which
	 * a refusal asks for (401 with WWW-Authenticate): a browser cannot
	 * send a bearer key when a person opens a page, but asks for those.
	 */
	SL_ACCESS_STATUS,
};

/*
 * Whether req may use an endpoint of the given level. When not, it has
 * been answered (401 without a valid key, 403 for an admin action without
 * the admin key) and belongs to the server again. It reads the method,
 * path and headers, never the body: sl_routes_head() calls it on a head.
 */
bool sl_access_allow(struct sl_relay *relay, struct sl_http_request *req,
                     enum sl_access level);

/*
 * The tenant checks of a request whose key is one of keys: (keys.h), made
 * once it is validated and its model `m` is known (`named`: the name the
 * request used, NULL when it named none): the model must be one the key
 * may use (sl_access_model_allowed), else it is answered 404
 * model_not_found as an unknown model is; a `limited` request (one that
 * takes a slot) must be within the key's rpm, tpm and max-concurrent, else
 * 429 with OpenAI's shape and headers; a tpm is checked against the
 * request's reservation (keys.h), from `checked` (its max_tokens, its
 * outputs and its body), and the reservation noted in req->info for the
 * request's end.
 * *priority comes in as the request asked (or the default when
 * checked->priority_given is false) and goes out as granted. Every answer
 * to the request then carries the key's rate-limit headers and, when
 * `limited`, X-Priority. Its usage counts under m's name. Returns false
 * when req has been answered. Requests without a tenant pass, their
 * answers with X-Priority when `limited`.
 */
struct sl_request;
bool sl_access_admit(struct sl_relay *relay, struct sl_http_request *req,
                     bool limited, double *priority,
                     const struct sl_request *checked, struct sl_model *m,
                     const char *named);

/*
 * Whether `key` may use model `m`, the model that serves the request (after
 * aliases and the default). A key's list names models or their aliases, and
 * a name counts for the model it stands for, so a key listing `tiny` may
 * use it by any alias. With the one model of --model or --upstream, which
 * takes any name in a request, the list is compared with that model's own
 * name (--model-name): a key listing `demo` may send any name, one listing
 * only `tiny` may use nothing, whatever name a request gives.
 */
bool sl_access_model_allowed(struct sl_relay *relay, const struct sl_key *key,
                             const struct sl_model *m);

/*
 * Whether req is a CORS preflight: OPTIONS while CORS is on. Such a
 * request is answered by sl_access_preflight(), without a key.
 */
bool sl_access_is_preflight(const struct sl_relay *relay,
                            const struct sl_http_request *req);

/*
 * Answers req when it is a CORS preflight (OPTIONS) and returns true;
 * false for any other request.
 */
bool sl_access_preflight(struct sl_relay *relay, struct sl_http_request *req);

#endif

/*
 * proxy.h: relaying a client's request to an upstream llama-server and its
 * answer back, streamed as it is generated.
 *
 * Each relayed request is an exchange: the client's request on one side, a
 * libcurl transfer to an upstream on the other. sluice validates the JSON
 * body, adds the upstream's API key and forwards it. A non-streamed answer
 * is relayed with its status and body; a streamed one ("stream": true) as
 * Server-Sent Events, one event per HTTP chunk, each written the moment it
 * is complete. A client that leaves cancels the transfer at once, which
 * closes the upstream connection so llama-server frees its slot.
 *
 * Glossary:
 *   endpoint     a path sluice relays, with what ends its stream
 *   exchange     one relayed request, from validation to its last byte
 *   end marker   what ends a stream: "data: [DONE]" on the OpenAI
 *                endpoints; on /completion the transfer's end, once every
 *                prompt has sent its chunk with "stop": true; on Anthropic's
 *                /v1/messages and /v1/responses the transfer's end
 *   passed       upstream response headers relayed to the client: all but
 *   headers      the hop-by-hop ones and those sluice writes itself
 *   per-upstream an endpoint that describes one llama-server (/props,
 *                /slots): "?upstream=NAME" picks which; with several
 *                upstreams of the model a GET without it answers for each
 *   model        whose upstreams and queue serve the request (model.h): the
 *                body's "model", or "?model=NAME" for a request without a
 *                JSON body, or the default model
 */
#ifndef SLUICE_PROXY_H
#define SLUICE_PROXY_H

#include "sluice/fleet/model.h"
#include "sluice/json/assemble.h"
#include "sluice/net/http.h"
#include "sluice/relay/endpoints.h"
#include "sluice/relay/relay.h"
#include "sluice/sched/sched.h"

#include <stdbool.h>

/*
 * Upstream response header lines relayed to a client, in bytes: a bound on
 * what an upstream can make sluice hold and write per answer. llama-server
 * sends a few hundred bytes; lines past the bound are dropped.
 */
#define SL_PROXY_PASSED_HEADERS_MAX (8u * 1024)
/*
 * A relayed plain answer is kept, up to this many bytes, so that its token
 * counts can be read from its usage at the end (llama-server's answer to
 * 50,000 tokens of text fits); a longer one goes uncounted. The first
 * room taken is the smaller bound, doubled as the answer grows.
 */
#define SL_PROXY_ANSWER_KEEP_MAX (256u * 1024)
#define SL_PROXY_ANSWER_KEEP_MIN 2048u
/*
 * Of a plain answer that is not a generation's (embeddings, rerank), only
 * the first bytes are kept: the OpenAI forms put their usage before the
 * vectors or results, which can run to megabytes.
 */
#define SL_PROXY_USAGE_PREFIX_MAX 4096u
/*
 * Watches open at once (sluice-wide). Each holds an upstream connection,
 * and so one of llama-server's HTTP threads (--threads-http: by default
 * two more than its slots, or the cores less one), for as long as it
 * lasts: a few serve a web UI or two, and leave llama-server threads for
 * the rest. The connections watches hold are added to their upstream's
 * pool, and they take none of its slots (upstream.h, watches), so that no
 * generation waits for one. Past this many: 503.
 */
#define SL_PROXY_WATCHES_MAX 4u
/* One relayed header's value, at most: longer ones are dropped. */
#define SL_PROXY_PASSED_VALUE_MAX 4096u
/*
 * The names an upstream's Connection headers list, in bytes. Those fields
 * are hop-by-hop; a longer list cannot be honoured, so then none of the
 * upstream's extra headers is passed on.
 */
#define SL_PROXY_CONNECTION_MAX 256u

/*
 * 404 in OpenAI's own words for a model nobody serves ("The model `X`
 * does not exist.", code model_not_found), so that SDKs raise their
 * NotFoundError. A long name is quoted cut short.
 */
void sl_proxy_respond_unknown_model(struct sl_http_request *req,
                                    const char *name);

/* Starts an exchange for `req` on endpoint `ep`; answers errors itself. */
void sl_proxy_handle(struct sl_relay *relay, struct sl_http_request *req,
                     const struct sl_endpoint *ep);

/* The scheduler's callbacks: a batch leaves the queue; a wait ran out. */
void sl_proxy_dispatch(void *ctx, struct sl_sched_item **items, unsigned n,
                       uint64_t now_ms);
void sl_proxy_expire(void *ctx, struct sl_sched_item *item, uint64_t now_ms);
void sl_proxy_shed(void *ctx, struct sl_sched_item *item, uint64_t now_ms);
/* Its service level went out of reach while it waited (proxy_slo.c). */
void sl_proxy_late(void *ctx, struct sl_sched_item *item, uint64_t now_ms);

/*
 * A drain ran out of time: every exchange still alive gets its proper end
 * now, and its transfer stops. Queued requests, and requests whose answer
 * has not begun, get 503 with Retry-After; a started stream gets an SSE
 * error event, then its terminating chunk; a plain body already half
 * relayed is cut. The client connections stay open to flush these.
 */
void sl_proxy_end_all(struct sl_relay *relay);

/*
 * The watches (GET /models/sse, GET /v1/stream) to `u` (NULL: to every
 * upstream), which would never end by themselves, end now: sluice begins
 * to drain, or `u` is about to stop. One whose answer has begun ends as the
 * upstream's would, one not begun gets 503 saying `why`.
 */
void sl_proxy_end_watches(struct sl_relay *relay, const struct sl_upstream *u,
                          const char *why);

/*
 * The requests waiting in model m's queue get 503 with `message`: its
 * llama-server could not start (loading on demand, app_models.h).
 */
void sl_proxy_fail_queued(struct sl_relay *relay, struct sl_model *m,
                          const char *message);

/*
 * Ends every exchange still alive (queued, or a transfer whose client is
 * gone) and frees them: the last step before the upstreams stop. Every
 * client connection must be closed already.
 */
void sl_proxy_abort_all(struct sl_relay *relay);

#endif

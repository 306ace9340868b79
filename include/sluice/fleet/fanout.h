/*
 * fanout.h: one GET sent to every upstream at once, the answers gathered
 * into one JSON array.
 *
 * With several upstreams, GET /props and GET /slots describe each
 * llama-server: the client gets
 *   [{"upstream": NAME, "status": N, "body": ANSWER}, ...]
 * in the order of the upstream list, NAME as /health names the upstream
 * and ANSWER its JSON answer as it wrote it (numbers untouched). An answer
 * that is not JSON comes as a JSON string; an upstream that did not answer
 * gets status 502 and an error object saying why.
 *
 * Glossary:
 *   part   one upstream's GET and, once done, its answer
 */
#ifndef SLUICE_FANOUT_H
#define SLUICE_FANOUT_H

#include "sluice/net/curl_loop.h"
#include "sluice/fleet/upstream.h"

struct sl_fanout;

/* Every part is done: the owner answers and frees the fanout. */
typedef void (*sl_fanout_cb)(struct sl_fanout *f, void *data);

/*
 * GETs `target` ("/slots?x=1") from each of the n upstreams, with each
 * one's API key, giving up on a part after timeout_ms. Never NULL. Parts
 * that cannot even start count as done at once: when
 * sl_fanout_pending() is 0 on return, cb will not run and the owner
 * answers now.
 */
struct sl_fanout *sl_fanout_start(struct sl_curl *curl,
                                  struct sl_upstream *const *upstreams,
                                  unsigned n, const char *target,
                                  long timeout_ms, sl_fanout_cb cb, void *data);

/* Parts still waiting for their answer. */
unsigned sl_fanout_pending(const struct sl_fanout *f);

/* Parts that got an answer (of any status) from their upstream. */
unsigned sl_fanout_answered(const struct sl_fanout *f);

/* The gathered array as JSON text, malloc'd, owned by the caller. */
char *sl_fanout_json(const struct sl_fanout *f, size_t *len);

/* Stops the parts still running (no callback) and frees f. */
void sl_fanout_free(struct sl_fanout *f);

#endif

/*
 * native_api.h: two simpler request shapes than llama-server's, mapped onto
 * its /completion.
 *
 *   POST /generate, a prompt with sampling settings, answered with the text
 *   and its counts: {"prompt", "max_tokens", "temperature", "top_p",
 *     "top_k", "seed", "stop", "stream", "priority"} -> {"id", "text",
 *     "tokens", "finish_reason", "queue_ms", "latency_ms", "batch_size"};
 *     streamed: {"id", "text"} deltas, then one event with the totals.
 *   POST /infer, a query answered with a response and nothing to tune:
 *     {"query", "priority"} -> {"response", "id"}.
 *
 * Both go through the scheduler like any generation. Unknown fields are
 * ignored, so clients that send more still work; a known field of the wrong
 * type is a 400 that names it.
 */
#ifndef SLUICE_NATIVE_API_H
#define SLUICE_NATIVE_API_H

#include <jansson.h>
#include <stddef.h>

/* Tokens /generate makes when max_tokens is absent. */
#define SL_GENERATE_DEFAULT_TOKENS 16
/* Tokens /infer makes: its requests have no field for it. */
#define SL_INFER_TOKENS 256

/*
 * Every member of a request that sl_generate_body() and sl_infer_body()
 * read, as an X-macro: X("name") for each. A caller may hand them a
 * document of only these members, read from the body's text, rather than
 * the whole body parsed (request.c does, to skip the rest of a wide one),
 * so a member read here must be listed here.
 */
#define SL_NATIVE_MEMBERS(X)                                                   \
	X("prompt")                                                            \
	X("max_tokens")                                                        \
	X("stream")                                                            \
	X("stop")                                                              \
	X("temperature")                                                       \
	X("top_p")                                                             \
	X("top_k")                                                             \
	X("seed")                                                              \
	X("query")

/*
 * The /completion body for a /generate or /infer request, a new object, or
 * NULL with the reason (naming the field) in err. max_tokens is capped at
 * `cap`. The body asks for a stream: sluice always streams from upstream.
 * Only "stop" is read inside: of any other member that is an object or an
 * array, only its kind counts.
 */
json_t *sl_generate_body(json_t *in, unsigned cap, char *err, size_t size);
json_t *sl_infer_body(json_t *in, unsigned cap, char *err, size_t size);

/* What /generate calls finish_reason, from llama-server's stop_type. */
const char *sl_finish_reason(json_t *native_final);

#endif

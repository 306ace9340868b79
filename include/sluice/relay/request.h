/*
 * request.h: validating a client's request body and turning it into the
 * body an upstream gets.
 *
 * This is the pure part of accepting a relayed request: no sockets, no
 * libuv, no HTTP calls. It takes the endpoint, the X-Priority header and
 * the body bytes, and returns either what the exchange needs (priority,
 * whether the client wants a stream, whether sluice must assemble one
 * answer from upstream events, and the upstream body) or the status and
 * message to refuse it with. proxy.c calls it for every request; the unit
 * test and the fuzz target call it directly.
 *
 * A relayed body reaches llama-server as the client wrote it: jansson
 * validates it and reads sluice's fields, and the upstream body is the
 * client's bytes with only sluice's changes spliced in (json_scan.h finds
 * the members), so numbers, spacing and key order are kept. Numbers beyond
 * jansson's range (integers past int64, 1e400) are accepted and relayed:
 * llama-server takes the integers and refuses the reals itself. The native
 * APIs (/generate, /infer) get a new body, mapped onto /completion from
 * the few members they read, which are all that jansson parses of a body
 * that yajl validates.
 *
 * Glossary:
 *   priority   X-Priority if present, else the body's "priority" field
 *              (removed from the body: it is sluice's, not llama-server's),
 *              else normal
 *   assemble   the client wants one answer but sluice asks the upstream
 *              for a stream and gathers it (assemble.h says why): only on
 *              an endpoint with an assembler, with --stream-upstream, and
 *              when sl_assemble_reproducible() says the answer comes out
 *              as llama-server's own; otherwise the plain answer is relayed
 *   splice     what sluice changes in a relayed body: each top-level
 *              "priority" member removed and, when assembled, "stream":
 *              true and (OpenAI endpoints) "stream_options":
 *              {"include_usage": true} set in place or added at the end
 */
#ifndef SLUICE_REQUEST_H
#define SLUICE_REQUEST_H

#include "sluice/fleet/affinity.h"
#include "sluice/json/assemble.h"
#include "sluice/relay/endpoints.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Room for the message of a refusal, client text quoted in it included. */
#define SL_REQUEST_ERROR_MAX 512
/*
 * Characters of a rejected priority value quoted back in the message: enough
 * to recognise it, while a megabyte of junk is not echoed whole.
 */
#define SL_REQUEST_QUOTE_MAX 64

/*
 * The most outputs counted for one request: past any tpm (at most a
 * billion, keys.h) since each reserves a token at least, so that a body
 * asking for more is refused as too large however its count is written.
 */
#define SL_REQUEST_OUTPUTS_MAX (UINT32_C(1) << 30)

/* The parts of sluice's configuration that shape the upstream body. */
struct sl_request_options {
	unsigned max_tokens_cap; /* /generate and /infer */
	bool stream_upstream;    /* plain answers assembled from streams */
	/*
	 * Every body read by jansson, none by the fast path (request.c): for
	 * tests, which compare the two.
	 */
	bool jansson_only;
};

/* What sl_request_validate() learned: the result, or why it refused. */
struct sl_request {
	double priority;
	bool stream;   /* the client wants events */
	bool assemble; /* it wants one answer, built from upstream events */
	/*
	 * It wants one answer that could be assembled (asked for as a
	 * stream, so that its client leaving stops it) were
	 * opts->stream_upstream set; assemble implies it.
	 */
	bool assemblable;
	enum sl_assemble_kind assemble_kind; /* when assemblable */
	bool return_tokens; /* native answers: the client asked for ids */
	/*
	 * The upstream body, malloc'd and NUL-terminated (valid JSON holds no
	 * raw NUL: a NUL in a string is written \u0000), or NULL for endpoints
	 * that take no body. Relayed: the client's bytes, spliced. Owned by
	 * the caller: sl_request_free().
	 */
	char *body;
	size_t body_len;
	/*
	 * The body's "model" when it is a string (without a NUL), malloc'd;
	 * NULL when absent or of another type: the default model then.
	 */
	char *model;
	/* Whether the client named a priority (X-Priority or the body's). */
	bool priority_given;
	/*
	 * The most tokens the upstream may generate for it, for a key's tpm
	 * (keys.h): the largest of "n_predict", "max_tokens",
	 * "max_completion_tokens" and "max_output_tokens" (each of which
	 * llama-server 0.7.0 reads on some endpoint, in an order of its own:
	 * the largest is safe whichever it takes), or -1 when nothing bounds
	 * it: none of them, a negative one (llama-server's "until the context
	 * is full") or one that is no number. 0 for endpoints that generate
	 * nothing (embeddings, rerank).
	 */
	int64_t max_tokens;
	/*
	 * For a key's tpm too: how many outputs the upstream generates for
	 * it, each up to max_tokens (endpoints.h, enum sl_outputs). `choices`
	 * is the outputs of each prompt, as llama-server 0.7.0 reads them:
	 * "n_cmpl" unless absent or null, else "n", a real truncated; 1 for
	 * anything that is no number of at least 1 (which llama-server
	 * refuses, as it does more than its slots). `outputs` is that times
	 * the prompts of a "prompt" array (one for any other "prompt"). Both
	 * at most SL_REQUEST_OUTPUTS_MAX, and 1 on endpoints that read
	 * neither.
	 */
	uint32_t choices;
	uint32_t outputs;
	/*
	 * The body was read by the fast path (request.c): a relayed one
	 * without jansson, a native one with jansson reading only the
	 * members mapped.
	 */
	bool read_fast;
	/*
	 * A relayed body's prefix-affinity key (affinity.h): its messages or
	 * prompt, as written, in hashed blocks; n = 0 for none.
	 */
	struct sl_affinity_key affinity;
	/* On refusal: the HTTP status and one line saying why. */
	int status;
	char error[SL_REQUEST_ERROR_MAX];
};

/*
 * Validates a request for `ep`: `priority_header` is X-Priority's value or
 * NULL; `body` holds `len` bytes (need not be NUL-terminated). Returns 0
 * with the result in *r, or SL_EINVAL with r->status and r->error set (and
 * r->body NULL). Either way *r is fully written; sl_request_free() it.
 */
int sl_request_validate(struct sl_request *r, const struct sl_endpoint *ep,
                        const char *priority_header, const char *body,
                        size_t len, const struct sl_request_options *opts);

/*
 * The upstream body of an assemblable request (r->assemblable) that was
 * validated to be relayed plain, asked for as a stream after all (proxy.c
 * decides when it dispatches): `body` is the r->body validation made; the
 * result is spliced as validation would have spliced it with
 * opts->stream_upstream. Returns 0 with *out malloc'd and NUL-terminated,
 * or SL_EINVAL when `body` is not one JSON object (sluice's own bodies
 * always are).
 */
int sl_request_stream_body(enum sl_assemble_kind kind, const char *body,
                           size_t len, char **out, size_t *out_len);

/* Frees r->body; r may be reused. */
void sl_request_free(struct sl_request *r);

#endif

/*
 * request.h: validating a client's request body and turning it into the
 * body an upstream gets.
 *
 * This is the pure part of accepting a relayed request: no sockets, no
 * libuv, no HTTP calls. It takes the endpoint, the X-Priority header and
 * the body bytes, and returns either what the exchange needs (priority,
 * whether the client wants a stream, whether sluice must assemble one
 * answer from upstream events, and the rewritten upstream body) or the
 * status and message to refuse it with. proxy.c calls it for every request;
 * the unit test and the fuzz target call it directly.
 *
 * Glossary:
 *   priority   X-Priority if present, else the body's "priority" field
 *              (removed from the body: it is sluice's, not llama-server's),
 *              else normal
 *   assemble   the client wants one answer but sluice asks the upstream
 *              for a stream and gathers it (assemble.h says why)
 */
#ifndef SLUICE_REQUEST_H
#define SLUICE_REQUEST_H

#include "sluice/assemble.h"
#include "sluice/proxy.h"

#include <stdbool.h>
#include <stddef.h>

/* Room for the message of a refusal, client text quoted in it included. */
#define SL_REQUEST_ERROR_MAX 512
/*
 * Characters of a rejected priority value quoted back in the message: enough
 * to recognise it, while a megabyte of junk is not echoed whole.
 */
#define SL_REQUEST_QUOTE_MAX 64

/* The parts of sluice's configuration that shape the upstream body. */
struct sl_request_options {
	unsigned max_tokens_cap; /* /generate and /infer */
	bool stream_upstream;    /* plain answers assembled from streams */
};

/* What sl_request_validate() learned: the result, or why it refused. */
struct sl_request {
	double priority;
	bool stream;   /* the client wants events */
	bool assemble; /* it wants one answer, built from upstream events */
	enum sl_assemble_kind assemble_kind; /* when assemble */
	bool return_tokens; /* native answers: the client asked for ids */
	/*
	 * The upstream body, malloc'd and NUL-terminated (JSON escapes any NUL
	 * of the client's strings as \u0000), or NULL for endpoints that take
	 * no body. Owned by the caller: sl_request_free().
	 */
	char *body;
	size_t body_len;
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

/* Frees r->body; r may be reused. */
void sl_request_free(struct sl_request *r);

#endif

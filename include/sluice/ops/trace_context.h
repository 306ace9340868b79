/*
 * trace_context.h: W3C Trace Context (traceparent) and the ids and
 * sampling decisions of sluice's traces (trace.h).
 *
 * Pure logic, apart from the one read of the kernel's random bytes that
 * seeds the id generator: unit-tested without sockets.
 *
 * Glossary:
 *   trace id      16 bytes naming one trace, shared by every span in it.
 *   span id       8 bytes naming one span inside its trace.
 *   traceparent   the header that carries a caller's trace id, its span id
 *                 (the parent of ours) and its flags:
 *                 "00-<32 hex>-<16 hex>-<2 hex>" (W3C Trace Context).
 *   sampled       flag bit 0: the caller records its span, and asks its
 *                 callees to record theirs.
 *   ratio         the share of traces a traceidratio sampler keeps, told
 *                 by their ids alone, so that every service that samples
 *                 at one ratio keeps the same traces.
 */
#ifndef SLUICE_TRACE_CONTEXT_H
#define SLUICE_TRACE_CONTEXT_H

#include "sluice/config/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_TRACE_ID_BYTES 16
#define SL_SPAN_ID_BYTES 8
/* "00-" 32 hex "-" 16 hex "-" 2 hex: 55 characters, the version's. */
#define SL_TRACEPARENT_LEN 55
/* The sampled bit of trace-flags. */
#define SL_TRACE_FLAG_SAMPLED 0x01u

/* A caller's context, as its traceparent says it. */
struct sl_trace_parent {
	uint8_t trace_id[SL_TRACE_ID_BYTES];
	uint8_t span_id[SL_SPAN_ID_BYTES];
	uint8_t flags;
};

/*
 * Reads a traceparent header's value as W3C Trace Context level 1 says:
 * version 00 exactly as above, in lowercase hex, with neither id all
 * zeros; a later version (not ff) read by its first 55 characters when
 * what follows them starts with '-'. Returns 0, or SL_EINVAL for anything
 * else (the request then starts a trace of its own).
 */
int sl_traceparent_parse(const char *value, struct sl_trace_parent *out);

/*
 * Writes "00-<trace id>-<span id>-<flags>" and its NUL into out, which
 * holds at least SL_TRACEPARENT_LEN + 1 bytes.
 */
void sl_traceparent_format(char *out, const uint8_t *trace_id,
                           const uint8_t *span_id, uint8_t flags);

/* Lowercase hex of n bytes into out (2n + 1 bytes with its NUL). */
void sl_trace_hex(char *out, const uint8_t *bytes, size_t n);

/*
 * Ids: xoshiro256** (Blackman and Vigna), seeded once from getrandom(2),
 * so that no id costs a system call. Ids need to be unique and
 * unpredictable enough to spread (W3C asks for randomness in the trace
 * id's right 7 bytes, which the ratio samplers read), not secret.
 */
struct sl_trace_rng {
	uint64_t s[4];
};

/* Seeds from the kernel; falls back to the clock and pid if it says no. */
void sl_trace_rng_seed(struct sl_trace_rng *r);
/* Seeds from `seed` alone: the same ids every run, for tests. */
void sl_trace_rng_seed_with(struct sl_trace_rng *r, uint64_t seed);
/* A new id of n bytes, never all zeros (which means "none"). */
void sl_trace_rng_id(struct sl_trace_rng *r, uint8_t *out, size_t n);

/*
 * Whether a request is sampled (recorded and exported), as
 * OTEL_TRACES_SAMPLER's sampler decides it: `parent` is the caller's
 * context, or NULL when it sent none; `ratio` is the traceidratio
 * samplers' share. traceidratio keeps a trace when its id's last 7 bytes,
 * read as a number, are below ratio times 2^56 (OpenTelemetry's
 * TraceIdRatioBased with W3C's random bytes): 0 keeps none, 1 all.
 */
bool sl_trace_sampled(enum sl_otel_sampler sampler, double ratio,
                      const uint8_t *trace_id,
                      const struct sl_trace_parent *parent);

#endif

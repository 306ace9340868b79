/*
 * otlp.h: what one traced request leaves behind, and its spans encoded as
 * OTLP (OpenTelemetry's protocol) for an export over HTTP.
 *
 * A traced request carries a struct sl_trace_span while it runs
 * (http.h's req->info.trace: the relay fills it in); when it ends, the
 * tracer (trace.h) copies what the spans need into a struct
 * sl_trace_record, held in a ring until it is exported. This module turns
 * a batch of records into one ExportTraceServiceRequest: each record is up
 * to three spans (src/ops/README.md, Traces, says which and with what).
 *
 * Protobuf is written by hand, here: no Debian package ships the OTLP
 * .proto files or code generated from them for C, and the subset sluice
 * writes (varints, fixed64 times, length-delimited messages, some twenty
 * fields) is smaller than a generator's runtime. The field numbers are
 * opentelemetry-proto's (trace/v1/trace.proto, common/v1/common.proto,
 * resource/v1/resource.proto), and a test decodes the output with the
 * OTLP definitions OpenTelemetry's npm package ships (tests/otlp/). The
 * JSON form follows OTLP/JSON: proto3's JSON mapping with lowerCamelCase
 * names, 64-bit integers as decimal strings, enums as numbers, and trace
 * and span ids as hex strings (not base64).
 *
 * Glossary:
 *   record    one finished request's trace facts (struct sl_trace_record).
 *   resource  who sent the spans: service.name and the attributes of
 *             OTEL_RESOURCE_ATTRIBUTES.
 */
#ifndef SLUICE_OTLP_H
#define SLUICE_OTLP_H

#include "sluice/config/config.h"
#include "sluice/config/otel_syntax.h"
#include "sluice/net/http.h"
#include "sluice/ops/trace_context.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A model's name as a span keeps it, in bytes (longer: cut). */
#define SL_TRACE_MODEL_MAX 127
/*
 * Finish reasons kept, one an output (choice) in order: a request asks
 * for one output nearly always; past this many the rest go unreported.
 */
#define SL_TRACE_REASONS_MAX 4
#define SL_TRACE_REASON_MAX 31
/*
 * A client's tracestate kept and passed on, in bytes: W3C asks that at
 * least 512 characters be propagated; a longer one is dropped whole
 * rather than cut between its members.
 */
#define SL_TRACESTATE_MAX 512

/*
 * One request's trace while it runs (req->info.trace), made by
 * sl_trace_begin (trace.h) and filled in by the relay. Times are
 * sl_now_ns()'s (monotonic); 0 means "did not happen".
 */
struct sl_trace_span {
	uint8_t trace_id[SL_TRACE_ID_BYTES];
	uint8_t span_id[SL_SPAN_ID_BYTES];     /* the request's (server) */
	uint8_t parent_id[SL_SPAN_ID_BYTES];   /* the client's span */
	uint8_t upstream_id[SL_SPAN_ID_BYTES]; /* the upstream call's */
	uint8_t queue_id[SL_SPAN_ID_BYTES];    /* the wait in the queue's */
	bool has_parent;   /* the client sent a valid traceparent */
	bool sampled;      /* recorded and exported; else only propagated */
	const char *route; /* http.route: the endpoint's path (static) */
	uint64_t queued_ns, dispatched_ns, first_token_ns, upstream_end_ns;
	const char *upstream_method; /* static; NULL: never sent */
	long upstream_status;        /* 0: no answer */
	unsigned attempts;           /* sent upstream this many times */
	/* GenAI's (NULL operation: the endpoint generates nothing). */
	const char *operation; /* gen_ai.operation.name (static) */
	char request_model[SL_TRACE_MODEL_MAX + 1];
	char response_model[SL_TRACE_MODEL_MAX + 1];
	int64_t max_tokens; /* -1: not bounded by the request */
	char finish_reasons[SL_TRACE_REASONS_MAX][SL_TRACE_REASON_MAX + 1];
	unsigned n_reasons;
};

/*
 * Copies up to n bytes of `text` into dst (cap bytes with its NUL), cut to
 * fit, as a span may hold it: valid UTF-8 without control bytes, others
 * replaced by '?'. For text that came from a client or an upstream.
 */
void sl_trace_copy_text(char *dst, size_t cap, const char *text, size_t n);

/* One finished request: what its spans say (see the top). */
struct sl_trace_record {
	struct sl_trace_span span; /* its times now Unix nanoseconds */
	uint64_t start_ns, end_ns; /* the request's, Unix nanoseconds */
	char *trace_state;         /* the client's, malloc'd; NULL: none */
	const char *method;        /* static */
	int status;                /* of the response; 499: client left */
	char upstream[96];         /* its URL, "" when never sent */
	int64_t input_tokens, output_tokens; /* -1: not known */
	const char *priority;                /* its class (static), or NULL */
	int64_t queue_ms;                    /* -1: never queued */
	unsigned batch_size;                 /* 0: not batched */
	const char *tenant;  /* its key's name (lives as long as sluice) */
	const char *outcome; /* ok, rejected, failed, cancelled (static) */
	const char *reason;  /* why sluice refused it (static), or NULL */
	char request_id[SL_HTTP_REQUEST_ID_MAX + 1];
};

/* The spans a record makes: the request's, and its queue's and call's. */
unsigned sl_trace_record_spans(const struct sl_trace_record *r);

/* Who sends the spans. */
struct sl_otlp_resource {
	const char *service_name;
	/* OTEL_RESOURCE_ATTRIBUTES'; a service.name among them is skipped */
	const struct sl_otel_pair *attributes;
	unsigned n_attributes;
};

/*
 * The ExportTraceServiceRequest of n records, in the protocol's form
 * (protobuf bytes, or JSON text without a NUL): *out malloc'd, *len its
 * bytes.
 */
void sl_otlp_encode(enum sl_otel_protocol protocol,
                    const struct sl_otlp_resource *resource,
                    struct sl_trace_record *const *records, unsigned n,
                    char **out, size_t *len);

#endif

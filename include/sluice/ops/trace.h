/*
 * trace.h: OpenTelemetry traces of the requests sluice relays, exported
 * to a collector over OTLP/HTTP (src/ops/README.md, Traces).
 *
 * Off unless an endpoint is set (--otel-exporter-otlp-endpoint or its
 * twin OTEL_EXPORTER_OTLP_ENDPOINT, config.h), and then the tracer is
 * NULL everywhere: a request pays one pointer test. On, a request to a
 * relayed endpoint begins its trace as it is routed (sl_trace_begin: its
 * ids, the client's traceparent honoured, the sampler's verdict), the
 * relay fills in its times and GenAI facts and sends llama-server a
 * traceparent of its own (sl_trace_traceparent), and when it ends its
 * spans wait in a ring for an export (sl_trace_finish: a copy, O(1)).
 *
 * Exports follow OpenTelemetry's batch span processor: every
 * --otel-bsp-schedule-delay, or as soon as a batch is full, the spans
 * waiting are encoded (otlp.h) and POSTed through the loop's libcurl
 * multi handle (curl_loop.h), one export at a time and never on a
 * request's path. Memory is bounded: the ring holds at most
 * --otel-bsp-max-queue-size spans, and a request that finds it full (the
 * collector slow or down) has its spans dropped and counted, as are those
 * of an export that fails; nothing is retried. On shutdown the spans
 * waiting are flushed within the drain's deadline (sl_tracer_drain).
 *
 * Glossary:
 *   export    one POST of a batch of spans to the collector.
 *   dropped   spans never exported, by reason: queue_full, export_failed
 *             (the collector refused or did not answer in time), shutdown
 *             (still waiting when the drain's deadline came).
 */
#ifndef SLUICE_TRACE_H
#define SLUICE_TRACE_H

#include "sluice/base/metrics.h"
#include "sluice/config/config.h"
#include "sluice/net/curl_loop.h"
#include "sluice/net/http.h"
#include "sluice/ops/otlp.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/*
 * A flush at shutdown gets at least this long, even where the drain's own
 * deadline has passed or there is none (--drain-timeout 0, a failed
 * start): one export to a collector that answers.
 */
#define SL_TRACE_FLUSH_MIN_MS 1000

enum sl_trace_drop {
	SL_TRACE_DROP_QUEUE_FULL,
	SL_TRACE_DROP_EXPORT_FAILED,
	SL_TRACE_DROP_SHUTDOWN,
	SL_TRACE_DROP_REASONS,
};

struct sl_tracer;

/*
 * The tracer cfg asks for, on `loop`, exporting through `curl`: *out is
 * NULL when tracing is off (no endpoint, or --otel-sdk-disabled). Returns
 * 0, or SL_EINVAL with one line in err (the options were checked as they
 * were read, so only what that could not see).
 */
int sl_tracer_new(uv_loop_t *loop, struct sl_curl *curl,
                  const struct sl_config *cfg, struct sl_tracer **out,
                  char *err, size_t size);

/* Where spans go, its userinfo masked (for the start-up line). */
const char *sl_tracer_url_shown(const struct sl_tracer *t);

/*
 * Begins req's trace, once (a second call does nothing; so does a NULL
 * tracer): req->info.trace gets a struct sl_trace_span, freed with the
 * request, with its ids and whether it is sampled. A valid traceparent
 * from the client makes it a child of the client's span, in its trace.
 * `route` is the endpoint's path (static), its http.route.
 */
void sl_trace_begin(struct sl_tracer *t, struct sl_http_request *req,
                    const char *route);

/*
 * The traceparent the upstream gets for req: its trace, the upstream
 * call's span and the sampled flag, into out (SL_TRACEPARENT_LEN + 1
 * bytes). False when req is not traced (no header then).
 */
bool sl_trace_traceparent(const struct sl_http_request *req, char *out);

/*
 * The client's tracestate, passed on with the traceparent as W3C asks:
 * NULL when there is none, req has no valid traceparent from its client,
 * or it is over SL_TRACESTATE_MAX bytes. Lives as long as req.
 */
const char *sl_trace_tracestate(const struct sl_http_request *req);

/*
 * req has ended (outcome: stats.h's word for how): its spans, when it is
 * sampled, wait for an export, or are dropped when the ring is full.
 */
void sl_trace_finish(struct sl_tracer *t, struct sl_http_request *req,
                     const char *outcome);

/*
 * Exports what waits, batch after batch, until nothing is left or the
 * loop's clock reaches deadline_ms; then drops what is left (shutdown)
 * and calls done(data) once, from the loop, never inside this call.
 * Called again, it moves the deadline (a second signal: now).
 */
void sl_tracer_drain(struct sl_tracer *t, uint64_t deadline_ms,
                     void (*done)(void *), void *data);

/*
 * Closes the tracer's handle and frees it (at once if t is NULL). An
 * export in flight is aborted; call it before sl_curl_close.
 */
void sl_tracer_close(struct sl_tracer *t);

/* Its counters in Prometheus text; nothing for a NULL tracer. */
void sl_trace_write_metrics(const struct sl_tracer *t, struct sl_text *out);

#endif

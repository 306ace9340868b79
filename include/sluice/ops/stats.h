/*
 * stats.h: what sluice counts about its traffic, for /metrics.
 *
 * Every label set is fixed in advance (endpoints, priority classes, reject
 * reasons) or bounded (status codes per endpoint), so memory stays the same
 * however long sluice runs. Recording is O(1).
 *
 * Glossary:
 *   class     a priority's class: urgent, normal or batch
 *   outcome   how a request ended: ok, rejected (sluice refused it),
 *             failed (it or its upstream broke), cancelled (client left)
 */
#ifndef SLUICE_STATS_H
#define SLUICE_STATS_H

#include "sluice/net/http.h"
#include "sluice/base/metrics.h"

#include <stdbool.h>
#include <stdint.h>

enum sl_stats_endpoint {
	SL_EP_CHAT,
	SL_EP_COMPLETIONS,
	SL_EP_COMPLETION,
	SL_EP_EMBEDDINGS,
	SL_EP_MODELS,
	SL_EP_GENERATE,
	SL_EP_INFER,
	SL_EP_HEALTH,
	SL_EP_READY,
	SL_EP_METRICS,
	SL_EP_OTHER,
	SL_EP_COUNT
};

enum sl_stats_reason {
	SL_REJECT_QUEUE_FULL,
	SL_REJECT_QUEUE_TIMEOUT,
	SL_REJECT_INVALID,   /* 400: bad HTTP, JSON or field */
	SL_REJECT_TOO_LARGE, /* 413, 414, 431 */
	SL_REJECT_TIMEOUT,   /* 408: a slow client */
	SL_REJECT_NOT_READY, /* 503: no upstream ready */
	SL_REJECT_NOT_FOUND, /* 404, 405 */
	SL_REJECT_KEY_LIMIT, /* 429: over an API key's limits (keys.h) */
	/* 503: the bodies being read fill --max-body-memory (http.h) */
	SL_REJECT_BODY_MEMORY,
	/* 429: its TTFT or TPOT service level predicted to be missed */
	SL_REJECT_SLO_TTFT,
	SL_REJECT_SLO_TPOT,
	/* 503: its service level went out of reach while it waited */
	SL_REJECT_SLO_DEADLINE,
	SL_REJECT_COUNT
};

/*
 * How a request with a service level ended (sched/README.md): served
 * within it, served late, or refused (at arrival or from the queue) as
 * unattainable. A request whose client left, or that failed before its
 * first token, is none of them.
 */
enum sl_slo_outcome {
	SL_SLO_MET,
	SL_SLO_MISSED,
	SL_SLO_SHED,
	SL_SLO_OUTCOMES
};

enum sl_stats_class {
	SL_CLASS_URGENT,
	SL_CLASS_NORMAL,
	SL_CLASS_BATCH,
	SL_CLASS_COUNT
};

/* Status codes kept per endpoint; rarer ones are counted as code "other". */
#define SL_STATS_CODES 24
/* Seconds of token counts kept for tokens_per_second. */
#define SL_STATS_RATE_WINDOW 10

struct sl_stats {
	struct {
		int code;
		uint64_t n;
	} requests[SL_EP_COUNT][SL_STATS_CODES + 1];
	uint64_t rejected[SL_REJECT_COUNT];
	uint64_t cancelled_queued, cancelled_inflight;
	uint64_t generated_tokens;
	uint64_t batches, batched;
	uint64_t queued_now[SL_CLASS_COUNT]; /* gauge */

	struct sl_histogram queue_wait[SL_CLASS_COUNT];
	struct sl_histogram ttft[SL_CLASS_COUNT];
	struct sl_histogram duration[SL_EP_COUNT];
	struct sl_histogram generation; /* duration of scheduled requests */
	struct sl_histogram inter_token;
	struct sl_histogram batch_size;
	/*
	 * Service levels: the outcomes of requests without a key (a key's
	 * are its tenant's, keys.h), and the predicted TTFT over the actual
	 * one, for every request that got a first token.
	 */
	uint64_t slo[SL_CLASS_COUNT][SL_SLO_OUTCOMES];
	struct sl_histogram ttft_prediction;

	/* Tokens per whole second, a ring over the last seconds. */
	uint64_t rate_tokens[SL_STATS_RATE_WINDOW + 1];
	uint64_t rate_second; /* the second rate_tokens[its slot] counts */
};

void sl_stats_init(struct sl_stats *s);

enum sl_stats_endpoint sl_stats_endpoint_of(const char *path);
const char *sl_stats_endpoint_name(enum sl_stats_endpoint e);
enum sl_stats_class sl_stats_class_of(double priority);
const char *sl_stats_reason_name(enum sl_stats_reason r);

void sl_stats_queued(struct sl_stats *s, double priority, int delta);
void sl_stats_batch(struct sl_stats *s, unsigned size);
void sl_stats_queue_wait(struct sl_stats *s, double priority, double seconds);
void sl_stats_first_token(struct sl_stats *s, double priority, double seconds);
void sl_stats_inter_token(struct sl_stats *s, double seconds);
void sl_stats_tokens(struct sl_stats *s, uint64_t n, uint64_t now_ms);
const char *sl_slo_outcome_name(enum sl_slo_outcome o);
/* A request's predicted TTFT over its actual one (both > 0). */
void sl_stats_prediction(struct sl_stats *s, double ratio);
/* Tokens per second over the last SL_STATS_RATE_WINDOW whole seconds. */
double sl_stats_token_rate(struct sl_stats *s, uint64_t now_ms);

/*
 * A request ended (the HTTP server's on_finish): counts it by endpoint and
 * status, as a rejection or cancellation when it was one, and its duration.
 * Returns its outcome for the access log.
 */
const char *sl_stats_finished(struct sl_stats *s,
                              const struct sl_http_request *req, bool completed,
                              double seconds);

#endif

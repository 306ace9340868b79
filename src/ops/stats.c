/* stats.c: counting traffic. */
#include "sluice/ops/stats.h"

#include "sluice/base/common.h"
#include "sluice/sched/sched.h"
#include "sluice/tenants/keys.h"

#include <string.h>

static const char *const endpoint_names[SL_EP_COUNT] = {
    [SL_EP_CHAT] = "/v1/chat/completions",
    [SL_EP_COMPLETIONS] = "/v1/completions",
    [SL_EP_COMPLETION] = "/completion",
    [SL_EP_EMBEDDINGS] = "/v1/embeddings",
    [SL_EP_MODELS] = "/v1/models",
    [SL_EP_GENERATE] = "/generate",
    [SL_EP_INFER] = "/infer",
    [SL_EP_HEALTH] = "/health",
    [SL_EP_READY] = "/ready",
    [SL_EP_METRICS] = "/metrics",
    [SL_EP_OTHER] = "other",
};

static const char *const reason_names[SL_REJECT_COUNT] = {
    [SL_REJECT_QUEUE_FULL] = "queue_full",
    [SL_REJECT_QUEUE_TIMEOUT] = "queue_timeout",
    [SL_REJECT_INVALID] = "invalid",
    [SL_REJECT_TOO_LARGE] = "too_large",
    [SL_REJECT_TIMEOUT] = "timeout",
    [SL_REJECT_NOT_READY] = "not_ready",
    [SL_REJECT_NOT_FOUND] = "not_found",
    [SL_REJECT_KEY_LIMIT] = "key_limit",
    [SL_REJECT_BODY_MEMORY] = "body_memory",
    [SL_REJECT_SLO_TTFT] = "slo_ttft",
    [SL_REJECT_SLO_TPOT] = "slo_tpot",
    [SL_REJECT_SLO_DEADLINE] = "slo_deadline",
};

static const char *const slo_outcome_names[SL_SLO_OUTCOMES] = {
    [SL_SLO_MET] = "met",
    [SL_SLO_MISSED] = "missed",
    [SL_SLO_SHED] = "shed",
};

/*
 * Histogram ranges: latencies from 2^-17 s (7.6 us) over 24 octaves to
 * about 128 s; batch sizes from 1 to 2^24.
 */
#define SECONDS_MIN_EXP (-17)
#define COUNT_MIN_EXP 0
/* Ratios from 2^-10 (0.001) to 2^14: a prediction off by more is off. */
#define RATIO_MIN_EXP (-10)

void sl_stats_init(struct sl_stats *s)
{
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < SL_CLASS_COUNT; i++) {
		sl_hist_init(&s->queue_wait[i], SECONDS_MIN_EXP);
		sl_hist_init(&s->ttft[i], SECONDS_MIN_EXP);
	}
	for (int i = 0; i < SL_EP_COUNT; i++)
		sl_hist_init(&s->duration[i], SECONDS_MIN_EXP);
	sl_hist_init(&s->generation, SECONDS_MIN_EXP);
	sl_hist_init(&s->inter_token, SECONDS_MIN_EXP);
	sl_hist_init(&s->batch_size, COUNT_MIN_EXP);
	sl_hist_init(&s->ttft_prediction, RATIO_MIN_EXP);
}

const char *sl_slo_outcome_name(enum sl_slo_outcome o)
{
	return slo_outcome_names[o];
}

void sl_stats_prediction(struct sl_stats *s, double ratio)
{
	sl_hist_record(&s->ttft_prediction, ratio);
}

enum sl_stats_endpoint sl_stats_endpoint_of(const char *path)
{
	for (int i = 0; path && i < SL_EP_OTHER; i++)
		if (strcmp(path, endpoint_names[i]) == 0)
			return (enum sl_stats_endpoint)i;
	return SL_EP_OTHER;
}

const char *sl_stats_endpoint_name(enum sl_stats_endpoint e)
{
	return endpoint_names[e];
}

const char *sl_stats_reason_name(enum sl_stats_reason r)
{
	return reason_names[r];
}

enum sl_stats_class sl_stats_class_of(double priority)
{
	if (priority >= SL_PRIORITY_URGENT)
		return SL_CLASS_URGENT;
	return priority >= SL_PRIORITY_NORMAL ? SL_CLASS_NORMAL
	                                      : SL_CLASS_BATCH;
}

void sl_stats_queued(struct sl_stats *s, double priority, int delta)
{
	s->queued_now[sl_stats_class_of(priority)] += (uint64_t)(int64_t)delta;
}

void sl_stats_batch(struct sl_stats *s, unsigned size)
{
	s->batches++;
	s->batched += size;
	sl_hist_record(&s->batch_size, size);
}

void sl_stats_queue_wait(struct sl_stats *s, double priority, double seconds)
{
	sl_hist_record(&s->queue_wait[sl_stats_class_of(priority)], seconds);
}

void sl_stats_first_token(struct sl_stats *s, double priority, double seconds)
{
	sl_hist_record(&s->ttft[sl_stats_class_of(priority)], seconds);
}

void sl_stats_inter_token(struct sl_stats *s, double seconds)
{
	sl_hist_record(&s->inter_token, seconds);
}

/* Moves the ring to `second`, clearing the seconds skipped. */
static void rate_advance(struct sl_stats *s, uint64_t second)
{
	if (second <= s->rate_second)
		return;
	uint64_t steps =
	    SL_MIN(second - s->rate_second, (uint64_t)SL_STATS_RATE_WINDOW + 1);
	for (uint64_t i = 1; i <= steps; i++)
		s->rate_tokens[(s->rate_second + i) %
		               (SL_STATS_RATE_WINDOW + 1)] = 0;
	s->rate_second = second;
}

void sl_stats_tokens(struct sl_stats *s, uint64_t n, uint64_t now_ms)
{
	s->generated_tokens += n;
	rate_advance(s, now_ms / 1000);
	s->rate_tokens[s->rate_second % (SL_STATS_RATE_WINDOW + 1)] += n;
}

double sl_stats_token_rate(struct sl_stats *s, uint64_t now_ms)
{
	rate_advance(s, now_ms / 1000);
	uint64_t sum = 0;
	/* The whole seconds before the current one. */
	for (uint64_t i = 1; i <= SL_STATS_RATE_WINDOW; i++)
		sum += s->rate_tokens[(s->rate_second + SL_STATS_RATE_WINDOW +
		                       1 - i) %
		                      (SL_STATS_RATE_WINDOW + 1)];
	return (double)sum / SL_STATS_RATE_WINDOW;
}

static void count_status(struct sl_stats *s, enum sl_stats_endpoint e, int code)
{
	for (int i = 0; i < SL_STATS_CODES; i++) {
		if (s->requests[e][i].code == code ||
		    s->requests[e][i].n == 0) {
			s->requests[e][i].code = code;
			s->requests[e][i].n++;
			return;
		}
	}
	s->requests[e][SL_STATS_CODES].code = 0; /* "other" */
	s->requests[e][SL_STATS_CODES].n++;
}

static int reason_of_status(int status)
{
	switch (status) {
	case 400: return SL_REJECT_INVALID;
	case 404:
	case 405: return SL_REJECT_NOT_FOUND;
	case 408: return SL_REJECT_TIMEOUT;
	case 413:
	case 414:
	case 431: return SL_REJECT_TOO_LARGE;
	case 429: return SL_REJECT_QUEUE_FULL;
	case 503: return SL_REJECT_NOT_READY;
	default: return -1;
	}
}

static int reason_index(const char *name)
{
	for (int i = 0; i < SL_REJECT_COUNT; i++)
		if (strcmp(reason_names[i], name) == 0)
			return i;
	return -1;
}

/*
 * A request with a service level ended: shed when sluice refused it as out
 * of reach, met or missed by its first token's time and its time per
 * token when it was served, missed when it failed before its first token
 * (a queue timeout, the upstream's 5xx); nothing when its client left
 * first. Counted for its key, or for requests without one.
 */
static void count_slo(struct sl_stats *s, const struct sl_http_request *req,
                      bool completed)
{
	const struct sl_request_info *info = &req->info;
	if (!info->slo_ttft_ms && !info->slo_tpot_ms)
		return;
	enum sl_slo_outcome o;
	if (info->reject_reason && strncmp(info->reject_reason, "slo_", 4) == 0)
		o = SL_SLO_SHED;
	else if (!completed)
		return;
	else if (info->ttft_ms >= 0) {
		bool met = !info->slo_ttft_ms ||
		           (uint64_t)info->ttft_ms <= info->slo_ttft_ms;
		/* One token has no time per token: only its first counts. */
		if (info->slo_tpot_ms && info->tpot_ms >= 0)
			met = met && info->tpot_ms <= (double)info->slo_tpot_ms;
		o = met ? SL_SLO_MET : SL_SLO_MISSED;
	} else if (req->status >= 500)
		o = SL_SLO_MISSED;
	else
		return;
	enum sl_stats_class c = sl_stats_class_of(info->priority);
	if (info->tenant)
		info->tenant->slo[c][o]++;
	else
		s->slo[c][o]++;
}

const char *sl_stats_finished(struct sl_stats *s,
                              const struct sl_http_request *req, bool completed,
                              double seconds)
{
	enum sl_stats_endpoint e = sl_stats_endpoint_of(req->path);
	const struct sl_request_info *info = &req->info;
	/* 499, as nginx writes it: the client closed before an answer. */
	int code = req->status ? req->status : 499;
	count_status(s, e, code);
	sl_hist_record(&s->duration[e], seconds);

	const char *outcome = info->outcome;
	if (!completed) {
		outcome = "cancelled";
		const char *stage =
		    info->cancel_stage ? info->cancel_stage : "";
		if (strcmp(stage, "queued") == 0)
			s->cancelled_queued++;
		else if (strcmp(stage, "inflight") == 0)
			s->cancelled_inflight++;
	} else if (!outcome) {
		outcome = code < 400   ? "ok"
		          : code < 500 ? "rejected"
		                       : "failed";
		if (code == 503 && !info->reject_reason)
			outcome = "rejected"; /* sluice's own 503s */
	}
	if (completed && strcmp(outcome, "rejected") == 0) {
		int r = info->reject_reason ? reason_index(info->reject_reason)
		                            : reason_of_status(code);
		if (r >= 0)
			s->rejected[r]++;
	}
	if (completed && info->batch_size > 0)
		sl_hist_record(&s->generation, seconds);
	count_slo(s, req, completed);
	return outcome;
}

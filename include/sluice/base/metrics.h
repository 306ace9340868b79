/*
 * metrics.h: what sluice counts, in fixed memory, and how it is shown.
 *
 * Recording is O(1) however many requests pass: counters, gauges and
 * log-linear histograms, never a list of every latency (the Forge seed
 * sorted every latency it had ever seen to find its p99).
 *
 * Glossary:
 *   log-linear  a histogram whose buckets split each power of two into
 *               SL_HIST_SUB equal parts: relative resolution is constant,
 *               from microseconds to minutes, in a few hundred counters.
 *   exposition  the Prometheus text format, version 0.0.4.
 *
 * Quantile error bound: a quantile estimate lands in the same bucket as the
 * true value, and a bucket spans at most 1/SL_HIST_SUB of its lower edge,
 * so the estimate is within 12.5% of the true value (for values inside the
 * histogram's range; below it, the estimate is the range's lower edge).
 */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sub-buckets per power of two: 8 gives the 12.5% bound above. */
#define SL_HIST_SUB 8
/* Powers of two a histogram spans. */
#define SL_HIST_OCTAVES 24
#define SL_HIST_BUCKETS (SL_HIST_OCTAVES * SL_HIST_SUB)
/* Buckets shown to Prometheus per power of two (a subset is exact). */
#define SL_HIST_EXPOSED_PER_OCTAVE 2

struct sl_histogram {
	int min_exp; /* the range starts at 2^min_exp */
	uint64_t buckets[SL_HIST_BUCKETS];
	uint64_t below; /* values under 2^min_exp */
	uint64_t above; /* values at or over the top */
	uint64_t count;
	double sum;
};

/* Range [2^min_exp, 2^(min_exp + SL_HIST_OCTAVES)). */
void sl_hist_init(struct sl_histogram *h, int min_exp);
void sl_hist_record(struct sl_histogram *h, double value);
/* The q-quantile (0 < q <= 1), estimated; 0 when empty. */
double sl_hist_quantile(const struct sl_histogram *h, double q);
/* Adds b's counts into a (same range). */
void sl_hist_merge(struct sl_histogram *a, const struct sl_histogram *b);

/*
 * A count over the last minute, sliding in steps: SL_MINUTE_SLICES slices
 * of SL_MINUTE_SLICE_MS each, a ring. Adding and reading are O(1) in the
 * slices (a read sums them), in 100 bytes. The sum covers the current
 * slice and the SL_MINUTE_SLICES - 1 before it: between 55 and 60 s.
 * What the status page shows as a tenant's requests and tokens a minute.
 */
#define SL_MINUTE_SLICES 12
#define SL_MINUTE_SLICE_MS 5000

struct sl_minute {
	uint64_t n[SL_MINUTE_SLICES];
	/* The slice of the last add: its now_ms / SL_MINUTE_SLICE_MS. */
	uint64_t slice;
};

void sl_minute_add(struct sl_minute *m, uint64_t v, uint64_t now_ms);
/* What was added over the last minute, as of now_ms. */
uint64_t sl_minute_sum(const struct sl_minute *m, uint64_t now_ms);

/* A growable text buffer for the exposition. */
struct sl_text {
	char *data;
	size_t len, cap;
};

void sl_text_printf(struct sl_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sl_text_free(struct sl_text *t);

/* "# HELP name help" and "# TYPE name type" */
void sl_expose_family(struct sl_text *t, const char *name, const char *type,
                      const char *help);
/*
 * A histogram's _bucket, _sum and _count lines; `labels` is "" or
 * `key="value"` pairs joined by commas (without braces).
 */
void sl_expose_histogram(struct sl_text *t, const char *name,
                         const char *labels, const struct sl_histogram *h);

/* Escapes a label value (backslash, quote, newline) into buf. */
const char *sl_label_escape(const char *value, char *buf, size_t size);

#endif

/*
 * bench_stats.h: the figures sluice-bench reports, computed exactly from
 * every sample of a run (a load generator keeps them all; a gateway would
 * not).
 *
 * Percentiles are nearest-rank: the p-th percentile of n sorted samples is
 * the ceil(p/100 * n)-th one, always an observed value; p = 0 is the
 * minimum.
 */
#ifndef SLUICE_BENCH_STATS_H
#define SLUICE_BENCH_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bs_samples {
	double *v;
	size_t n, cap;
	bool sorted;
};

void bs_add(struct bs_samples *s, double value);
void bs_free(struct bs_samples *s);
/* NAN when there are no samples. */
double bs_percentile(struct bs_samples *s, double p);
double bs_mean(const struct bs_samples *s);
/* count per second over `seconds`; 0 when no time passed. */
double bs_rate(uint64_t count, double seconds);

#endif

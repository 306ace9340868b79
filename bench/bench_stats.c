/* bench_stats.c: exact percentiles, means and rates. */
#include "bench_stats.h"

#include "sluice/base/common.h"

#include <math.h>
#include <stdlib.h>

void bs_add(struct bs_samples *s, double value)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 1024;
		s->v = sl_xrealloc(s->v, s->cap * sizeof(*s->v));
	}
	s->v[s->n++] = value;
	s->sorted = false;
}

void bs_free(struct bs_samples *s)
{
	free(s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double bs_percentile(struct bs_samples *s, double p)
{
	if (s->n == 0)
		return NAN;
	if (!s->sorted) {
		qsort(s->v, s->n, sizeof(*s->v), cmp);
		s->sorted = true;
	}
	size_t rank = (size_t)ceil(p / 100.0 * (double)s->n);
	return s->v[rank == 0 ? 0 : SL_MIN(rank, s->n) - 1];
}

double bs_mean(const struct bs_samples *s)
{
	if (s->n == 0)
		return NAN;
	double sum = 0;
	for (size_t i = 0; i < s->n; i++)
		sum += s->v[i];
	return sum / (double)s->n;
}

double bs_rate(uint64_t count, double seconds)
{
	return seconds > 0 ? (double)count / seconds : 0;
}

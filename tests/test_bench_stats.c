/* test_bench_stats.c: sluice-bench's statistics on known inputs. */
#include "../bench/bench_stats.h"

#include "test.h"

#include <math.h>

static void test_percentiles(void)
{
	struct bs_samples s = {0};
	ASSERT(isnan(bs_percentile(&s, 50)));
	ASSERT(isnan(bs_mean(&s)));
	/* 1..100, added out of order */
	for (int i = 100; i >= 1; i--)
		bs_add(&s, i);
	ASSERT(bs_percentile(&s, 0) == 1);
	ASSERT(bs_percentile(&s, 50) == 50);
	ASSERT(bs_percentile(&s, 95) == 95);
	ASSERT(bs_percentile(&s, 99) == 99);
	ASSERT(bs_percentile(&s, 100) == 100);
	ASSERT(bs_percentile(&s, 99.5) == 100); /* nearest rank rounds up */
	ASSERT(bs_mean(&s) == 50.5);
	/* Adding after a sort sorts again. */
	bs_add(&s, 0.5);
	ASSERT(bs_percentile(&s, 0) == 0.5);
	bs_free(&s);

	/* Few samples: p95 of 10 is the 10th, p50 the 5th. */
	double ten[] = {7, 3, 9, 1, 5, 10, 2, 8, 4, 6};
	for (int i = 0; i < 10; i++)
		bs_add(&s, ten[i]);
	ASSERT(bs_percentile(&s, 50) == 5);
	ASSERT(bs_percentile(&s, 95) == 10);
	ASSERT(bs_percentile(&s, 10) == 1);
	ASSERT(bs_percentile(&s, 11) == 2);
	bs_free(&s);

	/* One sample is every percentile. */
	bs_add(&s, 42);
	ASSERT(bs_percentile(&s, 1) == 42 && bs_percentile(&s, 99) == 42);
	bs_free(&s);
}

static void test_rates(void)
{
	ASSERT(bs_rate(500, 2.0) == 250);
	ASSERT(bs_rate(0, 1.0) == 0);
	ASSERT(bs_rate(10, 0) == 0);
	ASSERT(fabs(bs_rate(1, 3.0) - 1.0 / 3.0) < 1e-12);
}

int main(void)
{
	RUN(test_percentiles);
	RUN(test_rates);
	return 0;
}

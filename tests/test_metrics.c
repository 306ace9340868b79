/*
 * test_metrics.c: histogram quantiles stay within the documented bound on
 * known distributions; the exposition of histograms and relayed families.
 */
#include "sluice/exposition.h"
#include "sluice/metrics.h"

#include "sluice/common.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

#define N 20000
/* The bound metrics.h states: 1 / SL_HIST_SUB of the true value. */
#define BOUND (1.0 / SL_HIST_SUB)

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Feeds values, then checks quantiles against the exact ones. */
static void check_distribution(const char *name, double *v, size_t n)
{
	struct sl_histogram h;
	sl_hist_init(&h, -17);
	double sum = 0;
	for (size_t i = 0; i < n; i++) {
		sl_hist_record(&h, v[i]);
		sum += v[i];
	}
	ASSERT_EQ(h.count, n);
	ASSERT(fabs(h.sum - sum) <= 1e-9 * fabs(sum) + 1e-12);
	qsort(v, n, sizeof(*v), cmp_double);
	static const double qs[] = {0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1};
	for (size_t i = 0; i < SL_ARRAY_SIZE(qs); i++) {
		size_t rank = (size_t)ceil(qs[i] * (double)n);
		double exact = v[rank ? rank - 1 : 0];
		double est = sl_hist_quantile(&h, qs[i]);
		double err = fabs(est - exact) / exact;
		if (err > BOUND)
			TEST_FAIL(
			    "%s: q%.3f estimate %g vs exact %g: error %.3f "
			    "over the bound %.3f",
			    name, qs[i], est, exact, err, BOUND);
	}
}

static double uniform(uint64_t *s)
{
	*s = *s * 6364136223846793005u + 1442695040888963407u;
	return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

static void test_quantiles_within_bound(void)
{
	double *v = malloc(N * sizeof(*v));
	uint64_t seed = 7;
	for (size_t i = 0; i < N; i++) /* 1 ms to 1 s, uniform */
		v[i] = 0.001 + uniform(&seed) * 0.999;
	check_distribution("uniform", v, N);
	for (size_t i = 0; i < N; i++) /* exponential, mean 50 ms */
		v[i] = -0.05 * log(uniform(&seed));
	check_distribution("exponential", v, N);
	for (size_t i = 0; i < N; i++) /* bimodal: fast cache hits, slow */
		v[i] = i % 10 ? 0.002 + uniform(&seed) * 0.001
		              : 3.0 + uniform(&seed);
	check_distribution("bimodal", v, N);
	for (size_t i = 0; i < N; i++) /* log-uniform over six decades */
		v[i] = 1e-4 * pow(10, 6 * uniform(&seed));
	check_distribution("log-uniform", v, N);
	for (size_t i = 0; i < N; i++)
		v[i] = 0.25; /* a constant, on a bucket edge */
	check_distribution("constant", v, N);
	free(v);
}

static void test_edges(void)
{
	struct sl_histogram h;
	sl_hist_init(&h, 0);                    /* 1 up to 2^24: counts */
	ASSERT(sl_hist_quantile(&h, 0.5) == 0); /* empty */
	for (int i = 1; i <= 8; i++)
		sl_hist_record(&h, i);
	/* Small integers have buckets of their own: exact. */
	ASSERT(fabs(sl_hist_quantile(&h, 0.5) - 4) < 0.5);
	ASSERT(fabs(sl_hist_quantile(&h, 1.0) - 8) < 1.0);
	sl_hist_record(&h, 0);    /* below the range */
	sl_hist_record(&h, 1e12); /* above it */
	sl_hist_record(&h, -1);   /* a clock that went backwards */
	ASSERT_EQ(h.count, 11);
	ASSERT_EQ(h.below, 2);
	ASSERT_EQ(h.above, 1);
}

/* _bucket lines are cumulative, end at +Inf with the count. */
static void test_histogram_exposition(void)
{
	struct sl_histogram h;
	sl_hist_init(&h, -17);
	for (int i = 0; i < 1000; i++)
		sl_hist_record(&h, 0.001 * (i % 37 + 1));
	sl_hist_record(&h, 1e9);
	struct sl_text t = {0};
	sl_expose_histogram(&t, "x_seconds", "a=\"b\"", &h);
	unsigned long long last = 0;
	int buckets = 0;
	char *save = NULL;
	for (char *line = strtok_r(t.data, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "x_seconds_bucket{a=\"b\",le=\"", 27) == 0) {
			unsigned long long n =
			    strtoull(strrchr(line, ' ') + 1, NULL, 10);
			ASSERT(n >= last);
			last = n;
			buckets++;
			if (strstr(line, "le=\"+Inf\""))
				ASSERT_EQ(n, 1001);
		} else if (strncmp(line, "x_seconds_count{a=\"b\"} ", 22) ==
		           0) {
			ASSERT_STR_EQ(line, "x_seconds_count{a=\"b\"} 1001");
		} else {
			ASSERT(strncmp(line, "x_seconds_sum{a=\"b\"} ", 20) ==
			       0);
		}
	}
	ASSERT_EQ(buckets, SL_HIST_OCTAVES * SL_HIST_EXPOSED_PER_OCTAVE + 1);
	ASSERT_EQ(last, 1001);
	sl_text_free(&t);
}

/* llama-server's families get an upstream label, grouped per family. */
static void test_relabelled_families(void)
{
	const char *a = "# HELP llamacpp:prompt_tokens_total Number of prompt "
	                "tokens processed.\n"
	                "# TYPE llamacpp:prompt_tokens_total counter\n"
	                "llamacpp:prompt_tokens_total 12\n"
	                "# HELP llamacpp:requests_processing Requests.\n"
	                "# TYPE llamacpp:requests_processing gauge\n"
	                "llamacpp:requests_processing{slot=\"0\"} 1\n";
	const char *b = "# HELP llamacpp:prompt_tokens_total Number of prompt "
	                "tokens processed.\n"
	                "# TYPE llamacpp:prompt_tokens_total counter\n"
	                "llamacpp:prompt_tokens_total 30\r\n"
	                "# TYPE llamacpp:n_tokens_max counter\n"
	                "llamacpp:n_tokens_max 58\n";
	struct sl_families *f = sl_families_new();
	sl_families_add(f, a, "http://127.0.0.1:1");
	sl_families_add(f, b, "http://h\"x:2");
	struct sl_text t = {0};
	sl_families_write(f, &t);
	ASSERT_STR_EQ(
	    t.data,
	    "# HELP llamacpp_prompt_tokens_total Number of prompt tokens "
	    "processed.\n"
	    "# TYPE llamacpp_prompt_tokens_total counter\n"
	    "llamacpp_prompt_tokens_total{upstream=\"http://127.0.0.1:1\"} 12\n"
	    "llamacpp_prompt_tokens_total{upstream=\"http://h\\\"x:2\"} 30\n"
	    "# HELP llamacpp_requests_processing Requests.\n"
	    "# TYPE llamacpp_requests_processing gauge\n"
	    "llamacpp_requests_processing{upstream=\"http://127.0.0.1:1\","
	    "slot=\"0\"} 1\n"
	    "# TYPE llamacpp_n_tokens_max_total counter\n"
	    "llamacpp_n_tokens_max_total{upstream=\"http://h\\\"x:2\"} 58\n");
	sl_text_free(&t);
	sl_families_free(f);
}

int main(void)
{
	RUN(test_quantiles_within_bound);
	RUN(test_edges);
	RUN(test_histogram_exposition);
	RUN(test_relabelled_families);
	return 0;
}

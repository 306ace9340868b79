/*
 * test_predict.c: the latency model (predict.h) fits known costs from
 * synthetic samples and recovers them; it starts from a prior that refuses
 * nothing, ignores samples that are no numbers, follows a server whose
 * speed changes, and integrates the concurrency each request met.
 */
#include "sluice/sched/predict.h"
#include "test.h"

#include <math.h>

/* The costs the samples are drawn from: a CPU llama-server's shape. */
static double true_prefill(double p)
{
	return 0.5 + 0.02 * p + 3e-5 * p * p;
}

static double true_tpot(double k)
{
	return 0.1 + 0.08 * k;
}

/* A deterministic spread in [-1, 1): the samples' noise and choices. */
static double spread(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return (double)((*seed >> 8) & 0xffff) / 32768.0 - 1;
}

#define ASSERT_NEAR(got, want, rel)                                            \
	do {                                                                   \
		double g_ = (got), w_ = (want);                                \
		if (!(fabs(g_ - w_) <= (rel)*fabs(w_)))                        \
			TEST_FAIL("%s = %g, want %g within %g%%", #got, g_,    \
			          w_, (rel)*100);                              \
	} while (0)

/* One answer of p prompt tokens (3 bytes each), k decoding, out tokens. */
static struct sl_predict_sample sample(double p, double k, double out,
                                       double noise)
{
	double tpot = true_tpot(k) * (1 + noise);
	double prefill = true_prefill(p) * (1 + noise);
	return (struct sl_predict_sample){
	    .prompt_n = p,
	    .cache_n = 0,
	    .prompt_ms = prefill,
	    .predicted_n = out,
	    .per_token_ms = tpot,
	    .decoding = k,
	    .hold_ms = prefill + out * tpot + 2.0,
	    .first_ms = prefill + 1.0,
	    .prompt_bytes = 3 * p,
	};
}

static void test_prior_refuses_nothing(void)
{
	struct sl_predictor p;
	sl_predict_init(&p, 0);
	ASSERT(!sl_predict_known(&p));
	ASSERT(sl_predict_prefill_ms(&p, 5000) == 0);
	ASSERT(sl_predict_tpot_ms(&p, 4) == 0);
	ASSERT(sl_predict_first_ms(&p, 20000) == 0);
	ASSERT(sl_predict_hold_ms(&p, 20000, 256, 4) == 0);
	/* Until the last of the first samples, not known. */
	for (int i = 0; i < SL_PREDICT_MIN_SAMPLES; i++) {
		ASSERT(!sl_predict_known(&p));
		struct sl_predict_sample s = sample(100, 1, 16, 0);
		sl_predict_observe(&p, &s);
	}
	ASSERT(sl_predict_known(&p));
}

static void test_recovers_known_costs(void)
{
	struct sl_predictor p;
	sl_predict_init(&p, 0);
	unsigned seed = 7;
	for (int i = 0; i < 400; i++) {
		double tokens = 20 + 1490 * (spread(&seed) + 1);
		double k = 1 + floor(2 * (spread(&seed) + 1)); /* 1 to 4 */
		struct sl_predict_sample s =
		    sample(tokens, k, 64, 0.05 * spread(&seed));
		sl_predict_observe(&p, &s);
	}
	ASSERT(sl_predict_known(&p));
	for (double tokens = 100; tokens <= 2900; tokens += 700)
		ASSERT_NEAR(sl_predict_prefill_ms(&p, tokens),
		            true_prefill(tokens), 0.05);
	for (double k = 1; k <= 4; k++)
		ASSERT_NEAR(sl_predict_tpot_ms(&p, k), true_tpot(k), 0.05);
	/* 3 bytes a token, none cached: first = prefill + 1, hold + 2. */
	ASSERT_NEAR(sl_predict_prompt_tokens(&p, 3000), 1000, 0.01);
	ASSERT_NEAR(sl_predict_first_ms(&p, 3000), true_prefill(1000) + 1,
	            0.05);
	ASSERT_NEAR(sl_predict_hold_ms(&p, 3000, 64, 4),
	            true_prefill(1000) + 64 * true_tpot(4) + 2, 0.05);
}

/* One prompt length and one concurrency: the fit stays defined and exact. */
static void test_one_point_stays_defined(void)
{
	struct sl_predictor p;
	sl_predict_init(&p, 0);
	for (int i = 0; i < 50; i++) {
		struct sl_predict_sample s = sample(300, 4, 32, 0);
		sl_predict_observe(&p, &s);
	}
	ASSERT_NEAR(sl_predict_prefill_ms(&p, 300), true_prefill(300), 0.02);
	ASSERT_NEAR(sl_predict_tpot_ms(&p, 4), true_tpot(4), 0.02);
	ASSERT(isfinite(sl_predict_prefill_ms(&p, 3000)));
	ASSERT(sl_predict_prefill_ms(&p, 3000) >= 0);
}

/* Seen only at high concurrency, a step alone still costs something. */
static void test_a_step_never_costs_nothing(void)
{
	struct sl_predictor p;
	sl_predict_init(&p, 0);
	/* Noisy steps at 3 and 4 sequences whose line crosses 0 before 1. */
	for (int i = 0; i < 100; i++) {
		struct sl_predict_sample s = sample(100, 3 + i % 2, 32, 0);
		s.per_token_ms = i % 2 ? 1.2 : 0.5;
		sl_predict_observe(&p, &s);
	}
	ASSERT(sl_predict_tpot_ms(&p, 1) > 0.1);
	ASSERT(sl_predict_tpot_ms(&p, 4) > sl_predict_tpot_ms(&p, 1));
}

static void test_cache_and_bytes(void)
{
	struct sl_predictor p;
	sl_predict_init(&p, 0);
	for (int i = 0; i < 50; i++) {
		/* 2000 bytes, 500 tokens, of which 400 came from the cache. */
		struct sl_predict_sample s = sample(100, 1, 8, 0);
		s.cache_n = 400;
		s.prompt_bytes = 2000;
		sl_predict_observe(&p, &s);
	}
	/* 1 token per 4 bytes, a fifth of it evaluated. */
	ASSERT_NEAR(sl_predict_prompt_tokens(&p, 4000), 200, 0.01);
}

static void test_bad_samples_ignored(void)
{
	struct sl_predictor p;
	sl_predict_init(&p, 0);
	struct sl_predict_sample s = sample(100, 1, 8, 0);
	s.prompt_ms = NAN;
	sl_predict_observe(&p, &s);
	s = sample(100, 1, 8, 0);
	s.per_token_ms = -1;
	sl_predict_observe(&p, &s);
	s = sample(100, 1, 8, 0);
	s.hold_ms = INFINITY;
	sl_predict_observe(&p, &s);
	ASSERT_EQ(p.samples, 0);
	ASSERT(sl_predict_prefill_ms(&p, 100) == 0);
}

/* The server slows down (a busy machine): the fits follow within memory. */
static void test_follows_a_change(void)
{
	struct sl_predictor p;
	sl_predict_init(&p, 0);
	unsigned seed = 3;
	for (int i = 0; i < 300; i++) {
		struct sl_predict_sample s =
		    sample(50 + 500 * (spread(&seed) + 1), 2, 32, 0);
		sl_predict_observe(&p, &s);
	}
	for (int i = 0; i < (int)(3 * SL_PREDICT_MEMORY); i++) {
		struct sl_predict_sample s =
		    sample(50 + 500 * (spread(&seed) + 1), 2, 32, 1.0);
		sl_predict_observe(&p, &s);
	}
	ASSERT_NEAR(sl_predict_tpot_ms(&p, 2), 2 * true_tpot(2), 0.1);
	ASSERT_NEAR(sl_predict_prefill_ms(&p, 500), 2 * true_prefill(500), 0.1);
}

/* Each request's mean concurrency, integrated from the busy counts. */
static void test_busy_integral(void)
{
	struct sl_predictor p;
	sl_predict_init(&p, 1000);
	struct sl_predict_run a = {0}, b = {0};
	sl_predict_busy(&p, 1, 1000);
	sl_predict_run_start(&p, &a, 2000, 1000);
	ASSERT_EQ(p.n_runs, 1);
	sl_predict_busy(&p, 2, 1100);
	sl_predict_run_start(&p, &b, 2000, 1100);
	/* a decodes from 1200: 2 until 1300, then 4 until 1400. */
	sl_predict_run_first(&p, &a, 1500, 1200);
	ASSERT(a.end_ms == 1500);
	sl_predict_busy(&p, 4, 1300);
	double k = sl_predict_run_end(&p, &a, 1400);
	ASSERT_NEAR(k, 3.0, 1e-9);
	ASSERT_EQ(p.n_runs, 1);
	ASSERT(p.runs == &b);
	/* b: 2 from 1100 to 1300, 4 to 1500. */
	k = sl_predict_run_end(&p, &b, 1500);
	ASSERT_NEAR(k, 3.0, 1e-9);
	ASSERT_EQ(p.n_runs, 0);
	ASSERT(p.runs == NULL);
	/* Ending twice, or a run never started: harmless, and at least 1. */
	ASSERT(sl_predict_run_end(&p, &b, 1600) == 1);
	sl_predict_busy(&p, 0, 1600);
	struct sl_predict_run c = {0};
	sl_predict_run_start(&p, &c, 1700, 1600);
	ASSERT(sl_predict_run_end(&p, &c, 1700) == 1);
}

static void test_output_lengths(void)
{
	struct sl_predict_output o;
	sl_predict_output_init(&o);
	/* The prior: the whole bound, or 256 without one. */
	ASSERT(sl_predict_output_tokens(&o, 100) == 100);
	ASSERT(sl_predict_output_tokens(&o, -1) == SL_PREDICT_UNBOUNDED_PRIOR);
	for (int i = 0; i < 100; i++) {
		sl_predict_output_observe(&o, 200, 50);  /* a quarter */
		sl_predict_output_observe(&o, -1, 120);  /* unbounded */
		sl_predict_output_observe(&o, 10, 1000); /* capped at 1 */
	}
	/* Bounded: the mean share, (0.25 + 1) / 2, of the bound (the last
	 * samples weigh a little more). */
	ASSERT_NEAR(sl_predict_output_tokens(&o, 400), 250, 0.01);
	ASSERT_NEAR(sl_predict_output_tokens(&o, -1), 120, 1e-6);
}

/* The calibration settles at the quantile of actual over predicted. */
static void test_calibration_finds_the_quantile(void)
{
	struct sl_predict_calib c = {0};
	ASSERT(sl_predict_calib_factor(&c) == 1);
	unsigned seed = 11;
	/* Actual TTFTs 0.8 to 1.6 times the prediction, evenly: q95 1.56. */
	for (int i = 0; i < 20000; i++)
		sl_predict_calib_observe(&c, 100,
		                         100 * (1.2 + 0.4 * spread(&seed)));
	ASSERT_NEAR(sl_predict_calib_factor(&c), 1.56, 0.05);
	/* Predictions that err high: the factor falls below 1. */
	for (int i = 0; i < 20000; i++)
		sl_predict_calib_observe(&c, 100,
		                         100 * (0.6 + 0.1 * spread(&seed)));
	ASSERT_NEAR(sl_predict_calib_factor(&c), 0.69, 0.05);
	/* Bounded either way; noise below a millisecond is ignored. */
	unsigned long long n = c.samples;
	sl_predict_calib_observe(&c, 0.5, 100);
	sl_predict_calib_observe(&c, 100, NAN);
	ASSERT_EQ(c.samples, n);
	for (int i = 0; i < 1000; i++)
		sl_predict_calib_observe(&c, 1, 1e6);
	ASSERT(sl_predict_calib_factor(&c) <= SL_PREDICT_CALIB_MAX * 1.0001);
}

/*
 * Each part's bias settles at the median of its actual over predicted
 * time, on its own: waits 1.3 times their prediction at the median (0.9
 * to 3.3, skewed: their mean is 1.45), the upstream's part 0.7. The
 * estimate wanders a few percent about it (SL_PREDICT_BIAS_STEP).
 */
static void test_bias_finds_each_median(void)
{
	struct sl_predict_bias b = {0};
	ASSERT(sl_predict_bias_wait(&b) == 1 && sl_predict_bias_first(&b) == 1);
	unsigned seed = 5, other = 9;
	for (int i = 0; i < 20000; i++) {
		double r = spread(&seed); /* -1 to 1 */
		double wait = r < 0 ? 1.3 + 0.4 * r : 1.3 + 2 * r * r * r;
		sl_predict_bias_observe(&b, 200, 200 * wait, 20,
		                        20 * (0.7 + 0.1 * spread(&other)));
	}
	ASSERT_NEAR(sl_predict_bias_wait(&b), 1.3, 0.05);
	ASSERT_NEAR(sl_predict_bias_first(&b), 0.7, 0.07);
	/*
	 * No wait predicted (a free slot): the wait's bias learns nothing,
	 * the upstream's part still does; a wait of 0 says "lower".
	 */
	double w = sl_predict_bias_wait(&b);
	for (int i = 0; i < 100; i++)
		sl_predict_bias_observe(&b, 0, 50, 20, 14);
	ASSERT(sl_predict_bias_wait(&b) == w);
	sl_predict_bias_observe(&b, 200, 0, 0.5, 10);
	ASSERT(sl_predict_bias_wait(&b) < w);
	for (int i = 0; i < 1000; i++)
		sl_predict_bias_observe(&b, 1, 1e6, 1, 1e-9);
	ASSERT(sl_predict_bias_wait(&b) <= SL_PREDICT_BIAS_MAX * 1.0001);
	ASSERT(sl_predict_bias_first(&b) >= SL_PREDICT_BIAS_MIN * 0.9999);
}

int main(void)
{
	RUN(test_prior_refuses_nothing);
	RUN(test_recovers_known_costs);
	RUN(test_one_point_stays_defined);
	RUN(test_a_step_never_costs_nothing);
	RUN(test_cache_and_bytes);
	RUN(test_bad_samples_ignored);
	RUN(test_follows_a_change);
	RUN(test_busy_integral);
	RUN(test_output_lengths);
	RUN(test_calibration_finds_the_quantile);
	RUN(test_bias_finds_each_median);
	return 0;
}

/*
 * predict.h: what one upstream's answers cost, learned online from the
 * answers themselves, to predict a request's time to first token (TTFT)
 * and time per output token (TPOT) before it is admitted.
 *
 * Every answer of llama-server carries `timings`: the prompt tokens it
 * evaluated (prompt_n) and took from its cache (cache_n), the time the
 * evaluation took (prompt_ms), the tokens generated (predicted_n) and the
 * time per generated token (predicted_per_token_ms). sluice adds what it
 * saw itself: how many sequences the upstream was decoding meanwhile, how
 * long the request held its slot, and when its first token came. From
 * these, measured on llama-server 0.7.0 (src/sched/README.md, "The
 * latency model"):
 *
 *   prefill(p)  = a0 + a1 p + a2 p^2          p: prompt tokens evaluated
 *   tpot(k)     = b0 + b1 k                   k: sequences decoding
 *   first       = prefill(p) + first_extra
 *   hold        = prefill(p) + out * tpot(k) + hold_extra
 *
 * The prompt's evaluation grows faster than its length (attention), and on
 * a CPU a step of decoding slows as sequences join it (on a GPU it stays
 * nearly flat: b1 is learned, not assumed). Each fit is a least-squares
 * fit of relative errors over the samples, the older weighing less
 * (SL_PREDICT_MEMORY), with
 * a small ridge towards zero so that a fit over one prompt length or one
 * concurrency stays defined. first_extra and hold_extra, what neither fit
 * explains (the connection, the wait for a decoding step, the answer's
 * way back), are running means. A request's prompt tokens are estimated
 * from its body's bytes, with the tokens per byte and the share the cache
 * does not hold, both learned from the same answers.
 *
 * A prediction is a few multiplications: no allocation, no loop. The
 * prior: with no sample every cost is 0, so that nothing is refused on a
 * guess; the owner refuses on a prediction only once SL_PREDICT_MIN_SAMPLES
 * answers have been seen (sl_predict_known).
 *
 * Running requests (sl_predict_run): the owner registers each request in
 * flight on the upstream with its predicted end, so that the time until a
 * slot frees can be read from them; and says how many sequences the
 * upstream runs whenever that changes (sl_predict_busy), from which each
 * request's mean concurrency is integrated in O(1).
 *
 * Output lengths (struct sl_predict_output, one per model): the tokens a
 * request will generate are its bound (max_tokens) times the share of
 * their bounds that answers generated, or without a bound the mean length
 * of unbounded answers. Prior: the whole bound; SL_PREDICT_UNBOUNDED_PRIOR
 * without one.
 *
 * Calibration (struct sl_predict_calib, one per model): admission needs a
 * prediction that is seldom too low, not one that is right on average. So
 * the ratio of each served request's actual TTFT to its predicted one is
 * followed, and its SL_PREDICT_CALIB_QUANTILE quantile (estimated online:
 * each ratio above the estimate raises it, each below lowers it, in the
 * proportion that settles at that quantile) multiplies the prediction a
 * request is admitted on. Predictions that err low on a busy machine thus
 * admit fewer; ones that err high, more.
 *
 * Bias (struct sl_predict_bias, one per model): each fit is right on the
 * mean of its own samples, yet the two parts of a TTFT err each its own
 * way. The wait for a slot leans on ends predicted from mean costs and
 * counts a prompt's stall twice on average (latency.h); the upstream's
 * part adds first_extra's mean, which its few long waits for a step under
 * way raise above what most requests meet (on the mixed workload under
 * overload, on a busy machine: the wait 15% low at the median, the
 * upstream's part 38% high). So each part is multiplied by the median
 * of its actual over predicted time, learned online as the calibration's
 * quantile is: the prediction a request is queued on and told of is then
 * as often above as below, and the calibration learns what is left.
 *
 * Glossary:
 *   first   the upstream's part of a request's TTFT: from its dispatch to
 *           its first token
 *   hold    from its dispatch to its answer's end: the slot it takes
 *   k       sequences the upstream decodes at once
 */
#ifndef SLUICE_PREDICT_H
#define SLUICE_PREDICT_H

#include <stdbool.h>
#include <stdint.h>

/*
 * The samples a fit remembers: each weighs (1 - 1/SL_PREDICT_MEMORY) times
 * the one after it, so the fits follow a server whose speed changes (a
 * longer context, a machine that got busy) within a few hundred answers.
 */
#define SL_PREDICT_MEMORY 256.0
/* Answers seen before a prediction is trusted to refuse on. */
#define SL_PREDICT_MIN_SAMPLES 8
/*
 * Prompt tokens are fitted in thousands, so that p and p^2 stay of one
 * order and the fit's equations well conditioned.
 */
#define SL_PREDICT_TOKEN_SCALE 1000.0
/*
 * The ridge: a pull towards 0 of this share of each coefficient's own
 * weight in the fit. It only keeps the fit defined when the samples cannot
 * tell a coefficient (one prompt length, one concurrency): the features
 * are far from independent (1, p and p^2 move together), so a larger one
 * would bias every coefficient many times its own size (1% gave 5% on the
 * time per token in test_latency).
 */
#define SL_PREDICT_RIDGE 1e-6
/*
 * The least time a sample's weight is reckoned from (predict.c, fit_add):
 * below a tenth of a millisecond, times are timer noise.
 */
#define SL_PREDICT_FLOOR_MS 0.1
/* Prompt tokens per body byte before any answer: 1 per 4 bytes. */
#define SL_PREDICT_TOKENS_PER_BYTE 0.25
/* Output tokens assumed of an unbounded request before any was seen. */
#define SL_PREDICT_UNBOUNDED_PRIOR 256.0

/*
 * Calibration (see the top): the quantile of actual over predicted TTFT
 * that admission multiplies by, the step of its estimate (in log space:
 * 5% up for a ratio above it, 5% x (1 - q) / q down for one below), and
 * the factor's bounds, past which a prediction is no prediction. The
 * quantile is as high as the target (99% of admitted answers in time)
 * and no lower: 0.95 measured 98.7-99.0% at two and four times capacity.
 */
#define SL_PREDICT_CALIB_QUANTILE 0.99
#define SL_PREDICT_CALIB_STEP 0.05
#define SL_PREDICT_CALIB_MIN 0.5
/*
 * The owner calibrates on the predictions of requests with a level that
 * came to at least this share of it: those admission decides on.
 */
#define SL_PREDICT_CALIB_RELEVANT 0.5
#define SL_PREDICT_CALIB_MAX 4.0

/*
 * Bias (see the top): the step of each part's median estimate, in log
 * space (2% either way: it settles within a few hundred answers and then
 * wanders about 2%), and the factor's bounds.
 */
#define SL_PREDICT_BIAS_STEP 0.02
#define SL_PREDICT_BIAS_MIN 0.25
#define SL_PREDICT_BIAS_MAX 4.0

/*
 * A running answer's pace, as its tokens come, is weighed against the
 * model's time per token as this many tokens at it (proxy_slo.c): past a
 * few dozen tokens its own pace rules, before them one burst cannot.
 */
#define SL_PREDICT_PACE_PRIOR 32.0

/* One finished answer, as sl_predict_observe() takes it. */
struct sl_predict_sample {
	double prompt_n;     /* prompt tokens evaluated (timings) */
	double cache_n;      /* prompt tokens from the cache (timings) */
	double prompt_ms;    /* their evaluation (timings) */
	double predicted_n;  /* tokens generated (timings) */
	double per_token_ms; /* timings.predicted_per_token_ms */
	double decoding;     /* mean sequences on the upstream meanwhile */
	double hold_ms;      /* dispatch to end, as sluice saw it */
	double first_ms;     /* dispatch to first token; < 0: not seen */
	double prompt_bytes; /* its body's bytes */
};

/* A least-squares fit of y on [1, x1, x2], decayed (see the top). */
struct sl_predict_fit {
	double a[3][3]; /* sum of w x x' */
	double b[3];    /* sum of w x y */
	double c[3];    /* the coefficients, solved after each sample */
};

/* A running mean with the same memory. */
struct sl_predict_mean {
	double sum, weight;
};

/* One request in flight on the upstream, embedded in its owner's. */
struct sl_predict_run {
	struct sl_predict_run *prev, *next;
	double end_ms;     /* when its answer is predicted to end */
	double start_area; /* the busy integral when it began decoding */
	uint64_t start_ms; /* when it began decoding */
	double prefill_ms; /* its prompt's evaluation, until its first token */
	bool running;
};

struct sl_predictor {
	struct sl_predict_fit prefill; /* prompt_ms on [1, p, p^2] */
	struct sl_predict_fit decode;  /* per_token_ms on [1, k, -] */
	struct sl_predict_mean first_extra, hold_extra;
	struct sl_predict_mean tokens_per_byte, uncached;
	unsigned long long samples;
	/* Requests in flight, and the busy integral (sequences x ms). */
	struct sl_predict_run *runs;
	unsigned n_runs;
	/*
	 * The prompts in flight not yet evaluated (their first token not
	 * come): their predicted evaluation, summed. llama-server evaluates
	 * a new prompt in the same batches as the sequences decoding, so
	 * every other request there waits that long more for its end.
	 */
	double pending_prefill_ms;
	unsigned busy;
	uint64_t busy_at_ms;
	double busy_area;
};

/* The calibration of one model's predictions (see the top). */
struct sl_predict_calib {
	double log_factor; /* 0: the factor 1, the start */
	unsigned long long samples;
};

/* The bias of one model's two parts of a TTFT (see the top). */
struct sl_predict_bias {
	double log_wait, log_first; /* 0: the factor 1, the start */
	unsigned long long samples;
};

/* Output lengths of one model's answers (see the top). */
struct sl_predict_output {
	struct sl_predict_mean fill;      /* generated / bound */
	struct sl_predict_mean unbounded; /* tokens, without a bound */
};

void sl_predict_init(struct sl_predictor *p, uint64_t now_ms);

/* Learns from one finished answer. O(1). */
void sl_predict_observe(struct sl_predictor *p,
                        const struct sl_predict_sample *s);

/* Whether enough answers were seen to refuse a request on a prediction. */
bool sl_predict_known(const struct sl_predictor *p);

/* Prompt tokens of a body of `bytes` that the upstream will evaluate. */
double sl_predict_prompt_tokens(const struct sl_predictor *p, double bytes);

/* Evaluating `tokens` prompt tokens, in ms; at least 0. */
double sl_predict_prefill_ms(const struct sl_predictor *p, double tokens);

/* A generated token's time with k sequences decoding, in ms; at least 0. */
double sl_predict_tpot_ms(const struct sl_predictor *p, double k);

/*
 * The upstream's part of the TTFT of a body of `bytes`. (A new prompt
 * waits for the decoding step under way: first_extra holds that on
 * average.)
 */
double sl_predict_first_ms(const struct sl_predictor *p, double bytes);

/* The slot a body of `bytes` generating `out` tokens holds, k decoding. */
double sl_predict_hold_ms(const struct sl_predictor *p, double bytes,
                          double out, double k);

/*
 * The upstream runs `busy` sequences from now_ms on (sluice's own, and
 * others' where it reads them): the integral behind each request's mean
 * concurrency.
 */
void sl_predict_busy(struct sl_predictor *p, unsigned busy, uint64_t now_ms);

/*
 * A request began on the upstream at now_ms, its answer predicted to end
 * at end_ms. It joins the running list until sl_predict_run_end().
 */
void sl_predict_run_start(struct sl_predictor *p, struct sl_predict_run *r,
                          double end_ms, uint64_t now_ms);

/*
 * Its prompt's evaluation is predicted to take prefill_ms: pending (above)
 * until its first token comes or it ends.
 */
void sl_predict_run_prefill(struct sl_predictor *p, struct sl_predict_run *r,
                            double prefill_ms);

/* Its first token came: its end is predicted anew, and its decoding starts. */
void sl_predict_run_first(struct sl_predictor *p, struct sl_predict_run *r,
                          double end_ms, uint64_t now_ms);

/*
 * It ended (or left): out of the list. Returns the mean sequences the
 * upstream decoded since it began decoding (its first token, else its
 * start), at least 1. Harmless for a run not started.
 */
double sl_predict_run_end(struct sl_predictor *p, struct sl_predict_run *r,
                          uint64_t now_ms);

/* A request predicted `predicted` ms had its first token after `actual`. */
void sl_predict_calib_observe(struct sl_predict_calib *c, double predicted,
                              double actual);

/* What a prediction is multiplied by for admission. */
double sl_predict_calib_factor(const struct sl_predict_calib *c);

/*
 * A request predicted to wait `pred_wait` ms for a slot and then
 * `pred_first` ms for its first token (both before the bias) waited
 * `wait` and then took `first`. A part predicted under a millisecond
 * teaches nothing of its own bias.
 */
void sl_predict_bias_observe(struct sl_predict_bias *b, double pred_wait,
                             double wait, double pred_first, double first);

/* What the wait and the upstream's part are multiplied by. */
double sl_predict_bias_wait(const struct sl_predict_bias *b);
double sl_predict_bias_first(const struct sl_predict_bias *b);

void sl_predict_output_init(struct sl_predict_output *o);

/* An answer bounded by `bound` tokens (< 0: none) generated `tokens`. */
void sl_predict_output_observe(struct sl_predict_output *o, double bound,
                               double tokens);

/* The tokens a request bounded by `bound` (< 0: none) will generate. */
double sl_predict_output_tokens(const struct sl_predict_output *o,
                                double bound);

#endif

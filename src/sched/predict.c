/* predict.c: one upstream's costs, learned online (predict.h). */
#include "sluice/sched/predict.h"

#include "sluice/base/common.h"

#include <math.h>
#include <string.h>

/* What each sample's weight is multiplied by as the next one comes. */
#define DECAY (1.0 - 1.0 / SL_PREDICT_MEMORY)

/* ---- running means ---- */

static void mean_add(struct sl_predict_mean *m, double y)
{
	m->sum = m->sum * DECAY + y;
	m->weight = m->weight * DECAY + 1;
}

static double mean_of(const struct sl_predict_mean *m, double prior)
{
	return m->weight > 0 ? m->sum / m->weight : prior;
}

/* ---- least squares on [1, x1, x2] ---- */

/*
 * Solves (a + ridge) c = b by Gaussian elimination with partial pivoting,
 * the ridge being SL_PREDICT_RIDGE of a's own diagonal (so that it weighs
 * the same whatever the samples' scale) and a speck more, so that a column
 * no sample has (the decode fit's third) solves to 0. Returns false,
 * leaving c alone, when the system is singular: only before any sample.
 */
static bool solve3(double a[3][3], const double b[3], double c[3])
{
	double m[3][4];
	for (int i = 0; i < 3; i++) {
		for (int j = 0; j < 3; j++)
			m[i][j] = a[i][j];
		m[i][i] = a[i][i] * (1 + SL_PREDICT_RIDGE) + 1e-12;
		m[i][3] = b[i];
	}
	for (int col = 0; col < 3; col++) {
		int pivot = col;
		for (int r = col + 1; r < 3; r++)
			if (fabs(m[r][col]) > fabs(m[pivot][col]))
				pivot = r;
		if (!(fabs(m[pivot][col]) > 1e-15))
			return false;
		if (pivot != col)
			for (int j = 0; j < 4; j++) {
				double t = m[col][j];
				m[col][j] = m[pivot][j];
				m[pivot][j] = t;
			}
		for (int r = col + 1; r < 3; r++) {
			double f = m[r][col] / m[col][col];
			for (int j = col; j < 4; j++)
				m[r][j] -= f * m[col][j];
		}
	}
	double x[3];
	for (int i = 2; i >= 0; i--) {
		double v = m[i][3];
		for (int j = i + 1; j < 3; j++)
			v -= m[i][j] * x[j];
		x[i] = v / m[i][i];
	}
	for (int i = 0; i < 3; i++)
		if (!isfinite(x[i]))
			return false;
	memcpy(c, x, sizeof(x));
	return true;
}

/*
 * Adds a sample, weighed by 1 / y^2: the errors that matter are relative
 * (a request's TTFT against its own level), and the noise of a busy
 * machine is too (a step 5% slower is 5% of a short prompt's time as of a
 * long one's), so each sample counts by its relative error rather than
 * letting the longest prompts decide the fit alone. SL_PREDICT_FLOOR_MS
 * keeps a time near 0 from weighing without bound.
 */
static void fit_add(struct sl_predict_fit *f, double x1, double x2, double y)
{
	const double x[3] = {1, x1, x2};
	double scale = SL_MAX(y, SL_PREDICT_FLOOR_MS);
	double w = 1 / (scale * scale);
	for (int i = 0; i < 3; i++) {
		for (int j = 0; j < 3; j++)
			f->a[i][j] = f->a[i][j] * DECAY + w * x[i] * x[j];
		f->b[i] = f->b[i] * DECAY + w * x[i] * y;
	}
	solve3(f->a, f->b, f->c);
}

static double fit_at(const struct sl_predict_fit *f, double x1, double x2)
{
	double y = f->c[0] + f->c[1] * x1 + f->c[2] * x2;
	return y > 0 ? y : 0;
}

/* ---- the predictor ---- */

void sl_predict_init(struct sl_predictor *p, uint64_t now_ms)
{
	memset(p, 0, sizeof(*p));
	p->busy_at_ms = now_ms;
}

/* A number a sample may carry: finite and not negative. */
static bool usable(double v)
{
	return isfinite(v) && v >= 0;
}

void sl_predict_observe(struct sl_predictor *p,
                        const struct sl_predict_sample *s)
{
	if (!usable(s->prompt_n) || !usable(s->cache_n) ||
	    !usable(s->prompt_ms) || !usable(s->predicted_n) ||
	    !usable(s->per_token_ms) || !usable(s->hold_ms))
		return;
	double pt = s->prompt_n / SL_PREDICT_TOKEN_SCALE;
	fit_add(&p->prefill, pt, pt * pt, s->prompt_ms);
	/* One token has no decoding time to speak of. */
	if (s->predicted_n >= 2 && usable(s->decoding)) {
		fit_add(&p->decode, SL_MAX(s->decoding, 1.0), 0,
		        s->per_token_ms);
		/*
		 * A step costs something however few decode: seen only at
		 * high concurrency, a line can cross 0 before one sequence.
		 * Then the step is taken as growing in proportion instead
		 * (through the origin), as it does on a CPU.
		 */
		struct sl_predict_fit *f = &p->decode;
		if (f->c[0] < 0 && f->a[1][1] > 0) {
			f->c[0] = 0;
			f->c[1] = f->b[1] / f->a[1][1];
		}
	}
	mean_add(&p->hold_extra, SL_MAX(s->hold_ms - s->prompt_ms -
	                                    s->predicted_n * s->per_token_ms,
	                                0.0));
	if (usable(s->first_ms))
		mean_add(&p->first_extra,
		         SL_MAX(s->first_ms - s->prompt_ms, 0.0));
	double tokens = s->prompt_n + s->cache_n;
	if (tokens > 0 && s->prompt_bytes > 0) {
		mean_add(&p->tokens_per_byte, tokens / s->prompt_bytes);
		mean_add(&p->uncached, s->prompt_n / tokens);
	}
	p->samples++;
}

bool sl_predict_known(const struct sl_predictor *p)
{
	return p->samples >= SL_PREDICT_MIN_SAMPLES;
}

double sl_predict_prompt_tokens(const struct sl_predictor *p, double bytes)
{
	return bytes *
	       mean_of(&p->tokens_per_byte, SL_PREDICT_TOKENS_PER_BYTE) *
	       mean_of(&p->uncached, 1.0);
}

double sl_predict_prefill_ms(const struct sl_predictor *p, double tokens)
{
	double pt = tokens / SL_PREDICT_TOKEN_SCALE;
	return fit_at(&p->prefill, pt, pt * pt);
}

double sl_predict_tpot_ms(const struct sl_predictor *p, double k)
{
	return fit_at(&p->decode, SL_MAX(k, 1.0), 0);
}

double sl_predict_first_ms(const struct sl_predictor *p, double bytes)
{
	return sl_predict_prefill_ms(p, sl_predict_prompt_tokens(p, bytes)) +
	       mean_of(&p->first_extra, 0);
}

double sl_predict_hold_ms(const struct sl_predictor *p, double bytes,
                          double out, double k)
{
	return sl_predict_prefill_ms(p, sl_predict_prompt_tokens(p, bytes)) +
	       SL_MAX(out, 0.0) * sl_predict_tpot_ms(p, k) +
	       mean_of(&p->hold_extra, 0);
}

/* The busy integral brought to now_ms. */
static double area_at(const struct sl_predictor *p, uint64_t now_ms)
{
	uint64_t dt = now_ms > p->busy_at_ms ? now_ms - p->busy_at_ms : 0;
	return p->busy_area + (double)p->busy * (double)dt;
}

void sl_predict_busy(struct sl_predictor *p, unsigned busy, uint64_t now_ms)
{
	p->busy_area = area_at(p, now_ms);
	if (now_ms > p->busy_at_ms)
		p->busy_at_ms = now_ms;
	p->busy = busy;
}

void sl_predict_run_start(struct sl_predictor *p, struct sl_predict_run *r,
                          double end_ms, uint64_t now_ms)
{
	if (r->running)
		sl_predict_run_end(p, r, now_ms);
	r->end_ms = end_ms;
	r->start_area = area_at(p, now_ms);
	r->start_ms = now_ms;
	r->prefill_ms = 0;
	r->running = true;
	r->prev = NULL;
	r->next = p->runs;
	if (p->runs)
		p->runs->prev = r;
	p->runs = r;
	p->n_runs++;
}

/* Its prompt evaluated (or gone): no longer pending. */
static void prefill_done(struct sl_predictor *p, struct sl_predict_run *r)
{
	p->pending_prefill_ms -= r->prefill_ms;
	r->prefill_ms = 0;
	/* Sums of doubles drift: nothing pending is exactly nothing. */
	if (!p->runs || p->pending_prefill_ms < 0)
		p->pending_prefill_ms = 0;
}

void sl_predict_run_prefill(struct sl_predictor *p, struct sl_predict_run *r,
                            double prefill_ms)
{
	if (!r->running || !(prefill_ms > 0) || !isfinite(prefill_ms))
		return;
	prefill_done(p, r);
	r->prefill_ms = prefill_ms;
	p->pending_prefill_ms += prefill_ms;
}

void sl_predict_run_first(struct sl_predictor *p, struct sl_predict_run *r,
                          double end_ms, uint64_t now_ms)
{
	if (!r->running)
		return;
	prefill_done(p, r);
	r->end_ms = end_ms;
	r->start_area = area_at(p, now_ms);
	r->start_ms = now_ms;
}

double sl_predict_run_end(struct sl_predictor *p, struct sl_predict_run *r,
                          uint64_t now_ms)
{
	if (!r->running)
		return 1;
	r->running = false;
	if (r->prev)
		r->prev->next = r->next;
	else
		p->runs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
	p->n_runs--;
	prefill_done(p, r);
	double k = (double)p->busy;
	if (now_ms > r->start_ms)
		k = (area_at(p, now_ms) - r->start_area) /
		    (double)(now_ms - r->start_ms);
	return SL_MAX(k, 1.0);
}

/* ---- calibration and bias ---- */

/*
 * A stochastic estimate of a quantile q of log(actual / predicted): each
 * ratio above the estimate moves it up by `step`, each below down by step
 * q' / q (q' = 1 - q), so it rests where q of the ratios lie below it,
 * within [lo, hi]. Predictions under a millisecond are timer noise and
 * teach nothing. Returns whether it learned.
 */
static bool quantile_observe(double *log_est, double q, double step, double lo,
                             double hi, double predicted, double actual)
{
	if (!(predicted >= 1) || !(actual > 0) || !isfinite(actual))
		return false;
	if (log(actual / predicted) > *log_est)
		*log_est += step;
	else
		*log_est -= step * (1 - q) / q;
	*log_est = SL_MIN(SL_MAX(*log_est, log(lo)), log(hi));
	return true;
}

void sl_predict_calib_observe(struct sl_predict_calib *c, double predicted,
                              double actual)
{
	if (quantile_observe(&c->log_factor, SL_PREDICT_CALIB_QUANTILE,
	                     SL_PREDICT_CALIB_STEP, SL_PREDICT_CALIB_MIN,
	                     SL_PREDICT_CALIB_MAX, predicted, actual))
		c->samples++;
}

double sl_predict_calib_factor(const struct sl_predict_calib *c)
{
	return exp(c->log_factor);
}

/*
 * A wait of 0 (a slot was free after all) is a tenth of a millisecond:
 * below any prediction that teaches, so it says "lower" as it should.
 */
void sl_predict_bias_observe(struct sl_predict_bias *b, double pred_wait,
                             double wait, double pred_first, double first)
{
	bool learned = quantile_observe(
	    &b->log_wait, 0.5, SL_PREDICT_BIAS_STEP, SL_PREDICT_BIAS_MIN,
	    SL_PREDICT_BIAS_MAX, pred_wait, SL_MAX(wait, SL_PREDICT_FLOOR_MS));
	learned |=
	    quantile_observe(&b->log_first, 0.5, SL_PREDICT_BIAS_STEP,
	                     SL_PREDICT_BIAS_MIN, SL_PREDICT_BIAS_MAX,
	                     pred_first, SL_MAX(first, SL_PREDICT_FLOOR_MS));
	if (learned)
		b->samples++;
}

double sl_predict_bias_wait(const struct sl_predict_bias *b)
{
	return exp(b->log_wait);
}

double sl_predict_bias_first(const struct sl_predict_bias *b)
{
	return exp(b->log_first);
}

/* ---- output lengths ---- */

void sl_predict_output_init(struct sl_predict_output *o)
{
	memset(o, 0, sizeof(*o));
}

void sl_predict_output_observe(struct sl_predict_output *o, double bound,
                               double tokens)
{
	if (!usable(tokens))
		return;
	if (bound > 0)
		mean_add(&o->fill, SL_MIN(tokens / bound, 1.0));
	else
		mean_add(&o->unbounded, tokens);
}

double sl_predict_output_tokens(const struct sl_predict_output *o, double bound)
{
	if (bound > 0)
		return bound * mean_of(&o->fill, 1.0);
	return mean_of(&o->unbounded, SL_PREDICT_UNBOUNDED_PRIOR);
}

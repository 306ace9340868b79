/* latency.c: a request's predicted TTFT and TPOT on a model (latency.h). */
#include "sluice/fleet/latency.h"

#include "sluice/base/common.h"

#include <math.h>
#include <string.h>

/*
 * The usable member whose model has seen the most answers (the first on a
 * tie), else the first member, else NULL.
 */
static const struct sl_upstream *representative(const struct sl_pool *p)
{
	const struct sl_upstream *best = NULL;
	for (unsigned i = 0; i < p->n; i++) {
		const struct sl_upstream *u = p->members[i];
		if (!sl_upstream_usable(u))
			continue;
		if (!best || u->predict.samples > best->predict.samples)
			best = u;
	}
	return best ? best : p->n > 0 ? p->members[0] : NULL;
}

/* ---- a min-heap of the times the slots free ---- */

static void sift_down(double *h, unsigned n, unsigned i)
{
	double v = h[i];
	for (;;) {
		unsigned c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && h[c + 1] < h[c])
			c++;
		if (h[c] >= v)
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = v;
}

/*
 * The time until a slot frees for a request with `ahead` requests queued
 * before it, whose work is `work_ms` (latency.h says how): the slots' free
 * times in a heap, each of the first SL_LATENCY_EXACT requests ahead
 * taking the first to free, in the order the queue serves them; the work
 * of any more poured over the slots.
 *
 * A prompt's evaluation stalls every sequence decoding beside it
 * (predict.h, pending_prefill_ms): a running request's end comes later
 * by the prompts in flight not yet evaluated but its own, and each
 * request placed delays the other slots by its own evaluation (its
 * stall_ms). That delay is kept as an offset added to every slot's time,
 * so that placing one stays O(log n); with several upstreams a prompt
 * stalls only its own, and the offset grows by its share.
 */
static double wait_ms(const struct sl_model *m, const struct sl_latency_ask *a,
                      uint64_t due, unsigned ahead, double work_ms,
                      double hold_ms, uint64_t now_ms)
{
	const struct sl_pool *p = &m->pool;
	unsigned free = sl_pool_free_slots(p);
	if (ahead < free)
		return 0;
	unsigned total = sl_pool_total_slots(p);
	if (total == 0)
		return 0; /* nothing to say until an upstream is ready */
	double slot[SL_LATENCY_RUNS_MAX];
	unsigned n = 0, runs = 0, upstreams = 0;
	for (unsigned i = 0; i < p->n; i++) {
		const struct sl_upstream *u = p->members[i];
		if (!sl_upstream_usable(u))
			continue;
		upstreams++;
		double pending = u->predict.pending_prefill_ms;
		for (const struct sl_predict_run *r = u->predict.runs;
		     r && n < SL_LATENCY_RUNS_MAX; r = r->next, runs++) {
			double left = r->end_ms - (double)now_ms;
			left = left > 0 ? left : 0;
			slot[n++] = left + pending - r->prefill_ms;
		}
	}
	/* The free slots, and those held by others: half a hold each. */
	unsigned busy = total > free ? total - free : 0;
	for (unsigned i = 0; i < free && n < SL_LATENCY_RUNS_MAX; i++)
		slot[n++] = 0;
	for (unsigned i = runs; i < busy && n < SL_LATENCY_RUNS_MAX; i++)
		slot[n++] = hold_ms / 2;
	for (unsigned i = n / 2; i-- > 0;)
		sift_down(slot, n, i);
	const struct sl_sched_item *items[SL_LATENCY_EXACT];
	unsigned exact = sl_sched_ahead_items(&m->sched, a->priority, due,
	                                      items, SL_LATENCY_EXACT);
	double rest = work_ms, offset = 0, stalls = 0, services = 0;
	double share = 1.0 / (double)SL_MAX(upstreams, 1u);
	for (unsigned i = 0; i < exact; i++) {
		/* The first to free takes it; the others wait its stall. */
		double stall = items[i]->stall_ms * share;
		slot[0] += items[i]->service_ms - stall;
		offset += stall;
		sift_down(slot, n, 0);
		rest -= items[i]->service_ms;
		stalls += items[i]->stall_ms;
		services += items[i]->service_ms;
	}
	if (exact == ahead || !(rest > 0))
		return slot[0] + offset;
	/*
	 * Beyond those, the work left over all the slots: by then they free
	 * within a request's hold of one another, so the level it fills
	 * them to is close to the first to free. Each of them stalls the
	 * other slots as those placed did: their stalls' share of their
	 * work, on the n - 1 slots it does not take.
	 */
	double sum = 0;
	for (unsigned i = 0; i < n; i++)
		sum += slot[i];
	double ratio = services > 0 ? stalls / services : 0;
	double spread = rest * (1 + ratio * share * (double)(n - 1));
	return SL_MAX((sum + spread) / (double)n, slot[0]) + offset;
}

void sl_latency_predict(const struct sl_model *m,
                        const struct sl_latency_ask *a, uint64_t now_ms,
                        struct sl_latency *out)
{
	static const struct sl_predictor none; /* the prior */
	memset(out, 0, sizeof(*out));
	const struct sl_upstream *u = representative(&m->pool);
	const struct sl_predictor *p = u ? &u->predict : &none;
	double outputs = SL_MAX(a->outputs, 1.0);
	out->known = u && sl_predict_known(p);
	out->out_tokens = sl_predict_output_tokens(&m->output, a->max_tokens);
	out->raw_first_ms = sl_predict_first_ms(p, a->prompt_bytes);
	out->prefill_ms = sl_predict_prefill_ms(
	    p, sl_predict_prompt_tokens(p, a->prompt_bytes));
	out->first_ms = out->raw_first_ms * sl_predict_bias_first(&m->bias);
	/*
	 * The concurrency it will meet: what runs now, and what is ahead of
	 * it, up to the slots.
	 */
	unsigned in_band;
	double band_work;
	sl_sched_ahead(&m->sched, a->priority, UINT64_MAX, &in_band,
	               &band_work);
	unsigned slots = u ? SL_MAX(u->total_slots, 1u) : 1;
	double k = SL_MIN((double)slots, (double)(p->busy + 1 + in_band));
	out->tpot_ms = sl_predict_tpot_ms(p, k);
	out->hold_ms =
	    sl_predict_hold_ms(p, a->prompt_bytes, out->out_tokens, k);
	out->service_ms = out->hold_ms * outputs;
	/*
	 * Its due, for the work ahead: its latest start with a service
	 * level, else as the queue counts one without.
	 */
	uint64_t due = now_ms + sl_sched_due_wait_ms(&m->sched);
	if (a->slo_ttft_ms) {
		double start =
		    (double)(now_ms + a->slo_ttft_ms) - out->first_ms;
		out->slo_start_ms =
		    start > (double)now_ms + 1 ? (uint64_t)start : now_ms + 1;
		due = out->slo_start_ms;
	}
	double work;
	sl_sched_ahead(&m->sched, a->priority, due, &out->ahead, &work);
	out->raw_wait_ms =
	    wait_ms(m, a, due, out->ahead, work, out->hold_ms, now_ms);
	out->wait_ms = out->raw_wait_ms * sl_predict_bias_wait(&m->bias);
	out->ttft_ms = out->wait_ms + out->first_ms;
	out->ttft_admit_ms = out->ttft_ms * sl_predict_calib_factor(&m->calib);
}

double sl_latency_hold_on(const struct sl_upstream *u,
                          const struct sl_latency_ask *a,
                          const struct sl_latency *l, unsigned running)
{
	return sl_predict_hold_ms(&u->predict, a->prompt_bytes, l->out_tokens,
	                          (double)SL_MAX(running, 1u));
}

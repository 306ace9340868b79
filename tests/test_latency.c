/*
 * test_latency.c: a request's predicted TTFT on a model (latency.h), on
 * constructed queues: no wait while a slot is free for it, the running
 * request that ends first while few are ahead, the work ahead over the
 * slots when many are, only what the queue serves before it (a looser
 * deadline waits behind), the stalls of prompts evaluated meanwhile, and
 * its latest start.
 */
#include "sluice/fleet/latency.h"

#include "sluice/base/common.h"
#include "test.h"

#include <math.h>
#include <string.h>

#define ASSERT_NEAR(got, want, tol)                                            \
	do {                                                                   \
		double g_ = (got), w_ = (want);                                \
		if (!(fabs(g_ - w_) <= (tol)))                                 \
			TEST_FAIL("%s = %g, want %g +- %g", #got, g_, w_,      \
			          (double)(tol));                              \
	} while (0)

static unsigned no_slots(void *ctx)
{
	(void)ctx;
	return 0;
}

static void nothing(void *ctx, struct sl_sched_item *it, uint64_t now)
{
	(void)ctx, (void)it, (void)now;
}

static void no_dispatch(void *ctx, struct sl_sched_item **items, unsigned n,
                        uint64_t now)
{
	(void)ctx, (void)items, (void)n, (void)now;
}

static const struct sl_sched_ops ops = {.free_slots = no_slots,
                                        .dispatch = no_dispatch,
                                        .expire = nothing,
                                        .shed = nothing};

/*
 * An upstream of `slots` whose answers cost, exactly: 10 ms to evaluate
 * 1,000 prompt tokens (at 4 bytes a token, none cached) and 1 ms a
 * generated token, whatever the concurrency; its first token comes 2 ms
 * after its prompt.
 */
static void upstream(struct sl_upstream *u, unsigned slots)
{
	memset(u, 0, sizeof(*u));
	u->state = SL_UPSTREAM_READY;
	u->total_slots = slots;
	sl_predict_init(&u->predict, 0);
	for (int i = 0; i < 40; i++) {
		double tokens = 250 * (1 + i % 8);
		double k = 1 + i % 4;
		struct sl_predict_sample s = {
		    .prompt_n = tokens,
		    .prompt_ms = tokens / 100,
		    .predicted_n = 32,
		    .per_token_ms = 1,
		    .decoding = k,
		    .hold_ms = tokens / 100 + 32,
		    .first_ms = tokens / 100 + 2,
		    .prompt_bytes = 4 * tokens,
		};
		sl_predict_observe(&u->predict, &s);
	}
}

struct world {
	struct sl_model m;
	struct sl_upstream u;
	struct sl_predict_run runs[16];
	struct sl_sched_item items[16];
};

static void start(struct world *w, unsigned slots)
{
	memset(w, 0, sizeof(*w));
	upstream(&w->u, slots);
	sl_pool_add(&w->m.pool, &w->u);
	struct sl_sched_config cfg = {.aging_rate = 0.2,
	                              .max_queue = 16,
	                              .queue_timeout_ms = 60000,
	                              .fair = false};
	ASSERT_EQ(sl_sched_init(&w->m.sched, &cfg, &ops, w, 0), 0);
}

/* A request running on the upstream, predicted to end at end_ms. */
static void running(struct world *w, unsigned i, double end_ms)
{
	w->u.inflight++;
	sl_predict_run_start(&w->u.predict, &w->runs[i], end_ms, 0);
}

/* A queued request of 4,000 bytes: its service time is predicted. */
static void queue(struct world *w, unsigned i, double priority,
                  uint64_t slo_start, double service_ms, uint64_t now)
{
	w->items[i].slo_start_ms = slo_start;
	w->items[i].service_ms = service_ms;
	ASSERT_EQ(sl_sched_push(&w->m.sched, &w->items[i], priority, now), 0);
}

static const struct sl_latency_ask ask_1k = {
    .prompt_bytes = 4000, .max_tokens = 32, .outputs = 1, .priority = 1};

static void test_what_is_predicted(void)
{
	struct world w;
	start(&w, 4);
	struct sl_latency l;
	sl_latency_predict(&w.m, &ask_1k, 1000, &l);
	ASSERT(l.known);
	/* 1,000 tokens: 10 ms, and 2 to the first token; 32 out at 1 ms. */
	ASSERT_NEAR(l.first_ms, 12, 0.5);
	ASSERT_NEAR(l.out_tokens, 32, 1e-9);
	ASSERT_NEAR(l.tpot_ms, 1, 0.05);
	ASSERT_NEAR(l.hold_ms, 42, 1);
	ASSERT_NEAR(l.service_ms, l.hold_ms, 1e-9);
	/* A slot is free: no wait. */
	ASSERT_EQ(l.ahead, 0);
	ASSERT(l.wait_ms == 0);
	ASSERT_NEAR(l.ttft_ms, l.first_ms, 1e-9);
	/* No level, no latest start; calibration not learned: factor 1. */
	ASSERT_EQ(l.slo_start_ms, 0);
	ASSERT_NEAR(l.ttft_admit_ms, l.ttft_ms, 1e-9);
	/* Three outputs: three times the work. */
	struct sl_latency_ask three = ask_1k;
	three.outputs = 3;
	sl_latency_predict(&w.m, &three, 1000, &l);
	ASSERT_NEAR(l.service_ms, 3 * l.hold_ms, 1e-9);
	sl_sched_free(&w.m.sched);
}

static void test_wait_for_a_slot(void)
{
	struct world w;
	start(&w, 4);
	/* All four busy, ending at 1100, 1300, 1200 and 1900. */
	running(&w, 0, 1100);
	running(&w, 1, 1300);
	running(&w, 2, 1200);
	running(&w, 3, 1900);
	struct sl_latency l;
	/* Nothing queued: the first slot to free, at 1100. */
	sl_latency_predict(&w.m, &ask_1k, 1000, &l);
	ASSERT_NEAR(l.wait_ms, 100, 1e-9);
	/*
	 * Two ahead of 50 ms each: the first takes the slot freeing at 1100
	 * and frees it again at 1150; the second takes that one, to 1200,
	 * when the slot of 1200 frees too: this one's.
	 */
	queue(&w, 0, 1, 0, 50, 1000);
	queue(&w, 1, 1, 0, 50, 1000);
	sl_latency_predict(&w.m, &ask_1k, 1000, &l);
	ASSERT_EQ(l.ahead, 2);
	ASSERT_NEAR(l.wait_ms, 200, 1e-9);
	/* Later, less is left; one past its end counts as ending now. */
	sl_latency_predict(&w.m, &ask_1k, 1250, &l);
	ASSERT_NEAR(l.wait_ms, 50, 1e-9);
	/*
	 * Eight ahead, six more of 100 ms: in turn they free the slots at
	 * 150, 200, 300, 300, 400, 400, 400 and 500 (from 1000): the one of
	 * 400 left is this one's, where a fluid would say (1500 + 700) / 4.
	 */
	for (unsigned i = 2; i < 8; i++)
		queue(&w, i, 1, 0, 100, 1000);
	sl_latency_predict(&w.m, &ask_1k, 1000, &l);
	ASSERT_EQ(l.ahead, 8);
	ASSERT_NEAR(l.wait_ms, 400, 1e-9);
	ASSERT_NEAR(l.ttft_ms, l.wait_ms + l.first_ms, 1e-9);
	sl_sched_free(&w.m.sched);
}

/*
 * A prompt's evaluation stalls the sequences decoding beside it: a prompt
 * in flight not yet evaluated delays every other running request's end,
 * and a request placed ahead delays the slots it does not take.
 */
static void test_prompts_stall_the_others(void)
{
	struct world w;
	start(&w, 2);
	running(&w, 0, 1100);
	running(&w, 1, 1300);
	struct sl_latency l;
	sl_latency_predict(&w.m, &ask_1k, 1000, &l);
	ASSERT_NEAR(l.wait_ms, 100, 1e-9);
	ASSERT_NEAR(l.prefill_ms, 10, 0.5);
	/* The second's prompt (40 ms) is still being evaluated. */
	sl_predict_run_prefill(&w.u.predict, &w.runs[1], 40);
	sl_latency_predict(&w.m, &ask_1k, 1000, &l);
	ASSERT_NEAR(l.wait_ms, 140, 1e-9);
	/* Its first token came: evaluated, no stall left. */
	sl_predict_run_first(&w.u.predict, &w.runs[1], 1300, 1000);
	ASSERT(w.u.predict.pending_prefill_ms == 0);
	sl_latency_predict(&w.m, &ask_1k, 1000, &l);
	ASSERT_NEAR(l.wait_ms, 100, 1e-9);
	/*
	 * One ahead of 150 ms whose prompt takes 30: it takes the slot of
	 * 1100 (to 1250) and stalls the other to 1330, so this one's slot
	 * frees at 1250.
	 */
	w.items[0].stall_ms = 30;
	queue(&w, 0, 1, 0, 150, 1000);
	sl_latency_predict(&w.m, &ask_1k, 1000, &l);
	ASSERT_NEAR(l.wait_ms, 250, 1e-9);
	/*
	 * With one of 100 ms more (stall 60): it takes the slot of 1250 (to
	 * 1350) and stalls the other to 1390; this one's frees at 1350.
	 */
	w.items[1].stall_ms = 60;
	queue(&w, 1, 1, 0, 100, 1000);
	sl_latency_predict(&w.m, &ask_1k, 1000, &l);
	ASSERT_NEAR(l.wait_ms, 350, 1e-9);
	/* Ended, a run's pending evaluation goes with it. */
	sl_predict_run_prefill(&w.u.predict, &w.runs[0], 25);
	ASSERT_NEAR(w.u.predict.pending_prefill_ms, 25, 1e-9);
	sl_predict_run_end(&w.u.predict, &w.runs[0], 1050);
	ASSERT(w.u.predict.pending_prefill_ms == 0);
	sl_sched_free(&w.m.sched);
}

/*
 * What waits ahead is what the queue serves first: higher priorities, and
 * in its own band what is due no later than it (sched.h, "Deadlines").
 */
static void test_only_what_goes_first_is_ahead(void)
{
	struct world w;
	start(&w, 1);
	running(&w, 0, 1000);
	queue(&w, 0, 2, 0, 100, 0);      /* urgent: ahead of anyone */
	queue(&w, 1, 1, 30000, 1000, 0); /* due at 30 s */
	queue(&w, 2, 1, 0, 10000, 0);    /* none: due at 5 s */
	queue(&w, 3, 0, 100, 100000, 0); /* batch: behind */
	struct sl_latency l;
	/* With a level of 500 ms: due at about 500 (less its 12 ms). */
	struct sl_latency_ask a = ask_1k;
	a.slo_ttft_ms = 500;
	sl_latency_predict(&w.m, &a, 0, &l);
	ASSERT_EQ(l.slo_start_ms, 488);
	ASSERT_EQ(l.ahead, 1);
	ASSERT_NEAR(l.wait_ms, (1000 + 100) / 1.0, 1e-9);
	/* With 10 s: the one without a level (due at 5 s) goes first. */
	a.slo_ttft_ms = 10000;
	sl_latency_predict(&w.m, &a, 0, &l);
	ASSERT_EQ(l.ahead, 2);
	ASSERT_NEAR(l.wait_ms, 1000 + 100 + 10000, 1e-9);
	/* Without one: due at 5 s as well, after those queued before it. */
	a.slo_ttft_ms = 0;
	sl_latency_predict(&w.m, &a, 0, &l);
	ASSERT_EQ(l.ahead, 2);
	/* A level within the upstream's own time: its start is now + 1. */
	a.slo_ttft_ms = 5;
	sl_latency_predict(&w.m, &a, 0, &l);
	ASSERT_EQ(l.slo_start_ms, 1);
	sl_sched_free(&w.m.sched);
}

/*
 * Against list scheduling done plainly: each request ahead, in order,
 * takes the first slot to free. Exact for the first SL_LATENCY_EXACT;
 * with more ahead, within one request's time.
 */
static void test_matches_list_scheduling(void)
{
	unsigned seed = 5;
	for (unsigned round = 0; round < 200; round++) {
		struct world w;
		start(&w, 4);
		static struct sl_sched_item many[200];
		struct sl_sched_config cfg = {.aging_rate = 0.2,
		                              .max_queue = 200,
		                              .queue_timeout_ms = 60000};
		sl_sched_free(&w.m.sched);
		ASSERT_EQ(sl_sched_init(&w.m.sched, &cfg, &ops, &w, 0), 0);
		double slots[4];
		for (unsigned i = 0; i < 4; i++) {
			seed = seed * 1103515245u + 12345u;
			slots[i] = (double)(seed >> 16 & 1023);
			running(&w, i, 1000 + slots[i]);
		}
		seed = seed * 1103515245u + 12345u;
		unsigned n = (seed >> 16) % 120, ahead = 0;
		double max_service = 0;
		for (unsigned i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			double service = 1 + (double)(seed >> 16 & 255);
			memset(&many[i], 0, sizeof(many[i]));
			many[i].service_ms = service;
			ASSERT_EQ(sl_sched_push(&w.m.sched, &many[i], 1, 1000),
			          0);
			/* Plainly: the slot freeing first takes it. */
			unsigned first = 0;
			for (unsigned k = 1; k < 4; k++)
				if (slots[k] < slots[first])
					first = k;
			slots[first] += service;
			ahead++;
			max_service = SL_MAX(max_service, service);
		}
		double want = SL_MIN(SL_MIN(slots[0], slots[1]),
		                     SL_MIN(slots[2], slots[3]));
		struct sl_latency l;
		sl_latency_predict(&w.m, &ask_1k, 1000, &l);
		ASSERT_EQ(l.ahead, ahead);
		if (ahead <= SL_LATENCY_EXACT)
			ASSERT_NEAR(l.wait_ms, want, 1e-6);
		else
			ASSERT_NEAR(l.wait_ms, want, max_service);
		sl_sched_free(&w.m.sched);
	}
}

/* Before its upstream's answers taught it, a prediction refuses nothing. */
static void test_unknown_at_first(void)
{
	struct world w;
	start(&w, 2);
	sl_predict_init(&w.u.predict, 0);
	struct sl_latency l;
	sl_latency_predict(&w.m, &ask_1k, 0, &l);
	ASSERT(!l.known);
	ASSERT(l.first_ms == 0 && l.hold_ms == 0);
	/* A model with no upstream at all: the prior, nothing known. */
	struct sl_model none;
	memset(&none, 0, sizeof(none));
	struct sl_sched_config cfg = {.max_queue = 4, .queue_timeout_ms = 1};
	ASSERT_EQ(sl_sched_init(&none.sched, &cfg, &ops, NULL, 0), 0);
	sl_latency_predict(&none, &ask_1k, 0, &l);
	ASSERT(!l.known);
	ASSERT(l.ttft_ms == 0);
	sl_sched_free(&none.sched);
	sl_sched_free(&w.m.sched);
}

int main(void)
{
	RUN(test_what_is_predicted);
	RUN(test_wait_for_a_slot);
	RUN(test_prompts_stall_the_others);
	RUN(test_only_what_goes_first_is_ahead);
	RUN(test_matches_list_scheduling);
	RUN(test_unknown_at_first);
	return 0;
}

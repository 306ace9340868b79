/*
 * predict-bench: what a prediction of a request's latency costs the event
 * loop (latency.h), as the queue and the running requests grow; and what
 * an answer's sample costs the model it teaches (predict.h).
 *
 *   build/bench/predict-bench
 *
 * Prints a Markdown table of nanoseconds per call, the best of five rounds
 * of thread CPU time, for queues of 0 to 16,384 requests and 4 to 256
 * running ones (a model of 64 upstreams of 4 slots at most).
 */
#include "sluice/base/common.h"
#include "sluice/fleet/latency.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUNDS 5
#define CALLS 20000
#define MAX_QUEUE 16384
#define MAX_UPSTREAMS 64
#define SLOTS 4

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

static uint64_t cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A sample as a CPU llama-server gives them, varied by i. */
static struct sl_predict_sample sample(unsigned i)
{
	double tokens = 50 + (i * 37) % 2000;
	double k = 1 + i % SLOTS;
	double tpot = 0.1 + 0.08 * k;
	double prefill = 0.02 * tokens + 3e-5 * tokens * tokens;
	return (struct sl_predict_sample){
	    .prompt_n = tokens,
	    .prompt_ms = prefill,
	    .predicted_n = 64,
	    .per_token_ms = tpot,
	    .decoding = k,
	    .hold_ms = prefill + 64 * tpot + 1,
	    .first_ms = prefill + 1,
	    .prompt_bytes = 4 * tokens,
	};
}

static struct sl_model model;
static struct sl_upstream ups[MAX_UPSTREAMS];
static struct sl_predict_run runs[MAX_UPSTREAMS * SLOTS];
static struct sl_sched_item items[MAX_QUEUE];

/* A model of n_ups upstreams, every slot running, q requests queued. */
static void build(unsigned n_ups, unsigned q)
{
	memset(&model, 0, sizeof(model));
	memset(runs, 0, sizeof(runs));
	for (unsigned u = 0; u < n_ups; u++) {
		memset(&ups[u], 0, sizeof(ups[u]));
		ups[u].state = SL_UPSTREAM_READY;
		ups[u].total_slots = SLOTS;
		ups[u].index = u;
		sl_predict_init(&ups[u].predict, 0);
		for (unsigned i = 0; i < 64; i++) {
			struct sl_predict_sample s = sample(i);
			sl_predict_observe(&ups[u].predict, &s);
		}
		for (unsigned k = 0; k < SLOTS; k++) {
			ups[u].inflight++;
			sl_predict_run_start(&ups[u].predict,
			                     &runs[u * SLOTS + k],
			                     1000 + 37.0 * (k + u), 0);
		}
		sl_pool_add(&model.pool, &ups[u]);
	}
	struct sl_sched_config cfg = {.aging_rate = 0.2,
	                              .max_queue = MAX_QUEUE,
	                              .queue_timeout_ms = 60000,
	                              .fair = true};
	sl_sched_init(&model.sched, &cfg, &ops, NULL, 0);
	for (unsigned i = 0; i < q; i++) {
		memset(&items[i], 0, sizeof(items[i]));
		items[i].flow_id = i % 7;
		items[i].weight = 1;
		items[i].service_ms = 50 + i % 100;
		items[i].slo_start_ms = i % 3 ? 500 + i % 4000 : 0;
		sl_sched_push(&model.sched, &items[i], (double)(i % 3), i / 16);
	}
}

static double predict_ns(void)
{
	struct sl_latency_ask a = {.prompt_bytes = 2000,
	                           .max_tokens = 64,
	                           .outputs = 1,
	                           .priority = 1,
	                           .slo_ttft_ms = 500};
	struct sl_latency l;
	double best = 1e18, sink = 0;
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t t = cpu_ns();
		for (unsigned i = 0; i < CALLS; i++) {
			a.prompt_bytes = 1000 + (i & 1023);
			sl_latency_predict(&model, &a, 1000 + i % 500, &l);
			sink += l.ttft_ms;
		}
		double ns = (double)(cpu_ns() - t) / CALLS;
		best = ns < best ? ns : best;
	}
	if (sink < 0)
		puts("");
	return best;
}

static double observe_ns(void)
{
	struct sl_predictor p;
	sl_predict_init(&p, 0);
	double best = 1e18;
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t t = cpu_ns();
		for (unsigned i = 0; i < CALLS; i++) {
			struct sl_predict_sample s = sample(i);
			sl_predict_observe(&p, &s);
		}
		double ns = (double)(cpu_ns() - t) / CALLS;
		best = ns < best ? ns : best;
	}
	return best;
}

int main(void)
{
	static const unsigned queues[] = {0, 16, 256, 1024, 16384};
	static const unsigned upstreams[] = {1, 16, 64};
	printf("| queued | running | ns per prediction |\n");
	printf("|---:|---:|---:|\n");
	for (size_t u = 0; u < SL_ARRAY_SIZE(upstreams); u++) {
		for (size_t q = 0; q < SL_ARRAY_SIZE(queues); q++) {
			build(upstreams[u], queues[q]);
			printf("| %u | %u | %.0f |\n", queues[q],
			       upstreams[u] * SLOTS, predict_ns());
			sl_sched_free(&model.sched);
		}
	}
	printf("\nns per answer's sample (sl_predict_observe): %.0f\n",
	       observe_ns());
	return 0;
}

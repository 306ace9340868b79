/*
 * latency.h: a request's predicted time to first token (TTFT) and time per
 * output token (TPOT) on a model, before it is admitted: from what its
 * upstreams' answers cost (predict.h), what runs on them now and what
 * waits ahead of it in the model's queue (sched.h, "Work ahead").
 *
 *   TTFT = wait + first
 *
 * first is the upstream's part: the prompt's evaluation and what comes
 * with it, on the model's representative upstream (the usable one whose
 * model has seen the most answers: replicas are alike, and the one seen
 * most is known best). wait is the time until a slot frees for it: 0 while
 * the free slots outnumber the requests ahead; else what list scheduling
 * gives, in the order the queue serves them: each slot free at its
 * running request's predicted end (now, for one that ran past it; half a
 * request's hold for a slot others hold on a remote upstream, upstream.h
 * "Occupancy"), each request ahead taking the first slot to free for its
 * predicted hold, and this one the first to free after them all. Every
 * prompt evaluated meanwhile (in flight, or of a request placed ahead)
 * stalls the other slots by its evaluation. The
 * first SL_LATENCY_EXACT ahead are placed one by one; the work of any
 * more is spread over the slots as a fluid (their mean free time once it
 * is poured in), close once that many are ahead.
 *
 * Each part is multiplied by the model's bias for it (predict.h): the
 * median of its actual over predicted time.
 *
 * Admission compares ttft_admit_ms: the TTFT times the model's
 * calibration (predict.h), a prediction seldom too low.
 *
 * The cost: a heap of the model's slots (at most SL_LATENCY_RUNS_MAX, made
 * in linear time), at most SL_LATENCY_EXACT requests placed in it, and
 * O(log n) queries of the queue; no allocation.
 */
#ifndef SLUICE_LATENCY_H
#define SLUICE_LATENCY_H

#include "sluice/fleet/model.h"

#include <stdbool.h>
#include <stdint.h>

/*
 * Running requests read for the wait, at most: more than any model has
 * slots in practice (64 upstreams of a few slots); past it, the rest count
 * as the slots of others do.
 */
#define SL_LATENCY_RUNS_MAX 512
/*
 * Requests ahead placed one by one: 16 services deep on 4 slots, where
 * the fluid's error (about half a request's hold) is a few percent.
 */
#define SL_LATENCY_EXACT 64

/* A request as the prediction sees it. */
struct sl_latency_ask {
	double prompt_bytes;  /* its body's bytes */
	double max_tokens;    /* the bound on each output; < 0: none */
	double outputs;       /* outputs it asks for (prompts x n), >= 1 */
	double priority;      /* its initial priority */
	uint64_t slo_ttft_ms; /* its TTFT service level; 0: none */
};

/* What is predicted for it. */
struct sl_latency {
	double out_tokens; /* tokens each output will generate */
	double first_ms;   /* the upstream's part of its TTFT */
	/* first_ms and wait_ms before the bias: what the bias learns on. */
	double raw_first_ms, raw_wait_ms;
	double hold_ms; /* the slot it will hold */
	/* Its prompt's evaluation: what its start stalls the others by. */
	double prefill_ms;
	double service_ms; /* hold_ms times its outputs: its work */
	double tpot_ms;    /* per token, at the concurrency it will meet */
	double wait_ms;    /* until a slot frees for it */
	double ttft_ms;    /* wait_ms + first_ms */
	/* ttft_ms times the model's calibration: what admission compares. */
	double ttft_admit_ms;
	/*
	 * With a TTFT service level: the latest moment it may leave the
	 * queue and still meet it (sched.h, "Deadlines"), at least now + 1;
	 * 0 without one.
	 */
	uint64_t slo_start_ms;
	unsigned ahead; /* requests queued ahead of it */
	/* The representative upstream's model has seen enough to refuse on. */
	bool known;
};

/* Predicts a request arriving now at model m. */
void sl_latency_predict(const struct sl_model *m,
                        const struct sl_latency_ask *a, uint64_t now_ms,
                        struct sl_latency *out);

/*
 * The slot a request predicted as `l` will hold on upstream u, which runs
 * `running` requests with it: for its end in u's running list.
 */
double sl_latency_hold_on(const struct sl_upstream *u,
                          const struct sl_latency_ask *a,
                          const struct sl_latency *l, unsigned running);

#endif

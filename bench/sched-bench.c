/*
 * sched-bench: the cost of sluice's queue operations as it grows.
 *
 * For each size N it queues N requests with random priorities at rising
 * arrival times, removes N/10 from random places (clients that leave), then
 * dispatches the rest one at a time (each freed slot takes the top). Prints
 * a Markdown table of nanoseconds per operation; with a heap they grow with
 * log N, not N.
 *
 *   build/bench/sched-bench [MAX_N]     (default 1000000)
 */
#include "sluice/base/common.h"
#include "sluice/sched/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct bench {
	unsigned free;
	unsigned long long dispatched;
};

static unsigned free_slots(void *ctx)
{
	return ((struct bench *)ctx)->free;
}

static void dispatch(void *ctx, struct sl_sched_item **items, unsigned n,
                     uint64_t now)
{
	struct bench *b = ctx;
	(void)items;
	(void)now;
	b->free -= n;
	b->dispatched += n;
}

static void expire(void *ctx, struct sl_sched_item *item, uint64_t now)
{
	(void)ctx;
	(void)item;
	(void)now;
}

/* Never called here: the queue is sized to hold every request. */
static void shed(void *ctx, struct sl_sched_item *item, uint64_t now)
{
	expire(ctx, item, now);
}

static const struct sl_sched_ops ops = {
    .free_slots = free_slots,
    .dispatch = dispatch,
    .expire = expire,
    .shed = shed,
};

static double ns_per(uint64_t start, uint64_t end, unsigned n)
{
	return (double)(end - start) / (double)n;
}

int main(int argc, char **argv)
{
	unsigned max_n =
	    argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 1000000;
	printf("| queued N | insert ns/op | remove ns/op | pop ns/op | "
	       "pop / log2(N) |\n|---:|---:|---:|---:|---:|\n");
	for (unsigned n = 1000; n <= max_n; n *= 10) {
		struct sl_sched_config cfg = {
		    .aging_rate = 0.2,
		    .window_ms = 0,
		    .max_batch = 1,
		    .max_queue = n,
		    .queue_timeout_ms = UINT64_MAX / 4,
		    .urgent_bypass = true,
		};
		struct bench b = {0};
		struct sl_sched s;
		sl_sched_init(&s, &cfg, &ops, &b, 0);
		struct sl_sched_item *items = sl_xcalloc(n, sizeof(*items));
		uint64_t rng = 42;

		uint64_t t0 = sl_now_ns();
		for (unsigned i = 0; i < n; i++) {
			rng = rng * 6364136223846793005u + 1;
			sl_sched_push(&s, &items[i], (double)(rng >> 62),
			              i / 8);
		}
		uint64_t t1 = sl_now_ns();
		unsigned removed = n / 10;
		for (unsigned i = 0; i < removed; i++) {
			rng = rng * 6364136223846793005u + 1;
			sl_sched_remove(&s, &items[(rng >> 33) % n]);
		}
		uint64_t t2 = sl_now_ns();
		unsigned left = sl_sched_depth(&s);
		b.free = left;
		sl_sched_run(&s, n / 8);
		uint64_t t3 = sl_now_ns();
		if (b.dispatched != left || sl_sched_depth(&s) != 0) {
			fprintf(stderr, "sched-bench: %llu of %u dispatched\n",
			        b.dispatched, left);
			return 1;
		}
		double pop = ns_per(t2, t3, left);
		printf("| %u | %.0f | %.0f | %.0f | %.1f |\n", n,
		       ns_per(t0, t1, n), ns_per(t1, t2, removed), pop,
		       pop / log2((double)n));
		free(items);
		sl_sched_free(&s);
	}
	return 0;
}

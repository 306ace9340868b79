/*
 * test_proxy_dispatch.c: a request the queue counted a free slot for, and
 * that no upstream takes when its turn comes (the count and the pick
 * disagree), goes back to its place in the queue rather than fail with
 * 502 (proxy.c), and the scheduler does not send it round again in the
 * same run (sched.h, sl_sched_requeue). Fake hooks and slots: no sockets,
 * no upstream.
 */
#include "../src/relay/proxy_impl.h"

#include "sluice/fleet/model.h"
#include "sluice/ops/stats.h"
#include "sluice/relay/relay.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

/* Picks the fake hooks were asked for; each run asks them this many at most. */
static unsigned picks;
#define PICKS_MAX 100

static struct sl_upstream *
fake_pick(void *owner, const struct sl_model *m, bool need_slot,
          const struct sl_upstream *avoid, const struct sl_affinity_key *key,
          const struct sl_pool_slo *slo, char *why, size_t size)
{
	(void)owner, (void)m, (void)avoid, (void)key, (void)slo;
	ASSERT(need_slot);
	/* A scheduler that sends it round and round is stopped here. */
	if (++picks > PICKS_MAX)
		TEST_FAIL("the request went round %u times in one run", picks);
	snprintf(why, size, "the fake upstreams have no slot");
	return NULL;
}

static void fake_model_used(struct sl_model *m)
{
	(void)m;
}

static const struct sl_relay_hooks hooks = {
    .pick_upstream = fake_pick,
    .model_used = fake_model_used,
};

/* What the queue believes free: one slot, whatever the pick says. */
static unsigned fake_free(void *ctx)
{
	(void)ctx;
	return 1;
}

static void fake_expire(void *ctx, struct sl_sched_item *it, uint64_t now)
{
	(void)ctx, (void)it, (void)now;
	TEST_FAIL("nothing expires here");
}

static const struct sl_sched_ops ops = {
    .free_slots = fake_free,
    .dispatch = sl_proxy_dispatch,
    .expire = fake_expire,
    .shed = fake_expire,
};

static struct exchange *queued(struct sl_relay *relay, struct sl_model *m,
                               const char *id, uint64_t now)
{
	struct exchange *x = calloc(1, sizeof(*x));
	ASSERT(x);
	x->relay = relay;
	x->model = m;
	x->priority = SL_PRIORITY_NORMAL;
	x->arrived_ms = now;
	snprintf(x->id, sizeof(x->id), "%s", id);
	ASSERT_EQ(sl_sched_push(&m->sched, &x->item, x->priority, now), 0);
	sl_stats_queued(relay->stats, x->priority, +1);
	return x;
}

static void test_no_upstream_puts_it_back_in_its_place(void)
{
	uv_loop_t loop;
	ASSERT_EQ(uv_loop_init(&loop), 0);
	struct sl_stats stats;
	sl_stats_init(&stats);
	struct sl_relay relay = {
	    .hooks = &hooks, .loop = &loop, .stats = &stats};
	struct sl_model m = {.name = "m"};
	struct sl_sched_config cfg = {
	    .aging_rate = 0.2, .max_queue = 8, .queue_timeout_ms = 60000};
	ASSERT_EQ(sl_sched_init(&m.sched, &cfg, &ops, &m, 0), 0);
	struct exchange *a = queued(&relay, &m, "a", 0);
	struct exchange *b = queued(&relay, &m, "b", 1);

	/* The run ends after one pick: a waits again, first in line. */
	uint64_t next = sl_sched_run(&m.sched, 10);
	ASSERT_EQ(picks, 1);
	ASSERT_EQ(sl_sched_depth(&m.sched), 2);
	ASSERT(sl_sched_queued(&a->item) && sl_sched_queued(&b->item));
	ASSERT(m.sched.heap[0] == &a->item);
	ASSERT_EQ(stats.queued_now[1], 2); /* the normal class */
	/* Its queue timeout still holds, from its arrival. */
	ASSERT_EQ(next, cfg.queue_timeout_ms + 1);
	/* The next run tries again, once. */
	sl_sched_run(&m.sched, 20);
	ASSERT_EQ(picks, 2);
	ASSERT(m.sched.heap[0] == &a->item);

	sl_sched_release(&m.sched, &a->item);
	sl_sched_release(&m.sched, &b->item);
	sl_sched_free(&m.sched);
	free(a);
	free(b);
	ASSERT_EQ(uv_loop_close(&loop), 0);
}

int main(void)
{
	RUN(test_no_upstream_puts_it_back_in_its_place);
	return 0;
}

/*
 * test_pool.c: a model's upstreams and the choice among them (pool.h):
 * the most room wins, ties go in turn, a failed upstream is avoided while
 * another qualifies, and each refusal says why.
 */
#include "sluice/base/common.h"
#include "sluice/fleet/pool.h"
#include "sluice/sched/predict.h"
#include "test.h"

#include <string.h>

/* A ready upstream at `index` with `slots`, `inflight` of them busy. */
static struct sl_upstream *up(struct sl_upstream *u, unsigned index,
                              unsigned slots, unsigned inflight)
{
	memset(u, 0, sizeof(*u));
	u->state = SL_UPSTREAM_READY;
	u->index = index;
	u->total_slots = slots;
	u->inflight = inflight;
	return u;
}

static void test_membership_keeps_index_order(void)
{
	struct sl_upstream a, b, c;
	struct sl_pool p = {.n = 0};
	ASSERT_EQ(sl_pool_add(&p, up(&b, 5, 1, 0)), 0);
	ASSERT_EQ(sl_pool_add(&p, up(&a, 2, 1, 0)), 0);
	ASSERT_EQ(sl_pool_add(&p, up(&c, 9, 1, 0)), 0);
	ASSERT_EQ(p.n, 3);
	ASSERT(p.members[0] == &a && p.members[1] == &b && p.members[2] == &c);
	ASSERT(sl_pool_contains(&p, &b));
	sl_pool_remove(&p, &b);
	ASSERT_EQ(p.n, 2);
	ASSERT(!sl_pool_contains(&p, &b));
	ASSERT(p.members[0] == &a && p.members[1] == &c);
	sl_pool_remove(&p, &b); /* not a member: nothing */
	ASSERT_EQ(p.n, 2);
	static struct sl_upstream many[SL_POOL_MAX + 1];
	struct sl_pool full = {.n = 0};
	for (unsigned i = 0; i < SL_POOL_MAX; i++)
		ASSERT_EQ(sl_pool_add(&full, up(&many[i], i, 1, 0)), 0);
	ASSERT_EQ(sl_pool_add(&full, up(&many[SL_POOL_MAX], SL_POOL_MAX, 1, 0)),
	          SL_EINVAL);
}

static void test_most_room_wins(void)
{
	struct sl_upstream a, b, c;
	struct sl_pool p = {.n = 0};
	char why[160];
	/* 3 of 4 busy, 1 of 2, 2 of 8: c has the most room per slot. */
	sl_pool_add(&p, up(&a, 0, 4, 3));
	sl_pool_add(&p, up(&b, 1, 2, 1));
	sl_pool_add(&p, up(&c, 2, 8, 2));
	ASSERT(sl_pool_pick(&p, true, NULL, 0, NULL, NULL, why, sizeof(why)) ==
	       &c);
	ASSERT_EQ(sl_pool_free_slots(&p), 1 + 1 + 6);
	ASSERT_EQ(sl_pool_total_slots(&p), 14);
	/* A suspect or ejected one is neither chosen nor counted. */
	c.suspect = true;
	ASSERT(sl_pool_pick(&p, true, NULL, 0, NULL, NULL, why, sizeof(why)) ==
	       &b);
	ASSERT_EQ(sl_pool_free_slots(&p), 2);
	ASSERT_EQ(sl_pool_total_slots(&p), 6);
	ASSERT(sl_pool_expected(&p));
	ASSERT(sl_pool_other_usable(&p, &a));
	c.suspect = false;
	c.outlier.ejected = true;
	ASSERT(sl_pool_pick(&p, true, NULL, 0, NULL, NULL, why, sizeof(why)) ==
	       &b);
	ASSERT(sl_pool_expected(&p));
	c.outlier.ejected = false;
	ASSERT(!sl_pool_expected(&p));
	ASSERT_EQ(sl_pool_ready(&p), 3);
}

static void test_ties_go_in_turn(void)
{
	struct sl_upstream a, b, c;
	struct sl_pool p = {.n = 0};
	char why[160];
	sl_pool_add(&p, up(&a, 3, 2, 0));
	sl_pool_add(&p, up(&b, 7, 2, 0));
	sl_pool_add(&p, up(&c, 12, 2, 0));
	/* The first at or past `next`, wrapping around. */
	ASSERT(sl_pool_pick(&p, true, NULL, 0, NULL, NULL, why, sizeof(why)) ==
	       &a);
	ASSERT(sl_pool_pick(&p, true, NULL, 4, NULL, NULL, why, sizeof(why)) ==
	       &b);
	ASSERT(sl_pool_pick(&p, true, NULL, 8, NULL, NULL, why, sizeof(why)) ==
	       &c);
	ASSERT(sl_pool_pick(&p, true, NULL, 13, NULL, NULL, why, sizeof(why)) ==
	       &a);
}

static void test_avoided_unless_alone(void)
{
	struct sl_upstream a, b;
	struct sl_pool p = {.n = 0};
	char why[160];
	sl_pool_add(&p, up(&a, 0, 4, 0));
	sl_pool_add(&p, up(&b, 1, 4, 3));
	/* a has more room, but a request just failed there. */
	ASSERT(sl_pool_pick(&p, true, &a, 0, NULL, NULL, why, sizeof(why)) ==
	       &b);
	b.inflight = 4;
	ASSERT(sl_pool_pick(&p, true, &a, 0, NULL, NULL, why, sizeof(why)) ==
	       &a);
	/* Without need_slot a full upstream still qualifies. */
	ASSERT(sl_pool_pick(&p, false, &a, 0, NULL, NULL, why, sizeof(why)) ==
	       &b);
}

static void test_why_nothing_qualifies(void)
{
	struct sl_upstream a, b;
	struct sl_pool p = {.n = 0};
	char why[160];
	sl_pool_add(&p, up(&a, 0, 1, 1));
	ASSERT(!sl_pool_pick(&p, true, NULL, 0, NULL, NULL, why, sizeof(why)));
	ASSERT_STR_EQ(why, "no upstream has a free slot");
	a.state = SL_UPSTREAM_STARTING;
	ASSERT(!sl_pool_pick(&p, false, NULL, 0, NULL, NULL, why, sizeof(why)));
	ASSERT_STR_EQ(why, "llama-server is starting and not ready yet; "
	                   "retry shortly");
	/* Its first start or check under way: requests wait for it. */
	ASSERT(sl_pool_expected(&p));
	a.state = SL_UPSTREAM_RESTARTING;
	ASSERT(!sl_pool_pick(&p, false, NULL, 0, NULL, NULL, why, sizeof(why)));
	ASSERT_STR_EQ(why, "llama-server is restarting after it exited; "
	                   "retry shortly");
	ASSERT(sl_pool_expected(&p));
	a.state = SL_UPSTREAM_READY;
	a.suspect = true;
	ASSERT(!sl_pool_pick(&p, false, NULL, 0, NULL, NULL, why, sizeof(why)));
	ASSERT_STR_EQ(why, "the upstream just failed a request and is being "
	                   "checked; retry shortly");
	a.suspect = false;
	a.outlier.ejected = true;
	ASSERT(!sl_pool_pick(&p, false, NULL, 0, NULL, NULL, why, sizeof(why)));
	ASSERT_STR_EQ(why, "every ready upstream is ejected after failing "
	                   "requests in a row; retry shortly");
	a.state = SL_UPSTREAM_DOWN;
	ASSERT(!sl_pool_pick(&p, false, NULL, 0, NULL, NULL, why, sizeof(why)));
	ASSERT_STR_EQ(why, "no upstream is ready: every llama-server is down "
	                   "or not answering");
	ASSERT(!sl_pool_other_usable(&p, &b));
	struct sl_pool empty = {.n = 0};
	ASSERT(!sl_pool_pick(&empty, false, NULL, 0, NULL, NULL, why,
	                     sizeof(why)));
	ASSERT_EQ(sl_pool_free_slots(&empty), 0);
}

/*
 * Prefix affinity: the member that served the prefix wins while it is
 * within the margin of the one with the most room, and only among those
 * that qualify.
 */
static void test_affinity(void)
{
	struct sl_upstream a, b, c;
	struct sl_pool p = {.n = 0};
	char why[160];
	sl_pool_add(&p, up(&a, 0, 4, 0));
	sl_pool_add(&p, up(&b, 1, 4, 0));
	sl_pool_add(&p, up(&c, 2, 4, 0));
	a.id = 10, b.id = 11, c.id = 12;
	struct sl_affinity *t = sl_xmalloc(sizeof(*t));
	sl_affinity_init(t);
	struct sl_affinity_key k;
	sl_affinity_key_text(&k, "a long system prompt", 20);
	struct sl_pool_affinity aff = {.table = t, .key = &k, .margin = 1};
	/* Nothing known: the most room, in turn. */
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, NULL, why, sizeof(why)) ==
	       &a);
	ASSERT_EQ(aff.result, SL_AFFINITY_MISS);
	sl_affinity_store(t, &k, c.id);
	/* c holds it, and is as free as any: c. */
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, NULL, why, sizeof(why)) ==
	       &c);
	ASSERT_EQ(aff.result, SL_AFFINITY_HIT);
	/* One more in flight than the least busy: within the margin. */
	c.inflight = 1;
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, NULL, why, sizeof(why)) ==
	       &c);
	/* Two more: beyond it, the least busy instead. */
	c.inflight = 2;
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, NULL, why, sizeof(why)) ==
	       &a);
	ASSERT_EQ(aff.result, SL_AFFINITY_BUSY);
	/* Full, or avoided after a failure: the home is busy. */
	c.inflight = 4;
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, NULL, why, sizeof(why)) ==
	       &a);
	ASSERT_EQ(aff.result, SL_AFFINITY_BUSY);
	c.inflight = 0;
	ASSERT(sl_pool_pick(&p, true, &c, 0, &aff, NULL, why, sizeof(why)) ==
	       &a);
	ASSERT_EQ(aff.result, SL_AFFINITY_BUSY);
	/* A home that is not usable at all is no home: a miss. */
	c.suspect = true;
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, NULL, why, sizeof(why)) ==
	       &a);
	ASSERT_EQ(aff.result, SL_AFFINITY_MISS);
	c.suspect = false;
	/* No key, or one candidate only: the plain choice. */
	aff.key = NULL;
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, NULL, why, sizeof(why)) ==
	       &a);
	aff.key = &k;
	a.state = b.state = SL_UPSTREAM_DOWN;
	aff.result = SL_AFFINITY_RESULTS;
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, NULL, why, sizeof(why)) ==
	       &c);
	ASSERT_EQ(aff.result, SL_AFFINITY_RESULTS);
	free(t);
}

/* Teaches u's latency model: `ms_per_token` of prefill, `tpot` a step. */
static void teach(struct sl_upstream *u, double ms_per_token, double tpot)
{
	sl_predict_init(&u->predict, 0);
	for (int i = 0; i < 2 * SL_PREDICT_MIN_SAMPLES; i++) {
		double tokens = 100 + 50 * i;
		struct sl_predict_sample s = {
		    .prompt_n = tokens,
		    .prompt_ms = tokens * ms_per_token,
		    .predicted_n = 32,
		    .per_token_ms = tpot,
		    .decoding = 1,
		    .hold_ms = tokens * ms_per_token + 32 * tpot,
		    .first_ms = tokens * ms_per_token,
		    .prompt_bytes = 4 * tokens,
		};
		sl_predict_observe(&u->predict, &s);
	}
}

/*
 * Service levels: the replica with the most predicted headroom, the most
 * room on a tie or while a model is unknown; affinity kept while the
 * request's level holds there.
 */
static void test_most_headroom(void)
{
	struct sl_upstream a, b;
	struct sl_pool p = {.n = 0};
	char why[160];
	sl_pool_add(&p, up(&a, 0, 4, 3));
	sl_pool_add(&p, up(&b, 1, 4, 0));
	a.id = 10, b.id = 11;
	/* 1,000 prompt tokens: 100 ms on a, 1,000 ms on b. */
	struct sl_pool_slo slo = {.has_ttft = true,
	                          .ttft_left_ms = 500,
	                          .prompt_bytes = 4000,
	                          .out_tokens = 32};
	/* Neither model known: the most room, b. */
	ASSERT(sl_pool_pick(&p, true, NULL, 0, NULL, &slo, why, sizeof(why)) ==
	       &b);
	teach(&a, 0.1, 1.0);
	ASSERT(sl_pool_pick(&p, true, NULL, 0, NULL, &slo, why, sizeof(why)) ==
	       &b); /* b's still unknown: it learns */
	teach(&b, 1.0, 1.0);
	ASSERT(sl_pool_pick(&p, true, NULL, 0, NULL, &slo, why, sizeof(why)) ==
	       &a);
	/* Without a level: the most room, as ever. */
	ASSERT(sl_pool_pick(&p, true, NULL, 0, NULL, NULL, why, sizeof(why)) ==
	       &b);
	/* Affinity: b is the home; it would miss the level, so a. */
	struct sl_affinity *t = sl_xmalloc(sizeof(*t));
	sl_affinity_init(t);
	struct sl_affinity_key k;
	sl_affinity_key_text(&k, "a long system prompt", 20);
	struct sl_pool_affinity aff = {.table = t, .key = &k, .margin = 1};
	sl_affinity_store(t, &k, b.id);
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, &slo, why, sizeof(why)) ==
	       &a);
	ASSERT_EQ(aff.result, SL_AFFINITY_BUSY);
	/* With room to spare there, the home keeps it, beyond the margin. */
	slo.ttft_left_ms = 2000;
	ASSERT(sl_pool_pick(&p, true, NULL, 0, &aff, &slo, why, sizeof(why)) ==
	       &b);
	ASSERT_EQ(aff.result, SL_AFFINITY_HIT);
	/* TPOT: b decodes twice as fast with its one more sequence. */
	teach(&a, 0.1, 2.0);
	slo = (struct sl_pool_slo){.has_tpot = true,
	                           .tpot_ms = 1.5,
	                           .prompt_bytes = 400,
	                           .out_tokens = 8};
	ASSERT(sl_pool_pick(&p, true, NULL, 0, NULL, &slo, why, sizeof(why)) ==
	       &b);
	free(t);
}

int main(void)
{
	RUN(test_membership_keeps_index_order);
	RUN(test_most_room_wins);
	RUN(test_ties_go_in_turn);
	RUN(test_avoided_unless_alone);
	RUN(test_why_nothing_qualifies);
	RUN(test_affinity);
	RUN(test_most_headroom);
	return 0;
}

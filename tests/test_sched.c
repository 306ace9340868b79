/*
 * test_sched.c: the scheduler with an injected clock and fake slots; no
 * sockets, no loop.
 */
#include "sluice/sched/sched.h"

#include "sluice/base/common.h"
#include "test.h"

#include <math.h>

#define MAX_ITEMS 4096

struct fake {
	unsigned free;                  /* slots free now */
	unsigned dispatched[MAX_ITEMS]; /* item ids, in dispatch order */
	unsigned batch_of[MAX_ITEMS];   /* size of the batch each left in */
	uint64_t at[MAX_ITEMS];         /* when */
	unsigned n_dispatched;
	unsigned batches;
	unsigned expired[MAX_ITEMS];
	unsigned n_expired;
	unsigned shed[MAX_ITEMS];
	unsigned n_shed;
	struct sl_sched_item items[MAX_ITEMS];
};

static unsigned id_of(struct fake *f, struct sl_sched_item *it)
{
	return (unsigned)(it - f->items);
}

static unsigned fake_free(void *ctx)
{
	return ((struct fake *)ctx)->free;
}

static void fake_dispatch(void *ctx, struct sl_sched_item **items, unsigned n,
                          uint64_t now)
{
	struct fake *f = ctx;
	/* Capacity is never exceeded, and batches are never empty. */
	ASSERT(n > 0 && n <= f->free);
	f->free -= n;
	f->batches++;
	for (unsigned i = 0; i < n; i++) {
		ASSERT(!sl_sched_queued(items[i]));
		unsigned k = f->n_dispatched++;
		f->dispatched[k] = id_of(f, items[i]);
		f->batch_of[k] = n;
		f->at[k] = now;
	}
}

static void fake_expire(void *ctx, struct sl_sched_item *it, uint64_t now)
{
	struct fake *f = ctx;
	(void)now;
	ASSERT(!sl_sched_queued(it));
	f->expired[f->n_expired++] = id_of(f, it);
}

static void fake_shed(void *ctx, struct sl_sched_item *it, uint64_t now)
{
	struct fake *f = ctx;
	(void)now;
	ASSERT(!sl_sched_queued(it));
	f->shed[f->n_shed++] = id_of(f, it);
}

static const struct sl_sched_ops ops = {
    .free_slots = fake_free,
    .dispatch = fake_dispatch,
    .expire = fake_expire,
    .shed = fake_shed,
};

static struct sl_sched_config config(void)
{
	return (struct sl_sched_config){
	    .aging_rate = 0.2,
	    .window_ms = 50,
	    .max_batch = 0,
	    .max_queue = MAX_ITEMS,
	    .queue_timeout_ms = 60000,
	    .urgent_bypass = true,
	};
}

static void start(struct sl_sched *s, struct fake *f,
                  const struct sl_sched_config *cfg)
{
	memset(f, 0, sizeof(*f));
	ASSERT_EQ(sl_sched_init(s, cfg, &ops, f, 0), 0);
}

static void push(struct sl_sched *s, struct fake *f, unsigned id,
                 double priority, uint64_t now)
{
	ASSERT_EQ(sl_sched_push(s, &f->items[id], priority, now), 0);
}

static void test_priority_then_arrival(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	start(&s, &f, &cfg);
	double prio[] = {1, 2, 0, 2, 1, 1.5};
	for (unsigned i = 0; i < 6; i++)
		push(&s, &f, i, prio[i], 0);
	f.free = 6;
	sl_sched_run(&s, 0);
	unsigned want[] = {1, 3, 5, 0, 4, 2};
	ASSERT_EQ(f.n_dispatched, 6);
	for (unsigned i = 0; i < 6; i++)
		ASSERT_EQ(f.dispatched[i], want[i]);
	ASSERT_EQ(f.batches, 1);
	sl_sched_free(&s);
}

/*
 * One slot, each request served in 1 s, and an urgent request arriving just
 * as the slot frees, every time: a continuous stream that always has an
 * urgent request waiting. Returns when the normal request left (0: never,
 * within 30 s).
 */
static uint64_t normal_behind_urgent_stream(double aging_rate)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.aging_rate = aging_rate;
	start(&s, &f, &cfg);
	const uint64_t service = 1000;
	unsigned next_id = 1;
	push(&s, &f, 0, SL_PRIORITY_NORMAL, 0);
	uint64_t left = 0;
	for (uint64_t t = 0; t <= 30000 && !left; t += service) {
		push(&s, &f, next_id++, SL_PRIORITY_URGENT, t);
		f.free = 1;
		sl_sched_run(&s, t);
		unsigned k = f.n_dispatched - 1;
		if (f.dispatched[k] == 0)
			left = f.at[k] ? f.at[k] : 1;
	}
	sl_sched_free(&s);
	return left;
}

static void test_aging_beats_starvation(void)
{
	double rate = config().aging_rate;
	uint64_t left = normal_behind_urgent_stream(rate);
	ASSERT(left > 0);
	ASSERT(left <= (uint64_t)(1000.0 / rate) + 1000);
	/* Not before its time either: urgent outranks it until then. */
	ASSERT(left >= (uint64_t)(1000.0 / rate) - 1000);
	/* Without aging it would starve: the test can tell. */
	ASSERT_EQ(normal_behind_urgent_stream(0.0), 0);
}

/* Reference model: an unsorted array, searched for the best each time. */
struct ref {
	unsigned ids[MAX_ITEMS];
	unsigned n;
};

static bool ranks_before(const struct sl_sched_item *x,
                         const struct sl_sched_item *y)
{
	return x->key != y->key ? x->key > y->key : x->seq < y->seq;
}

static bool better(const struct fake *f, unsigned a, unsigned b)
{
	return ranks_before(&f->items[a], &f->items[b]);
}

/*
 * Whether a full queue sheds x before y: one not asked as urgent before
 * one that was, then the lower ranked.
 */
static bool sheds_first(const struct sl_sched_item *x,
                        const struct sl_sched_item *y)
{
	bool ux = x->priority >= SL_PRIORITY_URGENT;
	bool uy = y->priority >= SL_PRIORITY_URGENT;
	return ux != uy ? uy : ranks_before(y, x);
}

/* The heaps hold the same items, each in order, indexes in step. */
static void check_heap(const struct sl_sched *s)
{
	unsigned urgent = 0;
	for (unsigned i = 0; i < s->n; i++)
		urgent += s->heap[i]->priority >= SL_PRIORITY_URGENT;
	ASSERT_EQ(urgent, s->class_count[SL_SCHED_URGENT_CLASS]);
	for (unsigned i = 0; i < urgent; i++) {
		ASSERT_EQ(s->urgent[i]->urgent_index, i);
		ASSERT(s->urgent[i]->priority >= SL_PRIORITY_URGENT);
		if (i > 0) {
			const struct sl_sched_item *p = s->urgent[(i - 1) / 2];
			const struct sl_sched_item *c = s->urgent[i];
			ASSERT(p->key > c->key ||
			       (p->key == c->key && p->seq < c->seq));
		}
	}
	for (unsigned i = 0; i < s->n; i++) {
		ASSERT_EQ(s->heap[i]->heap_index, i);
		ASSERT_EQ(s->bottom[i]->bottom_index, i);
		ASSERT(s->bottom[s->heap[i]->bottom_index] == s->heap[i]);
		if (i > 0) {
			const struct sl_sched_item *p = s->heap[(i - 1) / 2];
			const struct sl_sched_item *c = s->heap[i];
			ASSERT(p->key > c->key ||
			       (p->key == c->key && p->seq < c->seq));
			ASSERT(
			    !sheds_first(s->bottom[i], s->bottom[(i - 1) / 2]));
		}
	}
}

/*
 * Random pushes, removals and dispatches; returns how many were shed. With
 * fair queuing on and every request of one flow, the order is the same.
 */
static unsigned random_operations(unsigned max_queue, bool fair)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.max_queue = max_queue;
	cfg.fair = fair;
	start(&s, &f, &cfg);
	struct ref r = {.n = 0};
	bool in_queue[MAX_ITEMS] = {false};
	unsigned next_id = 0;
	uint64_t now = 0, rng = 12345;
	for (int step = 0; step < 20000; step++) {
		rng = rng * 6364136223846793005u + 1442695040888963407u;
		unsigned op = (unsigned)(rng >> 33) % 10;
		now += (rng >> 20) % 7;
		if (op < 5 && next_id < MAX_ITEMS) {
			double prio = (double)((rng >> 40) % 4);
			unsigned id = next_id++;
			unsigned worst = 0;
			for (unsigned k = 1; k < r.n; k++)
				if (sheds_first(&f.items[r.ids[k]],
				                &f.items[r.ids[worst]]))
					worst = k;
			unsigned shed_before = f.n_shed;
			int rc = sl_sched_push(&s, &f.items[id], prio, now);
			if (r.n < max_queue) {
				ASSERT_EQ(rc, 0);
			} else if (rc == 0) {
				/* It outranked the worst, which was shed. */
				ASSERT(sheds_first(&f.items[r.ids[worst]],
				                   &f.items[id]));
				ASSERT_EQ(f.n_shed, shed_before + 1);
				ASSERT_EQ(f.shed[shed_before], r.ids[worst]);
				in_queue[r.ids[worst]] = false;
				r.ids[worst] = r.ids[--r.n];
			} else {
				ASSERT_EQ(rc, SL_EFULL);
				f.items[id].key = prio - cfg.aging_rate *
				                             (double)now /
				                             1000.0;
				f.items[id].seq = UINT64_MAX;
				ASSERT(!sheds_first(&f.items[r.ids[worst]],
				                    &f.items[id]));
				continue;
			}
			in_queue[id] = true;
			r.ids[r.n++] = id;
		} else if (op < 7 && r.n > 0) {
			/* a client leaves: remove from anywhere */
			unsigned k = (unsigned)(rng >> 45) % r.n;
			sl_sched_remove(&s, &f.items[r.ids[k]]);
			in_queue[r.ids[k]] = false;
			r.ids[k] = r.ids[--r.n];
		} else if (r.n > 0) {
			/* one slot frees: the best goes */
			unsigned best = 0;
			for (unsigned k = 1; k < r.n; k++)
				if (better(&f, r.ids[k], r.ids[best]))
					best = k;
			unsigned before_count = f.n_dispatched;
			f.free = 1;
			sl_sched_run(&s, now);
			ASSERT_EQ(f.n_dispatched, before_count + 1);
			ASSERT_EQ(f.dispatched[before_count], r.ids[best]);
			in_queue[r.ids[best]] = false;
			r.ids[best] = r.ids[--r.n];
		}
		ASSERT_EQ(sl_sched_depth(&s), r.n);
		check_heap(&s);
	}
	for (unsigned i = 0; i < next_id; i++)
		ASSERT_EQ(sl_sched_queued(&f.items[i]), in_queue[i]);
	sl_sched_free(&s);
	return f.n_shed;
}

static void test_random_operations_match_a_reference(void)
{
	ASSERT_EQ(random_operations(MAX_ITEMS, false), 0); /* never full */
	ASSERT(random_operations(16, false) > 100); /* often full: shedding */
	ASSERT_EQ(random_operations(MAX_ITEMS, true), 0);
	ASSERT(random_operations(16, true) > 100);
}

/* ---- fair queuing ---- */

static void start_fair(struct sl_sched *s, struct fake *f, unsigned max_queue)
{
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.fair = true;
	cfg.max_queue = max_queue;
	start(s, f, &cfg);
}

static int push_flow(struct sl_sched *s, struct fake *f, unsigned id,
                     uint64_t flow, double weight, double priority,
                     uint64_t now)
{
	f->items[id].flow_id = flow;
	f->items[id].weight = weight;
	f->items[id].cost = 10;
	return sl_sched_push(s, &f->items[id], priority, now);
}

/* One slot frees at now: returns who took it. */
static unsigned one_slot(struct sl_sched *s, struct fake *f, uint64_t now)
{
	unsigned before_count = f->n_dispatched;
	f->free = 1;
	sl_sched_run(s, now);
	ASSERT_EQ(f->n_dispatched, before_count + 1);
	return f->dispatched[before_count];
}

/* Every item pushed is released: no flow is left behind. */
static void release_all(struct sl_sched *s, struct fake *f, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		sl_sched_release(s, &f->items[i]);
	ASSERT_EQ(s->fl.n_flows, 0);
	sl_sched_free(s);
}

/*
 * A floods (items 0-9), B sends two a moment later: they take turns, the
 * least served first, ties to the older request.
 */
static void test_fair_least_served_goes_next(void)
{
	struct sl_sched s;
	struct fake f;
	start_fair(&s, &f, MAX_ITEMS);
	for (unsigned i = 0; i < 10; i++)
		ASSERT_EQ(push_flow(&s, &f, i, 1, 1, SL_PRIORITY_NORMAL, 0), 0);
	ASSERT_EQ(push_flow(&s, &f, 10, 2, 1, SL_PRIORITY_NORMAL, 1), 0);
	ASSERT_EQ(push_flow(&s, &f, 11, 2, 1, SL_PRIORITY_NORMAL, 1), 0);
	unsigned want[] = {0, 10, 1, 11, 2, 3, 4, 5, 6, 7, 8, 9};
	for (unsigned i = 0; i < 12; i++)
		ASSERT_EQ(one_slot(&s, &f, 2 + i), want[i]);
	ASSERT(sl_sched_flow_service(&s, 1) == 100);
	ASSERT(sl_sched_flow_service(&s, 2) == 20);
	release_all(&s, &f, 12);
}

/* Weight 2 against 1: two of A's requests for each of B's. */
static void test_fair_weights(void)
{
	struct sl_sched s;
	struct fake f;
	start_fair(&s, &f, MAX_ITEMS);
	for (unsigned i = 0; i < 20; i++)
		ASSERT_EQ(push_flow(&s, &f, i, i % 2 ? 2 : 1, i % 2 ? 1 : 2,
		                    SL_PRIORITY_NORMAL, 0),
		          0);
	unsigned a = 0;
	for (unsigned i = 0; i < 12; i++)
		a += one_slot(&s, &f, 1 + i) % 2 == 0;
	ASSERT_EQ(a, 8);
	release_all(&s, &f, 20);
}

/*
 * Service charged while an answer is generated counts: A's long answer
 * sends B's next requests ahead of A's, until A is owed again.
 */
static void test_fair_charges_after_dispatch(void)
{
	struct sl_sched s;
	struct fake f;
	start_fair(&s, &f, MAX_ITEMS);
	for (unsigned i = 0; i < 4; i++)
		ASSERT_EQ(push_flow(&s, &f, i, 1, 1, SL_PRIORITY_NORMAL, 0), 0);
	for (unsigned i = 4; i < 8; i++)
		ASSERT_EQ(push_flow(&s, &f, i, 2, 1, SL_PRIORITY_NORMAL, 1), 0);
	ASSERT_EQ(one_slot(&s, &f, 2), 0);
	sl_sched_charge(&s, &f.items[0], 15); /* A: 25, B: 0 */
	unsigned want[] = {4, 5, 6, 1, 7, 2, 3};
	for (unsigned i = 0; i < 7; i++)
		ASSERT_EQ(one_slot(&s, &f, 3 + i), want[i]);
	release_all(&s, &f, 8);
}

/*
 * A flow that comes back after an idle spell starts at the least service
 * of those waiting in the band: it banks no credit. And a flow with
 * requests held (not released) keeps its service; once released, it is
 * forgotten.
 */
static void test_fair_returning_flow_is_lifted(void)
{
	struct sl_sched s;
	struct fake f;
	start_fair(&s, &f, MAX_ITEMS);
	for (unsigned i = 0; i < 6; i++)
		ASSERT_EQ(push_flow(&s, &f, i, 1, 1, SL_PRIORITY_NORMAL, 0), 0);
	for (unsigned i = 0; i < 3; i++)
		ASSERT_EQ(one_slot(&s, &f, 1), i);
	ASSERT(sl_sched_flow_service(&s, 1) == 30);
	ASSERT_EQ(push_flow(&s, &f, 6, 2, 1, SL_PRIORITY_NORMAL, 2), 0);
	ASSERT(sl_sched_flow_service(&s, 2) == 30);
	/* The tie goes to B, with none running against A's 3; then A's. */
	ASSERT_EQ(one_slot(&s, &f, 3), 6);
	ASSERT_EQ(one_slot(&s, &f, 3), 3);
	ASSERT_EQ(one_slot(&s, &f, 3), 4);
	sl_sched_release(&s, &f.items[6]);
	ASSERT(sl_sched_flow_service(&s, 2) == 0);
	release_all(&s, &f, 7);
}

/*
 * A full queue: an arrival of the same band takes the place of the newest
 * request of the longest flow queue, as long as its own flow's queue stays
 * no longer; an arrival of that longest flow is refused.
 */
static void test_fair_full_queue_sheds_the_longest_flow(void)
{
	struct sl_sched s;
	struct fake f;
	start_fair(&s, &f, 4);
	for (unsigned i = 0; i < 4; i++)
		ASSERT_EQ(push_flow(&s, &f, i, 1, 1, SL_PRIORITY_NORMAL, i), 0);
	ASSERT_EQ(push_flow(&s, &f, 4, 1, 1, SL_PRIORITY_NORMAL, 5), SL_EFULL);
	ASSERT_EQ(push_flow(&s, &f, 5, 2, 1, SL_PRIORITY_NORMAL, 6), 0);
	ASSERT_EQ(f.n_shed, 1);
	ASSERT_EQ(f.shed[0], 3);
	ASSERT_EQ(push_flow(&s, &f, 6, 2, 1, SL_PRIORITY_NORMAL, 7), 0);
	ASSERT_EQ(f.n_shed, 2);
	ASSERT_EQ(f.shed[1], 2);
	ASSERT_EQ(push_flow(&s, &f, 7, 2, 1, SL_PRIORITY_NORMAL, 8), SL_EFULL);
	/*
	 * A batch arrival is refused; an urgent one sheds from the longest
	 * flow queue of the normal band (A and B tie: the newer request).
	 */
	ASSERT_EQ(push_flow(&s, &f, 8, 3, 1, SL_PRIORITY_BATCH, 9), SL_EFULL);
	ASSERT_EQ(push_flow(&s, &f, 9, 3, 1, SL_PRIORITY_URGENT, 9), 0);
	ASSERT_EQ(f.n_shed, 3);
	ASSERT_EQ(f.shed[2], 6);
	check_heap(&s);
	/* The owner lets go of what was shed (held requests count running). */
	for (unsigned i = 0; i < f.n_shed; i++)
		sl_sched_release(&s, &f.items[f.shed[i]]);
	unsigned want[] = {9, 0, 5, 1};
	for (unsigned i = 0; i < 4; i++)
		ASSERT_EQ(one_slot(&s, &f, 10 + i), want[i]);
	release_all(&s, &f, 10);
}

/*
 * Which band is served, and when, is what it is without fairness: the
 * same arrivals of many flows and mixed priorities, with aging, leave in
 * the same order of priorities either way; and the heaps stay in order.
 */
static void test_fair_keeps_the_order_of_bands(void)
{
	unsigned got[2][400];
	for (int fair = 0; fair < 2; fair++) {
		struct sl_sched s;
		struct fake f;
		struct sl_sched_config cfg = config();
		cfg.window_ms = 0;
		cfg.fair = fair;
		start(&s, &f, &cfg);
		uint64_t rng = 99, now = 0;
		unsigned next = 0, out = 0;
		while (out < 400) {
			rng = rng * 6364136223846793005u + 1442695040888963407u;
			now += (rng >> 20) % 50;
			if (next < 400 && (s.n == 0 || (rng >> 33) % 2)) {
				double prio = (double)((rng >> 40) % 3);
				ASSERT_EQ(push_flow(&s, &f, next,
				                    (rng >> 50) % 5, 1, prio,
				                    now),
				          0);
				next++;
			} else {
				unsigned id = one_slot(&s, &f, now);
				got[fair][out++] =
				    (unsigned)f.items[id].priority;
			}
			check_heap(&s);
		}
		sl_sched_free(&s);
	}
	for (unsigned i = 0; i < 400; i++)
		ASSERT_EQ(got[0][i], got[1][i]);
}

static void test_window_deadline_and_early_close(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	start(&s, &f, &cfg);
	f.free = 4;
	push(&s, &f, 0, SL_PRIORITY_NORMAL, 1000);
	ASSERT_EQ(sl_sched_run(&s, 1000), 1050);
	push(&s, &f, 1, SL_PRIORITY_NORMAL, 1020);
	ASSERT_EQ(sl_sched_run(&s, 1020), 1050);
	ASSERT_EQ(sl_sched_run(&s, 1049), 1050);
	ASSERT_EQ(f.n_dispatched, 0);
	sl_sched_run(&s, 1050); /* the deadline: both leave, one batch */
	ASSERT_EQ(f.n_dispatched, 2);
	ASSERT_EQ(f.batch_of[0], 2);
	ASSERT_EQ(f.at[0], 1050);

	/* Early close: the fourth request fills the four free slots. */
	f.free = 4;
	for (unsigned i = 2; i < 6; i++) {
		push(&s, &f, i, SL_PRIORITY_NORMAL, 2000 + i);
		sl_sched_run(&s, 2000 + i);
	}
	ASSERT_EQ(f.n_dispatched, 6);
	ASSERT_EQ(f.batch_of[2], 4);
	ASSERT_EQ(f.at[2], 2005);
	ASSERT_EQ(s.batches, 2);

	/* A deadline passing with no free slot does not spin: it closes. */
	f.free = 0;
	push(&s, &f, 6, SL_PRIORITY_NORMAL, 3000);
	sl_sched_run(&s, 3000);
	uint64_t next = sl_sched_run(&s, 3050);
	ASSERT(next > 3050); /* only the queue timeout is due */
	ASSERT_EQ(next, 3000 + cfg.queue_timeout_ms + 1);
	f.free = 1; /* a slot frees: it goes at once */
	sl_sched_run(&s, 3300);
	ASSERT_EQ(f.n_dispatched, 7);
	ASSERT_EQ(f.at[6], 3300);
	sl_sched_free(&s);
}

/*
 * A window closes once the queue is full, free slots or not: it would
 * refuse the next arrival (429) while the slots it gathers for are free.
 */
static void test_window_closes_when_the_queue_is_full(void)
{
	uint64_t windows[] = {50, SL_SCHED_WINDOW_AUTO};
	for (unsigned w = 0; w < 2; w++) {
		struct sl_sched s;
		struct fake f;
		struct sl_sched_config cfg = config();
		cfg.window_ms = windows[w];
		cfg.max_queue = 2;
		start(&s, &f, &cfg);
		/* The auto window gathers only for contested slots. */
		f.free = w == 0 ? 4 : 1;
		push(&s, &f, 0, SL_PRIORITY_NORMAL, 1000);
		if (w == 0)
			sl_sched_run(&s, 1000); /* gathers: 1 of 4 */
		push(&s, &f, 1, SL_PRIORITY_BATCH, 1001);
		sl_sched_run(&s, 1001); /* full: they leave */
		ASSERT_EQ(f.n_dispatched, w == 0 ? 2 : 1);
		ASSERT_EQ(f.at[0], 1001);
		/* So the next arrival finds room. */
		push(&s, &f, 2, SL_PRIORITY_NORMAL, 1002);
		sl_sched_free(&s);
	}
}

static void test_urgent_bypass(void)
{
	for (int bypass = 0; bypass < 2; bypass++) {
		struct sl_sched s;
		struct fake f;
		struct sl_sched_config cfg = config();
		cfg.urgent_bypass = bypass;
		start(&s, &f, &cfg);
		f.free = 4;
		push(&s, &f, 0, SL_PRIORITY_NORMAL, 0);
		sl_sched_run(&s, 0);
		push(&s, &f, 1, SL_PRIORITY_URGENT, 10);
		sl_sched_run(&s, 10);
		if (bypass) {
			ASSERT_EQ(f.n_dispatched, 1); /* the urgent one alone */
			ASSERT_EQ(f.dispatched[0], 1);
			ASSERT_EQ(f.at[0], 10);
			ASSERT_EQ(f.batch_of[0], 1);
		} else {
			ASSERT_EQ(f.n_dispatched, 0); /* waits in the window */
		}
		sl_sched_run(&s, 50);
		ASSERT_EQ(f.n_dispatched, 2);
		ASSERT_EQ(f.dispatched[bypass], bypass ? 0 : 1);
		/* With no slot free, urgent waits like anyone else. */
		f.free = 0;
		push(&s, &f, 2, SL_PRIORITY_URGENT, 100);
		sl_sched_run(&s, 100);
		ASSERT_EQ(f.n_dispatched, 2);
		sl_sched_free(&s);
	}
}

/* The auto window: a lone request, or any that the free slots take. */
static void test_auto_window_never_holds_an_uncontested_request(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = SL_SCHED_WINDOW_AUTO;
	start(&s, &f, &cfg);
	f.free = 4;
	/* A lone request on an idle upstream leaves at once, alone. */
	push(&s, &f, 0, SL_PRIORITY_NORMAL, 1000);
	ASSERT_EQ(sl_sched_run(&s, 1000), UINT64_MAX);
	ASSERT_EQ(f.n_dispatched, 1);
	ASSERT_EQ(f.batch_of[0], 1);
	ASSERT_EQ(f.at[0], 1000);
	/* Mixed priorities that the free slots all take: no one waits. */
	push(&s, &f, 1, SL_PRIORITY_BATCH, 1010);
	push(&s, &f, 2, SL_PRIORITY_NORMAL, 1010);
	ASSERT_EQ(sl_sched_run(&s, 1010), UINT64_MAX);
	ASSERT_EQ(f.n_dispatched, 3);
	ASSERT_EQ(f.dispatched[1], 2);
	ASSERT_EQ(f.dispatched[2], 1);
	ASSERT_EQ(f.batch_of[1], 2);
	ASSERT_EQ(f.at[2], 1010);
	/*
	 * More waiting than free slots, but all of one class: a window could
	 * only give the arrival order the heap gives now, so each freed slot
	 * is taken at once.
	 */
	f.free = 0;
	for (unsigned i = 3; i < 6; i++) {
		push(&s, &f, i, SL_PRIORITY_NORMAL, 2000 + i);
		sl_sched_run(&s, 2000 + i);
	}
	ASSERT_EQ(f.n_dispatched, 3);
	f.free = 1;
	ASSERT_EQ(sl_sched_run(&s, 2100), 2004 + cfg.queue_timeout_ms + 1);
	ASSERT_EQ(f.n_dispatched, 4);
	ASSERT_EQ(f.dispatched[3], 3);
	ASSERT_EQ(f.at[3], 2100);
	sl_sched_free(&s);
}

/* The auto window: contested slots gather arrivals, then priority order. */
static void test_auto_window_gathers_when_slots_are_contested(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = SL_SCHED_WINDOW_AUTO;
	start(&s, &f, &cfg);
	/* Every slot busy: a batch, a normal and a batch request wait. */
	push(&s, &f, 0, SL_PRIORITY_BATCH, 0);
	push(&s, &f, 1, SL_PRIORITY_NORMAL, 5);
	push(&s, &f, 2, SL_PRIORITY_BATCH, 10);
	sl_sched_run(&s, 10);
	ASSERT_EQ(f.n_dispatched, 0);
	/* Two slots free for three of mixed classes: a window opens. */
	f.free = 2;
	ASSERT_EQ(sl_sched_run(&s, 100), 100 + SL_SCHED_AUTO_WINDOW_MS);
	ASSERT_EQ(f.n_dispatched, 0);
	/* A normal request arriving within it is gathered... */
	push(&s, &f, 3, SL_PRIORITY_NORMAL, 120);
	ASSERT_EQ(sl_sched_run(&s, 120), 100 + SL_SCHED_AUTO_WINDOW_MS);
	ASSERT_EQ(f.n_dispatched, 0);
	/* ...and at the deadline the two normal ones leave together, ahead
	 * of the batch requests that came before them. */
	sl_sched_run(&s, 100 + SL_SCHED_AUTO_WINDOW_MS);
	ASSERT_EQ(f.n_dispatched, 2);
	ASSERT_EQ(f.dispatched[0], 1);
	ASSERT_EQ(f.dispatched[1], 3);
	ASSERT_EQ(f.batch_of[0], 2);
	ASSERT_EQ(f.at[0], 150);
	ASSERT_EQ(s.batches, 1);
	/* Left: two batch requests, one class: a freed slot takes one now. */
	f.free = 1;
	sl_sched_run(&s, 300);
	ASSERT_EQ(f.n_dispatched, 3);
	ASSERT_EQ(f.dispatched[2], 0);
	ASSERT_EQ(f.at[2], 300);

	/* The contest ends before the deadline (a second slot frees): what
	 * waits leaves then, in priority order. */
	push(&s, &f, 4, SL_PRIORITY_NORMAL, 400);
	f.free = 1;
	ASSERT_EQ(sl_sched_run(&s, 400), 400 + SL_SCHED_AUTO_WINDOW_MS);
	ASSERT_EQ(f.n_dispatched, 3);
	f.free = 2;
	sl_sched_run(&s, 420);
	ASSERT_EQ(f.n_dispatched, 5);
	ASSERT_EQ(f.dispatched[3], 4);
	ASSERT_EQ(f.dispatched[4], 2);
	ASSERT_EQ(f.batch_of[3], 2);
	ASSERT_EQ(f.at[3], 420);
	ASSERT_EQ(sl_sched_depth(&s), 0);
	sl_sched_free(&s);
}

/* One slot in all, for the test that measures the load. */
static unsigned fake_one_slot(void *ctx)
{
	(void)ctx;
	return 1;
}

/*
 * The auto window is sized from the measured hold: a tenth of it, so that
 * short generations are not left idle for a whole 50 ms window each.
 */
static void test_auto_window_sized_from_the_hold(void)
{
	static const struct sl_sched_ops measured = {
	    .free_slots = fake_free,
	    .dispatch = fake_dispatch,
	    .expire = fake_expire,
	    .shed = fake_shed,
	    .total_slots = fake_one_slot,
	};
	for (uint64_t hold = 20; hold <= 2000; hold *= 10) {
		struct sl_sched s;
		struct fake f;
		struct sl_sched_config cfg = config();
		cfg.window_ms = SL_SCHED_WINDOW_AUTO;
		memset(&f, 0, sizeof(f));
		ASSERT_EQ(sl_sched_init(&s, &cfg, &measured, &f, 0), 0);
		/* Before any measure, the full window. */
		push(&s, &f, 0, SL_PRIORITY_BATCH, 0);
		push(&s, &f, 1, SL_PRIORITY_NORMAL, 0);
		f.free = 1;
		ASSERT_EQ(sl_sched_run(&s, 0), SL_SCHED_AUTO_WINDOW_MS);
		uint64_t t = SL_SCHED_AUTO_WINDOW_MS;
		sl_sched_run(&s, t);
		ASSERT_EQ(f.n_dispatched, 1);
		ASSERT_EQ(f.dispatched[0], 1);
		/* Then requests holding the slot `hold` ms each, uncontested.
		 */
		t += hold;
		f.free = 1;
		sl_sched_run(&s, t);
		for (unsigned i = 2; i < 10; i++) {
			t += hold;
			f.free = 1;
			push(&s, &f, i, SL_PRIORITY_NORMAL, t);
			sl_sched_run(&s, t);
		}
		ASSERT_EQ(f.n_dispatched, 10);
		/* Two of mixed classes for the freed slot: a window. */
		t += hold;
		f.free = 1;
		push(&s, &f, 10, SL_PRIORITY_BATCH, t);
		push(&s, &f, 11, SL_PRIORITY_NORMAL, t);
		uint64_t window = sl_sched_run(&s, t) - t;
		uint64_t want =
		    SL_MIN(hold / 10, (uint64_t)SL_SCHED_AUTO_WINDOW_MS);
		if (window < want * 9 / 10 || window > want * 11 / 10 + 1)
			TEST_FAIL("hold %llu ms: a window of %llu ms, not "
			          "about %llu",
			          (unsigned long long)hold,
			          (unsigned long long)window,
			          (unsigned long long)want);
		sl_sched_free(&s);
	}
}

/* The auto window: urgent requests skip it, and the reserve still holds. */
static void test_auto_window_urgent_and_reserve(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = SL_SCHED_WINDOW_AUTO;
	start(&s, &f, &cfg);
	push(&s, &f, 0, SL_PRIORITY_BATCH, 0);
	push(&s, &f, 1, SL_PRIORITY_NORMAL, 0);
	push(&s, &f, 2, SL_PRIORITY_BATCH, 0);
	f.free = 2;
	ASSERT_EQ(sl_sched_run(&s, 0), SL_SCHED_AUTO_WINDOW_MS);
	/* An urgent arrival overtakes the window, alone and at once. */
	push(&s, &f, 3, SL_PRIORITY_URGENT, 10);
	sl_sched_run(&s, 10);
	ASSERT_EQ(f.n_dispatched, 1);
	ASSERT_EQ(f.dispatched[0], 3);
	ASSERT_EQ(f.batch_of[0], 1);
	ASSERT_EQ(f.at[0], 10);
	/* The rest still gather: one slot for three, mixed. */
	sl_sched_run(&s, SL_SCHED_AUTO_WINDOW_MS);
	ASSERT_EQ(f.n_dispatched, 2);
	ASSERT_EQ(f.dispatched[1], 1);
	sl_sched_free(&s);

	/* With the one free slot kept for urgent requests, no window opens
	 * (it could hold nothing), and the normal request waits. */
	cfg.urgent_reserve = 1;
	cfg.aging_rate = 0;
	start(&s, &f, &cfg);
	push(&s, &f, 0, SL_PRIORITY_BATCH, 0);
	push(&s, &f, 1, SL_PRIORITY_NORMAL, 0);
	f.free = 1;
	ASSERT_EQ(sl_sched_run(&s, 0), cfg.queue_timeout_ms + 1);
	ASSERT_EQ(f.n_dispatched, 0);
	push(&s, &f, 2, SL_PRIORITY_URGENT, 10);
	sl_sched_run(&s, 10);
	ASSERT_EQ(f.n_dispatched, 1);
	ASSERT_EQ(f.dispatched[0], 2);
	sl_sched_free(&s);
}

static void test_capacity_and_max_batch(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.max_batch = 3;
	start(&s, &f, &cfg);
	for (unsigned i = 0; i < 10; i++)
		push(&s, &f, i, SL_PRIORITY_NORMAL, 0);
	f.free = 8;
	sl_sched_run(&s, 0);
	/* 8 free slots, batches capped at 3: 3 + 3 + 2 (fake_dispatch checks
	 * each against the free slots). */
	ASSERT_EQ(f.n_dispatched, 8);
	ASSERT_EQ(f.batches, 3);
	ASSERT_EQ(f.batch_of[7], 2);
	ASSERT_EQ(sl_sched_depth(&s), 2);
	sl_sched_free(&s);
}

static void test_max_queue(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.max_queue = 3;
	start(&s, &f, &cfg);
	for (unsigned i = 0; i < 3; i++)
		push(&s, &f, i, SL_PRIORITY_NORMAL, 0);
	/* Equal to everyone waiting: the newcomer ranks last, refused. */
	ASSERT_EQ(sl_sched_push(&s, &f.items[3], SL_PRIORITY_NORMAL, 0),
	          SL_EFULL);
	ASSERT(!sl_sched_queued(&f.items[3]));
	sl_sched_remove(&s, &f.items[1]);
	push(&s, &f, 3, SL_PRIORITY_NORMAL, 0);
	ASSERT_EQ(sl_sched_depth(&s), 3);
	struct sl_sched_config bad = cfg;
	bad.max_queue = 0;
	struct sl_sched s2;
	ASSERT_EQ(sl_sched_init(&s2, &bad, &ops, &f, 0), SL_EINVAL);
	sl_sched_free(&s);
}

/*
 * A full queue sheds a request not asked as urgent before an urgent one,
 * however long it has aged: an urgent arrival is not refused while one
 * waits.
 */
static void test_full_queue_keeps_room_for_urgent_requests(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.max_queue = 2;
	start(&s, &f, &cfg);
	push(&s, &f, 0, SL_PRIORITY_NORMAL, 0);
	push(&s, &f, 1, SL_PRIORITY_NORMAL, 0);
	/* 10 s on, both rank above urgent; the later one still goes. */
	push(&s, &f, 2, SL_PRIORITY_URGENT, 10000);
	ASSERT_EQ(f.n_shed, 1);
	ASSERT_EQ(f.shed[0], 1);
	push(&s, &f, 3, SL_PRIORITY_URGENT, 10001);
	ASSERT_EQ(f.n_shed, 2);
	ASSERT_EQ(f.shed[1], 0);
	/* All urgent now: by rank, and the newcomer ranks lowest. */
	ASSERT_EQ(sl_sched_push(&s, &f.items[4], SL_PRIORITY_URGENT, 10002),
	          SL_EFULL);
	ASSERT_EQ(sl_sched_push(&s, &f.items[5], SL_PRIORITY_NORMAL, 10002),
	          SL_EFULL);
	check_heap(&s);
	sl_sched_free(&s);
}

/* A full queue: a more important arrival displaces the least important. */
static void test_full_queue_sheds_the_least_important(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.max_queue = 3;
	start(&s, &f, &cfg);
	push(&s, &f, 0, SL_PRIORITY_NORMAL, 0);
	push(&s, &f, 1, SL_PRIORITY_BATCH, 0);
	push(&s, &f, 2, SL_PRIORITY_NORMAL, 0);
	/* Not more important than the worst (batch, 0)? Refused itself. */
	ASSERT_EQ(sl_sched_push(&s, &f.items[3], SL_PRIORITY_BATCH, 100),
	          SL_EFULL);
	ASSERT_EQ(f.n_shed, 0);
	/* Urgent: the batch request makes room. */
	push(&s, &f, 4, SL_PRIORITY_URGENT, 100);
	ASSERT_EQ(f.n_shed, 1);
	ASSERT_EQ(f.shed[0], 1);
	ASSERT_EQ(sl_sched_depth(&s), 3);
	/* Next, the later of the two normal ones goes: it ranks lower. */
	push(&s, &f, 5, SL_PRIORITY_URGENT, 200);
	ASSERT_EQ(f.shed[1], 2);
	/* Aging counts: a normal request 5 s old ranks with a new urgent
	 * one, and the newcomer loses the tie. */
	ASSERT_EQ(sl_sched_push(&s, &f.items[6], SL_PRIORITY_NORMAL, 5000),
	          SL_EFULL);
	f.free = 3;
	sl_sched_run(&s, 5000);
	ASSERT_EQ(f.n_dispatched, 3);
	ASSERT_EQ(f.dispatched[0], 4);
	ASSERT_EQ(f.dispatched[1], 5);
	ASSERT_EQ(f.dispatched[2], 0);
	check_heap(&s);
	sl_sched_free(&s);
}

/*
 * The urgent reserve: the last free slots wait for urgent requests. Those
 * asked as urgent take it first; an aged request only when none waits.
 */
static void test_urgent_reserve(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.urgent_reserve = 1;
	start(&s, &f, &cfg);
	f.free = 2;
	push(&s, &f, 0, SL_PRIORITY_NORMAL, 0);
	push(&s, &f, 1, SL_PRIORITY_NORMAL, 0);
	uint64_t next = sl_sched_run(&s, 0);
	ASSERT_EQ(f.n_dispatched, 1); /* one slot is kept */
	ASSERT_EQ(f.free, 1);
	/* It wakes when the waiting request has aged to urgent: 5 s. */
	ASSERT_EQ(next, 5000);
	push(&s, &f, 2, SL_PRIORITY_URGENT, 100);
	sl_sched_run(&s, 100);
	ASSERT_EQ(f.n_dispatched, 2);
	ASSERT_EQ(f.dispatched[1], 2); /* the urgent one took it at once */
	ASSERT_EQ(f.free, 0);
	/* Aged past urgent requests that wait, 1 leaves the reserve to them...
	 */
	f.free = 1;
	push(&s, &f, 3, SL_PRIORITY_URGENT, 9000);
	push(&s, &f, 4, SL_PRIORITY_URGENT, 9500);
	sl_sched_run(&s, 10000);
	ASSERT_EQ(f.n_dispatched, 3);
	ASSERT_EQ(f.dispatched[2], 3); /* the best urgent one, not 1 */
	ASSERT_EQ(f.free, 0);
	/* ...goes before them into the next slot beyond the reserve... */
	f.free = 2;
	sl_sched_run(&s, 10000);
	ASSERT_EQ(f.n_dispatched, 5);
	ASSERT_EQ(f.dispatched[3], 1);
	ASSERT_EQ(f.dispatched[4], 4); /* and 4 into the reserve */
	/* ...and takes the reserve when no urgent request waits. */
	push(&s, &f, 5, SL_PRIORITY_NORMAL, 10000);
	f.free = 1;
	sl_sched_run(&s, 14999);
	ASSERT_EQ(f.n_dispatched, 5);
	sl_sched_run(&s, 15000);
	ASSERT_EQ(f.n_dispatched, 6);
	ASSERT_EQ(f.dispatched[5], 5);
	check_heap(&s);
	sl_sched_free(&s);
}

/*
 * With fair queuing, the urgent reserve goes to the least-served flow's
 * urgent request, not to the older one of the flow served more, nor to the
 * aged normal request on top.
 */
static void test_urgent_reserve_is_fair(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.urgent_reserve = 1;
	cfg.fair = true;
	start(&s, &f, &cfg);
	f.free = 1;
	ASSERT_EQ(push_flow(&s, &f, 0, 1, 1, SL_PRIORITY_NORMAL, 0), 0);
	ASSERT_EQ(push_flow(&s, &f, 1, 1, 1, SL_PRIORITY_URGENT, 5100), 0);
	ASSERT_EQ(push_flow(&s, &f, 2, 2, 1, SL_PRIORITY_URGENT, 5200), 0);
	sl_sched_charge(&s, &f.items[1], 100); /* flow 1 served more */
	sl_sched_run(&s, 6000);
	ASSERT_EQ(f.n_dispatched, 1);
	ASSERT_EQ(f.dispatched[0], 2);
	check_heap(&s);
	f.free = 2; /* the aged one first, then the urgent one left */
	sl_sched_run(&s, 6000);
	ASSERT_EQ(f.n_dispatched, 3);
	ASSERT_EQ(f.dispatched[1], 0);
	ASSERT_EQ(f.dispatched[2], 1);
	release_all(&s, &f, 3);
}

static unsigned fake_four_slots(void *ctx)
{
	(void)ctx;
	return 4;
}

/*
 * The fair reserve, 2 of 4 slots: a flood alone fills the other 2; beside
 * it, a tenant below its share of the 4 (2) takes the reserve at once, and
 * each keeps its share.
 */
static void test_fair_reserve(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_ops four = ops;
	four.total_slots = fake_four_slots;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.aging_rate = 0; /* so only the fair reserve lets anyone in */
	cfg.urgent_reserve = 0;
	cfg.fair = true;
	cfg.fair_reserve = 2;
	memset(&f, 0, sizeof(f));
	ASSERT_EQ(sl_sched_init(&s, &cfg, &four, &f, 0), 0);
	for (unsigned i = 0; i < 5; i++)
		ASSERT_EQ(push_flow(&s, &f, i, 1, 1, SL_PRIORITY_NORMAL, 0), 0);
	f.free = 4;
	sl_sched_run(&s, 0);
	ASSERT_EQ(f.n_dispatched, 2); /* A alone: the reserve is kept */
	ASSERT_EQ(f.free, 2);
	/*
	 * B, running none of its 2, takes both at once, though A, less
	 * served, is next in line.
	 */
	for (unsigned i = 5; i < 8; i++)
		ASSERT_EQ(push_flow(&s, &f, i, 2, 1, SL_PRIORITY_NORMAL, 1), 0);
	sl_sched_run(&s, 1);
	ASSERT_EQ(f.n_dispatched, 4);
	ASSERT_EQ(f.dispatched[2], 5);
	ASSERT_EQ(f.dispatched[3], 6);
	/* One of A's ends: A, below its share now, takes the slot back. */
	sl_sched_release(&s, &f.items[0]);
	f.free = 1;
	sl_sched_run(&s, 2);
	ASSERT_EQ(f.n_dispatched, 5);
	ASSERT_EQ(f.dispatched[4], 2);
	/* One of B's ends: B's third goes. */
	sl_sched_release(&s, &f.items[5]);
	f.free = 1;
	sl_sched_run(&s, 3);
	ASSERT_EQ(f.n_dispatched, 6);
	ASSERT_EQ(f.dispatched[5], 7);
	release_all(&s, &f, 8);
}

/*
 * Random pushes, removals, sheds, expiries and dispatches with three
 * tenants, four priorities and both reserves: fair queuing swaps places in
 * every heap, the urgent one included, and the heaps stay in order.
 */
static void test_fair_random_operations_keep_the_heaps(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_ops four = ops;
	four.total_slots = fake_four_slots;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.max_queue = 16;
	cfg.queue_timeout_ms = 3000;
	cfg.fair = true;
	cfg.urgent_reserve = 1;
	cfg.fair_reserve = 1;
	memset(&f, 0, sizeof(f));
	ASSERT_EQ(sl_sched_init(&s, &cfg, &four, &f, 0), 0);
	static bool held[MAX_ITEMS];
	memset(held, 0, sizeof(held));
	unsigned n = 0, shed = 0, expired = 0;
	uint64_t now = 0, rng = 777;
	while (n < MAX_ITEMS) {
		rng = rng * 6364136223846793005u + 1442695040888963407u;
		unsigned op = (unsigned)(rng >> 33) % 10;
		now += (rng >> 20) % 50;
		unsigned id = (unsigned)(rng >> 45) % (n + 1);
		if (op < 5) {
			id = n++;
			held[id] =
			    push_flow(&s, &f, id, (rng >> 40) % 3, 1,
			              (double)((rng >> 44) % 4), now) == 0;
		} else if (op < 6 && id < n && sl_sched_queued(&f.items[id])) {
			sl_sched_release(&s,
			                 &f.items[id]); /* its client left */
			held[id] = false;
		} else if (op >= 6) {
			/* An answer may end; slots free. */
			if (id < f.n_dispatched && held[f.dispatched[id]]) {
				sl_sched_release(&s,
				                 &f.items[f.dispatched[id]]);
				held[f.dispatched[id]] = false;
			}
			f.free = (unsigned)(rng >> 50) % 3;
			sl_sched_run(&s, now);
		}
		/* The owner lets go of what was shed or expired. */
		for (; shed < f.n_shed; shed++) {
			sl_sched_release(&s, &f.items[f.shed[shed]]);
			held[f.shed[shed]] = false;
		}
		for (; expired < f.n_expired; expired++) {
			sl_sched_release(&s, &f.items[f.expired[expired]]);
			held[f.expired[expired]] = false;
		}
		check_heap(&s);
	}
	ASSERT(f.n_shed > 0 && f.n_expired > 0 && f.n_dispatched > 0);
	for (unsigned i = 0; i < n; i++)
		if (held[i])
			sl_sched_release(&s, &f.items[i]);
	ASSERT_EQ(s.fl.n_flows, 0);
	sl_sched_free(&s);
}

/* ---- the auto urgent reserve, against a simulated pool of slots ---- */

#define SIM_ITEMS 128

/*
 * A pool of slots that holds every request hold_ms, a backlog of normal
 * requests kept full (overload), and urgent arrivals of a Poisson stream,
 * stepped one millisecond at a time.
 */
struct sim {
	struct sl_sched s;
	unsigned slots, busy;
	uint64_t hold_ms;
	unsigned backlog;        /* normal requests kept waiting */
	double urgent_per_s;     /* 0: none */
	double next_urgent_ms;   /* the next urgent arrival */
	uint64_t rng;            /* xorshift64 state */
	unsigned normal_waiting; /* queued normal requests */
	struct sl_sched_item items[SIM_ITEMS];
	bool urgent[SIM_ITEMS], in_use[SIM_ITEMS];
	uint64_t arrived[SIM_ITEMS], ends[SIM_ITEMS]; /* ends 0: not running */
	/* Tallies */
	unsigned urgent_served, urgent_waited, normal_served;
};

static unsigned sim_free(void *ctx)
{
	struct sim *m = ctx;
	return m->slots - m->busy;
}

static unsigned sim_total(void *ctx)
{
	return ((struct sim *)ctx)->slots;
}

static void sim_dispatch(void *ctx, struct sl_sched_item **items, unsigned n,
                         uint64_t now)
{
	struct sim *m = ctx;
	for (unsigned i = 0; i < n; i++) {
		unsigned id = (unsigned)(items[i] - m->items);
		unsigned free = m->slots - m->busy;
		ASSERT(free > 0);
		if (m->urgent[id]) {
			m->urgent_served++;
			m->urgent_waited += now > m->arrived[id];
		} else {
			/* Never into the reserve (no aging in these runs). */
			ASSERT(free > sl_sched_urgent_reserve(&m->s));
			m->normal_served++;
			m->normal_waiting--;
		}
		m->busy++;
		m->ends[id] = now + m->hold_ms;
	}
}

static void sim_unexpected(void *ctx, struct sl_sched_item *it, uint64_t now)
{
	(void)ctx, (void)it, (void)now;
	TEST_FAIL("no request should expire or be shed here");
}

static const struct sl_sched_ops sim_ops = {
    .free_slots = sim_free,
    .dispatch = sim_dispatch,
    .expire = sim_unexpected,
    .shed = sim_unexpected,
    .total_slots = sim_total,
};

static void sim_start(struct sim *m, unsigned slots, unsigned reserve)
{
	memset(m, 0, sizeof(*m));
	m->slots = slots;
	m->hold_ms = 60; /* the demo model's 128 tokens, about */
	m->backlog = 2 * slots;
	m->rng = 88172645463325252ull;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.aging_rate = 0; /* so only urgent requests take the reserve */
	cfg.urgent_reserve = reserve;
	ASSERT_EQ(sl_sched_init(&m->s, &cfg, &sim_ops, m, 0), 0);
}

/* Exponential gaps with the given mean, from a fixed seed. */
static double sim_gap_ms(struct sim *m, double mean_ms)
{
	m->rng ^= m->rng << 13;
	m->rng ^= m->rng >> 7;
	m->rng ^= m->rng << 17;
	double u = ((double)(m->rng >> 11) + 1) / 9007199254740993.0;
	return -log(u) * mean_ms;
}

static void sim_push(struct sim *m, bool urgent, uint64_t now)
{
	unsigned id = 0;
	while (m->in_use[id])
		id++;
	ASSERT(id < SIM_ITEMS);
	m->in_use[id] = true;
	m->urgent[id] = urgent;
	m->arrived[id] = now;
	m->ends[id] = 0;
	double priority = urgent ? SL_PRIORITY_URGENT : SL_PRIORITY_NORMAL;
	ASSERT_EQ(sl_sched_push(&m->s, &m->items[id], priority, now), 0);
	m->normal_waiting += !urgent;
}

/* Urgent arrivals from now on at this rate (0: none). */
static void sim_set_urgent(struct sim *m, double per_s, uint64_t now)
{
	m->urgent_per_s = per_s;
	if (per_s > 0)
		m->next_urgent_ms = (double)now + sim_gap_ms(m, 1000 / per_s);
}

/* Runs [from, to): ends, arrivals, then the queue, each millisecond. */
static void sim_run(struct sim *m, uint64_t from, uint64_t to)
{
	for (uint64_t t = from; t < to; t++) {
		for (unsigned i = 0; i < SIM_ITEMS; i++)
			if (m->in_use[i] && m->ends[i] && m->ends[i] <= t) {
				m->in_use[i] = false;
				m->busy--;
			}
		while (m->urgent_per_s > 0 && m->next_urgent_ms <= (double)t) {
			sim_push(m, true, t);
			m->next_urgent_ms +=
			    sim_gap_ms(m, 1000 / m->urgent_per_s);
		}
		while (m->normal_waiting < m->backlog)
			sim_push(m, false, t);
		sl_sched_run(&m->s, t);
	}
}

/*
 * The reserve the birth-death chain of sched.h asks for, solved directly
 * (stationary probabilities, state by state) rather than by the closed
 * form sched.c uses: the smallest R in [1, slots - 1] whose P(wait) is at
 * most the target.
 */
static unsigned chain_reserve(unsigned slots, double load)
{
	for (unsigned r = 1; r < slots - 1; r++) {
		double p = 1, sum = 1; /* p: state d relative to state 0 */
		for (unsigned d = 0; d < r; d++) {
			p *= load / (double)(slots - r + d + 1);
			sum += p;
		}
		if (p / sum <= SL_SCHED_URGENT_WAIT_TARGET)
			return r;
	}
	return slots - 1;
}

/* The smallest and largest reserve over [from, to), sampled each ms. */
static void sim_reserve_range(struct sim *m, uint64_t from, uint64_t to,
                              unsigned *lo, unsigned *hi)
{
	*lo = UINT32_MAX, *hi = 0;
	for (uint64_t t = from; t < to; t++) {
		sim_run(m, t, t + 1);
		unsigned r = sl_sched_urgent_reserve(&m->s);
		*lo = SL_MIN(*lo, r);
		*hi = SL_MAX(*hi, r);
	}
}

/* Overload without urgent traffic: no reserve, every slot busy. */
static void test_auto_reserve_is_zero_without_urgent_traffic(void)
{
	struct sim m;
	sim_start(&m, 4, SL_SCHED_RESERVE_AUTO);
	for (uint64_t t = 0; t < 20000; t++) {
		sim_run(&m, t, t + 1);
		ASSERT_EQ(sl_sched_urgent_reserve(&m.s), 0);
		ASSERT_EQ(m.busy, m.slots);
	}
	/* 4 slots of 60 ms for 20 s. */
	ASSERT(m.normal_served >= 4 * 20000 / 60 - 4);
	sl_sched_free(&m.s);
}

/*
 * The reserve follows the urgent load a = lambda * S: 1 for a trickle, and
 * what the chain asks for at 30 and 90 a second (a = 1.8 and 5.4, a
 * quarter or more from the loads where the answer changes, 0.85, 4.0 and
 * 6.7, so the estimates' noise cannot move it), on 16 slots so that
 * nothing is clamped.
 */
static void test_auto_reserve_grows_with_urgent_load(void)
{
	static const struct {
		double per_s;
		unsigned want;
	} cases[] = {{1, 1}, {30, 2}, {90, 3}};
	unsigned before = 0;
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		struct sim m;
		sim_start(&m, 16, SL_SCHED_RESERVE_AUTO);
		double load = cases[i].per_s * (double)m.hold_ms / 1000;
		ASSERT_EQ(chain_reserve(m.slots, load), cases[i].want);
		sim_set_urgent(&m, cases[i].per_s, 0);
		sim_run(&m, 0, 10000);
		unsigned lo, hi;
		sim_reserve_range(&m, 10000, 30000, &lo, &hi);
		ASSERT_EQ(lo, cases[i].want);
		ASSERT_EQ(hi, cases[i].want);
		ASSERT(lo > before);
		before = lo;
		sl_sched_free(&m.s);
	}
}

/*
 * A spell of urgent traffic after a quiet one is measured from its start:
 * within a second the reserve is what the load asks for.
 */
static void test_auto_reserve_reacts_within_a_second(void)
{
	struct sim m;
	sim_start(&m, 16, SL_SCHED_RESERVE_AUTO);
	sim_run(&m, 0, 10000);
	ASSERT_EQ(sl_sched_urgent_reserve(&m.s), 0);
	sim_set_urgent(&m, 30, 10000);
	sim_run(&m, 10000, 11000);
	unsigned lo, hi;
	sim_reserve_range(&m, 11000, 15000, &lo, &hi);
	ASSERT_EQ(lo, 2);
	ASSERT_EQ(hi, 2);
	sl_sched_free(&m.s);
}

/*
 * Under overload, the reserve is what lets urgent requests in without
 * waiting: with none, nearly every one waits for a generation to end.
 * Normal requests never take a reserved slot (sim_dispatch checks each),
 * and what the reserve costs them is about the slots it holds.
 */
static void test_auto_reserve_spares_urgent_requests_the_wait(void)
{
	struct sim none, with;
	sim_start(&none, 4, 0);
	sim_start(&with, 4, SL_SCHED_RESERVE_AUTO);
	sim_set_urgent(&none, 10, 0);
	sim_set_urgent(&with, 10, 0);
	sim_run(&none, 0, 60000);
	sim_run(&with, 0, 60000);
	ASSERT_EQ(sl_sched_urgent_reserve(&with.s), 2);
	ASSERT(none.urgent_served > 500 && with.urgent_served > 500);
	ASSERT(none.urgent_waited * 10 > none.urgent_served * 9);
	/* The chain promises at most 5% under exponential holds; these are
	 * fixed, which waits less. */
	ASSERT(with.urgent_waited * 20 <= with.urgent_served);
	/*
	 * The cost: the reserve idles at most its slots, so over the 60 s
	 * the busy slot-time is at least (4 - 2) slots' worth. (Here normal
	 * requests get 1.6 slots against 3.4 without a reserve.)
	 */
	ASSERT(with.normal_served < none.normal_served);
	ASSERT((with.normal_served + with.urgent_served) * with.hold_ms >=
	       (with.slots - 2) * 60000);
	sl_sched_free(&none.s);
	sl_sched_free(&with.s);
}

/*
 * After urgent traffic stops the reserve shrinks back to 0, and normal
 * requests have every slot again; a normal request held back while slots
 * sit free is looked at again without any other event.
 */
static void test_auto_reserve_decays_after_urgent_traffic_stops(void)
{
	struct sim m;
	sim_start(&m, 4, SL_SCHED_RESERVE_AUTO);
	sim_set_urgent(&m, 10, 0);
	sim_run(&m, 0, 20000);
	ASSERT_EQ(sl_sched_urgent_reserve(&m.s), 2);
	sim_set_urgent(&m, 0, 20000);
	/* Still kept a second later: the traffic may come back. */
	sim_run(&m, 20000, 21000);
	ASSERT(sl_sched_urgent_reserve(&m.s) > 0);
	/* About 50 arrivals in memory fall below one in 5 s * ln 50, about
	 * 20 s. */
	uint64_t t = 21000, zero_at = 0;
	unsigned last = sl_sched_urgent_reserve(&m.s);
	for (; t < 60000 && !zero_at; t++) {
		sim_run(&m, t, t + 1);
		unsigned r = sl_sched_urgent_reserve(&m.s);
		ASSERT(r <= last); /* it only shrinks */
		last = r;
		if (r == 0)
			zero_at = t;
	}
	ASSERT(zero_at > 0);
	ASSERT(zero_at < 20000 + 30000);
	sim_run(&m, t, t + 1000);
	ASSERT_EQ(m.busy, m.slots);
	sl_sched_free(&m.s);

	/* Held back with slots free and nothing else happening: the queue
	 * asks to run again, and at those times alone the request leaves. */
	sim_start(&m, 4, SL_SCHED_RESERVE_AUTO);
	m.backlog = 0;
	sim_set_urgent(&m, 10, 0);
	sim_run(&m, 0, 20000);
	sim_set_urgent(&m, 0, 20000);
	sim_run(&m, 20000, 20100); /* everyone done */
	ASSERT_EQ(m.busy, 0);
	m.busy = m.slots - 1; /* one slot free, kept */
	sim_push(&m, false, 20100);
	uint64_t now = 20100, next = sl_sched_run(&m.s, now);
	ASSERT_EQ(m.normal_served, 0);
	while (m.normal_served == 0 && now < 60000) {
		ASSERT(next > now && next <= now + SL_SCHED_RESERVE_RECHECK_MS);
		now = next;
		next = sl_sched_run(&m.s, now);
	}
	ASSERT_EQ(m.normal_served, 1);
	ASSERT_EQ(sl_sched_urgent_reserve(&m.s), 0);
	sl_sched_free(&m.s);
}

/*
 * A lone urgent request under overload finds no slot kept and keeps none:
 * the slot it leaves goes back to normal traffic. A second one soon after
 * makes a spell, and the reserve holds until about 3.5 s after the two.
 */
static void test_auto_reserve_after_a_lone_urgent_request(void)
{
	struct sim m;
	sim_start(&m, 4, SL_SCHED_RESERVE_AUTO);
	sim_run(&m, 0, 10000);
	sim_push(&m, true, 10000);
	sim_run(&m, 10000, 10001);
	ASSERT_EQ(m.urgent_served, 0); /* no slot was kept for it */
	sim_run(&m, 10001, 10200);
	ASSERT_EQ(m.urgent_served, 1);
	ASSERT_EQ(sl_sched_urgent_reserve(&m.s), 0);
	ASSERT_EQ(m.busy, m.slots);
	sim_push(&m, true, 10200);
	sim_run(&m, 10200, 10300);
	ASSERT_EQ(m.urgent_served, 2);
	ASSERT(sl_sched_urgent_reserve(&m.s) >= 1);
	ASSERT(m.busy < m.slots);
	sim_run(&m, 10300, 13400);
	ASSERT(sl_sched_urgent_reserve(&m.s) >= 1);
	sim_run(&m, 13400, 13700);
	ASSERT_EQ(sl_sched_urgent_reserve(&m.s), 0);
	ASSERT_EQ(m.busy, m.slots);
	sl_sched_free(&m.s);
}

/*
 * However heavy the urgent traffic, a slot stays for the rest; with one
 * or no slot there is no reserve; and without the owner's slot count
 * (no total_slots) auto keeps none.
 */
static void test_auto_reserve_never_reaches_the_slots(void)
{
	static const unsigned slot_counts[] = {1, 2, 4};
	for (size_t i = 0; i < SL_ARRAY_SIZE(slot_counts); i++) {
		struct sim m;
		sim_start(&m, slot_counts[i], SL_SCHED_RESERVE_AUTO);
		m.backlog = 2;
		sim_set_urgent(&m, 1000.0 / 60 * slot_counts[i] * 0.9, 0);
		unsigned lo, hi;
		sim_reserve_range(&m, 0, 20000, &lo, &hi);
		ASSERT_EQ(hi, slot_counts[i] - 1);
		ASSERT(m.normal_served > 0);
		sl_sched_free(&m.s);
	}
	struct sl_sched_ops no_total = sim_ops;
	no_total.total_slots = NULL;
	struct sim m;
	sim_start(&m, 4, SL_SCHED_RESERVE_AUTO);
	sl_sched_free(&m.s);
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.aging_rate = 0;
	cfg.urgent_reserve = SL_SCHED_RESERVE_AUTO;
	ASSERT_EQ(sl_sched_init(&m.s, &cfg, &no_total, &m, 0), 0);
	sim_set_urgent(&m, 10, 0);
	unsigned lo, hi;
	sim_reserve_range(&m, 0, 10000, &lo, &hi);
	ASSERT_EQ(hi, 0);
	sl_sched_free(&m.s);
}

static void test_queue_timeout(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.queue_timeout_ms = 1000;
	start(&s, &f, &cfg);
	push(&s, &f, 0, SL_PRIORITY_BATCH, 0);
	push(&s, &f, 1, SL_PRIORITY_URGENT, 500);
	/*
	 * Stamped at 0, the first may have arrived at 0.999: at 1000 it has
	 * not surely waited the whole second, at 1001 it has.
	 */
	ASSERT_EQ(sl_sched_run(&s, 1000), 1001);
	ASSERT_EQ(f.n_expired, 0);
	ASSERT_EQ(sl_sched_run(&s, 1001), 1501);
	ASSERT_EQ(f.n_expired, 1);
	ASSERT_EQ(f.expired[0], 0);
	ASSERT_EQ(sl_sched_depth(&s), 1);
	ASSERT_EQ(sl_sched_run(&s, 1500), 1501);
	ASSERT_EQ(sl_sched_depth(&s), 1);
	ASSERT_EQ(sl_sched_run(&s, 1600), UINT64_MAX);
	ASSERT_EQ(f.expired[1], 1);
	ASSERT_EQ(f.n_dispatched, 0); /* nothing expired was dispatched */
	sl_sched_free(&s);
}

/* A request put back after a failed dispatch keeps its place and deadline. */
static void test_requeue_keeps_place_and_deadline(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	start(&s, &f, &cfg);
	push(&s, &f, 0, SL_PRIORITY_NORMAL, 0);
	push(&s, &f, 1, SL_PRIORITY_NORMAL, 10);
	push(&s, &f, 2, SL_PRIORITY_NORMAL, 20);
	f.free = 2;
	sl_sched_run(&s, 20);
	ASSERT_EQ(f.n_dispatched, 2);
	push(&s, &f, 3, SL_PRIORITY_NORMAL, 30);
	/* 1's upstream failed: it goes back ahead of 2 and 3. */
	struct sl_sched_item before = f.items[1];
	ASSERT_EQ(sl_sched_requeue(&s, &f.items[1], 40), 0);
	ASSERT(sl_sched_queued(&f.items[1]));
	ASSERT(f.items[1].key == before.key);
	ASSERT_EQ(f.items[1].seq, before.seq);
	ASSERT_EQ(f.items[1].deadline_ms, before.deadline_ms);
	ASSERT_EQ(f.items[1].arrival_ms, 10);
	check_heap(&s);
	/* Its deadline, not a new one, is the next thing due. */
	ASSERT_EQ(sl_sched_run(&s, 40), 60011);
	ASSERT_EQ(sl_sched_run(&s, 60011), 60021);
	ASSERT_EQ(f.n_expired, 1);
	ASSERT_EQ(f.expired[0], 1);
	ASSERT_EQ(sl_sched_run(&s, 60031), UINT64_MAX);
	ASSERT_EQ(f.n_expired, 3);
	ASSERT_EQ(f.expired[1], 2);
	ASSERT_EQ(f.expired[2], 3);

	/* Requeued while others wait, it is dispatched first again. */
	push(&s, &f, 4, SL_PRIORITY_NORMAL, 70000);
	f.free = 1;
	sl_sched_run(&s, 70000);
	ASSERT_EQ(f.dispatched[f.n_dispatched - 1], 4);
	push(&s, &f, 5, SL_PRIORITY_NORMAL, 70010);
	push(&s, &f, 6, SL_PRIORITY_NORMAL, 70020);
	ASSERT_EQ(sl_sched_requeue(&s, &f.items[4], 70030), 0);
	f.free = 1;
	sl_sched_run(&s, 70030);
	ASSERT_EQ(f.dispatched[f.n_dispatched - 1], 4);
	ASSERT_EQ(sl_sched_depth(&s), 2);
	check_heap(&s);
	sl_sched_free(&s);
}

/* A full queue: a requeued request competes as an arrival would. */
/* A dispatch that puts its batch back, as the relay does with no upstream. */
static struct sl_sched *bouncing;
static unsigned bounces;

static void bounce_dispatch(void *ctx, struct sl_sched_item **items, unsigned n,
                            uint64_t now)
{
	(void)ctx;
	/* A run that sent them round again would never end: stop it. */
	if (++bounces > 100)
		TEST_FAIL("the batch went round %u times in one run", bounces);
	for (unsigned i = 0; i < n; i++)
		ASSERT_EQ(sl_sched_requeue(bouncing, items[i], now), 0);
}

/*
 * Requeued from inside the dispatch (the owner's free count promised a
 * slot its pick did not find): that run dispatches no more, the items keep
 * their places, and the next run tries again.
 */
static void test_requeue_from_a_dispatch_ends_the_run(void)
{
	static const struct sl_sched_ops bounce_ops = {
	    .free_slots = fake_free,
	    .dispatch = bounce_dispatch,
	    .expire = fake_expire,
	    .shed = fake_shed,
	};
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	memset(&f, 0, sizeof(f));
	ASSERT_EQ(sl_sched_init(&s, &cfg, &bounce_ops, &f, 0), 0);
	bouncing = &s;
	bounces = 0;
	push(&s, &f, 0, SL_PRIORITY_NORMAL, 0);
	push(&s, &f, 1, SL_PRIORITY_NORMAL, 10);
	f.free = 2;
	ASSERT_EQ(sl_sched_run(&s, 20), cfg.queue_timeout_ms + 1);
	ASSERT_EQ(bounces, 1);
	ASSERT_EQ(sl_sched_depth(&s), 2);
	ASSERT(s.heap[0] == &f.items[0]);
	check_heap(&s);
	sl_sched_run(&s, 30);
	ASSERT_EQ(bounces, 2);
	sl_sched_free(&s);
}

static void test_requeue_into_a_full_queue(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.max_queue = 2;
	start(&s, &f, &cfg);
	push(&s, &f, 0, SL_PRIORITY_NORMAL, 0);
	push(&s, &f, 1, SL_PRIORITY_BATCH, 10);
	f.free = 1;
	sl_sched_run(&s, 10);
	ASSERT_EQ(f.dispatched[0], 0);
	push(&s, &f, 2, SL_PRIORITY_NORMAL, 20);
	/* Full of 1 (batch) and 2: 0 outranks 1, which is shed. */
	ASSERT_EQ(sl_sched_requeue(&s, &f.items[0], 30), 0);
	ASSERT_EQ(f.n_shed, 1);
	ASSERT_EQ(f.shed[0], 1);
	ASSERT_EQ(sl_sched_depth(&s), 2);
	check_heap(&s);
	f.free = 2;
	sl_sched_run(&s, 30);
	ASSERT_EQ(f.dispatched[1], 0);
	ASSERT_EQ(f.dispatched[2], 2);
	/* A batch request back into a queue full of normal ones: refused. */
	push(&s, &f, 3, SL_PRIORITY_BATCH, 40);
	f.free = 1;
	sl_sched_run(&s, 40);
	push(&s, &f, 4, SL_PRIORITY_NORMAL, 50);
	push(&s, &f, 5, SL_PRIORITY_NORMAL, 60);
	ASSERT_EQ(sl_sched_requeue(&s, &f.items[3], 70), SL_EFULL);
	ASSERT(!sl_sched_queued(&f.items[3]));
	ASSERT_EQ(f.n_shed, 1);
	ASSERT_EQ(sl_sched_depth(&s), 2);
	check_heap(&s);
	sl_sched_free(&s);
}

/*
 * Retry-After: each refused client gets its own rank, behind the queue
 * and behind those refused before it, timed by the measured drain.
 */
static void test_retry_after(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	start(&s, &f, &cfg);
	/* No measure yet: a second a place. Each refusal is one further. */
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 0), 1000);
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 0), 2000);
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 0), 3000);
	/* Those told to come back are due sooner as time passes. */
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 2500), 1500);
	/* Once all are due, only the queue counts. */
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 10000), 1000);
	sl_sched_free(&s);

	start(&s, &f, &cfg);
	/* 11 requests drain over 10 s: one a second. */
	for (unsigned i = 0; i <= 10; i++) {
		push(&s, &f, i, SL_PRIORITY_NORMAL, i * 1000);
		f.free = 1;
		sl_sched_run(&s, i * 1000);
	}
	for (unsigned i = 11; i < 16; i++)
		push(&s, &f, i, SL_PRIORITY_NORMAL, 10000);
	/* Behind 5 queued: 6 s, then one second more per refusal. */
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 10000), 6000);
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 10000), 7000);
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 10000), 8000);
	/* A drain stalled for 1 s counts: 1.1 s a place now, and the last
	 * one refused is due at 18 s. */
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 11000), 8100);
	/* Never past the cap, however slow the drain. */
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 1000000), SL_SCHED_RETRY_MAX_MS);
	sl_sched_free(&s);

	/* A batch left at one instant: no step of 0, waits still spread. */
	start(&s, &f, &cfg);
	for (unsigned i = 0; i < 8; i++)
		push(&s, &f, i, SL_PRIORITY_NORMAL, 0);
	f.free = 8;
	sl_sched_run(&s, 0);
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 0), SL_SCHED_RETRY_MIN_MS);
	ASSERT_EQ(sl_sched_retry_after_ms(&s, 0),
	          SL_SCHED_RETRY_MIN_MS + SL_SCHED_RETRY_MIN_STEP_MS);
	sl_sched_free(&s);

	/* Whole seconds for Retry-After: rounded up, at least 1. */
	ASSERT_EQ(sl_sched_retry_after_s(0), 1);
	ASSERT_EQ(sl_sched_retry_after_s(100), 1);
	ASSERT_EQ(sl_sched_retry_after_s(1000), 1);
	ASSERT_EQ(sl_sched_retry_after_s(1001), 2);
}

static void test_priority_parsing(void)
{
	double p;
	ASSERT_EQ(sl_priority_parse("urgent", &p), 0);
	ASSERT(p == 2);
	ASSERT_EQ(sl_priority_parse("normal", &p), 0);
	ASSERT(p == 1);
	ASSERT_EQ(sl_priority_parse("batch", &p), 0);
	ASSERT(p == 0);
	ASSERT_EQ(sl_priority_parse("1.5", &p), 0);
	ASSERT(p == 1.5);
	static const char *const bad[] = {"",    "high", "-1", "101",
	                                  "nan", "2x",   "inf"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad); i++)
		ASSERT_EQ(sl_priority_parse(bad[i], &p), SL_EINVAL);
	ASSERT_STR_EQ(sl_priority_class(2.5), "urgent");
	ASSERT_STR_EQ(sl_priority_class(1), "normal");
	ASSERT_STR_EQ(sl_priority_class(0.5), "batch");
}

/* ---- deadlines (sched.h, "Deadlines") ---- */

static unsigned n_late;
static unsigned late_ids[MAX_ITEMS];

static void fake_late(void *ctx, struct sl_sched_item *it, uint64_t now)
{
	struct fake *f = ctx;
	(void)now;
	ASSERT(!sl_sched_queued(it));
	late_ids[n_late++] = id_of(f, it);
}

static const struct sl_sched_ops with_late = {
    .free_slots = fake_free,
    .dispatch = fake_dispatch,
    .expire = fake_expire,
    .shed = fake_shed,
    .late = fake_late,
};

/* Pushes item id with a latest start (0: none) and a service estimate. */
static void push_slo(struct sl_sched *s, struct fake *f, unsigned id,
                     double priority, uint64_t start, double service,
                     uint64_t now)
{
	f->items[id].slo_start_ms = start;
	f->items[id].service_ms = service;
	push(s, f, id, priority, now);
}

static void start_late(struct sl_sched *s, struct fake *f,
                       const struct sl_sched_config *cfg)
{
	memset(f, 0, sizeof(*f));
	n_late = 0;
	ASSERT_EQ(sl_sched_init(s, cfg, &with_late, f, 0), 0);
}

/* A request whose latest start passes while it waits leaves then. */
static void test_late_leaves_at_its_start(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	start_late(&s, &f, &cfg);
	push_slo(&s, &f, 0, SL_PRIORITY_NORMAL, 0, 10, 0);   /* none */
	push_slo(&s, &f, 1, SL_PRIORITY_NORMAL, 400, 10, 0); /* by 400 */
	push_slo(&s, &f, 2, SL_PRIORITY_NORMAL, 300, 10, 0); /* by 300 */
	ASSERT_EQ(sl_sched_slo_depth(&s), 2);
	/* No slot: the run wakes when the first start is past. */
	ASSERT_EQ(sl_sched_run(&s, 0), 301);
	/* At its start it may still leave: not late yet. */
	ASSERT_EQ(sl_sched_run(&s, 300), 301);
	ASSERT_EQ(n_late, 0);
	ASSERT_EQ(sl_sched_run(&s, 301), 401);
	ASSERT_EQ(n_late, 1);
	ASSERT_EQ(late_ids[0], 2);
	ASSERT_EQ(sl_sched_depth(&s), 2);
	/* A slot in time: item 1 leaves first (due first), not late. */
	f.free = 1;
	sl_sched_run(&s, 400);
	ASSERT_EQ(f.n_dispatched, 1);
	ASSERT_EQ(f.dispatched[0], 1);
	ASSERT_EQ(n_late, 1);
	ASSERT_EQ(sl_sched_slo_depth(&s), 0);
	/* The one without a level never goes late: only its timeout. */
	ASSERT_EQ(sl_sched_run(&s, 50000), 60001);
	ASSERT_EQ(n_late, 1);
	sl_sched_free(&s);
}

/*
 * Inside a band the request due first goes first: a level's latest start,
 * or, for one without a level, its arrival plus the aging of one class
 * (5 s at 0.2). Another band's order is untouched.
 */
static void test_earliest_due_first_in_a_band(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	start_late(&s, &f, &cfg);
	ASSERT_EQ(sl_sched_due_wait_ms(&s), 5000);
	push_slo(&s, &f, 0, SL_PRIORITY_NORMAL, 0, 10, 0);     /* due 5000 */
	push_slo(&s, &f, 1, SL_PRIORITY_NORMAL, 30000, 10, 0); /* batch-like */
	push_slo(&s, &f, 2, SL_PRIORITY_NORMAL, 700, 10, 100); /* tight */
	push_slo(&s, &f, 3, SL_PRIORITY_NORMAL, 2000, 10, 200);
	push_slo(&s, &f, 4, SL_PRIORITY_BATCH, 250, 10, 300); /* lower band */
	push_slo(&s, &f, 5, SL_PRIORITY_URGENT, 0, 10, 400);  /* higher */
	unsigned want[] = {5, 2, 3, 0, 1};
	for (unsigned i = 0; i < 5; i++)
		ASSERT_EQ(one_slot(&s, &f, 500), want[i]);
	/* The batch request, though due first of all, waited its band's
	 * turn, and left the queue as its start passed. */
	ASSERT_EQ(sl_sched_depth(&s), 0);
	ASSERT_EQ(n_late, 1);
	ASSERT_EQ(late_ids[0], 4);
	/* A band without levels keeps its arrival order. */
	for (unsigned i = 0; i < 4; i++)
		push_slo(&s, &f, 10 + i, SL_PRIORITY_NORMAL, 0, 10, 600 + i);
	for (unsigned i = 0; i < 4; i++)
		ASSERT_EQ(one_slot(&s, &f, 700), 10 + i);
	sl_sched_free(&s);
}

/*
 * A request without a level, behind a stream of tight levels in its band
 * that could fill every slot: it goes once it is due, not never.
 */
static uint64_t plain_behind_tight_stream(double aging_rate)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.aging_rate = aging_rate;
	cfg.queue_timeout_ms = 120000;
	start_late(&s, &f, &cfg);
	push_slo(&s, &f, 0, SL_PRIORITY_NORMAL, 0, 10, 0);
	unsigned next = 1;
	uint64_t left = 0;
	for (uint64_t t = 100; t <= 130000 && !left; t += 100) {
		push_slo(&s, &f, next++, SL_PRIORITY_NORMAL, t + 500, 10, t);
		f.free = 1;
		sl_sched_run(&s, t);
		if (f.dispatched[f.n_dispatched - 1] == 0)
			left = t;
	}
	sl_sched_free(&s);
	return left;
}

/*
 * Aging still beats starvation across bands when the stream ahead carries
 * levels: a normal request behind urgent ones with tight deadlines.
 */
static void test_aging_beats_deadlines_in_a_higher_band(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	start_late(&s, &f, &cfg);
	push_slo(&s, &f, 0, SL_PRIORITY_NORMAL, 0, 10, 0);
	unsigned next = 1;
	uint64_t left = 0;
	for (uint64_t t = 0; t <= 30000 && !left; t += 1000) {
		push_slo(&s, &f, next++, SL_PRIORITY_URGENT, t + 200, 10, t);
		f.free = 1;
		sl_sched_run(&s, t);
		if (f.dispatched[f.n_dispatched - 1] == 0)
			left = t ? t : 1;
	}
	ASSERT(left >= 4000 && left <= 6000);
	sl_sched_free(&s);
}

static void test_deadlines_do_not_starve(void)
{
	/* Due after 5 s at the default aging rate. */
	uint64_t left = plain_behind_tight_stream(0.2);
	ASSERT(left >= 4500 && left <= 5600);
	/* With aging off, due at its queue timeout (two minutes here): it
	 * goes just before it, once the stream's arrivals are due later. */
	left = plain_behind_tight_stream(0.0);
	ASSERT(left >= 119000 && left <= 120000);
}

/*
 * With fair queuing, a tenant's tight request goes before its own loose
 * ones, never before another tenant whose turn it is; and only the
 * earliest due of the whole queue is looked at (sched.h, "Deadlines").
 */
static void test_deadlines_inside_a_flow(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.fair = true;
	start_late(&s, &f, &cfg);
	for (unsigned i = 0; i < 4; i++) {
		f.items[i].slo_start_ms = i == 3 ? 1000 : 0;
		f.items[i].service_ms = 10;
		ASSERT_EQ(push_flow(&s, &f, i, 7, 1, SL_PRIORITY_NORMAL, i), 0);
	}
	/* Flow 8 arrives later, its one request the tightest of all. */
	f.items[4].slo_start_ms = 900;
	f.items[4].service_ms = 10;
	ASSERT_EQ(push_flow(&s, &f, 4, 8, 1, SL_PRIORITY_NORMAL, 10), 0);
	/*
	 * Flow 7's turn first (equal service, the older request): the
	 * earliest due is flow 8's, so flow 7 goes in arrival order this
	 * time. Then flow 8's turn, its tight one; then flow 7's, whose
	 * tight one is now the earliest due.
	 */
	unsigned want[] = {0, 4, 3, 1, 2};
	for (unsigned i = 0; i < 5; i++)
		ASSERT_EQ(one_slot(&s, &f, 20), want[i]);
	sl_sched_free(&s);
}

/* The work ahead matches a plain count over the queue, whatever happens. */
static void test_work_ahead_matches_a_count(void)
{
	struct sl_sched s;
	struct fake f;
	struct sl_sched_config cfg = config();
	cfg.window_ms = 0;
	cfg.max_queue = 64;
	cfg.fair = true;
	start_late(&s, &f, &cfg);
	uint64_t now = 0, rng = 99;
	unsigned n = 0;
	while (n < 3000) {
		rng = rng * 6364136223846793005u + 1442695040888963407u;
		unsigned op = (unsigned)(rng >> 33) % 10;
		now += (rng >> 20) % 30;
		if (op < 6) {
			unsigned id = n++;
			double prio = (double)((rng >> 40) % 3);
			uint64_t slo =
			    (rng >> 44) % 2 ? now + 50 + (rng >> 50) % 3000 : 0;
			f.items[id].flow_id = (rng >> 36) % 3;
			f.items[id].weight = 1;
			f.items[id].slo_start_ms = slo;
			f.items[id].service_ms = (double)((rng >> 24) % 100);
			sl_sched_push(&s, &f.items[id], prio, now);
		} else if (op < 7 && n > 0) {
			unsigned id = (unsigned)(rng >> 45) % n;
			if (sl_sched_queued(&f.items[id]))
				sl_sched_release(&s, &f.items[id]);
		} else {
			f.free = (unsigned)(rng >> 50) % 3;
			sl_sched_run(&s, now);
		}
		/* Ask as a new arrival would, at a random band and due. */
		double p = (double)((rng >> 30) % 3);
		uint64_t due = now + (rng >> 26) % 4000;
		unsigned count, want_count = 0;
		double work, want_work = 0;
		sl_sched_ahead(&s, p, due, &count, &work);
		for (unsigned i = 0; i < n; i++) {
			const struct sl_sched_item *it = &f.items[i];
			if (!sl_sched_queued(it))
				continue;
			if (it->priority > p ||
			    (it->priority == p && it->due_ms <= due)) {
				want_count++;
				want_work += it->service_ms;
			}
		}
		ASSERT_EQ(count, want_count);
		ASSERT(fabs(work - want_work) < 1e-6);
	}
	sl_sched_free(&s);
}

int main(void)
{
	RUN(test_priority_then_arrival);
	RUN(test_aging_beats_starvation);
	RUN(test_random_operations_match_a_reference);
	RUN(test_fair_least_served_goes_next);
	RUN(test_fair_weights);
	RUN(test_fair_charges_after_dispatch);
	RUN(test_fair_returning_flow_is_lifted);
	RUN(test_fair_full_queue_sheds_the_longest_flow);
	RUN(test_fair_keeps_the_order_of_bands);
	RUN(test_fair_reserve);
	RUN(test_window_deadline_and_early_close);
	RUN(test_window_closes_when_the_queue_is_full);
	RUN(test_urgent_bypass);
	RUN(test_auto_window_never_holds_an_uncontested_request);
	RUN(test_auto_window_gathers_when_slots_are_contested);
	RUN(test_auto_window_sized_from_the_hold);
	RUN(test_auto_window_urgent_and_reserve);
	RUN(test_capacity_and_max_batch);
	RUN(test_max_queue);
	RUN(test_full_queue_sheds_the_least_important);
	RUN(test_full_queue_keeps_room_for_urgent_requests);
	RUN(test_urgent_reserve);
	RUN(test_urgent_reserve_is_fair);
	RUN(test_fair_random_operations_keep_the_heaps);
	RUN(test_auto_reserve_is_zero_without_urgent_traffic);
	RUN(test_auto_reserve_grows_with_urgent_load);
	RUN(test_auto_reserve_reacts_within_a_second);
	RUN(test_auto_reserve_spares_urgent_requests_the_wait);
	RUN(test_auto_reserve_decays_after_urgent_traffic_stops);
	RUN(test_auto_reserve_after_a_lone_urgent_request);
	RUN(test_auto_reserve_never_reaches_the_slots);
	RUN(test_queue_timeout);
	RUN(test_requeue_keeps_place_and_deadline);
	RUN(test_requeue_into_a_full_queue);
	RUN(test_requeue_from_a_dispatch_ends_the_run);
	RUN(test_retry_after);
	RUN(test_priority_parsing);
	RUN(test_late_leaves_at_its_start);
	RUN(test_earliest_due_first_in_a_band);
	RUN(test_aging_beats_deadlines_in_a_higher_band);
	RUN(test_deadlines_do_not_starve);
	RUN(test_deadlines_inside_a_flow);
	RUN(test_work_ahead_matches_a_count);
	return 0;
}

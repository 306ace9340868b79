/*
 * sched_ahead.c: the scheduler's work-ahead treap (sched.h, "Work ahead"):
 * every queued item in the order the dispatch serves it, each node with
 * the count and the predicted service of its subtree, so that what waits
 * ahead of a request is summed in O(log n) for the latency prediction.
 */
#include "sluice/sched/sched.h"

#include "sched_impl.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The treap's order, the order the dispatch serves in when aging between
 * bands is left aside: higher initial priority first, then the earlier
 * due. Neither changes while an item is queued (fair queuing's swaps
 * trade keys and seqs, not these), so the order holds.
 */
static bool served_before(const struct sl_sched_item *a,
                          const struct sl_sched_item *b)
{
	if (a->priority != b->priority)
		return a->priority > b->priority;
	return sl_sched_due_before(a, b);
}

static unsigned tcount(const struct sl_sched_item *t)
{
	return t ? t->tcount : 0;
}

static double twork(const struct sl_sched_item *t)
{
	return t ? t->twork : 0;
}

/* A node's sums, from its children's. */
static void tpull(struct sl_sched_item *t)
{
	t->tcount = 1 + tcount(t->tl) + tcount(t->tr);
	t->twork = t->service_ms + twork(t->tl) + twork(t->tr);
}

/* xorshift32: the treap's priorities need only be spread, not secret. */
static uint32_t treap_random(struct sl_sched *s)
{
	uint32_t x = s->treap_rng;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return s->treap_rng = x;
}

static struct sl_sched_item *treap_insert(struct sl_sched_item *t,
                                          struct sl_sched_item *it)
{
	if (!t) {
		tpull(it);
		return it;
	}
	if (served_before(it, t)) {
		t->tl = treap_insert(t->tl, it);
		if (t->tl->tprio > t->tprio) { /* rotate right */
			struct sl_sched_item *l = t->tl;
			t->tl = l->tr;
			l->tr = t;
			tpull(t);
			t = l;
		}
	} else {
		t->tr = treap_insert(t->tr, it);
		if (t->tr->tprio > t->tprio) { /* rotate left */
			struct sl_sched_item *r = t->tr;
			t->tr = r->tl;
			r->tl = t;
			tpull(t);
			t = r;
		}
	}
	tpull(t);
	return t;
}

/* Joins two treaps, every node of a served before every node of b. */
static struct sl_sched_item *treap_merge(struct sl_sched_item *a,
                                         struct sl_sched_item *b)
{
	if (!a || !b)
		return a ? a : b;
	if (a->tprio > b->tprio) {
		a->tr = treap_merge(a->tr, b);
		tpull(a);
		return a;
	}
	b->tl = treap_merge(a, b->tl);
	tpull(b);
	return b;
}

static struct sl_sched_item *treap_remove(struct sl_sched_item *t,
                                          struct sl_sched_item *it)
{
	if (t == it)
		return treap_merge(it->tl, it->tr);
	if (served_before(it, t))
		t->tl = treap_remove(t->tl, it);
	else
		t->tr = treap_remove(t->tr, it);
	tpull(t);
	return t;
}

void sl_ahead_insert(struct sl_sched *s, struct sl_sched_item *it)
{
	it->tl = it->tr = NULL;
	it->tprio = treap_random(s);
	s->treap = treap_insert(s->treap, it);
}

void sl_ahead_remove(struct sl_sched *s, struct sl_sched_item *it)
{
	s->treap = treap_remove(s->treap, it);
	it->tl = it->tr = NULL;
}

/* Whether t would be served before a request of `priority` due at due_ms. */
static bool is_ahead(const struct sl_sched_item *t, double priority,
                     uint64_t due_ms)
{
	return t->priority != priority ? t->priority > priority
	                               : t->due_ms <= due_ms;
}

void sl_sched_ahead(const struct sl_sched *s, double priority, uint64_t due_ms,
                    unsigned *count, double *work_ms)
{
	unsigned n = 0;
	double work = 0;
	/* Those ahead are a prefix of the treap's order: walk down its edge. */
	for (const struct sl_sched_item *t = s->treap; t;) {
		if (is_ahead(t, priority, due_ms)) {
			n += 1 + tcount(t->tl);
			work += t->service_ms + twork(t->tl);
			t = t->tr;
		} else {
			t = t->tl;
		}
	}
	*count = n;
	*work_ms = work;
}

/*
 * In-order walk of the treap under t, appending each item ahead to
 * out[] until `max` are there; returns false once an item is not
 * ahead (the rest are not either) or out[] is full.
 */
static bool walk_ahead(const struct sl_sched_item *t, double priority,
                       uint64_t due_ms, const struct sl_sched_item **out,
                       unsigned *n, unsigned max)
{
	if (!t)
		return true;
	if (!walk_ahead(t->tl, priority, due_ms, out, n, max))
		return false;
	if (*n >= max || !is_ahead(t, priority, due_ms))
		return false;
	out[(*n)++] = t;
	return walk_ahead(t->tr, priority, due_ms, out, n, max);
}

unsigned sl_sched_ahead_items(const struct sl_sched *s, double priority,
                              uint64_t due_ms, const struct sl_sched_item **out,
                              unsigned max)
{
	unsigned n = 0;
	walk_ahead(s->treap, priority, due_ms, out, &n, max);
	return n;
}

/* flows.c: flows, bands and their heaps, for fair queuing (sched_impl.h). */
#include "sched_impl.h"

#include "sluice/base/common.h"

#include <stdlib.h>
#include <string.h>

struct sl_sched_flow {
	struct sl_sched_flow *next; /* hash chain */
	uint64_t id;
	double weight;
	double service;                /* tokens / weight, so far */
	unsigned refs;                 /* items holding it */
	unsigned queued;               /* of those, the ones waiting */
	struct sl_sched_flowq *queues; /* one per band it waits in */
};

struct sl_sched_flowq {
	struct sl_sched_flowq *next_of_flow;
	struct sl_sched_flow *flow;
	struct sl_sched_band *band;
	struct sl_sched_item *head, *tail;
	unsigned n;
	unsigned at[3]; /* places in the band's three heaps */
};

enum side { LEAST, LONGEST, FEWEST, SIDES };

struct sl_sched_band {
	struct sl_sched_band *next; /* hash chain */
	double priority;
	struct sl_sched_flowq **heap[SIDES];
	unsigned n, cap;
};

/* ---- hashing ---- */

static unsigned hash_u64(const struct sl_sched_flows *fl, uint64_t v)
{
	v *= UINT64_C(0x9E3779B97F4A7C15);
	return (unsigned)(v >> 32) & fl->mask;
}

static unsigned hash_priority(const struct sl_sched_flows *fl, double p)
{
	uint64_t bits;
	memcpy(&bits, &p, sizeof(bits));
	return hash_u64(fl, bits);
}

void sl_flows_init(struct sl_sched_flows *fl, unsigned max_queue)
{
	unsigned buckets = 16;
	while (buckets < max_queue && buckets < SL_SCHED_BUCKETS_MAX)
		buckets *= 2;
	fl->mask = buckets - 1;
	fl->flows = sl_xcalloc(buckets, sizeof(*fl->flows));
	fl->bands = sl_xcalloc(buckets, sizeof(*fl->bands));
	fl->n_flows = 0;
}

static void free_band(struct sl_sched_band *b)
{
	for (int s = LEAST; s < SIDES; s++)
		free(b->heap[s]);
	free(b);
}

void sl_flows_free(struct sl_sched_flows *fl)
{
	if (!fl->flows)
		return;
	for (unsigned i = 0; i <= fl->mask; i++) {
		for (struct sl_sched_flow *f = fl->flows[i], *nf; f; f = nf) {
			nf = f->next;
			for (struct sl_sched_flowq *q = f->queues, *nq; q;
			     q = nq) {
				nq = q->next_of_flow;
				free(q);
			}
			free(f);
		}
		for (struct sl_sched_band *b = fl->bands[i], *nb; b; b = nb) {
			nb = b->next;
			free_band(b);
		}
	}
	free(fl->flows);
	free(fl->bands);
	memset(fl, 0, sizeof(*fl));
}

static struct sl_sched_flow *find_flow(const struct sl_sched_flows *fl,
                                       uint64_t id)
{
	struct sl_sched_flow *f = fl->flows[hash_u64(fl, id)];
	while (f && f->id != id)
		f = f->next;
	return f;
}

/* ---- a band's two heaps of flow queues ---- */

/* Requests of f that hold a slot (or are on their way out), per weight. */
static double running(const struct sl_sched_flow *f)
{
	return (f->refs - f->queued) / f->weight;
}

/*
 * Whether a goes above b: least service first (ties, as when a flow new
 * to the band was lifted to the least: fewer running per unit of weight,
 * then the older head, so equal flows take turns by arrival); fewest
 * running per unit of weight first (ties: least service, then the older
 * head); longest queue per unit of weight first (ties: the newer tail,
 * the request that has waited least).
 */
static bool above(enum side s, const struct sl_sched_flowq *a,
                  const struct sl_sched_flowq *b)
{
	if (s == FEWEST) {
		if (running(a->flow) != running(b->flow))
			return running(a->flow) < running(b->flow);
		if (a->flow->service != b->flow->service)
			return a->flow->service < b->flow->service;
		return a->head->seq < b->head->seq;
	}
	if (s == LEAST) {
		if (a->flow->service != b->flow->service)
			return a->flow->service < b->flow->service;
		if (running(a->flow) != running(b->flow))
			return running(a->flow) < running(b->flow);
		return a->head->seq < b->head->seq;
	}
	double la = a->n / a->flow->weight, lb = b->n / b->flow->weight;
	if (la != lb)
		return la > lb;
	return a->tail->seq > b->tail->seq;
}

static void put(struct sl_sched_band *b, enum side s, unsigned i,
                struct sl_sched_flowq *q)
{
	b->heap[s][i] = q;
	q->at[s] = i;
}

static void sift(struct sl_sched_band *b, enum side s, unsigned i)
{
	struct sl_sched_flowq **h = b->heap[s], *q = h[i];
	while (i > 0 && above(s, q, h[(i - 1) / 2])) {
		put(b, s, i, h[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	for (;;) {
		unsigned c = 2 * i + 1;
		if (c >= b->n)
			break;
		if (c + 1 < b->n && above(s, h[c + 1], h[c]))
			c++;
		if (!above(s, h[c], q))
			break;
		put(b, s, i, h[c]);
		i = c;
	}
	put(b, s, i, q);
}

/* A flow queue's service, length or head changed: its places follow. */
static void update(struct sl_sched_flowq *q)
{
	for (int s = LEAST; s < SIDES; s++)
		sift(q->band, s, q->at[s]);
}

static void band_add(struct sl_sched_band *b, struct sl_sched_flowq *q)
{
	if (b->n == b->cap) {
		b->cap = b->cap ? 2 * b->cap : 4;
		for (int s = LEAST; s < SIDES; s++)
			b->heap[s] = sl_xrealloc(b->heap[s],
			                         b->cap * sizeof(*b->heap[s]));
	}
	for (int s = LEAST; s < SIDES; s++)
		put(b, s, b->n, q);
	b->n++;
	update(q);
}

static void band_drop(struct sl_sched_band *b, struct sl_sched_flowq *q)
{
	b->n--;
	for (int s = LEAST; s < SIDES; s++) {
		unsigned i = q->at[s];
		if (i == b->n)
			continue;
		put(b, s, i, b->heap[s][b->n]);
		sift(b, s, i);
	}
}

/* f's service or running count changed: its queues' places follow. */
static void reorder(struct sl_sched_flow *f)
{
	for (struct sl_sched_flowq *q = f->queues; q; q = q->next_of_flow)
		update(q);
}

/* ---- flows ---- */

void sl_flows_hold(struct sl_sched_flows *fl, struct sl_sched_item *it)
{
	struct sl_sched_flow *f = find_flow(fl, it->flow_id);
	if (!f) {
		unsigned h = hash_u64(fl, it->flow_id);
		f = sl_xcalloc(1, sizeof(*f));
		f->id = it->flow_id;
		f->next = fl->flows[h];
		fl->flows[h] = f;
		fl->n_flows++;
	}
	/* The latest weight holds: a key's weight may change on reload. */
	double weight = it->weight > 0 ? it->weight : 1.0;
	fl->weights += weight - f->weight;
	f->weight = weight;
	f->refs++;
	it->flow = f;
}

void sl_flows_release(struct sl_sched_flows *fl, struct sl_sched_item *it)
{
	struct sl_sched_flow *f = it->flow;
	if (!f)
		return;
	it->flow = NULL;
	if (--f->refs > 0) {
		reorder(f);
		return;
	}
	struct sl_sched_flow **p = &fl->flows[hash_u64(fl, f->id)];
	while (*p != f)
		p = &(*p)->next;
	*p = f->next;
	/* Back to exactly 0 with the last flow, whatever rounding left. */
	fl->weights = --fl->n_flows > 0 ? fl->weights - f->weight : 0;
	free(f);
}

void sl_flows_charge(struct sl_sched_flow *f, double service)
{
	f->service += service / f->weight;
	reorder(f);
}

double sl_flows_service(const struct sl_sched_flows *fl, uint64_t id)
{
	const struct sl_sched_flow *f = find_flow(fl, id);
	return f ? f->service : 0;
}

/* ---- entering and leaving ---- */

static struct sl_sched_band *band_of(struct sl_sched_flows *fl, double priority)
{
	unsigned h = hash_priority(fl, priority);
	struct sl_sched_band *b = fl->bands[h];
	while (b && b->priority != priority)
		b = b->next;
	if (!b) {
		b = sl_xcalloc(1, sizeof(*b));
		b->priority = priority;
		b->next = fl->bands[h];
		fl->bands[h] = b;
	}
	return b;
}

/* The flow's queue in priority's band; NULL when it has none. */
static struct sl_sched_flowq *queue_in(const struct sl_sched_flow *f,
                                       double priority)
{
	struct sl_sched_flowq *q = f->queues;
	while (q && q->band->priority != priority)
		q = q->next_of_flow;
	return q;
}

void sl_flows_enter(struct sl_sched_flows *fl, struct sl_sched_item *it,
                    bool at_head)
{
	struct sl_sched_flow *f = it->flow;
	struct sl_sched_flowq *q = queue_in(f, it->priority);
	it->fprev = it->fnext = NULL;
	f->queued++;
	if (!q) {
		struct sl_sched_band *b = band_of(fl, it->priority);
		/* Lifted: an idle spell banks no credit over those waiting. */
		if (b->n > 0 && f->service < b->heap[LEAST][0]->flow->service)
			sl_flows_charge(
			    f, (b->heap[LEAST][0]->flow->service - f->service) *
			           f->weight);
		q = sl_xcalloc(1, sizeof(*q));
		q->flow = f;
		q->band = b;
		q->head = q->tail = it;
		q->n = 1;
		q->next_of_flow = f->queues;
		f->queues = q;
		it->flowq = q;
		band_add(b, q);
		reorder(f); /* one fewer running, if it was requeued */
		return;
	}
	if (at_head) {
		it->fnext = q->head;
		q->head->fprev = it;
		q->head = it;
	} else {
		it->fprev = q->tail;
		q->tail->fnext = it;
		q->tail = it;
	}
	q->n++;
	it->flowq = q;
	reorder(f);
}

static void band_forget(struct sl_sched_flows *fl, struct sl_sched_band *b)
{
	struct sl_sched_band **p = &fl->bands[hash_priority(fl, b->priority)];
	while (*p != b)
		p = &(*p)->next;
	*p = b->next;
	free_band(b);
}

void sl_flows_leave(struct sl_sched_flows *fl, struct sl_sched_item *it)
{
	struct sl_sched_flowq *q = it->flowq;
	if (!q)
		return;
	it->flowq = NULL;
	q->flow->queued--;
	if (it->fprev)
		it->fprev->fnext = it->fnext;
	else
		q->head = it->fnext;
	if (it->fnext)
		it->fnext->fprev = it->fprev;
	else
		q->tail = it->fprev;
	it->fprev = it->fnext = NULL;
	struct sl_sched_flow *f = q->flow;
	if (--q->n > 0) {
		reorder(f); /* one more running, or one fewer held */
		return;
	}
	struct sl_sched_band *b = q->band;
	band_drop(b, q);
	struct sl_sched_flowq **p = &q->flow->queues;
	while (*p != q)
		p = &(*p)->next_of_flow;
	*p = q->next_of_flow;
	free(q);
	if (b->n == 0)
		band_forget(fl, b);
	reorder(f);
}

struct sl_sched_item *sl_flows_next(const struct sl_sched_item *top)
{
	return top->flowq->band->heap[LEAST][0]->head;
}

struct sl_sched_item *sl_flows_fewest(const struct sl_sched_item *top)
{
	return top->flowq->band->heap[FEWEST][0]->head;
}

struct sl_sched_item *sl_flows_victim(const struct sl_sched_item *worst)
{
	return worst->flowq->band->heap[LONGEST][0]->tail;
}

bool sl_flows_may_displace(const struct sl_sched_item *it,
                           const struct sl_sched_item *victim)
{
	const struct sl_sched_flowq *v = victim->flowq;
	if (it->flow == v->flow)
		return false;
	const struct sl_sched_flowq *q = queue_in(it->flow, v->band->priority);
	unsigned mine = q ? q->n : 0;
	/* After the exchange, the arrival's flow is no longer than the
	 * victim's. */
	return (mine + 1) / it->flow->weight <= (v->n - 1) / v->flow->weight;
}

bool sl_flows_below_share(const struct sl_sched_flows *fl,
                          const struct sl_sched_flow *f, unsigned slots)
{
	double in_flight = f->refs - f->queued;
	return in_flight * fl->weights < slots * f->weight;
}

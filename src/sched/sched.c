/* sched.c: the priority queue with aging, and the batching window. */
#include "sluice/sched/sched.h"

#include "sched_impl.h"
#include "sluice/base/common.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/*
 * A decimal number as a priority: digits, optionally a point and more
 * digits, nothing else. strtod alone would also take leading spaces, a
 * sign, hex ("0x10"), exponents, "inf" and "nan", none of which a client
 * means as a priority; so the shape is checked first and strtod only
 * converts what passed.
 */
static bool is_plain_decimal(const char *text)
{
	const char *p = text;
	while (*p >= '0' && *p <= '9')
		p++;
	if (p == text)
		return false;
	if (*p == '.') {
		const char *fraction = ++p;
		while (*p >= '0' && *p <= '9')
			p++;
		if (p == fraction)
			return false;
	}
	return *p == '\0';
}

int sl_priority_parse(const char *text, double *out)
{
	if (strcmp(text, "urgent") == 0)
		*out = SL_PRIORITY_URGENT;
	else if (strcmp(text, "normal") == 0)
		*out = SL_PRIORITY_NORMAL;
	else if (strcmp(text, "batch") == 0)
		*out = SL_PRIORITY_BATCH;
	else {
		if (!is_plain_decimal(text))
			return SL_EINVAL;
		double v = strtod(text, NULL);
		if (!isfinite(v) || v < SL_PRIORITY_MIN || v > SL_PRIORITY_MAX)
			return SL_EINVAL;
		*out = v;
	}
	return 0;
}

const char *sl_priority_class(double priority)
{
	if (priority >= SL_PRIORITY_URGENT)
		return "urgent";
	return priority >= SL_PRIORITY_NORMAL ? "normal" : "batch";
}

/* ---- the heaps ---- */

/*
 * The same items sit in two binary heaps: `heap`, best first, from which
 * requests are dispatched; and `bottom`, worst first (sheds_before), from
 * which a full queue sheds its least important request when a more
 * important one arrives. A third, `urgent`, best first, holds only the requests
 * asked as urgent (class 2), for the urgent reserve; a fourth, `slo`, only
 * those with a service level, earliest slo_start_ms first. All are kept in
 * step, each item knowing its place in each it is in.
 */
enum which { BEST, WORST, URGENT, SLO };

/* Whether a ranks before b: larger key, then earlier arrival. */
static bool before(const struct sl_sched_item *a, const struct sl_sched_item *b)
{
	if (a->key != b->key)
		return a->key > b->key;
	return a->seq < b->seq;
}

static struct sl_sched_item **slots_of(struct sl_sched *s, enum which w)
{
	switch (w) {
	case BEST: return s->heap;
	case WORST: return s->bottom;
	case URGENT: return s->urgent;
	case SLO: break;
	}
	return s->slo;
}

static uint32_t *index_of(struct sl_sched_item *it, enum which w)
{
	switch (w) {
	case BEST: return &it->heap_index;
	case WORST: return &it->bottom_index;
	case URGENT: return &it->urgent_index;
	case SLO: break;
	}
	return &it->slo_index;
}

/* An item's class for class_count: 0 batch, 1 normal, 2 urgent. */
static unsigned class_of(const struct sl_sched_item *it)
{
	if (it->priority >= SL_PRIORITY_URGENT)
		return SL_SCHED_URGENT_CLASS;
	return it->priority >= SL_PRIORITY_NORMAL ? 1 : 0;
}

static bool asked_urgent(const struct sl_sched_item *it)
{
	return class_of(it) == SL_SCHED_URGENT_CLASS;
}

/*
 * Whether a full queue sheds a before b: a request not asked as urgent
 * before one that was (however long it has aged), then the lower ranked.
 */
static bool sheds_before(const struct sl_sched_item *a,
                         const struct sl_sched_item *b)
{
	if (asked_urgent(a) != asked_urgent(b))
		return asked_urgent(b);
	return before(b, a);
}

/* Whether a belongs above b in heap w. */
static bool above(enum which w, const struct sl_sched_item *a,
                  const struct sl_sched_item *b)
{
	switch (w) {
	case WORST: return sheds_before(a, b);
	case SLO: return sl_sched_due_before(a, b);
	default: return before(a, b);
	}
}

static void place(struct sl_sched *s, enum which w, unsigned i,
                  struct sl_sched_item *it)
{
	slots_of(s, w)[i] = it;
	*index_of(it, w) = i;
}

static void sift_up(struct sl_sched *s, enum which w, unsigned i)
{
	struct sl_sched_item **a = slots_of(s, w), *it = a[i];
	while (i > 0) {
		unsigned parent = (i - 1) / 2;
		if (!above(w, it, a[parent]))
			break;
		place(s, w, i, a[parent]);
		i = parent;
	}
	place(s, w, i, it);
}

/* Sifts down within the first n entries. */
static void sift_down(struct sl_sched *s, enum which w, unsigned i, unsigned n)
{
	struct sl_sched_item **a = slots_of(s, w), *it = a[i];
	for (;;) {
		unsigned child = 2 * i + 1;
		if (child >= n)
			break;
		if (child + 1 < n && above(w, a[child + 1], a[child]))
			child++;
		if (!above(w, a[child], it))
			break;
		place(s, w, i, a[child]);
		i = child;
	}
	place(s, w, i, it);
}

/* Takes the entry at i out of heap w, which holds n entries. */
static void heap_remove_at(struct sl_sched *s, enum which w, unsigned i,
                           unsigned n)
{
	struct sl_sched_item **a = slots_of(s, w);
	struct sl_sched_item *last = a[n - 1];
	*index_of(a[i], w) = SL_SCHED_NOT_QUEUED;
	if (i == n - 1)
		return;
	place(s, w, i, last);
	if (i > 0 && above(w, last, a[(i - 1) / 2]))
		sift_up(s, w, i);
	else
		sift_down(s, w, i, n - 1);
}

/* Takes an item out of the heaps and the treap. */
static void heaps_remove(struct sl_sched *s, struct sl_sched_item *it)
{
	unsigned c = class_of(it);
	heap_remove_at(s, BEST, it->heap_index, s->n);
	heap_remove_at(s, WORST, it->bottom_index, s->n);
	if (c == SL_SCHED_URGENT_CLASS)
		heap_remove_at(s, URGENT, it->urgent_index, s->class_count[c]);
	if (it->slo_start_ms)
		heap_remove_at(s, SLO, it->slo_index, s->n_slo--);
	sl_ahead_remove(s, it);
	s->n--;
	s->class_count[c]--;
}

static void heaps_insert(struct sl_sched *s, struct sl_sched_item *it)
{
	unsigned c = class_of(it);
	place(s, BEST, s->n, it);
	place(s, WORST, s->n, it);
	s->n++;
	sift_up(s, BEST, it->heap_index);
	sift_up(s, WORST, it->bottom_index);
	it->urgent_index = SL_SCHED_NOT_QUEUED;
	if (c == SL_SCHED_URGENT_CLASS) {
		place(s, URGENT, s->class_count[c], it);
		sift_up(s, URGENT, it->urgent_index);
	}
	s->class_count[c]++;
	it->slo_index = SL_SCHED_NOT_QUEUED;
	if (it->slo_start_ms) {
		place(s, SLO, s->n_slo++, it);
		sift_up(s, SLO, it->slo_index);
	}
	sl_ahead_insert(s, it);
}

/* ---- the arrival-order list (queue deadlines) ---- */

static void list_unlink(struct sl_sched *s, struct sl_sched_item *it)
{
	if (it->prev)
		it->prev->next = it->next;
	else
		s->oldest = it->next;
	if (it->next)
		it->next->prev = it->prev;
	else
		s->newest = it->prev;
	it->prev = it->next = NULL;
}

/*
 * Puts an item back in the arrival-order list at the place its deadline
 * gives it (its seq may have been swapped by fair queuing), so the list
 * stays in deadline order. Walks from the newest end: a requeued item left
 * the queue recently, so few arrivals came after it.
 */
static void list_insert_in_order(struct sl_sched *s, struct sl_sched_item *it)
{
	struct sl_sched_item *after = s->newest;
	while (after && after->deadline_ms > it->deadline_ms)
		after = after->prev;
	it->prev = after;
	it->next = after ? after->next : s->oldest;
	if (it->next)
		it->next->prev = it;
	else
		s->newest = it;
	if (after)
		after->next = it;
	else
		s->oldest = it;
}

/* Takes a queued item out of the heaps, the list and its flow. */
static void unqueue(struct sl_sched *s, struct sl_sched_item *it)
{
	heaps_remove(s, it);
	list_unlink(s, it);
	if (s->cfg.fair)
		sl_flows_leave(&s->fl, it);
}

/*
 * Fair queuing: two items of one band trade their places in both heaps,
 * with the key and seq that go with them (their deadlines, in the
 * arrival-order list, stay their own). The heaps hold the same keys in
 * the same slots, so they stay in order.
 */
static void swap_places(struct sl_sched *s, struct sl_sched_item *a,
                        struct sl_sched_item *b)
{
	struct sl_sched_item t = *a;
	a->key = b->key;
	a->seq = b->seq;
	b->key = t.key;
	b->seq = t.seq;
	place(s, BEST, b->heap_index, a);
	place(s, BEST, t.heap_index, b);
	place(s, WORST, b->bottom_index, a);
	place(s, WORST, t.bottom_index, b);
	/* One band, one class: both are in the urgent heap or neither. */
	if (class_of(a) == SL_SCHED_URGENT_CLASS) {
		place(s, URGENT, b->urgent_index, a);
		place(s, URGENT, t.urgent_index, b);
	}
}

/*
 * The request a full queue gives up for a more important one, or NULL: its
 * least important, or with fair queuing the newest of the longest flow
 * queue in its band, put in its place first.
 */
static struct sl_sched_item *victim(struct sl_sched *s)
{
	struct sl_sched_item *worst = s->bottom[0];
	if (!s->cfg.fair)
		return worst;
	struct sl_sched_item *v = sl_flows_victim(worst);
	if (v != worst)
		swap_places(s, v, worst);
	return v;
}

/* ---- the auto urgent reserve ---- */

static bool reserve_auto(const struct sl_sched *s)
{
	return s->cfg.urgent_reserve == SL_SCHED_RESERVE_AUTO;
}

static bool window_auto(const struct sl_sched *s)
{
	return s->cfg.window_ms == SL_SCHED_WINDOW_AUTO;
}

static unsigned fair_reserve(const struct sl_sched *s)
{
	return s->cfg.fair ? s->cfg.fair_reserve : 0;
}

/* Whether the load is measured: the auto reserve and window both use it. */
static bool load_tracked(const struct sl_sched *s)
{
	return (reserve_auto(s) || window_auto(s)) && s->ops->total_slots;
}

/*
 * Brings the decayed sums to now_ms: each decays by exp(-dt / memory), and
 * the busy slots held since the last sample add their integral over dt
 * under the same decay (busy * memory * (1 - exp(-dt / memory))).
 */
static void load_advance(struct sl_sched_load *l, uint64_t now_ms)
{
	if (now_ms <= l->at_ms)
		return;
	double memory = SL_SCHED_LOAD_MEMORY_MS;
	double decay = exp(-(double)(now_ms - l->at_ms) / memory);
	l->urgent *= decay;
	l->dispatched *= decay;
	l->busy_ms = l->busy_ms * decay + l->busy * memory * (1 - decay);
	l->at_ms = now_ms;
}

/*
 * The slots' state after a run. Busy slots change only when a request is
 * dispatched (in the run) or gives its slot back (after which the owner
 * runs the queue again), so a sample at the end of each run holds until
 * the next.
 */
static void load_sample(struct sl_sched *s, unsigned free)
{
	unsigned slots = s->ops->total_slots(s->ctx);
	s->load.slots = slots;
	s->load.busy = slots > free ? slots - free : 0;
}

/*
 * The smallest reserve that lets at most SL_SCHED_URGENT_WAIT_TARGET of
 * urgent arrivals find no free slot under overload (see the header), in
 * [1, slots - 1]; 0 without urgent traffic or with fewer than 2 slots.
 */
static unsigned auto_reserve(const struct sl_sched_load *l, uint64_t now_ms)
{
	if (l->urgent < SL_SCHED_URGENT_MIN_SEEN || l->slots < 2)
		return 0;
	/* Arrivals per ms, over the memory or the spell if it is younger. */
	double span = (double)SL_MAX(now_ms - l->urgent_since_ms,
	                             (uint64_t)SL_SCHED_URGENT_MIN_SPAN_MS);
	double memory = SL_SCHED_LOAD_MEMORY_MS;
	double rate = l->urgent / (memory * (1 - exp(-span / memory)));
	/* Little's law over the same memory: ms a slot is held. */
	double hold = l->dispatched > 0 ? l->busy_ms / l->dispatched : 0;
	double load = rate * hold; /* urgent slots offered, a */
	unsigned most = l->slots - 1;
	if (!(load > 0))
		return 1; /* any urgent traffic waits without one */
	/* 1 / P(wait) for R = 0, 1, ...: term j = n (n-1) ... (n-j+1) / a^j. */
	double inverse = 1, term = 1;
	for (unsigned r = 1; r < most; r++) {
		term *= (double)(l->slots - r + 1) / load;
		inverse += term;
		if (inverse * SL_SCHED_URGENT_WAIT_TARGET >= 1)
			return r;
	}
	return most;
}

/* ---- public ---- */

int sl_sched_init(struct sl_sched *s, const struct sl_sched_config *cfg,
                  const struct sl_sched_ops *ops, void *ctx, uint64_t now_ms)
{
	memset(s, 0, sizeof(*s));
	if (cfg->max_queue == 0)
		return SL_EINVAL;
	s->cfg = *cfg;
	s->ops = ops;
	s->ctx = ctx;
	s->epoch_ms = now_ms;
	s->load.at_ms = now_ms;
	if (!reserve_auto(s))
		s->reserve = cfg->urgent_reserve;
	s->heap = sl_xcalloc(cfg->max_queue, sizeof(*s->heap));
	s->bottom = sl_xcalloc(cfg->max_queue, sizeof(*s->bottom));
	s->urgent = sl_xcalloc(cfg->max_queue, sizeof(*s->urgent));
	s->slo = sl_xcalloc(cfg->max_queue, sizeof(*s->slo));
	s->treap_rng = 0x9E3779B9u; /* any seed but 0: a fixed one, for tests */
	s->batch = sl_xcalloc(cfg->max_queue, sizeof(*s->batch));
	if (cfg->fair)
		sl_flows_init(&s->fl, cfg->max_queue);
	return 0;
}

void sl_sched_free(struct sl_sched *s)
{
	free(s->heap);
	free(s->bottom);
	free(s->urgent);
	free(s->slo);
	free(s->batch);
	sl_flows_free(&s->fl);
	memset(s, 0, sizeof(*s));
}

bool sl_sched_queued(const struct sl_sched_item *item)
{
	return item->heap_index != SL_SCHED_NOT_QUEUED;
}

unsigned sl_sched_depth(const struct sl_sched *s)
{
	return s->n;
}

unsigned sl_sched_urgent_reserve(const struct sl_sched *s)
{
	return s->reserve;
}

unsigned sl_sched_slo_depth(const struct sl_sched *s)
{
	return s->n_slo;
}

uint64_t sl_sched_due_wait_ms(const struct sl_sched *s)
{
	if (!(s->cfg.aging_rate > 0))
		return s->cfg.queue_timeout_ms;
	return (uint64_t)ceil(SL_SCHED_DUE_CLASSES / s->cfg.aging_rate * 1000);
}

/*
 * Makes room in a full queue for `it`, whose key is `key`: the victim
 * (see victim()) goes if the arrival outranks the least important waiting
 * request (sheds_before: an arrival asked as urgent outranks any request
 * that was not), or, with fair queuing, if it is of that request's band
 * and its flow waits less there than the victim's. Returns the item to
 * shed, or NULL when the arrival is the one refused.
 */
static struct sl_sched_item *make_room(struct sl_sched *s,
                                       struct sl_sched_item *it, double key)
{
	struct sl_sched_item *worst = s->bottom[0];
	bool outranks = asked_urgent(it) != asked_urgent(worst)
	                    ? asked_urgent(it)
	                    : key > worst->key;
	if (!s->cfg.fair) {
		/* On equal keys the newcomer ranks lower: it is refused. */
		return outranks ? worst : NULL;
	}
	struct sl_sched_item *v = sl_flows_victim(worst);
	if (!outranks &&
	    !(it->priority == worst->priority && sl_flows_may_displace(it, v)))
		return NULL;
	return victim(s);
}

int sl_sched_push(struct sl_sched *s, struct sl_sched_item *it, double priority,
                  uint64_t now_ms)
{
	double key = priority - s->cfg.aging_rate *
	                            (double)(now_ms - s->epoch_ms) / 1000.0;
	struct sl_sched_item *shed = NULL;
	it->priority = priority;
	if (s->cfg.fair)
		sl_flows_hold(&s->fl, it);
	if (s->n >= s->cfg.max_queue) {
		/*
		 * Full. An arrival that outranks the least important waiting
		 * request takes its place; otherwise it is the one refused.
		 */
		it->heap_index = it->bottom_index = SL_SCHED_NOT_QUEUED;
		shed = make_room(s, it, key);
		if (!shed) {
			sl_sched_release(s, it);
			return SL_EFULL;
		}
		unqueue(s, shed);
	}
	/*
	 * Nothing pending: this arrival opens a fixed batching window. (An
	 * auto window is opened by sl_sched_run(), which sees the slots.)
	 */
	if (s->n == 0 && s->cfg.window_ms > 0 &&
	    s->cfg.window_ms != SL_SCHED_WINDOW_AUTO && !s->window_open) {
		s->window_open = true;
		s->window_deadline_ms = now_ms + s->cfg.window_ms;
	}
	if (reserve_auto(s) && priority >= SL_PRIORITY_URGENT) {
		load_advance(&s->load, now_ms);
		if (s->load.urgent < SL_SCHED_URGENT_MIN_SEEN)
			s->load.urgent_since_ms = now_ms; /* a new spell */
		s->load.urgent += 1;
	}
	it->arrival_ms = now_ms;
	/*
	 * The clock counts whole milliseconds, so an item stamped N arrived
	 * somewhere in [N, N + 1): one more millisecond keeps it from being
	 * refused before it has waited the whole timeout.
	 */
	it->deadline_ms = now_ms + s->cfg.queue_timeout_ms + 1;
	it->seq = s->seq++;
	it->order = it->seq;
	it->due_ms = it->slo_start_ms ? it->slo_start_ms
	                              : now_ms + sl_sched_due_wait_ms(s);
	it->key = key;
	it->prev = s->newest;
	it->next = NULL;
	if (s->newest)
		s->newest->next = it;
	else
		s->oldest = it;
	s->newest = it;
	heaps_insert(s, it);
	if (s->cfg.fair)
		sl_flows_enter(&s->fl, it, false);
	if (shed)
		s->ops->shed(s->ctx, shed, now_ms);
	return 0;
}

int sl_sched_requeue(struct sl_sched *s, struct sl_sched_item *it,
                     uint64_t now_ms)
{
	struct sl_sched_item *shed = NULL;
	if (s->n >= s->cfg.max_queue) {
		/* As for an arrival, except that on equal keys the earlier
		 * arrival (often this one) keeps its place. */
		it->heap_index = it->bottom_index = SL_SCHED_NOT_QUEUED;
		if (!sheds_before(s->bottom[0], it))
			return SL_EFULL;
		shed = victim(s);
		unqueue(s, shed);
	}
	list_insert_in_order(s, it);
	heaps_insert(s, it);
	s->came_back |= s->running; /* see sl_sched_run */
	if (s->cfg.fair) {
		/* It was charged its cost when it left; it is charged again
		 * when it leaves anew. */
		sl_flows_charge(it->flow, -it->cost);
		sl_flows_enter(&s->fl, it, true);
	}
	if (shed)
		s->ops->shed(s->ctx, shed, now_ms);
	return 0;
}

void sl_sched_remove(struct sl_sched *s, struct sl_sched_item *it)
{
	if (!sl_sched_queued(it))
		return;
	unqueue(s, it);
	if (s->n == 0)
		s->window_open = false;
}

void sl_sched_charge(struct sl_sched *s, struct sl_sched_item *it,
                     double service)
{
	if (s->cfg.fair && it->flow && service != 0)
		sl_flows_charge(it->flow, service);
}

void sl_sched_release(struct sl_sched *s, struct sl_sched_item *it)
{
	sl_sched_remove(s, it); /* a flow outlives its queued requests */
	if (s->cfg.fair)
		sl_flows_release(&s->fl, it);
}

double sl_sched_flow_service(const struct sl_sched *s, uint64_t flow_id)
{
	return s->cfg.fair ? sl_flows_service(&s->fl, flow_id) : 0;
}

/*
 * Who takes a slot: `next` leaves the queue, and with fair queuing takes
 * the place of `head` first, the top of the heap it was found by and of
 * next's band (its least-served flow's oldest, or for the fair reserve its
 * fewest-running flow's). next is NULL when no one may take the slot.
 */
struct take {
	struct sl_sched_item *head, *next;
};

/* The request that leaves, charged its cost to its flow. */
static struct sl_sched_item *pop(struct sl_sched *s, struct take t)
{
	if (t.next != t.head)
		swap_places(s, t.next, t.head);
	if (s->cfg.fair)
		sl_flows_charge(t.next->flow, t.next->cost);
	unqueue(s, t.next);
	return t.next;
}

/*
 * The request a dispatch takes for head: head, or its band's least served;
 * or in place of either, the item due first with a service level, when it
 * is of their band (and flow) and due before them (sched.h, "Deadlines").
 */
static struct take next_in_line(const struct sl_sched *s,
                                struct sl_sched_item *head)
{
	struct sl_sched_item *next = s->cfg.fair ? sl_flows_next(head) : head;
	struct sl_sched_item *due = s->n_slo > 0 ? s->slo[0] : NULL;
	if (due && due != next && due->priority == next->priority &&
	    (!s->cfg.fair || due->flow == next->flow) &&
	    sl_sched_due_before(due, next))
		next = due;
	return (struct take){head, next};
}

static void record_dispatch(struct sl_sched *s, uint64_t now_ms, unsigned n)
{
	s->batches++;
	s->dispatched += n;
	s->load.dispatched += n; /* brought to now_ms by sl_sched_run */
	for (unsigned i = 0; i < n; i++) {
		s->rate_ms[s->rate_next] = now_ms;
		s->rate_next = (s->rate_next + 1) % SL_SCHED_RATE_SAMPLES;
		if (s->rate_count < SL_SCHED_RATE_SAMPLES)
			s->rate_count++;
	}
}

/* An item's priority now: its initial one plus what it gained waiting. */
static double effective(const struct sl_sched *s,
                        const struct sl_sched_item *it, uint64_t now_ms)
{
	return it->key +
	       s->cfg.aging_rate * (double)(now_ms - s->epoch_ms) / 1000.0;
}

/*
 * The request of the top's band whose flow runs the fewest per unit of
 * weight, if that flow is not alone and runs fewer than its share of the
 * slots outside the urgent reserve (sched.h, "Fair reserve"); else none.
 * The fewest running is below its share if any flow of the band is.
 */
static struct take below_share(const struct sl_sched *s)
{
	struct take t = {s->heap[0], NULL};
	unsigned total = s->ops->total_slots ? s->ops->total_slots(s->ctx) : 0;
	if (total <= s->reserve + fair_reserve(s) || s->fl.n_flows < 2)
		return t;
	struct sl_sched_item *it = sl_flows_fewest(t.head);
	if (sl_flows_below_share(&s->fl, it->flow, total - s->reserve))
		t.next = it;
	return t;
}

/*
 * Who may take a slot when `free` are free: beyond both reserves, the next
 * in line; within the fair reserve, a request of a flow below its share,
 * or the next in line if it is urgent by now (aged ones count); within the
 * urgent reserve, the best of the requests asked as urgent, or if none
 * waits, the next in line if it has aged to urgent (sched.h, "Urgent
 * reserve").
 */
static struct take taker(const struct sl_sched *s, unsigned free,
                         uint64_t now_ms)
{
	struct sl_sched_item *top = s->heap[0];
	bool urgent_now = effective(s, top, now_ms) >= SL_PRIORITY_URGENT;
	if (free > s->reserve + fair_reserve(s) ||
	    (free > s->reserve && urgent_now))
		return next_in_line(s, top);
	if (free > s->reserve)
		return below_share(s);
	if (free > 0 && s->class_count[SL_SCHED_URGENT_CLASS] > 0)
		return next_in_line(s, s->urgent[0]);
	if (free > 0 && urgent_now)
		return next_in_line(s, top);
	return (struct take){top, NULL};
}

/*
 * Dispatches up to `limit` items as one batch, as slots and the reserves
 * allow (taker()); returns how many left.
 */
static unsigned dispatch_batch(struct sl_sched *s, unsigned free,
                               unsigned limit, uint64_t now_ms)
{
	unsigned n = 0;
	if (s->cfg.max_batch > 0)
		limit = SL_MIN(limit, s->cfg.max_batch);
	struct take t;
	while (s->n > 0 && n < limit && (t = taker(s, free - n, now_ms)).next)
		s->batch[n++] = pop(s, t);
	if (s->n == 0)
		s->window_open = false;
	if (n == 0)
		return 0;
	record_dispatch(s, now_ms, n);
	s->ops->dispatch(s->ctx, s->batch, n, now_ms);
	return n;
}

/*
 * How long an auto window gathers: SL_SCHED_AUTO_WINDOW_SHARE of the time
 * a request holds its slot (Little's law over the measured load), within
 * [1 ms, SL_SCHED_AUTO_WINDOW_MS]; the most until there is a measure.
 */
static uint64_t auto_window_ms(const struct sl_sched *s)
{
	const struct sl_sched_load *l = &s->load;
	if (!s->ops->total_slots || !(l->dispatched > 0) || !(l->busy_ms > 0))
		return SL_SCHED_AUTO_WINDOW_MS;
	double w =
	    ceil(l->busy_ms / l->dispatched * SL_SCHED_AUTO_WINDOW_SHARE);
	return (uint64_t)SL_MAX(1.0,
	                        SL_MIN(w, (double)SL_SCHED_AUTO_WINDOW_MS));
}

/*
 * Whether `free` slots are contested, for the auto window: more requests
 * wait than the slots can take, and not all of one class, so gathering
 * arrivals can change who goes. O(1).
 */
static bool contested(const struct sl_sched *s, unsigned free)
{
	unsigned classes = 0;
	for (unsigned c = 0; c < SL_SCHED_CLASSES; c++)
		classes += s->class_count[c] > 0;
	return s->n > free && classes > 1;
}

/*
 * Whether the window, open with `free` slots free, still gathers: a fixed
 * one until the pending requests fill every free slot, an auto one while
 * the slots are contested; neither once the queue is full, which would
 * refuse the next arrival while the slots the window holds are free.
 */
static bool window_gathers(const struct sl_sched *s, unsigned free)
{
	if (s->n >= s->cfg.max_queue)
		return false;
	return window_auto(s) ? contested(s, free) : s->n < free;
}

uint64_t sl_sched_run(struct sl_sched *s, uint64_t now_ms)
{
	if (s->running)
		return UINT64_MAX; /* the running call picks the change up */
	s->running = true;
	s->came_back = false;
	if (load_tracked(s))
		load_advance(&s->load, now_ms);
	if (reserve_auto(s)) {
		/* At least one slot stays outside both reserves. */
		unsigned most = s->load.slots > fair_reserve(s) + 1
		                    ? s->load.slots - fair_reserve(s) - 1
		                    : 0;
		s->reserve = s->ops->total_slots
		                 ? SL_MIN(auto_reserve(&s->load, now_ms), most)
		                 : 0;
	}

	/* Deadlines are in arrival order: the oldest expires first. */
	while (s->oldest && s->oldest->deadline_ms <= now_ms) {
		struct sl_sched_item *it = s->oldest;
		unqueue(s, it);
		s->ops->expire(s->ctx, it, now_ms);
	}
	/*
	 * Service levels no longer within reach: the latest start has passed
	 * (one that is due now may still leave now).
	 */
	while (s->n_slo > 0 && s->slo[0]->slo_start_ms < now_ms) {
		struct sl_sched_item *it = s->slo[0];
		unqueue(s, it);
		if (s->ops->late)
			s->ops->late(s->ctx, it, now_ms);
		else
			s->ops->expire(s->ctx, it, now_ms);
	}
	/*
	 * A window past its deadline is closed, slots or not; `closed_now`
	 * keeps an auto window from reopening before its batch has left.
	 */
	bool closed_now = false;
	if (s->window_open && now_ms >= s->window_deadline_ms)
		closed_now = true;
	if (s->n == 0 || closed_now)
		s->window_open = false;

	for (;;) {
		/*
		 * An item the owner put back: the free count promised a slot
		 * it could not give, and counting again now would promise it
		 * again. The next run (a slot freed, an arrival, a timer)
		 * tries anew.
		 */
		if (s->n == 0 || s->came_back)
			break;
		unsigned free = s->ops->free_slots(s->ctx);
		if (free == 0)
			break; /* a freed slot calls us again */
		/*
		 * Auto: a free slot that is contested opens a window, unless
		 * the top may not take it anyway (the urgent reserve holds
		 * it, and aging reopens the question).
		 */
		if (window_auto(s) && !s->window_open && !closed_now &&
		    contested(s, free) && taker(s, free, now_ms).next) {
			s->window_open = true;
			s->window_deadline_ms = now_ms + auto_window_ms(s);
		}
		if (s->window_open) {
			if (s->cfg.urgent_bypass &&
			    s->heap[0]->priority >= SL_PRIORITY_URGENT) {
				if (dispatch_batch(s, free, 1, now_ms) == 0)
					break;
				continue;
			}
			if (window_gathers(s, free))
				break;          /* still gathering */
			s->window_open = false; /* close early */
		}
		if (dispatch_batch(s, free, free, now_ms) == 0)
			break; /* what is left waits for the reserve */
	}

	s->running = false;
	uint64_t next = UINT64_MAX;
	if (s->window_open)
		next = s->window_deadline_ms;
	if (s->oldest)
		next = SL_MIN(next, s->oldest->deadline_ms);
	if (s->n_slo > 0)
		next = SL_MIN(next, s->slo[0]->slo_start_ms + 1);
	if (load_tracked(s)) {
		unsigned free = s->ops->free_slots(s->ctx);
		load_sample(s, free);
		/* Held back by a reserve that may shrink as it forgets. */
		if (reserve_auto(s) && s->n > 0 && free > 0 &&
		    free <= s->reserve)
			next =
			    SL_MIN(next, now_ms + SL_SCHED_RESERVE_RECHECK_MS);
	}
	/* Held back by a reserve: the top may take it once aged enough. */
	if (s->n > 0 && s->reserve + fair_reserve(s) > 0 &&
	    s->cfg.aging_rate > 0) {
		double gap =
		    SL_PRIORITY_URGENT - effective(s, s->heap[0], now_ms);
		if (gap > 0)
			next = SL_MIN(
			    next, now_ms + (uint64_t)ceil(
			                       gap / s->cfg.aging_rate * 1000));
	}
	return next;
}

/*
 * The time between two dispatches, measured over the recent ones; the span
 * runs to now, so a drain that stalled counts as slow.
 */
static double dispatch_step_ms(const struct sl_sched *s, uint64_t now_ms)
{
	if (s->rate_count < 2)
		return SL_SCHED_RETRY_DEFAULT_STEP_MS;
	unsigned oldest =
	    (s->rate_next + SL_SCHED_RATE_SAMPLES - s->rate_count) %
	    SL_SCHED_RATE_SAMPLES;
	uint64_t span = SL_MAX(now_ms, s->rate_ms[oldest]) - s->rate_ms[oldest];
	return SL_MAX((double)span / (double)(s->rate_count - 1),
	              (double)SL_SCHED_RETRY_MIN_STEP_MS);
}

uint64_t sl_sched_retry_after_ms(struct sl_sched *s, uint64_t now_ms)
{
	double step = dispatch_step_ms(s, now_ms);
	/* Behind everyone queued now... */
	double wait = (double)(s->n + 1) * step;
	/* ...and behind every client already told to come back later. */
	if (s->retry_horizon_ms > now_ms)
		wait =
		    SL_MAX(wait, (double)(s->retry_horizon_ms - now_ms) + step);
	uint64_t ms = (uint64_t)ceil(wait);
	ms = SL_MAX(ms, (uint64_t)SL_SCHED_RETRY_MIN_MS);
	ms = SL_MIN(ms, (uint64_t)SL_SCHED_RETRY_MAX_MS);
	s->retry_horizon_ms = SL_MAX(s->retry_horizon_ms, now_ms + ms);
	return ms;
}

unsigned sl_sched_retry_after_s(uint64_t ms)
{
	uint64_t s = (ms + 999) / 1000;
	return s < 1 ? 1 : (unsigned)s;
}

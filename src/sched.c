/* sched.c: the priority queue with aging, and the batching window. */
#include "sluice/sched.h"

#include "sluice/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int sl_priority_parse(const char *text, double *out)
{
	if (strcmp(text, "urgent") == 0)
		*out = SL_PRIORITY_URGENT;
	else if (strcmp(text, "normal") == 0)
		*out = SL_PRIORITY_NORMAL;
	else if (strcmp(text, "batch") == 0)
		*out = SL_PRIORITY_BATCH;
	else {
		char *end;
		double v = strtod(text, &end);
		if (end == text || *end != '\0' || !isfinite(v) ||
		    v < SL_PRIORITY_MIN || v > SL_PRIORITY_MAX)
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

/* ---- the heap ---- */

/* Whether a goes before b: larger key, then earlier arrival. */
static bool before(const struct sl_sched_item *a,
		   const struct sl_sched_item *b)
{
	if (a->key != b->key)
		return a->key > b->key;
	return a->seq < b->seq;
}

static void place(struct sl_sched *s, unsigned i, struct sl_sched_item *it)
{
	s->heap[i] = it;
	it->heap_index = i;
}

static void sift_up(struct sl_sched *s, unsigned i)
{
	struct sl_sched_item *it = s->heap[i];
	while (i > 0) {
		unsigned parent = (i - 1) / 2;
		if (!before(it, s->heap[parent]))
			break;
		place(s, i, s->heap[parent]);
		i = parent;
	}
	place(s, i, it);
}

static void sift_down(struct sl_sched *s, unsigned i)
{
	struct sl_sched_item *it = s->heap[i];
	for (;;) {
		unsigned child = 2 * i + 1;
		if (child >= s->n)
			break;
		if (child + 1 < s->n && before(s->heap[child + 1], s->heap[child]))
			child++;
		if (!before(s->heap[child], it))
			break;
		place(s, i, s->heap[child]);
		i = child;
	}
	place(s, i, it);
}

static void heap_remove_at(struct sl_sched *s, unsigned i)
{
	struct sl_sched_item *gone = s->heap[i];
	struct sl_sched_item *last = s->heap[--s->n];
	gone->heap_index = SL_SCHED_NOT_QUEUED;
	if (i == s->n)
		return;
	place(s, i, last);
	if (i > 0 && before(last, s->heap[(i - 1) / 2]))
		sift_up(s, i);
	else
		sift_down(s, i);
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
	s->heap = sl_xcalloc(cfg->max_queue, sizeof(*s->heap));
	s->batch = sl_xcalloc(cfg->max_queue, sizeof(*s->batch));
	return 0;
}

void sl_sched_free(struct sl_sched *s)
{
	free(s->heap);
	free(s->batch);
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

int sl_sched_push(struct sl_sched *s, struct sl_sched_item *it,
		  double priority, uint64_t now_ms)
{
	if (s->n >= s->cfg.max_queue) {
		it->heap_index = SL_SCHED_NOT_QUEUED;
		return SL_EFULL;
	}
	/* Nothing pending: this arrival opens a batching window. */
	if (s->n == 0 && s->cfg.window_ms > 0 && !s->window_open) {
		s->window_open = true;
		s->window_deadline_ms = now_ms + s->cfg.window_ms;
	}
	it->priority = priority;
	it->arrival_ms = now_ms;
	it->deadline_ms = now_ms + s->cfg.queue_timeout_ms;
	it->seq = s->seq++;
	it->key = priority -
		  s->cfg.aging_rate * (double)(now_ms - s->epoch_ms) / 1000.0;
	it->prev = s->newest;
	it->next = NULL;
	if (s->newest)
		s->newest->next = it;
	else
		s->oldest = it;
	s->newest = it;
	place(s, s->n++, it);
	sift_up(s, it->heap_index);
	return 0;
}

void sl_sched_remove(struct sl_sched *s, struct sl_sched_item *it)
{
	if (!sl_sched_queued(it))
		return;
	heap_remove_at(s, it->heap_index);
	list_unlink(s, it);
	if (s->n == 0)
		s->window_open = false;
}

static struct sl_sched_item *pop(struct sl_sched *s)
{
	struct sl_sched_item *top = s->heap[0];
	heap_remove_at(s, 0);
	list_unlink(s, top);
	return top;
}

static void record_dispatch(struct sl_sched *s, uint64_t now_ms, unsigned n)
{
	s->batches++;
	s->dispatched += n;
	for (unsigned i = 0; i < n; i++) {
		s->rate_ms[s->rate_next] = now_ms;
		s->rate_next = (s->rate_next + 1) % SL_SCHED_RATE_SAMPLES;
		if (s->rate_count < SL_SCHED_RATE_SAMPLES)
			s->rate_count++;
	}
}

/* Dispatches up to `room` items from the top as one batch. */
static void dispatch_batch(struct sl_sched *s, unsigned room, uint64_t now_ms)
{
	unsigned n = SL_MIN(room, s->n);
	if (s->cfg.max_batch > 0)
		n = SL_MIN(n, s->cfg.max_batch);
	for (unsigned i = 0; i < n; i++)
		s->batch[i] = pop(s);
	if (s->n == 0)
		s->window_open = false;
	record_dispatch(s, now_ms, n);
	s->ops->dispatch(s->ctx, s->batch, n, now_ms);
}

uint64_t sl_sched_run(struct sl_sched *s, uint64_t now_ms)
{
	if (s->running)
		return UINT64_MAX; /* the running call picks the change up */
	s->running = true;

	/* Deadlines are in arrival order: the oldest expires first. */
	while (s->oldest && s->oldest->deadline_ms <= now_ms) {
		struct sl_sched_item *it = s->oldest;
		heap_remove_at(s, it->heap_index);
		list_unlink(s, it);
		s->ops->expire(s->ctx, it, now_ms);
	}
	/* A window past its deadline is closed, slots or not. */
	if (s->n == 0 || (s->window_open && now_ms >= s->window_deadline_ms))
		s->window_open = false;

	for (;;) {
		if (s->n == 0)
			break;
		unsigned free = s->ops->free_slots(s->ctx);
		if (free == 0)
			break; /* a freed slot calls us again */
		if (s->window_open) {
			if (s->cfg.urgent_bypass &&
			    s->heap[0]->priority >= SL_PRIORITY_URGENT) {
				dispatch_batch(s, 1, now_ms);
				continue;
			}
			if (s->n < free)
				break; /* still gathering */
			s->window_open = false; /* full: close early */
		}
		dispatch_batch(s, free, now_ms);
	}

	s->running = false;
	uint64_t next = UINT64_MAX;
	if (s->window_open)
		next = s->window_deadline_ms;
	if (s->oldest)
		next = SL_MIN(next, s->oldest->deadline_ms);
	return next;
}

unsigned sl_sched_retry_after_s(const struct sl_sched *s, uint64_t now_ms)
{
	unsigned cap = (unsigned)SL_MAX(1, s->cfg.queue_timeout_ms / 1000);
	if (s->rate_count < 2)
		return 1;
	unsigned newest = (s->rate_next + SL_SCHED_RATE_SAMPLES - 1) %
			  SL_SCHED_RATE_SAMPLES;
	unsigned oldest = (s->rate_next + SL_SCHED_RATE_SAMPLES -
			   s->rate_count) % SL_SCHED_RATE_SAMPLES;
	/* The span runs to now: a drain that stalled counts as slow. */
	uint64_t span = SL_MAX(now_ms, s->rate_ms[newest]) - s->rate_ms[oldest];
	if (span == 0)
		return 1;
	double per_s = (double)(s->rate_count - 1) * 1000.0 / (double)span;
	double wait = ceil((double)s->n / per_s);
	if (wait < 1)
		return 1;
	return wait > cap ? cap : (unsigned)wait;
}

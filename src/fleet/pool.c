/* pool.c: a model's upstreams and the choice among them (pool.h). */
#include "sluice/fleet/pool.h"

#include "sluice/base/common.h"

#include <stdio.h>
#include <math.h>
#include <string.h>

int sl_pool_add(struct sl_pool *p, struct sl_upstream *u)
{
	if (p->n >= SL_POOL_MAX)
		return SL_EINVAL;
	/* In index order, which sl_pool_pick's turns rely on. */
	unsigned i = p->n;
	while (i > 0 && p->members[i - 1]->index > u->index) {
		p->members[i] = p->members[i - 1];
		i--;
	}
	p->members[i] = u;
	p->n++;
	return 0;
}

void sl_pool_remove(struct sl_pool *p, const struct sl_upstream *u)
{
	for (unsigned i = 0; i < p->n; i++) {
		if (p->members[i] != u)
			continue;
		memmove(&p->members[i], &p->members[i + 1],
		        (p->n - i - 1) * sizeof(p->members[0]));
		p->n--;
		return;
	}
}

bool sl_pool_contains(const struct sl_pool *p, const struct sl_upstream *u)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->members[i] == u)
			return true;
	return false;
}

/* Whether a has more room than b: fewer in flight per slot (ad < cb). */
static bool more_room(const struct sl_upstream *a, const struct sl_upstream *b)
{
	return (uint64_t)a->inflight * b->total_slots <
	       (uint64_t)b->inflight * a->total_slots;
}

/* A request's predicted headroom on u (pool.h, sl_pool_pick). */
static double headroom(const struct sl_upstream *u, const struct sl_pool_slo *s)
{
	double h = INFINITY;
	if (s->has_ttft)
		h = s->ttft_left_ms -
		    sl_predict_first_ms(&u->predict, s->prompt_bytes);
	if (s->has_tpot) {
		double tpot =
		    sl_predict_tpot_ms(&u->predict, (double)u->inflight + 1);
		h = SL_MIN(h, (s->tpot_ms - tpot) * SL_MAX(s->out_tokens, 1.0));
	}
	return h;
}

struct sl_upstream *sl_pool_pick(const struct sl_pool *p, bool need_slot,
                                 const struct sl_upstream *avoid, unsigned next,
                                 struct sl_pool_affinity *aff,
                                 const struct sl_pool_slo *slo, char *why,
                                 size_t size)
{
	struct sl_upstream *best = NULL, *fallback = NULL;
	/* The qualifying members, for a pick on headroom. */
	struct sl_upstream *qualified[SL_POOL_MAX];
	unsigned n_qualified = 0;
	bool all_known = true;
	/*
	 * The usable members, for prefix affinity: where a prefix is may be a
	 * member that cannot take this request now (full, or just failed).
	 */
	struct sl_upstream *usable[SL_POOL_MAX];
	uint32_t ids[SL_POOL_MAX];
	unsigned n_usable = 0;
	unsigned n_starting = 0, n_restarting = 0, n_suspect = 0;
	unsigned n_ejected = 0;
	/* Members are in index order: start at the first at or past next. */
	unsigned start = 0;
	while (start < p->n && p->members[start]->index < next)
		start++;
	for (unsigned k = 0; k < p->n; k++) {
		struct sl_upstream *u = p->members[(start + k) % p->n];
		n_starting += u->state == SL_UPSTREAM_STARTING;
		n_restarting += u->state == SL_UPSTREAM_RESTARTING;
		n_suspect += u->state == SL_UPSTREAM_READY && u->suspect;
		n_ejected +=
		    u->state == SL_UPSTREAM_READY && u->outlier.ejected;
		if (!sl_upstream_usable(u))
			continue;
		usable[n_usable] = u;
		ids[n_usable++] = u->id;
		if (need_slot && sl_upstream_free_slots(u) == 0)
			continue;
		if (u == avoid) {
			fallback = u;
			continue;
		}
		qualified[n_qualified++] = u;
		all_known = all_known && sl_predict_known(&u->predict);
		if (!best || more_room(u, best))
			best = u;
	}
	/*
	 * Service levels: the most headroom, when every candidate's model
	 * can say (a member that cannot yet is given work as it always was,
	 * so that its model learns).
	 */
	bool by_headroom = slo && (slo->has_ttft || slo->has_tpot) &&
	                   n_qualified > 1 && all_known;
	if (by_headroom) {
		double most = -INFINITY;
		for (unsigned i = 0; i < n_qualified; i++) {
			double h = headroom(qualified[i], slo);
			if (h > most ||
			    (h == most && more_room(qualified[i], best))) {
				most = h;
				best = qualified[i];
			}
		}
	}
	/* Two usable members at least: with one there is nothing to choose. */
	if (best && aff && aff->key && aff->key->n > 0 && n_usable > 1) {
		unsigned matched;
		int c = sl_affinity_lookup(aff->table, aff->key, ids, n_usable,
		                           &matched);
		struct sl_upstream *home = c < 0 ? NULL : usable[c];
		if (!home)
			aff->result = SL_AFFINITY_MISS;
		else if (home == avoid ||
		         (need_slot && sl_upstream_free_slots(home) == 0) ||
		         (by_headroom
		              ? headroom(home, slo) < 0
		              : home->inflight > best->inflight + aff->margin))
			aff->result = SL_AFFINITY_BUSY;
		else {
			aff->result = SL_AFFINITY_HIT;
			best = home;
		}
	}
	if (!best)
		best = fallback;
	if (best)
		return best;
	if (need_slot)
		snprintf(why, size, "no upstream has a free slot");
	else if (n_starting)
		snprintf(why, size,
		         "llama-server is starting and not ready "
		         "yet; retry shortly");
	else if (n_restarting)
		snprintf(why, size,
		         "llama-server is restarting after it "
		         "exited; retry shortly");
	else if (n_suspect)
		snprintf(why, size,
		         "the upstream just failed a request and is being "
		         "checked; retry shortly");
	else if (n_ejected)
		snprintf(why, size,
		         "every ready upstream is ejected after failing "
		         "requests in a row; retry shortly");
	else
		snprintf(why, size,
		         "no upstream is ready: every llama-server "
		         "is down or not answering");
	return NULL;
}

unsigned sl_pool_free_slots(const struct sl_pool *p)
{
	unsigned free = 0;
	for (unsigned i = 0; i < p->n; i++) {
		const struct sl_upstream *u = p->members[i];
		if (sl_upstream_usable(u))
			free += sl_upstream_free_slots(u);
	}
	return free;
}

unsigned sl_pool_total_slots(const struct sl_pool *p)
{
	unsigned total = 0;
	for (unsigned i = 0; i < p->n; i++)
		if (sl_upstream_usable(p->members[i]))
			total += p->members[i]->total_slots;
	return total;
}

bool sl_pool_expected(const struct sl_pool *p)
{
	for (unsigned i = 0; i < p->n; i++) {
		const struct sl_upstream *u = p->members[i];
		/*
		 * Its first start or check under way: a request waits for
		 * it, as for a restart (sl_app_upstream_expected).
		 */
		if (u->state == SL_UPSTREAM_STARTING ||
		    u->state == SL_UPSTREAM_RESTARTING ||
		    (u->state == SL_UPSTREAM_READY &&
		     (u->suspect || u->outlier.ejected)))
			return true;
	}
	return false;
}

bool sl_pool_other_usable(const struct sl_pool *p, const struct sl_upstream *u)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->members[i] != u && sl_upstream_usable(p->members[i]))
			return true;
	return false;
}

unsigned sl_pool_ready(const struct sl_pool *p)
{
	unsigned n = 0;
	for (unsigned i = 0; i < p->n; i++)
		n += sl_upstream_is_ready(p->members[i]);
	return n;
}

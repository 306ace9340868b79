/*
 * occupancy.c: polling a remote llama-server's busy slots (upstream.h,
 * "Occupancy").
 *
 * Driven by three events: requests start waiting (sl_occupancy_want), an
 * answer ends (sl_occupancy_answer_ended), and a poll answers. The timer
 * says when the next poll may go; a poll goes only while requests wait
 * for the upstream (hooks->waiting), and its answer arms the next.
 */
#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/fleet/upstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const source_paths[] = {
    [SL_OCCUPANCY_METRICS] = "/metrics",
    [SL_OCCUPANCY_SLOTS] = "/slots",
};

bool sl_occupancy_polled(const struct sl_upstream *u)
{
	/* server_slots first: 0 until /props said (and in unit tests). */
	if (u->server_slots == 0 || u->managed || u->router ||
	    u->occupancy.source == SL_OCCUPANCY_NONE)
		return false;
	const struct sl_config *cfg = u->cfg;
	return cfg->occupancy_poll_ms > 0 &&
	       (cfg->slots_per_upstream == 0 ||
	        cfg->slots_per_upstream <= u->server_slots);
}

bool sl_occupancy_polling(const struct sl_upstream *u)
{
	const struct sl_occupancy *o = &u->occupancy;
	return sl_occupancy_polled(u) && o->last_ms > 0 &&
	       uv_now(u->loop) - o->last_ms < SL_OCCUPANCY_REARM_MS;
}

/* Whether the last reading is recent enough to go by. */
static bool fresh(const struct sl_upstream *u)
{
	const struct sl_occupancy *o = &u->occupancy;
	return o->read_ms > 0 &&
	       uv_now(u->loop) - o->read_ms <=
	           SL_OCCUPANCY_FRESH * u->cfg->occupancy_poll_ms +
	               SL_OCCUPANCY_SETTLE_MS;
}

/*
 * Slots llama-server has room for beyond the others' and `own`, and the
 * extra place: see upstream.h, "Occupancy".
 */
static unsigned room(const struct sl_upstream *u, unsigned own)
{
	unsigned taken = u->occupancy.others + own;
	unsigned slots = u->server_slots + u->occupancy.extra;
	return taken < slots ? slots - taken : 0;
}

unsigned sl_occupancy_free(const struct sl_upstream *u, unsigned cap,
                           unsigned own)
{
	unsigned free = own < cap ? cap - own : 0;
	if (!sl_occupancy_polled(u))
		return free;
	/*
	 * Nothing waited, so nothing was polled lately: others may have
	 * come meanwhile. One request goes (at worst it waits in
	 * llama-server's queue); the rest wait for the poll that their
	 * waiting starts.
	 */
	if (!fresh(u))
		return SL_MIN(free, own == 0 ? 1u : 0u);
	const struct sl_occupancy *o = &u->occupancy;
	if (o->others == 0)
		return free;
	/*
	 * Half of what the reading showed, and the slots own answers freed
	 * since (theirs to refill): see upstream.h, "Occupancy".
	 */
	unsigned long long may = o->claim + (o->ends - o->ends_at_read);
	if (may <= o->taken)
		return 0;
	unsigned left =
	    (unsigned)SL_MIN(may - o->taken, (unsigned long long)free);
	return SL_MIN(left, room(u, own));
}

/* May a poll go now? Ready, not quiet (a poll would delay the stop). */
static bool may_poll(const struct sl_upstream *u)
{
	return sl_occupancy_polled(u) && !u->stopping &&
	       u->state == SL_UPSTREAM_READY && u->quiet == 0 &&
	       u->hooks->waiting && u->hooks->waiting(u);
}

static void start_poll(struct sl_upstream *u);

static void on_timer(uv_timer_t *t)
{
	start_poll(t->data);
}

/* The next poll in `delay_ms`, unless one is due sooner or under way. */
static void arm(struct sl_upstream *u, uint64_t delay_ms)
{
	struct sl_occupancy *o = &u->occupancy;
	if (sl_get_busy(&o->get)) {
		if (delay_ms == 0)
			o->again = true;
		return;
	}
	if (uv_is_active((uv_handle_t *)&o->timer) &&
	    uv_timer_get_due_in(&o->timer) <= delay_ms)
		return;
	uv_timer_start(&o->timer, on_timer, delay_ms, 0);
}

void sl_occupancy_want(struct sl_upstream *u)
{
	if (!sl_occupancy_polled(u))
		return;
	struct sl_occupancy *o = &u->occupancy;
	uint64_t now = uv_now(u->loop);
	uint64_t next = o->last_ms + u->cfg->occupancy_poll_ms;
	arm(u, o->last_ms == 0 || next <= now ? 0 : next - now);
}

void sl_occupancy_taken(struct sl_upstream *u)
{
	struct sl_occupancy *o = &u->occupancy;
	o->take_ms = uv_now(u->loop);
	o->taken++;
	/* This reading's share is taken: the next shows what is left. */
	if (sl_occupancy_polled(u) && o->others > 0 &&
	    o->taken >= o->claim + (o->ends - o->ends_at_read))
		arm(u, 0);
	if (sl_occupancy_polled(u))
		sl_debug("upstream %s: one sent; own %u in flight (%u not "
		         "started), others %u and %u deferred at the last "
		         "reading",
		         u->url, u->inflight, u->unstarted, u->occupancy.others,
		         u->occupancy.deferred);
}

void sl_occupancy_answer_ended(struct sl_upstream *u)
{
	u->occupancy.ends++;
	if (sl_occupancy_polled(u))
		arm(u, 0);
}

/* The value of a Prometheus sample `name` with no labels; false: none. */
static bool metric_value(const char *text, const char *name, unsigned *out)
{
	size_t n = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (strncmp(p, name, n) != 0 || (p[n] != ' ' && p[n] != '\t'))
			continue;
		char *end;
		double v = strtod(p + n, &end);
		if (end == p + n || v < 0 || v > 1e6)
			return false;
		*out = (unsigned)v;
		return true;
	}
	return false;
}

static bool parse_metrics(const char *body, unsigned *processing,
                          unsigned *deferred)
{
	return metric_value(body, "llamacpp:requests_processing", processing) &&
	       metric_value(body, "llamacpp:requests_deferred", deferred);
}

/* /slots: an array of slots, each with "is_processing". */
static bool parse_slots(const char *body, unsigned *processing)
{
	json_error_t jerr;
	json_t *slots = json_loads(body, 0, &jerr);
	if (!json_is_array(slots)) {
		json_decref(slots);
		return false;
	}
	size_t i;
	json_t *slot;
	unsigned n = 0;
	json_array_foreach(slots, i, slot)
	{
		n += json_is_true(json_object_get(slot, "is_processing"));
	}
	json_decref(slots);
	*processing = n;
	return true;
}

/* The last source failed for good: the next, or none (said once). */
static void next_source(struct sl_upstream *u, long status)
{
	struct sl_occupancy *o = &u->occupancy;
	if (o->source == SL_OCCUPANCY_METRICS) {
		o->source = SL_OCCUPANCY_SLOTS;
		sl_info("upstream %s: /metrics answered %ld (llama-server "
		        "runs without --metrics); reading its occupancy from "
		        "/slots",
		        u->url, status);
		return;
	}
	o->source = SL_OCCUPANCY_NONE;
	o->others = 0;
	sl_warn("upstream %s: neither /metrics nor /slots tells its "
	        "occupancy (/slots answered %ld); counting only sluice's own "
	        "requests there, so others' are not seen (give llama-server "
	        "--metrics)",
	        u->url, status);
}

/* A poll answered: what it says, and whether slots freed. */
static void took_reading(struct sl_upstream *u, unsigned processing,
                         unsigned deferred)
{
	struct sl_occupancy *o = &u->occupancy;
	unsigned before = sl_upstream_free_slots(u);
	unsigned busy = processing + deferred;
	unsigned long long ended = o->ends - o->ends_at_poll;
	unsigned own = o->own_at_poll > ended ? o->own_at_poll - ended : 0;
	unsigned seen = busy > own ? busy - own : 0;
	/*
	 * A reading misses requests another sluice sent a moment before it
	 * (upstream.h, "Occupancy"); the previous reading, when recent,
	 * covers that moment: the more of the two stands.
	 */
	bool recent = fresh(u);
	o->others = recent ? SL_MAX(seen, o->seen) : seen;
	o->seen = seen;
	o->read_ms = uv_now(u->loop);
	o->processing = processing;
	o->deferred = deferred;
	o->extra = deferred == 0 && u->unstarted == 0;
	o->claim = (room(u, u->inflight) + 1) / 2;
	o->taken = 0;
	o->ends_at_read = o->ends;
	sl_debug("upstream %s: occupancy %u processing, %u deferred; own %u "
	         "in flight (%u when polled); others %u",
	         u->url, processing, deferred, u->inflight, own, o->others);
	if (sl_upstream_free_slots(u) > before && u->hooks->on_capacity)
		u->hooks->on_capacity(u);
}

/*
 * A poll failed: the last reading stands (a poll answers again soon), but
 * not for long: after SL_OCCUPANCY_FAILURES in a row, sluice's own count
 * holds until one answers, rather than nothing going at all.
 */
static void poll_failed(struct sl_upstream *u)
{
	struct sl_occupancy *o = &u->occupancy;
	o->failures++;
	if (++o->failed >= SL_OCCUPANCY_FAILURES)
		took_reading(u, 0, 0);
}

static void on_poll(struct sl_get *g, long status, const char *err)
{
	struct sl_occupancy *o = sl_container_of(g, struct sl_occupancy, get);
	struct sl_upstream *u = o->get.data;
	unsigned processing = 0, deferred = 0;
	bool ok = false;
	if (status == 200 && o->source == SL_OCCUPANCY_METRICS)
		ok = parse_metrics(g->body, &processing, &deferred);
	else if (status == 200 && o->source == SL_OCCUPANCY_SLOTS)
		ok = parse_slots(g->body, &processing);
	if (ok) {
		o->reads++;
		o->failed = 0;
		took_reading(u, processing, deferred);
	} else {
		poll_failed(u);
		sl_debug("upstream %s: occupancy poll of %s failed: %s", u->url,
		         source_paths[o->source],
		         err             ? err
		         : status == 200 ? "no usable answer"
		                         : "");
		if (status == 404 || status == 501)
			next_source(u, status);
	}
	bool again = o->again;
	o->again = false;
	if (again)
		arm(u, 0);
	else
		sl_occupancy_want(u);
}

static void start_poll(struct sl_upstream *u)
{
	struct sl_occupancy *o = &u->occupancy;
	if (sl_get_busy(&o->get) || !may_poll(u)) {
		o->held_ms = 0; /* a later one is held afresh */
		return;
	}
	uint64_t now = uv_now(u->loop);
	uint64_t settled = o->take_ms + SL_OCCUPANCY_SETTLE_MS;
	if (o->take_ms > 0 && now < settled) {
		/*
		 * Held for the request sent last, but not past one settling
		 * time from when it was first held (upstream.h, "Occupancy").
		 */
		if (o->held_ms == 0)
			o->held_ms = now;
		uint64_t latest = o->held_ms + SL_OCCUPANCY_SETTLE_MS;
		if (now < latest) {
			uv_timer_start(&o->timer, on_timer,
			               SL_MIN(settled, latest) - now, 0);
			return;
		}
	}
	o->held_ms = 0;
	o->last_ms = now;
	o->own_at_poll = u->inflight;
	o->ends_at_poll = o->ends;
	o->polls++;
	o->get.data = u;
	char *url =
	    sl_xasprintf("%s%s", u->request_url, source_paths[o->source]);
	int rc = sl_get_start(u->curl, &o->get, url, u->api_key,
	                      SL_PROBE_TIMEOUT_MS, on_poll);
	free(url);
	if (rc != 0)
		poll_failed(u);
}

void sl_occupancy_init(struct sl_upstream *u)
{
	uv_timer_init(u->loop, &u->occupancy.timer);
	u->occupancy.timer.data = u;
}

void sl_occupancy_reset(struct sl_upstream *u)
{
	struct sl_occupancy *o = &u->occupancy;
	sl_get_reset(u->curl, &o->get);
	uv_timer_stop(&o->timer);
	o->held_ms = 0;
	o->source = SL_OCCUPANCY_METRICS;
	o->again = false;
	o->read_ms = 0;
	o->processing = o->deferred = o->others = 0;
	o->extra = false;
	o->claim = o->taken = 0;
	o->ends_at_read = o->ends;
}

void sl_occupancy_stop(struct sl_upstream *u)
{
	sl_get_reset(u->curl, &u->occupancy.get);
	uv_timer_stop(&u->occupancy.timer);
}

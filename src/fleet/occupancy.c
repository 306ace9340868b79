/*
 * occupancy.c: polling a remote llama-server's busy slots (upstream.h,
 * "Occupancy").
 *
 * Driven by three events: requests start waiting (sl_occupancy_want), an
 * answer ends (sl_occupancy_answer_ended), and a poll answers (or gives
 * up). The timer says when the next poll may go; a poll goes only while
 * requests wait for the upstream (hooks->waiting), and its answer arms the
 * next.
 */
#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/fleet/upstream.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const source_paths[] = {
    [SL_OCCUPANCY_METRICS] = "/metrics",
    [SL_OCCUPANCY_SLOTS] = "/slots",
    [SL_OCCUPANCY_NONE] = "none",
};

/* As /health names them. */
static const char *const source_names[] = {
    [SL_OCCUPANCY_METRICS] = "metrics",
    [SL_OCCUPANCY_SLOTS] = "slots",
    [SL_OCCUPANCY_NONE] = "none",
};

bool sl_occupancy_polled(const struct sl_upstream *u)
{
	/* server_slots first: 0 until /props said (and in unit tests). */
	if (u->server_slots == 0 || u->managed || u->router)
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
 * Whether sluice's queue for it was found full at this turn of the loop
 * (sl_occupancy_press): the loop's time changes only between turns, and a
 * dispatch follows its free count within one.
 */
static bool pressed(const struct sl_upstream *u)
{
	const struct sl_occupancy *o = &u->occupancy;
	return o->pressed_ms > 0 && o->pressed_ms == uv_now(u->loop);
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

/*
 * Whether sluice counts only its own requests there: no source tells (a
 * retry of /metrics from there counts as none until it answers), or the
 * last poll failed.
 */
static bool own_count(const struct sl_upstream *u)
{
	const struct sl_occupancy *o = &u->occupancy;
	return o->source == SL_OCCUPANCY_NONE || o->failed > 0 ||
	       (o->retrying && o->retry_from == SL_OCCUPANCY_NONE);
}

unsigned sl_occupancy_free(const struct sl_upstream *u, unsigned cap,
                           unsigned own)
{
	unsigned free = own < cap ? cap - own : 0;
	if (!sl_occupancy_polled(u) || own_count(u))
		return free;
	/*
	 * Nothing waited, so nothing was polled lately: others may have
	 * come meanwhile. One request goes (at worst it waits in
	 * llama-server's queue); the rest wait for the poll that their
	 * waiting starts, unless the queue is full: then they would be
	 * refused instead, and sluice's own count stands.
	 */
	if (!fresh(u))
		return pressed(u) ? free : SL_MIN(free, own == 0 ? 1u : 0u);
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

/*
 * When the next poll may go: an interval after the last, or, with no
 * source, when /metrics is asked again.
 */
static uint64_t next_poll_ms(const struct sl_upstream *u)
{
	const struct sl_occupancy *o = &u->occupancy;
	if (o->source == SL_OCCUPANCY_NONE)
		return o->retry_ms;
	return o->last_ms == 0 ? 0 : o->last_ms + u->cfg->occupancy_poll_ms;
}

void sl_occupancy_want(struct sl_upstream *u)
{
	if (!sl_occupancy_polled(u))
		return;
	uint64_t now = uv_now(u->loop);
	uint64_t next = next_poll_ms(u);
	arm(u, next <= now ? 0 : next - now);
}

void sl_occupancy_press(struct sl_upstream *u)
{
	u->occupancy.pressed_ms = uv_now(u->loop);
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

/*
 * A gauge's value as llama-server writes it, a whole number ("3", or in
 * C++'s other forms of one, "3.0" or "1e+06"): digits, a fraction, an
 * exponent, then nothing but the line's end. What strtod() takes besides
 * (NaN, infinities, signs, hex, "1.5") is refused, and so is a value above
 * `max`. True with the value in *out.
 */
static bool gauge_value(const char *p, unsigned max, unsigned *out)
{
	static const char digits[] = "0123456789";
	p += strspn(p, " \t");
	const char *start = p;
	size_t n = strspn(p, digits);
	if (n == 0)
		return false;
	p += n;
	if (*p == '.')
		p += 1 + strspn(p + 1, digits);
	if (*p == 'e' || *p == 'E') {
		p += 1 + (p[1] == '+' || p[1] == '-');
		n = strspn(p, digits);
		if (n == 0)
			return false;
		p += n;
	}
	p += strspn(p, " \t\r");
	if (*p != '\0' && *p != '\n')
		return false;
	/* Only the characters checked above: strtod reads no further. */
	double v = strtod(start, NULL);
	if (!isfinite(v) || v != floor(v) || v > (double)max)
		return false;
	*out = (unsigned)v;
	return true;
}

/* The sample `name` with no labels, as gauge_value() reads it. */
static bool metric_value(const char *text, const char *name, unsigned max,
                         unsigned *out)
{
	size_t n = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (strncmp(p, name, n) != 0 || (p[n] != ' ' && p[n] != '\t'))
			continue;
		return gauge_value(p + n, max, out);
	}
	return false;
}

bool sl_occupancy_parse_metrics(const char *body, unsigned slots,
                                unsigned *processing, unsigned *deferred)
{
	unsigned queue_max = (unsigned)SL_MIN(
	    (unsigned long long)slots * SL_OCCUPANCY_DEFERRED_PER_SLOT,
	    (unsigned long long)UINT_MAX);
	unsigned p, d;
	if (!metric_value(body, "llamacpp:requests_processing", slots, &p) ||
	    !metric_value(body, "llamacpp:requests_deferred", queue_max, &d))
		return false;
	*processing = p;
	*deferred = d;
	return true;
}

/* /slots: an array of slots, each with "is_processing". */
bool sl_occupancy_parse_slots(const char *body, unsigned slots,
                              unsigned *processing)
{
	json_error_t jerr;
	json_t *array = json_loads(body, 0, &jerr);
	if (!json_is_array(array)) {
		json_decref(array);
		return false;
	}
	size_t i;
	json_t *slot;
	unsigned n = 0;
	json_array_foreach(array, i, slot)
	{
		n += json_is_true(json_object_get(slot, "is_processing"));
	}
	json_decref(array);
	if (n > slots)
		return false;
	*processing = n;
	return true;
}

/*
 * The source polled answered 404 or 501: the next is asked at once, or,
 * past /slots, none is. Leaving /metrics sets when it is asked again
 * (upstream.h, "Occupancy"), later after each retry it refused. Said once,
 * not at each retry.
 */
static void next_source(struct sl_upstream *u, long status)
{
	struct sl_occupancy *o = &u->occupancy;
	o->failures++;
	if (o->source == SL_OCCUPANCY_METRICS) {
		if (o->retrying)
			o->retry_wait_ms = SL_MIN(2 * o->retry_wait_ms,
			                          SL_OCCUPANCY_RETRY_MAX_MS);
		o->retry_ms = uv_now(u->loop) + o->retry_wait_ms;
		o->source = SL_OCCUPANCY_SLOTS;
		/* A retry from /slots is over: back where it started. */
		if (o->retrying && o->retry_from == SL_OCCUPANCY_SLOTS)
			o->retrying = false;
		else if (!o->retrying)
			sl_info(
			    "upstream %s: /metrics answered %ld; reading "
			    "its occupancy from /slots (llama-server runs "
			    "without --metrics?), and asking /metrics again "
			    "now and then",
			    u->url, status);
		o->again = true;
		return;
	}
	bool retrying = o->retrying;
	o->source = SL_OCCUPANCY_NONE;
	o->retrying = false;
	o->others = o->seen = 0;
	if (!retrying)
		sl_warn("upstream %s: neither /metrics nor /slots tells its "
		        "occupancy (/slots answered %ld); counting only "
		        "sluice's own requests there, so others' are not seen, "
		        "until one does (give llama-server --metrics)",
		        u->url, status);
	if (u->hooks->on_capacity)
		u->hooks->on_capacity(u);
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
 * A poll failed (no answer in time, an error, a reading that cannot be
 * true): sluice counts only its own requests there until one answers
 * (upstream.h, "Occupancy"). A retry of /metrics that failed so goes back
 * to the source it left, to be tried again later.
 */
static void poll_failed(struct sl_upstream *u)
{
	struct sl_occupancy *o = &u->occupancy;
	o->failures++;
	if (o->retrying) {
		o->retrying = false;
		o->source = o->retry_from;
		o->retry_wait_ms =
		    SL_MIN(2 * o->retry_wait_ms, SL_OCCUPANCY_RETRY_MAX_MS);
		o->retry_ms = uv_now(u->loop) + o->retry_wait_ms;
		o->again = o->source != SL_OCCUPANCY_NONE;
		return;
	}
	unsigned before = sl_upstream_free_slots(u);
	o->failed++;
	o->others = o->seen = 0;
	if (sl_upstream_free_slots(u) > before && u->hooks->on_capacity)
		u->hooks->on_capacity(u);
}

/* A poll answered with a reading: a retry that got one is over. */
static void poll_read(struct sl_upstream *u, unsigned processing,
                      unsigned deferred)
{
	struct sl_occupancy *o = &u->occupancy;
	o->reads++;
	o->failed = 0;
	if (o->retrying) {
		o->retrying = false;
		if (o->source < o->retry_from)
			sl_info("upstream %s: %s answers again; reading its "
			        "occupancy from it",
			        u->url, source_paths[o->source]);
	}
	if (o->source == SL_OCCUPANCY_METRICS) {
		o->retry_ms = 0;
		o->retry_wait_ms = SL_OCCUPANCY_RETRY_MS;
	}
	took_reading(u, processing, deferred);
}

static void on_poll(struct sl_get *g, long status, const char *err)
{
	struct sl_occupancy *o = sl_container_of(g, struct sl_occupancy, get);
	struct sl_upstream *u = o->get.data;
	unsigned processing = 0, deferred = 0;
	bool ok = false;
	if (status == 200 && o->source == SL_OCCUPANCY_METRICS)
		ok = sl_occupancy_parse_metrics(g->body, u->server_slots,
		                                &processing, &deferred);
	else if (status == 200 && o->source == SL_OCCUPANCY_SLOTS)
		ok = sl_occupancy_parse_slots(g->body, u->server_slots,
		                              &processing);
	if (ok) {
		poll_read(u, processing, deferred);
	} else {
		char answered[32];
		snprintf(answered, sizeof(answered), "it answered %ld", status);
		sl_debug("upstream %s: occupancy poll of %s failed: %s", u->url,
		         source_paths[o->source],
		         err             ? err
		         : status == 200 ? "no reading that can be true"
		                         : answered);
		if (status == 404 || status == 501)
			next_source(u, status);
		else
			poll_failed(u);
	}
	bool again = o->again;
	o->again = false;
	if (again)
		arm(u, 0);
	else
		sl_occupancy_want(u);
}

/* How long a poll may take: a share of the interval (upstream.h). */
static long poll_timeout_ms(const struct sl_upstream *u)
{
	uint64_t t = u->cfg->occupancy_poll_ms / SL_OCCUPANCY_TIMEOUT_DIVISOR;
	return t > 0 ? (long)t : 1;
}

static void start_poll(struct sl_upstream *u)
{
	struct sl_occupancy *o = &u->occupancy;
	if (sl_get_busy(&o->get) || !may_poll(u)) {
		o->held_ms = 0; /* a later one is held afresh */
		return;
	}
	uint64_t now = uv_now(u->loop);
	if (o->source != SL_OCCUPANCY_METRICS && o->retry_ms > 0 &&
	    now >= o->retry_ms) {
		/* Time to ask /metrics again (upstream.h, "Occupancy"). */
		o->retrying = true;
		o->retry_from = o->source;
		o->source = SL_OCCUPANCY_METRICS;
		o->retry_ms = 0;
	}
	if (o->source == SL_OCCUPANCY_NONE) {
		/* Nothing to read until the retry (retry_ms > now here). */
		if (o->retry_ms > 0)
			uv_timer_start(&o->timer, on_timer, o->retry_ms - now,
			               0);
		return;
	}
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
	                      poll_timeout_ms(u), on_poll);
	free(url);
	if (rc != 0) {
		/* Not a reading: the next poll is due an interval on. */
		poll_failed(u);
		o->again = false;
		sl_occupancy_want(u);
	}
}

json_t *sl_occupancy_json(const struct sl_upstream *u)
{
	const struct sl_occupancy *o = &u->occupancy;
	/* A retry under way shows the source it started from. */
	enum sl_occupancy_source source =
	    o->retrying ? o->retry_from : o->source;
	return json_pack(
	    "{s:s, s:i, s:i, s:i, s:i, s:i}", "source", source_names[source],
	    "processing", (json_int_t)o->processing, "deferred",
	    (json_int_t)o->deferred, "others", (json_int_t)o->others,
	    "unstarted", (json_int_t)u->unstarted, "failed",
	    (json_int_t)o->failed);
}

void sl_occupancy_init(struct sl_upstream *u)
{
	uv_timer_init(u->loop, &u->occupancy.timer);
	u->occupancy.timer.data = u;
	u->occupancy.retry_wait_ms = SL_OCCUPANCY_RETRY_MS;
}

void sl_occupancy_reset(struct sl_upstream *u)
{
	struct sl_occupancy *o = &u->occupancy;
	sl_get_reset(u->curl, &o->get);
	uv_timer_stop(&o->timer);
	o->held_ms = 0;
	o->source = SL_OCCUPANCY_METRICS;
	o->retrying = false;
	o->retry_ms = 0;
	o->retry_wait_ms = SL_OCCUPANCY_RETRY_MS;
	o->failed = 0;
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

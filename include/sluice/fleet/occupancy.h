/*
 * occupancy.h: how busy a remote llama-server is, read from llama-server
 * itself, so that several sluices (or other clients) share its slots.
 *
 * sluice counts what it sent to an upstream (inflight), but not what
 * others sent there. So while requests wait in sluice's queue for a
 * remote upstream, its occupancy is polled every --occupancy-poll, and
 * once at once when an answer there ends (several ends in one loop turn
 * make one poll): GET /metrics (llamacpp:requests_processing and
 * llamacpp:requests_deferred; llama-server --metrics), else GET /slots
 * (the slots whose is_processing is true) when /metrics answers 404 or
 * 501, else nothing: sluice's own count, as before, with one log line
 * saying so. Never while nothing waits: each poll is a task whose result
 * re-arms llama-server's one-second wait, which is when it notices that
 * a plain answer's client left (so plain answers to a polled upstream are
 * asked for as streams: relay/proxy_leaving.c); never while it is quiet
 * for that reason either.
 *
 * From a poll: others = processing + deferred - sluice's own in flight
 * (at least 0): own counted when the poll went, less the answers that
 * ended while it was out (llama-server may have let go of them already,
 * and counting them would take them for free slots); and a poll goes
 * SL_OCCUPANCY_SETTLE_MS after the last request sent there at the
 * soonest. Both err towards more others: fewer requests sent, until the
 * next poll. Its free slots are then
 *   min(cap - own, total - others - own + extra)
 * where total is /props' total_slots, cap is --slots-per-upstream (or
 * total), and extra is 1 when others > 0 and the poll found nothing in
 * llama-server's own queue, else 0: it lets one request of sluice's wait
 * there behind the others, so that a slot they free is taken at once
 * rather than a poll later, and no more than one (several sluices that
 * each added theirs would fill that queue). With others = 0 this is
 * sluice's own count (cap - own), so a lone sluice behaves as without the
 * poll, but for one thing: a reading older than SL_OCCUPANCY_FRESH
 * intervals (nothing waited, so nothing was polled) is not gone by. Then
 * one request goes when none of sluice's is there, and the rest wait for
 * the poll their waiting starts (a millisecond or two), since others may
 * have filled its slots meanwhile. When SL_OCCUPANCY_FAILURES polls in a
 * row fail, sluice's own count holds (others = 0) until one answers.
 *
 * Not polled: a managed llama-server (private to its sluice), a router
 * (no slots of its own), and one given more slots by --slots-per-upstream
 * than its /props says (a fleet behind a balancer: its /metrics describes
 * one member of it).
 *
 * What it owns: one sl_get (at most one poll in flight) and one timer,
 * inside struct sl_upstream, closed with it.
 */
#ifndef SLUICE_OCCUPANCY_H
#define SLUICE_OCCUPANCY_H

#include "sluice/net/curl_loop.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* A reading is gone by for this many poll intervals after it came. */
#define SL_OCCUPANCY_FRESH 2

/*
 * A poll waits this long after a request was sent to the upstream, so
 * that llama-server has it when it answers: a poll that overtook it would
 * miss it, and take one of sluice's requests for a free slot.
 */
#define SL_OCCUPANCY_SETTLE_MS 20

/* Failed polls in a row after which sluice counts only its own. */
#define SL_OCCUPANCY_FAILURES 3

/* Where occupancy is read from: the next poll's target. */
enum sl_occupancy_source {
	SL_OCCUPANCY_METRICS, /* GET /metrics */
	SL_OCCUPANCY_SLOTS,   /* GET /slots */
	SL_OCCUPANCY_NONE,    /* neither answers: sluice's own count */
};

struct sl_occupancy {
	enum sl_occupancy_source source;
	struct sl_get get;
	uv_timer_t timer;
	uint64_t last_ms; /* when the last poll started; 0: never */
	uint64_t read_ms; /* when the last poll ended; 0: never */
	uint64_t take_ms; /* when the last request was sent there */
	bool again;       /* an answer ended while a poll was out */
	/*
	 * sluice's own in flight when the poll went, and answers ended
	 * since: those llama-server may or may not count still.
	 */
	unsigned own_at_poll;
	unsigned long long ends, ends_at_poll;
	/* From the last poll that answered. */
	unsigned processing; /* llama-server's busy slots */
	unsigned deferred;   /* requests waiting in its own queue */
	unsigned others;     /* of those, not sluice's */
	unsigned failed;     /* polls failed in a row */
	unsigned long long polls, failures;
};

struct sl_upstream;

/* Sets the poller up inside `u` (its timer counts among u's handles). */
void sl_occupancy_init(struct sl_upstream *u);

/* Stops polling (the upstream stops); the timer is closed by the caller. */
void sl_occupancy_stop(struct sl_upstream *u);

/* The upstream's /props changed what it is: forget what was polled. */
void sl_occupancy_reset(struct sl_upstream *u);

/* Whether `u`'s occupancy is polled (see the top of this file). */
bool sl_occupancy_polled(const struct sl_upstream *u);

/*
 * Requests wait for `u`'s model: poll as soon as the interval since the
 * last poll allows (and on at the interval while they wait).
 */
void sl_occupancy_want(struct sl_upstream *u);

/* A request was sent to `u` (it counts in u->inflight). */
void sl_occupancy_taken(struct sl_upstream *u);

/* An answer on `u` ended: poll at once, if requests wait. */
void sl_occupancy_answer_ended(struct sl_upstream *u);

/* Its free slots, for sl_upstream_free_slots (`own` in flight now). */
unsigned sl_occupancy_free(const struct sl_upstream *u, unsigned cap,
                           unsigned own);

#endif

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
 * then (at least 0). Its free slots are then
 *   min(cap - own, total - others - own + (others > 0 ? 1 : 0))
 * where total is /props' total_slots and cap is --slots-per-upstream (or
 * total): the one extra lets one request of sluice's wait in
 * llama-server's own queue behind the others, so that a slot they free is
 * taken at once rather than a poll later. With others = 0 this is
 * sluice's own count (cap - own), so a lone sluice behaves as without the
 * poll, but for one thing: a reading older than SL_OCCUPANCY_FRESH
 * intervals (nothing waited, so nothing was polled) is not gone by. Then
 * one request goes when none of sluice's is there, and the rest wait for
 * the poll their waiting starts (a millisecond or two), since others may
 * have filled its slots meanwhile. A poll that fails reads as no others.
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
	bool again;       /* an answer ended while a poll was out */
	/* From the last poll that answered. */
	unsigned processing; /* llama-server's busy slots */
	unsigned deferred;   /* requests waiting in its own queue */
	unsigned others;     /* of those, not sluice's */
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

/* An answer on `u` ended: poll at once, if requests wait. */
void sl_occupancy_answer_ended(struct sl_upstream *u);

/* Its free slots, for sl_upstream_free_slots (`own` in flight now). */
unsigned sl_occupancy_free(const struct sl_upstream *u, unsigned cap,
                           unsigned own);

#endif

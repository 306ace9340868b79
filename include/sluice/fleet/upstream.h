/*
 * upstream.h: one llama-server that sluice sends requests to, and what sluice
 * knows of its health.
 *
 * A managed upstream is a llama-server that sluice spawned and supervises: on
 * loopback, on a free port, with an API key only sluice knows. It is
 * restarted with capped exponential backoff when it exits unexpectedly. A
 * remote upstream is one given by --upstream; sluice only checks on it.
 *
 * States:
 *   starting    first launch (managed) or first check (remote) under way,
 *               or a remote one loading its model (/health: 503 "Loading
 *               model")
 *   ready       /health answered 200 and /props gave the slot count
 *   restarting  managed: exited after having been ready; relaunch pending
 *               or under way
 *   down        not answering (remote, or managed but wedged)
 *   stopped     shut down by sluice
 *
 * Suspect: a ready upstream on which a request just failed at the transport
 * level (connection refused or reset, nothing answered). It is probed at
 * once, and until a probe answers (or it leaves the ready state: a managed
 * llama-server that crashed turns restarting when its exit is seen) no new
 * work goes to it, so requests wait in sluice's queue instead of failing
 * one after another against a dead port.
 *
 * Ejected: an upstream that failed --eject-after requests or health checks
 * in a row (see outlier.h). It takes no work until its period is over and
 * a health check succeeds. The last usable upstream is never ejected: that
 * would only turn its failures into refusals.
 *
 * Draining: an upstream its owner has let go (its address left the DNS
 * answer it came from, see discovery.h). It takes no new work, what runs
 * there finishes, and its owner stops it once nothing is in flight.
 *
 * Lifetime: created by sl_upstream_new(); sl_upstream_stop() begins the end
 * and hooks->on_stopped reports it, after which the upstream frees itself.
 */
#ifndef SLUICE_UPSTREAM_H
#define SLUICE_UPSTREAM_H

#include "sluice/fleet/child.h"
#include "sluice/config/config.h"
#include "sluice/net/curl_loop.h"
#include "sluice/fleet/outlier.h"
#include "sluice/sched/predict.h"

#include <jansson.h>
#include <stdbool.h>
#include <uv.h>

/* Upstreams sluice can hold, across every model. */
#define SL_MAX_UPSTREAMS 64

/* How often a starting llama-server's /health is polled. */
#define SL_STARTUP_POLL_MS 100
/* A health or /props request that takes longer has failed. */
#define SL_PROBE_TIMEOUT_MS 2000
/* Consecutive failed health checks before a ready upstream counts as down. */
#define SL_PROBE_FAILURES_DOWN 3
/* Restart backoff: first delay, doubling per quick failure, up to the cap. */
#define SL_RESTART_DELAY_MIN_MS 500
#define SL_RESTART_DELAY_MAX_MS 30000
/* Ready this long before exiting: the next restart starts the backoff anew. */
#define SL_RESTART_STABLE_MS 60000
/*
 * Connections to one upstream beyond its slots: room for the health check
 * and a transfer finishing while the next starts. Each connection holds one
 * of llama-server's HTTP threads, so the pool stays this small.
 */
#define SL_UPSTREAM_SPARE_CONNS 2

enum sl_upstream_state {
	SL_UPSTREAM_STARTING,
	SL_UPSTREAM_READY,
	SL_UPSTREAM_RESTARTING,
	SL_UPSTREAM_DOWN,
	SL_UPSTREAM_STOPPED,
};

const char *sl_upstream_state_name(enum sl_upstream_state s);

/* Why a request was sent again after its upstream failed, for the metrics. */
enum sl_retry_reason {
	SL_RETRY_REFUSED,   /* the connection was refused: nothing was sent */
	SL_RETRY_TRANSPORT, /* reset, or it closed before the answer's end */
	SL_RETRY_5XX,       /* it answered 5xx */
	SL_RETRY_REASONS,
};

const char *sl_retry_reason_name(enum sl_retry_reason r);

/*
 * Occupancy (occupancy.c): how busy a remote llama-server is, read from
 * llama-server itself, so that several sluices (or other clients) share its
 * slots.
 *
 * sluice counts what it sent to an upstream (inflight), but not what
 * others sent there. So while requests wait in sluice's queue for a
 * remote upstream, its occupancy is polled every --occupancy-poll, and
 * once at once when an answer there ends (several ends in one loop turn
 * make one poll): GET /metrics (llamacpp:requests_processing and
 * llamacpp:requests_deferred; llama-server --metrics), else GET /slots
 * (the slots whose is_processing is true) when /metrics answers 404 or
 * 501, else nothing: sluice's own count, as before, with one log line
 * saying so. Neither is for good: /metrics is asked again
 * SL_OCCUPANCY_RETRY_MS later, then twice as long after each 404 or 501,
 * up to SL_OCCUPANCY_RETRY_MAX_MS, and polls go back to it (one log line)
 * once it answers. Never while nothing waits: each poll is a task whose
 * result re-arms llama-server's one-second wait, which is when it notices
 * that a plain answer's client left (so plain answers sent to an upstream
 * polled within SL_OCCUPANCY_REARM_MS are asked for as streams:
 * relay/proxy_leaving.c); never while it is quiet for that reason
 * either.
 *
 * A reading is believed only when it can be true (sl_occupancy_parse_*):
 * each gauge a whole number written in decimal (no NaN, infinity, sign or
 * hex), requests_processing at most the slots /props gave (llama-server
 * counts its busy slots: more is not a reading of it, and taking it would
 * leave sluice no room at all, so it is refused, not clamped), and
 * requests_deferred at most SL_OCCUPANCY_DEFERRED_PER_SLOT per slot. A
 * poll gives up after 1 / SL_OCCUPANCY_TIMEOUT_DIVISOR of the interval.
 * A poll that fails (no answer in time, an error status, a reading
 * refused) makes sluice count only its own requests there, others = 0,
 * until a poll answers: a slow or wrong /metrics must not keep requests
 * from slots that are free for all sluice can tell.
 *
 * From a poll: others = processing + deferred - sluice's own in flight
 * (at least 0): own counted when the poll went, less the answers that
 * ended while it was out (llama-server may have let go of them already,
 * and counting them would take them for free slots); and a poll goes
 * SL_OCCUPANCY_SETTLE_MS after the last request sent there at the
 * soonest. And a reading misses requests sent a moment before it by
 * another sluice (measured: two sluices with 7 requests sent, and a poll
 * that answered 3 processing, 0 deferred), so others is the more of this
 * reading's and the previous one's (when that is still fresh). All
 * three err towards more others: fewer requests sent, until the next
 * poll. Its free slots are then
 *   min(cap - own, total - others - own + extra)
 * where total is /props' total_slots, cap is --slots-per-upstream (or
 * total), and extra is 1 when others > 0, the poll found nothing in
 * llama-server's own queue, and every stream sluice had sent there had
 * started (unstarted == 0), else 0: it lets one request of sluice's wait
 * there behind the others, so that a slot they free is taken at once
 * rather than a poll later, and no more than one (several sluices that
 * each added theirs would fill that queue). A stream of sluice's with no
 * byte yet may be waiting there already, whatever the reading says: a
 * reading misses what was sent a moment before it, and llama-server sends
 * a stream's head with its first token, so one reading its prompt and one
 * waiting look the same (measured, two sluices at twice capacity: the
 * queue held 3 in up to 1% of the samples before this, never more than 2
 * after). With others = 0 this is sluice's own count (cap - own), so a
 * lone sluice behaves as without the poll. With others > 0, each sluice
 * takes on one reading at most half (rounded up) of the room it shows,
 * plus the slots its own answers free after it: another sluice reading at
 * the same moment sees the same room (measured: two sluices that started
 * together each filled the 3 they saw, and llama-server's queue held 4 for
 * a generation's time); the next poll goes once the half is taken
 * (SL_OCCUPANCY_SETTLE_MS after it), and shows what the others took
 * meanwhile. A due poll is held SL_OCCUPANCY_SETTLE_MS at most, however
 * often requests are sent meanwhile: answers shorter than that would
 * otherwise hold every poll, until the reading went stale and one request
 * at a time went (seen with 35 ms answers on a 4-slot llama-server). Such
 * a reading may miss the requests sent just before it, the one place where
 * others err low; with answers that short, what waits in llama-server's
 * queue for it leaves soon. One thing more: a reading older than
 * SL_OCCUPANCY_FRESH intervals and SL_OCCUPANCY_SETTLE_MS (nothing waited,
 * so nothing was polled) is not gone by. Then one request goes when none
 * of sluice's is there, and the rest wait for the poll their waiting
 * starts (a millisecond or two, and never longer than that poll's
 * timeout: a poll that fails turns to sluice's own count), since others
 * may have filled its slots meanwhile. Unless sluice's queue is full
 * (sl_occupancy_press): a burst after a quiet spell would then be refused
 * (429) for slots that are free for all sluice can tell, so its own count
 * stands, and what goes beyond others' slots waits in llama-server's queue
 * until the poll shows them.
 *
 * Not polled: a managed llama-server (private to its sluice), a router
 * (no slots of its own), and one given more slots by --slots-per-upstream
 * than its /props says (a fleet behind a balancer: its /metrics describes
 * one member of it).
 *
 * What it owns: one sl_get (at most one poll in flight) and one timer,
 * inside struct sl_upstream, closed with it.
 */
/* A reading is gone by for this many poll intervals after it came. */
#define SL_OCCUPANCY_FRESH 2

/*
 * A poll waits this long after a request was sent to the upstream, so
 * that llama-server has it when it answers: a poll that overtook it would
 * miss it, and take one of sluice's requests for a free slot. Measured on
 * a busy 2-core machine: readings 20 ms after a request still missed it,
 * and two sluices then kept up to 4 requests in llama-server's queue.
 */
#define SL_OCCUPANCY_SETTLE_MS 50

/*
 * Polls further apart than this leave llama-server's one-second wait alone
 * (measured on 0.7.0: every 1.5 s or more is harmless).
 */
#define SL_OCCUPANCY_REARM_MS 1500

/*
 * A poll gives up after the interval divided by this (100 ms of the
 * default 200 ms; SL_OCCUPANCY_POLL_MIN_MS keeps it at 50 ms or more): an
 * answer later than that is late for the next poll anyway. llama-server
 * answers /metrics between two steps of its work (measured on 0.7.0 with
 * the slow demo model reading a 2,400-token prompt on two cores: 11 ms at
 * most, 0.6 ms in the median). An upstream further away needs a longer
 * --occupancy-poll.
 */
#define SL_OCCUPANCY_TIMEOUT_DIVISOR 2

/*
 * requests_deferred at most this many per slot: llama-server holds an
 * HTTP thread for each, and a queue that deep would take a thousand
 * generations' time to drain; a reading of more is not a count.
 */
#define SL_OCCUPANCY_DEFERRED_PER_SLOT 1024

/*
 * After /metrics (or /slots) answered 404 or 501, /metrics is asked again
 * this long later, then twice as long after each refusal, up to the most:
 * a llama-server restarted with --metrics behind the same address (or a
 * proxy that came back) is read again within a minute, and one without it
 * costs one 404 a minute.
 */
#define SL_OCCUPANCY_RETRY_MS 1000
#define SL_OCCUPANCY_RETRY_MAX_MS 60000

/* Where occupancy is read from: the next poll's target, best first. */
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
	uint64_t pressed_ms; /* when sluice's queue for it was last full */
	uint64_t held_ms; /* when a due poll was first held; 0: none is */
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
	unsigned seen;       /* of those, not sluice's */
	unsigned others;     /* the more of seen and the last reading's */
	/*
	 * Whether one request more than the free slots may go: its queue was
	 * empty and each of sluice's requests there had started. Fixed until
	 * the next reading, so that each request sent takes one place.
	 */
	bool extra;
	/*
	 * What sluice may take on this reading (half of the room it showed,
	 * rounded up), what it took since, and its answers ended before it.
	 */
	unsigned claim, taken;
	unsigned long long ends_at_read;
	/* Polls failed in a row: while any, sluice counts only its own. */
	unsigned failed;
	/*
	 * Asking /metrics again after a 404 or 501 (see above): when next
	 * (0: not due), the wait after the next refusal, and, while a retry
	 * is under way, the source it started from.
	 */
	uint64_t retry_ms, retry_wait_ms;
	bool retrying;
	enum sl_occupancy_source retry_from;
	unsigned long long polls, reads,
	    failures; /* started, answered, failed */
};

struct sl_upstream;

struct sl_upstream_hooks {
	/* The state changed; u->state is the new one. */
	void (*on_change)(struct sl_upstream *u, enum sl_upstream_state old);
	/* A managed llama-server failed its first start; `why` says how. */
	void (*on_fatal)(struct sl_upstream *u, const char *why);
	/*
	 * Whether `u` may be ejected now: false when no other upstream would
	 * be left to take work. NULL: always.
	 */
	bool (*may_eject)(const struct sl_upstream *u);
	/*
	 * Whether requests wait in sluice's queue for u's model: only then
	 * is its occupancy polled (above). NULL: never.
	 */
	bool (*waiting)(const struct sl_upstream *u);
	/* A poll found slots freed on `u`: waiting requests may go. */
	void (*on_capacity)(struct sl_upstream *u);
	/* Stopped and closed; `u` is freed when this returns. */
	void (*on_stopped)(struct sl_upstream *u);
};

/* What a managed upstream runs. */
struct sl_managed_spec {
	const char *exe;   /* llama-server executable */
	const char *model; /* GGUF file, or NULL when llama_args choose one */
};

struct sl_upstream {
	uv_loop_t *loop;
	struct sl_curl *curl;
	const struct sl_config *cfg;
	const struct sl_upstream_hooks *hooks;
	void *data; /* the owner's */

	/*
	 * The base URL without a trailing '/', as shown (logs, /health, the
	 * access log): a remote's userinfo masked (sl_url_shown), so that
	 * printing it never shows a password.
	 */
	char *url;
	/*
	 * The base URL requests go to: url with its credentials, which
	 * libcurl sends (the native client takes no userinfo, so such a URL
	 * goes through libcurl). Never shown.
	 */
	char *request_url;
	/*
	 * A name that stays when the URL changes (a managed llama-server gets
	 * a new port at each restart): "managed", or a remote's URL. The
	 * metrics label their series with it (masked as url is).
	 */
	char *name;
	char *api_key; /* sent as a bearer token; NULL for none */
	enum sl_upstream_state state;
	/*
	 * Requests it takes from this sluice at once: /props' total_slots,
	 * or --slots-per-upstream; 0 until known.
	 */
	unsigned total_slots;
	/* What its /props said: total_slots; 0 when it did not say. */
	unsigned server_slots;
	unsigned restarts; /* relaunches after unexpected exits */
	unsigned inflight; /* exchanges sent to it and not finished */
	/*
	 * Of those, the streams with no byte of their answer yet: started in
	 * a slot, or waiting in llama-server's queue (see Occupancy).
	 */
	unsigned unstarted;
	/*
	 * Of those, the clients' streams; and until when plain answers sent
	 * to it are asked for as streams under --stream-upstream auto
	 * (proxy.c, "Leaving"): while streams run there, a left plain answer
	 * could not be stopped.
	 */
	unsigned streams;
	uint64_t plain_streams_until_ms;
	/*
	 * Left plain answers being stopped on it: while any is, it takes no
	 * new work that needs a slot, so that llama-server's wait for their
	 * results can pass without a result, which is when it notices that
	 * their client left (see proxy.c, "Leaving").
	 */
	unsigned quiet;
	/*
	 * Watches open to it (GET /models/sse, GET /v1/stream): they hold a
	 * connection for as long as their clients stay, but no slot, so
	 * they are not in inflight; they are ended before it stops.
	 */
	unsigned watches;
	unsigned index; /* position among sluice's upstreams */
	/*
	 * Unique in the process and never reused (an index moves as
	 * upstreams come and go): what prefix affinity remembers it by.
	 */
	uint32_t id;
	bool suspect;  /* see the top of this file */
	bool draining; /* see the top of this file */
	/*
	 * Its /props says "role": "router": llama-server's router mode, one
	 * llama-server per model, started on demand (/models/load...).
	 */
	bool router;
	/* Where it came from: "dns:NAME:PORT", or NULL (given or managed). */
	char *origin;
	struct sl_outlier outlier; /* failures in a row; ejection */
	/*
	 * What its answers cost, learned from them (predict.h), and its
	 * requests in flight with their predicted ends: the relay feeds it,
	 * latency.h reads it.
	 */
	struct sl_predictor predict;
	/* Requests sent again after failing on this upstream, by reason. */
	unsigned long long retries[SL_RETRY_REASONS];

	/* Managed only. */
	bool managed;
	char *exe;
	char *model;
	struct sl_child *child; /* the running llama-server, or NULL */
	bool ever_ready;        /* became ready at least once */
	uint64_t ready_since_ms;
	unsigned quick_failures; /* exits since the last stable run */

	struct sl_get probe;
	/* How busy it is by its own account (remote only): see Occupancy. */
	struct sl_occupancy occupancy;
	/* Its own /metrics (managed only), fetched for sluice's /metrics. */
	struct sl_get metrics_get;
	char *metrics_text;        /* the last answer, or NULL */
	uint64_t metrics_ms;       /* loop time it arrived */
	uv_timer_t probe_timer;    /* next health check; restart backoff */
	uv_timer_t deadline_timer; /* startup timeout */
	unsigned failed_probes;
	char last_probe[160]; /* what the last failed probe said */
	bool stopping;
	unsigned open_handles;
};

/*
 * A new upstream: managed when `spec` is not NULL (url is then chosen at
 * each launch), else remote at `url`. Call sl_upstream_start() next.
 */
struct sl_upstream *sl_upstream_new(uv_loop_t *loop, struct sl_curl *curl,
                                    const struct sl_config *cfg,
                                    const struct sl_managed_spec *spec,
                                    const char *url,
                                    const struct sl_upstream_hooks *hooks,
                                    void *data);

/* Launches (managed) or starts checking (remote). Returns 0 or an error. */
int sl_upstream_start(struct sl_upstream *u);

/*
 * Stops: a managed llama-server gets SIGTERM, then SIGKILL after
 * --stop-timeout; `force` sends SIGKILL at once. Calling it again with
 * force=true hurries a stop already under way.
 */
void sl_upstream_stop(struct sl_upstream *u, bool force);

bool sl_upstream_is_ready(const struct sl_upstream *u);

/* Ready, neither suspect nor ejected: new work may go to it. */
bool sl_upstream_usable(const struct sl_upstream *u);

/*
 * Its slots that new work may take: none while it is quiet (above), else
 * those sluice has not filled, fewer when llama-server reports others'
 * requests there (above).
 */
unsigned sl_upstream_free_slots(const struct sl_upstream *u);

/*
 * A transfer to `u` failed at the transport level: marks a ready upstream
 * suspect and probes it now. hooks->on_change reports (with old == new ==
 * ready) when a probe clears the mark.
 */
void sl_upstream_suspect(struct sl_upstream *u, const char *why);

/*
 * A request sent to `u` failed (transport failure or 5xx; `why` says how):
 * counts towards its ejection.
 */
void sl_upstream_request_failed(struct sl_upstream *u, const char *why);

/* A request sent to `u` got its whole answer: the failure count restarts. */
void sl_upstream_request_ok(struct sl_upstream *u);

/* A new JSON object describing the upstream for /health. */
json_t *sl_upstream_json(const struct sl_upstream *u);

/* ---- occupancy (occupancy.c; see above) ---- */

/* Sets the poller up inside `u` (its timer counts among u's handles). */
void sl_occupancy_init(struct sl_upstream *u);

/* Stops polling (the upstream stops); the timer is closed by the caller. */
void sl_occupancy_stop(struct sl_upstream *u);

/* The upstream's /props changed what it is: forget what was polled. */
void sl_occupancy_reset(struct sl_upstream *u);

/* Whether `u`'s occupancy is polled (see the top of this file). */
bool sl_occupancy_polled(const struct sl_upstream *u);

/*
 * Whether a poll of `u` went within SL_OCCUPANCY_REARM_MS: llama-server's
 * one-second wait for results may still be re-armed by it.
 */
bool sl_occupancy_polling(const struct sl_upstream *u);

/*
 * Requests wait for `u`'s model: poll as soon as the interval since the
 * last poll allows (and on at the interval while they wait).
 */
void sl_occupancy_want(struct sl_upstream *u);

/*
 * sluice's queue for `u`'s model is full now: a reading gone by holds no
 * slot back (see above) for the rest of this turn of the loop, so that
 * the dispatch the free count leads to finds the slots it counted. Asked
 * with the free count, before every dispatch.
 */
void sl_occupancy_press(struct sl_upstream *u);

/* A request was sent to `u` (it counts in u->inflight). */
void sl_occupancy_taken(struct sl_upstream *u);

/* An answer on `u` ended: poll at once, if requests wait. */
void sl_occupancy_answer_ended(struct sl_upstream *u);

/* Its free slots, for sl_upstream_free_slots (`own` in flight now). */
unsigned sl_occupancy_free(const struct sl_upstream *u, unsigned cap,
                           unsigned own);

/* A new JSON object of what was polled, for /health (upstream.c). */
json_t *sl_occupancy_json(const struct sl_upstream *u);

/*
 * Reads a /metrics answer (NUL-terminated) of a llama-server with `slots`
 * slots: true with both gauges, false (and nothing written) when either
 * is missing or cannot be true (see "Occupancy" above).
 */
bool sl_occupancy_parse_metrics(const char *body, unsigned slots,
                                unsigned *processing, unsigned *deferred);

/* Reads a /slots answer likewise: its busy slots, at most `slots`. */
bool sl_occupancy_parse_slots(const char *body, unsigned slots,
                              unsigned *processing);

#endif

/*
 * app.h: one running sluice: the loop, the HTTP front end, the upstreams,
 * and the order in which they start and stop.
 *
 * Start: the listener opens first (so a port clash fails fast), then each
 * upstream starts. Stop (SIGINT, SIGTERM, or a fatal start-up error): the
 * listener and connections close, every managed llama-server gets SIGTERM
 * and then SIGKILL after --stop-timeout, and once every handle has closed
 * the loop ends. A second signal while stopping kills llama-server at once.
 */
#ifndef SLUICE_APP_H
#define SLUICE_APP_H

#include "sluice/config.h"
#include "sluice/curl_loop.h"
#include "sluice/h1_client.h"
#include "sluice/http.h"
#include "sluice/sched.h"
#include "sluice/stats.h"
#include "sluice/upstream.h"

#include <stdbool.h>
#include <uv.h>

/* Upstreams sluice can hold: one managed plus the --upstream list. */
#define SL_MAX_UPSTREAMS 64

struct sl_app {
	uv_loop_t loop;
	const struct sl_config *cfg;
	struct sl_curl curl;
	struct sl_h1 h1; /* exchanges with http:// upstreams (proxy.c) */
	struct sl_http_server http;
	uv_signal_t sigint, sigterm;

	struct sl_upstream *upstreams[SL_MAX_UPSTREAMS];
	unsigned n_upstreams;           /* not yet stopped */
	unsigned next_upstream;         /* round-robin start among equals */
	unsigned exchanges;             /* relayed requests not yet finished */
	struct exchange *exchange_list; /* all of them (proxy.c) */
	struct sl_stats stats;
	/* --trusted-proxy, parsed: the HTTP server's limits point here. */
	struct sl_cidr *trusted_proxies;
	unsigned n_trusted_proxies;
	struct sl_metrics_waiter *metrics_waiters; /* /metrics (exposition.c) */
	unsigned metrics_fetching; /* llama-server metrics fetches running */
	bool force_stop;           /* a second signal: SIGKILL llama-server */
	struct sl_sched sched;
	uv_timer_t sched_timer; /* the scheduler's next deadline */
	uv_timer_t drain_timer;
	uv_timer_t flush_timer; /* the grace for the last responses */
	bool flushing;          /* waiting for the last connections to close */
	bool ending_all;        /* sl_proxy_end_all() is running */
	bool demo;              /* serving the demo model */
	bool announced;         /* "ready" has been logged */
	bool stopping;          /* draining, then closing */
	bool front_closing;     /* the HTTP server is being closed */
	int exit_code;
	uint64_t start_ms;
	char listen_url[96];
};

/* Runs sluice until it stops; returns the process exit status. */
int sl_app_run(const struct sl_config *cfg);

/*
 * Starts the shutdown described above, with the given exit status. With
 * status 0 it drains first: no new connections, idle ones closed, requests
 * in flight finish within --drain-timeout. When it passes, each request
 * still owed an answer gets 503 (or, for a stream under way, an error event
 * and its end), and the front closes once those went out.
 */
void sl_app_stop(struct sl_app *app, int exit_code);

/* Called when a request finishes: ends a drain once nothing is left. */
void sl_app_maybe_drained(struct sl_app *app);

/*
 * The ready upstream with the most room (fewest requests in flight per
 * slot; ties in turn), or NULL with the reason, for the client, in `why`.
 * With need_slot, only one with a free slot qualifies. Ties go in turn
 * from next_upstream, which the caller advances past the one it sends a
 * request to (a pick only to see that one is ready takes no turn). `avoid`
 * (or NULL),
 * the upstream a request just failed on, is picked only when no other
 * qualifies.
 */
struct sl_upstream *sl_app_pick_upstream(struct sl_app *app, bool need_slot,
                                         const struct sl_upstream *avoid,
                                         char *why, size_t size);

/*
 * Whether an upstream that cannot take work now is expected back soon: a
 * managed llama-server restarting after it exited, or a ready one marked
 * suspect and being checked, or ejected for a while after failures. New
 * requests then wait in the queue rather than get 503.
 */
bool sl_app_upstream_expected(const struct sl_app *app);

/* Lets the scheduler act now (after a push, a removal, a freed slot). */
void sl_app_kick_scheduler(struct sl_app *app);

/* The /health document: a new JSON object. */
json_t *sl_app_health_json(const struct sl_app *app, bool *any_ready);

#endif

/* app.c: start-up, shutdown, and the glue between the modules. */
#include "sluice/app.h"

#include "sluice/client_addr.h"
#include "sluice/common.h"
#include "sluice/exposition.h"
#include "sluice/log.h"
#include "sluice/proxy.h"
#include "sluice/routes.h"
#include "sluice/startup.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_build_config.h"

static void app_maybe_done(struct sl_app *app);
static void stop_upstreams(struct sl_app *app, bool force);

/*
 * Once a drain has nothing left in flight, the last responses may still be
 * in the connections' write queues, and closing the front would cancel
 * them. While draining every connection closes by itself after its
 * response (flushed, then FIN), so sluice waits for the last one to close;
 * a client that neither reads nor closes cannot hold the shutdown for
 * longer than this.
 */
#define SL_APP_FLUSH_GRACE_MS 1000

/* ---- upstream events ---- */

static void announce_ready(struct sl_app *app)
{
	if (app->announced)
		return;
	app->announced = true;
	sl_info("sluice %s is ready on %s", SL_VERSION, app->listen_url);
	if (app->demo)
		sl_warn("serving the DEMO model: it generates random text. To "
		        "serve a real model, pass --model FILE.gguf, or let "
		        "llama-server download one with --llama-arg=--hf-repo "
		        "--llama-arg=REPO");
}

/*
 * libcurl's pool: per upstream no more connections than its slots plus a
 * few, since each one holds a llama-server HTTP thread even when idle.
 */
static void size_connection_pool(struct sl_app *app)
{
	long per_host = 1, total = 0;
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = app->upstreams[i];
		if (!u)
			continue;
		long n = (long)u->total_slots + SL_UPSTREAM_SPARE_CONNS;
		per_host = SL_MAX(per_host, n);
		total += n;
	}
	curl_multi_setopt(app->curl.multi, CURLMOPT_MAX_HOST_CONNECTIONS,
	                  per_host);
	curl_multi_setopt(app->curl.multi, CURLMOPT_MAXCONNECTS, total);
}

static void on_upstream_change(struct sl_upstream *u,
                               enum sl_upstream_state old)
{
	struct sl_app *app = u->data;
	sl_debug("upstream %s: %s -> %s", u->url, sl_upstream_state_name(old),
	         sl_upstream_state_name(u->state));
	if (u->state == SL_UPSTREAM_READY) {
		size_connection_pool(app);
		announce_ready(app);
		sl_app_kick_scheduler(app); /* new capacity */
	}
}

/* Free slots across every ready upstream: the scheduler's capacity. */
static unsigned free_slots(void *ctx)
{
	struct sl_app *app = ctx;
	unsigned free = 0;
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = app->upstreams[i];
		if (u && sl_upstream_usable(u) && u->inflight < u->total_slots)
			free += u->total_slots - u->inflight;
	}
	return free;
}

/* Slots in all across every ready upstream, for the auto urgent reserve. */
static unsigned total_slots(void *ctx)
{
	struct sl_app *app = ctx;
	unsigned total = 0;
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = app->upstreams[i];
		if (u && sl_upstream_usable(u))
			total += u->total_slots;
	}
	return total;
}

static const struct sl_sched_ops sched_ops = {
    .free_slots = free_slots,
    .dispatch = sl_proxy_dispatch,
    .expire = sl_proxy_expire,
    .shed = sl_proxy_shed,
    .total_slots = total_slots,
};

static void on_sched_timer(uv_timer_t *t)
{
	sl_app_kick_scheduler(t->data);
}

void sl_app_kick_scheduler(struct sl_app *app)
{
	if (app->front_closing)
		return;
	uint64_t now = uv_now(&app->loop);
	uint64_t next = sl_sched_run(&app->sched, now);
	if (next == UINT64_MAX)
		uv_timer_stop(&app->sched_timer);
	else
		uv_timer_start(&app->sched_timer, on_sched_timer,
		               next > now ? next - now : 0, 0);
}

struct sl_upstream *sl_app_pick_upstream(struct sl_app *app, bool need_slot,
                                         const struct sl_upstream *avoid,
                                         char *why, size_t size)
{
	struct sl_upstream *best = NULL, *fallback = NULL;
	unsigned n_starting = 0, n_restarting = 0, n_suspect = 0;
	unsigned n_ejected = 0;
	for (unsigned k = 0; k < SL_MAX_UPSTREAMS; k++) {
		unsigned i = (app->next_upstream + k) % SL_MAX_UPSTREAMS;
		struct sl_upstream *u = app->upstreams[i];
		if (!u)
			continue;
		n_starting += u->state == SL_UPSTREAM_STARTING;
		n_restarting += u->state == SL_UPSTREAM_RESTARTING;
		n_suspect += u->state == SL_UPSTREAM_READY && u->suspect;
		n_ejected +=
		    u->state == SL_UPSTREAM_READY && u->outlier.ejected;
		if (!sl_upstream_usable(u) ||
		    (need_slot && u->inflight >= u->total_slots))
			continue;
		if (u == avoid) {
			fallback = u;
			continue;
		}
		/* Fewest in flight per slot: compare a/b < c/d as ad < cb. */
		if (!best || (uint64_t)u->inflight * best->total_slots <
		                 (uint64_t)best->inflight * u->total_slots)
			best = u;
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

bool sl_app_upstream_expected(const struct sl_app *app)
{
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = app->upstreams[i];
		if (u && (u->state == SL_UPSTREAM_RESTARTING ||
		          (u->state == SL_UPSTREAM_READY &&
		           (u->suspect || u->outlier.ejected))))
			return true;
	}
	return false;
}

static void on_upstream_fatal(struct sl_upstream *u, const char *why)
{
	struct sl_app *app = u->data;
	sl_error("%s", why);
	sl_app_stop(app, EXIT_FAILURE);
}

static void on_upstream_stopped(struct sl_upstream *u)
{
	struct sl_app *app = u->data;
	app->upstreams[u->index] = NULL;
	app->n_upstreams--;
	app_maybe_done(app);
}

/* Ejecting the last usable upstream would serve nobody: see upstream.h. */
static bool may_eject(const struct sl_upstream *u)
{
	const struct sl_app *app = u->data;
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *other = app->upstreams[i];
		if (other && other != u && sl_upstream_usable(other))
			return true;
	}
	return false;
}

static const struct sl_upstream_hooks upstream_hooks = {
    .may_eject = may_eject,
    .on_change = on_upstream_change,
    .on_fatal = on_upstream_fatal,
    .on_stopped = on_upstream_stopped,
};

/* ---- shutdown ---- */

/*
 * Every client connection is closed: end what is left (exchanges whose
 * transfer outlived their client, /metrics waiters), and only then stop
 * the upstreams those exchanges point to.
 */
static void on_http_closed(struct sl_http_server *s)
{
	struct sl_app *app = sl_container_of(s, struct sl_app, http);
	app->http.loop = NULL; /* marks it closed */
	sl_proxy_abort_all(app);
	sl_exposition_close(app);
	stop_upstreams(app, app->force_stop);
	app_maybe_done(app);
}

static void on_curl_closed(struct sl_curl *c)
{
	(void)c; /* nothing else is open: uv_run returns */
}

static void app_maybe_done(struct sl_app *app)
{
	if (!app->stopping || app->n_upstreams > 0 || app->http.loop)
		return;
	sl_h1_close(&app->h1);
	if (app->curl.multi)
		sl_curl_close(&app->curl, on_curl_closed);
}

static void stop_upstreams(struct sl_app *app, bool force)
{
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++)
		if (app->upstreams[i])
			sl_upstream_stop(app->upstreams[i], force);
}

/*
 * Closes the front: every connection, aborting what is still in flight.
 * The upstreams stop only after that (on_http_closed), so no exchange
 * outlives the upstream it points to.
 */
static void close_front(struct sl_app *app)
{
	if (app->front_closing)
		return;
	app->front_closing = true;
	uv_close((uv_handle_t *)&app->drain_timer, NULL);
	uv_close((uv_handle_t *)&app->sched_timer, NULL);
	uv_close((uv_handle_t *)&app->flush_timer, NULL);
	if (app->http.loop)
		sl_http_server_close(&app->http, on_http_closed);
	else
		stop_upstreams(app, app->force_stop);
}

/* The last connection closed, or the grace for the last responses ran out. */
static void on_flush_timer(uv_timer_t *t)
{
	struct sl_app *app = t->data;
	if (app->http.n_conns > 0)
		sl_warn("%u connections still open %d ms after the last "
		        "response; closing them",
		        app->http.n_conns, SL_APP_FLUSH_GRACE_MS);
	close_front(app);
}

static void on_front_empty(struct sl_http_server *s)
{
	struct sl_app *app = sl_container_of(s, struct sl_app, http);
	/* Not from inside the last connection's close callback. */
	uv_timer_start(&app->flush_timer, on_flush_timer, 0, 0);
}

/* Closes the front once the last responses went out (see the top). */
static void close_front_when_flushed(struct sl_app *app)
{
	if (app->front_closing || app->flushing)
		return;
	if (!app->http.loop || app->http.n_conns == 0) {
		close_front(app);
		return;
	}
	app->flushing = true;
	/* Nothing new would be answered now: stop taking connections. */
	sl_http_server_stop_accepting(&app->http);
	app->http.on_empty = on_front_empty;
	uv_timer_start(&app->flush_timer, on_flush_timer, SL_APP_FLUSH_GRACE_MS,
	               0);
}

/*
 * Nothing is cut silently: every request still in flight gets its proper
 * end (503, or an error event that ends its stream), and the front closes
 * once those have been flushed.
 */
static void on_drain_timeout(uv_timer_t *t)
{
	struct sl_app *app = t->data;
	sl_warn("drain timeout: %u requests still in flight; ending them "
	        "with 503 or an error event",
	        app->exchanges);
	app->ending_all = true;
	sl_proxy_end_all(app);
	app->ending_all = false;
	close_front_when_flushed(app);
}

void sl_app_maybe_drained(struct sl_app *app)
{
	if (!app->stopping || app->front_closing || app->ending_all ||
	    app->exchanges > 0 || sl_http_server_busy(&app->http) > 0)
		return;
	close_front_when_flushed(app);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct sl_app *app = h->data;
	if (!app->stopping) {
		sl_info("received %s; shutting down", strsignal(signum));
		sl_app_stop(app, EXIT_SUCCESS);
		return;
	}
	sl_warn("received %s again; stopping now", strsignal(signum));
	app->force_stop = true;
	if (app->front_closing && !app->http.loop)
		stop_upstreams(app, true); /* already stopping: hurry it */
	else
		close_front(app); /* on_http_closed stops them, forcefully */
}

void sl_app_stop(struct sl_app *app, int exit_code)
{
	if (app->stopping)
		return;
	app->stopping = true;
	app->exit_code = exit_code;
	/* Signals stay watched (unref'd) so a second one can hurry us. */
	uv_unref((uv_handle_t *)&app->sigint);
	uv_unref((uv_handle_t *)&app->sigterm);
	if (exit_code == EXIT_SUCCESS && app->http.loop &&
	    app->cfg->drain_timeout_ms > 0) {
		if (app->exchanges > 0 || sl_http_server_busy(&app->http) > 0)
			sl_info("draining: waiting up to %.1f s for %u "
			        "requests in flight",
			        (double)app->cfg->drain_timeout_ms / 1000.0,
			        app->exchanges);
		/* New requests get 503 and /ready says 503 meanwhile. */
		sl_http_server_drain(&app->http);
		uv_timer_start(&app->drain_timer, on_drain_timeout,
		               app->cfg->drain_timeout_ms, 0);
		sl_app_maybe_drained(app);
		return;
	}
	close_front(app);
}

/* ---- each finished request: metrics and the access log ---- */

static void on_request_finished(struct sl_http_request *req, bool completed,
                                void *data)
{
	struct sl_app *app = data;
	double seconds = (double)(sl_now_ns() - req->start_ns) / 1e9;
	const char *outcome =
	    sl_stats_finished(&app->stats, req, completed, seconds);
	const struct sl_request_info *in = &req->info;
	if (!sl_log_enabled(SL_LOG_INFO)) {
		sl_app_maybe_drained(app);
		return;
	}
	const struct sl_log_field f[] = {
	    SL_LOG_STR("id", req->id[0] ? req->id : NULL),
	    SL_LOG_STR("client", req->client[0] ? req->client : NULL),
	    SL_LOG_STR("method",
	               req->path ? llhttp_method_name(req->method) : NULL),
	    SL_LOG_STR("path", req->path),
	    SL_LOG_NUM("status", req->status ? req->status : 499),
	    SL_LOG_STR("priority", in->has_priority
	                               ? sl_priority_class(in->priority)
	                               : NULL),
	    SL_LOG_NUM("queue_ms", (long long)in->queue_ms),
	    SL_LOG_NUM("ttft_ms", (long long)in->ttft_ms),
	    SL_LOG_NUM("total_ms", (long long)(seconds * 1000)),
	    SL_LOG_NUM("tokens", (long long)in->tokens),
	    SL_LOG_NUM("bytes", (long long)req->bytes_sent),
	    SL_LOG_STR("upstream", in->upstream[0] ? in->upstream : NULL),
	    SL_LOG_STR("outcome", outcome),
	};
	sl_log_fields(SL_LOG_INFO, "access", f, sizeof(f) / sizeof(f[0]));
	sl_app_maybe_drained(app);
}

/* ---- /health ---- */

json_t *sl_app_health_json(const struct sl_app *app, bool *any_ready)
{
	json_t *ups = json_array();
	*any_ready = false;
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = app->upstreams[i];
		if (!u)
			continue;
		*any_ready |= sl_upstream_is_ready(u);
		json_array_append_new(ups, sl_upstream_json(u));
	}
	uint64_t uptime =
	    (uv_now((uv_loop_t *)&app->loop) - app->start_ms) / 1000;
	return json_pack(
	    "{s:s, s:s, s:s, s:i, s:i, s:i, s:b, s:o}", "status",
	    *any_ready ? "ok" : "unavailable", "state",
	    app->stopping ? "draining" : "running", "version", SL_VERSION,
	    "uptime_s", (json_int_t)uptime, "queued",
	    (json_int_t)sl_sched_depth(&app->sched), "inflight",
	    (json_int_t)(app->exchanges - sl_sched_depth(&app->sched)),
	    "demo_model", app->demo, "upstreams", ups);
}

/* ---- start-up ---- */

/* Decides what to run and checks it, before the loop starts. */
static int plan_managed(struct sl_app *app, struct sl_managed_spec *spec,
                        char **exe, char **model)
{
	const struct sl_config *cfg = app->cfg;
	char err[512];
	char *cache = sl_cache_dir(cfg, err, sizeof(err));
	if (!cache)
		goto fail;
	*exe = sl_find_llama_server(cfg, cache, err, sizeof(err));
	if (!*exe)
		goto fail_cache;
	if (cfg->model[0]) {
		if (sl_check_model_file(cfg->model, err, sizeof(err)) != 0)
			goto fail_cache;
		*model = sl_xstrdup(cfg->model);
	} else if (!sl_llama_args_choose_model(cfg)) {
		*model = sl_demo_model_path(cfg, cache, err, sizeof(err));
		if (!*model)
			goto fail_cache;
		app->demo = true;
	}
	free(cache);
	spec->exe = *exe;
	spec->model = *model;
	return 0;

fail_cache:
	free(cache);
fail:
	sl_error("%s", err);
	return SL_EINVAL;
}

static int add_upstream(struct sl_app *app, const struct sl_managed_spec *spec,
                        const char *url)
{
	if (app->n_upstreams >= SL_MAX_UPSTREAMS) {
		sl_error("too many upstreams: at most %d", SL_MAX_UPSTREAMS);
		return SL_EINVAL;
	}
	struct sl_upstream *u = sl_upstream_new(
	    &app->loop, &app->curl, app->cfg, spec, url, &upstream_hooks, app);
	u->index = app->n_upstreams;
	app->upstreams[app->n_upstreams++] = u;
	int rc = sl_upstream_start(u);
	if (rc != 0)
		sl_error("cannot start %s: %s", spec ? spec->exe : url,
		         sl_strerror(rc));
	return rc;
}

/*
 * --trusted-proxy's ranges, parsed once for the HTTP server; the options
 * were checked when read, so a failure here is a bug.
 */
static int parse_trusted_proxies(struct sl_app *app)
{
	const struct sl_strlist *l = &app->cfg->trusted_proxies;
	if (l->count == 0)
		return 0;
	app->trusted_proxies = sl_xcalloc(l->count, sizeof(struct sl_cidr));
	for (unsigned i = 0; i < l->count; i++) {
		if (sl_cidr_parse(l->items[i], strlen(l->items[i]),
		                  &app->trusted_proxies[i]) != 0) {
			sl_error("--trusted-proxy %s: not an address range",
			         l->items[i]);
			return SL_EINVAL;
		}
	}
	app->n_trusted_proxies = l->count;
	return 0;
}

/*
 * A gateway reachable from other hosts with no client key serves anyone
 * who finds it (and spends its GPU): say so once, with the two ways out.
 */
static void warn_if_exposed(const struct sl_app *app, unsigned port)
{
	const struct sl_config *cfg = app->cfg;
	struct sl_ip host;
	if (cfg->api_keys.count > 0)
		return; /* --api-key and --api-key-file both land here */
	if (sl_ip_parse(cfg->listen_host, strlen(cfg->listen_host), &host) ==
	        0 &&
	    sl_ip_is_loopback(&host))
		return;
	sl_warn("listening on %s, which other hosts can reach, and no client "
	        "key is set: anyone who can connect may use this gateway; set "
	        "--api-key (or --api-key-file), or listen on loopback only "
	        "with --listen 127.0.0.1:%u",
	        app->listen_url, port);
}

static int open_listener(struct sl_app *app)
{
	const struct sl_config *cfg = app->cfg;
	int rc = parse_trusted_proxies(app);
	if (rc != 0)
		return rc;
	struct sl_http_limits limits = {
	    .max_header_bytes = cfg->max_header_size,
	    .max_headers = cfg->max_headers,
	    .max_body = cfg->max_body,
	    .header_timeout_ms = cfg->header_timeout_ms,
	    .body_timeout_ms = cfg->body_timeout_ms,
	    .idle_timeout_ms = cfg->keepalive_timeout_ms,
	    .send_timeout_ms = cfg->send_timeout_ms,
	    .max_connections = cfg->max_connections,
	    .cors_origins = cfg->cors_origins.items,
	    .n_cors_origins = cfg->cors_origins.count,
	    .trusted_proxies = app->trusted_proxies,
	    .n_trusted_proxies = app->n_trusted_proxies,
	};
	rc = sl_http_server_listen(&app->http, &app->loop, cfg->listen_host,
	                           cfg->listen_port, &limits,
	                           sl_routes_dispatch, app);
	if (rc != 0) {
		sl_error("--listen %s: %s", cfg->listen, uv_strerror(rc));
		return rc;
	}
	app->http.on_finish = on_request_finished;
	unsigned port = sl_http_server_port(&app->http);
	bool v6 = strchr(cfg->listen_host, ':') != NULL;
	snprintf(app->listen_url, sizeof(app->listen_url), "http://%s%s%s:%u",
	         v6 ? "[" : "", cfg->listen_host, v6 ? "]" : "", port);
	sl_info("listening on %s", app->listen_url);
	warn_if_exposed(app, port);
	return 0;
}

static void run_loop_to_end(struct sl_app *app)
{
	uv_run(&app->loop, UV_RUN_DEFAULT);
	/* The signal handles were unref'd, not closed: close them now. */
	uv_close((uv_handle_t *)&app->sigint, NULL);
	uv_close((uv_handle_t *)&app->sigterm, NULL);
	uv_run(&app->loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&app->loop) != 0)
		sl_warn("a libuv handle was left open at exit");
}

int sl_app_run(const struct sl_config *cfg)
{
	struct sl_app *app = sl_xcalloc(1, sizeof(*app));
	app->cfg = cfg;
	struct sl_managed_spec spec = {0};
	char *exe = NULL, *model = NULL;
	bool managed = cfg->model[0] || cfg->upstreams.count == 0;
	int rc;

	if (managed && plan_managed(app, &spec, &exe, &model) != 0) {
		free(app);
		return EXIT_FAILURE;
	}

	uv_loop_init(&app->loop);
	app->start_ms = uv_now(&app->loop);
	uv_signal_init(&app->loop, &app->sigint);
	uv_signal_init(&app->loop, &app->sigterm);
	app->sigint.data = app;
	app->sigterm.data = app;
	uv_signal_start(&app->sigint, on_signal, SIGINT);
	uv_signal_start(&app->sigterm, on_signal, SIGTERM);
	uv_timer_init(&app->loop, &app->drain_timer);
	app->drain_timer.data = app;
	uv_timer_init(&app->loop, &app->sched_timer);
	app->sched_timer.data = app;
	uv_timer_init(&app->loop, &app->flush_timer);
	app->flush_timer.data = app;
	struct sl_sched_config sched_cfg = {
	    .aging_rate = cfg->aging_rate,
	    .window_ms = cfg->batch_window_ms,
	    .max_batch = cfg->max_batch,
	    .max_queue = cfg->max_queue,
	    .queue_timeout_ms = cfg->queue_timeout_ms,
	    .urgent_bypass = cfg->urgent_bypass,
	    .urgent_reserve = cfg->urgent_reserve,
	};
	sl_sched_init(&app->sched, &sched_cfg, &sched_ops, app,
	              uv_now(&app->loop));

	sl_stats_init(&app->stats);
	sl_h1_init(&app->h1, &app->loop);
	rc = sl_curl_init(&app->curl, &app->loop);
	if (rc == 0)
		rc = open_listener(app);
	if (rc == 0 && managed)
		rc = add_upstream(app, &spec, NULL);
	for (unsigned i = 0; rc == 0 && i < cfg->upstreams.count; i++)
		rc = add_upstream(app, NULL, cfg->upstreams.items[i]);
	free(exe);
	free(model);
	if (rc != 0)
		sl_app_stop(app, EXIT_FAILURE);

	run_loop_to_end(app);
	sl_sched_free(&app->sched);
	int code = app->exit_code;
	free(app->trusted_proxies);
	free(app);
	return code;
}

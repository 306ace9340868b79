/*
 * app.c: start-up, shutdown, and the glue between the modules: the hooks
 * through which the relay and the upstreams reach the pieces of the
 * wiring below this one (app_state.h has the order).
 */
#include "app.h"

#include "app_discovery.h"
#include "app_models.h"
#include "app_reload.h"
#include "app_state.h"
#include "app_upstreams.h"
#include "routes.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/fleet/demo_model.h"
#include "sluice/fleet/startup.h"
#include "sluice/net/client_addr.h"
#include "sluice/ops/exposition.h"
#include "sluice/ops/status.h"
#include "sluice/relay/proxy.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_build_config.h"

static void stop_upstreams(struct sl_app *app, bool force);
static void maybe_done(struct sl_app *app);
static void flush_traces(struct sl_app *app);

/*
 * Once a drain has nothing left in flight, the last responses may still be
 * in the connections' write queues, and closing the front would cancel
 * them. While draining every connection closes by itself after its
 * response (flushed, then FIN), so sluice waits for the last one to close;
 * a client that neither reads nor closes cannot hold the shutdown for
 * longer than this.
 */
#define SL_APP_FLUSH_GRACE_MS 1000

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
	sl_proxy_abort_all(&app->relay);
	sl_exposition_close(&app->exposition);
	flush_traces(app);
	stop_upstreams(app, app->force_stop);
	maybe_done(app);
}

/* The spans' flush is over (sl_tracer_drain): the tracer may close. */
static void on_tracer_drained(void *data)
{
	struct sl_app *app = data;
	app->tracer_flushing = false;
	sl_tracer_close(app->tracer);
	app->tracer = NULL;
	app->relay.tracer = NULL;
	app->exposition.tracer = NULL;
	maybe_done(app);
}

/*
 * Every request has ended: the spans waiting go to the collector, within
 * the drain's deadline (--drain-timeout from the stop), and at least
 * SL_TRACE_FLUSH_MIN_MS; at once when the stop is forced.
 */
static void flush_traces(struct sl_app *app)
{
	if (!app->tracer || app->tracer_flushing)
		return;
	uint64_t now = uv_now(&app->loop);
	uint64_t deadline = app->stop_ms + app->cfg->drain_timeout_ms;
	deadline = SL_MAX(deadline, now + SL_TRACE_FLUSH_MIN_MS);
	if (app->force_stop)
		deadline = now;
	app->tracer_flushing = true;
	sl_tracer_drain(app->tracer, deadline, on_tracer_drained, app);
}

static void on_curl_closed(struct sl_curl *c)
{
	(void)c; /* nothing else is open: uv_run returns */
}

/*
 * The end of a stop: once the front has closed and the last upstream has
 * stopped, the clients close, and with them the last handles of the loop.
 */
static void maybe_done(struct sl_app *app)
{
	if (!app->stopping || app->n_upstreams > 0 || app->http.loop ||
	    app->tracer_flushing)
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
	for (unsigned i = 0; i < app->registry.n_models; i++)
		app_close_model_timers(app->registry.models[i], NULL);
	for (struct sl_model *m = app->registry.retired; m;
	     m = m->next_retired) {
		if (m->closing)
			continue;
		m->closing = true;
		app_close_model_timers(m, NULL);
	}
	uv_close((uv_handle_t *)&app->flush_timer, NULL);
	uv_close((uv_handle_t *)&app->reap_timer, NULL);
	uv_close((uv_handle_t *)&app->relay.coalesce_timer, NULL);
	sl_status_close(&app->status);
	if (app->http.loop) {
		sl_http_server_close(&app->http, on_http_closed);
	} else {
		flush_traces(app);
		stop_upstreams(app, app->force_stop);
	}
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
	sl_warn("drain timeout: %u request%s still in flight; ending %s "
	        "with 503 or an error event",
	        app->relay.exchanges, app->relay.exchanges == 1 ? "" : "s",
	        app->relay.exchanges == 1 ? "it" : "them");
	app->ending_all = true;
	sl_proxy_end_all(&app->relay);
	app->ending_all = false;
	close_front_when_flushed(app);
}

void sl_app_maybe_drained(struct sl_app *app)
{
	if (!app->stopping || app->front_closing || app->ending_all ||
	    app->relay.exchanges > 0 || sl_http_server_busy(&app->http) > 0)
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
	if (app->tracer_flushing) /* its spans are dropped */
		sl_tracer_drain(app->tracer, uv_now(&app->loop),
		                on_tracer_drained, app);
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
	app->stop_ms = uv_now(&app->loop);
	app->exit_code = exit_code;
	app_close_discoveries(app);
	/* Signals stay watched (unref'd) so a second one can hurry us. */
	uv_unref((uv_handle_t *)&app->sigint);
	uv_unref((uv_handle_t *)&app->sigterm);
	uv_signal_stop(&app->sighup);
	if (exit_code == EXIT_SUCCESS && app->http.loop &&
	    app->cfg->drain_timeout_ms > 0) {
		if (app->relay.exchanges > 0 ||
		    sl_http_server_busy(&app->http) > 0)
			sl_info("draining: waiting up to %.1f s for %u "
			        "request%s in flight",
			        (double)app->cfg->drain_timeout_ms / 1000.0,
			        app->relay.exchanges,
			        app->relay.exchanges == 1 ? "" : "s");
		/* New requests get 503 and /ready says 503 meanwhile. */
		sl_http_server_drain(&app->http);
		sl_proxy_end_watches(&app->relay, NULL,
		                     "sluice is shutting down");
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
	sl_status_record(&app->status, req, outcome, seconds);
	const struct sl_request_info *in = &req->info;
	sl_trace_finish(app->tracer, req, outcome);
	/* A tenant's request is over: its place, its tokens, its usage. */
	if (in->tenant) {
		struct sl_ending e = {
		    .counted = in->counted,
		    .used = in->upstream[0] != '\0',
		    .ran_on = in->ran_on,
		    .refunded = in->refunded,
		    .model = in->model,
		    .prompt_tokens = in->prompt_tokens,
		    .completion_tokens = in->tokens,
		    .reserved = in->tokens_reserved,
		    .queue_ms = in->queue_ms,
		    .slot_seconds = in->queue_ms >= 0
		                        ? seconds - (double)in->queue_ms / 1000
		                        : 0,
		};
		sl_tenant_end(in->tenant, &e, uv_now(&app->loop));
	}
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
	    SL_LOG_NUM("predicted_ttft_ms", (long long)in->predicted_ttft_ms),
	    SL_LOG_NUM("total_ms", (long long)(seconds * 1000)),
	    SL_LOG_NUM("tokens", (long long)in->tokens),
	    SL_LOG_NUM("bytes", (long long)req->bytes_sent),
	    SL_LOG_STR("upstream", in->upstream[0] ? in->upstream : NULL),
	    SL_LOG_STR("outcome", outcome),
	    /* Why sluice refused it, when it did (stats.h's reasons). */
	    SL_LOG_STR("reason", in->reject_reason),
	    SL_LOG_STR("key", in->key),
	};
	/* The key's name ends the line of a tenant's request only. */
	size_t n = sizeof(f) / sizeof(f[0]) - (in->key ? 0 : 1);
	sl_log_fields(SL_LOG_INFO, "access", f, n);
	sl_app_maybe_drained(app);
}

/* ---- start-up ---- */

/*
 * The one model's name without a models: section: --model-name, else the
 * GGUF file's base name without ".gguf" (its path says where it lies, not
 * what it is), "demo" for the demo model, and "default" otherwise.
 */
static char *one_model_name(const struct sl_app *app, const char *file)
{
	const struct sl_config *cfg = app->cfg;
	if (cfg->model_name[0])
		return sl_xstrdup(cfg->model_name);
	if (app->demo)
		return sl_xstrdup("demo");
	if (!file || !file[0])
		return sl_xstrdup("default");
	const char *base = strrchr(file, '/');
	base = base ? base + 1 : file;
	size_t n = strlen(base);
	if (n > 5 && strcmp(base + n - 5, ".gguf") == 0)
		n -= 5;
	return n ? sl_xasprintf("%.*s", (int)n, base) : sl_xstrdup("default");
}

/*
 * Decides what a managed model runs, before the loop; sl_preflight() has
 * checked llama-server and the model's file.
 */
static int plan_managed(struct sl_app *app, struct sl_model *m,
                        const char *cache, const char *file)
{
	const struct sl_config *cfg = app->cfg;
	char err[512];
	m->managed = true;
	m->exe = sl_find_llama_server(cfg, cache, err, sizeof(err));
	if (!m->exe) {
		/* Gone since the preflight looked. */
		sl_error("%s", err);
		return SL_EINVAL;
	}
	if (file) {
		m->file = sl_xstrdup(file);
		m->bytes =
		    sl_model_bytes(file, m->conf ? m->conf->replicas : 1);
	}
	app_plan_upstream_cfg(m);
	return 0;
}

/* The one model of --model, --upstream or the demo (no models: section). */
static int plan_one_model(struct sl_app *app, const char *cache)
{
	const struct sl_config *cfg = app->cfg;
	bool managed = cfg->model[0] || (cfg->upstreams.count == 0 &&
	                                 cfg->upstream_dns.count == 0);
	char *demo_file = NULL;
	char err[512];
	if (managed && !cfg->model[0] && !sl_llama_args_choose_model(cfg)) {
		demo_file = sl_demo_model_path(cfg, cache, err, sizeof(err));
		if (!demo_file) {
			sl_error("%s", err);
			return SL_EINVAL;
		}
		app->demo = true;
	}
	const char *file = cfg->model[0] ? cfg->model : demo_file;
	struct sl_model *m =
	    app_model_new(app, one_model_name(app, file), NULL);
	int rc = managed ? plan_managed(app, m, cache, file) : 0;
	free(demo_file);
	app->registry.default_model = m;
	return rc;
}

/* The models of a models: section, and the default among them. */
static int plan_models(struct sl_app *app, const char *cache)
{
	const struct sl_config *cfg = app->cfg;
	app->registry.model_section = true;
	for (unsigned i = 0; i < cfg->n_models; i++) {
		const struct sl_model_config *conf = &cfg->models[i];
		struct sl_model *m =
		    app_model_new(app, sl_xstrdup(conf->name), conf);
		if (sl_model_config_managed(conf) &&
		    plan_managed(app, m, cache, conf->file) != 0)
			return SL_EINVAL;
	}
	app->registry.default_model = app->registry.models[0];
	if (cfg->default_model[0])
		app->registry.default_model =
		    sl_registry_find(&app->registry, cfg->default_model);
	return 0;
}

static int plan(struct sl_app *app)
{
	char err[512];
	/* What --check-config checks too: the same refusals, before any. */
	if (sl_preflight(app->cfg, err, sizeof(err)) != 0) {
		sl_error("%s", err);
		return SL_EINVAL;
	}
	char *cache = sl_cache_dir(app->cfg, err, sizeof(err));
	if (!cache) {
		sl_error("%s", err);
		return SL_EINVAL;
	}
	int rc = app->cfg->n_models ? plan_models(app, cache)
	                            : plan_one_model(app, cache);
	free(cache);
	return rc;
}

/*
 * Every model's upstreams, in the order of the configuration. A managed
 * model that cannot start here fails the start-up, which the caller ends.
 */
static int start_models(struct sl_app *app)
{
	const struct sl_config *cfg = app->cfg;
	int rc = 0;
	bool failed = false;
	if (!app->registry.model_section) {
		struct sl_model *m = app->registry.models[0];
		if (m->managed)
			rc = app_add_upstream(app, m, NULL, NULL);
		for (unsigned i = 0; rc == 0 && i < cfg->upstreams.count; i++)
			rc = app_add_upstream(app, m, cfg->upstreams.items[i],
			                      NULL);
		return rc;
	}
	for (unsigned i = 0; rc == 0 && i < app->registry.n_models; i++) {
		struct sl_model *m = app->registry.models[i];
		const struct sl_model_config *conf = m->conf;
		if (app_preload(app, m, "preload") != 0)
			failed = true;
		for (unsigned k = 0; rc == 0 && k < conf->upstreams.count; k++)
			rc = app_add_upstream(app, m, conf->upstreams.items[k],
			                      NULL);
	}
	return app->stopping || failed ? SL_EINVAL : rc;
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
	/* --api-key and --api-key-file both land in api_keys. */
	if (cfg->api_keys.count > 0 || sl_tenants_required(&app->tenants))
		return;
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
	    .max_body_memory = cfg->max_body_memory,
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
	if (rc == UV_EADDRINUSE && cfg->port != 0)
		/* The port came from --port (set, and not 0: any free one). */
		sl_error("--port %u (%s): address already in use: another "
		         "program listens there; stop it, or pick another port",
		         cfg->port, cfg->listen);
	else if (rc == UV_EADDRINUSE)
		sl_error("--listen %s: address already in use: another program "
		         "listens there; stop it, or pick another port with "
		         "--port N",
		         cfg->listen);
	else if (rc != 0)
		sl_error("--listen %s: %s", cfg->listen, uv_strerror(rc));
	if (rc != 0)
		return rc;
	app->http.on_finish = on_request_finished;
	/* A request refused for its key is refused before its body is read. */
	app->http.on_head = sl_routes_head;
	unsigned port = sl_http_server_port(&app->http);
	bool v6 = strchr(cfg->listen_host, ':') != NULL;
	snprintf(app->listen_url, sizeof(app->listen_url), "http://%s%s%s:%u",
	         v6 ? "[" : "", cfg->listen_host, v6 ? "]" : "", port);
	sl_info("listening on %s", app->listen_url);
	if (cfg->cors_localhost_for_tools)
		sl_info("CORS: only pages on localhost, 127.0.0.1 and [::1] "
		        "may call sluice, as llama-server allows when it runs "
		        "tools (a llama-server sluice starts does); "
		        "--cors-origin says otherwise");
	warn_if_exposed(app, port);
	return 0;
}

/* ---- the hooks: what the layers below ask of the wiring ---- */

/*
 * An upstream failed for good. A model started on demand (or by a
 * reload) fails its own requests (app_upstream_fatal); a first start at
 * start-up stops sluice. The requests that waited for it (and any queued
 * for other models, which would be cut) hear why now rather than find
 * their connection closed.
 */
static void on_upstream_fatal(struct sl_upstream *u, const char *why)
{
	struct sl_app *app = u->data;
	if (app_upstream_fatal(u, why))
		return;
	struct sl_model *m = sl_registry_model_of(&app->registry, u);
	sl_error("%s", why);
	char message[SL_MODEL_NAME_MAX + 96];
	snprintf(message, sizeof(message),
	         "%s%s could not start, and sluice is shutting down; "
	         "sluice's log says why",
	         m ? "model " : "llama-server", m ? m->name : "");
	for (unsigned i = 0; i < app->registry.n_models; i++)
		sl_proxy_fail_queued(&app->relay, app->registry.models[i],
		                     message);
	sl_app_stop(app, EXIT_FAILURE);
}

/* An upstream stopped: it leaves its model, and may end a shutdown. */
static void on_upstream_stopped(struct sl_upstream *u)
{
	struct sl_app *app = u->data;
	app_upstream_stopped(u);
	maybe_done(app);
}

/* Every upstream's (app_upstreams.c makes them with these). */
static const struct sl_upstream_hooks upstream_hooks = {
    .may_eject = app_may_eject,
    .waiting = app_upstream_waiting,
    .on_capacity = app_upstream_capacity,
    .on_change = app_upstream_changed,
    .on_fatal = on_upstream_fatal,
    .on_stopped = on_upstream_stopped,
};

/*
 * What the relay asks of the app (relay.h): app_models.c's functions, and
 * the drain above, with the app as an opaque owner.
 */
static struct sl_upstream *
relay_pick_upstream(void *owner, const struct sl_model *m, bool need_slot,
                    const struct sl_upstream *avoid,
                    const struct sl_affinity_key *key,
                    const struct sl_pool_slo *slo, char *why, size_t size)
{
	return sl_app_pick_upstream(owner, m, need_slot, avoid, key, slo, why,
	                            size);
}

static bool relay_upstream_expected(void *owner, const struct sl_model *m)
{
	return sl_app_upstream_expected(owner, m);
}

static void relay_model_demand(void *owner, struct sl_model *m)
{
	sl_app_model_demand(owner, m);
}

static void relay_kick_scheduler(void *owner)
{
	sl_app_kick_scheduler(owner);
}

static void relay_maybe_drained(void *owner)
{
	sl_app_maybe_drained(owner);
}

static const struct sl_relay_hooks relay_hooks = {
    .pick_upstream = relay_pick_upstream,
    .upstream_expected = relay_upstream_expected,
    .model_demand = relay_model_demand,
    .kick_scheduler = relay_kick_scheduler,
    .maybe_drained = relay_maybe_drained,
    .model_ref = sl_app_model_ref,
    .model_release = sl_app_model_release,
    .model_used = sl_app_model_used,
    .model_left = sl_app_model_left,
};

/* Points app->exposition at what /metrics reads (exposition.h). */
static void lend_exposition(struct sl_app *app)
{
	app->exposition = (struct sl_exposition){
	    .loop = &app->loop,
	    .curl = &app->curl,
	    .stats = &app->stats,
	    .tenants = &app->tenants,
	    .http = &app->http,
	    .upstreams = app->upstreams,
	    .registry = &app->registry,
	    .discoveries = &app->discoveries,
	    .n_discoveries = &app->n_discoveries,
	    .affinity = &app->affinity,
	    .affinity_picks = app->affinity_picks,
	};
}

/* Traces, when an endpoint is set (trace.h): lent to the relay and /metrics. */
static int start_tracer(struct sl_app *app)
{
	char err[512];
	int rc = sl_tracer_new(&app->loop, &app->curl, app->cfg, &app->tracer,
	                       err, sizeof(err));
	if (rc != 0) {
		sl_error("%s", err);
		return rc;
	}
	if (!app->tracer)
		return 0;
	app->relay.tracer = app->tracer;
	app->exposition.tracer = app->tracer;
	sl_info("traces: spans go to %s as %s",
	        sl_tracer_url_shown(app->tracer),
	        app->cfg->otel_protocol == SL_OTEL_HTTP_JSON ? "http/json"
	                                                     : "http/protobuf");
	return 0;
}

/* ---- the loop ---- */

static void on_log_turn(uv_prepare_t *h)
{
	(void)h;
	sl_log_flush();
}

static void run_loop_to_end(struct sl_app *app)
{
	/*
	 * Log lines wait for the end of the loop's turn (log.h, Holding). The
	 * handle runs before each wait for I/O, and does not by itself keep
	 * the loop running.
	 */
	uv_prepare_init(&app->loop, &app->log_turn);
	uv_prepare_start(&app->log_turn, on_log_turn);
	uv_unref((uv_handle_t *)&app->log_turn);
	sl_log_hold(true);
	uv_run(&app->loop, UV_RUN_DEFAULT);
	/* The signal handles were unref'd, not closed: close them now. */
	uv_close((uv_handle_t *)&app->sigint, NULL);
	uv_close((uv_handle_t *)&app->sigterm, NULL);
	uv_close((uv_handle_t *)&app->sighup, NULL);
	uv_close((uv_handle_t *)&app->log_turn, NULL);
	uv_run(&app->loop, UV_RUN_DEFAULT);
	sl_log_hold(false);
	if (uv_loop_close(&app->loop) != 0)
		sl_warn("a libuv handle was left open at exit");
}

int sl_app_run(const struct sl_config *cfg)
{
	struct sl_app *app = sl_xcalloc(1, sizeof(*app));
	app->cfg = cfg;
	app->registry.max_loaded = cfg->max_loaded;
	int rc;

	uv_loop_init(&app->loop);
	app->relay = (struct sl_relay){
	    .hooks = &relay_hooks,
	    .owner = app,
	    .loop = &app->loop,
	    .cfg = cfg,
	    .curl = &app->curl,
	    .h1 = &app->h1,
	    .stats = &app->stats,
	    .tenants = &app->tenants,
	    .upstreams = app->upstreams,
	    .n_upstreams = &app->n_upstreams,
	    .next_upstream = &app->next_upstream,
	    .registry = &app->registry,
	    .stopping = &app->stopping,
	};
	app->upstream_hooks = &upstream_hooks;
	lend_exposition(app);
	app->start_ms = uv_now(&app->loop);
	app->created_s = (uint64_t)time(NULL);
	if (plan(app) != 0) {
		for (unsigned i = 0; i < app->registry.n_models; i++)
			app_close_model_timers(app->registry.models[i], NULL);
		uv_run(&app->loop, UV_RUN_DEFAULT);
		uv_loop_close(&app->loop);
		for (unsigned i = 0; i < app->registry.n_models; i++)
			app_model_free(app->registry.models[i]);
		free(app);
		return EXIT_FAILURE;
	}
	uv_signal_init(&app->loop, &app->sigint);
	uv_signal_init(&app->loop, &app->sigterm);
	app->sigint.data = app;
	app->sigterm.data = app;
	uv_signal_start(&app->sigint, on_signal, SIGINT);
	uv_signal_start(&app->sigterm, on_signal, SIGTERM);
	uv_signal_init(&app->loop, &app->sighup);
	app->sighup.data = app;
	uv_signal_start(&app->sighup, app_on_sighup, SIGHUP);
	/* The signal alone must not keep the loop running. */
	uv_unref((uv_handle_t *)&app->sighup);
	sl_tenants_install(&app->tenants, cfg->keys, false);
	app->tenants.table_borrowed = true;
	app_warn_if_locked(app, "", cfg->keys);
	app_warn_unknown_models(app, "");
	uv_timer_init(&app->loop, &app->drain_timer);
	app->drain_timer.data = app;
	uv_timer_init(&app->loop, &app->flush_timer);
	app->flush_timer.data = app;
	uv_timer_init(&app->loop, &app->reap_timer);
	app->reap_timer.data = app;
	uv_timer_init(&app->loop, &app->relay.coalesce_timer);
	app->relay.coalesce_timer.data = &app->relay;

	sl_stats_init(&app->stats);
	/* Closed with the front (close_front); it never holds the loop. */
	sl_status_start(&app->status, &app->exposition, app->start_ms);
	sl_h1_init(&app->h1, &app->loop);
	if (cfg->affinity) {
		app->affinity = sl_xmalloc(sizeof(*app->affinity));
		sl_affinity_init(app->affinity);
	}
	rc = sl_curl_init(&app->curl, &app->loop);
	if (rc == 0)
		rc = start_tracer(app);
	if (rc == 0)
		rc = open_listener(app);
	if (rc == 0)
		rc = start_models(app);
	if (rc == 0)
		rc = app_start_discoveries(app);
	app->started = true;
	/* Every model starts on demand: nothing to wait for. */
	if (rc == 0 && app->n_upstreams == 0)
		app_announce_ready(app);
	if (rc != 0)
		sl_app_stop(app, EXIT_FAILURE);

	run_loop_to_end(app);
	sl_tenants_free(&app->tenants);
	int code = app->exit_code;
	for (unsigned i = 0; i < app->registry.n_models; i++)
		app_model_free(app->registry.models[i]);
	while (app->registry.retired) {
		struct sl_model *m = app->registry.retired;
		app->registry.retired = m->next_retired;
		app_model_free(m);
	}
	app_free_old_launches(app);
	free(app->trusted_proxies);
	free(app->discoveries);
	free(app->affinity);
	free(app);
	return code;
}

/* app.c: start-up, shutdown, and the glue between the modules. */
#include "sluice/app.h"

#include "sluice/net/client_addr.h"
#include "sluice/base/common.h"
#include "sluice/ops/exposition.h"
#include "sluice/base/log.h"
#include "sluice/relay/proxy.h"
#include "sluice/relay/routes.h"
#include "sluice/fleet/startup.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_build_config.h"

static void app_maybe_done(struct sl_app *app);
static void free_old_launches(struct sl_app *app);
static void maybe_free_model(struct sl_model *m);
static void stop_upstreams(struct sl_app *app, bool force);
static void close_discoveries(struct sl_app *app);

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

/* Free slots across the model's usable upstreams: its capacity. */
static unsigned free_slots(void *ctx)
{
	const struct sl_model *m = ctx;
	return sl_pool_free_slots(&m->pool);
}

/* Slots in all across the model's usable upstreams, for the auto reserve. */
static unsigned total_slots(void *ctx)
{
	const struct sl_model *m = ctx;
	return sl_pool_total_slots(&m->pool);
}

static const struct sl_sched_ops sched_ops = {
    .free_slots = free_slots,
    .dispatch = sl_proxy_dispatch,
    .expire = sl_proxy_expire,
    .shed = sl_proxy_shed,
    .total_slots = total_slots,
};

static void kick_model_timer(uv_timer_t *t);

/*
 * Each model's scheduler has a timer of its own. A dispatch may kick the
 * schedulers again from inside sl_sched_run (a start that fails frees a
 * slot), and the one re-entered answers "nothing due" (sched.h); with one
 * timer for all, the outer call would overwrite the deadline a nested run
 * of another model had just set.
 */
static void kick_model(struct sl_model *m)
{
	uint64_t now = uv_now(&m->app->loop);
	uint64_t next = sl_sched_run(&m->sched, now);
	if (next == UINT64_MAX)
		uv_timer_stop(&m->sched_timer);
	else
		uv_timer_start(&m->sched_timer, kick_model_timer,
		               next > now ? next - now : 0, 0);
}

static void kick_model_timer(uv_timer_t *t)
{
	kick_model(t->data);
}

static void stop_drained(struct sl_app *app);

void sl_app_kick_scheduler(struct sl_app *app)
{
	/* Called whenever a request lets go of its upstream. */
	stop_drained(app);
	if (app->front_closing)
		return;
	for (unsigned i = 0; i < app->n_models; i++)
		kick_model(app->models[i]);
	/* A removed model's request sent again waits for its upstreams. */
	for (struct sl_model *m = app->retired; m; m = m->next_retired)
		if (!m->closing)
			kick_model(m);
}

struct sl_model *sl_app_find_model(struct sl_app *app, const char *name)
{
	if (!name || !name[0] || !app->model_section)
		return app->default_model;
	for (unsigned i = 0; i < app->n_models; i++) {
		struct sl_model *m = app->models[i];
		if (strcmp(m->name, name) == 0)
			return m;
		for (unsigned k = 0; m->aliases && k < m->aliases->count; k++)
			if (strcmp(m->aliases->items[k], name) == 0)
				return m;
	}
	return NULL;
}

struct sl_model *sl_app_model_of(const struct sl_app *app,
                                 const struct sl_upstream *u)
{
	for (unsigned i = 0; i < app->n_models; i++)
		if (sl_pool_contains(&app->models[i]->pool, u))
			return app->models[i];
	for (struct sl_model *m = app->retired; m; m = m->next_retired)
		if (sl_pool_contains(&m->pool, u))
			return m;
	return NULL;
}

unsigned sl_app_queue_depth(const struct sl_app *app)
{
	unsigned n = 0;
	for (unsigned i = 0; i < app->n_models; i++)
		n += sl_sched_depth(&app->models[i]->sched);
	for (const struct sl_model *m = app->retired; m; m = m->next_retired)
		n += sl_sched_depth(&m->sched);
	return n;
}

const char *const sl_model_states[] = {"stopped",  "starting", "ready",
                                       "stopping", "down",     NULL};

const char *sl_model_state(const struct sl_model *m)
{
	if (m->unloading)
		return "stopping";
	if (m->pool.n == 0)
		return m->managed ? "stopped" : "down";
	bool starting = false;
	for (unsigned i = 0; i < m->pool.n; i++) {
		enum sl_upstream_state s = m->pool.members[i]->state;
		if (s == SL_UPSTREAM_READY)
			return "ready";
		starting |=
		    s == SL_UPSTREAM_STARTING || s == SL_UPSTREAM_RESTARTING;
	}
	return starting ? "starting" : "down";
}

struct sl_upstream *
sl_app_pick_upstream(struct sl_app *app, const struct sl_model *m,
                     bool need_slot, const struct sl_upstream *avoid,
                     const struct sl_affinity_key *key, char *why, size_t size)
{
	if (m->pool.n == 0 && m->managed) {
		snprintf(why, size,
		         "model %s is stopped; a request that needs a slot "
		         "starts it",
		         m->name);
		return NULL;
	}
	struct sl_pool_affinity aff = {.table = app->affinity,
	                               .key = key,
	                               .margin = app->cfg->affinity_margin,
	                               .result = SL_AFFINITY_RESULTS};
	struct sl_upstream *u =
	    sl_pool_pick(&m->pool, need_slot, avoid, app->next_upstream,
	                 app->affinity && key ? &aff : NULL, why, size);
	/*
	 * The choice is remembered, but a prefix whose home was busy keeps
	 * that home: the detour is for this request only, and moving the
	 * home would send the next ones where the prefix is not. A model of
	 * one upstream has no choice to remember.
	 */
	if (u && app->affinity && key && key->n > 0 && m->pool.n > 1 &&
	    aff.result != SL_AFFINITY_BUSY)
		sl_affinity_store(app->affinity, key, u->id);
	if (u && aff.result < SL_AFFINITY_RESULTS)
		app->affinity_picks[aff.result]++;
	return u;
}

bool sl_app_upstream_expected(const struct sl_app *app,
                              const struct sl_model *m)
{
	/*
	 * Started on demand: its start is awaited, not refused (at start-up
	 * a first start is refused as ever: sluice is not ready yet).
	 */
	if (app->model_section && m->managed &&
	    (m->wanted || m->unloading || !m->loaded))
		return true;
	for (unsigned i = 0; m->late && i < m->pool.n; i++)
		if (m->pool.members[i]->state == SL_UPSTREAM_STARTING)
			return true;
	return sl_pool_expected(&m->pool);
}

/* ---- loading on demand ---- */

static int add_upstream(struct sl_app *app, struct sl_model *m, const char *url,
                        const char *name);
static void unload(struct sl_model *m, const char *why);

static bool model_idle(const struct sl_model *m)
{
	if (sl_sched_depth(&m->sched) > 0)
		return false;
	for (unsigned i = 0; i < m->pool.n; i++)
		if (m->pool.members[i]->inflight > 0)
			return false;
	return true;
}

/* Managed models whose llama-servers run, start or are being stopped. */
static bool model_running(const struct sl_model *m)
{
	return m->managed && (m->loaded || m->pool.n > 0);
}

static unsigned models_running(const struct sl_app *app)
{
	unsigned n = 0;
	for (unsigned i = 0; i < app->n_models; i++)
		n += model_running(app->models[i]);
	return n;
}

/*
 * Whether `m` may start beside what runs: within --max-loaded and
 * --memory-budget. A model being stopped still counts until it has
 * stopped: its memory is not free before.
 */
static bool room_for(const struct sl_app *app, const struct sl_model *m,
                     char *why, size_t size)
{
	uint64_t bytes = 0;
	for (unsigned i = 0; i < app->n_models; i++)
		if (model_running(app->models[i]))
			bytes += app->models[i]->bytes;
	return sl_room_for(app->max_loaded, app->cfg->memory_budget,
	                   models_running(app), bytes, m->bytes, why, size);
}

static void on_idle_timer(uv_timer_t *t)
{
	struct sl_model *m = t->data;
	/* Busy now: the request that ends it arms the timer again. */
	if (m->loaded && model_idle(m))
		unload(m, "idle-timeout passed");
}

/* Starts the model's llama-servers: its replicas. */
static void load(struct sl_app *app, struct sl_model *m, const char *why)
{
	const struct sl_model_config *conf = m->conf;
	m->loaded = true;
	m->wanted = false;
	m->late = app->started;
	m->last_used = ++app->uses;
	sl_info("model %s: starting (%s)", m->name, why);
	int rc = 0;
	for (unsigned r = 0; rc == 0 && r < conf->replicas; r++) {
		/* One replica is the model; more are MODEL/1, ... */
		char *name = conf->replicas == 1
		                 ? sl_xstrdup(m->name)
		                 : sl_xasprintf("%s/%u", m->name, r + 1);
		rc = add_upstream(app, m, NULL, name);
		free(name);
	}
	if (rc != 0 && app->started)
		unload(m, "it could not start");
	else if (rc != 0)
		sl_app_stop(app, EXIT_FAILURE);
	else if (conf->idle_timeout_ms)
		uv_timer_start(&m->idle_timer, on_idle_timer,
		               conf->idle_timeout_ms, 0);
}

/* Stops the model's llama-servers; on_upstream_stopped sees the end. */
static void unload(struct sl_model *m, const char *why)
{
	m->loaded = false;
	uv_timer_stop(&m->idle_timer);
	if (m->pool.n == 0)
		return;
	m->unloading = true;
	sl_info("model %s: stopping (%s)", m->name, why);
	/* A stop may end at once and leave the pool: stop a copy's members. */
	struct sl_pool members = m->pool;
	for (unsigned i = 0; i < members.n; i++) {
		sl_proxy_end_watches(m->app, members.members[i],
		                     "its model is being stopped");
		sl_upstream_stop(members.members[i], false);
	}
}

/* The least recently used idle running model other than `m`, or NULL. */
static struct sl_model *lru_idle(struct sl_app *app, const struct sl_model *m)
{
	struct sl_model *best = NULL;
	for (unsigned i = 0; i < app->n_models; i++) {
		struct sl_model *o = app->models[i];
		if (o == m || !o->managed || !o->loaded || !model_idle(o))
			continue;
		if (!best || o->last_used < best->last_used)
			best = o;
	}
	return best;
}

/*
 * Starts what waiting requests want, in the order of the models, within
 * --max-loaded and --memory-budget (room_for): when a wanted model does
 * not fit, the least recently used idle one stops, and once it has
 * stopped this runs again; with none idle, it waits for one.
 */
static void start_wanted(struct sl_app *app)
{
	if (app->stopping)
		return;
	for (unsigned i = 0; i < app->n_models; i++) {
		struct sl_model *m = app->models[i];
		/* Wanted while a request waits: one that left wants nothing. */
		if (m->wanted && sl_sched_depth(&m->sched) == 0)
			m->wanted = false;
		if (!m->wanted || m->loaded || m->unloading)
			continue;
		char limit[64];
		if (!room_for(app, m, limit, sizeof(limit))) {
			for (unsigned k = 0; k < app->n_models; k++)
				if (app->models[k]->unloading)
					return; /* room is being made */
			struct sl_model *victim = lru_idle(app, m);
			if (victim) {
				char why[SL_MODEL_NAME_MAX + 96];
				snprintf(why, sizeof(why), "%s: room for %s",
				         limit, m->name);
				unload(victim, why);
			}
			/* Else every running model is busy: wait for one. */
			return;
		}
		load(app, m, "a request needs it");
	}
}

void sl_app_model_demand(struct sl_app *app, struct sl_model *m)
{
	if (!app->model_section || !m->managed || m->loaded || app->stopping)
		return;
	m->wanted = true;
	start_wanted(app);
}

int sl_app_model_load(struct sl_app *app, struct sl_model *m, char *why,
                      size_t size)
{
	if (!m->managed) {
		snprintf(why, size,
		         "model %s is remote: its llama-servers run without "
		         "sluice",
		         m->name);
		return SL_EINVAL;
	}
	if (m->loaded)
		return 0; /* starting or running already */
	if (m->unloading) {
		snprintf(why, size,
		         "model %s is stopping; load it once it has stopped",
		         m->name);
		return SL_EINVAL;
	}
	if (app->stopping) {
		snprintf(why, size, "sluice is shutting down");
		return SL_EINVAL;
	}
	char limit[64];
	if (!room_for(app, m, limit, sizeof(limit))) {
		snprintf(why, size,
		         "no room for model %s within %s: unload another "
		         "first",
		         m->name, limit);
		return SL_EINVAL;
	}
	load(app, m, "POST /models/load");
	return 0;
}

int sl_app_model_unload(struct sl_app *app, struct sl_model *m, char *why,
                        size_t size)
{
	(void)app;
	if (!m->managed) {
		snprintf(why, size,
		         "model %s is remote: its llama-servers run without "
		         "sluice",
		         m->name);
		return SL_EINVAL;
	}
	if (!m->loaded)
		return 0; /* stopped, or stopping already */
	if (!model_idle(m)) {
		snprintf(why, size,
		         "model %s is in use (requests queued or in flight); "
		         "sluice stops no model under a request: unload it "
		         "once they are done",
		         m->name);
		return SL_EINVAL;
	}
	unload(m, "POST /models/unload");
	return 0;
}

void sl_app_model_used(struct sl_model *m)
{
	struct sl_app *app = m->app;
	m->last_used = ++app->uses;
	const struct sl_model_config *conf = m->conf;
	if (m->loaded && conf && conf->idle_timeout_ms && !app->stopping)
		uv_timer_start(&m->idle_timer, on_idle_timer,
		               conf->idle_timeout_ms, 0);
	/* A model that went idle may make room for one that is wanted. */
	if ((app->max_loaded || app->cfg->memory_budget) && model_idle(m))
		start_wanted(app);
}

static void on_upstream_fatal(struct sl_upstream *u, const char *why)
{
	struct sl_app *app = u->data;
	struct sl_model *m = sl_app_model_of(app, u);
	/* One started on demand fails its requests, not the whole of sluice. */
	if (m && m->late) {
		sl_error("model %s: %s", m->name, why);
		char message[SL_MODEL_NAME_MAX + 64];
		snprintf(message, sizeof(message),
		         "model %s could not start; sluice's log says why",
		         m->name);
		unload(m, "it could not start");
		sl_proxy_fail_queued(m, message);
		return;
	}
	sl_error("%s", why);
	sl_app_stop(app, EXIT_FAILURE);
}

/*
 * The array stays dense, so that an upstream added later (DNS discovery)
 * goes at n_upstreams: the later ones move down and learn their new index.
 */
static void on_upstream_stopped(struct sl_upstream *u)
{
	struct sl_app *app = u->data;
	struct sl_model *m = sl_app_model_of(app, u);
	if (m)
		sl_pool_remove(&m->pool, u);
	/* Later entries move down, in order: each pool stays in index order. */
	for (unsigned i = u->index; i + 1 < app->n_upstreams; i++) {
		app->upstreams[i] = app->upstreams[i + 1];
		app->upstreams[i]->index = i;
	}
	app->upstreams[--app->n_upstreams] = NULL;
	app->upstreams_full = false;
	if (m && m->unloading && m->pool.n == 0) {
		m->unloading = false;
		sl_info("model %s: stopped", m->name);
		start_wanted(app);
	}
	free_old_launches(app);
	if (m)
		maybe_free_model(m);
	app_maybe_done(app);
}

/*
 * Ejecting the last usable upstream of a model would serve nobody: see
 * upstream.h. Another model's upstreams cannot take its requests.
 */
static bool may_eject(const struct sl_upstream *u)
{
	const struct sl_app *app = u->data;
	const struct sl_model *m = sl_app_model_of(app, u);
	return m && sl_pool_other_usable(&m->pool, u);
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
	for (unsigned i = 0; i < app->n_models; i++) {
		uv_close((uv_handle_t *)&app->models[i]->sched_timer, NULL);
		uv_close((uv_handle_t *)&app->models[i]->idle_timer, NULL);
	}
	for (struct sl_model *m = app->retired; m; m = m->next_retired) {
		if (m->closing)
			continue;
		m->closing = true;
		uv_close((uv_handle_t *)&m->sched_timer, NULL);
		uv_close((uv_handle_t *)&m->idle_timer, NULL);
	}
	uv_close((uv_handle_t *)&app->flush_timer, NULL);
	uv_close((uv_handle_t *)&app->reap_timer, NULL);
	uv_close((uv_handle_t *)&app->coalesce_timer, NULL);
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
	close_discoveries(app);
	/* Signals stay watched (unref'd) so a second one can hurry us. */
	uv_unref((uv_handle_t *)&app->sigint);
	uv_unref((uv_handle_t *)&app->sigterm);
	uv_signal_stop(&app->sighup);
	if (exit_code == EXIT_SUCCESS && app->http.loop &&
	    app->cfg->drain_timeout_ms > 0) {
		if (app->exchanges > 0 || sl_http_server_busy(&app->http) > 0)
			sl_info("draining: waiting up to %.1f s for %u "
			        "requests in flight",
			        (double)app->cfg->drain_timeout_ms / 1000.0,
			        app->exchanges);
		/* New requests get 503 and /ready says 503 meanwhile. */
		sl_http_server_drain(&app->http);
		sl_proxy_end_watches(app, NULL, "sluice is shutting down");
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
	/* A tenant's request is over: its place, its tokens, its usage. */
	if (in->tenant) {
		struct sl_ending e = {
		    .counted = in->counted,
		    .used = in->upstream[0] != '\0',
		    .ran_on = in->ran_on,
		    .model = in->model,
		    .prompt_tokens = in->prompt_tokens,
		    .completion_tokens = in->tokens,
		    .reserved = in->tokens_reserved,
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
	    SL_LOG_NUM("total_ms", (long long)(seconds * 1000)),
	    SL_LOG_NUM("tokens", (long long)in->tokens),
	    SL_LOG_NUM("bytes", (long long)req->bytes_sent),
	    SL_LOG_STR("upstream", in->upstream[0] ? in->upstream : NULL),
	    SL_LOG_STR("outcome", outcome),
	    SL_LOG_STR("key", in->key),
	};
	/* The key's name ends the line of a tenant's request only. */
	size_t n = sizeof(f) / sizeof(f[0]) - (in->key ? 0 : 1);
	sl_log_fields(SL_LOG_INFO, "access", f, n);
	sl_app_maybe_drained(app);
}

/* ---- /health ---- */

/* A model for /health: its state, names, queue and upstreams. */
static json_t *model_json(const struct sl_model *m)
{
	json_t *aliases = json_array(), *ups = json_array();
	for (unsigned k = 0; m->aliases && k < m->aliases->count; k++)
		json_array_append_new(aliases,
		                      json_string(m->aliases->items[k]));
	unsigned inflight = 0;
	for (unsigned i = 0; i < m->pool.n; i++) {
		json_array_append_new(ups,
		                      json_string(m->pool.members[i]->name));
		inflight += m->pool.members[i]->inflight;
	}
	return json_pack("{s:s, s:s, s:o, s:i, s:i, s:o}", "name", m->name,
	                 "state", sl_model_state(m), "aliases", aliases,
	                 "queued", (json_int_t)sl_sched_depth(&m->sched),
	                 "inflight", (json_int_t)inflight, "upstreams", ups);
}

json_t *sl_app_health_json(const struct sl_app *app, bool *any_ready)
{
	json_t *ups = json_array(), *models = json_array();
	*any_ready = false;
	for (unsigned i = 0; i < SL_MAX_UPSTREAMS; i++) {
		const struct sl_upstream *u = app->upstreams[i];
		if (!u)
			continue;
		*any_ready |= sl_upstream_is_ready(u);
		json_array_append_new(ups, sl_upstream_json(u));
	}
	/* A model that starts on demand can serve: sluice is ready. */
	for (unsigned i = 0; app->model_section && i < app->n_models; i++) {
		const struct sl_model *m = app->models[i];
		*any_ready |= m->managed && !m->loaded && !m->unloading;
	}
	for (unsigned i = 0; i < app->n_models; i++)
		json_array_append_new(models, model_json(app->models[i]));
	uint64_t uptime =
	    (uv_now((uv_loop_t *)&app->loop) - app->start_ms) / 1000;
	unsigned queued = sl_app_queue_depth(app);
	return json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:b, s:s, s:o, s:o}",
	                 "status", *any_ready ? "ok" : "unavailable", "state",
	                 app->stopping ? "draining" : "running", "version",
	                 SL_VERSION, "uptime_s", (json_int_t)uptime, "queued",
	                 (json_int_t)queued, "inflight",
	                 (json_int_t)(app->exchanges - queued), "demo_model",
	                 app->demo, "default_model",
	                 app->default_model ? app->default_model->name : "",
	                 "models", models, "upstreams", ups);
}

/* ---- start-up ---- */

/* Whether `args` already give llama-server its model's alias. */
static bool args_name_model(const struct sl_strlist *args)
{
	for (unsigned i = 0; i < args->count; i++)
		if (strcmp(args->items[i], "--alias") == 0 ||
		    strcmp(args->items[i], "-a") == 0 ||
		    strncmp(args->items[i], "--alias=", 8) == 0)
			return true;
	return false;
}

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

static struct sl_model *model_new(struct sl_app *app, char *name,
                                  const struct sl_model_config *conf)
{
	const struct sl_config *cfg = app->cfg;
	struct sl_model *m = sl_xcalloc(1, sizeof(*m));
	m->app = app;
	m->name = name;
	if (conf) {
		m->conf = sl_xcalloc(1, sizeof(*m->conf));
		sl_model_config_copy(m->conf, conf);
		m->aliases = &m->conf->aliases;
	}
	struct sl_sched_config sched_cfg = {
	    .aging_rate = cfg->aging_rate,
	    .window_ms = cfg->batch_window_ms,
	    .max_batch = cfg->max_batch,
	    .max_queue =
	        conf && conf->has_max_queue ? conf->max_queue : cfg->max_queue,
	    .queue_timeout_ms = conf && conf->has_queue_timeout
	                            ? conf->queue_timeout_ms
	                            : cfg->queue_timeout_ms,
	    .urgent_bypass = cfg->urgent_bypass,
	    .urgent_reserve = cfg->urgent_reserve,
	};
	sl_sched_init(&m->sched, &sched_cfg, &sched_ops, m, uv_now(&app->loop));
	uv_timer_init(&app->loop, &m->sched_timer);
	m->sched_timer.data = m;
	uv_timer_init(&app->loop, &m->idle_timer);
	m->idle_timer.data = m;
	app->models[app->n_models++] = m;
	return m;
}

static void model_free(struct sl_model *m)
{
	if (m->conf) {
		sl_model_config_clear(m->conf);
		free(m->conf);
	}
	sl_sched_free(&m->sched);
	sl_strlist_clear(&m->llama_args);
	free(m->upstream_cfg);
	free(m->exe);
	free(m->file);
	free(m->name);
	free(m);
}

/*
 * What a managed model's llama-servers are started with: the global
 * options, with the model's slots, ctx-size and args, its hf-repo, and
 * its name as llama-server's alias, so that llama-server's own /v1/models
 * and /props name it as clients do.
 */
static void plan_upstream_cfg(struct sl_model *m)
{
	const struct sl_config *cfg = m->app->cfg;
	const struct sl_model_config *conf = m->conf;
	struct sl_config *c = sl_xmalloc(sizeof(*c));
	*c = *cfg;
	for (unsigned i = 0; i < cfg->llama_args.count; i++)
		sl_strlist_push(&m->llama_args, cfg->llama_args.items[i]);
	if (conf) {
		c->slots = conf->slots ? conf->slots : cfg->slots;
		c->ctx_size = conf->ctx_size ? conf->ctx_size : cfg->ctx_size;
		for (unsigned i = 0; i < conf->args.count; i++)
			sl_strlist_push(&m->llama_args, conf->args.items[i]);
		if (conf->hf_repo) {
			sl_strlist_push(&m->llama_args, "--hf-repo");
			sl_strlist_push(&m->llama_args, conf->hf_repo);
		}
	}
	if (!args_name_model(&m->llama_args)) {
		sl_strlist_push(&m->llama_args, "--alias");
		sl_strlist_push(&m->llama_args, m->name);
	}
	c->llama_args = m->llama_args;
	m->upstream_cfg = c;
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
	plan_upstream_cfg(m);
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
	struct sl_model *m = model_new(app, one_model_name(app, file), NULL);
	int rc = managed ? plan_managed(app, m, cache, file) : 0;
	free(demo_file);
	app->default_model = m;
	return rc;
}

/* The models of a models: section, and the default among them. */
static int plan_models(struct sl_app *app, const char *cache)
{
	const struct sl_config *cfg = app->cfg;
	app->model_section = true;
	for (unsigned i = 0; i < cfg->n_models; i++) {
		const struct sl_model_config *conf = &cfg->models[i];
		struct sl_model *m =
		    model_new(app, sl_xstrdup(conf->name), conf);
		if (sl_model_config_managed(conf) &&
		    plan_managed(app, m, cache, conf->file) != 0)
			return SL_EINVAL;
	}
	app->default_model = app->models[0];
	if (cfg->default_model[0])
		app->default_model = sl_app_find_model(app, cfg->default_model);
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
 * Starts one upstream of `m`: a managed llama-server when url is NULL.
 * `name`, when given, replaces the upstream's own ("managed" or its URL)
 * in /health, the metrics and ?upstream=.
 */
static int add_upstream(struct sl_app *app, struct sl_model *m, const char *url,
                        const char *name)
{
	unsigned index = app->n_upstreams; /* dense: see app.h */
	if (index == SL_MAX_UPSTREAMS) {
		sl_error("too many upstreams: at most %d", SL_MAX_UPSTREAMS);
		return SL_EINVAL;
	}
	struct sl_managed_spec spec = {.exe = m->exe, .model = m->file};
	struct sl_upstream *u = sl_upstream_new(
	    &app->loop, &app->curl, url ? app->cfg : m->upstream_cfg,
	    url ? NULL : &spec, url, &upstream_hooks, app);
	if (name) {
		free(u->name);
		u->name = sl_xstrdup(name);
	}
	u->index = index;
	app->upstreams[index] = u;
	app->n_upstreams++;
	if (sl_pool_add(&m->pool, u) != 0) {
		sl_error("model %s: too many upstreams: at most %d", m->name,
		         SL_POOL_MAX);
		return SL_EINVAL;
	}
	int rc = sl_upstream_start(u);
	if (rc != 0)
		sl_error("cannot start %s: %s", url ? u->url : m->exe,
		         sl_strerror(rc));
	return rc;
}

/*
 * Starts a managed model of a models: section now (`why` says what for the
 * log), unless it waits for its first request: preload: false, or no room
 * within --max-loaded and --memory-budget.
 */
static void preload(struct sl_app *app, struct sl_model *m, const char *why)
{
	char limit[64];
	if (!m->managed)
		return;
	if (!m->conf->preload)
		sl_info("model %s: stopped until a request needs it "
		        "(preload: false)",
		        m->name);
	else if (!room_for(app, m, limit, sizeof(limit)))
		sl_info("model %s: stopped until a request needs it (%s)",
		        m->name, limit);
	else
		load(app, m, why);
}

/* Every model's upstreams, in the order of the configuration. */
static int start_models(struct sl_app *app)
{
	const struct sl_config *cfg = app->cfg;
	int rc = 0;
	if (!app->model_section) {
		struct sl_model *m = app->models[0];
		if (m->managed)
			rc = add_upstream(app, m, NULL, NULL);
		for (unsigned i = 0; rc == 0 && i < cfg->upstreams.count; i++)
			rc =
			    add_upstream(app, m, cfg->upstreams.items[i], NULL);
		return rc;
	}
	for (unsigned i = 0; rc == 0 && i < app->n_models; i++) {
		struct sl_model *m = app->models[i];
		const struct sl_model_config *conf = m->conf;
		preload(app, m, "preload");
		for (unsigned k = 0; rc == 0 && k < conf->upstreams.count; k++)
			rc = add_upstream(app, m, conf->upstreams.items[k],
			                  NULL);
	}
	return app->stopping ? SL_EINVAL : rc;
}

/* ---- upstreams that come and go (DNS discovery) ---- */

struct sl_upstream *sl_app_add_upstream(struct sl_app *app, struct sl_model *m,
                                        const char *url, const char *origin)
{
	if (app->n_upstreams >= SL_MAX_UPSTREAMS) {
		char *shown = sl_url_shown(url);
		if (!app->upstreams_full)
			sl_warn("upstream %s (from %s) left out: sluice holds "
			        "at most %d upstreams",
			        shown, origin ? origin : "the configuration",
			        SL_MAX_UPSTREAMS);
		free(shown);
		app->upstreams_full = true;
		return NULL;
	}
	struct sl_upstream *u = sl_upstream_new(
	    &app->loop, &app->curl, app->cfg, NULL, url, &upstream_hooks, app);
	u->origin = origin ? sl_xstrdup(origin) : NULL;
	u->index = app->n_upstreams;
	app->upstreams[app->n_upstreams++] = u;
	sl_pool_add(&m->pool, u);
	sl_info("upstream %s added (from %s); checking it", u->url,
	        origin ? origin : "the configuration");
	/* A remote upstream's start only schedules its first check. */
	sl_upstream_start(u);
	return u;
}

static void on_reap_timer(uv_timer_t *t)
{
	struct sl_app *app = t->data;
	for (unsigned i = 0; i < app->n_upstreams; i++) {
		struct sl_upstream *u = app->upstreams[i];
		if (u->draining && u->inflight == 0 && !u->stopping) {
			sl_info("upstream %s drained; removing it", u->url);
			sl_proxy_end_watches(app, u, "its upstream is going");
			/* on_upstream_stopped takes it out of the array. */
			sl_upstream_stop(u, false);
		}
	}
}

/*
 * Draining upstreams with nothing left in flight are stopped, from a timer
 * of their own: this runs whenever a request lets go of its upstream, and
 * that may be inside the upstream's own callbacks, where stopping it would
 * pull its handles from under it. At shutdown every upstream stops anyway.
 */
static void stop_drained(struct sl_app *app)
{
	if (app->front_closing)
		return;
	for (unsigned i = 0; i < app->n_upstreams; i++) {
		const struct sl_upstream *u = app->upstreams[i];
		if (u->draining && u->inflight == 0 && !u->stopping) {
			uv_timer_start(&app->reap_timer, on_reap_timer, 0, 0);
			return;
		}
	}
}

void sl_app_retire_upstream(struct sl_app *app, struct sl_upstream *u)
{
	if (u->draining || u->stopping)
		return;
	u->draining = true;
	sl_info("upstream %s (from %s) is going: no new work for it, %u "
	        "requests in flight there finish first",
	        u->url, u->origin ? u->origin : "the configuration",
	        u->inflight);
	stop_drained(app);
}

/* The upstream at `url` that `origin` added and still holds, or NULL. */
static struct sl_upstream *find_discovered(struct sl_app *app, const char *url,
                                           const char *origin)
{
	for (unsigned i = 0; i < app->n_upstreams; i++) {
		struct sl_upstream *u = app->upstreams[i];
		if (!u->stopping && u->origin &&
		    strcmp(u->origin, origin) == 0 &&
		    strcmp(u->request_url, url) == 0)
			return u;
	}
	return NULL;
}

static void discovered_url(struct sl_discovery *d, const char *addr, char *url,
                           size_t url_size, char *origin, size_t origin_size)
{
	sl_discovery_url(addr, sl_discovery_port(d), url, url_size);
	snprintf(origin, origin_size, "dns:%s", sl_discovery_target(d));
}

static void on_address_added(struct sl_discovery *d, const char *addr)
{
	struct sl_model *m = sl_discovery_data(d);
	struct sl_app *app = m->app;
	char url[128], origin[SL_DISCOVERY_NAME_MAX + 16];
	discovered_url(d, addr, url, sizeof(url), origin, sizeof(origin));
	struct sl_upstream *u = find_discovered(app, url, origin);
	if (!u) {
		sl_app_add_upstream(app, m, url, origin);
	} else if (u->draining) {
		/* Back in the answer before its drain ended: keep it. */
		u->draining = false;
		sl_info("upstream %s is back in %s; it takes work again", url,
		        origin);
		sl_app_kick_scheduler(app);
	}
}

static void on_address_removed(struct sl_discovery *d, const char *addr)
{
	struct sl_model *m = sl_discovery_data(d);
	struct sl_app *app = m->app;
	char url[128], origin[SL_DISCOVERY_NAME_MAX + 16];
	discovered_url(d, addr, url, sizeof(url), origin, sizeof(origin));
	struct sl_upstream *u = find_discovered(app, url, origin);
	if (u)
		sl_app_retire_upstream(app, u);
}

static void on_discovery_closed(struct sl_discovery *d)
{
	struct sl_model *m = sl_discovery_data(d);
	struct sl_app *app = m->app;
	for (unsigned i = 0; i < app->n_discoveries; i++)
		if (app->discoveries[i] == d)
			app->discoveries[i] = NULL;
	if (m->discovery == d)
		m->discovery = NULL;
	m->discoveries_open--;
	maybe_free_model(m);
}

static const struct sl_discovery_hooks discovery_hooks = {
    .on_added = on_address_added,
    .on_removed = on_address_removed,
    .on_closed = on_discovery_closed,
};

/* A discovery of `target` whose addresses join model `m`, started. */
static struct sl_discovery *follow(struct sl_app *app, struct sl_model *m,
                                   const char *target)
{
	const struct sl_config *cfg = app->cfg;
	char err[512];
	struct sl_discovery *d = sl_discovery_new(
	    &app->loop, target, cfg->dns_server, cfg->dns_refresh_ms,
	    &discovery_hooks, m, err, sizeof(err));
	if (!d) {
		sl_error("%s", err);
		return NULL;
	}
	m->discoveries_open++;
	/* Listed for the metrics (exposition.c): a free place, or a new one. */
	unsigned i = 0;
	while (i < app->n_discoveries && app->discoveries[i])
		i++;
	if (i == app->n_discoveries) {
		app->discoveries =
		    sl_xrealloc(app->discoveries, (i + 1) * sizeof(d));
		app->n_discoveries++;
	}
	app->discoveries[i] = d;
	sl_info("model %s: following the addresses of %s every %.1f s", m->name,
	        target, (double)cfg->dns_refresh_ms / 1000.0);
	sl_discovery_start(d);
	return d;
}

static int start_discoveries(struct sl_app *app)
{
	const struct sl_config *cfg = app->cfg;
	for (unsigned i = 0; i < app->n_models; i++) {
		struct sl_model *m = app->models[i];
		if (!m->conf || !m->conf->dns)
			continue;
		m->discovery = follow(app, m, m->conf->dns);
		if (!m->discovery)
			return SL_EINVAL;
	}
	/* The one model's (models_config.h refuses them beside models:). */
	for (unsigned i = 0; i < cfg->upstream_dns.count; i++)
		if (!follow(app, app->default_model,
		            cfg->upstream_dns.items[i]))
			return SL_EINVAL;
	return 0;
}

/* Stopping: the upstreams stay as they are now. */
static void close_discoveries(struct sl_app *app)
{
	for (unsigned i = 0; i < app->n_discoveries; i++) {
		struct sl_discovery *d = app->discoveries[i];
		app->discoveries[i] = NULL; /* closed once */
		if (d)
			sl_discovery_close(d);
	}
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

/*
 * A keys: section that lists no key, with no --api-key: authentication is
 * on (keys.h, `required`) and no key opens it, so every client request
 * gets 401. Said at start, or by each reload that leaves it so (`when`
 * prefixes the line), since it looks like an outage.
 */
static void warn_if_locked(const struct sl_app *app, const char *when,
                           const struct sl_keys *keys)
{
	if (app->cfg->api_keys.count > 0 ||
	    !sl_tenants_required(&app->tenants) || (keys && keys->n > 0))
		return;
	sl_warn("%skeys: %s and no --api-key is set: every client request is "
	        "refused (401) until a key is added and sluice reloaded (a "
	        "reload never turns authentication off; a restart without "
	        "keys: does)",
	        when, keys ? "lists no key" : "is gone");
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
	if (rc != 0) {
		sl_error("--listen %s: %s", cfg->listen, uv_strerror(rc));
		return rc;
	}
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

/* ---- SIGHUP: reloading the keys and the models ---- */

/*
 * Launch settings that llama-servers started before a reload still point
 * to (sl_upstream.cfg): freed once none of those is left.
 */
struct sl_old_launch {
	struct sl_config *cfg;
	struct sl_strlist args; /* cfg->llama_args */
	struct sl_old_launch *next;
};

static void free_old_launches(struct sl_app *app)
{
	struct sl_old_launch **p = &app->old_launches;
	while (*p) {
		struct sl_old_launch *l = *p;
		bool used = false;
		for (unsigned i = 0; !used && i < app->n_upstreams; i++)
			used = app->upstreams[i]->cfg == l->cfg;
		if (used) {
			p = &l->next;
			continue;
		}
		*p = l->next;
		sl_strlist_clear(&l->args);
		free(l->cfg);
		free(l);
	}
}

static void on_model_handle_closed(uv_handle_t *h)
{
	struct sl_model *m = h->data;
	if (--m->closing_handles > 0)
		return;
	struct sl_app *app = m->app;
	for (struct sl_model **p = &app->retired; *p; p = &(*p)->next_retired)
		if (*p == m) {
			*p = m->next_retired;
			break;
		}
	model_free(m);
}

/*
 * A removed model is freed once nothing refers to it. At shutdown the
 * exchanges let go only after the timers closed: sl_app_run frees what is
 * left then.
 */
static void maybe_free_model(struct sl_model *m)
{
	if (!m->removed || m->closing || m->refs > 0 || m->pool.n > 0 ||
	    m->discoveries_open > 0 || m->app->front_closing)
		return;
	m->closing = true;
	m->closing_handles = 2;
	uv_close((uv_handle_t *)&m->sched_timer, on_model_handle_closed);
	uv_close((uv_handle_t *)&m->idle_timer, on_model_handle_closed);
}

void sl_app_model_ref(struct sl_model *m)
{
	m->refs++;
}

void sl_app_model_release(struct sl_model *m)
{
	m->refs--;
	maybe_free_model(m);
}

/* Lets every upstream of `m` from `origin` (NULL: any) drain and go. */
static void retire_pool(struct sl_model *m, const char *origin)
{
	/* A retirement may stop one at once: walk a copy. */
	struct sl_pool members = m->pool;
	for (unsigned i = 0; i < members.n; i++) {
		struct sl_upstream *u = members.members[i];
		if (!origin || (u->origin && strcmp(u->origin, origin) == 0))
			sl_app_retire_upstream(m->app, u);
	}
}

static void close_model_discovery(struct sl_model *m)
{
	if (!m->discovery)
		return;
	char origin[SL_DISCOVERY_NAME_MAX + 16];
	snprintf(origin, sizeof(origin), "dns:%s",
	         sl_discovery_target(m->discovery));
	for (unsigned i = 0; i < m->app->n_discoveries; i++)
		if (m->app->discoveries[i] == m->discovery)
			m->app->discoveries[i] = NULL;
	sl_discovery_close(m->discovery);
	m->discovery = NULL;
	retire_pool(m, origin);
}

/*
 * A model the file no longer has: new requests get 404 (it is no longer
 * found), those waiting in its queue get 503 (its upstreams are going),
 * and what runs on its upstreams finishes there before they stop.
 */
static void remove_model(struct sl_app *app, struct sl_model *m)
{
	m->removed = true;
	m->loaded = false;
	m->wanted = false;
	uv_timer_stop(&m->idle_timer);
	char message[SL_MODEL_NAME_MAX + 64];
	snprintf(message, sizeof(message),
	         "model %s was removed from sluice's configuration", m->name);
	sl_proxy_fail_queued(m, message);
	close_model_discovery(m);
	retire_pool(m, NULL);
	m->next_retired = app->retired;
	app->retired = m;
	maybe_free_model(m);
}

/*
 * New queue limits for a model's scheduler. Its arrays hold max_queue
 * entries; they are resized to the new limit, or to what waits now when
 * more do (those stay; new arrivals are refused or shed until it drops).
 */
static void set_queue_limits(struct sl_model *m, unsigned max_queue,
                             uint64_t timeout_ms)
{
	struct sl_sched *s = &m->sched;
	size_t n = SL_MAX(max_queue, s->n);
	s->heap = sl_xrealloc(s->heap, n * sizeof(*s->heap));
	s->bottom = sl_xrealloc(s->bottom, n * sizeof(*s->bottom));
	s->batch = sl_xrealloc(s->batch, n * sizeof(*s->batch));
	s->cfg.max_queue = max_queue;
	s->cfg.queue_timeout_ms = timeout_ms;
}

static bool strlist_equal(const struct sl_strlist *a,
                          const struct sl_strlist *b)
{
	if (a->count != b->count)
		return false;
	for (unsigned i = 0; i < a->count; i++)
		if (strcmp(a->items[i], b->items[i]) != 0)
			return false;
	return true;
}

static bool strlist_has(const struct sl_strlist *l, const char *s)
{
	for (unsigned i = 0; i < l->count; i++)
		if (strcmp(l->items[i], s) == 0)
			return true;
	return false;
}

static bool str_equal(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* Whether its llama-servers would be started differently now. */
static bool launch_changed(const struct sl_model_config *a,
                           const struct sl_model_config *b)
{
	return !str_equal(a->file, b->file) ||
	       !str_equal(a->hf_repo, b->hf_repo) || a->slots != b->slots ||
	       a->ctx_size != b->ctx_size || a->replicas != b->replicas ||
	       !strlist_equal(&a->args, &b->args);
}

/* The remote upstream at `url` of `m` listed by `upstreams:`, or NULL. */
static struct sl_upstream *listed_upstream(struct sl_model *m, const char *url)
{
	for (unsigned i = 0; i < m->pool.n; i++) {
		struct sl_upstream *u = m->pool.members[i];
		if (!u->managed && !u->origin && !u->stopping &&
		    strcmp(u->request_url, url) == 0)
			return u;
	}
	return NULL;
}

/* A queue limit as it applies: the model's, else the global option. */
static unsigned max_queue_of(const struct sl_config *cfg,
                             const struct sl_model_config *c)
{
	return c->has_max_queue ? c->max_queue : cfg->max_queue;
}

static uint64_t queue_timeout_of(const struct sl_config *cfg,
                                 const struct sl_model_config *c)
{
	return c->has_queue_timeout ? c->queue_timeout_ms
	                            : cfg->queue_timeout_ms;
}

static void append(char *buf, size_t size, const char *sep, const char *what)
{
	size_t n = strlen(buf);
	if (n < size)
		snprintf(buf + n, size - n, "%s%s", n ? sep : "", what);
}

/*
 * Applies a model's new settings in place; `what` receives the names of
 * what changed ("aliases, upstreams"), empty when nothing did.
 */
static void update_model(struct sl_app *app, struct sl_model *m,
                         const struct sl_model_config *conf, char *what,
                         size_t size)
{
	const struct sl_config *cfg = app->cfg;
	struct sl_model_config *old = m->conf;
	struct sl_model_config *c = sl_xcalloc(1, sizeof(*c));
	sl_model_config_copy(c, conf);
	what[0] = '\0';
	bool relaunch = m->managed && launch_changed(old, c);
	if (!strlist_equal(&old->aliases, &c->aliases))
		append(what, size, ", ", "aliases");
	if (max_queue_of(cfg, old) != max_queue_of(cfg, c) ||
	    queue_timeout_of(cfg, old) != queue_timeout_of(cfg, c)) {
		append(what, size, ", ", "queue limits");
		set_queue_limits(m, max_queue_of(cfg, c),
		                 queue_timeout_of(cfg, c));
	}
	if (old->idle_timeout_ms != c->idle_timeout_ms)
		append(what, size, ", ", "idle-timeout");
	if (old->preload != c->preload)
		append(what, size, ", ", "preload");
	if (relaunch)
		append(what, size, ", ", "launch settings");
	m->conf = c;
	m->aliases = &c->aliases;

	/* A new idle-timeout counts from now. */
	if (old->idle_timeout_ms != c->idle_timeout_ms) {
		if (m->loaded && c->idle_timeout_ms)
			uv_timer_start(&m->idle_timer, on_idle_timer,
			               c->idle_timeout_ms, 0);
		else
			uv_timer_stop(&m->idle_timer);
	}

	/* Remote: the listed upstreams become the new list. */
	bool listed = false;
	for (unsigned i = 0; i < old->upstreams.count; i++) {
		const char *url = old->upstreams.items[i];
		struct sl_upstream *u = listed_upstream(m, url);
		if (u && !strlist_has(&c->upstreams, url)) {
			sl_app_retire_upstream(app, u);
			listed = true;
		}
	}
	for (unsigned i = 0; i < c->upstreams.count; i++) {
		const char *url = c->upstreams.items[i];
		struct sl_upstream *u = listed_upstream(m, url);
		if (u && u->draining) {
			u->draining = false; /* listed again before it went */
			listed = true;
		} else if (!u) {
			listed = true;
			m->late = true; /* see sl_model */
			if (app->n_upstreams >= SL_MAX_UPSTREAMS ||
			    add_upstream(app, m, url, NULL) != 0) {
				char *shown = sl_url_shown(url);
				sl_error("model %s: upstream %s left out: "
				         "sluice holds at most %d upstreams",
				         m->name, shown, SL_MAX_UPSTREAMS);
				free(shown);
			}
		}
	}
	if (listed)
		append(what, size, ", ", "upstreams");
	if (!str_equal(old->dns, c->dns)) {
		append(what, size, ", ", "dns");
		close_model_discovery(m);
		if (c->dns)
			m->discovery = follow(app, m, c->dns);
	}

	/*
	 * New launch settings: the llama-servers running keep the old ones
	 * (kept in old_launches until they have stopped), drain and stop,
	 * while new ones start; a request waits for those meanwhile.
	 */
	if (relaunch) {
		struct sl_old_launch *l = sl_xcalloc(1, sizeof(*l));
		l->cfg = m->upstream_cfg;
		l->args = m->llama_args;
		l->next = app->old_launches;
		app->old_launches = l;
		memset(&m->llama_args, 0, sizeof(m->llama_args));
		free(m->file);
		m->file = c->file ? sl_xstrdup(c->file) : NULL;
		m->bytes = sl_model_bytes(c->file, c->replicas);
		plan_upstream_cfg(m);
		if (m->loaded && !m->unloading) {
			retire_pool(m, NULL);
			load(app, m, "its launch settings changed");
		}
	}
	sl_model_config_clear(old);
	free(old);
}

/* Starts a model a reload added, as start_models does at start-up. */
static void start_added(struct sl_app *app, struct sl_model *m)
{
	const struct sl_model_config *conf = m->conf;
	preload(app, m, "added by a reload");
	if (!m->managed)
		m->late = true; /* see sl_model */
	for (unsigned k = 0; k < conf->upstreams.count; k++)
		if (add_upstream(app, m, conf->upstreams.items[k], NULL) != 0)
			break;
	if (conf->dns)
		m->discovery = follow(app, m, conf->dns);
}

/*
 * What a reload's models need from the machine, checked before anything
 * changes: llama-server and each new or changed model's file. Returns 0,
 * or SL_EINVAL with one line in err.
 */
static int check_models(struct sl_app *app, const struct sl_config *cfg,
                        char **exe, char *err, size_t size)
{
	/* The start-up options (app->cfg): a reload changes only models. */
	for (unsigned i = 0; i < cfg->n_models; i++)
		if (sl_model_config_managed(&cfg->models[i]) &&
		    sl_preflight_model(app->cfg, &cfg->models[i], exe, err,
		                       size) != 0)
			return SL_EINVAL;
	return 0;
}

/* The running model named `name` (not an alias), or NULL. */
static struct sl_model *model_named(struct sl_app *app, const char *name)
{
	for (unsigned i = 0; i < app->n_models; i++)
		if (strcmp(app->models[i]->name, name) == 0)
			return app->models[i];
	return NULL;
}

/*
 * The models: section of a valid re-read, applied: removed models go,
 * new ones start as at start-up, changed ones change in place (a model
 * that turned from managed to remote or back is removed and added). One
 * line says what changed.
 */
static void reload_models(struct sl_app *app, const struct sl_config *cfg,
                          char *exe)
{
	char added[1024] = "", removed[1024] = "", changed[2048] = "";
	bool kinds_changed[SL_MODELS_MAX] = {false};
	/* Removed first: the new ones may need their room. */
	for (unsigned i = 0; i < app->n_models;) {
		struct sl_model *m = app->models[i];
		const struct sl_model_config *c = NULL;
		for (unsigned k = 0; k < cfg->n_models && !c; k++)
			if (strcmp(cfg->models[k].name, m->name) == 0)
				c = &cfg->models[k];
		if (c && sl_model_config_managed(c) == m->managed) {
			i++;
			continue;
		}
		if (c)
			kinds_changed[c - cfg->models] = true;
		else
			append(removed, sizeof(removed), ", ", m->name);
		app->n_models--;
		memmove(&app->models[i], &app->models[i + 1],
		        (app->n_models - i) * sizeof(app->models[0]));
		app->models[app->n_models] = NULL;
		remove_model(app, m);
	}
	struct sl_model *order[SL_MODELS_MAX];
	struct sl_model *fresh[SL_MODELS_MAX];
	unsigned n_fresh = 0;
	for (unsigned k = 0; k < cfg->n_models; k++) {
		const struct sl_model_config *c = &cfg->models[k];
		struct sl_model *m = model_named(app, c->name);
		if (m) {
			char what[256];
			update_model(app, m, c, what, sizeof(what));
			if (what[0]) {
				char item[SL_MODEL_NAME_MAX + 260];
				snprintf(item, sizeof(item), "%s (%s)", c->name,
				         what);
				append(changed, sizeof(changed), "; ", item);
			}
		} else {
			m = model_new(app, sl_xstrdup(c->name), c);
			if (sl_model_config_managed(c)) {
				m->managed = true;
				m->exe = sl_xstrdup(exe);
				m->file = c->file ? sl_xstrdup(c->file) : NULL;
				m->bytes = sl_model_bytes(c->file, c->replicas);
				plan_upstream_cfg(m);
			}
			fresh[n_fresh++] = m;
			char item[SL_MODEL_NAME_MAX + 32];
			snprintf(item, sizeof(item), "%s%s", c->name,
			         kinds_changed[k] ? " (managed or remote now)"
			                          : "");
			append(kinds_changed[k] ? changed : added,
			       kinds_changed[k] ? sizeof(changed)
			                        : sizeof(added),
			       kinds_changed[k] ? "; " : ", ", item);
		}
		order[k] = m;
	}
	memcpy(app->models, order, cfg->n_models * sizeof(order[0]));
	app->n_models = cfg->n_models;
	struct sl_model *def = cfg->default_model[0]
	                           ? sl_app_find_model(app, cfg->default_model)
	                           : app->models[0];
	bool new_default = def != app->default_model;
	app->default_model = def;
	bool new_max = cfg->max_loaded != app->max_loaded;
	app->max_loaded = cfg->max_loaded;
	for (unsigned i = 0; i < n_fresh; i++)
		start_added(app, fresh[i]);
	char line[4096] = "";
	if (added[0])
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
		         "; added: %s", added);
	if (removed[0])
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
		         "; removed: %s", removed);
	if (changed[0])
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
		         "; changed: %s", changed);
	if (new_default)
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
		         "; default-model: %s", def->name);
	if (new_max)
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
		         "; max-loaded: %u", app->max_loaded);
	sl_info("models reloaded: %u model%s%s", app->n_models,
	        app->n_models == 1 ? "" : "s", line[0] ? line : "; no change");
	start_wanted(app);
	sl_app_kick_scheduler(app);
}

/*
 * Each top-level option as --check-config prints it, one entry per
 * option (a list takes several lines), without where it came from.
 */
static char *print_options(const struct sl_config *cfg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		return NULL;
	sl_config_print(cfg, f);
	fclose(f);
	return text;
}

/* The entry of `key` in print_options() text: its start, and its length. */
static const char *option_entry(const char *text, const char *key, size_t *n)
{
	size_t klen = strlen(key);
	for (const char *p = text; p && *p;) {
		const char *eol = strchr(p, '\n');
		if (strncmp(p, key, klen) == 0 && p[klen] == ':') {
			const char *end = eol;
			while (end && (end[1] == ' ' || end[1] == '-'))
				end = strchr(end + 1, '\n');
			*n = end ? (size_t)(end - p) : strlen(p);
			return p;
		}
		p = eol ? eol + 1 : NULL;
	}
	*n = 0;
	return NULL;
}

/* An entry without its "  # source" comments, for comparing. */
static char *entry_value(const char *p, size_t n)
{
	char *s = sl_xasprintf("%.*s", (int)n, p ? p : "");
	char *c;
	while ((c = strstr(s, "  # ")) != NULL) {
		char *eol = strchr(c, '\n');
		memmove(c, eol ? eol : c + strlen(c),
		        strlen(eol ? eol : "") + 1);
	}
	return s;
}

/*
 * Options other than the keys and the models keep their start-up value:
 * one line names those that the file (or the environment) now sets to
 * something else.
 */
static void log_ignored(const struct sl_app *app, const struct sl_config *cfg)
{
	static const char *const reloaded[] = {"default-model", "max-loaded",
	                                       "config", "check-config"};
	char *was = print_options(app->cfg), *now = print_options(cfg);
	char names[1024] = "";
	for (const char *p = now; p && *p;) {
		const char *eol = strchr(p, '\n');
		const char *colon = strchr(p, ':');
		if (p[0] != ' ' && p[0] != '-' && colon &&
		    (!eol || colon < eol)) {
			char key[64];
			snprintf(key, sizeof(key), "%.*s", (int)(colon - p), p);
			bool skip = false;
			for (size_t i = 0; i < SL_ARRAY_SIZE(reloaded); i++)
				skip |= strcmp(key, reloaded[i]) == 0;
			size_t na, nb;
			const char *a = option_entry(was, key, &na);
			const char *b = option_entry(now, key, &nb);
			char *va = entry_value(a, na), *vb = entry_value(b, nb);
			/* The text masks passwords: a new one changes too. */
			bool differs = strcmp(va, vb) != 0 ||
			               (strcmp(key, "upstream") == 0 &&
			                !strlist_equal(&app->cfg->upstreams,
			                               &cfg->upstreams));
			if (!skip && strcmp(key, "models") != 0 &&
			    strcmp(key, "keys") != 0 && differs)
				append(names, sizeof(names), ", ", key);
			free(va);
			free(vb);
		}
		p = eol ? eol + 1 : NULL;
	}
	if (names[0])
		sl_warn("SIGHUP: %s changed; ignored until a restart (a reload "
		        "applies only keys:, models:, default-model and "
		        "max-loaded)",
		        names);
	free(was);
	free(now);
}

static void start_reload(struct sl_app *app);

/*
 * In a worker thread: the configuration is read again from the same
 * sources as at start (its file, the environment, the flags), so that a
 * reload sees exactly what a restart would, without blocking the loop on
 * the file. sl_config_parse() touches nothing shared but its arguments.
 */
static void reload_in_worker(uv_work_t *w)
{
	struct sl_app *app = sl_container_of(w, struct sl_app, reload_work);
	const struct sl_config *cfg = app->cfg;
	app->reload_cfg = sl_xcalloc(1, sizeof(*app->reload_cfg));
	app->reload_rc = sl_config_parse(
	    app->reload_cfg, cfg->sections, cfg->argc, cfg->argv, cfg->envp,
	    app->reload_err, sizeof(app->reload_err));
}

/*
 * Back on the loop: the new keys and models replace the old ones, or,
 * when the file is wrong now, everything stays and one line says why.
 * Every other option keeps its start-up value until a restart.
 */
static void reload_done(uv_work_t *w, int status)
{
	struct sl_app *app = sl_container_of(w, struct sl_app, reload_work);
	struct sl_config *cfg = app->reload_cfg;
	char *exe = NULL;
	char err[1024];
	app->reload_cfg = NULL;
	app->reloading = false;
	if (status != 0)
		sl_error("SIGHUP: not reloaded: %s", uv_strerror(status));
	else if (app->reload_rc != 0)
		sl_error("SIGHUP: %s not reloaded, the old ones stay: %s",
		         app->model_section ? "keys and models" : "keys",
		         app->reload_err);
	else if (app->stopping)
		; /* shutting down: nothing to change */
	else if (app->model_section != (cfg->n_models > 0))
		sl_error("SIGHUP: keys and models not reloaded, the old ones "
		         "stay: %s",
		         app->model_section
		             ? "the models: section is gone; going back to "
		               "one model takes a restart"
		             : "a models: section is new; serving several "
		               "models takes a restart");
	else if (app->model_section &&
	         check_models(app, cfg, &exe, err, sizeof(err)) != 0)
		sl_error("SIGHUP: keys and models not reloaded, the old ones "
		         "stay: %s",
		         err);
	else {
		sl_tenants_install(&app->tenants, cfg->keys, true);
		warn_if_locked(app, "SIGHUP: ", cfg->keys);
		cfg->keys = NULL;
		if (app->model_section)
			reload_models(app, cfg, exe);
		log_ignored(app, cfg);
	}
	free(exe);
	if (cfg) {
		sl_config_free(cfg);
		free(cfg);
	}
	if (app->reload_again && !app->stopping) {
		app->reload_again = false;
		start_reload(app);
	}
}

static void start_reload(struct sl_app *app)
{
	app->reloading = true;
	int rc = uv_queue_work(&app->loop, &app->reload_work, reload_in_worker,
	                       reload_done);
	if (rc != 0) {
		app->reloading = false;
		sl_error("SIGHUP: not reloaded: %s", uv_strerror(rc));
	}
}

static void on_sighup(uv_signal_t *h, int signum)
{
	struct sl_app *app = h->data;
	(void)signum;
	if (app->stopping)
		return;
	/* A second SIGHUP during a reload may follow an edit it missed. */
	if (app->reloading) {
		app->reload_again = true;
		return;
	}
	sl_info("received SIGHUP; reloading the configuration");
	start_reload(app);
}

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
	app->max_loaded = cfg->max_loaded;
	int rc;

	uv_loop_init(&app->loop);
	app->start_ms = uv_now(&app->loop);
	app->created_s = (uint64_t)time(NULL);
	if (plan(app) != 0) {
		for (unsigned i = 0; i < app->n_models; i++) {
			uv_close((uv_handle_t *)&app->models[i]->sched_timer,
			         NULL);
			uv_close((uv_handle_t *)&app->models[i]->idle_timer,
			         NULL);
		}
		uv_run(&app->loop, UV_RUN_DEFAULT);
		uv_loop_close(&app->loop);
		for (unsigned i = 0; i < app->n_models; i++)
			model_free(app->models[i]);
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
	uv_signal_start(&app->sighup, on_sighup, SIGHUP);
	/* The signal alone must not keep the loop running. */
	uv_unref((uv_handle_t *)&app->sighup);
	sl_tenants_install(&app->tenants, cfg->keys, false);
	app->tenants.table_borrowed = true;
	warn_if_locked(app, "", cfg->keys);
	uv_timer_init(&app->loop, &app->drain_timer);
	app->drain_timer.data = app;
	uv_timer_init(&app->loop, &app->flush_timer);
	app->flush_timer.data = app;
	uv_timer_init(&app->loop, &app->reap_timer);
	app->reap_timer.data = app;
	uv_timer_init(&app->loop, &app->coalesce_timer);
	app->coalesce_timer.data = app;

	sl_stats_init(&app->stats);
	sl_h1_init(&app->h1, &app->loop);
	if (cfg->affinity) {
		app->affinity = sl_xmalloc(sizeof(*app->affinity));
		sl_affinity_init(app->affinity);
	}
	rc = sl_curl_init(&app->curl, &app->loop);
	if (rc == 0)
		rc = open_listener(app);
	if (rc == 0)
		rc = start_models(app);
	if (rc == 0)
		rc = start_discoveries(app);
	app->started = true;
	/* Every model starts on demand: nothing to wait for. */
	if (rc == 0 && app->n_upstreams == 0)
		announce_ready(app);
	if (rc != 0)
		sl_app_stop(app, EXIT_FAILURE);

	run_loop_to_end(app);
	sl_tenants_free(&app->tenants);
	int code = app->exit_code;
	for (unsigned i = 0; i < app->n_models; i++)
		model_free(app->models[i]);
	while (app->retired) {
		struct sl_model *m = app->retired;
		app->retired = m->next_retired;
		model_free(m);
	}
	free_old_launches(app);
	free(app->trusted_proxies);
	free(app->discoveries);
	free(app->affinity);
	free(app);
	return code;
}

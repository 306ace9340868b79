/*
 * app_models.c: the models sluice serves, and their upstreams' events.
 *
 * The model table: each model by name (and alias), its queue, its pool of
 * upstreams and its state. A model with a managed llama-server may be
 * loaded on demand and unloaded when idle or when another needs the room
 * (--max-loaded, --memory-budget: the least recently used idle one goes).
 * The upstreams' events (ready, changed, fatal, stopped) come here, through
 * the hooks app.c composes, and kick the model's scheduler when slots free
 * up. Below it only the table of upstreams (app_upstreams.c).
 */
#include "app_models.h"

#include "app_state.h"
#include "app_upstreams.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/fleet/demo_model.h"
#include "sluice/fleet/startup.h"
#include "sluice/relay/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_build_config.h"

/*
 * How long a load whose requests all left goes on before it is stopped,
 * beyond the Retry-After the last one was given: a client that retries
 * when told (or at once, after leaving) finds it still loading rather
 * than starting from nothing.
 */
#define SL_LOAD_CANCEL_GRACE_MS 1000

static void kick_model_timer(uv_timer_t *t);
static void unload(struct sl_model *m, const char *why);

/* ---- upstream events ---- */

void app_announce_ready(struct sl_app *app)
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

void app_upstream_changed(struct sl_upstream *u, enum sl_upstream_state old)
{
	struct sl_app *app = u->data;
	sl_debug("upstream %s: %s -> %s", u->url, sl_upstream_state_name(old),
	         sl_upstream_state_name(u->state));
	if (u->state == SL_UPSTREAM_READY) {
		struct sl_model *m = sl_registry_model_of(&app->registry, u);
		if (m)
			m->load_ready = true; /* loaded: no longer cancelled */
		size_connection_pool(app);
		app_announce_ready(app);
		sl_app_kick_scheduler(app); /* new capacity */
	}
}

/*
 * Free slots across the model's usable upstreams: its capacity. While
 * requests wait, its remote upstreams are asked how busy they are
 * (upstream.h, "Occupancy"): others may hold slots there that sluice counts
 * free. A full queue would refuse the next arrival: then no slot is held
 * back only because the last reading is old.
 */
static unsigned free_slots(void *ctx)
{
	const struct sl_model *m = ctx;
	unsigned depth = sl_sched_depth(&m->sched);
	for (unsigned i = 0; depth > 0 && i < m->pool.n; i++) {
		sl_occupancy_want(m->pool.members[i]);
		if (depth >= m->sched.cfg.max_queue)
			sl_occupancy_press(m->pool.members[i]);
	}
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
    .late = sl_proxy_late,
    .total_slots = total_slots,
};

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

void sl_app_kick_scheduler(struct sl_app *app)
{
	/* Called whenever a request lets go of its upstream. */
	app_stop_drained(app);
	if (app->front_closing)
		return;
	for (unsigned i = 0; i < app->registry.n_models; i++)
		kick_model(app->registry.models[i]);
	/* A removed model's request sent again waits for its upstreams. */
	for (struct sl_model *m = app->registry.retired; m; m = m->next_retired)
		if (!m->closing)
			kick_model(m);
}

struct sl_upstream *
sl_app_pick_upstream(struct sl_app *app, const struct sl_model *m,
                     bool need_slot, const struct sl_upstream *avoid,
                     const struct sl_affinity_key *key,
                     const struct sl_pool_slo *slo, char *why, size_t size)
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
	                 app->affinity && key ? &aff : NULL, slo, why, size);
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
	 * Started on demand: its start is awaited, not refused. So is a
	 * first start at start-up (sl_pool_expected): a client that sends
	 * as soon as sluice listens waits for it in the queue, within
	 * --queue-timeout, and hears at once if it fails (app_upstream_fatal).
	 */
	if (app->registry.model_section && m->managed &&
	    (m->wanted || m->unloading || !m->loaded))
		return true;
	return sl_pool_expected(&m->pool);
}

void app_on_idle_timer(uv_timer_t *t)
{
	struct sl_model *m = t->data;
	/* Busy now: the request that ends it arms the timer again. */
	if (m->loaded && sl_model_idle(m))
		unload(m, "idle-timeout passed");
}

/* Starts the model's llama-servers: its replicas (app_models.h). */
int app_load(struct sl_app *app, struct sl_model *m, const char *why)
{
	const struct sl_model_config *conf = m->conf;
	m->loaded = true;
	m->wanted = false;
	m->late = app->started;
	m->demand_load = false; /* app_start_wanted says when it is */
	m->load_ready = false;
	uv_timer_stop(&m->cancel_timer);
	sl_registry_used(&app->registry, m);
	sl_info("model %s: starting (%s)", m->name, why);
	int rc = 0;
	for (unsigned r = 0; rc == 0 && r < conf->replicas; r++) {
		/* One replica is the model; more are MODEL/1, ... */
		char *name = conf->replicas == 1
		                 ? sl_xstrdup(m->name)
		                 : sl_xasprintf("%s/%u", m->name, r + 1);
		rc = app_add_upstream(app, m, NULL, name);
		free(name);
	}
	if (rc != 0 && app->started)
		unload(m, "it could not start");
	else if (rc == 0 && conf->idle_timeout_ms)
		uv_timer_start(&m->idle_timer, app_on_idle_timer,
		               conf->idle_timeout_ms, 0);
	return rc;
}

/* Stops the model's llama-servers; app_upstream_stopped sees the end. */
static void unload(struct sl_model *m, const char *why)
{
	m->loaded = false;
	uv_timer_stop(&m->idle_timer);
	uv_timer_stop(&m->cancel_timer);
	if (m->pool.n == 0)
		return;
	m->unloading = true;
	sl_info("model %s: stopping (%s)", m->name, why);
	/* A stop may end at once and leave the pool: stop a copy's members. */
	struct sl_pool members = m->pool;
	for (unsigned i = 0; i < members.n; i++) {
		sl_proxy_end_watches(&m->app->relay, members.members[i],
		                     "its model is being stopped");
		sl_upstream_stop(members.members[i], false);
	}
}

/*
 * Stops a load nobody waits for (sl_model_load_abandoned); `room`, when
 * given, names the model it makes room for.
 */
static void cancel_load(struct sl_model *m, const char *room)
{
	char why[SL_MODEL_NAME_MAX + 192];
	snprintf(why, sizeof(why),
	         "load cancelled, nobody waits for it: %s%s%s",
	         m->left_why ? m->left_why : "its requests left",
	         room ? "; " : "", room ? room : "");
	m->loads_cancelled++;
	unload(m, why);
}

static void on_cancel_timer(uv_timer_t *t)
{
	struct sl_model *m = t->data;
	if (!m->app->stopping && sl_model_load_abandoned(m))
		cancel_load(m, NULL);
}

void sl_app_model_left(struct sl_model *m, const char *why, uint64_t retry_ms)
{
	struct sl_app *app = m->app;
	if (app->stopping || app->front_closing || m->closing ||
	    !sl_model_load_abandoned(m))
		return;
	m->left_why = why;
	uv_timer_start(&m->cancel_timer, on_cancel_timer,
	               retry_ms + SL_LOAD_CANCEL_GRACE_MS, 0);
}

/*
 * A load nobody waits for, other than `m`: the first to go when `m`
 * needs room, before any model that is ready (which a request may want
 * next, and which would cost a whole load to bring back), so that its
 * grace never costs another model its place.
 */
static struct sl_model *abandoned_load(struct sl_app *app,
                                       const struct sl_model *m)
{
	for (unsigned i = 0; i < app->registry.n_models; i++) {
		struct sl_model *o = app->registry.models[i];
		if (o != m && sl_model_load_abandoned(o))
			return o;
	}
	return NULL;
}

/*
 * Starts what waiting requests want, in the order of the models, within
 * --max-loaded and --memory-budget (sl_registry_room_for): when a wanted model
 * does not fit, the least recently used idle one stops, and once it has stopped
 * this runs again; with none idle, it waits for one.
 */
void app_start_wanted(struct sl_app *app)
{
	if (app->stopping)
		return;
	for (unsigned i = 0; i < app->registry.n_models; i++) {
		struct sl_model *m = app->registry.models[i];
		/* Wanted while a request waits: one that left wants nothing. */
		if (m->wanted && sl_sched_depth(&m->sched) == 0)
			m->wanted = false;
		if (!m->wanted || m->loaded || m->unloading)
			continue;
		char limit[64];
		if (!sl_registry_room_for(&app->registry, m,
		                          app->cfg->memory_budget, limit,
		                          sizeof(limit))) {
			for (unsigned k = 0; k < app->registry.n_models; k++)
				if (app->registry.models[k]->unloading)
					return; /* room is being made */
			char why[SL_MODEL_NAME_MAX + 96];
			snprintf(why, sizeof(why), "%s: room for %s", limit,
			         m->name);
			struct sl_model *victim = abandoned_load(app, m);
			if (victim) {
				cancel_load(victim, why);
				return;
			}
			victim = sl_registry_lru_idle(&app->registry, m);
			if (victim)
				unload(victim, why);
			/* Else every running model is busy: wait for one. */
			return;
		}
		app_load(app, m, "a request needs it");
		m->demand_load = m->loaded;
	}
}

void sl_app_model_demand(struct sl_app *app, struct sl_model *m)
{
	if (!app->registry.model_section || !m->managed || m->loaded ||
	    app->stopping)
		return;
	m->wanted = true;
	app_start_wanted(app);
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
	if (!sl_registry_room_for(&app->registry, m, app->cfg->memory_budget,
	                          limit, sizeof(limit))) {
		snprintf(why, size,
		         "no room for model %s within %s: unload another "
		         "first",
		         m->name, limit);
		return SL_EINVAL;
	}
	app_load(app, m, "POST /models/load");
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
	if (!sl_model_idle(m)) {
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
	sl_registry_used(&app->registry, m);
	const struct sl_model_config *conf = m->conf;
	if (m->loaded && conf && conf->idle_timeout_ms && !app->stopping)
		uv_timer_start(&m->idle_timer, app_on_idle_timer,
		               conf->idle_timeout_ms, 0);
	/* A model that went idle may make room for one that is wanted. */
	if ((app->registry.max_loaded || app->cfg->memory_budget) &&
	    sl_model_idle(m))
		app_start_wanted(app);
}

bool app_upstream_fatal(struct sl_upstream *u, const char *why)
{
	struct sl_app *app = u->data;
	struct sl_model *m = sl_registry_model_of(&app->registry, u);
	/* One started on demand fails its requests, not the whole of sluice. */
	if (!m || !m->late)
		return false;
	sl_error("model %s: %s", m->name, why);
	char message[SL_MODEL_NAME_MAX + 64];
	snprintf(message, sizeof(message),
	         "model %s could not start; sluice's log says why", m->name);
	unload(m, "it could not start");
	sl_proxy_fail_queued(&m->app->relay, m, message);
	return true;
}

void app_upstream_stopped(struct sl_upstream *u)
{
	struct sl_app *app = u->data;
	struct sl_model *m = sl_registry_model_of(&app->registry, u);
	if (m)
		sl_pool_remove(&m->pool, u);
	app_drop_upstream(app, u);
	if (m && m->unloading && m->pool.n == 0) {
		m->unloading = false;
		sl_info("model %s: stopped", m->name);
		app_start_wanted(app);
	}
	app_free_old_launches(app);
	if (m)
		app_maybe_free_model(m);
}

/*
 * Ejecting the last usable upstream of a model would serve nobody: see
 * upstream.h. Another model's upstreams cannot take its requests.
 */
bool app_may_eject(const struct sl_upstream *u)
{
	const struct sl_app *app = u->data;
	const struct sl_model *m = sl_registry_model_of(&app->registry, u);
	return m && sl_pool_other_usable(&m->pool, u);
}

/* Requests of u's model wait in its queue: its occupancy is polled. */
bool app_upstream_waiting(const struct sl_upstream *u)
{
	const struct sl_app *app = u->data;
	const struct sl_model *m = sl_registry_model_of(&app->registry, u);
	return m && sl_sched_depth(&m->sched) > 0;
}

/* A poll found slots that others let go: the queue may move. */
void app_upstream_capacity(struct sl_upstream *u)
{
	sl_app_kick_scheduler(u->data);
}

struct sl_model *app_model_new(struct sl_app *app, char *name,
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
	    .fair = cfg->fairness != SL_FAIRNESS_OFF,
	    .fair_reserve = cfg->fair_reserve,
	};
	sl_sched_init(&m->sched, &sched_cfg, &sched_ops, m, uv_now(&app->loop));
	uv_timer_init(&app->loop, &m->sched_timer);
	m->sched_timer.data = m;
	uv_timer_init(&app->loop, &m->idle_timer);
	m->idle_timer.data = m;
	uv_timer_init(&app->loop, &m->cancel_timer);
	m->cancel_timer.data = m;
	app->registry.models[app->registry.n_models++] = m;
	return m;
}

void app_model_free(struct sl_model *m)
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
 * What a managed model's llama-servers are started with: the global
 * options, with the model's slots, ctx-size and args, its hf-repo, and
 * its name as llama-server's alias, so that llama-server's own /v1/models
 * and /props name it as clients do.
 */
void app_plan_upstream_cfg(struct sl_model *m)
{
	const struct sl_config *cfg = m->app->cfg;
	const struct sl_model_config *conf = m->conf;
	struct sl_config *c = sl_xmalloc(sizeof(*c));
	*c = *cfg;
	/*
	 * The demo model's text is random: capped, a first request without a
	 * max_tokens ends in about a second rather than running to the end of
	 * its context. First, so that a --llama-arg's own --n-predict wins
	 * (llama-server takes a flag's last value).
	 */
	if (m->app->demo) {
		char n[16];
		snprintf(n, sizeof(n), "%d", SL_DEMO_N_PREDICT);
		sl_strlist_push(&m->llama_args, "--n-predict");
		sl_strlist_push(&m->llama_args, n);
	}
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
 * Starts a managed model of a models: section now (`why` says what for the
 * log), unless it waits for its first request: preload: false, or no room
 * within --max-loaded and --memory-budget.
 */
int app_preload(struct sl_app *app, struct sl_model *m, const char *why)
{
	char limit[64];
	if (!m->managed)
		return 0;
	if (!m->conf->preload)
		sl_info("model %s: stopped until a request needs it "
		        "(preload: false)",
		        m->name);
	else if (!sl_registry_room_for(&app->registry, m,
	                               app->cfg->memory_budget, limit,
	                               sizeof(limit)))
		sl_info("model %s: stopped until a request needs it (%s)",
		        m->name, limit);
	else
		return app_load(app, m, why);
	return 0;
}

static void on_model_handle_closed(uv_handle_t *h)
{
	struct sl_model *m = h->data;
	if (--m->closing_handles > 0)
		return;
	struct sl_app *app = m->app;
	for (struct sl_model **p = &app->registry.retired; *p;
	     p = &(*p)->next_retired)
		if (*p == m) {
			*p = m->next_retired;
			break;
		}
	app_model_free(m);
}

/*
 * A removed model is freed once nothing refers to it. At shutdown the
 * exchanges let go only after the timers closed: sl_app_run frees what is
 * left then.
 */
void app_maybe_free_model(struct sl_model *m)
{
	if (!m->removed || m->closing || m->refs > 0 || m->pool.n > 0 ||
	    m->discoveries_open > 0 || m->app->front_closing)
		return;
	m->closing = true;
	m->closing_handles = APP_MODEL_TIMERS;
	app_close_model_timers(m, on_model_handle_closed);
}

void app_close_model_timers(struct sl_model *m, uv_close_cb cb)
{
	uv_close((uv_handle_t *)&m->sched_timer, cb);
	uv_close((uv_handle_t *)&m->idle_timer, cb);
	uv_close((uv_handle_t *)&m->cancel_timer, cb);
}

void sl_app_model_ref(struct sl_model *m)
{
	m->refs++;
}

void sl_app_model_release(struct sl_model *m)
{
	m->refs--;
	app_maybe_free_model(m);
}

/* Lets every upstream of `m` from `origin` (NULL: any) drain and go. */
void app_retire_pool(struct sl_model *m, const char *origin)
{
	/* A retirement may stop one at once: walk a copy. */
	struct sl_pool members = m->pool;
	for (unsigned i = 0; i < members.n; i++) {
		struct sl_upstream *u = members.members[i];
		if (!origin || (u->origin && strcmp(u->origin, origin) == 0))
			sl_app_retire_upstream(m->app, u);
	}
}

void app_close_model_discovery(struct sl_model *m)
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
	app_retire_pool(m, origin);
}

/*
 * A model the file no longer has: new requests get 404 (it is no longer
 * found), those waiting in its queue get 503 (its upstreams are going),
 * and what runs on its upstreams finishes there before they stop.
 */
void app_remove_model(struct sl_app *app, struct sl_model *m)
{
	m->removed = true;
	m->loaded = false;
	m->wanted = false;
	uv_timer_stop(&m->idle_timer);
	uv_timer_stop(&m->cancel_timer);
	char message[SL_MODEL_NAME_MAX + 64];
	snprintf(message, sizeof(message),
	         "model %s was removed from sluice's configuration", m->name);
	sl_proxy_fail_queued(&m->app->relay, m, message);
	app_close_model_discovery(m);
	app_retire_pool(m, NULL);
	m->next_retired = app->registry.retired;
	app->registry.retired = m;
	app_maybe_free_model(m);
}

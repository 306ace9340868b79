/*
 * app_upstreams.c: the table of upstreams (app_state.h, `upstreams`):
 * each one started, with the hooks app.c composes; drained and stopped
 * when it goes; and the launch settings that llama-servers started before
 * a reload still point to, freed once none does.
 */
#include "app_upstreams.h"

#include "app_state.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/relay/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Starts one upstream of `m`: a managed llama-server when url is NULL.
 * `name`, when given, replaces the upstream's own ("managed" or its URL)
 * in /health, the metrics and ?upstream=.
 */
int app_add_upstream(struct sl_app *app, struct sl_model *m, const char *url,
                     const char *name)
{
	unsigned index = app->n_upstreams; /* dense: see app_state.h */
	if (index == SL_MAX_UPSTREAMS) {
		sl_error("too many upstreams: at most %d", SL_MAX_UPSTREAMS);
		return SL_EINVAL;
	}
	struct sl_managed_spec spec = {.exe = m->exe, .model = m->file};
	struct sl_upstream *u = sl_upstream_new(
	    &app->loop, &app->curl, url ? app->cfg : m->upstream_cfg,
	    url ? NULL : &spec, url, app->upstream_hooks, app);
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
	struct sl_upstream *u =
	    sl_upstream_new(&app->loop, &app->curl, app->cfg, NULL, url,
	                    app->upstream_hooks, app);
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

/*
 * The array stays dense, so that an upstream added later (DNS discovery)
 * goes at n_upstreams: the later ones move down and learn their new index.
 */
void app_drop_upstream(struct sl_app *app, struct sl_upstream *u)
{
	/* Later entries move down, in order: each pool stays in index order. */
	for (unsigned i = u->index; i + 1 < app->n_upstreams; i++) {
		app->upstreams[i] = app->upstreams[i + 1];
		app->upstreams[i]->index = i;
	}
	app->upstreams[--app->n_upstreams] = NULL;
	app->upstreams_full = false;
}

static void on_reap_timer(uv_timer_t *t)
{
	struct sl_app *app = t->data;
	for (unsigned i = 0; i < app->n_upstreams; i++) {
		struct sl_upstream *u = app->upstreams[i];
		if (u->draining && u->inflight == 0 && !u->stopping) {
			sl_info("upstream %s drained; removing it", u->url);
			sl_proxy_end_watches(&app->relay, u,
			                     "its upstream is going");
			/* app_drop_upstream takes it out of the array. */
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
void app_stop_drained(struct sl_app *app)
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
	app_stop_drained(app);
}

void app_free_old_launches(struct sl_app *app)
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

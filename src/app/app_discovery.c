/*
 * app_discovery.c: upstreams that come and go.
 *
 * A model whose upstreams are a DNS name (--upstream-dns, a models:
 * upstream_dns) follows its addresses: one added becomes an upstream, one
 * removed is drained and then stopped once nothing runs on it
 * (app_upstreams.c).
 */
#include "app_discovery.h"

#include "app_models.h"
#include "app_state.h"
#include "app_upstreams.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/relay/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	app_maybe_free_model(m);
}

static const struct sl_discovery_hooks discovery_hooks = {
    .on_added = on_address_added,
    .on_removed = on_address_removed,
    .on_closed = on_discovery_closed,
};

/* A discovery of `target` whose addresses join model `m`, started. */
struct sl_discovery *app_follow(struct sl_app *app, struct sl_model *m,
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

int app_start_discoveries(struct sl_app *app)
{
	const struct sl_config *cfg = app->cfg;
	for (unsigned i = 0; i < app->registry.n_models; i++) {
		struct sl_model *m = app->registry.models[i];
		if (!m->conf || !m->conf->dns)
			continue;
		m->discovery = app_follow(app, m, m->conf->dns);
		if (!m->discovery)
			return SL_EINVAL;
	}
	/* The one model's (models_config.h refuses them beside models:). */
	for (unsigned i = 0; i < cfg->upstream_dns.count; i++)
		if (!app_follow(app, app->registry.default_model,
		                cfg->upstream_dns.items[i]))
			return SL_EINVAL;
	return 0;
}

/* Stopping: the upstreams stay as they are now. */
void app_close_discoveries(struct sl_app *app)
{
	for (unsigned i = 0; i < app->n_discoveries; i++) {
		struct sl_discovery *d = app->discoveries[i];
		app->discoveries[i] = NULL; /* closed once */
		if (d)
			sl_discovery_close(d);
	}
}

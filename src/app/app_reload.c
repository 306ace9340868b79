/*
 * app_reload.c: SIGHUP, the keys and the models reloaded.
 *
 * The configuration is read again off the loop (a worker thread: the file
 * may be slow to read), then applied on it: keys replaced as a whole (and
 * never so that authentication is switched off), models added, changed or
 * removed, their llama-servers restarted only where their launch changed.
 * Options that need a restart are named in the log and left as they were.
 * Here too the warnings a configuration's keys get, at start and at each
 * reload.
 */
#include "app_reload.h"

#include "app_discovery.h"
#include "app_models.h"
#include "app_state.h"
#include "app_upstreams.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/fleet/startup.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void start_reload(struct sl_app *app);

/* ---- what a configuration is warned of ---- */

/*
 * A keys: section that lists no key, with no --api-key: authentication is
 * on (keys.h, `required`) and no key opens it, so every client request
 * gets 401. Said at start, or by each reload that leaves it so (`when`
 * prefixes the line), since it looks like an outage.
 */
void app_warn_if_locked(const struct sl_app *app, const char *when,
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

/*
 * A key whose models: list names a model sluice does not serve can never
 * use it (access.h): most likely a typo, or a list written for a models:
 * section that is not there. Said once per key at start and by each reload
 * (`when` prefixes the line); the key still works for the models it names
 * that exist.
 */
void app_warn_unknown_models(const struct sl_app *app, const char *when)
{
	const struct sl_keys *keys = app->tenants.table;
	for (unsigned k = 0; keys && k < keys->n; k++) {
		const struct sl_key *key = &keys->v[k];
		char names[512];
		struct sl_join j = SL_JOIN(names);
		for (unsigned i = 0; i < key->n_models; i++) {
			const char *name = key->models[i];
			bool served =
			    app->registry.model_section
			        ? sl_registry_find(&app->registry, name) != NULL
			        : strcmp(name,
			                 app->registry.default_model->name) ==
			              0;
			if (served)
				continue;
			sl_join_str(&j, j.len ? ", " : "");
			sl_join_str(&j, name);
		}
		if (j.len == 0)
			continue;
		if (app->registry.model_section)
			sl_warn(
			    "%skeys.%s: models: %s: no such model or alias; "
			    "the key cannot use it",
			    when, key->name, names);
		else
			sl_warn(
			    "%skeys.%s: models: %s: sluice serves one model, "
			    "%s (--model-name), which takes any name in a "
			    "request; a key's list names it by that name",
			    when, key->name, names,
			    app->registry.default_model->name);
	}
}

/* ---- a reload ---- */

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
			uv_timer_start(&m->idle_timer, app_on_idle_timer,
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
			    app_add_upstream(app, m, url, NULL) != 0) {
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
		app_close_model_discovery(m);
		if (c->dns)
			m->discovery = app_follow(app, m, c->dns);
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
		app_plan_upstream_cfg(m);
		if (m->loaded && !m->unloading) {
			app_retire_pool(m, NULL);
			app_load(app, m, "its launch settings changed");
		}
	}
	sl_model_config_clear(old);
	free(old);
}

/* Starts a model a reload added, as start_models (app.c) does at start-up. */
static void start_added(struct sl_app *app, struct sl_model *m)
{
	const struct sl_model_config *conf = m->conf;
	app_preload(app, m, "added by a reload");
	if (!m->managed)
		m->late = true; /* see sl_model */
	for (unsigned k = 0; k < conf->upstreams.count; k++)
		if (app_add_upstream(app, m, conf->upstreams.items[k], NULL) !=
		    0)
			break;
	if (conf->dns)
		m->discovery = app_follow(app, m, conf->dns);
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
	for (unsigned i = 0; i < app->registry.n_models; i++)
		if (strcmp(app->registry.models[i]->name, name) == 0)
			return app->registry.models[i];
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
	for (unsigned i = 0; i < app->registry.n_models;) {
		struct sl_model *m = app->registry.models[i];
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
		app->registry.n_models--;
		memmove(&app->registry.models[i], &app->registry.models[i + 1],
		        (app->registry.n_models - i) *
		            sizeof(app->registry.models[0]));
		app->registry.models[app->registry.n_models] = NULL;
		app_remove_model(app, m);
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
			m = app_model_new(app, sl_xstrdup(c->name), c);
			if (sl_model_config_managed(c)) {
				m->managed = true;
				m->exe = sl_xstrdup(exe);
				m->file = c->file ? sl_xstrdup(c->file) : NULL;
				m->bytes = sl_model_bytes(c->file, c->replicas);
				app_plan_upstream_cfg(m);
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
	memcpy(app->registry.models, order, cfg->n_models * sizeof(order[0]));
	app->registry.n_models = cfg->n_models;
	struct sl_model *def =
	    cfg->default_model[0]
	        ? sl_registry_find(&app->registry, cfg->default_model)
	        : app->registry.models[0];
	bool new_default = def != app->registry.default_model;
	app->registry.default_model = def;
	bool new_max = cfg->max_loaded != app->registry.max_loaded;
	app->registry.max_loaded = cfg->max_loaded;
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
		         "; max-loaded: %u", app->registry.max_loaded);
	sl_info("models reloaded: %u model%s%s", app->registry.n_models,
	        app->registry.n_models == 1 ? "" : "s",
	        line[0] ? line : "; no change");
	app_start_wanted(app);
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

/*
 * In a worker thread: the configuration is read again from the same
 * sources as at start (its file, the environment, the flags), so that a
 * reload sees exactly what a restart would, without blocking the loop on
 * the file. sl_config_parse() touches nothing shared but its arguments.
 * The loop waits for this worker before it can end, so its reads must not
 * wait for good: a FIFO (or any file that is not a regular one) is
 * refused before it is read (sl_fopen_regular). A regular file on a hung
 * network filesystem would still hold it, and the shutdown with it: not
 * handled.
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
		         app->registry.model_section ? "keys and models"
		                                     : "keys",
		         app->reload_err);
	else if (app->stopping)
		; /* shutting down: nothing to change */
	else if (app->registry.model_section != (cfg->n_models > 0))
		sl_error("SIGHUP: keys and models not reloaded, the old ones "
		         "stay: %s",
		         app->registry.model_section
		             ? "the models: section is gone; going back to "
		               "one model takes a restart"
		             : "a models: section is new; serving several "
		               "models takes a restart");
	else if (app->registry.model_section &&
	         check_models(app, cfg, &exe, err, sizeof(err)) != 0)
		sl_error("SIGHUP: keys and models not reloaded, the old ones "
		         "stay: %s",
		         err);
	else {
		sl_tenants_install(&app->tenants, cfg->keys, true);
		app_warn_if_locked(app, "SIGHUP: ", cfg->keys);
		cfg->keys = NULL;
		if (app->registry.model_section)
			reload_models(app, cfg, exe);
		app_warn_unknown_models(app, "SIGHUP: ");
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

void app_on_sighup(uv_signal_t *h, int signum)
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

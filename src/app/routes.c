/* routes.c: the route table and the small handlers that live with it. */
#include "routes.h"

#include "app_state.h"
#include "models_api.h"

#include "sluice/relay/access.h"
#include "sluice/base/common.h"
#include "sluice/ops/exposition.h"
#include "sluice/ops/status.h"
#include "sluice/relay/proxy.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "sl_build_config.h"

typedef void (*route_handler)(struct sl_app *app, struct sl_http_request *req);

struct route {
	const char *path;
	llhttp_method_t method;
	route_handler handler;
	enum sl_access access; /* who may call it */
};

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
	/*
	 * Deadlines (sched/README.md): the factor its TTFT predictions are
	 * admitted on, the answers it was learned from, the bias each part
	 * of a prediction is corrected by, and the requests waiting with a
	 * service level.
	 */
	json_t *slo =
	    json_pack("{s:f, s:I, s:f, s:f, s:I, s:i}", "calibration",
	              sl_predict_calib_factor(&m->calib), "calibration_samples",
	              (json_int_t)m->calib.samples, "wait_bias",
	              sl_predict_bias_wait(&m->bias), "first_bias",
	              sl_predict_bias_first(&m->bias), "bias_samples",
	              (json_int_t)m->bias.samples, "queued",
	              (json_int_t)sl_sched_slo_depth(&m->sched));
	return json_pack("{s:s, s:s, s:o, s:i, s:i, s:o, s:o}", "name", m->name,
	                 "state", sl_model_state(m), "aliases", aliases,
	                 "queued", (json_int_t)sl_sched_depth(&m->sched),
	                 "inflight", (json_int_t)inflight, "upstreams", ups,
	                 "slo", slo);
}

/* The /health document: a new JSON object. */
static json_t *health_json(const struct sl_app *app, bool *any_ready)
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
	for (unsigned i = 0;
	     app->registry.model_section && i < app->registry.n_models; i++) {
		const struct sl_model *m = app->registry.models[i];
		*any_ready |= m->managed && !m->loaded && !m->unloading;
	}
	for (unsigned i = 0; i < app->registry.n_models; i++)
		json_array_append_new(models,
		                      model_json(app->registry.models[i]));
	uint64_t uptime =
	    (uv_now((uv_loop_t *)&app->loop) - app->start_ms) / 1000;
	unsigned queued = sl_registry_queue_depth(&app->registry);
	return json_pack(
	    "{s:s, s:s, s:s, s:i, s:i, s:i, s:b, s:s, s:o, s:o}", "status",
	    *any_ready ? "ok" : "unavailable", "state",
	    app->stopping ? "draining" : "running", "version", SL_VERSION,
	    "uptime_s", (json_int_t)uptime, "queued", (json_int_t)queued,
	    "inflight", (json_int_t)(app->relay.exchanges - queued),
	    "demo_model", app->demo, "default_model",
	    app->registry.default_model ? app->registry.default_model->name
	                                : "",
	    "models", models, "upstreams", ups);
}

static void respond_health(struct sl_app *app, struct sl_http_request *req,
                           bool readiness)
{
	bool ready;
	json_t *doc = health_json(app, &ready);
	char *body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	int status = !readiness || (ready && !app->stopping) ? 200 : 503;
	sl_http_respond(req, status, SL_HTTP_JSON,
	                "Cache-Control: no-store\r\n", body, strlen(body));
	free(body);
}

/* Liveness: the loop answers. The document says how things stand. */
static void handle_health(struct sl_app *app, struct sl_http_request *req)
{
	respond_health(app, req, false);
}

/* Readiness: an upstream is ready and sluice is not draining; else 503. */
static void handle_ready(struct sl_app *app, struct sl_http_request *req)
{
	respond_health(app, req, true);
}

/*
 * /v1/models with a models: section: every configured model (for a key
 * with a models: list, every model it may use), whether its llama-servers
 * are up or not, with its state, in OpenAI's shape. Without
 * one the single model's upstream answers, with llama-server's own fields.
 */
static void respond_models(struct sl_app *app, struct sl_http_request *req)
{
	/* A key with a models: list sees only its own (keys.h). */
	const struct sl_key *key =
	    req->info.tenant ? req->info.tenant->key : NULL;
	json_t *data = json_array();
	for (unsigned i = 0; i < app->registry.n_models; i++) {
		const struct sl_model *m = app->registry.models[i];
		if (key && !sl_access_model_allowed(&app->relay, key, m))
			continue;
		json_t *aliases = json_array();
		for (unsigned k = 0; m->aliases && k < m->aliases->count; k++)
			json_array_append_new(
			    aliases, json_string(m->aliases->items[k]));
		json_array_append_new(
		    data,
		    json_pack("{s:s, s:s, s:I, s:s, s:o, s:s}", "id", m->name,
		              "object", "model", "created",
		              (json_int_t)app->created_s, "owned_by", "sluice",
		              "aliases", aliases, "state", sl_model_state(m)));
	}
	json_t *doc = json_pack("{s:s, s:o}", "object", "list", "data", data);
	char *body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (!body)
		abort(); /* only when memory is gone: sl_xmalloc's rule */
	sl_http_respond(req, 200, SL_HTTP_JSON, NULL, body, strlen(body));
	free(body);
}

/*
 * GET /v1/usage: each key's requests, prompt and generated tokens since
 * start, per model (keys.h), for the admin: the same figures as /metrics'
 * sluice_key_* counters.
 */
static void metrics(struct sl_app *app, struct sl_http_request *req)
{
	sl_exposition_handle(&app->exposition, req);
}

static void handle_usage(struct sl_app *app, struct sl_http_request *req)
{
	json_t *doc = sl_tenants_usage_json(&app->tenants);
	char *body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	sl_http_respond(req, 200, SL_HTTP_JSON, "Cache-Control: no-store\r\n",
	                body, strlen(body));
	free(body);
}

/*
 * The status page and its document (status.h), guarded as /metrics is,
 * with Basic credentials for a browser (access.h); the document carries
 * /health's whole.
 */
static void handle_status(struct sl_app *app, struct sl_http_request *req)
{
	(void)app;
	sl_status_respond_page(req);
}

static void handle_status_json(struct sl_app *app, struct sl_http_request *req)
{
	bool ready;
	sl_status_respond_json(&app->status, req, health_json(app, &ready));
}

/* /v1/health is llama-server's alias of /health, public like it. */
static const struct route routes[] = {
    {"/health", HTTP_GET, handle_health, SL_ACCESS_PUBLIC},
    {"/v1/health", HTTP_GET, handle_health, SL_ACCESS_PUBLIC},
    {"/ready", HTTP_GET, handle_ready, SL_ACCESS_PUBLIC},
    {"/metrics", HTTP_GET, metrics, SL_ACCESS_METRICS},
    {"/status", HTTP_GET, handle_status, SL_ACCESS_STATUS},
    {"/status.json", HTTP_GET, handle_status_json, SL_ACCESS_STATUS},
    {"/v1/usage", HTTP_GET, handle_usage, SL_ACCESS_ADMIN},
};

/*
 * Whether a route for `route_method` answers `m`: its own method, and HEAD
 * wherever GET is answered (RFC 9110, 9.3.2; the server drops the body).
 */
static bool method_matches(llhttp_method_t route_method, llhttp_method_t m)
{
	return route_method == m ||
	       (m == HTTP_HEAD && route_method == HTTP_GET);
}

static void add_allowed(char *allow, size_t size, llhttp_method_t m)
{
	size_t n = strlen(allow);
	snprintf(allow + n, size - n, "%s%s%s", n ? ", " : "",
	         llhttp_method_name(m), m == HTTP_GET ? ", HEAD" : "");
}

/* Whether an endpoint answers `path`: the same, or under its prefix. */
static bool endpoint_matches(const struct sl_endpoint *ep, const char *path)
{
	if (!ep->prefix)
		return strcmp(ep->path, path) == 0;
	size_t n = strlen(ep->path);
	return strncmp(ep->path, path, n) == 0 && path[n] != '\0';
}

/*
 * Whether a path may go to the web UI as is. Its assets have plain names,
 * so only plain characters pass (letters, digits, "-", ".", "_", "~" and
 * "/"), and no "." or ".." segment: a percent-escape, a backslash or a dot
 * segment could reach, once llama-server (or libcurl) decodes or folds it,
 * an endpoint that sluice routes itself with another access level
 * (GET /cors%2Dproxy is the admin /cors-proxy).
 */
static bool ui_path_ok(const char *path)
{
	if (path[strspn(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
	                      "TUVWXYZ0123456789-._~/")] != '\0')
		return false;
	for (const char *seg = path; (seg = strchr(seg, '/'));) {
		seg++;
		size_t n = strcspn(seg, "/");
		if ((n == 1 && seg[0] == '.') ||
		    (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return false;
	}
	return true;
}

/* What a request is routed to. */
enum target_kind {
	TARGET_PREFLIGHT, /* a CORS preflight: answered without a key */
	TARGET_ROUTE,     /* one of sluice's own routes */
	TARGET_MODELS,    /* /v1/models from the models: section */
	TARGET_ENDPOINT,  /* a relayed endpoint */
	TARGET_METHOD,    /* a known path, another method: 405 */
	TARGET_UI,        /* the web UI, relayed */
	TARGET_NOT_FOUND, /* 404 */
};

/* Where a request goes and the access level checked before. */
struct target {
	enum target_kind kind;
	enum sl_access access;
	const struct route *route;    /* TARGET_ROUTE */
	const struct sl_endpoint *ep; /* TARGET_ENDPOINT */
	char allow[128];              /* TARGET_METHOD: the Allow list */
};

/*
 * Routes in this order: a CORS preflight; sluice's own routes; the relayed
 * endpoints; with --ui, any other GET goes to llama-server's web UI. Each
 * has its access level, and so has an unknown path before its 404, as in
 * llama-server (a client without the key learns nothing of which paths
 * exist). Reads the method, path and headers only, never the body, so
 * that the head of a request gets the same verdict as the whole request.
 */
static void find_target(struct sl_app *app, const struct sl_http_request *req,
                        struct target *t)
{
	memset(t, 0, sizeof(*t));
	bool public_path = false; /* a health check's path, another method */
	if (sl_access_is_preflight(&app->relay, req)) {
		t->kind = TARGET_PREFLIGHT;
		return;
	}
	for (size_t i = 0; i < SL_ARRAY_SIZE(routes); i++) {
		if (strcmp(routes[i].path, req->path) != 0)
			continue;
		if (method_matches(routes[i].method, req->method)) {
			t->kind = TARGET_ROUTE;
			t->route = &routes[i];
			t->access = routes[i].access;
			return;
		}
		add_allowed(t->allow, sizeof(t->allow), routes[i].method);
		public_path |= routes[i].access == SL_ACCESS_PUBLIC;
	}
	if (app->registry.model_section &&
	    method_matches(HTTP_GET, req->method) &&
	    (strcmp(req->path, "/v1/models") == 0 ||
	     strcmp(req->path, "/models") == 0)) {
		t->kind = TARGET_MODELS;
		t->access = SL_ACCESS_CLIENT;
		return;
	}
	/*
	 * A proxied endpoint asks its upstream with the endpoint's own method
	 * (a HEAD here is a GET upstream; the body is dropped on the way out).
	 */
	for (unsigned i = 0; i < sl_n_endpoints; i++) {
		const struct sl_endpoint *ep = &sl_endpoints[i];
		if (!endpoint_matches(ep, req->path))
			continue;
		if (method_matches(ep->method, req->method)) {
			t->kind = TARGET_ENDPOINT;
			t->ep = ep;
			t->access =
			    ep->admin ? SL_ACCESS_ADMIN : SL_ACCESS_CLIENT;
			return;
		}
		add_allowed(t->allow, sizeof(t->allow), ep->method);
	}
	/*
	 * llama-server serves its web UI's page at / without a key (the page
	 * asks for one); its assets, like every other path, need one.
	 */
	bool ui = app->cfg->ui && !t->allow[0] &&
	          method_matches(HTTP_GET, req->method) &&
	          ui_path_ok(req->path);
	/* POST /health is a wrong method, not a question for a key. */
	bool public = public_path || (ui && strcmp(req->path, "/") == 0);
	t->access = public ? SL_ACCESS_PUBLIC : SL_ACCESS_CLIENT;
	t->kind = t->allow[0] ? TARGET_METHOD
	          : ui        ? TARGET_UI
	                      : TARGET_NOT_FOUND;
}

void sl_routes_dispatch(struct sl_http_request *req, void *data)
{
	struct sl_app *app = data;
	struct target t;
	find_target(app, req, &t);
	/* A relayed endpoint's request is traced, refused or not. */
	if (t.kind == TARGET_ENDPOINT)
		sl_trace_begin(app->tracer, req, t.ep->path);
	if (t.kind == TARGET_PREFLIGHT) {
		sl_access_preflight(&app->relay, req);
		return;
	}
	if (!sl_access_allow(&app->relay, req, t.access))
		return;
	switch (t.kind) {
	case TARGET_PREFLIGHT: break; /* answered above */
	case TARGET_ROUTE: t.route->handler(app, req); return;
	case TARGET_MODELS: respond_models(app, req); return;
	case TARGET_ENDPOINT:
		if (sl_models_api_owns(app, t.ep))
			sl_models_api_handle(app, req, t.ep);
		else
			sl_proxy_handle(&app->relay, req, t.ep);
		return;
	case TARGET_METHOD: {
		char extra[160];
		snprintf(extra, sizeof(extra), "Allow: %s\r\n", t.allow);
		sl_http_respond_error(
		    req, 405, "invalid_request_error", extra,
		    "method %s is not allowed on %s; allowed: %s",
		    llhttp_method_name(req->method), req->path, t.allow);
		return;
	}
	case TARGET_UI:
		sl_proxy_handle(&app->relay, req, &sl_proxy_ui_endpoint);
		return;
	case TARGET_NOT_FOUND:
		/* Where a browser lands first: say how to get a page there. */
		if (strcmp(req->path, "/") == 0 && !app->cfg->ui)
			sl_http_respond_error(
			    req, 404, "not_found_error", NULL,
			    "no such endpoint: /; llama-server's web UI is "
			    "relayed here only with --ui on, and the API is "
			    "under /v1/ (e.g. POST /v1/chat/completions)");
		else
			sl_http_respond_error(req, 404, "not_found_error", NULL,
			                      "no such endpoint: %s",
			                      req->path);
		return;
	}
}

bool sl_routes_head(struct sl_http_request *req, void *data)
{
	struct sl_app *app = data;
	struct target t;
	find_target(app, req, &t);
	if (t.kind == TARGET_ENDPOINT)
		sl_trace_begin(app->tracer, req, t.ep->path);
	/* The same check dispatch makes first, with the same answers. */
	return t.kind == TARGET_PREFLIGHT ||
	       sl_access_allow(&app->relay, req, t.access);
}

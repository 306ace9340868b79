/* models_api.c: llama-server's router endpoints, sluice's own (see .h). */
#include "models_api.h"

#include "app_models.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/config/models_config.h"

#include <jansson.h>
#include <string.h>

/* What the endpoints' 501s say instead. */
#define MODELS_FROM_FILE                                                       \
	"sluice's models come from its configuration file's models: "          \
	"section: edit it, then send sluice SIGHUP"

bool sl_models_api_owns(const struct sl_app *app, const struct sl_endpoint *ep)
{
	if (!app->registry.model_section)
		return false;
	return strcmp(ep->path, "/models/load") == 0 ||
	       strcmp(ep->path, "/models/unload") == 0 ||
	       strcmp(ep->path, "/models/sse") == 0 ||
	       (strcmp(ep->path, "/models") == 0 && ep->method != HTTP_GET);
}

/*
 * The body's "model", as llama-server reads it: a JSON object whose
 * "model" is a non-empty string. Copied into name (a longer one is cut,
 * and then names no model). Returns false when req has been answered.
 */
static bool body_model(struct sl_http_request *req, char *name, size_t size)
{
	json_error_t jerr;
	json_t *doc = json_loadb(req->body ? req->body : "", req->body_len,
	                         JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
		                      "the body is not JSON: %s (line %d, "
		                      "column %d)",
		                      jerr.text, jerr.line, jerr.column);
		return false;
	}
	const char *model = json_string_value(json_object_get(doc, "model"));
	bool ok = model && model[0];
	if (ok)
		snprintf(name, size, "%s", model);
	json_decref(doc);
	if (!ok)
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
		                      "model must be a non-empty string");
	return ok;
}

void sl_models_api_handle(struct sl_app *app, struct sl_http_request *req,
                          const struct sl_endpoint *ep)
{
	bool load = strcmp(ep->path, "/models/load") == 0;
	if (!load && strcmp(ep->path, "/models/unload") != 0) {
		bool sse = strcmp(ep->path, "/models/sse") == 0;
		sl_http_respond_error(
		    req, 501, "not_supported_error", NULL, "%s %s: %s",
		    llhttp_method_name(req->method), req->path,
		    sse ? "sluice has no model events; /v1/models and /health "
		          "say each model's state"
		        : MODELS_FROM_FILE);
		return;
	}
	char name[SL_MODEL_NAME_MAX + 2];
	if (!body_model(req, name, sizeof(name)))
		return;
	struct sl_model *m = sl_registry_find(&app->registry, name);
	if (!m) {
		sl_proxy_respond_unknown_model(req, name);
		return;
	}
	char why[SL_MODEL_NAME_MAX + 160];
	int rc = load ? sl_app_model_load(app, m, why, sizeof(why))
	              : sl_app_model_unload(app, m, why, sizeof(why));
	if (rc != 0) {
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
		                      "%s", why);
		return;
	}
	static const char ok[] = "{\"success\":true}";
	sl_http_respond(req, 200, SL_HTTP_JSON, NULL, ok, sizeof(ok) - 1);
}

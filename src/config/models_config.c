/*
 * models_config.c: the `models:` section, read from its tree of nodes
 * (config_file.h) into struct sl_model_config, checked value by value,
 * and written back for --check-config.
 */
#include "sluice/config/models_config.h"

#include "sluice/base/common.h"
#include "sluice/config/discovery_syntax.h"
#include "sluice/sched/sched.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Bounds of the per-model numbers, the same as the global options'. */
#define SLOTS_MAX 256u
#define CTX_MIN 64u
#define CTX_MAX (1u << 24)
#define MAX_QUEUE_MAX 1000000u
#define QUEUE_TIMEOUT_MAX_MS (24ull * 3600 * 1000)

bool sl_model_config_managed(const struct sl_model_config *m)
{
	return m->file || m->hf_repo;
}

/*
 * A name or alias: printable ASCII without spaces, quotes or commas, so
 * that it reads the same in a JSON body, a metric label and a log line.
 */
static bool valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > SL_MODEL_NAME_MAX)
		return false;
	for (; *s; s++)
		if (*s <= ' ' || *s > '~' || *s == '"' || *s == '\\' ||
		    *s == ',' || *s == '`')
			return false;
	return true;
}

static int want_scalar(const struct sl_config_node *n, char *err, size_t size)
{
	if (n->kind == SL_CONFIG_NODE_SCALAR)
		return 0;
	return sl_config_node_fail(err, size, n, "expected a single value");
}

static int read_uint(const struct sl_config_node *n, unsigned min, unsigned max,
                     unsigned *out, char *err, size_t size)
{
	if (want_scalar(n, err, size) != 0)
		return SL_EINVAL;
	const char *s = n->text;
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end || errno || v < min || v > max)
		return sl_config_node_fail(err, size, n,
		                           "expected a whole number from %u to "
		                           "%u, got \"%s\"",
		                           min, max, s);
	*out = (unsigned)v;
	return 0;
}

static int read_string(const struct sl_config_node *n, char **out, char *err,
                       size_t size)
{
	if (want_scalar(n, err, size) != 0)
		return SL_EINVAL;
	if (!n->text[0])
		return sl_config_node_fail(err, size, n, "must not be empty");
	*out = sl_xstrdup(n->text);
	return 0;
}

/* A list of scalars (one scalar stands for a list of one). */
static int read_list(const struct sl_config_node *n, unsigned max,
                     struct sl_strlist *out, char *err, size_t size)
{
	if (n->kind == SL_CONFIG_NODE_SCALAR) {
		sl_strlist_push(out, n->text);
		return 0;
	}
	if (n->kind != SL_CONFIG_NODE_LIST)
		return sl_config_node_fail(err, size, n, "expected a list");
	if (n->n > max)
		return sl_config_node_fail(err, size, n, "%u items; at most %u",
		                           n->n, max);
	for (unsigned i = 0; i < n->n; i++) {
		if (n->child[i].kind != SL_CONFIG_NODE_SCALAR)
			return sl_config_node_fail(err, size, &n->child[i],
			                           "expected a single value");
		sl_strlist_push(out, n->child[i].text);
	}
	return 0;
}

/* An http:// or https:// URL with a host, kept without a trailing '/'. */
static int read_url(const struct sl_config_node *n, struct sl_strlist *out,
                    char *err, size_t size)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	bool ok = u &&
	          curl_url_set(u, CURLUPART_URL, n->text, 0) == CURLUE_OK &&
	          curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	          curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	          (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0);
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	if (!ok) {
		/* Its password is no less secret for a typo. */
		char *shown = sl_url_shown(n->text);
		sl_config_node_fail(err, size, n,
		                    "expected an http:// or https:// URL, got "
		                    "\"%s\"",
		                    shown);
		free(shown);
		return SL_EINVAL;
	}
	char *url = sl_xstrdup(n->text);
	size_t len = strlen(url);
	while (len > 0 && url[len - 1] == '/')
		url[--len] = '\0';
	sl_strlist_push(out, url);
	free(url);
	return 0;
}

/* Whether `name` is taken by a model before `upto`, or by its aliases. */
static bool name_taken(const struct sl_config *cfg, unsigned upto,
                       const char *name)
{
	for (unsigned i = 0; i < upto; i++) {
		const struct sl_model_config *m = &cfg->models[i];
		if (strcmp(m->name, name) == 0)
			return true;
		for (unsigned k = 0; k < m->aliases.count; k++)
			if (strcmp(m->aliases.items[k], name) == 0)
				return true;
	}
	return false;
}

/* One model's keys; `m` is zeroed, `n` is its mapping. */
static int read_model(struct sl_config *cfg, unsigned index,
                      const struct sl_config_node *n, char *err, size_t size)
{
	struct sl_model_config *m = &cfg->models[index];
	m->line = n->line;
	m->preload = true;
	if (!valid_name(n->key))
		return sl_config_node_fail(
		    err, size, n,
		    "a model's name must be 1 to %d printable characters "
		    "without spaces, quotes, commas or backslashes",
		    SL_MODEL_NAME_MAX);
	if (name_taken(cfg, index, n->key))
		return sl_config_node_fail(
		    err, size, n, "the name is already another model's alias");
	m->name = sl_xstrdup(n->key);
	if (n->kind != SL_CONFIG_NODE_MAP)
		return sl_config_node_fail(
		    err, size, n,
		    "expected a mapping (model: FILE.gguf, hf-repo: REPO or "
		    "upstreams: [URL, ...], and its settings)");
	int rc = 0;
	for (unsigned i = 0; rc == 0 && i < n->n; i++) {
		const struct sl_config_node *c = &n->child[i];
		const char *k = c->key;
		if (strcmp(k, "model") == 0)
			rc = read_string(c, &m->file, err, size);
		else if (strcmp(k, "hf-repo") == 0)
			rc = read_string(c, &m->hf_repo, err, size);
		else if (strcmp(k, "slots") == 0)
			rc = read_uint(c, 1, SLOTS_MAX, &m->slots, err, size);
		else if (strcmp(k, "ctx-size") == 0)
			rc = read_uint(c, CTX_MIN, CTX_MAX, &m->ctx_size, err,
			               size);
		else if (strcmp(k, "replicas") == 0)
			rc = read_uint(c, 1, SL_MODEL_REPLICAS_MAX,
			               &m->replicas, err, size);
		else if (strcmp(k, "args") == 0)
			rc = read_list(c, UINT32_MAX, &m->args, err, size);
		else if (strcmp(k, "aliases") == 0) {
			rc = read_list(c, SL_MODEL_ALIASES_MAX, &m->aliases,
			               err, size);
			for (unsigned a = 0; rc == 0 && a < m->aliases.count;
			     a++) {
				const char *al = m->aliases.items[a];
				const struct sl_config_node *at =
				    c->kind == SL_CONFIG_NODE_LIST
				        ? &c->child[a]
				        : c;
				if (!valid_name(al))
					rc = sl_config_node_fail(
					    err, size, at,
					    "an alias must be 1 to %d "
					    "printable "
					    "characters without spaces, "
					    "quotes, "
					    "commas or backslashes",
					    SL_MODEL_NAME_MAX);
				else if (name_taken(cfg, index, al) ||
				         strcmp(al, m->name) == 0)
					rc = sl_config_node_fail(
					    err, size, at,
					    "\"%s\" already names a model", al);
				for (unsigned b = 0; rc == 0 && b < a; b++)
					if (strcmp(m->aliases.items[b], al) ==
					    0)
						rc = sl_config_node_fail(
						    err, size, at,
						    "\"%s\" is listed twice",
						    al);
			}
		} else if (strcmp(k, "upstreams") == 0) {
			if (c->kind == SL_CONFIG_NODE_LIST &&
			    c->n > SL_MODEL_UPSTREAMS_MAX)
				rc = sl_config_node_fail(
				    err, size, c, "%u items; at most %u", c->n,
				    SL_MODEL_UPSTREAMS_MAX);
			else if (c->kind == SL_CONFIG_NODE_SCALAR)
				rc = read_url(c, &m->upstreams, err, size);
			else if (c->kind != SL_CONFIG_NODE_LIST)
				rc = sl_config_node_fail(err, size, c,
				                         "expected a list of "
				                         "URLs");
			for (unsigned u = 0;
			     rc == 0 && c->kind == SL_CONFIG_NODE_LIST &&
			     u < c->n;
			     u++) {
				if (c->child[u].kind != SL_CONFIG_NODE_SCALAR)
					rc = sl_config_node_fail(
					    err, size, &c->child[u],
					    "expected a URL");
				else
					rc = read_url(&c->child[u],
					              &m->upstreams, err, size);
			}
			if (rc == 0 && m->upstreams.count == 0)
				rc = sl_config_node_fail(err, size, c,
				                         "the list is empty");
		} else if (strcmp(k, "dns") == 0) {
			/* Followed by the discovery module (discovery.h). */
			char why[256];
			rc = read_string(c, &m->dns, err, size);
			if (rc == 0 &&
			    sl_discovery_parse_target(m->dns, NULL, NULL, why,
			                              sizeof(why)) != 0)
				rc = sl_config_node_fail(err, size, c, "%s",
				                         why);
		} else if (strcmp(k, "preload") == 0) {
			rc = want_scalar(c, err, size);
			if (rc == 0 && strcmp(c->text, "true") != 0 &&
			    strcmp(c->text, "false") != 0)
				rc = sl_config_node_fail(
				    err, size, c,
				    "expected true or false, got \"%s\"",
				    c->text);
			m->preload = rc == 0 && strcmp(c->text, "true") == 0;
		} else if (strcmp(k, "idle-timeout") == 0) {
			rc = want_scalar(c, err, size);
			if (rc == 0 &&
			    (sl_parse_duration_ms(c->text,
			                          &m->idle_timeout_ms) != 0 ||
			     m->idle_timeout_ms > SL_MODEL_IDLE_TIMEOUT_MAX_MS))
				rc = sl_config_node_fail(
				    err, size, c,
				    "expected a duration up to a week "
				    "(\"600\", \"600s\"; 0: never), got "
				    "\"%s\"",
				    c->text);
		} else if (strcmp(k, "slo") == 0) {
			rc = sl_slo_read(c, &m->slo, err, size);
		} else if (strcmp(k, "max-queue") == 0) {
			m->has_max_queue = true;
			rc = read_uint(c, 1, MAX_QUEUE_MAX, &m->max_queue, err,
			               size);
		} else if (strcmp(k, "queue-timeout") == 0) {
			m->has_queue_timeout = true;
			rc = want_scalar(c, err, size);
			if (rc == 0 &&
			    (sl_parse_duration_ms(c->text,
			                          &m->queue_timeout_ms) != 0 ||
			     m->queue_timeout_ms < 1 ||
			     m->queue_timeout_ms > QUEUE_TIMEOUT_MAX_MS))
				rc = sl_config_node_fail(
				    err, size, c,
				    "expected a duration from 1ms to 86400s "
				    "(\"30\", \"30s\", \"500ms\"), got \"%s\"",
				    c->text);
		} else {
			rc = sl_config_node_fail(
			    err, size, c,
			    "unknown key (a model takes model, hf-repo, "
			    "slots, ctx-size, args, replicas, aliases, "
			    "preload, idle-timeout, upstreams, dns, max-queue, "
			    "queue-timeout, slo)");
		}
	}
	if (rc != 0)
		return rc;
	bool managed = sl_model_config_managed(m);
	const struct sl_config_node *up = sl_config_node_get(n, "upstreams");
	const struct sl_config_node *dns = sl_config_node_get(n, "dns");
	if (m->file && m->hf_repo)
		return sl_config_node_fail(err, size,
		                           sl_config_node_get(n, "hf-repo"),
		                           "give model or hf-repo, not both");
	if (managed && (up || dns))
		return sl_config_node_fail(
		    err, size, up ? up : dns,
		    "a model is either managed (model, hf-repo) or remote "
		    "(upstreams, dns), not both");
	if (!managed && !up && !dns)
		return sl_config_node_fail(
		    err, size, n,
		    "says neither where its model is (model: FILE.gguf or "
		    "hf-repo: REPO) nor where it runs (upstreams: [URL] or "
		    "dns: NAME:PORT)");
	static const char *const managed_only[] = {
	    "slots", "ctx-size", "args", "replicas", "preload", "idle-timeout"};
	for (size_t i = 0; !managed && i < SL_ARRAY_SIZE(managed_only); i++) {
		const struct sl_config_node *c =
		    sl_config_node_get(n, managed_only[i]);
		if (c)
			return sl_config_node_fail(
			    err, size, c,
			    "only a managed model (model: or hf-repo:) takes "
			    "it");
	}
	if (managed && !m->replicas)
		m->replicas = 1;
	return 0;
}

int sl_models_config_apply(struct sl_config *cfg,
                           const struct sl_config_node *n, char *err,
                           size_t size)
{
	if (n->kind != SL_CONFIG_NODE_MAP || n->n == 0)
		return sl_config_node_fail(err, size, n,
		                           "expected a mapping of model names "
		                           "to their settings");
	if (n->n > SL_MODELS_MAX)
		return sl_config_node_fail(
		    err, size, n, "%u models; at most %d", n->n, SL_MODELS_MAX);
	sl_models_config_free(cfg);
	cfg->models = sl_xcalloc(n->n, sizeof(*cfg->models));
	cfg->n_models = n->n;
	for (unsigned i = 0; i < n->n; i++) {
		int rc = read_model(cfg, i, &n->child[i], err, size);
		if (rc != 0)
			return rc;
	}
	return 0;
}

bool sl_models_config_runs_tools(const struct sl_config *cfg)
{
	for (unsigned i = 0; i < cfg->n_models; i++)
		if (sl_config_args_enable_tools(&cfg->models[i].args))
			return true;
	return false;
}

const struct sl_model_config *sl_models_config_find(const struct sl_config *cfg,
                                                    const char *name)
{
	for (unsigned i = 0; i < cfg->n_models; i++) {
		const struct sl_model_config *m = &cfg->models[i];
		if (strcmp(m->name, name) == 0)
			return m;
		for (unsigned k = 0; k < m->aliases.count; k++)
			if (strcmp(m->aliases.items[k], name) == 0)
				return m;
	}
	return NULL;
}

int sl_models_config_check(const struct sl_config *cfg, char *err, size_t size)
{
	if (cfg->n_models == 0) {
		if (cfg->default_model[0] && cfg->model_name[0] &&
		    strcmp(cfg->default_model, cfg->model_name) != 0) {
			snprintf(err, size,
			         "--default-model %s: no such model (the one "
			         "model is %s)",
			         cfg->default_model, cfg->model_name);
			return SL_EINVAL;
		}
		return 0;
	}
	const char *clash = cfg->model[0]             ? "--model"
	                    : cfg->upstreams.count    ? "--upstream"
	                    : cfg->upstream_dns.count ? "--upstream-dns"
	                    : cfg->model_name[0]      ? "--model-name"
	                                              : NULL;
	if (clash) {
		snprintf(err, size,
		         "%s: not with a models: section in %s (it describes "
		         "the one model sluice serves without one)",
		         clash, cfg->config_file);
		return SL_EINVAL;
	}
	/*
	 * A reserve that covers every slot of a managed model would leave
	 * its other requests nothing (config.c checks the global --slots).
	 */
	for (unsigned i = 0; i < cfg->n_models; i++) {
		const struct sl_model_config *m = &cfg->models[i];
		unsigned slots = m->slots ? m->slots : cfg->slots;
		if (sl_model_config_managed(m) && !cfg->slots_per_upstream &&
		    sl_config_fixed_reserve(cfg) >= slots) {
			bool urgent = sl_config_fixed_reserve(cfg) ==
			              cfg->urgent_reserve;
			snprintf(err, size,
			         "%s:%u: models.%s.slots: %u; %s %u must be "
			         "less, or only urgent requests could run",
			         cfg->config_file, m->line, m->name, slots,
			         urgent ? "--urgent-reserve"
			                : "--urgent-reserve and --fair-reserve",
			         sl_config_fixed_reserve(cfg));
			return SL_EINVAL;
		}
	}
	if (cfg->default_model[0] &&
	    !sl_models_config_find(cfg, cfg->default_model)) {
		snprintf(err, size,
		         "--default-model %s: no model or alias of that name "
		         "in %s",
		         cfg->default_model, cfg->config_file);
		return SL_EINVAL;
	}
	return 0;
}

/* One item a line: a flow list ("[a, b]") would misread a comma. */
static void print_list(FILE *out, const char *key, const struct sl_strlist *l,
                       bool urls)
{
	if (l->count == 0)
		return;
	fprintf(out, "    %s:\n", key);
	for (unsigned i = 0; i < l->count; i++) {
		fputs("      - ", out);
		/* A URL's password stays out of what is printed. */
		char *url = urls ? sl_url_shown(l->items[i]) : NULL;
		sl_config_file_write_scalar(out, url ? url : l->items[i]);
		free(url);
		fputc('\n', out);
	}
}

void sl_models_config_print(FILE *out, const struct sl_config *cfg)
{
	if (cfg->n_models == 0)
		return;
	fputs("models:\n", out);
	for (unsigned i = 0; i < cfg->n_models; i++) {
		const struct sl_model_config *m = &cfg->models[i];
		fputs("  ", out);
		sl_config_file_write_scalar(out, m->name);
		fputs(":\n", out);
		if (m->file) {
			fputs("    model: ", out);
			sl_config_file_write_scalar(out, m->file);
			fputc('\n', out);
		}
		if (m->hf_repo) {
			fputs("    hf-repo: ", out);
			sl_config_file_write_scalar(out, m->hf_repo);
			fputc('\n', out);
		}
		if (sl_model_config_managed(m)) {
			fprintf(out, "    slots: %u\n",
			        m->slots ? m->slots : cfg->slots);
			fprintf(out, "    ctx-size: %u\n",
			        m->ctx_size ? m->ctx_size : cfg->ctx_size);
			fprintf(out, "    replicas: %u\n", m->replicas);
			print_list(out, "args", &m->args, false);
			fprintf(out, "    preload: %s\n",
			        m->preload ? "true" : "false");
			fputs("    idle-timeout: ", out);
			sl_config_write_duration(out, m->idle_timeout_ms);
			fputc('\n', out);
		}
		print_list(out, "upstreams", &m->upstreams, true);
		if (m->dns) {
			fputs("    dns: ", out);
			sl_config_file_write_scalar(out, m->dns);
			fputc('\n', out);
		}
		print_list(out, "aliases", &m->aliases, false);
		fprintf(out, "    max-queue: %u\n",
		        m->has_max_queue ? m->max_queue : cfg->max_queue);
		fputs("    queue-timeout: ", out);
		sl_config_write_duration(out, m->has_queue_timeout
		                                  ? m->queue_timeout_ms
		                                  : cfg->queue_timeout_ms);
		fputc('\n', out);
		sl_slo_print(out, &m->slo, 4);
	}
}

static void strlist_copy(struct sl_strlist *dst, const struct sl_strlist *src)
{
	for (unsigned i = 0; i < src->count; i++)
		sl_strlist_push(dst, src->items[i]);
}

static char *strdup_or_null(const char *s)
{
	return s ? sl_xstrdup(s) : NULL;
}

void sl_model_config_copy(struct sl_model_config *dst,
                          const struct sl_model_config *src)
{
	*dst = *src;
	dst->name = sl_xstrdup(src->name);
	dst->file = strdup_or_null(src->file);
	dst->hf_repo = strdup_or_null(src->hf_repo);
	dst->dns = strdup_or_null(src->dns);
	memset(&dst->aliases, 0, sizeof(dst->aliases));
	memset(&dst->args, 0, sizeof(dst->args));
	memset(&dst->upstreams, 0, sizeof(dst->upstreams));
	strlist_copy(&dst->aliases, &src->aliases);
	strlist_copy(&dst->args, &src->args);
	strlist_copy(&dst->upstreams, &src->upstreams);
}

void sl_model_config_clear(struct sl_model_config *m)
{
	free(m->name);
	free(m->file);
	free(m->hf_repo);
	free(m->dns);
	sl_strlist_clear(&m->aliases);
	sl_strlist_clear(&m->args);
	sl_strlist_clear(&m->upstreams);
	memset(m, 0, sizeof(*m));
}

void sl_models_config_free(struct sl_config *cfg)
{
	for (unsigned i = 0; i < cfg->n_models; i++)
		sl_model_config_clear(&cfg->models[i]);
	free(cfg->models);
	cfg->models = NULL;
	cfg->n_models = 0;
}

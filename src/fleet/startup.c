/* startup.c: cache directory, llama-server lookup, model checks. */
#include "sluice/fleet/startup.h"

#include "sluice/base/common.h"
#include "sluice/fleet/demo_model.h"
#include "sluice/fleet/upstream.h"
#include "sluice/base/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p, private to the user. */
static int make_dirs(const char *path)
{
	char *p = sl_xstrdup(path);
	int rc = 0;
	for (char *s = p + 1; rc == 0; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, 0700) != 0 && errno != EEXIST)
			rc = -errno;
		*s = c;
		if (c == '\0')
			break;
	}
	free(p);
	return rc;
}

char *sl_cache_dir(const struct sl_config *cfg, char *err, size_t size)
{
	if (cfg->cache_dir[0])
		return sl_xstrdup(cfg->cache_dir);
	const char *xdg = getenv("XDG_CACHE_HOME");
	if (xdg && xdg[0] == '/')
		return sl_xasprintf("%s/sluice", xdg);
	const char *home = getenv("HOME");
	if (home && home[0] == '/')
		return sl_xasprintf("%s/.cache/sluice", home);
	snprintf(err, size,
	         "no cache directory: set --cache-dir, XDG_CACHE_HOME or HOME");
	return NULL;
}

static bool is_executable_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
	       access(path, X_OK) == 0;
}

/* `name` looked up in $PATH; NULL when absent. */
static char *search_path(const char *name)
{
	const char *path = getenv("PATH");
	if (!path)
		return NULL;
	char *copy = sl_xstrdup(path), *save = NULL, *found = NULL;
	for (char *dir = strtok_r(copy, ":", &save); dir && !found;
	     dir = strtok_r(NULL, ":", &save)) {
		char *candidate = sl_xasprintf("%s/%s", *dir ? dir : ".", name);
		if (is_executable_file(candidate))
			found = candidate;
		else
			free(candidate);
	}
	free(copy);
	return found;
}

char *sl_find_llama_server(const struct sl_config *cfg, const char *cache_dir,
                           char *err, size_t size)
{
	const char *given = cfg->llama_server;
	if (given[0]) {
		char *found = strchr(given, '/') ? NULL : search_path(given);
		if (found)
			return found;
		if (is_executable_file(given))
			return sl_xstrdup(given);
		snprintf(err, size, "--llama-server %s: %s", given,
		         access(given, F_OK) == 0 ? "not an executable file"
		                                  : "no such file");
		return NULL;
	}
	char *found = search_path("llama-server");
	if (found)
		return found;
	char *cached = sl_xasprintf("%s/llama.cpp/bin/llama-server", cache_dir);
	if (is_executable_file(cached))
		return cached;
	snprintf(err, size,
	         "no llama-server found: not on PATH and not in %s; run "
	         "./deploy/setup.sh, or pass --llama-server PATH",
	         cached);
	free(cached);
	return NULL;
}

bool sl_llama_args_choose_model(const struct sl_config *cfg)
{
	static const char *const model_flags[] = {
	    "-m",   "--model",   "-mu", "--model-url",   "-hf",
	    "-hfr", "--hf-repo", "-dr", "--docker-repo",
	};
	for (unsigned i = 0; i < cfg->llama_args.count; i++) {
		const char *a = cfg->llama_args.items[i];
		size_t len = strcspn(a, "=");
		for (size_t j = 0; j < SL_ARRAY_SIZE(model_flags); j++)
			if (strlen(model_flags[j]) == len &&
			    strncmp(a, model_flags[j], len) == 0)
				return true;
	}
	return false;
}

int sl_check_model_file(const char *path, char *err, size_t size)
{
	/* Not a FIFO: a reload checks a new model's file on the loop. */
	const char *why;
	FILE *f = sl_fopen_regular(path, &why);
	if (!f) {
		snprintf(err, size, "--model %s: %s", path, why);
		return SL_EINVAL;
	}
	char magic[4] = {0};
	size_t n = fread(magic, 1, sizeof(magic), f);
	fclose(f);
	if (n != sizeof(magic) || memcmp(magic, "GGUF", 4) != 0) {
		snprintf(err, size,
		         "--model %s: not a GGUF model file (it does not start "
		         "with \"GGUF\")",
		         path);
		return SL_EINVAL;
	}
	return 0;
}

char *sl_demo_model_path(const struct sl_config *cfg, const char *cache_dir,
                         char *err, size_t size)
{
	enum sl_demo_size variant = (enum sl_demo_size)cfg->demo_model_size;
	char *path =
	    sl_xasprintf("%s/demo-%s-v%d.gguf", cache_dir,
	                 sl_demo_spec(variant)->name, SL_DEMO_MODEL_VERSION);
	if (access(path, R_OK) == 0)
		return path;
	int rc = make_dirs(cache_dir);
	if (rc == 0)
		rc = sl_demo_model_write(path, variant);
	if (rc != 0) {
		snprintf(err, size, "cannot write the demo model to %s: %s",
		         path, sl_strerror(rc));
		free(path);
		return NULL;
	}
	sl_info("wrote the demo model to %s", path);
	return path;
}

/* ---- the preflight ---- */

uint64_t sl_model_bytes(const char *file, unsigned replicas)
{
	struct stat st;
	if (!file || stat(file, &st) != 0)
		return 0;
	return (uint64_t)st.st_size * replicas;
}

bool sl_room_for(unsigned max_loaded, uint64_t budget, unsigned running,
                 uint64_t running_bytes, uint64_t bytes, char *why, size_t size)
{
	if (max_loaded && running >= max_loaded) {
		snprintf(why, size, "--max-loaded %u", max_loaded);
		return false;
	}
	if (budget && running_bytes + bytes > budget) {
		snprintf(why, size, "--memory-budget %llu",
		         (unsigned long long)budget);
		return false;
	}
	return true;
}

/* *exe, found once; a line in why when there is none. */
static int find_exe(const struct sl_config *cfg, char **exe, char *why,
                    size_t size)
{
	if (*exe)
		return 0;
	char *cache = sl_cache_dir(cfg, why, size);
	*exe = cache ? sl_find_llama_server(cfg, cache, why, size) : NULL;
	free(cache);
	return *exe ? 0 : SL_EINVAL;
}

int sl_preflight_model(const struct sl_config *cfg,
                       const struct sl_model_config *c, char **exe, char *err,
                       size_t size)
{
	char why[512];
	uint64_t bytes = sl_model_bytes(c->file, c->replicas);
	int rc = find_exe(cfg, exe, why, sizeof(why));
	if (rc == 0 && c->file)
		rc = sl_check_model_file(c->file, why, sizeof(why));
	if (rc == 0 && cfg->memory_budget && bytes > cfg->memory_budget) {
		snprintf(why, sizeof(why),
		         "%llu bytes of model files (with its replicas) is "
		         "more than --memory-budget %llu: it could never run",
		         (unsigned long long)bytes,
		         (unsigned long long)cfg->memory_budget);
		rc = SL_EINVAL;
	}
	if (rc != 0)
		snprintf(err, size, "models.%s: %s", c->name, why);
	return rc;
}

/*
 * The upstreams a start adds before its loop runs, as start_models (app.c)
 * adds them: for the one model, the managed llama-server and each
 * --upstream; with a models: section, in the file's order, each model's
 * upstreams: and the replicas of each managed model that preloads with
 * room beside those before it (sl_room_for). --upstream-dns addresses come
 * later, and past the bound are left out with a warning.
 */
static unsigned upstreams_at_start(const struct sl_config *cfg)
{
	if (cfg->n_models == 0) {
		bool managed = cfg->model[0] || (cfg->upstreams.count == 0 &&
		                                 cfg->upstream_dns.count == 0);
		return (managed ? 1 : 0) + cfg->upstreams.count;
	}
	unsigned n = 0, running = 0;
	uint64_t running_bytes = 0;
	char why[64];
	for (unsigned i = 0; i < cfg->n_models; i++) {
		const struct sl_model_config *c = &cfg->models[i];
		n += c->upstreams.count;
		if (!sl_model_config_managed(c) || !c->preload)
			continue;
		uint64_t bytes = sl_model_bytes(c->file, c->replicas);
		if (!sl_room_for(cfg->max_loaded, cfg->memory_budget, running,
		                 running_bytes, bytes, why, sizeof(why)))
			continue;
		running++;
		running_bytes += bytes;
		n += c->replicas;
	}
	return n;
}

int sl_preflight(const struct sl_config *cfg, char *err, size_t size)
{
	char why[512];
	char *cache = sl_cache_dir(cfg, why, sizeof(why));
	if (!cache) {
		snprintf(err, size, "%s", why);
		return SL_EINVAL;
	}
	free(cache);
	char *exe = NULL;
	int rc = 0;
	if (cfg->n_models == 0) {
		bool managed = cfg->model[0] || (cfg->upstreams.count == 0 &&
		                                 cfg->upstream_dns.count == 0);
		if (managed)
			rc = find_exe(cfg, &exe, err, size);
		/* The demo model is sluice's own, written at start. */
		if (rc == 0 && managed && cfg->model[0])
			rc = sl_check_model_file(cfg->model, err, size);
	}
	for (unsigned i = 0; rc == 0 && i < cfg->n_models; i++)
		if (sl_model_config_managed(&cfg->models[i]))
			rc = sl_preflight_model(cfg, &cfg->models[i], &exe, err,
			                        size);
	free(exe);
	unsigned n = rc == 0 ? upstreams_at_start(cfg) : 0;
	if (rc == 0 && n > SL_MAX_UPSTREAMS) {
		snprintf(err, size,
		         "%u upstreams to start with (each URL of --upstream "
		         "or of a model's upstreams:, and each replica of a "
		         "managed model that starts at once): sluice holds at "
		         "most %d",
		         n, SL_MAX_UPSTREAMS);
		rc = SL_EINVAL;
	}
	return rc;
}

/* startup.c: cache directory, llama-server lookup, model checks. */
#include "sluice/startup.h"

#include "sluice/common.h"
#include "sluice/demo_model.h"
#include "sluice/log.h"

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
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, size, "--model %s: %s", path, strerror(errno));
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

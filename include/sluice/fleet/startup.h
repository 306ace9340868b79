/*
 * startup.h: what sluice settles before its event loop starts: where its
 * cache is, which llama-server to run, and which model to give it; and
 * the preflight, every check of the machine a start makes before anything
 * runs, which --check-config makes too.
 *
 * These functions do blocking file-system work and must run before the loop
 * does (a reload's few new models are checked on the loop, as they always
 * were: a stat and four bytes each). Each returns a malloc'd string (the
 * caller frees it) or NULL with a one-line reason in `err`, or 0 or
 * SL_EINVAL with that line.
 */
#ifndef SLUICE_STARTUP_H
#define SLUICE_STARTUP_H

#include "sluice/config/config.h"
#include "sluice/config/models_config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bump when the demo model's bytes change, so caches are rewritten. */
#define SL_DEMO_MODEL_VERSION 1

/* --cache-dir, else $XDG_CACHE_HOME/sluice, else $HOME/.cache/sluice. */
char *sl_cache_dir(const struct sl_config *cfg, char *err, size_t size);

/*
 * The llama-server to run: --llama-server (searched on PATH when it has no
 * '/'), else `llama-server` on PATH, else CACHE/llama.cpp/bin/llama-server
 * as deploy/setup.sh provisions it.
 */
char *sl_find_llama_server(const struct sl_config *cfg, const char *cache_dir,
                           char *err, size_t size);

/* Whether --llama-arg already tells llama-server which model to load. */
bool sl_llama_args_choose_model(const struct sl_config *cfg);

/* Checks that `path` is a readable GGUF file; 0, or SL_EINVAL with err. */
int sl_check_model_file(const char *path, char *err, size_t size);

/* The demo model in the cache directory, written there if missing. */
char *sl_demo_model_path(const struct sl_config *cfg, const char *cache_dir,
                         char *err, size_t size);

/*
 * What a managed model weighs against --memory-budget: its GGUF file's
 * size times its replicas; 0 when not known (no file: llama-server
 * downloads it).
 */
uint64_t sl_model_bytes(const char *file, unsigned replicas);

/*
 * Whether a managed model of `bytes` may start beside `running` others
 * that weigh `running_bytes`: within --max-loaded (`max_loaded`) and
 * --memory-budget (`budget`), 0 meaning no bound. When not, `why` names
 * the limit ("--max-loaded 2"). The one rule for preloads at start, loads
 * on demand, and the preflight's count of upstreams.
 */
bool sl_room_for(unsigned max_loaded, uint64_t budget, unsigned running,
                 uint64_t running_bytes, uint64_t bytes, char *why,
                 size_t size);

/*
 * One managed model `c` of a models: section, under the options of `cfg`
 * (its llama-server, cache directory and --memory-budget): llama-server is
 * found (into *exe when it is NULL; the caller frees it), its file is a
 * GGUF model, and it weighs no more than --memory-budget alone. 0, or
 * SL_EINVAL with "models.NAME: ..." in err.
 */
int sl_preflight_model(const struct sl_config *cfg,
                       const struct sl_model_config *c, char **exe, char *err,
                       size_t size);

/*
 * Every check of the machine that a start makes before its loop runs, for
 * a configuration sl_config_parse() accepted: a cache directory, and for
 * each managed model llama-server and its model file (sl_preflight_model;
 * --model's file for the one model), and the upstreams a start adds at
 * once (each URL of --upstream or a model's upstreams:, and a llama-server
 * per replica of each managed model that starts with sluice) within
 * SL_MAX_UPSTREAMS. A start and --check-config both call it, so that a file
 * --check-config accepts starts. It reads and writes nothing but file
 * metadata and four bytes of each model file. Not checked, since no look
 * ahead can tell: whether --listen's port is free when the start binds
 * it, whether the cache directory takes the demo model when it is not
 * there yet (the start writes it), and whether llama-server loads a model
 * (its own words say why not, once it runs). 0, or SL_EINVAL with one
 * line in err.
 */
int sl_preflight(const struct sl_config *cfg, char *err, size_t size);

#endif

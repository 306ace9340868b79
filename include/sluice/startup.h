/*
 * startup.h: what sluice settles before its event loop starts: where its
 * cache is, which llama-server to run, and which model to give it.
 *
 * These functions do blocking file-system work and must run before the loop
 * does. Each returns a malloc'd string (the caller frees it) or NULL with a
 * one-line reason in `err`.
 */
#ifndef SLUICE_STARTUP_H
#define SLUICE_STARTUP_H

#include "sluice/config.h"

#include <stdbool.h>
#include <stddef.h>

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

#endif

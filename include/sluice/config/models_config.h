/*
 * models_config.h: the `models:` section of the configuration file, read
 * and checked.
 *
 * Each key of `models:` names a model; its mapping says where the model
 * runs: a managed llama-server (`model: FILE.gguf` or `hf-repo: REPO`,
 * with `slots`, `ctx-size`, `args: [...]`, `replicas: N`) or remote
 * upstreams (`upstreams: [URL, ...]`, or `dns: NAME:PORT`, whose
 * addresses are followed as --upstream-dns follows its names, or both). Either
 * kind takes `aliases: [...]` (other names a request's "model" field may use)
 * and queue limits that override the global options for that model alone:
 * `max-queue` and `queue-timeout`; and `slo: {ttft: DURATION, tpot:
 * DURATION}`, the service level of its requests that name none (their
 * key's comes first; sched/README.md). A managed one also takes `preload: false`
 * (started on its first request) and `idle-timeout: DURATION` (stopped after
 * that long unused); --max-loaded bounds how many run at once (app_models.c).
 *
 * Every bad value is refused with one line naming FILE:LINE and the node
 * ("models.tiny.slots"); names and aliases are unique across all models.
 *
 * Without a models: section sluice serves one model, made from --model or
 * --upstream as before (see app.c): this module is not involved.
 */
#ifndef SLUICE_MODELS_CONFIG_H
#define SLUICE_MODELS_CONFIG_H

#include "sluice/config/config.h"
#include "sluice/config/config_file.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Managed replicas of one model, and remote upstreams of one model. */
#define SL_MODEL_REPLICAS_MAX 16
#define SL_MODEL_UPSTREAMS_MAX 32
/* Other names of one model. */
#define SL_MODEL_ALIASES_MAX 16
/*
 * A model's name or alias, in bytes: it travels in request bodies, label
 * values and error lines, so it stays short and printable.
 */
#define SL_MODEL_NAME_MAX 128
/* idle-timeout at most: a week; longer is "never", which 0 says. */
#define SL_MODEL_IDLE_TIMEOUT_MAX_MS (7ull * 24 * 3600 * 1000)

struct sl_model_config {
	char *name;
	unsigned line; /* of its mapping, for messages */
	struct sl_strlist aliases;
	/* Managed: exactly one of file and hf_repo; else both NULL. */
	char *file;
	char *hf_repo;
	unsigned slots;    /* 0: --slots */
	unsigned ctx_size; /* 0: --ctx-size */
	struct sl_strlist args;
	unsigned replicas; /* managed: at least 1 */
	/* Remote: base URLs without a trailing '/'. */
	struct sl_strlist upstreams;
	/* Remote: "NAME:PORT" followed by DNS discovery, or NULL. */
	char *dns;
	/*
	 * Loading on demand (managed only): preload false leaves it stopped
	 * until a request needs it; an idle_timeout_ms other than 0 stops it
	 * once nobody has used it for that long.
	 */
	bool preload;
	uint64_t idle_timeout_ms;
	/* Queue limits; has_* false: the global option. */
	bool has_max_queue, has_queue_timeout;
	unsigned max_queue;
	uint64_t queue_timeout_ms;
	struct sl_slo slo; /* 0s: --slo-ttft and --slo-tpot */
};

/* Whether the model runs llama-servers that sluice manages. */
bool sl_model_config_managed(const struct sl_model_config *m);

/*
 * Reads a `models:` section into cfg->models (the section table,
 * config_sections.h). Returns 0, or SL_EINVAL with one "FILE:LINE:
 * models.NAME.KEY: ..." line.
 */
int sl_models_config_apply(struct sl_config *cfg,
                           const struct sl_config_node *n, char *err,
                           size_t size);

/* Writes the section back, for --check-config; nothing without models. */
void sl_models_config_print(FILE *out, const struct sl_config *cfg);

/*
 * Checks across options, once every source is read: a models: section
 * does not mix with --model or --upstream, and --default-model names a
 * model or an alias. Returns 0, or SL_EINVAL with one line in err.
 */
int sl_models_config_check(const struct sl_config *cfg, char *err, size_t size);

/*
 * Whether a model's args: turn on llama-server's tools or MCP
 * servers (the section table's runs_tools).
 */
bool sl_models_config_runs_tools(const struct sl_config *cfg);

/* The model config named `name` (or aliased so), or NULL. */
const struct sl_model_config *sl_models_config_find(const struct sl_config *cfg,
                                                    const char *name);

void sl_models_config_free(struct sl_config *cfg);

/*
 * A deep copy of one model's settings (a reload keeps each model's own,
 * so that the configuration it came from can be freed), and its release.
 */
void sl_model_config_copy(struct sl_model_config *dst,
                          const struct sl_model_config *src);
void sl_model_config_clear(struct sl_model_config *m);

#endif

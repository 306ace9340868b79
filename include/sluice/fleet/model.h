/*
 * model.h: one model sluice serves, as the layers above the fleet see it.
 *
 * The app keeps the table of models and decides when each loads and
 * unloads (app_models.c); the relay reads a model's queue and pool, and
 * ops its state. The struct lives here, below both, so that neither has
 * to include the app to read it.
 */
#ifndef SLUICE_MODEL_H
#define SLUICE_MODEL_H

#include "sluice/config/config.h"
#include "sluice/config/models_config.h"
#include "sluice/fleet/discovery.h"
#include "sluice/fleet/pool.h"
#include "sluice/sched/predict.h"
#include "sluice/sched/sched.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct sl_app;

/*
 * One model that clients name in a request's "model" field: its upstreams
 * (a pool) and its own queue. Each model's scheduler sees only its own
 * pool's free slots, so a model whose slots are all busy holds its own
 * requests and nobody else's; priorities order requests within a model.
 *
 * Without a models: section there is one model, made of --model (a
 * managed llama-server) and every --upstream, named by --model-name, else
 * after the GGUF file ("demo" for the demo model, "default" for upstreams
 * alone). That model takes requests whatever "model" they name, as sluice
 * always did; models from a models: section take only their own names.
 */
struct sl_model {
	struct sl_app *app; /* that owns it; opaque below the app */
	char *name;
	const struct sl_strlist *aliases; /* conf's, or NULL */
	/*
	 * Its own copy of its settings (a reload replaces it), or NULL for
	 * the one model.
	 */
	struct sl_model_config *conf;
	struct sl_pool pool;
	struct sl_sched sched;
	/*
	 * How long its answers run, and how its TTFT predictions err
	 * (predict.h); all zero is the prior.
	 */
	struct sl_predict_output output;
	struct sl_predict_calib calib;
	struct sl_predict_bias bias;
	uv_timer_t sched_timer; /* its scheduler's next deadline */
	/*
	 * What its managed llama-servers are started with: the global
	 * configuration with this model's slots, ctx-size and args (a shallow
	 * copy: only llama_args is the model's own), or the global one.
	 */
	struct sl_config *upstream_cfg;
	struct sl_strlist llama_args; /* upstream_cfg->llama_args */
	char *exe, *file;             /* managed: what runs */
	bool managed;
	/*
	 * Loading on demand (managed models of a models: section; see
	 * sl_app_model_demand): whether its llama-servers are wanted (loaded),
	 * being stopped (unloading), wanted by a waiting request (wanted), and
	 * started after start-up (late: a failed start then fails its queue
	 * and stops the model, not sluice). A remote model is late once a
	 * reload added it or one of its upstreams.
	 */
	bool loaded, unloading, wanted, late;
	/*
	 * When a request was last dispatched or finished, in the app's count
	 * of uses: a count, not a time, so that two uses within one
	 * millisecond still have an order (least recently used).
	 */
	uint64_t last_used;
	/*
	 * What it weighs against --memory-budget: its GGUF file's size
	 * times its replicas (0 for a model llama-server downloads, whose
	 * size is not known before).
	 */
	uint64_t bytes;
	uv_timer_t idle_timer; /* idle-timeout */
	/*
	 * A load nobody waits for is cancelled (sl_app_model_left): whether
	 * this load began for a waiting request (demand_load: not preload, not
	 * POST /models/load), whether one of its llama-servers has been ready
	 * since it began (load_ready), the grace before a load whose requests
	 * all left is stopped, what the last one that left did (left_why, a
	 * static string), and the loads cancelled so far, for the metrics.
	 */
	bool demand_load, load_ready;
	uv_timer_t cancel_timer;
	const char *left_why;
	uint64_t loads_cancelled;
	/*
	 * Its dns: NAME:PORT, followed (NULL without one, or once closed);
	 * discoveries_open counts those not yet closed, this one and the
	 * --upstream-dns ones of the one model, whose hooks point here.
	 */
	struct sl_discovery *discovery;
	unsigned discoveries_open;
	/*
	 * Reloads (SIGHUP): a model removed from the file leaves app->models
	 * for app->retired (next_retired), takes no new request, and is
	 * freed once nothing refers to it: no exchange (refs, counted by
	 * proxy.c through sl_app_model_ref/_release), no upstream in its
	 * pool, no discovery open. `closing`: its timers are being closed.
	 */
	bool removed, closing;
	unsigned refs, closing_handles;
	struct sl_model *next_retired;
};

/*
 * A model's state for /health, /v1/models and the metrics: stopped (a
 * managed model not running), starting, ready, stopping, or down (none of
 * its upstreams answers).
 */
const char *sl_model_state(const struct sl_model *m);

/* Every state sl_model_state() names, NULL-terminated. */
extern const char *const sl_model_states[];

/* Whether nothing of `m` waits in its queue or runs on its upstreams. */
bool sl_model_idle(const struct sl_model *m);

/* Whether `m` is managed and its llama-servers run, start or stop. */
bool sl_model_running(const struct sl_model *m);

/*
 * Whether `m` is loading for requests that all left: started on demand
 * (and not `preload`), not ready once since, nothing queued or in flight.
 * Such a load is cancelled (app_models.c), and is the first to go when
 * another model needs its room.
 */
bool sl_model_load_abandoned(const struct sl_model *m);

#endif

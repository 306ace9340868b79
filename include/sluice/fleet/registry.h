/*
 * registry.h: the models sluice serves, by name, and the questions asked
 * of them: which model a request's name means, which model holds an
 * upstream, how many requests wait, whether a model may start beside what
 * runs (--max-loaded, --memory-budget), and which idle model should make
 * room for it (the least recently used).
 *
 * The app fills the table at start-up and on reloads, and acts on its
 * answers: it starts and stops llama-servers (app_models.c). Nothing here
 * starts or stops anything, so the relay and ops may read it too.
 */
#ifndef SLUICE_REGISTRY_H
#define SLUICE_REGISTRY_H

#include "sluice/config/config.h"
#include "sluice/fleet/model.h"
#include "sluice/fleet/upstream.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sl_registry {
	struct sl_model *models[SL_MODELS_MAX];
	unsigned n_models;
	struct sl_model *default_model; /* for a request naming none */
	bool model_section;             /* models: given: names are checked */
	/*
	 * Models a reload removed: they take no new request, and wait here
	 * until nothing refers to them (model.h, refs).
	 */
	struct sl_model *retired;
	uint64_t uses;       /* requests dispatched or finished: last_used */
	unsigned max_loaded; /* --max-loaded, as reloaded */
};

/*
 * The model a request names (by name or alias), or NULL when none has
 * that name. Without a models: section, the one model, whatever the name.
 */
struct sl_model *sl_registry_find(const struct sl_registry *r,
                                  const char *name);

/* The model whose pool holds `u` (a retired one too), or NULL. */
struct sl_model *sl_registry_model_of(const struct sl_registry *r,
                                      const struct sl_upstream *u);

/* Requests waiting in every model's queue, retired ones' too. */
unsigned sl_registry_queue_depth(const struct sl_registry *r);

/* A request of `m` was dispatched, finished or loaded it: it is in use. */
void sl_registry_used(struct sl_registry *r, struct sl_model *m);

/*
 * Whether `m` may start beside what runs: within --max-loaded and
 * `memory_budget` (--memory-budget). A model being stopped still counts
 * until it has stopped: its memory is not free before. `why` says what
 * is full when it may not.
 */
bool sl_registry_room_for(const struct sl_registry *r, const struct sl_model *m,
                          uint64_t memory_budget, char *why, size_t size);

/* The least recently used idle managed model that runs, but `m`; or NULL. */
struct sl_model *sl_registry_lru_idle(const struct sl_registry *r,
                                      const struct sl_model *m);

#endif

/* registry.c: the models by name, and what is asked of them (see .h). */
#include "sluice/fleet/registry.h"

#include "sluice/fleet/pool.h"
#include "sluice/fleet/startup.h"
#include "sluice/sched/sched.h"

#include <string.h>

struct sl_model *sl_registry_find(const struct sl_registry *r, const char *name)
{
	if (!name || !name[0] || !r->model_section)
		return r->default_model;
	for (unsigned i = 0; i < r->n_models; i++) {
		struct sl_model *m = r->models[i];
		if (strcmp(m->name, name) == 0)
			return m;
		for (unsigned k = 0; m->aliases && k < m->aliases->count; k++)
			if (strcmp(m->aliases->items[k], name) == 0)
				return m;
	}
	return NULL;
}

struct sl_model *sl_registry_model_of(const struct sl_registry *r,
                                      const struct sl_upstream *u)
{
	for (unsigned i = 0; i < r->n_models; i++)
		if (sl_pool_contains(&r->models[i]->pool, u))
			return r->models[i];
	for (struct sl_model *m = r->retired; m; m = m->next_retired)
		if (sl_pool_contains(&m->pool, u))
			return m;
	return NULL;
}

unsigned sl_registry_queue_depth(const struct sl_registry *r)
{
	unsigned n = 0;
	for (unsigned i = 0; i < r->n_models; i++)
		n += sl_sched_depth(&r->models[i]->sched);
	for (const struct sl_model *m = r->retired; m; m = m->next_retired)
		n += sl_sched_depth(&m->sched);
	return n;
}

void sl_registry_used(struct sl_registry *r, struct sl_model *m)
{
	m->last_used = ++r->uses;
}

static unsigned models_running(const struct sl_registry *r)
{
	unsigned n = 0;
	for (unsigned i = 0; i < r->n_models; i++)
		n += sl_model_running(r->models[i]);
	return n;
}

/*
 * Whether `m` may start beside what runs: within --max-loaded and
 * --memory-budget. A model being stopped still counts until it has
 * stopped: its memory is not free before.
 */
bool sl_registry_room_for(const struct sl_registry *r, const struct sl_model *m,
                          uint64_t memory_budget, char *why, size_t size)
{
	uint64_t bytes = 0;
	for (unsigned i = 0; i < r->n_models; i++)
		if (sl_model_running(r->models[i]))
			bytes += r->models[i]->bytes;
	return sl_room_for(r->max_loaded, memory_budget, models_running(r),
	                   bytes, m->bytes, why, size);
}

/* The least recently used idle running model other than `m`, or NULL. */
struct sl_model *sl_registry_lru_idle(const struct sl_registry *r,
                                      const struct sl_model *m)
{
	struct sl_model *best = NULL;
	for (unsigned i = 0; i < r->n_models; i++) {
		struct sl_model *o = r->models[i];
		if (o == m || !o->managed || !o->loaded || !sl_model_idle(o))
			continue;
		if (!best || o->last_used < best->last_used)
			best = o;
	}
	return best;
}

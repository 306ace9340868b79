/* model.c: what a model's fields say of it (see model.h). */
#include "sluice/fleet/model.h"

const char *const sl_model_states[] = {"stopped",  "starting", "ready",
                                       "stopping", "down",     NULL};

const char *sl_model_state(const struct sl_model *m)
{
	if (m->unloading)
		return "stopping";
	if (m->pool.n == 0)
		return m->managed ? "stopped" : "down";
	bool starting = false;
	for (unsigned i = 0; i < m->pool.n; i++) {
		enum sl_upstream_state s = m->pool.members[i]->state;
		if (s == SL_UPSTREAM_READY)
			return "ready";
		starting |=
		    s == SL_UPSTREAM_STARTING || s == SL_UPSTREAM_RESTARTING;
	}
	return starting ? "starting" : "down";
}

bool sl_model_idle(const struct sl_model *m)
{
	if (sl_sched_depth(&m->sched) > 0)
		return false;
	for (unsigned i = 0; i < m->pool.n; i++)
		if (m->pool.members[i]->inflight > 0)
			return false;
	return true;
}

/* Managed models whose llama-servers run, start or are being stopped. */
bool sl_model_running(const struct sl_model *m)
{
	return m->managed && (m->loaded || m->pool.n > 0);
}

bool sl_model_load_abandoned(const struct sl_model *m)
{
	bool preload = m->conf && m->conf->preload;
	return m->managed && m->loaded && !m->unloading && m->demand_load &&
	       !preload && !m->load_ready && sl_model_idle(m);
}

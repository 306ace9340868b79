/*
 * scrape.c: what the targets say of themselves during a run.
 *
 * /metrics (Prometheus text) of sluice and of llama-server is sampled every
 * --scrape-interval; a few gauges and counters are kept as min, mean and
 * max (counters: first and last, for their increase). A request that left
 * on purpose is looked for in llama-server's /slots by the unique seed its
 * body carried: once no busy slot holds it, its slot was freed. /slots is
 * read no faster than --slots-interval, as each read is a task whose result
 * re-arms llama-server's 1 s wait, which is when it notices that a plain
 * answer's client has left.
 */
#include "engine.h"

#include "sluice/base/common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long after its last answer a run waits for left slots to settle. */
#define SLOTS_GRACE_NS (15 * 1000000000ull)
/* A GET of /metrics or /slots gives up after this. */
#define SCRAPE_TIMEOUT_MS 5000

static const char *const sluice_wanted[] = {
    "sluice_inflight",
    "sluice_queue_depth",
    "sluice_connections",
    "sluice_upstream_up",
    "sluice_rejected_total",
    "sluice_cancelled_total",
    "sluice_upstream_retries_total",
    "sluice_upstream_restarts_total",
    "sluice_generated_tokens_total",
    /* llama-server's own series, as sluice's /metrics relabels them. */
    "llamacpp_requests_processing",
    "llamacpp_requests_deferred",
    "llamacpp_prompt_tokens_total",
    "llamacpp_tokens_predicted_total",
    NULL,
};

static const char *const llama_wanted[] = {
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:kv_cache_usage_ratio",
    "llamacpp:prompt_tokens_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:n_decode_total",
    NULL,
};

static int wanted_index(const char *const *wanted, const char *name, size_t len)
{
	for (int i = 0; wanted[i]; i++)
		if (strlen(wanted[i]) == len && !strncmp(wanted[i], name, len))
			return i;
	return -1;
}

/*
 * One scrape: every series of a wanted name is summed (over its labels),
 * then the sum joins that name's samples.
 */
void scrape_sample(struct scraped *tab, unsigned *n, const char *text,
                   const char *const *wanted)
{
	double sums[MAX_SCRAPED] = {0};
	bool seen[MAX_SCRAPED] = {0};
	for (const char *line = text; line && *line;) {
		const char *eol = strchr(line, '\n');
		size_t len = eol ? (size_t)(eol - line) : strlen(line);
		size_t name_len = strcspn(line, "{ \n");
		int i =
		    line[0] == '#' ? -1 : wanted_index(wanted, line, name_len);
		if (i >= 0 && i < MAX_SCRAPED) {
			const char *v = line + len;
			while (v > line && v[-1] != ' ')
				v--;
			char *end;
			double d = strtod(v, &end);
			if (end != v && isfinite(d)) {
				sums[i] += d;
				seen[i] = true;
			}
		}
		line = eol ? eol + 1 : NULL;
	}
	for (int i = 0; wanted[i] && i < MAX_SCRAPED; i++) {
		if (!seen[i])
			continue;
		unsigned k = 0;
		while (k < *n && strcmp(tab[k].name, wanted[i]))
			k++;
		if (k == *n) {
			if (*n == MAX_SCRAPED)
				continue;
			(*n)++;
			memset(&tab[k], 0, sizeof(tab[k]));
			snprintf(tab[k].name, sizeof(tab[k].name), "%s",
			         wanted[i]);
			tab[k].min = tab[k].max = tab[k].first = sums[i];
		}
		tab[k].min = SL_MIN(tab[k].min, sums[i]);
		tab[k].max = SL_MAX(tab[k].max, sums[i]);
		tab[k].sum += sums[i];
		tab[k].last = sums[i];
		tab[k].n++;
	}
}

static void on_sluice_metrics(struct hb_call *g, int status, const char *err)
{
	struct engine *e = g->data;
	(void)err;
	if (status == 200 && g->body)
		scrape_sample(e->r->sluice_m, &e->r->n_sluice_m, g->body,
		              sluice_wanted);
}

static void on_llama_metrics(struct hb_call *g, int status, const char *err)
{
	struct engine *e = g->data;
	(void)err;
	if (status == 200 && g->body)
		scrape_sample(e->r->llama_m, &e->r->n_llama_m, g->body,
		              llama_wanted);
}

static void get(struct hb_call *g, const char *base, const char *path,
                const char *key, hb_call_cb cb)
{
	if (g->busy)
		return;
	if (hb_call_start(g, "GET", base, path, key, NULL, SCRAPE_TIMEOUT_MS,
	                  cb))
		cb(g, 0, "cannot start");
}

static void on_scrape_due(uv_timer_t *t)
{
	struct engine *e = t->data;
	const struct options *o = &e->b->o;
	get(&e->sluice_scrape, o->metrics_url, "/metrics", o->metrics_key,
	    on_sluice_metrics);
	if (o->llama_url)
		get(&e->llama_scrape, o->llama_url, "/metrics", o->llama_key,
		    on_llama_metrics);
}

void scrape_start(struct engine *e)
{
	double s = e->b->o.scrape_s;
	if (s > 0) {
		uint64_t ms = SL_MAX((uint64_t)(s * 1000), 1u);
		uv_timer_start(&e->scrape_timer, on_scrape_due, 0, ms);
	}
}

/* ---- left requests and /slots ---- */

static void settle(struct engine *e, size_t i, int8_t freed)
{
	struct record *rec = &e->r->recs[e->pending_left[i]];
	rec->slot_freed = freed;
	if (freed == 1)
		rec->freed_ns = sl_now_ns();
	e->pending_left[i] = e->pending_left[--e->n_pending_left];
}

/* Seeds of the slots llama-server is busy with, into a sorted array. */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static void on_slots(struct hb_call *g, int status, const char *err)
{
	struct engine *e = g->data;
	(void)err;
	json_t *slots = status == 200 && g->body
	                    ? json_loads(g->body, JSON_DECODE_ANY, NULL)
	                    : NULL;
	if (status == 0) {
		/* No answer this time (a busy server): the next read, or
		 * the grace after the run, decides. */
		e->slots_unmarked = true;
	} else if (!json_is_array(slots)) {
		if (!e->b->slots_refused_said)
			fprintf(stderr,
			        "sluice-bench: %s/slots answered %d: whether a "
			        "left request's slot was freed stays unknown "
			        "(start llama-server with --slots)\n",
			        e->b->o.llama_url, status);
		e->b->slots_refused_said = true;
		while (e->n_pending_left)
			settle(e, 0, -1);
	} else {
		size_t n = json_array_size(slots), busy = 0, unmarked = 0;
		uint64_t *seeds = sl_xcalloc(n + 1, sizeof(*seeds));
		json_t *s;
		size_t k;
		json_array_foreach(slots, k, s)
		{
			json_t *seed = json_object_get(
			    json_object_get(s, "params"), "seed");
			if (!json_is_true(json_object_get(s, "is_processing")))
				continue;
			if (json_is_integer(seed))
				seeds[busy++] =
				    (uint64_t)json_integer_value(seed);
			else
				unmarked++;
		}
		qsort(seeds, busy, sizeof(*seeds), cmp_u64);
		/* A busy slot that shows no seed may be a left request's:
		 * then nothing is freed for sure until it goes. */
		if (unmarked)
			e->slots_unmarked = true;
		for (size_t i = e->n_pending_left; i-- > 0 && !unmarked;) {
			uint64_t mine = e->r->recs[e->pending_left[i]].seed;
			if (!bsearch(&mine, seeds, busy, sizeof(*seeds),
			             cmp_u64))
				settle(e, i, 1);
		}
		free(seeds);
	}
	json_decref(slots);
	if (e->n_pending_left == 0)
		uv_timer_stop(&e->slots_timer);
	engine_check(e);
}

static void on_slots_due(uv_timer_t *t)
{
	struct engine *e = t->data;
	get(&e->slots, e->b->o.llama_url, "/slots", e->b->o.llama_key,
	    on_slots);
}

void scrape_left(struct engine *e, size_t rec)
{
	if (e->n_pending_left == e->cap_pending_left) {
		e->cap_pending_left =
		    e->cap_pending_left ? 2 * e->cap_pending_left : 64;
		e->pending_left =
		    sl_xrealloc(e->pending_left,
		                e->cap_pending_left * sizeof(*e->pending_left));
	}
	e->pending_left[e->n_pending_left++] = rec;
	if (!uv_is_active((uv_handle_t *)&e->slots_timer)) {
		uint64_t ms = (uint64_t)(e->b->o.slots_s * 1000);
		uv_timer_start(&e->slots_timer, on_slots_due, ms, ms);
	}
}

/*
 * Whether every left request is settled; past the grace after the run's
 * last answer, the ones still busy count as not freed (unknown, when
 * busy slots showed no seed to tell them by).
 */
bool scrape_settled(struct engine *e)
{
	if (e->n_pending_left == 0)
		return true;
	if (e->r->end_ns && sl_now_ns() - e->r->end_ns > SLOTS_GRACE_NS) {
		while (e->n_pending_left)
			settle(e, 0, e->slots_unmarked ? -1 : 0);
		return true;
	}
	return false;
}

void scrape_stop(struct engine *e)
{
	hb_call_abort(&e->sluice_scrape);
	hb_call_abort(&e->llama_scrape);
	hb_call_abort(&e->slots);
	uv_timer_stop(&e->scrape_timer);
	uv_timer_stop(&e->slots_timer);
}

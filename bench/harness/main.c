/*
 * sluice-bench: a load-testing harness for LLM gateways (sluice, or a
 * llama-server alone). main() reads the options, makes the workload,
 * then runs the levels of load one after another (each --num-runs times,
 * in rounds, so that drift hits every level alike), or searches for the
 * highest rate that meets the SLOs, and writes the reports.
 */
#include "harness.h"
#include "http.h"
#include "tools.h"

#include "sluice/base/common.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- deterministic draws ---- */

static double rng_normal(uint64_t *s)
{
	return sqrt(-2 * log(wl_rng_unit(s))) * cos(2 * M_PI * wl_rng_unit(s));
}

/* Gamma(shape, 1): Marsaglia and Tsang's method; shape < 1 is boosted. */
double rng_gamma(uint64_t *s, double shape)
{
	if (shape < 1)
		return rng_gamma(s, shape + 1) * pow(wl_rng_unit(s), 1 / shape);
	double d = shape - 1.0 / 3, c = 1 / sqrt(9 * d);
	for (;;) {
		double x = rng_normal(s), v = 1 + c * x;
		if (v <= 0)
			continue;
		v = v * v * v;
		double u = wl_rng_unit(s);
		if (u < 1 - 0.0331 * x * x * x * x ||
		    log(u) < 0.5 * x * x + d * (1 - v + log(v)))
			return d * v;
	}
}

/* ---- the search for the highest rate within the SLOs ---- */

struct search {
	double lo, hi; /* lo met the SLOs (or is the floor); hi did not */
	double best;   /* highest rate that met them; 0: none yet */
	bool lo_tried, hi_tried;
	unsigned steps;
	json_t *log;
};

static struct search search;

/*
 * The next rate: first the top of the range (if it meets the SLOs, the
 * search is over), then the bottom, then the geometric middle of what
 * met and what did not: rates span orders of magnitude.
 */
static double search_next_rate(const struct options *o)
{
	if (search.steps >= o->search_steps)
		return 0;
	if (!search.hi_tried)
		return search.hi;
	if (search.best == search.hi)
		return 0;
	if (!search.lo_tried)
		return search.lo;
	if (search.best == 0)
		return 0; /* even the bottom fails */
	if (search.hi / search.lo < 1.02)
		return 0; /* close enough */
	return sqrt(search.lo * search.hi);
}

static void search_record(const struct bench *b, const struct run *r)
{
	double frac = results_goodput_fraction(b, r);
	bool met = frac >= b->o.search_min_goodput;
	search.steps++;
	if (r->rate == search.hi && !search.hi_tried)
		search.hi_tried = true;
	else if (r->rate == search.lo && !search.lo_tried)
		search.lo_tried = true;
	if (met) {
		search.best = SL_MAX(search.best, r->rate);
		search.lo = SL_MAX(search.lo, r->rate);
	} else if (r->rate < search.hi || search.steps == 1) {
		search.hi = r->rate;
	}
	json_array_append_new(
	    search.log,
	    json_pack("{s:f, s:f, s:o, s:o, s:o, s:b, s:i}", "request_rate",
	              r->rate, "goodput_fraction", isnan(frac) ? 0 : frac,
	              "request_goodput",
	              json_incref(json_object_get(r->doc, "request_goodput")),
	              "p99_ttft_ms",
	              json_incref(json_object_get(r->doc, "p99_ttft_ms")),
	              "p99_tpot_ms",
	              json_incref(json_object_get(r->doc, "p99_tpot_ms")),
	              "met", met, "run", (int)(r - b->runs)));
}

static json_t *search_json(const struct bench *b)
{
	json_t *slo = json_incref(json_object_get(b->runs[0].doc, "slo"));
	json_t *j = json_pack(
	    "{s:o, s:f, s:o, s:o}", "slo", slo, "min_goodput_fraction",
	    b->o.search_min_goodput, "best_rate",
	    search.best > 0 ? json_real(search.best) : json_null(), "steps",
	    json_incref(search.log));
	/* Under --slo-mix, each class's SLOs. */
	if (b->o.n_slo_classes) {
		json_t *classes = json_object();
		const char *name;
		json_t *c;
		json_object_foreach(
		    json_object_get(b->runs[0].doc, "slo_classes"), name, c)
		{
			json_object_set(classes, name,
			                json_object_get(c, "slo"));
		}
		json_object_set_new(j, "slo_classes", classes);
	}
	return j;
}

/* ---- the runs ---- */

static uv_signal_t sigint;

static unsigned n_levels(const struct options *o)
{
	return o->n_rates ? o->n_rates : o->n_levels;
}

static void next_run(struct bench *b);

static void on_run_done(struct bench *b)
{
	struct run *r = &b->runs[b->n_runs++];
	r->doc = results_run(b, r);
	if (b->o.search)
		search_record(b, r);
	next_run(b);
}

static void finish(struct bench *b)
{
	uv_close((uv_handle_t *)&sigint, NULL);
	sl_h1_close(&b->h1);
}

static void next_run(struct bench *b)
{
	const struct options *o = &b->o;
	unsigned k = b->n_runs;
	double rate = 0;
	if (o->search) {
		rate = search_next_rate(o);
		if (rate == 0 || b->interrupted || k == MAX_RUNS) {
			finish(b);
			return;
		}
	} else if (b->interrupted || k == n_levels(o) * o->num_runs ||
	           k == MAX_RUNS) {
		finish(b);
		return;
	}
	struct run *r = &b->runs[k];
	memset(r, 0, sizeof(*r));
	r->batches = r->avg_batch_size = NAN;
	if (o->search) {
		r->rate = rate;
		r->level = k; /* each step its own level: its own rate */
	} else {
		r->level = k % n_levels(o);
		r->repeat = k / n_levels(o);
		if (o->n_rates)
			r->rate = o->rates[r->level];
		else
			r->concurrency = o->levels[r->level];
	}
	/* Every run replays the same prompts, mixes and arrivals: what
	 * differs between repeats is the server's. */
	b->wl.next = 0;
	b->rng = o->seed;
	b->class_rng = o->seed ^ SLO_CLASS_STREAM;
	engine_run(b, r, on_run_done);
}

static void on_sigint(uv_signal_t *s, int signum)
{
	struct bench *b = s->data;
	(void)signum;
	fprintf(stderr, "\nsluice-bench: interrupted; finishing what is in "
	                "flight\n");
	engine_interrupt(b);
}

static void on_tokenized(struct workload *w, int rc, const char *err, void *arg)
{
	struct bench *b = arg;
	(void)w;
	if (rc != 0)
		fprintf(stderr,
		        "sluice-bench: --tokenize: %s; those prompts' lengths "
		        "are estimates\n",
		        err);
	next_run(b);
}

/* Thousands of connections need descriptors: use what the hard limit allows. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void setup(struct bench *b)
{
	char err[256];
	if (wl_init(&b->wl, &b->o.wl, err, sizeof(err)) != 0)
		usage_error("%s", err);
	b->rng = b->o.seed;
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();
	const char *urls[] = {b->o.url, b->o.metrics_url, b->o.llama_url};
	for (size_t i = 0; i < SL_ARRAY_SIZE(urls); i++)
		if (urls[i] && !hb_url_ok(urls[i], err, sizeof(err)))
			usage_error("%s", err);
	uv_loop_init(&b->loop);
	/* One connection per request out, kept alive between them. */
	sl_h1_init(&b->h1, &b->loop);
	uv_signal_init(&b->loop, &sigint);
	sigint.data = b;
	uv_signal_start(&sigint, on_sigint, SIGINT);
	uv_unref((uv_handle_t *)&sigint);
	if (b->o.search) {
		search.lo = b->o.search_lo;
		search.hi = b->o.search_hi;
		search.log = json_array();
	}
}

/* The first failure of each run, said once: the reason a run went bad. */
static void say_failures(const struct bench *b)
{
	for (unsigned k = 0; k < b->n_runs; k++)
		for (size_t i = 0; i < b->runs[k].n_recs; i++)
			if (b->runs[k].recs[i].error) {
				fprintf(stderr,
				        "sluice-bench: run %u: first failure: "
				        "%s\n",
				        k, b->runs[k].recs[i].error);
				break;
			}
}

static void write_reports(struct bench *b)
{
	say_failures(b);
	json_t *s = b->o.search && b->n_runs ? search_json(b) : NULL;
	report_markdown(b, stdout);
	if (s) {
		if (search.best > 0)
			printf("\nsearch: highest rate within the SLOs: "
			       "%g/s\n",
			       search.best);
		else
			printf("\nsearch: no rate met the SLOs\n");
	}
	if (b->o.csv)
		report_csv(b, b->o.csv);
	json_t *doc = report_document(b, s);
	if (b->o.json && json_dump_file(doc, b->o.json, JSON_INDENT(1)) != 0)
		usage_error("--json %s: cannot write", b->o.json);
	if (b->o.jsonl)
		report_jsonl(b, b->o.jsonl);
	char err[256];
	if (b->o.html && sb_html_write(doc, b->o.html, err, sizeof(err)) != 0)
		usage_error("--html %s: %s", b->o.html, err);
	json_decref(doc);
	json_decref(s);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "compare"))
		return sb_compare_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "report"))
		return sb_report_main(argc - 1, argv + 1);
	struct bench *b = sl_xcalloc(1, sizeof(*b));
	options_parse(&b->o, argc, argv);
	setup(b);
	if (b->o.tokenize) {
		wl_tokenize(&b->wl, &b->h1, &b->loop, b->o.url, b->o.api_key,
		            on_tokenized, b);
	} else {
		next_run(b);
	}
	uv_run(&b->loop, UV_RUN_DEFAULT);
	write_reports(b);

	int failed = 0;
	for (unsigned k = 0; k < b->n_runs; k++) {
		struct run *r = &b->runs[k];
		failed |=
		    json_integer_value(json_object_get(r->doc, "failed")) > 0;
		for (size_t i = 0; i < r->n_recs; i++)
			free(r->recs[i].error);
		free(r->recs);
		free(r->refusals);
		bs_free(&r->itl);
		json_decref(r->doc);
	}
	json_decref(search.log);
	wl_free(&b->wl);
	options_free(&b->o);
	uv_loop_close(&b->loop);
	free(b);
	/* 1 when any request failed: scripts notice. */
	return failed ? 1 : 0;
}

/*
 * options.c: every option of sluice-bench, each a long flag with an
 * environment twin and a default, all shown by --help. Defaults apply
 * first, then the environment, then the flags: a flag wins.
 */
#include "harness.h"

#include "sluice/base/common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const endpoint_names[] = {"chat", "completions", "completion",
                                      "generate", "infer"};
const char *const prio_names[] = {"none", "urgent", "normal", "batch"};

struct opt_def {
	const char *name, *env, *metavar, *def, *help;
};

/* clang-format off */
static const struct opt_def opt_defs[] = {
	/* The target. */
	{"url", "SLUICE_BENCH_URL", "URL", "http://127.0.0.1:8080",
	 "base URL of sluice (or of a llama-server)"},
	{"metrics-url", "SLUICE_BENCH_METRICS_URL", "URL", "",
	 "sluice's /metrics, read for batches and scraped; none: the one at "
	 "--url"},
	{"llama-url", "SLUICE_BENCH_LLAMA_URL", "URL", "",
	 "a llama-server behind it: its /metrics scraped, its /slots read "
	 "for the cancellation scenario (default: none)"},
	{"endpoint", "SLUICE_BENCH_ENDPOINT", "NAME", "chat",
	 "chat, completions, completion, generate or infer"},
	{"stream", "SLUICE_BENCH_STREAM", "on|off", "on", "on or off (infer: off)"},
	/* The load. */
	{"concurrency", "SLUICE_BENCH_CONCURRENCY", "N", "1",
	 "clients, each sending its next request when its last ends "
	 "(closed loop)"},
	{"concurrency-sweep", "SLUICE_BENCH_CONCURRENCY_SWEEP", "N,N,...", "",
	 "closed loop levels, one run each, e.g. 1,2,4,8,16"},
	{"rate", "SLUICE_BENCH_RATE", "PER_S[,PER_S...]", "0",
	 "open loop: arrivals per second, one run per rate; 0: closed loop"},
	{"arrivals", "SLUICE_BENCH_ARRIVALS", "poisson|constant|gamma",
	 "poisson", "open loop: the gaps between arrivals"},
	{"burstiness", "SLUICE_BENCH_BURSTINESS", "SHAPE", "1",
	 "gamma arrivals: the shape (1 is Poisson; below 1 burstier)"},
	{"requests", "SLUICE_BENCH_REQUESTS", "N", "100",
	 "requests per run, warm-up included"},
	{"duration", "SLUICE_BENCH_DURATION", "SECONDS", "0",
	 "seconds per run; when set, a run ends at whichever comes first"},
	{"warmup", "SLUICE_BENCH_WARMUP", "SECONDS", "0",
	 "requests arriving in the first seconds are sent but not counted"},
	{"ramp", "SLUICE_BENCH_RAMP", "SECONDS", "0",
	 "the rate (or the clients) rise linearly to the level over this"},
	{"num-runs", "SLUICE_BENCH_NUM_RUNS", "N", "1",
	 "repeat each level N times: mean, spread and CV in the report"},
	/* The workload. */
	{"dataset", "SLUICE_BENCH_DATASET", "KIND", "synthetic",
	 "synthetic, jsonl, sharegpt or shared-prefix"},
	{"dataset-path", "SLUICE_BENCH_DATASET_PATH", "FILE", "",
	 "the JSONL or ShareGPT file"},
	{"prompts", "SLUICE_BENCH_PROMPTS", "FILE", "",
	 "a JSONL file of prompts: --dataset jsonl --dataset-path FILE"},
	{"input-len", "SLUICE_BENCH_INPUT_LEN", "DIST", "uniform:8-24",
	 "synthetic prompt tokens: N, uniform:A-B, normal:MEAN,SD or "
	 "hist:V:W,V:W"},
	{"output-len", "SLUICE_BENCH_OUTPUT_LEN", "DIST", "",
	 "max_tokens per request, as --input-len (default: --max-tokens)"},
	{"max-tokens", "SLUICE_BENCH_MAX_TOKENS", "N", "32",
	 "max_tokens when --output-len is not given"},
	{"sharegpt-output", "SLUICE_BENCH_SHAREGPT_OUTPUT", "file|dist", "file",
	 "ShareGPT: ask for the recorded replies' lengths, or --output-len"},
	{"max-turns", "SLUICE_BENCH_MAX_TURNS", "N", "0",
	 "ShareGPT: turns replayed per conversation, 0 all"},
	{"think-time", "SLUICE_BENCH_THINK_TIME", "SECONDS", "0",
	 "multi-turn: a user's pause between a reply and the next turn"},
	{"prefix-groups", "SLUICE_BENCH_PREFIX_GROUPS", "N", "4",
	 "shared-prefix: groups"},
	{"prompts-per-group", "SLUICE_BENCH_PROMPTS_PER_GROUP", "N", "8",
	 "shared-prefix: prompts in each group"},
	{"prefix-len", "SLUICE_BENCH_PREFIX_LEN", "N", "256",
	 "shared-prefix: tokens of each group's prefix"},
	{"suffix-len", "SLUICE_BENCH_SUFFIX_LEN", "N", "16",
	 "shared-prefix: tokens of each prompt's own part"},
	{"tokenize", "SLUICE_BENCH_TOKENIZE", "on|off", "off",
	 "count every prompt's tokens with the target's /tokenize first"},
	{"temperature", "SLUICE_BENCH_TEMPERATURE", "T", "0", "sampling temperature"},
	/* Who sends it. */
	{"priority-mix", "SLUICE_BENCH_PRIORITY_MIX", "MIX", "",
	 "e.g. urgent=0.1,normal=0.9 (X-Priority per request)"},
	{"tenant", "SLUICE_BENCH_TENANT", "NAME:KEY:W[:PRIO][;...]", "",
	 "a tenant with its key, weight and priority; several (flag repeated, "
	 "or ; between them): conversations are shared by weight"},
	{"model-mix", "SLUICE_BENCH_MODEL_MIX", "A,B,A,...", "",
	 "the \"model\" of each conversation in turn (names repeat to weigh "
	 "them)"},
	{"api-key", "SLUICE_BENCH_API_KEY", "KEY", "",
	 "sent as a bearer token (a tenant's key replaces it)"},
	{"metrics-key", "SLUICE_BENCH_METRICS_KEY", "KEY", "",
	 "bearer token for /metrics: sluice's admin key when one is set "
	 "(default: --api-key, else the first --tenant's key)"},
	{"llama-key", "SLUICE_BENCH_LLAMA_KEY", "KEY", "",
	 "bearer token for --llama-url"},
	/* What counts. */
	{"slo", "SLUICE_BENCH_SLO", "ttft=MS,tpot=MS,e2el=MS", "",
	 "goodput counts the requests that meet every SLO given"},
	{"slo-mix", "SLUICE_BENCH_SLO_MIX", "NAME:SLOS:SHARE,...", "",
	 "SLO classes instead of --slo, SLOS joined by /: each conversation "
	 "draws one by share, e.g. interactive:ttft=500ms/tpot=50ms:0.8,"
	 "batch:ttft=30s:0.2"},
	{"slo-headers", "SLUICE_BENCH_SLO_HEADERS", "on|off", "off",
	 "send each request's ttft and tpot SLOs (--slo's or its class's) as "
	 "X-SLO-TTFT-Ms and X-SLO-TPOT-Ms"},
	{"retry", "SLUICE_BENCH_RETRY", "on|off", "on",
	 "honour Retry-After on 429 and 503: wait as told, send again"},
	{"max-retries", "SLUICE_BENCH_MAX_RETRIES", "N", "3",
	 "retries per request at most"},
	/* Scenarios. */
	{"cancel-share", "SLUICE_BENCH_CANCEL_SHARE", "FRACTION", "0",
	 "this share of requests leave early (the cancellation scenario)"},
	{"cancel-after-tokens", "SLUICE_BENCH_CANCEL_AFTER_TOKENS", "N", "4",
	 "streams leave after this many tokens"},
	{"cancel-after-ms", "SLUICE_BENCH_CANCEL_AFTER_MS", "MS", "200",
	 "plain answers leave after this long"},
	{"slots-interval", "SLUICE_BENCH_SLOTS_INTERVAL", "SECONDS", "1.5",
	 "how often --llama-url's /slots is read while a left request is "
	 "unresolved (over 1 s: each read delays llama-server's check)"},
	{"kill-at", "SLUICE_BENCH_KILL_AT", "SECONDS", "0",
	 "failover: SIGKILL --kill-pid this long into each run"},
	{"kill-pid", "SLUICE_BENCH_KILL_PID", "PID", "0",
	 "failover: the replica to kill"},
	{"scrape-interval", "SLUICE_BENCH_SCRAPE_INTERVAL", "SECONDS", "1",
	 "how often /metrics is sampled during a run; 0: never"},
	/* Search. */
	{"search", "SLUICE_BENCH_SEARCH", "on|off", "off",
	 "find the highest rate whose goodput meets --search-goodput"},
	{"search-range", "SLUICE_BENCH_SEARCH_RANGE", "LO-HI", "0.5-64",
	 "rates searched, per second"},
	{"search-goodput", "SLUICE_BENCH_SEARCH_GOODPUT", "FRACTION", "0.9",
	 "share of requests that must meet the SLOs"},
	{"search-steps", "SLUICE_BENCH_SEARCH_STEPS", "N", "8",
	 "runs the search makes at most"},
	/* Reports. */
	{"csv", "SLUICE_BENCH_CSV", "FILE", "", "also write the results as CSV here"},
	{"json", "SLUICE_BENCH_JSON", "FILE", "", "also write the results as JSON here"},
	{"jsonl", "SLUICE_BENCH_JSONL", "FILE", "", "one line per request here"},
	{"html", "SLUICE_BENCH_HTML", "FILE", "",
	 "a self-contained HTML report here"},
	{"label", "SLUICE_BENCH_LABEL", "TEXT", "", "name of the runs in the reports"},
	{"timeout", "SLUICE_BENCH_TIMEOUT", "SECONDS", "300", "seconds per request"},
	{"seed", "SLUICE_BENCH_SEED", "N", "1", "seed for prompts, mixes and arrivals"},
	{"quiet", "SLUICE_BENCH_QUIET", "on|off", "off", "no progress line"},
};
/* clang-format on */
#define N_OPTS SL_ARRAY_SIZE(opt_defs)

void usage_error(const char *fmt, ...)
{
	va_list ap;
	fputs("sluice-bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static void print_help(void)
{
	printf("Usage: sluice-bench [OPTION]...\n"
	       "       sluice-bench compare A.json B.json [...] [--html FILE]\n"
	       "       sluice-bench report RUN.json [--html FILE]\n"
	       "Load for sluice or llama-server; prints a Markdown table.\n\n"
	       "Options (each also read from the variable shown; a flag "
	       "wins):\n");
	for (size_t i = 0; i < N_OPTS; i++)
		printf("  --%s %s\n      %s\n      [%s; default: %s]\n",
		       opt_defs[i].name, opt_defs[i].metavar, opt_defs[i].help,
		       opt_defs[i].env,
		       opt_defs[i].def[0] ? opt_defs[i].def : "none");
}

static double number(const char *name, const char *v, double lo, double hi)
{
	char *end;
	double d = strtod(v, &end);
	if (end == v || *end || !isfinite(d) || d < lo || d > hi)
		usage_error("--%s: expected a number from %g to %g, got \"%s\"",
		            name, lo, hi, v);
	return d;
}

static bool on_off(const char *name, const char *v)
{
	if (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "1"))
		return true;
	if (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "0"))
		return false;
	usage_error("--%s: expected on or off, got \"%s\"", name, v);
}

/* Splits v at sep and calls each(o, piece) on every non-empty piece. */
static void each_piece(struct options *o, const char *v, const char *sep,
                       void (*each)(struct options *, const char *))
{
	char *copy = sl_xstrdup(v), *save = NULL;
	for (char *t = strtok_r(copy, sep, &save); t;
	     t = strtok_r(NULL, sep, &save))
		each(o, t);
	free(copy);
}

static void add_level(struct options *o, const char *t)
{
	if (o->n_levels == MAX_LEVELS)
		usage_error("--concurrency-sweep: at most %d levels",
		            MAX_LEVELS);
	o->levels[o->n_levels++] =
	    (unsigned)number("concurrency-sweep", t, 1, 1000000);
}

static void add_rate(struct options *o, const char *t)
{
	if (o->n_rates == MAX_LEVELS)
		usage_error("--rate: at most %d rates", MAX_LEVELS);
	o->rates[o->n_rates++] = number("rate", t, 1e-6, 1e7);
}

static int prio_named(const char *s, size_t len)
{
	for (int k = PRIO_URGENT; k < N_PRIOS; k++)
		if (len == strlen(prio_names[k]) &&
		    !strncmp(s, prio_names[k], len))
			return k;
	return PRIO_NONE;
}

static void add_mix(struct options *o, const char *t)
{
	const char *eq = strchr(t, '=');
	int c = eq ? prio_named(t, (size_t)(eq - t)) : PRIO_NONE;
	if (c == PRIO_NONE)
		usage_error("--priority-mix: expected CLASS=FRACTION with "
		            "CLASS urgent, normal or batch, got \"%s\"",
		            t);
	o->mix[c] = number("priority-mix", eq + 1, 0, 1);
	o->has_mix = true;
}

/* NAME:KEY:WEIGHT[:PRIORITY]; an empty KEY sends none. */
static void add_tenant(struct options *o, const char *t)
{
	if (o->n_tenants == MAX_TENANTS)
		usage_error("--tenant: at most %d tenants", MAX_TENANTS);
	char *copy = sl_xstrdup(t);
	char *parts[4] = {0};
	unsigned n = 0;
	for (char *p = copy; n < 4; n++) {
		parts[n] = p;
		char *colon = strchr(p, ':');
		if (!colon) {
			n++;
			break;
		}
		*colon = '\0';
		p = colon + 1;
	}
	if (n < 3 || !parts[0][0] || strlen(parts[0]) >= 64)
		usage_error("--tenant: expected NAME:KEY:WEIGHT[:PRIORITY], "
		            "got \"%s\"",
		            t);
	struct tenant *x = &o->tenants[o->n_tenants++];
	snprintf(x->name, sizeof(x->name), "%s", parts[0]);
	x->key = parts[1][0] ? sl_xstrdup(parts[1]) : NULL;
	char *end;
	x->weight = strtod(parts[2], &end);
	if (end == parts[2] || *end || !(x->weight >= 1e-6 && x->weight <= 1e6))
		usage_error("--tenant %s: the weight must be a number from "
		            "1e-06 to 1e+06, got \"%s\"",
		            x->name, parts[2]);
	x->prio = PRIO_NONE;
	if (n == 4 &&
	    (x->prio = prio_named(parts[3], strlen(parts[3]))) == PRIO_NONE)
		usage_error("--tenant %s: priority \"%s\" is not urgent, "
		            "normal or batch",
		            x->name, parts[3]);
	for (unsigned i = 0; i + 1 < o->n_tenants; i++)
		if (!strcmp(o->tenants[i].name, x->name))
			usage_error("--tenant: \"%s\" given twice", x->name);
	free(copy);
}

static void add_model(struct options *o, const char *t)
{
	if (o->n_model_seq == MAX_MIX)
		usage_error("--model-mix: at most %d entries", MAX_MIX);
	unsigned i = 0;
	while (i < o->n_models && strcmp(o->models[i], t))
		i++;
	if (i == o->n_models) {
		if (o->n_models == MAX_MODELS)
			usage_error("--model-mix: at most %d models",
			            MAX_MODELS);
		o->models[o->n_models++] = sl_xstrdup(t);
	}
	o->model_seq[o->n_model_seq++] = (uint8_t)i;
}

static void parse_slo(struct options *o, const char *v)
{
	char err[256];
	if (slo_parse(&o->slo, v, ',', err, sizeof(err)) != 0)
		usage_error("--slo: %s", err);
}

static void parse_slo_mix(struct options *o, const char *v)
{
	char err[256];
	if (slo_mix_parse(o->slo_classes, &o->n_slo_classes, v, err,
	                  sizeof(err)) != 0)
		usage_error("--slo-mix: %s", err);
}

static void parse_dist(const char *name, struct wl_dist *d, const char *v)
{
	char err[160];
	if (wl_dist_parse(d, v, err, sizeof(err)) != 0)
		usage_error("--%s: %s", name, err);
}

static void parse_range(struct options *o, const char *v)
{
	char *end;
	o->search_lo = strtod(v, &end);
	if (*end != '-' || !(o->search_lo > 0))
		usage_error("--search-range: expected LO-HI, got \"%s\"", v);
	o->search_hi = number("search-range", end + 1, 1e-6, 1e7);
	if (o->search_hi <= o->search_lo)
		usage_error("--search-range: %s is not a range from low to "
		            "high",
		            v);
}

static void apply(struct options *o, size_t i, const char *v);

static void apply_dataset(struct options *o, const char *v)
{
	static const char *const kinds[] = {"synthetic", "jsonl", "sharegpt",
	                                    "shared-prefix"};
	static const enum wl_source sources[] = {WL_SYNTHETIC, WL_JSONL,
	                                         WL_SHAREGPT, WL_SHARED_PREFIX};
	for (size_t k = 0; k < SL_ARRAY_SIZE(kinds); k++)
		if (!strcmp(v, kinds[k])) {
			o->wl.source = sources[k];
			return;
		}
	usage_error("--dataset: expected synthetic, jsonl, sharegpt or "
	            "shared-prefix, got \"%s\"",
	            v);
}

static void apply_endpoint(struct options *o, const char *v)
{
	for (size_t k = 0; k < SL_ARRAY_SIZE(endpoint_names); k++)
		if (!strcmp(endpoint_names[k], v)) {
			o->endpoint = (enum endpoint)k;
			return;
		}
	usage_error("--endpoint: expected chat, completions, completion, "
	            "generate or infer, got \"%s\"",
	            v);
}

static void apply_arrivals(struct options *o, const char *v)
{
	if (!strcmp(v, "poisson"))
		o->arrivals = ARR_POISSON;
	else if (!strcmp(v, "constant"))
		o->arrivals = ARR_CONSTANT;
	else if (!strcmp(v, "gamma"))
		o->arrivals = ARR_GAMMA;
	else
		usage_error("--arrivals: expected poisson, constant or gamma, "
		            "got \"%s\"",
		            v);
}

/* Scratch for options that are parsed once all are known. */
static const char *output_len_spec, *max_tokens_spec;

static const char *opt_or_null(const char *v)
{
	return *v ? v : NULL;
}

static void apply(struct options *o, size_t i, const char *v)
{
	const char *n = opt_defs[i].name;
	if (!strcmp(n, "url"))
		o->url = v;
	else if (!strcmp(n, "metrics-url"))
		o->metrics_url = opt_or_null(v);
	else if (!strcmp(n, "llama-url"))
		o->llama_url = opt_or_null(v);
	else if (!strcmp(n, "endpoint"))
		apply_endpoint(o, v);
	else if (!strcmp(n, "stream"))
		o->stream = on_off(n, v);
	else if (!strcmp(n, "concurrency")) {
		o->levels[0] = (unsigned)number(n, v, 1, 1000000);
		o->n_levels = 1;
	} else if (!strcmp(n, "concurrency-sweep")) {
		if (*v) {
			o->n_levels = 0; /* a sweep replaces --concurrency */
			each_piece(o, v, ",", add_level);
		}
	} else if (!strcmp(n, "rate")) {
		/* 0 alone is the closed loop; in a list, a rate is above 0. */
		o->n_rates = 0;
		if (strcmp(v, "0"))
			each_piece(o, v, ",", add_rate);
	} else if (!strcmp(n, "arrivals"))
		apply_arrivals(o, v);
	else if (!strcmp(n, "burstiness"))
		o->burstiness = number(n, v, 0.01, 100);
	else if (!strcmp(n, "requests"))
		o->requests = (uint64_t)number(n, v, 1, 1e9);
	else if (!strcmp(n, "duration"))
		o->duration_s = number(n, v, 0, 1e7);
	else if (!strcmp(n, "warmup"))
		o->warmup_s = number(n, v, 0, 1e7);
	else if (!strcmp(n, "ramp"))
		o->ramp_s = number(n, v, 0, 1e7);
	else if (!strcmp(n, "num-runs"))
		o->num_runs = (unsigned)number(n, v, 1, 100);
	else if (!strcmp(n, "dataset"))
		apply_dataset(o, v);
	else if (!strcmp(n, "dataset-path"))
		o->wl.file = opt_or_null(v);
	else if (!strcmp(n, "prompts")) {
		if (*v) {
			o->wl.source = WL_JSONL;
			o->wl.file = v;
		}
	} else if (!strcmp(n, "input-len"))
		parse_dist(n, &o->wl.input_len, v);
	else if (!strcmp(n, "output-len"))
		output_len_spec = v;
	else if (!strcmp(n, "max-tokens")) {
		number(n, v, 1, 1e7);
		max_tokens_spec = v;
	} else if (!strcmp(n, "sharegpt-output")) {
		if (strcmp(v, "file") && strcmp(v, "dist"))
			usage_error("--sharegpt-output: expected file or dist, "
			            "got \"%s\"",
			            v);
		o->wl.output_from_file = !strcmp(v, "file");
	} else if (!strcmp(n, "max-turns"))
		o->wl.max_turns = (unsigned)number(n, v, 0, 1e6);
	else if (!strcmp(n, "think-time"))
		o->think_s = number(n, v, 0, 1e6);
	else if (!strcmp(n, "prefix-groups"))
		o->wl.groups = (unsigned)number(n, v, 1, 1e5);
	else if (!strcmp(n, "prompts-per-group"))
		o->wl.prompts_per_group = (unsigned)number(n, v, 1, 1e5);
	else if (!strcmp(n, "prefix-len"))
		o->wl.prefix_len = (unsigned)number(n, v, 0, 1e6);
	else if (!strcmp(n, "suffix-len"))
		o->wl.suffix_len = (unsigned)number(n, v, 1, 1e6);
	else if (!strcmp(n, "tokenize"))
		o->tokenize = on_off(n, v);
	else if (!strcmp(n, "temperature"))
		o->temperature = number(n, v, 0, 100);
	else if (!strcmp(n, "priority-mix")) {
		memset(o->mix, 0, sizeof(o->mix));
		o->has_mix = false;
		each_piece(o, v, ",", add_mix);
	} else if (!strcmp(n, "tenant"))
		each_piece(o, v, ";", add_tenant);
	else if (!strcmp(n, "model-mix")) {
		o->n_model_seq = 0;
		each_piece(o, v, ", ", add_model);
	} else if (!strcmp(n, "api-key"))
		o->api_key = opt_or_null(v);
	else if (!strcmp(n, "metrics-key"))
		o->metrics_key = opt_or_null(v);
	else if (!strcmp(n, "llama-key"))
		o->llama_key = opt_or_null(v);
	else if (!strcmp(n, "slo"))
		parse_slo(o, v);
	else if (!strcmp(n, "slo-mix"))
		parse_slo_mix(o, v);
	else if (!strcmp(n, "slo-headers"))
		o->slo_headers = on_off(n, v);
	else if (!strcmp(n, "retry"))
		o->retry = on_off(n, v);
	else if (!strcmp(n, "max-retries"))
		o->max_retries = (unsigned)number(n, v, 0, 100);
	else if (!strcmp(n, "cancel-share"))
		o->cancel_share = number(n, v, 0, 1);
	else if (!strcmp(n, "cancel-after-tokens"))
		o->cancel_tokens = (unsigned)number(n, v, 0, 1e7);
	else if (!strcmp(n, "cancel-after-ms"))
		o->cancel_ms = number(n, v, 0, 1e9);
	else if (!strcmp(n, "slots-interval"))
		o->slots_s = number(n, v, 0.01, 3600);
	else if (!strcmp(n, "kill-at"))
		o->kill_at_s = number(n, v, 0, 1e7);
	else if (!strcmp(n, "kill-pid"))
		o->kill_pid = (int)number(n, v, 0, 1e9);
	else if (!strcmp(n, "scrape-interval"))
		o->scrape_s = number(n, v, 0, 3600);
	else if (!strcmp(n, "search"))
		o->search = on_off(n, v);
	else if (!strcmp(n, "search-range"))
		parse_range(o, v);
	else if (!strcmp(n, "search-goodput"))
		o->search_min_goodput = number(n, v, 0.01, 1);
	else if (!strcmp(n, "search-steps"))
		o->search_steps = (unsigned)number(n, v, 2, 64);
	else if (!strcmp(n, "csv"))
		o->csv = opt_or_null(v);
	else if (!strcmp(n, "json"))
		o->json = opt_or_null(v);
	else if (!strcmp(n, "jsonl"))
		o->jsonl = opt_or_null(v);
	else if (!strcmp(n, "html"))
		o->html = opt_or_null(v);
	else if (!strcmp(n, "label"))
		o->label = v;
	else if (!strcmp(n, "timeout"))
		o->timeout_s = number(n, v, 0.001, 1e6);
	else if (!strcmp(n, "seed"))
		o->seed = (uint64_t)number(n, v, 0, 1e18);
	else if (!strcmp(n, "quiet"))
		o->quiet = on_off(n, v);
}

static size_t find_opt(const char *name, size_t len)
{
	size_t i = 0;
	while (i < N_OPTS && (strlen(opt_defs[i].name) != len ||
	                      strncmp(opt_defs[i].name, name, len)))
		i++;
	return i;
}

bool options_have_slo(const struct options *o)
{
	return o->n_slo_classes > 0 || slo_any(&o->slo);
}

const struct slo *options_slo_of(const struct options *o, int cls)
{
	return cls >= 0 ? &o->slo_classes[cls].slo : &o->slo;
}

/* Whether some request would carry an SLO header (e2el has none). */
static bool sends_slo(const struct options *o)
{
	bool any = o->slo.ttft_ms > 0 || o->slo.tpot_ms > 0;
	for (unsigned i = 0; i < o->n_slo_classes; i++)
		any |= o->slo_classes[i].slo.ttft_ms > 0 ||
		       o->slo_classes[i].slo.tpot_ms > 0;
	return any;
}

/* What depends on several options, checked once all are read. */
static void settle(struct options *o)
{
	if (!o->metrics_url)
		o->metrics_url = o->url;
	/* /metrics asks for a key where requests do: the one requests use. */
	if (!o->metrics_key)
		o->metrics_key = o->api_key;
	if (!o->metrics_key && o->n_tenants)
		o->metrics_key = o->tenants[0].key;
	if (o->endpoint == EP_INFER)
		o->stream = false;
	char spec[32];
	snprintf(spec, sizeof(spec), "%s", max_tokens_spec);
	parse_dist(
	    output_len_spec && *output_len_spec ? "output-len" : "max-tokens",
	    &o->wl.output_len,
	    output_len_spec && *output_len_spec ? output_len_spec : spec);
	o->wl.seed = o->seed;
	o->wl.count = (unsigned)SL_MIN(o->requests, (uint64_t)100000);
	if (o->has_mix) {
		double total = 0;
		for (int c = PRIO_URGENT; c < N_PRIOS; c++)
			total += o->mix[c];
		if (fabs(total - 1) > 1e-6)
			usage_error("--priority-mix: the fractions add up to "
			            "%g, not 1",
			            total);
	}
	if (o->n_rates > 0 && o->n_levels > 1)
		usage_error("--concurrency-sweep: not with --rate (open loop)");
	if ((o->wl.source == WL_JSONL || o->wl.source == WL_SHAREGPT) &&
	    !o->wl.file)
		usage_error("--dataset %s: needs --dataset-path FILE",
		            o->wl.source == WL_JSONL ? "jsonl" : "sharegpt");
	if (o->n_slo_classes && slo_any(&o->slo))
		usage_error("--slo-mix: not with --slo (each class has its own "
		            "SLOs)");
	if (o->search && !options_have_slo(o))
		usage_error("--search: give the SLOs to meet with --slo or "
		            "--slo-mix");
	if (o->slo_headers && !sends_slo(o))
		usage_error("--slo-headers: no ttft or tpot SLO to send: give "
		            "them with --slo or --slo-mix");
	if (o->search && o->n_rates > 1)
		usage_error("--search: not with several --rate levels");
	if (o->search && o->num_runs > 1)
		usage_error("--search: not with --num-runs (each step is one "
		            "run)");
	if (o->search && o->duration_s == 0)
		usage_error("--search: give each step a --duration");
	if (o->kill_at_s > 0 && o->kill_pid <= 0)
		usage_error("--kill-at: give the replica's --kill-pid");
	if (o->cancel_share > 0 && o->stream && o->cancel_tokens == 0)
		usage_error("--cancel-after-tokens: at least 1 for streams");
}

/*
 * Options that start empty and take no default pass: the first --tenant
 * replaces those of the environment, and an empty --slo is an error, not
 * an SLO every request meets.
 */
static bool set_only_when_given(const char *name)
{
	return !strcmp(name, "tenant") || !strcmp(name, "slo") ||
	       !strcmp(name, "slo-mix");
}

void options_parse(struct options *o, int argc, char **argv)
{
	memset(o, 0, sizeof(*o));
	o->argc = argc;
	o->argv = argv;
	for (size_t i = 0; i < N_OPTS; i++)
		if (!set_only_when_given(opt_defs[i].name))
			apply(o, i, opt_defs[i].def);
	for (size_t i = 0; i < N_OPTS; i++) {
		const char *v = getenv(opt_defs[i].env);
		if (v && *v)
			apply(o, i, v);
	}
	bool tenant_flag_seen = false;
	for (int a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
			print_help();
			exit(0);
		}
		if (strncmp(argv[a], "--", 2))
			usage_error("%s: unexpected argument (see --help)",
			            argv[a]);
		const char *name = argv[a] + 2, *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		size_t i = find_opt(name, len);
		if (i == N_OPTS)
			usage_error("%s: unknown option (see --help)", argv[a]);
		const char *v = eq ? eq + 1 : NULL;
		/* A bare switch: on, unless on or off follows it. */
		bool on_off_next =
		    a + 1 < argc &&
		    (!strcmp(argv[a + 1], "on") || !strcmp(argv[a + 1], "off"));
		if (!v && !strcmp(opt_defs[i].metavar, "on|off") &&
		    !on_off_next)
			v = "on";
		if (!v && a + 1 >= argc)
			usage_error("--%.*s: missing value", (int)len, name);
		/* Tenants add up, flag after flag; the first flag replaces
		 * those of the environment. */
		if (!strcmp(opt_defs[i].name, "tenant") && !tenant_flag_seen) {
			tenant_flag_seen = true;
			for (unsigned k = 0; k < o->n_tenants; k++)
				free(o->tenants[k].key);
			o->n_tenants = 0;
		}
		apply(o, i, v ? v : argv[++a]);
	}
	settle(o);
}

void options_free(struct options *o)
{
	for (unsigned i = 0; i < o->n_tenants; i++)
		free(o->tenants[i].key);
	for (unsigned i = 0; i < o->n_models; i++)
		free(o->models[i]);
	o->n_tenants = o->n_models = o->n_model_seq = 0;
}

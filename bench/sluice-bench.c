/*
 * sluice-bench: a load generator for sluice, or for llama-server itself.
 *
 * One libuv loop drives libcurl's multi interface (libsluice's curl_loop),
 * so thousands of concurrent requests cost one thread. Two ways to load:
 *   closed loop  --concurrency N requests always in flight, each finished
 *                one replaced at once (--concurrency-sweep 1,2,4 runs one
 *                per level);
 *   open loop    --rate R arrivals per second, constant or Poisson,
 *                whatever the server's pace.
 * A run ends after --requests N, or --duration S if given.
 *
 * Streams are timed token by token: time to first token, the gaps between
 * tokens, end-to-end latency and token counts. With a --priority-mix each
 * request carries X-Priority, and the report splits by class. Before and
 * after each run the target's /metrics?format=json (sluice's summary) gives
 * the batches formed meanwhile; against llama-server those columns say "-".
 */
#include "bench_stats.h"

#include "sluice/base/common.h"
#include "sluice/net/curl_loop.h"
#include "sluice/net/sse.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

extern char **environ;

/* ---- options ---- */

enum endpoint { EP_CHAT, EP_COMPLETIONS, EP_COMPLETION, EP_GENERATE, EP_INFER };
static const char *const endpoint_names[] = {"chat", "completions",
                                             "completion", "generate", "infer"};
static const char *const endpoint_paths[] = {"/v1/chat/completions",
                                             "/v1/completions", "/completion",
                                             "/generate", "/infer"};

/* Priority classes, as sluice names them; index 0 of the stats is "all". */
enum { CLASS_ALL, CLASS_URGENT, CLASS_NORMAL, CLASS_BATCH, N_CLASSES };
static const char *const class_names[] = {"all", "urgent", "normal", "batch"};

/* Bytes of a non-streamed answer kept to count its tokens. */
#define MAX_BODY (16u * 1024 * 1024)
/* Sweep levels at most. */
#define MAX_LEVELS 32
/* Open-loop requests in flight at most: past it arrivals count as failed. */
#define MAX_OPEN_INFLIGHT 100000

struct options {
	const char *url;
	const char *metrics_url;
	enum endpoint endpoint;
	bool stream;
	unsigned levels[MAX_LEVELS];
	unsigned n_levels;
	double rate;
	bool poisson;
	uint64_t requests;
	double duration_s;
	unsigned max_tokens;
	double temperature;
	const char *prompts_file;
	unsigned prompt_words;
	double mix[N_CLASSES]; /* probabilities per class; mix[0] unused */
	bool has_mix;
	const char *api_key;
	const char *metrics_key; /* for /metrics; --api-key when not given */
	const char *csv, *json, *plot, *label;
	double timeout_s;
	uint64_t seed;
	bool quiet;
};

/*
 * An option: its flag, variable, placeholder in --help, default and help.
 * A switch (placeholder "on|off") may also be given bare: --quiet is
 * --quiet on.
 */
struct opt_def {
	const char *name, *env, *metavar, *def, *help;
};

/* clang-format off */
static const struct opt_def opt_defs[] = {
	{"url", "SLUICE_BENCH_URL", "URL", "http://127.0.0.1:8080",
	 "base URL of sluice (or of a llama-server)"},
	{"metrics-url", "SLUICE_BENCH_METRICS_URL", "URL", "",
	 "where /metrics?format=json is read for batches (default: --url)"},
	{"endpoint", "SLUICE_BENCH_ENDPOINT", "NAME", "chat",
	 "chat, completions, completion, generate or infer"},
	{"stream", "SLUICE_BENCH_STREAM", "on|off", "on", "on or off (infer: off)"},
	{"concurrency", "SLUICE_BENCH_CONCURRENCY", "N", "1",
	 "requests in flight (closed loop)"},
	{"concurrency-sweep", "SLUICE_BENCH_CONCURRENCY_SWEEP", "N,N,...", "",
	 "comma-separated levels, one run each, e.g. 1,2,4,8,16"},
	{"rate", "SLUICE_BENCH_RATE", "PER_S", "0",
	 "arrivals per second (open loop); 0: closed loop"},
	{"arrivals", "SLUICE_BENCH_ARRIVALS", "poisson|constant", "poisson",
	 "open-loop arrivals: poisson or constant"},
	{"requests", "SLUICE_BENCH_REQUESTS", "N", "100", "requests per run"},
	{"duration", "SLUICE_BENCH_DURATION", "SECONDS", "0",
	 "seconds per run; when set, a run ends at whichever comes first"},
	{"max-tokens", "SLUICE_BENCH_MAX_TOKENS", "N", "32", "tokens per request"},
	{"temperature", "SLUICE_BENCH_TEMPERATURE", "T", "0", "sampling temperature"},
	{"prompts", "SLUICE_BENCH_PROMPTS", "FILE", "",
	 "JSONL file: one prompt per line, a string or {\"prompt\": ...}"},
	{"prompt-length", "SLUICE_BENCH_PROMPT_LENGTH", "WORDS", "16",
	 "generated prompts: mean words (uniform from half to 1.5 times)"},
	{"priority-mix", "SLUICE_BENCH_PRIORITY_MIX", "MIX", "",
	 "e.g. urgent=0.1,normal=0.9 (X-Priority per request)"},
	{"api-key", "SLUICE_BENCH_API_KEY", "KEY", "", "sent as a bearer token"},
	{"metrics-key", "SLUICE_BENCH_METRICS_KEY", "KEY", "",
	 "bearer token for /metrics: sluice's admin key when one is set "
	 "(default: --api-key)"},
	{"csv", "SLUICE_BENCH_CSV", "FILE", "", "also write the results as CSV here"},
	{"json", "SLUICE_BENCH_JSON", "FILE", "", "also write the results as JSON here"},
	{"plot", "SLUICE_BENCH_PLOT", "FILE", "",
	 "draw latency and throughput against concurrency into this SVG "
	 "(needs gnuplot)"},
	{"label", "SLUICE_BENCH_LABEL", "TEXT", "", "name of the runs in the reports"},
	{"timeout", "SLUICE_BENCH_TIMEOUT", "SECONDS", "300", "seconds per request"},
	{"seed", "SLUICE_BENCH_SEED", "N", "1", "seed for prompts, mix and arrivals"},
	{"quiet", "SLUICE_BENCH_QUIET", "on|off", "off", "no progress line"},
};
/* clang-format on */
#define N_OPTS SL_ARRAY_SIZE(opt_defs)

SL_NORETURN SL_PRINTF(1, 2) static void usage_error(const char *fmt, ...)
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
	printf("Usage: sluice-bench [OPTION]...\nLoad for sluice or "
	       "llama-server; prints a Markdown table.\n\nOptions (each also "
	       "read from the variable shown; a flag wins):\n");
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

static void parse_levels(struct options *o, const char *v)
{
	char *copy = sl_xstrdup(v), *save = NULL;
	o->n_levels = 0; /* a sweep replaces --concurrency */
	for (char *t = strtok_r(copy, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (o->n_levels == MAX_LEVELS)
			usage_error("--concurrency-sweep: at most %d levels",
			            MAX_LEVELS);
		o->levels[o->n_levels++] =
		    (unsigned)number("concurrency-sweep", t, 1, 1000000);
	}
	free(copy);
	if (o->n_levels == 0)
		usage_error("--concurrency-sweep: no levels in \"%s\"", v);
}

static void parse_mix(struct options *o, const char *v)
{
	char *copy = sl_xstrdup(v), *save = NULL;
	double total = 0;
	for (char *t = strtok_r(copy, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(t, '=');
		int c = 0;
		for (int k = CLASS_URGENT; eq && k < N_CLASSES; k++)
			if ((size_t)(eq - t) == strlen(class_names[k]) &&
			    !strncmp(t, class_names[k], (size_t)(eq - t)))
				c = k;
		if (!c)
			usage_error("--priority-mix: expected CLASS=FRACTION "
			            "with CLASS urgent, normal or batch, got "
			            "\"%s\"",
			            t);
		o->mix[c] = number("priority-mix", eq + 1, 0, 1);
		total += o->mix[c];
	}
	free(copy);
	if (fabs(total - 1) > 1e-6)
		usage_error("--priority-mix: the fractions add up to %g, not 1",
		            total);
	o->has_mix = true;
}

static void apply(struct options *o, size_t i, const char *v)
{
	const char *n = opt_defs[i].name;
	if (!strcmp(n, "url"))
		o->url = v;
	else if (!strcmp(n, "metrics-url"))
		o->metrics_url = v;
	else if (!strcmp(n, "endpoint")) {
		size_t k = 0;
		while (k < SL_ARRAY_SIZE(endpoint_names) &&
		       strcmp(endpoint_names[k], v))
			k++;
		if (k == SL_ARRAY_SIZE(endpoint_names))
			usage_error("--endpoint: expected chat, completions, "
			            "completion, generate or infer, got \"%s\"",
			            v);
		o->endpoint = (enum endpoint)k;
	} else if (!strcmp(n, "stream"))
		o->stream = on_off(n, v);
	else if (!strcmp(n, "concurrency")) {
		o->levels[0] = (unsigned)number(n, v, 1, 1000000);
		o->n_levels = 1;
	} else if (!strcmp(n, "concurrency-sweep")) {
		if (*v)
			parse_levels(o, v);
	} else if (!strcmp(n, "rate"))
		o->rate = number(n, v, 0, 1e7);
	else if (!strcmp(n, "arrivals")) {
		if (strcmp(v, "poisson") && strcmp(v, "constant"))
			usage_error("--arrivals: expected poisson or constant, "
			            "got \"%s\"",
			            v);
		o->poisson = !strcmp(v, "poisson");
	} else if (!strcmp(n, "requests"))
		o->requests = (uint64_t)number(n, v, 1, 1e12);
	else if (!strcmp(n, "duration"))
		o->duration_s = number(n, v, 0, 1e7);
	else if (!strcmp(n, "max-tokens"))
		o->max_tokens = (unsigned)number(n, v, 1, 1e7);
	else if (!strcmp(n, "temperature"))
		o->temperature = number(n, v, 0, 100);
	else if (!strcmp(n, "prompts"))
		o->prompts_file = *v ? v : NULL;
	else if (!strcmp(n, "prompt-length"))
		o->prompt_words = (unsigned)number(n, v, 1, 1e6);
	else if (!strcmp(n, "priority-mix")) {
		if (*v)
			parse_mix(o, v);
	} else if (!strcmp(n, "api-key"))
		o->api_key = *v ? v : NULL;
	else if (!strcmp(n, "metrics-key"))
		o->metrics_key = *v ? v : NULL;
	else if (!strcmp(n, "csv"))
		o->csv = *v ? v : NULL;
	else if (!strcmp(n, "json"))
		o->json = *v ? v : NULL;
	else if (!strcmp(n, "plot"))
		o->plot = *v ? v : NULL;
	else if (!strcmp(n, "label"))
		o->label = v;
	else if (!strcmp(n, "timeout"))
		o->timeout_s = number(n, v, 0.001, 1e6);
	else if (!strcmp(n, "seed"))
		o->seed = (uint64_t)number(n, v, 0, 1e18);
	else if (!strcmp(n, "quiet"))
		o->quiet = on_off(n, v);
}

static void parse_options(struct options *o, int argc, char **argv)
{
	memset(o, 0, sizeof(*o));
	/* Defaults, then the environment, then flags: the flag wins. */
	for (size_t i = 0; i < N_OPTS; i++)
		apply(o, i, opt_defs[i].def);
	for (size_t i = 0; i < N_OPTS; i++) {
		const char *v = getenv(opt_defs[i].env);
		if (v && *v)
			apply(o, i, v);
	}
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
		size_t i = 0;
		while (i < N_OPTS && (strlen(opt_defs[i].name) != len ||
		                      strncmp(opt_defs[i].name, name, len)))
			i++;
		if (i == N_OPTS)
			usage_error("%s: unknown option (see --help)", argv[a]);
		const char *v = eq ? eq + 1 : NULL;
		/* A bare switch: on, unless on or off follows it. */
		bool on_off_next = a + 1 < argc &&
		                   (!strcmp(argv[a + 1], "on") ||
		                    !strcmp(argv[a + 1], "off"));
		if (!v && !strcmp(opt_defs[i].metavar, "on|off") &&
		    !on_off_next)
			v = "on";
		if (!v && a + 1 >= argc)
			usage_error("--%.*s: missing value", (int)len, name);
		apply(o, i, v ? v : argv[++a]);
	}
	if (!o->metrics_url || !*o->metrics_url)
		o->metrics_url = o->url;
	if (!o->metrics_key)
		o->metrics_key = o->api_key;
	if (o->endpoint == EP_INFER)
		o->stream = false;
	if (o->rate > 0 && o->n_levels > 1)
		usage_error("--concurrency-sweep: not with --rate (open loop)");
}

/* ---- prompts ---- */

static const char *const words[] = {
    "river",  "stone", "light", "north", "quiet", "field", "the",      "of",
    "and",    "a",     "story", "about", "time",  "water", "mountain", "city",
    "please", "tell",  "me",    "why",   "how",   "what",  "write",    "short",
};

struct prompts {
	char **items;
	size_t n;
};

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15u;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s)
{
	return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static void load_prompts(struct prompts *p, const char *file)
{
	FILE *f = fopen(file, "r");
	if (!f)
		usage_error("--prompts %s: %s", file, strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	for (unsigned no = 1; (len = getline(&line, &cap, f)) >= 0; no++) {
		if (len <= 1)
			continue;
		json_error_t err;
		json_t *j = json_loads(line, JSON_DECODE_ANY, &err);
		json_t *text =
		    json_is_string(j) ? j : json_object_get(j, "prompt");
		if (!json_is_string(text))
			usage_error("--prompts %s: line %u is not a string or "
			            "an object with \"prompt\"",
			            file, no);
		p->items = sl_xrealloc(p->items, (p->n + 1) * sizeof(char *));
		p->items[p->n++] = sl_xstrdup(json_string_value(text));
		json_decref(j);
	}
	free(line);
	fclose(f);
	if (p->n == 0)
		usage_error("--prompts %s: no prompts", file);
}

static char *make_prompt(unsigned mean, uint64_t *rng)
{
	unsigned n = (unsigned)((double)mean * (0.5 + rng_unit(rng)));
	n = SL_MAX(n, 1u);
	size_t cap = (size_t)n * 12 + 1, len = 0;
	char *s = sl_xmalloc(cap);
	for (unsigned i = 0; i < n; i++)
		len += (size_t)snprintf(
		    s + len, cap - len, "%s%s", i ? " " : "",
		    words[rng_next(rng) % SL_ARRAY_SIZE(words)]);
	return s;
}

/* ---- runs and requests ---- */

struct stats {
	struct bs_samples latency, ttft, itl;
	uint64_t ok, failed, tokens;
};

struct run_result {
	unsigned concurrency;
	double rate;
	uint64_t requests;
	double elapsed_s;
	struct stats cls[N_CLASSES];
	double batches;        /* NAN when the target has no summary */
	double avg_batch_size; /* NAN likewise */
	char first_error[CURL_ERROR_SIZE + 32];
};

struct bench;

struct request {
	struct bench *b;
	struct sl_transfer t;
	struct curl_slist *headers;
	char *body;
	struct sl_sse sse;
	char *resp;
	size_t resp_len;
	int cls;
	uint64_t start_ns, first_ns, last_ns;
	uint64_t tokens_seen, tokens_final;
	char error[CURL_ERROR_SIZE];
};

struct bench {
	uv_loop_t loop;
	struct sl_curl curl;
	uv_timer_t arrivals, progress;
	uv_signal_t sigint;
	struct options o;
	struct prompts prompts;
	uint64_t rng;

	/* The run under way. */
	struct run_result *run;
	unsigned level;
	uint64_t issued, done, inflight;
	uint64_t start_ns;
	uint64_t next_arrival_ns; /* open loop */
	bool stop_issuing;
	bool interrupted;
	struct sl_get metrics;
	bool metrics_refused_said; /* warn_if_refused() */
	double batches_before, batched_before; /* NAN: no summary */

	struct run_result results[MAX_LEVELS];
	unsigned n_results;
};

static void next_run(struct bench *b);
static void issue(struct bench *b);

static double elapsed_s(const struct bench *b)
{
	return (double)(sl_now_ns() - b->start_ns) / 1e9;
}

static void add_to(struct stats *s, struct request *r, bool ok)
{
	if (!ok) {
		s->failed++;
		return;
	}
	s->ok++;
	s->tokens += SL_MAX(r->tokens_seen, r->tokens_final);
	bs_add(&s->latency, (double)(sl_now_ns() - r->start_ns) / 1e6);
	if (r->first_ns)
		bs_add(&s->ttft, (double)(r->first_ns - r->start_ns) / 1e6);
}

static void token(struct request *r)
{
	uint64_t now = sl_now_ns();
	struct stats *all = &r->b->run->cls[CLASS_ALL];
	struct stats *mine = &r->b->run->cls[r->cls];
	if (r->first_ns) {
		double gap = (double)(now - r->last_ns) / 1e6;
		bs_add(&all->itl, gap);
		if (r->cls != CLASS_ALL)
			bs_add(&mine->itl, gap);
	} else {
		r->first_ns = now;
	}
	r->last_ns = now;
	r->tokens_seen++;
}

static bool nonempty(json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0;
}

/* Tokens and final counts, from one event or from a whole answer. */
static void read_json(struct request *r, json_t *j, bool streamed)
{
	json_t *usage = json_object_get(j, "usage");
	if (json_is_object(usage))
		r->tokens_final = (uint64_t)json_integer_value(
		    json_object_get(usage, "completion_tokens"));
	json_t *tp = json_object_get(j, "tokens_predicted");
	if (json_is_true(json_object_get(j, "stop")) || !streamed)
		r->tokens_final =
		    SL_MAX(r->tokens_final, (uint64_t)json_integer_value(tp));
	json_t *gt = json_object_get(j, "tokens"); /* /generate's totals */
	if (json_is_integer(gt) && json_object_get(j, "finish_reason"))
		r->tokens_final = (uint64_t)json_integer_value(gt);
	if (!streamed)
		return;
	json_t *c = json_array_get(json_object_get(j, "choices"), 0);
	bool piece =
	    nonempty(json_object_get(json_object_get(c, "delta"), "content")) ||
	    nonempty(json_object_get(c, "text"));
	if (r->b->o.endpoint == EP_COMPLETION)
		piece = nonempty(json_object_get(j, "content"));
	if (r->b->o.endpoint == EP_GENERATE)
		piece = nonempty(json_object_get(j, "text")) &&
		        !json_object_get(j, "finish_reason");
	if (piece)
		token(r);
}

static int on_event(const char *ev, size_t len, void *arg)
{
	struct request *r = arg;
	char probe[16];
	long n = sl_sse_event_data(ev, len, probe, sizeof(probe));
	if (n < 0 || !strcmp(probe, "[DONE]"))
		return 0;
	char *data = sl_xmalloc((size_t)n + 1);
	sl_sse_event_data(ev, len, data, (size_t)n + 1);
	json_t *j = json_loads(data, JSON_DECODE_ANY, NULL);
	free(data);
	if (json_object_get(j, "error"))
		snprintf(r->error, sizeof(r->error), "error event in stream");
	else
		read_json(r, j, true);
	json_decref(j);
	return 0;
}

static size_t on_data(char *data, size_t size, size_t n, void *arg)
{
	struct request *r = arg;
	size_t len = size * n;
	if (r->b->o.stream)
		return sl_sse_feed(&r->sse, data, len, on_event, r) == 0 ? len
		                                                         : 0;
	if (r->resp_len + len > MAX_BODY)
		return 0;
	r->resp = sl_xrealloc(r->resp, r->resp_len + len + 1);
	memcpy(r->resp + r->resp_len, data, len);
	r->resp_len += len;
	r->resp[r->resp_len] = '\0';
	return len;
}

static void free_request(struct request *r)
{
	curl_easy_cleanup(r->t.easy);
	curl_slist_free_all(r->headers);
	sl_sse_free(&r->sse);
	free(r->body);
	free(r->resp);
	free(r);
}

static bool run_over(const struct bench *b)
{
	return b->stop_issuing && b->inflight == 0;
}

static void finish_run(struct bench *b);

static void on_done(struct sl_transfer *t, CURLcode rc)
{
	struct request *r = t->data;
	struct bench *b = r->b;
	long status = 0;
	curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
	bool ok = rc == CURLE_OK && status == 200 && !r->error[0];
	if (ok && !b->o.stream && r->resp) {
		json_t *j = json_loads(r->resp, JSON_DECODE_ANY, NULL);
		read_json(r, j, false);
		json_decref(j);
	}
	if (!ok && !b->run->first_error[0])
		snprintf(b->run->first_error, sizeof(b->run->first_error), "%s",
		         rc != CURLE_OK ? curl_easy_strerror(rc)
		         : r->error[0]  ? r->error
		                        : "HTTP status not 200");
	if (!ok && rc == CURLE_OK && status != 200 && !r->error[0])
		snprintf(r->error, sizeof(r->error), "HTTP %ld", status);
	add_to(&b->run->cls[CLASS_ALL], r, ok);
	if (r->cls != CLASS_ALL)
		add_to(&b->run->cls[r->cls], r, ok);
	free_request(r);
	b->inflight--;
	b->done++;
	if (b->o.duration_s > 0 && elapsed_s(b) >= b->o.duration_s)
		b->stop_issuing = true;
	if (!b->stop_issuing && b->o.rate == 0)
		issue(b); /* closed loop: keep the level */
	if (run_over(b))
		finish_run(b);
}

static int pick_class(struct bench *b)
{
	if (!b->o.has_mix)
		return CLASS_ALL;
	double u = rng_unit(&b->rng), acc = 0;
	for (int c = CLASS_URGENT; c < N_CLASSES; c++) {
		acc += b->o.mix[c];
		if (u < acc)
			return c;
	}
	return CLASS_NORMAL;
}

static char *request_body(struct bench *b, const char *prompt)
{
	const struct options *o = &b->o;
	json_t *j;
	switch (o->endpoint) {
	case EP_CHAT:
		j = json_pack("{s:[{s:s, s:s}], s:i, s:f, s:b}", "messages",
		              "role", "user", "content", prompt, "max_tokens",
		              (int)o->max_tokens, "temperature", o->temperature,
		              "stream", o->stream);
		break;
	case EP_COMPLETIONS:
		j = json_pack("{s:s, s:i, s:f, s:b}", "prompt", prompt,
		              "max_tokens", (int)o->max_tokens, "temperature",
		              o->temperature, "stream", o->stream);
		break;
	case EP_COMPLETION:
		j = json_pack("{s:s, s:i, s:f, s:b}", "prompt", prompt,
		              "n_predict", (int)o->max_tokens, "temperature",
		              o->temperature, "stream", o->stream);
		break;
	case EP_GENERATE:
		j = json_pack("{s:s, s:i, s:f, s:b}", "prompt", prompt,
		              "max_tokens", (int)o->max_tokens, "temperature",
		              o->temperature, "stream", o->stream);
		break;
	default: j = json_pack("{s:s}", "query", prompt); break;
	}
	/* Exact token counts from OpenAI streams come in a usage event. */
	if (o->stream &&
	    (o->endpoint == EP_CHAT || o->endpoint == EP_COMPLETIONS))
		json_object_set_new(j, "stream_options",
		                    json_pack("{s:b}", "include_usage", 1));
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return s;
}

static void issue(struct bench *b)
{
	if (b->issued >= b->o.requests) {
		b->stop_issuing = true;
		return;
	}
	b->issued++;
	struct request *r = sl_xcalloc(1, sizeof(*r));
	r->b = b;
	r->cls = pick_class(b);
	sl_sse_init(&r->sse, SL_SSE_MAX_EVENT);
	char *generated = NULL;
	const char *prompt;
	if (b->prompts.n)
		prompt = b->prompts.items[(b->issued - 1) % b->prompts.n];
	else
		prompt = generated = make_prompt(b->o.prompt_words, &b->rng);
	r->body = request_body(b, prompt);
	free(generated);

	CURL *e = curl_easy_init();
	r->t.easy = e;
	r->t.on_done = on_done;
	r->t.data = r;
	char *url =
	    sl_xasprintf("%s%s", b->o.url, endpoint_paths[b->o.endpoint]);
	curl_easy_setopt(e, CURLOPT_URL, url);
	free(url);
	sl_curl_common_options(e);
	r->headers =
	    curl_slist_append(r->headers, "Content-Type: application/json");
	r->headers = curl_slist_append(r->headers, "Expect:");
	if (r->cls != CLASS_ALL) {
		char h[48];
		snprintf(h, sizeof(h), "X-Priority: %s", class_names[r->cls]);
		r->headers = curl_slist_append(r->headers, h);
	}
	if (b->o.api_key) {
		char *h =
		    sl_xasprintf("Authorization: Bearer %s", b->o.api_key);
		r->headers = curl_slist_append(r->headers, h);
		free(h);
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->error);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(b->o.timeout_s * 1000));
	r->start_ns = sl_now_ns();
	b->inflight++;
	if (sl_curl_start(&b->curl, &r->t) != 0) {
		snprintf(r->error, sizeof(r->error), "cannot start a transfer");
		on_done(&r->t, CURLE_FAILED_INIT);
	}
}

/*
 * Open loop: arrivals follow a schedule (constant or exponential gaps) kept
 * in nanoseconds; each wakeup issues every arrival that is due, since the
 * loop's timers step in milliseconds and high rates fall between them.
 */
static void on_arrival(uv_timer_t *t)
{
	struct bench *b = t->data;
	uint64_t now = sl_now_ns();
	if (b->o.duration_s > 0 && elapsed_s(b) >= b->o.duration_s)
		b->stop_issuing = true;
	while (!b->stop_issuing && b->next_arrival_ns <= now) {
		if (b->inflight < MAX_OPEN_INFLIGHT)
			issue(b);
		double gap = b->o.poisson ? -log(rng_unit(&b->rng)) / b->o.rate
		                          : 1.0 / b->o.rate;
		b->next_arrival_ns += (uint64_t)(gap * 1e9);
	}
	if (!b->stop_issuing) {
		uint64_t wait = b->next_arrival_ns - now;
		uv_timer_start(&b->arrivals, on_arrival,
		               (wait + 999999) / 1000000, 0);
	}
	if (run_over(b))
		finish_run(b);
}

static void on_progress(uv_timer_t *t)
{
	struct bench *b = t->data;
	const struct stats *s = &b->run->cls[CLASS_ALL];
	fprintf(
	    stderr,
	    "\r%s c=%u: %llu/%llu done, %llu ok, %llu failed, %.1f req/s   ",
	    b->o.label, b->run->concurrency, (unsigned long long)b->done,
	    (unsigned long long)b->o.requests, (unsigned long long)s->ok,
	    (unsigned long long)s->failed, bs_rate(b->done, elapsed_s(b)));
}

/* ---- the target's own summary: batches ---- */

static void read_summary(struct bench *b, double *batches, double *batched)
{
	*batches = *batched = NAN;
	json_t *j =
	    b->metrics.body ? json_loads(b->metrics.body, 0, NULL) : NULL;
	json_t *n = json_object_get(j, "batches");
	json_t *avg = json_object_get(j, "avg_batch_size");
	if (json_is_number(n) && json_is_number(avg)) {
		*batches = json_number_value(n);
		*batched = json_number_value(avg) * *batches;
	}
	json_decref(j);
}

static void start_load(struct bench *b)
{
	b->start_ns = sl_now_ns();
	if (!b->o.quiet && isatty(STDERR_FILENO))
		uv_timer_start(&b->progress, on_progress, 250, 250);
	if (b->o.rate > 0) {
		b->next_arrival_ns = b->start_ns;
		on_arrival(&b->arrivals);
		return;
	}
	for (unsigned i = 0; i < b->run->concurrency && !b->stop_issuing; i++)
		issue(b);
}

/*
 * Said once: sluice keeps /metrics for its admin key when one is set, and
 * without the summary the batch columns stay empty. Another answer (a
 * llama-server's own /metrics) leaves them empty as designed, unsaid.
 */
static void warn_if_refused(struct bench *b, long status)
{
	if ((status != 401 && status != 403) || b->metrics_refused_said)
		return;
	b->metrics_refused_said = true;
	fprintf(stderr,
	        "sluice-bench: %s/metrics answered %ld: the batch columns "
	        "stay empty; give sluice's admin key with --metrics-key\n",
	        b->o.metrics_url, status);
}

static void on_metrics_before(struct sl_get *g, long status, const char *err)
{
	struct bench *b = sl_container_of(g, struct bench, metrics);
	(void)err;
	warn_if_refused(b, status);
	if (status == 200)
		read_summary(b, &b->batches_before, &b->batched_before);
	else
		b->batches_before = b->batched_before = NAN;
	start_load(b);
}

static void on_metrics_after(struct sl_get *g, long status, const char *err)
{
	struct bench *b = sl_container_of(g, struct bench, metrics);
	struct run_result *r = b->run;
	(void)err;
	double batches = NAN, batched = NAN;
	if (status == 200)
		read_summary(b, &batches, &batched);
	r->batches = batches - b->batches_before;
	r->avg_batch_size =
	    r->batches > 0 ? (batched - b->batched_before) / r->batches : NAN;
	if (r->batches == 0)
		r->avg_batch_size = 0;
	b->n_results++;
	next_run(b);
}

static void fetch_summary(struct bench *b, sl_get_cb cb)
{
	char *url = sl_xasprintf("%s/metrics?format=json", b->o.metrics_url);
	if (sl_get_start(&b->curl, &b->metrics, url, b->o.metrics_key, 5000,
	                 cb))
		cb(&b->metrics, 0, "cannot start");
	free(url);
}

static void finish_run(struct bench *b)
{
	struct run_result *r = b->run;
	r->elapsed_s = elapsed_s(b);
	r->requests = b->done;
	uv_timer_stop(&b->progress);
	uv_timer_stop(&b->arrivals);
	if (!b->o.quiet && isatty(STDERR_FILENO))
		fputc('\n', stderr);
	fetch_summary(b, on_metrics_after);
}

static void next_run(struct bench *b)
{
	if (b->interrupted || b->n_results == b->o.n_levels) {
		sl_get_reset(&b->curl, &b->metrics);
		uv_close((uv_handle_t *)&b->arrivals, NULL);
		uv_close((uv_handle_t *)&b->progress, NULL);
		uv_close((uv_handle_t *)&b->sigint, NULL);
		sl_curl_close(&b->curl, NULL);
		return;
	}
	b->run = &b->results[b->n_results];
	b->run->concurrency = b->o.levels[b->n_results];
	b->run->rate = b->o.rate;
	b->issued = b->done = b->inflight = 0;
	b->stop_issuing = false;
	fetch_summary(b, on_metrics_before);
}

static void on_sigint(uv_signal_t *s, int signum)
{
	struct bench *b = s->data;
	(void)signum;
	fprintf(stderr, "\nsluice-bench: interrupted; finishing what is in "
	                "flight\n");
	b->interrupted = true;
	b->stop_issuing = true;
	if (run_over(b))
		finish_run(b);
}

/* ---- reports ---- */

/* A number with `decimals` digits after the point, or "-" for NaN. */
static void fmt(char *buf, size_t size, double v, int decimals)
{
	if (isnan(v))
		snprintf(buf, size, "-");
	else
		snprintf(buf, size, "%.*f", decimals, v);
}

struct row {
	char cells[16][72];
};

static const char *const columns[] = {"run",
                                      "requests",
                                      "concurrency",
                                      "success",
                                      "fail",
                                      "avg latency ms",
                                      "p50 latency ms",
                                      "p95 latency ms",
                                      "p99 latency ms",
                                      "req/s",
                                      "TTFT p50 ms",
                                      "TTFT p99 ms",
                                      "ITL p99 ms",
                                      "output tok/s",
                                      "avg batch size",
                                      "batches"};

static void make_row(const struct bench *b, struct run_result *r, int c,
                     struct row *row)
{
	struct stats *s = &r->cls[c];
	char name[64];
	snprintf(name, sizeof(name), "%s%s%s%s", b->o.label,
	         b->o.label[0] && c ? " " : "", c ? class_names[c] : "",
	         !b->o.label[0] && !c ? "run" : "");
	double load = r->rate > 0 ? r->rate : r->concurrency;
	const size_t w = sizeof(row->cells[0]);
	snprintf(row->cells[0], w, "%s", name);
	snprintf(row->cells[1], w, "%llu",
	         (unsigned long long)(s->ok + s->failed));
	if (r->rate > 0)
		snprintf(row->cells[2], w, "%g/s", load);
	else
		fmt(row->cells[2], w, load, 0);
	snprintf(row->cells[3], w, "%llu", (unsigned long long)s->ok);
	snprintf(row->cells[4], w, "%llu", (unsigned long long)s->failed);
	fmt(row->cells[5], w, bs_mean(&s->latency), 1);
	fmt(row->cells[6], w, bs_percentile(&s->latency, 50), 1);
	fmt(row->cells[7], w, bs_percentile(&s->latency, 95), 1);
	fmt(row->cells[8], w, bs_percentile(&s->latency, 99), 1);
	fmt(row->cells[9], w, bs_rate(s->ok, r->elapsed_s), 1);
	fmt(row->cells[10], w, bs_percentile(&s->ttft, 50), 1);
	fmt(row->cells[11], w, bs_percentile(&s->ttft, 99), 1);
	fmt(row->cells[12], w, bs_percentile(&s->itl, 99), 2);
	fmt(row->cells[13], w, bs_rate(s->tokens, r->elapsed_s), 1);
	fmt(row->cells[14], w, c ? NAN : r->avg_batch_size, 2);
	fmt(row->cells[15], w, c ? NAN : r->batches, 0);
}

static int classes_shown(const struct bench *b, int *list)
{
	int n = 0;
	list[n++] = CLASS_ALL;
	for (int c = CLASS_URGENT; b->o.has_mix && c < N_CLASSES; c++)
		if (b->o.mix[c] > 0)
			list[n++] = c;
	return n;
}

static void print_markdown(struct bench *b)
{
	for (size_t i = 0; i < SL_ARRAY_SIZE(columns); i++)
		printf("| %s ", columns[i]);
	printf("|\n");
	for (size_t i = 0; i < SL_ARRAY_SIZE(columns); i++)
		printf("|%s", i ? "---:" : "---");
	printf("|\n");
	int list[N_CLASSES];
	int n = classes_shown(b, list);
	for (unsigned k = 0; k < b->n_results; k++) {
		for (int i = 0; i < n; i++) {
			struct row row;
			make_row(b, &b->results[k], list[i], &row);
			for (size_t j = 0; j < SL_ARRAY_SIZE(columns); j++)
				printf("| %s ", row.cells[j]);
			printf("|\n");
		}
		if (b->results[k].first_error[0])
			fprintf(stderr,
			        "sluice-bench: c=%u: first failure: %s\n",
			        b->results[k].concurrency,
			        b->results[k].first_error);
	}
}

static void write_csv(struct bench *b, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		usage_error("--csv %s: %s", path, strerror(errno));
	fprintf(f, "class");
	for (size_t i = 0; i < SL_ARRAY_SIZE(columns); i++)
		fprintf(f, ",%s", columns[i]);
	fputc('\n', f);
	int list[N_CLASSES];
	int n = classes_shown(b, list);
	for (unsigned k = 0; k < b->n_results; k++)
		for (int i = 0; i < n; i++) {
			struct row row;
			make_row(b, &b->results[k], list[i], &row);
			fprintf(f, "%s", class_names[list[i]]);
			for (size_t j = 0; j < SL_ARRAY_SIZE(columns); j++)
				fprintf(f, ",%s", row.cells[j]);
			fputc('\n', f);
		}
	fclose(f);
}

static json_t *num(double v)
{
	return isnan(v) ? json_null() : json_real(v);
}

static void write_json(struct bench *b, const char *path)
{
	json_t *runs = json_array();
	int list[N_CLASSES];
	int n = classes_shown(b, list);
	for (unsigned k = 0; k < b->n_results; k++) {
		struct run_result *r = &b->results[k];
		for (int i = 0; i < n; i++) {
			struct stats *s = &r->cls[list[i]];
			json_array_append_new(
			    runs,
			    json_pack(
			        "{s:s, s:s, s:i, s:f, s:I, s:I, s:I, s:o, s:o, "
			        "s:o, "
			        "s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:f}",
			        "label", b->o.label, "class",
			        class_names[list[i]], "concurrency",
			        (int)r->concurrency, "rate", r->rate,
			        "requests", (json_int_t)(s->ok + s->failed),
			        "success", (json_int_t)s->ok, "fail",
			        (json_int_t)s->failed, "avg_latency_ms",
			        num(bs_mean(&s->latency)), "p50_latency_ms",
			        num(bs_percentile(&s->latency, 50)),
			        "p95_latency_ms",
			        num(bs_percentile(&s->latency, 95)),
			        "p99_latency_ms",
			        num(bs_percentile(&s->latency, 99)),
			        "req_per_s", num(bs_rate(s->ok, r->elapsed_s)),
			        "ttft_p50_ms", num(bs_percentile(&s->ttft, 50)),
			        "ttft_p99_ms", num(bs_percentile(&s->ttft, 99)),
			        "itl_p99_ms", num(bs_percentile(&s->itl, 99)),
			        "output_tokens_per_s",
			        num(bs_rate(s->tokens, r->elapsed_s)),
			        "avg_batch_size",
			        num(list[i] ? NAN : r->avg_batch_size),
			        "batches", num(list[i] ? NAN : r->batches),
			        "elapsed_s", r->elapsed_s));
		}
	}
	json_t *doc = json_pack("{s:o}", "runs", runs);
	if (json_dump_file(doc, path, JSON_INDENT(1)) != 0)
		usage_error("--json %s: cannot write", path);
	json_decref(doc);
}

/* gnuplot, when installed: latency and throughput against concurrency. */
static void plot(struct bench *b, const char *svg)
{
	char data[] = "/tmp/sluice-bench-XXXXXX";
	int fd = mkstemp(data);
	if (fd < 0)
		return;
	FILE *f = fdopen(fd, "w");
	for (unsigned k = 0; k < b->n_results; k++) {
		struct run_result *r = &b->results[k];
		struct stats *s = &r->cls[CLASS_ALL];
		fprintf(f, "%u %g %g %g %g\n", r->concurrency,
		        bs_percentile(&s->latency, 50),
		        bs_percentile(&s->latency, 95),
		        bs_percentile(&s->latency, 99),
		        bs_rate(s->ok, r->elapsed_s));
	}
	fclose(f);
	char *script = sl_xasprintf(
	    "set terminal svg size 900,420 dynamic background rgb 'white';"
	    "set output '%s'; set multiplot layout 1,2 title '%s';"
	    "set logscale x 2; set xlabel 'concurrency'; set grid;"
	    "set ylabel 'latency (ms)'; set key top left;"
	    "plot '%s' u 1:2 w lp t 'p50', '' u 1:3 w lp t 'p95',"
	    " '' u 1:4 w lp t 'p99';"
	    "set ylabel 'requests/s'; set key off;"
	    "plot '%s' u 1:5 w lp lw 2; unset multiplot",
	    svg, b->o.label[0] ? b->o.label : "sluice-bench", data, data);
	char *argv[] = {"gnuplot", "-e", script, NULL};
	pid_t pid;
	int status = 0;
	if (posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ) != 0) {
		fprintf(stderr, "sluice-bench: --plot: gnuplot is not "
		                "installed; no plot drawn\n");
	} else if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	           WEXITSTATUS(status) != 0) {
		fprintf(stderr, "sluice-bench: --plot: gnuplot failed\n");
	}
	free(script);
	unlink(data);
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

int main(int argc, char **argv)
{
	struct bench *b = sl_xcalloc(1, sizeof(*b));
	parse_options(&b->o, argc, argv);
	b->rng = b->o.seed;
	if (b->o.prompts_file)
		load_prompts(&b->prompts, b->o.prompts_file);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();
	curl_global_init(CURL_GLOBAL_DEFAULT);
	uv_loop_init(&b->loop);
	sl_curl_init(&b->curl, &b->loop);
	/* One connection per request in flight, kept alive between them. */
	unsigned most = 0;
	for (unsigned i = 0; i < b->o.n_levels; i++)
		most = SL_MAX(most, b->o.levels[i]);
	if (b->o.rate > 0)
		most = SL_MAX(most, 1024u);
	curl_multi_setopt(b->curl.multi, CURLMOPT_MAX_HOST_CONNECTIONS,
	                  (long)most);
	curl_multi_setopt(b->curl.multi, CURLMOPT_MAXCONNECTS, (long)most);
	uv_timer_init(&b->loop, &b->arrivals);
	uv_timer_init(&b->loop, &b->progress);
	uv_signal_init(&b->loop, &b->sigint);
	b->arrivals.data = b->progress.data = b->sigint.data = b;
	uv_signal_start(&b->sigint, on_sigint, SIGINT);
	uv_unref((uv_handle_t *)&b->sigint);

	next_run(b);
	uv_run(&b->loop, UV_RUN_DEFAULT);

	print_markdown(b);
	if (b->o.csv)
		write_csv(b, b->o.csv);
	if (b->o.json)
		write_json(b, b->o.json);
	if (b->o.plot)
		plot(b, b->o.plot);

	int failed = 0;
	for (unsigned k = 0; k < b->n_results; k++) {
		for (int c = 0; c < N_CLASSES; c++) {
			failed |=
			    c == CLASS_ALL && b->results[k].cls[c].failed > 0;
			bs_free(&b->results[k].cls[c].latency);
			bs_free(&b->results[k].cls[c].ttft);
			bs_free(&b->results[k].cls[c].itl);
		}
	}
	for (size_t i = 0; i < b->prompts.n; i++)
		free(b->prompts.items[i]);
	free(b->prompts.items);
	uv_loop_close(&b->loop);
	curl_global_cleanup();
	free(b);
	/* 1 when any request failed: scripts notice. */
	return failed ? 1 : 0;
}

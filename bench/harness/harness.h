/*
 * harness.h: what sluice-bench's modules share: the options, a request's
 * record, a run and the bench that drives the runs.
 *
 * A run sends requests (engine.c) and keeps one record per request; the
 * figures are made from the records afterwards (results.c), so that every
 * grouping (tenant, model, priority) and every SLO is computed exactly and
 * the same way. Times are the loop's monotonic nanoseconds.
 */
#ifndef SLUICE_BENCH_HARNESS_H
#define SLUICE_BENCH_HARNESS_H

#include "../bench_stats.h"
#include "sluice/base/common.h"
#include "slo.h"
#include "workload.h"

#include "sluice/net/h1_client.h"
#include "sluice/net/sse.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

enum endpoint { EP_CHAT, EP_COMPLETIONS, EP_COMPLETION, EP_GENERATE, EP_INFER };
extern const char *const endpoint_names[];

/* Priority classes as sluice names them; PRIO_NONE sends no X-Priority. */
enum { PRIO_NONE, PRIO_URGENT, PRIO_NORMAL, PRIO_BATCH, N_PRIOS };
extern const char *const prio_names[];

enum arrivals { ARR_POISSON, ARR_CONSTANT, ARR_GAMMA };

/* Limits, each a named constant. */
#define MAX_LEVELS 32            /* concurrency or rate levels */
#define MAX_TENANTS 32           /* --tenant given */
#define MAX_MODELS 32            /* names in --model-mix */
#define MAX_MIX 256              /* entries of the --model-mix sequence */
#define MAX_RUNS 1024            /* runs in one invocation (levels x repeats) */
#define MAX_OPEN_INFLIGHT 100000 /* open loop: requests out at once */
#define MAX_BODY (16u * 1024 * 1024) /* a plain answer kept whole */
#define MAX_REPLY (256u * 1024)      /* a reply kept for the next turn */

struct tenant {
	char name[64];
	char *key; /* bearer token; NULL sends none */
	double weight;
	int prio; /* PRIO_NONE: drawn from --priority-mix */
};

struct options {
	const char *url;
	const char *metrics_url; /* sluice's /metrics (default: url) */
	const char *llama_url;   /* llama-server itself: /metrics, /slots */
	enum endpoint endpoint;
	bool stream;
	unsigned levels[MAX_LEVELS]; /* closed loop: clients per level */
	unsigned n_levels;
	double rates[MAX_LEVELS]; /* open loop: arrivals per second */
	unsigned n_rates;
	enum arrivals arrivals;
	double burstiness; /* gamma shape: 1 is Poisson, below 1 burstier */
	uint64_t requests;
	double duration_s, warmup_s, ramp_s, think_s;
	unsigned num_runs;
	double temperature;
	struct wl_options wl;
	bool tokenize;
	double mix[N_PRIOS]; /* --priority-mix; mix[PRIO_NONE] unused */
	bool has_mix;
	struct tenant tenants[MAX_TENANTS];
	unsigned n_tenants;
	char *models[MAX_MODELS];
	unsigned n_models;
	uint8_t model_seq[MAX_MIX]; /* indexes into models, in order */
	unsigned n_model_seq;
	struct slo slo;
	/* --slo-mix: each conversation draws a class by share; its SLOs
	 * replace --slo's (which is then not given). */
	struct slo_class slo_classes[SLO_MAX_CLASSES];
	unsigned n_slo_classes;
	bool slo_headers;     /* send ttft and tpot as X-SLO-*-Ms */
	bool retry;           /* honour Retry-After on 429 and 503 */
	unsigned max_retries; /* per request */
	/* Scenarios. */
	double cancel_share;    /* of requests, leaving early */
	unsigned cancel_tokens; /* streams: leave after this many tokens */
	double cancel_ms;       /* plain answers: leave after this long */
	double kill_at_s;       /* failover: when, from the run's start */
	int kill_pid;           /* failover: whom (SIGKILL) */
	double scrape_s;        /* /metrics interval, 0: none */
	double slots_s;         /* /slots interval for cancellations */
	/* Search. */
	bool search;
	double search_lo, search_hi, search_min_goodput;
	unsigned search_steps;
	/* Keys, reports, the rest. */
	const char *api_key, *metrics_key, *llama_key;
	const char *csv, *json, *jsonl, *html, *label;
	double timeout_s;
	uint64_t seed;
	bool quiet;
	int argc;
	char **argv;
};

void options_parse(struct options *o, int argc, char **argv);
/* Whether any SLO was given (--slo or --slo-mix). */
bool options_have_slo(const struct options *o);
/* The SLOs of a request of SLO class cls (-1: none, --slo's). */
const struct slo *options_slo_of(const struct options *o, int cls);

/*
 * The seed's stream of --slo-mix draws: a stream of its own, so that a
 * conversation's class depends on the seed and the mix alone, not on
 * which other draws (tenants, priorities, leaves) the options ask for.
 */
#define SLO_CLASS_STREAM 0x510c1a55e5f10a7dull
/* Frees what parsing copied: the tenants' keys, the models' names. */
void options_free(struct options *o);
SL_NORETURN SL_PRINTF(1, 2) void usage_error(const char *fmt, ...);

/* One request, as it went: kept for the figures and the JSONL. */
struct record {
	uint32_t conv, turn;
	int16_t tenant, model; /* -1: none */
	int8_t prio;
	int8_t slo_class;  /* index into --slo-mix's classes; -1: none */
	bool warmup;       /* arrived during the warm-up: not measured */
	bool ok;           /* 2xx, answered whole (or left as planned) */
	bool cancelled;    /* left on purpose (the cancellation scenario) */
	int8_t slot_freed; /* cancelled: 1 freed, 0 still running, -1 unknown */
	bool retry_after;  /* a refusal carried Retry-After */
	uint8_t retries;
	int status; /* the last HTTP status; 0 when none came */
	uint64_t seed;
	uint64_t intended_ns, sent_ns, first_ns, end_ns, left_ns, freed_ns;
	/* The last attempt's: when it went, and when its answer's head came
	 * (0: none came). */
	uint64_t try_sent_ns, head_ns;
	uint32_t input_tokens, output_tokens, cached_tokens, tokens_seen;
	/* The last answer's Server-Timing; NAN: not sent. predicted is
	 * sluice's predicted TTFT from the request's arrival (issue 40). */
	double queue_ms, upstream_ms, server_ttft_ms, predicted_ms;
	double llama_prompt_ms, llama_predicted_n; /* NAN: no timings */
	char *error; /* why it failed; NULL when ok */
	/* The last answer's refusal reason (its error's "reason"); "" when
	 * it was no refusal or said none. */
	char reason[SLO_REASON_MAX];
};

/* A refusal (429 or 503) that one attempt of a measured request got:
 * every attempt's counts, a retried request's too. */
struct refusal {
	double ms; /* from the attempt's send to the refusal's head */
	int status;
	bool retry_after;            /* it carried Retry-After */
	char reason[SLO_REASON_MAX]; /* "" when none */
};

/* A gauge or counter of a target's /metrics, sampled through a run. */
#define MAX_SCRAPED 24
struct scraped {
	char name[96];
	double min, max, sum, first, last;
	unsigned n;
};

struct run {
	unsigned level, repeat;
	unsigned concurrency; /* closed loop; 0 open */
	double rate;          /* open loop; 0 closed */
	uint64_t start_ns, end_ns;
	struct record *recs;
	size_t n_recs, cap_recs;
	struct bs_samples itl; /* gaps of measured streams served whole, ms */
	struct refusal *refusals;
	size_t n_refusals, cap_refusals;
	struct scraped sluice_m[MAX_SCRAPED], llama_m[MAX_SCRAPED];
	unsigned n_sluice_m, n_llama_m;
	double batches, avg_batch_size; /* from sluice's summary; NAN */
	uint64_t dropped; /* open loop: arrivals past MAX_OPEN_INFLIGHT */
	bool killed;      /* failover: the kill happened */
	uint64_t killed_ns;
	json_t *doc; /* the run's figures, made by results.c */
};

struct bench;

/* engine.c: runs one level of load; done is called once from the loop. */
void engine_run(struct bench *b, struct run *r, void (*done)(struct bench *));
/* SIGINT: no more requests; what is out finishes and is reported. */
void engine_interrupt(struct bench *b);

struct bench {
	uv_loop_t loop;
	struct sl_h1 h1;
	struct options o;
	struct workload wl;
	uint64_t rng;
	uint64_t class_rng; /* --slo-mix's draws (SLO_CLASS_STREAM) */
	uint64_t next_seed; /* unique per request: /slots finds it by it */

	struct run runs[MAX_RUNS];
	unsigned n_runs;
	bool interrupted;
	bool metrics_refused_said; /* a 401 or 403 from /metrics, said once */
	bool slots_refused_said;   /* /slots would not answer, said once */
	bool killed_once;          /* --kill-pid was sent its SIGKILL */
	struct engine *engine;     /* engine.c's state for the run under way */
};

/* results.c */
json_t *results_run(const struct bench *b, struct run *r);
json_t *results_repeats(const struct bench *b);
double results_goodput_fraction(const struct bench *b, const struct run *r);
/* A stream's time per output token after the first, ms; NAN otherwise. */
double results_tpot_ms(const struct record *rec);
/* Whether the request was served whole within its SLOs (its class's, or
 * --slo's). */
bool results_meets(const struct bench *b, const struct record *rec);
/* The TTFT that sluice's predicted one is held to, ms; NAN: none. */
double results_actual_ttft_ms(const struct bench *b, const struct record *rec);
/* (predicted - actual) / actual TTFT of a request; NAN: not both known. */
double results_relative_error(const struct bench *b, const struct record *rec);

/* report.c */
void report_markdown(const struct bench *b, FILE *out);
void report_csv(const struct bench *b, const char *path);
json_t *report_document(const struct bench *b, json_t *search);
void report_jsonl(const struct bench *b, const char *path);

/* scrape.c */
void scrape_sample(struct scraped *tab, unsigned *n, const char *text,
                   const char *const *wanted);

/* A deterministic draw from Gamma(shape, 1) (wl_rng_unit's stream). */
double rng_gamma(uint64_t *s, double shape);

#endif

/*
 * mock-llama-server: a stand-in for llama.cpp's llama-server, for load tests
 * that measure sluice's own overhead and for fault tests.
 *
 *   build/bench/mock-llama-server [--port N] [--slots N] [--tokens N] ...
 *   (--help lists every option with its environment twin and default)
 *
 * It speaks the part of llama-server's HTTP API that sluice uses: /health,
 * /props, /slots, /metrics (the two occupancy gauges), /v1/models, and
 * the three generation endpoints (/completion, /v1/completions,
 * /v1/chat/completions), streamed or not,
 * with llama-server's JSON shapes and SSE framing as a Debian build of
 * llama-server (0.7.0, build 11669) writes them. It runs no model.
 *
 * The text it "generates" is fixed, so that tests can check it exactly:
 * token k (counting from 0) is the piece " tok<k>", and an answer of N
 * tokens is " tok0 tok1 ... tok<N-1>". N is the request's n_predict
 * (/completion) or max_tokens (OpenAI endpoints) when it is an integer >= 0,
 * else --tokens; either way at most the slot's context, MOCK_N_CTX, as
 * llama-server stops there too. The prompt's token count, reported in
 * tokens_evaluated and usage, is its number of whitespace-separated words
 * (at least 1); llama-server would apply a chat template and a tokenizer.
 *
 * Slots: at most --slots generations run at once; the rest wait in an
 * unbounded FIFO and start, first come first served, when a slot frees,
 * as llama-server's "deferred" tasks do. /slots shows which slots are busy;
 * /metrics counts them (requests_processing) and the waiting ones
 * (requests_deferred).
 *
 * Timing: a generation that holds a slot waits --prompt-delay-ms before its
 * first token, then --token-delay-ms between tokens, driven by one
 * uv_timer_t. The response head goes out with the first token, as in
 * llama-server builds that answer an error before the first token with an
 * ordinary HTTP status. With both delays 0 (the default) there are no
 * timers: the whole answer is written from the request handler, so that the
 * mock costs as little as possible and a load test measures sluice.
 *
 * Framing: llama-server writes one HTTP chunk per step of a generation (the
 * chat role event shares the first token's chunk; the chat usage event
 * shares the finish event's chunk; [DONE] has its own). The mock does the
 * same when a timer paces the generation; with no delays it writes the
 * whole event stream as one chunk, which saves a write(2) per token. The
 * SSE bytes are the same either way, and a client must cope with both:
 * TCP may join or split chunks on the wire anyway.
 *
 * Faults, decided per request by a PRNG seeded with --seed, so that a run
 * repeats: --fail-rate answers --fail-status with llama-server's error
 * shape at once; --hang-rate takes a slot and never answers, until the
 * client leaves; --close-rate closes the connection after half the tokens
 * of a stream, or instead of a non-streamed answer. --start-delay-ms makes
 * every endpoint answer 503 "Loading model" for that long after start, as
 * llama-server does while it loads a model. --nul-pieces 1 ends every piece
 * with a NUL character, so tests can check that such text arrives whole.
 *
 * Occupancy faults, for sluice's poll of /metrics and /slots (its
 * fleet/occupancy.c): --occupancy-delay-ms answers both late (a hang, when
 * longer than the client waits), --occupancy-status answers both with that
 * status in llama-server's error shape (404 as a build without the
 * endpoint, 501 as llama-server without --metrics), and --metrics-value
 * writes its text as /metrics' requests_processing (NaN, 1e6, 0x10...).
 * With --occupancy-faults N only the first N answers of the two carry
 * them, and later ones are true again: a fault that ends.
 *
 * Known gaps: no /metrics beyond the occupancy gauges; no /tokenize,
 * /embeddings, /infill; no stop words, no n_probs, no multiple prompts; unknown
 * fields are ignored (as llama-server does), and fields of the wrong type fall
 * back to defaults. The mock writes regardless of back-pressure: an answer is
 * at most a couple of MB, and sluice's HTTP server drops a client that stops
 * reading.
 */
#include "sluice/base/common.h"
#include "sluice/net/http.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#define MOCK_NAME "mock-llama-server"
/* What /props, /slots and the answers report as the model and build. */
#define MOCK_MODEL "mock"
/* Context per slot, as with -c 16384 -np 4; also caps a generation. */
#define MOCK_N_CTX 4096u
/* Room for load tests that stand in for a fleet of llama-servers. */
#define MOCK_MAX_SLOTS 100000u
/* An hour: longer delays would only hide a typo. */
#define MOCK_MAX_DELAY_MS 3600000u
/* Load tests open many connections; sluice's default limit is lower. */
#define MOCK_MAX_CONNECTIONS 100000u
/* Prompts can be long; llama-server itself takes large bodies. */
#define MOCK_MAX_BODY (16u * 1024 * 1024)
/* Exit status for a bad option, as sluice's own. */
#define MOCK_EXIT_USAGE 2
/* Room for a text option and its NUL: a gauge's value is a few bytes. */
#define MOCK_TEXT_SIZE 32

/* ---- options ---- */

struct options {
	char host[16]; /* an IPv4 address, as text */
	uint64_t port;
	uint64_t slots;
	uint64_t tokens;
	uint64_t prompt_delay_ms;
	uint64_t token_delay_ms;
	double fail_rate;
	uint64_t fail_status;
	double hang_rate;
	double close_rate;
	uint64_t start_delay_ms;
	uint64_t seed;
	uint64_t nul_pieces;
	uint64_t occupancy_delay_ms;
	uint64_t occupancy_status;
	uint64_t occupancy_faults;
	char metrics_value[MOCK_TEXT_SIZE]; /* "": the true count */
};

enum opt_kind {
	OPT_UINT, /* whole number in [min, max], into a uint64_t */
	OPT_RATE, /* fraction in [0, 1], into a double */
	OPT_IPV4, /* an IPv4 address, into a char[16] */
	OPT_TEXT, /* text shorter than MOCK_TEXT_SIZE, into a char array */
};

struct option_def {
	const char *name; /* the flag, without "--" */
	const char *env;  /* its environment twin */
	enum opt_kind kind;
	size_t offset; /* of the field in struct options */
	const char *def;
	uint64_t min, max;
	const char *help;
};

#define FIELD(f) offsetof(struct options, f)

static const struct option_def option_defs[] = {
    {"host", "SLUICE_MOCK_HOST", OPT_IPV4, FIELD(host), "127.0.0.1", 0, 0,
     "IPv4 address to listen on (any of 127.0.0.0/8, for tests that need "
     "several hosts)"},
    {"port", "SLUICE_MOCK_PORT", OPT_UINT, FIELD(port), "8081", 0, 65535,
     "TCP port on --host; 0 picks a free one"},
    {"slots", "SLUICE_MOCK_SLOTS", OPT_UINT, FIELD(slots), "4", 1,
     MOCK_MAX_SLOTS, "generations that run at once; the rest wait"},
    {"tokens", "SLUICE_MOCK_TOKENS", OPT_UINT, FIELD(tokens), "16", 0,
     MOCK_N_CTX, "tokens per answer when the request does not say"},
    {"prompt-delay-ms", "SLUICE_MOCK_PROMPT_DELAY_MS", OPT_UINT,
     FIELD(prompt_delay_ms), "0", 0, MOCK_MAX_DELAY_MS,
     "wait before the first token, once a slot is held"},
    {"token-delay-ms", "SLUICE_MOCK_TOKEN_DELAY_MS", OPT_UINT,
     FIELD(token_delay_ms), "0", 0, MOCK_MAX_DELAY_MS, "wait between tokens"},
    {"fail-rate", "SLUICE_MOCK_FAIL_RATE", OPT_RATE, FIELD(fail_rate), "0", 0,
     0, "fraction of requests answered with --fail-status"},
    {"fail-status", "SLUICE_MOCK_FAIL_STATUS", OPT_UINT, FIELD(fail_status),
     "500", 100, 599, "HTTP status of an injected failure"},
    {"hang-rate", "SLUICE_MOCK_HANG_RATE", OPT_RATE, FIELD(hang_rate), "0", 0,
     0, "fraction of requests that hold a slot and never answer"},
    {"close-rate", "SLUICE_MOCK_CLOSE_RATE", OPT_RATE, FIELD(close_rate), "0",
     0, 0, "fraction of requests whose connection is closed mid-answer"},
    {"start-delay-ms", "SLUICE_MOCK_START_DELAY_MS", OPT_UINT,
     FIELD(start_delay_ms), "0", 0, MOCK_MAX_DELAY_MS,
     "answer 503 \"Loading model\" for this long after start"},
    {"seed", "SLUICE_MOCK_SEED", OPT_UINT, FIELD(seed), "42", 0, UINT64_MAX,
     "seed of the PRNG that picks the requests to fault"},
    {"nul-pieces", "SLUICE_MOCK_NUL_PIECES", OPT_UINT, FIELD(nul_pieces), "0",
     0, 1, "1: each piece ends with a NUL character (\\u0000 in JSON)"},
    {"occupancy-delay-ms", "SLUICE_MOCK_OCCUPANCY_DELAY_MS", OPT_UINT,
     FIELD(occupancy_delay_ms), "0", 0, MOCK_MAX_DELAY_MS,
     "wait before answering /metrics or /slots"},
    {"occupancy-status", "SLUICE_MOCK_OCCUPANCY_STATUS", OPT_UINT,
     FIELD(occupancy_status), "200", 100, 599,
     "HTTP status of /metrics and /slots (not 200: an error)"},
    {"metrics-value", "SLUICE_MOCK_METRICS_VALUE", OPT_TEXT,
     FIELD(metrics_value), "", 0, 0,
     "text /metrics writes as requests_processing; empty: the true count"},
    {"occupancy-faults", "SLUICE_MOCK_OCCUPANCY_FAULTS", OPT_UINT,
     FIELD(occupancy_faults), "0", 0, UINT64_MAX,
     "answers of /metrics or /slots that carry the three faults above; "
     "0: all"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: " MOCK_NAME " [OPTION VALUE]...\n"
	           "A stand-in for llama-server on loopback, for load and "
	           "fault tests.\n"
	           "Each option also reads from its environment variable; the "
	           "flag wins.\n\n");
	for (size_t i = 0; i < SL_ARRAY_SIZE(option_defs); i++) {
		const struct option_def *o = &option_defs[i];
		char flag[40];
		snprintf(flag, sizeof(flag), "--%s %s", o->name,
		         o->kind == OPT_RATE   ? "F"
		         : o->kind == OPT_IPV4 ? "ADDR"
		         : o->kind == OPT_TEXT ? "TEXT"
		                               : "N");
		fprintf(f, "  %-22s %s\n  %-22s (%s, default %s)\n", flag,
		        o->help, "", o->env, o->def);
	}
	fprintf(f, "  %-22s print this help and exit\n", "--help");
}

/* Parses `text` into the option's field; false when it is not valid. */
static bool option_set(struct options *opt, const struct option_def *o,
                       const char *text)
{
	char *end;
	errno = 0;
	if (o->kind == OPT_TEXT) {
		char *field = (char *)opt + o->offset;
		if (strlen(text) >= MOCK_TEXT_SIZE)
			return false;
		snprintf(field, MOCK_TEXT_SIZE, "%s", text);
		return true;
	}
	if (o->kind == OPT_IPV4) {
		char *field = (char *)opt + o->offset;
		struct sockaddr_in a;
		if (strlen(text) >= sizeof(opt->host) ||
		    uv_ip4_addr(text, 0, &a) != 0)
			return false;
		snprintf(field, sizeof(opt->host), "%s", text);
		return true;
	}
	if (o->kind == OPT_RATE) {
		double v = strtod(text, &end);
		if (end == text || *end || errno || !isfinite(v) || v < 0 ||
		    v > 1)
			return false;
		*(double *)((char *)opt + o->offset) = v;
		return true;
	}
	/* strtoull() takes "-1" and " 1"; a count should be digits only. */
	if (*text < '0' || *text > '9')
		return false;
	unsigned long long v = strtoull(text, &end, 10);
	if (*end || errno || v < o->min || v > o->max)
		return false;
	*(uint64_t *)((char *)opt + o->offset) = v;
	return true;
}

/* The one line a bad value gets, then exit status 2. */
static SL_NORETURN void bad_value(const struct option_def *o, const char *where,
                                  const char *text)
{
	if (o->kind == OPT_IPV4)
		fprintf(stderr,
		        MOCK_NAME ": %s: expected an IPv4 address, got "
		                  "\"%s\"\n",
		        where, text);
	else if (o->kind == OPT_RATE)
		fprintf(stderr,
		        MOCK_NAME ": %s: expected a fraction from 0 to 1, "
		                  "got \"%s\"\n",
		        where, text);
	else if (o->kind == OPT_TEXT)
		fprintf(stderr,
		        MOCK_NAME ": %s: expected at most %d bytes, got "
		                  "\"%s\"\n",
		        where, MOCK_TEXT_SIZE - 1, text);
	else
		fprintf(stderr,
		        MOCK_NAME ": %s: expected a whole number from %llu "
		                  "to %llu, got \"%s\"\n",
		        where, (unsigned long long)o->min,
		        (unsigned long long)o->max, text);
	exit(MOCK_EXIT_USAGE);
}

static const struct option_def *option_find(const char *name, size_t len)
{
	for (size_t i = 0; i < SL_ARRAY_SIZE(option_defs); i++)
		if (strlen(option_defs[i].name) == len &&
		    memcmp(option_defs[i].name, name, len) == 0)
			return &option_defs[i];
	return NULL;
}

/*
 * Defaults, then the environment, then argv: a flag wins over its twin.
 * Exits on --help and on anything it cannot use.
 */
static void options_parse(struct options *opt, int argc, char **argv)
{
	for (size_t i = 0; i < SL_ARRAY_SIZE(option_defs); i++) {
		const struct option_def *o = &option_defs[i];
		if (!option_set(opt, o, o->def))
			abort(); /* a default that does not parse is a bug */
		const char *env = getenv(o->env);
		if (env && !option_set(opt, o, env))
			bad_value(o, o->env, env);
	}
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			usage(stdout);
			exit(EXIT_SUCCESS);
		}
		if (strncmp(arg, "--", 2) != 0) {
			fprintf(stderr,
			        MOCK_NAME ": unexpected argument \"%s\" (see "
			                  "--help)\n",
			        arg);
			exit(MOCK_EXIT_USAGE);
		}
		const char *name = arg + 2;
		const char *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		const struct option_def *o = option_find(name, len);
		if (!o) {
			fprintf(stderr,
			        MOCK_NAME ": unknown option %s (see --help)\n",
			        arg);
			exit(MOCK_EXIT_USAGE);
		}
		const char *value = eq ? eq + 1 : argv[++i];
		if (!value) {
			fprintf(stderr, MOCK_NAME ": --%s needs a value\n",
			        o->name);
			exit(MOCK_EXIT_USAGE);
		}
		char where[40];
		snprintf(where, sizeof(where), "--%s", o->name);
		if (!option_set(opt, o, value))
			bad_value(o, where, value);
	}
}

/* ---- a growable text buffer ---- */

struct text {
	char *data;
	size_t len, cap;
};

static void text_printf(struct text *t, const char *fmt, ...) SL_PRINTF(2, 3);

/* Appends formatted text; the buffer grows as needed and stays grown. */
static void text_printf(struct text *t, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = t->cap - t->len;
		int n =
		    vsnprintf(t->data ? t->data + t->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			abort(); /* only a bad format does this */
		if ((size_t)n < room) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = t->cap ? t->cap : 4096;
		while (cap < t->len + (size_t)n + 1)
			cap *= 2;
		t->data = sl_xrealloc(t->data, cap);
		t->cap = cap;
	}
}

/* ---- the mock's state ---- */

enum api {
	API_NATIVE, /* /completion */
	API_TEXT,   /* /v1/completions */
	API_CHAT,   /* /v1/chat/completions */
};

enum fault {
	FAULT_NONE,
	FAULT_HANG,  /* hold the slot, never answer */
	FAULT_CLOSE, /* close the connection half way */
};

struct mock;

/*
 * One generation request, from its arrival to the end of its answer (or
 * its client). It waits in the FIFO until a slot is free, then holds the
 * slot until it is done.
 */
struct generation {
	struct mock *mock;
	struct sl_http_request *req;    /* NULL once the client side is over */
	struct generation *prev, *next; /* the wait queue, while waiting */
	enum api api;
	enum fault fault;
	bool stream;
	bool include_usage; /* chat streams: a last event with the usage */
	bool head_sent;
	bool waiting;   /* in the wait queue */
	bool has_timer; /* timer initialised: free from its close callback */
	int slot;       /* -1 until a slot is held */
	unsigned n_tokens;
	unsigned prompt_tokens;
	unsigned sent;     /* tokens produced so far */
	long long created; /* Unix time of arrival, for the OpenAI fields */
	char id[48];       /* chatcmpl-... */
	uv_timer_t timer;  /* paces the tokens when a delay is set */
};

struct mock {
	uv_loop_t loop;
	struct sl_http_server server;
	uv_signal_t sigint, sigterm;
	struct options opt;
	struct generation **slots; /* opt.slots entries; NULL: idle */
	unsigned n_busy;
	unsigned n_waiting; /* in the wait queue: llama-server's deferred */
	struct generation *wait_head, *wait_tail;
	uint64_t rng;
	uint64_t serial;            /* generation requests so far */
	uint64_t ready_at_ms;       /* loop time when "loading" ends */
	uint64_t occupancy_answers; /* of /metrics and /slots, so far */
	struct text scratch;        /* answers are built here, then written */
	bool paced;                 /* a delay is set: generations use timers */
	bool filling;               /* inside slots_fill(): do not re-enter */
	bool stopping;
};

/* splitmix64: tiny, and good enough to pick faults. */
static double next_uniform(struct mock *m)
{
	uint64_t z = (m->rng += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1.0p-53; /* [0, 1) */
}

/* ---- responses ---- */

#define JSON_TYPE "application/json; charset=utf-8"
#define SSE_HEADERS "X-Accel-Buffering: no\r\n"

static void respond_json(struct sl_http_request *req, int status,
                         const struct text *t)
{
	sl_http_respond(req, status, JSON_TYPE, NULL, t->data, t->len);
}

/* llama-server's error shape: {"error":{"code","message","type"}}. */
static void respond_error(struct sl_http_request *req, int status,
                          const char *type, const char *message)
{
	json_t *j = json_pack("{s:{s:i, s:s, s:s}}", "error", "code", status,
	                      "message", message, "type", type);
	char *body = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	sl_http_respond(req, status, JSON_TYPE, NULL, body, strlen(body));
	free(body);
}

/*
 * What follows " tok<k>" in a piece: nothing, or with --nul-pieces 1 a NUL
 * character, which JSON writes as \u0000 and which must reach the client
 * whole (text in any language may hold one).
 */
static const char *piece_tail(const struct mock *m)
{
	return m->opt.nul_pieces ? "\\u0000" : "";
}

/* The whole text of n tokens: " tok0 tok1 ...". */
static void append_pieces(struct text *t, const struct mock *m, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		text_printf(t, " tok%u%s", k, piece_tail(m));
}

/*
 * llama-server's timings, from the configured delays rather than the
 * clock, so that they repeat. Rates are 0 where no time passed (JSON has
 * no infinity).
 */
static void append_timings(struct text *t, const struct generation *g)
{
	const struct options *o = &g->mock->opt;
	double prompt_ms = (double)o->prompt_delay_ms;
	double predicted_ms = (double)o->token_delay_ms * g->n_tokens;
	unsigned np = g->prompt_tokens, n = g->n_tokens;
	text_printf(t,
	            "\"timings\":{\"cache_n\":0,\"prompt_n\":%u,"
	            "\"prompt_ms\":%.3f,\"prompt_per_token_ms\":%.3f,"
	            "\"prompt_per_second\":%.3f,\"predicted_n\":%u,"
	            "\"predicted_ms\":%.3f,\"predicted_per_token_ms\":%.3f,"
	            "\"predicted_per_second\":%.3f}",
	            np, prompt_ms, prompt_ms / np,
	            prompt_ms > 0 ? 1e3 * np / prompt_ms : 0, n, predicted_ms,
	            n ? predicted_ms / n : 0,
	            predicted_ms > 0 ? 1e3 * n / predicted_ms : 0);
}

static void append_usage(struct text *t, const struct generation *g)
{
	text_printf(t,
	            "\"usage\":{\"completion_tokens\":%u,\"prompt_tokens\":%u,"
	            "\"total_tokens\":%u,\"prompt_tokens_details\":"
	            "{\"cached_tokens\":0}}",
	            g->n_tokens, g->prompt_tokens,
	            g->n_tokens + g->prompt_tokens);
}

/*
 * /completion's last object: the whole answer when not streamed, else the
 * stream's closing event with empty content. llama-server also echoes the
 * prompt and every sampling setting; the mock gives the two that matter.
 */
static void append_native_final(struct text *t, const struct generation *g,
                                bool with_text)
{
	text_printf(t, "{\"index\":0,\"content\":\"");
	if (with_text)
		append_pieces(t, g->mock, g->n_tokens);
	text_printf(t,
	            "\",\"tokens\":[],\"id_slot\":%d,\"stop\":true,"
	            "\"model\":\"" MOCK_MODEL "\",\"tokens_predicted\":%u,"
	            "\"tokens_evaluated\":%u,\"generation_settings\":"
	            "{\"n_predict\":%u,\"stream\":%s},\"has_new_line\":false,"
	            "\"truncated\":false,\"stop_type\":\"limit\","
	            "\"stopping_word\":\"\",\"tokens_cached\":%u,",
	            g->slot, g->n_tokens, g->prompt_tokens, g->n_tokens,
	            g->stream ? "true" : "false",
	            g->prompt_tokens + g->n_tokens);
	append_timings(t, g);
	text_printf(t, "}");
}

/* /v1/completions' last object; streamed, it is the finish event. */
static void append_text_final(struct text *t, const struct generation *g,
                              bool with_text)
{
	text_printf(t, "{\"choices\":[{\"text\":\"");
	if (with_text)
		append_pieces(t, g->mock, g->n_tokens);
	text_printf(t,
	            "\",\"index\":0,\"logprobs\":null,\"finish_reason\":"
	            "\"length\"}],\"created\":%lld,\"model\":\"" MOCK_MODEL
	            "\",\"system_fingerprint\":\"" MOCK_NAME "\","
	            "\"object\":\"text_completion\",",
	            g->created);
	append_usage(t, g);
	text_printf(t, ",\"id\":\"%s\",", g->id);
	append_timings(t, g);
	text_printf(t, "}");
}

static void append_chat_answer(struct text *t, const struct generation *g)
{
	text_printf(t,
	            "{\"choices\":[{\"finish_reason\":\"length\",\"index\":0,"
	            "\"message\":{\"role\":\"assistant\",\"content\":\"");
	append_pieces(t, g->mock, g->n_tokens);
	text_printf(t,
	            "\"}}],\"created\":%lld,\"model\":\"" MOCK_MODEL "\","
	            "\"system_fingerprint\":\"" MOCK_NAME "\","
	            "\"object\":\"chat.completion\",",
	            g->created);
	append_usage(t, g);
	text_printf(t, ",\"id\":\"%s\",", g->id);
	append_timings(t, g);
	text_printf(t, "}");
}

/* A chat chunk's fields after "choices", in llama-server's order. */
static void append_chat_chunk_tail(struct text *t, const struct generation *g)
{
	text_printf(t,
	            "\"created\":%lld,\"id\":\"%s\",\"model\":\"" MOCK_MODEL
	            "\",\"system_fingerprint\":\"" MOCK_NAME "\","
	            "\"object\":\"chat.completion.chunk\"",
	            g->created, g->id);
}

/* The SSE event of token k; a chat stream's first also carries the role. */
static void append_token_event(struct text *t, const struct generation *g,
                               unsigned k)
{
	switch (g->api) {
	case API_NATIVE:
		text_printf(t,
		            "data: {\"index\":0,\"content\":\" tok%u%s\","
		            "\"tokens\":[%u],\"stop\":false,\"id_slot\":-1,"
		            "\"tokens_predicted\":%u,\"tokens_evaluated\":%u}"
		            "\n\n",
		            k, piece_tail(g->mock), k, k + 1, g->prompt_tokens);
		break;
	case API_TEXT:
		text_printf(t,
		            "data: {\"choices\":[{\"text\":\" tok%u%s\","
		            "\"index\":0,\"logprobs\":null,\"finish_reason\":"
		            "null}],\"created\":%lld,\"model\":\"" MOCK_MODEL
		            "\",\"system_fingerprint\":\"" MOCK_NAME "\","
		            "\"object\":\"text_completion\",\"id\":\"%s\"}\n\n",
		            k, piece_tail(g->mock), g->created, g->id);
		break;
	case API_CHAT:
		text_printf(
		    t,
		    "data: {\"choices\":[{\"finish_reason\":null,"
		    "\"index\":0,\"delta\":{\"content\":\" tok%u%s\"}}],",
		    k, piece_tail(g->mock));
		append_chat_chunk_tail(t, g);
		text_printf(t, "}\n\n");
		break;
	}
}

static void append_role_event(struct text *t, const struct generation *g)
{
	text_printf(t, "data: {\"choices\":[{\"finish_reason\":null,"
	               "\"index\":0,\"delta\":{\"role\":\"assistant\","
	               "\"content\":null}}],");
	append_chat_chunk_tail(t, g);
	text_printf(t, "}\n\n");
}

/*
 * The events after the last token. llama-server 0.7.0: /completion ends
 * with its "stop": true object and no [DONE]; /v1/completions' finish
 * event always carries usage and timings (include_usage changes nothing);
 * a chat stream's finish event carries the timings, or, with include_usage,
 * is followed by a "choices": [] event with usage and timings.
 */
static void append_final_events(struct text *t, const struct generation *g)
{
	text_printf(t, "data: ");
	switch (g->api) {
	case API_NATIVE: append_native_final(t, g, false); break;
	case API_TEXT: append_text_final(t, g, false); break;
	case API_CHAT:
		text_printf(t, "{\"choices\":[{\"finish_reason\":\"length\","
		               "\"index\":0,\"delta\":{}}],");
		append_chat_chunk_tail(t, g);
		if (g->include_usage) {
			text_printf(t, "}\n\ndata: {\"choices\":[],");
			append_chat_chunk_tail(t, g);
			text_printf(t, ",");
			append_usage(t, g);
		}
		text_printf(t, ",");
		append_timings(t, g);
		text_printf(t, "}");
		break;
	}
	text_printf(t, "\n\n");
}

/* ---- slots and the wait queue ---- */

static void gen_finish(struct generation *g);
static void on_tick(uv_timer_t *t);

static bool loading(struct mock *m)
{
	return uv_now(&m->loop) < m->ready_at_ms;
}

static void queue_push(struct mock *m, struct generation *g)
{
	g->waiting = true;
	m->n_waiting++;
	g->prev = m->wait_tail;
	g->next = NULL;
	if (m->wait_tail)
		m->wait_tail->next = g;
	else
		m->wait_head = g;
	m->wait_tail = g;
}

static void queue_remove(struct mock *m, struct generation *g)
{
	if (!g->waiting)
		return;
	g->waiting = false;
	m->n_waiting--;
	if (g->prev)
		g->prev->next = g->next;
	else
		m->wait_head = g->next;
	if (g->next)
		g->next->prev = g->prev;
	else
		m->wait_tail = g->prev;
	g->prev = g->next = NULL;
}

/* The client side is over: no more calls to the HTTP server about it. */
static void client_done(struct generation *g)
{
	g->req = NULL;
}

/* Writes what the scratch buffer holds as one chunk; false: client gone. */
static bool flush(struct generation *g)
{
	struct text *t = &g->mock->scratch;
	int rc = 0;
	if (t->len > 0)
		rc = sl_http_stream_write(g->req, t->data, t->len);
	t->len = 0;
	return rc == 0;
}

/* Gives up on the client side: a fault, or a client already gone. */
static void close_client(struct generation *g)
{
	sl_http_abort(g->req);
	client_done(g);
	gen_finish(g);
}

/*
 * Produces the stream's events up to token `upto` (exclusive), and its end
 * when that is the last token. Paced, each step is its own chunk, as
 * llama-server writes them; unpaced, everything goes in one chunk.
 */
static void stream_produce(struct generation *g, unsigned upto)
{
	struct text *t = &g->mock->scratch;
	bool paced = g->has_timer;
	unsigned cut = g->fault == FAULT_CLOSE ? g->n_tokens / 2 : g->n_tokens;
	t->len = 0;
	if (!g->head_sent) {
		g->head_sent = true;
		if (sl_http_stream_start(g->req, 200, "text/event-stream",
		                         SSE_HEADERS, -1) != 0) {
			close_client(g);
			return;
		}
		if (g->api == API_CHAT)
			append_role_event(t, g);
	}
	while (g->sent < upto && g->sent < cut) {
		append_token_event(t, g, g->sent++);
		if (paced && !flush(g)) {
			close_client(g);
			return;
		}
	}
	if (g->fault == FAULT_CLOSE && g->sent >= cut) {
		/* Mid-stream, no end marker: what a crashed server leaves. */
		flush(g);
		close_client(g);
		return;
	}
	if (g->sent < g->n_tokens) {
		if (!flush(g))
			close_client(g);
		return;
	}
	append_final_events(t, g);
	if (g->api != API_NATIVE) {
		if (paced && !flush(g)) {
			close_client(g);
			return;
		}
		text_printf(t, "data: [DONE]\n\n");
	}
	if (!flush(g)) {
		close_client(g);
		return;
	}
	sl_http_stream_end(g->req);
	client_done(g);
	gen_finish(g);
}

/* A non-streamed answer, all at once. */
static void answer_whole(struct generation *g)
{
	if (g->fault == FAULT_CLOSE) {
		close_client(g); /* the connection ends before any answer */
		return;
	}
	struct text *t = &g->mock->scratch;
	t->len = 0;
	switch (g->api) {
	case API_NATIVE: append_native_final(t, g, true); break;
	case API_TEXT: append_text_final(t, g, true); break;
	case API_CHAT: append_chat_answer(t, g); break;
	}
	respond_json(g->req, 200, t);
	client_done(g);
	gen_finish(g);
}

/* A slot is free for g: generate at once, or start its timer. */
static void gen_start(struct generation *g, unsigned slot)
{
	struct mock *m = g->mock;
	m->slots[slot] = g;
	m->n_busy++;
	g->slot = (int)slot;
	if (g->fault == FAULT_HANG)
		return; /* holds the slot until the client leaves */
	if (!m->paced) {
		if (g->stream)
			stream_produce(g, g->n_tokens);
		else
			answer_whole(g);
		return;
	}
	uint64_t first = m->opt.prompt_delay_ms, every = m->opt.token_delay_ms;
	if (!g->stream) {
		/* Silent until done: the last token is due at this time. */
		if (g->n_tokens > 0)
			first += every * (g->n_tokens - 1);
		every = 0;
	}
	uv_timer_init(&m->loop, &g->timer);
	g->timer.data = g;
	g->has_timer = true;
	uv_timer_start(&g->timer, on_tick, first, every);
}

static void on_tick(uv_timer_t *t)
{
	struct generation *g = t->data;
	if (!g->stream)
		answer_whole(g);
	else if (g->mock->opt.token_delay_ms == 0)
		stream_produce(g, g->n_tokens);
	else
		stream_produce(g, g->sent + 1);
}

/* Starts waiting generations while slots are free, oldest first. */
static void slots_fill(struct mock *m)
{
	/* A generation that ends at once calls back here: the loop goes on. */
	if (m->filling || m->stopping)
		return;
	m->filling = true;
	while (m->wait_head && m->n_busy < m->opt.slots) {
		struct generation *g = m->wait_head;
		queue_remove(m, g);
		unsigned slot = 0;
		while (m->slots[slot])
			slot++;
		gen_start(g, slot);
	}
	m->filling = false;
}

static void on_timer_closed(uv_handle_t *h)
{
	free(h->data);
}

/*
 * The generation is over (its client side already is): free its slot or
 * its place in the queue, free it, and let the next one in.
 */
static void gen_finish(struct generation *g)
{
	struct mock *m = g->mock;
	queue_remove(m, g);
	if (g->slot >= 0) {
		m->slots[g->slot] = NULL;
		m->n_busy--;
		g->slot = -1;
	}
	if (g->has_timer)
		uv_close((uv_handle_t *)&g->timer, on_timer_closed);
	else
		free(g);
	slots_fill(m);
}

/* HTTP server: the client left first; its slot frees at once. */
static void on_client_abort(struct sl_http_request *req)
{
	struct generation *g = req->handler_data;
	client_done(g);
	gen_finish(g);
}

/* ---- the handlers ---- */

/* Whitespace-separated words in s. */
static unsigned count_words(const char *s)
{
	unsigned n = 0;
	bool in_word = false;
	for (; *s; s++) {
		bool space =
		    *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r';
		if (!space && !in_word)
			n++;
		in_word = !space;
	}
	return n;
}

/*
 * The mock's token count of a prompt: words in its strings, one per number
 * (a token id), and the "content" of chat messages.
 */
static unsigned count_prompt(json_t *v)
{
	unsigned n = 0;
	size_t i;
	json_t *item;
	if (json_is_string(v))
		return count_words(json_string_value(v));
	if (json_is_number(v))
		return 1;
	if (json_is_object(v))
		return count_prompt(json_object_get(v, "content"));
	json_array_foreach(v, i, item) n += count_prompt(item);
	return n;
}

/* The request's token budget: its own if sane, else --tokens. */
static unsigned token_budget(const struct mock *m, json_t *doc, enum api api)
{
	json_t *v = json_object_get(doc, api == API_NATIVE ? "n_predict"
	                                                   : "max_tokens");
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return (unsigned)m->opt.tokens;
	return (unsigned)SL_MIN(json_integer_value(v), (json_int_t)MOCK_N_CTX);
}

static void handle_generation(struct mock *m, struct sl_http_request *req,
                              enum api api)
{
	json_error_t jerr;
	json_t *doc =
	    json_loadb(req->body ? req->body : "", req->body_len, 0, &jerr);
	if (!json_is_object(doc)) {
		char message[256] = "the request body must be a JSON object";
		if (!doc)
			snprintf(message, sizeof(message),
			         "parse error at line %d, column %d: %s",
			         jerr.line, jerr.column, jerr.text);
		json_decref(doc);
		respond_error(req, 400, "invalid_request_error", message);
		return;
	}
	/* Drawn for every request, so a request's fate depends only on its
	 * place in the order of arrival and the seed. */
	double fail_draw = next_uniform(m), hang_draw = next_uniform(m);
	double close_draw = next_uniform(m);
	uint64_t serial = ++m->serial;
	if (fail_draw < m->opt.fail_rate) {
		json_decref(doc);
		respond_error(req, (int)m->opt.fail_status, "server_error",
		              "mock failure");
		return;
	}
	struct generation *g = sl_xcalloc(1, sizeof(*g));
	g->mock = m;
	g->req = req;
	g->api = api;
	g->fault = hang_draw < m->opt.hang_rate     ? FAULT_HANG
	           : close_draw < m->opt.close_rate ? FAULT_CLOSE
	                                            : FAULT_NONE;
	g->stream = json_is_true(json_object_get(doc, "stream"));
	g->include_usage = json_is_true(json_object_get(
	    json_object_get(doc, "stream_options"), "include_usage"));
	g->n_tokens = token_budget(m, doc, api);
	g->prompt_tokens = count_prompt(
	    json_object_get(doc, api == API_CHAT ? "messages" : "prompt"));
	g->prompt_tokens = SL_MAX(g->prompt_tokens, 1u);
	g->slot = -1;
	g->created = (long long)time(NULL);
	snprintf(g->id, sizeof(g->id), "chatcmpl-mock%016llx",
	         (unsigned long long)serial);
	json_decref(doc);
	req->handler_data = g;
	req->on_abort = on_client_abort;
	queue_push(m, g);
	slots_fill(m);
}

static void handle_health(struct mock *m, struct sl_http_request *req)
{
	static const char ok[] = "{\"status\":\"ok\"}";
	(void)m;
	sl_http_respond(req, 200, JSON_TYPE, NULL, ok, sizeof(ok) - 1);
}

static void handle_props(struct mock *m, struct sl_http_request *req)
{
	struct text *t = &m->scratch;
	t->len = 0;
	text_printf(t,
	            "{\"default_generation_settings\":{\"n_ctx\":%u},"
	            "\"total_slots\":%u,\"model_path\":\"" MOCK_MODEL "\","
	            "\"build_info\":\"" MOCK_NAME "\"}",
	            MOCK_N_CTX, (unsigned)m->opt.slots);
	respond_json(req, 200, t);
}

/* ---- /metrics and /slots, and their faults ---- */

static void write_slots(struct mock *m, struct sl_http_request *req)
{
	struct text *t = &m->scratch;
	t->len = 0;
	text_printf(t, "[");
	for (unsigned i = 0; i < m->opt.slots; i++)
		text_printf(t,
		            "%s{\"id\":%u,\"n_ctx\":%u,\"is_processing\":%s}",
		            i ? "," : "", i, MOCK_N_CTX,
		            m->slots[i] ? "true" : "false");
	text_printf(t, "]");
	respond_json(req, 200, t);
}

/*
 * llama-server --metrics' two occupancy gauges (it writes more), in its
 * text format: generations holding a slot, and those waiting for one;
 * `processing` in place of the first's count when not NULL.
 */
static void write_metrics(struct mock *m, struct sl_http_request *req,
                          const char *processing)
{
	struct text *t = &m->scratch;
	t->len = 0;
	text_printf(t, "# HELP llamacpp:requests_processing Number of requests "
	               "processing.\n"
	               "# TYPE llamacpp:requests_processing gauge\n");
	if (processing)
		text_printf(t, "llamacpp:requests_processing %s\n", processing);
	else
		text_printf(t, "llamacpp:requests_processing %u\n", m->n_busy);
	text_printf(t,
	            "# HELP llamacpp:requests_deferred Number of requests "
	            "deferred.\n"
	            "# TYPE llamacpp:requests_deferred gauge\n"
	            "llamacpp:requests_deferred %u\n",
	            m->n_waiting);
	sl_http_respond(req, 200, "text/plain; version=0.0.4", NULL, t->data,
	                t->len);
}

/* The answer of /metrics or /slots, faulty or true. */
static void answer_occupancy(struct mock *m, struct sl_http_request *req,
                             bool metrics, bool faulty)
{
	unsigned status = (unsigned)m->opt.occupancy_status;
	if (faulty && status != 200) {
		/* What llama-server says: no such endpoint, or no --metrics. */
		if (status == 404)
			respond_error(req, 404, "not_found_error",
			              "File Not Found");
		else if (status == 501)
			respond_error(req, 501, "not_supported_error",
			              "This server does not support metrics "
			              "endpoint. Start it with `--metrics`");
		else
			respond_error(req, (int)status, "server_error",
			              "mock failure");
		return;
	}
	if (!metrics)
		write_slots(m, req);
	else
		write_metrics(m, req,
		              faulty && m->opt.metrics_value[0]
		                  ? m->opt.metrics_value
		                  : NULL);
}

/* An answer of /metrics or /slots held back by --occupancy-delay-ms. */
struct held_answer {
	struct mock *mock;
	struct sl_http_request *req; /* until answered or left */
	bool metrics;                /* /metrics, else /slots */
	uv_timer_t timer;
};

static void on_held_closed(uv_handle_t *h)
{
	free(h->data);
}

static void on_held_due(uv_timer_t *t)
{
	struct held_answer *h = t->data;
	answer_occupancy(h->mock, h->req, h->metrics, true);
	uv_close((uv_handle_t *)&h->timer, on_held_closed);
}

/* The client gave up first (sluice's poll timed out): forget it. */
static void on_held_abort(struct sl_http_request *req)
{
	struct held_answer *h = req->handler_data;
	uv_close((uv_handle_t *)&h->timer, on_held_closed);
}

/*
 * /metrics or /slots: the first --occupancy-faults answers (all with 0)
 * carry the faults, decided in the order requests arrive.
 */
static void handle_occupancy(struct mock *m, struct sl_http_request *req,
                             bool metrics)
{
	m->occupancy_answers++;
	bool faulty = m->opt.occupancy_faults == 0 ||
	              m->occupancy_answers <= m->opt.occupancy_faults;
	if (!faulty || m->opt.occupancy_delay_ms == 0) {
		answer_occupancy(m, req, metrics, faulty);
		return;
	}
	struct held_answer *h = sl_xcalloc(1, sizeof(*h));
	h->mock = m;
	h->req = req;
	h->metrics = metrics;
	req->handler_data = h;
	req->on_abort = on_held_abort;
	uv_timer_init(&m->loop, &h->timer);
	h->timer.data = h;
	uv_timer_start(&h->timer, on_held_due, m->opt.occupancy_delay_ms, 0);
}

static void handle_slots(struct mock *m, struct sl_http_request *req)
{
	handle_occupancy(m, req, false);
}

static void handle_metrics(struct mock *m, struct sl_http_request *req)
{
	handle_occupancy(m, req, true);
}

static void handle_models(struct mock *m, struct sl_http_request *req)
{
	struct text *t = &m->scratch;
	t->len = 0;
	text_printf(t,
	            "{\"object\":\"list\",\"data\":[{\"id\":\"" MOCK_MODEL
	            "\",\"object\":\"model\",\"created\":%lld,"
	            "\"owned_by\":\"llamacpp\",\"meta\":null}]}",
	            (long long)time(NULL));
	respond_json(req, 200, t);
}

static void handle_native(struct mock *m, struct sl_http_request *req)
{
	handle_generation(m, req, API_NATIVE);
}

static void handle_text(struct mock *m, struct sl_http_request *req)
{
	handle_generation(m, req, API_TEXT);
}

static void handle_chat(struct mock *m, struct sl_http_request *req)
{
	handle_generation(m, req, API_CHAT);
}

struct route {
	const char *path;
	llhttp_method_t method;
	void (*handler)(struct mock *m, struct sl_http_request *req);
};

static const struct route routes[] = {
    {"/health", HTTP_GET, handle_health},
    {"/props", HTTP_GET, handle_props},
    {"/slots", HTTP_GET, handle_slots},
    {"/metrics", HTTP_GET, handle_metrics},
    {"/v1/models", HTTP_GET, handle_models},
    {"/completion", HTTP_POST, handle_native},
    {"/completions", HTTP_POST, handle_native},
    {"/v1/completions", HTTP_POST, handle_text},
    {"/v1/chat/completions", HTTP_POST, handle_chat},
};

static void dispatch(struct sl_http_request *req, void *data)
{
	struct mock *m = data;
	for (size_t i = 0; i < SL_ARRAY_SIZE(routes); i++) {
		if (routes[i].method != req->method ||
		    strcmp(routes[i].path, req->path) != 0)
			continue;
		/* While "loading", llama-server answers this to everything. */
		if (loading(m))
			respond_error(req, 503, "unavailable_error",
			              "Loading model");
		else
			routes[i].handler(m, req);
		return;
	}
	/* llama-server says 404 to a wrong method too. */
	respond_error(req, 404, "not_found_error", "File Not Found");
}

/* ---- start and stop ---- */

/*
 * SIGINT or SIGTERM: close everything. Closing the server aborts every
 * request in flight, whose on_abort frees its generation; uv_run() then
 * returns once the last handle has closed.
 */
static void on_signal(uv_signal_t *s, int signum)
{
	struct mock *m = s->data;
	(void)signum;
	if (m->stopping)
		return;
	m->stopping = true;
	uv_close((uv_handle_t *)&m->sigint, NULL);
	uv_close((uv_handle_t *)&m->sigterm, NULL);
	sl_http_server_close(&m->server, NULL);
}

int main(int argc, char **argv)
{
	static struct mock mock; /* big (the server); off the stack */
	struct mock *m = &mock;
	options_parse(&m->opt, argc, argv);
	m->rng = m->opt.seed;
	m->paced = m->opt.prompt_delay_ms > 0 || m->opt.token_delay_ms > 0;
	m->slots = sl_xcalloc(m->opt.slots, sizeof(*m->slots));

	/* A client that vanishes must cost an EPIPE, not the process. */
	signal(SIGPIPE, SIG_IGN);
	uv_loop_init(&m->loop);
	uv_signal_init(&m->loop, &m->sigint);
	uv_signal_init(&m->loop, &m->sigterm);
	m->sigint.data = m->sigterm.data = m;
	uv_signal_start(&m->sigint, on_signal, SIGINT);
	uv_signal_start(&m->sigterm, on_signal, SIGTERM);

	struct sl_http_limits limits;
	sl_http_limits_default(&limits);
	limits.max_connections = MOCK_MAX_CONNECTIONS;
	limits.server_name = "mock-llama-server";
	limits.max_body = MOCK_MAX_BODY;
	int code = EXIT_SUCCESS;
	int rc =
	    sl_http_server_listen(&m->server, &m->loop, m->opt.host,
	                          (unsigned)m->opt.port, &limits, dispatch, m);
	if (rc != 0) {
		fprintf(stderr,
		        MOCK_NAME ": cannot listen on %s:%llu: "
		                  "%s\n",
		        m->opt.host, (unsigned long long)m->opt.port,
		        sl_strerror(rc));
		code = EXIT_FAILURE;
		m->stopping = true;
		uv_close((uv_handle_t *)&m->sigint, NULL);
		uv_close((uv_handle_t *)&m->sigterm, NULL);
		sl_http_server_close(&m->server, NULL);
	} else {
		m->ready_at_ms = uv_now(&m->loop) + m->opt.start_delay_ms;
		fprintf(stderr,
		        MOCK_NAME " listening on http://%s:%u (%u "
		                  "slots)\n",
		        m->opt.host, sl_http_server_port(&m->server),
		        (unsigned)m->opt.slots);
	}
	uv_run(&m->loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&m->loop);
	if (rc != 0) {
		/* A handle left open: a bug here, not the caller's problem. */
		fprintf(stderr, MOCK_NAME ": loop not empty at exit: %s\n",
		        uv_strerror(rc));
		code = EXIT_FAILURE;
	}
	free(m->slots);
	free(m->scratch.data);
	return code;
}

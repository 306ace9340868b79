/*
 * workload.h: what sluice-bench sends, apart from when and to whom.
 *
 * A workload is a list of conversations. A conversation is one or more
 * user turns; single-turn sources (a JSONL file, synthetic prompts, shared
 * prefixes) give conversations of one turn, a ShareGPT file gives them as
 * recorded, and the engine replays the later turns with the server's real
 * replies in between. Every count here is in tokens when the workload
 * knows them (from the file's reference replies, from the drawn lengths,
 * or from the target's /tokenize when asked), else 0.
 */
#ifndef SLUICE_BENCH_WORKLOAD_H
#define SLUICE_BENCH_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sl_h1;
struct uv_loop_s;

/* A length distribution: fixed, uniform, normal or a histogram. */
enum wl_dist_kind { WL_FIXED, WL_UNIFORM, WL_NORMAL, WL_HISTOGRAM };

/* Histogram bins at most. */
#define WL_MAX_BINS 64
/* The longest length a spec may name or a draw may give, in tokens. */
#define WL_MAX_LEN 1000000u
/* The largest JSONL or ShareGPT file read. */
#define WL_FILE_MAX ((size_t)256 << 20)
/* /tokenize requests in flight at once, and the longest answer taken. */
#define WL_TOKENIZE_PARALLEL 8
#define WL_TOKENIZE_BODY_MAX ((size_t)16 << 20)

struct wl_dist {
	enum wl_dist_kind kind;
	double a, b; /* fixed: a; uniform: [a, b]; normal: mean a, sd b */
	unsigned n_bins;
	unsigned bin_value[WL_MAX_BINS];
	double bin_weight[WL_MAX_BINS]; /* cumulative, last one 1 */
};

/*
 * Parses "N" (fixed), "uniform:A-B", "normal:MEAN,SD" or
 * "hist:V:W,V:W,..." (values and their weights). Returns 0, or -1 with a
 * one-line reason in err.
 */
int wl_dist_parse(struct wl_dist *d, const char *spec, char *err,
                  size_t errlen);
/* A draw, at least 1; u1 and u2 are uniform in (0, 1). */
unsigned wl_dist_draw(const struct wl_dist *d, double u1, double u2);

/* splitmix64: the next of a seeded sequence, and one uniform in (0, 1). */
uint64_t wl_rng_next(uint64_t *state);
double wl_rng_unit(uint64_t *state);

enum wl_source { WL_SYNTHETIC, WL_JSONL, WL_SHAREGPT, WL_SHARED_PREFIX };

struct wl_options {
	enum wl_source source;
	const char *file;          /* JSONL or ShareGPT */
	struct wl_dist input_len;  /* synthetic: prompt tokens */
	struct wl_dist output_len; /* every source: max_tokens, unless the
	                              file's reference replies set them */
	bool output_from_file;     /* ShareGPT: reference replies' lengths */
	unsigned max_turns;        /* ShareGPT: turns per conversation, 0 all */
	/* Shared prefix: groups x prompts, prefix and suffix tokens. */
	unsigned groups, prompts_per_group, prefix_len, suffix_len;
	unsigned count; /* synthetic conversations made (shared prefix:
	                   groups x prompts_per_group) */
	uint64_t seed;
};

struct wl_turn {
	char *text;             /* the user's words */
	unsigned input_tokens;  /* of text alone; 0 when unknown */
	unsigned output_tokens; /* max_tokens asked for this turn */
};

struct wl_conv {
	struct wl_turn *turns;
	unsigned n_turns;
	unsigned group; /* shared prefix: its group; else 0 */
};

struct workload {
	struct wl_options o;
	struct wl_conv *convs;
	size_t n_convs;
	size_t next; /* round robin over convs */
	uint64_t rng;
	size_t skipped; /* ShareGPT: conversations without a human turn */
};

/* Loads or makes the conversations. Returns 0, or -1 with err set. */
int wl_init(struct workload *w, const struct wl_options *o, char *err,
            size_t errlen);
/* The next conversation, in order, wrapping around. */
const struct wl_conv *wl_next(struct workload *w);
void wl_free(struct workload *w);

/*
 * Asks the target's /tokenize for every turn's count (a few at a time, on
 * the loop, through h1) and calls done once, from the loop, with 0, or -1
 * and the first failure's reason. Turns whose count the target will not
 * give keep theirs (the drawn length for generated text, else 0). Returns
 * 0.
 */
typedef void (*wl_tokenized_cb)(struct workload *w, int rc, const char *err,
                                void *arg);
int wl_tokenize(struct workload *w, struct sl_h1 *h1, struct uv_loop_s *loop,
                const char *base_url, const char *api_key, wl_tokenized_cb done,
                void *arg);

#endif

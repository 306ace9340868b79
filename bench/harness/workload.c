/*
 * workload.c: the conversations sluice-bench sends (workload.h).
 *
 * Generated text (synthetic prompts, shared prefixes) is made of common
 * English words that typical BPE and SentencePiece vocabularies hold whole,
 * with their leading space, so that a prompt of N words is about N tokens
 * before /tokenize says exactly. The words are those of sluice's demo
 * model's vocabulary (src/fleet/demo_model.c). That model's tokenizer
 * still spells them letter by letter, as its vocabulary has no pieces
 * between letters and words to merge through (about 4.4 tokens a word,
 * measured against llama-server): against it, only /tokenize counts.
 */
#include "workload.h"

#include "sluice/base/common.h"
#include "sluice/fleet/demo_model.h"
#include "http.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The demo model's whole words (fleet/demo_model.h), common English. */
static const char *const *words;
static unsigned n_words;

static void words_init(void)
{
	if (!words)
		words = sl_demo_words(&n_words);
}
/* The longest word and its space. */
#define WORD_MAX 6
/* A /tokenize answer takes milliseconds; a target that gives none fails. */
#define TOKENIZE_TIMEOUT_MS 30000L

static int failf(char *err, size_t errlen, const char *fmt, ...)
    SL_PRINTF(3, 4);

static int failf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- random numbers ---- */

uint64_t wl_rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15u;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

double wl_rng_unit(uint64_t *s)
{
	return ((double)(wl_rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static unsigned draw(struct workload *w, const struct wl_dist *d)
{
	double u1 = wl_rng_unit(&w->rng);
	return wl_dist_draw(d, u1, wl_rng_unit(&w->rng));
}

/* ---- length distributions ---- */

/*
 * A length at *p: decimal digits, 1 to WL_MAX_LEN. Moves *p past them.
 * Returns NULL, or why not.
 */
static const char *parse_len(const char **p, unsigned *out)
{
	const char *s = *p;
	unsigned long v = 0;
	if (!isdigit((unsigned char)*s))
		return "expected a whole number";
	for (; isdigit((unsigned char)*s); s++) {
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > WL_MAX_LEN)
			return "a length is at most 1000000";
	}
	if (v == 0)
		return "a length is at least 1";
	*out = (unsigned)v;
	*p = s;
	return NULL;
}

/* A finite number at *p, without sign or blanks; moves *p past it. */
static bool parse_num(const char **p, double *out)
{
	if (!isdigit((unsigned char)**p) && **p != '.')
		return false;
	char *end;
	errno = 0;
	*out = strtod(*p, &end);
	if (end == *p || errno || !isfinite(*out))
		return false;
	*p = end;
	return true;
}

static const char *parse_uniform(struct wl_dist *d, const char *s)
{
	unsigned lo, hi;
	const char *why = parse_len(&s, &lo);
	if (why)
		return why;
	if (*s++ != '-')
		return "expected uniform:LOW-HIGH";
	if ((why = parse_len(&s, &hi)))
		return why;
	if (*s)
		return "expected uniform:LOW-HIGH";
	if (lo > hi)
		return "the low end is above the high end";
	d->kind = WL_UNIFORM;
	d->a = lo;
	d->b = hi;
	return NULL;
}

static const char *parse_normal(struct wl_dist *d, const char *s)
{
	double mean, sd;
	if (!parse_num(&s, &mean) || *s++ != ',' || !parse_num(&s, &sd) || *s)
		return "expected normal:MEAN,SD";
	if (mean < 1)
		return "the mean is below 1";
	if (mean > WL_MAX_LEN)
		return "the mean is above 1000000";
	d->kind = WL_NORMAL;
	d->a = mean;
	d->b = sd;
	return NULL;
}

static const char *parse_hist(struct wl_dist *d, const char *s, char *why,
                              size_t whylen)
{
	double sum = 0;
	d->n_bins = 0;
	for (;;) {
		if (d->n_bins == WL_MAX_BINS) {
			snprintf(why, whylen, "more than %d bins", WL_MAX_BINS);
			return why;
		}
		unsigned i = d->n_bins, v;
		double wt;
		const char *start = s, *bad = parse_len(&s, &v);
		if (!bad &&
		    (*s++ != ':' || !parse_num(&s, &wt) || (*s && *s != ',')))
			bad = "expected VALUE:WEIGHT";
		if (bad) {
			size_t n = strcspn(start, ",");
			snprintf(why, whylen, "bin %u (\"%.*s\"): %s", i + 1,
			         (int)SL_MIN(n, (size_t)40), start, bad);
			return why;
		}
		d->bin_value[i] = v;
		sum += wt;
		d->bin_weight[i] = sum;
		d->n_bins++;
		if (!*s)
			break;
		s++;
	}
	if (sum <= 0)
		return "the weights sum to 0";
	for (unsigned i = 0; i < d->n_bins; i++)
		d->bin_weight[i] /= sum;
	d->bin_weight[d->n_bins - 1] = 1;
	d->kind = WL_HISTOGRAM;
	return NULL;
}

int wl_dist_parse(struct wl_dist *d, const char *spec, char *err, size_t errlen)
{
	char buf[128];
	const char *why;
	memset(d, 0, sizeof(*d));
	if (strncmp(spec, "uniform:", 8) == 0) {
		why = parse_uniform(d, spec + 8);
	} else if (strncmp(spec, "normal:", 7) == 0) {
		why = parse_normal(d, spec + 7);
	} else if (strncmp(spec, "hist:", 5) == 0) {
		why = parse_hist(d, spec + 5, buf, sizeof(buf));
	} else if (isdigit((unsigned char)*spec)) {
		const char *s = spec;
		unsigned v = 0;
		why = parse_len(&s, &v);
		if (!why && *s)
			why = "expected a whole number";
		d->kind = WL_FIXED;
		d->a = v;
	} else {
		why = "expected N, uniform:LOW-HIGH, normal:MEAN,SD or "
		      "hist:V:W,V:W,...";
	}
	/* A long spec is cut short, so that the reason still shows. */
	if (why && strlen(spec) > 60)
		return failf(err, errlen, "\"%.50s...\": %s", spec, why);
	if (why)
		return failf(err, errlen, "\"%s\": %s", spec, why);
	return 0;
}

unsigned wl_dist_draw(const struct wl_dist *d, double u1, double u2)
{
	double x = d->a;
	switch (d->kind) {
	case WL_FIXED: break;
	case WL_UNIFORM:
		x = SL_MIN(floor(d->a + u1 * (d->b - d->a + 1)), d->b);
		break;
	case WL_NORMAL:
		/* Box-Muller: one standard normal from two uniforms. */
		x = round(d->a + d->b * sqrt(-2 * log(u1)) *
		                     cos(2 * 3.14159265358979323846 * u2));
		break;
	case WL_HISTOGRAM:
		for (unsigned i = 0; i < d->n_bins; i++) {
			x = d->bin_value[i];
			if (u1 < d->bin_weight[i])
				break;
		}
		break;
	}
	if (!(x >= 1))
		return 1;
	return x > WL_MAX_LEN ? WL_MAX_LEN : (unsigned)x;
}

/* ---- conversations ---- */

/*
 * Room for one more of n items of `size` at *p: arrays grow by doubling,
 * at each power of two, so no capacity need be kept beside them.
 */
static void *grow(void *p, size_t n, size_t size)
{
	if (n == 0)
		return sl_xmalloc(size);
	return n & (n - 1) ? p : sl_xrealloc(p, 2 * n * size);
}

static struct wl_conv *add_conv(struct workload *w)
{
	w->convs = grow(w->convs, w->n_convs, sizeof(*w->convs));
	struct wl_conv *c = &w->convs[w->n_convs++];
	memset(c, 0, sizeof(*c));
	return c;
}

/* Takes text, which the conversation owns from then on. */
static void add_turn(struct wl_conv *c, char *text, unsigned input_tokens,
                     unsigned output_tokens)
{
	c->turns = grow(c->turns, c->n_turns, sizeof(*c->turns));
	c->turns[c->n_turns++] = (struct wl_turn){
	    .text = text,
	    .input_tokens = input_tokens,
	    .output_tokens = output_tokens,
	};
}

/* Appends word i and a space before it unless it is the first. */
static size_t put_word(char *s, size_t len, unsigned i)
{
	if (len)
		s[len++] = ' ';
	size_t n = strlen(words[i]);
	memcpy(s + len, words[i], n);
	s[len + n] = '\0';
	return len + n;
}

/*
 * n words: the first `lead` of them spell `tag` in base n_words, most
 * significant first, so that different tags differ from the first word
 * while there are at most n_words of them; the rest are drawn.
 */
static char *make_words(struct workload *w, unsigned n, unsigned lead,
                        unsigned tag)
{
	char *s = sl_xmalloc((size_t)n * (WORD_MAX + 1) + 1);
	size_t len = 0;
	s[0] = '\0';
	for (unsigned i = 0; i < n; i++) {
		unsigned k;
		if (i < lead) {
			unsigned div = 1;
			for (unsigned j = i + 1; j < lead; j++)
				div *= n_words;
			k = tag / div % n_words;
		} else {
			k = (unsigned)(wl_rng_next(&w->rng) % n_words);
		}
		len = put_word(s, len, k);
	}
	return s;
}

static int init_synthetic(struct workload *w, char *err, size_t errlen)
{
	if (w->o.count == 0)
		return failf(err, errlen, "no conversations to make: count 0");
	for (unsigned i = 0; i < w->o.count; i++) {
		unsigned in = draw(w, &w->o.input_len);
		unsigned out = draw(w, &w->o.output_len);
		add_turn(add_conv(w), make_words(w, in, 0, 0), in, out);
	}
	return 0;
}

/*
 * Prompts in the order SGLang's generated-shared-prefix sends them: the
 * first of every group, then the second of every group, and so on.
 */
static int init_shared_prefix(struct workload *w, char *err, size_t errlen)
{
	const struct wl_options *o = &w->o;
	if (o->groups == 0 || o->prompts_per_group == 0)
		return failf(err, errlen,
		             "shared prefix: %u groups of %u prompts is none",
		             o->groups, o->prompts_per_group);
	if ((uint64_t)o->groups * o->prompts_per_group > WL_MAX_LEN)
		return failf(err, errlen,
		             "shared prefix: %u groups of %u prompts is more "
		             "than 1000000",
		             o->groups, o->prompts_per_group);
	if (o->prefix_len == 0)
		return failf(err, errlen, "shared prefix: the prefix is empty");
	if (o->prefix_len > WL_MAX_LEN || o->suffix_len > WL_MAX_LEN)
		return failf(err, errlen,
		             "shared prefix: a length is above 1000000");
	unsigned lead = 1;
	for (uint64_t span = n_words; span < o->groups; span *= n_words)
		lead++;
	lead = SL_MIN(lead, o->prefix_len);
	char **prefix = sl_xcalloc(o->groups, sizeof(*prefix));
	for (unsigned g = 0; g < o->groups; g++)
		prefix[g] = make_words(w, o->prefix_len, lead, g);
	for (unsigned p = 0; p < o->prompts_per_group; p++) {
		for (unsigned g = 0; g < o->groups; g++) {
			char *suffix = make_words(w, o->suffix_len, 0, 0);
			char *text =
			    o->suffix_len
			        ? sl_xasprintf("%s %s", prefix[g], suffix)
			        : sl_xstrdup(prefix[g]);
			free(suffix);
			struct wl_conv *c = add_conv(w);
			c->group = g;
			add_turn(c, text, o->prefix_len + o->suffix_len,
			         draw(w, &o->output_len));
		}
	}
	for (unsigned g = 0; g < o->groups; g++)
		free(prefix[g]);
	free(prefix);
	return 0;
}

/* Opens a file to read, refusing one over WL_FILE_MAX. */
static FILE *open_bounded(const char *file, char *err, size_t errlen)
{
	FILE *f = fopen(file, "r");
	if (!f) {
		failf(err, errlen, "%s: %s", file, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size > WL_FILE_MAX) {
		failf(err, errlen, "%s: not a regular file of at most %zu MiB",
		      file, WL_FILE_MAX >> 20);
		fclose(f);
		return NULL;
	}
	return f;
}

static bool blank(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return !*s;
}

/*
 * One JSONL line: a string, or an object with "prompt" and perhaps
 * "max_tokens" or "output_len". Returns NULL, or why not.
 */
static const char *jsonl_line(struct workload *w, const char *line)
{
	json_t *j = json_loads(line, JSON_DECODE_ANY, NULL);
	json_t *text = json_is_string(j) ? j : json_object_get(j, "prompt");
	const char *why = NULL;
	json_t *max = json_object_get(j, "max_tokens");
	if (!max)
		max = json_object_get(j, "output_len");
	json_int_t out = max ? json_integer_value(max) : 0;
	if (!json_is_string(text))
		why = "not a JSON string or an object with a \"prompt\" string";
	else if (max && (!json_is_integer(max) || out < 1 || out > WL_MAX_LEN))
		why = "\"max_tokens\" is not a whole number from 1 to 1000000";
	else
		add_turn(add_conv(w), sl_xstrdup(json_string_value(text)), 0,
		         max ? (unsigned)out : draw(w, &w->o.output_len));
	json_decref(j);
	return why;
}

static int init_jsonl(struct workload *w, char *err, size_t errlen)
{
	const char *file = w->o.file;
	FILE *f = open_bounded(file, err, errlen);
	if (!f)
		return -1;
	char *line = NULL;
	size_t cap = 0;
	int rc = 0;
	for (unsigned no = 1; getline(&line, &cap, f) >= 0; no++) {
		if (blank(line))
			continue;
		const char *why = jsonl_line(w, line);
		if (why) {
			rc = failf(err, errlen, "%s:%u: %s", file, no, why);
			break;
		}
	}
	if (rc == 0 && ferror(f))
		rc = failf(err, errlen, "%s: %s", file, strerror(errno));
	else if (rc == 0 && w->n_convs == 0)
		rc = failf(err, errlen, "%s: no prompts", file);
	free(line);
	fclose(f);
	return rc;
}

static bool is_human(const char *from)
{
	return strcmp(from, "human") == 0 || strcmp(from, "user") == 0;
}

static bool is_reply(const char *from)
{
	static const char *const roles[] = {"gpt", "assistant", "chatgpt",
	                                    "bard"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(roles); i++)
		if (strcmp(from, roles[i]) == 0)
			return true;
	return false;
}

/* A reply's length in tokens, estimated: 4 tokens to 3 words, 1 at least. */
static unsigned estimate_tokens(const char *s)
{
	uint64_t n = 0;
	for (bool in = false; *s; s++) {
		bool sp = isspace((unsigned char)*s);
		n += !sp && !in;
		in = !sp;
	}
	n = (n * 4 + 2) / 3;
	return n < 1 ? 1 : n > WL_MAX_LEN ? WL_MAX_LEN : (unsigned)n;
}

/*
 * Checks that every turn of a conversation has "from" and "value" strings;
 * returns the index of the first that has not, or -1.
 */
static long bad_turn(json_t *turns)
{
	size_t i;
	json_t *t;
	json_array_foreach(turns, i, t)
	{
		if (!json_is_string(json_object_get(t, "from")) ||
		    !json_is_string(json_object_get(t, "value")))
			return (long)i;
	}
	return -1;
}

/* The user turns of one conversation, each with its max_tokens. */
static void sharegpt_conv(struct workload *w, json_t *turns)
{
	struct wl_conv *c = NULL;
	size_t n = json_array_size(turns);
	for (size_t i = 0; i < n; i++) {
		json_t *t = json_array_get(turns, i);
		const char *from =
		    json_string_value(json_object_get(t, "from"));
		const char *text =
		    json_string_value(json_object_get(t, "value"));
		/* An empty turn would ask the server nothing. */
		if (!is_human(from) || blank(text))
			continue;
		if (c && w->o.max_turns && c->n_turns == w->o.max_turns)
			break;
		json_t *next = json_array_get(turns, i + 1);
		const char *nfrom =
		    next ? json_string_value(json_object_get(next, "from"))
		         : "";
		unsigned out;
		if (w->o.output_from_file && is_reply(nfrom))
			out = estimate_tokens(
			    json_string_value(json_object_get(next, "value")));
		else
			out = draw(w, &w->o.output_len);
		if (!c)
			c = add_conv(w);
		add_turn(c, sl_xstrdup(text), 0, out);
	}
	if (!c)
		w->skipped++;
}

/* "conversation 3" or "conversation 3 (id "x")": 1-based, for errors. */
static void conv_name(char *buf, size_t len, size_t i, json_t *conv)
{
	const char *id = json_string_value(json_object_get(conv, "id"));
	if (id)
		snprintf(buf, len, "conversation %zu (id \"%.40s\")", i + 1,
		         id);
	else
		snprintf(buf, len, "conversation %zu", i + 1);
}

static int sharegpt_array(struct workload *w, json_t *root, char *err,
                          size_t errlen)
{
	const char *file = w->o.file;
	if (!json_is_array(root))
		return failf(err, errlen,
		             "%s: not a JSON array of conversations", file);
	size_t i;
	json_t *conv;
	json_array_foreach(root, i, conv)
	{
		char name[96];
		json_t *turns = json_object_get(conv, "conversations");
		long bad = bad_turn(turns);
		conv_name(name, sizeof(name), i, conv);
		if (!json_is_array(turns))
			return failf(err, errlen,
			             "%s: %s has no \"conversations\" array",
			             file, name);
		if (bad >= 0)
			return failf(err, errlen,
			             "%s: %s: turn %ld has no \"from\" and "
			             "\"value\" strings",
			             file, name, bad + 1);
		sharegpt_conv(w, turns);
	}
	if (w->n_convs == 0)
		return failf(err, errlen, "%s: no conversation has a user turn",
		             file);
	return 0;
}

static int init_sharegpt(struct workload *w, char *err, size_t errlen)
{
	FILE *f = open_bounded(w->o.file, err, errlen);
	if (!f)
		return -1;
	json_error_t je;
	json_t *root = json_loadf(f, 0, &je);
	fclose(f);
	if (!root)
		return failf(err, errlen, "%s:%d:%d: %s", w->o.file, je.line,
		             je.column, je.text);
	int rc = sharegpt_array(w, root, err, errlen);
	json_decref(root);
	return rc;
}

int wl_init(struct workload *w, const struct wl_options *o, char *err,
            size_t errlen)
{
	memset(w, 0, sizeof(*w));
	w->o = *o;
	words_init();
	w->rng = o->seed;
	int rc;
	switch (o->source) {
	case WL_SYNTHETIC: rc = init_synthetic(w, err, errlen); break;
	case WL_JSONL: rc = init_jsonl(w, err, errlen); break;
	case WL_SHAREGPT: rc = init_sharegpt(w, err, errlen); break;
	case WL_SHARED_PREFIX: rc = init_shared_prefix(w, err, errlen); break;
	default: rc = failf(err, errlen, "unknown workload source"); break;
	}
	if (rc)
		wl_free(w);
	return rc;
}

const struct wl_conv *wl_next(struct workload *w)
{
	if (w->n_convs == 0)
		return NULL;
	const struct wl_conv *c = &w->convs[w->next];
	w->next = (w->next + 1) % w->n_convs;
	return c;
}

void wl_free(struct workload *w)
{
	for (size_t i = 0; i < w->n_convs; i++) {
		for (unsigned t = 0; t < w->convs[i].n_turns; t++)
			free(w->convs[i].turns[t].text);
		free(w->convs[i].turns);
	}
	free(w->convs);
	w->convs = NULL;
	w->n_convs = 0;
	w->next = 0;
}

/* ---- /tokenize ---- */

struct tok_job;

struct tok_slot {
	struct tok_job *job;
	struct hb_call call;
	struct wl_turn *turn;
};

struct tok_job {
	struct workload *w;
	char *base, *key;
	wl_tokenized_cb done;
	void *arg;
	size_t conv; /* the next turn to ask about: convs[conv].turns[turn] */
	unsigned turn, inflight, open;
	int rc;
	char err[256];
	struct tok_slot slots[WL_TOKENIZE_PARALLEL];
};

static struct wl_turn *next_turn(struct tok_job *j)
{
	struct workload *w = j->w;
	while (j->conv < w->n_convs && j->turn >= w->convs[j->conv].n_turns) {
		j->conv++;
		j->turn = 0;
	}
	if (j->conv == w->n_convs)
		return NULL;
	return &w->convs[j->conv].turns[j->turn++];
}

static void tok_fail(struct tok_job *j, const char *fmt, ...) SL_PRINTF(2, 3);

static void tok_fail(struct tok_job *j, const char *fmt, ...)
{
	if (j->rc)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(j->err, sizeof(j->err), fmt, ap);
	va_end(ap);
	j->rc = -1;
}

/* The answer's "tokens" count into the turn, or the reason it has none. */
static void tok_read(struct tok_slot *s, int status, const char *err)
{
	struct tok_job *j = s->job;
	if (status == 0) {
		tok_fail(j, "/tokenize: %s", err);
		return;
	}
	json_t *a = s->call.body
	                ? json_loadb(s->call.body, s->call.len, 0, NULL)
	                : NULL;
	json_t *tokens = json_object_get(a, "tokens");
	if (status != 200) {
		json_t *e = json_object_get(a, "error");
		const char *msg =
		    json_string_value(json_object_get(e, "message"));
		tok_fail(j, "/tokenize: HTTP %d%s%s", status, msg ? ": " : "",
		         msg ? msg : "");
	} else if (!json_is_array(tokens)) {
		tok_fail(j, "/tokenize: no \"tokens\" array in the answer");
	} else {
		size_t n = json_array_size(tokens);
		s->turn->input_tokens = n > UINT32_MAX ? UINT32_MAX : n;
	}
	json_decref(a);
}

static void tok_fill(struct tok_job *j);

/* Freed once every call's timer has closed; then done is told. */
static void tok_closed(struct hb_call *c)
{
	struct tok_slot *s = c->data;
	struct tok_job *j = s->job;
	if (--j->open > 0)
		return;
	char err[sizeof(j->err)];
	memcpy(err, j->err, sizeof(err));
	int result = j->rc;
	struct workload *w = j->w;
	wl_tokenized_cb done = j->done;
	void *arg = j->arg;
	free(j->base);
	free(j->key);
	free(j);
	done(w, result, result ? err : NULL, arg);
}

static void tok_close(struct tok_job *j)
{
	j->open = WL_TOKENIZE_PARALLEL;
	for (unsigned i = 0; i < WL_TOKENIZE_PARALLEL; i++)
		hb_call_close(&j->slots[i].call, tok_closed);
}

static void tok_done(struct hb_call *c, int status, const char *err)
{
	struct tok_slot *s = c->data;
	struct tok_job *j = s->job;
	tok_read(s, status, err);
	j->inflight--;
	tok_fill(j);
	if (j->inflight == 0)
		tok_close(j);
}

static void tok_start(struct tok_slot *s, struct wl_turn *turn)
{
	struct tok_job *j = s->job;
	json_t *body = json_pack("{s:s}", "content", turn->text);
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	s->turn = turn;
	if (hb_call_start(&s->call, "POST", j->base, "/tokenize", j->key, text,
	                  TOKENIZE_TIMEOUT_MS, tok_done) != 0)
		tok_fail(j, "/tokenize: %s is not a URL sluice-bench can reach",
		         j->base);
	else
		j->inflight++;
	free(text);
}

/* Gives every idle call a turn; turns that cannot start are failures. */
static void tok_fill(struct tok_job *j)
{
	for (unsigned i = 0; i < WL_TOKENIZE_PARALLEL && !j->rc; i++) {
		struct tok_slot *s = &j->slots[i];
		struct wl_turn *turn;
		if (!s->call.busy && (turn = next_turn(j)))
			tok_start(s, turn);
	}
}

int wl_tokenize(struct workload *w, struct sl_h1 *h1, uv_loop_t *loop,
                const char *base_url, const char *api_key, wl_tokenized_cb done,
                void *arg)
{
	struct tok_job *j = sl_xcalloc(1, sizeof(*j));
	j->w = w;
	j->base = sl_xstrdup(base_url);
	j->key = api_key ? sl_xstrdup(api_key) : NULL;
	j->done = done;
	j->arg = arg;
	for (unsigned i = 0; i < WL_TOKENIZE_PARALLEL; i++) {
		j->slots[i].job = j;
		hb_call_init(&j->slots[i].call, h1, loop);
		j->slots[i].call.data = &j->slots[i];
	}
	tok_fill(j);
	if (j->inflight == 0)
		tok_close(j); /* nothing to ask, or nothing could start */
	return 0;
}

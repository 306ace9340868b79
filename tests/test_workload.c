/*
 * test_workload.c: sluice-bench's workloads (bench/harness/workload.c):
 * length specs and their draws, and each source of conversations. The
 * first argument is bench/data/sharegpt-sample.json.
 */
#include "../bench/harness/workload.h"

#include "test.h"

#include <math.h>
#include <unistd.h>

static const char *sample;
static char tmpdir[] = "/tmp/test_workload.XXXXXX";

static struct wl_dist dist(const char *spec)
{
	struct wl_dist d;
	char err[256];
	if (wl_dist_parse(&d, spec, err, sizeof(err)) != 0)
		TEST_FAIL("%s", err);
	return d;
}

static void bad_spec(const char *spec, const char *want)
{
	struct wl_dist d;
	char err[256] = "";
	ASSERT_EQ(wl_dist_parse(&d, spec, err, sizeof(err)), -1);
	ASSERT_STR_EQ(err, want);
}

/* Words separated by single spaces; 0 for "". */
static unsigned count_words(const char *s)
{
	unsigned n = *s != '\0';
	for (; *s; s++)
		n += *s == ' ';
	return n;
}

/* tmpdir/name, in a static buffer. */
static const char *tmp_path(const char *name)
{
	static char path[512];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	return path;
}

/* A file of the given text in tmpdir; its path, as tmp_path's. */
static const char *write_file(const char *name, const char *text)
{
	const char *path = tmp_path(name);
	FILE *f = fopen(path, "w");
	ASSERT(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static void test_dist_parse(void)
{
	struct wl_dist d = dist("128");
	ASSERT_EQ(d.kind, WL_FIXED);
	ASSERT(d.a == 128);
	d = dist("uniform:10-20");
	ASSERT_EQ(d.kind, WL_UNIFORM);
	ASSERT(d.a == 10 && d.b == 20);
	d = dist("uniform:7-7");
	ASSERT(d.a == 7 && d.b == 7);
	d = dist("normal:100,20.5");
	ASSERT_EQ(d.kind, WL_NORMAL);
	ASSERT(d.a == 100 && d.b == 20.5);
	d = dist("hist:10:1,20:3");
	ASSERT_EQ(d.kind, WL_HISTOGRAM);
	ASSERT_EQ(d.n_bins, 2);
	ASSERT_EQ(d.bin_value[0], 10);
	ASSERT_EQ(d.bin_value[1], 20);
	ASSERT(d.bin_weight[0] == 0.25 && d.bin_weight[1] == 1);
	d = dist("1000000");
	ASSERT(d.a == WL_MAX_LEN);

	bad_spec("", "\"\": expected N, uniform:LOW-HIGH, normal:MEAN,SD or "
	             "hist:V:W,V:W,...");
	bad_spec("gamma:3", "\"gamma:3\": expected N, uniform:LOW-HIGH, "
	                    "normal:MEAN,SD or hist:V:W,V:W,...");
	bad_spec("0", "\"0\": a length is at least 1");
	bad_spec("12x", "\"12x\": expected a whole number");
	bad_spec("1000001", "\"1000001\": a length is at most 1000000");
	bad_spec("uniform:9-3",
	         "\"uniform:9-3\": the low end is above the high end");
	bad_spec("uniform:9", "\"uniform:9\": expected uniform:LOW-HIGH");
	bad_spec("uniform:3-9x", "\"uniform:3-9x\": expected uniform:LOW-HIGH");
	bad_spec("uniform:-3-9", "\"uniform:-3-9\": expected a whole number");
	bad_spec("uniform:0-9", "\"uniform:0-9\": a length is at least 1");
	bad_spec("normal:100", "\"normal:100\": expected normal:MEAN,SD");
	bad_spec("normal:nan,1", "\"normal:nan,1\": expected normal:MEAN,SD");
	bad_spec("normal:100,-5", "\"normal:100,-5\": expected normal:MEAN,SD");
	bad_spec("normal:0.5,1", "\"normal:0.5,1\": the mean is below 1");
	bad_spec("hist:5", "\"hist:5\": bin 1 (\"5\"): expected VALUE:WEIGHT");
	bad_spec("hist:5:1,x:2",
	         "\"hist:5:1,x:2\": bin 2 (\"x:2\"): expected a whole number");
	bad_spec("hist:5:1,", "\"hist:5:1,\": bin 2 (\"\"): expected a whole "
	                      "number");
	bad_spec("hist:5:0,6:0", "\"hist:5:0,6:0\": the weights sum to 0");

	/* 65 bins: one more than WL_MAX_BINS. */
	char spec[1024] = "hist:1:1";
	for (int i = 2; i <= WL_MAX_BINS + 1; i++)
		snprintf(spec + strlen(spec), sizeof(spec) - strlen(spec),
		         ",%d:1", i);
	struct wl_dist h;
	char err[256];
	ASSERT_EQ(wl_dist_parse(&h, spec, err, sizeof(err)), -1);
	ASSERT_STR_EQ(err, "\"hist:1:1,2:1,3:1,4:1,5:1,6:1,7:1,8:1,9:1,10:1,"
	                   "11:1...\": more than 64 bins");
	*strrchr(spec, ',') = '\0';
	h = dist(spec);
	ASSERT_EQ(h.n_bins, WL_MAX_BINS);
}

#define DRAWS 10000

/* The mean of DRAWS draws, each checked against [lo, hi]. */
static double mean_of(const char *spec, unsigned lo, unsigned hi)
{
	struct wl_dist d = dist(spec);
	uint64_t rng = 31;
	double sum = 0;
	for (int i = 0; i < DRAWS; i++) {
		double u1 = wl_rng_unit(&rng);
		unsigned v = wl_dist_draw(&d, u1, wl_rng_unit(&rng));
		if (v < lo || v > hi)
			TEST_FAIL("%s: draw %u outside [%u, %u]", spec, v, lo,
			          hi);
		sum += v;
	}
	return sum / DRAWS;
}

static void test_dist_draw(void)
{
	ASSERT(mean_of("128", 128, 128) == 128);
	/* Uniform over 10..20: mean 15, standard error about 0.03. */
	ASSERT(fabs(mean_of("uniform:10-20", 10, 20) - 15) < 0.3);
	ASSERT(mean_of("uniform:7-7", 7, 7) == 7);
	/* Normal: mean 100, standard error 0.2; the tails are far. */
	ASSERT(fabs(mean_of("normal:100,20", 1, 300) - 100) < 1);
	/* Clamped at 1: a mean of 2 with a wide spread stays above 1. */
	ASSERT(mean_of("normal:2,10", 1, 100) > 2);
	ASSERT(mean_of("normal:5,0", 5, 5) == 5);
	/* Histogram: 10 a quarter of the time, 20 the rest: 17.5. */
	ASSERT(fabs(mean_of("hist:10:1,20:3", 10, 20) - 17.5) < 0.3);
	ASSERT(mean_of("hist:4:0,9:1", 9, 9) == 9);

	/* The ends of (0, 1) land on the ends of the range. */
	struct wl_dist d = dist("uniform:10-20");
	ASSERT_EQ(wl_dist_draw(&d, 1e-17, 0.5), 10);
	ASSERT_EQ(wl_dist_draw(&d, 1 - 1e-16, 0.5), 20);
	d = dist("hist:10:1,20:3");
	ASSERT_EQ(wl_dist_draw(&d, 0.2499, 0.5), 10);
	ASSERT_EQ(wl_dist_draw(&d, 0.2501, 0.5), 20);
	ASSERT_EQ(wl_dist_draw(&d, 1 - 1e-16, 0.5), 20);
	d = dist("normal:1000000,1000");
	ASSERT(wl_dist_draw(&d, 1e-9, 1) <= WL_MAX_LEN);
}

static struct wl_options options(enum wl_source source)
{
	return (struct wl_options){
	    .source = source,
	    .input_len = dist("uniform:5-40"),
	    .output_len = dist("uniform:1-64"),
	    .count = 50,
	    .seed = 7,
	};
}

static void load(struct workload *w, const struct wl_options *o)
{
	char err[512];
	if (wl_init(w, o, err, sizeof(err)) != 0)
		TEST_FAIL("%s", err);
}

static void load_fails(const struct wl_options *o, const char *want)
{
	struct workload w;
	char err[512] = "";
	ASSERT_EQ(wl_init(&w, o, err, sizeof(err)), -1);
	ASSERT_STR_EQ(err, want);
	ASSERT(w.convs == NULL && w.n_convs == 0);
}

static void test_synthetic(void)
{
	struct wl_options o = options(WL_SYNTHETIC);
	struct workload w, again;
	load(&w, &o);
	load(&again, &o);
	ASSERT_EQ(w.n_convs, 50);
	bool spread = false;
	for (size_t i = 0; i < w.n_convs; i++) {
		const struct wl_conv *c = &w.convs[i];
		ASSERT_EQ(c->n_turns, 1);
		ASSERT_EQ(c->group, 0);
		const struct wl_turn *t = &c->turns[0];
		ASSERT(t->input_tokens >= 5 && t->input_tokens <= 40);
		ASSERT_EQ(count_words(t->text), t->input_tokens);
		ASSERT(t->output_tokens >= 1 && t->output_tokens <= 64);
		spread |= t->input_tokens != w.convs[0].turns[0].input_tokens;
		/* The same seed, the same workload. */
		ASSERT_STR_EQ(t->text, again.convs[i].turns[0].text);
		ASSERT_EQ(t->output_tokens,
		          again.convs[i].turns[0].output_tokens);
	}
	ASSERT(spread);
	wl_free(&again);

	o.seed = 8;
	load(&again, &o);
	ASSERT(strcmp(w.convs[0].turns[0].text, again.convs[0].turns[0].text) !=
	       0);
	wl_free(&again);

	/* Round robin, wrapping around. */
	for (size_t i = 0; i < 2 * w.n_convs + 1; i++)
		ASSERT(wl_next(&w) == &w.convs[i % w.n_convs]);
	wl_free(&w);
	ASSERT(w.convs == NULL && w.n_convs == 0);

	o.count = 0;
	load_fails(&o, "no conversations to make: count 0");
}

static void test_shared_prefix(void)
{
	struct wl_options o = options(WL_SHARED_PREFIX);
	o.groups = 3;
	o.prompts_per_group = 4;
	o.prefix_len = 10;
	o.suffix_len = 5;
	struct workload w;
	load(&w, &o);
	ASSERT_EQ(w.n_convs, 12);
	char prefix[3][256] = {{0}};
	for (size_t i = 0; i < w.n_convs; i++) {
		const struct wl_conv *c = &w.convs[i];
		const struct wl_turn *t = &c->turns[0];
		ASSERT_EQ(c->n_turns, 1);
		ASSERT_EQ(c->group, i % 3); /* g0p0, g1p0, g2p0, g0p1, ... */
		ASSERT_EQ(count_words(t->text), 15);
		ASSERT_EQ(t->input_tokens, 15);
		/* The first ten words: the group's prefix. */
		const char *end = t->text;
		for (int k = 0; k < 10; k++)
			end = strchr(end, ' ') + 1;
		size_t len = (size_t)(end - t->text);
		if (!prefix[c->group][0])
			snprintf(prefix[c->group], sizeof(prefix[0]), "%.*s",
			         (int)len, t->text);
		ASSERT_EQ(strlen(prefix[c->group]), len);
		ASSERT(strncmp(prefix[c->group], t->text, len) == 0);
	}
	/* Different from their first word. */
	for (int a = 0; a < 3; a++)
		for (int b = a + 1; b < 3; b++)
			ASSERT(strncmp(prefix[a], prefix[b],
			               strcspn(prefix[a], " ")) != 0);
	/* Suffixes of one group differ. */
	ASSERT(strcmp(w.convs[0].turns[0].text, w.convs[3].turns[0].text) != 0);
	wl_free(&w);

	/* More groups than words: prefixes differ in their first two. */
	o.groups = 100;
	o.prompts_per_group = 1;
	o.prefix_len = 2;
	o.suffix_len = 0;
	load(&w, &o);
	ASSERT_EQ(w.n_convs, 100);
	for (size_t a = 0; a < w.n_convs; a++) {
		ASSERT_EQ(count_words(w.convs[a].turns[0].text), 2);
		for (size_t b = a + 1; b < w.n_convs; b++)
			ASSERT(strcmp(w.convs[a].turns[0].text,
			              w.convs[b].turns[0].text) != 0);
	}
	wl_free(&w);

	o.groups = 0;
	load_fails(&o, "shared prefix: 0 groups of 1 prompts is none");
	o.groups = 2;
	o.prefix_len = 0;
	load_fails(&o, "shared prefix: the prefix is empty");
}

static unsigned total_turns(const struct workload *w, unsigned *most)
{
	unsigned n = 0;
	*most = 0;
	for (size_t i = 0; i < w->n_convs; i++) {
		n += w->convs[i].n_turns;
		*most =
		    w->convs[i].n_turns > *most ? w->convs[i].n_turns : *most;
	}
	return n;
}

static void test_sharegpt_sample(void)
{
	struct wl_options o = options(WL_SHAREGPT);
	o.file = sample;
	o.output_from_file = true;
	struct workload w;
	unsigned most;
	load(&w, &o);
	/* 40 conversations, 78 user turns, 1 to 4 each. */
	ASSERT_EQ(w.n_convs, 40);
	ASSERT_EQ(w.skipped, 0);
	ASSERT_EQ(total_turns(&w, &most), 78);
	ASSERT_EQ(most, 4);
	const struct wl_turn *t = &w.convs[0].turns[0];
	ASSERT_STR_EQ(t->text, "How would I make a unit test faster?");
	ASSERT_EQ(t->input_tokens, 0);
	ASSERT_EQ(t->output_tokens, 38); /* a reply of 28 words */
	/* The fifth opens with a system turn, which is left out. */
	ASSERT_EQ(w.convs[5].n_turns, 4);
	t = &w.convs[5].turns[0];
	ASSERT_STR_EQ(t->text,
	              "What goes wrong most often when people cook tomato "
	              "soup?");
	ASSERT_EQ(t->output_tokens, 91); /* 68 words */
	wl_free(&w);

	o.max_turns = 2;
	load(&w, &o);
	ASSERT_EQ(w.n_convs, 40);
	ASSERT_EQ(total_turns(&w, &most), 61);
	ASSERT_EQ(most, 2);
	wl_free(&w);

	o.max_turns = 1;
	o.output_from_file = false;
	o.output_len = dist("7");
	load(&w, &o);
	ASSERT_EQ(total_turns(&w, &most), 40);
	ASSERT_EQ(most, 1);
	for (size_t i = 0; i < w.n_convs; i++)
		ASSERT_EQ(w.convs[i].turns[0].output_tokens, 7);
	wl_free(&w);
}

static void sharegpt_fails(const char *text, const char *want)
{
	struct wl_options o = options(WL_SHAREGPT);
	o.file = write_file("bad.json", text);
	char full[600];
	snprintf(full, sizeof(full), "%s%s", o.file, want);
	load_fails(&o, full);
}

static void test_sharegpt_files(void)
{
	struct wl_options o = options(WL_SHAREGPT);
	o.output_from_file = true;
	o.file = write_file(
	    "ok.json",
	    "[{\"id\": \"a\", \"conversations\": [{\"from\": \"gpt\", "
	    "\"value\": \"hi\"}]},\n"
	    " {\"conversations\": [{\"from\": \"user\", \"value\": \"one\"},"
	    " {\"from\": \"human\", \"value\": \" \"},"
	    " {\"from\": \"human\", \"value\": \"two\"},"
	    " {\"from\": \"bard\", \"value\": \"a b c d e f\"}]}]");
	struct workload w;
	load(&w, &o);
	ASSERT_EQ(w.n_convs, 1);
	ASSERT_EQ(w.skipped, 1);
	ASSERT_EQ(w.convs[0].n_turns, 2);
	ASSERT_STR_EQ(w.convs[0].turns[0].text, "one");
	/* No reply after it: drawn. */
	ASSERT(w.convs[0].turns[0].output_tokens <= 64);
	ASSERT_STR_EQ(w.convs[0].turns[1].text, "two");
	ASSERT_EQ(w.convs[0].turns[1].output_tokens, 8);
	wl_free(&w);

	sharegpt_fails("{\"conversations\": []}",
	               ": not a JSON array of conversations");
	sharegpt_fails("[{\"conversations\": []}, {\"id\": \"b\"}]",
	               ": conversation 2 (id \"b\") has no \"conversations\" "
	               "array");
	sharegpt_fails("[{\"conversations\": [{\"from\": \"human\", "
	               "\"value\": \"x\"}, {\"from\": \"gpt\"}]}]",
	               ": conversation 1: turn 2 has no \"from\" and "
	               "\"value\" strings");
	sharegpt_fails("[{\"conversations\": [{\"from\": \"gpt\", "
	               "\"value\": \"x\"}]}]",
	               ": no conversation has a user turn");
	sharegpt_fails("[]", ": no conversation has a user turn");

	/* jansson words its syntax errors itself: the place is ours. */
	o.file = write_file("bad.json", "[{\"conversations\": [\n}");
	char err[512], want[512];
	ASSERT_EQ(wl_init(&w, &o, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:2:1: ", o.file);
	ASSERT(strncmp(err, want, strlen(want)) == 0);
	ASSERT(!strchr(err, '\n'));

	o.file = "/nonexistent/sharegpt.json";
	load_fails(&o, "/nonexistent/sharegpt.json: No such file or "
	               "directory");
	o.file = "/";
	load_fails(&o, "/: not a regular file of at most 256 MiB");
}

static void jsonl_fails(const char *text, const char *want)
{
	struct wl_options o = options(WL_JSONL);
	o.file = write_file("bad.jsonl", text);
	char full[600];
	snprintf(full, sizeof(full), "%s%s", o.file, want);
	load_fails(&o, full);
}

static void test_jsonl(void)
{
	struct wl_options o = options(WL_JSONL);
	o.file = write_file("ok.jsonl",
	                    "\"hello there\"\n"
	                    "\n"
	                    "  \n"
	                    "{\"prompt\": \"two\", \"max_tokens\": 9}\n"
	                    "{\"prompt\": \"three\", \"output_len\": 4}\n"
	                    "{\"prompt\": \"four\", \"id\": 12}");
	struct workload w;
	load(&w, &o);
	ASSERT_EQ(w.n_convs, 4);
	ASSERT_STR_EQ(w.convs[0].turns[0].text, "hello there");
	ASSERT_STR_EQ(w.convs[1].turns[0].text, "two");
	ASSERT_EQ(w.convs[1].turns[0].output_tokens, 9);
	ASSERT_EQ(w.convs[2].turns[0].output_tokens, 4);
	ASSERT_STR_EQ(w.convs[3].turns[0].text, "four");
	for (size_t i = 0; i < w.n_convs; i++) {
		ASSERT_EQ(w.convs[i].n_turns, 1);
		ASSERT_EQ(w.convs[i].turns[0].input_tokens, 0);
		ASSERT(w.convs[i].turns[0].output_tokens >= 1 &&
		       w.convs[i].turns[0].output_tokens <= 64);
	}
	wl_free(&w);

	jsonl_fails("\"a\"\n\n{\"text\": \"b\"}\n",
	            ":3: not a JSON string or an object with a \"prompt\" "
	            "string");
	jsonl_fails("{\"prompt\": \"a\"\n",
	            ":1: not a JSON string or an object with a \"prompt\" "
	            "string");
	jsonl_fails("{\"prompt\": \"a\", \"max_tokens\": 0}\n",
	            ":1: \"max_tokens\" is not a whole number from 1 to "
	            "1000000");
	jsonl_fails("\n\n", ": no prompts");
}

int main(int argc, char **argv)
{
	if (argc != 2)
		TEST_FAIL("usage: test_workload SHAREGPT_SAMPLE");
	sample = argv[1];
	ASSERT(mkdtemp(tmpdir));
	RUN(test_dist_parse);
	RUN(test_dist_draw);
	RUN(test_synthetic);
	RUN(test_shared_prefix);
	RUN(test_sharegpt_sample);
	RUN(test_sharegpt_files);
	RUN(test_jsonl);
	static const char *const files[] = {"ok.json", "bad.json", "ok.jsonl",
	                                    "bad.jsonl"};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		unlink(tmp_path(files[i]));
	rmdir(tmpdir);
	return 0;
}

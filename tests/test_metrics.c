/*
 * test_metrics.c: histogram quantiles stay within the documented bound on
 * known distributions; the exposition of histograms and relayed families;
 * the process families: statm parsing, descriptor counting, what is shown
 * and what is left out.
 */
#include "sluice/ops/exposition.h"
#include "sluice/base/metrics.h"
#include "sluice/ops/procstat.h"

#include "sluice/base/common.h"
#include "test.h"

#include "sl_build_config.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define N 20000
/* The bound metrics.h states: 1 / SL_HIST_SUB of the true value. */
#define BOUND (1.0 / SL_HIST_SUB)

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Feeds values, then checks quantiles against the exact ones. */
static void check_distribution(const char *name, double *v, size_t n)
{
	struct sl_histogram h;
	sl_hist_init(&h, -17);
	double sum = 0;
	for (size_t i = 0; i < n; i++) {
		sl_hist_record(&h, v[i]);
		sum += v[i];
	}
	ASSERT_EQ(h.count, n);
	ASSERT(fabs(h.sum - sum) <= 1e-9 * fabs(sum) + 1e-12);
	qsort(v, n, sizeof(*v), cmp_double);
	static const double qs[] = {0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1};
	for (size_t i = 0; i < SL_ARRAY_SIZE(qs); i++) {
		size_t rank = (size_t)ceil(qs[i] * (double)n);
		double exact = v[rank ? rank - 1 : 0];
		double est = sl_hist_quantile(&h, qs[i]);
		double err = fabs(est - exact) / exact;
		if (err > BOUND)
			TEST_FAIL(
			    "%s: q%.3f estimate %g vs exact %g: error %.3f "
			    "over the bound %.3f",
			    name, qs[i], est, exact, err, BOUND);
	}
}

static double uniform(uint64_t *s)
{
	*s = *s * 6364136223846793005u + 1442695040888963407u;
	return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

static void test_quantiles_within_bound(void)
{
	double *v = malloc(N * sizeof(*v));
	uint64_t seed = 7;
	for (size_t i = 0; i < N; i++) /* 1 ms to 1 s, uniform */
		v[i] = 0.001 + uniform(&seed) * 0.999;
	check_distribution("uniform", v, N);
	for (size_t i = 0; i < N; i++) /* exponential, mean 50 ms */
		v[i] = -0.05 * log(uniform(&seed));
	check_distribution("exponential", v, N);
	for (size_t i = 0; i < N; i++) /* bimodal: fast cache hits, slow */
		v[i] = i % 10 ? 0.002 + uniform(&seed) * 0.001
		              : 3.0 + uniform(&seed);
	check_distribution("bimodal", v, N);
	for (size_t i = 0; i < N; i++) /* log-uniform over six decades */
		v[i] = 1e-4 * pow(10, 6 * uniform(&seed));
	check_distribution("log-uniform", v, N);
	for (size_t i = 0; i < N; i++)
		v[i] = 0.25; /* a constant, on a bucket edge */
	check_distribution("constant", v, N);
	free(v);
}

static void test_edges(void)
{
	struct sl_histogram h;
	sl_hist_init(&h, 0);                    /* 1 up to 2^24: counts */
	ASSERT(sl_hist_quantile(&h, 0.5) == 0); /* empty */
	for (int i = 1; i <= 8; i++)
		sl_hist_record(&h, i);
	/* Small integers have buckets of their own: exact. */
	ASSERT(fabs(sl_hist_quantile(&h, 0.5) - 4) < 0.5);
	ASSERT(fabs(sl_hist_quantile(&h, 1.0) - 8) < 1.0);
	sl_hist_record(&h, 0);    /* below the range */
	sl_hist_record(&h, 1e12); /* above it */
	sl_hist_record(&h, -1);   /* a clock that went backwards */
	ASSERT_EQ(h.count, 11);
	ASSERT_EQ(h.below, 2);
	ASSERT_EQ(h.above, 1);
}

/* _bucket lines are cumulative, end at +Inf with the count. */
static void test_histogram_exposition(void)
{
	struct sl_histogram h;
	sl_hist_init(&h, -17);
	for (int i = 0; i < 1000; i++)
		sl_hist_record(&h, 0.001 * (i % 37 + 1));
	sl_hist_record(&h, 1e9);
	struct sl_text t = {0};
	sl_expose_histogram(&t, "x_seconds", "a=\"b\"", &h);
	unsigned long long last = 0;
	int buckets = 0;
	char *save = NULL;
	for (char *line = strtok_r(t.data, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "x_seconds_bucket{a=\"b\",le=\"", 27) == 0) {
			unsigned long long n =
			    strtoull(strrchr(line, ' ') + 1, NULL, 10);
			ASSERT(n >= last);
			last = n;
			buckets++;
			if (strstr(line, "le=\"+Inf\""))
				ASSERT_EQ(n, 1001);
		} else if (strncmp(line, "x_seconds_count{a=\"b\"} ", 22) ==
		           0) {
			ASSERT_STR_EQ(line, "x_seconds_count{a=\"b\"} 1001");
		} else {
			ASSERT(strncmp(line, "x_seconds_sum{a=\"b\"} ", 20) ==
			       0);
		}
	}
	ASSERT_EQ(buckets, SL_HIST_OCTAVES * SL_HIST_EXPOSED_PER_OCTAVE + 1);
	ASSERT_EQ(last, 1001);
	sl_text_free(&t);
}

/* llama-server's families get an upstream label, grouped per family. */
static void test_relabelled_families(void)
{
	const char *a = "# HELP llamacpp:prompt_tokens_total Number of prompt "
	                "tokens processed.\n"
	                "# TYPE llamacpp:prompt_tokens_total counter\n"
	                "llamacpp:prompt_tokens_total 12\n"
	                "# HELP llamacpp:requests_processing Requests.\n"
	                "# TYPE llamacpp:requests_processing gauge\n"
	                "llamacpp:requests_processing{slot=\"0\"} 1\n";
	const char *b = "# HELP llamacpp:prompt_tokens_total Number of prompt "
	                "tokens processed.\n"
	                "# TYPE llamacpp:prompt_tokens_total counter\n"
	                "llamacpp:prompt_tokens_total 30\r\n"
	                "# TYPE llamacpp:n_tokens_max counter\n"
	                "llamacpp:n_tokens_max 58\n";
	struct sl_families *f = sl_families_new();
	sl_families_add(f, a, "http://127.0.0.1:1");
	sl_families_add(f, b, "http://h\"x:2");
	struct sl_text t = {0};
	sl_families_write(f, &t);
	ASSERT_STR_EQ(
	    t.data,
	    "# HELP llamacpp_prompt_tokens_total Number of prompt tokens "
	    "processed.\n"
	    "# TYPE llamacpp_prompt_tokens_total counter\n"
	    "llamacpp_prompt_tokens_total{upstream=\"http://127.0.0.1:1\"} 12\n"
	    "llamacpp_prompt_tokens_total{upstream=\"http://h\\\"x:2\"} 30\n"
	    "# HELP llamacpp_requests_processing Requests.\n"
	    "# TYPE llamacpp_requests_processing gauge\n"
	    "llamacpp_requests_processing{upstream=\"http://127.0.0.1:1\","
	    "slot=\"0\"} 1\n"
	    "# TYPE llamacpp_n_tokens_max_total counter\n"
	    "llamacpp_n_tokens_max_total{upstream=\"http://h\\\"x:2\"} 58\n");
	sl_text_free(&t);
	sl_families_free(f);
}

static void test_statm_parsing(void)
{
	uint64_t vsz = 1, rss = 1;
	ASSERT_EQ(sl_procstat_parse_statm("5228 2796 2386 34 0 303 0\n", 4096,
	                                  &vsz, &rss),
	          0);
	ASSERT_EQ(vsz, 5228ull * 4096);
	ASSERT_EQ(rss, 2796ull * 4096);
	/* Only the first two numbers matter, and nothing after them. */
	ASSERT_EQ(sl_procstat_parse_statm("7 3", 65536, &vsz, &rss), 0);
	ASSERT_EQ(vsz, 7 * 65536);
	ASSERT_EQ(rss, 3 * 65536);
	/* Refused, leaving the outputs alone: */
	static const char *const bad[] = {
	    "",                       /* empty */
	    "5228",                   /* one number */
	    "5228\n2796",             /* not space-separated */
	    "x 1",                    /* not a number */
	    "-1 2",                   /* negative */
	    "18446744073709551616 1", /* over 64 bits */
	    "4503599627370496 1",     /* fits, but not in bytes */
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad); i++) {
		vsz = rss = 42;
		if (sl_procstat_parse_statm(bad[i], 4096, &vsz, &rss) !=
		    SL_EINVAL)
			TEST_FAIL("statm \"%s\" was accepted", bad[i]);
		ASSERT_EQ(vsz, 42);
		ASSERT_EQ(rss, 42);
	}
	ASSERT_EQ(sl_procstat_parse_statm("1 1", 0, &vsz, &rss), SL_EINVAL);
}

/* Counts /proc/self/fd by hand, as a test from outside would. */
static int64_t fds_by_hand(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int64_t n = 0;
	const struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* less the listing's own */
}

static void test_open_fds_counted_exactly(void)
{
	int64_t before = sl_procstat_count_fds("/proc/self/fd");
	if (before == -ENOENT) {
		printf("  (no /proc/self/fd here: skipped)\n");
		return;
	}
	ASSERT(before >= 0);
	ASSERT_EQ(before, fds_by_hand());
	int p[2];
	ASSERT(pipe(p) == 0);
	ASSERT_EQ(sl_procstat_count_fds("/proc/self/fd"), before + 2);
	close(p[0]);
	close(p[1]);
	ASSERT_EQ(sl_procstat_count_fds("/proc/self/fd"), before);
	ASSERT(sl_procstat_count_fds("/nonexistent/fd") == -ENOENT);
}

static void test_process_read(void)
{
	double now = sl_procstat_wall_seconds();
	struct sl_procstat p;
	sl_procstat_read(&p);
	/* Taken as this test loaded, a moment ago. */
	ASSERT(p.start_time > 0 && p.start_time <= now);
	ASSERT(now - p.start_time < 60);
	ASSERT(p.has_cpu);
	ASSERT(p.cpu_seconds >= 0);
	ASSERT(p.has_max_fds);
	ASSERT(p.max_fds > 0);
	if (p.has_memory) {
		ASSERT(p.resident_bytes > 0);
		ASSERT(p.resident_bytes <= p.virtual_bytes);
	}
	if (p.has_open_fds)
		ASSERT(p.open_fds >= 1 && p.open_fds <= p.max_fds);
	/* CPU time only grows. */
	volatile double x = 0;
	for (int i = 0; i < 1000000; i++)
		x += sqrt((double)i);
	(void)x;
	struct sl_procstat later;
	sl_procstat_read(&later);
	ASSERT(later.cpu_seconds >= p.cpu_seconds);
	ASSERT(later.start_time == p.start_time);
}

static void test_process_exposition(void)
{
	struct sl_procstat p = {
	    .cpu_seconds = 1.25,
	    .start_time = 1700000000.5,
	    .virtual_bytes = 8192,
	    .resident_bytes = 4096,
	    .open_fds = 7,
	    .max_fds = 1024,
	    .has_cpu = true,
	    .has_memory = true,
	    .has_open_fds = true,
	    .has_max_fds = true,
	};
	struct sl_text t = {0};
	sl_procstat_expose(&p, &t);
	ASSERT_STR_EQ(
	    t.data,
	    "# HELP process_cpu_seconds_total Total user and system CPU time "
	    "spent in seconds.\n"
	    "# TYPE process_cpu_seconds_total counter\n"
	    "process_cpu_seconds_total 1.250000\n"
	    "# HELP process_open_fds Number of open file descriptors.\n"
	    "# TYPE process_open_fds gauge\n"
	    "process_open_fds 7\n"
	    "# HELP process_max_fds Maximum number of open file descriptors.\n"
	    "# TYPE process_max_fds gauge\n"
	    "process_max_fds 1024\n"
	    "# HELP process_virtual_memory_bytes Virtual memory size in "
	    "bytes.\n"
	    "# TYPE process_virtual_memory_bytes gauge\n"
	    "process_virtual_memory_bytes 8192\n"
	    "# HELP process_resident_memory_bytes Resident memory size in "
	    "bytes.\n"
	    "# TYPE process_resident_memory_bytes gauge\n"
	    "process_resident_memory_bytes 4096\n"
	    "# HELP process_start_time_seconds Start time of the process since "
	    "unix epoch in seconds.\n"
	    "# TYPE process_start_time_seconds gauge\n"
	    "process_start_time_seconds 1700000000.500000\n");
	sl_text_free(&t);

	/* Without /proc: memory and descriptors are left out, not zero. */
	p.has_memory = false;
	p.has_open_fds = false;
	struct sl_text none = {0};
	sl_procstat_expose(&p, &none);
	ASSERT(strstr(none.data, "process_cpu_seconds_total 1.25"));
	ASSERT(strstr(none.data, "process_max_fds 1024"));
	ASSERT(strstr(none.data, "process_start_time_seconds"));
	ASSERT(!strstr(none.data, "memory"));
	ASSERT(!strstr(none.data, "open_fds"));
	sl_text_free(&none);

	json_t *j = sl_procstat_json(&p);
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	ASSERT_STR_EQ(s, "{\"cpu_seconds\":1.25,\"max_fds\":1024,"
	                 "\"start_time_seconds\":1700000000}");
	free(s);
	json_decref(j);
}

static void test_build_info(void)
{
	struct sl_text t = {0};
	sl_procstat_expose_build_info(&t);
	ASSERT_CONTAINS(t.data, "# TYPE sluice_build_info gauge\n");
	char want[128];
	snprintf(want, sizeof(want), "sluice_build_info{version=\"%s\",",
	         SL_VERSION);
	ASSERT_CONTAINS(t.data, want);
	ASSERT_CONTAINS(t.data, "} 1\n");
	sl_text_free(&t);
}

/*
 * A count over the last minute: what was added in the slice now and the
 * 11 before it, nothing older; a long silence forgets everything.
 */
static void test_minute_window(void)
{
	struct sl_minute m;
	memset(&m, 0, sizeof(m));
	uint64_t t0 = 1000000; /* a slice's start */
	ASSERT_EQ(sl_minute_sum(&m, t0), 0);
	sl_minute_add(&m, 3, t0);
	sl_minute_add(&m, 4, t0 + SL_MINUTE_SLICE_MS - 1); /* same slice */
	sl_minute_add(&m, 5, t0 + 30000);
	ASSERT_EQ(sl_minute_sum(&m, t0 + 30000), 12);
	/* The first slice is still in the last minute at t0 + 59.999 s... */
	ASSERT_EQ(sl_minute_sum(&m, t0 + 59999), 12);
	/* ...and out of it from t0 + 60 s, read or written. */
	ASSERT_EQ(sl_minute_sum(&m, t0 + 60000), 5);
	sl_minute_add(&m, 1, t0 + 60000);
	ASSERT_EQ(sl_minute_sum(&m, t0 + 60000), 6);
	ASSERT_EQ(sl_minute_sum(&m, t0 + 90000), 1);
	/* Long after, a slot reused by the ring holds only the new count. */
	sl_minute_add(&m, 2, t0 + 3600000);
	ASSERT_EQ(sl_minute_sum(&m, t0 + 3600000), 2);
	ASSERT_EQ(sl_minute_sum(&m, t0 + 7200000), 0);
}

int main(void)
{
	RUN(test_quantiles_within_bound);
	RUN(test_minute_window);
	RUN(test_edges);
	RUN(test_histogram_exposition);
	RUN(test_relabelled_families);
	RUN(test_statm_parsing);
	RUN(test_open_fds_counted_exactly);
	RUN(test_process_read);
	RUN(test_process_exposition);
	RUN(test_build_info);
	return 0;
}

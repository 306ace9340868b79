/*
 * test_bench_slo.c: sluice-bench's SLOs (bench/harness/slo.c): specs and
 * their errors, SLO classes, the headers' milliseconds, refusal reasons
 * and the predictor's error, on constructed values.
 */
#include "../bench/bench_stats.h"
#include "../bench/harness/slo.h"

#include "test.h"

#include <math.h>

static struct slo spec(const char *s, char sep)
{
	struct slo o;
	char err[256];
	if (slo_parse(&o, s, sep, err, sizeof(err)) != 0)
		TEST_FAIL("%s: %s", s, err);
	return o;
}

static void bad_spec(const char *s, const char *want)
{
	struct slo o;
	char err[256] = "";
	ASSERT_EQ(slo_parse(&o, s, ',', err, sizeof(err)), -1);
	ASSERT_STR_EQ(err, want);
}

static void test_specs(void)
{
	struct slo s = spec("ttft=500ms,tpot=50,e2e=1.5s", ',');
	ASSERT(s.ttft_ms == 500 && s.tpot_ms == 50 && s.e2el_ms == 1500);
	ASSERT(slo_any(&s));
	s = spec("e2el=2s/ttft=0.25s", '/');
	ASSERT(s.ttft_ms == 250 && s.tpot_ms == 0 && s.e2el_ms == 2000);
	struct slo none = {0};
	ASSERT(!slo_any(&none));
	/* With '/' between pieces, a comma is no separator. */
	char err[256];
	ASSERT_EQ(slo_parse(&s, "ttft=1,tpot=2", '/', err, sizeof(err)), -1);
	ASSERT_STR_EQ(err, "ttft: expected milliseconds (500, 500ms or 0.5s), "
	                   "got \"1,tpot=2\"");

	/* Issue 41: nothing given is no SLO that every request meets. */
	bad_spec("", "empty; give one or more of ttft=MS, tpot=MS, e2el=MS");
	bad_spec(",", "\",\" has an empty piece");
	bad_spec("ttft=1,,tpot=2", "\"ttft=1,,tpot=2\" has an empty piece");
	bad_spec("ttft=1,", "\"ttft=1,\" has an empty piece");
	bad_spec(",ttft=1", "\",ttft=1\" has an empty piece");
	bad_spec("ttft=", "ttft: expected milliseconds (500, 500ms or 0.5s), "
	                  "got \"\"");
	bad_spec("ttft=5m", "ttft: expected milliseconds (500, 500ms or "
	                    "0.5s), got \"5m\"");
	bad_spec("tpot=-1", "tpot must be above 0, got \"-1\"");
	bad_spec("e2el=nan", "e2el must be above 0, got \"nan\"");
	bad_spec("ttft=86400001", "ttft must be at most 86400000 ms (a day), "
	                          "got \"86400001\"");
	bad_spec("p99=5", "expected ttft=, tpot= or e2el=, got \"p99=5\"");
	bad_spec("ttft", "expected ttft=, tpot= or e2el=, got \"ttft\"");
	bad_spec("ttft=500ms/tpot=5", "ttft: expected milliseconds (500, "
	                              "500ms or 0.5s), got \"500ms/tpot=5\"");
	ASSERT(spec("ttft=86400000", ',').ttft_ms == 86400000);
}

static void bad_mix(const char *s, const char *want)
{
	struct slo_class c[SLO_MAX_CLASSES];
	unsigned n = 99;
	char err[256] = "";
	ASSERT_EQ(slo_mix_parse(c, &n, s, err, sizeof(err)), -1);
	ASSERT_EQ(n, 0);
	ASSERT_STR_EQ(err, want);
}

static void test_mix(void)
{
	struct slo_class c[SLO_MAX_CLASSES];
	unsigned n;
	char err[256];
	ASSERT_EQ(slo_mix_parse(c, &n,
	                        "interactive:ttft=500ms/tpot=50ms:0.8,"
	                        "batch:ttft=30s:0.2",
	                        err, sizeof(err)),
	          0);
	ASSERT_EQ(n, 2);
	ASSERT_STR_EQ(c[0].name, "interactive");
	ASSERT(c[0].slo.ttft_ms == 500 && c[0].slo.tpot_ms == 50 &&
	       c[0].slo.e2el_ms == 0 && c[0].share == 0.8);
	ASSERT_STR_EQ(c[1].name, "batch");
	ASSERT(c[1].slo.ttft_ms == 30000 && c[1].share == 0.2);
	/* Draws by cumulative share: [0, 0.8) the first, the rest the
	 * second; the last takes what rounding leaves. */
	ASSERT_EQ(slo_class_draw(c, n, 0), 0);
	ASSERT_EQ(slo_class_draw(c, n, 0.7999), 0);
	ASSERT_EQ(slo_class_draw(c, n, 0.8), 1);
	ASSERT_EQ(slo_class_draw(c, n, 0.99999999), 1);
	ASSERT_EQ(slo_mix_parse(c, &n, "a.b-c_1:e2el=1s:1", err, sizeof(err)),
	          0);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(slo_class_draw(c, n, 0.5), 0);

	bad_mix("", "empty; give NAME:SLOS:SHARE,...");
	bad_mix("a:ttft=1:0.5,,b:ttft=2:0.5",
	        "\"a:ttft=1:0.5,,b:ttft=2:0.5\" has an empty piece");
	bad_mix("a:ttft=1:1,", "\"a:ttft=1:1,\" has an empty piece");
	bad_mix("a:ttft=1", "expected NAME:SLOS:SHARE, got \"a:ttft=1\"");
	bad_mix("a", "expected NAME:SLOS:SHARE, got \"a\"");
	bad_mix(":ttft=1:1", "class \"\": a name is 1 to 31 letters, digits, "
	                     "'_', '-' or '.'");
	bad_mix("a b:ttft=1:1", "class \"a b\": a name is 1 to 31 letters, "
	                        "digits, '_', '-' or '.'");
	bad_mix("a::1", "class a: empty; give one or more of ttft=MS, "
	                "tpot=MS, e2el=MS");
	bad_mix("a:ttft=1//tpot=2:1",
	        "class a: \"ttft=1//tpot=2\" has an empty piece");
	bad_mix("a:ttft=1:0", "class a: the share must be a number above 0 "
	                      "and at most 1, got \"0\"");
	bad_mix("a:ttft=1:x", "class a: the share must be a number above 0 "
	                      "and at most 1, got \"x\"");
	bad_mix("a:ttft=1:0.5,a:ttft=2:0.5", "class a given twice");
	bad_mix("a:ttft=1:0.5,b:ttft=2:0.4", "the shares add up to 0.9, not 1");
	bad_mix("a:ttft=1:0.1,b:ttft=1:0.1,c:ttft=1:0.1,d:ttft=1:0.1,"
	        "e:ttft=1:0.1,f:ttft=1:0.1,g:ttft=1:0.1,h:ttft=1:0.1,"
	        "i:ttft=1:0.2",
	        "at most 8 classes");
}

static void test_headers(void)
{
	ASSERT_EQ(slo_header_ms(500), 500);
	ASSERT_EQ(slo_header_ms(500.2), 501); /* never stricter than judged */
	ASSERT_EQ(slo_header_ms(0.3), 1);
	ASSERT_EQ(slo_header_ms(86400000), 86400000);
}

static void reason(const char *body, bool found, const char *want)
{
	char out[SLO_REASON_MAX];
	ASSERT_EQ(
	    slo_refusal_reason(body, body ? strlen(body) : 0, out, sizeof(out)),
	    found);
	ASSERT_STR_EQ(out, want);
}

static void test_reasons(void)
{
	reason("{\"error\":{\"code\":429,\"message\":\"x\",\"type\":"
	       "\"rate_limit_error\",\"reason\":\"slo_ttft\"}}",
	       true, "slo_ttft");
	reason("{\"error\":{\"code\":503,\"type\":\"unavailable_error\","
	       "\"reason\":\"slo_deadline\"}}",
	       true, "slo_deadline");
	/* Queue full: no reason. */
	reason("{\"error\":{\"code\":429,\"type\":\"rate_limit_error\"}}",
	       false, "");
	reason("{\"error\":{\"reason\":\"\"}}", false, "");
	reason("{\"error\":{\"reason\":7}}", false, "");
	reason("{\"reason\":\"slo_ttft\"}", false, "");
	reason("not JSON", false, "");
	reason("", false, "");
	reason(NULL, false, "");
	/* A long one is cut to fit. */
	reason("{\"error\":{\"reason\":\"slo_0123456789012345678901234567890"
	       "123456789\"}}",
	       true, "slo_012345678901234567890123456");
	ASSERT(slo_is_shed("slo_ttft"));
	ASSERT(slo_is_shed("slo_deadline"));
	ASSERT(!slo_is_shed("slo_"));
	ASSERT(!slo_is_shed("queue_full"));
	ASSERT(!slo_is_shed(""));
}

/* The predictor's error: |predicted - actual| / actual, its median and
 * p90 nearest-rank, as results.c reports them. */
static void test_predictor_error(void)
{
	ASSERT(slo_relative_error(120, 100) == 0.2);
	ASSERT(slo_relative_error(50, 100) == -0.5);
	ASSERT(slo_relative_error(0, 100) == -1);
	ASSERT(slo_relative_error(100, 100) == 0);
	ASSERT(isnan(slo_relative_error(NAN, 100)));
	ASSERT(isnan(slo_relative_error(100, NAN)));
	ASSERT(isnan(slo_relative_error(100, 0)));
	ASSERT(isnan(slo_relative_error(-1, 100)));

	/* Ten requests: predicted against actual TTFT in ms. */
	static const double pairs[][2] = {
	    {100, 100}, {110, 100}, {90, 100},  {150, 100}, {40, 80},
	    {300, 200}, {200, 400}, {105, 100}, {99, 100},  {1000, 250},
	};
	struct bs_samples err = {0}, signed_err = {0};
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		double e = slo_relative_error(pairs[i][0], pairs[i][1]);
		bs_add(&signed_err, e);
		bs_add(&err, fabs(e));
	}
	/* Sorted errors: 0 .01 .05 .1 .1 .5 .5 .5 .5 3: the 5th and the
	 * 9th of ten. */
	ASSERT(fabs(bs_percentile(&err, 50) - 0.1) < 1e-12);
	ASSERT(fabs(bs_percentile(&err, 90) - 0.5) < 1e-12);
	/* Signed: -.5 -.5 -.1 -.01 0 .05 .1 .5 .5 3: the median is 0. */
	ASSERT(bs_percentile(&signed_err, 50) == 0);
	bs_free(&err);
	bs_free(&signed_err);
}

int main(void)
{
	RUN(test_specs);
	RUN(test_mix);
	RUN(test_headers);
	RUN(test_reasons);
	RUN(test_predictor_error);
	return 0;
}

/*
 * test_sse.c: SSE framing holds event boundaries however the bytes are split
 * or merged across reads.
 */
#include "sluice/net/sse.h"

#include "sluice/base/common.h"
#include "test.h"

#define MAX_EVENTS 16

struct events {
	char *ev[MAX_EVENTS];
	size_t n;
};

static int collect(const char *data, size_t len, void *arg)
{
	struct events *e = arg;
	ASSERT(e->n < MAX_EVENTS);
	e->ev[e->n] = sl_xmalloc(len + 1);
	memcpy(e->ev[e->n], data, len);
	e->ev[e->n][len] = '\0';
	e->n++;
	return 0;
}

static void events_free(struct events *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->ev[i]);
	e->n = 0;
}

/* Feeds `stream` in pieces cut at the given offsets (sorted, may repeat). */
static void feed_split(const char *stream, const size_t *cuts, size_t n_cuts,
                       struct events *out)
{
	struct sl_sse s;
	sl_sse_init(&s, SL_SSE_MAX_EVENT);
	size_t len = strlen(stream), at = 0;
	for (size_t k = 0; k <= n_cuts; k++) {
		size_t to = k < n_cuts ? cuts[k] : len;
		ASSERT_EQ(sl_sse_feed(&s, stream + at, to - at, collect, out),
		          0);
		at = to;
	}
	ASSERT_EQ(sl_sse_finish(&s, collect, out), 0);
	ASSERT_EQ(sl_sse_pending(&s), 0);
	sl_sse_free(&s);
}

static void expect_events(const struct events *got, const char *const *want,
                          const char *what)
{
	size_t n = 0;
	while (want[n])
		n++;
	if (got->n != n)
		TEST_FAIL("%s: %zu events, expected %zu", what, got->n, n);
	for (size_t i = 0; i < n; i++)
		if (strcmp(got->ev[i], want[i]) != 0)
			TEST_FAIL("%s: event %zu is \"%s\", expected \"%s\"",
			          what, i, got->ev[i], want[i]);
}

/* Every single cut and every pair of cuts gives exactly `want`. */
static void check_all_splits(const char *stream, const char *const *want)
{
	size_t len = strlen(stream);
	struct events got = {0};
	char what[64];

	feed_split(stream, NULL, 0, &got);
	expect_events(&got, want, "whole");
	events_free(&got);

	for (size_t a = 0; a <= len; a++) {
		for (size_t b = a; b <= len; b++) {
			size_t cuts[2] = {a, b};
			feed_split(stream, cuts, 2, &got);
			snprintf(what, sizeof(what), "cuts at %zu and %zu", a,
			         b);
			expect_events(&got, want, what);
			events_free(&got);
		}
	}
	/* And one byte at a time. */
	size_t *cuts = sl_xcalloc(len + 1, sizeof(*cuts));
	for (size_t i = 0; i < len; i++)
		cuts[i] = i + 1;
	feed_split(stream, cuts, len, &got);
	expect_events(&got, want, "byte by byte");
	events_free(&got);
	free(cuts);
}

#define EVENTS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_lf(void)
{
	check_all_splits(
	    "data: {\"content\":\"a\"}\n\ndata: {\"content\":\"b\"}\n\n"
	    "data: [DONE]\n\n",
	    EVENTS("data: {\"content\":\"a\"}\n\n",
	           "data: {\"content\":\"b\"}\n\n", "data: [DONE]\n\n"));
}

static void test_crlf(void)
{
	check_all_splits("data: one\r\n\r\ndata: two\r\n\r\n",
	                 EVENTS("data: one\r\n\r\n", "data: two\r\n\r\n"));
}

static void test_cr_and_mixed(void)
{
	check_all_splits(
	    "data: one\r\rdata: two\n\r\ndata: 3\r\n\n",
	    EVENTS("data: one\r\r", "data: two\n\r\n", "data: 3\r\n\n"));
	/* A final CR-terminated event is kept until the stream ends. */
	check_all_splits("data: last\r\r", EVENTS("data: last\r\r"));
}

static void test_comments_pings_and_fields(void)
{
	check_all_splits(": ping\n\nevent: message\nid: 7\ndata: a\ndata: b\n\n"
	                 ":keep-alive\r\n\r\n",
	                 EVENTS(": ping\n\n",
	                        "event: message\nid: 7\ndata: a\ndata: b\n\n",
	                        ":keep-alive\r\n\r\n"));
}

static void test_stray_blank_lines_and_partial_tail(void)
{
	/* Blank lines between events carry nothing and are dropped. */
	struct events got = {0};
	feed_split("\n\ndata: x\n\n\n\n", NULL, 0, &got);
	expect_events(&got, EVENTS("data: x\n\n"), "stray blank lines");
	events_free(&got);

	/* An unfinished event is held back, never reported. */
	struct sl_sse s;
	sl_sse_init(&s, 1024);
	ASSERT_EQ(
	    sl_sse_feed(&s, "data: a\n\ndata: unfinis", 22, collect, &got), 0);
	ASSERT_EQ(got.n, 1);
	ASSERT_EQ(sl_sse_pending(&s), 13);
	ASSERT_EQ(sl_sse_finish(&s, collect, &got), 0);
	ASSERT_EQ(got.n, 1);
	sl_sse_free(&s);
	events_free(&got);
}

static int stop_after_first(const char *data, size_t len, void *arg)
{
	(void)data;
	(void)len;
	++*(int *)arg;
	return 42;
}

static void test_limits_and_stopping(void)
{
	struct sl_sse s;
	struct events got = {0};
	sl_sse_init(&s, 16);
	ASSERT_EQ(sl_sse_feed(&s, "data: 0123456789", 16, collect, &got), 0);
	ASSERT_EQ(sl_sse_feed(&s, "x", 1, collect, &got), SL_ETOOBIG);
	sl_sse_free(&s);

	int calls = 0;
	sl_sse_init(&s, 1024);
	ASSERT_EQ(sl_sse_feed(&s, "data: a\n\ndata: b\n\n", 18,
	                      stop_after_first, &calls),
	          42);
	ASSERT_EQ(calls, 1);
	sl_sse_free(&s);
}

static void test_event_data(void)
{
	char buf[64];
	const char *ev = "event: x\ndata: [DONE]\n\n";
	ASSERT_EQ(sl_sse_event_data(ev, strlen(ev), buf, sizeof(buf)), 6);
	ASSERT_STR_EQ(buf, "[DONE]");
	ev = "data:a\r\ndata: b\r\n\r\n";
	ASSERT_EQ(sl_sse_event_data(ev, strlen(ev), buf, sizeof(buf)), 3);
	ASSERT_STR_EQ(buf, "a\nb");
	ev = ": ping\n\n";
	ASSERT_EQ(sl_sse_event_data(ev, strlen(ev), buf, sizeof(buf)), -1);
	ev = "data: 0123456789\n\n";
	ASSERT_EQ(sl_sse_event_data(ev, strlen(ev), buf, 5), 10);
	ASSERT_STR_EQ(buf, "0123");
}

int main(void)
{
	RUN(test_lf);
	RUN(test_crlf);
	RUN(test_cr_and_mixed);
	RUN(test_comments_pings_and_fields);
	RUN(test_stray_blank_lines_and_partial_tail);
	RUN(test_limits_and_stopping);
	RUN(test_event_data);
	return 0;
}

/*
 * Unit tests for common.c's helpers for the request path: text joined into
 * fixed buffers (cut at their end, never past it) and the part of a write
 * that uv_try_write() left, copied for a write of its own, and the span of
 * printable bytes that header checks skip eight at a time; and URLs as
 * sluice shows them, their credentials masked.
 */
#include "sluice/base/common.h"

#include "test.h"

static void test_join(void)
{
	char buf[32];
	struct sl_join j = SL_JOIN(buf);
	sl_join_str(&j, "X-Queue-Ms: ");
	sl_join_u64(&j, 0);
	sl_join_str(&j, ", ");
	sl_join_u64(&j, 18446744073709551615u);
	ASSERT_STR_EQ(buf, "X-Queue-Ms: 0, 1844674407370955");
	ASSERT_EQ(j.len, sizeof(buf) - 1);
	/* Full: more is dropped, and the text stays terminated. */
	sl_join_str(&j, "more");
	sl_join_mem(&j, "x", 1);
	ASSERT_EQ(j.len, sizeof(buf) - 1);
	ASSERT_EQ(strlen(buf), sizeof(buf) - 1);
	/* Joining on after text already there. */
	char small[8] = "ab";
	struct sl_join k = {.p = small, .len = 2, .cap = sizeof(small)};
	sl_join_u64(&k, 12345);
	ASSERT_STR_EQ(small, "ab12345");
	sl_join_str(&k, "6");
	ASSERT_STR_EQ(small, "ab12345");
}

static void test_copy_tail(void)
{
	const uv_buf_t bufs[] = {uv_buf_init("head", 4), uv_buf_init("", 0),
	                         uv_buf_init("body", 4), uv_buf_init("!", 1)};
	const char *all = "headbody!";
	/* Every point a write may have stopped at. */
	for (size_t skip = 0; skip <= 9; skip++) {
		char out[16];
		memset(out, '#', sizeof(out));
		sl_bufs_copy_tail(out, bufs, SL_ARRAY_SIZE(bufs), skip);
		ASSERT(memcmp(out, all + skip, 9 - skip) == 0);
		/* Nothing written past what was left. */
		ASSERT_EQ(out[9 - skip], '#');
	}
}

/* The span a byte-at-a-time loop finds. */
static size_t printable_span_slowly(const char *p, size_t n)
{
	size_t i = 0;
	while (i < n && (unsigned char)p[i] >= 0x20 &&
	       (unsigned char)p[i] != 0x7f && (unsigned char)p[i] < 0x80)
		i++;
	return i;
}

/*
 * Every byte value, at every place in runs of every length up to three
 * words: a byte's neighbours must never change what it is taken for
 * (no carry or borrow crosses from one byte into the next).
 */
static void test_printable_span(void)
{
	char buf[24];
	for (size_t len = 0; len <= sizeof(buf); len++)
		for (size_t at = 0; at < SL_MAX(len, (size_t)1); at++)
			for (int b = 0; b < 256; b++) {
				/* Neighbours at the edges of the range. */
				memset(buf, (b & 1) ? 0x7e : 0x20, sizeof(buf));
				if (at < len)
					buf[at] = (char)b;
				ASSERT_EQ(sl_printable_span(buf, len),
				          printable_span_slowly(buf, len));
			}
	/* Only what n allows is read: a control byte after it is unseen. */
	memcpy(buf, "abcdefgh\x01", 9);
	ASSERT_EQ(sl_printable_span(buf, 8), 8);
	ASSERT_EQ(sl_printable_span(buf, 9), 8);
	ASSERT_EQ(sl_printable_span("GET / HTTP/1.1\r\n", 16), 14);
}

static void url_shown_is(const char *url, const char *want)
{
	char *got = sl_url_shown(url);
	ASSERT_STR_EQ(got, want);
	free(got);
}

static void test_url_shown(void)
{
	url_shown_is("http://10.0.0.5:8080", "http://10.0.0.5:8080");
	url_shown_is("https://h/v1/x", "https://h/v1/x");
	url_shown_is("http://[::1]:8080", "http://[::1]:8080");
	url_shown_is("http://user:pass@host:8080", "http://user:***@host:8080");
	url_shown_is("https://user:p%40ss@h/base", "https://user:***@h/base");
	url_shown_is("http://user:@host", "http://user:***@host");
	/* A user alone is often a token: none of it shows. */
	url_shown_is("http://sk-token@host", "http://***@host");
	url_shown_is("http://@host", "http://***@host");
	/* What no parser takes is hidden all the same when quoted back. */
	url_shown_is("http://user:pa/ss@host", "http://user:***@host");
	url_shown_is("http://user:p@ss@host", "http://user:***@host");
	url_shown_is("user:pass@host:80", "user:***@host:80");
	url_shown_is("", "");
}

int main(void)
{
	RUN(test_join);
	RUN(test_copy_tail);
	RUN(test_printable_span);
	RUN(test_url_shown);
	return 0;
}

/*
 * Unit tests for common.c's helpers for the request path: text joined into
 * fixed buffers (cut at their end, never past it) and the part of a write
 * that uv_try_write() left, copied for a write of its own.
 */
#include "sluice/common.h"

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

int main(void)
{
	RUN(test_join);
	RUN(test_copy_tail);
	return 0;
}

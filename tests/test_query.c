/*
 * Unit tests for query.c: parameters read as llama-server 0.7.0 reads them
 * (measured against it with POST /slots/0?... and DELETE /models?model=...
 * in router mode): names and values percent-decoded, '+' a space, "%uXXXX"
 * left as it is, the last of a repeated name counting.
 */
#include "sluice/net/query.h"

#include <stdlib.h>

#include "test.h"

static void test_decode(void)
{
	char out[32];
	ASSERT_EQ(sl_query_decode("ti%6Ey", 6, out, sizeof(out)), 4);
	ASSERT_STR_EQ(out, "tiny");
	/* Either case of hex digits; '+' is a space, "%2B" a plus. */
	ASSERT_EQ(sl_query_decode("a+b%2b%2Bc", 10, out, sizeof(out)), 6);
	ASSERT_STR_EQ(out, "a b++c");
	/* A '%' without two hex digits stays; so does 0.7.0's "%u0061". */
	sl_query_decode("100%", 4, out, sizeof(out));
	ASSERT_STR_EQ(out, "100%");
	sl_query_decode("%4", 2, out, sizeof(out));
	ASSERT_STR_EQ(out, "%4");
	sl_query_decode("%zz%u0061", 9, out, sizeof(out));
	ASSERT_STR_EQ(out, "%zz%u0061");
	/* Only n bytes are read: "%41" cut after "%4" is not "A". */
	sl_query_decode("%41", 2, out, sizeof(out));
	ASSERT_STR_EQ(out, "%4");
	/* A NUL inside shows in the length. */
	ASSERT_EQ(sl_query_decode("a%00b", 5, out, sizeof(out)), 3);
	ASSERT_EQ(strlen(out), 1);
	/* Cut at the buffer, still terminated, the whole length returned. */
	char small[4];
	ASSERT_EQ(sl_query_decode("abcdef", 6, small, sizeof(small)), 6);
	ASSERT_STR_EQ(small, "abc");
}

static void test_get(void)
{
	char v[32];
	struct sl_query_param p = sl_query_get("a=1&model=x", "model", v, 32);
	ASSERT(p.found && !p.nul && !p.cut);
	ASSERT_STR_EQ(v, "x");
	/* The name is decoded before it is compared, as llama-server does. */
	p = sl_query_get("%6Dod%65l=tiny", "model", v, sizeof(v));
	ASSERT(p.found);
	ASSERT_STR_EQ(v, "tiny");
	/* The last one counts, however it is spelled. */
	p = sl_query_get("model=a&mode%6C=b&x=1", "model", v, sizeof(v));
	ASSERT_STR_EQ(v, "b");
	p = sl_query_get("model=ti+ny", "model", v, sizeof(v));
	ASSERT_STR_EQ(v, "ti ny");
	/* A bare name is there, with an empty value. */
	p = sl_query_get("model", "model", v, sizeof(v));
	ASSERT(p.found);
	ASSERT_STR_EQ(v, "");
	/* Other names: "models", "mo+del" ("mo del"), "%u006Dodel". */
	p = sl_query_get("models=1&mo+del=2&%u006Dodel=3&=4&&", "model", v,
	                 sizeof(v));
	ASSERT(!p.found);
	ASSERT_STR_EQ(v, "");
	/* "model%00" is not "model"; a value with a NUL names nothing. */
	p = sl_query_get("model%00=x", "model", v, sizeof(v));
	ASSERT(!p.found);
	p = sl_query_get("model=tiny%00x", "model", v, sizeof(v));
	ASSERT(p.found && p.nul && !p.cut);
	/* Longer than the buffer: cut, and said to be. */
	char small[4];
	p = sl_query_get("model=abcdef", "model", small, sizeof(small));
	ASSERT(p.found && p.cut && !p.nul);
	ASSERT_STR_EQ(small, "abc");
	p = sl_query_get("", "model", v, sizeof(v));
	ASSERT(!p.found);
}

static void test_take(void)
{
	char v[32];
	char *rest = NULL;
	struct sl_query_param p =
	    sl_query_take("a=1&upstream=u1&b=%41&up%73tream=u2&c", "upstream",
	                  v, sizeof(v), &rest);
	ASSERT(p.found);
	ASSERT_STR_EQ(v, "u2");
	/* The others stay as they were written, in order. */
	ASSERT_STR_EQ(rest, "a=1&b=%41&c");
	free(rest);
	p = sl_query_take("upstream=x", "upstream", v, sizeof(v), &rest);
	ASSERT(p.found);
	ASSERT_STR_EQ(rest, "");
	free(rest);
	p = sl_query_take("fail_on_no_slot=1", "upstream", v, sizeof(v), &rest);
	ASSERT(!p.found);
	ASSERT_STR_EQ(rest, "fail_on_no_slot=1");
	free(rest);
}

int main(void)
{
	RUN(test_decode);
	RUN(test_get);
	RUN(test_take);
	return 0;
}

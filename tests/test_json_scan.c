/* Unit tests for json_scan.c: tokens, walks and extents over JSON text. */
#include "sluice/json/json_scan.h"

#include "sluice/base/common.h"

#include "test.h"

#include <limits.h>

/* A generous token limit for texts that are not about the limit. */
#define ANY_TOKENS 100000u

/* Scans `text` (its strlen); returns sl_jscan_parse's code. */
static int scan(struct sl_jscan *s, const char *text)
{
	return sl_jscan_parse(s, text, strlen(text), ANY_TOKENS);
}

/* Whether `text` is refused; the scan is freed either way. */
static bool refused(const char *text, size_t len, unsigned max_tokens)
{
	struct sl_jscan s;
	int rc = sl_jscan_parse(&s, text, len, max_tokens);
	sl_jscan_free(&s);
	ASSERT(rc == 0 || rc == SL_EINVAL);
	return rc != 0;
}

/* Token i's extent as a new string, for comparing. */
static const char *extent_of(const struct sl_jscan *s, int i)
{
	static char buf[256];
	size_t start, end;
	sl_jscan_extent(s, i, &start, &end);
	ASSERT(end >= start && end - start < sizeof(buf));
	memcpy(buf, s->text + start, end - start);
	buf[end - start] = '\0';
	return buf;
}

static void test_objects_and_arrays(void)
{
	struct sl_jscan s;
	ASSERT_EQ(scan(&s, " {\"a\": [1, true, null], \"b\" : {}} "), 0);
	/* object, "a", array, 1, true, null, "b", object */
	ASSERT_EQ(s.n, 8);
	ASSERT_EQ(sl_jscan_type(&s, 0), JSMN_OBJECT);
	ASSERT_EQ(s.tok[0].size, 2);
	ASSERT_EQ(sl_jscan_type(&s, 1), JSMN_STRING);
	ASSERT(sl_jscan_is(&s, 1, "a"));
	ASSERT_EQ(sl_jscan_type(&s, 2), JSMN_ARRAY);
	ASSERT_EQ(s.tok[2].size, 3);
	ASSERT(sl_jscan_is(&s, 3, "1"));
	ASSERT(sl_jscan_is(&s, 4, "true"));
	ASSERT(sl_jscan_is(&s, 5, "null"));
	ASSERT_STR_EQ(extent_of(&s, 0), "{\"a\": [1, true, null], \"b\" : {}}");
	ASSERT_STR_EQ(extent_of(&s, 2), "[1, true, null]");
	ASSERT_STR_EQ(extent_of(&s, 7), "{}");
	sl_jscan_free(&s);

	ASSERT_EQ(scan(&s, "[]"), 0);
	ASSERT_EQ(s.n, 1);
	ASSERT_EQ(sl_jscan_type(&s, 0), JSMN_ARRAY);
	sl_jscan_free(&s);
}

static void test_strings_with_escapes(void)
{
	struct sl_jscan s;
	/* An escaped quote does not end the string; the text stays escaped. */
	ASSERT_EQ(scan(&s, "{\"k\\\"ey\":\"a\\\\\\\"b\\u00e9\\n\"}"), 0);
	ASSERT_EQ(s.n, 3);
	ASSERT(sl_jscan_is(&s, 1, "k\\\"ey"));
	ASSERT(sl_jscan_is(&s, 2, "a\\\\\\\"b\\u00e9\\n"));
	/* A string's text excludes its quotes; its extent includes them. */
	ASSERT_EQ(sl_jscan_len(&s, 2), strlen("a\\\\\\\"b\\u00e9\\n"));
	ASSERT_STR_EQ(extent_of(&s, 2), "\"a\\\\\\\"b\\u00e9\\n\"");
	ASSERT_STR_EQ(extent_of(&s, 1), "\"k\\\"ey\"");
	sl_jscan_free(&s);

	ASSERT_EQ(scan(&s, "[\"\"]"), 0);
	ASSERT_EQ(sl_jscan_len(&s, 1), 0);
	ASSERT_STR_EQ(extent_of(&s, 1), "\"\"");
	sl_jscan_free(&s);

	/* A whole document that is one string, with spaces around it. */
	ASSERT_EQ(scan(&s, " \"x y\" "), 0);
	ASSERT_EQ(s.n, 1);
	ASSERT(sl_jscan_is(&s, 0, "x y"));
	ASSERT_STR_EQ(extent_of(&s, 0), "\"x y\"");
	sl_jscan_free(&s);

	ASSERT(refused("\"a\\qb\"", 6, ANY_TOKENS));   /* unknown escape */
	ASSERT(refused("\"\\u12G4\"", 8, ANY_TOKENS)); /* not hex */
	ASSERT(refused("\"open", 5, ANY_TOKENS));
}

static void test_top_level_primitives(void)
{
	/* jsmn's strict mode wants a delimiter after a primitive. */
	struct sl_jscan s;
	ASSERT_EQ(scan(&s, "5"), 0);
	ASSERT_EQ(s.n, 1);
	ASSERT_EQ(sl_jscan_type(&s, 0), JSMN_PRIMITIVE);
	ASSERT(sl_jscan_is(&s, 0, "5"));
	sl_jscan_free(&s);
	ASSERT_EQ(scan(&s, " true\n"), 0);
	ASSERT(sl_jscan_is(&s, 0, "true"));
	ASSERT_STR_EQ(extent_of(&s, 0), "true");
	sl_jscan_free(&s);
	ASSERT(refused("5 6", 3, ANY_TOKENS));
	ASSERT(refused("5]", 2, ANY_TOKENS));
	ASSERT(refused("tr\x01ue", 5, ANY_TOKENS));
}

static void test_skip_over_nested_containers(void)
{
	struct sl_jscan s;
	const char *text =
	    "{\"a\":{\"b\":[1,[2,{\"c\":\"}]\"}],3]},\"d\":\"\",\"e\":[]}";
	ASSERT_EQ(scan(&s, text), 0);
	/* "a"'s value holds everything up to "d". */
	int d = sl_jscan_skip(&s, 2);
	ASSERT(sl_jscan_is(&s, d, "d"));
	/* An empty string value, then an empty array. */
	int e = sl_jscan_skip(&s, d + 1);
	ASSERT(sl_jscan_is(&s, e, "e"));
	ASSERT_EQ(sl_jscan_skip(&s, e + 1), s.n);
	ASSERT_EQ(sl_jscan_skip(&s, 0), s.n);
	/* A key's skip covers the key only: its value is its child. */
	ASSERT_EQ(sl_jscan_skip(&s, 1), 2);
	sl_jscan_free(&s);
}

static void test_get(void)
{
	struct sl_jscan s;
	const char *text =
	    "{\"x\":{\"y\":1},\"stream\":false,\"s\":\"v\",\"n\":null}";
	ASSERT_EQ(scan(&s, text), 0);
	int v = sl_jscan_get(&s, 0, "stream");
	ASSERT(v > 0 && sl_jscan_is(&s, v, "false"));
	v = sl_jscan_get(&s, 0, "s");
	ASSERT(v > 0 && sl_jscan_is(&s, v, "v"));
	v = sl_jscan_get(&s, 0, "n");
	ASSERT(v > 0 && sl_jscan_is(&s, v, "null"));
	/* Nested keys are not the object's own. */
	ASSERT_EQ(sl_jscan_get(&s, 0, "y"), -1);
	int x = sl_jscan_get(&s, 0, "x");
	v = sl_jscan_get(&s, x, "y");
	ASSERT(v > 0 && sl_jscan_is(&s, v, "1"));
	/* Absent, a value's text used as a key, not an object, bad index. */
	ASSERT_EQ(sl_jscan_get(&s, 0, "absent"), -1);
	ASSERT_EQ(sl_jscan_get(&s, 0, "v"), -1);
	ASSERT_EQ(sl_jscan_get(&s, 0, "strea"), -1);
	ASSERT_EQ(sl_jscan_get(&s, 2, "stream"), -1);
	ASSERT_EQ(sl_jscan_get(&s, -1, "x"), -1);
	ASSERT_EQ(sl_jscan_get(&s, s.n, "x"), -1);
	sl_jscan_free(&s);

	/* Keys compare as written: no unescaping. */
	ASSERT_EQ(scan(&s, "{\"str\\u0065am\":true}"), 0);
	ASSERT_EQ(sl_jscan_get(&s, 0, "stream"), -1);
	ASSERT_EQ(sl_jscan_get(&s, 0, "str\\u0065am"), 2);
	sl_jscan_free(&s);

	/*
	 * jsmn takes a key without a value; get must not hand back the
	 * next key as its value.
	 */
	ASSERT_EQ(scan(&s, "{\"a\",\"b\":1}"), 0);
	ASSERT_EQ(sl_jscan_get(&s, 0, "a"), -1);
	sl_jscan_free(&s);

	/*
	 * Found by fuzz_assemble: a walk over members by count ({"a"} counts
	 * one key but has no value) skips from the token past the last one;
	 * skip must stay at the end rather than read past the tokens.
	 */
	ASSERT_EQ(scan(&s, "{\"a\"}"), 0);
	ASSERT_EQ(s.n, 2);
	ASSERT_EQ(sl_jscan_skip(&s, 2), 2);
	sl_jscan_free(&s);
}

static void test_trailing_text_is_refused(void)
{
	ASSERT(refused("{} x", 4, ANY_TOKENS));
	ASSERT(refused("{}{}", 4, ANY_TOKENS));
	ASSERT(refused("\"a\"\"b\"", 6, ANY_TOKENS));
	ASSERT(refused("[1]]", 4, ANY_TOKENS));
	ASSERT(!refused("{} \t\r\n", 6, ANY_TOKENS));
	/* jsmn stops at a NUL as if the text ended: what follows counts. */
	ASSERT(refused("{}\0", 3, ANY_TOKENS));
	ASSERT(refused("{}\0{}", 5, ANY_TOKENS));
	ASSERT(refused("[1]\0 ", 5, ANY_TOKENS));
	/* Nothing, whitespace only, cut short, unbalanced, bare words. */
	ASSERT(refused("", 0, ANY_TOKENS));
	ASSERT(refused("  ", 2, ANY_TOKENS));
	ASSERT(refused("{\"a\":1", 6, ANY_TOKENS));
	ASSERT(refused("[1,2", 4, ANY_TOKENS));
	ASSERT(refused("[1}", 3, ANY_TOKENS));
	ASSERT(refused("{\"a\":x}", 7, ANY_TOKENS));
	ASSERT(refused("{1 :2}", 5, ANY_TOKENS));
	/* len is honoured: what lies beyond it is not read. */
	ASSERT(!refused("{}garbage", 2, ANY_TOKENS));
}

static void test_token_limit(void)
{
	/* [1,2] is 3 tokens. */
	ASSERT(!refused("[1,2]", 5, 3));
	ASSERT(refused("[1,2]", 5, 2));
	ASSERT(refused("5", 1, 0));
	/* Past the inline array too: n elements are n + 1 tokens. */
	enum { elements = SL_JSCAN_INLINE + 36 };
	char text[2 * elements + 2] = "[";
	for (int i = 0; i < elements; i++)
		strcat(text, i ? ",0" : "0");
	strcat(text, "]");
	ASSERT(!refused(text, strlen(text), elements + 1));
	ASSERT(refused(text, strlen(text), elements));
	ASSERT(refused(text, strlen(text), SL_JSCAN_INLINE));
	ASSERT(!refused(text, strlen(text), SL_JSCAN_INLINE * 4));
	/* Texts beyond jsmn's int offsets are refused, not misread. */
	ASSERT(refused(text, (size_t)INT_MAX + 1, ANY_TOKENS));
}

/* Numbers as llama-server writes its timings; anything else is none. */
static void test_numbers(void)
{
	struct sl_jscan s;
	ASSERT_EQ(scan(&s, "[0.166, -2, 1e3, 12048.192771084337, true, null, "
	                   "\"1\", 1e400]"),
	          0);
	double v = -1;
	ASSERT(sl_jscan_number(&s, 1, &v) && v == 0.166);
	ASSERT(sl_jscan_number(&s, 2, &v) && v == -2);
	ASSERT(sl_jscan_number(&s, 3, &v) && v == 1000);
	ASSERT(sl_jscan_number(&s, 4, &v) && v > 12048.19 && v < 12048.2);
	v = 7;
	ASSERT(!sl_jscan_number(&s, 5, &v));  /* true */
	ASSERT(!sl_jscan_number(&s, 6, &v));  /* null */
	ASSERT(!sl_jscan_number(&s, 7, &v));  /* a string */
	ASSERT(!sl_jscan_number(&s, 8, &v));  /* not finite */
	ASSERT(!sl_jscan_number(&s, -1, &v)); /* no token */
	ASSERT(v == 7);
	sl_jscan_free(&s);
	/* Longer than any number written: not read, however valid. */
	char text[SL_JSCAN_NUMBER_MAX + 8];
	memset(text, '1', SL_JSCAN_NUMBER_MAX + 1);
	text[SL_JSCAN_NUMBER_MAX + 1] = '\0';
	ASSERT_EQ(scan(&s, text), 0);
	ASSERT(!sl_jscan_number(&s, 0, &v));
	sl_jscan_free(&s);
}

static void test_heap_path(void)
{
	/* Enough tokens to grow the array several times over. */
	enum { members = 1000 };
	size_t cap = members * 24 + 16;
	char *text = malloc(cap);
	ASSERT(text);
	size_t len = 0;
	text[len++] = '{';
	for (int i = 0; i < members; i++)
		len += (size_t)snprintf(text + len, cap - len, "%s\"k%d\":[%d]",
		                        i ? "," : "", i, i);
	text[len++] = '}';
	struct sl_jscan s;
	ASSERT_EQ(sl_jscan_parse(&s, text, len, ANY_TOKENS), 0);
	/* object + per member: key, array, number */
	ASSERT_EQ(s.n, 1 + 3 * members);
	ASSERT(s.tok != s.inline_tok);
	int v = sl_jscan_get(&s, 0, "k999");
	ASSERT(v > 0);
	ASSERT_STR_EQ(extent_of(&s, v), "[999]");
	v = sl_jscan_get(&s, 0, "k0");
	ASSERT_STR_EQ(extent_of(&s, v), "[0]");
	ASSERT_EQ(sl_jscan_skip(&s, 0), s.n);
	sl_jscan_free(&s);
	ASSERT(s.tok == s.inline_tok && s.n == 0);
	/* One token fewer than needed: refused, and freed all the same. */
	ASSERT(refused(text, len, 3 * members));
	/* An error past the inline array, after it has grown. */
	text[len - 1] = ']';
	ASSERT(refused(text, len, ANY_TOKENS));
	free(text);
}

/*
 * Parent links are on: each token names its container (json_scan.h says
 * why: without them jsmn walks back over every earlier token at each
 * closing bracket, and a crafted body of many flat members costs seconds).
 * The flat shape that made it quadratic is parsed and walked here too.
 */
static void test_parent_links(void)
{
	const char *text = "{\"a\":[1,{\"b\":2}],\"c\":3}";
	struct sl_jscan s;
	ASSERT_EQ(sl_jscan_parse(&s, text, strlen(text), ANY_TOKENS), 0);
	/* { "a" [ 1 { "b" 2 } ] "c" 3 }: indexes 0..8 */
	static const int parent[] = {-1, 0, 1, 2, 2, 4, 5, 0, 7};
	ASSERT_EQ(s.n, (int)(sizeof(parent) / sizeof(parent[0])));
	for (int i = 0; i < s.n; i++)
		ASSERT_EQ(s.tok[i].parent, parent[i]);
	sl_jscan_free(&s);

	enum { MEMBERS = 100000 };
	size_t cap = 16 * MEMBERS;
	char *flat = malloc(cap);
	size_t len = 0;
	flat[len++] = '{';
	for (int i = 0; i < MEMBERS; i++)
		len += (size_t)snprintf(flat + len, cap - len, "%s\"b\":%d",
		                        i ? "," : "", i);
	flat[len++] = '}';
	ASSERT_EQ(sl_jscan_parse(&s, flat, len, 1 + 2 * MEMBERS), 0);
	ASSERT_EQ(s.n, 1 + 2 * MEMBERS);
	ASSERT_EQ(s.tok[s.n - 1].parent, s.n - 2);
	ASSERT_EQ(sl_jscan_skip(&s, 0), s.n);
	sl_jscan_free(&s);
	free(flat);
}

/* sl_jscan_members finds in one walk what sl_jscan_get finds key by key. */
static void test_members_agree_with_get(void)
{
	static const char *const texts[] = {
	    "{\"a\":1,\"b\":{\"a\":2},\"c\":[3,{\"b\":4}]}",
	    "{\"a\":1,\"a\":2,\"b\":3}", /* the first of duplicates */
	    "{\"x\":[],\"b\":\"\",\"c\":null}",
	    "{}",
	    "[1,2]", /* no object */
	};
	static const struct sl_jscan_key keys[] = {
	    SL_JSCAN_KEY("a"), SL_JSCAN_KEY("b"), SL_JSCAN_KEY("c"),
	    SL_JSCAN_KEY("missing")};
	enum { N = sizeof(keys) / sizeof(keys[0]) };
	for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
		struct sl_jscan s;
		ASSERT_EQ(scan(&s, texts[t]), 0);
		for (int obj = -1; obj < s.n; obj++) {
			int vals[N];
			sl_jscan_members(&s, obj, keys, vals, N);
			for (int k = 0; k < N; k++)
				ASSERT_EQ(vals[k],
				          sl_jscan_get(&s, obj, keys[k].name));
		}
		sl_jscan_free(&s);
	}
	struct sl_jscan s;
	ASSERT_EQ(scan(&s, texts[1]), 0);
	int vals[N];
	sl_jscan_members(&s, 0, keys, vals, N);
	ASSERT_STR_EQ(extent_of(&s, vals[0]), "1");
	sl_jscan_free(&s);
}

/* The members a shallow scan opens in the tests below. */
static const struct sl_jscan_key shallow_open[] = {SL_JSCAN_KEY("usage"),
                                                   SL_JSCAN_KEY("list")};

static int scan_shallow(struct sl_jscan *s, const char *text,
                        unsigned max_tokens)
{
	return sl_jscan_parse_shallow(s, text, strlen(text), shallow_open,
	                              (int)SL_ARRAY_SIZE(shallow_open),
	                              max_tokens);
}

/*
 * Skipped containers are single tokens with their whole extent; opened
 * ones hold their members, with their own containers skipped; leaves are
 * as a full scan has them.
 */
static void test_shallow(void)
{
	static const char text[] =
	    " {\"choices\":[{\"text\":\"}]\\\"{\"},[1,2]],"
	    "\"usage\":{\"n\":3,\"deep\":{\"m\":[4]},\"s\":\"x\"},"
	    "\"list\":[5,{\"k\":6},\"y\"],"
	    "\"esc\":\"a\\\\\",\"num\":-1.5e3,\"t\":true,\"e\":{},"
	    "\"usage\":7} \n";
	struct sl_jscan s, full;
	ASSERT_EQ(scan_shallow(&s, text, ANY_TOKENS), 0);
	ASSERT_EQ(scan(&full, text), 0);
	ASSERT_EQ(s.tok[0].size, 8);
	ASSERT_EQ(s.tok[0].end, full.tok[0].end);

	int choices = sl_jscan_get(&s, 0, "choices");
	ASSERT(sl_jscan_is_type(&s, choices, JSMN_ARRAY));
	ASSERT_EQ(s.tok[choices].size, 0);
	ASSERT_STR_EQ(extent_of(&s, choices), "[{\"text\":\"}]\\\"{\"},[1,2]]");

	/* The first "usage", opened: its own object is skipped. */
	int usage = sl_jscan_get(&s, 0, "usage");
	ASSERT(sl_jscan_is_type(&s, usage, JSMN_OBJECT));
	ASSERT_EQ(s.tok[usage].size, 3);
	double v;
	ASSERT(sl_jscan_number(&s, sl_jscan_get(&s, usage, "n"), &v));
	ASSERT(v == 3);
	int deep = sl_jscan_get(&s, usage, "deep");
	ASSERT(sl_jscan_is_type(&s, deep, JSMN_OBJECT));
	ASSERT_EQ(s.tok[deep].size, 0);
	ASSERT_STR_EQ(extent_of(&s, deep), "{\"m\":[4]}");
	ASSERT(sl_jscan_is(&s, sl_jscan_get(&s, usage, "s"), "x"));

	/* An opened array: its elements, the object among them skipped. */
	int list = sl_jscan_get(&s, 0, "list");
	ASSERT(sl_jscan_is_type(&s, list, JSMN_ARRAY));
	ASSERT_EQ(s.tok[list].size, 3);
	ASSERT(sl_jscan_is(&s, list + 1, "5"));
	ASSERT(sl_jscan_is_type(&s, list + 2, JSMN_OBJECT));
	ASSERT_EQ(s.tok[list + 2].size, 0);
	ASSERT(sl_jscan_is(&s, list + 3, "y"));
	ASSERT_EQ(s.tok[list + 3].parent, list);

	/* A string that ends in an escaped backslash ends there. */
	ASSERT(sl_jscan_is(&s, sl_jscan_get(&s, 0, "esc"), "a\\\\"));
	ASSERT(sl_jscan_number(&s, sl_jscan_get(&s, 0, "num"), &v));
	ASSERT(v == -1500);
	ASSERT(sl_jscan_is(&s, sl_jscan_get(&s, 0, "t"), "true"));
	int e = sl_jscan_get(&s, 0, "e");
	ASSERT(sl_jscan_is_type(&s, e, JSMN_OBJECT) && s.tok[e].size == 0);

	/* Each key and leaf where the full scan has it, parent included. */
	for (int k = 1; k < s.n; k++) {
		if (s.tok[k].parent != 0)
			continue;
		int f = 1;
		while (full.tok[f].start != s.tok[k].start)
			f++;
		ASSERT_EQ(full.tok[f].end, s.tok[k].end);
		ASSERT_EQ(full.tok[f].type, s.tok[k].type);
		ASSERT_EQ(full.tok[f + 1].start, s.tok[k + 1].start);
		ASSERT_EQ(full.tok[f + 1].end, s.tok[k + 1].end);
		ASSERT_EQ(s.tok[k + 1].parent, k);
	}
	sl_jscan_free(&full);
	sl_jscan_free(&s);
}

/* What is not one whole object is refused, with no tokens left. */
static void test_shallow_refusals(void)
{
	static const char *const texts[] = {
	    "",
	    "  ",
	    "[1]",
	    "\"s\"",
	    "5",
	    "{",
	    "{\"a\":1",
	    "{\"a\":1,}",
	    "{\"a\" 1}",
	    "{\"a\":1 \"b\":2}",
	    "{a:1}",
	    "{\"a\":}",
	    "{\"a\":\"open}",
	    "{\"a\":\"esc\\\"}",
	    "{\"a\":[1,{]}",
	    "{\"a\":+1}",
	    "{\"a\":1}x",
	    "{\"a\":1}{}",
	    "{\"usage\":[1,]}",
	    "{\"usage\":{\"b\":1 2}}",
	    "{\"usage\":{\"b\"}}",
	};
	for (size_t t = 0; t < SL_ARRAY_SIZE(texts); t++) {
		struct sl_jscan s;
		ASSERT_EQ(scan_shallow(&s, texts[t], ANY_TOKENS), SL_EINVAL);
		ASSERT_EQ(s.n, 0);
		sl_jscan_free(&s);
	}
	/* And "{}" is an object, of no members. */
	struct sl_jscan s;
	ASSERT_EQ(scan_shallow(&s, "{ }", ANY_TOKENS), 0);
	ASSERT_EQ(s.n, 1);
	ASSERT_EQ(s.tok[0].size, 0);
	sl_jscan_free(&s);
}

/*
 * The token limit counts the shallow tokens, exactly, and the array moves
 * to the heap past SL_JSCAN_INLINE as a full scan's does.
 */
static void test_shallow_limit(void)
{
	static const char text[] = "{\"a\":[1,2,3],\"usage\":{\"b\":1}}";
	struct sl_jscan s;
	/* The object, "a", its skipped array, "usage", its object, "b", 1. */
	ASSERT_EQ(scan_shallow(&s, text, 7), 0);
	ASSERT_EQ(s.n, 7);
	sl_jscan_free(&s);
	ASSERT_EQ(scan_shallow(&s, text, 6), SL_EINVAL);
	sl_jscan_free(&s);

	char big[8 * SL_JSCAN_INLINE + 64];
	struct sl_join j = SL_JOIN(big);
	sl_join_str(&j, "{\"list\":[");
	for (int i = 0; i < SL_JSCAN_INLINE; i++)
		sl_join_str(&j, i ? ",7" : "7");
	sl_join_str(&j, "]}");
	ASSERT(j.len + 1 < sizeof(big));
	ASSERT_EQ(scan_shallow(&s, big, ANY_TOKENS), 0);
	ASSERT(s.tok != s.inline_tok);
	ASSERT_EQ(s.n, 3 + SL_JSCAN_INLINE);
	ASSERT(sl_jscan_is(&s, s.n - 1, "7"));
	sl_jscan_free(&s);
}

/* The value of `key` read from the first n bytes of text, as "" if none. */
static const char *leading(const char *text, size_t n, const char *key)
{
	static char out[256];
	struct sl_jscan_key k = {key, strlen(key)};
	size_t start, end;
	if (!sl_jscan_leading_member(text, n, &k, &start, &end))
		return "";
	ASSERT(end > start && end <= n && end - start < sizeof(out));
	memcpy(out, text + start, end - start);
	out[end - start] = '\0';
	return out;
}

static void test_leading_member(void)
{
	const char *doc =
	    "{\"model\":\"m\",\"object\":\"list\", "
	    "\"usage\" : {\"prompt_tokens\":12,\"total_tokens\":12},"
	    "\"data\":[{\"usage\":1,\"e\":[0.1,-2e-3]}]}";
	size_t n = strlen(doc);
	const char *usage = "{\"prompt_tokens\":12,\"total_tokens\":12}";
	ASSERT_STR_EQ(leading(doc, n, "usage"), usage);
	ASSERT_STR_EQ(leading(doc, n, "model"), "\"m\"");
	ASSERT_STR_EQ(leading(doc, n, "data"),
	              "[{\"usage\":1,\"e\":[0.1,-2e-3]}]");
	/* Members inside values are not the object's own. */
	ASSERT_STR_EQ(leading(doc, n, "e"), "");
	ASSERT_STR_EQ(leading(doc, n, "missing"), "");
	/* Only the start of the document: what lies whole within it. */
	size_t usage_end = (size_t)(strstr(doc, usage) - doc) + strlen(usage);
	ASSERT_STR_EQ(leading(doc, usage_end + 1, "usage"), usage);
	ASSERT_STR_EQ(leading(doc, usage_end, "usage"), "");
	ASSERT_STR_EQ(leading(doc, usage_end - 1, "usage"), "");
	ASSERT_STR_EQ(leading(doc, usage_end + 10, "data"), "");
	/* A number the bytes end in may go on past them. */
	ASSERT_STR_EQ(leading("{\"n\":12", 7, "n"), "");
	ASSERT_STR_EQ(leading("{\"n\":12}", 8, "n"), "12");
	/* Quotes and brackets inside strings are skipped as text. */
	const char *tricky =
	    "{\"a\":\"x\\\"}],\\\\\",\"b\":[\"]\",{}],\"c\":true}";
	ASSERT_STR_EQ(leading(tricky, strlen(tricky), "b"), "[\"]\",{}]");
	ASSERT_STR_EQ(leading(tricky, strlen(tricky), "c"), "true");
	/* Not an object's members. */
	ASSERT_STR_EQ(leading("[1,2]", 5, "a"), "");
	const char *no_colon = "{\"a\" 1}", *no_comma = "{\"a\":1 \"b\":2}";
	ASSERT_STR_EQ(leading(no_colon, strlen(no_colon), "a"), "");
	ASSERT_STR_EQ(leading(no_comma, strlen(no_comma), "b"), "");
	ASSERT_STR_EQ(leading("", 0, "a"), "");
}

/*
 * `before`, then `depth` containers around the number 1, then `after`, in
 * buf: arrays, or objects of one member "a" when `objects`.
 */
static const char *nest(char *buf, size_t size, const char *before,
                        unsigned depth, bool objects, const char *after)
{
	struct sl_join j = {.p = buf, .cap = size};
	sl_join_str(&j, before);
	for (unsigned d = 0; d < depth; d++)
		sl_join_str(&j, objects ? "{\"a\":" : "[");
	sl_join_str(&j, "1");
	for (unsigned d = 0; d < depth; d++)
		sl_join_str(&j, objects ? "}" : "]");
	sl_join_str(&j, after);
	ASSERT(j.len + 1 < size);
	return buf;
}

/* The elements of the array text opens, as "e1|e2|...", and "." if whole. */
static const char *elements(const char *text)
{
	static char out[512];
	struct sl_join j = {.p = out, .cap = sizeof(out)};
	size_t len = strlen(text), at = 0, start, end, last = 0;
	while (sl_jscan_next_element(text, len, &at, &start, &end)) {
		ASSERT(start < end && end < len && at == end);
		if (j.len > 0)
			sl_join_str(&j, "|");
		sl_join_mem(&j, text + start, end - start);
		last = end;
	}
	/* Whole: the array closes after its last element. */
	while (last > 0 && last < len && text[last] == ' ')
		last++;
	if (last > 0 && last < len && text[last] == ']')
		sl_join_str(&j, ".");
	ASSERT(j.len + 1 < sizeof(out));
	out[j.len] = '\0';
	return out;
}

static void test_next_element(void)
{
	ASSERT_STR_EQ(elements("[1, \"a\" ,[2,[3]], {\"k\":\"]\"},null]"),
	              "1|\"a\"|[2,[3]]|{\"k\":\"]\"}|null.");
	ASSERT_STR_EQ(elements(" [ {\"x\":\"a\\\"],\"} ] "),
	              "{\"x\":\"a\\\"],\"}.");
	ASSERT_STR_EQ(elements("[]"), "");
	ASSERT_STR_EQ(elements("[ ]"), "");
	/* No array, or one that stops being one: what came before. */
	ASSERT_STR_EQ(elements("{\"a\":1}"), "");
	ASSERT_STR_EQ(elements("\"[1]\""), "");
	ASSERT_STR_EQ(elements("[1 2]"), "1");
	ASSERT_STR_EQ(elements("[1,"), "1");
	ASSERT_STR_EQ(elements("[1,]"), "1");
	ASSERT_STR_EQ(elements("[1,{\"a\":"), "1");
	ASSERT_STR_EQ(elements("[\"ab"), "");
	/* A number the bytes end in may go on past them. */
	ASSERT_STR_EQ(elements("[12"), "");
	/* Nesting, the array itself counted: to the limit, not past it. */
	char deep[512];
	ASSERT_STR_EQ(
	    elements(nest(deep, sizeof(deep), "[0,", SL_JSCAN_DEPTH_MAX - 1,
	                  false, "]")),
	    nest(deep + 256, 256, "0|", SL_JSCAN_DEPTH_MAX - 1, false, "."));
	ASSERT_STR_EQ(elements(nest(deep, sizeof(deep), "[0,",
	                            SL_JSCAN_DEPTH_MAX, false, "]")),
	              "0");
}

/*
 * Every scan refuses text nested deeper than SL_JSCAN_DEPTH_MAX, counting
 * only brackets outside strings, and takes text nested that deep.
 */
static void test_depth_limit(void)
{
	enum { MAX = SL_JSCAN_DEPTH_MAX };
	static char text[8 * (MAX + 1) + 4096];
	struct sl_jscan s;
	for (int objects = 0; objects < 2; objects++) {
		nest(text, sizeof(text), "", MAX, objects, "");
		ASSERT_EQ(sl_jscan_shape(text, strlen(text)), SL_JSCAN_FIT);
		ASSERT_EQ(scan(&s, text), 0);
		sl_jscan_free(&s);
		nest(text, sizeof(text), " ", MAX + 1, objects, " ");
		ASSERT_EQ(sl_jscan_shape(text, strlen(text)),
		          SL_JSCAN_TOO_DEEP);
		ASSERT_EQ(scan(&s, text), SL_EINVAL);
		ASSERT_EQ(s.n, 0);
		sl_jscan_free(&s);

		/* The shallow scan, in a member it skips and one it opens. */
		nest(text, sizeof(text), "{\"x\":", MAX - 1, objects, "}");
		ASSERT_EQ(scan_shallow(&s, text, ANY_TOKENS), 0);
		sl_jscan_free(&s);
		nest(text, sizeof(text), "{\"x\":", MAX, objects, "}");
		ASSERT_EQ(scan_shallow(&s, text, ANY_TOKENS), SL_EINVAL);
		sl_jscan_free(&s);
		nest(text, sizeof(text), "{\"usage\":[", MAX - 2, objects,
		     "]}");
		ASSERT_EQ(scan_shallow(&s, text, ANY_TOKENS), 0);
		sl_jscan_free(&s);
		nest(text, sizeof(text), "{\"usage\":[", MAX - 1, objects,
		     "]}");
		ASSERT_EQ(scan_shallow(&s, text, ANY_TOKENS), SL_EINVAL);
		sl_jscan_free(&s);

		/* A leading member: found unless its value is too deep. */
		nest(text, sizeof(text), "{\"d\":", MAX - 1, objects,
		     ",\"n\":2}");
		ASSERT_STR_EQ(leading(text, strlen(text), "n"), "2");
		nest(text, sizeof(text), "{\"d\":", MAX, objects, ",\"n\":2}");
		ASSERT_STR_EQ(leading(text, strlen(text), "n"), "");
		nest(text, sizeof(text), "{\"n\":2,\"d\":", MAX, objects, "}");
		ASSERT_STR_EQ(leading(text, strlen(text), "n"), "2");
	}

	/* Brackets in strings, escaped quotes among them, count nothing. */
	struct sl_join j = SL_JOIN(text);
	sl_join_str(&j, "{\"a\":\"\\\"");
	for (int i = 0; i < 4 * MAX; i++)
		sl_join_str(&j, i % 2 ? "[" : "{");
	sl_join_str(&j, "\\\\\",\"b\":[\"]]\"]}");
	ASSERT_EQ(sl_jscan_shape(text, j.len), SL_JSCAN_FIT);
	ASSERT_EQ(scan(&s, text), 0);
	ASSERT_EQ(s.n, 6);
	sl_jscan_free(&s);
	ASSERT_EQ(scan_shallow(&s, text, ANY_TOKENS), 0);
	sl_jscan_free(&s);
	/* A string that ends in an escaped backslash ends there. */
	nest(text, sizeof(text), "[\"\\\\\",", MAX, false, "]");
	ASSERT_EQ(sl_jscan_shape(text, strlen(text)), SL_JSCAN_TOO_DEEP);
	ASSERT_EQ(scan(&s, text), SL_EINVAL);
	sl_jscan_free(&s);

	/*
	 * jsmn reads a quote inside a primitive as one of its characters, so
	 * the nest after it is no string's text: it counts.
	 */
	nest(text, sizeof(text), "[1\"],", MAX + 1, false, "]");
	ASSERT_EQ(sl_jscan_shape(text, strlen(text)), SL_JSCAN_TOO_DEEP);
	nest(text, sizeof(text), "{\"a\":[1e400\"],\"b\":", MAX, false, "\"}");
	ASSERT_EQ(sl_jscan_shape(text, strlen(text)), SL_JSCAN_TOO_DEEP);
	ASSERT_EQ(scan(&s, text), SL_EINVAL);
	sl_jscan_free(&s);

	/* Many containers side by side are no deeper than one. */
	j = SL_JOIN(text);
	sl_join_str(&j, "[");
	for (int i = 0; i < 4 * MAX; i++)
		sl_join_str(&j, i ? ",[{}]" : "[{}]");
	sl_join_str(&j, "]");
	ASSERT_EQ(sl_jscan_shape(text, j.len), SL_JSCAN_FIT);
	ASSERT_EQ(scan(&s, text), 0);
	ASSERT_EQ(s.n, 1 + 8 * MAX);
	sl_jscan_free(&s);
}

/*
 * Texts jsmn takes where JSON does not, and in which its parent links
 * grow as long as the text: a colon after anything but a key hangs what
 * follows under it, and a closing bracket with nothing open walks every
 * link back to the first token. Refused before jsmn reads them, and a
 * valid text with colons everywhere they may be is fit.
 */
static void test_misshapen(void)
{
	static const char *const shapes[][2] = {
	    {"[]:", "\"a\":"},     /* a chain of strings under a closed array */
	    {"[]:", "[]:"},        /* a chain of closed arrays */
	    {"[1:", "[]:"},        /* under a primitive, inside an open array */
	    {"{\"a\":", "\"b\":"}, /* values taken for keys */
	    {"[\"a\",\"b\":", "1 :"}, /* a chain of primitives */
	    {"{\"a\":[] ", "\"c\":"}, /* a key must follow { or a comma */
	};
	static char text[64 * 1024];
	struct sl_jscan s;
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		struct sl_join j = SL_JOIN(text);
		sl_join_str(&j, shapes[k][0]);
		while (j.len + 2 * strlen(shapes[k][1]) + 1024 < sizeof(text))
			sl_join_str(&j, shapes[k][1]);
		for (int i = 0; i < 1000; i++)
			sl_join_str(&j, "]");
		ASSERT_EQ(sl_jscan_shape(text, j.len), SL_JSCAN_MISSHAPEN);
		ASSERT_EQ(scan(&s, text), SL_EINVAL);
		ASSERT_EQ(s.n, 0);
		sl_jscan_free(&s);
	}
	static const char *const refused_alone[] = {
	    "[]]", "{}}", "\"a\":1", "{1 :2}", "{\"a\"::1}", "[\"unclosed]",
	};
	for (size_t k = 0; k < sizeof(refused_alone) / sizeof(*refused_alone);
	     k++)
		ASSERT_EQ(
		    sl_jscan_shape(refused_alone[k], strlen(refused_alone[k])),
		    SL_JSCAN_MISSHAPEN);
	const char *valid = " { \"a\" : 1 , \"b\" :{\"c\":[1,{\"d\":\"]:\"}]}, "
	                    "\"e\":[[],{}]} ";
	ASSERT_EQ(sl_jscan_shape(valid, strlen(valid)), SL_JSCAN_FIT);
	ASSERT_EQ(scan(&s, valid), 0);
	sl_jscan_free(&s);
}

int main(void)
{
	RUN(test_objects_and_arrays);
	RUN(test_strings_with_escapes);
	RUN(test_top_level_primitives);
	RUN(test_skip_over_nested_containers);
	RUN(test_get);
	RUN(test_trailing_text_is_refused);
	RUN(test_token_limit);
	RUN(test_numbers);
	RUN(test_heap_path);
	RUN(test_parent_links);
	RUN(test_members_agree_with_get);
	RUN(test_shallow);
	RUN(test_shallow_refusals);
	RUN(test_shallow_limit);
	RUN(test_leading_member);
	RUN(test_next_element);
	RUN(test_depth_limit);
	RUN(test_misshapen);
	return 0;
}

/*
 * fuzz_json_scan.c: the jsmn layer (json_scan.c) on any text, against
 * jansson.
 *
 * The whole input is the text. Invariants checked:
 *   - whatever the text, sl_jscan_parse either refuses it or gives tokens
 *     whose ranges and extents lie inside the text, in document order;
 *     sl_jscan_skip moves past a token and everything inside its extent
 *     and stays within the tokens; sl_jscan_get finds each key of an
 *     object (the first of duplicates) and never leaves the tokens;
 *   - the token limit is exact: the same text parses with exactly as many
 *     tokens as it took, and is refused with one fewer;
 *   - no text scanned nests deeper than SL_JSCAN_DEPTH_MAX, and jscan
 *     refuses valid JSON exactly when jansson's tree nests deeper; valid
 *     JSON is never misshapen; on any text sl_jscan_shape() finds fit,
 *     jsmn itself, however far it reads, nests no deeper and links no
 *     token further from the first than two links a level (a container
 *     and a key), which bounds its walk at each closing bracket;
 *   - when jansson (any value, NUL allowed) accepts the text, and the
 *     text holds no NUL byte and nests no deeper than the bound, jscan
 *     accepts it too (jansson 2.14 takes a
 *     raw NUL right after a number or literal, "[1\0]", which is no JSON
 *     and which jscan refuses), and the two agree on the tree: types, array
 * lengths, object member counts (keys as written, duplicates counted, as
 * jansson with JSON_REJECT_DUPLICATES agrees when it loads), strings
 * without escapes byte for byte, and numbers as sl_jscan_number reads
 * them;
 *   - sl_jscan_parse_shallow, opening the members named "a" and "usage",
 *     gives tokens inside the text, and on any object jansson takes it
 *     takes too and agrees with the full scan token for token: the same ranges,
 *     types and parent links, except that a container it skipped has no
 *     children, and one it opened has skipped containers as children.
 */
#include "sluice/base/common.h"
#include "sluice/json/json_scan.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* As assemble.c asks: above any input libFuzzer makes. */
#define MAX_TOKENS (1u << 20)

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_json_scan: %s\n", #cond);        \
			abort();                                               \
		}                                                              \
	} while (0)

/* Ranges, extents, skip and get, on any text jscan accepted. */
static void check_tokens(const struct sl_jscan *s)
{
	CHECK(s->n > 0);
	size_t prev_start = 0;
	for (int i = 0; i < s->n; i++) {
		const jsmntok_t *t = &s->tok[i];
		CHECK(t->start >= 0 && t->start <= t->end);
		CHECK((size_t)t->end <= s->len);
		size_t start, end;
		sl_jscan_extent(s, i, &start, &end);
		CHECK(start <= end && end <= s->len);
		CHECK(start >= prev_start);
		prev_start = start;
		if (t->type == JSMN_STRING)
			CHECK(s->text[start] == '"' && s->text[end - 1] == '"');
		int next = sl_jscan_skip(s, i);
		CHECK(next > i && next <= s->n);
		for (int j = i + 1; j < next; j++) {
			size_t js, je;
			sl_jscan_extent(s, j, &js, &je);
			CHECK(js >= start && je <= end);
		}
		CHECK(sl_jscan_get(s, i, "") >= -1);
		if (t->type != JSMN_OBJECT) {
			CHECK(sl_jscan_get(s, i, "a") == -1);
			continue;
		}
		/* Each key found, as written, the first of duplicates. */
		int k = i + 1;
		for (int m = 0; m < t->size && k < s->n; m++) {
			if (s->tok[k].type != JSMN_STRING ||
			    s->tok[k].size != 1)
				break;
			size_t n = sl_jscan_len(s, k);
			char *key = malloc(n + 1);
			CHECK(key);
			memcpy(key, sl_jscan_text(s, k), n);
			key[n] = '\0';
			int v = sl_jscan_get(s, i, key);
			CHECK(v >= -1 && v < s->n);
			if (strlen(key) == n) {
				CHECK(v > i && v <= k + 1);
				CHECK(sl_jscan_is(s, v - 1, key));
			}
			free(key);
			if (k + 1 >= s->n)
				break;
			k = sl_jscan_skip(s, k + 1);
		}
	}
	/* Containers nest within the bound: a key is a link, no level. */
	int *depth = malloc(sizeof(int) * (size_t)s->n);
	CHECK(depth);
	for (int i = 0; i < s->n; i++) {
		int parent = s->tok[i].parent;
		CHECK(parent < i);
		depth[i] = (parent < 0 ? 0 : depth[parent]) +
		           (s->tok[i].type == JSMN_OBJECT ||
		            s->tok[i].type == JSMN_ARRAY);
		CHECK(depth[i] <= SL_JSCAN_DEPTH_MAX);
	}
	free(depth);
	/* The top-level token spans every other one. */
	CHECK(sl_jscan_skip(s, 0) == s->n);
	CHECK(sl_jscan_skip(s, s->n) == s->n);
}

/* How deep objects and arrays nest in jansson's tree. */
static size_t depth_of(json_t *v)
{
	size_t deepest = 0, d;
	if (json_is_object(v)) {
		const char *key;
		json_t *member;
		json_object_foreach(v, key, member)
		{
			if ((d = depth_of(member)) > deepest)
				deepest = d;
		}
	} else if (json_is_array(v)) {
		for (size_t m = 0; m < json_array_size(v); m++)
			if ((d = depth_of(json_array_get(v, m))) > deepest)
				deepest = d;
	} else {
		return 0;
	}
	return deepest + 1;
}

/*
 * How deep jsmn's containers nest on the text, as far as it reads it,
 * error or not: the tokens it made by then hold their parent links.
 */
struct jsmn_reach {
	int depth; /* containers on the longest chain of parent links */
	int links; /* links on the longest chain */
};

/*
 * How far jsmn's parent links reach in the text, read as far as jsmn
 * reads it: at a closing bracket jsmn walks them up from the last token.
 */
static struct jsmn_reach jsmn_reach(const char *text, size_t size)
{
	jsmn_parser p;
	jsmn_init(&p);
	jsmntok_t *tok = malloc(sizeof(*tok) * (size + 1));
	struct jsmn_reach *at = malloc(sizeof(*at) * (size + 1));
	CHECK(tok && at);
	(void)jsmn_parse(&p, text, size, tok, (unsigned)size + 1);
	struct jsmn_reach most = {0, 0};
	for (unsigned i = 0; i < p.toknext; i++) {
		int parent = tok[i].parent;
		bool container =
		    tok[i].type == JSMN_OBJECT || tok[i].type == JSMN_ARRAY;
		at[i].depth = (parent < 0 ? 0 : at[parent].depth) + container;
		at[i].links = parent < 0 ? 0 : at[parent].links + 1;
		most.depth = SL_MAX(most.depth, at[i].depth);
		most.links = SL_MAX(most.links, at[i].links);
	}
	free(at);
	free(tok);
	return most;
}

/* Whether sl_jscan_number reads token i as a number. */
static bool is_number(const struct sl_jscan *s, int i)
{
	double v;
	return sl_jscan_number(s, i, &v);
}

/* jscan's tree against jansson's, from token i; returns the next token. */
static int compare(const struct sl_jscan *s, int i, const json_t *v,
                   bool unique_keys)
{
	CHECK(i < s->n);
	const jsmntok_t *t = &s->tok[i];
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		CHECK(t->type == JSMN_OBJECT);
		if (unique_keys)
			CHECK((size_t)t->size == json_object_size(v));
		int k = i + 1;
		for (int m = 0; m < t->size; m++) {
			CHECK(s->tok[k].type == JSMN_STRING &&
			      s->tok[k].size == 1);
			size_t n = sl_jscan_len(s, k);
			const char *key = sl_jscan_text(s, k);
			json_t *member = NULL;
			/* Keys with escapes or NULs are not looked up. */
			if (!memchr(key, '\\', n) && !memchr(key, '\0', n))
				member = json_object_getn(v, key, n);
			if (member && unique_keys)
				k = compare(s, k + 1, member, unique_keys);
			else
				k = sl_jscan_skip(s, k + 1);
		}
		return k;
	}
	case JSON_ARRAY: {
		CHECK(t->type == JSMN_ARRAY);
		CHECK((size_t)t->size == json_array_size(v));
		int k = i + 1;
		for (size_t m = 0; m < json_array_size(v); m++)
			k = compare(s, k, json_array_get(v, m), unique_keys);
		return k;
	}
	case JSON_STRING: {
		CHECK(t->type == JSMN_STRING);
		size_t n = sl_jscan_len(s, i);
		if (!memchr(sl_jscan_text(s, i), '\\', n))
			CHECK(n == json_string_length(v) &&
			      memcmp(sl_jscan_text(s, i), json_string_value(v),
			             n) == 0);
		return i + 1;
	}
	case JSON_TRUE:
		CHECK(sl_jscan_is(s, i, "true") && !is_number(s, i));
		return i + 1;
	case JSON_FALSE:
		CHECK(sl_jscan_is(s, i, "false") && !is_number(s, i));
		return i + 1;
	case JSON_NULL:
		CHECK(sl_jscan_is(s, i, "null") && !is_number(s, i));
		return i + 1;
	case JSON_REAL:
	case JSON_INTEGER: {
		CHECK(t->type == JSMN_PRIMITIVE);
		/*
		 * sl_jscan_number reads what jansson read: strtod for reals,
		 * and an integer's nearest double (jansson refuses integers
		 * past int64), where the text is not too long for it.
		 */
		double got;
		if (sl_jscan_number(s, i, &got))
			CHECK(got == json_number_value(v));
		else
			CHECK(sl_jscan_len(s, i) > SL_JSCAN_NUMBER_MAX);
		return i + 1;
	}
	default: CHECK(t->type == JSMN_PRIMITIVE); return i + 1;
	}
}

/*
 * Whether token j of a full scan is one a shallow scan opening "a" and
 * "usage" holds: the top-level object's keys and values, and the members
 * or elements of an opened value.
 */
static bool kept_shallow(const struct sl_jscan *full, int j)
{
	int depth = 0; /* containers above token j */
	for (int p = full->tok[j].parent; p >= 0; p = full->tok[p].parent)
		if (full->tok[p].type != JSMN_STRING)
			depth++;
	if (depth <= 1)
		return true;
	if (depth > 2)
		return false;
	int container = full->tok[j].parent;
	if (full->tok[container].type == JSMN_STRING)
		container = full->tok[container].parent;
	int key = full->tok[container].parent;
	return key > 0 && full->tok[key].type == JSMN_STRING &&
	       (sl_jscan_is(full, key, "a") || sl_jscan_is(full, key, "usage"));
}

/*
 * The shallow scan: inside the text whatever it took, and on valid JSON
 * that the full scan took as an object, the full scan's tokens less those
 * skipped; valid JSON nested too deep it refuses, as the full scan does.
 */
static void check_shallow(const char *text, size_t size,
                          const struct sl_jscan *full, bool full_ok,
                          bool too_deep)
{
	static const struct sl_jscan_key open[] = {SL_JSCAN_KEY("a"),
	                                           SL_JSCAN_KEY("usage")};
	struct sl_jscan s;
	int rc = sl_jscan_parse_shallow(&s, text, size, open, 2, MAX_TOKENS);
	CHECK(!too_deep || rc != 0);
	if (rc != 0) {
		CHECK(s.n == 0);
		CHECK(!full_ok || full->tok[0].type != JSMN_OBJECT);
		sl_jscan_free(&s);
		return;
	}
	CHECK(s.tok[0].type == JSMN_OBJECT && s.tok[0].parent == -1);
	for (int i = 0; i < s.n; i++) {
		const jsmntok_t *t = &s.tok[i];
		CHECK(t->start >= 0 && t->start <= t->end);
		CHECK((size_t)t->end <= size);
		CHECK(i == 0 || (t->parent >= 0 && t->parent < i));
	}
	if (full_ok && full->tok[0].type == JSMN_OBJECT) {
		/* Token j of the full scan is token map[j] of this one. */
		int *map = malloc(sizeof(int) * (size_t)full->n);
		CHECK(map);
		int i = 0;
		for (int j = 0; j < full->n; j++) {
			map[j] = -1;
			if (!kept_shallow(full, j))
				continue;
			CHECK(i < s.n);
			const jsmntok_t *a = &full->tok[j], *b = &s.tok[i];
			CHECK(a->type == b->type && a->start == b->start &&
			      a->end == b->end);
			CHECK(a->parent < 0 ? b->parent < 0
			                    : b->parent == map[a->parent]);
			bool container =
			    a->type == JSMN_OBJECT || a->type == JSMN_ARRAY;
			CHECK(b->size == a->size ||
			      (container && b->size == 0));
			map[j] = i++;
		}
		CHECK(i == s.n);
		free(map);
	}
	sl_jscan_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	struct sl_jscan s;
	int rc = sl_jscan_parse(&s, text, size, MAX_TOKENS);
	int n = s.n;
	if (rc == 0) {
		check_tokens(&s);
	} else {
		CHECK(s.n == 0);
	}

	/* Only where the check passed: elsewhere jsmn may take seconds. */
	enum sl_jscan_shape shape = sl_jscan_shape(text, size);
	if (shape == SL_JSCAN_FIT) {
		struct jsmn_reach reach = jsmn_reach(text, size);
		CHECK(reach.depth <= SL_JSCAN_DEPTH_MAX);
		CHECK(reach.links <= 2 * SL_JSCAN_DEPTH_MAX + 1);
	}

	json_t *doc =
	    json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	bool valid = doc && !memchr(text, '\0', size);
	bool too_deep = valid && depth_of(doc) > SL_JSCAN_DEPTH_MAX;
	if (valid)
		CHECK(shape == (too_deep ? SL_JSCAN_TOO_DEEP : SL_JSCAN_FIT));
	check_shallow(text, size, &s, valid && rc == 0, too_deep);
	if (too_deep) {
		CHECK(rc != 0);
		valid = false;
	}
	if (valid) {
		if (rc != 0)
			fprintf(stderr, "fuzz_json_scan: jansson took "
			                "what jscan refused\n");
		CHECK(rc == 0);
		json_t *strict = json_loadb(text, size,
		                            JSON_DECODE_ANY | JSON_ALLOW_NUL |
		                                JSON_REJECT_DUPLICATES,
		                            NULL);
		CHECK(compare(&s, 0, doc, strict != NULL) <= s.n);
		json_decref(strict);
	}
	json_decref(doc);
	sl_jscan_free(&s);

	/* The limit is exact. */
	if (rc == 0) {
		CHECK(sl_jscan_parse(&s, text, size, (unsigned)n) == 0);
		CHECK(s.n == n);
		sl_jscan_free(&s);
		if (n > 1)
			CHECK(sl_jscan_parse(&s, text, size, (unsigned)n - 1) !=
			      0);
		sl_jscan_free(&s);
	}
	return 0;
}

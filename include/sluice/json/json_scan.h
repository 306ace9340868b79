/*
 * json_scan.h: finding things in JSON text without building objects.
 *
 * A thin layer over jsmn (Debian's libjsmn-dev), a tokenizer that splits
 * JSON text into tokens, each a slice of the text, and allocates nothing.
 * sluice uses it where it must read or splice a few fields of a document it
 * otherwise passes on unchanged: an upstream event, or a client body that
 * must reach llama-server as the client wrote it. Numbers and strings stay
 * the bytes they were, so nothing is reformatted on the way.
 *
 * jsmn checks structure, not every detail of the grammar: text that must be
 * valid JSON is validated elsewhere (request bodies by jansson), or comes
 * from llama-server.
 *
 * Glossary:
 *   token    one value, object key or primitive: its type, its byte range
 *            in the text, and for containers its number of children
 *            (an object's children are its keys; each key's child is its
 *            value). Strings' ranges exclude the quotes.
 *   index    a token's position in document order; a container's
 *            descendants follow it.
 */
#ifndef SLUICE_JSON_SCAN_H
#define SLUICE_JSON_SCAN_H

/*
 * Parent links: without them jsmn finds the container of each closing
 * bracket or comma by walking back over every token so far, which makes a
 * crafted 1 MB body cost seconds of the event loop; with them it is one
 * step per nesting level, and SL_JSCAN_DEPTH_MAX bounds the levels. They
 * change jsmntok_t, so json_scan.c (which compiles jsmn) defines it too.
 */
#define JSMN_PARENT_LINKS
#define JSMN_HEADER
#include <jsmn.h>

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/*
 * Tokens held without allocating; larger documents take them from malloc.
 * Sized for llama-server's events (0.7.0, measured): a token event is 16
 * tokens (native) to 24 (OpenAI chunks); with n_probs 5 about 90, with
 * n_probs 10 about 150; the final native event, with its generation
 * settings and timings, 162. So a stream allocates none up to about
 * n_probs 17. 256 tokens are 5 KB of stack per scan.
 */
#define SL_JSCAN_INLINE 256

/*
 * The deepest that objects and arrays may nest in a text scanned here, and
 * in a client's body (request.c refuses one nested deeper before any
 * parser reads it). jsmn finds the container a closing bracket closes by
 * walking up the parent links from the last token, one step for each
 * level closed below it, so a scan costs up to the text's length times its
 * depth: 100,000 nested brackets, a 200 KB body, held the event loop 13 s.
 * Bounded, it is linear: at most this many steps a bracket (twice as many
 * in objects, where a key is a link too). Documents nest far less: a chat
 * body whose tool takes objects nested ten deep is about 25 levels,
 * llama-server's events 5. jansson's own bound, 2048 levels, is too deep
 * to keep this cost down; OpenAI's structured outputs allow 10 levels of
 * schema.
 */
#define SL_JSCAN_DEPTH_MAX 64

struct sl_jscan {
	const char *text;
	size_t len;
	jsmntok_t *tok; /* inline or heap */
	int n;          /* tokens */
	jsmntok_t inline_tok[SL_JSCAN_INLINE];
};

/*
 * Whether jsmn's walk stays short in a text, read in one linear pass:
 * objects and arrays nest at most SL_JSCAN_DEPTH_MAX deep (brackets inside
 * strings do not count; whether they match is left to a parser), and
 * nothing lets jsmn's parent links grow longer than the nesting. For that
 * a colon must follow a string that came first in its container or after
 * a comma, and no closing bracket may come where nothing is open: jsmn
 * takes both where JSON does not, and a 100 KB body of []:"a":"a":... and
 * then ]]]... held the loop 0.8 s, growing with the square of its size.
 * Valid JSON is never misshapen. Every full scan asks this first;
 * request.c asks it too, to name the depth limit when it refuses.
 */
enum sl_jscan_shape {
	SL_JSCAN_FIT,
	SL_JSCAN_TOO_DEEP,
	SL_JSCAN_MISSHAPEN, /* no JSON text, and costly to jsmn */
};
enum sl_jscan_shape sl_jscan_shape(const char *text, size_t len);

/*
 * Tokenizes `len` bytes of `text` (borrowed; it must outlive the scan).
 * Returns 0, or SL_EINVAL when the text is not one JSON value, nests
 * deeper than SL_JSCAN_DEPTH_MAX or needs more than max_tokens tokens.
 * Either way sl_jscan_free() it afterwards.
 */
int sl_jscan_parse(struct sl_jscan *s, const char *text, size_t len,
                   unsigned max_tokens);
void sl_jscan_free(struct sl_jscan *s);

/* A key for sl_jscan_members() and sl_jscan_parse_shallow(): its text as
 * written, and its length. */
struct sl_jscan_key {
	const char *name;
	size_t len;
};
#define SL_JSCAN_KEY(literal)                                                  \
	{                                                                      \
		literal, sizeof(literal) - 1                                   \
	}

/*
 * Like sl_jscan_parse(), for an object of which only a few members are
 * read while others may be long (a plain answer's text, its generation
 * settings). Values are skipped, with memchr over strings, rather than
 * tokenized byte by byte as jsmn does; only the containers that are the
 * values of members named in `open` (keys as written) are opened, one
 * level: their own members or elements are tokens, and containers inside
 * them are skipped too. A skipped container is one token of its type and
 * extent with no children (size 0), so lookups and walks work as on a
 * full scan while they do not look inside one; strings, primitives and
 * keys are tokens as usual, with the same ranges and parent links.
 *
 * The skip checks less than jsmn does: that strings close, brackets
 * balance and nest no deeper than SL_JSCAN_DEPTH_MAX, and primitives start
 * as JSON's do, not that bracket kinds match or that escapes are whole.
 * Returns 0, or SL_EINVAL when the text is not one object or needs more
 * than max_tokens tokens. Either way sl_jscan_free() it afterwards.
 */
int sl_jscan_parse_shallow(struct sl_jscan *s, const char *text, size_t len,
                           const struct sl_jscan_key *open, int n_open,
                           unsigned max_tokens);

/*
 * The value of the member named `key` (as written) of the object that
 * `text` opens, read from the first `len` bytes of a document that may go
 * on past them: a long answer of which only the start was kept. The
 * members are read in order, each value skipped whole as the shallow scan
 * skips it, until `key`; true, with the value's extent (a string's quotes
 * included) in [*start, *end), when that member and its whole value lie
 * within the bytes; false when they end first, stop being an object's
 * members, or nest deeper than SL_JSCAN_DEPTH_MAX before the value ends.
 */
bool sl_jscan_leading_member(const char *text, size_t len,
                             const struct sl_jscan_key *key, size_t *start,
                             size_t *end);

/*
 * The elements of the array that `text` opens, one a call, each skipped
 * whole as the shallow scan skips values (a long answer's text with
 * memchr), so that an array of many objects is read one element at a
 * time: call with *at = 0, and again with the *at it leaves, past the
 * element found. True with the element's extent (a string's quotes
 * included) in [*start, *end); false at the array's end, and where the
 * text stops being an array's elements (no array, an element that runs
 * past the bytes, a missing comma, nesting deeper than
 * SL_JSCAN_DEPTH_MAX).
 */
bool sl_jscan_next_element(const char *text, size_t len, size_t *at,
                           size_t *start, size_t *end);

/*
 * Makes `s` the scan of `len` bytes of `text` that sl_jscan_parse() gave
 * as the `n` tokens `tok` (copied here): for text kept from an earlier
 * scan, whose bytes give the same tokens, without a second pass.
 * sl_jscan_free() it afterwards.
 */
void sl_jscan_restore(struct sl_jscan *s, const char *text, size_t len,
                      const jsmntok_t *tok, int n);

/* The index just past token i and everything inside it; n when i >= n. */
int sl_jscan_skip(const struct sl_jscan *s, int i);

/*
 * The value of member `key` of the object at index obj (the key compared as
 * written, without unescaping), or -1 when absent or obj is no object.
 */
int sl_jscan_get(const struct sl_jscan *s, int obj, const char *key);

/*
 * The values of several members of the object at index obj in one walk
 * over its members, rather than one walk per key: vals[k] is what
 * sl_jscan_get(s, obj, keys[k].name) returns (the first of duplicate keys,
 * -1 when absent).
 */
void sl_jscan_members(const struct sl_jscan *s, int obj,
                      const struct sl_jscan_key *keys, int *vals, int n_keys);

/* Token i's type, text and length. */
static inline jsmntype_t sl_jscan_type(const struct sl_jscan *s, int i)
{
	return s->tok[i].type;
}
static inline const char *sl_jscan_text(const struct sl_jscan *s, int i)
{
	return s->text + s->tok[i].start;
}
static inline size_t sl_jscan_len(const struct sl_jscan *s, int i)
{
	return (size_t)(s->tok[i].end - s->tok[i].start);
}

/*
 * Whether token i's text is exactly `literal` ("true", "[DONE]", a key).
 * Inline, so that a literal's length is known when compiling: it is asked
 * of every member of every relayed body.
 */
static inline bool sl_jscan_is(const struct sl_jscan *s, int i,
                               const char *literal)
{
	size_t n = strlen(literal);
	return sl_jscan_len(s, i) == n &&
	       memcmp(sl_jscan_text(s, i), literal, n) == 0;
}

/* Whether token i exists (i >= 0) and is of `type`. */
static inline bool sl_jscan_is_type(const struct sl_jscan *s, int i,
                                    jsmntype_t type)
{
	return i >= 0 && s->tok[i].type == type;
}

/*
 * Token i as a small non-negative integer, as written (a choice's index,
 * an error code: at most 9 digits, nothing else), or -1 for anything else
 * and for no token (i < 0). The assembler and the event scanner read
 * indexes alike through it.
 */
long sl_jscan_small_uint(const struct sl_jscan *s, int i);

/*
 * Token i as a finite number (a JSON number of at most SL_JSCAN_NUMBER_MAX
 * characters), read with strtod into *out; false for anything else and for
 * no token (i < 0).
 */
#define SL_JSCAN_NUMBER_MAX 64
bool sl_jscan_number(const struct sl_jscan *s, int i, double *out);

/*
 * Token i's whole extent in the text: for a string, quotes included. The
 * slice to copy when a value is passed on as written.
 */
void sl_jscan_extent(const struct sl_jscan *s, int i, size_t *start,
                     size_t *end);

#endif

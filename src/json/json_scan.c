/* json_scan.c: jsmn's implementation, and the walks sluice needs on top. */

/*
 * jsmn is one header: its implementation is compiled here, once, so it is
 * included before json_scan.h (which includes it for declarations only;
 * jsmn's include guard then makes that a no-op). Strict mode refuses bare
 * words and containers used as keys, but not every wrong shape: it takes
 * a key without a value ({"a"}) or a missing comma ([1 2]). So the walks
 * below never trust a count alone: they stay inside the token array
 * whatever the text was, and a key without a value is found by nothing.
 */
#define JSMN_STRICT
#define JSMN_PARENT_LINKS /* as json_scan.h says: linear, not quadratic */
#include <jsmn.h>

#include "sluice/json/json_scan.h"

#include "sluice/base/common.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Under AddressSanitizer, the inline tokens past the last one are poisoned
 * until sl_jscan_free(): they lie inside the struct, so a walk that reads
 * past the tokens (s->tok[s->n]) would otherwise read stale tokens
 * unnoticed, where the same walk over a grown array is caught.
 */
#if defined(__SANITIZE_ADDRESS__)
#define JSCAN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JSCAN_ASAN 1
#endif
#endif
#ifdef JSCAN_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* JSON's whitespace; a NUL byte is not (strchr would say it is). */
static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/*
 * Whether the text from `from` on is whitespace only: one value per text.
 * jsmn stops at a NUL byte as if the text ended there, so what follows
 * one is checked here too.
 */
static bool only_space_after(const struct sl_jscan *s, size_t from)
{
	for (size_t i = from; i < s->len; i++)
		if (!is_space(s->text[i]))
			return false;
	return true;
}

/*
 * A document that is one primitive (5, true): jsmn's strict mode wants a
 * delimiter after a primitive, which the end of the text is not, so the
 * token is made here. Like jsmn, only the characters are checked.
 */
static int scan_primitive(struct sl_jscan *s, size_t start)
{
	size_t end = start;
	while (end < s->len && !is_space(s->text[end])) {
		unsigned char c = (unsigned char)s->text[end];
		if (c < 0x20 || c >= 0x7f || strchr("{}[],:\"", c))
			return SL_EINVAL;
		end++;
	}
	if (!only_space_after(s, end))
		return SL_EINVAL;
	s->tok[0] = (jsmntok_t){.type = JSMN_PRIMITIVE,
	                        .start = (int)start,
	                        .end = (int)end,
	                        .size = 0,
	                        .parent = -1};
	s->n = 1;
	return 0;
}

/*
 * Doubles the room for tokens, up to max_tokens: the inline array moves to
 * the heap the first time. False when the room is max_tokens already.
 */
static bool grow(struct sl_jscan *s, unsigned *room, unsigned max_tokens)
{
	if (*room == max_tokens)
		return false;
	unsigned more = *room > max_tokens / 2 ? max_tokens : *room * 2;
	if (s->tok == s->inline_tok) {
		s->tok = sl_xmalloc(sizeof(*s->tok) * more);
		memcpy(s->tok, s->inline_tok, sizeof(*s->tok) * *room);
	} else {
		s->tok = sl_xrealloc(s->tok, sizeof(*s->tok) * more);
	}
	*room = more;
	return true;
}

/*
 * Runs jsmn over the text, growing the token array as it goes: jsmn stops
 * with JSMN_ERROR_NOMEM where it ran out, and carries on from there when
 * called again with more room, so the text is read once. Returns the
 * token count or a negative jsmn error; SL_EINVAL past max_tokens.
 */
static int scan_tokens(struct sl_jscan *s, unsigned max_tokens)
{
	jsmn_parser p;
	jsmn_init(&p);
	unsigned room = SL_MIN((unsigned)SL_JSCAN_INLINE, max_tokens);
	for (;;) {
		int n = jsmn_parse(&p, s->text, s->len, s->tok, room);
		if (n != JSMN_ERROR_NOMEM)
			return n;
		if (!grow(s, &room, max_tokens))
			return SL_EINVAL;
	}
}

/*
 * A scan of the text with no tokens yet; false when it cannot have any
 * (jsmn keeps offsets in ints).
 */
static bool begin(struct sl_jscan *s, const char *text, size_t len,
                  unsigned max_tokens)
{
	s->text = text;
	s->len = len;
	s->tok = s->inline_tok;
	s->n = 0;
	UNPOISON(s->inline_tok, sizeof(s->inline_tok));
	return len <= INT_MAX && max_tokens > 0;
}

/* The inline tokens past the scan's, poisoned (see POISON). */
static void poison_rest(struct sl_jscan *s)
{
	if (s->tok == s->inline_tok)
		POISON(s->inline_tok + s->n,
		       sizeof(*s->tok) * (SL_JSCAN_INLINE - (size_t)s->n));
}

/* The index of the first byte from `at` on that is not whitespace. */
static size_t skip_space(const char *text, size_t len, size_t at)
{
	while (at < len && is_space(text[at]))
		at++;
	return at;
}

int sl_jscan_parse(struct sl_jscan *s, const char *text, size_t len,
                   unsigned max_tokens)
{
	if (!begin(s, text, len, max_tokens))
		return SL_EINVAL;
	size_t first = skip_space(text, len, 0);
	if (first == len)
		return SL_EINVAL;
	if (!strchr("{[\"", text[first]))
		return scan_primitive(s, first);
	if (sl_jscan_shape(text + first, len - first) != SL_JSCAN_FIT)
		return SL_EINVAL;
	int n = scan_tokens(s, max_tokens);
	/* Nothing, an error, or a value cut short (jsmn leaves end at -1). */
	if (n <= 0 || (unsigned)n > max_tokens || s->tok[0].end < 0)
		return SL_EINVAL;
	size_t end = (size_t)s->tok[0].end + (s->tok[0].type == JSMN_STRING);
	if (!only_space_after(s, end))
		return SL_EINVAL;
	s->n = n;
	poison_rest(s);
	return 0;
}

/* ---- the shallow scan: skipping what is not read ---- */

/*
 * The index just past the string whose opening quote is text[at], or 0
 * when it never closes. A quote closes it unless an odd run of
 * backslashes comes right before; each run is counted once, by the quote
 * after it, so the walk is linear. Escapes are not checked.
 */
static size_t skim_string(const char *text, size_t len, size_t at)
{
	size_t from = at + 1;
	for (;;) {
		const char *q = memchr(text + from, '"', len - from);
		if (!q)
			return 0;
		size_t quote = (size_t)(q - text), run = 0;
		while (quote - run > at + 1 && text[quote - run - 1] == '\\')
			run++;
		if (run % 2 == 0)
			return quote + 1;
		from = quote + 1;
	}
}

/*
 * The index just past the container that opens at text[at] inside `outer`
 * others, or 0 when it never closes or nests deeper than
 * SL_JSCAN_DEPTH_MAX: brackets are counted, not matched by kind, and
 * strings are skipped whole, so that a bracket inside one counts for
 * nothing.
 */
static size_t skim_container(const char *text, size_t len, size_t at,
                             size_t outer)
{
	size_t depth = outer;
	for (size_t i = at; i < len; i++) {
		switch (text[i]) {
		case '"':
			i = skim_string(text, len, i);
			if (i == 0)
				return 0;
			i--; /* the loop steps past the closing quote */
			break;
		case '{':
		case '[':
			if (++depth > SL_JSCAN_DEPTH_MAX)
				return 0;
			break;
		case '}':
		case ']':
			if (--depth == outer)
				return i + 1;
			break;
		default: break;
		}
	}
	return 0;
}

/* What was read last, for the rule on colons in sl_jscan_shape(). */
enum last_read {
	READ_NOTHING,
	READ_OPENING, /* { or [ */
	READ_COMMA,
	READ_KEY,   /* a string that came first or after a comma */
	READ_VALUE, /* any other string, a primitive, } or ] */
	READ_COLON,
};

enum sl_jscan_shape sl_jscan_shape(const char *text, size_t len)
{
	/*
	 * The text is read as jsmn's strict mode reads it, as far as jsmn
	 * goes: strings end where jsmn ends them (skim_string), and
	 * primitives run to the next delimiter, a quote or bracket inside
	 * taken for one of their characters (in [1"],[[... the quote starts
	 * no string, and what follows nests). Where jsmn would stop at an
	 * error, the rest cannot cost it anything; reading on only refuses
	 * more of what is no JSON anyway.
	 */
	size_t depth = 0;
	enum last_read last = READ_NOTHING;
	for (size_t i = 0; i < len; i++) {
		switch (text[i]) {
		case '"':
			i = skim_string(text, len, i);
			if (i == 0)
				return SL_JSCAN_MISSHAPEN;
			i--; /* the loop steps past the closing quote */
			last = last == READ_OPENING || last == READ_COMMA
			           ? READ_KEY
			           : READ_VALUE;
			break;
		case '{':
		case '[':
			if (++depth > SL_JSCAN_DEPTH_MAX)
				return SL_JSCAN_TOO_DEEP;
			last = READ_OPENING;
			break;
		case '}':
		case ']':
			/* jsmn walks every token back to the first for a
			 * bracket too many, and may not refuse it. */
			if (depth == 0)
				return SL_JSCAN_MISSHAPEN;
			depth--;
			last = READ_VALUE;
			break;
		case ':':
			/* jsmn hangs what follows a colon under the token
			 * before it, whatever it is, and [1:[]:[]:... would
			 * make a chain as long as the text. */
			if (last != READ_KEY)
				return SL_JSCAN_MISSHAPEN;
			last = READ_COLON;
			break;
		case ',': last = READ_COMMA; break;
		case ' ':
		case '\t':
		case '\r':
		case '\n': break;
		default:
			while (i + 1 < len && !is_space(text[i + 1]) &&
			       text[i + 1] != ',' && text[i + 1] != ']' &&
			       text[i + 1] != '}')
				i++;
			last = READ_VALUE;
			break;
		}
	}
	return SL_JSCAN_FIT;
}

/*
 * The index just past the primitive at text[at] (a number, true, false or
 * null, as jsmn's strict mode has them start), or 0 when there is none.
 * Compared byte by byte, not with strchr: most are short numbers.
 */
static size_t skim_primitive(const char *text, size_t len, size_t at)
{
	char first = at < len ? text[at] : '\0';
	if (!((first >= '0' && first <= '9') || first == '-' || first == 't' ||
	      first == 'f' || first == 'n'))
		return 0;
	size_t i = at;
	for (; i < len; i++) {
		unsigned char c = (unsigned char)text[i];
		/* The bytes of numbers and literals first: most are digits. */
		if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
		    c == '.' || c == '-' || c == '+' || c == 'E')
			continue;
		if (c == ',' || c == '}' || c == ']' || is_space((char)c))
			break;
		if (c < 0x20 || c >= 0x7f || c == '"' || c == '{' || c == '[' ||
		    c == ':')
			return 0;
	}
	return i;
}

/* The end of the value at text[i], skipped whole inside `outer` others. */
static size_t skim_value(const char *text, size_t len, size_t i, size_t outer)
{
	if (text[i] == '{' || text[i] == '[')
		return skim_container(text, len, i, outer);
	if (text[i] == '"')
		return skim_string(text, len, i);
	return skim_primitive(text, len, i);
}

/* Appends a token, growing the array; false past max_tokens. */
static bool push(struct sl_jscan *s, unsigned *room, unsigned max_tokens,
                 jsmntok_t tok)
{
	if ((unsigned)s->n == *room && !grow(s, room, max_tokens))
		return false;
	s->tok[s->n++] = tok;
	return true;
}

/* Whether the key `name`, n bytes as written, is one of `keys`. */
static bool is_key(const char *name, size_t n, const struct sl_jscan_key *keys,
                   int n_keys)
{
	for (int k = 0; k < n_keys; k++)
		if (keys[k].len == n && memcmp(keys[k].name, name, n) == 0)
			return true;
	return false;
}

/*
 * Where the value of a member whose name ends at key_end starts: past
 * the colon and the whitespace around it; 0 when there is none (a value
 * never starts the text).
 */
static size_t value_at(const char *text, size_t len, size_t key_end)
{
	size_t i = skip_space(text, len, key_end);
	if (i == len || text[i] != ':')
		return 0;
	i = skip_space(text, len, i + 1);
	return i == len ? 0 : i;
}

/* A string's or a primitive's token, for the value at text[*at]. */
static bool leaf(struct sl_jscan *s, unsigned *room, unsigned max_tokens,
                 size_t *at, int parent)
{
	size_t i = *at, end;
	jsmntok_t tok = {.parent = parent};
	if (s->text[i] == '"') {
		end = skim_string(s->text, s->len, i);
		tok.type = JSMN_STRING;
		tok.start = (int)i + 1;
		tok.end = (int)end - 1;
	} else {
		end = skim_primitive(s->text, s->len, i);
		tok.type = JSMN_PRIMITIVE;
		tok.start = (int)i;
		tok.end = (int)end;
	}
	*at = end;
	return end != 0 && push(s, room, max_tokens, tok);
}

/*
 * The token of a container at text[*at], inside `depth` others, that is
 * skipped, not walked.
 */
static bool skipped(struct sl_jscan *s, unsigned *room, unsigned max_tokens,
                    size_t *at, int parent, size_t depth)
{
	size_t i = *at, end = skim_container(s->text, s->len, i, depth);
	*at = end;
	return end != 0 &&
	       push(s, room, max_tokens,
	            (jsmntok_t){.type = s->text[i] == '{' ? JSMN_OBJECT
	                                                  : JSMN_ARRAY,
	                        .start = (int)i,
	                        .end = (int)end,
	                        .parent = parent});
}

/*
 * The container at text[*at] (an opening bracket): its token, then those
 * of its keys and values, and *at past it. A container inside is one token
 * with no children, skipped whole, unless it is the value of a member that
 * `open` names: that one is walked the same way, with nothing opened
 * further, so the walk nests two deep at most. `depth` counts the
 * container itself and those it is in.
 */
static bool walk(struct sl_jscan *s, unsigned *room, unsigned max_tokens,
                 size_t *at, int parent, const struct sl_jscan_key *open,
                 int n_open, size_t depth)
{
	const char *text = s->text;
	size_t len = s->len, i = *at;
	bool object = text[i] == '{';
	char close = object ? '}' : ']';
	int self = s->n;
	if (!push(s, room, max_tokens,
	          (jsmntok_t){.type = object ? JSMN_OBJECT : JSMN_ARRAY,
	                      .start = (int)i,
	                      .end = -1,
	                      .parent = parent}))
		return false;
	i = skip_space(text, len, i + 1);
	while (i < len && text[i] != close) {
		int holder = self; /* the value's parent: its key, in objects */
		bool opened = false;
		s->tok[self].size++;
		if (object) {
			size_t key_end =
			    text[i] == '"' ? skim_string(text, len, i) : 0;
			if (key_end == 0)
				return false;
			holder = s->n;
			opened =
			    is_key(text + i + 1, key_end - i - 2, open, n_open);
			if (!push(s, room, max_tokens,
			          (jsmntok_t){.type = JSMN_STRING,
			                      .start = (int)i + 1,
			                      .end = (int)key_end - 1,
			                      .size = 1,
			                      .parent = self}))
				return false;
			i = value_at(text, len, key_end);
			if (i == 0)
				return false;
		}
		bool nested = text[i] == '{' || text[i] == '[';
		if (nested && opened) {
			if (!walk(s, room, max_tokens, &i, holder, NULL, 0,
			          depth + 1))
				return false;
		} else if (nested) {
			if (!skipped(s, room, max_tokens, &i, holder, depth))
				return false;
		} else if (!leaf(s, room, max_tokens, &i, holder)) {
			return false;
		}
		i = skip_space(text, len, i);
		if (i < len && text[i] == ',') {
			i = skip_space(text, len, i + 1);
			if (i < len && text[i] == close) /* a trailing comma */
				return false;
		} else if (i == len || text[i] != close) {
			return false;
		}
	}
	if (i == len)
		return false;
	s->tok[self].end = (int)i + 1;
	*at = i + 1;
	return true;
}

int sl_jscan_parse_shallow(struct sl_jscan *s, const char *text, size_t len,
                           const struct sl_jscan_key *open, int n_open,
                           unsigned max_tokens)
{
	if (!begin(s, text, len, max_tokens))
		return SL_EINVAL;
	unsigned room = SL_MIN((unsigned)SL_JSCAN_INLINE, max_tokens);
	size_t i = skip_space(text, len, 0);
	if (i == len || text[i] != '{' ||
	    !walk(s, &room, max_tokens, &i, -1, open, n_open, 1) ||
	    !only_space_after(s, i)) {
		/* No tokens from a refused text, as sl_jscan_parse() leaves
		 * none. */
		s->n = 0;
		return SL_EINVAL;
	}
	poison_rest(s);
	return 0;
}

bool sl_jscan_leading_member(const char *text, size_t len,
                             const struct sl_jscan_key *key, size_t *start,
                             size_t *end)
{
	size_t i = skip_space(text, len, 0);
	if (i == len || text[i] != '{')
		return false;
	i = skip_space(text, len, i + 1);
	while (i < len && text[i] == '"') {
		size_t key_end = skim_string(text, len, i);
		if (key_end == 0)
			return false;
		bool wanted = is_key(text + i + 1, key_end - i - 2, key, 1);
		i = value_at(text, len, key_end);
		if (i == 0)
			return false;
		/* A number the bytes end in may go on past them. */
		size_t value_end = skim_value(text, len, i, 1);
		if (value_end == 0 || value_end == len)
			return false;
		if (wanted) {
			*start = i;
			*end = value_end;
			return true;
		}
		i = skip_space(text, len, value_end);
		if (i == len || text[i] != ',')
			return false;
		i = skip_space(text, len, i + 1);
	}
	return false;
}

bool sl_jscan_next_element(const char *text, size_t len, size_t *at,
                           size_t *start, size_t *end)
{
	size_t i = skip_space(text, len, *at);
	/* The opening bracket first, a comma before each later element. */
	if (i == len || text[i] != (*at == 0 ? '[' : ','))
		return false;
	i = skip_space(text, len, i + 1);
	if (i == len || text[i] == ']')
		return false;
	size_t value_end = skim_value(text, len, i, 1);
	/* An element is followed by a comma or the closing bracket. */
	if (value_end == 0 || value_end == len)
		return false;
	*start = i;
	*end = *at = value_end;
	return true;
}

void sl_jscan_restore(struct sl_jscan *s, const char *text, size_t len,
                      const jsmntok_t *tok, int n)
{
	begin(s, text, len, 1);
	if (n > SL_JSCAN_INLINE)
		s->tok = sl_xmalloc(sizeof(*s->tok) * (size_t)n);
	s->n = n;
	poison_rest(s);
	memcpy(s->tok, tok, sizeof(*s->tok) * (size_t)n);
}

void sl_jscan_free(struct sl_jscan *s)
{
	UNPOISON(s->inline_tok, sizeof(s->inline_tok));
	if (s->tok != s->inline_tok)
		free(s->tok);
	s->tok = s->inline_tok;
	s->n = 0;
}

int sl_jscan_skip(const struct sl_jscan *s, int i)
{
	/* Walks that count children (size) can run past the last token
	 * when jsmn took a wrong shape ({"a"}): past the end stays there. */
	if (i >= s->n)
		return s->n;
	int end = s->tok[i].end;
	int j = i + 1;
	while (j < s->n && s->tok[j].start < end)
		j++;
	return j;
}

int sl_jscan_get(const struct sl_jscan *s, int obj, const char *key)
{
	if (obj < 0 || obj >= s->n || s->tok[obj].type != JSMN_OBJECT)
		return -1;
	size_t key_len = strlen(key);
	int k = obj + 1;
	for (int m = 0; m < s->tok[obj].size && k + 1 < s->n; m++) {
		/* A key holds its value as its one child; else the text lied.
		 */
		if (s->tok[k].type != JSMN_STRING || s->tok[k].size != 1)
			return -1;
		if (sl_jscan_len(s, k) == key_len &&
		    memcmp(sl_jscan_text(s, k), key, key_len) == 0)
			return k + 1;
		k = sl_jscan_skip(s, k + 1);
	}
	return -1;
}

void sl_jscan_members(const struct sl_jscan *s, int obj,
                      const struct sl_jscan_key *keys, int *vals, int n_keys)
{
	for (int k = 0; k < n_keys; k++)
		vals[k] = -1;
	if (obj < 0 || obj >= s->n || s->tok[obj].type != JSMN_OBJECT)
		return;
	int key = obj + 1;
	for (int m = 0; m < s->tok[obj].size && key + 1 < s->n; m++) {
		/* As in sl_jscan_get: a malformed key ends the walk. */
		if (s->tok[key].type != JSMN_STRING || s->tok[key].size != 1)
			return;
		for (int k = 0; k < n_keys; k++)
			if (vals[k] < 0 &&
			    sl_jscan_len(s, key) == keys[k].len &&
			    memcmp(sl_jscan_text(s, key), keys[k].name,
			           keys[k].len) == 0) {
				vals[k] = key + 1;
				break;
			}
		key = sl_jscan_skip(s, key + 1);
	}
}

long sl_jscan_small_uint(const struct sl_jscan *s, int i)
{
	if (!sl_jscan_is_type(s, i, JSMN_PRIMITIVE))
		return -1;
	const char *p = sl_jscan_text(s, i);
	size_t n = sl_jscan_len(s, i);
	if (n == 0 || n > 9)
		return -1;
	long v = 0;
	for (size_t k = 0; k < n; k++) {
		if (p[k] < '0' || p[k] > '9')
			return -1;
		v = v * 10 + (p[k] - '0');
	}
	return v;
}

bool sl_jscan_number(const struct sl_jscan *s, int i, double *out)
{
	if (!sl_jscan_is_type(s, i, JSMN_PRIMITIVE))
		return false;
	size_t n = sl_jscan_len(s, i);
	const char *p = sl_jscan_text(s, i);
	/* true, false and null are primitives too; a number starts so. */
	if (n == 0 || n > SL_JSCAN_NUMBER_MAX ||
	    !(p[0] == '-' || (p[0] >= '0' && p[0] <= '9')))
		return false;
	char text[SL_JSCAN_NUMBER_MAX + 1];
	memcpy(text, p, n);
	text[n] = '\0';
	char *end;
	double v = strtod(text, &end);
	if (end != text + n || !isfinite(v))
		return false;
	*out = v;
	return true;
}

void sl_jscan_extent(const struct sl_jscan *s, int i, size_t *start,
                     size_t *end)
{
	bool quoted = s->tok[i].type == JSMN_STRING;
	*start = (size_t)s->tok[i].start - quoted;
	*end = (size_t)s->tok[i].end + quoted;
}

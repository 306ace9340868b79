/*
 * json_valid.c: whether jansson would take a JSON body, told without
 * building a document (yajl validates it, with what yajl does not check
 * as jansson does checked beside it). The relay's fast path for request
 * bodies (relay/request.c) rests on it.
 */
#include "sluice/json/json_valid.h"

#include "sluice/base/common.h"

#include <errno.h>
#include <math.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistr.h>
#include <yajl/yajl_parse.h>

/*
 * Stack room for yajl's memory while it validates one body:
 * its handle, lexer, buffers and depth stack take about 600 bytes, and the
 * lexer's buffer 2048 more (yajl's YAJL_BUF_INIT_SIZE), which it takes at
 * the end of every input, where it keeps a token that may go on.
 */
#define SL_YAJL_ARENA 4096

/* Four hex digits at p (n bytes there), or -1. */
static long hex4(const char *p, size_t n)
{
	if (n < 4)
		return -1;
	long v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
		        : c >= 'a' && c <= 'f' ? c - 'a' + 10
		        : c >= 'A' && c <= 'F' ? c - 'A' + 10
		                               : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/*
 * Whether the body's \uXXXX escapes are all ones jansson takes wherever
 * they are: no half of a surrogate pair alone (yajl does not look), and no
 * \u0000, which jansson takes in a value but refuses in a member name.
 * Escapes that are malformed answer false too: jansson's path says why.
 */
static bool escapes_ok(const char *body, size_t len)
{
	const char *end = body + len;
	for (const char *b = body;
	     (b = memchr(b, '\\', (size_t)(end - b))) != NULL;) {
		if (b + 1 == end)
			return false;
		if (b[1] != 'u') {
			/* Two bytes: an escaped backslash is passed whole. */
			b += 2;
			continue;
		}
		long v = hex4(b + 2, (size_t)(end - b - 2));
		if (v <= 0 || (v >= 0xdc00 && v <= 0xdfff))
			return false;
		b += 6;
		if (v < 0xd800 || v > 0xdbff)
			continue;
		long low = end - b >= 2 && b[0] == '\\' && b[1] == 'u'
		               ? hex4(b + 2, (size_t)(end - b - 2))
		               : -1;
		if (low < 0xdc00 || low > 0xdfff)
			return false;
		b += 6;
	}
	return true;
}

/*
 * yajl's memory for one validation, from the stack: a parse makes six
 * small allocations, all freed when it ends, and through malloc they cost
 * more than validating a chat request does. What does not fit comes from
 * malloc. Each block is preceded by its size, for realloc; free gives
 * nothing back to the arena, which lives only as long as the parse.
 */
struct yajl_arena {
	size_t used;
	_Alignas(max_align_t) unsigned char mem[SL_YAJL_ARENA];
};

#define ARENA_ALIGN _Alignof(max_align_t)

static bool in_arena(const struct yajl_arena *a, const void *p)
{
	uintptr_t at = (uintptr_t)p, base = (uintptr_t)a->mem;
	return at >= base && at < base + sizeof(a->mem);
}

static void *arena_malloc(void *ctx, size_t n)
{
	struct yajl_arena *a = ctx;
	if (n > sizeof(a->mem))
		return sl_xmalloc(n);
	size_t need =
	    ARENA_ALIGN + (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
	if (need > sizeof(a->mem) - a->used)
		return sl_xmalloc(n);
	unsigned char *block = a->mem + a->used;
	memcpy(block, &n, sizeof(n));
	a->used += need;
	return block + ARENA_ALIGN;
}

static void arena_free(void *ctx, void *p)
{
	if (!in_arena(ctx, p))
		free(p);
}

static void *arena_realloc(void *ctx, void *p, size_t n)
{
	if (!p)
		return arena_malloc(ctx, n);
	if (!in_arena(ctx, p))
		return sl_xrealloc(p, n);
	size_t old;
	memcpy(&old, (unsigned char *)p - ARENA_ALIGN, sizeof(old));
	if (n <= old)
		return p;
	void *grown = arena_malloc(ctx, n);
	memcpy(grown, p, old);
	return grown;
}

/*
 * How large a number may look before sl_json_valid() converts it to see
 * whether jansson holds it: an integer of 18 digits at most is below
 * 10^18, and int64 reaches past 9.2 * 10^18; a real whose digits before
 * the point and exponent add up to 300 at most is below 10^300, and a
 * double reaches past 10^308 (and one too small for a double is no
 * error: jansson takes it as 0). Almost every number is far smaller, so
 * the cost is a look at its characters.
 */
#define SL_INTEGER_SURE_DIGITS 18
#define SL_REAL_SURE_DIGITS 300
/* Where the exponent read stops: past any bound above. */
#define SL_EXPONENT_READ_MAX 100000

/*
 * yajl's number callback for sl_json_valid(): whether the number of n bytes
 * at p (in JSON's grammar: yajl's lexer checked it) is one jansson holds,
 * converted as jansson converts it (strtoll, strtod) where its size
 * leaves any doubt. Returning 0 stops the parse.
 */
static int number_in_range(void *ctx, const char *p, size_t n)
{
	(void)ctx;
	/* Most numbers: few characters, no exponent. It is asked of each. */
	size_t i = 0;
	if (n <= SL_INTEGER_SURE_DIGITS) {
		while (i < n && p[i] != 'e' && p[i] != 'E')
			i++;
		if (i == n)
			return 1;
	}
	i = p[0] == '-';
	size_t digits = 0;
	for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
		digits++;
	bool real = i < n; /* a fraction or an exponent follows */
	while (i < n && p[i] != 'e' && p[i] != 'E')
		i++;
	long exponent = 0;
	if (i < n) {
		bool negative = p[++i] == '-';
		if (p[i] == '-' || p[i] == '+')
			i++;
		for (; i < n && exponent < SL_EXPONENT_READ_MAX; i++)
			exponent = exponent * 10 + (p[i] - '0');
		if (negative)
			exponent = -exponent;
	}
	if (real ? (long)digits + exponent <= SL_REAL_SURE_DIGITS
	         : digits <= SL_INTEGER_SURE_DIGITS)
		return 1;
	/* NUL-terminated for the conversion: yajl's text need not be. */
	char *copy = memcpy(sl_xmalloc(n + 1), p, n);
	copy[n] = '\0';
	errno = 0;
	bool in_range;
	if (real) {
		double d = strtod(copy, NULL);
		in_range =
		    !((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE);
	} else {
		(void)strtoll(copy, NULL, 10);
		in_range = errno != ERANGE;
	}
	free(copy);
	return in_range;
}

/*
 * Whether jansson would take the body, judged by yajl, which validates it
 * without building anything, and by what yajl does not check as jansson
 * does: a \u escape of half a surrogate pair or of NUL, UTF-8 that is not
 * well-formed, or a form feed or vertical tab, which yajl takes for
 * spacing, all make it false (jansson refuses them, or takes them where
 * the scans after this cannot tell). Numbers of any size pass, as relayed
 * bodies' do; with `in_range` only those jansson holds (number_in_range).
 */
bool sl_json_valid(const char *body, size_t len, bool in_range)
{
	/* ASCII: every byte's high bit clear, read eight bytes at a time. */
	uint64_t high = 0;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, body + i, sizeof(w));
		high |= w;
	}
	for (; i < len; i++)
		high |= (unsigned char)body[i];
	/* Past ASCII: well-formed UTF-8, as jansson wants and yajl does not
	 * fully check (it takes overlong and surrogate sequences). */
	if ((high & 0x8080808080808080u) &&
	    u8_check((const uint8_t *)body, len) != NULL)
		return false;
	if (!escapes_ok(body, len))
		return false;
	/*
	 * In a string yajl refuses them, as JSON does: anywhere else it reads
	 * them as spacing. The scans that follow, which skip values sluice
	 * does not read, would not see them.
	 */
	if (memchr(body, '\f', len) || memchr(body, '\v', len))
		return false;
	static const yajl_callbacks numbers = {.yajl_number = number_in_range};
	struct yajl_arena arena;
	arena.used = 0;
	yajl_alloc_funcs funcs = {arena_malloc, arena_realloc, arena_free,
	                          &arena};
	yajl_handle h = yajl_alloc(in_range ? &numbers : NULL, &funcs, NULL);
	if (!h)
		return false;
	bool valid =
	    yajl_parse(h, (const unsigned char *)body, len) == yajl_status_ok &&
	    yajl_complete_parse(h) == yajl_status_ok;
	yajl_free(h);
	return valid;
}

/* json_scan.c: jsmn's implementation, and the walks sluice needs on top. */

/*
 * jsmn is one header: its implementation is compiled here, once, so it is
 * included before json_scan.h (which includes it for declarations only;
 * jsmn's include guard then makes that a no-op). Strict mode refuses what
 * is not JSON's shape (bare words, keys without values), which sluice relies
 * on to tell objects from garbage.
 */
#define JSMN_STRICT
#include <jsmn.h>

#include "sluice/json_scan.h"

#include "sluice/common.h"

#include <stdlib.h>
#include <string.h>

int sl_jscan_parse(struct sl_jscan *s, const char *text, size_t len,
                   unsigned max_tokens)
{
	s->text = text;
	s->len = len;
	s->tok = s->inline_tok;
	s->n = 0;
	jsmn_parser p;
	jsmn_init(&p);
	int n = jsmn_parse(&p, text, len, s->tok, SL_JSCAN_INLINE);
	if (n == JSMN_ERROR_NOMEM) {
		/* Count first, so that one allocation fits exactly. */
		jsmn_init(&p);
		n = jsmn_parse(&p, text, len, NULL, 0);
		if (n <= 0 || (unsigned)n > max_tokens)
			return SL_EINVAL;
		s->tok = sl_xmalloc(sizeof(*s->tok) * (size_t)n);
		jsmn_init(&p);
		n = jsmn_parse(&p, text, len, s->tok, (unsigned)n);
	}
	/* Nothing, an error, or a value cut short (jsmn leaves end at -1). */
	if (n <= 0 || (unsigned)n > max_tokens || s->tok[0].end < 0)
		return SL_EINVAL;
	/* One value only: trailing text other than whitespace is refused. */
	size_t end = (size_t)s->tok[0].end + (s->tok[0].type == JSMN_STRING);
	for (size_t i = end; i < len; i++)
		if (!strchr(" \t\r\n", text[i]))
			return SL_EINVAL;
	s->n = n;
	return 0;
}

void sl_jscan_free(struct sl_jscan *s)
{
	if (s->tok != s->inline_tok)
		free(s->tok);
	s->tok = s->inline_tok;
	s->n = 0;
}

int sl_jscan_skip(const struct sl_jscan *s, int i)
{
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
	int k = obj + 1;
	for (int m = 0; m < s->tok[obj].size && k + 1 < s->n; m++) {
		if (s->tok[k].type == JSMN_STRING && sl_jscan_is(s, k, key))
			return k + 1;
		k = sl_jscan_skip(s, k + 1);
	}
	return -1;
}

bool sl_jscan_is(const struct sl_jscan *s, int i, const char *literal)
{
	size_t n = strlen(literal);
	return sl_jscan_len(s, i) == n &&
	       memcmp(sl_jscan_text(s, i), literal, n) == 0;
}

void sl_jscan_extent(const struct sl_jscan *s, int i, size_t *start,
                     size_t *end)
{
	bool quoted = s->tok[i].type == JSMN_STRING;
	*start = (size_t)s->tok[i].start - quoted;
	*end = (size_t)s->tok[i].end + quoted;
}

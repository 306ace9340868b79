/* query.c: query parameters, read as llama-server reads them (query.h). */
#include "sluice/net/query.h"

#include "sluice/base/common.h"

#include <string.h>

size_t sl_query_decode(const char *s, size_t n, char *out, size_t size)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		int hi, lo;
		char c = s[i];
		if (c == '%' && i + 2 < n &&
		    (hi = sl_hex_value(s[i + 1])) >= 0 &&
		    (lo = sl_hex_value(s[i + 2])) >= 0) {
			c = (char)(hi * 16 + lo);
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (k + 1 < size)
			out[k] = c;
		k++;
	}
	if (size)
		out[k < size ? k : size - 1] = '\0';
	return k;
}

/*
 * Whether the parameter name in s (n bytes, still encoded) decodes to
 * `name`. Names are short: one that decodes longer than the buffer cannot
 * be any of sluice's.
 */
static bool name_matches(const char *s, size_t n, const char *name)
{
	char decoded[64];
	size_t len = sl_query_decode(s, n, decoded, sizeof(decoded));
	return len < sizeof(decoded) && len == strlen(name) &&
	       memcmp(decoded, name, len) == 0;
}

/* Both: rest is NULL for sl_query_get. */
static struct sl_query_param scan(const char *query, const char *name,
                                  char *value, size_t size, char **rest)
{
	struct sl_query_param found = {0};
	size_t k = 0;
	char *out = rest ? sl_xmalloc(strlen(query) + 1) : NULL;
	if (size)
		value[0] = '\0';
	for (const char *p = query; *p;) {
		size_t n = strcspn(p, "&");
		const char *eq = memchr(p, '=', n);
		size_t name_len = eq ? (size_t)(eq - p) : n;
		if (n > 0 && name_matches(p, name_len, name)) {
			found.found = true;
			size_t vn = eq ? n - name_len - 1 : 0;
			size_t len = sl_query_decode(eq ? eq + 1 : p + n, vn,
			                             value, size);
			size_t kept = len < size ? len : size ? size - 1 : 0;
			found.cut = kept < len;
			found.nul = size && strlen(value) != kept;
		} else if (out && n > 0) {
			if (k)
				out[k++] = '&';
			memcpy(out + k, p, n);
			k += n;
		}
		p += n;
		if (*p == '&')
			p++;
	}
	if (out) {
		out[k] = '\0';
		*rest = out;
	}
	return found;
}

struct sl_query_param sl_query_get(const char *query, const char *name,
                                   char *value, size_t size)
{
	return scan(query, name, value, size, NULL);
}

struct sl_query_param sl_query_take(const char *query, const char *name,
                                    char *value, size_t size, char **rest)
{
	return scan(query, name, value, size, rest);
}

/*
 * otel_syntax.c: OpenTelemetry's key=value lists and the traces URL (see
 * otel_syntax.h).
 */
#include "sluice/config/otel_syntax.h"

#include "sluice/base/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A number macro as text, for messages that quote a constant. */
#define STR_(x) #x
#define STR(x) STR_(x)

/* RFC 9110, 5.6.2: the characters of a token, such as a field name. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* [*start, *end) without the blanks around it. */
static void trim(const char **start, const char **end)
{
	while (*start < *end && is_blank(**start))
		(*start)++;
	while (*end > *start && is_blank((*end)[-1]))
		(*end)--;
}

/* The %XX-decoded copy of [p, end), or NULL when an escape is broken. */
static char *decode(const char *p, const char *end, size_t *len)
{
	char *out = sl_xmalloc((size_t)(end - p) + 1);
	size_t n = 0;
	while (p < end) {
		if (*p != '%') {
			out[n++] = *p++;
			continue;
		}
		int hi = end - p >= 3 ? sl_hex_value(p[1]) : -1;
		int lo = hi >= 0 ? sl_hex_value(p[2]) : -1;
		if (lo < 0) {
			free(out);
			return NULL;
		}
		out[n++] = (char)(hi * 16 + lo);
		p += 3;
	}
	out[n] = '\0';
	*len = n;
	return out;
}

/* One item, [p, end), into `pair`. Returns 0 or SL_EINVAL with why. */
static int parse_pair(const char *p, const char *end, bool headers,
                      unsigned index, struct sl_otel_pair *pair, char *why,
                      size_t size)
{
	const char *eq = memchr(p, '=', (size_t)(end - p));
	if (!eq) {
		snprintf(why, size, "item %u has no '=' (expected key=value)",
		         index);
		return SL_EINVAL;
	}
	const char *k = p, *k_end = eq, *v = eq + 1, *v_end = end;
	trim(&k, &k_end);
	trim(&v, &v_end);
	size_t k_len = (size_t)(k_end - k);
	if (k_len == 0 || k_len > SL_OTEL_KEY_MAX) {
		snprintf(why, size, "item %u has %s key", index,
		         k_len ? "an overlong" : "an empty");
		return SL_EINVAL;
	}
	for (size_t i = 0; i < k_len; i++) {
		unsigned char c = (unsigned char)k[i];
		if (headers ? !is_tchar(c) : (c <= 0x20 || c == 0x7f)) {
			snprintf(why, size, "item %u's key \"%.*s\" is no %s",
			         index, (int)k_len, k,
			         headers ? "header name" : "attribute key");
			return SL_EINVAL;
		}
	}
	size_t v_len = 0;
	char *value = decode(v, v_end, &v_len);
	if (!value) {
		snprintf(why, size,
		         "item %u (%.*s) has a broken %%XX escape in its value",
		         index, (int)k_len, k);
		return SL_EINVAL;
	}
	bool bad = v_len > SL_OTEL_VALUE_MAX || strlen(value) != v_len;
	for (size_t i = 0; headers && !bad && i < v_len; i++) {
		unsigned char c = (unsigned char)value[i];
		bad = (c < 0x20 && c != '\t') || c == 0x7f;
	}
	if (bad) {
		free(value);
		snprintf(why, size, "item %u (%.*s) has a value %s", index,
		         (int)k_len, k,
		         v_len > SL_OTEL_VALUE_MAX
		             ? "over " STR(SL_OTEL_VALUE_MAX) " bytes"
		             : "holding a control byte");
		return SL_EINVAL;
	}
	pair->key = sl_xasprintf("%.*s", (int)k_len, k);
	pair->value = value;
	return 0;
}

int sl_otel_pairs_parse(const char *text, bool headers,
                        struct sl_otel_pair **out, unsigned *n, char *why,
                        size_t size)
{
	*out = NULL;
	*n = 0;
	struct sl_otel_pair *pairs = NULL;
	unsigned count = 0;
	const char *p = text;
	for (unsigned index = 1; *p; index++) {
		const char *end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		const char *s = p, *e = end;
		trim(&s, &e);
		if (s == e) {
			snprintf(why, size, "item %u is empty", index);
			goto fail;
		}
		if (count == SL_OTEL_PAIRS_MAX) {
			snprintf(why, size,
			         "more than " STR(SL_OTEL_PAIRS_MAX) " items");
			goto fail;
		}
		pairs = sl_xrealloc(pairs, (count + 1) * sizeof(*pairs));
		if (parse_pair(s, e, headers, index, &pairs[count], why,
		               size) != 0)
			goto fail;
		count++;
		p = *end ? end + 1 : end;
	}
	*out = pairs;
	*n = count;
	return 0;
fail:
	sl_otel_pairs_free(pairs, count);
	return SL_EINVAL;
}

void sl_otel_pairs_free(struct sl_otel_pair *pairs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		free(pairs[i].key);
		/* A header's value may be a collector's token. */
		explicit_bzero(pairs[i].value, strlen(pairs[i].value));
		free(pairs[i].value);
	}
	free(pairs);
}

char *sl_otel_traces_url(const char *endpoint, const char *traces_endpoint)
{
	if (traces_endpoint && traces_endpoint[0])
		return sl_xstrdup(traces_endpoint);
	if (!endpoint || !endpoint[0])
		return NULL;
	size_t n = strlen(endpoint);
	while (n > 0 && endpoint[n - 1] == '/')
		n--;
	return sl_xasprintf("%.*s/v1/traces", (int)n, endpoint);
}

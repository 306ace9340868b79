/*
 * http_rules.c: the checks on a parsed request and on response field
 * values; http_rules.h says what each rule is and what it returns.
 */
#include "sluice/net/http_rules.h"

#include "sluice/base/common.h"

#include <string.h>
#include <strings.h>

/* RFC 3986's unreserved and sub-delims: what a reg-name is made of. */
static bool host_char(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') ||
	       (ch != 0 && strchr("-._~!$&'()*+,;=", ch));
}

static bool hex_digit(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') ||
	       ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f');
}

/*
 * Whether a Host value matches RFC 9110's uri-host [ ":" port ]: a
 * bracketed IP literal or a reg-name (which covers IPv4 addresses), then
 * digits after a colon. The empty value is allowed by the grammar.
 */
static bool host_value_ok(const char *v, size_t len)
{
	while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
		len--; /* trailing whitespace is not part of the value */
	size_t i = 0;
	if (len > 0 && v[0] == '[') {
		for (i = 1; i < len && v[i] != ']'; i++)
			if (!host_char((unsigned char)v[i]) && v[i] != ':')
				return false;
		if (i == len || i == 1)
			return false;
		i++;
	} else {
		for (; i < len && v[i] != ':'; i++) {
			if (v[i] == '%') {
				if (i + 2 >= len ||
				    !hex_digit((unsigned char)v[i + 1]) ||
				    !hex_digit((unsigned char)v[i + 2]))
					return false;
				i += 2;
			} else if (!host_char((unsigned char)v[i])) {
				return false;
			}
		}
	}
	if (i < len && v[i++] != ':')
		return false;
	for (; i < len; i++)
		if (v[i] < '0' || v[i] > '9')
			return false;
	return true;
}

unsigned sl_http_rule_host(const struct sl_http_header *headers, unsigned n,
                           bool http10, const char **why)
{
	const struct sl_http_header *host = NULL;
	for (unsigned i = 0; i < n; i++) {
		if (strcasecmp(headers[i].name, "Host") != 0)
			continue;
		if (host) {
			*why = "malformed HTTP request: more than one Host "
			       "header";
			return 400;
		}
		host = &headers[i];
	}
	if (!host && !http10) {
		*why = "malformed HTTP request: no Host header";
		return 400;
	}
	if (host && !host_value_ok(host->value, host->value_len)) {
		*why = "malformed HTTP request: invalid Host header";
		return 400;
	}
	return 0;
}

static bool span_is(const char *at, size_t len, const char *word)
{
	return strlen(word) == len && strncasecmp(at, word, len) == 0;
}

unsigned sl_http_rule_transfer_coding(const struct sl_http_header *headers,
                                      unsigned n, bool http10, const char **why)
{
	unsigned n_codings = 0, n_chunked = 0, chunked_at = 0;
	bool fields = false, other = false, malformed = false;
	for (unsigned i = 0; i < n; i++) {
		const struct sl_http_header *h = &headers[i];
		if (strcasecmp(h->name, "Transfer-Encoding") != 0)
			continue;
		fields = true;
		const char *p = h->value, *end = h->value + h->value_len;
		for (;;) {
			const char *comma = memchr(p, ',', (size_t)(end - p));
			const char *stop = comma ? comma : end;
			while (p < stop && (*p == ' ' || *p == '\t'))
				p++;
			const char *e = stop;
			while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
				e--;
			const char *semi = memchr(p, ';', (size_t)(e - p));
			const char *name_end = semi ? semi : e;
			while (name_end > p &&
			       (name_end[-1] == ' ' || name_end[-1] == '\t'))
				name_end--;
			n_codings++;
			if (p == e)
				malformed = true; /* an empty element */
			else if (span_is(p, (size_t)(name_end - p),
			                 "chunked")) {
				n_chunked++;
				chunked_at = n_codings;
				malformed |= semi != NULL;
			} else
				other = true;
			if (!comma)
				break;
			p = comma + 1;
		}
	}
	if (!fields)
		return 0;
	*why = "malformed HTTP request: Transfer-Encoding in an HTTP/1.0 "
	       "request";
	if (http10)
		return 400;
	*why = "malformed HTTP request: Transfer-Encoding must end in one "
	       "\"chunked\"";
	if (malformed || n_chunked != 1 || chunked_at != n_codings)
		return 400;
	*why = "transfer codings other than \"chunked\" are not supported";
	return other ? 501 : 0;
}

bool sl_http_te_trailers(const struct sl_http_header *headers, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		const struct sl_http_header *h = &headers[i];
		if (strcasecmp(h->name, "TE") != 0)
			continue;
		const char *p = h->value, *end = h->value + h->value_len;
		while (p < end) {
			while (p < end &&
			       (*p == ' ' || *p == '\t' || *p == ','))
				p++;
			const char *word = p;
			while (p < end && *p != ',' && *p != ';' && *p != ' ' &&
			       *p != '\t')
				p++;
			size_t word_len = (size_t)(p - word);
			/*
			 * The rest of the element, to a comma outside a quoted
			 * string: anything but whitespace is a parameter.
			 */
			bool params = false, quoted = false;
			for (; p < end && (quoted || *p != ','); p++) {
				if (*p != ' ' && *p != '\t')
					params = true;
				if (quoted && *p == '\\' && p + 1 < end)
					p++;
				else if (*p == '"')
					quoted = !quoted;
			}
			if (!params && span_is(word, word_len, "trailers"))
				return true;
		}
	}
	return false;
}

const char *sl_http_rule_absolute_form_path(const char *target)
{
	const char *p = target;
	if (!((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z'))
		return NULL;
	while ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')
		p++;
	while ((*p >= '0' && *p <= '9') ||
	       ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z') || *p == '+' ||
	       *p == '-' || *p == '.')
		p++;
	if (strncmp(p, "://", 3) != 0)
		return NULL;
	return p + 3 + strcspn(p + 3, "/?#");
}

bool sl_http_field_value_ok(const char *v, size_t max)
{
	size_t n = strlen(v);
	if (n > max)
		return false;
	/* Printable runs, and between them only tabs. */
	for (size_t i = sl_printable_span(v, n); i < n;
	     i += 1 + sl_printable_span(v + i + 1, n - i - 1))
		if (v[i] != '\t')
			return false;
	return true;
}

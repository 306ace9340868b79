/*
 * config_values.c: one value applied to one option: the parsers of each
 * option type (durations, sizes, addresses, URLs, keys, origins, address
 * ranges), with the error line each refusal gets.
 *
 * Every source goes through sl_config_apply(): a default, a line of the
 * file, an environment variable and a flag are checked by the same code,
 * so a value means the same wherever it is written. What a source is and
 * which one wins is config.c's business; this file sees one value at a
 * time.
 */
#include "config_impl.h"
#include "sluice/config/otel_syntax.h"

#include "sluice/base/common.h"
#include "sluice/net/client_addr.h"
#include "sluice/net/http.h"
#include "sluice/sched/sched.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static const char *const switch_on[] = {"on", "true", "yes", "1", NULL};
static const char *const switch_off[] = {"off", "false", "no", "0", NULL};

void sl_strlist_push(struct sl_strlist *l, const char *s)
{
	l->items = sl_xrealloc(l->items, (l->count + 1) * sizeof(*l->items));
	l->items[l->count++] = sl_xstrdup(s);
}

void sl_strlist_clear(struct sl_strlist *l)
{
	for (unsigned i = 0; i < l->count; i++)
		free(l->items[i]);
	free(l->items);
	l->items = NULL;
	l->count = 0;
}

/* One line into err: "NAME: message". Always returns SL_EINVAL. */
SL_PRINTF(4, 5)
int sl_config_fail(char *err, size_t size, const char *where, const char *fmt,
                   ...)
{
	int n = snprintf(err, size, "%s: ", where);
	if (n < 0 || (size_t)n >= size)
		return SL_EINVAL;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err + n, size - (size_t)n, fmt, ap);
	va_end(ap);
	sl_one_line(err, size);
	return SL_EINVAL;
}

int sl_parse_duration_ms(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno != 0 || !isfinite(v) || v < 0 || *s == '-' ||
	    *s == '+' || *s == ' ')
		return SL_EINVAL;
	if (strcmp(end, "ms") == 0)
		;
	else if (*end == '\0' || strcmp(end, "s") == 0)
		v *= 1000.0;
	else
		return SL_EINVAL;
	if (v > 1e15)
		return SL_EINVAL;
	*out = (uint64_t)llround(v);
	return 0;
}

int sl_parse_size(const char *s, uint64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return SL_EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0)
		return SL_EINVAL;
	unsigned shift = 0;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		end++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		end++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		end++;
		break;
	default: break;
	}
	if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	if (*end != '\0' || v > (UINT64_MAX >> shift))
		return SL_EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_uint(const char *s, uint64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return SL_EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end != '\0' || errno != 0)
		return SL_EINVAL;
	*out = v;
	return 0;
}

void sl_config_set_string(char **field, const char *value)
{
	free(*field);
	*field = sl_xstrdup(value);
}

/* IP:PORT, [IPv6]:PORT or :PORT; "localhost" means 127.0.0.1. */
static int parse_addr(struct sl_config *cfg, const char *value)
{
	const char *colon = strrchr(value, ':');
	if (!colon)
		return SL_EINVAL;
	uint64_t port;
	if (parse_uint(colon + 1, &port) != 0 || port > 65535)
		return SL_EINVAL;

	char host[64];
	const char *h = value;
	size_t len = (size_t)(colon - value);
	if (len > 0 && value[0] == '[') {
		if (len < 3 || value[len - 1] != ']')
			return SL_EINVAL;
		h = value + 1;
		len -= 2;
	}
	if (len >= sizeof(host))
		return SL_EINVAL;
	memcpy(host, h, len);
	host[len] = '\0';
	if (len == 0)
		strcpy(host, "0.0.0.0");
	else if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");

	struct sockaddr_in6 a6;
	struct sockaddr_in a4;
	if (uv_ip4_addr(host, 0, &a4) != 0 && uv_ip6_addr(host, 0, &a6) != 0)
		return SL_EINVAL;
	sl_config_set_string(&cfg->listen_host, host);
	cfg->listen_port = (unsigned)port;
	return 0;
}

/* An http:// or https:// URL with a host; stored without a trailing '/'. */
static int check_url(const char *value, char **normalized)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	int ok = u && curl_url_set(u, CURLUPART_URL, value, 0) == CURLUE_OK &&
	         curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	         curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	         (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0);
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	if (!ok)
		return SL_EINVAL;
	*normalized = sl_xstrdup(value);
	size_t n = strlen(*normalized);
	while (n > 0 && (*normalized)[n - 1] == '/')
		(*normalized)[--n] = '\0';
	return 0;
}

static int choice_index(const char *const *choices, const char *value)
{
	for (int i = 0; choices[i]; i++)
		if (strcmp(choices[i], value) == 0)
			return i;
	return -1;
}

/* "a, b or c" */
static void join_choices(const char *const *choices, char *buf, size_t size)
{
	buf[0] = '\0';
	for (int i = 0; choices[i]; i++) {
		const char *sep = i == 0                   ? ""
		                  : choices[i + 1] == NULL ? " or "
		                                           : ", ";
		strncat(buf, sep, size - strlen(buf) - 1);
		strncat(buf, choices[i], size - strlen(buf) - 1);
	}
}

/*
 * Whether key[0..len) can be a client key: not empty, at most
 * SL_API_KEY_MAX bytes, and nothing a header value loses or cannot hold
 * (whitespace is trimmed from header values; control bytes are refused).
 * The error never shows the key.
 */
int sl_config_check_key(const char *key, size_t len, const char *where,
                        char *err, size_t size)
{
	if (len == 0)
		return sl_config_fail(
		    err, size, where,
		    "an empty key (keys are separated by commas)");
	if (len > SL_API_KEY_MAX)
		return sl_config_fail(
		    err, size, where,
		    "a key of %zu bytes is over the %u allowed", len,
		    SL_API_KEY_MAX);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)key[i] <= 0x20 ||
		    (unsigned char)key[i] == 0x7f)
			return sl_config_fail(
			    err, size, where,
			    "a key holds a space or a control byte, "
			    "which a client cannot send in a header");
	return 0;
}

/* Calls `each` for every comma-separated item of value, trimmed. */
static int for_each_item(const char *value, const char *where, char *err,
                         size_t size,
                         int (*each)(void *, const char *, size_t, const char *,
                                     char *, size_t),
                         void *ctx)
{
	const char *p = value;
	for (;;) {
		const char *comma = strchr(p, ',');
		const char *end = comma ? comma : p + strlen(p);
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		const char *e = end;
		while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		int rc = each(ctx, p, (size_t)(e - p), where, err, size);
		if (rc != 0)
			return rc;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

void sl_config_push_span(struct sl_strlist *l, const char *s, size_t len)
{
	char *copy = sl_xmalloc(len + 1);
	memcpy(copy, s, len);
	copy[len] = '\0';
	sl_strlist_push(l, copy);
	explicit_bzero(copy, len);
	free(copy);
}

static int add_key(void *list, const char *key, size_t len, const char *where,
                   char *err, size_t size)
{
	if (sl_config_check_key(key, len, where, err, size) != 0)
		return SL_EINVAL;
	sl_config_push_span(list, key, len);
	return 0;
}

static int apply_keys(struct sl_strlist *keys, const char *value,
                      const char *where, char *err, size_t size)
{
	return for_each_item(value, where, err, size, add_key, keys);
}

/*
 * "*", "localhost", "none", or an origin as browsers send it: scheme
 * "://" host, an optional port, nothing after (a trailing "/" would never
 * match).
 */
static int add_origin(void *list, const char *origin, size_t len,
                      const char *where, char *err, size_t size)
{
	const char *sep = len > 3 ? strstr(origin, "://") : NULL;
	bool ok = (len == 1 && origin[0] == '*') ||
	          (len == 4 && strncmp(origin, "none", 4) == 0) ||
	          (len == 9 && strncmp(origin, "localhost", 9) == 0);
	if (!ok && sep && sep > origin && sep + 3 < origin + len) {
		ok = len <= SL_HTTP_ORIGIN_MAX;
		for (const char *c = sep + 3; ok && c < origin + len; c++)
			ok = *c > 0x20 && *c < 0x7f && *c != '/' && *c != '?' &&
			     *c != '#';
	}
	if (!ok)
		return sl_config_fail(
		    err, size, where,
		    "expected *, localhost, none or an origin such as "
		    "https://app.example:8443 (scheme, host and port "
		    "only), got \"%.*s\"",
		    (int)len, origin);
	sl_config_push_span(list, origin, len);
	return 0;
}

static int apply_origins(struct sl_strlist *origins, const char *value,
                         const char *where, char *err, size_t size)
{
	return for_each_item(value, where, err, size, add_origin, origins);
}

/* A URL that is not one: its password is no less secret for a typo. */
static int bad_url(const char *value, const char *where, char *err, size_t size)
{
	char *shown = sl_url_shown(value);
	sl_config_fail(err, size, where,
	               "expected an http:// or https:// URL, got \"%s\"",
	               shown);
	free(shown);
	return SL_EINVAL;
}

/* An address range, kept as written; the HTTP server parses it again. */
static int add_cidr(void *list, const char *cidr, size_t len, const char *where,
                    char *err, size_t size)
{
	struct sl_cidr c;
	if (sl_cidr_parse(cidr, len, &c) != 0)
		return sl_config_fail(
		    err, size, where,
		    "expected an IP address or a CIDR range such as "
		    "10.0.0.0/8 or fd00::/8, got \"%.*s\"",
		    (int)len, cidr);
	sl_config_push_span(list, cidr, len);
	return 0;
}

/*
 * Applies one value to one option. `where` names the source in errors (the
 * flag or the environment variable).
 */
int sl_config_apply(struct sl_config *cfg, const struct option_def *o,
                    const char *value, const char *where, char *err,
                    size_t size)
{
	void *field = (char *)cfg + o->offset;
	uint64_t n;

	switch (o->type) {
	case OPT_STRING: sl_config_set_string(field, value); return 0;
	case OPT_ADDR:
		if (parse_addr(cfg, value) != 0)
			return sl_config_fail(
			    err, size, where,
			    "expected IP:PORT, [IPv6]:PORT or :PORT, "
			    "got \"%s\"",
			    value);
		sl_config_set_string(field, value);
		return 0;
	case OPT_UINT:
		if (parse_uint(value, &n) != 0 || n < o->min || n > o->max)
			return sl_config_fail(
			    err, size, where,
			    "expected a whole number from %llu to %llu, "
			    "got \"%s\"",
			    (unsigned long long)o->min,
			    (unsigned long long)o->max, value);
		*(unsigned *)field = (unsigned)n;
		return 0;
	case OPT_AUTO_UINT:
		if (strcmp(value, "auto") == 0) {
			*(unsigned *)field = SL_SCHED_RESERVE_AUTO;
			return 0;
		}
		if (parse_uint(value, &n) != 0 || n < o->min || n > o->max)
			return sl_config_fail(
			    err, size, where,
			    "expected auto or a whole number from %llu "
			    "to %llu, got \"%s\"",
			    (unsigned long long)o->min,
			    (unsigned long long)o->max, value);
		*(unsigned *)field = (unsigned)n;
		return 0;
	case OPT_AUTO_DURATION:
		if (strcmp(value, "auto") == 0) {
			*(uint64_t *)field = SL_SCHED_WINDOW_AUTO;
			return 0;
		}
		if (sl_parse_duration_ms(value, &n) != 0 || n < o->min ||
		    n > o->max)
			return sl_config_fail(
			    err, size, where,
			    "expected auto or a duration from %gs to %gs "
			    "(seconds, or milliseconds with \"ms\"), "
			    "got \"%s\"",
			    (double)o->min / SEC, (double)o->max / SEC, value);
		*(uint64_t *)field = n;
		return 0;
	case OPT_DURATION:
		if (sl_parse_duration_ms(value, &n) != 0 || n < o->min ||
		    n > o->max)
			return sl_config_fail(
			    err, size, where,
			    "expected a duration from %gs to %gs "
			    "(seconds, or milliseconds with \"ms\"), "
			    "got \"%s\"",
			    (double)o->min / SEC, (double)o->max / SEC, value);
		*(uint64_t *)field = n;
		return 0;
	case OPT_SIZE:
		if (sl_parse_size(value, &n) != 0 || n < o->min || n > o->max)
			return sl_config_fail(
			    err, size, where,
			    "expected a size from %llu to %llu bytes "
			    "(K, M and G suffixes allowed), got \"%s\"",
			    (unsigned long long)o->min,
			    (unsigned long long)o->max, value);
		*(uint64_t *)field = n;
		return 0;
	case OPT_NUMBER: {
		char *end;
		double v = strtod(value, &end);
		if (end == value || *end != '\0' || !isfinite(v) ||
		    v < (double)o->min || v > (double)o->max)
			return sl_config_fail(
			    err, size, where,
			    "expected a number from %llu to %llu, got "
			    "\"%s\"",
			    (unsigned long long)o->min,
			    (unsigned long long)o->max, value);
		*(double *)field = v;
		return 0;
	}
	case OPT_SWITCH:
		if (choice_index(switch_on, value) >= 0)
			*(bool *)field = true;
		else if (choice_index(switch_off, value) >= 0)
			*(bool *)field = false;
		else
			return sl_config_fail(err, size, where,
			                      "expected on or off, got \"%s\"",
			                      value);
		return 0;
	case OPT_CHOICE: {
		int i = choice_index(o->choices, value);
		if (i < 0) {
			char list[128];
			join_choices(o->choices, list, sizeof(list));
			return sl_config_fail(err, size, where,
			                      "expected %s, got \"%s\"", list,
			                      value);
		}
		*(int *)field = i;
		return 0;
	}
	case OPT_URL_LIST: {
		char *url;
		if (check_url(value, &url) != 0)
			return bad_url(value, where, err, size);
		sl_strlist_push(field, url);
		free(url);
		return 0;
	}
	case OPT_ARG_LIST: sl_strlist_push(field, value); return 0;
	case OPT_KEY_LIST: return apply_keys(field, value, where, err, size);
	case OPT_SECRET:
		if (*value && sl_config_check_key(value, strlen(value), where,
		                                  err, size) != 0)
			return SL_EINVAL;
		sl_config_set_string(field, value);
		return 0;
	case OPT_ORIGIN_LIST:
		return apply_origins(field, value, where, err, size);
	case OPT_CIDR_LIST:
		return for_each_item(value, where, err, size, add_cidr, field);
	case OPT_SLO: {
		char why[200];
		if (sl_slo_classes_parse(value, field, why, sizeof(why)) != 0)
			return sl_config_fail(err, size, where, "%s", why);
		return 0;
	}
	case OPT_URL: {
		char *url;
		if (*value && check_url(value, &url) != 0)
			return bad_url(value, where, err, size);
		if (*value)
			free(url);
		/* As given: a path in it is the user's (otel_syntax.h). */
		sl_config_set_string(field, value);
		return 0;
	}
	case OPT_PAIRS:
	case OPT_HEADER_PAIRS: {
		char why[SL_OTEL_KEY_MAX + 128];
		struct sl_otel_pair *pairs;
		unsigned n_pairs;
		if (sl_otel_pairs_parse(value, o->type == OPT_HEADER_PAIRS,
		                        &pairs, &n_pairs, why,
		                        sizeof(why)) != 0)
			return sl_config_fail(err, size, where, "%s", why);
		sl_otel_pairs_free(pairs, n_pairs);
		sl_config_set_string(field, value);
		return 0;
	}
	}
	return SL_EINVAL;
}

int sl_config_is_list(const struct option_def *o)
{
	return o->type == OPT_URL_LIST || o->type == OPT_ARG_LIST ||
	       o->type == OPT_KEY_LIST || o->type == OPT_ORIGIN_LIST ||
	       o->type == OPT_CIDR_LIST;
}

/*
 * otel_syntax.h: how OpenTelemetry's list variables are written, checked
 * when the configuration is read.
 *
 * OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES (and their
 * twins, --otel-exporter-otlp-headers and --otel-resource-attributes) are
 * lists of key=value pairs separated by commas, as the W3C Baggage header
 * writes them: blanks around a key or value are dropped, and a value's
 * %XX escapes are decoded (a comma or an equals sign inside a value is
 * written %2C, %3D). The options are checked before anything runs
 * (config_values.c), and the tracer (ops/trace.h) parses the same text
 * again when it starts; the syntax lives here, below both.
 *
 * Glossary:
 *   pair   one key=value item of such a list, decoded.
 */
#ifndef SLUICE_OTEL_SYNTAX_H
#define SLUICE_OTEL_SYNTAX_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Pairs in one list at most: a collector's headers are a handful, and a
 * resource has a dozen attributes; more is a mistake, not a resource.
 */
#define SL_OTEL_PAIRS_MAX 64
/* A key, and a decoded value, in bytes at most. */
#define SL_OTEL_KEY_MAX 255
#define SL_OTEL_VALUE_MAX 4096

struct sl_otel_pair {
	char *key;   /* malloc'd, as written (trimmed) */
	char *value; /* malloc'd, decoded */
};

/*
 * Parses `text` (a list as above; "" is none) into *out, an array of *n
 * pairs the caller frees with sl_otel_pairs_free (NULL when none). With
 * `headers`, each key must be an HTTP field name (RFC 9110's token) and
 * each value free of control bytes, since they become header lines.
 * Returns 0, or SL_EINVAL with one line naming the fault in `why` (a
 * header's value is never shown: it may be a secret).
 */
int sl_otel_pairs_parse(const char *text, bool headers,
                        struct sl_otel_pair **out, unsigned *n, char *why,
                        size_t size);

void sl_otel_pairs_free(struct sl_otel_pair *pairs, unsigned n);

/*
 * Where spans are sent, from the two endpoint options: the traces
 * endpoint as given when set, else the endpoint with "/v1/traces"
 * appended (after one '/'). Malloc'd; NULL when neither is set.
 */
char *sl_otel_traces_url(const char *endpoint, const char *traces_endpoint);

#endif

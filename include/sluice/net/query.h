/*
 * query.h: the parameters of a request's query string, read as
 * llama-server reads them.
 *
 * llama-server (cpp-httplib) splits a query at '&' and each parameter at
 * its first '=', and decodes both the name and the value: "%XX" (either
 * case) is the byte XX, '+' a space, and anything else stays as it is (a
 * '%' without two hex digits after it, and "%uXXXX", which 0.7.0 no
 * longer decodes: measured). Where a name comes more than once the last
 * value counts. sluice reads the parameters that are its own (?model=,
 * ?upstream=, /metrics' ?format=) the same way, so that a name spelled
 * "%6Dodel" means to sluice what it means to llama-server.
 *
 * Pure functions: no allocation but sl_query_take's result.
 *
 * Glossary:
 *   parameter  one '&'-separated piece of the query: NAME or NAME=VALUE
 *   decoded    after "%XX" and '+' were turned into the bytes they stand
 *              for; a decoded text may hold a NUL byte ("%00")
 */
#ifndef SLUICE_QUERY_H
#define SLUICE_QUERY_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Decodes n bytes of s into out (size bytes, always NUL-terminated; what
 * does not fit is cut). Returns the decoded length, cut or not, so that a
 * NUL byte inside shows as a length past strlen(out).
 */
size_t sl_query_decode(const char *s, size_t n, char *out, size_t size);

/* What sl_query_get and sl_query_take found of one parameter. */
struct sl_query_param {
	bool found; /* the name came at least once */
	/*
	 * The last value, decoded, cut to the caller's buffer; "" for a bare
	 * name. `nul`: it holds a NUL byte, so it names nothing a C string
	 * can; `cut`: it was longer than the buffer.
	 */
	bool nul;
	bool cut;
};

/*
 * The last value of parameter `name` in `query` (without its '?') into
 * value (size bytes). Returns what was found.
 */
struct sl_query_param sl_query_get(const char *query, const char *name,
                                   char *value, size_t size);

/*
 * As sl_query_get, and *rest becomes the query without any `name`
 * parameter (malloc'd; the other parameters as they were written, in their
 * order). For parameters that are sluice's and must not go upstream.
 */
struct sl_query_param sl_query_take(const char *query, const char *name,
                                    char *value, size_t size, char **rest);

#endif

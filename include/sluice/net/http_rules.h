/*
 * http_rules.h: the checks an HTTP/1.1 request must pass once its head is
 * parsed, and the rule for field values sluice writes into a response head.
 *
 * These are the rules RFC 9110 and 9112 set on what a parsed request says,
 * as opposed to how its bytes are framed (http_frame.h): the Host field,
 * the transfer codings, the request target's absolute form. Each takes plain
 * data (the header fields as the parser collected them, a value, a target)
 * and no connection, so it is pure logic: no libuv, no llhttp. http.c calls
 * them when a request's head is complete; the unit tests call them directly.
 *
 * Glossary:
 *   field      one header field: its name as the client spelled it and its
 *              value as the parser delivered it (leading whitespace
 *              dropped, trailing whitespace possibly kept)
 *   coding     one element of a Transfer-Encoding list ("chunked", "gzip")
 *   trailers   fields after a chunked body's last chunk (RFC 9112, 7.1.2),
 *              which a client asks for with "TE: trailers"
 *   absolute   the request target form "http://host:port/path?query",
 *   form       which a server must accept (RFC 9112, 3.2.2)
 *
 * Return contract of the sl_http_rule_*() checks that judge a request: 0
 * when it passes, else the HTTP status to refuse it with, and *why set to a
 * static message for the client (never freed). *why is left alone on 0.
 */
#ifndef SLUICE_HTTP_RULES_H
#define SLUICE_HTTP_RULES_H

#include <stdbool.h>
#include <stddef.h>

struct sl_http_header {
	const char *name; /* NUL-terminated, as the client spelled it */
	const char *value;
	size_t value_len;
};

/*
 * RFC 9112, 3.2: an HTTP/1.1 request has exactly one Host field, whose
 * value is RFC 9110's uri-host [ ":" port ]; an HTTP/1.0 one (`http10`) may
 * have none. More than one, none in HTTP/1.1, or an invalid value: 400.
 */
unsigned sl_http_rule_host(const struct sl_http_header *headers, unsigned n,
                           bool http10, const char **why);

/*
 * RFC 9112, 6.1 and 6.3: a request's transfer codings must end in one
 * "chunked", the only coding sluice decodes. Over every Transfer-Encoding
 * field, in order: chunked not last, twice, with parameters, an empty
 * element or any Transfer-Encoding in HTTP/1.0 is 400 (the body's length
 * is unknown, and a proxy in front may have framed it otherwise); another
 * coding before a final chunked is 501.
 */
unsigned sl_http_rule_transfer_coding(const struct sl_http_header *headers,
                                      unsigned n, bool http10,
                                      const char **why);

/*
 * Where the path begins in an absolute-form target ("http://host:port/p"):
 * just past the authority, inside `target` (NUL-terminated). NULL for any
 * other form.
 */
const char *sl_http_rule_absolute_form_path(const char *target);

/*
 * RFC 9110, 10.1.4: whether the client accepts trailer fields in a chunked
 * answer, that is whether a TE field (over every one, in order) lists the
 * element "trailers", in any case and with no parameters. The other
 * elements are transfer codings with parameters ("deflate;q=0.5"), whose
 * quoted values may hold commas; they are skipped. sluice writes no coding
 * but chunked, so it reads nothing else from TE.
 */
bool sl_http_te_trailers(const struct sl_http_header *headers, unsigned n);

/*
 * Whether `v` (NUL-terminated) may be copied into a response head as a
 * field value: at most `max` bytes, each a VCHAR, SP or HTAB (no CR, LF or
 * other control byte, nothing from 0x7f up). For checking what an upstream
 * sends before relaying it.
 */
bool sl_http_field_value_ok(const char *v, size_t max);

#endif

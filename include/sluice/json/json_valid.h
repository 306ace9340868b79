/*
 * json_valid.h: whether jansson would take a JSON text, judged fast and
 * without building anything (json_valid.c).
 */
#ifndef SLUICE_JSON_VALID_H
#define SLUICE_JSON_VALID_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Whether jansson would take the len bytes at body: yajl validates them,
 * and what yajl does not check as jansson does (a \u escape of half a
 * surrogate pair or of NUL, UTF-8 that is not well-formed, a form feed or
 * vertical tab outside a string) makes it false. Numbers of any size
 * pass; with `in_range`, only those jansson holds.
 */
bool sl_json_valid(const char *body, size_t len, bool in_range);

#endif

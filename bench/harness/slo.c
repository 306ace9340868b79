/*
 * slo.c: SLO specs, SLO classes, their headers, refusal reasons and the
 * predictor's error (slo.h says what each is).
 */
#include "slo.h"

#include "sluice/base/common.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A piece of a spec, "ttft=500ms", at most this long: longer is no
 * duration anyone means. */
#define SLO_PIECE_MAX 64

static const char slo_forms[] = "ttft=MS, tpot=MS, e2el=MS";

/* A duration in ms: "500", "500ms" or "0.5s". */
static int millis(const char *name, const char *v, double *out, char *err,
                  size_t errlen)
{
	char *end;
	double d = strtod(v, &end);
	if (end != v && !strcmp(end, "s"))
		d *= 1000;
	else if (end == v || (*end && strcmp(end, "ms"))) {
		snprintf(err, errlen,
		         "%s: expected milliseconds (500, 500ms or 0.5s), got "
		         "\"%s\"",
		         name, v);
		return -1;
	}
	if (!isfinite(d) || d <= 0) {
		snprintf(err, errlen, "%s must be above 0, got \"%s\"", name,
		         v);
		return -1;
	}
	if (d > SLO_MAX_MS) {
		snprintf(err, errlen,
		         "%s must be at most %.0f ms (a day), got "
		         "\"%s\"",
		         name, SLO_MAX_MS, v);
		return -1;
	}
	*out = d;
	return 0;
}

/* One piece, "name=duration", len bytes at p. */
static int piece(struct slo *s, const char *p, size_t len, char *err,
                 size_t errlen)
{
	char t[SLO_PIECE_MAX + 1];
	if (len > SLO_PIECE_MAX) {
		snprintf(err, errlen, "\"%.*s...\" is over %d characters",
		         SLO_PIECE_MAX, p, SLO_PIECE_MAX);
		return -1;
	}
	memcpy(t, p, len);
	t[len] = '\0';
	const char *eq = strchr(t, '=');
	size_t name_len = eq ? (size_t)(eq - t) : 0;
	if (name_len == 4 && !strncmp(t, "ttft", 4))
		return millis("ttft", eq + 1, &s->ttft_ms, err, errlen);
	if (name_len == 4 && !strncmp(t, "tpot", 4))
		return millis("tpot", eq + 1, &s->tpot_ms, err, errlen);
	if ((name_len == 4 && !strncmp(t, "e2el", 4)) ||
	    (name_len == 3 && !strncmp(t, "e2e", 3)))
		return millis("e2el", eq + 1, &s->e2el_ms, err, errlen);
	snprintf(err, errlen, "expected ttft=, tpot= or e2el=, got \"%s\"", t);
	return -1;
}

int slo_parse(struct slo *s, const char *spec, char sep, char *err,
              size_t errlen)
{
	memset(s, 0, sizeof(*s));
	if (!*spec) {
		snprintf(err, errlen, "empty; give one or more of %s",
		         slo_forms);
		return -1;
	}
	for (const char *p = spec;;) {
		const char *end = strchr(p, sep);
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == 0) {
			snprintf(err, errlen, "\"%s\" has an empty piece",
			         spec);
			return -1;
		}
		if (piece(s, p, len, err, errlen) != 0)
			return -1;
		if (!end)
			return 0;
		p = end + 1;
	}
}

static bool name_ok(const char *name, size_t len)
{
	if (len == 0 || len >= SLO_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '-' ||
		      c == '.'))
			return false;
	}
	return true;
}

/* One class, "NAME:SPEC:SHARE", in t (which it may change). */
static int one_class(struct slo_class *c, char *t, char *err, size_t errlen)
{
	char *first = strchr(t, ':'), *last = strrchr(t, ':');
	if (!first || first == last) {
		snprintf(err, errlen, "expected NAME:SLOS:SHARE, got \"%s\"",
		         t);
		return -1;
	}
	*first = *last = '\0';
	if (!name_ok(t, strlen(t))) {
		snprintf(err, errlen,
		         "class \"%s\": a name is 1 to %d letters, digits, "
		         "'_', '-' or '.'",
		         t, SLO_NAME_MAX - 1);
		return -1;
	}
	snprintf(c->name, sizeof(c->name), "%s", t);
	char why[256];
	if (slo_parse(&c->slo, first + 1, '/', why, sizeof(why)) != 0) {
		snprintf(err, errlen, "class %s: %s", c->name, why);
		return -1;
	}
	char *end;
	c->share = strtod(last + 1, &end);
	if (end == last + 1 || *end || !(c->share > 0 && c->share <= 1)) {
		snprintf(err, errlen,
		         "class %s: the share must be a number above 0 and at "
		         "most 1, got \"%s\"",
		         c->name, last + 1);
		return -1;
	}
	return 0;
}

int slo_mix_parse(struct slo_class *classes, unsigned *n, const char *spec,
                  char *err, size_t errlen)
{
	*n = 0;
	if (!*spec) {
		snprintf(err, errlen, "empty; give NAME:SLOS:SHARE,...");
		return -1;
	}
	char *copy = sl_xstrdup(spec);
	int rc = -1;
	double total = 0;
	for (char *p = copy;;) {
		char *end = strchr(p, ',');
		if (end)
			*end = '\0';
		if (!*p) {
			snprintf(err, errlen, "\"%s\" has an empty piece",
			         spec);
			goto free_copy;
		}
		if (*n == SLO_MAX_CLASSES) {
			snprintf(err, errlen, "at most %d classes",
			         SLO_MAX_CLASSES);
			goto free_copy;
		}
		struct slo_class *c = &classes[*n];
		if (one_class(c, p, err, errlen) != 0)
			goto free_copy;
		for (unsigned i = 0; i < *n; i++)
			if (!strcmp(classes[i].name, c->name)) {
				snprintf(err, errlen, "class %s given twice",
				         c->name);
				goto free_copy;
			}
		total += c->share;
		++*n;
		if (!end)
			break;
		p = end + 1;
	}
	if (fabs(total - 1) > 1e-6) {
		snprintf(err, errlen, "the shares add up to %g, not 1", total);
		goto free_copy;
	}
	rc = 0;
free_copy:
	free(copy);
	if (rc != 0)
		*n = 0;
	return rc;
}

unsigned slo_class_draw(const struct slo_class *classes, unsigned n, double u)
{
	double acc = 0;
	for (unsigned i = 0; i + 1 < n; i++) {
		acc += classes[i].share;
		if (u < acc)
			return i;
	}
	/* The last takes what rounding leaves. */
	return n ? n - 1 : 0;
}

bool slo_any(const struct slo *s)
{
	return s->ttft_ms > 0 || s->tpot_ms > 0 || s->e2el_ms > 0;
}

long slo_header_ms(double ms)
{
	double up = ceil(ms);
	return up < 1 ? 1 : (long)up;
}

bool slo_refusal_reason(const char *body, size_t len, char *out, size_t outlen)
{
	out[0] = '\0';
	json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
	json_t *r = json_object_get(json_object_get(j, "error"), "reason");
	bool found = json_is_string(r) && json_string_length(r) > 0;
	if (found)
		snprintf(out, outlen, "%s", json_string_value(r));
	json_decref(j);
	return found;
}

bool slo_is_shed(const char *reason)
{
	return !strncmp(reason, "slo_", 4) && reason[4];
}

double slo_relative_error(double predicted_ms, double actual_ms)
{
	if (isnan(predicted_ms) || predicted_ms < 0 || !(actual_ms > 0))
		return NAN;
	return (predicted_ms - actual_ms) / actual_ms;
}

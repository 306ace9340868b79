/*
 * slo_config.c: service levels as the configuration writes them: the
 * per-class values of --slo-ttft and --slo-tpot, and the `slo:` mapping
 * that keys: and models: take (config.h).
 */
#include "sluice/config/config.h"

#include "sluice/base/common.h"
#include "sluice/config/config_file.h"

#include <stdio.h>
#include <string.h>

/* The classes as sl_priority_class() names them, in struct order. */
static const char *const class_names[SL_SLO_CLASSES] = {"batch", "normal",
                                                        "urgent"};

/* One level: a duration within [SL_SLO_MIN_MS, SL_SLO_MAX_MS]. */
static int parse_level(const char *text, uint64_t *ms)
{
	uint64_t v;
	if (sl_parse_duration_ms(text, &v) != 0 || v < SL_SLO_MIN_MS ||
	    v > SL_SLO_MAX_MS)
		return SL_EINVAL;
	*ms = v;
	return 0;
}

#define LEVEL_EXPECTED "a duration from 1ms to 3600s (\"500ms\", \"2s\", \"2\")"

int sl_slo_classes_parse(const char *text, struct sl_slo_classes *out,
                         char *why, size_t size)
{
	struct sl_slo_classes c = {{0}};
	if (strcmp(text, "none") == 0) {
		*out = c;
		return 0;
	}
	if (!strchr(text, '=')) {
		uint64_t ms;
		if (parse_level(text, &ms) != 0) {
			snprintf(why, size,
			         "expected none, " LEVEL_EXPECTED
			         " or CLASS=DURATION pieces "
			         "(urgent=500ms,normal=5s), got \"%.80s\"",
			         text);
			return SL_EINVAL;
		}
		for (unsigned i = 0; i < SL_SLO_CLASSES; i++)
			c.ms[i] = ms;
		*out = c;
		return 0;
	}
	const char *p = text;
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char piece[96];
		if (len == 0 || len >= sizeof(piece)) {
			snprintf(why, size,
			         "expected CLASS=DURATION pieces separated by "
			         "commas, got \"%.80s\"",
			         text);
			return SL_EINVAL;
		}
		memcpy(piece, p, len);
		piece[len] = '\0';
		char *eq = strchr(piece, '=');
		int cls = -1;
		if (eq) {
			*eq = '\0';
			for (unsigned i = 0; i < SL_SLO_CLASSES; i++)
				if (strcmp(piece, class_names[i]) == 0)
					cls = (int)i;
		}
		if (cls < 0) {
			snprintf(why, size,
			         "\"%.40s\": a piece is CLASS=DURATION, CLASS "
			         "one of batch, normal, urgent",
			         piece);
			return SL_EINVAL;
		}
		if (c.ms[cls]) {
			snprintf(why, size, "%s is given twice",
			         class_names[cls]);
			return SL_EINVAL;
		}
		if (parse_level(eq + 1, &c.ms[cls]) != 0) {
			snprintf(why, size,
			         "%s: expected " LEVEL_EXPECTED
			         ", got \"%.40s\"",
			         class_names[cls], eq + 1);
			return SL_EINVAL;
		}
		if (!end)
			break;
		p = end + 1;
	}
	*out = c;
	return 0;
}

/*
 * A level in seconds, as --check-config writes every duration ("0.5",
 * "2"; config_print.c): the shortest decimal that is exact to the
 * millisecond.
 */
static void join_level(struct sl_join *j, uint64_t ms)
{
	sl_join_u64(j, ms / 1000);
	unsigned frac = (unsigned)(ms % 1000);
	if (frac == 0)
		return;
	char digits[4] = {(char)('0' + frac / 100), (char)('0' + frac / 10 % 10),
	                  (char)('0' + frac % 10), '\0'};
	for (int i = 2; i > 0 && digits[i] == '0'; i--)
		digits[i] = '\0';
	sl_join_str(j, ".");
	sl_join_str(j, digits);
}

void sl_slo_classes_format(const struct sl_slo_classes *c, char *buf,
                           size_t size)
{
	struct sl_join j = {.p = buf, .cap = size};
	buf[0] = '\0';
	bool same = true, any = false;
	for (unsigned i = 0; i < SL_SLO_CLASSES; i++) {
		same = same && c->ms[i] == c->ms[0];
		any = any || c->ms[i];
	}
	if (!any) {
		sl_join_str(&j, "none");
		return;
	}
	if (same) {
		join_level(&j, c->ms[0]);
		return;
	}
	bool first = true;
	for (unsigned i = SL_SLO_CLASSES; i-- > 0;) {
		if (!c->ms[i])
			continue;
		if (!first)
			sl_join_str(&j, ",");
		first = false;
		sl_join_str(&j, class_names[i]);
		sl_join_str(&j, "=");
		join_level(&j, c->ms[i]);
	}
}

int sl_slo_read(const struct sl_config_node *n, struct sl_slo *out, char *err,
                size_t size)
{
	struct sl_slo slo = {0, 0};
	if (n->kind != SL_CONFIG_NODE_MAP)
		return sl_config_node_fail(
		    err, size, n,
		    "expected a mapping: ttft: DURATION, tpot: DURATION");
	for (unsigned i = 0; i < n->n; i++) {
		const struct sl_config_node *c = &n->child[i];
		uint64_t *level = strcmp(c->key, "ttft") == 0   ? &slo.ttft_ms
		                  : strcmp(c->key, "tpot") == 0 ? &slo.tpot_ms
		                                                : NULL;
		if (!level)
			return sl_config_node_fail(
			    err, size, c,
			    "unknown field (slo: takes ttft and tpot)");
		if (c->kind != SL_CONFIG_NODE_SCALAR ||
		    parse_level(c->text, level) != 0)
			return sl_config_node_fail(
			    err, size, c,
			    "expected " LEVEL_EXPECTED ", got %s%s%s",
			    c->text ? "\"" : "",
			    c->text ? c->text : "a list or mapping",
			    c->text ? "\"" : "");
	}
	*out = slo;
	return 0;
}

void sl_slo_print(FILE *out, const struct sl_slo *slo, unsigned indent)
{
	if (!slo->ttft_ms && !slo->tpot_ms)
		return;
	char text[64];
	struct sl_join j = SL_JOIN(text);
	sl_join_str(&j, "{");
	if (slo->ttft_ms) {
		sl_join_str(&j, "ttft: ");
		join_level(&j, slo->ttft_ms);
	}
	if (slo->tpot_ms) {
		sl_join_str(&j, slo->ttft_ms ? ", tpot: " : "tpot: ");
		join_level(&j, slo->tpot_ms);
	}
	sl_join_str(&j, "}");
	fprintf(out, "%*sslo: %s\n", (int)indent, "", text);
}

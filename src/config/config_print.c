/*
 * config_print.c: what the option layer writes: --help, from the option
 * table, and --check-config's effective configuration, one YAML line per
 * option with its source, secrets masked, then the file's sections.
 *
 * Kept apart from reading: both walk the same table, but writing a value
 * back (a duration in seconds, a size with its largest suffix,
 * a URL's password masked) is the reverse of config_values.c's parsing.
 */
#include "sluice/config/config.h"

#include "config_impl.h"
#include "sluice/base/common.h"
#include "sluice/config/config_file.h"
#include "sluice/sched/sched.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints `text` wrapped at `width` columns, each line indented by `indent`. */
static void print_wrapped(FILE *out, const char *text, int indent, int width)
{
	int col = indent;
	const char *p = text;
	fprintf(out, "%*s", indent, "");
	while (*p) {
		const char *sp = strchr(p, ' ');
		int wlen = sp ? (int)(sp - p) : (int)strlen(p);
		if (col > indent && col + 1 + wlen > width) {
			fprintf(out, "\n%*s", indent, "");
			col = indent;
		} else if (col > indent) {
			fputc(' ', out);
			col++;
		}
		fprintf(out, "%.*s", wlen, p);
		col += wlen;
		p += wlen;
		while (*p == ' ')
			p++;
	}
	fputc('\n', out);
}

void sl_config_usage(FILE *out)
{
	fprintf(
	    out,
	    "Usage: sluice [OPTION]...\n"
	    "An HTTP gateway in front of llama.cpp's llama-server: one event "
	    "loop,\nits own priority queue and micro-batches, streaming "
	    "responses.\n\n"
	    "With neither --model nor --upstream, sluice serves a small "
	    "demo model\nthat generates random text.\n\n"
	    "Options (each also read from the environment variable shown, "
	    "and from\n--config's file; a flag wins over the environment, "
	    "which wins over the file):\n");
	for (size_t i = 0; i < sl_config_n_options; i++) {
		const struct option_def *o = &sl_config_options[i];
		char head[80];
		snprintf(head, sizeof(head), "  --%s %s", o->name, o->metavar);
		fprintf(out, "%s\n", head);
		print_wrapped(out, o->help, 6, 79);
		char tail[256];
		snprintf(tail, sizeof(tail), "[%s; default: %s]", o->env,
		         (o->def && *o->def) ? o->def : o->def_help);
		print_wrapped(out, tail, 6, 79);
	}
	fprintf(out, "\nActions:\n");
	for (size_t i = 0; i < sl_config_n_actions; i++) {
		const struct action_def *a = &sl_config_actions[i];
		fprintf(out, "  --%s%s%s\n", a->name, a->metavar ? " " : "",
		        a->metavar ? a->metavar : "");
		print_wrapped(out, a->help, 6, 79);
	}
	fprintf(out,
	        "\nDurations are seconds (\"2\", \"0.5\") or milliseconds "
	        "(\"50ms\"). Sizes are bytes, or\nKiB, MiB, GiB with a K, M "
	        "or G suffix (\"16K\", \"1M\").\n");
}

/*
 * One unit for every duration printed, seconds: a whole number of them
 * bare, else with the decimals that the milliseconds need.
 */
void sl_config_write_duration(FILE *out, uint64_t ms)
{
	unsigned long long whole = ms / SEC;
	unsigned frac = (unsigned)(ms % SEC);
	if (frac == 0) {
		fprintf(out, "%llu", whole);
		return;
	}
	int digits = 3;
	for (; frac % 10 == 0; frac /= 10)
		digits--;
	fprintf(out, "%llu.%0*u", whole, digits, frac);
}

/* A size with the largest suffix that divides it ("16K", "1M"). */
static void print_size(FILE *out, uint64_t bytes)
{
	static const char suffix[] = "GMK";
	for (int i = 0; i < 3 && bytes > 0; i++) {
		uint64_t unit = (uint64_t)1 << (10 * (3 - i));
		if (bytes % unit == 0) {
			fprintf(out, "%llu%c",
			        (unsigned long long)(bytes / unit), suffix[i]);
			return;
		}
	}
	fprintf(out, "%llu", (unsigned long long)bytes);
}

/* What stands for a secret in --check-config's output. */
#define MASKED "********"

/* How print_list() writes each item. */
enum shown_as {
	SHOWN_AS_IS,
	SHOWN_MASKED, /* a secret: MASKED */
	SHOWN_URL,    /* a URL: its userinfo masked (sl_url_shown) */
};

/* A list as a YAML flow sequence; secrets masked item by item. */
static void print_list(FILE *out, const struct sl_strlist *l, enum shown_as how)
{
	fputc('[', out);
	for (unsigned i = 0; i < l->count; i++) {
		if (i > 0)
			fputs(", ", out);
		char *url = how == SHOWN_URL ? sl_url_shown(l->items[i]) : NULL;
		const char *item = l->items[i];
		if (how == SHOWN_MASKED)
			item = MASKED;
		else if (url)
			item = url;
		sl_config_file_write_scalar(out, item);
		free(url);
	}
	fputc(']', out);
}

static void print_value(FILE *out, const struct sl_config *cfg,
                        const struct option_def *o)
{
	const void *field = (const char *)cfg + o->offset;
	switch (o->type) {
	case OPT_STRING:
	case OPT_ADDR:
	case OPT_PAIRS:
		sl_config_file_write_scalar(out, *(char *const *)field);
		return;
	case OPT_URL: {
		char *shown = sl_url_shown(*(char *const *)field);
		sl_config_file_write_scalar(out, shown);
		free(shown);
		return;
	}
	case OPT_HEADER_PAIRS:
	case OPT_SECRET:
		sl_config_file_write_scalar(out, **(char *const *)field ? MASKED
		                                                        : "");
		return;
	case OPT_UINT: fprintf(out, "%u", *(const unsigned *)field); return;
	case OPT_AUTO_UINT:
		if (*(const unsigned *)field == SL_SCHED_RESERVE_AUTO)
			fputs("auto", out);
		else
			fprintf(out, "%u", *(const unsigned *)field);
		return;
	case OPT_AUTO_DURATION:
		if (*(const uint64_t *)field == SL_SCHED_WINDOW_AUTO) {
			fputs("auto", out);
			return;
		}
		sl_config_write_duration(out, *(const uint64_t *)field);
		return;
	case OPT_DURATION:
		sl_config_write_duration(out, *(const uint64_t *)field);
		return;
	case OPT_SIZE: print_size(out, *(const uint64_t *)field); return;
	case OPT_NUMBER: fprintf(out, "%g", *(const double *)field); return;
	case OPT_SWITCH:
		fputs(*(const bool *)field ? "on" : "off", out);
		return;
	case OPT_CHOICE: fputs(o->choices[*(const int *)field], out); return;
	case OPT_ORIGIN_LIST:
		/* "none" was settled into an empty list; say it as given. */
		if (((const struct sl_strlist *)field)->count == 0) {
			fputs("none", out);
			return;
		}
		print_list(out, field, SHOWN_AS_IS);
		return;
	case OPT_KEY_LIST: print_list(out, field, SHOWN_MASKED); return;
	case OPT_URL_LIST: print_list(out, field, SHOWN_URL); return;
	case OPT_ARG_LIST:
	case OPT_CIDR_LIST: print_list(out, field, SHOWN_AS_IS); return;
	case OPT_SLO: {
		char text[128];
		sl_slo_classes_format(field, text, sizeof(text));
		fputs(text, out);
		return;
	}
	}
}

void sl_config_print(const struct sl_config *cfg, FILE *out)
{
	static const char *const sources[] = {
	    [SL_CONFIG_FROM_DEFAULT] = "default",
	    [SL_CONFIG_FROM_FILE] = "file",
	    [SL_CONFIG_FROM_ENV] = "env",
	    [SL_CONFIG_FROM_FLAG] = "flag",
	};
	for (size_t i = 0; i < sl_config_n_options; i++) {
		const struct option_def *o = &sl_config_options[i];
		/*
		 * An option with no value of its own until set (--port) is
		 * a comment: what it would print, 0, means something else,
		 * and the output must read back as the same configuration.
		 */
		if (!o->def && !sl_config_is_list(o) &&
		    cfg->source[i] == SL_CONFIG_FROM_DEFAULT) {
			fprintf(out, "# %s: not set (%s)\n", o->name,
			        o->def_help);
			continue;
		}
		fprintf(out, "%s: ", o->name);
		print_value(out, cfg, o);
		fprintf(out, "  # %s\n", sources[cfg->source[i]]);
	}
	for (const struct sl_config_section *d = cfg->sections; d && d->name;
	     d++)
		d->print(out, cfg);
}

/*
 * tools.h: sluice-bench's saved reports read back: the HTML page, the
 * `report` and `compare` subcommands, and what they share.
 *
 * Everything here reads the JSON report that bench/harness/README.md
 * specifies ("The JSON report") and tolerates what a run may leave out:
 * a field absent or null is a missing figure, never an error, so a report
 * without groups, search, repetitions or Server-Timing still renders.
 *
 * Glossary:
 *   run    one element of the report's "runs": one load, one repetition.
 *   level  the runs that share a "level": the repetitions of one load.
 *   load   a level's concurrency (closed loop, "c=4") or request rate
 *          (open loop, "r=2.5/s").
 *   stat   a field over a level's runs: their mean and sample standard
 *          deviation (n - 1), or the report's own "repeats" summary.
 *
 * Numbers missing from the report are NAN inside these functions; every
 * writer prints them as "-" and every chart skips them, so no output
 * holds "NaN".
 */
#ifndef SLUICE_BENCH_TOOLS_H
#define SLUICE_BENCH_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

/*
 * Writes one self-contained HTML page for the report doc to path: inline
 * CSS and SVG, no script, no URL. Returns 0, or -1 with a one-line reason
 * in err.
 */
int sb_html_write(json_t *doc, const char *path, char *err, size_t errlen);
/* Writes page(f, arg) to path: 0, or -1 with a one-line reason in err. */
int sb_page_write(const char *path, void (*page)(FILE *, const void *),
                  const void *arg, char *err, size_t errlen);

/*
 * `sluice-bench report RUN.json [--html OUT.html]`: prints the report's
 * Markdown summary, one row a run, and writes its HTML page when asked.
 * argv[0] is "report". Returns the exit status: 0, or 2 after one line on
 * stderr when the input or the arguments are bad.
 */
int sb_report_main(int argc, char **argv);

/*
 * `sluice-bench compare A.json B.json [C.json ...] [--html OUT.html]
 * [--json OUT.json]`: the key metrics of each file side by side, level by
 * level, with each file's difference from the first in % and whether it
 * lies within the run-to-run spread. argv[0] is "compare". Returns 0, or 2
 * after one line on stderr.
 */
int sb_compare_main(int argc, char **argv);

/*
 * The figures of SLO-aware admission in runs (a report's "runs"): each
 * SLO class's table, and each run's refusals and predictor error, as
 * Markdown tables; nothing when no run has them. sb_slo_html writes the
 * page's sections for the same.
 */
void sb_slo_markdown(FILE *f, json_t *runs);
void sb_slo_html(FILE *f, json_t *runs);

/* --- Reading a report ------------------------------------------------ */

/*
 * Reads path and checks that it is a sluice-bench report (an object with
 * "tool": "sluice-bench" and a "runs" array). Returns a new reference, or
 * NULL with a one-line reason (naming path) in err.
 */
json_t *sb_report_load(const char *path, char *err, size_t errlen);

/* obj[key] as a number; NAN when obj is not an object or the field is
 * absent, null or not a number. */
double sb_num(json_t *obj, const char *key);

/* obj[key] when it is a string, else NULL. */
const char *sb_str(json_t *obj, const char *key);

enum sb_load_kind { SB_LOAD_NONE, SB_LOAD_CLOSED, SB_LOAD_OPEN };

/* A run's load: what the charts put on their x axis. */
struct sb_load {
	enum sb_load_kind kind;
	double x;      /* clients or requests/s; NAN when unknown */
	char text[48]; /* "c=4", "r=2.5/s" or "-" */
};

void sb_run_load(json_t *run, struct sb_load *load);

/* The runs of one level, in the order the report lists them. */
struct sb_level {
	long id;             /* the runs' "level" */
	struct sb_load load; /* its first run's */
	size_t first;        /* index of its first run */
	size_t n_runs;
	json_t *summary; /* the report's "repeats" metrics for this level, or
	                    NULL: see sb_levels() */
};

/*
 * The levels of doc's runs, in order of first appearance; *n is set to
 * their number. A run without a "level" is a level of its own. A level's
 * summary is doc's "repeats" metrics when doc has that one level, or the
 * element of a "repeats" array whose "level" matches; with several levels
 * and one summary, it cannot be told which level the summary describes,
 * and the figures come from the runs. Returns a malloc'd array (free it),
 * NULL when there are no runs.
 */
struct sb_level *sb_levels(json_t *doc, size_t *n);

struct sb_stat {
	double mean; /* NAN: no run of the level has the field */
	double std;  /* NAN: unknown (one run, no summary) */
	unsigned n;  /* runs that had the field */
};

/* field over level l of doc: from l's summary when it holds the field,
 * else the mean and sample standard deviation of the runs. */
struct sb_stat sb_level_stat(json_t *doc, const struct sb_level *l,
                             const char *field);

/* The figures that `compare` and the page's repetitions table show. */
struct sb_metric {
	const char *field; /* the run-level field */
	int decimals;
	bool count;    /* a count: no decimals when whole */
	bool optional; /* shown only where some run has it (SLO admission) */
};

extern const struct sb_metric sb_key_metrics[];
extern const size_t sb_n_key_metrics;

/* v with decimals, or "-" when v is not finite (or a whole count). */
void sb_fmt(char *buf, size_t len, double v, int decimals, bool count);

/* --- Writing HTML and SVG --------------------------------------------- */

/* s with &, <, >, " and ' escaped; NULL writes nothing. */
void sb_html_text(FILE *f, const char *s);

/* s for a Markdown table cell: | escaped, line breaks made spaces. */
void sb_md_text(FILE *f, const char *s);

/* The page's start (doctype, head with its CSS, the body's opening) and
 * its end. */
void sb_html_head(FILE *f, const char *title);
void sb_html_tail(FILE *f);

/*
 * One series of a chart: n points (x[i], y[i]); a point with a coordinate
 * that is not finite is skipped. Bar charts use y only, one value per
 * category, and err (NULL for none) as a +/- bar around it.
 */
struct sb_series {
	const char *name;
	const double *x, *y, *err;
	size_t n;
};

/* A dashed line across the plot at value, with its label. */
struct sb_rule {
	bool on;
	double value;
	const char *label;
};

struct sb_chart {
	const char *id; /* the <svg>'s id */
	const char *title, *x_label, *y_label;
	const struct sb_series *series;
	size_t n_series;
	struct sb_rule hline, vline;   /* line charts */
	const char *const *categories; /* bar charts: one per y index */
	size_t n_categories;
};

/* A line chart: each series' points joined in order of x, each point
 * marked, axes from zero with ticks, a legend. */
/* Whether v can be drawn: finite and of a sane magnitude. */
bool sb_plottable(double v);
void sb_svg_line_chart(FILE *f, const struct sb_chart *c);

/* Grouped bars: one group per category, one bar per series within it. */
void sb_svg_bar_chart(FILE *f, const struct sb_chart *c);

#endif

/*
 * compare.c: saved reports read back (loading, levels, a field's mean and
 * spread over a level's repetitions) and `sluice-bench compare`, which
 * sets two or more of them side by side.
 *
 * compare matches the levels of every file to the first file's by their
 * load (the same concurrency, or the same rate), shows each key metric's
 * value per file and each file's difference from the first in %, and says
 * whether that difference lies within the run-to-run spread: within noise
 * when it is no larger than twice the larger standard deviation of the
 * two files' repetitions at that level. A file that did not repeat the
 * level is taken to be as noisy as the other; when neither did, the
 * spread is unknown and the table says so rather than guess. The figures
 * of SLO-aware admission (attainment of admitted requests, refusal
 * latency, the predictor's error) are compared only where some file has
 * them.
 */
#include "tools.h"

#include "sluice/base/common.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --- Reading reports ----------------------------------------------------- */

const struct sb_metric sb_key_metrics[] = {
    {"request_throughput", 3, false, false},
    {"output_throughput", 1, false, false},
    {"request_goodput", 3, false, false},
    {"mean_ttft_ms", 1, false, false},
    {"p99_ttft_ms", 1, false, false},
    {"mean_tpot_ms", 2, false, false},
    {"p99_tpot_ms", 2, false, false},
    {"p99_e2el_ms", 1, false, false},
    {"goodput_fraction", 4, false, false},
    {"failed", 2, true, false},
    /* SLO-aware admission (issue 40): only where some file has them. */
    {"admitted_attainment", 4, false, true},
    {"median_refusal_ms", 2, false, true},
    {"median_predictor_error", 4, false, true},
    {"p90_predictor_error", 4, false, true},
};
const size_t sb_n_key_metrics =
    sizeof(sb_key_metrics) / sizeof(sb_key_metrics[0]);

double sb_num(json_t *obj, const char *key)
{
	json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
	return json_is_number(v) ? json_number_value(v) : NAN;
}

const char *sb_str(json_t *obj, const char *key)
{
	json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
	return json_is_string(v) ? json_string_value(v) : NULL;
}

void sb_fmt(char *buf, size_t len, double v, int decimals, bool count)
{
	if (!isfinite(v))
		snprintf(buf, len, "-");
	else if (count && v == floor(v))
		snprintf(buf, len, "%.0f", v);
	else
		snprintf(buf, len, "%.*f", decimals, v);
}

json_t *sb_report_load(const char *path, char *err, size_t errlen)
{
	struct stat st;
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fclose(f);
		snprintf(err, errlen, "%s: is a directory", path);
		return NULL;
	}
	json_error_t je;
	json_t *doc = json_loadf(f, 0, &je);
	fclose(f);
	if (!doc) {
		snprintf(err, errlen, "%s: not JSON: %s (line %d)", path,
		         je.text, je.line);
		return NULL;
	}
	const char *tool = sb_str(doc, "tool");
	if (!tool || strcmp(tool, "sluice-bench") != 0 ||
	    !json_is_array(json_object_get(doc, "runs"))) {
		snprintf(err, errlen,
		         "%s: not a sluice-bench report (it needs \"tool\": "
		         "\"sluice-bench\" and \"runs\")",
		         path);
		json_decref(doc);
		return NULL;
	}
	return doc;
}

void sb_run_load(json_t *run, struct sb_load *load)
{
	double clients = sb_num(run, "max_concurrency");
	json_t *rate = json_object_get(run, "request_rate");
	load->x = NAN;
	if (isfinite(clients)) {
		load->kind = SB_LOAD_CLOSED;
		load->x = clients;
		snprintf(load->text, sizeof(load->text), "c=%g", clients);
	} else if (json_is_number(rate)) {
		load->kind = SB_LOAD_OPEN;
		load->x = json_number_value(rate);
		snprintf(load->text, sizeof(load->text), "r=%g/s", load->x);
	} else if (json_is_string(rate)) {
		/* "inf": every request at once, as vllm bench serve says. */
		load->kind = SB_LOAD_OPEN;
		snprintf(load->text, sizeof(load->text), "r=%.40s",
		         json_string_value(rate));
	} else {
		load->kind = SB_LOAD_NONE;
		snprintf(load->text, sizeof(load->text), "-");
	}
}

/* A run's level; a run without one is a level of its own. */
static long run_level(json_t *run, size_t index)
{
	double level = sb_num(run, "level");
	if (isfinite(level) && level >= 0 && level < 1e9)
		return (long)level;
	return -1 - (long)index;
}

/* The report's "repeats" metrics for the levels they describe. */
static void attach_summaries(json_t *doc, struct sb_level *lv, size_t n)
{
	json_t *repeats = json_object_get(doc, "repeats"), *one;
	size_t i;
	if (json_is_object(repeats) && n == 1) {
		json_t *m = json_object_get(repeats, "metrics");
		lv[0].summary = json_is_object(m) ? m : NULL;
		return;
	}
	json_array_foreach(repeats, i, one)
	{
		json_t *m = json_object_get(one, "metrics");
		double id = sb_num(one, "level");
		for (size_t k = 0; k < n && json_is_object(m); k++) {
			if (isfinite(id) && (double)lv[k].id == id)
				lv[k].summary = m;
		}
	}
}

struct sb_level *sb_levels(json_t *doc, size_t *n)
{
	json_t *runs = json_object_get(doc, "runs"), *run;
	size_t i;
	*n = 0;
	if (!json_array_size(runs))
		return NULL;
	struct sb_level *lv = sl_xcalloc(json_array_size(runs), sizeof(*lv));
	json_array_foreach(runs, i, run)
	{
		long id = run_level(run, i);
		size_t k = 0;
		while (k < *n && lv[k].id != id)
			k++;
		if (k == *n) {
			lv[k].id = id;
			lv[k].first = i;
			sb_run_load(run, &lv[k].load);
			(*n)++;
		}
		lv[k].n_runs++;
	}
	attach_summaries(doc, lv, *n);
	return lv;
}

/* field from the report's own summary of level l, when it holds it. */
static bool summary_stat(const struct sb_level *l, const char *field,
                         struct sb_stat *st)
{
	json_t *m = l->summary ? json_object_get(l->summary, field) : NULL;
	if (!isfinite(sb_num(m, "mean")))
		return false;
	double n = sb_num(m, "n");
	st->mean = sb_num(m, "mean");
	st->std = sb_num(m, "std");
	st->n = isfinite(n) && n >= 0 && n < 1e9 ? (unsigned)n : 0;
	return true;
}

struct sb_stat sb_level_stat(json_t *doc, const struct sb_level *l,
                             const char *field)
{
	struct sb_stat st = {NAN, NAN, 0};
	json_t *runs = json_object_get(doc, "runs");
	if (!summary_stat(l, field, &st)) {
		double sum = 0, squares = 0;
		for (size_t i = l->first; i < json_array_size(runs); i++) {
			json_t *run = json_array_get(runs, i);
			double v = sb_num(run, field);
			if (run_level(run, i) == l->id && isfinite(v)) {
				sum += v;
				st.n++;
			}
		}
		if (st.n)
			st.mean = sum / st.n;
		for (size_t i = l->first; i < json_array_size(runs); i++) {
			json_t *run = json_array_get(runs, i);
			double d = sb_num(run, field) - st.mean;
			if (run_level(run, i) == l->id && isfinite(d))
				squares += d * d;
		}
		if (st.n >= 2)
			st.std = sqrt(squares / (st.n - 1));
	}
	/* One run tells nothing of the spread, whatever a summary says. */
	if (st.n < 2)
		st.std = NAN;
	return st;
}

/* --- Comparing ----------------------------------------------------------- */

struct file {
	const char *path, *name; /* name: the column's head */
	json_t *doc;
	struct sb_level *lv;
	size_t n_lv;
	bool *matched; /* per level: another file's level matched it */
};

/* One metric at one level, in one file, against the first file. */
struct cell {
	struct sb_stat st;
	double pct;          /* difference from the first file, in % */
	double spread;       /* 2 x the larger std of the two; NAN unknown */
	const char *verdict; /* NULL for the first file or a missing value */
};

/* A level of the first file and its match in each file. */
struct row {
	const struct sb_level **lv; /* per file; NULL where it has none */
	struct cell *cells;         /* [metric * n_files + file] */
};

struct comparison {
	struct file *files;
	size_t n_files;
	struct row *rows;
	size_t n_rows;
	bool *shown; /* per key metric: not optional, or some cell has it */
};

/* The level of f that matches l: the same load, or the same level number
 * when the load is unknown. */
static const struct sb_level *match_level(const struct file *f,
                                          const struct sb_level *l)
{
	for (size_t k = 0; k < f->n_lv; k++) {
		const struct sb_level *m = &f->lv[k];
		bool same =
		    l->load.kind != SB_LOAD_NONE
		        ? m->load.kind == l->load.kind &&
		              strcmp(m->load.text, l->load.text) == 0
		        : m->load.kind == SB_LOAD_NONE && m->id == l->id;
		if (same) {
			f->matched[k] = true;
			return m;
		}
	}
	return NULL;
}

static void compare_cell(const struct sb_stat *a, struct cell *c)
{
	double x = c->st.mean;
	c->pct = c->spread = NAN;
	c->verdict = NULL;
	if (!isfinite(a->mean) || !isfinite(x))
		return;
	if (a->mean != 0)
		c->pct = (x - a->mean) / a->mean * 100.0;
	else if (x == 0)
		c->pct = 0;
	/* fmax() takes the known one of a known and an unknown std. */
	double std = fmax(a->std, c->st.std);
	if (isnan(std)) {
		c->verdict = "spread unknown";
		return;
	}
	c->spread = 2 * std;
	c->verdict =
	    fabs(x - a->mean) <= c->spread ? "within noise" : "beyond noise";
}

static void compare_row(struct comparison *cmp, struct row *r)
{
	size_t nf = cmp->n_files;
	r->cells = sl_xcalloc(sb_n_key_metrics * nf, sizeof(*r->cells));
	for (size_t m = 0; m < sb_n_key_metrics; m++) {
		struct cell *cells = r->cells + m * nf;
		for (size_t i = 0; i < nf; i++) {
			cells[i].st = (struct sb_stat){NAN, NAN, 0};
			if (r->lv[i])
				cells[i].st =
				    sb_level_stat(cmp->files[i].doc, r->lv[i],
				                  sb_key_metrics[m].field);
			cells[i].pct = cells[i].spread = NAN;
			if (i > 0)
				compare_cell(&cells[0].st, &cells[i]);
		}
	}
}

/* The rows: the first file's levels that some other file has too. */
static void compare_all(struct comparison *cmp)
{
	struct file *first = &cmp->files[0];
	cmp->rows = sl_xcalloc(first->n_lv, sizeof(*cmp->rows));
	for (size_t k = 0; k < first->n_lv; k++) {
		struct row *r = &cmp->rows[cmp->n_rows];
		bool any = false;
		r->lv = sl_xcalloc(cmp->n_files, sizeof(*r->lv));
		r->lv[0] = &first->lv[k];
		for (size_t i = 1; i < cmp->n_files; i++) {
			r->lv[i] = match_level(&cmp->files[i], &first->lv[k]);
			any |= r->lv[i] != NULL;
		}
		first->matched[k] = any;
		if (!any) {
			free(r->lv);
			continue;
		}
		compare_row(cmp, r);
		cmp->n_rows++;
	}
	cmp->shown = sl_xcalloc(sb_n_key_metrics, sizeof(*cmp->shown));
	for (size_t m = 0; m < sb_n_key_metrics; m++) {
		cmp->shown[m] = !sb_key_metrics[m].optional;
		for (size_t r = 0; r < cmp->n_rows; r++)
			for (size_t i = 0; i < cmp->n_files; i++)
				cmp->shown[m] |=
				    isfinite(cmp->rows[r]
				                 .cells[m * cmp->n_files + i]
				                 .st.mean);
	}
}

/* "12.345" or "12.345 ± 0.210". */
static void value_text(char *buf, size_t len, const struct cell *c,
                       const struct sb_metric *m)
{
	char mean[64], std[64];
	sb_fmt(mean, sizeof(mean), c->st.mean, m->decimals, m->count);
	if (!isfinite(c->st.std)) {
		snprintf(buf, len, "%s", mean);
		return;
	}
	sb_fmt(std, sizeof(std), c->st.std, m->decimals, false);
	snprintf(buf, len, "%s ± %s", mean, std);
}

/* "+5.71%, within noise"; "n/a" for a change from zero. */
static void diff_text(char *buf, size_t len, const struct cell *c)
{
	if (!c->verdict)
		snprintf(buf, len, "-");
	else if (isnan(c->pct))
		snprintf(buf, len, "n/a, %s", c->verdict);
	else
		snprintf(buf, len, "%+.2f%%, %s", c->pct, c->verdict);
}

static void markdown_table(FILE *f, const struct comparison *cmp)
{
	size_t nf = cmp->n_files;
	fputs("| load | metric |", f);
	for (size_t i = 0; i < nf; i++) {
		fputc(' ', f);
		sb_md_text(f, cmp->files[i].name);
		fputs(" |", f);
	}
	for (size_t i = 1; i < nf; i++) {
		fputc(' ', f);
		sb_md_text(f, cmp->files[i].name);
		fputs(" vs ", f);
		sb_md_text(f, cmp->files[0].name);
		fputs(" |", f);
	}
	fputs("\n| --- | --- |", f);
	for (size_t i = 0; i < nf; i++)
		fputs(" ---: |", f);
	for (size_t i = 1; i < nf; i++)
		fputs(" --- |", f);
	fputc('\n', f);
	for (size_t r = 0; r < cmp->n_rows; r++) {
		for (size_t m = 0; m < sb_n_key_metrics; m++) {
			const struct cell *cells = cmp->rows[r].cells + m * nf;
			char buf[160];
			if (!cmp->shown[m])
				continue;
			fputs("| ", f);
			sb_md_text(f, cmp->rows[r].lv[0]->load.text);
			fprintf(f, " | %s |", sb_key_metrics[m].field);
			for (size_t i = 0; i < nf; i++) {
				value_text(buf, sizeof(buf), &cells[i],
				           &sb_key_metrics[m]);
				fprintf(f, " %s |", buf);
			}
			for (size_t i = 1; i < nf; i++) {
				diff_text(buf, sizeof(buf), &cells[i]);
				fprintf(f, " %s |", buf);
			}
			fputc('\n', f);
		}
	}
}

/* The levels that are not compared: the first file's that no other file
 * has, the others' that the first file lacks; a paragraph each, opened by
 * `open`, written with `text` (Markdown or HTML) and closed by `close`. */
static void unmatched_levels(FILE *f, const struct comparison *cmp,
                             void (*text)(FILE *, const char *),
                             const char *open, const char *close)
{
	for (size_t i = 0; i < cmp->n_files; i++) {
		const struct file *fi = &cmp->files[i];
		bool any = false;
		for (size_t k = 0; k < fi->n_lv; k++) {
			if (fi->matched[k])
				continue;
			if (!any) {
				fprintf(f, "%sNot compared: levels of ", open);
				text(f, fi->name);
				fputs(i ? " that " : " that no other file has:",
				      f);
				if (i) {
					text(f, cmp->files[0].name);
					fputs(" lacks:", f);
				}
			}
			fputs(any ? ", " : " ", f);
			text(f, fi->lv[k].load.text);
			any = true;
		}
		if (any)
			fputs(close, f);
	}
}

static const char noise_note[] =
    "± is one standard deviation over a level's repetitions. A "
    "difference is within noise when it is no larger than twice the "
    "larger of the two files' standard deviations (a file without "
    "repetitions is taken to be as noisy as the other); the spread is "
    "unknown when neither file repeated the level.";

static void print_markdown(FILE *f, const struct comparison *cmp)
{
	markdown_table(f, cmp);
	unmatched_levels(f, cmp, sb_md_text, "\n", "\n");
	fprintf(f, "\n%s\n", noise_note);
}

/* --- --json ------------------------------------------------------------- */

static json_t *jnum(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *json_cells(const struct comparison *cmp, const struct row *r,
                          size_t m)
{
	json_t *values = json_array(), *pct = json_array(),
	       *spread = json_array(), *verdict = json_array();
	for (size_t i = 0; i < cmp->n_files; i++) {
		const struct cell *c = &r->cells[m * cmp->n_files + i];
		json_array_append_new(values,
		                      isfinite(c->st.mean)
		                          ? json_pack("{s:o,s:o,s:I}", "mean",
		                                      jnum(c->st.mean), "std",
		                                      jnum(c->st.std), "n",
		                                      (json_int_t)c->st.n)
		                          : json_null());
		json_array_append_new(pct, jnum(c->pct));
		json_array_append_new(spread, jnum(c->spread));
		json_array_append_new(verdict, c->verdict
		                                   ? json_string(c->verdict)
		                                   : json_null());
	}
	return json_pack("{s:s,s:o,s:o,s:o,s:o}", "metric",
	                 sb_key_metrics[m].field, "values", values, "diff_pct",
	                 pct, "spread", spread, "verdict", verdict);
}

static json_t *json_comparison(const struct comparison *cmp)
{
	json_t *files = json_array(), *rows = json_array();
	for (size_t i = 0; i < cmp->n_files; i++) {
		const struct file *f = &cmp->files[i];
		json_t *label = json_object_get(f->doc, "label");
		json_t *date = json_object_get(f->doc, "date");
		json_array_append_new(
		    files,
		    json_pack("{s:s,s:s,s:O,s:O}", "path", f->path, "name",
		              f->name, "label", label ? label : json_null(),
		              "date", date ? date : json_null()));
	}
	for (size_t r = 0; r < cmp->n_rows; r++) {
		const struct row *row = &cmp->rows[r];
		json_t *levels = json_array(), *metrics = json_array();
		for (size_t i = 0; i < cmp->n_files; i++)
			json_array_append_new(
			    levels, row->lv[i] ? json_integer(row->lv[i]->id)
			                       : json_null());
		for (size_t m = 0; m < sb_n_key_metrics; m++)
			if (cmp->shown[m])
				json_array_append_new(metrics,
				                      json_cells(cmp, row, m));
		json_array_append_new(rows,
		                      json_pack("{s:s,s:o,s:o}", "load",
		                                row->lv[0]->load.text, "level",
		                                levels, "metrics", metrics));
	}
	return json_pack("{s:s,s:s,s:i,s:o,s:o}", "tool", "sluice-bench",
	                 "kind", "comparison", "version", 1, "files", files,
	                 "levels", rows);
}

static int write_json(const struct comparison *cmp, const char *path, char *err,
                      size_t errlen)
{
	json_t *doc = json_comparison(cmp);
	int rc = json_dump_file(doc, path, JSON_INDENT(1));
	json_decref(doc);
	if (rc != 0)
		snprintf(err, errlen, "%s: cannot write: %s", path,
		         strerror(errno));
	return rc ? -1 : 0;
}

/* --- --html ------------------------------------------------------------- */

static void html_files(FILE *f, const struct comparison *cmp)
{
	fputs("<table id=\"files\">\n<thead><tr><th>file</th><th>label</th>"
	      "<th>date</th><th>runs</th></tr></thead>\n<tbody>\n",
	      f);
	for (size_t i = 0; i < cmp->n_files; i++) {
		const struct file *fi = &cmp->files[i];
		fputs("<tr><td>", f);
		sb_html_text(f, fi->path);
		fputs("</td><td>", f);
		sb_html_text(f, sb_str(fi->doc, "label"));
		fputs("</td><td>", f);
		sb_html_text(f, sb_str(fi->doc, "date"));
		fprintf(f, "</td><td class=\"n\">%zu</td></tr>\n",
		        json_array_size(json_object_get(fi->doc, "runs")));
	}
	fputs("</tbody>\n</table>\n", f);
}

static void html_table(FILE *f, const struct comparison *cmp)
{
	size_t nf = cmp->n_files;
	fputs("<table id=\"comparison\">\n<thead><tr><th>load</th>"
	      "<th>metric</th>",
	      f);
	for (size_t i = 0; i < nf; i++) {
		fputs("<th>", f);
		sb_html_text(f, cmp->files[i].name);
		fputs("</th>", f);
	}
	for (size_t i = 1; i < nf; i++) {
		fputs("<th>", f);
		sb_html_text(f, cmp->files[i].name);
		fputs(" vs ", f);
		sb_html_text(f, cmp->files[0].name);
		fputs("</th>", f);
	}
	fputs("</tr></thead>\n<tbody>\n", f);
	for (size_t r = 0; r < cmp->n_rows; r++) {
		for (size_t m = 0; m < sb_n_key_metrics; m++) {
			const struct cell *cells = cmp->rows[r].cells + m * nf;
			char buf[160];
			if (!cmp->shown[m])
				continue;
			fputs("<tr><td>", f);
			sb_html_text(f, cmp->rows[r].lv[0]->load.text);
			fprintf(f, "</td><td>%s</td>", sb_key_metrics[m].field);
			for (size_t i = 0; i < nf; i++) {
				value_text(buf, sizeof(buf), &cells[i],
				           &sb_key_metrics[m]);
				fprintf(f, "<td class=\"n\">%s</td>", buf);
			}
			for (size_t i = 1; i < nf; i++) {
				diff_text(buf, sizeof(buf), &cells[i]);
				fprintf(f, "<td>%s</td>", buf);
			}
			fputs("</tr>\n", f);
		}
	}
	fputs("</tbody>\n</table>\n", f);
}

/* One metric: a group of bars per level, one bar per file, with its
 * standard deviation where known. */
static void html_metric_chart(FILE *f, const struct comparison *cmp, size_t m,
                              const char **cats)
{
	size_t nf = cmp->n_files, nr = cmp->n_rows;
	double *y = sl_xcalloc(nf * nr, sizeof(*y));
	double *err = sl_xcalloc(nf * nr, sizeof(*err));
	struct sb_series *series = sl_xcalloc(nf, sizeof(*series));
	for (size_t i = 0; i < nf; i++) {
		for (size_t r = 0; r < nr; r++) {
			const struct cell *c = &cmp->rows[r].cells[m * nf + i];
			y[i * nr + r] = c->st.mean;
			err[i * nr + r] = c->st.std;
		}
		series[i] = (struct sb_series){cmp->files[i].name, NULL,
		                               y + i * nr, err + i * nr, nr};
	}
	char id[64];
	snprintf(id, sizeof(id), "cmp-%s", sb_key_metrics[m].field);
	struct sb_chart chart = {.id = id,
	                         .title = sb_key_metrics[m].field,
	                         .x_label = "load",
	                         .y_label = sb_key_metrics[m].field,
	                         .series = series,
	                         .n_series = nf,
	                         .categories = cats,
	                         .n_categories = nr};
	sb_svg_bar_chart(f, &chart);
	free(series);
	free(err);
	free(y);
}

static void html_page(FILE *f, const struct comparison *cmp)
{
	sb_html_head(f, "sluice-bench compare");
	html_files(f, cmp);
	fputs("<h2>Key metrics</h2>\n<p>", f);
	sb_html_text(f, noise_note);
	fputs("</p>\n", f);
	html_table(f, cmp);
	unmatched_levels(f, cmp, sb_html_text, "<p>", "</p>\n");
	fputs("<h2>By metric</h2>\n<div class=\"charts\">\n", f);
	const char **cats = sl_xcalloc(cmp->n_rows, sizeof(*cats));
	for (size_t r = 0; r < cmp->n_rows; r++)
		cats[r] = cmp->rows[r].lv[0]->load.text;
	for (size_t m = 0; m < sb_n_key_metrics; m++)
		if (cmp->shown[m])
			html_metric_chart(f, cmp, m, cats);
	fputs("</div>\n", f);
	free(cats);
	sb_html_tail(f);
}

static void comparison_page(FILE *f, const void *cmp)
{
	html_page(f, cmp);
}

static int write_html(const struct comparison *cmp, const char *path, char *err,
                      size_t errlen)
{
	return sb_page_write(path, comparison_page, cmp, err, errlen);
}

/* --- sluice-bench compare ----------------------------------------------- */

static const char compare_usage[] =
    "usage: sluice-bench compare A.json B.json [C.json ...] "
    "[--html OUT.html] [--json OUT.json]";

static const char compare_help[] =
    "Sets reports that sluice-bench --json wrote side by side: for each\n"
    "level of load of the first file and each key metric, the value in\n"
    "every file (the mean over a level's repetitions, ± their standard\n"
    "deviation) and each file's difference from the first in %, within\n"
    "noise or beyond it.\n"
    "\n"
    "  --html FILE   write the comparison as a self-contained HTML page\n"
    "                to FILE (default: none)\n"
    "  --json FILE   write the comparison as JSON to FILE (default: none)\n"
    "  --help        this text\n";

static int compare_fail(const char *what, const char *arg)
{
	fprintf(stderr, "sluice-bench compare: %s%s; %s\n", what, arg,
	        compare_usage);
	return 2;
}

/* Column heads: the files' base names, or their paths when two share a
 * base name. */
static void name_files(struct file *files, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *slash = strrchr(files[i].path, '/');
		files[i].name = slash && slash[1] ? slash + 1 : files[i].path;
	}
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < n; j++) {
			if (i != j &&
			    strcmp(files[i].name, files[j].name) == 0 &&
			    strcmp(files[i].path, files[j].path) != 0)
				files[i].name = files[i].path;
		}
	}
}

static void free_comparison(struct comparison *cmp)
{
	for (size_t r = 0; r < cmp->n_rows; r++) {
		free(cmp->rows[r].lv);
		free(cmp->rows[r].cells);
	}
	free(cmp->rows);
	free(cmp->shown);
	for (size_t i = 0; i < cmp->n_files; i++) {
		free(cmp->files[i].lv);
		free(cmp->files[i].matched);
		json_decref(cmp->files[i].doc);
	}
	free(cmp->files);
}

/* Loads every file; 0, or -1 after one line on stderr. */
static int load_files(struct comparison *cmp, char **paths, size_t n)
{
	char err[512];
	cmp->files = sl_xcalloc(n, sizeof(*cmp->files));
	for (size_t i = 0; i < n; i++) {
		struct file *f = &cmp->files[i];
		f->path = paths[i];
		f->doc = sb_report_load(f->path, err, sizeof(err));
		if (!f->doc) {
			fprintf(stderr, "sluice-bench compare: %s\n", err);
			return -1;
		}
		cmp->n_files++;
		f->lv = sb_levels(f->doc, &f->n_lv);
		f->matched = sl_xcalloc(f->n_lv, sizeof(*f->matched));
	}
	name_files(cmp->files, n);
	return 0;
}

static int compare_outputs(const struct comparison *cmp, const char *html,
                           const char *json)
{
	char err[512];
	print_markdown(stdout, cmp);
	if (json && write_json(cmp, json, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice-bench compare: --json %s\n", err);
		return 2;
	}
	if (html && write_html(cmp, html, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice-bench compare: --html %s\n", err);
		return 2;
	}
	return 0;
}

int sb_compare_main(int argc, char **argv)
{
	static const struct option options[] = {
	    {"html", required_argument, NULL, 'H'},
	    {"json", required_argument, NULL, 'J'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0}};
	const char *html = NULL, *json = NULL;
	int c;
	optind = 0; /* glibc and musl: start afresh, whatever ran before */
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		switch (c) {
		case 'H': html = optarg; break;
		case 'J': json = optarg; break;
		case 'h':
			printf("%s\n\n%s", compare_usage, compare_help);
			return 0;
		case ':':
			return compare_fail("no value after ",
			                    argv[optind - 1]);
		default:
			return compare_fail("unknown option ",
			                    argv[optind - 1]);
		}
	}
	if (argc - optind < 2)
		return compare_fail("give two reports or more", "");
	struct comparison cmp = {0};
	int status = 2;
	if (load_files(&cmp, argv + optind, (size_t)(argc - optind)) == 0) {
		compare_all(&cmp);
		status = compare_outputs(&cmp, html, json);
	}
	free_comparison(&cmp);
	return status;
}

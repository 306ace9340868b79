/*
 * slo_report.c: the figures of SLO-aware admission written out from a
 * report's runs, as Markdown (the run's standard output and `sluice-bench
 * report`) and as sections of the HTML page: each SLO class's outcomes
 * and attainment, each run's refusals by kind with their latency and
 * Retry-After, and sluice's predicted time to first token against the one
 * measured. Like the rest of tools.h, it reads the JSON runs and takes a
 * field absent or null for a missing figure: a report without SLOs, or
 * from before them, writes nothing here.
 */
#include "tools.h"

#include "sluice/base/common.h"

#include <math.h>
#include <string.h>

/* A share as a percentage, "-" when unknown. */
static void percent(char *buf, size_t len, double v)
{
	if (isfinite(v))
		snprintf(buf, len, "%.1f%%", 100 * v);
	else
		snprintf(buf, len, "-");
}

/* SLOs as --slo-mix writes them: "ttft=500ms/tpot=50ms". */
static void slo_text(char *buf, size_t len, json_t *slo)
{
	static const char *const keys[][2] = {
	    {"ttft_ms", "ttft"}, {"tpot_ms", "tpot"}, {"e2el_ms", "e2el"}};
	size_t at = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < SL_ARRAY_SIZE(keys); i++) {
		double v = sb_num(slo, keys[i][0]);
		if (isfinite(v) && at < len)
			at += (size_t)snprintf(buf + at, len - at, "%s%s=%gms",
			                       at ? "/" : "", keys[i][1], v);
	}
}

/* The columns of a table: a head and the text of a cell. */
enum kind { COUNT, MS, PERCENT, RATE, TEXT };
struct col {
	const char *head, *field;
	enum kind kind;
};

static void cell_text(char *buf, size_t len, json_t *obj, const struct col *c)
{
	double v = sb_num(obj, c->field);
	switch (c->kind) {
	case COUNT: sb_fmt(buf, len, v, 0, true); break;
	case MS: sb_fmt(buf, len, v, 2, false); break;
	case PERCENT: percent(buf, len, v); break;
	case RATE: sb_fmt(buf, len, v, 2, false); break;
	case TEXT: slo_text(buf, len, json_object_get(obj, c->field)); break;
	}
}

static const struct col class_cols[] = {
    {"SLOs", "slo", TEXT},
    {"requests", "num_prompts", COUNT},
    {"served", "served", COUNT},
    {"shed", "shed", COUNT},
    {"refused", "refused", COUNT},
    {"other", "other", COUNT},
    {"attainment", "attainment", PERCENT},
    {"of admitted", "admitted_attainment", PERCENT},
    {"goodput req/s", "request_goodput", RATE},
    {"TTFT p99 ms", "p99_ttft_ms", MS},
    {"pred. error p50", "median_predictor_error", PERCENT},
    {"pred. error p90", "p90_predictor_error", PERCENT},
};

/* A run's refusals ("refusals") and prediction ("predictor"). */
static const struct col refusal_cols[] = {
    {"refusals", "count", COUNT},
    {"with Retry-After", "retry_after", COUNT},
    {"refusal p50 ms", "median_ms", MS},
    {"refusal p99 ms", "p99_ms", MS},
};
static const struct col predictor_cols[] = {
    {"predicted", "requests", COUNT},
    {"pred. error p50", "median_error", PERCENT},
    {"pred. error p90", "p90_error", PERCENT},
};

static bool any_run_has(json_t *runs, const char *field)
{
	size_t i;
	json_t *run;
	json_array_foreach(runs, i, run)
	{
		json_t *v = json_object_get(run, field);
		if (v && !json_is_null(v))
			return true;
	}
	return false;
}

/* --- Markdown ------------------------------------------------------------ */

static void md_head(FILE *f, const char *first, const char *second,
                    const struct col *a, size_t na, const struct col *b,
                    size_t nb)
{
	fprintf(f, "\n| %s |", first);
	if (second)
		fprintf(f, " %s |", second);
	for (size_t i = 0; i < na; i++)
		fprintf(f, " %s |", a[i].head);
	for (size_t i = 0; i < nb; i++)
		fprintf(f, " %s |", b[i].head);
	fputs(second ? "\n|---|---|" : "\n|---|", f);
	for (size_t i = 0; i < na + nb; i++)
		fputs(i == 0 && a[0].kind == TEXT ? "---|" : "---:|", f);
	fputc('\n', f);
}

static void md_cells(FILE *f, json_t *obj, const struct col *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char buf[128];
		cell_text(buf, sizeof(buf), obj, &c[i]);
		fputc(' ', f);
		sb_md_text(f, buf);
		fputs(" |", f);
	}
}

void sb_slo_markdown(FILE *f, json_t *runs)
{
	size_t k;
	json_t *run;
	if (any_run_has(runs, "slo_classes")) {
		md_head(f, "run", "class", class_cols,
		        SL_ARRAY_SIZE(class_cols), NULL, 0);
		json_array_foreach(runs, k, run)
		{
			const char *name;
			json_t *c;
			json_object_foreach(json_object_get(run, "slo_classes"),
			                    name, c)
			{
				fprintf(f, "| %zu | ", k);
				sb_md_text(f, name);
				fputs(" |", f);
				md_cells(f, c, class_cols,
				         SL_ARRAY_SIZE(class_cols));
				fputc('\n', f);
			}
		}
	}
	if (any_run_has(runs, "refusals") || any_run_has(runs, "predictor")) {
		md_head(f, "run", NULL, refusal_cols,
		        SL_ARRAY_SIZE(refusal_cols), predictor_cols,
		        SL_ARRAY_SIZE(predictor_cols));
		json_array_foreach(runs, k, run)
		{
			fprintf(f, "| %zu |", k);
			md_cells(f, json_object_get(run, "refusals"),
			         refusal_cols, SL_ARRAY_SIZE(refusal_cols));
			md_cells(f, json_object_get(run, "predictor"),
			         predictor_cols, SL_ARRAY_SIZE(predictor_cols));
			fputc('\n', f);
		}
	}
}

/* --- HTML ---------------------------------------------------------------- */

static void html_head(FILE *f, const char *id, const char *const *first,
                      size_t n_first, const struct col *a, size_t na,
                      const struct col *b, size_t nb)
{
	fprintf(f, "<table id=\"%s\">\n<thead><tr>", id);
	for (size_t i = 0; i < n_first; i++)
		fprintf(f, "<th>%s</th>", first[i]);
	for (size_t i = 0; i < na; i++)
		fprintf(f, "<th>%s</th>", a[i].head);
	for (size_t i = 0; i < nb; i++)
		fprintf(f, "<th>%s</th>", b[i].head);
	fputs("</tr></thead>\n<tbody>\n", f);
}

static void html_td(FILE *f, const char *text, bool number)
{
	fputs(number ? "<td class=\"n\">" : "<td>", f);
	sb_html_text(f, text);
	fputs("</td>", f);
}

static void html_cells(FILE *f, json_t *obj, const struct col *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char buf[128];
		cell_text(buf, sizeof(buf), obj, &c[i]);
		html_td(f, buf, c[i].kind != TEXT);
	}
}

/* A run among others: its index and load ("2: c=4"). */
static void run_text(char *buf, size_t len, size_t k, json_t *run)
{
	struct sb_load load;
	sb_run_load(run, &load);
	snprintf(buf, len, "%zu: %s", k, load.text);
}

static void html_classes(FILE *f, json_t *runs)
{
	static const char *const first[] = {"run", "class"};
	fputs("<h2>SLO classes</h2>\n<p>Each request is judged by its "
	      "class's SLOs. Shed: refused (429 or 503) for an SLO sluice "
	      "predicted it could not meet; refused: for another reason; "
	      "other: failed otherwise. Attainment is the share that met "
	      "their SLOs, of the requests that wanted an answer and of "
	      "those admitted (served or failed, not refused).</p>\n",
	      f);
	html_head(f, "slo-classes", first, SL_ARRAY_SIZE(first), class_cols,
	          SL_ARRAY_SIZE(class_cols), NULL, 0);
	size_t k;
	json_t *run;
	json_array_foreach(runs, k, run)
	{
		char name[96];
		run_text(name, sizeof(name), k, run);
		const char *cls;
		json_t *c;
		json_object_foreach(json_object_get(run, "slo_classes"), cls, c)
		{
			fputs("<tr>", f);
			html_td(f, name, false);
			html_td(f, cls, false);
			html_cells(f, c, class_cols, SL_ARRAY_SIZE(class_cols));
			fputs("</tr>\n", f);
		}
	}
	fputs("</tbody>\n</table>\n", f);
}

static void html_admission(FILE *f, json_t *runs)
{
	static const char *const first[] = {"run"};
	static const char *const kind_first[] = {"run", "kind"};
	fputs("<h2>Refusals and predicted time to first token</h2>\n<p>Every "
	      "refused attempt counts, from its send to the refusal's head. "
	      "The predictor's error is |predicted - actual| / actual over the "
	      "requests whose answer carried sluice's predicted TTFT "
	      "(Server-Timing <code>predicted</code>) and whose TTFT was "
	      "measured.</p>\n",
	      f);
	html_head(f, "admission", first, 1, refusal_cols,
	          SL_ARRAY_SIZE(refusal_cols), predictor_cols,
	          SL_ARRAY_SIZE(predictor_cols));
	size_t k;
	json_t *run;
	json_array_foreach(runs, k, run)
	{
		char name[96];
		run_text(name, sizeof(name), k, run);
		fputs("<tr>", f);
		html_td(f, name, false);
		html_cells(f, json_object_get(run, "refusals"), refusal_cols,
		           SL_ARRAY_SIZE(refusal_cols));
		html_cells(f, json_object_get(run, "predictor"), predictor_cols,
		           SL_ARRAY_SIZE(predictor_cols));
		fputs("</tr>\n", f);
	}
	fputs("</tbody>\n</table>\n", f);
	if (!any_run_has(runs, "refusals"))
		return;
	html_head(f, "refusal-kinds", kind_first, 2, refusal_cols,
	          SL_ARRAY_SIZE(refusal_cols), NULL, 0);
	json_array_foreach(runs, k, run)
	{
		char name[96];
		run_text(name, sizeof(name), k, run);
		const char *kind;
		json_t *x;
		json_object_foreach(
		    json_object_get(json_object_get(run, "refusals"),
		                    "by_kind"),
		    kind, x)
		{
			fputs("<tr>", f);
			html_td(f, name, false);
			html_td(f, kind, false);
			html_cells(f, x, refusal_cols,
			           SL_ARRAY_SIZE(refusal_cols));
			fputs("</tr>\n", f);
		}
	}
	fputs("</tbody>\n</table>\n", f);
}

void sb_slo_html(FILE *f, json_t *runs)
{
	if (any_run_has(runs, "slo_classes"))
		html_classes(f, runs);
	if (any_run_has(runs, "refusals") || any_run_has(runs, "predictor"))
		html_admission(f, runs);
}

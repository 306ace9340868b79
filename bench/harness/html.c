/*
 * html.c: a report made readable: the self-contained HTML page (its
 * charts are svg.c's), and `sluice-bench
 * report`, which prints a saved report's Markdown summary and writes its
 * page again.
 *
 * The page carries all it shows: inline CSS, charts drawn here as inline
 * SVG, no script and no URL, and a Content-Security-Policy that forbids
 * the browser any fetch, so it opens offline and can be mailed. Every
 * text taken from the report goes through sb_html_text(): a label is the
 * user's and may hold markup.
 */
#include "tools.h"

#include "sluice/base/common.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- Text --------------------------------------------------------------- */

static void html_char(FILE *f, char c)
{
	switch (c) {
	case '&': fputs("&amp;", f); break;
	case '<': fputs("&lt;", f); break;
	case '>': fputs("&gt;", f); break;
	case '"': fputs("&quot;", f); break;
	case '\'': fputs("&#39;", f); break;
	default: fputc(c, f);
	}
}

void sb_html_text(FILE *f, const char *s)
{
	for (; s && *s; s++)
		html_char(f, *s);
}

void sb_md_text(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '|')
			fputs("\\|", f);
		else if (*s == '\n' || *s == '\r')
			fputc(' ', f);
		else
			fputc(*s, f);
	}
}

/* Decimals that suit v's size, for tables of figures of every kind. */
static int auto_decimals(double v)
{
	double a = fabs(v);
	return a >= 1000 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
}

/* --- Tables -------------------------------------------------------------- */

static void table_open(FILE *f, const char *id, const char *const *heads,
                       size_t n)
{
	fprintf(f, "<table id=\"%s\">\n<thead><tr>", id);
	for (size_t i = 0; i < n; i++) {
		fputs("<th>", f);
		sb_html_text(f, heads[i]);
		fputs("</th>", f);
	}
	fputs("</tr></thead>\n<tbody>\n", f);
}

static void table_close(FILE *f)
{
	fputs("</tbody>\n</table>\n", f);
}

static void td_text(FILE *f, const char *s)
{
	fputs("<td>", f);
	sb_html_text(f, s);
	fputs("</td>", f);
}

static void td_num(FILE *f, double v, int decimals, bool count)
{
	char buf[64];
	sb_fmt(buf, sizeof(buf), v, decimals, count);
	fprintf(f, "<td class=\"n\">%s</td>", buf);
}

/* "mean ± std" with the decimals that suit the mean. */
static void td_mean_std(FILE *f, double mean, double std, int decimals)
{
	char m[64], s[64];
	sb_fmt(m, sizeof(m), mean, decimals, false);
	sb_fmt(s, sizeof(s), std, decimals, false);
	if (isfinite(std))
		fprintf(f, "<td class=\"n\">%s ± %s</td>", m, s);
	else
		fprintf(f, "<td class=\"n\">%s</td>", m);
}

/* --- The page ------------------------------------------------------------ */

/* clang-format off */
static const char page_css[] =
"body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;"
"padding:0 1em;color:#222}"
"h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;"
"border-bottom:1px solid #ccc}"
"pre{background:#f4f4f4;padding:.6em;white-space:pre-wrap;"
"word-break:break-all}"
"table{border-collapse:collapse;margin:.6em 0;font-size:.9em}"
"th,td{border:1px solid #ccc;padding:.2em .5em}th{background:#eee}"
"td.n{text-align:right;font-variant-numeric:tabular-nums}"
".charts{display:flex;flex-wrap:wrap;gap:0 1em}"
"svg.chart{display:block;margin:1em 0;max-width:100%;height:auto}"
"svg text{font-size:11px;fill:#222}"
"svg text.title{font-size:13px;font-weight:bold}"
"svg .axis{stroke:#333}svg .grid{stroke:#e2e2e2}"
"svg line.rule{stroke:#c00;stroke-dasharray:5 4}svg text.rule{fill:#c00}"
"svg .err{stroke:#222;fill:none}";
/* clang-format on */

void sb_html_head(FILE *f, const char *title)
{
	fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
	      "<meta charset=\"utf-8\">\n"
	      "<meta http-equiv=\"Content-Security-Policy\" "
	      "content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
	      "<meta name=\"viewport\" content=\"width=device-width\">\n"
	      "<title>",
	      f);
	sb_html_text(f, title);
	fprintf(f, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>",
	        page_css);
	sb_html_text(f, title);
	fputs("</h1>\n", f);
}

void sb_html_tail(FILE *f)
{
	fputs("<p>Written by sluice-bench.</p>\n</body>\n</html>\n", f);
}

/* A word a shell takes as it is. */
static bool shell_plain(const char *w)
{
	return *w && strspn(w, "abcdefghijklmnopqrstuvwxyz"
	                       "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	                       "-_=.,:/@%+") == strlen(w);
}

/* argv as a shell would take it back: words quoted where they need it. */
static void html_command(FILE *f, json_t *command)
{
	size_t i;
	json_t *word;
	if (json_is_string(command)) {
		sb_html_text(f, json_string_value(command));
		return;
	}
	json_array_foreach(command, i, word)
	{
		const char *w =
		    json_is_string(word) ? json_string_value(word) : "?";
		fputs(i ? " " : "", f);
		if (shell_plain(w)) {
			sb_html_text(f, w);
			continue;
		}
		html_char(f, '\'');
		for (; *w; w++) {
			if (*w == '\'')
				sb_html_text(f, "'\\''");
			else
				html_char(f, *w);
		}
		html_char(f, '\'');
	}
}

static const char *run_label(json_t *doc, json_t *run)
{
	const char *label = sb_str(run, "label");
	if (!label)
		label = sb_str(doc, "label");
	return label ? label : "";
}

static void html_intro(FILE *f, json_t *doc)
{
	const char *date = sb_str(doc, "date");
	size_t n = json_array_size(json_object_get(doc, "runs"));
	fputs("<p>", f);
	if (date) {
		fputs("Run on ", f);
		sb_html_text(f, date);
		fputs("; ", f);
	}
	fprintf(f, "%zu run%s.</p>\n", n, n == 1 ? "" : "s");
	json_t *command = json_object_get(doc, "command");
	if (json_is_array(command) || json_is_string(command)) {
		fputs("<pre class=\"command\">", f);
		html_command(f, command);
		fputs("</pre>\n", f);
	}
}

/* The columns of the runs' table, on the page and in Markdown. */
struct column {
	const char *head, *field;
	int decimals;
	bool count;
};

static const struct column run_columns[] = {
    {"completed", "completed", 0, true},
    {"failed", "failed", 0, true},
    {"req/s", "request_throughput", 2, false},
    {"output tok/s", "output_throughput", 1, false},
    {"goodput req/s", "request_goodput", 2, false},
    {"TTFT p50 ms", "median_ttft_ms", 1, false},
    {"TTFT p99 ms", "p99_ttft_ms", 1, false},
    {"TPOT p99 ms", "p99_tpot_ms", 1, false},
    {"E2E p99 ms", "p99_e2el_ms", 1, false},
};
#define N_RUN_COLUMNS SL_ARRAY_SIZE(run_columns)

static void html_runs(FILE *f, json_t *doc)
{
	const char *heads[2 + N_RUN_COLUMNS] = {"label", "load"};
	for (size_t c = 0; c < N_RUN_COLUMNS; c++)
		heads[2 + c] = run_columns[c].head;
	fputs("<h2>Runs</h2>\n", f);
	table_open(f, "runs", heads, 2 + N_RUN_COLUMNS);
	size_t i;
	json_t *run;
	json_array_foreach(json_object_get(doc, "runs"), i, run)
	{
		struct sb_load load;
		sb_run_load(run, &load);
		fputs("<tr>", f);
		td_text(f, run_label(doc, run));
		td_text(f, load.text);
		for (size_t c = 0; c < N_RUN_COLUMNS; c++)
			td_num(f, sb_num(run, run_columns[c].field),
			       run_columns[c].decimals, run_columns[c].count);
		fputs("</tr>\n", f);
	}
	table_close(f);
}

/* A curve of a chart against load: one field over the levels. */
struct curve {
	const char *name, *field;
};

/* A chart against load: its id's start, title, y axis and curves. */
struct load_chart {
	const char *id, *title, *y_label;
	struct curve curves[2];
};

static const struct load_chart load_charts[] = {
    {"ttft",
     "Time to first token",
     "ms",
     {{"p50", "median_ttft_ms"}, {"p99", "p99_ttft_ms"}}},
    {"e2el",
     "End-to-end latency",
     "ms",
     {{"p50", "median_e2el_ms"}, {"p99", "p99_e2el_ms"}}},
    {"requests",
     "Requests per second",
     "requests/s",
     {{"completed", "request_throughput"},
      {"within the SLOs", "request_goodput"}}},
    {"tokens",
     "Tokens per second",
     "tokens/s",
     {{"output", "output_throughput"},
      {"input and output", "total_token_throughput"}}},
};
#define N_CURVES SL_ARRAY_SIZE(load_charts[0].curves)

/* One chart of fields against the load of levels lv, all of one kind. */
static void load_chart(FILE *f, json_t *doc, const struct sb_level *lv,
                       size_t n_lv, const struct load_chart *lc,
                       const char *kind, const char *x_label)
{
	double *x = sl_xcalloc(n_lv, sizeof(*x));
	double *y = sl_xcalloc(n_lv * N_CURVES, sizeof(*y));
	struct sb_series series[N_CURVES];
	for (size_t c = 0; c < N_CURVES; c++) {
		for (size_t k = 0; k < n_lv; k++) {
			x[k] = lv[k].load.x;
			y[c * n_lv + k] =
			    sb_level_stat(doc, &lv[k], lc->curves[c].field)
			        .mean;
		}
		series[c] = (struct sb_series){lc->curves[c].name, x,
		                               y + c * n_lv, NULL, n_lv};
	}
	char id[64];
	snprintf(id, sizeof(id), "%s-%s", lc->id, kind);
	struct sb_chart chart = {.id = id,
	                         .title = lc->title,
	                         .x_label = x_label,
	                         .y_label = lc->y_label,
	                         .series = series,
	                         .n_series = N_CURVES};
	sb_svg_line_chart(f, &chart);
	free(y);
	free(x);
}

/* Latency and throughput against the load of the levels of one kind (a
 * report can hold a sweep of clients and a search over rates). */
static void html_load_charts(FILE *f, json_t *doc, const struct sb_level *lv,
                             size_t n_lv, enum sb_load_kind kind)
{
	struct sb_level *of = sl_xcalloc(n_lv, sizeof(*of));
	size_t n = 0;
	for (size_t k = 0; k < n_lv; k++) {
		if (lv[k].load.kind == kind && sb_plottable(lv[k].load.x))
			of[n++] = lv[k];
	}
	bool closed = kind == SB_LOAD_CLOSED;
	if (n) {
		fprintf(f, "<h2>Against %s</h2>\n<div class=\"charts\">\n",
		        closed ? "concurrency" : "request rate");
		for (size_t i = 0; i < SL_ARRAY_SIZE(load_charts); i++)
			load_chart(f, doc, of, n, &load_charts[i],
			           closed ? "concurrency" : "rate",
			           closed ? "concurrency (clients)"
			                  : "request rate (requests/s)");
		fputs("</div>\n", f);
	}
	free(of);
}

/* The SLOs in words: "TTFT at most 200 ms, TPOT at most 20 ms". */
static void html_slo(FILE *f, json_t *slo)
{
	static const char *const keys[][2] = {
	    {"ttft_ms", "TTFT"}, {"tpot_ms", "TPOT"}, {"e2el_ms", "E2E"}};
	bool any = false;
	for (size_t i = 0; i < SL_ARRAY_SIZE(keys); i++) {
		double v = sb_num(slo, keys[i][0]);
		if (!isfinite(v))
			continue;
		fprintf(f, "%s%s at most %g ms", any ? ", " : "", keys[i][1],
		        v);
		any = true;
	}
	if (!any)
		fputs("none given", f);
}

static void search_steps_table(FILE *f, json_t *steps)
{
	static const char *const heads[] = {"request rate", "goodput fraction",
	                                    "goodput req/s", "TTFT p99 ms",
	                                    "TPOT p99 ms"};
	table_open(f, "search-steps", heads, SL_ARRAY_SIZE(heads));
	size_t i;
	json_t *step;
	json_array_foreach(steps, i, step)
	{
		fputs("<tr>", f);
		td_num(f, sb_num(step, "request_rate"), 2, false);
		td_num(f, sb_num(step, "goodput_fraction"), 3, false);
		td_num(f, sb_num(step, "request_goodput"), 2, false);
		td_num(f, sb_num(step, "p99_ttft_ms"), 1, false);
		td_num(f, sb_num(step, "p99_tpot_ms"), 1, false);
		fputs("</tr>\n", f);
	}
	table_close(f);
}

static void html_search(FILE *f, json_t *search)
{
	if (!json_is_object(search))
		return;
	json_t *steps = json_object_get(search, "steps");
	size_t n = json_array_size(steps);
	double need = sb_num(search, "min_goodput_fraction");
	double best = sb_num(search, "best_rate");
	fputs("<h2>Search for the highest rate within the SLOs</h2>\n<p>SLOs: ",
	      f);
	json_t *classes = json_object_get(search, "slo_classes"), *slo;
	const char *name;
	if (json_object_size(classes)) {
		bool first = true;
		json_object_foreach(classes, name, slo)
		{
			fputs(first ? "" : "; ", f);
			sb_html_text(f, name);
			fputs(", ", f);
			html_slo(f, slo);
			first = false;
		}
	} else {
		html_slo(f, json_object_get(search, "slo"));
	}
	if (isfinite(need))
		fprintf(f, "; met by at least %g%% of the requests",
		        need * 100);
	if (isfinite(best))
		fprintf(f, ". Highest rate within them: %g requests/s.</p>\n",
		        best);
	else
		fputs(". No rate tried was within them.</p>\n", f);
	double *x = sl_xcalloc(n, sizeof(*x)), *y = sl_xcalloc(n, sizeof(*y));
	for (size_t i = 0; i < n; i++) {
		x[i] = sb_num(json_array_get(steps, i), "request_rate");
		y[i] = sb_num(json_array_get(steps, i), "goodput_fraction");
	}
	char need_label[64], best_label[64];
	snprintf(need_label, sizeof(need_label), "needed: %g", need);
	snprintf(best_label, sizeof(best_label), "best: %g req/s", best);
	struct sb_series series = {"goodput fraction", x, y, NULL, n};
	struct sb_chart chart = {
	    .id = "search",
	    .title = "Share of requests within the SLOs, by rate",
	    .x_label = "request rate (requests/s)",
	    .y_label = "goodput fraction",
	    .series = &series,
	    .n_series = 1,
	    .hline = {isfinite(need), need, need_label},
	    .vline = {isfinite(best), best, best_label}};
	sb_svg_line_chart(f, &chart);
	search_steps_table(f, steps);
	free(y);
	free(x);
}

/* A run's name among others: its load, and its repetition after the
 * first. */
static void run_name(json_t *run, char *buf, size_t len)
{
	struct sb_load load;
	sb_run_load(run, &load);
	double rep = sb_num(run, "repeat");
	if (isfinite(rep) && rep > 0)
		snprintf(buf, len, "%s #%g", load.text, rep);
	else
		snprintf(buf, len, "%s", load.text);
}

static json_t *run_tenants(json_t *run)
{
	json_t *t = json_object_get(json_object_get(run, "groups"), "tenant");
	return json_is_object(t) && json_object_size(t) ? t : NULL;
}

/* A tenant's service divided by its weight in run (1 when not given). */
static double tenant_service(json_t *run, const char *name)
{
	json_t *weights =
	    json_object_get(json_object_get(run, "fairness"), "weights");
	double w = sb_num(weights, name);
	double s =
	    sb_num(json_object_get(run_tenants(run), name), "service_tokens");
	return s / (isfinite(w) && w > 0 ? w : 1);
}

/* Every tenant named in any run, in order of first appearance. */
static json_t *tenant_names(json_t *runs)
{
	json_t *names = json_object(), *run, *g;
	size_t i;
	const char *name;
	json_array_foreach(runs, i, run)
	{
		json_object_foreach(run_tenants(run), name, g)
		{
			json_object_set_new(names, name, json_true());
		}
	}
	return names;
}

static void tenants_table(FILE *f, json_t *runs, json_t *names, char (*cat)[64])
{
	size_t n_heads = 2 + json_object_size(names), i = 0;
	const char **heads = sl_xcalloc(n_heads, sizeof(*heads));
	const char *name;
	json_t *value, *run;
	heads[0] = "run";
	heads[1] = "Jain's index";
	json_object_foreach(names, name, value)
	{
		heads[2 + i++] = name;
	}
	table_open(f, "fairness", heads, n_heads);
	size_t k = 0;
	json_array_foreach(runs, i, run)
	{
		if (!run_tenants(run))
			continue;
		fputs("<tr>", f);
		td_text(f, cat[k++]);
		td_num(f,
		       sb_num(json_object_get(run, "fairness"), "jain_index"),
		       3, false);
		json_object_foreach(names, name, value)
		{
			td_num(f, tenant_service(run, name), 0, false);
		}
		fputs("</tr>\n", f);
	}
	table_close(f);
	free(heads);
}

static void tenants_chart(FILE *f, json_t *runs, json_t *names, char (*cat)[64],
                          size_t n_cat)
{
	size_t n_names = json_object_size(names), s = 0, i;
	double *y = sl_xcalloc(n_names * n_cat, sizeof(*y));
	struct sb_series *series = sl_xcalloc(n_names, sizeof(*series));
	const char **cats = sl_xcalloc(n_cat, sizeof(*cats));
	const char *name;
	json_t *value, *run;
	json_object_foreach(names, name, value)
	{
		size_t k = 0;
		json_array_foreach(runs, i, run)
		{
			if (run_tenants(run))
				y[s * n_cat + k++] = tenant_service(run, name);
		}
		series[s] =
		    (struct sb_series){name, NULL, y + s * n_cat, NULL, n_cat};
		s++;
	}
	for (size_t k = 0; k < n_cat; k++)
		cats[k] = cat[k];
	struct sb_chart chart = {.id = "tenants",
	                         .title = "Service per unit of weight",
	                         .x_label = "run",
	                         .y_label = "tokens served / weight",
	                         .series = series,
	                         .n_series = n_names,
	                         .categories = cats,
	                         .n_categories = n_cat};
	sb_svg_bar_chart(f, &chart);
	free(cats);
	free(series);
	free(y);
}

/* Each tenant's service over its weight, run by run, and the runs'
 * Jain's index over those: 1 when every tenant got its share. */
static void html_tenants(FILE *f, json_t *doc)
{
	json_t *runs = json_object_get(doc, "runs"), *run;
	size_t n = 0, i;
	char(*cat)[64] = sl_xcalloc(json_array_size(runs), sizeof(*cat));
	json_array_foreach(runs, i, run)
	{
		if (run_tenants(run))
			run_name(run, cat[n++], sizeof(*cat));
	}
	if (n) {
		json_t *names = tenant_names(runs);
		fputs("<h2>Tenants</h2>\n<p>Tokens served (input and output) "
		      "divided by each tenant's weight; Jain's index over "
		      "them is 1 when every tenant got its share.</p>\n",
		      f);
		tenants_chart(f, runs, names, cat, n);
		tenants_table(f, runs, names, cat);
		json_decref(names);
	}
	free(cat);
}

static const char *const outcome_keys[] = {
    "2xx",  "429",         "503",     "other",
    "left", "retry_after", "retried", "retried_ok"};

static void outcome_row(FILE *f, const char *run, const char *priority,
                        json_t *o)
{
	fputs("<tr>", f);
	td_text(f, run);
	td_text(f, priority);
	for (size_t i = 0; i < SL_ARRAY_SIZE(outcome_keys); i++)
		td_num(f, sb_num(o, outcome_keys[i]), 0, true);
	fputs("</tr>\n", f);
}

/* Admission outcomes by priority, "all" first. */
static void html_outcomes(FILE *f, json_t *runs)
{
	static const char *const heads[] = {
	    "run",   "priority", "2xx",         "429",     "503",
	    "other", "left",     "Retry-After", "retried", "retried, then 2xx"};
	size_t i;
	json_t *run, *o;
	const char *priority;
	bool any = false;
	json_array_foreach(runs, i, run)
	{
		json_t *outcomes = json_object_get(run, "outcomes");
		if (!json_is_object(outcomes) || !json_object_size(outcomes))
			continue;
		if (!any) {
			fputs("<h2>Outcomes by priority</h2>\n", f);
			table_open(f, "outcomes", heads, SL_ARRAY_SIZE(heads));
			any = true;
		}
		char name[64];
		run_name(run, name, sizeof(name));
		if (json_object_get(outcomes, "all"))
			outcome_row(f, name, "all",
			            json_object_get(outcomes, "all"));
		json_object_foreach(outcomes, priority, o)
		{
			if (strcmp(priority, "all") != 0)
				outcome_row(f, name, priority, o);
		}
	}
	if (any)
		table_close(f);
}

/* Time in sluice's queue apart from time upstream, from its
 * Server-Timing header. */
static void html_server_timing(FILE *f, json_t *runs)
{
	static const char *const heads[] = {
	    "run",           "queue mean",   "queue p50",    "queue p99",
	    "upstream mean", "upstream p50", "upstream p99", "TTFT mean",
	    "TTFT p50",      "TTFT p99"};
	static const char *const parts[] = {"queue", "upstream", "ttft"};
	static const char *const stats[] = {"mean", "p50", "p99"};
	size_t i;
	json_t *run;
	bool any = false;
	fputs("<h2>Time in sluice's queue and upstream (ms)</h2>\n", f);
	json_array_foreach(runs, i, run)
	{
		json_t *st = json_object_get(run, "server_timing");
		if (!json_is_object(st))
			continue;
		if (!any)
			table_open(f, "server-timing", heads,
			           SL_ARRAY_SIZE(heads));
		any = true;
		char name[64];
		run_name(run, name, sizeof(name));
		fputs("<tr>", f);
		td_text(f, name);
		for (size_t p = 0; p < SL_ARRAY_SIZE(parts); p++) {
			json_t *part = json_object_get(st, parts[p]);
			for (size_t s = 0; s < SL_ARRAY_SIZE(stats); s++)
				td_num(f, sb_num(part, stats[s]), 1, false);
		}
		fputs("</tr>\n", f);
	}
	if (any)
		table_close(f);
	else
		fputs("<p>No Server-Timing in the answers: the runs went to "
		      "llama-server alone, or to a sluice that does not send "
		      "it.</p>\n",
		      f);
}

static void scrape_rows(FILE *f, const char *run, const char *source,
                        json_t *metrics)
{
	const char *metric;
	json_t *m;
	json_object_foreach(metrics, metric, m)
	{
		fputs("<tr>", f);
		td_text(f, run);
		td_text(f, source);
		td_text(f, metric);
		td_num(f, sb_num(m, "min"), auto_decimals(sb_num(m, "max")),
		       true);
		td_num(f, sb_num(m, "mean"), auto_decimals(sb_num(m, "mean")),
		       false);
		td_num(f, sb_num(m, "max"), auto_decimals(sb_num(m, "max")),
		       true);
		fputs("</tr>\n", f);
	}
}

/* /metrics of sluice and of llama-server, sampled during each run. */
static void html_scrape(FILE *f, json_t *runs)
{
	static const char *const heads[] = {"run", "from", "metric",
	                                    "min", "mean", "max"};
	size_t i;
	json_t *run, *metrics;
	const char *source;
	bool any = false;
	json_array_foreach(runs, i, run)
	{
		json_t *scrape = json_object_get(run, "scrape");
		if (!json_is_object(scrape) || !json_object_size(scrape))
			continue;
		if (!any) {
			fputs("<h2>Scraped during the runs</h2>\n", f);
			table_open(f, "scrape", heads, SL_ARRAY_SIZE(heads));
			any = true;
		}
		char name[64];
		run_name(run, name, sizeof(name));
		json_object_foreach(scrape, source, metrics)
		{
			scrape_rows(f, name, source, metrics);
		}
	}
	if (any)
		table_close(f);
}

/* The key figures of each repeated level: mean ± std, and CV. */
static void repeats_levels(FILE *f, json_t *doc, const struct sb_level *lv,
                           size_t n_lv)
{
	static const char *const heads[] = {"level", "metric", "mean ± std",
	                                    "CV", "runs"};
	table_open(f, "repeats", heads, SL_ARRAY_SIZE(heads));
	for (size_t k = 0; k < n_lv; k++) {
		if (lv[k].n_runs < 2 && !lv[k].summary)
			continue;
		for (size_t m = 0; m < sb_n_key_metrics; m++) {
			const struct sb_metric *km = &sb_key_metrics[m];
			struct sb_stat st =
			    sb_level_stat(doc, &lv[k], km->field);
			if (km->optional && isnan(st.mean))
				continue;
			fputs("<tr>", f);
			td_text(f, lv[k].load.text);
			td_text(f, km->field);
			td_mean_std(f, st.mean, st.std, km->decimals);
			td_num(f, st.mean != 0 ? st.std / fabs(st.mean) : NAN,
			       3, false);
			td_num(f, st.n, 0, true);
			fputs("</tr>\n", f);
		}
	}
	table_close(f);
}

/* The report's own "repeats" summary, as it stands. */
static void repeats_summary(FILE *f, json_t *repeats)
{
	static const char *const heads[] = {"field", "mean ± std", "CV", "n"};
	json_t *metrics = json_object_get(repeats, "metrics"), *m;
	const char *field;
	if (!json_is_object(metrics) || !json_object_size(metrics))
		return;
	fputs("<p>The report's own summary over its repetitions:</p>\n", f);
	table_open(f, "repeats-summary", heads, SL_ARRAY_SIZE(heads));
	json_object_foreach(metrics, field, m)
	{
		double mean = sb_num(m, "mean");
		fputs("<tr>", f);
		td_text(f, field);
		td_mean_std(f, mean, sb_num(m, "std"), auto_decimals(mean));
		td_num(f, sb_num(m, "cv"), 3, false);
		td_num(f, sb_num(m, "n"), 0, true);
		fputs("</tr>\n", f);
	}
	table_close(f);
}

static void html_repeats(FILE *f, json_t *doc, const struct sb_level *lv,
                         size_t n_lv)
{
	bool repeated = false;
	for (size_t k = 0; k < n_lv; k++)
		repeated |= lv[k].n_runs > 1 || lv[k].summary;
	json_t *repeats = json_object_get(doc, "repeats");
	if (!repeated && !json_is_object(repeats))
		return;
	fputs("<h2>Repetitions</h2>\n<p>Mean ± standard deviation over the "
	      "runs of each level; CV is their ratio.</p>\n",
	      f);
	if (repeated)
		repeats_levels(f, doc, lv, n_lv);
	repeats_summary(f, repeats);
}

static void html_page(FILE *f, json_t *doc)
{
	const char *label = sb_str(doc, "label");
	size_t len = strlen(label ? label : "") + 32;
	char *title = sl_xcalloc(len, 1);
	snprintf(title, len, "sluice-bench%s%s", label && *label ? ": " : "",
	         label ? label : "");
	sb_html_head(f, title);
	free(title);
	html_intro(f, doc);
	html_runs(f, doc);
	size_t n_lv;
	struct sb_level *lv = sb_levels(doc, &n_lv);
	html_load_charts(f, doc, lv, n_lv, SB_LOAD_CLOSED);
	html_load_charts(f, doc, lv, n_lv, SB_LOAD_OPEN);
	html_search(f, json_object_get(doc, "search"));
	html_tenants(f, doc);
	json_t *runs = json_object_get(doc, "runs");
	html_outcomes(f, runs);
	sb_slo_html(f, runs);
	if (json_array_size(runs))
		html_server_timing(f, runs);
	html_scrape(f, runs);
	html_repeats(f, doc, lv, n_lv);
	free(lv);
	sb_html_tail(f);
}

int sb_page_write(const char *path, void (*page)(FILE *, const void *),
                  const void *arg, char *err, size_t errlen)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	page(f, arg);
	bool failed = ferror(f);
	if (fclose(f) != 0 || failed) {
		snprintf(err, errlen, "%s: cannot write: %s", path,
		         strerror(errno));
		return -1;
	}
	return 0;
}

static void report_page(FILE *f, const void *doc)
{
	html_page(f, (json_t *)doc);
}

int sb_html_write(json_t *doc, const char *path, char *err, size_t errlen)
{
	return sb_page_write(path, report_page, doc, err, errlen);
}

/* --- sluice-bench report ------------------------------------------------- */

static void markdown_runs(FILE *f, json_t *doc)
{
	fputs("| label | load |", f);
	for (size_t c = 0; c < N_RUN_COLUMNS; c++)
		fprintf(f, " %s |", run_columns[c].head);
	fputs("\n| --- | --- |", f);
	for (size_t c = 0; c < N_RUN_COLUMNS; c++)
		fputs(" ---: |", f);
	fputc('\n', f);
	size_t i;
	json_t *run;
	json_array_foreach(json_object_get(doc, "runs"), i, run)
	{
		struct sb_load load;
		sb_run_load(run, &load);
		fputs("| ", f);
		sb_md_text(f, run_label(doc, run));
		fputs(" | ", f);
		sb_md_text(f, load.text);
		fputs(" |", f);
		for (size_t c = 0; c < N_RUN_COLUMNS; c++) {
			char buf[64];
			sb_fmt(buf, sizeof(buf),
			       sb_num(run, run_columns[c].field),
			       run_columns[c].decimals, run_columns[c].count);
			fprintf(f, " %s |", buf);
		}
		fputc('\n', f);
	}
}

static const char report_usage[] =
    "usage: sluice-bench report RUN.json [--html OUT.html]";

static const char report_help[] =
    "Prints the Markdown summary of a report that sluice-bench --json\n"
    "wrote, one row a run (then its SLO classes, refusals and predictor\n"
    "error when it has them), and writes its HTML page again when asked.\n"
    "\n"
    "  --html FILE   write the report's self-contained HTML page to FILE\n"
    "                (default: none)\n"
    "  --help        this text\n";

static int report_fail(const char *what, const char *arg)
{
	fprintf(stderr, "sluice-bench report: %s%s; %s\n", what, arg,
	        report_usage);
	return 2;
}

int sb_report_main(int argc, char **argv)
{
	static const struct option options[] = {
	    {"html", required_argument, NULL, 'H'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0}};
	const char *html = NULL;
	int c;
	optind = 0; /* glibc and musl: start afresh, whatever ran before */
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		switch (c) {
		case 'H': html = optarg; break;
		case 'h':
			printf("%s\n\n%s", report_usage, report_help);
			return 0;
		case ':':
			return report_fail("no value after ", argv[optind - 1]);
		default:
			return report_fail("unknown option ", argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return report_fail("give one report", "");
	char err[512];
	json_t *doc = sb_report_load(argv[optind], err, sizeof(err));
	if (!doc) {
		fprintf(stderr, "sluice-bench report: %s\n", err);
		return 2;
	}
	markdown_runs(stdout, doc);
	sb_slo_markdown(stdout, json_object_get(doc, "runs"));
	int status = 0;
	if (html && sb_html_write(doc, html, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice-bench report: --html %s\n", err);
		status = 2;
	}
	json_decref(doc);
	return status;
}

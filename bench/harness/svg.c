/*
 * svg.c: the charts of the HTML pages (html.c's report, compare.c's
 * comparison), drawn as inline SVG: line charts against load and grouped
 * bars with error bars. Axes take "nice" steps; values that cannot be
 * plotted (null, NaN, absurd magnitudes) are left out, and a chart with
 * nothing to show says so.
 */
#include "tools.h"

#include "sluice/base/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- Charts -------------------------------------------------------------- */

/* The chart's frame: the plot area, and the legend to its right. */
enum {
	SVG_W = 540,
	SVG_H = 320,
	PLOT_L = 64,
	PLOT_R = 400,
	PLOT_T = 36,
	PLOT_B = 260,
	LEGEND_X = 414,
};

/* Larger magnitudes are no figure a benchmark makes: such values are left
 * out rather than let the axis arithmetic overflow. */
#define PLOT_LIMIT 1e15

/* Okabe and Ito's colours, told apart by colour-blind readers too. */
static const char *const palette[] = {"#0072b2", "#d55e00", "#009e73",
                                      "#cc79a7", "#e69f00", "#56b4e9",
                                      "#000000"};
#define N_COLOURS SL_ARRAY_SIZE(palette)

bool sb_plottable(double v)
{
	return isfinite(v) && fabs(v) <= PLOT_LIMIT;
}

struct axis {
	double lo, hi, step;
	int decimals;
};

/* 1, 2 or 5 times a power of ten: about `target` steps over span > 0. */
static double nice_step(double span, int target)
{
	double raw = span / target;
	double mag = pow(10, floor(log10(raw)));
	double r = raw / mag;
	return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

/* An axis over [lo, hi] and zero, widened to whole steps. Zero is always
 * in: figures of load and latency read wrongly on a cut axis, and one
 * point, or points all equal, still get a span. */
static void axis_fit(struct axis *a, double lo, double hi)
{
	lo = fmin(lo, 0);
	hi = fmax(hi, 0);
	if (hi == lo)
		hi = 1;
	a->step = nice_step(hi - lo, 5);
	a->lo = floor(lo / a->step) * a->step;
	a->hi = ceil(hi / a->step) * a->step;
	a->decimals = a->step >= 1 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
	if (a->decimals > 12)
		a->decimals = 12;
}

/* Where v falls between from (the axis's low end) and to. */
static double axis_pos(const struct axis *a, double v, double from, double to)
{
	return from + (v - a->lo) / (a->hi - a->lo) * (to - from);
}

static double px(const struct axis *a, double v)
{
	return axis_pos(a, v, PLOT_L, PLOT_R);
}

static double py(const struct axis *a, double v)
{
	return axis_pos(a, v, PLOT_B, PLOT_T);
}

static int axis_ticks(const struct axis *a)
{
	return (int)lround((a->hi - a->lo) / a->step);
}

/* A tick's value: -0 printed as 0. */
static double axis_tick(const struct axis *a, int i)
{
	double v = a->lo + i * a->step;
	return v == 0 ? 0 : v;
}

static void svg_open(FILE *f, const struct sb_chart *c)
{
	fputs("<svg class=\"chart\" id=\"", f);
	sb_html_text(f, c->id);
	fprintf(f,
	        "\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
	        "role=\"img\" aria-label=\"",
	        SVG_W, SVG_H, SVG_W, SVG_H);
	sb_html_text(f, c->title);
	fprintf(f, "\">\n<text class=\"title\" x=\"%d\" y=\"18\">", PLOT_L);
	sb_html_text(f, c->title);
	fputs("</text>\n", f);
}

/* The y axis: grid lines, ticks, its label; and the frame's two axes. */
static void svg_y_axis(FILE *f, const struct axis *ay, const char *label)
{
	for (int i = 0; i <= axis_ticks(ay); i++) {
		double v = axis_tick(ay, i), y = py(ay, v);
		fprintf(f,
		        "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" "
		        "y2=\"%.1f\"/><text x=\"%d\" y=\"%.1f\" "
		        "text-anchor=\"end\">%.*f</text>\n",
		        PLOT_L, y, PLOT_R, y, PLOT_L - 6, y + 4, ay->decimals,
		        v);
	}
	fprintf(f,
	        "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" "
	        "y2=\"%d\"/>\n<line class=\"axis\" x1=\"%d\" y1=\"%d\" "
	        "x2=\"%d\" y2=\"%d\"/>\n",
	        PLOT_L, PLOT_T, PLOT_L, PLOT_B, PLOT_L, PLOT_B, PLOT_R, PLOT_B);
	fprintf(f,
	        "<text transform=\"rotate(-90)\" x=\"%d\" y=\"16\" "
	        "text-anchor=\"middle\">",
	        -(PLOT_T + PLOT_B) / 2);
	sb_html_text(f, label);
	fputs("</text>\n", f);
}

static void svg_x_label(FILE *f, const char *label)
{
	fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">",
	        (PLOT_L + PLOT_R) / 2, PLOT_B + 42);
	sb_html_text(f, label);
	fputs("</text>\n", f);
}

/* A numeric x axis: ticks and their values under the plot. */
static void svg_x_axis(FILE *f, const struct axis *ax, const char *label)
{
	for (int i = 0; i <= axis_ticks(ax); i++) {
		double v = axis_tick(ax, i), x = px(ax, v);
		fprintf(
		    f,
		    "<line class=\"axis\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" "
		    "y2=\"%d\"/><text x=\"%.1f\" y=\"%d\" "
		    "text-anchor=\"middle\">%.*f</text>\n",
		    x, PLOT_B, x, PLOT_B + 5, x, PLOT_B + 18, ax->decimals, v);
	}
	svg_x_label(f, label);
}

static void svg_legend(FILE *f, const struct sb_chart *c)
{
	for (size_t i = 0; i < c->n_series; i++) {
		int y = PLOT_T + (int)i * 18;
		fprintf(f,
		        "<rect class=\"key\" x=\"%d\" y=\"%d\" width=\"12\" "
		        "height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">",
		        LEGEND_X, y, palette[i % N_COLOURS], LEGEND_X + 18,
		        y + 10);
		sb_html_text(f, c->series[i].name);
		fputs("</text>\n", f);
	}
}

static void svg_no_data(FILE *f)
{
	fprintf(f,
	        "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no figures "
	        "to draw</text>\n",
	        (PLOT_L + PLOT_R) / 2, (PLOT_T + PLOT_B) / 2);
}

struct point {
	double x, y;
};

static int point_cmp(const void *a, const void *b)
{
	const struct point *p = a, *q = b;
	return (p->x > q->x) - (p->x < q->x);
}

/* s's plottable points, in order of x, into out (room for s->n). */
static size_t series_points(const struct sb_series *s, struct point *out)
{
	size_t n = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (sb_plottable(s->x[i]) && sb_plottable(s->y[i]))
			out[n++] = (struct point){s->x[i], s->y[i]};
	}
	qsort(out, n, sizeof(*out), point_cmp);
	return n;
}

/* The span of every series and rule: [*x0, *x1] by [*y0, *y1]. Returns
 * the number of points, and in *most the most of one series. */
static size_t line_extent(const struct sb_chart *c, double *x0, double *x1,
                          double *y0, double *y1, size_t *most)
{
	size_t points = 0;
	*x0 = *x1 = *y0 = *y1 = 0;
	*most = 0;
	for (size_t s = 0; s < c->n_series; s++) {
		const struct sb_series *se = &c->series[s];
		for (size_t i = 0; i < se->n; i++) {
			if (!sb_plottable(se->x[i]) || !sb_plottable(se->y[i]))
				continue;
			*x0 = fmin(*x0, se->x[i]);
			*x1 = fmax(*x1, se->x[i]);
			*y0 = fmin(*y0, se->y[i]);
			*y1 = fmax(*y1, se->y[i]);
			points++;
		}
		*most = se->n > *most ? se->n : *most;
	}
	if (c->hline.on && sb_plottable(c->hline.value)) {
		*y0 = fmin(*y0, c->hline.value);
		*y1 = fmax(*y1, c->hline.value);
	}
	if (c->vline.on && sb_plottable(c->vline.value)) {
		*x0 = fmin(*x0, c->vline.value);
		*x1 = fmax(*x1, c->vline.value);
	}
	return points;
}

static void svg_line_series(FILE *f, const struct axis *ax,
                            const struct axis *ay, const struct point *p,
                            size_t n, const char *colour, const char *name)
{
	if (n >= 2) {
		fprintf(f,
		        "<polyline class=\"data\" fill=\"none\" stroke=\"%s\" "
		        "stroke-width=\"2\" points=\"",
		        colour);
		for (size_t i = 0; i < n; i++)
			fprintf(f, "%s%.1f,%.1f", i ? " " : "", px(ax, p[i].x),
			        py(ay, p[i].y));
		fputs("\"/>\n", f);
	}
	for (size_t i = 0; i < n; i++) {
		fprintf(f,
		        "<circle class=\"data\" cx=\"%.1f\" cy=\"%.1f\" "
		        "r=\"3.5\" fill=\"%s\"><title>",
		        px(ax, p[i].x), py(ay, p[i].y), colour);
		sb_html_text(f, name);
		fprintf(f, ": %g at %g</title></circle>\n", p[i].y, p[i].x);
	}
}

static void svg_rules(FILE *f, const struct sb_chart *c, const struct axis *ax,
                      const struct axis *ay)
{
	if (c->hline.on && sb_plottable(c->hline.value)) {
		double y = py(ay, c->hline.value);
		fprintf(f,
		        "<line class=\"rule\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" "
		        "y2=\"%.1f\"/><text class=\"rule\" x=\"%d\" "
		        "y=\"%.1f\">",
		        PLOT_L, y, PLOT_R, y, PLOT_L + 4, y - 5);
		sb_html_text(f, c->hline.label);
		fputs("</text>\n", f);
	}
	if (c->vline.on && sb_plottable(c->vline.value)) {
		double x = px(ax, c->vline.value);
		fprintf(
		    f,
		    "<line class=\"rule\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" "
		    "y2=\"%d\"/><text class=\"rule\" x=\"%.1f\" y=\"%d\" "
		    "text-anchor=\"end\">",
		    x, PLOT_T, x, PLOT_B, x - 4, PLOT_T + 12);
		sb_html_text(f, c->vline.label);
		fputs("</text>\n", f);
	}
}

void sb_svg_line_chart(FILE *f, const struct sb_chart *c)
{
	double x0, x1, y0, y1;
	size_t most;
	size_t points = line_extent(c, &x0, &x1, &y0, &y1, &most);
	struct axis ax, ay;
	axis_fit(&ax, x0, x1);
	axis_fit(&ay, y0, y1);
	svg_open(f, c);
	svg_y_axis(f, &ay, c->y_label);
	svg_x_axis(f, &ax, c->x_label);
	if (!points)
		svg_no_data(f);
	struct point *p = sl_xcalloc(most, sizeof(*p));
	for (size_t s = 0; s < c->n_series; s++) {
		size_t n = series_points(&c->series[s], p);
		svg_line_series(f, &ax, &ay, p, n, palette[s % N_COLOURS],
		                c->series[s].name);
	}
	free(p);
	svg_rules(f, c, &ax, &ay);
	svg_legend(f, c);
	fputs("</svg>\n", f);
}

/* Bar charts: the value of series s in category k, and its error. */
static double bar_value(const struct sb_chart *c, size_t s, size_t k)
{
	const struct sb_series *se = &c->series[s];
	return k < se->n && sb_plottable(se->y[k]) ? se->y[k] : NAN;
}

static double bar_err(const struct sb_chart *c, size_t s, size_t k)
{
	const struct sb_series *se = &c->series[s];
	return se->err && k < se->n && sb_plottable(se->err[k])
	           ? fabs(se->err[k])
	           : 0;
}

static void bar_extent(const struct sb_chart *c, double *y0, double *y1)
{
	*y0 = *y1 = 0;
	for (size_t s = 0; s < c->n_series; s++) {
		for (size_t k = 0; k < c->n_categories; k++) {
			double v = bar_value(c, s, k), e = bar_err(c, s, k);
			if (isnan(v))
				continue;
			*y0 = fmin(*y0, v - e);
			*y1 = fmax(*y1, v + e);
		}
	}
}

/* The categories' names under their groups, slanted when many. */
static void svg_categories(FILE *f, const struct sb_chart *c, double band)
{
	bool slant = c->n_categories > 6;
	for (size_t k = 0; k < c->n_categories; k++) {
		double x = PLOT_L + band * ((double)k + 0.5);
		if (slant)
			fprintf(f,
			        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" "
			        "transform=\"rotate(-25 %.1f %d)\">",
			        x, PLOT_B + 14, x, PLOT_B + 14);
		else
			fprintf(f,
			        "<text x=\"%.1f\" y=\"%d\" "
			        "text-anchor=\"middle\">",
			        x, PLOT_B + 16);
		sb_html_text(f, c->categories[k]);
		fputs("</text>\n", f);
	}
}

static void svg_bar(FILE *f, const struct sb_chart *c, const struct axis *ay,
                    size_t s, size_t k, double x, double width)
{
	double v = bar_value(c, s, k), e = bar_err(c, s, k);
	double y0 = py(ay, 0), y1 = py(ay, v);
	fprintf(f,
	        "<rect class=\"data\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
	        "height=\"%.1f\" fill=\"%s\"><title>",
	        x, fmin(y0, y1), width, fabs(y1 - y0), palette[s % N_COLOURS]);
	sb_html_text(f, c->series[s].name);
	fputs(", ", f);
	sb_html_text(f, c->categories[k]);
	fprintf(f, ": %g", v);
	if (e > 0)
		fprintf(f, " ± %g", e);
	fputs("</title></rect>\n", f);
	if (e > 0) {
		double xm = x + width / 2;
		fprintf(f,
		        "<path class=\"err\" d=\"M%.1f %.1fV%.1fM%.1f %.1fh6"
		        "M%.1f %.1fh6\"/>\n",
		        xm, py(ay, v - e), py(ay, v + e), xm - 3, py(ay, v - e),
		        xm - 3, py(ay, v + e));
	}
}

void sb_svg_bar_chart(FILE *f, const struct sb_chart *c)
{
	double y0, y1;
	bar_extent(c, &y0, &y1);
	struct axis ay;
	axis_fit(&ay, y0, y1);
	svg_open(f, c);
	svg_y_axis(f, &ay, c->y_label);
	svg_x_label(f, c->x_label);
	if (!c->n_categories || !c->n_series) {
		svg_no_data(f);
	} else {
		double band = (double)(PLOT_R - PLOT_L) / c->n_categories;
		double width = band * 0.8 / c->n_series;
		svg_categories(f, c, band);
		for (size_t k = 0; k < c->n_categories; k++) {
			for (size_t s = 0; s < c->n_series; s++) {
				if (isnan(bar_value(c, s, k)))
					continue;
				double x = PLOT_L + band * ((double)k + 0.1) +
				           width * (double)s;
				svg_bar(f, c, &ay, s, k, x,
				        width > 2 ? width - 1 : width);
			}
		}
		double z = py(&ay, 0);
		fprintf(f,
		        "<line class=\"axis\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" "
		        "y2=\"%.1f\"/>\n",
		        PLOT_L, z, PLOT_R, z);
	}
	svg_legend(f, c);
	fputs("</svg>\n", f);
}

/* metrics.c: log-linear histograms and the Prometheus text format. */
#include "sluice/base/metrics.h"

#include "sluice/base/common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sl_hist_init(struct sl_histogram *h, int min_exp)
{
	memset(h, 0, sizeof(*h));
	h->min_exp = min_exp;
}

/* Lower edge of bucket i. */
static double bucket_low(const struct sl_histogram *h, unsigned i)
{
	int octave = (int)(i / SL_HIST_SUB);
	unsigned sub = i % SL_HIST_SUB;
	return ldexp(1.0 + (double)sub / SL_HIST_SUB, h->min_exp + octave);
}

void sl_hist_record(struct sl_histogram *h, double v)
{
	if (!(v >= 0)) /* NaN or negative: a clock went backwards */
		v = 0;
	h->count++;
	h->sum += v;
	int exp;
	double mant = frexp(v, &exp); /* v = mant * 2^exp, mant in [0.5, 1) */
	int octave = exp - 1 - h->min_exp;
	if (v == 0 || octave < 0) {
		h->below++;
		return;
	}
	if (octave >= SL_HIST_OCTAVES) {
		h->above++;
		return;
	}
	unsigned sub = (unsigned)((mant * 2.0 - 1.0) * SL_HIST_SUB);
	h->buckets[(unsigned)octave * SL_HIST_SUB +
	           SL_MIN(sub, SL_HIST_SUB - 1)]++;
}

void sl_hist_merge(struct sl_histogram *a, const struct sl_histogram *b)
{
	for (unsigned i = 0; i < SL_HIST_BUCKETS; i++)
		a->buckets[i] += b->buckets[i];
	a->below += b->below;
	a->above += b->above;
	a->count += b->count;
	a->sum += b->sum;
}

double sl_hist_quantile(const struct sl_histogram *h, double q)
{
	if (h->count == 0)
		return 0;
	/* The rank of the quantile, 1-based: the ceil(q * n)-th value. */
	uint64_t rank = (uint64_t)ceil(q * (double)h->count);
	rank = SL_MAX(rank, (uint64_t)1);
	uint64_t seen = h->below;
	if (rank <= seen)
		return ldexp(1.0, h->min_exp);
	for (unsigned i = 0; i < SL_HIST_BUCKETS; i++) {
		if (seen + h->buckets[i] >= rank) {
			/* Interpolate within the bucket by rank. */
			double lo = bucket_low(h, i);
			double hi =
			    i + 1 < SL_HIST_BUCKETS
			        ? bucket_low(h, i + 1)
			        : ldexp(1.0, h->min_exp + SL_HIST_OCTAVES);
			double frac = ((double)(rank - seen) - 0.5) /
			              (double)h->buckets[i];
			return lo + (hi - lo) * frac;
		}
		seen += h->buckets[i];
	}
	return ldexp(1.0, h->min_exp + SL_HIST_OCTAVES);
}

void sl_text_printf(struct sl_text *t, const char *fmt, ...)
{
	for (;;) {
		size_t room = t->cap - t->len;
		va_list ap;
		va_start(ap, fmt);
		int n =
		    t->data ? vsnprintf(t->data + t->len, room, fmt, ap) : -1;
		va_end(ap);
		if (n >= 0 && (size_t)n < room) {
			t->len += (size_t)n;
			return;
		}
		size_t need = t->len + (n > 0 ? (size_t)n : 0) + 1;
		size_t cap = t->cap ? t->cap * 2 : 4096;
		while (cap < need)
			cap *= 2;
		t->data = sl_xrealloc(t->data, cap);
		t->cap = cap;
	}
}

/* Clears the slices after m->slice up to `slice`, and moves there. */
static void minute_advance(struct sl_minute *m, uint64_t slice)
{
	if (slice <= m->slice)
		return;
	uint64_t steps = SL_MIN(slice - m->slice, (uint64_t)SL_MINUTE_SLICES);
	for (uint64_t i = 1; i <= steps; i++)
		m->n[(m->slice + i) % SL_MINUTE_SLICES] = 0;
	m->slice = slice;
}

void sl_minute_add(struct sl_minute *m, uint64_t v, uint64_t now_ms)
{
	minute_advance(m, now_ms / SL_MINUTE_SLICE_MS);
	m->n[m->slice % SL_MINUTE_SLICES] += v;
}

uint64_t sl_minute_sum(const struct sl_minute *m, uint64_t now_ms)
{
	uint64_t slice = now_ms / SL_MINUTE_SLICE_MS, sum = 0;
	/* Slices older than a minute are stale: not summed. */
	for (uint64_t i = 0; i < SL_MINUTE_SLICES; i++)
		if (m->slice >= i && m->slice - i + SL_MINUTE_SLICES > slice)
			sum += m->n[(m->slice - i) % SL_MINUTE_SLICES];
	return sum;
}

void sl_text_free(struct sl_text *t)
{
	free(t->data);
	memset(t, 0, sizeof(*t));
}

void sl_expose_family(struct sl_text *t, const char *name, const char *type,
                      const char *help)
{
	sl_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
	               type);
}

void sl_expose_histogram(struct sl_text *t, const char *name,
                         const char *labels, const struct sl_histogram *h)
{
	const char *sep = labels[0] ? "," : "";
	uint64_t cumulative = h->below;
	unsigned step = SL_HIST_SUB / SL_HIST_EXPOSED_PER_OCTAVE;
	for (unsigned i = 0; i < SL_HIST_BUCKETS; i++) {
		cumulative += h->buckets[i];
		/* Shown at the upper edges of every step-th bucket. */
		if ((i + 1) % step != 0)
			continue;
		double le = i + 1 < SL_HIST_BUCKETS
		                ? bucket_low(h, i + 1)
		                : ldexp(1.0, h->min_exp + SL_HIST_OCTAVES);
		sl_text_printf(t, "%s_bucket{%s%sle=\"%.9g\"} %llu\n", name,
		               labels, sep, le, (unsigned long long)cumulative);
	}
	sl_text_printf(t, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels,
	               sep, (unsigned long long)h->count);
	const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
	sl_text_printf(t, "%s_sum%s%s%s %.9g\n", name, open, labels, close,
	               h->sum);
	sl_text_printf(t, "%s_count%s%s%s %llu\n", name, open, labels, close,
	               (unsigned long long)h->count);
}

const char *sl_label_escape(const char *value, char *buf, size_t size)
{
	size_t j = 0;
	for (const char *p = value; *p && j + 2 < size; p++) {
		if (*p == '\\' || *p == '"') {
			buf[j++] = '\\';
			buf[j++] = *p;
		} else if (*p == '\n') {
			buf[j++] = '\\';
			buf[j++] = 'n';
		} else {
			buf[j++] = *p;
		}
	}
	buf[j] = '\0';
	return buf;
}

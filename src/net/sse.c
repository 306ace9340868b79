/* sse.c: Server-Sent Events framing. */
#include "sluice/net/sse.h"

#include "sluice/base/common.h"

#include <stdlib.h>
#include <string.h>

void sl_sse_init(struct sl_sse *s, size_t max_event)
{
	memset(s, 0, sizeof(*s));
	s->max_event = max_event;
}

void sl_sse_free(struct sl_sse *s)
{
	free(s->buf);
	s->buf = NULL;
	s->len = s->cap = 0;
}

size_t sl_sse_pending(const struct sl_sse *s)
{
	return s->len;
}

static int buffer(struct sl_sse *s, const char *data, size_t len)
{
	if (s->len + len > s->max_event)
		return SL_ETOOBIG;
	if (s->len + len > s->cap) {
		size_t cap = s->cap ? s->cap : 1024;
		while (cap < s->len + len)
			cap *= 2;
		s->buf = sl_xrealloc(s->buf, SL_MIN(cap, s->max_event));
		s->cap = SL_MIN(cap, s->max_event);
	}
	memcpy(s->buf + s->len, data, len);
	s->len += len;
	return 0;
}

/*
 * Reports one event: `tail` completes whatever is buffered. Blocks with
 * nothing but line terminators carry no event and are dropped.
 */
static int emit(struct sl_sse *s, const char *tail, size_t n,
                sl_sse_event_cb cb, void *arg)
{
	bool content = s->has_content;
	s->has_content = false;
	if (s->len == 0)
		return content ? cb(tail, n, arg) : 0;
	int rc = buffer(s, tail, n);
	if (rc)
		return rc;
	rc = content ? cb(s->buf, s->len, arg) : 0;
	s->len = 0;
	return rc;
}

/* The index of the first CR or LF in data[from, len), or len. */
static size_t line_end(const char *data, size_t from, size_t len)
{
	const char *lf = memchr(data + from, '\n', len - from);
	size_t end = lf ? (size_t)(lf - data) : len;
	const char *cr = memchr(data + from, '\r', end - from);
	return cr ? (size_t)(cr - data) : end;
}

/*
 * The scan carries three facts across reads: the current line's length,
 * whether the last byte was a CR (so that a following LF is the second half
 * of one CRLF terminator), and whether an event ended in a CR that was the
 * read's last byte: an LF in the next read still belongs to that event.
 */
int sl_sse_feed(struct sl_sse *s, const char *data, size_t len,
                sl_sse_event_cb cb, void *arg)
{
	size_t start = 0, i = 0;
	int rc;

	if (s->cr_ends_event && len > 0) {
		s->cr_ends_event = false;
		s->after_cr = false;
		if (data[0] == '\n')
			i = start = 1;
		rc = emit(s, data, start, cb, arg);
		if (rc)
			return rc;
	}
	for (; i < len; i++) {
		char c = data[i];
		if (s->after_cr) {
			s->after_cr = false;
			if (c == '\n')
				continue;
		}
		if (c != '\r' && c != '\n') {
			/*
			 * The rest of the line in one step: memchr finds
			 * its end far faster than a byte loop that keeps
			 * the scan's state up to date at every byte.
			 */
			size_t eol = line_end(data, i, len);
			s->line_len += eol - i;
			s->has_content = true;
			i = eol - 1;
			continue;
		}
		bool blank = s->line_len == 0;
		s->line_len = 0;
		s->after_cr = c == '\r';
		if (!blank)
			continue;
		size_t end = i + 1;
		if (c == '\r') {
			if (i + 1 == len) {
				s->cr_ends_event = true;
				return buffer(s, data + start, len - start);
			}
			if (data[i + 1] == '\n') {
				end = ++i + 1;
				s->after_cr = false;
			}
		}
		rc = emit(s, data + start, end - start, cb, arg);
		start = end;
		if (rc)
			return rc;
	}
	return start < len ? buffer(s, data + start, len - start) : 0;
}

int sl_sse_finish(struct sl_sse *s, sl_sse_event_cb cb, void *arg)
{
	if (!s->cr_ends_event)
		return 0;
	s->cr_ends_event = false;
	return emit(s, "", 0, cb, arg);
}

long sl_sse_event_data(const char *event, size_t len, char *buf, size_t size)
{
	long total = -1;
	size_t used = 0;
	const char *p = event, *end = event + len;
	while (p < end) {
		const char *eol = p;
		while (eol < end && *eol != '\r' && *eol != '\n')
			eol++;
		size_t n = (size_t)(eol - p);
		if (n >= 5 && memcmp(p, "data:", 5) == 0) {
			const char *v = p + 5;
			if (v < eol && *v == ' ')
				v++;
			size_t vn = (size_t)(eol - v);
			/* Several data lines join with LF, as the spec says. */
			if (total >= 0) {
				if (used + 1 < size)
					buf[used++] = '\n';
				total++;
			} else {
				total = 0;
			}
			size_t k =
			    SL_MIN(vn, size > used + 1 ? size - used - 1 : 0);
			memcpy(buf + used, v, k);
			used += k;
			total += (long)vn;
		}
		p = eol;
		if (p < end && *p == '\r')
			p++;
		if (p < end && *p == '\n')
			p++;
	}
	if (size > 0)
		buf[SL_MIN(used, size - 1)] = '\0';
	return total;
}

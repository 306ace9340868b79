/*
 * fuzz_sse.c: the SSE framer, differentially.
 *
 * The same bytes are fed twice: whole in one read, then in pieces cut at
 * points the input chooses (its last bytes seed them). An upstream's reads
 * can split a stream anywhere, so both feeds must report the same events,
 * byte for byte, and leave the same bytes pending. Each event must end in a
 * blank line: a line terminator (LF, CRLF or CR) right after another.
 */
#include "fuzz.h"
#include "sluice/base/common.h"
#include "sluice/net/sse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Trailing bytes that seed the cut points. */
#define SPLIT_SEED_BYTES 4
/* At most this many cuts: a cut in every line of a short stream. */
#define MAX_CUTS 64

/* The events one feed reported, one after another with their lengths. */
struct events {
	char *bytes;
	size_t len, cap;
	size_t count;
};

/* The length of the line terminator ending at `end`, or 0 when none. */
static size_t terminator_before(const char *e, size_t end)
{
	if (end >= 2 && e[end - 2] == '\r' && e[end - 1] == '\n')
		return 2;
	if (end >= 1 && (e[end - 1] == '\n' || e[end - 1] == '\r'))
		return 1;
	return 0;
}

static void append(struct events *ev, const void *p, size_t n)
{
	if (ev->len + n > ev->cap) {
		ev->cap = (ev->len + n) * 2;
		ev->bytes = sl_xrealloc(ev->bytes, ev->cap);
	}
	memcpy(ev->bytes + ev->len, p, n);
	ev->len += n;
}

static int on_event(const char *data, size_t len, void *arg)
{
	struct events *ev = arg;
	size_t last = terminator_before(data, len);
	if (last == 0 || terminator_before(data, len - last) == 0) {
		fprintf(stderr,
		        "fuzz_sse: an event of %zu bytes does not end "
		        "with a blank line\n",
		        len);
		abort();
	}
	/* The data helper must cope with any event, into a small buffer. */
	char value[16];
	long n = sl_sse_event_data(data, len, value, sizeof(value));
	if (n >= 0 && strlen(value) > (size_t)n)
		abort();
	append(ev, &len, sizeof(len));
	append(ev, data, len);
	ev->count++;
	return 0;
}

/* Feeds data in the given pieces; returns what is left pending. */
static size_t feed(const uint8_t *data, size_t size, const size_t *cuts,
                   size_t n_cuts, struct events *ev)
{
	struct sl_sse s;
	/* Above any input libFuzzer makes: SL_ETOOBIG is not in play. */
	sl_sse_init(&s, SL_SSE_MAX_EVENT);
	size_t from = 0;
	for (size_t i = 0; i <= n_cuts; i++) {
		size_t to = i < n_cuts ? cuts[i] : size;
		if (to < from)
			to = from;
		if (sl_sse_feed(&s, (const char *)data + from, to - from,
		                on_event, ev) != 0)
			abort();
		from = to;
	}
	if (sl_sse_finish(&s, on_event, ev) != 0)
		abort();
	size_t pending = sl_sse_pending(&s);
	sl_sse_free(&s);
	return pending;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size >= SL_SSE_MAX_EVENT)
		return 0;
	struct events whole = {0}, split = {0};
	size_t pending_whole = feed(data, size, NULL, 0, &whole);

	size_t cuts[MAX_CUTS], n = 0;
	if (size > SPLIT_SEED_BYTES) {
		uint32_t seed;
		memcpy(&seed, data + size - SPLIT_SEED_BYTES, sizeof(seed));
		n = fuzz_next_random(&seed) % MAX_CUTS;
		for (size_t i = 0; i < n; i++)
			cuts[i] = fuzz_next_random(&seed) % (size + 1);
		for (size_t i = 1; i < n; i++)
			for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j];
			     j--) {
				size_t t = cuts[j];
				cuts[j] = cuts[j - 1];
				cuts[j - 1] = t;
			}
	}
	size_t pending_split = feed(data, size, cuts, n, &split);

	if (whole.count != split.count || whole.len != split.len ||
	    (whole.len && memcmp(whole.bytes, split.bytes, whole.len) != 0) ||
	    pending_whole != pending_split) {
		fprintf(stderr,
		        "fuzz_sse: the events differ; whole: %zu events, "
		        "%zu pending; in %zu "
		        "pieces: %zu events, %zu pending\n",
		        whole.count, pending_whole, n + 1, split.count,
		        pending_split);
		abort();
	}
	free(whole.bytes);
	free(split.bytes);
	return 0;
}

/*
 * sse.h: finds the events in a Server-Sent Events byte stream.
 *
 * An upstream's bytes arrive in reads that can split an event anywhere or
 * carry several events at once. sl_sse_feed() reports each complete event
 * exactly once, as the bytes the upstream sent for it (its lines and the
 * blank line that ends it), so that sluice can relay events one by one with
 * their boundaries intact. Lines may end in LF, CRLF or CR, even mixed.
 *
 * Bytes of an unfinished event are copied into the framer's buffer, bounded
 * by `max_event`; complete events inside one read are reported straight from
 * the caller's data, without a copy.
 *
 * Glossary:
 *   event   a block of lines ended by a blank line; a comment (": ping")
 *           followed by a blank line is an event too and is relayed as one.
 */
#ifndef SLUICE_SSE_H
#define SLUICE_SSE_H

#include <stdbool.h>
#include <stddef.h>

/* Largest event an upstream may send; llama-server's are far smaller. */
#define SL_SSE_MAX_EVENT (4u * 1024 * 1024)

struct sl_sse {
	char *buf; /* the unfinished event's bytes so far */
	size_t len, cap, max_event;
	/* Where the scan stands, so no byte is looked at twice. */
	size_t line_len;    /* bytes in the current line */
	bool after_cr;      /* the last byte seen was CR (CRLF may follow) */
	bool cr_ends_event; /* an event ended in the last read's final CR */
	bool has_content;   /* the current event has a non-blank line */
};

/*
 * Called for each complete event; `data` is valid only during the call.
 * Return 0 to go on, anything else to stop feeding (returned by feed).
 */
typedef int (*sl_sse_event_cb)(const char *data, size_t len, void *arg);

void sl_sse_init(struct sl_sse *s, size_t max_event);
void sl_sse_free(struct sl_sse *s);

/*
 * Scans `len` bytes. Returns 0, the callback's non-zero value, or SL_ETOOBIG
 * when one event grows past max_event (the stream is then unusable).
 */
int sl_sse_feed(struct sl_sse *s, const char *data, size_t len,
                sl_sse_event_cb cb, void *arg);

/*
 * At the end of the stream: reports an event whose final CR was the last
 * byte (it waited for a possible LF). Returns 0 or the callback's value.
 */
int sl_sse_finish(struct sl_sse *s, sl_sse_event_cb cb, void *arg);

/* Bytes of an unfinished event held back (0 at a clean end of stream). */
size_t sl_sse_pending(const struct sl_sse *s);

/*
 * The value of an event's data lines, joined by LF as the SSE spec says,
 * into buf (NUL-terminated, truncated to size). Returns the data's full
 * length, or -1 when the event has no data line.
 */
long sl_sse_event_data(const char *event, size_t len, char *buf, size_t size);

#endif

/*
 * common.h: what every sluice module shares.
 *
 * Return convention: functions return int, 0 on success and a negative code
 * on failure. Codes from libuv (UV_E*) pass through unchanged (they are
 * negated errno values); sluice's own codes sit below -4096, away from them,
 * and come from the SL_ERRNO_MAP table so that each has one name and one
 * message. sl_strerror() turns any of them into text.
 */
#ifndef SLUICE_COMMON_H
#define SLUICE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

/* The struct that holds `member` at address `ptr`. */
#define sl_container_of(ptr, type, member)                                     \
	((type *)((char *)(ptr)-offsetof(type, member)))

#define SL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define SL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SL_MAX(a, b) ((a) > (b) ? (a) : (b))

#if defined(__GNUC__)
#define SL_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define SL_NORETURN __attribute__((noreturn))
/* A case that goes on into the next on purpose; clang ignores comments. */
#define SL_FALLTHROUGH __attribute__((fallthrough))
#else
#define SL_PRINTF(fmt, args)
#define SL_NORETURN
#define SL_FALLTHROUGH
#endif

/* sluice's own error codes: X(NAME, value, message). */
#define SL_ERRNO_MAP(X)                                                        \
	X(AGAIN, -5001, "try again later")                                     \
	X(INVAL, -5002, "invalid value")                                       \
	X(TOOBIG, -5003, "too large")                                          \
	X(PROTO, -5004, "protocol error")                                      \
	X(UPSTREAM, -5005, "upstream failed")                                  \
	X(NOTREADY, -5006, "upstream not ready")                               \
	X(TIMEOUT, -5007, "timed out")                                         \
	X(CANCELLED, -5008, "cancelled")                                       \
	X(FULL, -5009, "queue full")                                           \
	X(CURL, -5010, "libcurl failed")

enum {
#define SL_ERRNO_ENUM(name, value, msg) SL_E##name = value,
	SL_ERRNO_MAP(SL_ERRNO_ENUM)
#undef SL_ERRNO_ENUM
};

/* Text for a libuv or sluice error code; never NULL, never to be freed. */
const char *sl_strerror(int err);

/* Monotonic clock in milliseconds and nanoseconds (CLOCK_MONOTONIC). */
uint64_t sl_now_ms(void);
uint64_t sl_now_ns(void);

/*
 * Allocation that cannot fail: aborts with a message when memory is gone.
 * sluice bounds every buffer and queue, so running out means the host is in
 * trouble, and pretending to carry on would only corrupt state.
 */
void *sl_xmalloc(size_t size);
void *sl_xcalloc(size_t n, size_t size);
void *sl_xrealloc(void *ptr, size_t size);
char *sl_xstrdup(const char *s);
/*
 * Run before such an abort's message, when set: the log (log.c) sets it
 * to write out the lines it holds, so that they come out before it, in
 * order. A hook, so that the allocator needs nothing of the log.
 */
extern void (*sl_before_abort)(void);
char *sl_xasprintf(const char *fmt, ...) SL_PRINTF(1, 2);
/* a then b in one new string: what sl_xasprintf("%s%s") makes, cheaper. */
char *sl_xconcat(const char *a, const char *b);

/*
 * Copies what is left of n buffers after their first `skip` bytes into
 * `out` (which has room for it): the part of a write that uv_try_write()
 * did not take, kept for a uv_write() of its own.
 */
void sl_bufs_copy_tail(char *out, const uv_buf_t *bufs, unsigned n,
                       size_t skip);

/*
 * Text joined into a fixed buffer, cut where the buffer ends and always
 * NUL-terminated: header lines and labels built on every request, without
 * printf's reading of a format. Start one with SL_JOIN(array).
 */
struct sl_join {
	char *p;
	size_t len, cap; /* cap: the buffer's size, its NUL included */
};
#define SL_JOIN(buf) ((struct sl_join){.p = (buf), .cap = sizeof(buf)})
void sl_join_mem(struct sl_join *j, const char *s, size_t n);
void sl_join_u64(struct sl_join *j, uint64_t v);
/* Inline, so that a literal's length is known when compiling. */
static inline void sl_join_str(struct sl_join *j, const char *s)
{
	sl_join_mem(j, s, strlen(s));
}

/*
 * Makes the NUL-terminated text in buf (of `size` bytes) one line: each
 * control byte becomes a C escape ("\n", "\t", "\r", "\xHH"), cut short
 * where the buffer ends. Error lines quote what users wrote, and a value
 * from a file or the environment may hold a line break.
 */
void sl_one_line(char *buf, size_t size);

/*
 * A URL as sluice shows it (logs, /health, metric labels, the access log,
 * --check-config, errors): its userinfo masked, "user:***@host" after the
 * scheme for a user and password (the user name says which credentials
 * are in use, as curl and Go's url.Redacted show it) and "***@host" for a
 * user alone, which is often a token. The userinfo ends at the last '@'
 * after "://" (or from the start, without a scheme): a base URL has no
 * '@' in its path, and a password with a '/' in it (which no URL parser
 * takes) is still hidden when a refusal quotes it. Anything else comes
 * back as it is. A new string: the caller frees it. The credentials stay
 * in the URL sluice sends requests to (upstream.h, request_url).
 */
char *sl_url_shown(const char *url);

/*
 * Opens `path` to read a file sluice reads whole (its configuration, a
 * key file, a model's first bytes), without blocking: anything but a
 * regular file is refused, since a FIFO with no writer would hold the
 * open, or the reads after it, for ever (a reload's worker thread, or the
 * loop). Returns the stream, which the caller fcloses, or NULL with *why
 * set to what to say after "cannot read it: " (strerror's text, or "not a
 * regular file (a FIFO)" and the like); *why is static text.
 */
FILE *sl_fopen_regular(const char *path, const char **why);

/* The value of a hexadecimal digit, either case; -1 for any other char. */
static inline int sl_hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * How many bytes from p on (at most n) are printable ASCII, 0x20 to 0x7e:
 * those that the checks of a header pass without a second look. Every
 * request's head is checked byte by byte in three places (http_frame.c,
 * h1_client.c's scrub, sl_http_field_value_ok), so this reads eight bytes
 * at a time. The high bit of each byte of `bad` is set where the byte is
 * below 0x20 (x + 0x60 stays below 0x80), is 0x7f (x + 1 reaches it) or
 * has the high bit itself; x, the byte without it, never carries into the
 * next byte.
 */
static inline size_t sl_printable_span(const char *p, size_t n)
{
	const uint64_t ones = 0x0101010101010101u, highs = ones * 0x80;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, sizeof(w));
		uint64_t x = w & ~highs;
		uint64_t bad = (~(x + ones * 0x60) | (x + ones) | w) & highs;
		if (bad)
			break;
	}
	while (i < n && (unsigned char)p[i] >= 0x20 &&
	       (unsigned char)p[i] < 0x7f)
		i++;
	return i;
}

#endif

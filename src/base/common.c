/* common.c: error texts, clocks and allocation that cannot fail. */
#include "sluice/base/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

const char *sl_strerror(int err)
{
	switch (err) {
#define SL_ERRNO_CASE(name, value, msg)                                        \
	case SL_E##name: return msg;
		SL_ERRNO_MAP(SL_ERRNO_CASE)
#undef SL_ERRNO_CASE
	default: return uv_strerror(err);
	}
}

uint64_t sl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t sl_now_ms(void)
{
	return sl_now_ns() / 1000000u;
}

void (*sl_before_abort)(void);

SL_NORETURN static void out_of_memory(size_t size)
{
	if (sl_before_abort)
		sl_before_abort();
	fprintf(stderr, "sluice: out of memory allocating %zu bytes\n", size);
	abort();
}

void *sl_xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);
	if (!p)
		out_of_memory(size);
	return p;
}

void *sl_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		out_of_memory(n * size);
	return p;
}

void *sl_xrealloc(void *ptr, size_t size)
{
	void *p = realloc(ptr, size ? size : 1);
	if (!p)
		out_of_memory(size);
	return p;
}

char *sl_xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(sl_xmalloc(n), s, n);
}

char *sl_xconcat(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	char *s = sl_xmalloc(na + nb + 1);
	memcpy(s, a, na);
	memcpy(s + na, b, nb + 1);
	return s;
}

void sl_bufs_copy_tail(char *out, const uv_buf_t *bufs, unsigned n, size_t skip)
{
	for (unsigned i = 0; i < n; i++) {
		size_t len = bufs[i].len;
		if (skip >= len) {
			skip -= len;
			continue;
		}
		memcpy(out, bufs[i].base + skip, len - skip);
		out += len - skip;
		skip = 0;
	}
}

void sl_join_mem(struct sl_join *j, const char *s, size_t n)
{
	if (j->cap == 0)
		return;
	n = SL_MIN(n, j->cap - 1 - j->len);
	memcpy(j->p + j->len, s, n);
	j->len += n;
	j->p[j->len] = '\0';
}

void sl_join_u64(struct sl_join *j, uint64_t v)
{
	char digits[20];
	size_t n = sizeof(digits);
	do {
		digits[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0);
	sl_join_mem(j, digits + n, sizeof(digits) - n);
}

char *sl_xasprintf(const char *fmt, ...)
{
	/* Most strings fit here; measuring into a real buffer, not NULL. */
	char small[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		out_of_memory(0);
	char *s = sl_xmalloc((size_t)n + 1);
	if ((size_t)n < sizeof(small)) {
		memcpy(s, small, (size_t)n + 1);
		return s;
	}
	va_start(ap, fmt);
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return s;
}

char *sl_url_shown(const char *url)
{
	const char *scheme = strstr(url, "://");
	const char *start = scheme ? scheme + 3 : url;
	const char *at = strrchr(start, '@');
	if (!at)
		return sl_xstrdup(url);
	const char *colon = memchr(start, ':', (size_t)(at - start));
	/* The user when a password follows it; else nothing of the userinfo. */
	size_t keep = colon ? (size_t)(colon - url) + 1 : (size_t)(start - url);
	return sl_xasprintf("%.*s***%s", (int)keep, url, at);
}

void sl_one_line(char *buf, size_t size)
{
	size_t len = strlen(buf);
	char *copy = sl_xmalloc(len + 1);
	memcpy(copy, buf, len + 1);
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)copy[i];
		char esc[5];
		if (c >= 0x20 && c != 0x7f) {
			esc[0] = (char)c;
			esc[1] = '\0';
		} else if (c == '\n' || c == '\t' || c == '\r') {
			esc[0] = '\\';
			esc[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
			esc[2] = '\0';
		} else {
			snprintf(esc, sizeof(esc), "\\x%02x", c);
		}
		size_t n = strlen(esc);
		if (o + n >= size)
			break;
		memcpy(buf + o, esc, n);
		o += n;
	}
	buf[o] = '\0';
	free(copy);
}

/* What a path that is not a regular file is, for an error line. */
static const char *file_kind(mode_t mode)
{
	if (S_ISFIFO(mode))
		return "not a regular file (a FIFO)";
	if (S_ISDIR(mode))
		return "not a regular file (a directory)";
	if (S_ISCHR(mode) || S_ISBLK(mode))
		return "not a regular file (a device)";
	if (S_ISSOCK(mode))
		return "not a regular file (a socket)";
	return "not a regular file";
}

FILE *sl_fopen_regular(const char *path, const char **why)
{
	/*
	 * O_NONBLOCK: opening a FIFO with no writer returns at once, where a
	 * plain open waits for one; O_NOCTTY: a terminal named by mistake
	 * does not become sluice's.
	 */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		*why = strerror(errno);
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		*why = strerror(errno);
		close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		*why = file_kind(st.st_mode);
		close(fd);
		return NULL;
	}
	/* A regular file reads the same either way; blocking, as stdio expects.
	 */
	int flags = fcntl(fd, F_GETFL);
	if (flags >= 0)
		fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	FILE *f = fdopen(fd, "rb");
	if (!f) {
		*why = strerror(errno);
		close(fd);
	}
	return f;
}

/* log.c: one line per event on standard error, as text or JSON. */
#include "sluice/base/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum sl_log_level log_min_level = SL_LOG_INFO;
static enum sl_log_format log_format = SL_LOG_TEXT;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void sl_log_setup(enum sl_log_level min_level, enum sl_log_format format)
{
	log_min_level = min_level;
	log_format = format;
}

int sl_log_enabled(enum sl_log_level level)
{
	return level >= log_min_level;
}

/*
 * UTC wall-clock time with milliseconds, ISO 8601. The seconds are
 * formatted once per second: the access log asks for a timestamp per
 * request, and gmtime_r and strftime cost more than the rest of a line.
 */
static void format_timestamp(char *buf, size_t size)
{
	static time_t cached_sec = -1;
	static char cached[32];
	static size_t cached_len;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	if (tv.tv_sec != cached_sec) {
		struct tm tm;
		gmtime_r(&tv.tv_sec, &tm);
		cached_len =
		    strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &tm);
		cached_sec = tv.tv_sec;
	}
	int ms = (int)(tv.tv_usec / 1000);
	if (size < cached_len + 6)
		return;
	memcpy(buf, cached, cached_len);
	char *p = buf + cached_len;
	p[0] = '.';
	p[1] = (char)('0' + ms / 100);
	p[2] = (char)('0' + ms / 10 % 10);
	p[3] = (char)('0' + ms % 10);
	p[4] = 'Z';
	p[5] = '\0';
}

/* One write(2), retried only for signals and short writes. */
static void write_out(const char *line, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDERR_FILENO, line, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		line += n;
		len -= (size_t)n;
	}
}

/*
 * Held lines (log.h, "Holding"): whole lines, in the order logged. The
 * process that began holding is remembered, so that a forked child that
 * exits does not write its copy of the parent's lines.
 */
static char held[SL_LOG_HOLD_MAX];
static size_t held_len;
static bool holding;
static pid_t holder;

void sl_log_flush(void)
{
	if (held_len == 0)
		return;
	write_out(held, held_len);
	held_len = 0;
}

static void flush_at_exit(void)
{
	if (getpid() == holder)
		sl_log_flush();
}

void sl_log_hold(bool on)
{
	static bool registered;
	if (!on)
		sl_log_flush();
	holding = on;
	if (on) {
		holder = getpid();
		sl_before_abort = sl_log_flush;
		/* An exit() between two turns still writes what was held. */
		if (!registered)
			registered = atexit(flush_at_exit) == 0;
	}
}

/* A whole line: written now, or held; a full buffer is written first. */
static void write_line(const char *line, size_t len)
{
	if (!holding) {
		write_out(line, len);
		return;
	}
	if (len > sizeof(held) - held_len)
		sl_log_flush();
	if (len > sizeof(held)) {
		write_out(line, len);
		return;
	}
	memcpy(held + held_len, line, len);
	held_len += len;
}

/* JSON wants UTF-8; relayed child output may not be. */
static void replace_non_ascii(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s >= 0x80 || (unsigned char)*s < 0x20)
			*s = '?';
}

static size_t format_json(char *line, size_t size, const char *ts,
                          const char *level, char *msg)
{
	json_t *obj =
	    json_pack("{s:s, s:s, s:s}", "ts", ts, "level", level, "msg", msg);
	if (!obj) {
		replace_non_ascii(msg);
		obj = json_pack("{s:s, s:s, s:s}", "ts", ts, "level", level,
		                "msg", msg);
	}
	size_t n = obj ? json_dumpb(obj, line, size - 1, JSON_COMPACT) : 0;
	json_decref(obj);
	if (n == 0 || n > size - 1)
		n = (size_t)snprintf(
		    line, size - 1,
		    "{\"ts\":\"%s\",\"level\":\"%s\","
		    "\"msg\":\"(message too long for one line)\"}",
		    ts, level);
	line[n++] = '\n';
	return n;
}

/* A line being formatted into a fixed buffer; `over` once it did not fit. */
struct line {
	char *buf;
	size_t size, n;
	bool over;
};

/* Appends what fits; a text line cut short ends in "..." (see below). */
static void put(struct line *l, const char *s, size_t len)
{
	size_t room = l->size - l->n;
	if (len > room) {
		len = room;
		l->over = true;
	}
	memcpy(l->buf + l->n, s, len);
	l->n += len;
}

static void put_str(struct line *l, const char *s)
{
	put(l, s, strlen(s));
}

static void put_num(struct line *l, long long v)
{
	char digits[24];
	size_t k = sizeof(digits);
	unsigned long long u =
	    v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
	do {
		digits[--k] = (char)('0' + u % 10);
		u /= 10;
	} while (u > 0);
	if (v < 0)
		digits[--k] = '-';
	put(l, digits + k, sizeof(digits) - k);
}

/*
 * Whether s can be written as it is: printable ASCII without quotes or
 * backslashes, and (for a bare text value) no spaces and not empty.
 */
static bool plain(const char *s, bool bare)
{
	if (bare && *s == '\0')
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < ' ' || c >= 0x7f || c == '"' || c == '\\' ||
		    (bare && c == ' '))
			return false;
	}
	return true;
}

/*
 * A string as a JSON value: quoted as it is when plain, else escaped by
 * jansson. False when it is not UTF-8 (nothing written).
 */
static bool put_json_string(struct line *l, const char *s, bool bare)
{
	if (plain(s, bare)) {
		if (!bare)
			put(l, "\"", 1);
		put_str(l, s);
		if (!bare)
			put(l, "\"", 1);
		return true;
	}
	json_t *v = json_string(s);
	if (!v)
		return false;
	char *quoted = json_dumps(v, JSON_ENCODE_ANY);
	json_decref(v);
	if (!quoted)
		return false;
	put_str(l, quoted);
	free(quoted);
	return true;
}

void sl_log_fields(enum sl_log_level level, const char *msg,
                   const struct sl_log_field *fields, size_t n)
{
	if (level < log_min_level)
		return;
	char ts[40];
	format_timestamp(ts, sizeof(ts));
	char buf[SL_LOG_LINE_MAX + 128];
	/* Room is kept for the newline. */
	struct line l = {.buf = buf, .size = sizeof(buf) - 1};
	bool json = log_format == SL_LOG_JSON;
	if (json) {
		put_str(&l, "{\"ts\":\"");
		put_str(&l, ts);
		put_str(&l, "\",\"level\":\"");
		put_str(&l, level_names[level]);
		put_str(&l, "\",\"msg\":");
		if (!put_json_string(&l, msg, false))
			return;
	} else {
		put_str(&l, ts);
		put(&l, " ", 1);
		put_str(&l, level_names[level]);
		put(&l, "      ", 6 - strlen(level_names[level]));
		put_str(&l, msg);
	}
	for (size_t i = 0; i < n; i++) {
		const struct sl_log_field *f = &fields[i];
		if (json) {
			put_str(&l, ",\"");
			put_str(&l, f->key);
			put_str(&l, "\":");
		} else {
			put(&l, " ", 1);
			put_str(&l, f->key);
			put(&l, "=", 1);
		}
		if (f->is_num)
			put_num(&l, f->num);
		else if (!put_json_string(&l, f->str ? f->str : "-", !json))
			return; /* not UTF-8: not worth a line */
	}
	if (json)
		put(&l, "}", 1);
	/* Too long for one line: a JSON line is dropped, a text line cut. */
	if (l.over && json)
		return;
	if (l.over)
		memcpy(buf + l.n - 3, "...", 3);
	buf[l.n++] = '\n';
	write_line(buf, l.n);
}

void sl_log(enum sl_log_level level, const char *fmt, ...)
{
	if (level < log_min_level)
		return;

	char ts[40];
	format_timestamp(ts, sizeof(ts));

	char msg[SL_LOG_LINE_MAX];
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	if ((size_t)m >= sizeof(msg))
		memcpy(msg + sizeof(msg) - 4, "...", 4);

	char line[SL_LOG_LINE_MAX + 128];
	size_t n;
	if (log_format == SL_LOG_JSON) {
		n = format_json(line, sizeof(line), ts, level_names[level],
		                msg);
	} else {
		int k = snprintf(line, sizeof(line) - 1, "%s %-5s %s", ts,
		                 level_names[level], msg);
		n = SL_MIN((size_t)k, sizeof(line) - 2);
		line[n++] = '\n';
	}
	write_line(line, n);
}

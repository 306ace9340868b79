/* log.c: one line per event on standard error, as text or JSON. */
#include "sluice/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
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

/* UTC wall-clock time with milliseconds, ISO 8601. */
static void format_timestamp(char *buf, size_t size)
{
	struct timeval tv;
	struct tm tm;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, size - n, ".%03dZ", (int)(tv.tv_usec / 1000));
}

/* One write(2), retried only for signals and short writes. */
static void write_line(const char *line, size_t len)
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

/* A text-format value: bare when it is one plain word, else JSON-quoted. */
static void append_value(char *line, size_t size, size_t *n, json_t *v)
{
	char buf[512];
	const char *s = NULL;
	if (json_is_string(v)) {
		s = json_string_value(v);
		bool plain = *s != '\0';
		for (const char *p = s; *p && plain; p++)
			plain = *p > ' ' && *p != '"' && *p != '\\' &&
			        (unsigned char)*p < 0x7f;
		if (!plain) {
			size_t k = json_dumpb(v, buf, sizeof(buf) - 1,
			                      JSON_ENCODE_ANY);
			buf[SL_MIN(k, sizeof(buf) - 1)] = '\0';
			s = buf;
		}
	} else if (json_is_integer(v)) {
		snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT,
		         json_integer_value(v));
		s = buf;
	} else if (json_is_real(v)) {
		snprintf(buf, sizeof(buf), "%g", json_real_value(v));
		s = buf;
	} else {
		s = "-";
	}
	int k = snprintf(line + *n, size - *n, "%s", s);
	*n = SL_MIN(size - 1, *n + (size_t)SL_MAX(k, 0));
}

void sl_log_fields(enum sl_log_level level, const char *msg, json_t *fields)
{
	if (level < log_min_level)
		return;
	char ts[40];
	format_timestamp(ts, sizeof(ts));
	char line[SL_LOG_LINE_MAX + 128];
	size_t n;
	if (log_format == SL_LOG_JSON) {
		json_t *obj = json_pack("{s:s, s:s, s:s}", "ts", ts, "level",
		                        level_names[level], "msg", msg);
		json_object_update(obj, fields);
		n = json_dumpb(obj, line, sizeof(line) - 1, JSON_COMPACT);
		json_decref(obj);
		if (n == 0 || n > sizeof(line) - 1)
			return; /* too long for one line: dropped, not cut */
	} else {
		int k = snprintf(line, sizeof(line), "%s %-5s %s", ts,
		                 level_names[level], msg);
		n = (size_t)SL_MAX(k, 0);
		const char *key;
		json_t *v;
		json_object_foreach(fields, key, v)
		{
			if (n + 2 >= sizeof(line) - 1)
				break;
			int w =
			    snprintf(line + n, sizeof(line) - n, " %s=", key);
			n = SL_MIN(sizeof(line) - 2, n + (size_t)SL_MAX(w, 0));
			append_value(line, sizeof(line) - 1, &n, v);
		}
	}
	line[n++] = '\n';
	write_line(line, n);
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

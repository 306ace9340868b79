/*
 * log.h: sluice's log, one line per event on standard error.
 *
 * Two formats: text for a terminal ("2026-11-21T22:10:00.123Z info  msg")
 * and JSON lines for log shippers ({"ts":...,"level":...,"msg":...}). Each
 * line goes out whole in one write(2), so lines from sluice and from the
 * llama-server output it relays never interleave mid-line. The write is
 * synchronous: a log reader that stops reading eventually stalls sluice, as
 * it would nginx or redis; point standard error at a file or journald.
 *
 * Holding: while the event loop runs, the app holds lines and writes them
 * together once per turn of the loop (sl_log_flush() from a uv_prepare_t,
 * which runs before the loop waits for I/O), so a line waits for no more
 * than the rest of its turn. Under load a turn serves many requests, and
 * the access log then costs one write(2) for all of them instead of one
 * per request: one of the five system calls of a plain request. A line
 * that would overfill the SL_LOG_HOLD_MAX bytes held first has them
 * written; exit() writes what is held (atexit); a crash loses at most one
 * turn's lines.
 */
#ifndef SLUICE_LOG_H
#define SLUICE_LOG_H

#include "sluice/base/common.h"

#include <jansson.h>
#include <stdbool.h>

enum sl_log_level { SL_LOG_DEBUG, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR };
enum sl_log_format { SL_LOG_TEXT, SL_LOG_JSON };

/* Longest line written; longer messages are cut and end in "...". */
#define SL_LOG_LINE_MAX 4096

/* Bytes of whole lines held at most before they are written (Holding). */
#define SL_LOG_HOLD_MAX (16 * 1024)

void sl_log_setup(enum sl_log_level min_level, enum sl_log_format format);

/*
 * Holding on: lines wait for sl_log_flush() (see Holding). Off: the lines
 * held are written, and each line after them at once, as before holding.
 */
void sl_log_hold(bool on);
/* Writes the lines held, in one write(2). */
void sl_log_flush(void);
int sl_log_enabled(enum sl_log_level level);
void sl_log(enum sl_log_level level, const char *fmt, ...) SL_PRINTF(2, 3);

/* One field of a line: a string (NULL reads "-") or, with is_num, a number. */
struct sl_log_field {
	const char *key; /* a plain word */
	const char *str;
	long long num;
	bool is_num;
};

#define SL_LOG_STR(k, v) ((struct sl_log_field){.key = (k), .str = (v)})
#define SL_LOG_NUM(k, v)                                                       \
	((struct sl_log_field){.key = (k), .num = (v), .is_num = true})

/*
 * A line with fields: text as "msg key=value ..." (values with spaces or
 * quotes are quoted), JSON as one object holding ts, level, msg and the
 * fields, in order. It is formatted in place, without allocating, since
 * the access log writes one per request; a value that needs escaping goes
 * through jansson. A line with a string that is not UTF-8 is dropped.
 */
void sl_log_fields(enum sl_log_level level, const char *msg,
                   const struct sl_log_field *fields, size_t n);

#define sl_debug(...) sl_log(SL_LOG_DEBUG, __VA_ARGS__)
#define sl_info(...) sl_log(SL_LOG_INFO, __VA_ARGS__)
#define sl_warn(...) sl_log(SL_LOG_WARN, __VA_ARGS__)
#define sl_error(...) sl_log(SL_LOG_ERROR, __VA_ARGS__)

#endif

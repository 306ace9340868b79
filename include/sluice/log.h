/*
 * log.h: sluice's log, one line per event on standard error.
 *
 * Two formats: text for a terminal ("2026-11-21T22:10:00.123Z info  msg")
 * and JSON lines for log shippers ({"ts":...,"level":...,"msg":...}). Each
 * line goes out in one write(2), so lines from sluice and from the
 * llama-server output it relays never interleave mid-line. The write is
 * synchronous: a log reader that stops reading eventually stalls sluice, as
 * it would nginx or redis; point standard error at a file or journald.
 */
#ifndef SLUICE_LOG_H
#define SLUICE_LOG_H

#include "sluice/common.h"

#include <jansson.h>

enum sl_log_level { SL_LOG_DEBUG, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR };
enum sl_log_format { SL_LOG_TEXT, SL_LOG_JSON };

/* Longest line written; longer messages are cut and end in "...". */
#define SL_LOG_LINE_MAX 4096

void sl_log_setup(enum sl_log_level min_level, enum sl_log_format format);
int sl_log_enabled(enum sl_log_level level);
void sl_log(enum sl_log_level level, const char *fmt, ...) SL_PRINTF(2, 3);

/*
 * A line with fields: text as "msg key=value ..." (values with spaces or
 * quotes are quoted), JSON as one object holding ts, level, msg and the
 * fields. `fields` is a JSON object of strings and numbers, borrowed.
 */
void sl_log_fields(enum sl_log_level level, const char *msg, json_t *fields);

#define sl_debug(...) sl_log(SL_LOG_DEBUG, __VA_ARGS__)
#define sl_info(...) sl_log(SL_LOG_INFO, __VA_ARGS__)
#define sl_warn(...) sl_log(SL_LOG_WARN, __VA_ARGS__)
#define sl_error(...) sl_log(SL_LOG_ERROR, __VA_ARGS__)

#endif

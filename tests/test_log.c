/*
 * Unit tests for log.c: lines with fields, as the access log writes them,
 * in both formats. Standard error goes to a temporary file for each line,
 * which is read back and compared byte for byte; the JSON line must also
 * read back through jansson to the same values.
 */
#include "sluice/base/log.h"

#include "test.h"

#include <unistd.h>

/* Logs one line with `fields` in `format` and returns it (static). */
static const char *logged(enum sl_log_format format,
                          const struct sl_log_field *fields, size_t n)
{
	static char out[SL_LOG_LINE_MAX + 256];
	FILE *tmp = tmpfile();
	ASSERT(tmp);
	int saved = dup(STDERR_FILENO);
	ASSERT(saved >= 0);
	ASSERT(dup2(fileno(tmp), STDERR_FILENO) >= 0);
	sl_log_setup(SL_LOG_INFO, format);
	sl_log_fields(SL_LOG_INFO, "access", fields, n);
	ASSERT(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	rewind(tmp);
	size_t len = fread(out, 1, sizeof(out) - 1, tmp);
	out[len] = '\0';
	fclose(tmp);
	return out;
}

/* The line after its timestamp ("2026-11-25T00:21:17.153Z "). */
static const char *after_ts(const char *line)
{
	ASSERT(strlen(line) > 25);
	ASSERT(line[10] == 'T' && line[23] == 'Z' && line[24] == ' ');
	return line + 25;
}

static void test_text_plain_and_quoted(void)
{
	const struct sl_log_field f[] = {
	    SL_LOG_STR("path", "/v1/chat/completions"),
	    SL_LOG_NUM("status", 200),
	    SL_LOG_NUM("queue_ms", -1),
	    SL_LOG_STR("upstream", NULL),
	    SL_LOG_STR("note", "two words"),
	    SL_LOG_STR("q", "a\"b\\c\n"),
	    SL_LOG_STR("empty", ""),
	    SL_LOG_STR("utf8", "caf\xc3\xa9"),
	    SL_LOG_NUM("big", -9223372036854775807LL - 1),
	};
	ASSERT_STR_EQ(after_ts(logged(SL_LOG_TEXT, f, 9)),
	              "info  access path=/v1/chat/completions status=200 "
	              "queue_ms=-1 upstream=- note=\"two words\" "
	              "q=\"a\\\"b\\\\c\\n\" empty=\"\" utf8=\"caf\xc3\xa9\" "
	              "big=-9223372036854775808\n");
}

static void test_json_line_reads_back(void)
{
	const struct sl_log_field f[] = {
	    SL_LOG_STR("id", "abc"),
	    SL_LOG_STR("path", "/x y\"\x01"),
	    SL_LOG_NUM("tokens", 1234567890123LL),
	    SL_LOG_STR("upstream", NULL),
	};
	const char *line = logged(SL_LOG_JSON, f, 4);
	ASSERT(line[strlen(line) - 1] == '\n');
	ASSERT_CONTAINS(line, ",\"level\":\"info\",\"msg\":\"access\","
	                      "\"id\":\"abc\",\"path\":\"/x y\\\"\\u0001\","
	                      "\"tokens\":1234567890123,\"upstream\":\"-\"}\n");
	json_error_t err;
	json_t *j = json_loads(line, 0, &err);
	ASSERT(j);
	ASSERT_STR_EQ(json_string_value(json_object_get(j, "path")),
	              "/x y\"\x01");
	ASSERT_EQ(json_integer_value(json_object_get(j, "tokens")),
	          1234567890123LL);
	ASSERT_EQ(strlen(json_string_value(json_object_get(j, "ts"))), 24);
	json_decref(j);
}

/* A string that is not UTF-8 is not worth a line, in either format. */
static void test_not_utf8_dropped(void)
{
	const struct sl_log_field f[] = {SL_LOG_STR("path", "/\xff")};
	ASSERT_STR_EQ(logged(SL_LOG_TEXT, f, 1), "");
	ASSERT_STR_EQ(logged(SL_LOG_JSON, f, 1), "");
}

/* Too long for one line: JSON is dropped (never cut), text is cut. */
static void test_overlong(void)
{
	static char big[SL_LOG_LINE_MAX + 200];
	memset(big, 'x', sizeof(big) - 1);
	const struct sl_log_field f[] = {SL_LOG_STR("a", "short"),
	                                 SL_LOG_STR("b", big)};
	ASSERT_STR_EQ(logged(SL_LOG_JSON, f, 2), "");
	const char *text = logged(SL_LOG_TEXT, f, 2);
	ASSERT_CONTAINS(text, "access a=short b=xxxxxxxx");
	ASSERT_EQ(strlen(text), SL_LOG_LINE_MAX + 128);
	ASSERT_STR_EQ(text + strlen(text) - 6, "xx...\n");
	/* A value that must be quoted is cut too, not left out. */
	big[0] = ' ';
	text = logged(SL_LOG_TEXT, f, 2);
	ASSERT_CONTAINS(text, "access a=short b=\" xxxxxxxx");
	ASSERT_STR_EQ(text + strlen(text) - 6, "xx...\n");
}

/* The bytes written to `f` so far, read back from its start (static). */
static const char *written(FILE *f, size_t *len)
{
	static char out[3 * SL_LOG_HOLD_MAX];
	fflush(f);
	rewind(f);
	*len = fread(out, 1, sizeof(out) - 1, f);
	out[*len] = '\0';
	return out;
}

/* Newlines in s: whole lines written. */
static size_t lines_in(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/*
 * Holding: nothing reaches standard error until a flush, then every held
 * line in order; a line that no longer fits writes the held ones first,
 * whole; holding off writes the rest.
 */
static void test_held_until_flushed(void)
{
	FILE *tmp = tmpfile();
	ASSERT(tmp);
	int saved = dup(STDERR_FILENO);
	ASSERT(saved >= 0);
	ASSERT(dup2(fileno(tmp), STDERR_FILENO) >= 0);
	sl_log_setup(SL_LOG_INFO, SL_LOG_TEXT);
	sl_log_hold(true);
	size_t len;
	sl_info("first");
	sl_info("second");
	ASSERT_EQ(written(tmp, &len)[0], '\0');
	sl_log_flush();
	const char *out = written(tmp, &len);
	ASSERT_EQ(lines_in(out), 2);
	ASSERT_CONTAINS(out, "info  first\n");
	ASSERT(strstr(out, "first") < strstr(out, "second"));
	/* More than the buffer holds: whole lines leave, the rest wait. */
	char msg[1000];
	memset(msg, 'x', sizeof(msg) - 1);
	msg[sizeof(msg) - 1] = '\0';
	size_t n = 3 * SL_LOG_HOLD_MAX / sizeof(msg) / 2;
	for (size_t i = 0; i < n; i++)
		sl_info("%zu %s", i, msg);
	out = written(tmp, &len);
	ASSERT(lines_in(out) > 2 && lines_in(out) < 2 + n);
	ASSERT_EQ(out[len - 1], '\n');
	sl_log_hold(false);
	out = written(tmp, &len);
	ASSERT_EQ(lines_in(out), 2 + n);
	/* Not holding: each line at once. */
	sl_info("last");
	ASSERT_CONTAINS(written(tmp, &len), "info  last\n");
	ASSERT(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	fclose(tmp);
}

int main(void)
{
	RUN(test_text_plain_and_quoted);
	RUN(test_json_line_reads_back);
	RUN(test_not_utf8_dropped);
	RUN(test_overlong);
	RUN(test_held_until_flushed);
	return 0;
}

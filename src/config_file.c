/*
 * config_file.c: the YAML configuration file, read with libyaml's event
 * parser (no document tree is built: the file is one flat mapping).
 */
#include "sluice/config_file.h"

#include "sluice/common.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* Longest key quoted in an error line; option names are far shorter. */
#define KEY_SHOWN_MAX 64

struct walker {
	yaml_parser_t parser;
	const char *path;
	const unsigned char *text;
	size_t len;
	sl_config_file_fn fn;
	void *ctx;
	char *err;
	size_t size;
	/* Keys met so far, with their lines, to refuse a second one. */
	char **keys;
	unsigned *key_lines;
	unsigned key_count;
};

/* One line into err: "FILE:LINE: message". Always returns SL_EINVAL. */
SL_PRINTF(4, 5)
static int fail_at(struct walker *w, size_t line, const char *key,
                   const char *fmt, ...)
{
	int n = key ? snprintf(w->err, w->size, "%s:%zu: %.*s: ", w->path, line,
	                       KEY_SHOWN_MAX, key)
	            : snprintf(w->err, w->size, "%s:%zu: ", w->path, line);
	if (n < 0 || (size_t)n >= w->size)
		return SL_EINVAL;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->err + n, w->size - (size_t)n, fmt, ap);
	va_end(ap);
	return SL_EINVAL;
}

static size_t line_of(const yaml_event_t *ev)
{
	return ev->start_mark.line + 1;
}

/*
 * libyaml's error, with its line. A reader error (bad UTF-8, a control
 * byte) carries a byte offset rather than a mark: the line is counted.
 */
static int syntax_error(struct walker *w)
{
	const yaml_parser_t *p = &w->parser;
	size_t line = p->problem_mark.line + 1;
	if (p->error == YAML_READER_ERROR) {
		line = 1;
		for (size_t i = 0; i < p->problem_offset && i < w->len; i++)
			line += w->text[i] == '\n';
	}
	if (p->error == YAML_MEMORY_ERROR)
		return fail_at(w, line, NULL, "out of memory parsing it");
	if (p->context)
		return fail_at(w, line, NULL, "not valid YAML: %s (%s)",
		               p->problem ? p->problem : "error", p->context);
	return fail_at(w, line, NULL, "not valid YAML: %s",
	               p->problem ? p->problem : "error");
}

/*
 * Keys can be secrets (api-key: ...): a value is wiped before libyaml
 * frees it. libyaml's own input buffers still hold copies, which this
 * cannot reach; they are freed at start, long before any client connects.
 */
static void event_done(yaml_event_t *ev)
{
	if (ev->type == YAML_SCALAR_EVENT && ev->data.scalar.value)
		explicit_bzero(ev->data.scalar.value, ev->data.scalar.length);
	yaml_event_delete(ev);
}

/* The next event; aliases are refused here, once for every place. */
static int next_event(struct walker *w, yaml_event_t *ev, const char *key)
{
	if (!yaml_parser_parse(&w->parser, ev))
		return syntax_error(w);
	if (ev->type == YAML_ALIAS_EVENT) {
		size_t line = line_of(ev);
		yaml_event_delete(ev);
		return fail_at(w, line, key,
		               "an alias (*NAME): anchors are not expanded, "
		               "write the value out");
	}
	return 0;
}

static const char *kind_of(const yaml_event_t *ev)
{
	switch (ev->type) {
	case YAML_SEQUENCE_START_EVENT: return "a list";
	case YAML_MAPPING_START_EVENT: return "a mapping";
	default: return "a value";
	}
}

/* A scalar's text, refused when it holds a NUL ("\0" in quotes). */
static int scalar_text(struct walker *w, const yaml_event_t *ev,
                       const char *key)
{
	if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length))
		return fail_at(w, line_of(ev), key, "a NUL byte in the value");
	return 0;
}

/* Remembers `key`; refuses it when it was met before. */
static int note_key(struct walker *w, const char *key, size_t line)
{
	for (unsigned i = 0; i < w->key_count; i++)
		if (strcmp(w->keys[i], key) == 0)
			return fail_at(w, line, key,
			               "given twice (first on line %u)",
			               w->key_lines[i]);
	w->keys = sl_xrealloc(w->keys, (w->key_count + 1) * sizeof(*w->keys));
	w->key_lines = sl_xrealloc(w->key_lines,
	                           (w->key_count + 1) * sizeof(*w->key_lines));
	w->keys[w->key_count] = sl_xstrdup(key);
	w->key_lines[w->key_count] = (unsigned)line;
	w->key_count++;
	return 0;
}

static int call(struct walker *w, enum sl_config_file_item item,
                const char *key, const char *value, size_t line)
{
	char where[PATH_MAX + KEY_SHOWN_MAX + 32];
	snprintf(where, sizeof(where), "%s:%zu: %.*s", w->path, line,
	         KEY_SHOWN_MAX, key);
	return w->fn(w->ctx, item, key, value, where, (unsigned)line, w->err,
	             w->size);
}

/* The items of a list, up to its end; `start` is the list's own line. */
static int walk_list(struct walker *w, const char *key, size_t start)
{
	int rc = call(w, SL_CONFIG_FILE_LIST, key, NULL, start);
	while (rc == 0) {
		yaml_event_t ev;
		rc = next_event(w, &ev, key);
		if (rc != 0)
			return rc;
		if (ev.type == YAML_SEQUENCE_END_EVENT) {
			event_done(&ev);
			return 0;
		}
		if (ev.type != YAML_SCALAR_EVENT)
			rc = fail_at(w, line_of(&ev), key,
			             "a list item must be a single value, not "
			             "%s",
			             kind_of(&ev));
		else
			rc = scalar_text(w, &ev, key);
		if (rc == 0)
			rc = call(w, SL_CONFIG_FILE_LIST_ITEM, key,
			          (const char *)ev.data.scalar.value,
			          line_of(&ev));
		event_done(&ev);
	}
	return rc;
}

/* One `key: value` of the top mapping; *end is set at the mapping's end. */
static int walk_entry(struct walker *w, bool *end)
{
	yaml_event_t ev;
	int rc = next_event(w, &ev, NULL);
	if (rc != 0)
		return rc;
	if (ev.type == YAML_MAPPING_END_EVENT) {
		event_done(&ev);
		*end = true;
		return 0;
	}
	if (ev.type != YAML_SCALAR_EVENT) {
		rc = fail_at(w, line_of(&ev), NULL,
		             "a key must be an option's name, not %s",
		             kind_of(&ev));
		event_done(&ev);
		return rc;
	}
	rc = scalar_text(w, &ev, NULL);
	char *key = sl_xstrdup((const char *)ev.data.scalar.value);
	if (rc == 0)
		rc = note_key(w, key, line_of(&ev));
	event_done(&ev);

	if (rc == 0)
		rc = next_event(w, &ev, key);
	if (rc != 0)
		goto free_key;
	switch (ev.type) {
	case YAML_SCALAR_EVENT:
		rc = scalar_text(w, &ev, key);
		if (rc == 0)
			rc = call(w, SL_CONFIG_FILE_SCALAR, key,
			          (const char *)ev.data.scalar.value,
			          line_of(&ev));
		break;
	case YAML_SEQUENCE_START_EVENT:
		rc = walk_list(w, key, line_of(&ev));
		break;
	default:
		rc =
		    fail_at(w, line_of(&ev), key,
		            "expected a value or a list, got %s", kind_of(&ev));
		break;
	}
	event_done(&ev);
free_key:
	free(key);
	return rc;
}

/* The one document: a mapping, or nothing at all. */
static int walk_document(struct walker *w)
{
	yaml_event_t ev;
	int rc = next_event(w, &ev, NULL);
	if (rc != 0)
		return rc;
	/* "---" alone, or a document of comments: an empty configuration. */
	bool empty = ev.type == YAML_SCALAR_EVENT &&
	             ev.data.scalar.length == 0 &&
	             ev.data.scalar.plain_implicit;
	if (ev.type != YAML_MAPPING_START_EVENT && !empty)
		rc = fail_at(w, line_of(&ev), NULL,
		             "expected option names with their values "
		             "(name: value), got %s",
		             kind_of(&ev));
	bool mapping = ev.type == YAML_MAPPING_START_EVENT;
	event_done(&ev);
	for (bool end = !mapping; rc == 0 && !end;)
		rc = walk_entry(w, &end);
	return rc;
}

static int walk(struct walker *w)
{
	yaml_event_t ev;
	bool seen_document = false;
	for (;;) {
		int rc = next_event(w, &ev, NULL);
		if (rc != 0)
			return rc;
		yaml_event_type_t type = ev.type;
		size_t line = line_of(&ev);
		event_done(&ev);
		switch (type) {
		case YAML_STREAM_END_EVENT: return 0;
		case YAML_DOCUMENT_START_EVENT:
			if (seen_document)
				return fail_at(w, line, NULL,
				               "a second document: the file "
				               "holds one mapping of options");
			seen_document = true;
			rc = walk_document(w);
			if (rc != 0)
				return rc;
			break;
		default: break; /* the stream's start, a document's end */
		}
	}
}

/* The file, whole, into a buffer of its own; NUL-terminated. */
static int read_whole(const char *path, const char *source,
                      unsigned char **text, size_t *len, char *err, size_t size)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, size, "%s %s: cannot read it: %s", source, path,
		         strerror(errno));
		return SL_EINVAL;
	}
	unsigned char *buf = sl_xmalloc(SL_CONFIG_FILE_MAX + 1);
	size_t n = fread(buf, 1, SL_CONFIG_FILE_MAX + 1, f);
	int read_error = ferror(f) ? errno : 0;
	fclose(f);
	if (read_error || n > SL_CONFIG_FILE_MAX) {
		if (read_error)
			snprintf(err, size, "%s %s: cannot read it: %s", source,
			         path, strerror(read_error));
		else
			snprintf(err, size,
			         "%s %s: over %u bytes: not a configuration "
			         "file",
			         source, path, SL_CONFIG_FILE_MAX);
		explicit_bzero(buf,
		               n < SL_CONFIG_FILE_MAX ? n : SL_CONFIG_FILE_MAX);
		free(buf);
		return SL_EINVAL;
	}
	buf[n] = '\0';
	*text = buf;
	*len = n;
	return 0;
}

int sl_config_file_read(const char *path, const char *source,
                        sl_config_file_fn fn, void *ctx, char *err,
                        size_t err_size)
{
	struct walker w = {
	    .path = path, .fn = fn, .ctx = ctx, .err = err, .size = err_size};
	unsigned char *text;
	int rc = read_whole(path, source, &text, &w.len, err, err_size);
	if (rc != 0)
		return rc;
	w.text = text;
	if (!yaml_parser_initialize(&w.parser)) {
		snprintf(err, err_size, "%s: out of memory parsing it", path);
		rc = SL_EINVAL;
		goto free_text;
	}
	yaml_parser_set_input_string(&w.parser, text, w.len);
	rc = walk(&w);
	yaml_parser_delete(&w.parser);
	for (unsigned i = 0; i < w.key_count; i++)
		free(w.keys[i]);
	free(w.keys);
	free(w.key_lines);
free_text:
	explicit_bzero(text, w.len);
	free(text);
	return rc;
}

/*
 * Plain only for text made of characters that mean nothing to YAML in
 * block or flow context: letters, digits and "_./+-", and ':' inside (not
 * last, since "a:" would start a mapping). Anything else is quoted.
 */
static bool plain_ok(const char *s)
{
	if (!*s || *s == '-' || *s == ':')
		return false;
	for (const char *c = s; *c; c++) {
		bool ok = (*c >= 'a' && *c <= 'z') ||
		          (*c >= 'A' && *c <= 'Z') ||
		          (*c >= '0' && *c <= '9') || strchr("_./+-", *c) ||
		          (*c == ':' && c[1] != '\0');
		if (!ok)
			return false;
	}
	return true;
}

void sl_config_file_write_scalar(FILE *out, const char *s)
{
	if (plain_ok(s)) {
		fputs(s, out);
		return;
	}
	fputc('"', out);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(out, "\\%c", *c);
		else if (*c < 0x20 || *c == 0x7f)
			fprintf(out, "\\x%02x", *c);
		else
			fputc(*c, out);
	}
	fputc('"', out);
}

/*
 * config_file.c: the YAML configuration file, read with libyaml's event
 * parser. The top level is walked event by event; only a section (a key
 * whose value is a mapping) is built into a tree, freed after its call.
 */
#include "sluice/config/config_file.h"

#include "sluice/base/common.h"

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
	sl_one_line(w->err, w->size);
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
	/* An open bracket or quote is reported where the text ends. */
	if (p->context && p->context_mark.line != p->problem_mark.line)
		return fail_at(w, line, NULL,
		               "not valid YAML: %s (%s started on line %zu)",
		               p->problem ? p->problem : "error", p->context,
		               p->context_mark.line + 1);
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
                const char *key, const char *value,
                const struct sl_config_node *node, size_t line)
{
	char where[PATH_MAX + KEY_SHOWN_MAX + 32];
	snprintf(where, sizeof(where), "%s:%zu: %.*s", w->path, line,
	         KEY_SHOWN_MAX, key);
	return w->fn(w->ctx, item, key, value, node, where, (unsigned)line,
	             w->err, w->size);
}

/* ---- sections ---- */

static void node_free(struct sl_config_node *n)
{
	for (unsigned i = 0; i < n->n; i++)
		node_free(&n->child[i]);
	free(n->child);
	if (n->text)
		explicit_bzero(n->text, strlen(n->text)); /* keys' hashes */
	free(n->text);
	free(n->key);
}

/* The node's name from the top: "models.tiny.args[2]". */
static void node_path(const struct sl_config_node *n, char *buf, size_t size)
{
	if (n->parent)
		node_path(n->parent, buf, size);
	else
		buf[0] = '\0';
	size_t used = strlen(buf);
	if (n->key)
		snprintf(buf + used, size - used, "%s%.*s", used ? "." : "",
		         KEY_SHOWN_MAX, n->key);
	else if (n->parent)
		snprintf(buf + used, size - used, "[%u]", n->index);
}

int sl_config_node_fail(char *err, size_t size, const struct sl_config_node *n,
                        const char *fmt, ...)
{
	char path[4 * KEY_SHOWN_MAX + 64];
	node_path(n, path, sizeof(path));
	int k = snprintf(err, size, "%s:%u: %s: ", n->file, n->line, path);
	if (k < 0 || (size_t)k >= size)
		return SL_EINVAL;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err + k, size - (size_t)k, fmt, ap);
	va_end(ap);
	sl_one_line(err, size);
	return SL_EINVAL;
}

const struct sl_config_node *sl_config_node_get(const struct sl_config_node *m,
                                                const char *key)
{
	if (!m || m->kind != SL_CONFIG_NODE_MAP)
		return NULL;
	for (unsigned i = 0; i < m->n; i++)
		if (strcmp(m->child[i].key, key) == 0)
			return &m->child[i];
	return NULL;
}

static int read_node(struct walker *w, yaml_event_t *first,
                     struct sl_config_node *n, unsigned depth);

/* A new last child of `parent`, started by event `ev`. */
static int read_child(struct walker *w, struct sl_config_node *parent,
                      yaml_event_t *ev, char *key, unsigned depth)
{
	parent->child = sl_xrealloc(parent->child,
	                            (parent->n + 1) * sizeof(*parent->child));
	struct sl_config_node *c = &parent->child[parent->n];
	*c = (struct sl_config_node){.key = key,
	                             .index = parent->n,
	                             .file = w->path,
	                             .line = (unsigned)line_of(ev)};
	parent->n++;
	/* Parents are final only once the tree is whole: fixed up below. */
	return read_node(w, ev, c, depth);
}

/* Children point at their parents; reallocs moved them while reading. */
static void link_parents(struct sl_config_node *n)
{
	for (unsigned i = 0; i < n->n; i++) {
		n->child[i].parent = n;
		link_parents(&n->child[i]);
	}
}

/*
 * The value that starts with event `first` (consumed here), read whole
 * into `n`. Errors name the node: its parent links are not set yet, so
 * they are given the top-level key through the walker's fail_at.
 */
static int read_node(struct walker *w, yaml_event_t *first,
                     struct sl_config_node *n, unsigned depth)
{
	const char *top = w->keys[w->key_count - 1];
	if (first->type == YAML_SCALAR_EVENT) {
		n->kind = SL_CONFIG_NODE_SCALAR;
		int rc = scalar_text(w, first, top);
		if (rc == 0)
			n->text =
			    sl_xstrdup((const char *)first->data.scalar.value);
		return rc;
	}
	if (depth >= SL_CONFIG_FILE_MAX_DEPTH)
		return fail_at(w, n->line, top,
		               "nested more than %d levels deep",
		               SL_CONFIG_FILE_MAX_DEPTH);
	bool map = first->type == YAML_MAPPING_START_EVENT;
	n->kind = map ? SL_CONFIG_NODE_MAP : SL_CONFIG_NODE_LIST;
	for (;;) {
		yaml_event_t ev;
		int rc = next_event(w, &ev, top);
		if (rc != 0)
			return rc;
		if (ev.type == YAML_MAPPING_END_EVENT ||
		    ev.type == YAML_SEQUENCE_END_EVENT) {
			event_done(&ev);
			return 0;
		}
		char *key = NULL;
		if (map) {
			if (ev.type != YAML_SCALAR_EVENT)
				rc =
				    fail_at(w, line_of(&ev), top,
				            "a key must be a single value, not "
				            "%s",
				            kind_of(&ev));
			if (rc == 0)
				rc = scalar_text(w, &ev, top);
			for (unsigned i = 0; rc == 0 && i < n->n; i++)
				if (strcmp(
				        n->child[i].key,
				        (const char *)ev.data.scalar.value) ==
				    0)
					rc = fail_at(w, line_of(&ev), top,
					             "key \"%.*s\" given twice "
					             "(first on "
					             "line %u)",
					             KEY_SHOWN_MAX,
					             n->child[i].key,
					             n->child[i].line);
			if (rc == 0)
				key = sl_xstrdup(
				    (const char *)ev.data.scalar.value);
			event_done(&ev);
			if (rc == 0)
				rc = next_event(w, &ev, top);
			if (rc != 0) {
				free(key);
				return rc;
			}
		}
		rc = read_child(w, n, &ev, key, depth + 1);
		event_done(&ev);
		if (rc != 0)
			return rc;
	}
}

/* `key:` holds a mapping: the whole of it is read and handed over. */
static int walk_section(struct walker *w, const char *key, yaml_event_t *ev)
{
	struct sl_config_node root = {.file = w->path,
	                              .key = sl_xstrdup(key),
	                              .line = (unsigned)line_of(ev)};
	int rc = read_node(w, ev, &root, 1);
	if (rc == 0) {
		link_parents(&root);
		rc = call(w, SL_CONFIG_FILE_SECTION, key, NULL, &root,
		          root.line);
	}
	node_free(&root);
	return rc;
}

/* The items of a list, up to its end; `start` is the list's own line. */
static int walk_list(struct walker *w, const char *key, size_t start)
{
	int rc = call(w, SL_CONFIG_FILE_LIST, key, NULL, NULL, start);
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
			          (const char *)ev.data.scalar.value, NULL,
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
			          (const char *)ev.data.scalar.value, NULL,
			          line_of(&ev));
		break;
	case YAML_SEQUENCE_START_EVENT:
		rc = walk_list(w, key, line_of(&ev));
		break;
	default: /* a mapping: the only other event a value starts with */
		rc = walk_section(w, key, &ev);
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

/*
 * The whole text through libyaml once, before anything reads it: the walk
 * acts on each value as it comes, so without this a list left open
 * (`listen: [127.0.0.1:1`) would be refused for being a list, not for the
 * bracket that is missing. Only syntax is checked here.
 */
static int check_syntax(struct walker *w)
{
	int rc = 0;
	for (bool end = false; rc == 0 && !end;) {
		yaml_event_t ev;
		if (!yaml_parser_parse(&w->parser, &ev)) {
			rc = syntax_error(w);
			break;
		}
		end = ev.type == YAML_STREAM_END_EVENT;
		event_done(&ev);
	}
	return rc;
}

/*
 * The file, whole, into a buffer of its own; NUL-terminated. A path that
 * is not a regular file is refused before any read (sl_fopen_regular): a
 * FIFO would hold a reload's worker, and so the shutdown, for ever.
 */
static int read_whole(const char *path, const char *source,
                      unsigned char **text, size_t *len, char *err, size_t size)
{
	const char *why;
	FILE *f = sl_fopen_regular(path, &why);
	if (!f) {
		snprintf(err, size, "%s %s: cannot read it: %s", source, path,
		         why);
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
	/* Twice over the text: its syntax whole, then its meaning. */
	for (int pass = 0; rc == 0 && pass < 2; pass++) {
		if (!yaml_parser_initialize(&w.parser)) {
			snprintf(err, err_size, "%s: out of memory parsing it",
			         path);
			rc = SL_EINVAL;
			break;
		}
		yaml_parser_set_input_string(&w.parser, text, w.len);
		rc = pass == 0 ? check_syntax(&w) : walk(&w);
		yaml_parser_delete(&w.parser);
	}
	for (unsigned i = 0; i < w.key_count; i++)
		free(w.keys[i]);
	free(w.keys);
	free(w.key_lines);
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

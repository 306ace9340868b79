/*
 * config_file.h: sluice's configuration file (--config FILE), in YAML.
 *
 * The module owns the YAML side only: it reads the file (at start, with
 * blocking reads; it is never called from the event loop), walks libyaml's
 * events and hands each top-level key with its value to a callback. What a
 * key means, and whether its value is valid, is config.c's business: the
 * callback feeds the same code that applies a flag, so a value is checked
 * once, the same way, wherever it comes from.
 *
 * Glossary:
 *   where   the text an error line starts with: "FILE:LINE: KEY", the line
 *           1-based (libyaml's mark plus one), of the value at fault.
 *   list    a YAML sequence given as a key's value (`upstream: [a, b]`, or
 *           one "- item" per line); only repeatable options take one.
 *
 *   section a top-level key whose value is a mapping (`models:`, `keys:`):
 *           it is read whole into a tree of nodes (struct sl_config_node)
 *           and handed over at once, for the module that owns it to read.
 *
 * The file is a mapping of scalar keys to scalars, to sequences of scalars,
 * or (sections) to mappings nested at most SL_CONFIG_FILE_MAX_DEPTH deep.
 * Refused, each with one error line: a syntax error, a file over
 * SL_CONFIG_FILE_MAX bytes, a top level that is not a mapping, a key that
 * is not a scalar, a key given twice (at any depth), a list inside a top-level
 * list, an alias (anchors are not expanded), a NUL byte in a value and a
 * second document, and in a section a mapping or list nested too deep or
 * a key that is not a scalar. Values are taken as text: YAML 1.1's implicit
 * types
 * (`on`, `0x10`, `~`) are not resolved, so `ui: on` is the text "on", as on
 * the command line.
 */
#ifndef SLUICE_CONFIG_FILE_H
#define SLUICE_CONFIG_FILE_H

#include "sluice/base/common.h"

#include <stddef.h>
#include <stdio.h>

/*
 * A configuration file larger than this is refused without being parsed:
 * every option written out with long comments takes under 16 KiB, so a
 * file 64 times that is not a configuration file (or is one gone wrong).
 */
#define SL_CONFIG_FILE_MAX (1024u * 1024u)

/*
 * Nesting a section may have, counting the section's own mapping as 1:
 * `models:` (1) > a model (2) > its `args:` list (3) leaves one level to
 * spare. Deeper input is refused rather than recursed into.
 */
#define SL_CONFIG_FILE_MAX_DEPTH 4

enum sl_config_node_kind {
	SL_CONFIG_NODE_SCALAR,
	SL_CONFIG_NODE_LIST,
	SL_CONFIG_NODE_MAP,
};

/*
 * One value inside a section. A mapping's children are its values in file
 * order, each with the key it stands under; a list's children are its
 * items. Keys are unique within a mapping (a second one is refused).
 */
struct sl_config_node {
	enum sl_config_node_kind kind;
	unsigned line;  /* where the value starts, 1-based */
	char *text;     /* SCALAR: the value (no NUL inside); else NULL */
	char *key;      /* under a MAP: the key; in a LIST or on top: NULL */
	unsigned index; /* position in the parent */
	const struct sl_config_node *parent; /* NULL for the section itself */
	const char *file;                    /* the configuration file's path */
	struct sl_config_node *child;        /* LIST, MAP: n children */
	unsigned n;
};

/* The child of map `m` under `key`, or NULL (also when m is no MAP). */
const struct sl_config_node *sl_config_node_get(const struct sl_config_node *m,
                                                const char *key);

/*
 * Writes "FILE:LINE: PATH: message" into err, where PATH names the node
 * from the top of the file ("models.tiny.slots", "models.tiny.args[2]"),
 * and returns SL_EINVAL: the one shape of a section's error lines.
 */
SL_PRINTF(4, 5)
int sl_config_node_fail(char *err, size_t size, const struct sl_config_node *n,
                        const char *fmt, ...);

/* What the callback is handed. */
enum sl_config_file_item {
	SL_CONFIG_FILE_SCALAR,    /* `key: value` */
	SL_CONFIG_FILE_LIST,      /* `key:` starts a sequence; value is NULL */
	SL_CONFIG_FILE_LIST_ITEM, /* one item of the sequence just started */
	SL_CONFIG_FILE_SECTION,   /* `key:` holds a mapping: see `node` */
};

/*
 * Called once per key (and once per item of a list), in file order.
 * `key` and `value` are NUL-terminated and valid during the call only
 * (value is NULL for LIST and SECTION; node is the section's tree for
 * SECTION, else NULL, and lives as long as the call);
 * `where` names the file, the line and the key, for an error line; `line`
 * is that line (1-based). Returns 0, or a negative code after writing one
 * line into err.
 */
typedef int (*sl_config_file_fn)(void *ctx, enum sl_config_file_item item,
                                 const char *key, const char *value,
                                 const struct sl_config_node *node,
                                 const char *where, unsigned line, char *err,
                                 size_t err_size);

/*
 * Reads the YAML file at `path` and calls `fn` for each key. `source`
 * names where the path came from ("--config", "SLUICE_CONFIG") for an error
 * that concerns the file as a whole (it cannot be read, it is too large).
 * Returns 0, or SL_EINVAL with one line in err (the callback's own error is
 * passed on as it is).
 */
int sl_config_file_read(const char *path, const char *source,
                        sl_config_file_fn fn, void *ctx, char *err,
                        size_t err_size);

/*
 * Writes `s` as a YAML scalar: plain where that reads back as the same
 * text, else double-quoted with escapes. For --check-config's output.
 */
void sl_config_file_write_scalar(FILE *out, const char *s);

#endif

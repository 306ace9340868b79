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
 * The file is a mapping of scalar keys to scalars or to sequences of
 * scalars. Refused, each with one error line: a syntax error, a file over
 * SL_CONFIG_FILE_MAX bytes, a top level that is not a mapping, a key that
 * is not a scalar, a key given twice, a mapping as a value, a list inside a
 * list, an alias (anchors are not expanded), a NUL byte in a value and a
 * second document. Values are taken as text: YAML 1.1's implicit types
 * (`on`, `0x10`, `~`) are not resolved, so `ui: on` is the text "on", as on
 * the command line.
 */
#ifndef SLUICE_CONFIG_FILE_H
#define SLUICE_CONFIG_FILE_H

#include <stddef.h>
#include <stdio.h>

/*
 * A configuration file larger than this is refused without being parsed:
 * every option written out with long comments takes under 16 KiB, so a
 * file 64 times that is not a configuration file (or is one gone wrong).
 */
#define SL_CONFIG_FILE_MAX (1024u * 1024u)

/* What the callback is handed. */
enum sl_config_file_item {
	SL_CONFIG_FILE_SCALAR,    /* `key: value` */
	SL_CONFIG_FILE_LIST,      /* `key:` starts a sequence; value is NULL */
	SL_CONFIG_FILE_LIST_ITEM, /* one item of the sequence just started */
};

/*
 * Called once per key (and once per item of a list), in file order.
 * `key` and `value` are NUL-terminated and valid during the call only;
 * `where` names the file, the line and the key, for an error line; `line`
 * is that line (1-based). Returns 0, or a negative code after writing one
 * line into err.
 */
typedef int (*sl_config_file_fn)(void *ctx, enum sl_config_file_item item,
                                 const char *key, const char *value,
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

/*
 * config_impl.h: what the pieces of the option layer (config.c,
 * config_options.c, config_values.c, config_print.c) share and no other
 * module sees: the option table's shape and the table itself, and the
 * calls that apply one value to one option. The layer's interface is
 * sluice/config/config.h.
 */
#ifndef SLUICE_CONFIG_IMPL_H
#define SLUICE_CONFIG_IMPL_H

#include "sluice/config/config.h"

#include "sluice/base/common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum opt_type {
	OPT_STRING,   /* any text */
	OPT_ADDR,     /* IP:PORT to listen on */
	OPT_UINT,     /* whole number in [min, max] */
	OPT_DURATION, /* milliseconds in [min, max] */
	/* "auto" (stored as SL_SCHED_WINDOW_AUTO) or an OPT_DURATION */
	OPT_AUTO_DURATION,
	/* "auto" (stored as SL_SCHED_RESERVE_AUTO) or an OPT_UINT */
	OPT_AUTO_UINT,
	OPT_SIZE,     /* bytes in [min, max], with an optional K, M or G */
	OPT_NUMBER,   /* a decimal number in [min, max] */
	OPT_SWITCH,   /* on or off */
	OPT_CHOICE,   /* one of choices[], stored as its index */
	OPT_URL_LIST, /* repeatable http(s) base URL */
	OPT_ARG_LIST, /* repeatable verbatim argument */
	/*
	 * Repeatable secret: each value is a comma-separated list of keys, as
	 * llama-server's --api-key takes. A key is never echoed in an error.
	 */
	OPT_KEY_LIST,
	OPT_SECRET,      /* one key, never echoed */
	OPT_ORIGIN_LIST, /* web origins, or "*", "localhost" or "none" */
	OPT_CIDR_LIST,   /* repeatable address range (client_addr.h); commas */
	/* A service level per priority class (struct sl_slo_classes). */
	OPT_SLO,
	/* An http(s) URL with a host, as given (otel_syntax.h). */
	OPT_URL,
	/* key=value,... (otel_syntax.h), checked and kept as written */
	OPT_PAIRS,
	/* the same as header lines, which may hold secrets: masked */
	OPT_HEADER_PAIRS,
};

struct option_def {
	const char *name;    /* the flag, without "--" */
	const char *env;     /* environment twin */
	const char *metavar; /* placeholder in --help */
	enum opt_type type;
	size_t offset;     /* of the field in struct sl_config */
	const char *def;   /* default, written as a user would */
	uint64_t min, max; /* OPT_*UINT, OPT_*DURATION (in ms) */
	const char *const *choices;
	const char *help;
	const char *def_help; /* describes an empty default */
};

/* Actions: flags that make sluice do one thing and exit; no environment. */
struct action_def {
	const char *name;
	const char *metavar; /* NULL: takes no value */
	const char *help;
};

#define FIELD(f) offsetof(struct sl_config, f)
#define SEC 1000u

/* The options, in --help's order, and the actions (config_options.c). */
extern const struct option_def sl_config_options[];
extern const size_t sl_config_n_options;
extern const struct action_def sl_config_actions[];
extern const size_t sl_config_n_actions;

/* ---- one value (config_values.c) ---- */

/* One line into err: "NAME: message". Always returns SL_EINVAL. */
SL_PRINTF(4, 5)
int sl_config_fail(char *err, size_t size, const char *where, const char *fmt,
                   ...);

/*
 * Applies one value to one option. `where` names the source in errors (the
 * flag or the environment variable).
 */
int sl_config_apply(struct sl_config *cfg, const struct option_def *o,
                    const char *value, const char *where, char *err,
                    size_t size);

/* Whether the option may be repeated (a list option, config.h). */
int sl_config_is_list(const struct option_def *o);

/* Replaces *field with a copy of value. */
void sl_config_set_string(char **field, const char *value);

/*
 * Whether key[0..len) can be a client key (0, or SL_EINVAL with one line
 * in err that never shows the key).
 */
int sl_config_check_key(const char *key, size_t len, const char *where,
                        char *err, size_t size);

/* Pushes a copy of s[0..len), and wipes the temporary copy made of it. */
void sl_config_push_span(struct sl_strlist *l, const char *s, size_t len);

#endif

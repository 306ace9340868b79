/*
 * config.c: the sources of the options, read in rising precedence
 * (defaults, the configuration file, the environment, the flags), the
 * --api-key-file, the checks across options once every source is read,
 * and sl_config_free().
 *
 * What one value means is config_values.c's; the table of options is
 * config_options.c's; the file's sections belong to the modules that own
 * what they configure, handed down by the caller (struct
 * sl_config_section), so that this layer includes none of them.
 */
#include "sluice/config/config.h"

#include "config_impl.h"
#include "sluice/base/common.h"
#include "sluice/config/config_file.h"
#include "sluice/config/discovery_syntax.h"
#include "sluice/sched/sched.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*
 * A list option's environment value holds several items. Key, origin and
 * range lists split their values on commas themselves, flags and
 * environment alike.
 */
static int apply_env_list(struct sl_config *cfg, const struct option_def *o,
                          const char *value, char *err, size_t size)
{
	if (o->type == OPT_KEY_LIST || o->type == OPT_ORIGIN_LIST ||
	    o->type == OPT_CIDR_LIST)
		return sl_config_apply(cfg, o, value, o->env, err, size);
	const char *seps = o->type == OPT_URL_LIST ? ", \t\n" : " \t\n";
	char *copy = sl_xstrdup(value), *save = NULL;
	int rc = 0;
	for (char *tok = strtok_r(copy, seps, &save); tok && rc == 0;
	     tok = strtok_r(NULL, seps, &save))
		rc = sl_config_apply(cfg, o, tok, o->env, err, size);
	free(copy);
	return rc;
}

static const char *env_lookup(char *const envp[], const char *name)
{
	size_t len = strlen(name);
	for (; envp && *envp; envp++)
		if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=')
			return *envp + len + 1;
	return NULL;
}

static const struct option_def *find_option(const char *name, size_t len)
{
	for (size_t i = 0; i < sl_config_n_options; i++)
		if (strlen(sl_config_options[i].name) == len &&
		    strncmp(sl_config_options[i].name, name, len) == 0)
			return &sl_config_options[i];
	return NULL;
}

static const struct action_def *find_action(const char *name, size_t len)
{
	for (size_t i = 0; i < sl_config_n_actions; i++)
		if (strlen(sl_config_actions[i].name) == len &&
		    strncmp(sl_config_actions[i].name, name, len) == 0)
			return &sl_config_actions[i];
	return NULL;
}

static const struct option_def *option_named(const char *name)
{
	return find_option(name, strlen(name));
}

static void apply_action(struct sl_config *cfg, const struct action_def *a,
                         const char *value)
{
	if (strcmp(a->name, "help") == 0)
		cfg->help = true;
	else if (strcmp(a->name, "version") == 0)
		cfg->version = true;
	else if (strcmp(a->name, "hash-key") == 0)
		cfg->hash_key = true;
	else if (strcmp(a->name, "probe") == 0)
		sl_config_set_string(&cfg->probe, value);
	else if (strcmp(a->name, "check-config") == 0)
		sl_config_set_string(&cfg->check_config, value);
	else
		sl_config_set_string(&cfg->write_demo_model, value);
}

/* An option given on the command line, kept until its turn comes. */
struct flag_value {
	const struct option_def *o;
	const char *value;
	char where[64]; /* "--NAME", for an error line */
};

/* What parsing carries from one source to the next. */
struct parse_state {
	struct sl_config *cfg;
	const char *file; /* the configuration file read, or NULL */
	/* Each option's line in that file, where the file set it. */
	unsigned file_line[SL_CONFIG_OPTIONS_MAX];
	char *err;
	size_t size;
};

/*
 * Makes `source` the source of option `o`. A list given by a source
 * replaces what the sources below it gave (their items are dropped the
 * first time this source names the option), so a flag's --upstream is the
 * whole list, not one more upstream.
 */
static void take_over(struct sl_config *cfg, const struct option_def *o,
                      enum sl_config_source source)
{
	size_t idx = (size_t)(o - sl_config_options);
	if (sl_config_is_list(o) && cfg->source[idx] != source)
		sl_strlist_clear((void *)((char *)cfg + o->offset));
	cfg->source[idx] = (unsigned char)source;
}

/*
 * Names where option `name` was set, for an error found after every
 * source was read: "FILE:LINE: name" for the file, else the flag (or the
 * environment variable, where `env_as_itself`).
 */
static const char *source_name(const struct parse_state *st, const char *name,
                               bool env_as_itself, char *buf, size_t size)
{
	const struct option_def *o = option_named(name);
	size_t idx = (size_t)(o - sl_config_options);
	switch (st->cfg->source[idx]) {
	case SL_CONFIG_FROM_FILE:
		snprintf(buf, size, "%s:%u: %s", st->file, st->file_line[idx],
		         o->name);
		return buf;
	case SL_CONFIG_FROM_ENV:
		if (env_as_itself)
			return o->env;
		break;
	default: break;
	}
	snprintf(buf, size, "--%s", o->name);
	return buf;
}

/* The section of the file named `name` in cfg's table, or NULL. */
static const struct sl_config_section *
section_named(const struct sl_config *cfg, const char *name)
{
	for (const struct sl_config_section *d = cfg->sections; d && d->name;
	     d++)
		if (strcmp(d->name, name) == 0)
			return d;
	return NULL;
}

/* One key of the configuration file (config_file.h's callback). */
static int apply_file_item(void *ctx, enum sl_config_file_item item,
                           const char *key, const char *value,
                           const struct sl_config_node *node, const char *where,
                           unsigned line, char *err, size_t size)
{
	struct parse_state *st = ctx;
	if (item == SL_CONFIG_FILE_SECTION) {
		const struct sl_config_section *d = section_named(st->cfg, key);
		if (d)
			return d->apply(st->cfg, node, err, size);
		return sl_config_fail(
		    err, size, where,
		    option_named(key)
		        ? "takes a value, not a mapping"
		        : "unknown section (see deploy/sluice.yaml)");
	}
	const struct option_def *o = option_named(key);
	/* The file's own name in it would be a loop; actions are one-shot. */
	if (find_action(key, strlen(key)) ||
	    (o && o->offset == FIELD(config_file)))
		return sl_config_fail(
		    err, size, where,
		    "a one-shot flag, not an option a configuration "
		    "file can set");
	/* "keys:" with every entry commented out is null, not empty. */
	if (!o && section_named(st->cfg, key))
		return sl_config_fail(
		    err, size, where,
		    "a section: expected a mapping of its entries (%s: "
		    "{} for none)",
		    key);
	if (!o)
		return sl_config_fail(err, size, where,
		                      "unknown option (see --help)");
	if (item == SL_CONFIG_FILE_LIST && !sl_config_is_list(o))
		return sl_config_fail(
		    err, size, where,
		    "takes one value, not a list (only repeatable "
		    "options take lists)");
	if (item != SL_CONFIG_FILE_LIST_ITEM) {
		take_over(st->cfg, o, SL_CONFIG_FROM_FILE);
		st->file_line[o - sl_config_options] = line;
	}
	if (item == SL_CONFIG_FILE_LIST)
		return 0;
	return sl_config_apply(st->cfg, o, value, where, err, size);
}

/*
 * The configuration file named by --config, else --check-config, else
 * SLUICE_CONFIG; none when all are empty.
 */
static int read_config_file(struct parse_state *st,
                            const struct flag_value *flags, int nflags,
                            char *const envp[])
{
	const char *path = NULL, *source = NULL;
	for (int i = 0; i < nflags; i++)
		if (flags[i].o->offset == FIELD(config_file)) {
			path = flags[i].value;
			source = "--config";
		}
	if (path && st->cfg->check_config)
		return sl_config_fail(
		    st->err, st->size, "--check-config",
		    "names the file to check: leave out --config");
	if (st->cfg->check_config) {
		path = st->cfg->check_config;
		source = "--check-config";
	}
	if (!path) {
		path = env_lookup(envp, "SLUICE_CONFIG");
		source = "SLUICE_CONFIG";
	}
	if (!path || !*path)
		return 0;
	st->file = path;
	return sl_config_file_read(path, source, apply_file_item, st, st->err,
	                           st->size);
}

static int apply_defaults(struct sl_config *cfg, char *err, size_t size)
{
	for (size_t i = 0; i < sl_config_n_options; i++) {
		const struct option_def *o = &sl_config_options[i];
		if (o->def &&
		    sl_config_apply(cfg, o, o->def, o->name, err, size) != 0)
			return SL_EINVAL; /* a bad default is a bug */
	}
	return 0;
}

static int apply_env(struct sl_config *cfg, char *const envp[], char *err,
                     size_t size)
{
	for (size_t i = 0; i < sl_config_n_options; i++) {
		const struct option_def *o = &sl_config_options[i];
		const char *v = env_lookup(envp, o->env);
		if (!v || !*v)
			continue;
		take_over(cfg, o, SL_CONFIG_FROM_ENV);
		int rc = sl_config_is_list(o)
		             ? apply_env_list(cfg, o, v, err, size)
		             : sl_config_apply(cfg, o, v, o->env, err, size);
		if (rc != 0)
			return rc;
	}
	/* The mini-v seed's variable: one more upstream. */
	const char *v = env_lookup(envp, "LLAMA_SERVER_URL");
	if (v && *v) {
		for (size_t i = 0; i < sl_config_n_options; i++)
			if (sl_config_options[i].type == OPT_URL_LIST) {
				take_over(cfg, &sl_config_options[i],
				          SL_CONFIG_FROM_ENV);
				return sl_config_apply(
				    cfg, &sl_config_options[i], v,
				    "LLAMA_SERVER_URL", err, size);
			}
	}
	return 0;
}

/*
 * Reads argv into `flags` (options, kept for their turn) and applies the
 * actions at once: they come from nowhere else. Returns the count of
 * options, or SL_EINVAL.
 */
static int read_argv(struct sl_config *cfg, int argc, char *const argv[],
                     struct flag_value *flags, char *err, size_t size)
{
	int n = 0;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (strcmp(arg, "-h") == 0)
			arg = "--help";
		if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
			return sl_config_fail(
			    err, size, arg,
			    "unexpected argument (options are --NAME "
			    "VALUE or --NAME=VALUE; see --help)");
		const char *name = arg + 2;
		const char *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);

		const struct action_def *a = find_action(name, len);
		const struct option_def *o = a ? NULL : find_option(name, len);
		if (!a && !o)
			return sl_config_fail(err, size, arg,
			                      "unknown option (see --help)");

		const char *value = eq ? eq + 1 : NULL;
		bool wants_value = o || a->metavar;
		if (!wants_value && value)
			return sl_config_fail(err, size, arg, "takes no value");
		if (wants_value && !value) {
			if (i + 1 >= argc)
				return sl_config_fail(
				    err, size, arg,
				    "missing value (expected %s)",
				    o ? o->metavar : a->metavar);
			value = argv[++i];
		}
		if (a) {
			apply_action(cfg, a, value);
			continue;
		}
		flags[n].o = o;
		flags[n].value = value;
		snprintf(flags[n].where, sizeof(flags[n].where), "--%.*s",
		         (int)len, name);
		n++;
	}
	return n;
}

/*
 * Adds the keys of --api-key-file to the client keys. The file is read
 * once, here: a key added later takes a restart (or a second sluice behind
 * the same balancer), which keeps the check on each request free of I/O.
 */
static int read_key_file(const struct parse_state *st)
{
	struct sl_config *cfg = st->cfg;
	char *err = st->err;
	size_t size = st->size;
	if (!cfg->api_key_file[0])
		return 0;
	char where[2 * PATH_MAX + 64], opt[PATH_MAX + 64];
	snprintf(where, sizeof(where), "%s %s",
	         source_name(st, "api-key-file", true, opt, sizeof(opt)),
	         cfg->api_key_file);
	/* Not a FIFO, whose open would wait (config_file.c, read_whole). */
	const char *why;
	FILE *f = sl_fopen_regular(cfg->api_key_file, &why);
	if (!f)
		return sl_config_fail(err, size, where, "cannot read it: %s",
		                      why);
	char *text = sl_xmalloc(SL_API_KEY_FILE_MAX + 1);
	size_t len = fread(text, 1, SL_API_KEY_FILE_MAX + 1, f);
	int read_error = ferror(f) ? errno : 0;
	fclose(f);
	int rc = 0;
	if (read_error)
		rc = sl_config_fail(err, size, where, "cannot read it: %s",
		                    strerror(read_error));
	else if (len > SL_API_KEY_FILE_MAX)
		rc = sl_config_fail(err, size, where,
		                    "over %u bytes: not a list of keys",
		                    SL_API_KEY_FILE_MAX);
	text[len < SL_API_KEY_FILE_MAX ? len : SL_API_KEY_FILE_MAX] = '\0';

	unsigned line_no = 0, found = 0;
	for (char *line = text, *next; rc == 0 && line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		line_no++;
		/* Editors leave CRs and stray spaces; no key holds either. */
		size_t n = strlen(line);
		while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ' ||
		                 line[n - 1] == '\t'))
			n--;
		char *key = line;
		while (n > 0 && (*key == ' ' || *key == '\t')) {
			key++;
			n--;
		}
		if (n == 0 || key[0] == '#')
			continue;
		char at[sizeof(where) + 24];
		snprintf(at, sizeof(at), "%s, line %u", where, line_no);
		if (sl_config_check_key(key, n, at, err, size) != 0)
			rc = SL_EINVAL;
		else
			sl_config_push_span(&cfg->api_keys, key, n);
		found++;
	}
	explicit_bzero(text,
	               len < SL_API_KEY_FILE_MAX ? len : SL_API_KEY_FILE_MAX);
	free(text);
	if (rc == 0 && found == 0)
		rc = sl_config_fail(
		    err, size, where,
		    "no key in it (one key per line; blank lines and "
		    "lines starting with # are skipped)");
	return rc;
}

/* Whether an argument list turns on llama-server's tools or MCP servers. */
bool sl_config_args_enable_tools(const struct sl_strlist *args)
{
	static const char *const flags[] = {
	    "--tools",
	    "--agent",
	    "-ag",
	    "--mcp-servers-config",
	    "--mcp-servers-json",
	};
	for (unsigned i = 0; i < args->count; i++)
		for (size_t k = 0; k < SL_ARRAY_SIZE(flags); k++)
			if (strcmp(args->items[i], flags[k]) == 0)
				return true;
	return false;
}

/* Whether llama-servers started with this environment run tools. */
static bool env_enables_tools(char *const *envp)
{
	static const char *const names[] = {
	    "LLAMA_ARG_TOOLS=",
	    "LLAMA_ARG_MCP_SERVERS_CONFIG=",
	    "LLAMA_ARG_MCP_SERVERS_JSON=",
	};
	for (char *const *e = envp; e && *e; e++) {
		for (size_t k = 0; k < SL_ARRAY_SIZE(names); k++) {
			size_t n = strlen(names[k]);
			if (strncmp(*e, names[k], n) == 0 && (*e)[n])
				return true;
		}
		/* A switch: llama-server takes 1, true, on and enabled. */
		static const char agent[] = "LLAMA_ARG_AGENT=";
		if (strncmp(*e, agent, sizeof(agent) - 1) == 0) {
			const char *v = *e + sizeof(agent) - 1;
			if (!strcmp(v, "1") || !strcasecmp(v, "true") ||
			    !strcasecmp(v, "on") || !strcasecmp(v, "enabled"))
				return true;
		}
	}
	return false;
}

/*
 * Whether a llama-server that sluice starts runs built-in tools or MCP
 * servers (its --llama-arg, a model's args:, or the LLAMA_ARG_*
 * environment it inherits): llama-server then allows only localhost
 * origins by default, because a page that may call it may run them.
 */
static bool managed_tools(const struct sl_config *cfg)
{
	if (sl_config_args_enable_tools(&cfg->llama_args) ||
	    env_enables_tools(cfg->envp))
		return true;
	for (const struct sl_config_section *d = cfg->sections; d && d->name;
	     d++)
		if (d->runs_tools && d->runs_tools(cfg))
			return true;
	return false;
}

/*
 * "*", "localhost" and "none" stand alone; "none" leaves the list empty,
 * which is how the HTTP server reads "no CORS". Not set anywhere, it is
 * "*", or "localhost" as llama-server's own default is when tools run.
 */
static int settle_origins(const struct parse_state *st)
{
	struct sl_strlist *l = &st->cfg->cors_origins;
	const struct option_def *o = option_named("cors-origin");
	if (st->cfg->source[o - sl_config_options] == SL_CONFIG_FROM_DEFAULT &&
	    managed_tools(st->cfg)) {
		sl_strlist_clear(l);
		sl_strlist_push(l, "localhost");
		st->cfg->cors_localhost_for_tools = true;
	}
	char where[PATH_MAX + 64];
	for (unsigned i = 0; i < l->count; i++) {
		bool special = strcmp(l->items[i], "*") == 0 ||
		               strcmp(l->items[i], "localhost") == 0 ||
		               strcmp(l->items[i], "none") == 0;
		if (special && l->count > 1)
			return sl_config_fail(
			    st->err, st->size,
			    source_name(st, "cors-origin", false, where,
			                sizeof(where)),
			    "%s cannot be combined with other origins",
			    l->items[i]);
	}
	if (l->count == 1 && strcmp(l->items[0], "none") == 0)
		sl_strlist_clear(l);
	return 0;
}

/*
 * --port N replaces the port of --listen's address, wherever each was set,
 * as llama-server's --host and --port are apart: --port alone listens on
 * the default address, loopback. cfg->listen is written again so that
 * every message names the address really used.
 */
static void settle_port(const struct parse_state *st)
{
	struct sl_config *cfg = st->cfg;
	const struct option_def *o = option_named("port");
	if (cfg->source[o - sl_config_options] == SL_CONFIG_FROM_DEFAULT)
		return;
	cfg->listen_port = cfg->port;
	bool v6 = strchr(cfg->listen_host, ':') != NULL;
	char addr[128];
	snprintf(addr, sizeof(addr), "%s%s%s:%u", v6 ? "[" : "",
	         cfg->listen_host, v6 ? "]" : "", cfg->port);
	sl_config_set_string(&cfg->listen, addr);
}

unsigned sl_config_fixed_reserve(const struct sl_config *cfg)
{
	unsigned urgent = cfg->urgent_reserve != SL_SCHED_RESERVE_AUTO
	                      ? cfg->urgent_reserve
	                      : 0;
	return urgent + (cfg->fairness != SL_FAIRNESS_OFF ? cfg->fair_reserve
	                                                  : 0);
}

/*
 * Across options: a reserve that covers every slot would leave non-urgent
 * requests nothing (for ever, with --aging-rate 0). The auto reserve keeps
 * below the slots by itself.
 */
static int check_reserve(const struct parse_state *st)
{
	const struct sl_config *cfg = st->cfg;
	unsigned slots =
	    cfg->slots_per_upstream ? cfg->slots_per_upstream : cfg->slots;
	/* With models: each model's slots are checked (models_config.h). */
	bool known =
	    cfg->n_models == 0 && (cfg->slots_per_upstream || cfg->model[0] ||
	                           cfg->upstreams.count == 0);
	char where[PATH_MAX + 64];
	if (known && cfg->urgent_reserve != SL_SCHED_RESERVE_AUTO &&
	    cfg->urgent_reserve >= slots)
		return sl_config_fail(
		    st->err, st->size,
		    source_name(st, "urgent-reserve", false, where,
		                sizeof(where)),
		    "%u must be less than the %u slots of an upstream, "
		    "or only urgent requests could run",
		    cfg->urgent_reserve, slots);
	if (known && sl_config_fixed_reserve(cfg) >= slots)
		return sl_config_fail(
		    st->err, st->size,
		    source_name(st, "fair-reserve", false, where,
		                sizeof(where)),
		    "%u, with the urgent reserve, must be less than the %u "
		    "slots of an upstream, or only urgent requests and "
		    "tenants below their share could run",
		    cfg->fair_reserve, slots);
	return 0;
}

/* Across options: a budget smaller than one body would refuse that body. */
static int check_body_memory(const struct parse_state *st)
{
	const struct sl_config *cfg = st->cfg;
	char where[PATH_MAX + 64];
	if (cfg->max_body_memory < cfg->max_body)
		return sl_config_fail(
		    st->err, st->size,
		    source_name(st, "max-body-memory", false, where,
		                sizeof(where)),
		    "%llu bytes is less than --max-body (%llu): a body "
		    "that large could never be read",
		    (unsigned long long)cfg->max_body_memory,
		    (unsigned long long)cfg->max_body);
	return 0;
}

/*
 * --occupancy-poll: 0, or at least its floor. The table's bounds cannot
 * say "0 or more than the floor".
 */
static int check_occupancy_poll(const struct parse_state *st)
{
	uint64_t ms = st->cfg->occupancy_poll_ms;
	char where[PATH_MAX + 64];
	if (ms == 0 || ms >= SL_OCCUPANCY_POLL_MIN_MS)
		return 0;
	return sl_config_fail(
	    st->err, st->size,
	    source_name(st, "occupancy-poll", true, where, sizeof(where)),
	    "%llums is below the floor of %ums (0 turns polling off)",
	    (unsigned long long)ms, SL_OCCUPANCY_POLL_MIN_MS);
}

/* --upstream-dns and --dns-server: their syntax, checked before any use. */
static int check_dns(const struct parse_state *st)
{
	const struct sl_config *cfg = st->cfg;
	char where[PATH_MAX + 64], why[512];
	for (unsigned i = 0; i < cfg->upstream_dns.count; i++)
		if (sl_discovery_parse_target(cfg->upstream_dns.items[i], NULL,
		                              NULL, why, sizeof(why)) != 0)
			return sl_config_fail(st->err, st->size,
			                      source_name(st, "upstream-dns",
			                                  true, where,
			                                  sizeof(where)),
			                      "%s", why);
	if (cfg->dns_server[0] &&
	    sl_discovery_parse_server(cfg->dns_server, why, sizeof(why)) != 0)
		return sl_config_fail(
		    st->err, st->size,
		    source_name(st, "dns-server", true, where, sizeof(where)),
		    "%s", why);
	return 0;
}

/* Across options: a batch cannot hold more spans than may wait. */
static int check_otel(const struct parse_state *st)
{
	const struct sl_config *cfg = st->cfg;
	char where[PATH_MAX + 64];
	if (cfg->otel_bsp_max_export_batch_size <= cfg->otel_bsp_max_queue_size)
		return 0;
	return sl_config_fail(
	    st->err, st->size,
	    source_name(st, "otel-bsp-max-export-batch-size", true, where,
	                sizeof(where)),
	    "%u is more than --otel-bsp-max-queue-size (%u)",
	    cfg->otel_bsp_max_export_batch_size, cfg->otel_bsp_max_queue_size);
}

/*
 * The sources in rising precedence: defaults, the file, the environment,
 * the flags. Argv is read first all the same, since it may name the file.
 */
int sl_config_parse(struct sl_config *cfg,
                    const struct sl_config_section *sections, int argc,
                    char *const argv[], char *const envp[], char *err,
                    size_t size)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->sections = sections;
	cfg->argc = argc;
	cfg->argv = argv;
	cfg->envp = envp;
	err[0] = '\0';
	struct parse_state st = {.cfg = cfg, .err = err, .size = size};
	struct flag_value *flags =
	    sl_xcalloc(argc > 0 ? (size_t)argc : 1, sizeof(*flags));

	int n = read_argv(cfg, argc, argv, flags, err, size);
	int rc = n < 0 ? n : apply_defaults(cfg, err, size);
	if (rc == 0)
		rc = read_config_file(&st, flags, n, envp);
	if (rc == 0)
		rc = apply_env(cfg, envp, err, size);
	for (int i = 0; rc == 0 && i < n; i++) {
		take_over(cfg, flags[i].o, SL_CONFIG_FROM_FLAG);
		rc = sl_config_apply(cfg, flags[i].o, flags[i].value,
		                     flags[i].where, err, size);
	}
	if (rc == 0 && cfg->check_config) {
		/* --check-config FILE stands for --config FILE. */
		const struct option_def *o = option_named("config");
		take_over(cfg, o, SL_CONFIG_FROM_FLAG);
		sl_config_set_string(&cfg->config_file, cfg->check_config);
	}
	free(flags);
	if (rc == 0)
		rc = read_key_file(&st);
	if (rc == 0) {
		settle_port(&st);
		rc = settle_origins(&st);
	}
	if (rc == 0)
		rc = check_reserve(&st);
	if (rc == 0)
		rc = check_body_memory(&st);
	if (rc == 0)
		rc = check_occupancy_poll(&st);
	if (rc == 0)
		rc = check_otel(&st);
	for (const struct sl_config_section *d = sections;
	     rc == 0 && d && d->name; d++)
		if (d->check)
			rc = d->check(cfg, err, size);
	if (rc == 0)
		rc = check_dns(&st);
	return rc;
}

void sl_config_free(struct sl_config *cfg)
{
	for (size_t i = 0; i < sl_config_n_options; i++) {
		void *field = (char *)cfg + sl_config_options[i].offset;
		switch (sl_config_options[i].type) {
		case OPT_STRING:
		case OPT_URL:
		case OPT_PAIRS:
		case OPT_ADDR: free(*(char **)field); break;
		case OPT_HEADER_PAIRS:
		case OPT_SECRET:
			if (*(char **)field)
				explicit_bzero(*(char **)field,
				               strlen(*(char **)field));
			free(*(char **)field);
			break;
		case OPT_KEY_LIST: {
			struct sl_strlist *keys = field;
			for (unsigned k = 0; k < keys->count; k++)
				explicit_bzero(keys->items[k],
				               strlen(keys->items[k]));
			sl_strlist_clear(keys);
			break;
		}
		case OPT_URL_LIST:
		case OPT_ORIGIN_LIST:
		case OPT_CIDR_LIST:
		case OPT_ARG_LIST: sl_strlist_clear(field); break;
		default: break;
		}
	}
	free(cfg->listen_host);
	free(cfg->write_demo_model);
	free(cfg->probe);
	free(cfg->check_config);
	for (const struct sl_config_section *d = cfg->sections; d && d->name;
	     d++)
		if (d->release)
			d->release(cfg);
	memset(cfg, 0, sizeof(*cfg));
}

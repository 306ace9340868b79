/*
 * config.h: sluice's options, from the command line and the environment.
 *
 * Every option is a long flag with an environment-variable twin
 * (--listen / SLUICE_LISTEN), and a key of the configuration file
 * (--config FILE, see config_file.h). A flag wins over the environment,
 * which wins over the file, which wins over the default. Defaults live in
 * one table in config_options.c and are parsed by the same code as user
 * input, so `--help` always shows what sluice really uses.
 *
 * Glossary:
 *   list option  an option that may be repeated (--upstream, --llama-arg);
 *                its environment twin holds several values, its file key
 *                takes a YAML list, and each source replaces the whole list
 *                of the sources below it (flags replace the environment's).
 *   source       where an option's value came from: its default, the file,
 *                the environment or a flag (--check-config shows it).
 *   duration     a number of seconds ("2", "0.5") or of milliseconds with an
 *                "ms" suffix ("50ms"); stored in milliseconds.
 */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct sl_keys;
struct sl_config_node; /* config_file.h */
struct sl_config_section;

/* A growable list of owned strings. */
struct sl_strlist {
	char **items;
	unsigned count;
};

void sl_strlist_push(struct sl_strlist *l, const char *s);
void sl_strlist_clear(struct sl_strlist *l);

/* Where an option's value came from, in rising precedence. */
enum sl_config_source {
	SL_CONFIG_FROM_DEFAULT,
	SL_CONFIG_FROM_FILE,
	SL_CONFIG_FROM_ENV,
	SL_CONFIG_FROM_FLAG,
};

/*
 * Models one sluice serves at most: each may run llama-servers, and a
 * machine runs a handful; the bound keeps a stray file from spawning
 * hundreds.
 */
#define SL_MODELS_MAX 32
/*
 * Room for the options in sl_config.source; config_options.c asserts it is
 * enough.
 */
#define SL_CONFIG_OPTIONS_MAX 96
/* --retries: more than a few resends only multiplies a failure's load. */
#define SL_RETRIES_MAX 5
/* --memory-budget at most: 1 PiB, beyond any machine's memory. */
#define SL_MEMORY_BUDGET_MAX (1ull << 50)
/*
 * --occupancy-poll at the least (0 aside, which turns polling off): each
 * poll is a task for llama-server and re-arms its one-second wait for
 * results, a poll is held 50 ms after a request sent there anyway
 * (fleet/upstream.h, "Occupancy"), and it times out after half the
 * interval, which this keeps at 50 ms or more. 1 ms made 463 polls a
 * second (issue 41).
 */
#define SL_OCCUPANCY_POLL_MIN_MS 100
/* --affinity-margin at most: beyond any replica's slots. */
#define SL_AFFINITY_MARGIN_MAX 1024
/* --eject-after: a bound so that the option is read as intended. */
#define SL_EJECT_AFTER_MAX 1000
/*
 * The longest ejection: an upstream that keeps failing is still tried
 * every few minutes, as Envoy's outlier detection does by default.
 */
#define SL_EJECT_TIME_MAX_S 300
#define SL_EJECT_TIME_MAX_MS (SL_EJECT_TIME_MAX_S * 1000u)

struct sl_model_config; /* models_config.h */
/* --upstream-client: the choices, in their order there. */
enum sl_upstream_client { SL_UPSTREAM_CLIENT_NATIVE, SL_UPSTREAM_CLIENT_CURL };
/*
 * --stream-upstream: the choices, in their order there. With auto, plain
 * answers sent to an upstream are asked for as streams for this long
 * after a client's stream there ended, or a client left a plain answer
 * there in flight (proxy.c, "Leaving"): while streams come and go, a
 * relayed plain answer could not be stopped; and clients that leave tend
 * to do so again (timeouts under load), where a stream stops at once.
 */
#define SL_STREAM_UPSTREAM_WINDOW_S 60
/*
 * ... but only once a left answer cost llama-server this long: it had been
 * generating it this long when the client left, or went on this long
 * after. One that ends sooner (a fast upstream; a load generator that
 * stops with answers in flight) wasted little, and switching for it would
 * make every plain answer dearer for the whole window.
 */
#define SL_STREAM_UPSTREAM_LEFT_MS 1000
/*
 * How long a left plain answer keeps its upstream quiet at most (proxy.c,
 * "Leaving"). llama-server stops it about a second after the last result
 * there, and the answers in flight beside it end meanwhile; a longer wait
 * means streams keep coming there, and waiting on would idle the
 * upstream's other slots for nothing.
 */
#define SL_STREAM_UPSTREAM_QUIET_MS 3000
enum sl_stream_upstream {
	SL_STREAM_UPSTREAM_AUTO,
	SL_STREAM_UPSTREAM_ON,
	SL_STREAM_UPSTREAM_OFF,
};

/*
 * Service levels (sched/README.md, "Deadlines"): a request's time to
 * first token and time per output token, in ms; 0 says none. Bounds of
 * a level, wherever it is written (a header, a key's or a model's slo:,
 * --slo-ttft and --slo-tpot): from 1 ms to an hour.
 */
#define SL_SLO_MIN_MS 1u
#define SL_SLO_MAX_MS (3600u * 1000u)
struct sl_slo {
	uint64_t ttft_ms, tpot_ms;
};

/* A level for each priority class (batch, normal, urgent); 0: none. */
#define SL_SLO_CLASSES 3
struct sl_slo_classes {
	uint64_t ms[SL_SLO_CLASSES];
};

/*
 * Parses a level for each class: "none", one duration for every class
 * ("500ms", "2s", "2"), or CLASS=DURATION pieces, comma-separated, for
 * the classes named ("urgent=500ms,normal=5s"; the others none). Returns
 * 0, or SL_EINVAL with a reason in why.
 */
int sl_slo_classes_parse(const char *text, struct sl_slo_classes *out,
                         char *why, size_t size);

/* Writes it back as sl_slo_classes_parse() takes it. */
void sl_slo_classes_format(const struct sl_slo_classes *c, char *buf,
                           size_t size);

struct sl_config_node;
/*
 * Reads a `slo:` mapping (ttft: DURATION, tpot: DURATION, each optional),
 * as keys: and models: take it. Returns 0, or SL_EINVAL with one line
 * naming the node at fault (sl_config_node_fail).
 */
int sl_slo_read(const struct sl_config_node *n, struct sl_slo *out, char *err,
                size_t size);

/* Writes a slo: line at `indent` spaces, for --check-config; none: nothing. */
void sl_slo_print(FILE *out, const struct sl_slo *slo, unsigned indent);

/*
 * Traces (ops/trace.h): OpenTelemetry's exporter protocols and samplers,
 * in the order of their options' choices.
 */
enum sl_otel_protocol { SL_OTEL_HTTP_PROTOBUF, SL_OTEL_HTTP_JSON };
enum sl_otel_sampler {
	SL_OTEL_ALWAYS_ON,
	SL_OTEL_ALWAYS_OFF,
	SL_OTEL_TRACEIDRATIO,
	SL_OTEL_PARENTBASED_ALWAYS_ON,
	SL_OTEL_PARENTBASED_ALWAYS_OFF,
	SL_OTEL_PARENTBASED_TRACEIDRATIO,
};
/*
 * OTEL_BSP_MAX_QUEUE_SIZE at most: each span waiting for its export holds
 * about 700 bytes, so this bounds them to about 45 MB.
 */
#define SL_OTEL_QUEUE_MAX 65536u

/* --fairness: the choices, in their order there (sched.h, fair queuing). */
enum sl_fairness {
	SL_FAIRNESS_KEY,
	SL_FAIRNESS_ADDRESS,
	SL_FAIRNESS_OFF,
};

struct sl_config {
	/*
	 * The configuration file (--config): "" = none. Read at start, and
	 * again on SIGHUP for its keys:, models:, default-model and max-loaded.
	 */
	char *config_file;

	/* Front end */
	char *listen;         /* "host:port" as given */
	char *listen_host;    /* parsed from listen */
	unsigned listen_port; /* parsed from listen; 0 = any free port */
	unsigned port;        /* --port, when set: replaces listen's port */

	/* Upstreams */
	struct sl_strlist upstreams; /* base URLs of unmanaged llama-servers */
	char *model; /* GGUF for a managed llama-server, or "" */
	/* Models (models_config.h, app_models.c). */
	char *model_name;    /* the one model's name without models:, or "" */
	char *default_model; /* for a request naming none, or "" */
	unsigned max_loaded; /* managed models running at once; 0: any */
	uint64_t memory_budget; /* bytes of GGUF files running; 0: any */
	struct sl_model_config *models; /* the models: section, or NULL */
	unsigned n_models;
	char *llama_server;           /* executable, or "" to search */
	struct sl_strlist llama_args; /* extra arguments, verbatim */
	unsigned slots;               /* managed llama-server's -np */
	unsigned ctx_size;            /* context per slot; -c = slots * this */
	uint64_t startup_timeout_ms;
	uint64_t stop_timeout_ms; /* SIGTERM to SIGKILL grace period */
	uint64_t health_interval_ms;
	/* A remote upstream's occupancy poll while requests wait; 0: off. */
	uint64_t occupancy_poll_ms;
	char *upstream_api_key; /* for --upstream servers, or "" */
	uint64_t upstream_connect_timeout_ms;
	uint64_t upstream_timeout_ms;       /* to the first response byte */
	uint64_t upstream_plain_timeout_ms; /* to a relayed plain answer */
	uint64_t upstream_idle_timeout_ms;  /* between bytes afterwards */
	/*
	 * What relays exchanges to http:// upstreams: sluice's own client
	 * (h1_client.h) or libcurl. https upstreams always use libcurl.
	 */
	int upstream_client;      /* enum sl_upstream_client */
	unsigned retries;         /* resends after a failure, see --retries */
	bool affinity;            /* prefix affinity among replicas */
	unsigned affinity_margin; /* see --affinity-margin */
	unsigned eject_after;     /* consecutive failures; 0: never eject */
	uint64_t eject_time_ms;   /* the first ejection period */
	/* Upstreams found in DNS (discovery.h). */
	struct sl_strlist upstream_dns; /* NAME:PORT, each followed */
	uint64_t dns_refresh_ms;        /* between lookups of a name */
	char *dns_server;               /* IP:PORT, or "" for the system's */

	/* Client side */
	unsigned max_connections;
	uint64_t max_header_size;
	unsigned max_headers;
	uint64_t max_body;
	uint64_t max_body_memory; /* all bodies being read (http.h) */
	uint64_t header_timeout_ms;
	uint64_t body_timeout_ms;
	uint64_t keepalive_timeout_ms;
	uint64_t send_timeout_ms;
	uint64_t drain_timeout_ms;

	/*
	 * Access (see access.h). Keys are secrets: they are never logged nor
	 * written into an error line. The key file is read once, at start.
	 */
	struct sl_strlist api_keys; /* clients': --api-key and the file's */
	char *api_key_file;         /* "" = none */
	char *admin_key;            /* "" = none: admin actions refused */
	/*
	 * Tenants: the configuration file's `keys:` section (keys.h), or
	 * NULL without one. Only digests of the secrets.
	 */
	struct sl_keys *keys;
	/*
	 * Allowed web origins: {"*"} by default; empty after "none";
	 * {"localhost"}: any port of localhost, 127.0.0.1 and [::1].
	 */
	struct sl_strlist cors_origins;
	/* Not set, and localhost because a managed llama-server runs tools. */
	bool cors_localhost_for_tools;
	/* Proxies whose X-Forwarded-For is believed: CIDRs, as written. */
	struct sl_strlist trusted_proxies;

	/* Scheduler */
	unsigned slots_per_upstream; /* 0: total_slots from /props */
	unsigned max_queue;
	uint64_t queue_timeout_ms;
	double aging_rate;
	int fairness; /* enum sl_fairness */
	/* Free slots kept for tenants below their share (sched.h). */
	unsigned fair_reserve;
	uint64_t batch_window_ms;    /* SL_SCHED_WINDOW_AUTO: "auto" */
	uint64_t stream_coalesce_ms; /* 0: each read relayed at once */
	unsigned max_batch;          /* 0: the free slots */
	bool urgent_bypass;
	/* Free slots kept for urgent requests; SL_SCHED_RESERVE_AUTO: auto. */
	unsigned urgent_reserve;
	/*
	 * Service levels of requests that name none, by priority class
	 * (--slo-ttft, --slo-tpot): the last resort after the request's
	 * headers, its key's slo: and its model's (sched/README.md).
	 */
	struct sl_slo_classes slo_ttft, slo_tpot;
	unsigned max_tokens_cap; /* /generate and /infer */
	int stream_upstream;     /* enum sl_stream_upstream */
	bool ui;                 /* llama-server's web UI relayed at / */

	/* Files */
	char *cache_dir;        /* "" = $XDG_CACHE_HOME/sluice */
	int demo_model_size;    /* enum sl_demo_size */
	char *write_demo_model; /* write the demo model here and exit */
	char *probe;            /* GET this URL, exit 0 on 2xx (probe.h) */
	char *check_config;     /* print the configuration with this file */

	/*
	 * Traces (ops/trace.h), as OpenTelemetry's variables name them: off
	 * while neither endpoint is set, or sdk_disabled. The headers and
	 * resource attributes are "key=value,..." lists (otel_syntax.h),
	 * checked as they are read.
	 */
	char *otel_endpoint;        /* its /v1/traces, or "" */
	char *otel_traces_endpoint; /* as given, or "": wins over the above */
	int otel_protocol;          /* enum sl_otel_protocol */
	char *otel_headers;         /* secrets: masked when printed */
	unsigned otel_timeout_ms;   /* one export */
	char *otel_service_name;    /* "" = resource's, else "sluice" */
	char *otel_resource_attributes;
	int otel_sampler; /* enum sl_otel_sampler */
	double otel_sampler_arg;
	bool otel_sdk_disabled;
	unsigned otel_bsp_schedule_delay_ms; /* between exports */
	unsigned otel_bsp_max_queue_size;    /* spans waiting, at most */
	unsigned otel_bsp_max_export_batch_size;
	unsigned otel_bsp_export_timeout_ms;

	/* Logging */
	int log_level;  /* enum sl_log_level */
	int log_format; /* enum sl_log_format */

	bool help;
	bool version;
	bool hash_key; /* --hash-key: digest a secret from stdin and exit */

	/*
	 * What sl_config_parse() read, borrowed (main's argv and environ,
	 * which live as long as sluice): SIGHUP reads the same sources again
	 * to reload the keys.
	 */
	int argc;
	char *const *argv;
	char *const *envp;
	/*
	 * The section table sl_config_parse() was handed, borrowed (a static
	 * table): sl_config_print() and sl_config_free() use it, and a
	 * reload hands it on.
	 */
	const struct sl_config_section *sections;

	/* Each option's enum sl_config_source, in --help's order. */
	unsigned char source[SL_CONFIG_OPTIONS_MAX];
};

/*
 * Longest client key accepted: keys are compared over this many bytes
 * whatever their length (see access.c). 256 bytes holds any key a person
 * or a secret manager makes (OpenAI's are under 200).
 */
#define SL_API_KEY_MAX 256u
/* A --api-key-file larger than this is refused: it is not a key list. */
#define SL_API_KEY_FILE_MAX (1024u * 1024u)

/* Exit status for a bad command line or environment. */
#define SL_EXIT_USAGE 2

/*
 * A section of the configuration file: a top-level key whose value is a
 * mapping (`models:`, `keys:`). Each belongs to the module that owns what
 * it configures, which may sit in a layer above this one (keys.h is the
 * tenants'), so the option layer knows none of them: whoever calls
 * sl_config_parse() hands down the table (config_sections.h), and adding
 * a section changes nothing here.
 *
 * `apply` reads the tree into the configuration (checking every value,
 * and naming the node at fault with sl_config_node_fail); `print` writes
 * it back for --check-config with secrets masked; `check` (or NULL)
 * checks it against the options once every source is read, in the
 * table's order, returning 0 or SL_EINVAL with one line in err; `release`
 * (or NULL) frees what apply stored in the configuration, whether or not
 * parsing succeeded; `runs_tools` (or NULL: it starts no llama-server)
 * says whether a llama-server the section starts runs built-in tools or
 * MCP servers (sl_config_args_enable_tools()), which makes --cors-origin's
 * default localhost. The table ends with a NULL name.
 */
struct sl_config_section {
	const char *name;
	int (*apply)(struct sl_config *cfg, const struct sl_config_node *n,
	             char *err, size_t size);
	void (*print)(FILE *out, const struct sl_config *cfg);
	int (*check)(const struct sl_config *cfg, char *err, size_t size);
	void (*release)(struct sl_config *cfg);
	bool (*runs_tools)(const struct sl_config *cfg);
};

/*
 * Fills `cfg` from the defaults, then the configuration file (--config,
 * --check-config or SLUICE_CONFIG), then `envp` (a NULL-terminated array
 * of "NAME=value", as in environ), then argv. The file's sections are
 * read by `sections` (NULL: none, so any mapping in the file is an
 * unknown section), which cfg keeps. On a bad value, writes one line
 * naming the option (and, for the file, the file and the line) into `err`
 * and returns SL_EINVAL; `cfg` must still be freed with sl_config_free().
 * Returns 0 on success. Reads files (the configuration file,
 * --api-key-file) with blocking calls: for start-up only.
 */
int sl_config_parse(struct sl_config *cfg,
                    const struct sl_config_section *sections, int argc,
                    char *const argv[], char *const envp[], char *err,
                    size_t err_size);

void sl_config_free(struct sl_config *cfg);

/*
 * Whether an argument list for llama-server turns on its built-in tools or
 * MCP servers (--tools, --agent, --mcp-servers-config, ...).
 */
bool sl_config_args_enable_tools(const struct sl_strlist *args);

/*
 * The slots of an upstream that only some requests may take: a fixed
 * --urgent-reserve and --fair-reserve (with --fairness on), together.
 * Fewer than the slots, or the rest could not run.
 */
unsigned sl_config_fixed_reserve(const struct sl_config *cfg);

/* Writes the --help text. */
void sl_config_usage(FILE *out);

/*
 * Writes the effective configuration, for --check-config: every option as
 * a YAML "name: value" line, its source as a trailing comment, secrets
 * (client, admin and upstream keys) masked.
 */
void sl_config_print(const struct sl_config *cfg, FILE *out);

/*
 * Parses a duration ("2", "0.5", "50ms") into milliseconds; returns 0 or
 * SL_EINVAL. Exposed for the tests.
 */
int sl_parse_duration_ms(const char *s, uint64_t *out);

/*
 * Writes a duration of `ms` milliseconds as --check-config prints every
 * one, options and models: alike: in seconds, the unit a bare number
 * means, with at most three decimals ("90", "0.2", "0.001"), which
 * sl_parse_duration_ms() reads back as the same.
 */
void sl_config_write_duration(FILE *out, uint64_t ms);

/* Parses a size ("512", "16K", "1M", "1MiB") into bytes; 0 or SL_EINVAL. */
int sl_parse_size(const char *s, uint64_t *out);

#endif

/*
 * config.c: the option table, and parsing of defaults, the configuration
 * file, environment and argv through one code path.
 */
#include "sluice/config/config.h"

#include "sluice/net/client_addr.h"
#include "sluice/base/common.h"
#include "sluice/config/config_file.h"
#include "sluice/fleet/demo_model.h"
#include "sluice/fleet/discovery.h"
#include "sluice/net/http.h"
#include "sluice/tenants/keys.h"
#include "sluice/base/log.h"
#include "sluice/config/models_config.h"
#include "sluice/net/probe.h"
#include "sluice/sched/sched.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

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

static const char *const log_levels[] = {"debug", "info", "warn", "error",
                                         NULL};
static const char *const log_formats[] = {"text", "json", NULL};
static const char *const demo_sizes[] = {"tiny", "slow", NULL};
static const char *const upstream_clients[] = {"native", "curl", NULL};
static const char *const stream_upstreams[] = {"auto", "on", "off", NULL};
static const char *const switch_on[] = {"on", "true", "yes", "1", NULL};
static const char *const switch_off[] = {"off", "false", "no", "0", NULL};

/* A number macro as text, for help lines that quote a constant. */
#define STR_(x) #x
#define STR(x) STR_(x)

#define FIELD(f) offsetof(struct sl_config, f)
#define SEC 1000u
#define KIB 1024u
#define MIB (1024u * 1024u)

/*
 * Limits, and why: 256 slots is far beyond what one llama-server serves
 * well; a 64-token context cannot hold a chat prompt; a startup timeout
 * above an hour would hide a wedged model load.
 */
/* clang-format off */
static const struct option_def options[] = {
	{"config", "SLUICE_CONFIG", "FILE", OPT_STRING, FIELD(config_file), "",
	 0, 0, NULL,
	 "a YAML file of options, one name: value line each (a list for a "
	 "repeatable one), e.g. listen: 127.0.0.1:8080; a flag or the "
	 "environment wins over it; read once, at start",
	 "none"},
	{"listen", "SLUICE_LISTEN", "ADDR", OPT_ADDR, FIELD(listen),
	 "127.0.0.1:8080", 0, 0, NULL,
	 "address to accept clients on: IP:PORT, [IPv6]:PORT or :PORT (all "
	 "interfaces); port 0 picks a free one",
	 NULL},
	{"upstream", "SLUICE_UPSTREAM", "URL", OPT_URL_LIST, FIELD(upstreams),
	 NULL, 0, 0, NULL,
	 "base URL of a llama-server that sluice does not manage; repeatable "
	 "(environment: comma-separated; LLAMA_SERVER_URL adds one); no "
	 "llama-server is spawned unless --model is also given; credentials "
	 "in it (http://user:pass@host) are sent, and shown masked "
	 "(http://user:***@host)",
	 "none"},
	{"model", "SLUICE_MODEL", "FILE", OPT_STRING, FIELD(model), "", 0, 0,
	 NULL, "GGUF model for the llama-server that sluice spawns",
	 "the demo model, written into the cache directory"},
	{"model-name", "SLUICE_MODEL_NAME", "NAME", OPT_STRING,
	 FIELD(model_name), "", 0, 0, NULL,
	 "the name clients give in a request's \"model\" field for the one "
	 "model sluice serves without a models: section",
	 "--model's file name without .gguf; \"demo\" for the demo model; "
	 "\"default\" for --upstream alone"},
	{"default-model", "SLUICE_DEFAULT_MODEL", "NAME", OPT_STRING,
	 FIELD(default_model), "", 0, 0, NULL,
	 "the model (or alias) a request without a \"model\" field goes to",
	 "the only model; with several, the first in models:"},
	{"max-loaded", "SLUICE_MAX_LOADED", "N", OPT_UINT, FIELD(max_loaded),
	 "0", 0, SL_MODELS_MAX, NULL,
	 "managed models (of a models: section) running at once; to start "
	 "another, sluice first stops the least recently used idle one; 0: no "
	 "bound",
	 NULL},
	{"memory-budget", "SLUICE_MEMORY_BUDGET", "SIZE", OPT_SIZE,
	 FIELD(memory_budget), "0", 0, SL_MEMORY_BUDGET_MAX, NULL,
	 "bytes of model files (GGUF, times replicas) running at once, for "
	 "the managed models of a models: section; to start another, sluice "
	 "first stops the least recently used idle ones; 0: no bound",
	 NULL},
	{"llama-server", "SLUICE_LLAMA_SERVER", "PATH", OPT_STRING,
	 FIELD(llama_server), "", 0, 0, NULL, "llama-server executable to run",
	 "llama-server on PATH, else the one deploy/setup.sh provisioned "
	 "in the cache directory"},
	{"llama-arg", "SLUICE_LLAMA_ARGS", "ARG", OPT_ARG_LIST,
	 FIELD(llama_args), NULL, 0, 0, NULL,
	 "extra argument for the spawned llama-server, passed verbatim; "
	 "repeatable (environment: whitespace-separated), e.g. "
	 "--llama-arg=--hf-repo --llama-arg=REPO",
	 "none"},
	{"slots", "SLUICE_SLOTS", "N", OPT_UINT, FIELD(slots), "4", 1, 256,
	 NULL, "parallel slots of the spawned llama-server (its -np)", NULL},
	{"ctx-size", "SLUICE_CTX_SIZE", "TOKENS", OPT_UINT, FIELD(ctx_size),
	 "4096", 64, 1u << 24, NULL,
	 "context per slot; the spawned llama-server gets -c slots*TOKENS",
	 NULL},
	{"startup-timeout", "SLUICE_STARTUP_TIMEOUT", "DURATION", OPT_DURATION,
	 FIELD(startup_timeout_ms), "120", 100, 3600 * SEC, NULL,
	 "how long the spawned llama-server may take to become healthy", NULL},
	{"stop-timeout", "SLUICE_STOP_TIMEOUT", "DURATION", OPT_DURATION,
	 FIELD(stop_timeout_ms), "10", 0, 600 * SEC, NULL,
	 "on shutdown, grace period between SIGTERM and SIGKILL for "
	 "llama-server",
	 NULL},
	{"health-interval", "SLUICE_HEALTH_INTERVAL", "DURATION", OPT_DURATION,
	 FIELD(health_interval_ms), "2", 100, 3600 * SEC, NULL,
	 "how often each ready upstream's /health is checked", NULL},
	{"upstream-api-key", "SLUICE_UPSTREAM_API_KEY", "KEY", OPT_SECRET,
	 FIELD(upstream_api_key), "", 0, 0, NULL,
	 "API key sent to --upstream servers (a spawned llama-server gets a "
	 "random one of its own)",
	 "none"},
	{"upstream-connect-timeout", "SLUICE_UPSTREAM_CONNECT_TIMEOUT",
	 "DURATION", OPT_DURATION, FIELD(upstream_connect_timeout_ms), "5", 1,
	 600 * SEC, NULL, "time allowed to connect to an upstream", NULL},
	{"upstream-timeout", "SLUICE_UPSTREAM_TIMEOUT", "DURATION",
	 OPT_DURATION, FIELD(upstream_timeout_ms), "600", 1, 24 * 3600 * SEC,
	 NULL,
	 "time allowed for an upstream's first response byte (its first "
	 "token)",
	 NULL},
	{"upstream-plain-timeout", "SLUICE_UPSTREAM_PLAIN_TIMEOUT", "DURATION",
	 OPT_DURATION, FIELD(upstream_plain_timeout_ms), "3600", 1,
	 24 * 3600 * SEC, NULL,
	 "time allowed for a relayed plain answer of a generation (see "
	 "--stream-upstream), which llama-server sends whole once it is "
	 "generated: it bounds the whole generation",
	 NULL},
	{"upstream-idle-timeout", "SLUICE_UPSTREAM_IDLE_TIMEOUT", "DURATION",
	 OPT_DURATION, FIELD(upstream_idle_timeout_ms), "60", 1,
	 24 * 3600 * SEC, NULL,
	 "once an upstream answer has begun, the longest silence allowed "
	 "between its bytes",
	 NULL},
	{"upstream-dns", "SLUICE_UPSTREAM_DNS", "NAME:PORT", OPT_ARG_LIST,
	 FIELD(upstream_dns), NULL, 0, 0, NULL,
	 "a DNS name whose addresses (A and AAAA) are upstreams, each at "
	 "http://ADDR:PORT, as a Kubernetes headless Service lists its pods: "
	 "looked up every --dns-refresh, new addresses are checked and used, "
	 "vanished ones take no new work and go once their requests are done; "
	 "repeatable (environment: whitespace-separated)",
	 "none"},
	{"dns-refresh", "SLUICE_DNS_REFRESH", "DURATION", OPT_DURATION,
	 FIELD(dns_refresh_ms), "5", 100, 3600 * SEC, NULL,
	 "time between two lookups of an --upstream-dns name", NULL},
	{"dns-server", "SLUICE_DNS_SERVER", "IP:PORT", OPT_STRING,
	 FIELD(dns_server), "", 0, 0, NULL,
	 "the DNS server --upstream-dns names are asked of ([IPv6]:PORT for "
	 "IPv6)",
	 "the system's, from /etc/resolv.conf"},
	{"affinity", "SLUICE_AFFINITY", "on|off", OPT_SWITCH, FIELD(affinity),
	 "on", 0, 0, NULL,
	 "prefix affinity: a request whose prompt starts like a recent one "
	 "goes to the replica of its model that served it, where "
	 "llama-server's prompt cache can reuse it",
	 NULL},
	{"affinity-margin", "SLUICE_AFFINITY_MARGIN", "N", OPT_UINT,
	 FIELD(affinity_margin), "2", 0, SL_AFFINITY_MARGIN_MAX, NULL,
	 "requests in flight the replica holding a prompt's prefix may have "
	 "beyond the least busy replica and still be chosen for it",
	 NULL},
	{"upstream-client", "SLUICE_UPSTREAM_CLIENT", "native|curl", OPT_CHOICE,
	 FIELD(upstream_client), "native", 0, 0, upstream_clients,
	 "what relays requests to http:// upstreams: sluice's own pooled "
	 "HTTP/1.1 client (fewer system calls and allocations per request) "
	 "or libcurl; https upstreams always use libcurl",
	 NULL},
	{"retries", "SLUICE_RETRIES", "N", OPT_UINT, FIELD(retries), "1", 0,
	 SL_RETRIES_MAX, NULL,
	 "times a queued request is sent again, to another ready upstream "
	 "where there is one, after its upstream failed (connection reset, "
	 "5xx) before any byte reached the client; a refused connection "
	 "does not use one up",
	 NULL},
	{"eject-after", "SLUICE_EJECT_AFTER", "N", OPT_UINT, FIELD(eject_after),
	 "3", 0, SL_EJECT_AFTER_MAX, NULL,
	 "consecutive failed requests or health checks after which an "
	 "upstream is ejected: it takes no work until --eject-time has "
	 "passed and a health check succeeds; 0 never ejects",
	 NULL},
	{"eject-time", "SLUICE_EJECT_TIME", "DURATION", OPT_DURATION,
	 FIELD(eject_time_ms), "5", 100, SL_EJECT_TIME_MAX_MS, NULL,
	 "how long an ejection lasts at first; doubled at each ejection in a "
	 "row, to at most " STR(SL_EJECT_TIME_MAX_S) " s",
	 NULL},
	{"api-key", "SLUICE_API_KEY", "KEY", OPT_KEY_LIST, FIELD(api_keys),
	 NULL, 0, 0, NULL,
	 "a key clients must send (Authorization: Bearer KEY, or X-Api-Key: "
	 "KEY) for every endpoint but /health, /ready and /v1/health; "
	 "repeatable, and a value may list several, comma-separated (so may "
	 "the environment)",
	 "none: no key needed"},
	{"api-key-file", "SLUICE_API_KEY_FILE", "FILE", OPT_STRING,
	 FIELD(api_key_file), "", 0, 0, NULL,
	 "more client keys, one per line (blank lines and lines starting "
	 "with # are skipped); read once, at start",
	 "none"},
	{"admin-key", "SLUICE_ADMIN_KEY", "KEY", OPT_SECRET, FIELD(admin_key),
	 "", 0, 0, NULL,
	 "the key for actions that change llama-server's state (POST /props, "
	 "POST /slots/ID, POST /lora-adapters, POST /tools, /cors-proxy) and "
	 "for /metrics; it also serves wherever a client key does",
	 "none: admin actions are refused, /metrics follows --api-key"},
	{"cors-origin", "SLUICE_CORS_ORIGIN", "ORIGIN", OPT_ORIGIN_LIST,
	 FIELD(cors_origins), "*", 0, 0, NULL,
	 "a web origin (https://app.example:8443) whose pages may call "
	 "sluice; repeatable (environment: comma-separated); * lets any "
	 "origin, localhost any port of localhost, 127.0.0.1 and [::1] (as "
	 "llama-server's --cors-origins localhost), none turns CORS off; "
	 "not set, localhost when a llama-server sluice starts runs tools "
	 "(--tools, --agent, --mcp-servers-*), as llama-server's own "
	 "default then is",
	 NULL},
	{"trusted-proxy", "SLUICE_TRUSTED_PROXY", "CIDR", OPT_CIDR_LIST,
	 FIELD(trusted_proxies), NULL, 0, 0, NULL,
	 "a proxy (an address, or a range such as 10.0.0.0/8 or fd00::/8) "
	 "whose X-Forwarded-For is believed: a request from it is logged "
	 "with the address found by walking that header from the right past "
	 "trusted addresses; repeatable, and a value may list several, "
	 "comma-separated (so may the environment)",
	 "none: the TCP peer is the client"},
	{"max-connections", "SLUICE_MAX_CONNECTIONS", "N", OPT_UINT,
	 FIELD(max_connections), "10000", 1, 1000000, NULL,
	 "client connections open at once; more are refused with 503", NULL},
	{"max-header-size", "SLUICE_MAX_HEADER_SIZE", "SIZE", OPT_SIZE,
	 FIELD(max_header_size), "16K", 1 * KIB, 1 * MIB, NULL,
	 "request line plus headers; more gets 431 (a long URI 414)", NULL},
	{"max-headers", "SLUICE_MAX_HEADERS", "N", OPT_UINT, FIELD(max_headers),
	 "100", 1, 100, NULL, "header fields per request; more gets 431", NULL},
	{"max-body", "SLUICE_MAX_BODY", "SIZE", OPT_SIZE, FIELD(max_body), "1M",
	 0, 1024 * MIB, NULL, "request body, chunked or not; more gets 413",
	 NULL},
	{"max-body-memory", "SLUICE_MAX_BODY_MEMORY", "SIZE", OPT_SIZE,
	 FIELD(max_body_memory), "256M", 1 * MIB, 1024ull * 1024 * MIB, NULL,
	 "memory of the request bodies being read, all together: each "
	 "reserves its Content-Length (--max-body if chunked) from its head "
	 "until it is in; one that would go past this gets 503 with "
	 "Retry-After before it is read; at least --max-body",
	 NULL},
	{"header-timeout", "SLUICE_HEADER_TIMEOUT", "DURATION", OPT_DURATION,
	 FIELD(header_timeout_ms), "10", 100, 3600 * SEC, NULL,
	 "time allowed for a request's line and headers, in total; then 408",
	 NULL},
	{"body-timeout", "SLUICE_BODY_TIMEOUT", "DURATION", OPT_DURATION,
	 FIELD(body_timeout_ms), "30", 100, 3600 * SEC, NULL,
	 "time allowed for a request's body, in total; then 408", NULL},
	{"keepalive-timeout", "SLUICE_KEEPALIVE_TIMEOUT", "DURATION",
	 OPT_DURATION, FIELD(keepalive_timeout_ms), "60", 100, 3600 * SEC, NULL,
	 "how long an idle keep-alive connection stays open", NULL},
	{"send-timeout", "SLUICE_SEND_TIMEOUT", "DURATION", OPT_DURATION,
	 FIELD(send_timeout_ms), "60", 100, 3600 * SEC, NULL,
	 "a client that takes no response bytes for this long is dropped, "
	 "cancelling its request",
	 NULL},
	{"drain-timeout", "SLUICE_DRAIN_TIMEOUT", "DURATION", OPT_DURATION,
	 FIELD(drain_timeout_ms), "30", 0, 3600 * SEC, NULL,
	 "on SIGINT or SIGTERM, how long requests in flight may take to finish",
	 NULL},
	{"slots-per-upstream", "SLUICE_SLOTS_PER_UPSTREAM", "N", OPT_UINT,
	 FIELD(slots_per_upstream), "0", 0, 100000, NULL,
	 "requests sent to each upstream at once; 0 takes total_slots from "
	 "its /props (an upstream may be a fleet behind a balancer)",
	 NULL},
	{"max-queue", "SLUICE_MAX_QUEUE", "N", OPT_UINT, FIELD(max_queue),
	 "1024", 1, 1000000, NULL,
	 "requests waiting in sluice's queue at most; more get 429", NULL},
	{"queue-timeout", "SLUICE_QUEUE_TIMEOUT", "DURATION", OPT_DURATION,
	 FIELD(queue_timeout_ms), "60", 1, 24 * 3600 * SEC, NULL,
	 "a request still waiting for a slot after this gets 503", NULL},
	{"aging-rate", "SLUICE_AGING_RATE", "RATE", OPT_NUMBER,
	 FIELD(aging_rate), "0.2", 0, 1000, NULL,
	 "priority a waiting request gains per second (urgent is 2, normal 1, "
	 "batch 0), so that nothing starves",
	 NULL},
	{"batch-window", "SLUICE_BATCH_WINDOW", "auto|DURATION",
	 OPT_AUTO_DURATION, FIELD(batch_window_ms), "auto", 0, 10 * SEC, NULL,
	 "how long requests are gathered into one batch; auto: only while "
	 "free slots are contested (more requests waiting than free slots, "
	 "of mixed priorities), for up to 50ms, else each leaves at once; a "
	 "duration: a fixed window, opened by a request that arrives with "
	 "none pending; 0 sends each at once",
	 NULL},
	{"max-batch", "SLUICE_MAX_BATCH", "N", OPT_UINT, FIELD(max_batch), "0",
	 0, 100000, NULL,
	 "requests in one batch at most; 0: as many as there are free slots",
	 NULL},
	{"urgent-reserve", "SLUICE_URGENT_RESERVE", "auto|N", OPT_AUTO_UINT,
	 FIELD(urgent_reserve), "auto", 0, 100000, NULL,
	 "free slots kept for urgent requests (and requests aged to urgent), "
	 "so that they need not wait for a generation to end; auto: sized "
	 "from the urgent traffic of the last seconds so that at most 1 in 20 "
	 "finds no free slot under overload, 0 while none comes",
	 NULL},
	{"urgent-bypass", "SLUICE_URGENT_BYPASS", "on|off", OPT_SWITCH,
	 FIELD(urgent_bypass), "on", 0, 0, NULL,
	 "urgent requests skip the batching window when a slot is free", NULL},
	{"stream-upstream", "SLUICE_STREAM_UPSTREAM", "auto|on|off", OPT_CHOICE,
	 FIELD(stream_upstream), "auto", 0, 0, stream_upstreams,
	 "how a plain answer (no \"stream\") is asked of llama-server: off "
	 "relays it as llama-server writes it, which costs llama-server and "
	 "sluice least; on asks for a stream, which sluice assembles into "
	 "the same answer; auto relays it, but asks for a stream where "
	 "streams run: on an upstream with one in flight, or within " STR(
	     SL_STREAM_UPSTREAM_WINDOW_S) " s of a client's stream ending "
	 "there or of a client leaving a plain answer there that cost "
	 "llama-server at least " STR(SL_STREAM_UPSTREAM_LEFT_MS) " ms. A "
	 "client leaving stops its generation: a stream at its next token, "
	 "a relayed answer about a second after nothing else runs on its "
	 "llama-server, which takes no new work meanwhile (at most " STR(
	     SL_STREAM_UPSTREAM_QUIET_MS) " ms)",
	 NULL},
	{"stream-coalesce", "SLUICE_STREAM_COALESCE", "DURATION", OPT_DURATION,
	 FIELD(stream_coalesce_ms), "1ms", 0, 100, NULL,
	 "while a stream's tokens come about once per this long or faster, "
	 "sluice reads them from llama-server once per this long and relays "
	 "those that came in one write, which saves wakeups where the model "
	 "needs every core; a token waits up to about twice this long (the "
	 "loop's timers count whole milliseconds), the first not at all; 0 "
	 "relays each token as it comes",
	 NULL},
	{"ui", "SLUICE_UI", "on|off", OPT_SWITCH, FIELD(ui), "off", 0, 0,
	 NULL,
	 "start the managed llama-server with its web UI on and relay the UI "
	 "at / (a chat page in the browser, through sluice)",
	 NULL},
	{"max-tokens-cap", "SLUICE_MAX_TOKENS_CAP", "N", OPT_UINT,
	 FIELD(max_tokens_cap), "4096", 1, 1u << 24, NULL,
	 "most tokens /generate and /infer may ask for; larger requests are "
	 "capped",
	 NULL},
	{"cache-dir", "SLUICE_CACHE_DIR", "DIR", OPT_STRING, FIELD(cache_dir),
	 "", 0, 0, NULL, "where the demo model and a provisioned llama-server live",
	 "$XDG_CACHE_HOME/sluice, or ~/.cache/sluice"},
	{"demo-model-size", "SLUICE_DEMO_MODEL_SIZE", "tiny|slow", OPT_CHOICE,
	 FIELD(demo_model_size), "tiny", 0, 0, demo_sizes,
	 "demo model variant: tiny (fast) or slow (tens of MB, a few hundred "
	 "tokens/s)",
	 NULL},
	{"log-level", "SLUICE_LOG_LEVEL", "LEVEL", OPT_CHOICE,
	 FIELD(log_level), "info", 0, 0, log_levels,
	 "least severe level logged: debug, info, warn or error", NULL},
	{"log-format", "SLUICE_LOG_FORMAT", "FORMAT", OPT_CHOICE,
	 FIELD(log_format), "text", 0, 0, log_formats,
	 "log as text lines or as JSON lines", NULL},
};
/* clang-format on */

_Static_assert(SL_ARRAY_SIZE(options) <= SL_CONFIG_OPTIONS_MAX,
               "sl_config.source has no room for every option");

/* Actions: flags that make sluice do one thing and exit; no environment. */
struct action_def {
	const char *name;
	const char *metavar; /* NULL: takes no value */
	const char *help;
};

/* clang-format off */
static const struct action_def actions[] = {
	{"help", NULL, "print this help and exit"},
	{"version", NULL, "print the version and exit"},
	{"hash-key", NULL,
	 "read an API key's secret on standard input (one trailing newline "
	 "dropped) and print the \"hash: sha256:HEX\" line for a key of the "
	 "configuration file's keys: section, and exit"},
	{"write-demo-model", "PATH",
	 "write the demo model (see --demo-model-size) to PATH and exit"},
	{"probe", "URL",
	 "GET URL (e.g. http://127.0.0.1:8080/health) and exit 0 when it "
	 "answers 2xx within " STR(SL_PROBE_TIMEOUT_S) " s, else 1 with the cause on stderr: a health "
	 "check that needs no curl or wget"},
	{"check-config", "FILE",
	 "read FILE as --config does, with the environment and the other "
	 "flags, check what a start checks before running anything "
	 "(llama-server, model files, how many upstreams), and print the "
	 "effective configuration (where each value came from, keys masked), "
	 "exit 0; or exit 2 with the first error"},
};
/* clang-format on */

void sl_strlist_push(struct sl_strlist *l, const char *s)
{
	l->items = sl_xrealloc(l->items, (l->count + 1) * sizeof(*l->items));
	l->items[l->count++] = sl_xstrdup(s);
}

void sl_strlist_clear(struct sl_strlist *l)
{
	for (unsigned i = 0; i < l->count; i++)
		free(l->items[i]);
	free(l->items);
	l->items = NULL;
	l->count = 0;
}

/* One line into err: "NAME: message". Always returns SL_EINVAL. */
SL_PRINTF(4, 5)
static int fail(char *err, size_t size, const char *where, const char *fmt, ...)
{
	int n = snprintf(err, size, "%s: ", where);
	if (n < 0 || (size_t)n >= size)
		return SL_EINVAL;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err + n, size - (size_t)n, fmt, ap);
	va_end(ap);
	sl_one_line(err, size);
	return SL_EINVAL;
}

int sl_parse_duration_ms(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno != 0 || !isfinite(v) || v < 0 || *s == '-' ||
	    *s == '+' || *s == ' ')
		return SL_EINVAL;
	if (strcmp(end, "ms") == 0)
		;
	else if (*end == '\0' || strcmp(end, "s") == 0)
		v *= 1000.0;
	else
		return SL_EINVAL;
	if (v > 1e15)
		return SL_EINVAL;
	*out = (uint64_t)llround(v);
	return 0;
}

int sl_parse_size(const char *s, uint64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return SL_EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0)
		return SL_EINVAL;
	unsigned shift = 0;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		end++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		end++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		end++;
		break;
	default: break;
	}
	if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	if (*end != '\0' || v > (UINT64_MAX >> shift))
		return SL_EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_uint(const char *s, uint64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return SL_EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end != '\0' || errno != 0)
		return SL_EINVAL;
	*out = v;
	return 0;
}

static void set_string(char **field, const char *value)
{
	free(*field);
	*field = sl_xstrdup(value);
}

/* IP:PORT, [IPv6]:PORT or :PORT; "localhost" means 127.0.0.1. */
static int parse_addr(struct sl_config *cfg, const char *value)
{
	const char *colon = strrchr(value, ':');
	if (!colon)
		return SL_EINVAL;
	uint64_t port;
	if (parse_uint(colon + 1, &port) != 0 || port > 65535)
		return SL_EINVAL;

	char host[64];
	const char *h = value;
	size_t len = (size_t)(colon - value);
	if (len > 0 && value[0] == '[') {
		if (len < 3 || value[len - 1] != ']')
			return SL_EINVAL;
		h = value + 1;
		len -= 2;
	}
	if (len >= sizeof(host))
		return SL_EINVAL;
	memcpy(host, h, len);
	host[len] = '\0';
	if (len == 0)
		strcpy(host, "0.0.0.0");
	else if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");

	struct sockaddr_in6 a6;
	struct sockaddr_in a4;
	if (uv_ip4_addr(host, 0, &a4) != 0 && uv_ip6_addr(host, 0, &a6) != 0)
		return SL_EINVAL;
	set_string(&cfg->listen_host, host);
	cfg->listen_port = (unsigned)port;
	return 0;
}

/* An http:// or https:// URL with a host; stored without a trailing '/'. */
static int check_url(const char *value, char **normalized)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	int ok = u && curl_url_set(u, CURLUPART_URL, value, 0) == CURLUE_OK &&
	         curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	         curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	         (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0);
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	if (!ok)
		return SL_EINVAL;
	*normalized = sl_xstrdup(value);
	size_t n = strlen(*normalized);
	while (n > 0 && (*normalized)[n - 1] == '/')
		(*normalized)[--n] = '\0';
	return 0;
}

static int choice_index(const char *const *choices, const char *value)
{
	for (int i = 0; choices[i]; i++)
		if (strcmp(choices[i], value) == 0)
			return i;
	return -1;
}

/* "a, b or c" */
static void join_choices(const char *const *choices, char *buf, size_t size)
{
	buf[0] = '\0';
	for (int i = 0; choices[i]; i++) {
		const char *sep = i == 0                   ? ""
		                  : choices[i + 1] == NULL ? " or "
		                                           : ", ";
		strncat(buf, sep, size - strlen(buf) - 1);
		strncat(buf, choices[i], size - strlen(buf) - 1);
	}
}

/*
 * Whether key[0..len) can be a client key: not empty, at most
 * SL_API_KEY_MAX bytes, and nothing a header value loses or cannot hold
 * (whitespace is trimmed from header values; control bytes are refused).
 * The error never shows the key.
 */
static int check_key(const char *key, size_t len, const char *where, char *err,
                     size_t size)
{
	if (len == 0)
		return fail(err, size, where,
		            "an empty key (keys are separated by commas)");
	if (len > SL_API_KEY_MAX)
		return fail(err, size, where,
		            "a key of %zu bytes is over the %u allowed", len,
		            SL_API_KEY_MAX);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)key[i] <= 0x20 ||
		    (unsigned char)key[i] == 0x7f)
			return fail(err, size, where,
			            "a key holds a space or a control byte, "
			            "which a client cannot send in a header");
	return 0;
}

/* Calls `each` for every comma-separated item of value, trimmed. */
static int for_each_item(const char *value, const char *where, char *err,
                         size_t size,
                         int (*each)(void *, const char *, size_t, const char *,
                                     char *, size_t),
                         void *ctx)
{
	const char *p = value;
	for (;;) {
		const char *comma = strchr(p, ',');
		const char *end = comma ? comma : p + strlen(p);
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		const char *e = end;
		while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		int rc = each(ctx, p, (size_t)(e - p), where, err, size);
		if (rc != 0)
			return rc;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

static void push_span(struct sl_strlist *l, const char *s, size_t len)
{
	char *copy = sl_xmalloc(len + 1);
	memcpy(copy, s, len);
	copy[len] = '\0';
	sl_strlist_push(l, copy);
	explicit_bzero(copy, len);
	free(copy);
}

static int add_key(void *list, const char *key, size_t len, const char *where,
                   char *err, size_t size)
{
	if (check_key(key, len, where, err, size) != 0)
		return SL_EINVAL;
	push_span(list, key, len);
	return 0;
}

static int apply_keys(struct sl_strlist *keys, const char *value,
                      const char *where, char *err, size_t size)
{
	return for_each_item(value, where, err, size, add_key, keys);
}

/*
 * "*", "localhost", "none", or an origin as browsers send it: scheme
 * "://" host, an optional port, nothing after (a trailing "/" would never
 * match).
 */
static int add_origin(void *list, const char *origin, size_t len,
                      const char *where, char *err, size_t size)
{
	const char *sep = len > 3 ? strstr(origin, "://") : NULL;
	bool ok = (len == 1 && origin[0] == '*') ||
	          (len == 4 && strncmp(origin, "none", 4) == 0) ||
	          (len == 9 && strncmp(origin, "localhost", 9) == 0);
	if (!ok && sep && sep > origin && sep + 3 < origin + len) {
		ok = len <= SL_HTTP_ORIGIN_MAX;
		for (const char *c = sep + 3; ok && c < origin + len; c++)
			ok = *c > 0x20 && *c < 0x7f && *c != '/' && *c != '?' &&
			     *c != '#';
	}
	if (!ok)
		return fail(err, size, where,
		            "expected *, localhost, none or an origin such as "
		            "https://app.example:8443 (scheme, host and port "
		            "only), got \"%.*s\"",
		            (int)len, origin);
	push_span(list, origin, len);
	return 0;
}

static int apply_origins(struct sl_strlist *origins, const char *value,
                         const char *where, char *err, size_t size)
{
	return for_each_item(value, where, err, size, add_origin, origins);
}

/* An address range, kept as written; the HTTP server parses it again. */
static int add_cidr(void *list, const char *cidr, size_t len, const char *where,
                    char *err, size_t size)
{
	struct sl_cidr c;
	if (sl_cidr_parse(cidr, len, &c) != 0)
		return fail(err, size, where,
		            "expected an IP address or a CIDR range such as "
		            "10.0.0.0/8 or fd00::/8, got \"%.*s\"",
		            (int)len, cidr);
	push_span(list, cidr, len);
	return 0;
}

/*
 * Applies one value to one option. `where` names the source in errors (the
 * flag or the environment variable).
 */
static int apply(struct sl_config *cfg, const struct option_def *o,
                 const char *value, const char *where, char *err, size_t size)
{
	void *field = (char *)cfg + o->offset;
	uint64_t n;

	switch (o->type) {
	case OPT_STRING: set_string(field, value); return 0;
	case OPT_ADDR:
		if (parse_addr(cfg, value) != 0)
			return fail(err, size, where,
			            "expected IP:PORT, [IPv6]:PORT or :PORT, "
			            "got \"%s\"",
			            value);
		set_string(field, value);
		return 0;
	case OPT_UINT:
		if (parse_uint(value, &n) != 0 || n < o->min || n > o->max)
			return fail(
			    err, size, where,
			    "expected a whole number from %llu to %llu, "
			    "got \"%s\"",
			    (unsigned long long)o->min,
			    (unsigned long long)o->max, value);
		*(unsigned *)field = (unsigned)n;
		return 0;
	case OPT_AUTO_UINT:
		if (strcmp(value, "auto") == 0) {
			*(unsigned *)field = SL_SCHED_RESERVE_AUTO;
			return 0;
		}
		if (parse_uint(value, &n) != 0 || n < o->min || n > o->max)
			return fail(err, size, where,
			            "expected auto or a whole number from %llu "
			            "to %llu, got \"%s\"",
			            (unsigned long long)o->min,
			            (unsigned long long)o->max, value);
		*(unsigned *)field = (unsigned)n;
		return 0;
	case OPT_AUTO_DURATION:
		if (strcmp(value, "auto") == 0) {
			*(uint64_t *)field = SL_SCHED_WINDOW_AUTO;
			return 0;
		}
		if (sl_parse_duration_ms(value, &n) != 0 || n < o->min ||
		    n > o->max)
			return fail(
			    err, size, where,
			    "expected auto or a duration from %gs to %gs "
			    "(seconds, or milliseconds with \"ms\"), "
			    "got \"%s\"",
			    (double)o->min / SEC, (double)o->max / SEC, value);
		*(uint64_t *)field = n;
		return 0;
	case OPT_DURATION:
		if (sl_parse_duration_ms(value, &n) != 0 || n < o->min ||
		    n > o->max)
			return fail(err, size, where,
			            "expected a duration from %gs to %gs "
			            "(seconds, or milliseconds with \"ms\"), "
			            "got \"%s\"",
			            (double)o->min / SEC, (double)o->max / SEC,
			            value);
		*(uint64_t *)field = n;
		return 0;
	case OPT_SIZE:
		if (sl_parse_size(value, &n) != 0 || n < o->min || n > o->max)
			return fail(err, size, where,
			            "expected a size from %llu to %llu bytes "
			            "(K, M and G suffixes allowed), got \"%s\"",
			            (unsigned long long)o->min,
			            (unsigned long long)o->max, value);
		*(uint64_t *)field = n;
		return 0;
	case OPT_NUMBER: {
		char *end;
		double v = strtod(value, &end);
		if (end == value || *end != '\0' || !isfinite(v) ||
		    v < (double)o->min || v > (double)o->max)
			return fail(err, size, where,
			            "expected a number from %llu to %llu, got "
			            "\"%s\"",
			            (unsigned long long)o->min,
			            (unsigned long long)o->max, value);
		*(double *)field = v;
		return 0;
	}
	case OPT_SWITCH:
		if (choice_index(switch_on, value) >= 0)
			*(bool *)field = true;
		else if (choice_index(switch_off, value) >= 0)
			*(bool *)field = false;
		else
			return fail(err, size, where,
			            "expected on or off, got \"%s\"", value);
		return 0;
	case OPT_CHOICE: {
		int i = choice_index(o->choices, value);
		if (i < 0) {
			char list[128];
			join_choices(o->choices, list, sizeof(list));
			return fail(err, size, where, "expected %s, got \"%s\"",
			            list, value);
		}
		*(int *)field = i;
		return 0;
	}
	case OPT_URL_LIST: {
		char *url;
		if (check_url(value, &url) != 0) {
			/* Its password is no less secret for a typo. */
			char *shown = sl_url_shown(value);
			fail(err, size, where,
			     "expected an http:// or https:// URL, got \"%s\"",
			     shown);
			free(shown);
			return SL_EINVAL;
		}
		sl_strlist_push(field, url);
		free(url);
		return 0;
	}
	case OPT_ARG_LIST: sl_strlist_push(field, value); return 0;
	case OPT_KEY_LIST: return apply_keys(field, value, where, err, size);
	case OPT_SECRET:
		if (*value &&
		    check_key(value, strlen(value), where, err, size) != 0)
			return SL_EINVAL;
		set_string(field, value);
		return 0;
	case OPT_ORIGIN_LIST:
		return apply_origins(field, value, where, err, size);
	case OPT_CIDR_LIST:
		return for_each_item(value, where, err, size, add_cidr, field);
	}
	return SL_EINVAL;
}

static int is_list(const struct option_def *o)
{
	return o->type == OPT_URL_LIST || o->type == OPT_ARG_LIST ||
	       o->type == OPT_KEY_LIST || o->type == OPT_ORIGIN_LIST ||
	       o->type == OPT_CIDR_LIST;
}

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
		return apply(cfg, o, value, o->env, err, size);
	const char *seps = o->type == OPT_URL_LIST ? ", \t\n" : " \t\n";
	char *copy = sl_xstrdup(value), *save = NULL;
	int rc = 0;
	for (char *tok = strtok_r(copy, seps, &save); tok && rc == 0;
	     tok = strtok_r(NULL, seps, &save))
		rc = apply(cfg, o, tok, o->env, err, size);
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
	for (size_t i = 0; i < SL_ARRAY_SIZE(options); i++)
		if (strlen(options[i].name) == len &&
		    strncmp(options[i].name, name, len) == 0)
			return &options[i];
	return NULL;
}

static const struct action_def *find_action(const char *name, size_t len)
{
	for (size_t i = 0; i < SL_ARRAY_SIZE(actions); i++)
		if (strlen(actions[i].name) == len &&
		    strncmp(actions[i].name, name, len) == 0)
			return &actions[i];
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
		set_string(&cfg->probe, value);
	else if (strcmp(a->name, "check-config") == 0)
		set_string(&cfg->check_config, value);
	else
		set_string(&cfg->write_demo_model, value);
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
	unsigned file_line[SL_ARRAY_SIZE(options)];
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
	size_t idx = (size_t)(o - options);
	if (is_list(o) && cfg->source[idx] != source)
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
	size_t idx = (size_t)(o - options);
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

/*
 * Sections of the configuration file (a key whose value is a mapping, such
 * as `models:`). Each belongs to the module that owns what it configures:
 * `apply` reads the tree into the configuration (checking every value, and
 * naming the node at fault with sl_config_node_fail), `print` writes it
 * back for --check-config with secrets masked. The table ends with a NULL
 * name.
 */
struct section_def {
	const char *name;
	int (*apply)(struct sl_config *cfg, const struct sl_config_node *n,
	             char *err, size_t size);
	void (*print)(FILE *out, const struct sl_config *cfg);
};

static const struct section_def sections[] = {
    {"models", sl_models_config_apply, sl_models_config_print},
    {"keys", sl_keys_config_apply, sl_keys_config_print},
    {NULL, NULL, NULL},
};

static const struct section_def *section_named(const char *name)
{
	for (const struct section_def *d = sections; d->name; d++)
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
		const struct section_def *d = section_named(key);
		if (d)
			return d->apply(st->cfg, node, err, size);
		return fail(err, size, where,
		            option_named(key)
		                ? "takes a value, not a mapping"
		                : "unknown section (see deploy/sluice.yaml)");
	}
	const struct option_def *o = option_named(key);
	/* The file's own name in it would be a loop; actions are one-shot. */
	if (find_action(key, strlen(key)) ||
	    (o && o->offset == FIELD(config_file)))
		return fail(err, size, where,
		            "a one-shot flag, not an option a configuration "
		            "file can set");
	/* "keys:" with every entry commented out is null, not empty. */
	if (!o && section_named(key))
		return fail(err, size, where,
		            "a section: expected a mapping of its entries (%s: "
		            "{} for none)",
		            key);
	if (!o)
		return fail(err, size, where, "unknown option (see --help)");
	if (item == SL_CONFIG_FILE_LIST && !is_list(o))
		return fail(err, size, where,
		            "takes one value, not a list (only repeatable "
		            "options take lists)");
	if (item != SL_CONFIG_FILE_LIST_ITEM) {
		take_over(st->cfg, o, SL_CONFIG_FROM_FILE);
		st->file_line[o - options] = line;
	}
	if (item == SL_CONFIG_FILE_LIST)
		return 0;
	return apply(st->cfg, o, value, where, err, size);
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
		return fail(st->err, st->size, "--check-config",
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
	for (size_t i = 0; i < SL_ARRAY_SIZE(options); i++) {
		const struct option_def *o = &options[i];
		if (o->def && apply(cfg, o, o->def, o->name, err, size) != 0)
			return SL_EINVAL; /* a bad default is a bug */
	}
	return 0;
}

static int apply_env(struct sl_config *cfg, char *const envp[], char *err,
                     size_t size)
{
	for (size_t i = 0; i < SL_ARRAY_SIZE(options); i++) {
		const struct option_def *o = &options[i];
		const char *v = env_lookup(envp, o->env);
		if (!v || !*v)
			continue;
		take_over(cfg, o, SL_CONFIG_FROM_ENV);
		int rc = is_list(o) ? apply_env_list(cfg, o, v, err, size)
		                    : apply(cfg, o, v, o->env, err, size);
		if (rc != 0)
			return rc;
	}
	/* The mini-v seed's variable: one more upstream. */
	const char *v = env_lookup(envp, "LLAMA_SERVER_URL");
	if (v && *v) {
		for (size_t i = 0; i < SL_ARRAY_SIZE(options); i++)
			if (options[i].type == OPT_URL_LIST) {
				take_over(cfg, &options[i], SL_CONFIG_FROM_ENV);
				return apply(cfg, &options[i], v,
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
			return fail(err, size, arg,
			            "unexpected argument (options are --NAME "
			            "VALUE or --NAME=VALUE; see --help)");
		const char *name = arg + 2;
		const char *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);

		const struct action_def *a = find_action(name, len);
		const struct option_def *o = a ? NULL : find_option(name, len);
		if (!a && !o)
			return fail(err, size, arg,
			            "unknown option (see --help)");

		const char *value = eq ? eq + 1 : NULL;
		bool wants_value = o || a->metavar;
		if (!wants_value && value)
			return fail(err, size, arg, "takes no value");
		if (wants_value && !value) {
			if (i + 1 >= argc)
				return fail(err, size, arg,
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
	FILE *f = fopen(cfg->api_key_file, "r");
	if (!f)
		return fail(err, size, where, "cannot read it: %s",
		            strerror(errno));
	char *text = sl_xmalloc(SL_API_KEY_FILE_MAX + 1);
	size_t len = fread(text, 1, SL_API_KEY_FILE_MAX + 1, f);
	int read_error = ferror(f) ? errno : 0;
	fclose(f);
	int rc = 0;
	if (read_error)
		rc = fail(err, size, where, "cannot read it: %s",
		          strerror(read_error));
	else if (len > SL_API_KEY_FILE_MAX)
		rc = fail(err, size, where, "over %u bytes: not a list of keys",
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
		if (check_key(key, n, at, err, size) != 0)
			rc = SL_EINVAL;
		else
			push_span(&cfg->api_keys, key, n);
		found++;
	}
	explicit_bzero(text,
	               len < SL_API_KEY_FILE_MAX ? len : SL_API_KEY_FILE_MAX);
	free(text);
	if (rc == 0 && found == 0)
		rc = fail(err, size, where,
		          "no key in it (one key per line; blank lines and "
		          "lines starting with # are skipped)");
	return rc;
}

/* Whether an argument list turns on llama-server's tools or MCP servers. */
static bool args_enable_tools(const struct sl_strlist *args)
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
	if (args_enable_tools(&cfg->llama_args) || env_enables_tools(cfg->envp))
		return true;
	for (unsigned i = 0; i < cfg->n_models; i++)
		if (args_enable_tools(&cfg->models[i].args))
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
	if (st->cfg->source[o - options] == SL_CONFIG_FROM_DEFAULT &&
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
			return fail(st->err, st->size,
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
		return fail(st->err, st->size,
		            source_name(st, "urgent-reserve", false, where,
		                        sizeof(where)),
		            "%u must be less than the %u slots of an upstream, "
		            "or only urgent requests could run",
		            cfg->urgent_reserve, slots);
	return 0;
}

/* Across options: a budget smaller than one body would refuse that body. */
static int check_body_memory(const struct parse_state *st)
{
	const struct sl_config *cfg = st->cfg;
	char where[PATH_MAX + 64];
	if (cfg->max_body_memory < cfg->max_body)
		return fail(st->err, st->size,
		            source_name(st, "max-body-memory", false, where,
		                        sizeof(where)),
		            "%llu bytes is less than --max-body (%llu): a body "
		            "that large could never be read",
		            (unsigned long long)cfg->max_body_memory,
		            (unsigned long long)cfg->max_body);
	return 0;
}

/* --upstream-dns and --dns-server: their syntax, checked before any use. */
static int check_dns(const struct parse_state *st)
{
	const struct sl_config *cfg = st->cfg;
	char where[PATH_MAX + 64], why[512];
	for (unsigned i = 0; i < cfg->upstream_dns.count; i++)
		if (sl_discovery_parse_target(cfg->upstream_dns.items[i], NULL,
		                              NULL, why, sizeof(why)) != 0)
			return fail(st->err, st->size,
			            source_name(st, "upstream-dns", true, where,
			                        sizeof(where)),
			            "%s", why);
	if (cfg->dns_server[0] &&
	    sl_discovery_parse_server(cfg->dns_server, why, sizeof(why)) != 0)
		return fail(
		    st->err, st->size,
		    source_name(st, "dns-server", true, where, sizeof(where)),
		    "%s", why);
	return 0;
}

/*
 * The sources in rising precedence: defaults, the file, the environment,
 * the flags. Argv is read first all the same, since it may name the file.
 */
int sl_config_parse(struct sl_config *cfg, int argc, char *const argv[],
                    char *const envp[], char *err, size_t size)
{
	memset(cfg, 0, sizeof(*cfg));
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
		rc = apply(cfg, flags[i].o, flags[i].value, flags[i].where, err,
		           size);
	}
	if (rc == 0 && cfg->check_config) {
		/* --check-config FILE stands for --config FILE. */
		const struct option_def *o = option_named("config");
		take_over(cfg, o, SL_CONFIG_FROM_FLAG);
		set_string(&cfg->config_file, cfg->check_config);
	}
	free(flags);
	if (rc == 0)
		rc = read_key_file(&st);
	if (rc == 0)
		rc = settle_origins(&st);
	if (rc == 0)
		rc = check_reserve(&st);
	if (rc == 0)
		rc = check_body_memory(&st);
	if (rc == 0)
		rc = sl_models_config_check(cfg, err, size);
	if (rc == 0)
		rc = check_dns(&st);
	return rc;
}

void sl_config_free(struct sl_config *cfg)
{
	for (size_t i = 0; i < SL_ARRAY_SIZE(options); i++) {
		void *field = (char *)cfg + options[i].offset;
		switch (options[i].type) {
		case OPT_STRING:
		case OPT_ADDR: free(*(char **)field); break;
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
	sl_models_config_free(cfg);
	sl_keys_free(cfg->keys);
	memset(cfg, 0, sizeof(*cfg));
}

/* Prints `text` wrapped at `width` columns, each line indented by `indent`. */
static void print_wrapped(FILE *out, const char *text, int indent, int width)
{
	int col = indent;
	const char *p = text;
	fprintf(out, "%*s", indent, "");
	while (*p) {
		const char *sp = strchr(p, ' ');
		int wlen = sp ? (int)(sp - p) : (int)strlen(p);
		if (col > indent && col + 1 + wlen > width) {
			fprintf(out, "\n%*s", indent, "");
			col = indent;
		} else if (col > indent) {
			fputc(' ', out);
			col++;
		}
		fprintf(out, "%.*s", wlen, p);
		col += wlen;
		p += wlen;
		while (*p == ' ')
			p++;
	}
	fputc('\n', out);
}

void sl_config_usage(FILE *out)
{
	fprintf(
	    out,
	    "Usage: sluice [OPTION]...\n"
	    "An HTTP gateway in front of llama.cpp's llama-server: one event "
	    "loop,\nits own priority queue and micro-batches, streaming "
	    "responses.\n\n"
	    "With neither --model nor --upstream, sluice serves a small "
	    "demo model\nthat generates random text.\n\n"
	    "Options (each also read from the environment variable shown, "
	    "and from\n--config's file; a flag wins over the environment, "
	    "which wins over the file):\n");
	for (size_t i = 0; i < SL_ARRAY_SIZE(options); i++) {
		const struct option_def *o = &options[i];
		char head[80];
		snprintf(head, sizeof(head), "  --%s %s", o->name, o->metavar);
		fprintf(out, "%s\n", head);
		print_wrapped(out, o->help, 6, 79);
		char tail[256];
		snprintf(tail, sizeof(tail), "[%s; default: %s]", o->env,
		         (o->def && *o->def) ? o->def : o->def_help);
		print_wrapped(out, tail, 6, 79);
	}
	fprintf(out, "\nActions:\n");
	for (size_t i = 0; i < SL_ARRAY_SIZE(actions); i++) {
		const struct action_def *a = &actions[i];
		fprintf(out, "  --%s%s%s\n", a->name, a->metavar ? " " : "",
		        a->metavar ? a->metavar : "");
		print_wrapped(out, a->help, 6, 79);
	}
	fprintf(out,
	        "\nDurations are seconds (\"2\", \"0.5\") or milliseconds "
	        "(\"50ms\"). Sizes are bytes, or\nKiB, MiB, GiB with a K, M "
	        "or G suffix (\"16K\", \"1M\").\n");
}

/* A duration as a user writes it: seconds when whole, else milliseconds. */
static void print_duration(FILE *out, uint64_t ms)
{
	if (ms % SEC == 0)
		fprintf(out, "%llu", (unsigned long long)(ms / SEC));
	else
		fprintf(out, "%llums", (unsigned long long)ms);
}

/* A size with the largest suffix that divides it ("16K", "1M"). */
static void print_size(FILE *out, uint64_t bytes)
{
	static const char suffix[] = "GMK";
	for (int i = 0; i < 3 && bytes > 0; i++) {
		uint64_t unit = (uint64_t)1 << (10 * (3 - i));
		if (bytes % unit == 0) {
			fprintf(out, "%llu%c",
			        (unsigned long long)(bytes / unit), suffix[i]);
			return;
		}
	}
	fprintf(out, "%llu", (unsigned long long)bytes);
}

/* What stands for a secret in --check-config's output. */
#define MASKED "********"

/* How print_list() writes each item. */
enum shown_as {
	SHOWN_AS_IS,
	SHOWN_MASKED, /* a secret: MASKED */
	SHOWN_URL,    /* a URL: its userinfo masked (sl_url_shown) */
};

/* A list as a YAML flow sequence; secrets masked item by item. */
static void print_list(FILE *out, const struct sl_strlist *l, enum shown_as how)
{
	fputc('[', out);
	for (unsigned i = 0; i < l->count; i++) {
		if (i > 0)
			fputs(", ", out);
		char *url = how == SHOWN_URL ? sl_url_shown(l->items[i]) : NULL;
		const char *item = l->items[i];
		if (how == SHOWN_MASKED)
			item = MASKED;
		else if (url)
			item = url;
		sl_config_file_write_scalar(out, item);
		free(url);
	}
	fputc(']', out);
}

static void print_value(FILE *out, const struct sl_config *cfg,
                        const struct option_def *o)
{
	const void *field = (const char *)cfg + o->offset;
	switch (o->type) {
	case OPT_STRING:
	case OPT_ADDR:
		sl_config_file_write_scalar(out, *(char *const *)field);
		return;
	case OPT_SECRET:
		sl_config_file_write_scalar(out, **(char *const *)field ? MASKED
		                                                        : "");
		return;
	case OPT_UINT: fprintf(out, "%u", *(const unsigned *)field); return;
	case OPT_AUTO_UINT:
		if (*(const unsigned *)field == SL_SCHED_RESERVE_AUTO)
			fputs("auto", out);
		else
			fprintf(out, "%u", *(const unsigned *)field);
		return;
	case OPT_AUTO_DURATION:
		if (*(const uint64_t *)field == SL_SCHED_WINDOW_AUTO) {
			fputs("auto", out);
			return;
		}
		print_duration(out, *(const uint64_t *)field);
		return;
	case OPT_DURATION:
		print_duration(out, *(const uint64_t *)field);
		return;
	case OPT_SIZE: print_size(out, *(const uint64_t *)field); return;
	case OPT_NUMBER: fprintf(out, "%g", *(const double *)field); return;
	case OPT_SWITCH:
		fputs(*(const bool *)field ? "on" : "off", out);
		return;
	case OPT_CHOICE: fputs(o->choices[*(const int *)field], out); return;
	case OPT_ORIGIN_LIST:
		/* "none" was settled into an empty list; say it as given. */
		if (((const struct sl_strlist *)field)->count == 0) {
			fputs("none", out);
			return;
		}
		print_list(out, field, SHOWN_AS_IS);
		return;
	case OPT_KEY_LIST: print_list(out, field, SHOWN_MASKED); return;
	case OPT_URL_LIST: print_list(out, field, SHOWN_URL); return;
	case OPT_ARG_LIST:
	case OPT_CIDR_LIST: print_list(out, field, SHOWN_AS_IS); return;
	}
}

void sl_config_print(const struct sl_config *cfg, FILE *out)
{
	static const char *const sources[] = {
	    [SL_CONFIG_FROM_DEFAULT] = "default",
	    [SL_CONFIG_FROM_FILE] = "file",
	    [SL_CONFIG_FROM_ENV] = "env",
	    [SL_CONFIG_FROM_FLAG] = "flag",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(options); i++) {
		fprintf(out, "%s: ", options[i].name);
		print_value(out, cfg, &options[i]);
		fprintf(out, "  # %s\n", sources[cfg->source[i]]);
	}
	for (const struct section_def *d = sections; d->name; d++)
		d->print(out, cfg);
}

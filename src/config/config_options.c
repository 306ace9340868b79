/*
 * config_options.c: the option table: every option's flag, environment
 * twin, type, default, bounds and help text, and the actions.
 *
 * It is data, read by the rest of the layer: config.c looks options up by
 * name as it reads each source, config_values.c applies a value to the
 * field an entry names, config_print.c writes --help and --check-config
 * from it. Kept apart so that adding an option is one entry here, read in
 * one place with its neighbours.
 */
#include "config_impl.h"

#include "sluice/base/common.h"
#include "sluice/net/probe.h"

#include <stddef.h>

static const char *const log_levels[] = {"debug", "info", "warn", "error",
                                         NULL};
static const char *const log_formats[] = {"text", "json", NULL};
static const char *const demo_sizes[] = {"tiny", "slow", NULL};
static const char *const upstream_clients[] = {"native", "curl", NULL};
static const char *const stream_upstreams[] = {"auto", "on", "off", NULL};
static const char *const fairnesses[] = {"key", "address", "off", NULL};
static const char *const otel_protocols[] = {"http/protobuf", "http/json",
                                             NULL};
static const char *const otel_samplers[] = {"always_on",
                                            "always_off",
                                            "traceidratio",
                                            "parentbased_always_on",
                                            "parentbased_always_off",
                                            "parentbased_traceidratio",
                                            NULL};

/* A number macro as text, for help lines that quote a constant. */
#define STR_(x) #x
#define STR(x) STR_(x)

#define KIB 1024u
#define MIB (1024u * 1024u)

/*
 * Limits, and why: 256 slots is far beyond what one llama-server serves
 * well; a 64-token context cannot hold a chat prompt; a startup timeout
 * above an hour would hide a wedged model load; a request body under
 * 1 KiB would refuse a short chat request with its usual fields (and 0,
 * every request with a body: each generation endpoint takes one).
 */
/* clang-format off */
const struct option_def sl_config_options[] = {
	{"config", "SLUICE_CONFIG", "FILE", OPT_STRING, FIELD(config_file), "",
	 0, 0, NULL,
	 "a YAML file of options, one name: value line each (a list for a "
	 "repeatable one), e.g. listen: 127.0.0.1:8080; a flag or the "
	 "environment wins over it; read at start, and again on SIGHUP for its "
	 "keys: and models: sections, default-model and max-loaded (any other "
	 "change takes a restart)",
	 "none"},
	{"listen", "SLUICE_LISTEN", "ADDR", OPT_ADDR, FIELD(listen),
	 "127.0.0.1:8080", 0, 0, NULL,
	 "address to accept clients on: IP:PORT, [IPv6]:PORT or :PORT (all "
	 "interfaces); port 0 picks a free one",
	 NULL},
	{"port", "SLUICE_PORT", "N", OPT_UINT, FIELD(port), NULL, 0, 65535, NULL,
	 "the port to accept clients on, on --listen's address (llama-server's "
	 "--port): --port 9000 alone is --listen 127.0.0.1:9000",
	 "--listen's port"},
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
	{"occupancy-poll", "SLUICE_OCCUPANCY_POLL", "DURATION", OPT_DURATION,
	 FIELD(occupancy_poll_ms), "200ms", 0, 60 * SEC, NULL,
	 "while requests wait for a remote upstream, how often its busy slots "
	 "are read from llama-server (/metrics, else /slots), and also once "
	 "whenever an answer there ends, so that several sluices and other "
	 "clients share its slots; a poll gives up after half of it; at least "
	 STR(SL_OCCUPANCY_POLL_MIN_MS) "ms, or 0: count only sluice's own "
	 "requests",
	 NULL},
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
	 1 * KIB, 1024 * MIB, NULL,
	 "request body, chunked or not; more gets 413; at least 1K", NULL},
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
	{"fairness", "SLUICE_FAIRNESS", "key|address|off", OPT_CHOICE,
	 FIELD(fairness), "key", 0, 0, fairnesses,
	 "who shares a priority fairly: inside each priority, the next "
	 "request is the oldest of the tenant with the least service so far "
	 "(tokens in and out, divided by its key's weight); key: tenants are "
	 "keys, requests without one share a tenant; address: tenants are "
	 "client addresses (after --trusted-proxy); off: arrival order",
	 NULL},
	{"fair-reserve", "SLUICE_FAIR_RESERVE", "N", OPT_UINT,
	 FIELD(fair_reserve), "0", 0, 100000, NULL,
	 "free slots, beyond the urgent reserve, kept for tenants holding "
	 "fewer slots than their share (by weight, among the tenants with "
	 "requests waiting or running), so that a light tenant beside a "
	 "flood starts at once rather than waiting for one of the flood's "
	 "generations to end; give llama-server that many slots more than a "
	 "flood should fill (--fairness key or address)",
	 NULL},
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
	{"slo-ttft", "SLUICE_SLO_TTFT", "none|DURATION|CLASS=DURATION,...",
	 OPT_SLO, FIELD(slo_ttft), "none", 0, 0, NULL,
	 "time to first token a request should get when it names none "
	 "(X-SLO-TTFT-Ms) and neither its key's nor its model's slo: does: "
	 "one duration for every priority, or one per class "
	 "(urgent=500ms,normal=5s); a request with one is refused at once "
	 "(429, Retry-After) when sluice predicts it would miss it, and "
	 "leaves the queue (503) once it can no longer meet it",
	 NULL},
	{"slo-tpot", "SLUICE_SLO_TPOT", "none|DURATION|CLASS=DURATION,...",
	 OPT_SLO, FIELD(slo_tpot), "none", 0, 0, NULL,
	 "time per output token a request should get when it names none "
	 "(X-SLO-TPOT-Ms), as --slo-ttft; refused at once when the "
	 "predicted time per token at the concurrency it would meet is longer",
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
	{"otel-exporter-otlp-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", "URL",
	 OPT_URL, FIELD(otel_endpoint), "", 0, 0, NULL,
	 "OpenTelemetry collector to send traces to (OTLP over HTTP), at "
	 "URL/v1/traces: a span for each relayed request, with its wait in "
	 "the queue and its upstream call (src/ops/README.md, Traces)",
	 "none: no traces"},
	{"otel-exporter-otlp-traces-endpoint",
	 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "URL", OPT_URL,
	 FIELD(otel_traces_endpoint), "", 0, 0, NULL,
	 "the full URL traces are sent to, as given; wins over "
	 "--otel-exporter-otlp-endpoint",
	 "none"},
	{"otel-exporter-otlp-protocol", "OTEL_EXPORTER_OTLP_PROTOCOL",
	 "http/protobuf|http/json", OPT_CHOICE, FIELD(otel_protocol),
	 "http/protobuf", 0, 0, otel_protocols,
	 "how spans are encoded: OTLP's protobuf or its JSON", NULL},
	{"otel-exporter-otlp-headers", "OTEL_EXPORTER_OTLP_HEADERS",
	 "KEY=VALUE,...", OPT_HEADER_PAIRS, FIELD(otel_headers), "", 0, 0, NULL,
	 "header lines sent with each export (a collector's token, say); "
	 "values %XX-decoded; shown masked",
	 "none"},
	{"otel-exporter-otlp-timeout", "OTEL_EXPORTER_OTLP_TIMEOUT", "MS",
	 OPT_UINT, FIELD(otel_timeout_ms), "10000", 1, 3600000, NULL,
	 "milliseconds one export may take; the spans of one that fails or "
	 "takes longer are dropped and counted",
	 NULL},
	{"otel-service-name", "OTEL_SERVICE_NAME", "NAME", OPT_STRING,
	 FIELD(otel_service_name), "", 0, 0, NULL,
	 "the traces' service.name",
	 "service.name of --otel-resource-attributes, else sluice"},
	{"otel-resource-attributes", "OTEL_RESOURCE_ATTRIBUTES",
	 "KEY=VALUE,...", OPT_PAIRS, FIELD(otel_resource_attributes), "", 0, 0,
	 NULL,
	 "attributes of the resource every span belongs to "
	 "(deployment.environment.name=prod,...); values %XX-decoded",
	 "none"},
	{"otel-traces-sampler", "OTEL_TRACES_SAMPLER", "SAMPLER", OPT_CHOICE,
	 FIELD(otel_sampler), "parentbased_always_on", 0, 0, otel_samplers,
	 "which requests are traced: always_on, always_off, traceidratio "
	 "(a share of them, --otel-traces-sampler-arg, by trace id), or the "
	 "parentbased_ forms, which follow the client's traceparent's "
	 "sampled flag when it sends one",
	 NULL},
	{"otel-traces-sampler-arg", "OTEL_TRACES_SAMPLER_ARG", "RATIO",
	 OPT_NUMBER, FIELD(otel_sampler_arg), "1.0", 0, 1, NULL,
	 "the share of requests traced by the traceidratio samplers, from 0 "
	 "to 1",
	 NULL},
	{"otel-sdk-disabled", "OTEL_SDK_DISABLED", "true|false", OPT_SWITCH,
	 FIELD(otel_sdk_disabled), "false", 0, 0, NULL,
	 "true turns traces off whatever else is set", NULL},
	{"otel-bsp-schedule-delay", "OTEL_BSP_SCHEDULE_DELAY", "MS", OPT_UINT,
	 FIELD(otel_bsp_schedule_delay_ms), "5000", 1, 3600000, NULL,
	 "milliseconds between two exports of the spans waiting (a full "
	 "batch goes at once)",
	 NULL},
	{"otel-bsp-max-queue-size", "OTEL_BSP_MAX_QUEUE_SIZE", "N", OPT_UINT,
	 FIELD(otel_bsp_max_queue_size), "2048", 1, SL_OTEL_QUEUE_MAX, NULL,
	 "spans waiting for an export at most; while the collector is slow "
	 "or down, those past it are dropped and counted",
	 NULL},
	{"otel-bsp-max-export-batch-size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
	 "N", OPT_UINT, FIELD(otel_bsp_max_export_batch_size), "512", 1,
	 SL_OTEL_QUEUE_MAX, NULL,
	 "spans in one export at most; no more than --otel-bsp-max-queue-size",
	 NULL},
	{"otel-bsp-export-timeout", "OTEL_BSP_EXPORT_TIMEOUT", "MS", OPT_UINT,
	 FIELD(otel_bsp_export_timeout_ms), "30000", 1, 3600000, NULL,
	 "milliseconds one export may take at most, with "
	 "--otel-exporter-otlp-timeout (the shorter holds)",
	 NULL},
};
/* clang-format on */

_Static_assert(SL_ARRAY_SIZE(sl_config_options) <= SL_CONFIG_OPTIONS_MAX,
               "sl_config.source has no room for every option");

/* clang-format off */
const struct action_def sl_config_actions[] = {
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

const size_t sl_config_n_options = SL_ARRAY_SIZE(sl_config_options);
const size_t sl_config_n_actions = SL_ARRAY_SIZE(sl_config_actions);

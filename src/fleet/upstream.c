/*
 * upstream.c: launching and checking llama-servers.
 *
 * Everything here is driven by three events: a timer (time to check, or to
 * relaunch), a finished probe (GET /health, then GET /props), and the exit
 * of a managed llama-server. Each handler looks at u->state and moves it on.
 */
#include "sluice/fleet/upstream.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const state_names[] = {
    [SL_UPSTREAM_STARTING] = "starting",     [SL_UPSTREAM_READY] = "ready",
    [SL_UPSTREAM_RESTARTING] = "restarting", [SL_UPSTREAM_DOWN] = "down",
    [SL_UPSTREAM_STOPPED] = "stopped",
};

const char *sl_upstream_state_name(enum sl_upstream_state s)
{
	return state_names[s];
}

static const char *const retry_reason_names[] = {
    [SL_RETRY_REFUSED] = "refused",
    [SL_RETRY_TRANSPORT] = "transport",
    [SL_RETRY_5XX] = "5xx",
};

const char *sl_retry_reason_name(enum sl_retry_reason r)
{
	return retry_reason_names[r];
}

bool sl_upstream_is_ready(const struct sl_upstream *u)
{
	return u->state == SL_UPSTREAM_READY;
}

bool sl_upstream_usable(const struct sl_upstream *u)
{
	return u->state == SL_UPSTREAM_READY && !u->suspect &&
	       !u->outlier.ejected && !u->draining;
}

unsigned sl_upstream_free_slots(const struct sl_upstream *u)
{
	if (u->quiet > 0)
		return 0;
	return sl_occupancy_free(u, u->total_slots, u->inflight);
}

static void set_state(struct sl_upstream *u, enum sl_upstream_state s)
{
	enum sl_upstream_state old = u->state;
	if (old == s)
		return;
	u->state = s;
	/* Whatever the new state, it says more than the mark did. */
	u->suspect = false;
	if (s == SL_UPSTREAM_READY)
		u->ready_since_ms = uv_now(u->loop);
	if (u->hooks->on_change)
		u->hooks->on_change(u, old);
}

static void start_probe(struct sl_upstream *u);
static void schedule_probe(struct sl_upstream *u, uint64_t delay_ms);
static int launch(struct sl_upstream *u);

/* ---- probing: GET /health, then GET /props ---- */

static void on_probe_timer(uv_timer_t *t)
{
	start_probe(t->data);
}

static void schedule_probe(struct sl_upstream *u, uint64_t delay_ms)
{
	uv_timer_start(&u->probe_timer, on_probe_timer, delay_ms, 0);
}

static bool starting(const struct sl_upstream *u)
{
	return u->state == SL_UPSTREAM_STARTING ||
	       u->state == SL_UPSTREAM_RESTARTING;
}

/* A failed request or health check: it may eject the upstream. */
static void count_failure(struct sl_upstream *u, bool check, const char *why)
{
	bool may = !u->hooks->may_eject || u->hooks->may_eject(u);
	uint64_t now = uv_now(u->loop);
	if (!sl_outlier_failed(&u->outlier, check, u->cfg->eject_after,
	                       u->cfg->eject_time_ms, may, now))
		return;
	sl_warn("upstream %s ejected for %.1f s after %u failures in a row, "
	        "the last: %s",
	        u->url,
	        (double)sl_outlier_remaining_ms(&u->outlier, now) / 1000.0,
	        u->cfg->eject_after, why);
}

void sl_upstream_request_failed(struct sl_upstream *u, const char *why)
{
	if (u->state == SL_UPSTREAM_READY && !u->stopping)
		count_failure(u, false, why);
}

void sl_upstream_request_ok(struct sl_upstream *u)
{
	sl_outlier_request_ok(&u->outlier);
}

/*
 * A health check passed: an ejection whose period is over ends. Returns
 * true when it did.
 */
static bool check_passed(struct sl_upstream *u)
{
	if (!sl_outlier_check_ok(&u->outlier, uv_now(u->loop)))
		return false;
	sl_info("upstream %s returns from ejection: it answers its health "
	        "check",
	        u->url);
	return true;
}

/* The next health check: at the interval, or when an ejection ends. */
static uint64_t next_check_ms(const struct sl_upstream *u)
{
	uint64_t left = sl_outlier_remaining_ms(&u->outlier, uv_now(u->loop));
	uint64_t every = u->cfg->health_interval_ms;
	return u->outlier.ejected && left < every ? left : every;
}

/* A probe failed: keep polling while starting, count failures when ready. */
static void probe_failed(struct sl_upstream *u, const char *what)
{
	snprintf(u->last_probe, sizeof(u->last_probe), "%s", what);
	if (starting(u)) {
		if (u->managed) {
			schedule_probe(u, SL_STARTUP_POLL_MS);
			return;
		}
		/* A remote upstream that does not answer is down. */
		sl_warn("upstream %s is down: %s", u->url, what);
		set_state(u, SL_UPSTREAM_DOWN);
	} else if (u->state == SL_UPSTREAM_READY) {
		count_failure(u, true, what);
		if (++u->failed_probes >= SL_PROBE_FAILURES_DOWN) {
			sl_warn("upstream %s is down: %u health checks "
			        "failed, the last with: %s",
			        u->url, u->failed_probes, what);
			set_state(u, SL_UPSTREAM_DOWN);
		}
	}
	schedule_probe(u, u->cfg->health_interval_ms);
}

static void became_ready(struct sl_upstream *u, unsigned slots)
{
	if (u->cfg->slots_per_upstream > 0)
		slots = u->cfg->slots_per_upstream;
	uv_timer_stop(&u->deadline_timer);
	u->total_slots = slots;
	u->failed_probes = 0;
	u->ever_ready = true;
	check_passed(u);
	sl_info("upstream %s is ready with %u slot%s", u->url, slots,
	        slots == 1 ? "" : "s");
	set_state(u, SL_UPSTREAM_READY);
	schedule_probe(u, next_check_ms(u));
}

/*
 * What /props says: the slots, and whether it is a router (llama-server
 * --models-dir or --models-preset: it runs a llama-server per model, and
 * its /props says "role": "router" and has no total_slots).
 */
static unsigned parse_props(const char *body, bool *router)
{
	json_error_t jerr;
	json_t *props = json_loads(body, 0, &jerr);
	json_t *v = json_object_get(props, "total_slots");
	json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
	const char *role = json_string_value(json_object_get(props, "role"));
	*router = role && strcmp(role, "router") == 0;
	json_decref(props);
	return n > 0 && n < 1 << 20 ? (unsigned)n : 0;
}

static void on_props(struct sl_get *g, long status, const char *err)
{
	struct sl_upstream *u = sl_container_of(g, struct sl_upstream, probe);
	/*
	 * /health needs no key, /props does: a 401 or 403 here means every
	 * request sluice relays would get one too. Not ready, then, and the
	 * log says why once (a probe keeps trying: the key may change).
	 */
	if (status == 401 || status == 403) {
		char what[160];
		snprintf(what, sizeof(what), "/props answered %ld: %s", status,
		         u->api_key ? "it refuses sluice's key "
		                      "(--upstream-api-key)"
		                    : "it wants an API key; give sluice "
		                      "--upstream-api-key");
		probe_failed(u, what);
		return;
	}
	bool router = false;
	unsigned slots = status == 200 ? parse_props(g->body, &router) : 0;
	if (router && !u->router)
		sl_info("upstream %s is a llama-server router (its /props "
		        "says \"role\": \"router\"): it runs its models on "
		        "demand",
		        u->url);
	u->router = router;
	u->server_slots = slots;
	sl_occupancy_reset(u);
	if (slots == 0) {
		/*
		 * A router has no slots of its own; some builds or proxies
		 * hide /props. Either way --slots says how many requests it
		 * takes at once.
		 */
		if (router)
			sl_info("upstream %s: a router has no total_slots; "
			        "counting --slots %u",
			        u->url, u->cfg->slots);
		else
			sl_warn("upstream %s: no total_slots from /props (%s); "
			        "assuming %u slot%s",
			        u->url, err ? err : "no usable answer",
			        u->cfg->slots, u->cfg->slots == 1 ? "" : "s");
		slots = u->cfg->slots;
	}
	became_ready(u, slots);
}

/*
 * What llama-server's /health says, with 503, until its model has loaded
 * (LLAMA-SERVER.md): one that says so is starting, not down.
 */
#define SL_UPSTREAM_LOADING "Loading model"

/*
 * A remote llama-server loading its model: starting, so that requests wait
 * for it as for a managed one (pool.h, sl_pool_expected), and asked again
 * as often; said once a load. Returns false for any other failed check.
 */
static bool remote_loading(struct sl_upstream *u, long status, const char *body)
{
	if (u->managed || status != 503 || !body ||
	    !strstr(body, SL_UPSTREAM_LOADING) ||
	    (u->state != SL_UPSTREAM_STARTING && u->state != SL_UPSTREAM_DOWN))
		return false;
	if (strcmp(u->last_probe, SL_UPSTREAM_LOADING) != 0)
		sl_info("upstream %s is loading its model (its /health answers "
		        "503); requests wait for it",
		        u->url);
	snprintf(u->last_probe, sizeof(u->last_probe), "%s",
	         SL_UPSTREAM_LOADING);
	set_state(u, SL_UPSTREAM_STARTING);
	schedule_probe(u, SL_STARTUP_POLL_MS);
	return true;
}

static void on_health(struct sl_get *g, long status, const char *err)
{
	struct sl_upstream *u = sl_container_of(g, struct sl_upstream, probe);
	if (remote_loading(u, status, g->body))
		return;
	if (status != 200) {
		char what[160];
		if (err)
			snprintf(what, sizeof(what), "%s", err);
		else
			snprintf(what, sizeof(what), "/health answered %ld",
			         status);
		probe_failed(u, what);
		return;
	}
	u->failed_probes = 0;
	if (u->state == SL_UPSTREAM_READY) {
		bool back = check_passed(u);
		schedule_probe(u, next_check_ms(u));
		if (u->suspect) {
			u->suspect = false;
			back = true;
			sl_info("upstream %s answers its health check again",
			        u->url);
		}
		if (back && u->hooks->on_change)
			u->hooks->on_change(u, u->state);
		return;
	}
	/* Newly healthy: learn its slots before sending it work. */
	char *url = sl_xasprintf("%s/props", u->request_url);
	int rc = sl_get_start(u->curl, &u->probe, url, u->api_key,
	                      SL_PROBE_TIMEOUT_MS, on_props);
	free(url);
	if (rc != 0)
		probe_failed(u, "cannot start a request for /props");
}

static void start_probe(struct sl_upstream *u)
{
	if (u->stopping || sl_get_busy(&u->probe))
		return;
	char *url = sl_xasprintf("%s/health", u->request_url);
	int rc = sl_get_start(u->curl, &u->probe, url, u->api_key,
	                      SL_PROBE_TIMEOUT_MS, on_health);
	free(url);
	if (rc != 0)
		probe_failed(u, "cannot start a request for /health");
}

void sl_upstream_suspect(struct sl_upstream *u, const char *why)
{
	if (u->state != SL_UPSTREAM_READY || u->suspect || u->stopping)
		return;
	u->suspect = true;
	sl_warn("upstream %s: %s; holding new requests until it answers a "
	        "health check",
	        u->url, why);
	/* A probe under way answers soon enough; else ask now. */
	start_probe(u);
}

/* ---- managed llama-server: launch, exit, restart ---- */

static void fatal(struct sl_upstream *u, const char *why)
{
	if (u->hooks->on_fatal)
		u->hooks->on_fatal(u, why);
}

static void finish_stop(struct sl_upstream *u);

static void on_relaunch_timer(uv_timer_t *t)
{
	struct sl_upstream *u = t->data;
	if (u->stopping)
		return;
	u->restarts++;
	int rc = launch(u);
	if (rc != 0) {
		uint64_t delay = SL_RESTART_DELAY_MAX_MS;
		sl_error("cannot relaunch llama-server: %s; trying again in "
		         "%llu ms",
		         sl_strerror(rc), (unsigned long long)delay);
		uv_timer_start(&u->probe_timer, on_relaunch_timer, delay, 0);
	}
}

static uint64_t restart_delay(struct sl_upstream *u)
{
	uint64_t delay = SL_RESTART_DELAY_MIN_MS;
	for (unsigned i = 1;
	     i < u->quick_failures && delay < SL_RESTART_DELAY_MAX_MS; i++)
		delay *= 2;
	return SL_MIN(delay, (uint64_t)SL_RESTART_DELAY_MAX_MS);
}

static void describe_exit(char *buf, size_t size, int64_t status, int signal)
{
	if (signal)
		snprintf(buf, size, "was killed by signal %d (%s)", signal,
		         strsignal(signal));
	else
		snprintf(buf, size, "exited with status %lld",
		         (long long)status);
}

static void on_child_exit(struct sl_child *child, int64_t status, int signal)
{
	struct sl_upstream *u = child->data;
	char how[96], tail[SL_CHILD_TAIL_LINES * 128];
	describe_exit(how, sizeof(how), status, signal);
	sl_child_tail(child, tail, sizeof(tail));
	u->child = NULL;
	sl_get_reset(u->curl, &u->probe);
	uv_timer_stop(&u->probe_timer);
	uv_timer_stop(&u->deadline_timer);

	if (u->stopping) {
		sl_info("llama-server %s", how);
		finish_stop(u);
		return;
	}
	if (!u->ever_ready) {
		char *why = sl_xasprintf(
		    "llama-server %s before it became ready; its last "
		    "output: %s",
		    how, tail[0] ? tail : "(none)");
		fatal(u, why);
		free(why);
		return;
	}
	if (u->state == SL_UPSTREAM_READY &&
	    uv_now(u->loop) - u->ready_since_ms >= SL_RESTART_STABLE_MS)
		u->quick_failures = 0;
	u->quick_failures++;
	uint64_t delay = restart_delay(u);
	sl_error("llama-server %s unexpectedly; restarting it in %llu ms. Its "
	         "last output: %s",
	         how, (unsigned long long)delay, tail[0] ? tail : "(none)");
	set_state(u, SL_UPSTREAM_RESTARTING);
	uv_timer_start(&u->probe_timer, on_relaunch_timer, delay, 0);
}

static void on_startup_deadline(uv_timer_t *t)
{
	struct sl_upstream *u = t->data;
	char tail[SL_CHILD_TAIL_LINES * 128] = "";
	if (u->child)
		sl_child_tail(u->child, tail, sizeof(tail));
	char *why = sl_xasprintf(
	    "llama-server did not become ready within %.1f s (last check: "
	    "%s); its last output: %s",
	    (double)u->cfg->startup_timeout_ms / 1000.0,
	    u->last_probe[0] ? u->last_probe : "none",
	    tail[0] ? tail : "(none)");
	if (!u->ever_ready) {
		fatal(u, why);
	} else {
		/* A restart that hangs: kill it; its exit schedules the next.
		 */
		sl_error("%s; killing it", why);
		if (u->child)
			sl_child_stop(u->child, 0);
	}
	free(why);
}

/* A port that was free a moment ago on loopback; llama-server binds it. */
static int pick_free_port(unsigned *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return uv_translate_sys_error(errno);
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int rc = 0;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0)
		rc = uv_translate_sys_error(errno);
	else
		*port = ntohs(a.sin_port);
	close(fd);
	return rc;
}

static int launch(struct sl_upstream *u)
{
	unsigned port = 0;
	int rc = pick_free_port(&port);
	if (rc != 0)
		return rc;
	free(u->url);
	free(u->request_url);
	u->url = sl_xasprintf("http://127.0.0.1:%u", port);
	u->request_url = sl_xstrdup(u->url);

	const struct sl_config *cfg = u->cfg;
	char port_s[16], slots_s[16], ctx_s[24], threads_s[16];
	snprintf(port_s, sizeof(port_s), "%u", port);
	snprintf(slots_s, sizeof(slots_s), "%u", cfg->slots);
	/* An HTTP thread per pooled connection, and two to spare. */
	snprintf(threads_s, sizeof(threads_s), "%u",
	         cfg->slots + SL_UPSTREAM_SPARE_CONNS + 2);
	snprintf(ctx_s, sizeof(ctx_s), "%llu",
	         (unsigned long long)cfg->slots * cfg->ctx_size);

	/*
	 * Flags are pinned rather than left to the build's defaults: explicit
	 * slots, a context per slot with no unified KV cache (one long request
	 * cannot starve the others), metrics on. The API key goes in the
	 * environment so that it never shows in `ps`.
	 *
	 * The web UI is set through the environment too: builds from late
	 * 2025 on call the flag --ui/--no-ui and report --webui/--no-webui as
	 * deprecated, while older builds know only the --webui pair and refuse
	 * the other. Each build reads its own variable and ignores the other's,
	 * and a --llama-arg still wins over both. It is off unless --ui asks
	 * for it, since sluice relays the UI only then.
	 */
	/* clang-format off */
	const char *fixed[] = {
	    u->exe,
	    "--host", "127.0.0.1",
	    "--port", port_s,
	    "-np", slots_s,
	    "-c", ctx_s,
	    "--no-kv-unified",
	    "--metrics",
	    "--threads-http", threads_s,
	};
	/* clang-format on */
	size_t n_fixed = SL_ARRAY_SIZE(fixed);
	size_t n = n_fixed + 2 + cfg->llama_args.count + 1;
	char **args = sl_xcalloc(n, sizeof(*args));
	size_t k = 0;
	for (size_t i = 0; i < n_fixed; i++)
		args[k++] = (char *)fixed[i];
	if (u->model) {
		args[k++] = "-m";
		args[k++] = u->model;
	}
	for (unsigned i = 0; i < cfg->llama_args.count; i++)
		args[k++] = cfg->llama_args.items[i];
	char *key_env = sl_xasprintf("LLAMA_API_KEY=%s", u->api_key);
	/* With --ui: LLAMA_ARG_UI=1, and older builds keep their default. */
	char *env_ui[] = {key_env, "LLAMA_ARG_UI=1", NULL};
	char *env_no_ui[] = {key_env, "LLAMA_ARG_UI=0", "LLAMA_ARG_NO_WEBUI=1",
	                     NULL};
	char **env = cfg->ui ? env_ui : env_no_ui;

	rc = sl_child_spawn(u->loop, "llama-server", u->exe, args, env,
	                    on_child_exit, u, &u->child);
	free(key_env);
	free(args);
	if (rc != 0)
		return rc;
	sl_info("started llama-server[%d] on %s (%u slot%s, %u tokens of "
	        "context each)",
	        u->child->pid, u->url, cfg->slots, cfg->slots == 1 ? "" : "s",
	        cfg->ctx_size);
	u->last_probe[0] = '\0';
	uv_timer_start(&u->deadline_timer, on_startup_deadline,
	               cfg->startup_timeout_ms, 0);
	schedule_probe(u, SL_STARTUP_POLL_MS);
	return 0;
}

/* 32 random bytes as hex: the key only sluice and its llama-server know. */
static char *random_api_key(void)
{
	unsigned char raw[32];
	char *hex = sl_xmalloc(2 * sizeof(raw) + 1);
	if (uv_random(NULL, NULL, raw, sizeof(raw), 0, NULL) != 0) {
		/* Cannot happen on Linux after boot; fail closed anyway. */
		sl_error("no randomness for the llama-server API key");
		abort();
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	return hex;
}

/* ---- lifetime ---- */

struct sl_upstream *sl_upstream_new(uv_loop_t *loop, struct sl_curl *curl,
                                    const struct sl_config *cfg,
                                    const struct sl_managed_spec *spec,
                                    const char *url,
                                    const struct sl_upstream_hooks *hooks,
                                    void *data)
{
	/* One loop thread creates every upstream: a plain counter will do. */
	static uint32_t last_id;
	struct sl_upstream *u = sl_xcalloc(1, sizeof(*u));
	u->id = ++last_id;
	u->loop = loop;
	u->curl = curl;
	u->cfg = cfg;
	u->hooks = hooks;
	u->data = data;
	u->state = SL_UPSTREAM_STARTING;
	if (spec) {
		u->managed = true;
		u->exe = sl_xstrdup(spec->exe);
		u->model = spec->model ? sl_xstrdup(spec->model) : NULL;
		u->api_key = random_api_key();
		u->url = sl_xstrdup("");
		u->request_url = sl_xstrdup("");
		u->name = sl_xstrdup("managed");
	} else {
		u->url = sl_url_shown(url);
		u->request_url = sl_xstrdup(url);
		u->name = sl_xstrdup(u->url);
		if (cfg->upstream_api_key[0])
			u->api_key = sl_xstrdup(cfg->upstream_api_key);
	}
	uv_timer_init(loop, &u->probe_timer);
	uv_timer_init(loop, &u->deadline_timer);
	u->probe_timer.data = u;
	u->deadline_timer.data = u;
	sl_occupancy_init(u);
	sl_predict_init(&u->predict, uv_now(loop));
	u->open_handles = 3;
	return u;
}

int sl_upstream_start(struct sl_upstream *u)
{
	if (u->managed)
		return launch(u);
	start_probe(u);
	return 0;
}

static void free_upstream(struct sl_upstream *u)
{
	sl_get_reset(u->curl, &u->probe);
	sl_get_reset(u->curl, &u->metrics_get);
	sl_occupancy_stop(u);
	free(u->metrics_text);
	free(u->url);
	free(u->request_url);
	free(u->name);
	free(u->origin);
	free(u->api_key);
	free(u->exe);
	free(u->model);
	free(u);
}

static void on_timer_closed(uv_handle_t *h)
{
	struct sl_upstream *u = h->data;
	if (--u->open_handles > 0)
		return;
	u->hooks->on_stopped(u);
	free_upstream(u);
}

static void finish_stop(struct sl_upstream *u)
{
	set_state(u, SL_UPSTREAM_STOPPED);
	uv_close((uv_handle_t *)&u->probe_timer, on_timer_closed);
	uv_close((uv_handle_t *)&u->deadline_timer, on_timer_closed);
	uv_close((uv_handle_t *)&u->occupancy.timer, on_timer_closed);
}

void sl_upstream_stop(struct sl_upstream *u, bool force)
{
	bool again = u->stopping;
	u->stopping = true;
	if (!again) {
		sl_get_reset(u->curl, &u->probe);
		sl_get_reset(u->curl, &u->metrics_get);
		sl_occupancy_stop(u);
		uv_timer_stop(&u->probe_timer);
		uv_timer_stop(&u->deadline_timer);
	}
	if (u->child) {
		if (!again || force)
			sl_child_stop(u->child,
			              force ? 0 : u->cfg->stop_timeout_ms);
		return; /* on_child_exit finishes */
	}
	if (!again)
		finish_stop(u);
}

json_t *sl_upstream_json(const struct sl_upstream *u)
{
	json_t *o = json_pack("{s:s, s:s, s:b, s:s, s:i, s:i, s:i}", "name",
	                      u->name, "url", u->url, "managed", u->managed,
	                      "state", sl_upstream_state_name(u->state),
	                      "slots", (json_int_t)u->total_slots, "inflight",
	                      (json_int_t)u->inflight, "restarts",
	                      (json_int_t)u->restarts);
	if (u->managed && u->child)
		json_object_set_new(o, "pid", json_integer(u->child->pid));
	if (u->suspect)
		json_object_set_new(o, "suspect", json_true());
	if (u->router)
		json_object_set_new(o, "router", json_true());
	if (u->origin)
		json_object_set_new(o, "origin", json_string(u->origin));
	if (sl_occupancy_polled(u))
		json_object_set_new(o, "occupancy", sl_occupancy_json(u));
	if (u->draining)
		json_object_set_new(o, "draining", json_true());
	/*
	 * What the latency model has learned (src/sched/README.md): its
	 * samples, and what it predicts for a prompt of 1,000 tokens and a
	 * token's step alone and with every slot decoding.
	 */
	const struct sl_predictor *p = &u->predict;
	json_object_set_new(
	    o, "latency_model",
	    json_pack("{s:I, s:b, s:f, s:f, s:f}", "samples",
	              (json_int_t)p->samples, "known", sl_predict_known(p),
	              "prefill_ms_1k_tokens", sl_predict_prefill_ms(p, 1000),
	              "tpot_ms_alone", sl_predict_tpot_ms(p, 1),
	              "tpot_ms_all_slots",
	              sl_predict_tpot_ms(p, SL_MAX(u->total_slots, 1u))));
	json_object_set_new(o, "consecutive_failures",
	                    json_integer(u->outlier.failures));
	json_object_set_new(o, "ejections",
	                    json_integer((json_int_t)u->outlier.ejections));
	if (u->outlier.ejected)
		json_object_set_new(o, "ejected", json_true());
	if (u->outlier.ejected)
		json_object_set_new(
		    o, "ejected_ms",
		    json_integer((json_int_t)sl_outlier_remaining_ms(
		        &u->outlier, uv_now(u->loop))));
	return o;
}

/* test_config.c: option parsing, environment twins and validation. */
#include "sluice/config/config.h"

#include "sluice/base/common.h"
#include "sluice/config/config_file.h"
#include "sluice/fleet/demo_model.h"
#include "sluice/base/log.h"
#include "sluice/sched/sched.h"
#include "sluice/tenants/config_sections.h"
#include "test.h"

#include <unistd.h>

#define MAX_ARGS 16

struct parsed {
	struct sl_config cfg;
	int rc;
	char err[512];
};

/* Parses a NULL-terminated argv (without argv[0]) and environment. */
static void parse(struct parsed *p, const char *const *args,
                  const char *const *env)
{
	char *argv[MAX_ARGS] = {"sluice"};
	int argc = 1;
	for (; args && args[argc - 1]; argc++)
		argv[argc] = (char *)args[argc - 1];
	p->rc = sl_config_parse(&p->cfg, sl_config_sections, argc, argv,
	                        (char *const *)env, p->err, sizeof(p->err));
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_defaults(void)
{
	struct parsed p;
	parse(&p, NULL, NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_STR_EQ(p.cfg.listen, "127.0.0.1:8080");
	ASSERT_STR_EQ(p.cfg.listen_host, "127.0.0.1");
	ASSERT_EQ(p.cfg.listen_port, 8080);
	ASSERT_EQ(p.cfg.upstreams.count, 0);
	ASSERT_STR_EQ(p.cfg.model, "");
	ASSERT_STR_EQ(p.cfg.llama_server, "");
	ASSERT_EQ(p.cfg.slots, 4);
	ASSERT_EQ(p.cfg.ctx_size, 4096);
	ASSERT_EQ(p.cfg.startup_timeout_ms, 120000);
	ASSERT_EQ(p.cfg.stop_timeout_ms, 10000);
	ASSERT_EQ(p.cfg.health_interval_ms, 2000);
	ASSERT_EQ(p.cfg.demo_model_size, SL_DEMO_TINY);
	ASSERT_EQ(p.cfg.log_level, SL_LOG_INFO);
	ASSERT_EQ(p.cfg.log_format, SL_LOG_TEXT);
	ASSERT(p.cfg.aging_rate == 0.2);
	ASSERT_EQ(p.cfg.batch_window_ms, SL_SCHED_WINDOW_AUTO);
	ASSERT_EQ(p.cfg.max_queue, 1024);
	ASSERT_EQ(p.cfg.queue_timeout_ms, 60000);
	ASSERT_EQ(p.cfg.max_batch, 0);
	ASSERT_EQ(p.cfg.slots_per_upstream, 0);
	ASSERT(p.cfg.urgent_bypass);
	ASSERT_EQ(p.cfg.urgent_reserve, SL_SCHED_RESERVE_AUTO);
	ASSERT_EQ(p.cfg.max_body, 1024 * 1024);
	ASSERT_EQ(p.cfg.max_body_memory, 256 * 1024 * 1024);
	ASSERT_EQ(p.cfg.max_header_size, 16 * 1024);
	ASSERT(!p.cfg.help && !p.cfg.version && !p.cfg.write_demo_model);
	sl_config_free(&p.cfg);
}

static void test_flag_forms_and_env(void)
{
	struct parsed p;
	parse(&p,
	      ARGS("--slots=8", "--ctx-size", "2048", "--log-level", "debug"),
	      ENV("SLUICE_SLOTS=2", "SLUICE_MODEL=/m.gguf",
	          "SLUICE_STARTUP_TIMEOUT=500ms", "UNRELATED=1"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.slots, 8); /* the flag wins over SLUICE_SLOTS */
	ASSERT_EQ(p.cfg.ctx_size, 2048);
	ASSERT_STR_EQ(p.cfg.model, "/m.gguf");
	ASSERT_EQ(p.cfg.startup_timeout_ms, 500);
	ASSERT_EQ(p.cfg.log_level, SL_LOG_DEBUG);
	sl_config_free(&p.cfg);

	parse(&p,
	      ARGS("--urgent-bypass", "off", "--aging-rate", "0.5",
	           "--max-body", "2M", "--batch-window", "0"),
	      ENV("SLUICE_MAX_HEADER_SIZE=8K", "SLUICE_URGENT_BYPASS=yes"));
	ASSERT_EQ(p.rc, 0);
	ASSERT(!p.cfg.urgent_bypass);
	ASSERT(p.cfg.aging_rate == 0.5);
	ASSERT_EQ(p.cfg.max_body, 2 * 1024 * 1024);
	ASSERT_EQ(p.cfg.max_header_size, 8 * 1024);
	ASSERT_EQ(p.cfg.batch_window_ms, 0);
	sl_config_free(&p.cfg);

	/* The batching window: auto, a fixed duration, or off; flag or
	 * environment, the flag winning. */
	parse(&p, ARGS("--batch-window", "50ms"), NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.batch_window_ms, 50);
	sl_config_free(&p.cfg);
	parse(&p, ARGS("--batch-window", "auto"), ENV("SLUICE_BATCH_WINDOW=2"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.batch_window_ms, SL_SCHED_WINDOW_AUTO);
	sl_config_free(&p.cfg);
	parse(&p, NULL, ENV("SLUICE_BATCH_WINDOW=0.1"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.batch_window_ms, 100);
	sl_config_free(&p.cfg);
	parse(&p, ARGS("--batch-window", "0"), ENV("SLUICE_BATCH_WINDOW=auto"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.batch_window_ms, 0);
	sl_config_free(&p.cfg);
	parse(&p, NULL, ENV("SLUICE_BATCH_WINDOW=auto"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.batch_window_ms, SL_SCHED_WINDOW_AUTO);
	sl_config_free(&p.cfg);
	/* The reserve: auto, or a number below the slots. */
	parse(&p, ARGS("--urgent-reserve", "1"),
	      ENV("SLUICE_URGENT_RESERVE=auto"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.urgent_reserve, 1);
	sl_config_free(&p.cfg);
	parse(&p, NULL, ENV("SLUICE_URGENT_RESERVE=auto"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.urgent_reserve, SL_SCHED_RESERVE_AUTO);
	sl_config_free(&p.cfg);

	/* Service levels: none, one for every class, or some classes. */
	parse(&p, NULL, NULL);
	ASSERT_EQ(p.rc, 0);
	for (unsigned c = 0; c < SL_SLO_CLASSES; c++)
		ASSERT_EQ(p.cfg.slo_ttft.ms[c] + p.cfg.slo_tpot.ms[c], 0);
	sl_config_free(&p.cfg);
	parse(&p, ARGS("--slo-ttft", "urgent=500ms,batch=30"),
	      ENV("SLUICE_SLO_TPOT=50ms"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.slo_ttft.ms[0], 30000);
	ASSERT_EQ(p.cfg.slo_ttft.ms[1], 0);
	ASSERT_EQ(p.cfg.slo_ttft.ms[2], 500);
	for (unsigned c = 0; c < SL_SLO_CLASSES; c++)
		ASSERT_EQ(p.cfg.slo_tpot.ms[c], 50);
	char text[128];
	sl_slo_classes_format(&p.cfg.slo_ttft, text, sizeof(text));
	ASSERT_STR_EQ(text, "urgent=0.5,batch=30");
	sl_slo_classes_format(&p.cfg.slo_tpot, text, sizeof(text));
	ASSERT_STR_EQ(text, "0.05");
	sl_config_free(&p.cfg);
	parse(&p, ARGS("--slo-ttft", "none"), ENV("SLUICE_SLO_TTFT=2s"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.slo_ttft.ms[1], 0);
	sl_slo_classes_format(&p.cfg.slo_ttft, text, sizeof(text));
	ASSERT_STR_EQ(text, "none");
	sl_config_free(&p.cfg);

	/* An empty environment variable counts as unset. */
	parse(&p, NULL, ENV("SLUICE_SLOTS="));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.slots, 4);
	sl_config_free(&p.cfg);
}

static void test_lists(void)
{
	struct parsed p;
	parse(&p, NULL,
	      ENV("SLUICE_UPSTREAM=http://a:1, http://b:2/",
	          "LLAMA_SERVER_URL=http://c:3",
	          "SLUICE_LLAMA_ARGS=--temp 0.5  -t 2"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.upstreams.count, 3);
	ASSERT_STR_EQ(p.cfg.upstreams.items[0], "http://a:1");
	ASSERT_STR_EQ(p.cfg.upstreams.items[1], "http://b:2"); /* no '/' */
	ASSERT_STR_EQ(p.cfg.upstreams.items[2], "http://c:3");
	ASSERT_EQ(p.cfg.llama_args.count, 4);
	ASSERT_STR_EQ(p.cfg.llama_args.items[1], "0.5");
	ASSERT_STR_EQ(p.cfg.llama_args.items[3], "2");
	sl_config_free(&p.cfg);

	/* Flags replace the environment's list rather than adding to it. */
	parse(&p,
	      ARGS("--upstream", "https://x:9", "--upstream=http://y:8",
	           "--llama-arg=--hf-repo", "--llama-arg", "org/model"),
	      ENV("SLUICE_UPSTREAM=http://a:1", "LLAMA_SERVER_URL=http://c:3",
	          "SLUICE_LLAMA_ARGS=--temp 1"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.upstreams.count, 2);
	ASSERT_STR_EQ(p.cfg.upstreams.items[0], "https://x:9");
	ASSERT_STR_EQ(p.cfg.upstreams.items[1], "http://y:8");
	ASSERT_EQ(p.cfg.llama_args.count, 2);
	ASSERT_STR_EQ(p.cfg.llama_args.items[0], "--hf-repo");
	ASSERT_STR_EQ(p.cfg.llama_args.items[1], "org/model");
	sl_config_free(&p.cfg);
}

static void test_listen_forms(void)
{
	static const struct {
		const char *value, *host;
		unsigned port;
	} good[] = {
	    {"127.0.0.1:9000", "127.0.0.1", 9000},
	    {":9000", "0.0.0.0", 9000},
	    {"[::1]:80", "::1", 80},
	    {"localhost:0", "127.0.0.1", 0},
	    {"0.0.0.0:65535", "0.0.0.0", 65535},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(good); i++) {
		struct parsed p;
		parse(&p, ARGS("--listen", good[i].value), NULL);
		ASSERT_EQ(p.rc, 0);
		ASSERT_STR_EQ(p.cfg.listen_host, good[i].host);
		ASSERT_EQ(p.cfg.listen_port, good[i].port);
		sl_config_free(&p.cfg);
	}
}

static void test_durations(void)
{
	static const struct {
		const char *text;
		uint64_t ms;
	} good[] = {{"0", 0},     {"2", 2000},    {"0.5", 500},
	            {"50ms", 50}, {"1.5s", 1500}, {"120", 120000}};
	for (size_t i = 0; i < SL_ARRAY_SIZE(good); i++) {
		uint64_t ms = 12345;
		ASSERT_EQ(sl_parse_duration_ms(good[i].text, &ms), 0);
		ASSERT_EQ(ms, good[i].ms);
	}
	static const char *const bad[] = {"",    "-1",  "abc", "1h",   "5 s",
	                                  "nan", "inf", "+3",  "1e400"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad); i++) {
		uint64_t ms;
		if (sl_parse_duration_ms(bad[i], &ms) != SL_EINVAL)
			TEST_FAIL("duration \"%s\" was accepted", bad[i]);
	}
}

/* Every bad value: SL_EINVAL and one line that starts with the option. */
static void test_bad_values(void)
{
	/* clang-format off */
	static const struct {
		const char *args[5];
		const char *env;
		const char *prefix; /* the error's first words */
		const char *detail; /* and something it must say */
	} cases[] = {
		{{"--slots", "0"}, NULL, "--slots: ", "from 1 to 256"},
		{{"--slots", "257"}, NULL, "--slots: ", "got \"257\""},
		{{"--slots=four"}, NULL, "--slots: ", "whole number"},
		{{"--slots", "-1"}, NULL, "--slots: ", "whole number"},
		{{"--ctx-size", "10"}, NULL, "--ctx-size: ", "from 64"},
		{{"--listen", "8080"}, NULL, "--listen: ", "IP:PORT"},
		{{"--listen", "1.2.3.4:99999"}, NULL, "--listen: ", "99999"},
		{{"--listen", "example.com:80"}, NULL, "--listen: ", "IP:PORT"},
		{{"--listen", "[::1:80"}, NULL, "--listen: ", "IP:PORT"},
		{{"--upstream", "ftp://x"}, NULL, "--upstream: ", "http://"},
		{{"--upstream", "not a url"}, NULL, "--upstream: ", "URL"},
		{{"--startup-timeout", "soon"}, NULL, "--startup-timeout: ",
		 "duration"},
		{{"--startup-timeout", "0"}, NULL, "--startup-timeout: ",
		 "from 0.1s"},
		{{"--health-interval", "2h"}, NULL, "--health-interval: ",
		 "duration"},
		{{"--log-level", "loud"}, NULL, "--log-level: ",
		 "debug, info, warn or error"},
		{{"--log-format", "xml"}, NULL, "--log-format: ",
		 "text or json"},
		{{"--demo-model-size", "huge"}, NULL, "--demo-model-size: ",
		 "tiny or slow"},
		{{"--slots"}, NULL, "--slots: ", "missing value"},
		{{"--no-such-option"}, NULL, "--no-such-option: ",
		 "unknown option"},
		{{"positional"}, NULL, "positional: ", "unexpected argument"},
		{{"--help=yes"}, NULL, "--help=yes: ", "takes no value"},
		{{NULL}, "SLUICE_SLOTS=0", "SLUICE_SLOTS: ", "from 1 to 256"},
		{{NULL}, "SLUICE_LISTEN=nowhere", "SLUICE_LISTEN: ", "IP:PORT"},
		{{NULL}, "SLUICE_UPSTREAM=http://ok:1,gopher://x",
		 "SLUICE_UPSTREAM: ", "gopher://x"},
		{{NULL}, "LLAMA_SERVER_URL=localhost:8080", "LLAMA_SERVER_URL: ",
		 "http://"},
		{{NULL}, "SLUICE_STOP_TIMEOUT=forever", "SLUICE_STOP_TIMEOUT: ",
		 "duration"},
		{{"--aging-rate", "fast"}, NULL, "--aging-rate: ", "number"},
		{{"--slo-ttft", "0"}, NULL, "--slo-ttft: ", "from 1ms to 3600s"},
		{{"--slo-ttft", "soon"}, NULL, "--slo-ttft: ", "got \"soon\""},
		{{"--slo-ttft", "urgent=1s,urgent=2s"}, NULL, "--slo-ttft: ",
		 "urgent is given twice"},
		{{"--slo-ttft", "vip=1s"}, NULL, "--slo-ttft: ",
		 "one of batch, normal, urgent"},
		{{"--slo-tpot", "normal=1s,"}, NULL, "--slo-tpot: ",
		 "separated by commas"},
		{{"--slo-tpot", "normal=2h"}, NULL, "--slo-tpot: ",
		 "normal: expected a duration"},
		{{NULL}, "SLUICE_SLO_TTFT=-1", "SLUICE_SLO_TTFT: ", "got \"-1\""},
		{{"--aging-rate", "-1"}, NULL, "--aging-rate: ", "from 0"},
		{{"--urgent-bypass", "maybe"}, NULL, "--urgent-bypass: ",
		 "on or off"},
		{{"--max-body", "1T"}, NULL, "--max-body: ", "size"},
		{{"--max-body", "2G"}, NULL, "--max-body: ", "to 1073741824"},
		{{"--max-queue", "0"}, NULL, "--max-queue: ", "from 1"},
		{{"--max-body-memory", "512K"}, NULL, "--max-body-memory: ",
		 "from 1048576"},
		{{"--max-body-memory", "2M", "--max-body", "3M"}, NULL,
		 "--max-body-memory: ",
		 "2097152 bytes is less than --max-body (3145728): a body that "
		 "large could never be read"},
		{{"--max-body", "2M"}, "SLUICE_MAX_BODY_MEMORY=1M",
		 "--max-body-memory: ", "is less than --max-body"},
		{{"--urgent-reserve", "4"}, NULL, "--urgent-reserve: ",
		 "less than the 4 slots"},
		{{"--urgent-reserve", "lots"}, NULL, "--urgent-reserve: ",
		 "expected auto or a whole number from 0 to 100000, got "
		 "\"lots\""},
		{{"--urgent-reserve", "2", "--slots", "2"}, NULL,
		 "--urgent-reserve: ", "or only urgent requests could run"},
		{{"--fair-reserve", "2", "--slots", "3"},
		 "SLUICE_URGENT_RESERVE=1", "--fair-reserve: ",
		 "2, with the urgent reserve, must be less than the 3 slots"},
		{{"--max-connections", "0"}, NULL, "--max-connections: ",
		 "from 1"},
		{{"--max-headers", "101"}, NULL, "--max-headers: ", "to 100"},
		{{"--drain-timeout", "-1"}, NULL, "--drain-timeout: ",
		 "duration"},
		{{"--send-timeout", "0"}, NULL, "--send-timeout: ", "from 0.1s"},
		{{"--keepalive-timeout", "x"}, NULL, "--keepalive-timeout: ",
		 "duration"},
		{{"--slots-per-upstream", "100001"}, NULL,
		 "--slots-per-upstream: ", "to 100000"},
		{{"--max-tokens-cap", "0"}, NULL, "--max-tokens-cap: ", "from 1"},
		{{"--stream-upstream", "sometimes"}, NULL, "--stream-upstream: ",
		 "on or off"},
		{{"--upstream-connect-timeout", "0"}, NULL,
		 "--upstream-connect-timeout: ", "duration"},
		{{"--upstream-idle-timeout", "1d"}, NULL,
		 "--upstream-idle-timeout: ", "duration"},
		{{"--max-header-size", "512"}, NULL, "--max-header-size: ",
		 "from 1024"},
		{{"--body-timeout", "9999"}, NULL, "--body-timeout: ", "to 3600s"},
		{{"--header-timeout", "0.01"}, NULL, "--header-timeout: ",
		 "from 0.1s"},
		{{"--model"}, NULL, "--model: ", "missing value"},
		{{"--batch-window", "11"}, NULL, "--batch-window: ", "to 10s"},
		{{"--batch-window", "Auto"}, NULL, "--batch-window: ",
		 "expected auto or a duration"},
		{{NULL}, "SLUICE_BATCH_WINDOW=automatic",
		 "SLUICE_BATCH_WINDOW: ", "expected auto or a duration"},
		{{NULL}, "SLUICE_QUEUE_TIMEOUT=0", "SLUICE_QUEUE_TIMEOUT: ",
		 "duration"},
	};
	/* clang-format on */
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		struct parsed p;
		const char *env[] = {cases[i].env, NULL};
		parse(&p, cases[i].args[0] ? cases[i].args : NULL,
		      cases[i].env ? env : NULL);
		if (p.rc != SL_EINVAL)
			TEST_FAIL("case %zu (%s) was accepted", i,
			          cases[i].prefix);
		if (strncmp(p.err, cases[i].prefix, strlen(cases[i].prefix)))
			TEST_FAIL("case %zu: error \"%s\" does not start with "
			          "\"%s\"",
			          i, p.err, cases[i].prefix);
		ASSERT_CONTAINS(p.err, cases[i].detail);
		ASSERT(strchr(p.err, '\n') == NULL); /* one line */
		sl_config_free(&p.cfg);
	}
}

static void test_actions(void)
{
	struct parsed p;
	parse(&p, ARGS("-h"), NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT(p.cfg.help);
	sl_config_free(&p.cfg);

	parse(&p,
	      ARGS("--write-demo-model", "/tmp/x.gguf", "--demo-model-size",
	           "slow", "--version"),
	      NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_STR_EQ(p.cfg.write_demo_model, "/tmp/x.gguf");
	ASSERT_EQ(p.cfg.demo_model_size, SL_DEMO_SLOW);
	ASSERT(p.cfg.version);
	sl_config_free(&p.cfg);
}

/* --help names every option with its variable and its default. */
/* Writes text to a new temporary file; returns its path (caller frees). */
static char *temp_file(const char *text)
{
	char *path = sl_xasprintf("/tmp/sluice-test-keys-XXXXXX");
	int fd = mkstemp(path);
	ASSERT(fd >= 0);
	ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_keys(void)
{
	struct parsed p;
	/* None by default; CORS lets any origin. */
	parse(&p, NULL, NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.api_keys.count, 0);
	ASSERT_STR_EQ(p.cfg.admin_key, "");
	ASSERT_EQ(p.cfg.cors_origins.count, 1);
	ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "*");
	sl_config_free(&p.cfg);

	/* Flags repeat, and each value may list several, as llama-server. */
	parse(&p,
	      ARGS("--api-key", "k1,k2", "--api-key=k3", "--admin-key", "adm"),
	      ENV("SLUICE_API_KEY=e1,e2", "SLUICE_ADMIN_KEY=eadm"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.api_keys.count, 3);
	ASSERT_STR_EQ(p.cfg.api_keys.items[0], "k1");
	ASSERT_STR_EQ(p.cfg.api_keys.items[1], "k2");
	ASSERT_STR_EQ(p.cfg.api_keys.items[2], "k3");
	ASSERT_STR_EQ(p.cfg.admin_key, "adm");
	sl_config_free(&p.cfg);

	/* The environment: comma-separated, spaces around items dropped. */
	parse(&p, NULL, ENV("SLUICE_API_KEY=e1, e2", "SLUICE_ADMIN_KEY=eadm"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.api_keys.count, 2);
	ASSERT_STR_EQ(p.cfg.api_keys.items[1], "e2");
	ASSERT_STR_EQ(p.cfg.admin_key, "eadm");
	sl_config_free(&p.cfg);

	/* A key file adds to the keys: comments, blanks, CRLF, spaces. */
	char *file = temp_file("# team keys\n\nf1\r\n  f2  \n#f3\nf4");
	parse(&p, ARGS("--api-key", "k1", "--api-key-file", file), NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.api_keys.count, 4);
	ASSERT_STR_EQ(p.cfg.api_keys.items[0], "k1");
	ASSERT_STR_EQ(p.cfg.api_keys.items[1], "f1");
	ASSERT_STR_EQ(p.cfg.api_keys.items[2], "f2");
	ASSERT_STR_EQ(p.cfg.api_keys.items[3], "f4");
	sl_config_free(&p.cfg);
	char *env = sl_xasprintf("SLUICE_API_KEY_FILE=%s", file);
	parse(&p, NULL, ENV(env));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.api_keys.count, 3);
	sl_config_free(&p.cfg);
	free(env);
	unlink(file);
	free(file);

	/* A file without a key, or none at all: one line naming it. */
	file = temp_file("# nothing yet\n\n");
	parse(&p, ARGS("--api-key-file", file), NULL);
	ASSERT_EQ(p.rc, SL_EINVAL);
	char *want = sl_xasprintf("--api-key-file %s: no key in it", file);
	ASSERT_CONTAINS(p.err, want);
	free(want);
	sl_config_free(&p.cfg);
	unlink(file);
	parse(&p, ARGS("--api-key-file", file), NULL);
	ASSERT_EQ(p.rc, SL_EINVAL);
	want = sl_xasprintf("--api-key-file %s: cannot read it: No such file",
	                    file);
	ASSERT_CONTAINS(p.err, want);
	free(want);
	sl_config_free(&p.cfg);
	free(file);

	/* Bad keys are refused without the key in the message. */
	file = temp_file("good\nse cret\n");
	parse(&p, ARGS("--api-key-file", file), NULL);
	ASSERT_EQ(p.rc, SL_EINVAL);
	ASSERT_CONTAINS(p.err, ", line 2: a key holds a space");
	ASSERT(!strstr(p.err, "cret"));
	sl_config_free(&p.cfg);
	unlink(file);
	free(file);
	static const char *const bad_keys[] = {"k1,,k2", "", "k1,", "a\tb"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad_keys); i++) {
		parse(&p, ARGS("--api-key", bad_keys[i]), NULL);
		ASSERT_EQ(p.rc, SL_EINVAL);
		ASSERT_CONTAINS(p.err, "--api-key: ");
		sl_config_free(&p.cfg);
	}
	char *huge = sl_xmalloc(SL_API_KEY_MAX + 2);
	memset(huge, 'k', SL_API_KEY_MAX + 1);
	huge[SL_API_KEY_MAX + 1] = '\0';
	parse(&p, ARGS("--admin-key", huge), NULL);
	ASSERT_EQ(p.rc, SL_EINVAL);
	ASSERT_CONTAINS(p.err, "--admin-key: a key of 257 bytes is over the "
	                       "256 allowed");
	ASSERT(!strstr(p.err, "kkkk"));
	sl_config_free(&p.cfg);
	huge[SL_API_KEY_MAX] = '\0';
	parse(&p, ARGS("--admin-key", huge), NULL);
	ASSERT_EQ(p.rc, 0);
	sl_config_free(&p.cfg);
	free(huge);
}

static void test_cors_origins(void)
{
	struct parsed p;
	parse(&p,
	      ARGS("--cors-origin", "https://a.example",
	           "--cors-origin=http://b.example:8080,http://[::1]:3"),
	      ENV("SLUICE_CORS_ORIGIN=http://env.example"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.cors_origins.count, 3);
	ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "https://a.example");
	ASSERT_STR_EQ(p.cfg.cors_origins.items[1], "http://b.example:8080");
	ASSERT_STR_EQ(p.cfg.cors_origins.items[2], "http://[::1]:3");
	sl_config_free(&p.cfg);

	/* The environment replaces the default "*", not adds to it. */
	parse(&p, NULL, ENV("SLUICE_CORS_ORIGIN=http://x:1, http://y:2"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.cors_origins.count, 2);
	ASSERT_STR_EQ(p.cfg.cors_origins.items[1], "http://y:2");
	sl_config_free(&p.cfg);

	/* "none": an empty list, which the server reads as no CORS. */
	parse(&p, ARGS("--cors-origin", "none"), NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.cors_origins.count, 0);
	sl_config_free(&p.cfg);
	parse(&p, NULL, ENV("SLUICE_CORS_ORIGIN=none"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.cors_origins.count, 0);
	sl_config_free(&p.cfg);

	/* "localhost": llama-server's --cors-origins localhost. */
	parse(&p, ARGS("--cors-origin", "localhost"), NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.cors_origins.count, 1);
	ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "localhost");
	ASSERT(!p.cfg.cors_localhost_for_tools);
	sl_config_free(&p.cfg);

	static const struct {
		const char *value, *err;
	} bad[] = {
	    {"https://a.example/", "got \"https://a.example/\""},
	    {"a.example", "expected *, localhost, none or an origin"},
	    {"http://", "expected *, localhost, none or an origin"},
	    {"*,http://a:1", "* cannot be combined with other origins"},
	    {"none,http://a:1", "none cannot be combined"},
	    {"localhost,http://a:1", "localhost cannot be combined"},
	    {"localhost:8080", "expected *, localhost, none or an origin"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad); i++) {
		parse(&p, ARGS("--cors-origin", bad[i].value), NULL);
		ASSERT_EQ(p.rc, SL_EINVAL);
		ASSERT_CONTAINS(p.err, "--cors-origin: ");
		ASSERT_CONTAINS(p.err, bad[i].err);
		sl_config_free(&p.cfg);
	}
}

/*
 * Not set, --cors-origin is "localhost" when a llama-server sluice starts
 * runs tools, as llama-server's own default then is (measured on 0.7.0
 * with --tools, --agent, --mcp-servers-json and LLAMA_ARG_TOOLS; not
 * with --ui-mcp-proxy alone); set anywhere, it is as set.
 */
static void test_cors_localhost_for_tools(void)
{
	struct parsed p;
	const char *const *const with_tools[] = {
	    ARGS("--llama-arg=--tools", "--llama-arg=get_info"),
	    ARGS("--llama-arg=--agent"),
	    ARGS("--llama-arg=-ag"),
	    ARGS("--llama-arg=--mcp-servers-json", "--llama-arg={}"),
	    ARGS("--llama-arg=--mcp-servers-config", "--llama-arg=/x.json"),
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(with_tools); i++) {
		parse(&p, with_tools[i], NULL);
		ASSERT_EQ(p.rc, 0);
		ASSERT_EQ(p.cfg.cors_origins.count, 1);
		ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "localhost");
		ASSERT(p.cfg.cors_localhost_for_tools);
		sl_config_free(&p.cfg);
	}
	const char *const *const envs[] = {
	    ENV("LLAMA_ARG_TOOLS=all"),
	    ENV("LLAMA_ARG_AGENT=true"),
	    ENV("LLAMA_ARG_MCP_SERVERS_JSON={}"),
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(envs); i++) {
		parse(&p, NULL, envs[i]);
		ASSERT_EQ(p.rc, 0);
		ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "localhost");
		sl_config_free(&p.cfg);
	}
	/* No tools: "*". */
	const char *const *const without[] = {
	    ARGS("--llama-arg=--ui-mcp-proxy"),
	    ARGS("--llama-arg=--no-agent"),
	    ARGS("--llama-arg=--tools-runtime", "--llama-arg=none"),
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(without); i++) {
		parse(&p, without[i],
		      ENV("LLAMA_ARG_TOOLS=", "LLAMA_ARG_AGENT=0"));
		ASSERT_EQ(p.rc, 0);
		ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "*");
		ASSERT(!p.cfg.cors_localhost_for_tools);
		sl_config_free(&p.cfg);
	}
	/* Set, from any source, it is as set. */
	parse(&p, ARGS("--llama-arg=--tools", "--cors-origin", "*"), NULL);
	ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "*");
	ASSERT(!p.cfg.cors_localhost_for_tools);
	sl_config_free(&p.cfg);
	parse(&p, ARGS("--llama-arg=--tools"),
	      ENV("SLUICE_CORS_ORIGIN=https://app.example"));
	ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "https://app.example");
	sl_config_free(&p.cfg);
}

static void test_usage(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	sl_config_usage(f);
	fclose(f);
	/* clang-format off */
	static const char *const expected[] = {
		"--listen ADDR",      "[SLUICE_LISTEN; default: 127.0.0.1:8080]",
		"--upstream URL",     "[SLUICE_UPSTREAM; default: none]",
		"LLAMA_SERVER_URL",   "--model FILE",
		"[SLUICE_MODEL;",     "--llama-server PATH",
		"[SLUICE_LLAMA_SERVER;", "--llama-arg ARG",
		"[SLUICE_LLAMA_ARGS;", "[SLUICE_SLOTS; default: 4]",
		"[SLUICE_CTX_SIZE; default: 4096]",
		"[SLUICE_STARTUP_TIMEOUT; default: 120]",
		"[SLUICE_STOP_TIMEOUT; default: 10]",
		"[SLUICE_HEALTH_INTERVAL; default: 2]",
		"[SLUICE_CACHE_DIR;",  "[SLUICE_DEMO_MODEL_SIZE; default: tiny]",
		"[SLUICE_LOG_LEVEL; default: info]",
		"[SLUICE_LOG_FORMAT; default: text]",
		"[SLUICE_AGING_RATE; default: 0.2]",
		"--batch-window auto|DURATION",
		"[SLUICE_BATCH_WINDOW; default: auto]",
		"[SLUICE_URGENT_BYPASS; default: on]",
		"[SLUICE_MAX_QUEUE; default: 1024]",
		"[SLUICE_MAX_BODY; default: 1M]",
		"--api-key KEY", "[SLUICE_API_KEY; default: none: no key needed]",
		"--api-key-file FILE", "[SLUICE_API_KEY_FILE; default: none]",
		"--admin-key KEY", "[SLUICE_ADMIN_KEY; default: none:",
		"--cors-origin ORIGIN", "[SLUICE_CORS_ORIGIN; default: *]",
		"--write-demo-model PATH", "--help", "--version",
		"--config FILE", "[SLUICE_CONFIG; default: none]",
		"--check-config FILE",
	};
	/* clang-format on */
	for (size_t i = 0; i < SL_ARRAY_SIZE(expected); i++)
		ASSERT_CONTAINS(text, expected[i]);
	/* Every line fits a terminal. */
	for (char *line = text; *line;) {
		char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);
		if (n > 80)
			TEST_FAIL("help line longer than 80 columns: %.*s",
			          (int)n, line);
		line += n + (nl != NULL);
	}
	free(text);
}

/* --check-config's text for a parsed configuration; the caller frees it. */
static char *printed(const struct sl_config *cfg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	sl_config_print(cfg, f);
	fclose(f);
	return text;
}

/*
 * Parses with the YAML `text` as --config's file, `args` after it. Returns
 * the file's path, for the error lines that name it (caller frees, and
 * unlinks).
 */
static char *parse_file(struct parsed *p, const char *text,
                        const char *const *args, const char *const *env)
{
	char *path = temp_file(text);
	const char *all[MAX_ARGS] = {"--config", path};
	size_t n = 2;
	for (; args && args[n - 2]; n++)
		all[n] = args[n - 2];
	all[n] = NULL;
	parse(p, all, env);
	return path;
}

static void done_file(struct parsed *p, char *path)
{
	sl_config_free(&p->cfg);
	unlink(path);
	free(path);
}

static void test_file_values_and_lists(void)
{
	struct parsed p;
	char *path = parse_file(&p,
	                        "# sluice\n"
	                        "listen: 127.0.0.1:9090\n"
	                        "batch-window: 50ms\n"
	                        "slots: \"8\"\n"
	                        "ui: on\n"
	                        "upstream:\n"
	                        "  - http://a:1\n"
	                        "  - http://b:2/\n"
	                        "llama-arg: [--temp, \"0.5\"]\n"
	                        "api-key: k1, k2\n"
	                        "cors-origin: https://app.example\n"
	                        "trusted-proxy: []\n",
	                        NULL, NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_STR_EQ(p.cfg.listen_host, "127.0.0.1");
	ASSERT_EQ(p.cfg.listen_port, 9090);
	ASSERT_EQ(p.cfg.batch_window_ms, 50);
	ASSERT_EQ(p.cfg.slots, 8);
	ASSERT(p.cfg.ui);
	/* A sequence gives items; a single scalar is a one-item list. */
	ASSERT_EQ(p.cfg.upstreams.count, 2);
	ASSERT_STR_EQ(p.cfg.upstreams.items[1], "http://b:2");
	ASSERT_EQ(p.cfg.llama_args.count, 2);
	ASSERT_STR_EQ(p.cfg.llama_args.items[0], "--temp");
	ASSERT_STR_EQ(p.cfg.llama_args.items[1], "0.5");
	/* A key list's scalar splits on commas, as the flag's value does. */
	ASSERT_EQ(p.cfg.api_keys.count, 2);
	ASSERT_STR_EQ(p.cfg.api_keys.items[1], "k2");
	ASSERT_EQ(p.cfg.cors_origins.count, 1);
	ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "https://app.example");
	ASSERT_EQ(p.cfg.trusted_proxies.count, 0);
	ASSERT_STR_EQ(p.cfg.config_file, path);
	done_file(&p, path);

	/* A file of comments, or nothing, is an empty configuration. */
	path = parse_file(&p, "# nothing yet\n", NULL, NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.slots, 4);
	done_file(&p, path);
	path = parse_file(&p, "", NULL, NULL);
	ASSERT_EQ(p.rc, 0);
	done_file(&p, path);
	path = parse_file(&p, "---\n", NULL, NULL);
	ASSERT_EQ(p.rc, 0);
	done_file(&p, path);
	/* An empty --config or SLUICE_CONFIG names no file. */
	parse(&p, ARGS("--config", ""), ENV("SLUICE_CONFIG="));
	ASSERT_EQ(p.rc, 0);
	sl_config_free(&p.cfg);
}

static void test_file_precedence(void)
{
	static const char yaml[] = "slots: 8\n"
	                           "ctx-size: 1024\n"
	                           "max-queue: 7\n"
	                           "upstream: [http://file:1, http://file:2]\n"
	                           "llama-arg: [-t, \"2\"]\n";
	struct parsed p;
	/* Flag, then environment, then file, then default. */
	char *path = parse_file(&p, yaml, ARGS("--slots", "3"),
	                        ENV("SLUICE_SLOTS=6", "SLUICE_CTX_SIZE=2048"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.slots, 3);
	ASSERT_EQ(p.cfg.ctx_size, 2048);
	ASSERT_EQ(p.cfg.max_queue, 7);
	ASSERT_EQ(p.cfg.max_batch, 0);
	char *text = printed(&p.cfg);
	ASSERT_CONTAINS(text, "\nslots: 3  # flag\n");
	ASSERT_CONTAINS(text, "\nctx-size: 2048  # env\n");
	ASSERT_CONTAINS(text, "\nmax-queue: 7  # file\n");
	ASSERT_CONTAINS(text, "\nmax-batch: 0  # default\n");
	ASSERT_CONTAINS(text, "\nupstream: [http://file:1, http://file:2]  "
	                      "# file\n");
	free(text);
	done_file(&p, path);

	/* A list from a higher source replaces the file's, whole. */
	path = parse_file(
	    &p, yaml, ARGS("--upstream", "http://flag:1"),
	    ENV("SLUICE_UPSTREAM=http://env:1", "SLUICE_LLAMA_ARGS=--temp 0"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.upstreams.count, 1);
	ASSERT_STR_EQ(p.cfg.upstreams.items[0], "http://flag:1");
	ASSERT_EQ(p.cfg.llama_args.count, 2);
	ASSERT_STR_EQ(p.cfg.llama_args.items[0], "--temp");
	done_file(&p, path);
	path = parse_file(&p, yaml, NULL, ENV("LLAMA_SERVER_URL=http://env:2"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.upstreams.count, 1);
	ASSERT_STR_EQ(p.cfg.upstreams.items[0], "http://env:2");
	done_file(&p, path);
	/* The file's list replaces the default (cors-origin's "*"). */
	path = parse_file(&p, "cors-origin: [http://a:1, http://b:2]\n", NULL,
	                  NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.cors_origins.count, 2);
	ASSERT_STR_EQ(p.cfg.cors_origins.items[0], "http://a:1");
	done_file(&p, path);

	/* SLUICE_CONFIG names the file; --config wins over it. */
	path = temp_file("slots: 9\n");
	char *env = sl_xasprintf("SLUICE_CONFIG=%s", path);
	parse(&p, NULL, ENV(env));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.slots, 9);
	text = printed(&p.cfg);
	ASSERT_CONTAINS(text, "config: ");
	ASSERT_CONTAINS(text, "  # env\n");
	free(text);
	sl_config_free(&p.cfg);
	parse(&p, ARGS("--config", "/nonexistent/sluice.yaml"), ENV(env));
	ASSERT_EQ(p.rc, SL_EINVAL);
	ASSERT_STR_EQ(p.err, "--config /nonexistent/sluice.yaml: cannot read "
	                     "it: No such file or directory");
	sl_config_free(&p.cfg);
	/* --check-config FILE reads FILE, and is the file shown. */
	parse(&p, ARGS("--check-config", path),
	      ENV("SLUICE_CONFIG=/nonexistent"));
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.slots, 9);
	ASSERT_STR_EQ(p.cfg.check_config, path);
	ASSERT_STR_EQ(p.cfg.config_file, path);
	sl_config_free(&p.cfg);
	parse(&p, ARGS("--check-config", path, "--config", path), NULL);
	ASSERT_EQ(p.rc, SL_EINVAL);
	ASSERT_STR_EQ(p.err, "--check-config: names the file to check: leave "
	                     "out --config");
	sl_config_free(&p.cfg);
	free(env);
	unlink(path);
	free(path);
}

/* Every class of bad file, with its exact line. */
static void test_file_errors(void)
{
	static const struct {
		const char *yaml;
		const char *err; /* after "PATH:" */
	} cases[] = {
	    {"slots: 4\nbogus: 1\n", "2: bogus: unknown option (see --help)"},
	    {"slots: 0\n",
	     "1: slots: expected a whole number from 1 to 256, got \"0\""},
	    {"listen: 127.0.0.1:80\nbatch-window: soon\n",
	     "2: batch-window: expected auto or a duration from 0s to 10s "
	     "(seconds, or milliseconds with \"ms\"), got \"soon\""},
	    {"upstream:\n  - http://a:1\n  - ftp://b\n",
	     "3: upstream: expected an http:// or https:// URL, got "
	     "\"ftp://b\""},
	    {"slots: [1, 2]\n",
	     "1: slots: takes one value, not a list (only repeatable options "
	     "take lists)"},
	    {"\nslots:\n  a: 1\n", "3: slots: takes a value, not a mapping"},
	    {"bogus:\n  a: 1\n",
	     "2: bogus: unknown section (see deploy/sluice.yaml)"},
	    {"upstream:\n  - [http://a:1]\n",
	     "2: upstream: a list item must be a single value, not a list"},
	    {"upstream:\n  - {a: 1}\n",
	     "2: upstream: a list item must be a single value, not a mapping"},
	    {"slots: 4\nlisten: :1\nslots: 5\n",
	     "3: slots: given twice (first on line 1)"},
	    {"[a]: 1\n", "1: a key must be an option's name, not a list"},
	    {"- slots\n",
	     "1: expected option names with their values (name: value), got "
	     "a list"},
	    {"slots\n",
	     "1: expected option names with their values (name: value), got "
	     "a value"},
	    {"slots: 4\nlisten: \"127.0.0.1:1\n",
	     "3: not valid YAML: found unexpected end of stream (while "
	     "scanning a quoted scalar started on line 2)"},
	    {"slots: 4\n\tctx-size: 1\n",
	     "2: not valid YAML: found a tab character that violates "
	     "indentation (while scanning a plain scalar started on line 1)"},
	    {"# fine\nslots: \xff\n",
	     "2: not valid YAML: invalid leading UTF-8 octet"},
	    {"slots: 4\n---\nslots: 5\n",
	     "2: a second document: the file holds one mapping of options"},
	    {"ctx-size: &n 1024\nslots: *n\n",
	     "2: slots: an alias (*NAME): anchors are not expanded, write the "
	     "value out"},
	    {"model: \"a\\0b\"\n", "1: model: a NUL byte in the value"},
	    /* Error lines stay one line: a quoted line break is escaped. */
	    {"slots: 2x\n\n  y\n",
	     "1: slots: expected a whole number from 1 to 256, got "
	     "\"2x\\ny\""},
	    {"\"a\\tb\": 1\n", "1: a\\tb: unknown option (see --help)"},
	    {"help: true\n",
	     "1: help: a one-shot flag, not an option a configuration file "
	     "can set"},
	    {"version: 1\n",
	     "1: version: a one-shot flag, not an option a configuration file "
	     "can set"},
	    {"write-demo-model: /tmp/x\n",
	     "1: write-demo-model: a one-shot flag, not an option a "
	     "configuration file can set"},
	    {"probe: http://a\n",
	     "1: probe: a one-shot flag, not an option a configuration file "
	     "can set"},
	    {"check-config: x\n",
	     "1: check-config: a one-shot flag, not an option a configuration "
	     "file can set"},
	    {"config: other.yaml\n",
	     "1: config: a one-shot flag, not an option a configuration file "
	     "can set"},
	    /* Checks across options name the file's line too. */
	    {"cors-origin:\n  - \"*\"\n  - http://a\n",
	     "2: cors-origin: * cannot be combined with other origins"},
	    {"slots: 2\nurgent-reserve: 2\n",
	     "2: urgent-reserve: 2 must be less than the 2 slots of an "
	     "upstream, or only urgent requests could run"},
	    {"api-key-file: /nonexistent/keys\n",
	     "1: api-key-file /nonexistent/keys: cannot read it: No such file "
	     "or directory"},
	    /* A key is never shown. */
	    {"api-key: [good, \"bad key\"]\n",
	     "1: api-key: a key holds a space or a control byte, which a "
	     "client cannot send in a header"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		struct parsed p;
		char *path = parse_file(&p, cases[i].yaml, NULL, NULL);
		char *want = sl_xasprintf("%s:%s", path, cases[i].err);
		if (p.rc != SL_EINVAL || strcmp(p.err, want) != 0)
			TEST_FAIL("case %zu: rc %d, error\n  \"%s\", not\n  "
			          "\"%s\"",
			          i, p.rc, p.err, want);
		free(want);
		done_file(&p, path);
	}
}

/* What a section callback saw: the tree, written out, or the error. */
struct seen_section {
	char text[512];
	size_t used;
};

static void write_node(struct seen_section *seen,
                       const struct sl_config_node *n)
{
	static const char kinds[] = "slm";
	int k =
	    snprintf(seen->text + seen->used, sizeof(seen->text) - seen->used,
	             "(%c%u%s%s", kinds[n->kind], n->line, n->key ? " " : "",
	             n->key ? n->key : "");
	seen->used += (size_t)k;
	if (n->text) {
		k = snprintf(seen->text + seen->used,
		             sizeof(seen->text) - seen->used, "=%s", n->text);
		seen->used += (size_t)k;
	}
	for (unsigned i = 0; i < n->n; i++) {
		ASSERT(n->child[i].parent == n);
		ASSERT_EQ(n->child[i].index, i);
		write_node(seen, &n->child[i]);
	}
	seen->text[seen->used++] = ')';
	seen->text[seen->used] = '\0';
}

static int record_section(void *ctx, enum sl_config_file_item item,
                          const char *key, const char *value,
                          const struct sl_config_node *node, const char *where,
                          unsigned line, char *err, size_t size)
{
	(void)key, (void)value, (void)where, (void)line;
	struct seen_section *seen = ctx;
	if (item != SL_CONFIG_FILE_SECTION)
		return 0;
	write_node(seen, node);
	/* A node deep inside is named by its path from the top. */
	const struct sl_config_node *args =
	    sl_config_node_get(sl_config_node_get(node, "tiny"), "args");
	if (args && args->n > 1)
		return sl_config_node_fail(err, size, &args->child[1], "bad %s",
		                           args->child[1].text);
	return 0;
}

/*
 * A section (a key holding a mapping) arrives whole, as a tree with lines,
 * keys and parents; its errors name their node; bounds hold inside it.
 */
static void test_file_sections(void)
{
	static const struct {
		const char *yaml;
		const char *tree; /* NULL: an error */
		const char *err;  /* after "PATH:" */
	} cases[] = {
	    {"slots: 2\nmodels:\n  tiny:\n    slots: 4\n"
	     "    aliases: [a, b]\n  chat: {}\n",
	     "(m3 models(m4 tiny(s4 slots=4)(l5 aliases(s5=a)(s5=b)))"
	     "(m6 chat))",
	     NULL},
	    {"models:\n  tiny:\n    args: [--x, --y]\n", NULL,
	     "3: models.tiny.args[1]: bad --y"},
	    {"models:\n  a: 1\n  b: 2\n  a: 3\n", NULL,
	     "4: models: key \"a\" given twice (first on line 2)"},
	    {"models:\n  ? [a]\n  : 1\n", NULL,
	     "2: models: a key must be a single value, not a list"},
	    {"models:\n  a:\n    b:\n      c: [[1]]\n", NULL,
	     "4: models: nested more than 4 levels deep"},
	    {"models:\n  a: *x\n", NULL,
	     "2: models: an alias (*NAME): anchors are not expanded, write "
	     "the value out"},
	    {"models:\n  a: \"\\0\"\n", NULL,
	     "2: models: a NUL byte in the value"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		char *path = temp_file(cases[i].yaml);
		struct seen_section seen = {.used = 0};
		char err[256] = "";
		int rc = sl_config_file_read(path, "--config", record_section,
		                             &seen, err, sizeof(err));
		if (cases[i].tree) {
			if (rc != 0)
				TEST_FAIL("case %zu: %s", i, err);
			ASSERT_STR_EQ(seen.text, cases[i].tree);
		} else {
			char *want = sl_xasprintf("%s:%s", path, cases[i].err);
			if (rc != SL_EINVAL || strcmp(err, want) != 0)
				TEST_FAIL("case %zu: rc %d, error\n  \"%s\", "
				          "not\n  \"%s\"",
				          i, rc, err, want);
			free(want);
		}
		unlink(path);
		free(path);
	}
}

/* The file's size is bounded; a file at the bound is read. */
static void test_file_size_bound(void)
{
	char *text = sl_xmalloc(SL_CONFIG_FILE_MAX + 2);
	static const char head[] = "slots: 5\n";
	memcpy(text, head, sizeof(head) - 1);
	memset(text + sizeof(head) - 1, '#',
	       SL_CONFIG_FILE_MAX - (sizeof(head) - 1));
	text[SL_CONFIG_FILE_MAX - 1] = '\n';
	text[SL_CONFIG_FILE_MAX] = '\0';
	struct parsed p;
	char *path = parse_file(&p, text, NULL, NULL);
	ASSERT_EQ(p.rc, 0);
	ASSERT_EQ(p.cfg.slots, 5);
	done_file(&p, path);

	text[SL_CONFIG_FILE_MAX] = '\n';
	text[SL_CONFIG_FILE_MAX + 1] = '\0';
	path = parse_file(&p, text, NULL, NULL);
	ASSERT_EQ(p.rc, SL_EINVAL);
	char *want = sl_xasprintf("--config %s: over %u bytes: not a "
	                          "configuration file",
	                          path, SL_CONFIG_FILE_MAX);
	ASSERT_STR_EQ(p.err, want);
	free(want);
	done_file(&p, path);
	free(text);
}

/* --check-config's lines: each option once, values as written, keys masked. */
static void test_print(void)
{
	struct parsed p;
	char *path = parse_file(
	    &p,
	    "api-key: [client-secret-1, client-secret-2]\n"
	    "upstream-api-key: upstream-secret\n"
	    "cors-origin: none\n"
	    "max-body: 2M\n"
	    "header-timeout: 1500ms\n"
	    "llama-arg: [\"--alias\", \"a b\", \"q\\\"\"]\n",
	    ARGS("--admin-key", "admin-secret", "--batch-window", "0"), NULL);
	ASSERT_EQ(p.rc, 0);
	char *text = printed(&p.cfg);
	ASSERT(!strstr(text, "secret"));
	ASSERT_CONTAINS(text,
	                "\napi-key: [\"********\", \"********\"]  # file\n");
	ASSERT_CONTAINS(text, "\nupstream-api-key: \"********\"  # file\n");
	ASSERT_CONTAINS(text, "\nadmin-key: \"********\"  # flag\n");
	ASSERT_CONTAINS(text, "\ncors-origin: none  # file\n");
	ASSERT_CONTAINS(text, "\nmax-body: 2M  # file\n");
	ASSERT_CONTAINS(text, "\nmax-header-size: 16K  # default\n");
	ASSERT_CONTAINS(text, "\nheader-timeout: 1.5  # file\n");
	ASSERT_CONTAINS(text, "\nbatch-window: 0  # flag\n");
	ASSERT_CONTAINS(text, "\nurgent-reserve: auto  # default\n");
	ASSERT_CONTAINS(text, "\nllama-arg: [\"--alias\", \"a b\", \"q\\\"\"]  "
	                      "# file\n");
	ASSERT_CONTAINS(text, "\nmodel: \"\"  # default\n");
	ASSERT(strncmp(text, "config: ", 8) == 0);
	/* One line per option, in --help's order. */
	unsigned lines = 0;
	for (const char *c = text; *c; c++)
		lines += *c == '\n';
	char *help = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&help, &len);
	sl_config_usage(f);
	fclose(f);
	unsigned options = 0;
	for (const char *c = strstr(help, "\n  --");
	     c && c < strstr(help, "Actions:"); c = strstr(c + 1, "\n  --"))
		options++;
	ASSERT_EQ(lines, options);
	free(help);

	/* What --check-config prints reads back as the same configuration. */
	char *again_path = temp_file(strstr(text, "\n") + 1);
	free(text);
	struct parsed q;
	const char *args[] = {"--config", again_path, "--admin-key",
	                      "admin-secret", NULL};
	parse(&q, args, NULL);
	/* Masked keys read back as keys, "********"; the rest is equal. */
	ASSERT_EQ(q.rc, 0);
	ASSERT_EQ(q.cfg.max_body, p.cfg.max_body);
	ASSERT_EQ(q.cfg.header_timeout_ms, 1500);
	ASSERT_EQ(q.cfg.cors_origins.count, 0);
	ASSERT_EQ(q.cfg.llama_args.count, 3);
	ASSERT_STR_EQ(q.cfg.llama_args.items[2], "q\"");
	sl_config_free(&q.cfg);
	unlink(again_path);
	free(again_path);
	done_file(&p, path);
}

int main(void)
{
	RUN(test_defaults);
	RUN(test_flag_forms_and_env);
	RUN(test_lists);
	RUN(test_listen_forms);
	RUN(test_durations);
	RUN(test_bad_values);
	RUN(test_actions);
	RUN(test_keys);
	RUN(test_cors_origins);
	RUN(test_cors_localhost_for_tools);
	RUN(test_usage);
	RUN(test_file_values_and_lists);
	RUN(test_file_precedence);
	RUN(test_file_errors);
	RUN(test_file_sections);
	RUN(test_file_size_bound);
	RUN(test_print);
	return 0;
}

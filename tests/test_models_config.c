/*
 * test_models_config.c: the models: section of the configuration file:
 * what a good one reads as, what --check-config prints, and every bad
 * input with its one exact error line.
 */
#include "sluice/base/common.h"
#include "sluice/config/config.h"
#include "sluice/config/models_config.h"
#include "sluice/tenants/config_sections.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *temp_file(const char *text)
{
	char *path = sl_xasprintf("/tmp/sluice-test-models-XXXXXX");
	int fd = mkstemp(path);
	ASSERT(fd >= 0);
	ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

/* Parses `yaml` as --config, with extra arguments; returns the code. */
static int parse_yaml(struct sl_config *cfg, const char *yaml,
                      const char *extra1, const char *extra2, char *err,
                      size_t size, char **path_out)
{
	char *path = temp_file(yaml);
	char *argv[6] = {"sluice", "--config", path};
	int argc = 3;
	if (extra1)
		argv[argc++] = (char *)extra1;
	if (extra2)
		argv[argc++] = (char *)extra2;
	char *envp[] = {NULL};
	int rc = sl_config_parse(cfg, sl_config_sections, argc, argv, envp, err,
	                         size);
	if (path_out)
		*path_out = path;
	else {
		unlink(path);
		free(path);
	}
	return rc;
}

static void test_good(void)
{
	struct sl_config cfg;
	char err[512];
	char *path;
	int rc = parse_yaml(&cfg,
	                    "slots: 3\n"
	                    "default-model: small\n"
	                    "models:\n"
	                    "  tiny:\n"
	                    "    model: /m/tiny.gguf\n"
	                    "    slots: 2\n"
	                    "    args:\n"
	                    "      - \"--threads\"\n"
	                    "      - 1\n"
	                    "    aliases:\n"
	                    "      - small\n"
	                    "      - t\n"
	                    "    replicas: 2\n"
	                    "    queue-timeout: 500ms\n"
	                    "  hf:\n"
	                    "    hf-repo: org/repo\n"
	                    "    preload: false\n"
	                    "    idle-timeout: 600s\n"
	                    "  far:\n"
	                    "    upstreams: [http://a:1/, https://b]\n"
	                    "    max-queue: 7\n"
	                    "    slo: {ttft: 1s, tpot: 20ms}\n",
	                    NULL, NULL, err, sizeof(err), &path);
	ASSERT_EQ(rc, 0);
	ASSERT_EQ(cfg.n_models, 3);
	const struct sl_model_config *m = &cfg.models[0];
	ASSERT_STR_EQ(m->name, "tiny");
	ASSERT_STR_EQ(m->file, "/m/tiny.gguf");
	ASSERT(!m->hf_repo);
	ASSERT_EQ(m->slots, 2);
	ASSERT_EQ(m->ctx_size, 0);
	ASSERT_EQ(m->replicas, 2);
	ASSERT_EQ(m->args.count, 2);
	ASSERT_STR_EQ(m->args.items[1], "1");
	ASSERT_EQ(m->aliases.count, 2);
	ASSERT(m->has_queue_timeout);
	ASSERT_EQ(m->queue_timeout_ms, 500);
	ASSERT(!m->has_max_queue);
	ASSERT(sl_model_config_managed(m));
	ASSERT(m->preload);
	ASSERT_EQ(m->idle_timeout_ms, 0);
	m = &cfg.models[1];
	ASSERT_STR_EQ(m->hf_repo, "org/repo");
	ASSERT_EQ(m->replicas, 1);
	ASSERT(!m->preload);
	ASSERT_EQ(m->idle_timeout_ms, 600000);
	m = &cfg.models[2];
	ASSERT(!sl_model_config_managed(m));
	ASSERT_EQ(m->upstreams.count, 2);
	ASSERT_STR_EQ(m->upstreams.items[0], "http://a:1");
	ASSERT_STR_EQ(m->upstreams.items[1], "https://b");
	ASSERT(m->has_max_queue);
	ASSERT_EQ(m->max_queue, 7);
	ASSERT_EQ(m->slo.ttft_ms, 1000);
	ASSERT_EQ(m->slo.tpot_ms, 20);
	ASSERT_EQ(cfg.models[0].slo.ttft_ms, 0);
	ASSERT_EQ(m->replicas, 0);
	ASSERT(sl_models_config_find(&cfg, "t") == &cfg.models[0]);
	ASSERT(sl_models_config_find(&cfg, "far") == &cfg.models[2]);
	ASSERT(sl_models_config_find(&cfg, "nope") == NULL);
	ASSERT_STR_EQ(cfg.default_model, "small");

	/* --check-config writes the section back, the defaults filled in. */
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	sl_models_config_print(out, &cfg);
	fclose(out);
	ASSERT_STR_EQ(text, "models:\n"
	                    "  tiny:\n"
	                    "    model: /m/tiny.gguf\n"
	                    "    slots: 2\n"
	                    "    ctx-size: 4096\n"
	                    "    replicas: 2\n"
	                    "    args:\n"
	                    "      - \"--threads\"\n"
	                    "      - 1\n"
	                    "    preload: true\n"
	                    "    idle-timeout: 0\n"
	                    "    aliases:\n"
	                    "      - small\n"
	                    "      - t\n"
	                    "    max-queue: 1024\n"
	                    "    queue-timeout: 0.5\n"
	                    "  hf:\n"
	                    "    hf-repo: org/repo\n"
	                    "    slots: 3\n"
	                    "    ctx-size: 4096\n"
	                    "    replicas: 1\n"
	                    "    preload: false\n"
	                    "    idle-timeout: 600\n"
	                    "    max-queue: 1024\n"
	                    "    queue-timeout: 60\n"
	                    "  far:\n"
	                    "    upstreams:\n"
	                    "      - http://a:1\n"
	                    "      - https://b\n"
	                    "    max-queue: 7\n"
	                    "    queue-timeout: 60\n"
	                    "    slo: {ttft: 1, tpot: 0.02}\n");
	free(text);
	sl_config_free(&cfg);
	unlink(path);
	free(path);
}

/*
 * dns: NAME:PORT, alone or beside upstreams:, printed back; and a model's
 * copy (a reload keeps one per model) holds the same settings.
 */
static void test_dns_and_copy(void)
{
	struct sl_config cfg;
	char err[512];
	int rc = parse_yaml(&cfg,
	                    "models:\n"
	                    "  pods:\n"
	                    "    dns: llama.svc:8080\n"
	                    "    aliases: [p]\n"
	                    "  both:\n"
	                    "    upstreams: [http://a:1]\n"
	                    "    dns: other.svc:9\n",
	                    NULL, NULL, err, sizeof(err), NULL);
	ASSERT_EQ(rc, 0);
	ASSERT_STR_EQ(cfg.models[0].dns, "llama.svc:8080");
	ASSERT(!sl_model_config_managed(&cfg.models[0]));
	ASSERT_EQ(cfg.models[0].upstreams.count, 0);
	ASSERT_STR_EQ(cfg.models[1].dns, "other.svc:9");
	ASSERT_EQ(cfg.models[1].upstreams.count, 1);
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	sl_models_config_print(out, &cfg);
	fclose(out);
	ASSERT_STR_EQ(text, "models:\n"
	                    "  pods:\n"
	                    "    dns: llama.svc:8080\n"
	                    "    aliases:\n"
	                    "      - p\n"
	                    "    max-queue: 1024\n"
	                    "    queue-timeout: 60\n"
	                    "  both:\n"
	                    "    upstreams:\n"
	                    "      - http://a:1\n"
	                    "    dns: other.svc:9\n"
	                    "    max-queue: 1024\n"
	                    "    queue-timeout: 60\n");
	free(text);
	struct sl_model_config copy;
	sl_model_config_copy(&copy, &cfg.models[0]);
	sl_config_free(&cfg);
	ASSERT_STR_EQ(copy.name, "pods");
	ASSERT_STR_EQ(copy.dns, "llama.svc:8080");
	ASSERT_EQ(copy.aliases.count, 1);
	ASSERT_STR_EQ(copy.aliases.items[0], "p");
	ASSERT(!copy.file);
	sl_model_config_clear(&copy);
	ASSERT(!copy.name);
}

/* Without a models: section: --model-name and --default-model. */
static void test_one_model(void)
{
	struct sl_config cfg;
	char err[512];
	char *argv[] = {"sluice", "--model-name", "mine", "--default-model",
	                "other"};
	char *envp[] = {"SLUICE_MODEL_NAME=env", NULL};
	ASSERT_EQ(sl_config_parse(&cfg, sl_config_sections, 3, argv, envp, err,
	                          sizeof(err)),
	          0);
	ASSERT_STR_EQ(cfg.model_name, "mine");
	ASSERT_EQ(cfg.n_models, 0);
	sl_config_free(&cfg);
	ASSERT_EQ(sl_config_parse(&cfg, sl_config_sections, 1, argv, envp, err,
	                          sizeof(err)),
	          0);
	ASSERT_STR_EQ(cfg.model_name, "env");
	sl_config_free(&cfg);
	ASSERT_EQ(sl_config_parse(&cfg, sl_config_sections, 5, argv, envp, err,
	                          sizeof(err)),
	          SL_EINVAL);
	ASSERT_STR_EQ(err, "--default-model other: no such model (the one "
	                   "model is mine)");
	sl_config_free(&cfg);
}

/* Every bad input, with its exact line (after "PATH:"). */
static void test_errors(void)
{
	static const struct {
		const char *yaml;
		const char *err;
	} cases[] = {
	    {"models:\n  a: 1\n",
	     "2: models.a: expected a mapping (model: FILE.gguf, hf-repo: "
	     "REPO or upstreams: [URL, ...], and its settings)"},
	    {"models:\n  a b:\n    model: x\n",
	     "3: models.a b: a model's name must be 1 to 128 printable "
	     "characters without spaces, quotes, commas or backslashes"},
	    {"models:\n  a:\n    slots: 2\n",
	     "3: models.a: says neither where its model is (model: "
	     "FILE.gguf or hf-repo: REPO) nor where it runs (upstreams: "
	     "[URL] or dns: NAME:PORT)"},
	    {"models:\n  a:\n    model: x\n    slots: 0\n",
	     "4: models.a.slots: expected a whole number from 1 to 256, got "
	     "\"0\""},
	    {"models:\n  a:\n    model: x\n    slots: [1]\n",
	     "4: models.a.slots: expected a single value"},
	    {"models:\n  a:\n    model: x\n    ctx-size: 12x\n",
	     "4: models.a.ctx-size: expected a whole number from 64 to "
	     "16777216, got \"12x\""},
	    {"models:\n  a:\n    model: x\n    replicas: 17\n",
	     "4: models.a.replicas: expected a whole number from 1 to 16, "
	     "got \"17\""},
	    {"models:\n  a:\n    model: \"\"\n",
	     "3: models.a.model: must not be empty"},
	    {"models:\n  a:\n    model: x\n    hf-repo: y\n",
	     "4: models.a.hf-repo: give model or hf-repo, not both"},
	    {"models:\n  a:\n    model: x\n    upstreams: [http://h:1]\n",
	     "4: models.a.upstreams: a model is either managed (model, "
	     "hf-repo) or remote (upstreams, dns), not both"},
	    {"models:\n  a:\n    model: x\n    dns: llama:8080\n",
	     "4: models.a.dns: a model is either managed (model, "
	     "hf-repo) or remote (upstreams, dns), not both"},
	    {"models:\n  a:\n    upstreams: [http://h:1]\n    slots: 2\n",
	     "4: models.a.slots: only a managed model (model: or hf-repo:) "
	     "takes it"},
	    {"models:\n  a:\n    upstreams: [http://h:1, ftp://x]\n",
	     "3: models.a.upstreams[1]: expected an http:// or https:// URL, "
	     "got \"ftp://x\""},
	    {"models:\n  a:\n    upstreams: []\n",
	     "3: models.a.upstreams: the list is empty"},
	    {"models:\n  a:\n    upstreams:\n      b: 1\n",
	     "4: models.a.upstreams: expected a list of URLs"},
	    {"models:\n  a:\n    dns: llama\n",
	     "3: models.a.dns: expected NAME:PORT (a DNS name of at most "
	     "253 characters, a port from 1 to 65535), got \"llama\""},
	    {"models:\n  a:\n    model: x\n    max-queue: 0\n",
	     "4: models.a.max-queue: expected a whole number from 1 to "
	     "1000000, got \"0\""},
	    {"models:\n  a:\n    model: x\n    queue-timeout: soon\n",
	     "4: models.a.queue-timeout: expected a duration from 1ms to "
	     "86400s "
	     "(\"30\", \"30s\", \"500ms\"), got \"soon\""},
	    {"models:\n  a:\n    model: x\n    args:\n      k: v\n",
	     "5: models.a.args: expected a list"},
	    {"models:\n  a:\n    model: x\n    aliases: [b, \"c d\"]\n",
	     "4: models.a.aliases[1]: an alias must be 1 to 128 printable "
	     "characters without spaces, quotes, commas or backslashes"},
	    {"models:\n  a:\n    model: x\n    aliases: [b, b]\n",
	     "4: models.a.aliases[1]: \"b\" is listed twice"},
	    {"models:\n  a:\n    model: x\n    aliases: a\n",
	     "4: models.a.aliases: \"a\" already names a model"},
	    {"models:\n  a:\n    model: x\n    aliases: [b]\n"
	     "  c:\n    model: y\n    aliases: [b]\n",
	     "7: models.c.aliases[0]: \"b\" already names a model"},
	    {"models:\n  a:\n    model: x\n    aliases: [b]\n"
	     "  b:\n    model: y\n",
	     "6: models.b: the name is already another model's alias"},
	    {"models:\n  a:\n    model: x\n    size: 2\n",
	     "4: models.a.size: unknown key (a model takes model, hf-repo, "
	     "slots, ctx-size, args, replicas, aliases, preload, "
	     "idle-timeout, upstreams, dns, max-queue, queue-timeout, slo)"},
	    {"models:\n  a:\n    model: x\n    preload: no\n",
	     "4: models.a.preload: expected true or false, got \"no\""},
	    {"models:\n  a:\n    model: x\n    idle-timeout: 604801\n",
	     "4: models.a.idle-timeout: expected a duration up to a week "
	     "(\"600\", \"600s\"; 0: never), got \"604801\""},
	    {"models:\n  a:\n    upstreams: [http://h:1]\n    preload: false\n",
	     "4: models.a.preload: only a managed model (model: or hf-repo:) "
	     "takes it"},
	    {"models:\n  a:\n    model: x\n    aliases:\n      b: c\n",
	     "5: models.a.aliases: expected a list"},
	    {"models: {}\n",
	     "1: models: expected a mapping of model names to their "
	     "settings"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		struct sl_config cfg;
		char err[512];
		char *path;
		int rc = parse_yaml(&cfg, cases[i].yaml, NULL, NULL, err,
		                    sizeof(err), &path);
		char *want = sl_xasprintf("%s:%s", path, cases[i].err);
		ASSERT_EQ(rc, SL_EINVAL);
		ASSERT_STR_EQ(err, want);
		free(want);
		sl_config_free(&cfg);
		unlink(path);
		free(path);
	}
}

/* The bounds on counts: models, aliases, upstreams. */
static void test_bounds(void)
{
	struct sl_config cfg;
	char err[512];
	char *path;
	char yaml[8192] = "models:\n";
	for (int i = 0; i <= SL_MODELS_MAX; i++)
		snprintf(yaml + strlen(yaml), sizeof(yaml) - strlen(yaml),
		         "  m%d:\n    model: x\n", i);
	ASSERT_EQ(parse_yaml(&cfg, yaml, NULL, NULL, err, sizeof(err), &path),
	          SL_EINVAL);
	char *want = sl_xasprintf("%s:2: models: 33 models; at most 32", path);
	ASSERT_STR_EQ(err, want);
	free(want);
	sl_config_free(&cfg);
	unlink(path);
	free(path);

	snprintf(yaml, sizeof(yaml),
	         "models:\n  a:\n    model: x\n"
	         "    aliases: [");
	for (int i = 0; i <= SL_MODEL_ALIASES_MAX; i++)
		snprintf(yaml + strlen(yaml), sizeof(yaml) - strlen(yaml),
		         "%sb%d", i ? ", " : "", i);
	strcat(yaml, "]\n");
	ASSERT_EQ(parse_yaml(&cfg, yaml, NULL, NULL, err, sizeof(err), &path),
	          SL_EINVAL);
	want =
	    sl_xasprintf("%s:4: models.a.aliases: 17 items; at most 16", path);
	ASSERT_STR_EQ(err, want);
	free(want);
	sl_config_free(&cfg);
	unlink(path);
	free(path);

	snprintf(yaml, sizeof(yaml), "models:\n  a:\n    upstreams: [");
	for (int i = 0; i <= SL_MODEL_UPSTREAMS_MAX; i++)
		snprintf(yaml + strlen(yaml), sizeof(yaml) - strlen(yaml),
		         "%shttp://h:%d", i ? ", " : "", i + 1);
	strcat(yaml, "]\n");
	ASSERT_EQ(parse_yaml(&cfg, yaml, NULL, NULL, err, sizeof(err), &path),
	          SL_EINVAL);
	want = sl_xasprintf("%s:3: models.a.upstreams: 33 items; at most 32",
	                    path);
	ASSERT_STR_EQ(err, want);
	free(want);
	sl_config_free(&cfg);
	unlink(path);
	free(path);
}

/* Checks across options, once every source is read. */
static void test_cross_checks(void)
{
	static const char yaml[] = "models:\n  a:\n    model: x\n";
	static const struct {
		const char *flag, *value, *err; /* err after the path */
	} cases[] = {
	    {"--model", "y.gguf",
	     "--model: not with a models: section in %s (it describes the "
	     "one model sluice serves without one)"},
	    {"--upstream", "http://h:1",
	     "--upstream: not with a models: section in %s (it describes "
	     "the one model sluice serves without one)"},
	    {"--upstream-dns", "llama:8080",
	     "--upstream-dns: not with a models: section in %s (it describes "
	     "the one model sluice serves without one)"},
	    {"--model-name", "n",
	     "--model-name: not with a models: section in %s (it describes "
	     "the one model sluice serves without one)"},
	    {"--default-model", "zz",
	     "--default-model zz: no model or alias of that name in %s"},
	    {"--urgent-reserve", "4",
	     "%s:3: models.a.slots: 4; --urgent-reserve 4 must be less, or "
	     "only urgent requests could run"},
	    {"--urgent-reserve", "6",
	     "%s:3: models.a.slots: 4; --urgent-reserve 6 must be less, or "
	     "only urgent requests could run"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		struct sl_config cfg;
		char err[512];
		char *path;
		int rc = parse_yaml(&cfg, yaml, cases[i].flag, cases[i].value,
		                    err, sizeof(err), &path);
		ASSERT_EQ(rc, SL_EINVAL);
		/* The file's path stands where the case says %s. */
		const char *at = strstr(cases[i].err, "%s");
		char *want = sl_xasprintf("%.*s%s%s", (int)(at - cases[i].err),
		                          cases[i].err, path, at + 2);
		ASSERT_STR_EQ(err, want);
		free(want);
		sl_config_free(&cfg);
		unlink(path);
		free(path);
	}
}

/* A model's own slots count for the urgent reserve, not --slots. */
static void test_reserve_per_model(void)
{
	struct sl_config cfg;
	char err[512];
	ASSERT_EQ(parse_yaml(&cfg,
	                     "models:\n  a:\n    model: x\n    slots: 8\n",
	                     "--urgent-reserve", "5", err, sizeof(err), NULL),
	          0);
	sl_config_free(&cfg);
}

int main(void)
{
	RUN(test_good);
	RUN(test_one_model);
	RUN(test_dns_and_copy);
	RUN(test_errors);
	RUN(test_bounds);
	RUN(test_cross_checks);
	RUN(test_reserve_per_model);
	return 0;
}

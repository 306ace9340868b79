/*
 * test_keys_config.c: the configuration file's keys: section: what it
 * reads, every bad input with its exact error line, and --check-config's
 * print-out.
 */
#include "sluice/config/config.h"

#include "sluice/base/common.h"
#include "sluice/tenants/keys.h"
#include "sluice/sched/sched.h"
#include "sluice/tenants/config_sections.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* SHA-256 of "test", the example. */
#define H_TEST                                                                 \
	"sha256:"                                                              \
	"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
/* SHA-256 of "other". */
#define H_OTHER                                                                \
	"sha256:"                                                              \
	"d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa"

struct parsed {
	struct sl_config cfg;
	int rc;
	char err[512];
	char *path;
};

static void parse_yaml(struct parsed *p, const char *yaml)
{
	char tmpl[] = "/tmp/sluice-test-keys-config-XXXXXX";
	int fd = mkstemp(tmpl);
	ASSERT(fd >= 0);
	ASSERT_EQ(write(fd, yaml, strlen(yaml)), (long long)strlen(yaml));
	close(fd);
	p->path = sl_xstrdup(tmpl);
	char *argv[] = {"sluice", "--config", p->path, NULL};
	p->rc = sl_config_parse(&p->cfg, sl_config_sections, 3, argv, NULL,
	                        p->err, sizeof(p->err));
}

static void done(struct parsed *p)
{
	sl_config_free(&p->cfg);
	unlink(p->path);
	free(p->path);
}

static void test_reads_every_field(void)
{
	struct parsed p;
	parse_yaml(&p, "keys:\n"
	               "  team-a:\n"
	               "    hash: " H_TEST "\n"
	               "    models: [tiny, chat]\n"
	               "    max-priority: normal\n"
	               "    default-priority: batch\n"
	               "    rpm: 600\n"
	               "    tpm: 200000\n"
	               "    max-concurrent: 16\n"
	               "    weight: 2.5\n"
	               "    slo: {ttft: 500ms, tpot: 0.05s}\n"
	               "  batch.jobs:\n"
	               "    hash: " H_OTHER "\n");
	ASSERT_EQ(p.rc, 0);
	ASSERT(p.cfg.keys != NULL);
	ASSERT_EQ(p.cfg.keys->n, 2);
	unsigned char d[SL_KEYS_HASH_LEN];
	sl_keys_digest("test", 4, d);
	const struct sl_key *a = sl_keys_find(p.cfg.keys, d);
	ASSERT(a != NULL);
	ASSERT_STR_EQ(a->name, "team-a");
	ASSERT(!a->any_model);
	ASSERT_EQ(a->n_models, 2);
	ASSERT(sl_keys_allows_model(a, "tiny"));
	ASSERT(sl_keys_allows_model(a, "chat"));
	ASSERT(!sl_keys_allows_model(a, "big"));
	ASSERT(!sl_keys_allows_model(a, "Tiny"));
	ASSERT(a->has_max_priority && a->max_priority == SL_PRIORITY_NORMAL);
	ASSERT(a->has_default_priority &&
	       a->default_priority == SL_PRIORITY_BATCH);
	ASSERT_EQ(a->rpm, 600);
	ASSERT_EQ(a->tpm, 200000);
	ASSERT_EQ(a->max_concurrent, 16);
	ASSERT(a->weight == 2.5);
	ASSERT_EQ(a->slo.ttft_ms, 500);
	ASSERT_EQ(a->slo.tpot_ms, 50);
	sl_keys_digest("other", 5, d);
	const struct sl_key *b = sl_keys_find(p.cfg.keys, d);
	ASSERT(b != NULL);
	ASSERT_STR_EQ(b->name, "batch.jobs");
	ASSERT(b->any_model && sl_keys_allows_model(b, "anything"));
	ASSERT(!b->has_max_priority && !b->has_default_priority);
	ASSERT_EQ(b->rpm + b->tpm + b->max_concurrent, 0);
	ASSERT(b->weight == 1);
	ASSERT_EQ(b->slo.ttft_ms + b->slo.tpot_ms, 0);
	sl_keys_digest("tes", 3, d);
	ASSERT(sl_keys_find(p.cfg.keys, d) == NULL);
	done(&p);
}

/* Every bad input: one line naming FILE:LINE: keys.NAME.FIELD. */
static void test_bad_input(void)
{
	static const struct {
		const char *yaml;
		const char *err; /* after "PATH:" */
	} cases[] = {
	    {"keys:\n  a:\n    rpm: 5\n",
	     "3: keys.a: no hash: (sluice --hash-key reads the secret and "
	     "prints the line)"},
	    {"keys:\n  a:\n    hash: sha256:abc\n",
	     "3: keys.a.hash: expected sha256: and 64 hex digits (sluice "
	     "--hash-key prints the line to paste), got \"sha256:abc\""},
	    {"keys:\n  a:\n    hash: "
	     "md5:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00"
	     "a08\n",
	     "3: keys.a.hash: expected sha256: and 64 hex digits (sluice "
	     "--hash-key prints the line to paste), got "
	     "\"md5:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f"
	     "00a08\""},
	    {"keys:\n  a:\n    hash: "
	     "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0"
	     "f00a0g\n",
	     "3: keys.a.hash: expected sha256: and 64 hex digits (sluice "
	     "--hash-key prints the line to paste), got "
	     "\"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15"
	     "b0f00a0g\""},
	    {"keys:\n  a:\n    hash: [x]\n",
	     "3: keys.a.hash: takes one value, not a list"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    rpm: 0\n",
	     "4: keys.a.rpm: expected a whole number from 1 to 1000000000 "
	     "(leave it out for no limit), got \"0\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    tpm: lots\n",
	     "4: keys.a.tpm: expected a whole number from 1 to 1000000000 "
	     "(leave it out for no limit), got \"lots\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    tpm: 1000000001\n",
	     "4: keys.a.tpm: expected a whole number from 1 to 1000000000 "
	     "(leave it out for no limit), got \"1000000001\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    max-concurrent: -1\n",
	     "4: keys.a.max-concurrent: expected a whole number from 1 to "
	     "1000000 (leave it out for no limit), got \"-1\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    max-priority: high\n",
	     "4: keys.a.max-priority: expected batch, normal, urgent or a "
	     "number from 0 to 100, got \"high\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    default-priority: 101\n",
	     "4: keys.a.default-priority: expected batch, normal, urgent or a "
	     "number from 0 to 100, got \"101\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    max-priority: batch\n"
	     "    default-priority: normal\n",
	     "5: keys.a.default-priority: normal is above max-priority batch: "
	     "it could never apply"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    models: tiny\n",
	     "4: keys.a.models: expected a list of model names, such as [tiny, "
	     "chat]"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    models: []\n",
	     "4: keys.a.models: an empty list would allow no model: leave "
	     "models out to allow every model"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    models: [tiny, \"\"]\n",
	     "4: keys.a.models[1]: expected a model name of 1 to 127 bytes"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    models: [tiny, tiny]\n",
	     "4: keys.a.models[1]: model tiny is listed twice"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    rate: 5\n",
	     "4: keys.a.rate: unknown field (a key takes hash, models, "
	     "max-priority, default-priority, rpm, tpm, max-concurrent, "
	     "weight, slo)"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    slo: 500ms\n",
	     "4: keys.a.slo: expected a mapping: ttft: DURATION, tpot: "
	     "DURATION"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    slo: {ttft: 0}\n",
	     "4: keys.a.slo.ttft: expected a duration from 1ms to 3600s "
	     "(\"500ms\", \"2s\", \"2\"), got \"0\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    slo: {tpot: fast}\n",
	     "4: keys.a.slo.tpot: expected a duration from 1ms to 3600s "
	     "(\"500ms\", \"2s\", \"2\"), got \"fast\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    slo: {e2e: 5s}\n",
	     "4: keys.a.slo.e2e: unknown field (slo: takes ttft and tpot)"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    weight: 0\n",
	     "4: keys.a.weight: expected a number from 0.01 to 100 (a share: "
	     "2 is twice the default 1), got \"0\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    weight: urgent\n",
	     "4: keys.a.weight: expected a number from 0.01 to 100 (a share: "
	     "2 is twice the default 1), got \"urgent\""},
	    {"keys:\n  a:\n    hash: " H_TEST "\n    weight: 1e3\n",
	     "4: keys.a.weight: expected a number from 0.01 to 100 (a share: "
	     "2 is twice the default 1), got \"1e3\""},
	    {"keys:\n  a: " H_TEST "\n",
	     "2: keys.a: expected a mapping of the key's settings (hash: "
	     "sha256:HEX, ...)"},
	    {"keys:\n  \"team a\":\n    hash: " H_TEST "\n",
	     "3: keys.team a: a key's name is 1 to 64 letters, digits, '-', "
	     "'_' or '.' (it labels metrics and logs)"},
	    {"keys:\n  a:\n    hash: " H_TEST "\n  b:\n    hash: " H_TEST "\n",
	     "5: keys.b.hash: the same hash as key a: one secret, one key"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		struct parsed p;
		parse_yaml(&p, cases[i].yaml);
		char *want = sl_xasprintf("%s:%s", p.path, cases[i].err);
		if (p.rc != SL_EINVAL || strcmp(p.err, want) != 0)
			TEST_FAIL("case %zu: rc %d, error\n  \"%s\", not\n  "
			          "\"%s\"",
			          i, p.rc, p.err, want);
		ASSERT(p.cfg.keys == NULL);
		free(want);
		done(&p);
	}
}

/* The bounds: a name's length, a list's length. */
static void test_bounds(void)
{
	char name[SL_KEYS_NAME_MAX + 2];
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	char *yaml = sl_xasprintf("keys:\n  %s:\n    hash: " H_TEST "\n", name);
	struct parsed p;
	parse_yaml(&p, yaml);
	/* (The path in the line may be cut; the cause is whole.) */
	ASSERT_EQ(p.rc, SL_EINVAL);
	ASSERT_CONTAINS(p.err, ":3: keys.nnnn");
	ASSERT_CONTAINS(p.err, ": a key's name is 1 to 64 letters, digits, "
	                       "'-', '_' or '.' (it labels metrics and logs)");
	free(yaml);
	done(&p);
	/* 64 is fine. */
	name[SL_KEYS_NAME_MAX] = '\0';
	yaml = sl_xasprintf("keys:\n  %s:\n    hash: " H_TEST "\n", name);
	parse_yaml(&p, yaml);
	ASSERT_EQ(p.rc, 0);
	free(yaml);
	done(&p);

	char *list = NULL;
	size_t list_len = 0;
	FILE *f = open_memstream(&list, &list_len);
	fputs("keys:\n  a:\n    hash: " H_TEST "\n    models: [m0", f);
	for (unsigned i = 1; i <= SL_KEYS_MODELS_MAX; i++)
		fprintf(f, ", m%u", i);
	fputs("]\n", f);
	fclose(f);
	parse_yaml(&p, list);
	char *want =
	    sl_xasprintf("%s:4: keys.a.models: 257 models, over the 256 "
	                 "allowed",
	                 p.path);
	ASSERT_STR_EQ(p.err, want);
	free(want);
	free(list);
	done(&p);

	f = open_memstream(&list, &list_len);
	fputs("keys:\n", f);
	for (unsigned i = 0; i <= SL_KEYS_MAX; i++)
		fprintf(f, "  k%u:\n    hash: " H_TEST "\n", i);
	fclose(f);
	parse_yaml(&p, list);
	want = sl_xasprintf("%s:2: keys: 1001 keys, over the 1000 allowed",
	                    p.path);
	ASSERT_STR_EQ(p.err, want);
	free(want);
	free(list);
	done(&p);
}

/* --check-config writes the section back: by name, as given. */
static void test_print(void)
{
	struct parsed p;
	parse_yaml(&p, "keys:\n"
	               "  zed:\n"
	               "    hash: " H_OTHER "\n"
	               "    tpm: 10\n"
	               "  alpha:\n"
	               "    hash: " H_TEST "\n"
	               "    models: [tiny, \"a b\"]\n"
	               "    max-priority: 1.5\n"
	               "    default-priority: batch\n"
	               "    rpm: 3\n"
	               "    max-concurrent: 2\n"
	               "    weight: 0.50\n"
	               "    slo:\n"
	               "      ttft: 2\n");
	ASSERT_EQ(p.rc, 0);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	sl_keys_config_print(f, &p.cfg);
	fclose(f);
	ASSERT_STR_EQ(text, "keys:\n"
	                    "  alpha:\n"
	                    "    hash: " H_TEST "\n"
	                    "    models: [tiny, \"a b\"]\n"
	                    "    max-priority: 1.5\n"
	                    "    default-priority: batch\n"
	                    "    rpm: 3\n"
	                    "    max-concurrent: 2\n"
	                    "    weight: 0.50\n"
	                    "    slo: {ttft: 2}\n"
	                    "  zed:\n"
	                    "    hash: " H_OTHER "\n"
	                    "    tpm: 10\n");
	free(text);
	done(&p);
}

/* --hash-key: one trailing newline dropped; bad secrets refused. */
static void test_hash_key(void)
{
	static const struct {
		const char *in, *out, *err;
	} cases[] = {
	    {"test", "hash: " H_TEST "\n", NULL},
	    {"test\n", "hash: " H_TEST "\n", NULL},
	    {"test\r\n", "hash: " H_TEST "\n", NULL},
	    {"test\n\n", "",
	     "--hash-key: the secret holds a space or a control byte, which a "
	     "client cannot send in a header"},
	    {"", "",
	     "--hash-key: no secret on standard input (pipe it in: printf %s "
	     "SECRET | sluice --hash-key)"},
	    {"\n", "",
	     "--hash-key: no secret on standard input (pipe it in: printf %s "
	     "SECRET | sluice --hash-key)"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		char path[] = "/tmp/sluice-test-hash-XXXXXX";
		int fd = mkstemp(path);
		ASSERT(fd >= 0);
		ASSERT_EQ(write(fd, cases[i].in, strlen(cases[i].in)),
		          (long long)strlen(cases[i].in));
		close(fd);
		FILE *in = fopen(path, "r");
		char *text = NULL;
		size_t len = 0;
		FILE *out = open_memstream(&text, &len);
		char err[256];
		int rc = sl_keys_hash_stdin(in, out, err, sizeof(err));
		fclose(out);
		fclose(in);
		unlink(path);
		ASSERT_STR_EQ(text, cases[i].out);
		if (cases[i].err) {
			ASSERT_EQ(rc, SL_EINVAL);
			ASSERT_STR_EQ(err, cases[i].err);
		} else {
			ASSERT_EQ(rc, 0);
		}
		free(text);
	}
	/* Over SL_API_KEY_MAX bytes. */
	char big[SL_API_KEY_MAX + 2];
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	char path[] = "/tmp/sluice-test-hash-XXXXXX";
	int fd = mkstemp(path);
	ASSERT(fd >= 0);
	ASSERT_EQ(write(fd, big, strlen(big)), (long long)strlen(big));
	close(fd);
	FILE *in = fopen(path, "r");
	char err[256];
	ASSERT_EQ(sl_keys_hash_stdin(in, stdout, err, sizeof(err)), SL_EINVAL);
	ASSERT_STR_EQ(err, "--hash-key: a secret over 256 bytes");
	fclose(in);
	unlink(path);
}

int main(void)
{
	RUN(test_reads_every_field);
	RUN(test_bad_input);
	RUN(test_bounds);
	RUN(test_print);
	RUN(test_hash_key);
	return 0;
}

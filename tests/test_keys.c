/*
 * test_keys.c: the tenant runtime without sockets: lookup by digest, token
 * buckets and their headers, admission (models, priority, rpm, tpm,
 * concurrency), usage, and a reload keeping state by name. Time is passed
 * in.
 */
#include "sluice/tenants/keys.h"

#include "sluice/base/common.h"
#include "sluice/base/metrics.h"
#include "sluice/sched/sched.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

/* A key table as keys_config.c builds one: sorted by digest. */
static int by_hash(const void *a, const void *b)
{
	return memcmp(((const struct sl_key *)a)->hash,
	              ((const struct sl_key *)b)->hash, SL_KEYS_HASH_LEN);
}

struct spec {
	const char *name, *secret;
	unsigned rpm, tpm, max_concurrent;
	const char *model; /* one allowed model, or NULL for all */
	double max_priority, default_priority; /* < 0: none */
};

static struct sl_keys *table(const struct spec *specs, unsigned n)
{
	struct sl_keys *t = sl_xcalloc(1, sizeof(*t));
	t->v = sl_xcalloc(n, sizeof(*t->v));
	t->n = n;
	for (unsigned i = 0; i < n; i++) {
		struct sl_key *k = &t->v[i];
		k->name = sl_xstrdup(specs[i].name);
		k->hash_text = sl_xstrdup("sha256:...");
		sl_keys_digest(specs[i].secret, strlen(specs[i].secret),
		               k->hash);
		k->rpm = specs[i].rpm;
		k->tpm = specs[i].tpm;
		k->max_concurrent = specs[i].max_concurrent;
		k->any_model = specs[i].model == NULL;
		if (specs[i].model) {
			k->models = sl_xcalloc(1, sizeof(*k->models));
			k->models[0] = sl_xstrdup(specs[i].model);
			k->n_models = 1;
		}
		k->has_max_priority = specs[i].max_priority >= 0;
		k->max_priority = specs[i].max_priority;
		k->has_default_priority = specs[i].default_priority >= 0;
		k->default_priority = specs[i].default_priority;
	}
	qsort(t->v, n, sizeof(*t->v), by_hash);
	return t;
}

static const struct sl_key *lookup(struct sl_tenants *t, const char *secret)
{
	return sl_tenants_lookup(t, secret, strlen(secret));
}

static void test_digest_and_lookup(void)
{
	unsigned char d[SL_KEYS_HASH_LEN];
	sl_keys_digest("test", 4, d);
	/* The example: SHA-256 of "test". */
	static const unsigned char want[4] = {0x9f, 0x86, 0xd0, 0x81};
	ASSERT(memcmp(d, want, 4) == 0);
	ASSERT_EQ(d[31], 0x08);

	struct sl_tenants t = {0};
	ASSERT(!sl_tenants_required(&t));
	ASSERT(lookup(&t, "k1") == NULL);
	/* Enough keys that the binary search takes several steps. */
	struct spec specs[40];
	char names[40][16], secrets[40][16];
	for (unsigned i = 0; i < 40; i++) {
		snprintf(names[i], sizeof(names[i]), "n%u", i);
		snprintf(secrets[i], sizeof(secrets[i]), "k%u", i);
		specs[i] =
		    (struct spec){names[i], secrets[i], 0, 0, 0, NULL, -1, -1};
	}
	sl_tenants_install(&t, table(specs, 40), false);
	ASSERT(sl_tenants_required(&t));
	for (unsigned i = 0; i < 40; i++) {
		const struct sl_key *k = lookup(&t, secrets[i]);
		ASSERT(k != NULL);
		ASSERT_STR_EQ(k->name, names[i]);
		ASSERT_STR_EQ(k->tenant->name, names[i]);
	}
	ASSERT(lookup(&t, "k40") == NULL);
	ASSERT(lookup(&t, "k") == NULL);
	ASSERT(lookup(&t, "k1 ") == NULL);
	ASSERT(lookup(&t, "") == NULL);
	sl_tenants_free(&t);
}

static void test_bucket(void)
{
	struct sl_bucket b = {0};
	/* Starts full. */
	ASSERT(sl_bucket_take(&b, 10, 1, 1000));
	ASSERT_EQ(sl_bucket_remaining(&b), 9);
	for (int i = 0; i < 9; i++)
		ASSERT(sl_bucket_take(&b, 10, 1, 1000));
	ASSERT(!sl_bucket_take(&b, 10, 1, 1000));
	ASSERT_EQ(sl_bucket_remaining(&b), 0);
	/* 10 a minute: one every 6 s, continuously. */
	ASSERT_EQ(sl_bucket_wait_ms(&b, 10, 1), 6000);
	ASSERT_EQ(sl_bucket_wait_ms(&b, 10, 10), 60000);
	ASSERT(!sl_bucket_take(&b, 10, 1, 6999));
	ASSERT_EQ(sl_bucket_wait_ms(&b, 10, 1), 1);
	ASSERT(sl_bucket_take(&b, 10, 1, 7000));
	/* Never above the capacity, however long it rests. */
	sl_bucket_refill(&b, 10, 1000000);
	ASSERT_EQ(sl_bucket_remaining(&b), 10);
	/* A charge may take it below zero; it then waits for the debt. */
	sl_bucket_charge(&b, 10, 25, 1000000);
	ASSERT_EQ(sl_bucket_remaining(&b), 0);
	ASSERT(b.level == -15);
	ASSERT_EQ(sl_bucket_wait_ms(&b, 10, 1), 96000);
	ASSERT(!sl_bucket_take(&b, 10, 1, 1000000 + 95999));
	ASSERT(sl_bucket_take(&b, 10, 1, 1000000 + 96000));
	/* A clock that steps back adds nothing. */
	double level = b.level;
	sl_bucket_refill(&b, 10, 5);
	ASSERT(b.level == level);
}

static void test_format_reset(void)
{
	static const struct {
		uint64_t ms;
		const char *text;
	} cases[] = {
	    {0, "0ms"},          {250, "250ms"},      {999, "999ms"},
	    {1000, "1s"},        {1001, "2s"},        {6000, "6s"},
	    {59999, "1m0s"},     {60000, "1m0s"},     {61000, "1m1s"},
	    {3600000, "1h0m0s"}, {3723000, "1h2m3s"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		char buf[32];
		sl_keys_format_reset(cases[i].ms, buf, sizeof(buf));
		ASSERT_STR_EQ(buf, cases[i].text);
	}
}

static enum sl_admit admit(struct sl_tenants *t, const char *secret,
                           struct sl_admission *a, uint64_t now)
{
	const struct sl_key *k = lookup(t, secret);
	ASSERT(k != NULL);
	return sl_tenant_admit(k, a, now);
}

static struct sl_admission limited(void)
{
	return (struct sl_admission){.limited = true,
	                             .priority = SL_PRIORITY_NORMAL};
}

/* A request that held no place and reserved nothing. */
static const struct sl_admission unadmitted;

/* The end of the request admitted as `a`, as app.c reports it. */
static void end(struct sl_tenant *x, const struct sl_admission *a, bool used,
                const char *model, uint64_t prompt, uint64_t completion,
                uint64_t now)
{
	struct sl_ending e = {.counted = a->counted,
	                      .used = used,
	                      .model = model,
	                      .prompt_tokens = prompt,
	                      .completion_tokens = completion,
	                      .reserved = a->reserved};
	sl_tenant_end(x, &e, now);
}

static void test_requests_per_minute(void)
{
	struct sl_tenants t = {0};
	struct spec s[] = {{"ten", "k10", 10, 0, 0, NULL, -1, -1}};
	sl_tenants_install(&t, table(s, 1), false);
	uint64_t now = 5000;
	for (int i = 0; i < 10; i++) {
		struct sl_admission a = limited();
		ASSERT_EQ(admit(&t, "k10", &a, now), SL_ADMIT_OK);
		ASSERT(a.counted);
		char want[200];
		snprintf(want, sizeof(want),
		         "x-ratelimit-limit-requests: 10\r\n"
		         "x-ratelimit-remaining-requests: %d\r\n"
		         "x-ratelimit-reset-requests: %ds\r\n",
		         9 - i, 6 * (i + 1));
		if (i == 9)
			snprintf(want, sizeof(want),
			         "x-ratelimit-limit-requests: 10\r\n"
			         "x-ratelimit-remaining-requests: 0\r\n"
			         "x-ratelimit-reset-requests: 1m0s\r\n");
		ASSERT_STR_EQ(a.headers, want);
		end(lookup(&t, "k10")->tenant, &a, true, "m", 1, 1, now);
	}
	struct sl_admission a = limited();
	ASSERT_EQ(admit(&t, "k10", &a, now), SL_ADMIT_REQUESTS);
	ASSERT(!a.counted);
	ASSERT_STR_EQ(a.headers, "x-ratelimit-limit-requests: 10\r\n"
	                         "x-ratelimit-remaining-requests: 0\r\n"
	                         "x-ratelimit-reset-requests: 1m0s\r\n"
	                         "Retry-After: 6\r\nretry-after-ms: 6000\r\n");
	ASSERT_STR_EQ(a.message, "Rate limit reached for key ten on requests "
	                         "per min (RPM): Limit 10. Please try again "
	                         "in 6.0s.");
	/* An unlimited request (a tokenize) passes and takes nothing. */
	struct sl_admission cheap = {.priority = SL_PRIORITY_NORMAL};
	ASSERT_EQ(admit(&t, "k10", &cheap, now), SL_ADMIT_OK);
	ASSERT(!cheap.counted);
	/* 6 s later exactly one more. */
	a = limited();
	ASSERT_EQ(admit(&t, "k10", &a, now + 6000), SL_ADMIT_OK);
	a = limited();
	ASSERT_EQ(admit(&t, "k10", &a, now + 6000), SL_ADMIT_REQUESTS);
	sl_tenants_free(&t);
}

static void test_tokens_per_minute(void)
{
	struct sl_tenants t = {0};
	struct spec s[] = {{"tok", "kt", 0, 100, 0, NULL, -1, -1}};
	sl_tenants_install(&t, table(s, 1), false);
	struct sl_tenant *x = lookup(&t, "kt")->tenant;
	uint64_t now = 0;
	/* 40 tokens a request: the third crosses 100, the fourth waits. */
	for (int i = 0; i < 3; i++) {
		struct sl_admission a = limited();
		ASSERT_EQ(admit(&t, "kt", &a, now), SL_ADMIT_OK);
		end(x, &a, true, "tiny", 30, 10, now);
	}
	struct sl_admission a = limited();
	ASSERT_EQ(admit(&t, "kt", &a, now), SL_ADMIT_TOKENS);
	/* -20 now: 21 tokens to one whole token, at 100 a minute. */
	ASSERT_STR_EQ(a.headers,
	              "x-ratelimit-limit-tokens: 100\r\n"
	              "x-ratelimit-remaining-tokens: 0\r\n"
	              "x-ratelimit-reset-tokens: 1m12s\r\n"
	              "Retry-After: 13\r\nretry-after-ms: 12600\r\n");
	a = limited();
	ASSERT_EQ(admit(&t, "kt", &a, now + 12599), SL_ADMIT_TOKENS);
	a = limited();
	ASSERT_EQ(admit(&t, "kt", &a, now + 12600), SL_ADMIT_OK);
	/* A request that reached no upstream charges nothing. */
	end(x, &a, false, "tiny", 500, 500, now + 12600);
	a = limited();
	ASSERT_EQ(admit(&t, "kt", &a, now + 12600), SL_ADMIT_OK);
	sl_tenants_free(&t);
}

/*
 * Issue 28: a tpm is checked at admission against what a request may
 * cost, its max_tokens and its prompt's estimate, so concurrent requests
 * cannot pass it together; each end puts back what it did not use.
 */
static void test_tokens_reserved_at_admission(void)
{
	struct sl_tenants t = {0};
	struct spec s[] = {{"tok", "kt", 0, 500, 0, NULL, -1, -1}};
	sl_tenants_install(&t, table(s, 1), false);
	struct sl_tenant *x = lookup(&t, "kt")->tenant;
	/* 200 to generate and 40 bytes of body (10 tokens): 210 each. */
	struct sl_admission a[3];
	for (int i = 0; i < 3; i++) {
		a[i] = limited();
		a[i].max_tokens = 200;
		a[i].body_bytes = 40;
	}
	ASSERT_EQ(admit(&t, "kt", &a[0], 0), SL_ADMIT_OK);
	ASSERT(a[0].reserved == 210);
	ASSERT_EQ(admit(&t, "kt", &a[1], 0), SL_ADMIT_OK);
	ASSERT_CONTAINS(a[1].headers, "x-ratelimit-remaining-tokens: 80\r\n");
	/* 80 left: the third waits for 130 more, at 500 a minute. */
	ASSERT_EQ(admit(&t, "kt", &a[2], 0), SL_ADMIT_TOKENS);
	ASSERT(a[2].reserved == 0 && !a[2].counted);
	ASSERT_CONTAINS(a[2].headers, "Retry-After: 16\r\n"
	                              "retry-after-ms: 15600\r\n");
	ASSERT_STR_EQ(a[2].message,
	              "Rate limit reached for key tok on tokens per min (TPM): "
	              "Limit 500, Used 420, Requested 210. Please try again "
	              "in 15.6s.");
	/* The first used all it reserved; the second stopped at 20. */
	end(x, &a[0], true, "tiny", 10, 200, 0);
	ASSERT(x->tokens.level == 80);
	end(x, &a[1], true, "tiny", 8, 12, 0);
	ASSERT(x->tokens.level == 270);
	a[2] = limited();
	a[2].max_tokens = 200;
	a[2].body_bytes = 40;
	ASSERT_EQ(admit(&t, "kt", &a[2], 0), SL_ADMIT_OK);
	/* Sent nowhere: all of it back, and never past the capacity. */
	end(x, &a[2], false, "tiny", 0, 0, 0);
	ASSERT(x->tokens.level == 270);
	sl_bucket_refill(&x->tokens, 500, 60000);
	ASSERT(x->tokens.level == 500);

	/* Asking more than the whole minute: refused for good. */
	struct sl_admission big = limited();
	big.max_tokens = 501;
	ASSERT_EQ(admit(&t, "kt", &big, 60000), SL_ADMIT_TOO_LARGE);
	ASSERT(!big.counted && big.reserved == 0);
	ASSERT(strstr(big.headers, "Retry-After") == NULL);
	ASSERT_STR_EQ(big.message,
	              "Request too large for key tok on tokens per min (TPM): "
	              "Limit 500, Requested 501. Ask for fewer tokens "
	              "(max_tokens).");
	/* A prompt that makes it pass the minute reserves the minute. */
	big = limited();
	big.max_tokens = 500;
	big.body_bytes = 4000;
	ASSERT_EQ(admit(&t, "kt", &big, 60000), SL_ADMIT_OK);
	ASSERT(big.reserved == 500);
	end(x, &big, true, "tiny", 900, 500, 60000);
	ASSERT(x->tokens.level == -900);

	/* Unbounded: all the bucket holds, so one at a time. */
	/* Three minutes pay the debt back and fill it again. */
	sl_bucket_refill(&x->tokens, 500, 240000);
	ASSERT(x->tokens.level == 500);
	struct sl_admission open = limited(), next = limited();
	open.max_tokens = -1;
	next.max_tokens = 1;
	ASSERT_EQ(admit(&t, "kt", &open, 240000), SL_ADMIT_OK);
	ASSERT(open.reserved == 500);
	ASSERT_EQ(admit(&t, "kt", &next, 240000), SL_ADMIT_TOKENS);
	end(x, &open, true, "tiny", 5, 25, 240000);
	ASSERT(x->tokens.level == 470);
	next = limited();
	next.max_tokens = 1;
	ASSERT_EQ(admit(&t, "kt", &next, 240000), SL_ADMIT_OK);
	/* A plain answer left running keeps its reservation taken. */
	struct sl_ending left = {.counted = next.counted,
	                         .used = true,
	                         .ran_on = true,
	                         .reserved = next.reserved};
	sl_tenant_end(x, &left, 240000);
	ASSERT(x->tokens.level == 469);
	ASSERT_EQ(x->in_flight, 0);
	sl_tenants_free(&t);
}

/*
 * Issue 41: a request with several outputs (a prompt array, n) reserves
 * its bound for each, and one whose outputs' bound alone passes the tpm
 * is too large, as a single output past it is.
 */
static void test_every_output_reserved(void)
{
	struct sl_tenants t = {0};
	struct spec s[] = {{"tok", "kt", 0, 500, 0, NULL, -1, -1}};
	sl_tenants_install(&t, table(s, 1), false);
	struct sl_tenant *x = lookup(&t, "kt")->tenant;
	/* Three outputs of 100 and 40 bytes of body: 310. */
	struct sl_admission a = limited();
	a.max_tokens = 100;
	a.outputs = 3;
	a.body_bytes = 40;
	ASSERT_EQ(admit(&t, "kt", &a, 0), SL_ADMIT_OK);
	ASSERT(a.reserved == 310);
	/* 190 left: a second such does not fit beside it. */
	struct sl_admission b = a;
	ASSERT_EQ(admit(&t, "kt", &b, 0), SL_ADMIT_TOKENS);
	ASSERT_CONTAINS(b.message, "Used 310, Requested 310.");
	/* What every output generated is charged: 300 and the prompt. */
	end(x, &a, true, "tiny", 12, 300, 0);
	ASSERT(x->tokens.level == 188);
	/* Outputs of 0 tokens (n_predict 0) generate one each. */
	sl_bucket_refill(&x->tokens, 500, 60000);
	a = limited();
	a.max_tokens = 0;
	a.outputs = 4;
	ASSERT_EQ(admit(&t, "kt", &a, 60000), SL_ADMIT_OK);
	ASSERT(a.reserved == 4);
	end(x, &a, true, "tiny", 4, 4, 60000);

	/* Past the minute for its outputs: too large, for good. */
	struct sl_admission big = limited();
	big.max_tokens = 100;
	big.outputs = 6;
	ASSERT_EQ(admit(&t, "kt", &big, 60000), SL_ADMIT_TOO_LARGE);
	ASSERT(!big.counted && big.reserved == 0);
	ASSERT(strstr(big.headers, "Retry-After") == NULL);
	ASSERT_STR_EQ(big.message,
	              "Request too large for key tok on tokens per min (TPM): "
	              "Limit 500, Requested 600 (6 outputs of 100). Ask for "
	              "fewer tokens (max_tokens) or outputs (n, prompts).");
	big = limited();
	big.max_tokens = 0;
	big.outputs = 501;
	ASSERT_EQ(admit(&t, "kt", &big, 60000), SL_ADMIT_TOO_LARGE);
	ASSERT_CONTAINS(big.message, "Requested 501 (501 outputs of 1).");
	/* At the widest, the message is whole. */
	big = limited();
	big.max_tokens = INT64_C(4294967295);
	big.outputs = UINT32_C(1) << 30;
	ASSERT_EQ(admit(&t, "kt", &big, 60000), SL_ADMIT_TOO_LARGE);
	ASSERT_CONTAINS(big.message, "Requested 4611686017353646080 "
	                             "(1073741824 outputs of 4294967295). "
	                             "Ask for fewer tokens (max_tokens) or "
	                             "outputs (n, prompts).");
	/* Unbounded: all the bucket holds (it used 8 of it), as one. */
	ASSERT(x->tokens.level == 492);
	struct sl_admission open = limited();
	open.max_tokens = -1;
	open.outputs = 8;
	ASSERT_EQ(admit(&t, "kt", &open, 60000), SL_ADMIT_OK);
	ASSERT(open.reserved == 492);
	end(x, &open, true, "tiny", 8, 0, 60000);
	sl_tenants_free(&t);
}

static void test_concurrency(void)
{
	struct sl_tenants t = {0};
	struct spec s[] = {{"two", "k2", 100, 0, 2, NULL, -1, -1}};
	sl_tenants_install(&t, table(s, 1), false);
	struct sl_tenant *x = lookup(&t, "k2")->tenant;
	struct sl_admission a1 = limited(), a2 = limited(), a3 = limited();
	ASSERT_EQ(admit(&t, "k2", &a1, 0), SL_ADMIT_OK);
	ASSERT_EQ(admit(&t, "k2", &a2, 0), SL_ADMIT_OK);
	ASSERT_EQ(x->in_flight, 2);
	ASSERT_EQ(admit(&t, "k2", &a3, 0), SL_ADMIT_CONCURRENCY);
	ASSERT(!a3.counted);
	ASSERT_CONTAINS(a3.headers, "x-ratelimit-remaining-requests: 98\r\n");
	ASSERT_CONTAINS(a3.headers, "Retry-After: 1\r\n");
	ASSERT_STR_EQ(a3.message, "Rate limit reached for key two on "
	                          "concurrent requests: Limit 2. Please try "
	                          "again when one has ended.");
	end(x, &a1, true, NULL, 0, 0, 0);
	ASSERT_EQ(x->in_flight, 1);
	a3 = limited();
	ASSERT_EQ(admit(&t, "k2", &a3, 0), SL_ADMIT_OK);
	end(x, &a2, true, NULL, 0, 0, 0);
	end(x, &a3, true, NULL, 0, 0, 0);
	ASSERT_EQ(x->in_flight, 0);
	sl_tenants_free(&t);
}

static void test_models_and_priority(void)
{
	struct sl_tenants t = {0};
	struct spec s[] = {
	    {"batchy", "kb", 0, 0, 0, "tiny", SL_PRIORITY_BATCH, -1},
	    {"lazy", "kl", 0, 0, 0, NULL, SL_PRIORITY_URGENT,
	     SL_PRIORITY_BATCH},
	};
	sl_tenants_install(&t, table(s, 2), false);
	struct sl_admission a = limited();
	a.model = "chat";
	ASSERT_EQ(admit(&t, "kb", &a, 0), SL_ADMIT_MODEL);
	ASSERT(!a.counted);
	a = limited();
	a.model = "tiny";
	a.priority = SL_PRIORITY_URGENT;
	a.priority_given = true;
	ASSERT_EQ(admit(&t, "kb", &a, 0), SL_ADMIT_OK);
	ASSERT(a.priority == SL_PRIORITY_BATCH); /* clamped */
	ASSERT_STR_EQ(a.headers, "");            /* no rpm, no tpm */
	a = limited();                           /* no model named: allowed */
	ASSERT_EQ(admit(&t, "kb", &a, 0), SL_ADMIT_OK);
	/* The default applies only when none was asked. */
	a = limited();
	ASSERT_EQ(admit(&t, "kl", &a, 0), SL_ADMIT_OK);
	ASSERT(a.priority == SL_PRIORITY_BATCH);
	a = limited();
	a.priority = SL_PRIORITY_URGENT;
	a.priority_given = true;
	ASSERT_EQ(admit(&t, "kl", &a, 0), SL_ADMIT_OK);
	ASSERT(a.priority == SL_PRIORITY_URGENT);
	sl_tenants_free(&t);
}

static void test_usage_and_metrics(void)
{
	struct sl_tenants t = {0};
	struct spec s[] = {{"team-a", "ka", 0, 0, 0, NULL, -1, -1}};
	sl_tenants_install(&t, table(s, 1), false);
	struct sl_tenant *x = lookup(&t, "ka")->tenant;
	end(x, &unadmitted, true, "tiny", 10, 4, 0);
	end(x, &unadmitted, true, "tiny", 11, 5, 0);
	end(x, &unadmitted, true, "a\"b", 1, 2, 0);
	end(x, &unadmitted, false, "tiny", 100, 100, 0); /* not sent */
	struct sl_text text = {0};
	sl_tenants_write_metrics(&t, &text);
	ASSERT_CONTAINS(text.data, "sluice_key_requests_total{key=\"team-a\","
	                           "model=\"tiny\"} 2\n"
	                           "sluice_key_requests_total{key=\"team-a\","
	                           "model=\"a\\\"b\"} 1\n");
	ASSERT_CONTAINS(text.data, "sluice_key_prompt_tokens_total{key=\"team-"
	                           "a\",model=\"tiny\"} 21\n");
	ASSERT_CONTAINS(text.data, "sluice_key_completion_tokens_total{key=\""
	                           "team-a\",model=\"tiny\"} 9\n");
	ASSERT_CONTAINS(text.data,
	                "# TYPE sluice_key_completion_tokens_total counter\n");
	sl_text_free(&text);
	json_t *doc = sl_tenants_usage_json(&t);
	char *j = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	ASSERT_STR_EQ(j, "{\"keys\":{\"team-a\":{\"completion_tokens\":11,"
	                 "\"in_flight\":0,\"models\":{\"a\\\"b\":{"
	                 "\"completion_tokens\":2,\"prompt_tokens\":1,"
	                 "\"requests\":1},\"tiny\":{\"completion_tokens\":9,"
	                 "\"prompt_tokens\":21,\"requests\":2}},"
	                 "\"prompt_tokens\":22,\"requests\":3,\"revoked\":"
	                 "false}},\"object\":\"usage\"}");
	free(j);
	json_decref(doc);
	/* Past SL_KEYS_USAGE_MODELS_MAX names, the rest count as "other". */
	for (unsigned i = 0; i < SL_KEYS_USAGE_MODELS_MAX + 10; i++) {
		char m[16];
		snprintf(m, sizeof(m), "m%u", i);
		end(x, &unadmitted, true, m, 1, 1, 0);
	}
	/* The names up to the bound, and "other". */
	ASSERT_EQ(x->n_usage, SL_KEYS_USAGE_MODELS_MAX + 1);
	uint64_t other = 0;
	for (struct sl_usage *u = x->usage; u; u = u->next)
		if (strcmp(u->model, "other") == 0)
			other = u->requests;
	ASSERT_EQ(other, 12); /* tiny, a"b, m0..m61 had names; m62..m73 */
	sl_tenants_free(&t);
}

/*
 * A reload: a name that stays keeps its buckets and requests in flight
 * (whatever its secret now), a name that leaves is revoked, and its
 * secret no longer found.
 */
static void test_reload_keeps_state_by_name(void)
{
	struct sl_tenants t = {0};
	struct spec before[] = {
	    {"stay", "old-secret", 5, 0, 0, NULL, -1, -1},
	    {"gone", "kg", 0, 0, 0, NULL, -1, -1},
	};
	sl_tenants_install(&t, table(before, 2), false);
	struct sl_tenant *stay = lookup(&t, "old-secret")->tenant;
	struct sl_tenant *gone = lookup(&t, "kg")->tenant;
	for (int i = 0; i < 3; i++) {
		struct sl_admission a = limited();
		ASSERT_EQ(admit(&t, "old-secret", &a, 0), SL_ADMIT_OK);
	}
	ASSERT_EQ(stay->in_flight, 3);
	struct spec after[] = {{"stay", "new-secret", 5, 0, 0, NULL, -1, -1}};
	sl_tenants_install(&t, table(after, 1), false);
	ASSERT(lookup(&t, "old-secret") == NULL);
	ASSERT(lookup(&t, "kg") == NULL);
	ASSERT(lookup(&t, "new-secret")->tenant == stay);
	ASSERT(!stay->revoked && gone->revoked && gone->key == NULL);
	ASSERT_EQ(stay->in_flight, 3);
	struct sl_admission a = limited();
	ASSERT_EQ(admit(&t, "new-secret", &a, 0), SL_ADMIT_OK);
	a = limited();
	ASSERT_EQ(admit(&t, "new-secret", &a, 0), SL_ADMIT_OK);
	a = limited();
	ASSERT_EQ(admit(&t, "new-secret", &a, 0), SL_ADMIT_REQUESTS);
	/* A request of a revoked tenant may still end: it counts. */
	end(gone, &unadmitted, true, "tiny", 1, 1, 0);
	ASSERT_EQ(gone->usage->requests, 1);
	/*
	 * The section gone: every key revoked, and a key still required
	 * (issue 28): removing the keys never turns authentication off.
	 */
	sl_tenants_install(&t, NULL, false);
	ASSERT(sl_tenants_required(&t));
	ASSERT(lookup(&t, "new-secret") == NULL);
	ASSERT(stay->revoked);
	sl_tenants_free(&t);
}

/* An empty keys: section requires a key as a full one does. */
static void test_empty_table_requires_a_key(void)
{
	struct sl_tenants t = {0};
	sl_tenants_install(&t, NULL, false);
	ASSERT(!sl_tenants_required(&t));
	sl_tenants_install(&t, table(NULL, 0), false);
	ASSERT(sl_tenants_required(&t));
	ASSERT(lookup(&t, "") == NULL);
	struct spec one[] = {{"a", "sk-a", 0, 0, 0, NULL, -1, -1}};
	sl_tenants_install(&t, table(one, 1), false);
	ASSERT(lookup(&t, "sk-a") != NULL);
	sl_tenants_install(&t, table(NULL, 0), false);
	ASSERT(sl_tenants_required(&t));
	ASSERT(lookup(&t, "sk-a") == NULL);
	sl_tenants_free(&t);
}

int main(void)
{
	RUN(test_digest_and_lookup);
	RUN(test_empty_table_requires_a_key);
	RUN(test_bucket);
	RUN(test_format_reset);
	RUN(test_requests_per_minute);
	RUN(test_tokens_per_minute);
	RUN(test_tokens_reserved_at_admission);
	RUN(test_every_output_reserved);
	RUN(test_concurrency);
	RUN(test_models_and_priority);
	RUN(test_usage_and_metrics);
	RUN(test_reload_keeps_state_by_name);
	return 0;
}

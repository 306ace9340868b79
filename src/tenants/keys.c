/*
 * keys.c: tenants at run time: lookup by digest, token buckets,
 * concurrency and usage (see keys.h).
 */
#include "sluice/tenants/keys.h"

#include "sluice/base/common.h"
#include "sluice/json/json_scan.h"
#include "sluice/base/log.h"
#include "sluice/base/metrics.h"
#include "sluice/sched/sched.h"

#include <inttypes.h>
#include <math.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#define MINUTE_MS 60000.0
/* Far below a token, far above a double's rounding of a few of them. */
#define SL_BUCKET_EPSILON 1e-6

/* What usage past SL_KEYS_USAGE_MODELS_MAX models is counted under. */
#define OTHER_MODEL "other"

void sl_keys_digest(const void *data, size_t len,
                    unsigned char out[SL_KEYS_HASH_LEN])
{
	unsigned int n = 0;
	/* SHA-256 cannot fail on memory it is given but for OOM: abort. */
	if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 ||
	    n != SL_KEYS_HASH_LEN)
		abort();
}

const struct sl_key *sl_keys_find(const struct sl_keys *keys,
                                  const unsigned char digest[SL_KEYS_HASH_LEN])
{
	if (!keys)
		return NULL;
	/*
	 * The order comparison may stop at the first differing byte: it
	 * reveals, at most, how a digest of the client's guess sorts, which
	 * tells nothing of a secret (SHA-256 is preimage resistant). The
	 * equality that grants access is checked in constant time.
	 */
	unsigned lo = 0, hi = keys->n;
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		int c = memcmp(keys->v[mid].hash, digest, SL_KEYS_HASH_LEN);
		if (c < 0) {
			lo = mid + 1;
		} else if (c > 0) {
			hi = mid;
		} else {
			lo = mid;
			break;
		}
	}
	if (lo < keys->n &&
	    CRYPTO_memcmp(keys->v[lo].hash, digest, SL_KEYS_HASH_LEN) == 0)
		return &keys->v[lo];
	return NULL;
}

bool sl_keys_allows_model(const struct sl_key *key, const char *name)
{
	if (key->any_model)
		return true;
	for (unsigned i = 0; i < key->n_models; i++)
		if (strcmp(key->models[i], name) == 0)
			return true;
	return false;
}

/* ---- buckets ---- */

void sl_bucket_refill(struct sl_bucket *b, unsigned capacity, uint64_t now_ms)
{
	if (!b->started) {
		b->started = true;
		b->level = capacity;
		b->at_ms = now_ms;
		return;
	}
	if (now_ms > b->at_ms)
		b->level +=
		    (double)capacity * (double)(now_ms - b->at_ms) / MINUTE_MS;
	if (b->level > capacity)
		b->level = capacity;
	b->at_ms = SL_MAX(b->at_ms, now_ms);
}

bool sl_bucket_take(struct sl_bucket *b, unsigned capacity, double n,
                    uint64_t now_ms)
{
	sl_bucket_refill(b, capacity, now_ms);
	/* Refills add fractions: a whole token may sum to just under 1. */
	if (b->level + SL_BUCKET_EPSILON < n)
		return false;
	b->level -= n;
	return true;
}

void sl_bucket_charge(struct sl_bucket *b, unsigned capacity, double n,
                      uint64_t now_ms)
{
	sl_bucket_refill(b, capacity, now_ms);
	b->level -= n;
}

uint64_t sl_bucket_wait_ms(const struct sl_bucket *b, unsigned capacity,
                           double want)
{
	double level = b->started ? b->level : capacity;
	if (level >= want || capacity == 0)
		return 0;
	return (uint64_t)ceil((want - level) * MINUTE_MS / capacity);
}

unsigned long long sl_bucket_remaining(const struct sl_bucket *b)
{
	return b->level > 0 ? (unsigned long long)floor(b->level) : 0;
}

void sl_keys_format_reset(uint64_t ms, char *buf, size_t size)
{
	if (ms < 1000) {
		snprintf(buf, size, "%llums", (unsigned long long)ms);
		return;
	}
	/* Whole seconds, rounded up: a client that waits that long is in. */
	uint64_t s = (ms + 999) / 1000;
	uint64_t h = s / 3600, m = s / 60 % 60;
	s %= 60;
	if (h)
		snprintf(buf, size, "%lluh%llum%llus", (unsigned long long)h,
		         (unsigned long long)m, (unsigned long long)s);
	else if (m)
		snprintf(buf, size, "%llum%llus", (unsigned long long)m,
		         (unsigned long long)s);
	else
		snprintf(buf, size, "%llus", (unsigned long long)s);
}

/* ---- tenants ---- */

static struct sl_tenant *tenant_named(struct sl_tenants *t, const char *name)
{
	struct sl_tenant **end = &t->list;
	for (struct sl_tenant *x = t->list; x; x = x->next) {
		if (strcmp(x->name, name) == 0)
			return x;
		end = &x->next;
	}
	struct sl_tenant *x = sl_xcalloc(1, sizeof(*x));
	x->name = sl_xstrdup(name);
	x->revoked = true; /* until bound below */
	sl_hist_init(&x->queue_wait, SL_TENANT_SECONDS_MIN_EXP);
	*end = x;
	return x;
}

/* Whether a key of `old` by this name has the same settings as `k`. */
static bool key_same(const struct sl_key *a, const struct sl_key *b)
{
	if (memcmp(a->hash, b->hash, SL_KEYS_HASH_LEN) != 0 ||
	    a->rpm != b->rpm || a->tpm != b->tpm ||
	    a->max_concurrent != b->max_concurrent || a->weight != b->weight ||
	    a->any_model != b->any_model || a->n_models != b->n_models ||
	    a->has_max_priority != b->has_max_priority ||
	    a->has_default_priority != b->has_default_priority ||
	    (a->has_max_priority && a->max_priority != b->max_priority) ||
	    (a->has_default_priority &&
	     a->default_priority != b->default_priority))
		return false;
	for (unsigned i = 0; i < a->n_models; i++)
		if (strcmp(a->models[i], b->models[i]) != 0)
			return false;
	return true;
}

static const struct sl_key *key_by_name(const struct sl_keys *keys,
                                        const char *name)
{
	for (unsigned i = 0; keys && i < keys->n; i++)
		if (strcmp(keys->v[i].name, name) == 0)
			return &keys->v[i];
	return NULL;
}

/* Appends ", name" (or "name") to a list of names for the log line. */
static void list_add(char *buf, size_t size, const char *name)
{
	size_t n = strlen(buf);
	if (n + 1 < size)
		snprintf(buf + n, size - n, "%s%s", n ? ", " : "", name);
}

void sl_tenants_install(struct sl_tenants *t, struct sl_keys *table,
                        bool log_changes)
{
	char added[256] = "", changed[256] = "", removed[256] = "";
	struct sl_keys *old = t->table;
	for (struct sl_tenant *x = t->list; x; x = x->next) {
		x->revoked = true;
		x->key = NULL;
	}
	for (unsigned i = 0; table && i < table->n; i++) {
		struct sl_key *k = &table->v[i];
		struct sl_tenant *x = tenant_named(t, k->name);
		k->tenant = x;
		x->key = k;
		x->revoked = false;
		x->rpm = k->rpm;
		x->tpm = k->tpm;
		x->max_concurrent = k->max_concurrent;
		x->weight = k->weight;
		/* A bucket over a lowered capacity comes down to it. */
		if (x->requests.level > k->rpm)
			x->requests.level = k->rpm;
		if (x->tokens.level > k->tpm)
			x->tokens.level = k->tpm;
		const struct sl_key *before = key_by_name(old, k->name);
		if (!before)
			list_add(added, sizeof(added), k->name);
		else if (!key_same(before, k))
			list_add(changed, sizeof(changed), k->name);
	}
	for (unsigned i = 0; old && i < old->n; i++)
		if (!key_by_name(table, old->v[i].name))
			list_add(removed, sizeof(removed), old->v[i].name);
	t->table = table;
	t->required |= table != NULL;
	if (!t->table_borrowed)
		sl_keys_free(old);
	t->table_borrowed = false;
	if (log_changes)
		sl_info("keys reloaded: %u key%s; added: %s; changed: %s; "
		        "removed: %s",
		        table ? table->n : 0, table && table->n == 1 ? "" : "s",
		        added[0] ? added : "none",
		        changed[0] ? changed : "none",
		        removed[0] ? removed : "none");
}

void sl_tenants_free(struct sl_tenants *t)
{
	if (!t->table_borrowed)
		sl_keys_free(t->table);
	t->table = NULL;
	while (t->list) {
		struct sl_tenant *x = t->list;
		t->list = x->next;
		while (x->usage) {
			struct sl_usage *u = x->usage;
			x->usage = u->next;
			free(u->model);
			free(u);
		}
		free(x->name);
		free(x);
	}
}

bool sl_tenants_required(const struct sl_tenants *t)
{
	return t->required;
}

const struct sl_key *sl_tenants_lookup(const struct sl_tenants *t,
                                       const char *secret, size_t len)
{
	if (!t->table || t->table->n == 0)
		return NULL;
	unsigned char digest[SL_KEYS_HASH_LEN];
	sl_keys_digest(secret, len, digest);
	return sl_keys_find(t->table, digest);
}

/* The rate-limit headers of a key's answer, from its buckets as they are. */
static void format_headers(const struct sl_tenant *x, char *buf, size_t size)
{
	size_t n = 0;
	buf[0] = '\0';
	char reset[32];
	if (x->rpm) {
		sl_keys_format_reset(
		    sl_bucket_wait_ms(&x->requests, x->rpm, x->rpm), reset,
		    sizeof(reset));
		n += (size_t)snprintf(buf + n, size - n,
		                      "x-ratelimit-limit-requests: %u\r\n"
		                      "x-ratelimit-remaining-requests: %llu\r\n"
		                      "x-ratelimit-reset-requests: %s\r\n",
		                      x->rpm, sl_bucket_remaining(&x->requests),
		                      reset);
	}
	if (x->tpm && n < size) {
		sl_keys_format_reset(
		    sl_bucket_wait_ms(&x->tokens, x->tpm, x->tpm), reset,
		    sizeof(reset));
		snprintf(buf + n, size - n,
		         "x-ratelimit-limit-tokens: %u\r\n"
		         "x-ratelimit-remaining-tokens: %llu\r\n"
		         "x-ratelimit-reset-tokens: %s\r\n",
		         x->tpm, sl_bucket_remaining(&x->tokens), reset);
	}
}

/* Retry-After (whole seconds, rounded up) and OpenAI SDKs' retry-after-ms. */
static void add_retry_after(struct sl_admission *a, uint64_t wait_ms)
{
	size_t n = strlen(a->headers);
	snprintf(a->headers + n, sizeof(a->headers) - n,
	         "Retry-After: %llu\r\nretry-after-ms: %llu\r\n",
	         (unsigned long long)((wait_ms + 999) / 1000),
	         (unsigned long long)wait_ms);
}

/*
 * The most a limited request may generate: its bound (at least one:
 * llama-server generates a token for n_predict 0) for each of its outputs
 * (a prompt array's prompts, times n: llama-server generates each as a
 * request of its own would be); a token for each when nothing bounds it.
 * In a double, which holds every product of the two exactly enough.
 */
static double output_bound(const struct sl_admission *a)
{
	double each =
	    a->max_tokens >= 0 ? (double)SL_MAX(a->max_tokens, (int64_t)1) : 1;
	return each * (double)SL_MAX(a->outputs, 1u);
}

/*
 * The tokens a limited request must find in its key's bucket (glossary:
 * reservation): its output bound and its prompt's estimate (every prompt
 * of an array is in the body it is estimated from), at most the whole
 * tpm; when nothing bounds it, that with a token for each output.
 */
static double reservation(const struct sl_tenant *x,
                          const struct sl_admission *a)
{
	double prompt = (double)(a->body_bytes / SL_KEYS_BYTES_PER_TOKEN);
	return SL_MIN(output_bound(a) + prompt, (double)x->tpm);
}

/* The message of a request too large for its key's tpm, for good. */
static void too_large(const struct sl_key *key, struct sl_admission *a)
{
	const struct sl_tenant *x = key->tenant;
	int n = snprintf(a->message, sizeof(a->message),
	                 "Request too large for key %s on tokens per min "
	                 "(TPM): Limit %u, Requested %.0f",
	                 key->name, x->tpm, output_bound(a));
	size_t at = n > 0 ? SL_MIN((size_t)n, sizeof(a->message)) : 0;
	if (a->outputs > 1)
		snprintf(a->message + at, sizeof(a->message) - at,
		         " (%" PRIu32 " outputs of %lld). Ask for fewer "
		         "tokens (max_tokens) or outputs (n, prompts).",
		         a->outputs,
		         (long long)SL_MAX(a->max_tokens, (int64_t)1));
	else
		snprintf(a->message + at, sizeof(a->message) - at,
		         ". Ask for fewer tokens (max_tokens).");
}

enum sl_admit sl_tenant_admit(const struct sl_key *key, struct sl_admission *a,
                              uint64_t now_ms)
{
	struct sl_tenant *x = key->tenant;
	a->headers[0] = '\0';
	a->message[0] = '\0';
	a->counted = false;
	a->reserved = 0;
	if (a->model && !sl_keys_allows_model(key, a->model))
		return SL_ADMIT_MODEL;
	if (!a->priority_given && key->has_default_priority)
		a->priority = key->default_priority;
	if (key->has_max_priority && a->priority > key->max_priority)
		a->priority = key->max_priority;
	if (x->rpm)
		sl_bucket_refill(&x->requests, x->rpm, now_ms);
	if (x->tpm)
		sl_bucket_refill(&x->tokens, x->tpm, now_ms);
	if (!a->limited) {
		format_headers(x, a->headers, sizeof(a->headers));
		return SL_ADMIT_OK;
	}
	enum sl_admit verdict = SL_ADMIT_OK;
	uint64_t wait_ms = 0;
	double want = x->tpm ? reservation(x, a) : 0;
	if (x->tpm && a->max_tokens >= 0 && output_bound(a) > (double)x->tpm) {
		/* Waiting would not help: nothing to retry after. */
		format_headers(x, a->headers, sizeof(a->headers));
		too_large(key, a);
		return SL_ADMIT_TOO_LARGE;
	}
	if (x->tpm && x->tokens.level + SL_BUCKET_EPSILON < want) {
		verdict = SL_ADMIT_TOKENS;
		wait_ms = sl_bucket_wait_ms(&x->tokens, x->tpm, want);
		double used = x->tpm - SL_MAX(x->tokens.level, 0.0);
		snprintf(a->message, sizeof(a->message),
		         "Rate limit reached for key %s on tokens per min "
		         "(TPM): Limit %u, Used %.0f, Requested %.0f. Please "
		         "try again in %.1fs.",
		         key->name, x->tpm, ceil(used), ceil(want),
		         (double)wait_ms / 1000.0);
	} else if (x->rpm && !sl_bucket_take(&x->requests, x->rpm, 1, now_ms)) {
		verdict = SL_ADMIT_REQUESTS;
		wait_ms = sl_bucket_wait_ms(&x->requests, x->rpm, 1);
		snprintf(a->message, sizeof(a->message),
		         "Rate limit reached for key %s on requests per min "
		         "(RPM): Limit %u. Please try again in %.1fs.",
		         key->name, x->rpm, (double)wait_ms / 1000.0);
	} else if (x->max_concurrent && x->in_flight >= x->max_concurrent) {
		/* The request taken goes back: none was sent. */
		if (x->rpm)
			x->requests.level += 1;
		verdict = SL_ADMIT_CONCURRENCY;
		/* Nobody knows when a request in flight ends: the usual 1 s. */
		wait_ms = 1000;
		snprintf(
		    a->message, sizeof(a->message),
		    "Rate limit reached for key %s on concurrent requests: "
		    "Limit %u. Please try again when one has ended.",
		    key->name, x->max_concurrent);
	}
	if (verdict == SL_ADMIT_OK && x->tpm) {
		/* Without a bound, all there is: one such request at a time. */
		a->reserved =
		    a->max_tokens >= 0 ? want : SL_MAX(x->tokens.level, want);
		x->tokens.level -= a->reserved;
	}
	format_headers(x, a->headers, sizeof(a->headers));
	if (verdict != SL_ADMIT_OK) {
		add_retry_after(a, wait_ms);
		return verdict;
	}
	x->in_flight++;
	a->counted = true;
	return SL_ADMIT_OK;
}

static struct sl_usage *usage_of(struct sl_tenant *x, const char *model)
{
	char cut[SL_KEYS_MODEL_MAX];
	snprintf(cut, sizeof(cut), "%s", model ? model : "");
	struct sl_usage **end = &x->usage, *other = NULL;
	for (struct sl_usage *u = x->usage; u; u = u->next) {
		if (strcmp(u->model, cut) == 0)
			return u;
		if (strcmp(u->model, OTHER_MODEL) == 0)
			other = u;
		end = &u->next;
	}
	if (x->n_usage >= SL_KEYS_USAGE_MODELS_MAX) {
		if (other)
			return other;
		snprintf(cut, sizeof(cut), "%s", OTHER_MODEL);
	}
	struct sl_usage *u = sl_xcalloc(1, sizeof(*u));
	u->model = sl_xstrdup(cut);
	*end = u;
	x->n_usage++;
	return u;
}

void sl_tenant_end(struct sl_tenant *tenant, const struct sl_ending *e,
                   uint64_t now_ms)
{
	if (e->counted && tenant->in_flight > 0)
		tenant->in_flight--;
	if (e->refunded && e->counted && tenant->rpm) {
		sl_bucket_charge(&tenant->requests, tenant->rpm, -1, now_ms);
		if (tenant->requests.level > tenant->rpm)
			tenant->requests.level = tenant->rpm;
	}
	double used =
	    e->used ? (double)(e->prompt_tokens + e->completion_tokens) : 0;
	if (e->ran_on)
		used = SL_MAX(used, e->reserved);
	/* A reload that took the tpm away left nothing to give back to. */
	if (tenant->tpm) {
		sl_bucket_charge(&tenant->tokens, tenant->tpm,
		                 used - e->reserved, now_ms);
		if (tenant->tokens.level > tenant->tpm)
			tenant->tokens.level = tenant->tpm;
	}
	if (e->queue_ms >= 0)
		sl_hist_record(&tenant->queue_wait, (double)e->queue_ms / 1000);
	if (!e->used)
		return;
	tenant->service +=
	    (double)e->prompt_tokens * SL_SCHED_SERVICE_PROMPT_TOKEN +
	    (double)e->completion_tokens * SL_SCHED_SERVICE_OUTPUT_TOKEN;
	tenant->slot_seconds += e->slot_seconds;
	struct sl_usage *u = usage_of(tenant, e->model);
	u->requests++;
	u->prompt_tokens += e->prompt_tokens;
	u->completion_tokens += e->completion_tokens;
	sl_minute_add(&tenant->minute_requests, 1, now_ms);
	sl_minute_add(&tenant->minute_tokens,
	              e->prompt_tokens + e->completion_tokens, now_ms);
}

json_t *sl_tenants_usage_json(const struct sl_tenants *t)
{
	json_t *keys = json_object();
	for (const struct sl_tenant *x = t->list; x; x = x->next) {
		json_t *models = json_object();
		json_int_t req = 0, prompt = 0, completion = 0;
		for (const struct sl_usage *u = x->usage; u; u = u->next) {
			json_object_set_new(
			    models, u->model,
			    json_pack("{s:I, s:I, s:I}", "requests",
			              (json_int_t)u->requests, "prompt_tokens",
			              (json_int_t)u->prompt_tokens,
			              "completion_tokens",
			              (json_int_t)u->completion_tokens));
			req += (json_int_t)u->requests;
			prompt += (json_int_t)u->prompt_tokens;
			completion += (json_int_t)u->completion_tokens;
		}
		json_object_set_new(
		    keys, x->name,
		    json_pack("{s:I, s:I, s:I, s:i, s:b, s:o}", "requests", req,
		              "prompt_tokens", prompt, "completion_tokens",
		              completion, "in_flight", (int)x->in_flight,
		              "revoked", x->revoked, "models", models));
	}
	return json_pack("{s:s, s:o}", "object", "usage", "keys", keys);
}

void sl_tenants_write_metrics(const struct sl_tenants *t, struct sl_text *out)
{
	static const struct {
		const char *name, *help;
	} families[] = {
	    {"sluice_key_requests_total",
	     "Requests that reached an upstream, by API key name and model."},
	    {"sluice_key_prompt_tokens_total",
	     "Prompt tokens the upstream counted, by API key name and model."},
	    {"sluice_key_completion_tokens_total",
	     "Tokens generated, by API key name and model."},
	};
	for (size_t k = 0; k < SL_ARRAY_SIZE(families); k++) {
		sl_expose_family(out, families[k].name, "counter",
		                 families[k].help);
		for (const struct sl_tenant *x = t->list; x; x = x->next) {
			char key[4 * SL_KEYS_NAME_MAX + 8];
			sl_label_escape(x->name, key, sizeof(key));
			for (const struct sl_usage *u = x->usage; u;
			     u = u->next) {
				char model[4 * SL_KEYS_MODEL_MAX + 8];
				sl_label_escape(u->model, model, sizeof(model));
				unsigned long long v[] = {u->requests,
				                          u->prompt_tokens,
				                          u->completion_tokens};
				sl_text_printf(
				    out, "%s{key=\"%s\",model=\"%s\"} %llu\n",
				    families[k].name, key, model, v[k]);
			}
		}
	}
}

/*
 * Per key, what fair queuing sees: its weight, the service counted for it,
 * the slot-seconds its requests held (their share of capacity, over the
 * slots' own seconds), and how long they waited in the queue.
 */
void sl_tenants_write_fairness(const struct sl_tenants *t, struct sl_text *out)
{
	static const struct {
		const char *name, *type, *help;
	} families[] = {
	    {"sluice_key_weight", "gauge",
	     "A key's weight: its share against other keys inside a "
	     "priority (--fairness key)."},
	    {"sluice_key_service_tokens_total", "counter",
	     "Service counted for fair queuing: prompt tokens plus twice the "
	     "tokens generated, by API key name."},
	    {"sluice_key_slot_seconds_total", "counter",
	     "Seconds the key's requests held an upstream slot (dispatch to "
	     "end): divided by the slots' seconds, its share of capacity."},
	};
	for (size_t k = 0; k < SL_ARRAY_SIZE(families); k++) {
		sl_expose_family(out, families[k].name, families[k].type,
		                 families[k].help);
		for (const struct sl_tenant *x = t->list; x; x = x->next) {
			char key[4 * SL_KEYS_NAME_MAX + 8];
			sl_label_escape(x->name, key, sizeof(key));
			double v[] = {x->weight, x->service, x->slot_seconds};
			sl_text_printf(out, "%s{key=\"%s\"} %.17g\n",
			               families[k].name, key, v[k]);
		}
	}
	sl_expose_family(out, "sluice_key_queue_wait_seconds", "histogram",
	                 "Time requests waited in sluice's queue before a "
	                 "slot, by API key name.");
	for (const struct sl_tenant *x = t->list; x; x = x->next) {
		char key[4 * SL_KEYS_NAME_MAX + 8], labels[sizeof(key) + 8];
		sl_label_escape(x->name, key, sizeof(key));
		snprintf(labels, sizeof(labels), "key=\"%s\"", key);
		sl_expose_histogram(out, "sluice_key_queue_wait_seconds", labels,
		                    &x->queue_wait);
	}
}

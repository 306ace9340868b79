/*
 * keys.h: tenants: API keys from the configuration file's `keys:` section,
 * each with its own models, priority ceiling, rate limits, concurrency and
 * usage.
 *
 * The module owns two things. The key table (struct sl_keys) is what the
 * file says, read and checked by keys_config.c: only a SHA-256 digest of
 * each secret is kept, sorted so that a request's key is found by binary
 * search over the digests and confirmed with a constant-time comparison.
 * The tenant state (struct sl_tenant) is what happens at run time: token
 * buckets, requests in flight, usage counters. A table is replaced whole
 * on SIGHUP; tenant states are kept by key name across the swap and live
 * as long as sluice, so a request in flight keeps pointing at its tenant
 * whatever a reload does, and a key that comes back keeps its buckets.
 * A `keys:` section, once installed, keeps requests needing a key for the
 * rest of the run (`required`): a reload that removes or empties it
 * revokes its keys, and never turns authentication off.
 *
 * Glossary:
 *   key       one entry of `keys:`: a name (for labels and logs, never
 *             secret) and the digest of a secret a client sends.
 *   tenant    the run-time state of a key name.
 *   bucket    a token bucket: holds up to `capacity` (the per-minute
 *             figure), refilled continuously at capacity per minute; a
 *             request takes one from the requests bucket, and its
 *             reservation from the tokens bucket.
 *   reservation  what a request takes from its key's tokens bucket when
 *             it is admitted: the most it may generate (its max_tokens
 *             for each of its outputs, request.h) and its prompt's
 *             estimated tokens (SL_KEYS_BYTES_PER_TOKEN), at most the
 *             key's tpm; or, when nothing bounds what it generates,
 *             everything the bucket holds. It is admitted only if the
 *             bucket holds that much.
 *             When it ends, the reservation is given back and what it
 *             used (as the upstream counted it) taken instead, which may
 *             leave the bucket below zero.
 *   usage     per tenant and model: requests, prompt and generated tokens
 *             since start (Prometheus counters, and GET /v1/usage).
 *
 * Everything here runs on the event loop but the file reading, which
 * keys_config.c does inside config.c's parse (at start, or on SIGHUP in a
 * worker thread). Nothing here blocks.
 */
#ifndef SLUICE_KEYS_H
#define SLUICE_KEYS_H

#include "sluice/base/metrics.h"
#include "sluice/config/config.h"
#include "sluice/config/config_file.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A SHA-256 digest. */
#define SL_KEYS_HASH_LEN 32
/*
 * A key's name is a Prometheus label value and an access-log field: 64
 * bytes names any team or application, and keeps /metrics lines short.
 */
#define SL_KEYS_NAME_MAX 64
/*
 * Keys in one file: far beyond a file written by hand. A reload matches
 * the new keys to the old by name pairwise, on the loop: a million string
 * comparisons at this bound, a few milliseconds. (Sorting by name would
 * lift it, when someone needs more.)
 */
#define SL_KEYS_MAX 1000
/* Models in one key's allow-list. */
#define SL_KEYS_MODELS_MAX 256
/*
 * Bytes of a request's model name kept as a usage label: longer names are
 * counted under their first bytes, so a client cannot grow the label set
 * with megabyte names (the allow-list, where set, bounds it further).
 */
#define SL_KEYS_MODEL_MAX 128
/*
 * Distinct models counted per tenant: past this, further names are
 * counted under one more, "other", so that a key without an allow-list cannot
 * make /metrics grow without bound by naming random models.
 */
#define SL_KEYS_USAGE_MODELS_MAX 64
/* rpm and tpm at most: a billion a minute is no limit at all. */
#define SL_KEYS_RATE_MAX 1000000000u
/* max-concurrent at most: far beyond what any upstream serves at once. */
#define SL_KEYS_CONCURRENT_MAX 1000000u
/* Bytes of the header lines a tenant's answer carries (see admit). */
#define SL_KEYS_HEADERS_MAX 384
/*
 * Bytes of a refusal's message: the key's name (SL_KEYS_NAME_MAX) and
 * the figures of the longest, a request too large for its outputs, at
 * their widest (about 250 bytes in all).
 */
#define SL_KEYS_MESSAGE_MAX 320
/*
 * A prompt's tokens estimated from its request body's bytes, for the
 * reservation: OpenAI's rule of thumb of four characters of English a
 * token. The body's JSON around the prompt makes it an overestimate for
 * short prompts; a script or language with more tokens a byte is
 * underestimated, which the charge at the end makes good.
 */
#define SL_KEYS_BYTES_PER_TOKEN 4
/*
 * A key's weight (its share against other keys inside a priority): from a
 * hundredth to a hundred times the default 1, so that no tenant's service
 * is counted as nothing or everything.
 */
#define SL_KEYS_WEIGHT_MIN 0.01
#define SL_KEYS_WEIGHT_MAX 100.0
/* A tenant's queue waits are timed from 2^-17 s (about 8 us) up. */
#define SL_TENANT_SECONDS_MIN_EXP (-17)

/* A token bucket; see the glossary. */
struct sl_bucket {
	double level;   /* may be below zero after a charge */
	uint64_t at_ms; /* when level was last brought up to date */
	bool started;   /* level is meaningful (else: full) */
};

/* One model's usage by one tenant. */
struct sl_usage {
	struct sl_usage *next;
	char *model; /* "" for requests that named none */
	uint64_t requests, prompt_tokens, completion_tokens;
};

struct sl_key;

struct sl_tenant {
	struct sl_tenant *next;
	char *name;
	/* Its key in the current table; NULL while revoked. */
	const struct sl_key *key;
	/* The limits of the key by this name in the current table; 0: none. */
	unsigned rpm, tpm, max_concurrent;
	double weight; /* its key's, for fair queuing */
	bool revoked;  /* not in the current table */
	struct sl_bucket requests, tokens;
	unsigned in_flight; /* admitted and not yet ended */
	struct sl_usage *usage;
	unsigned n_usage;
	/*
	 * Fair queuing's view (sluice_key_service_tokens_total and kin):
	 * service counted (SL_SCHED_SERVICE_* tokens), seconds its requests
	 * held a slot, and their waits in sluice's queue.
	 */
	double service, slot_seconds;
	struct sl_histogram queue_wait;
	/*
	 * Its requests with a service level, by priority class and outcome,
	 * in the order of stats.h (urgent, normal, batch; met, missed,
	 * shed): sluice_slo_requests_total.
	 */
	uint64_t slo[3][3];
	/*
	 * The requests and tokens (prompt and generated) its usage counted
	 * over the last minute, for the status page beside rpm and tpm.
	 */
	struct sl_minute minute_requests, minute_tokens;
};

struct sl_key {
	char *name;
	char *hash_text; /* as written: "sha256:HEX" */
	unsigned char hash[SL_KEYS_HASH_LEN];
	char **models; /* the allow-list; NULL with any_model */
	unsigned n_models;
	bool any_model;
	bool has_max_priority, has_default_priority;
	double max_priority, default_priority;
	char *max_priority_text, *default_priority_text; /* as written */
	unsigned rpm, tpm, max_concurrent;               /* 0: no limit */
	/*
	 * The service level of its requests that name none (sched/README.md,
	 * "Deadlines"); 0s: its model's, else --slo-ttft and --slo-tpot.
	 */
	struct sl_slo slo;
	double weight;     /* share inside a priority (--fairness key) */
	char *weight_text; /* as written; NULL: the default 1 */
	struct sl_tenant *tenant; /* bound by sl_tenants_install() */
};

/* A key table: keys sorted by digest. */
struct sl_keys {
	struct sl_key *v;
	unsigned n;
};

/* ---- the table (keys_config.c) ---- */

/*
 * The section's hooks (config_sections.h). apply() reads `keys:` into
 * cfg->keys (a new table; a second `keys:` cannot occur, the file refuses
 * duplicate keys) and names the node at fault on error ("FILE:LINE:
 * keys.NAME.FIELD: ..."); print() writes it back for --check-config.
 */
int sl_keys_config_apply(struct sl_config *cfg, const struct sl_config_node *n,
                         char *err, size_t size);
void sl_keys_config_print(FILE *out, const struct sl_config *cfg);

/* Frees a table made by sl_keys_config_apply(); NULL is fine. */
void sl_keys_free(struct sl_keys *keys);

/* SHA-256 of len bytes into out, with libcrypto. */
void sl_keys_digest(const void *data, size_t len,
                    unsigned char out[SL_KEYS_HASH_LEN]);

/*
 * --hash-key: reads a secret from `in` (one trailing newline, and a CR
 * before it, dropped), checks it as a client key and writes the
 * "hash: sha256:HEX" line to `out`. Returns 0, or SL_EINVAL with one line
 * in err.
 */
int sl_keys_hash_stdin(FILE *in, FILE *out, char *err, size_t size);

/*
 * The key whose digest is `digest`, or NULL. Binary search over the
 * sorted digests; the final comparison in constant time.
 */
const struct sl_key *sl_keys_find(const struct sl_keys *keys,
                                  const unsigned char digest[SL_KEYS_HASH_LEN]);

/*
 * Whether `key` may use model `name` (NUL-terminated): every model when
 * its `models:` is absent. The one place the allow-list is read.
 */
bool sl_keys_allows_model(const struct sl_key *key, const char *name);

/* ---- buckets (pure: time passed in) ---- */

/* Brings b up to date: capacity per minute since at_ms, up to capacity. */
void sl_bucket_refill(struct sl_bucket *b, unsigned capacity, uint64_t now_ms);

/* Takes n when the bucket holds at least n after a refill; else false. */
bool sl_bucket_take(struct sl_bucket *b, unsigned capacity, double n,
                    uint64_t now_ms);

/* Takes n whatever it holds (a charge after the fact). */
void sl_bucket_charge(struct sl_bucket *b, unsigned capacity, double n,
                      uint64_t now_ms);

/* Milliseconds until the bucket holds `want` (0 when it does already). */
uint64_t sl_bucket_wait_ms(const struct sl_bucket *b, unsigned capacity,
                           double want);

/* What the bucket holds, as a whole number not below zero. */
unsigned long long sl_bucket_remaining(const struct sl_bucket *b);

/*
 * A duration in OpenAI's x-ratelimit-reset-* form: "1s", "6m0s",
 * "1h2m3s", "250ms" under a second.
 */
void sl_keys_format_reset(uint64_t ms, char *buf, size_t size);

/* ---- tenants ---- */

struct sl_tenants {
	struct sl_keys *table; /* NULL: no keys: section */
	/* The table is the start-up configuration's, freed with it. */
	bool table_borrowed;
	/*
	 * A table (even an empty one) was installed once: client requests
	 * need a key from now on, whatever later tables hold. Never cleared:
	 * only a restart without keys: turns authentication off.
	 */
	bool required;
	struct sl_tenant *list; /* every name ever in a table, in order */
};

/*
 * Makes `table` the current one (taking it over; NULL for none), binding
 * each key to its tenant by name (a new one for a new name) and copying
 * its limits there; tenants whose name left are marked revoked. The old
 * table is freed (unless borrowed); the new one is owned. Logs one line of what
 * changed when `log_changes`. A table, even an empty one, makes keys
 * required for good (`required`); a NULL table after one revokes every
 * key and leaves them required.
 */
void sl_tenants_install(struct sl_tenants *t, struct sl_keys *table,
                        bool log_changes);

/* Frees the tenants and the table. */
void sl_tenants_free(struct sl_tenants *t);

/*
 * Whether a client request needs a key because of keys: (see `required`):
 * true once a keys: section was installed, even when it lists no key now
 * (then no tenant key opens anything).
 */
bool sl_tenants_required(const struct sl_tenants *t);

/*
 * The key a client presented (its secret, len bytes), or NULL: digested
 * and looked up in the current table.
 */
const struct sl_key *sl_tenants_lookup(const struct sl_tenants *t,
                                       const char *secret, size_t len);

/* What sl_tenants_admit() decided. */
enum sl_admit {
	SL_ADMIT_OK,
	SL_ADMIT_MODEL,       /* the model is not on the key's list: 404 */
	SL_ADMIT_REQUESTS,    /* rpm exhausted: 429 */
	SL_ADMIT_TOKENS,      /* tpm exhausted: 429 */
	SL_ADMIT_TOO_LARGE,   /* its outputs' bound past the whole tpm: 429 */
	SL_ADMIT_CONCURRENCY, /* max-concurrent reached: 429 */
};

/* A request's admission, in and out. */
struct sl_admission {
	/* In: the request's model (NULL: none named), whether it is limited */
	const char *model;
	bool limited; /* it takes a slot: rpm, tpm and concurrency apply */
	/*
	 * In, for tpm: the most tokens it may generate for each of its
	 * outputs (request.h; -1: no bound), how many outputs it asks for
	 * (request.h; 0 counts as 1) and its body's bytes (for the prompt's
	 * estimate).
	 */
	int64_t max_tokens;
	uint32_t outputs;
	size_t body_bytes;
	bool priority_given;
	double priority; /* in: as asked (or the default); out: as granted */
	/*
	 * Out: the rate-limit header lines for its answer, whatever it
	 * decides ("" for a key with no rpm nor tpm); on a 429 also
	 * Retry-After. And the message for a refusal.
	 */
	char headers[SL_KEYS_HEADERS_MAX];
	char message[SL_KEYS_MESSAGE_MAX];
	bool counted; /* it holds a concurrent place: sl_tenant_end() it */
	/* Out: the tokens taken from the bucket (glossary: reservation). */
	double reserved;
};

/*
 * Decides whether `key`'s tenant may send a request now, and at which
 * priority (clamped to max-priority; default-priority when it named
 * none). When it may and it is limited, it takes a request from the
 * bucket, its reservation from the tokens bucket and a concurrent place.
 * A request whose output bound alone (max_tokens, at least one, for each
 * of its outputs) is more than the key's tpm could never be within it:
 * SL_ADMIT_TOO_LARGE, with no Retry-After. The model check
 * comes first, so a key learns nothing of other models' limits.
 */
enum sl_admit sl_tenant_admit(const struct sl_key *key, struct sl_admission *a,
                              uint64_t now_ms);

/* How a tenant's request ended, for sl_tenant_end(). */
struct sl_ending {
	bool counted; /* it held a concurrent place (sl_admission) */
	bool used;    /* it reached an upstream */
	/*
	 * Its client left a plain answer, which llama-server finishes all
	 * the same (proxy.c reads it to its end): what it will use is not
	 * known yet, so its whole reservation stays taken.
	 */
	bool ran_on;
	/*
	 * sluice refused it as out of its service level's reach
	 * (sched/README.md, "Deadlines"): the request it took from the rpm
	 * bucket goes back too, as its tokens and place do.
	 */
	bool refunded;
	/* Its model (NULL or "": none named), for the usage labels. */
	const char *model;
	/* What it used, as the upstream counted it. */
	uint64_t prompt_tokens, completion_tokens;
	/* What it took at admission: sl_admission.reserved. */
	double reserved;
	/* Its wait in sluice's queue (-1: never left it for a slot), and
	 * the seconds from then to its end. */
	int64_t queue_ms;
	double slot_seconds;
};

/*
 * A request of `tenant` ended: gives back its concurrent place, gives its
 * reservation back to the tokens bucket and takes what it used instead
 * (the tokens counted when it `used` an upstream; at least the
 * reservation when it `ran_on`), and counts its usage under its model
 * when it used an upstream.
 */
void sl_tenant_end(struct sl_tenant *tenant, const struct sl_ending *e,
                   uint64_t now_ms);

/* GET /v1/usage's document: a new JSON object. */
json_t *sl_tenants_usage_json(const struct sl_tenants *t);

/* The Prometheus series sluice_key_* (see exposition.c). */
struct sl_text;
void sl_tenants_write_metrics(const struct sl_tenants *t, struct sl_text *out);
/* The Prometheus series of fair queuing per key (sluice_key_weight, ...). */
void sl_tenants_write_fairness(const struct sl_tenants *t,
                               struct sl_text *out);

#endif

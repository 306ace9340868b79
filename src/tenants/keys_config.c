/*
 * keys_config.c: the configuration file's `keys:` section, read into a key
 * table and checked, and written back for --check-config (see keys.h).
 *
 * Every bad value gets one line naming the node at fault, "FILE:LINE:
 * keys.NAME.FIELD: ...", through sl_config_node_fail(). A secret never
 * appears in the file, only its digest, which is no secret: it is printed
 * back as given.
 */
#include "sluice/tenants/keys.h"

#include "sluice/base/common.h"
#include "sluice/sched/sched.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HASH_PREFIX "sha256:"

/* The fields a key may have, for the error on any other. */
#define KEY_FIELDS                                                             \
	"hash, models, max-priority, default-priority, rpm, tpm, "             \
	"max-concurrent, weight, slo"

void sl_keys_free(struct sl_keys *keys)
{
	if (!keys)
		return;
	for (unsigned i = 0; i < keys->n; i++) {
		struct sl_key *k = &keys->v[i];
		free(k->name);
		free(k->hash_text);
		for (unsigned m = 0; m < k->n_models; m++)
			free(k->models[m]);
		free(k->models);
		free(k->max_priority_text);
		free(k->default_priority_text);
		free(k->weight_text);
	}
	free(keys->v);
	free(keys);
}

/*
 * A name is a Prometheus label value and a log field: plain characters
 * only, so that it never needs quoting anywhere it appears.
 */
static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n <= SL_KEYS_NAME_MAX &&
	       s[strspn(s,
	                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                "0123456789-_.")] == '\0';
}

static int read_hash(struct sl_key *k, const struct sl_config_node *n,
                     char *err, size_t size)
{
	const char *s = n->text;
	size_t plen = sizeof(HASH_PREFIX) - 1;
	bool ok = strncmp(s, HASH_PREFIX, plen) == 0 &&
	          strlen(s) == plen + 2 * SL_KEYS_HASH_LEN;
	for (unsigned i = 0; ok && i < SL_KEYS_HASH_LEN; i++) {
		int hi = sl_hex_value(s[plen + 2 * i]);
		int lo = sl_hex_value(s[plen + 2 * i + 1]);
		ok = hi >= 0 && lo >= 0;
		if (ok)
			k->hash[i] = (unsigned char)(hi << 4 | lo);
	}
	if (!ok)
		return sl_config_node_fail(
		    err, size, n,
		    "expected sha256: and 64 hex digits (sluice --hash-key "
		    "prints the line to paste), got \"%.80s\"",
		    s);
	k->hash_text = sl_xstrdup(s);
	return 0;
}

static int read_models(struct sl_key *k, const struct sl_config_node *n,
                       char *err, size_t size)
{
	if (n->kind != SL_CONFIG_NODE_LIST)
		return sl_config_node_fail(
		    err, size, n,
		    "expected a list of model names, such as [tiny, chat]");
	if (n->n == 0)
		return sl_config_node_fail(
		    err, size, n,
		    "an empty list would allow no model: leave models out to "
		    "allow every model");
	if (n->n > SL_KEYS_MODELS_MAX)
		return sl_config_node_fail(err, size, n,
		                           "%u models, over the %u allowed",
		                           n->n, SL_KEYS_MODELS_MAX);
	k->models = sl_xcalloc(n->n, sizeof(*k->models));
	for (unsigned i = 0; i < n->n; i++) {
		const struct sl_config_node *m = &n->child[i];
		if (m->kind != SL_CONFIG_NODE_SCALAR || !m->text[0] ||
		    strlen(m->text) >= SL_KEYS_MODEL_MAX)
			return sl_config_node_fail(
			    err, size, m,
			    "expected a model name of 1 to %u bytes",
			    SL_KEYS_MODEL_MAX - 1);
		for (unsigned j = 0; j < i; j++)
			if (strcmp(k->models[j], m->text) == 0)
				return sl_config_node_fail(
				    err, size, m, "model %s is listed twice",
				    m->text);
		k->models[i] = sl_xstrdup(m->text);
		k->n_models++;
	}
	return 0;
}

static int read_priority(double *out, char **text,
                         const struct sl_config_node *n, char *err, size_t size)
{
	if (sl_priority_parse(n->text, out) != 0)
		return sl_config_node_fail(
		    err, size, n,
		    "expected batch, normal, urgent or a number from %g to "
		    "%g, got \"%.80s\"",
		    (double)SL_PRIORITY_MIN, (double)SL_PRIORITY_MAX, n->text);
	*text = sl_xstrdup(n->text);
	return 0;
}

static int read_count(unsigned *out, unsigned max,
                      const struct sl_config_node *n, char *err, size_t size)
{
	const char *s = n->text;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 || v < 1 ||
	    v > max)
		return sl_config_node_fail(
		    err, size, n,
		    "expected a whole number from 1 to %u (leave it out for "
		    "no limit), got \"%.80s\"",
		    max, s);
	*out = (unsigned)v;
	return 0;
}

/*
 * A key's weight: its share inside a priority against other keys
 * (--fairness key), a decimal number in [SL_KEYS_WEIGHT_MIN,
 * SL_KEYS_WEIGHT_MAX] as priorities are written (digits with an optional
 * fraction).
 */
static int read_weight(struct sl_key *k, const struct sl_config_node *n,
                       char *err, size_t size)
{
	const char *t = n->text;
	char *end = NULL;
	double v = t[0] >= '0' && t[0] <= '9' &&
	                   t[strspn(t, "0123456789.")] == '\0'
	               ? strtod(t, &end)
	               : -1;
	if (v < 0 || *end != '\0' || v < SL_KEYS_WEIGHT_MIN ||
	    v > SL_KEYS_WEIGHT_MAX)
		return sl_config_node_fail(
		    err, size, n,
		    "expected a number from %g to %g (a share: 2 is twice "
		    "the default 1), got \"%.80s\"",
		    SL_KEYS_WEIGHT_MIN, SL_KEYS_WEIGHT_MAX, n->text);
	k->weight = v;
	free(k->weight_text);
	k->weight_text = sl_xstrdup(n->text);
	return 0;
}

static int read_field(struct sl_key *k, const struct sl_config_node *f,
                      char *err, size_t size)
{
	const char *name = f->key;
	if (strcmp(name, "models") == 0)
		return read_models(k, f, err, size);
	if (strcmp(name, "slo") == 0)
		return sl_slo_read(f, &k->slo, err, size);
	bool known =
	    strcmp(name, "hash") == 0 || strcmp(name, "max-priority") == 0 ||
	    strcmp(name, "default-priority") == 0 || strcmp(name, "rpm") == 0 ||
	    strcmp(name, "tpm") == 0 || strcmp(name, "max-concurrent") == 0 ||
	    strcmp(name, "weight") == 0;
	if (!known)
		return sl_config_node_fail(
		    err, size, f, "unknown field (a key takes " KEY_FIELDS ")");
	if (f->kind != SL_CONFIG_NODE_SCALAR)
		return sl_config_node_fail(
		    err, size, f, "takes one value, not a %s",
		    f->kind == SL_CONFIG_NODE_LIST ? "list" : "mapping");
	if (strcmp(name, "hash") == 0)
		return read_hash(k, f, err, size);
	if (strcmp(name, "max-priority") == 0) {
		k->has_max_priority = true;
		return read_priority(&k->max_priority, &k->max_priority_text, f,
		                     err, size);
	}
	if (strcmp(name, "default-priority") == 0) {
		k->has_default_priority = true;
		return read_priority(&k->default_priority,
		                     &k->default_priority_text, f, err, size);
	}
	if (strcmp(name, "weight") == 0)
		return read_weight(k, f, err, size);
	if (strcmp(name, "rpm") == 0)
		return read_count(&k->rpm, SL_KEYS_RATE_MAX, f, err, size);
	if (strcmp(name, "tpm") == 0)
		return read_count(&k->tpm, SL_KEYS_RATE_MAX, f, err, size);
	return read_count(&k->max_concurrent, SL_KEYS_CONCURRENT_MAX, f, err,
	                  size);
}

static int read_key(struct sl_key *k, const struct sl_config_node *n, char *err,
                    size_t size)
{
	if (!name_ok(n->key))
		return sl_config_node_fail(
		    err, size, n,
		    "a key's name is 1 to %u letters, digits, '-', '_' or '.' "
		    "(it labels metrics and logs)",
		    SL_KEYS_NAME_MAX);
	if (n->kind != SL_CONFIG_NODE_MAP)
		return sl_config_node_fail(
		    err, size, n,
		    "expected a mapping of the key's settings (hash: "
		    "sha256:HEX, ...)");
	k->name = sl_xstrdup(n->key);
	k->any_model = true;
	k->weight = 1;
	for (unsigned i = 0; i < n->n; i++)
		if (read_field(k, &n->child[i], err, size) != 0)
			return SL_EINVAL;
	k->any_model = k->n_models == 0;
	if (!k->hash_text)
		return sl_config_node_fail(err, size, n,
		                           "no hash: (sluice --hash-key reads "
		                           "the secret and prints the line)");
	if (k->has_max_priority && k->has_default_priority &&
	    k->default_priority > k->max_priority) {
		const struct sl_config_node *d =
		    sl_config_node_get(n, "default-priority");
		return sl_config_node_fail(
		    err, size, d,
		    "%s is above max-priority %s: it could never apply",
		    k->default_priority_text, k->max_priority_text);
	}
	return 0;
}

static int by_hash(const void *a, const void *b)
{
	return memcmp(((const struct sl_key *)a)->hash,
	              ((const struct sl_key *)b)->hash, SL_KEYS_HASH_LEN);
}

int sl_keys_config_apply(struct sl_config *cfg, const struct sl_config_node *n,
                         char *err, size_t size)
{
	if (n->n > SL_KEYS_MAX)
		return sl_config_node_fail(err, size, n,
		                           "%u keys, over the %u allowed", n->n,
		                           SL_KEYS_MAX);
	struct sl_keys *keys = sl_xcalloc(1, sizeof(*keys));
	keys->v = sl_xcalloc(n->n ? n->n : 1, sizeof(*keys->v));
	int rc = 0;
	for (unsigned i = 0; rc == 0 && i < n->n; i++) {
		rc = read_key(&keys->v[i], &n->child[i], err, size);
		keys->n++;
	}
	/* Two names for one secret: which tenant would it be? */
	for (unsigned i = 0; rc == 0 && i < keys->n; i++)
		for (unsigned j = 0; rc == 0 && j < i; j++)
			if (memcmp(keys->v[i].hash, keys->v[j].hash,
			           SL_KEYS_HASH_LEN) == 0)
				rc = sl_config_node_fail(
				    err, size,
				    sl_config_node_get(&n->child[i], "hash"),
				    "the same hash as key %s: one secret, one "
				    "key",
				    keys->v[j].name);
	if (rc != 0) {
		sl_keys_free(keys);
		return rc;
	}
	qsort(keys->v, keys->n, sizeof(*keys->v), by_hash);
	sl_keys_free(cfg->keys);
	cfg->keys = keys;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp((*(const struct sl_key *const *)a)->name,
	              (*(const struct sl_key *const *)b)->name);
}

void sl_keys_config_print(FILE *out, const struct sl_config *cfg)
{
	const struct sl_keys *keys = cfg->keys;
	if (!keys)
		return;
	/* By name: the table's own order (by digest) means nothing to a reader.
	 */
	const struct sl_key **order =
	    sl_xcalloc(keys->n ? keys->n : 1, sizeof(*order));
	for (unsigned i = 0; i < keys->n; i++)
		order[i] = &keys->v[i];
	qsort(order, keys->n, sizeof(*order), by_name);
	/* An empty section still requires a key (keys.h): keep it. */
	fputs(keys->n ? "keys:\n" : "keys: {}\n", out);
	for (unsigned i = 0; i < keys->n; i++) {
		const struct sl_key *k = order[i];
		fprintf(out, "  %s:\n    hash: %s\n", k->name, k->hash_text);
		if (!k->any_model) {
			fputs("    models: [", out);
			for (unsigned m = 0; m < k->n_models; m++) {
				if (m)
					fputs(", ", out);
				sl_config_file_write_scalar(out, k->models[m]);
			}
			fputs("]\n", out);
		}
		if (k->has_max_priority)
			fprintf(out, "    max-priority: %s\n",
			        k->max_priority_text);
		if (k->has_default_priority)
			fprintf(out, "    default-priority: %s\n",
			        k->default_priority_text);
		if (k->rpm)
			fprintf(out, "    rpm: %u\n", k->rpm);
		if (k->tpm)
			fprintf(out, "    tpm: %u\n", k->tpm);
		if (k->max_concurrent)
			fprintf(out, "    max-concurrent: %u\n",
			        k->max_concurrent);
		if (k->weight_text)
			fprintf(out, "    weight: %s\n", k->weight_text);
		sl_slo_print(out, &k->slo, 4);
	}
	free(order);
}

int sl_keys_hash_stdin(FILE *in, FILE *out, char *err, size_t size)
{
	char buf[SL_API_KEY_MAX + 3];
	err[0] = '\0';
	size_t len = fread(buf, 1, sizeof(buf), in);
	if (ferror(in)) {
		snprintf(err, size,
		         "--hash-key: cannot read standard input: %s",
		         strerror(errno));
		return SL_EINVAL;
	}
	/* One trailing newline, as `echo` and editors leave it. */
	if (len > 0 && buf[len - 1] == '\n') {
		len--;
		if (len > 0 && buf[len - 1] == '\r')
			len--;
	}
	int rc = 0;
	if (len == 0)
		snprintf(err, size,
		         "--hash-key: no secret on standard input (pipe it "
		         "in: printf %%s SECRET | sluice --hash-key)");
	else if (len > SL_API_KEY_MAX)
		snprintf(err, size, "--hash-key: a secret over %u bytes",
		         SL_API_KEY_MAX);
	for (size_t i = 0; len <= SL_API_KEY_MAX && i < len && !err[0]; i++)
		if ((unsigned char)buf[i] <= 0x20 ||
		    (unsigned char)buf[i] == 0x7f)
			snprintf(err, size,
			         "--hash-key: the secret holds a space or a "
			         "control byte, which a client cannot send in "
			         "a header");
	if (err[0]) {
		rc = SL_EINVAL;
	} else {
		unsigned char digest[SL_KEYS_HASH_LEN];
		sl_keys_digest(buf, len, digest);
		fputs("hash: " HASH_PREFIX, out);
		for (unsigned i = 0; i < SL_KEYS_HASH_LEN; i++)
			fprintf(out, "%02x", digest[i]);
		fputc('\n', out);
	}
	explicit_bzero(buf, sizeof(buf));
	return rc;
}

/*
 * access.c: client keys, the admin key and CORS preflights (see access.h).
 *
 * The keys come from the configuration (config.c read them once, at
 * start); this file only compares. A key is read as llama-server 0.7.0
 * reads it: the Authorization header when it is not empty, else X-Api-Key,
 * either without a leading "Bearer " (case-sensitive, one space, as
 * there). So "Authorization: Bearer KEY", "Authorization: KEY" and
 * "X-Api-Key: KEY" all work, and a wrong Authorization is not rescued by a
 * right X-Api-Key.
 *
 * Comparison in constant time: every key is compared over SL_API_KEY_MAX
 * bytes, zero-padded (no key holds a zero byte, and the lengths are
 * compared too), reading every byte of every configured key whatever
 * matched. How long a check takes thus depends on how many keys there are,
 * never on how much of one a client guessed. This needs no hash and no new
 * library: the padding does what hashing to equal-length digests would.
 * (The lengths still show in the cost of copying, a few nanoseconds; a key
 * length is not a secret worth a dependency.)
 *
 * The configuration file's keys: (keys.h) are kept only as SHA-256 digests,
 * so a presented key is digested and looked up by its digest there; the
 * key found names the request's tenant, whose models, priority and limits
 * sl_access_admit() applies once the request is validated.
 */
#include "sluice/relay/access.h"

#include "sluice/tenants/keys.h"
#include "sluice/base/log.h"
#include "sluice/relay/request.h"
#include "sluice/sched/sched.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* What the request's key turned out to be. */
enum key_kind {
	KEY_NONE,   /* absent, or matches no key */
	KEY_CLIENT, /* one of --api-key / --api-key-file */
	KEY_TENANT, /* one of the configuration file's keys: (keys.h) */
	KEY_ADMIN,  /* --admin-key */
};

/*
 * The preflight's answer, as llama-server 0.7.0 sends it, plus Max-Age:
 * browsers cache a preflight for that long (Chromium caps it at 7200 s, two
 * hours; Firefox at a day), so that a page streaming many completions asks
 * once. llama-server sends none, which browsers read as 5 s.
 */
#define SL_ACCESS_PREFLIGHT_MAX_AGE_S 7200
#define SL_ACCESS_PREFLIGHT_METHODS "GET, POST, DELETE, OPTIONS"

/* llama-server's message for a missing or wrong key, word for word. */
#define SL_ACCESS_BAD_KEY_MESSAGE "Invalid API Key"

/*
 * The challenge a refusal of the status page carries, so that a browser
 * asks a person for the key (RFC 7617): any user name, the key as the
 * password.
 */
#define SL_ACCESS_BASIC_CHALLENGE                                              \
	"WWW-Authenticate: Basic realm=\"sluice\", charset=\"UTF-8\"\r\n"

/* A base64 character's value, or -1. */
static int base64_value(char c)
{
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                               "abcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *p = c ? strchr(alphabet, c) : NULL;
	return p ? (int)(p - alphabet) : -1;
}

/*
 * The password of Basic credentials ("Basic BASE64(user:password)") into
 * out (`size` bytes, NUL-terminated); returns its length, or -1 when the
 * credentials are not well formed or do not fit. The whole decoded text
 * goes through `out` and is cleared but for the password.
 */
static long basic_password(const char *creds, char *out, size_t size)
{
	size_t n = 0;
	unsigned bits = 0, acc = 0;
	const char *p = creds;
	for (; *p && *p != '='; p++) {
		int v = base64_value(*p);
		if (v < 0)
			return -1;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (n + 1 >= size)
				return -1;
			out[n++] = (char)((acc >> bits) & 0xff);
		}
	}
	while (*p == '=')
		p++;
	out[n] = '\0';
	char *colon = memchr(out, ':', n);
	if (*p || !colon || memchr(out, '\0', n)) {
		memset(out, 0, size);
		return -1;
	}
	size_t len = n - (size_t)(colon + 1 - out);
	memmove(out, colon + 1, len + 1);
	memset(out + len, 0, size - len);
	return (long)len;
}

/*
 * The key the request carries, or NULL; *len is its length. With `basic`
 * (SL_ACCESS_STATUS), Basic credentials' password counts too, decoded
 * into `buf` (SL_API_KEY_MAX + 2 bytes: a longer one is no key).
 */
static const char *presented_key(const struct sl_http_request *req, size_t *len,
                                 bool basic, char *buf)
{
	const char *key = sl_http_header(req, "Authorization");
	if (!key || !key[0])
		key = sl_http_header(req, "X-Api-Key");
	if (!key)
		return NULL;
	static const char scheme[] = "Basic ";
	if (basic && strncmp(key, scheme, sizeof(scheme) - 1) == 0) {
		long n = basic_password(key + sizeof(scheme) - 1, buf,
		                        SL_API_KEY_MAX + 2);
		if (n < 0)
			return NULL;
		*len = (size_t)n;
		return buf;
	}
	/* Exactly this prefix: "Bearer  KEY" (two spaces) fails there too. */
	static const char bearer[] = "Bearer ";
	if (strncmp(key, bearer, sizeof(bearer) - 1) == 0)
		key += sizeof(bearer) - 1;
	*len = strlen(key);
	return key;
}

/* key into a zeroed buffer of SL_API_KEY_MAX bytes; len <= the maximum. */
static void pad(unsigned char *out, const char *key, size_t len)
{
	memset(out, 0, SL_API_KEY_MAX);
	memcpy(out, key, len);
}

/*
 * Whether two padded keys are equal, reading all SL_API_KEY_MAX bytes
 * whatever they hold. The volatile reads keep the compiler from stopping
 * at the first difference it could prove.
 */
static bool same_key(const unsigned char *a, size_t a_len,
                     const unsigned char *b, size_t b_len)
{
	const volatile unsigned char *va = a, *vb = b;
	unsigned diff = (unsigned)(a_len ^ b_len);
	for (size_t i = 0; i < SL_API_KEY_MAX; i++)
		diff |= (unsigned)(va[i] ^ vb[i]);
	return diff == 0;
}

/* Which configured key `key` (len bytes) is: see key_kind(). */
static enum key_kind match_key(const struct sl_relay *relay,
                               struct sl_http_request *req, const char *key,
                               size_t len)
{
	const struct sl_config *cfg = relay->cfg;
	unsigned char given[SL_API_KEY_MAX], known[SL_API_KEY_MAX];
	pad(given, key, len);
	bool client = false, admin = false;
	for (unsigned i = 0; i < cfg->api_keys.count; i++) {
		const char *k = cfg->api_keys.items[i];
		size_t k_len = strlen(k);
		pad(known, k, k_len);
		client |= same_key(given, len, known, k_len);
	}
	if (cfg->admin_key[0]) {
		size_t k_len = strlen(cfg->admin_key);
		pad(known, cfg->admin_key, k_len);
		admin = same_key(given, len, known, k_len);
	}
	/* The request's key stays in its own memory; these copies go. */
	memset(given, 0, sizeof(given));
	memset(known, 0, sizeof(known));
	const struct sl_key *tenant =
	    sl_tenants_lookup(relay->tenants, key, len);
	if (tenant) {
		req->info.tenant = tenant->tenant;
		req->info.key = tenant->tenant->name;
	}
	return admin    ? KEY_ADMIN
	       : tenant ? KEY_TENANT
	       : client ? KEY_CLIENT
	                : KEY_NONE;
}

/*
 * Which of the configured keys the request carries, checking them all.
 * A key of keys: is found by its digest (keys.h); its tenant goes on the
 * request, for the limits, the usage and the access log.
 */
static enum key_kind key_kind(const struct sl_relay *relay,
                              struct sl_http_request *req, bool basic)
{
	size_t len = 0;
	char decoded[SL_API_KEY_MAX + 2];
	const char *key = presented_key(req, &len, basic, decoded);
	enum key_kind kind = KEY_NONE;
	/* Too long for any key: a mismatch, whatever the keys are. */
	if (key && len > 0 && len <= SL_API_KEY_MAX)
		kind = match_key(relay, req, key, len);
	if (key == decoded)
		memset(decoded, 0, sizeof(decoded));
	return kind;
}

/* `challenge`: Basic credentials would do (SL_ACCESS_STATUS). */
static void refuse_unauthenticated(struct sl_http_request *req, bool challenge)
{
	sl_debug("access: %s %s refused: no valid key",
	         llhttp_method_name(req->method), req->path);
	sl_http_respond_error(req, 401, "authentication_error",
	                      challenge ? SL_ACCESS_BASIC_CHALLENGE : NULL,
	                      SL_ACCESS_BAD_KEY_MESSAGE);
}

bool sl_access_allow(struct sl_relay *relay, struct sl_http_request *req,
                     enum sl_access level)
{
	const struct sl_config *cfg = relay->cfg;
	/* keys: once set stays required, even emptied by a reload (keys.h). */
	bool client_keys =
	    cfg->api_keys.count > 0 || sl_tenants_required(relay->tenants);
	bool admin_key = cfg->admin_key[0] != '\0';

	/*
	 * The status page is guarded as /metrics is, but a request without
	 * any key is asked for one (401 with the Basic challenge), also where
	 * /metrics would say 403, so that a browser asks its person.
	 */
	bool basic = level == SL_ACCESS_STATUS;
	/* Without an admin key, /metrics is one more client endpoint. */
	if (level == SL_ACCESS_METRICS || level == SL_ACCESS_STATUS)
		level = admin_key ? SL_ACCESS_ADMIN : SL_ACCESS_CLIENT;
	if (level == SL_ACCESS_PUBLIC ||
	    (level == SL_ACCESS_CLIENT && !client_keys))
		return true;

	enum key_kind kind = key_kind(relay, req, basic);
	if (level == SL_ACCESS_CLIENT) {
		if (kind != KEY_NONE)
			return true;
		refuse_unauthenticated(req, basic);
		return false;
	}
	/* SL_ACCESS_ADMIN */
	if (kind == KEY_ADMIN)
		return true;
	if ((client_keys || basic) && kind == KEY_NONE) {
		refuse_unauthenticated(req, basic);
		return false;
	}
	sl_debug("access: %s %s refused: %s", llhttp_method_name(req->method),
	         req->path,
	         admin_key ? "not the admin key" : "no --admin-key is set");
	if (admin_key)
		sl_http_respond_error(req, 403, "permission_error", NULL,
		                      "%s %s needs the admin key",
		                      llhttp_method_name(req->method),
		                      req->path);
	else
		sl_http_respond_error(
		    req, 403, "permission_error", NULL,
		    "%s %s is an admin action, and this sluice has no admin "
		    "key (--admin-key): it refuses every admin action",
		    llhttp_method_name(req->method), req->path);
	return false;
}

/* X-Priority as a user writes it: a class name where it is one. */
static void format_priority(double p, char *buf, size_t size)
{
	if (p == SL_PRIORITY_URGENT || p == SL_PRIORITY_NORMAL ||
	    p == SL_PRIORITY_BATCH) {
		struct sl_join j = {.p = buf, .cap = size};
		sl_join_str(&j, sl_priority_class(p));
	} else {
		snprintf(buf, size, "%g", p);
	}
}

/* "X-Priority: P\r\n" after `from` bytes of the tenant's own headers. */
static void priority_header(struct sl_http_request *req, size_t from, double p)
{
	char text[32];
	format_priority(p, text, sizeof(text));
	struct sl_join j = {.p = req->own_headers,
	                    .len = from,
	                    .cap = sizeof(req->own_headers)};
	sl_join_str(&j, "X-Priority: ");
	sl_join_str(&j, text);
	sl_join_str(&j, "\r\n");
}

/* OpenAI's error shape with a code: {"error":{message,type,param,code}}. */
static void respond_coded(struct sl_http_request *req, int status,
                          const char *type, const char *param, const char *code,
                          const char *message)
{
	json_t *doc =
	    json_pack("{s:{s:s, s:s, s:s?, s:s}}", "error", "message", message,
	              "type", type, "param", param, "code", code);
	char *body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	sl_http_respond(req, status, SL_HTTP_JSON, NULL, body, strlen(body));
	free(body);
}

bool sl_access_model_allowed(struct sl_relay *relay, const struct sl_key *key,
                             const struct sl_model *m)
{
	if (key->any_model)
		return true;
	if (!relay->registry->model_section)
		return sl_keys_allows_model(key, m->name);
	for (unsigned i = 0; i < key->n_models; i++)
		if (sl_registry_find(relay->registry, key->models[i]) == m)
			return true;
	return false;
}

bool sl_access_admit(struct sl_relay *relay, struct sl_http_request *req,
                     bool limited, double *priority,
                     const struct sl_request *checked, struct sl_model *m,
                     const char *named)
{
	struct sl_tenant *t = req->info.tenant;
	/*
	 * The model's own name, for the usage labels (a bounded set) and the
	 * status page's last requests.
	 */
	struct sl_join model = SL_JOIN(req->info.model);
	sl_join_str(&model, m->name);
	if (!t || !t->key) {
		/* Every queued request's answer says the priority it got. */
		if (limited)
			priority_header(req, 0, *priority);
		return true;
	}
	/*
	 * The model first, so that a key learns nothing of other models'
	 * limits; it is checked here rather than by sl_tenant_admit (a.model
	 * stays NULL), since only the app knows what a name stands for.
	 */
	struct sl_admission a = {.limited = limited,
	                         .priority = *priority,
	                         .priority_given = checked->priority_given,
	                         .max_tokens = checked->max_tokens,
	                         .outputs = checked->outputs,
	                         .body_bytes = checked->body_len};
	enum sl_admit verdict = SL_ADMIT_MODEL;
	if (sl_access_model_allowed(relay, t->key, m))
		verdict = sl_tenant_admit(t->key, &a, uv_now(relay->loop));
	struct sl_join own = SL_JOIN(req->own_headers);
	sl_join_str(&own, a.headers);
	if (limited)
		priority_header(req, own.len, a.priority);
	req->info.counted = a.counted;
	req->info.tokens_reserved = a.reserved;
	*priority = a.priority;
	switch (verdict) {
	case SL_ADMIT_OK: return true;
	case SL_ADMIT_MODEL: {
		/* Word for word what an unknown model gets. */
		char message[SL_KEYS_MODEL_MAX + 64];
		snprintf(message, sizeof(message),
		         "The model `%.*s` does not exist.", SL_KEYS_MODEL_MAX,
		         named ? named : m->name);
		respond_coded(req, 404, "invalid_request_error", "model",
		              "model_not_found", message);
		return false;
	}
	case SL_ADMIT_REQUESTS:
	case SL_ADMIT_TOKENS:
	case SL_ADMIT_TOO_LARGE:
	case SL_ADMIT_CONCURRENCY:
		req->info.reject_reason = "key_limit";
		req->info.outcome = "rejected";
		respond_coded(req, 429,
		              verdict == SL_ADMIT_TOKENS ||
		                      verdict == SL_ADMIT_TOO_LARGE
		                  ? "tokens"
		                  : "requests",
		              NULL, "rate_limit_exceeded", a.message);
		return false;
	}
	return true;
}

bool sl_access_is_preflight(const struct sl_relay *relay,
                            const struct sl_http_request *req)
{
	/*
	 * With CORS off, OPTIONS is a method like any other (the routes say
	 * 405 or 404): a browser then refuses the cross-origin call, as it
	 * should.
	 */
	return req->method == HTTP_OPTIONS &&
	       relay->cfg->cors_origins.count > 0;
}

bool sl_access_preflight(struct sl_relay *relay, struct sl_http_request *req)
{
	if (!sl_access_is_preflight(relay, req))
		return false;
	/*
	 * An origin not on the list gets a plain 200: without the allow
	 * headers the browser refuses the call, and nothing about the list
	 * is revealed. The server adds Access-Control-Allow-Origin itself.
	 */
	if (!sl_http_cors_origin(req)) {
		sl_http_respond(req, 200, NULL, NULL, "", 0);
		return true;
	}
	char extra[256];
	snprintf(extra, sizeof(extra),
	         "Access-Control-Allow-Credentials: true\r\n"
	         "Access-Control-Allow-Methods: %s\r\n"
	         "Access-Control-Allow-Headers: *\r\n"
	         "Access-Control-Max-Age: %d\r\n",
	         SL_ACCESS_PREFLIGHT_METHODS, SL_ACCESS_PREFLIGHT_MAX_AGE_S);
	sl_http_respond(req, 200, NULL, extra, "", 0);
	return true;
}

/* request.c: a client's JSON body, checked, and spliced for the upstream. */
#include "sluice/relay/request.h"

#include "sluice/base/common.h"
#include "sluice/json/json_scan.h"
#include "sluice/json/json_valid.h"
#include "sluice/json/native_api.h"
#include "sluice/sched/sched.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * llama-server reads n_discard into a 32-bit int: a larger value wraps to
 * a negative one there, which is what the check on it exists to stop.
 */
#define SL_N_DISCARD_MAX INT32_MAX
/*
 * Room beyond the client's body for what sluice inserts ("stream" and
 * "stream_options"), so that a splice usually needs one allocation.
 */
#define SL_SPLICE_SLACK 128

SL_PRINTF(2, 3)
static int refuse(struct sl_request *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->error, sizeof(r->error), fmt, ap);
	va_end(ap);
	r->status = 400;
	return SL_EINVAL;
}

/*
 * The most tokens a JSON text of `len` bytes can hold: every token but one
 * takes two bytes at least (a container its brackets, a string its quotes,
 * a primitive its byte and the comma or colon before it; [1,1,1] is the
 * densest), so this bound never refuses valid JSON. It only sizes jsmn's
 * allocation by the body, which http.c caps (--max-body).
 */
static unsigned max_tokens_for(size_t len)
{
	return (unsigned)SL_MIN(len / 2 + 1, (size_t)UINT32_MAX);
}

/*
 * The scan of a body that the splice and the fast path read: its
 * top-level members, each value one token, containers skipped whole
 * (json_scan.h's shallow scan, opening none), since sluice reads and
 * changes nothing deeper. Tokens for every value inside would cost an
 * allocation as large as ten times the body, and jsmn's walk up the
 * levels at each closing bracket: 40 ms of the loop for a 1 MiB body of
 * arrays 62 deep side by side, against 2 for the skip.
 */
static int scan_members(struct sl_jscan *scan, const char *body, size_t len)
{
	return sl_jscan_parse_shallow(scan, body, len, NULL, 0,
	                              max_tokens_for(len));
}

/* Whether n bytes at p are one number in JSON's grammar. */
static bool is_json_number(const char *p, size_t n)
{
	size_t i = 0;
	if (i < n && p[i] == '-')
		i++;
	if (i < n && p[i] == '0')
		i++;
	else if (i < n && p[i] >= '1' && p[i] <= '9')
		while (i < n && p[i] >= '0' && p[i] <= '9')
			i++;
	else
		return false;
	if (i < n && p[i] == '.') {
		size_t digits = ++i;
		while (i < n && p[i] >= '0' && p[i] <= '9')
			i++;
		if (i == digits)
			return false;
	}
	if (i < n && (p[i] == 'e' || p[i] == 'E')) {
		i++;
		if (i < n && (p[i] == '+' || p[i] == '-'))
			i++;
		size_t digits = i;
		while (i < n && p[i] >= '0' && p[i] <= '9')
			i++;
		if (i == digits)
			return false;
	}
	return i == n;
}

/*
 * Replaces the number of n bytes at p, when jansson cannot hold it, by a
 * stand-in of the same kind and sign, no longer than it, padded with
 * spaces: an integer beyond int64 (19 digits at least, 20 characters when
 * negative) by the nearest int64, a real beyond double (2e308 at least) by
 * 1e308. p is followed by a delimiter or the copy's terminating NUL.
 */
static void put_stand_in(char *p, size_t n)
{
	if (!is_json_number(p, n))
		return;
	const char *stand_in = NULL;
	bool negative = p[0] == '-';
	bool integer =
	    !memchr(p, '.', n) && !memchr(p, 'e', n) && !memchr(p, 'E', n);
	errno = 0;
	if (integer) {
		(void)strtoll(p, NULL, 10);
		if (errno == ERANGE)
			stand_in = negative ? "-9223372036854775808"
			                    : "9223372036854775807";
	} else {
		double v = strtod(p, NULL);
		if (errno == ERANGE && isinf(v))
			stand_in = negative ? "-1e308" : "1e308";
	}
	if (!stand_in)
		return;
	size_t len = strlen(stand_in);
	memcpy(p, stand_in, len);
	memset(p + len, ' ', n - len);
}

/*
 * jansson refuses numbers it cannot hold, integers beyond int64 and reals
 * beyond double, where llama-server takes the integers (a seed of 2^64-1
 * is accepted and wraps) and answers the reals with a 400 of its own. So a
 * relayed body that jansson refuses for such a number is validated as a
 * copy with stand-ins (put_stand_in) in their place, while the client's
 * text is what goes upstream: llama-server reads the numbers as it always
 * does. Offsets are unchanged, so a later error is reported where it is.
 * The scan of the client's text made here is the one the splice uses.
 */
static json_t *load_with_stand_ins(const char *body, size_t len,
                                   struct sl_jscan *scan, json_error_t *err)
{
	if (sl_jscan_parse(scan, body, len, max_tokens_for(len)) != 0)
		return NULL;
	char *copy = sl_xmalloc(len + 1);
	memcpy(copy, body, len);
	copy[len] = '\0';
	for (int i = 0; i < scan->n; i++)
		if (sl_jscan_type(scan, i) == JSMN_PRIMITIVE)
			put_stand_in(copy + scan->tok[i].start,
			             sl_jscan_len(scan, i));
	json_t *doc = json_loadb(copy, len, JSON_ALLOW_NUL, err);
	free(copy);
	return doc;
}

/* What kind of value v is, for a message: "a number", "an object"... */
static const char *json_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER:
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

/*
 * Checks the fields sluice itself relies on in a parsed body: "stream",
 * "n_discard" and "model", which it copies to r->model. Returns doc, or
 * NULL with the refusal in r (doc released). The native fast path
 * (native_members) hands it a document of a few members only: what it
 * reads is listed there.
 */
static json_t *check_fields(struct sl_request *r, json_t *doc)
{
	/* NULL when absent, and when the body is no object. */
	json_t *v, *model = json_object_get(doc, "model");
	int rc = 0;
	if (!json_is_object(doc))
		rc = refuse(r, "the request body must be a JSON object");
	else if ((v = json_object_get(doc, "stream")) && !json_is_boolean(v))
		rc = refuse(r, "\"stream\" must be true or false");
	else if ((v = json_object_get(doc, "n_discard")) &&
	         (!json_is_integer(v) || json_integer_value(v) < 0 ||
	          json_integer_value(v) > SL_N_DISCARD_MAX))
		/* A negative n_discard overflowed llama-server's heap once. */
		rc = refuse(r, "\"n_discard\" must be a non-negative integer "
		               "below 2^31");
	else if (model && !json_is_null(model) && !json_is_string(model))
		/*
		 * Not "no model": one named wrongly, which must not go to the
		 * default model. (llama-server 0.7.0 serves it with its one
		 * model; in router mode it says the name is missing.) null
		 * means none, as llama-server reads it.
		 */
		rc = refuse(r,
		            "\"model\" must be a string, the name of a "
		            "model; got %s",
		            json_kind(model));
	else if (json_is_string(model) &&
	         strlen(json_string_value(model)) != json_string_length(model))
		rc = refuse(r, "\"model\" holds a NUL character; no model is "
		               "named so");
	if (rc != 0) {
		json_decref(doc);
		return NULL;
	}
	/* Which model: read here, once, for the router (registry.h). */
	if (json_is_string(model))
		r->model = sl_xstrdup(json_string_value(model));
	return doc;
}

/*
 * Parses the JSON body and checks the fields sluice itself relies on
 * (check_fields). A string may hold \u0000 (JSON allows it), so the parser
 * is told to accept NUL. `scan` is given for relayed bodies, which may hold
 * numbers beyond jansson's range (load_with_stand_ins); it may come back
 * filled.
 */
static json_t *parse_body(struct sl_request *r, const char *body, size_t len,
                          struct sl_jscan *scan)
{
	json_error_t jerr;
	json_t *doc = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
	if (!doc && scan &&
	    json_error_code(&jerr) == json_error_numeric_overflow)
		doc = load_with_stand_ins(body, len, scan, &jerr);
	if (!doc) {
		refuse(r,
		       "malformed JSON in the request body at line %d, column "
		       "%d (byte %d): %s",
		       jerr.line, jerr.column, jerr.position, jerr.text);
		return NULL;
	}
	return check_fields(r, doc);
}

/* Refuses a priority text, quoting at most SL_REQUEST_QUOTE_MAX bytes. */
static int bad_priority(struct sl_request *r, const char *where,
                        const char *text, size_t len)
{
	size_t shown = SL_MIN(len, (size_t)SL_REQUEST_QUOTE_MAX);
	/* Cut between characters: the message must stay valid UTF-8. */
	while (shown > 0 && shown < len && (text[shown] & 0xc0) == 0x80)
		shown--;
	return refuse(r,
	              "%s: expected urgent, normal, batch or a number from %g "
	              "to %g, got \"%.*s\"%s",
	              where, SL_PRIORITY_MIN, SL_PRIORITY_MAX, (int)shown, text,
	              len > shown ? "..." : "");
}

/*
 * The priority: X-Priority, else the body's "priority" (removed: it is
 * sluice's, not llama-server's), else normal. The whole value counts: a
 * string is parsed in full (one holding a NUL is refused, not cut short),
 * and a JSON number is taken as the number it is. `written` is the
 * number's text as the client wrote it when known (relayed bodies), which
 * a refusal quotes: it may be beyond what jansson holds (1e400).
 */
static int take_priority(struct sl_request *r, json_t *doc, const char *header,
                         const char *written, size_t written_len)
{
	json_t *field = json_object_get(doc, "priority");
	r->priority_given = header || field;
	if (header) {
		if (sl_priority_parse(header, &r->priority) != 0)
			return bad_priority(r, "X-Priority", header,
			                    strlen(header));
	} else if (json_is_string(field)) {
		const char *text = json_string_value(field);
		size_t len = json_string_length(field);
		if (strlen(text) != len ||
		    sl_priority_parse(text, &r->priority) != 0)
			return bad_priority(r, "\"priority\"", text, len);
	} else if (json_is_number(field)) {
		double v = json_number_value(field);
		if (!isfinite(v) || v < SL_PRIORITY_MIN ||
		    v > SL_PRIORITY_MAX) {
			/* The number as written, or else as jansson read it. */
			char got[SL_REQUEST_QUOTE_MAX + sizeof("...")];
			size_t shown =
			    SL_MIN(written_len, (size_t)SL_REQUEST_QUOTE_MAX);
			if (written)
				snprintf(got, sizeof(got), "%.*s%s", (int)shown,
				         written,
				         written_len > shown ? "..." : "");
			else
				snprintf(got, sizeof(got), "%.17g", v);
			return refuse(r,
			              "\"priority\": expected urgent, normal, "
			              "batch or a number from %g to %g, got %s",
			              SL_PRIORITY_MIN, SL_PRIORITY_MAX, got);
		}
		r->priority = v;
	} else if (field) {
		return refuse(r, "\"priority\" must be urgent, normal, batch "
		                 "or a number");
	}
	json_object_del(doc, "priority");
	return 0;
}

/*
 * Whether key token k names `name` once its escapes are decoded: jansson
 * and llama-server both read "str\u0065am" as "stream", so the splice must
 * too. The names sluice looks for are ASCII.
 */
static bool key_is(const struct sl_jscan *s, int k, const char *name)
{
	static const char escaped[] = "\"\\/bfnrt";
	static const char meant[] = "\"\\/\b\f\n\r\t";
	const char *p = sl_jscan_text(s, k), *end = p + sl_jscan_len(s, k);
	for (; *name; name++) {
		if (p == end)
			return false;
		unsigned long c = (unsigned char)*p++;
		if (c == '\\' && p < end && *p == 'u' && end - p >= 5) {
			char hex[5] = {p[1], p[2], p[3], p[4], '\0'};
			c = strtoul(hex, NULL, 16);
			p += 5;
		} else if (c == '\\' && p < end && strchr(escaped, *p)) {
			c = (unsigned char)meant[strchr(escaped, *p) - escaped];
			p++;
		}
		if (c != (unsigned char)*name)
			return false;
	}
	return p == end;
}

/*
 * The top-level members of the scanned object, in order: key token k, its
 * value k + 1. Call with k = 1 and m = 0.
 */
#define FOR_EACH_MEMBER(s, m, k)                                               \
	for (int m = 0, k = 1; m < (s)->tok[0].size;                           \
	     m++, k = sl_jscan_skip((s), k + 1))

/* The value of the last top-level member `name` (jansson's), or -1. */
static int last_member(const struct sl_jscan *s, const char *name)
{
	int found = -1;
	FOR_EACH_MEMBER(s, m, k)
	{
		if (key_is(s, k, name))
			found = k + 1;
	}
	return found;
}

/* The upstream body as it is built: a growing copy. */
struct splice {
	char *p;
	size_t len, cap;
};

static void put(struct splice *o, const char *text, size_t n)
{
	if (o->len + n > o->cap) {
		o->cap = SL_MAX(o->cap * 2, o->len + n);
		o->p = sl_xrealloc(o->p, o->cap);
	}
	memcpy(o->p + o->len, text, n);
	o->len += n;
}

static void put_str(struct splice *o, const char *text)
{
	put(o, text, strlen(text));
}

/* What sluice changes in a relayed body. */
struct changes {
	bool stream;         /* "stream": true */
	bool stream_options; /* "stream_options": {"include_usage": true} */
};

/*
 * The upstream body of a relayed request: the client's bytes, spliced.
 * Each top-level "priority" member is left out with the separator before
 * it (after it, for the first), the values of "stream" and
 * "stream_options" are replaced when asked, or the members added at the
 * end; everything else, spacing and number spelling included, is copied
 * as written. With nothing to change, the body is the client's, byte for
 * byte. The text was validated by jansson, so the scan's shape is JSON's.
 */
static void splice_body(struct sl_request *r, const struct sl_jscan *s,
                        struct changes want)
{
	static const char stream_value[] = "true";
	static const char usage_value[] = "{\"include_usage\":true}";
	const char *text = s->text;
	struct splice o = {.cap = s->len + SL_SPLICE_SLACK};
	o.p = sl_xmalloc(o.cap);
	/* Before the first member: the '{' and any spacing around it. */
	size_t prev_end = (size_t)s->tok[0].end - 1;
	bool emitted = false, has_stream = false, has_options = false;
	FOR_EACH_MEMBER(s, m, k)
	{
		size_t key_start, key_end, value_start, value_end;
		sl_jscan_extent(s, k, &key_start, &key_end);
		sl_jscan_extent(s, k + 1, &value_start, &value_end);
		if (m == 0)
			put(&o, text, key_start);
		const char *value = NULL;
		if (key_is(s, k, "priority")) {
			prev_end = value_end;
			continue;
		} else if (want.stream && key_is(s, k, "stream")) {
			value = stream_value;
			has_stream = true;
		} else if (want.stream_options &&
		           key_is(s, k, "stream_options")) {
			value = usage_value;
			has_options = true;
		}
		/* The separator before it, unless all before it are gone. */
		if (emitted)
			put(&o, text + prev_end, key_start - prev_end);
		if (value) {
			put(&o, text + key_start, value_start - key_start);
			put_str(&o, value);
		} else {
			put(&o, text + key_start, value_end - key_start);
		}
		emitted = true;
		prev_end = value_end;
	}
	if (s->tok[0].size == 0)
		put(&o, text, prev_end);
	if (want.stream && !has_stream) {
		put_str(&o, emitted ? ",\"stream\":" : "\"stream\":");
		put_str(&o, stream_value);
		emitted = true;
	}
	if (want.stream_options && !has_options) {
		put_str(&o, emitted ? ",\"stream_options\":"
		                    : "\"stream_options\":");
		put_str(&o, usage_value);
	}
	/* After the last member: the '}' and any spacing around it. */
	put(&o, text + prev_end, s->len - prev_end);
	put(&o, "", 1);
	r->body = o.p;
	r->body_len = o.len - 1;
}

/* What a relayed body says that decides how it is relayed. */
struct relay_facts {
	bool stream;        /* "stream": true */
	bool reproducible;  /* sl_assemble_reproducible() */
	bool return_tokens; /* "return_tokens": true */
};

/*
 * A relayed body. A generation the client wants as one answer is asked for
 * as a stream, and assembled (see assemble.h for why), when the endpoint
 * has an assembler and it rebuilds llama-server's plain answer to this
 * request exactly; OpenAI endpoints also need the usage event then. Any
 * other request goes as the client wrote it, less sluice's "priority".
 */
static void relay_body(struct sl_request *r, const struct sl_endpoint *ep,
                       struct relay_facts facts, const struct sl_jscan *scan,
                       const struct sl_request_options *opts)
{
	r->stream = facts.stream;
	r->assemblable = ep->assemble != SL_ASSEMBLE_NONE && !r->stream &&
	                 facts.reproducible;
	if (r->assemblable) {
		/* Kept either way: the exchange may ask for a stream when it
		 * is dispatched (sl_request_stream_body). */
		r->assemble = opts->stream_upstream;
		r->assemble_kind = ep->assemble;
		r->return_tokens = facts.return_tokens;
	}
	struct changes want = {
	    .stream = r->assemble,
	    .stream_options = r->assemble && ep->assemble != SL_ASSEMBLE_NATIVE,
	};
	splice_body(r, scan, want);
}

/* Past any tpm (SL_KEYS_RATE_MAX): a bound as good as none above it. */
#define SL_MAX_TOKENS_CAP INT64_C(4294967295)

/*
 * The output bound of a relayed body (request.h, max_tokens), from its
 * scan: every top-level member of the four names counts, duplicates too,
 * and a null is as if absent, as llama-server reads it.
 */
static int64_t token_bound(const struct sl_jscan *s)
{
	static const char *const names[] = {"n_predict", "max_tokens",
	                                    "max_completion_tokens",
	                                    "max_output_tokens"};
	int64_t bound = -1;
	FOR_EACH_MEMBER(s, m, k)
	{
		bool named = false;
		for (size_t i = 0; i < SL_ARRAY_SIZE(names) && !named; i++)
			named = key_is(s, k, names[i]);
		double v;
		if (!named || sl_jscan_is(s, k + 1, "null"))
			continue;
		if (!sl_jscan_number(s, k + 1, &v) || v < 0)
			return -1;
		/* llama-server truncates 2.5 to 2: rounding up is safe. */
		int64_t n = v >= (double)SL_MAX_TOKENS_CAP ? SL_MAX_TOKENS_CAP
		                                           : (int64_t)ceil(v);
		bound = SL_MAX(bound, n);
	}
	return bound;
}

/*
 * The outputs of each prompt (request.h, choices), as llama-server 0.7.0
 * reads them (measured): the last top-level "n_cmpl" unless it is null,
 * else the last "n"; a real truncated (1.5 gave one output). Anything
 * that is no number of 1 or more counts as 1: llama-server refuses it
 * and generates nothing.
 */
static uint32_t choices_of(const struct sl_jscan *s)
{
	int n_cmpl = -1, n = -1;
	FOR_EACH_MEMBER(s, m, k)
	{
		if (key_is(s, k, "n_cmpl"))
			n_cmpl = k + 1;
		else if (key_is(s, k, "n"))
			n = k + 1;
	}
	int v = n_cmpl >= 0 && !sl_jscan_is(s, n_cmpl, "null") ? n_cmpl : n;
	double d;
	if (v < 0 || !sl_jscan_number(s, v, &d) || !(d >= 1))
		return 1;
	return d >= (double)SL_REQUEST_OUTPUTS_MAX ? SL_REQUEST_OUTPUTS_MAX
	                                           : (uint32_t)d;
}

/*
 * The prompts of the last top-level "prompt", as llama-server 0.7.0
 * splits them (measured on /completion and /v1/completions): an array is
 * a prompt for each element (a string, an array of token ids, or one of
 * text and ids mixed), unless it holds a number itself, when it is one
 * prompt, of ids or of text and ids. Anything else is one prompt, and so
 * is an empty array (which llama-server refuses). The elements are
 * skipped, not tokenized: a prompt of ids costs a look at its first.
 */
static uint32_t prompts_of(const struct sl_jscan *s)
{
	int v = last_member(s, "prompt");
	if (v < 0 || sl_jscan_type(s, v) != JSMN_ARRAY)
		return 1;
	const char *text = sl_jscan_text(s, v);
	size_t len = sl_jscan_len(s, v), at = 0, start, end;
	uint32_t n = 0;
	while (sl_jscan_next_element(text, len, &at, &start, &end)) {
		if (text[start] == '-' ||
		    (text[start] >= '0' && text[start] <= '9'))
			return 1;
		n += n < SL_REQUEST_OUTPUTS_MAX;
	}
	return n > 0 ? n : 1;
}

/* A relayed body's outputs (request.h), where its endpoint reads them. */
static void count_outputs(struct sl_request *r, const struct sl_endpoint *ep,
                          const struct sl_jscan *s)
{
	if (ep->outputs & SL_OUTPUTS_N)
		r->choices = choices_of(s);
	uint64_t prompts = ep->outputs & SL_OUTPUTS_PROMPTS ? prompts_of(s) : 1;
	r->outputs = (uint32_t)SL_MIN((uint64_t)r->choices * prompts,
	                              (uint64_t)SL_REQUEST_OUTPUTS_MAX);
}

/* The native APIs' body: a new one, mapped onto /completion. */
static int native_body(struct sl_request *r, const struct sl_endpoint *ep,
                       json_t *doc, const struct sl_request_options *opts)
{
	char err[256];
	unsigned cap = opts->max_tokens_cap;
	json_t *out = ep->api == SL_API_GENERATE
	                  ? sl_generate_body(doc, cap, err, sizeof(err))
	                  : sl_infer_body(doc, cap, err, sizeof(err));
	if (!out)
		return refuse(r, "%s", err);
	r->max_tokens = json_integer_value(json_object_get(out, "n_predict"));
	r->stream = ep->api == SL_API_GENERATE &&
	            json_is_true(json_object_get(doc, "stream"));
	if (!r->stream) {
		r->assemble = r->assemblable = true;
		r->assemble_kind = SL_ASSEMBLE_NATIVE;
	}
	r->body = json_dumps(out, JSON_COMPACT);
	json_decref(out);
	/* json_dumps fails only when memory is gone: sl_xmalloc's rule. */
	if (!r->body)
		abort();
	r->body_len = strlen(r->body);
	return 0;
}

/*
 * The fast path for relayed bodies. jansson reads a 200-byte chat request
 * in about 2.7 us, yajl validates it in 0.4 (measured on the benchmark
 * machine), and a relayed body needs no document: the scan of its
 * top-level members that the splice uses (scan_members) finds the few
 * that sluice reads. So a body sl_json_valid() takes skips jansson, unless
 * it holds something that sluice must decode to check:
 *   - a top-level value that is no object (refused, by jansson's path);
 *   - an escaped member name, or a member whose value sluice checks or
 *     reads closely: "priority", "n_discard", "stream" other than true or
 *     false, "model" with an escape or other than a string or null, and
 *     what sl_assemble_member_matters() names.
 * Such bodies take jansson's path, whose refusals name line and column.
 * Either path gives the same result: fuzz_request compares them.
 * Returns true with `facts` and r->model filled, and `scan` holding the
 * body's top-level tokens; false with both left empty.
 */
static bool read_fast(struct sl_request *r, const char *body, size_t len,
                      struct sl_jscan *scan, struct relay_facts *facts)
{
	if (!sl_json_valid(body, len, false) ||
	    scan_members(scan, body, len) != 0)
		goto slow;
	/* Names without escapes (checked first) compare as written. */
	int stream = -1, model = -1;
	FOR_EACH_MEMBER(scan, m, k)
	{
		const char *name = sl_jscan_text(scan, k);
		size_t n = sl_jscan_len(scan, k);
		if (memchr(name, '\\', n) || sl_jscan_is(scan, k, "priority") ||
		    sl_jscan_is(scan, k, "n_discard") ||
		    sl_assemble_member_matters(name, n))
			goto slow;
		if (sl_jscan_is(scan, k, "stream"))
			stream = k + 1;
		else if (sl_jscan_is(scan, k, "model"))
			model = k + 1;
	}
	/* The last of each, as jansson reads duplicates. A boolean is a
	 * primitive: the string "false" reads as false too. */
	if (stream >= 0 && (sl_jscan_type(scan, stream) != JSMN_PRIMITIVE ||
	                    (!sl_jscan_is(scan, stream, "true") &&
	                     !sl_jscan_is(scan, stream, "false"))))
		goto slow;
	if (model >= 0 && sl_jscan_type(scan, model) == JSMN_STRING &&
	    memchr(sl_jscan_text(scan, model), '\\', sl_jscan_len(scan, model)))
		goto slow;
	/* Refused, in jansson's words; null is no model. */
	if (model >= 0 && sl_jscan_type(scan, model) != JSMN_STRING &&
	    !sl_jscan_is(scan, model, "null"))
		goto slow;
	*facts = (struct relay_facts){
	    .stream = stream >= 0 && sl_jscan_is(scan, stream, "true"),
	    /* Nothing sl_assemble_reproducible() reads is there. */
	    .reproducible = true,
	};
	if (model >= 0 && sl_jscan_type(scan, model) == JSMN_STRING) {
		size_t n = sl_jscan_len(scan, model);
		r->model =
		    memcpy(sl_xmalloc(n + 1), sl_jscan_text(scan, model), n);
		r->model[n] = '\0';
	}
	return true;
slow:
	sl_jscan_free(scan);
	return false;
}

/*
 * The members of a native request that anything reads: the mapping's
 * (native_api.h; "stream" among them, which check_fields reads too) and
 * those of check_fields and take_priority.
 */
#define NATIVE_KEY(name) SL_JSCAN_KEY(name),
static const struct sl_jscan_key native_read[] = {
    SL_NATIVE_MEMBERS(NATIVE_KEY) NATIVE_KEY("model") NATIVE_KEY("n_discard")
        NATIVE_KEY("priority")};
#undef NATIVE_KEY

/*
 * Value token v of a native body as native_members() puts it in its
 * document: what jansson reads from the value's text, except containers
 * whose contents nothing reads (native_api.h), which stand in as empty
 * ones of their kind, and a "stop" array (`stop`: opened by the scan) with
 * an element that is no string, which is refused alike as [null]. NULL
 * when jansson cannot read the text (the body was valid: not expected).
 */
static json_t *native_value(const struct sl_jscan *s, int v, bool stop)
{
	switch (sl_jscan_type(s, v)) {
	case JSMN_OBJECT: return json_object();
	case JSMN_ARRAY:
		if (!stop)
			return json_array();
		for (int i = 0, e = v + 1; i < s->tok[v].size;
		     i++, e = sl_jscan_skip(s, e))
			if (sl_jscan_type(s, e) != JSMN_STRING)
				return json_pack("[n]");
		break;
	default: break;
	}
	size_t start, end;
	sl_jscan_extent(s, v, &start, &end);
	return json_loadb(s->text + start, end - start,
	                  JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

/*
 * The fast path for the native APIs. /generate and /infer read a few
 * members and ignore the rest, and jansson's whole document of a wide
 * body cost the loop 40 to 90 ms a MiB (bench/json-bench.c). So a body
 * sl_json_valid() takes, with every number in jansson's range (a member
 * ignored must still be one jansson reads), is scanned for its top-level
 * members, each value one token (but "stop"'s elements), and the members
 * read (native_read) make a small document, each value parsed by jansson
 * from its own text (native_value): the last of each name, as jansson
 * keeps duplicates, names compared with their escapes decoded. The checks
 * and the mapping then read it as they read the whole body, with the same
 * result: fuzz_request compares the two paths. Returns the document, or
 * NULL to take jansson's path, which names line and column of a refusal:
 * for a body sl_json_valid() refuses, no object, or an escaped name that
 * means "stop" (the scan opens "stop" as written only).
 */
static json_t *native_members(const char *body, size_t len)
{
	static const struct sl_jscan_key open = SL_JSCAN_KEY("stop");
	if (!sl_json_valid(body, len, true))
		return NULL;
	struct sl_jscan scan;
	json_t *doc = NULL;
	if (sl_jscan_parse_shallow(&scan, body, len, &open, 1,
	                           max_tokens_for(len)) != 0)
		goto free_scan;
	int value[SL_ARRAY_SIZE(native_read)];
	for (size_t i = 0; i < SL_ARRAY_SIZE(native_read); i++)
		value[i] = -1;
	FOR_EACH_MEMBER(&scan, m, k)
	{
		const char *name = sl_jscan_text(&scan, k);
		size_t n = sl_jscan_len(&scan, k);
		bool escaped = memchr(name, '\\', n) != NULL;
		if (escaped && key_is(&scan, k, "stop"))
			goto free_scan;
		for (size_t i = 0; i < SL_ARRAY_SIZE(native_read); i++) {
			const struct sl_jscan_key *want = &native_read[i];
			if (escaped ? key_is(&scan, k, want->name)
			            : n == want->len &&
			                  memcmp(name, want->name, n) == 0) {
				value[i] = k + 1;
				break;
			}
		}
	}
	doc = json_object();
	for (size_t i = 0; i < SL_ARRAY_SIZE(native_read); i++) {
		if (value[i] < 0)
			continue;
		/* Written so, since an escaped "stop" went the slow way. */
		bool stop = strcmp(native_read[i].name, "stop") == 0;
		json_t *v = native_value(&scan, value[i], stop);
		if (!v) {
			json_decref(doc);
			doc = NULL;
			break;
		}
		json_object_set_new(doc, native_read[i].name, v);
	}
free_scan:
	sl_jscan_free(&scan);
	return doc;
}

static int validate(struct sl_request *r, const struct sl_endpoint *ep,
                    const char *priority_header, const char *body, size_t len,
                    const struct sl_request_options *opts)
{
	memset(r, 0, sizeof(*r));
	r->priority = SL_PRIORITY_NORMAL;
	r->choices = r->outputs = 1;
	/* A form (transcriptions) queues too: only the header may say how. */
	if (!ep->json_body)
		return ep->scheduled
		           ? take_priority(r, NULL, priority_header, NULL, 0)
		           : 0;
	/*
	 * Before any parser reads it: jsmn's time grows with depth, and
	 * jansson's limit (2048 levels, where yajl has none) lies beyond
	 * this one, so both paths read the same bodies.
	 */
	if (sl_jscan_shape(body, len) == SL_JSCAN_TOO_DEEP)
		return refuse(r,
		              "the request body nests objects and arrays "
		              "deeper than %d levels",
		              SL_JSCAN_DEPTH_MAX);
	if (ep->api != SL_API_RELAY) {
		json_t *doc =
		    opts->jansson_only ? NULL : native_members(body, len);
		r->read_fast = doc != NULL;
		doc =
		    doc ? check_fields(r, doc) : parse_body(r, body, len, NULL);
		if (!doc)
			return SL_EINVAL;
		int rc = take_priority(r, doc, priority_header, NULL, 0);
		if (rc == 0)
			rc = native_body(r, ep, doc, opts);
		json_decref(doc);
		return rc;
	}

	/* Empty until scanned; sl_jscan_free() takes it either way. Its 5 KB
	 * of inline tokens are left as they are: only a scan writes them. */
	struct sl_jscan scan;
	scan.text = NULL;
	scan.len = 0;
	scan.n = 0;
	scan.tok = scan.inline_tok;
	struct relay_facts facts;
	json_t *doc = NULL;
	int rc = SL_EINVAL;
	if (!opts->jansson_only && read_fast(r, body, len, &scan, &facts)) {
		/* No "priority" member: only the header may name one. */
		r->read_fast = true;
		rc = take_priority(r, NULL, priority_header, NULL, 0);
		goto relay;
	}
	doc = parse_body(r, body, len, &scan);
	if (!doc)
		goto free_scan;
	/*
	 * What jansson took and the scanner cannot: a raw NUL byte, which
	 * jansson 2.14 takes right after a number ([1\0]) and JSON nowhere,
	 * or a body beyond jsmn's int offsets.
	 */
	const char *nul = memchr(body, '\0', len);
	if (nul) {
		rc = refuse(r,
		            "malformed JSON in the request body at byte %zu: a "
		            "NUL byte",
		            (size_t)(nul - body));
		goto free_doc;
	}
	if (scan.n == 0 && scan_members(&scan, body, len) != 0) {
		rc = refuse(r, "the request body is too large to relay");
		goto free_doc;
	}
	int priority = last_member(&scan, "priority");
	const char *written = NULL;
	size_t written_len = 0;
	if (priority >= 0) {
		written = sl_jscan_text(&scan, priority);
		written_len = sl_jscan_len(&scan, priority);
	}
	rc = take_priority(r, doc, priority_header, written, written_len);
	facts = (struct relay_facts){
	    .stream = json_is_true(json_object_get(doc, "stream")),
	    .reproducible = sl_assemble_reproducible(ep->assemble, doc),
	    .return_tokens =
	        json_is_true(json_object_get(doc, "return_tokens")),
	};
relay:
	if (rc == 0) {
		r->max_tokens =
		    ep->stream_end == SL_END_NONE ? 0 : token_bound(&scan);
		count_outputs(r, ep, &scan);
		sl_affinity_key_of(&r->affinity, &scan);
		relay_body(r, ep, facts, &scan, opts);
	}
free_doc:
	json_decref(doc);
free_scan:
	sl_jscan_free(&scan);
	return rc;
}

int sl_request_validate(struct sl_request *r, const struct sl_endpoint *ep,
                        const char *priority_header, const char *body,
                        size_t len, const struct sl_request_options *opts)
{
	int rc = validate(r, ep, priority_header, body, len, opts);
	if (rc != 0) {
		/* A refused request owns nothing (see request.h). */
		free(r->model);
		r->model = NULL;
	}
	return rc;
}

int sl_request_stream_body(enum sl_assemble_kind kind, const char *body,
                           size_t len, char **out, size_t *out_len)
{
	struct sl_jscan scan;
	if (scan_members(&scan, body, len) != 0) {
		sl_jscan_free(&scan);
		return SL_EINVAL;
	}
	struct sl_request r = {0};
	splice_body(
	    &r, &scan,
	    (struct changes){.stream = true,
	                     .stream_options = kind != SL_ASSEMBLE_NATIVE});
	sl_jscan_free(&scan);
	*out = r.body;
	*out_len = r.body_len;
	return 0;
}

void sl_request_free(struct sl_request *r)
{
	free(r->model);
	r->model = NULL;
	free(r->body);
	r->body = NULL;
	r->body_len = 0;
}

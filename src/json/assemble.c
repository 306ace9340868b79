/*
 * assemble.c: streamed events into one answer, spliced from their bytes.
 *
 * The rules below were measured on llama-server 0.7.0 (build 11669) by
 * sending each request plain and streamed and comparing (recordings in
 * tests/test_assemble.c, live comparison in tests/test_assemble_exact.py).
 *
 * native (/completion, /completions, /infill): the plain answer of one
 *   prompt is the event with "stop": true, member for member in its order,
 *   with "content" the joined pieces, "tokens" every token id when the
 *   client asked for return_tokens (else []), generation_settings.stream
 *   false, and, when any event carried completion_probabilities, those
 *   joined as a last member "completion_probabilities". Several prompts
 *   (or n_cmpl) answer as an array in index order. With response_fields
 *   the final event holds only the fields asked for and no "stop": it is
 *   then simply the last event.
 * text (/v1/completions): the finish event (finish_reason set) of the
 *   lowest index, with "choices" replaced by every choice's finish object,
 *   in index order, its "text" the joined pieces and its "logprobs"
 *   {"content": [joined]} when any event carried logprobs. Each finish
 *   event carries usage and timings; the plain answer has the first's.
 * chat (/v1/chat/completions): built in llama-server's key order: choices
 *   (finish_reason, index, message {role, reasoning_content if any,
 *   content (null when empty and tool calls came), tool_calls}, logprobs if
 *   any), then created, model, system_fingerprint from the usage event,
 *   "object": "chat.completion", usage, id, __verbose, timings.
 * __verbose (a llama-server started with -v): OpenAI finish events carry
 *   the native final object; the plain answer has it with the native rule.
 *
 * Text arrives in many small pieces: they are appended to growable buffers
 * (amortised O(1) per piece); each finished part is copied once.
 */
#include "sluice/json/assemble.h"

#include "sluice/base/common.h"
#include "sluice/json/json_scan.h"

#include <stdlib.h>
#include <string.h>

/*
 * Tokens jsmn may use for one event or final part. Events are already
 * bounded by the SSE layer's event limit; this only stops a pathological
 * event of tiny tokens from taking memory out of proportion (16 bytes per
 * token against at least 2 bytes of text each).
 */
#define MAX_SCAN_TOKENS (1u << 20)

/* ---- byte buffers ---- */

static void buf_add(struct sl_abuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		b->data = sl_xrealloc(b->data, cap);
		b->cap = cap;
	}
	if (n)
		memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

static void buf_str(struct sl_abuf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

static void buf_set(struct sl_abuf *b, const char *s, size_t n)
{
	b->len = 0;
	buf_add(b, s, n);
}

static void buf_free(struct sl_abuf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* ---- reading tokens ---- */

static int scan(struct sl_jscan *s, const char *text, size_t len)
{
	return sl_jscan_parse(s, text, len, MAX_SCAN_TOKENS);
}

/* A present member whose value is not null. */
static bool has_value(const struct sl_jscan *s, int i)
{
	return i >= 0 && !sl_jscan_is(s, i, "null");
}

/* Token i as written, quotes included for strings. */
static void raw(const struct sl_jscan *s, int i, const char **p, size_t *n)
{
	size_t start, end;
	sl_jscan_extent(s, i, &start, &end);
	*p = s->text + start;
	*n = end - start;
}

static void buf_raw(struct sl_abuf *b, const struct sl_jscan *s, int i)
{
	const char *p;
	size_t n;
	raw(s, i, &p, &n);
	buf_add(b, p, n);
}

/* Appends a string's inner bytes, escapes as written. */
static void join_string(struct sl_abuf *b, const struct sl_jscan *s, int i)
{
	if (sl_jscan_is_type(s, i, JSMN_STRING))
		buf_add(b, sl_jscan_text(s, i), sl_jscan_len(s, i));
}

/* Appends an array's elements as written, comma-separated from before. */
static void join_array(struct sl_abuf *b, const struct sl_jscan *s, int i)
{
	if (!sl_jscan_is_type(s, i, JSMN_ARRAY) || s->tok[i].size == 0)
		return;
	int first = i + 1;
	int last = first;
	for (int k = 1; k < s->tok[i].size; k++)
		last = sl_jscan_skip(s, last);
	size_t start, end, unused;
	sl_jscan_extent(s, first, &start, &unused);
	sl_jscan_extent(s, last, &unused, &end);
	if (b->len)
		buf_add(b, ",", 1);
	buf_add(b, s->text + start, end - start);
}

/* ---- choices ---- */

struct tool_call {
	struct sl_abuf id, type, name; /* as written, quotes included */
	struct sl_abuf arguments;      /* inner bytes, joined */
};

struct sl_choice_parts {
	struct sl_abuf text;      /* content / text / delta.content, inner */
	struct sl_abuf reasoning; /* chat: reasoning_content, inner */
	struct sl_abuf tokens;    /* native: token ids, joined */
	struct sl_abuf probs;     /* probabilities / logprobs.content, joined */
	struct sl_abuf final;     /* native: final event; OpenAI: the choice's
	                             finish object */
	/* SL_ASSEMBLE_MAX_TOOL_CALLS of them, made with the first: most
	 * answers have none, and their room is most of a choice's size. */
	struct tool_call *calls;
	unsigned n_calls;
};

void sl_assembler_init(struct sl_assembler *a, enum sl_assemble_kind kind,
                       bool return_tokens)
{
	memset(a, 0, sizeof(*a));
	a->kind = kind;
	a->return_tokens = return_tokens;
	a->base_index = -1;
	a->verbose_index = -1;
}

static void choice_free(struct sl_choice_parts *c)
{
	buf_free(&c->text);
	buf_free(&c->reasoning);
	buf_free(&c->tokens);
	buf_free(&c->probs);
	buf_free(&c->final);
	for (unsigned i = 0; i < c->n_calls; i++) {
		buf_free(&c->calls[i].id);
		buf_free(&c->calls[i].type);
		buf_free(&c->calls[i].name);
		buf_free(&c->calls[i].arguments);
	}
	free(c->calls);
	free(c);
}

void sl_assembler_free(struct sl_assembler *a)
{
	buf_free(&a->last);
	buf_free(&a->base);
	free(a->base_tok);
	buf_free(&a->verbose);
	buf_free(&a->error);
	for (unsigned i = 0; i < a->n_choices; i++)
		if (a->choices[i])
			choice_free(a->choices[i]);
	memset(a, 0, sizeof(*a));
}

/* The parts of choice i, made on first use; NULL past the limit. */
static struct sl_choice_parts *choice_of(struct sl_assembler *a, long i)
{
	if (i < 0 || i >= SL_ASSEMBLE_MAX_CHOICES)
		return NULL;
	if (!a->choices[i]) {
		a->choices[i] = sl_xcalloc(1, sizeof(*a->choices[i]));
		a->n_choices = SL_MAX(a->n_choices, (unsigned)i + 1);
	}
	return a->choices[i];
}

/* The parts of choice `index` (absent: 0), made on first use. */
static struct sl_choice_parts *choice_at(struct sl_assembler *a,
                                         const struct sl_jscan *s, int index,
                                         long *out)
{
	long i = index < 0 ? 0 : sl_jscan_small_uint(s, index);
	*out = i;
	return choice_of(a, i);
}

/* ---- adding events ---- */

static int add_native(struct sl_assembler *a, const struct sl_jscan *s)
{
	long idx;
	struct sl_choice_parts *c =
	    choice_at(a, s, sl_jscan_get(s, 0, "index"), &idx);
	if (!c)
		return SL_EINVAL;
	join_string(&c->text, s, sl_jscan_get(s, 0, "content"));
	join_array(&c->tokens, s, sl_jscan_get(s, 0, "tokens"));
	join_array(&c->probs, s,
	           sl_jscan_get(s, 0, "completion_probabilities"));
	/* Partial events say "stop": false; the final one true, or, filtered
	 * by response_fields, nothing. */
	int stop = sl_jscan_get(s, 0, "stop");
	if (stop < 0 || sl_jscan_is(s, stop, "true") || c->final.len == 0)
		buf_set(&c->final, s->text, s->len);
	return 0;
}

/* The event `s` as the answer's frame, its tokens kept to build it. */
static void keep_base(struct sl_assembler *a, const struct sl_jscan *s)
{
	buf_set(&a->base, s->text, s->len);
	a->base_tok = sl_xrealloc(a->base_tok, sizeof(*s->tok) * (size_t)s->n);
	memcpy(a->base_tok, s->tok, sizeof(*s->tok) * (size_t)s->n);
	a->base_n = s->n;
}

/*
 * The scan of the answer's frame: the kept event's tokens, or a scan of
 * the last event when no event was kept.
 */
static int scan_base(const struct sl_assembler *a, const struct sl_abuf *base,
                     struct sl_jscan *s)
{
	if (base == &a->base && a->base_n > 0) {
		sl_jscan_restore(s, base->data, base->len, a->base_tok,
		                 a->base_n);
		return 0;
	}
	return scan(s, base->data, base->len);
}

/* The object slice of token i, copied into *b. */
static void keep_slice(struct sl_abuf *b, const struct sl_jscan *s, int i)
{
	b->len = 0;
	buf_raw(b, s, i);
}

static int add_tool_calls(struct sl_choice_parts *c, const struct sl_jscan *s,
                          int calls)
{
	int d = calls + 1;
	for (int k = 0; k < s->tok[calls].size; k++, d = sl_jscan_skip(s, d)) {
		long at = sl_jscan_small_uint(s, sl_jscan_get(s, d, "index"));
		size_t i = at >= 0 ? (size_t)at : c->n_calls;
		if (i >= SL_ASSEMBLE_MAX_TOOL_CALLS)
			return SL_EINVAL;
		if (!c->calls)
			c->calls = sl_xcalloc(SL_ASSEMBLE_MAX_TOOL_CALLS,
			                      sizeof(*c->calls));
		if (c->n_calls <= i)
			c->n_calls = (unsigned)i + 1;
		struct tool_call *t = &c->calls[i];
		int fn = sl_jscan_get(s, d, "function");
		int v;
		if (has_value(s, v = sl_jscan_get(s, d, "id")))
			keep_slice(&t->id, s, v);
		if (has_value(s, v = sl_jscan_get(s, d, "type")))
			keep_slice(&t->type, s, v);
		if (has_value(s, v = sl_jscan_get(s, fn, "name")))
			keep_slice(&t->name, s, v);
		join_string(&t->arguments, s, sl_jscan_get(s, fn, "arguments"));
	}
	return 0;
}

/* The top-level members add_openai reads, found in one walk. */
enum { TOP_ERROR, TOP_CHOICES, TOP_VERBOSE, TOP_USAGE, N_TOP };
static const struct sl_jscan_key top_keys[N_TOP] = {
    [TOP_ERROR] = SL_JSCAN_KEY("error"),
    [TOP_CHOICES] = SL_JSCAN_KEY("choices"),
    [TOP_VERBOSE] = SL_JSCAN_KEY("__verbose"),
    [TOP_USAGE] = SL_JSCAN_KEY("usage"),
};

static int add_openai(struct sl_assembler *a, const struct sl_jscan *s,
                      const int *top)
{
	enum { INDEX, LOGPROBS, TEXT, DELTA, FINISH, N_CHOICE };
	static const struct sl_jscan_key choice_keys[N_CHOICE] = {
	    [INDEX] = SL_JSCAN_KEY("index"),
	    [LOGPROBS] = SL_JSCAN_KEY("logprobs"),
	    [TEXT] = SL_JSCAN_KEY("text"),
	    [DELTA] = SL_JSCAN_KEY("delta"),
	    [FINISH] = SL_JSCAN_KEY("finish_reason"),
	};
	enum { CONTENT, REASONING, TOOL_CALLS, N_DELTA };
	static const struct sl_jscan_key delta_keys[N_DELTA] = {
	    [CONTENT] = SL_JSCAN_KEY("content"),
	    [REASONING] = SL_JSCAN_KEY("reasoning_content"),
	    [TOOL_CALLS] = SL_JSCAN_KEY("tool_calls"),
	};
	bool chat = a->kind == SL_ASSEMBLE_CHAT;
	int choices = top[TOP_CHOICES];
	int verbose = top[TOP_VERBOSE];
	if (chat && top[TOP_USAGE] >= 0)
		keep_base(a, s);
	if (!sl_jscan_is_type(s, choices, JSMN_ARRAY))
		return 0;
	int ch = choices + 1;
	for (int k = 0; k < s->tok[choices].size;
	     k++, ch = sl_jscan_skip(s, ch)) {
		int cv[N_CHOICE];
		sl_jscan_members(s, ch, choice_keys, cv, N_CHOICE);
		long idx;
		struct sl_choice_parts *c = choice_at(a, s, cv[INDEX], &idx);
		if (!c)
			return SL_EINVAL;
		join_array(&c->probs, s,
		           sl_jscan_get(s, cv[LOGPROBS], "content"));
		if (!chat) {
			join_string(&c->text, s, cv[TEXT]);
		} else {
			int dv[N_DELTA];
			sl_jscan_members(s, cv[DELTA], delta_keys, dv, N_DELTA);
			join_string(&c->text, s, dv[CONTENT]);
			join_string(&c->reasoning, s, dv[REASONING]);
			if (sl_jscan_is_type(s, dv[TOOL_CALLS], JSMN_ARRAY) &&
			    add_tool_calls(c, s, dv[TOOL_CALLS]) != 0)
				return SL_EINVAL;
		}
		if (!has_value(s, cv[FINISH]))
			continue;
		keep_slice(&c->final, s, ch);
		/* The first choice's finish is the answer's frame. */
		bool first = a->base_index < 0 || idx < a->base_index;
		if (!chat && first)
			keep_base(a, s);
		if (first)
			a->base_index = (int)idx;
		if (verbose >= 0 && (a->verbose.len == 0 || first)) {
			keep_slice(&a->verbose, s, verbose);
			a->verbose_index = (int)idx;
		}
	}
	return 0;
}

static int add_error(struct sl_assembler *a, const struct sl_jscan *s,
                     int error)
{
	buf_set(&a->error, s->text, s->len);
	long code = sl_jscan_small_uint(s, sl_jscan_get(s, error, "code"));
	a->error_status = code >= 400 && code <= 599 ? (int)code : 500;
	return 0;
}

int sl_assembler_add_scanned(struct sl_assembler *a, const struct sl_jscan *s)
{
	if (a->error.len)
		return 0; /* the answer is the error already */
	if (s->len == 4 && memcmp(s->text, "null", 4) == 0)
		return 0;
	/* The same limit as a scan of its own would have had. */
	if (s->n == 0 || (unsigned)s->n > MAX_SCAN_TOKENS ||
	    !sl_jscan_is_type(s, 0, JSMN_OBJECT))
		return SL_EINVAL;
	a->seen_event = true;
	buf_set(&a->last, s->text, s->len);
	if (a->kind == SL_ASSEMBLE_NATIVE) {
		int error = sl_jscan_get(s, 0, "error");
		return error >= 0 ? add_error(a, s, error) : add_native(a, s);
	}
	int top[N_TOP];
	sl_jscan_members(s, 0, top_keys, top, N_TOP);
	if (top[TOP_ERROR] >= 0)
		return add_error(a, s, top[TOP_ERROR]);
	return add_openai(a, s, top);
}

int sl_assembler_add_piece(struct sl_assembler *a, const char *data, size_t len,
                           const struct sl_event_facts *f,
                           const struct sl_event_match *m)
{
	if (a->error.len)
		return 0; /* the answer is the error already */
	/*
	 * What add_native and add_openai do with a plain token event. The
	 * caller reads events in its kind's dialect, so a native piece comes
	 * only to a native assembler, and another only to the others.
	 */
	bool native = f->piece_kind == SL_PIECE_NATIVE;
	struct sl_choice_parts *c = choice_of(a, f->piece_choice);
	if (native != (a->kind == SL_ASSEMBLE_NATIVE) || !c)
		return SL_EINVAL;
	a->seen_event = true;
	buf_set(&a->last, data, len);
	bool chat = a->kind == SL_ASSEMBLE_CHAT;
	if (native) {
		buf_add(&c->text, m->piece, m->piece_len);
		if (m->tokens_len > 0) {
			if (c->tokens.len)
				buf_add(&c->tokens, ",", 1);
			buf_add(&c->tokens, m->tokens, m->tokens_len);
		}
		/* "stop": false; the first event holds the place of the
		 * final one until it comes. */
		if (c->final.len == 0)
			buf_set(&c->final, data, len);
	} else if (chat && f->piece_kind == SL_PIECE_CONTENT) {
		buf_add(&c->text, m->piece, m->piece_len);
	} else if (chat && f->piece_kind == SL_PIECE_REASONING) {
		buf_add(&c->reasoning, m->piece, m->piece_len);
	} else if (!chat && f->piece_kind == SL_PIECE_TEXT) {
		buf_add(&c->text, m->piece, m->piece_len);
	}
	return 0;
}

int sl_assembler_add(struct sl_assembler *a, const char *data, size_t len)
{
	if (a->error.len)
		return 0; /* the answer is the error already */
	/* Compared as text: "[DONE]" is not JSON, and jsmn's strict mode
	 * refuses a primitive at the top level. */
	if ((len == 6 && memcmp(data, "[DONE]", 6) == 0) ||
	    (len == 4 && memcmp(data, "null", 4) == 0))
		return 0;
	struct sl_jscan s;
	int rc = scan(&s, data, len);
	if (rc == 0)
		rc = sl_assembler_add_scanned(a, &s);
	else
		rc = SL_EINVAL;
	sl_jscan_free(&s);
	return rc;
}

/* ---- splicing ---- */

/* One replacement of text[start, end) by pre + body + post. */
struct splice {
	size_t start, end;
	const char *pre;
	const struct sl_abuf *body;
	const char *post;
};

/* Splices into one object: emit_native makes at most four. */
#define MAX_SPLICES 8

/* Copies text with the splices (sorted here, never overlapping) applied. */
static void splice_out(struct sl_abuf *out, const char *text, size_t len,
                       struct splice *sp, unsigned n)
{
	for (unsigned i = 1; i < n; i++)
		for (unsigned j = i; j > 0 && sp[j].start < sp[j - 1].start;
		     j--) {
			struct splice t = sp[j];
			sp[j] = sp[j - 1];
			sp[j - 1] = t;
		}
	size_t at = 0;
	for (unsigned i = 0; i < n; i++) {
		buf_add(out, text + at, sp[i].start - at);
		buf_str(out, sp[i].pre);
		if (sp[i].body && sp[i].body->len)
			buf_add(out, sp[i].body->data, sp[i].body->len);
		buf_str(out, sp[i].post);
		at = sp[i].end;
	}
	buf_add(out, text + at, len - at);
}

/* Replaces value token v (when present, v >= 0) by pre + body + post. */
static void splice_value(struct splice *sp, unsigned *n,
                         const struct sl_jscan *s, int v, const char *pre,
                         const struct sl_abuf *body, const char *post)
{
	if (v < 0 || *n >= MAX_SPLICES)
		return;
	size_t start, end;
	sl_jscan_extent(s, v, &start, &end);
	sp[(*n)++] = (struct splice){start, end, pre, body, post};
}

/* A native final object with the joined parts of choice c spliced in. */
static void emit_native(struct sl_abuf *out, const char *text, size_t len,
                        const struct sl_choice_parts *c, bool return_tokens)
{
	struct sl_jscan s;
	if (scan(&s, text, len) != 0 || !sl_jscan_is_type(&s, 0, JSMN_OBJECT)) {
		buf_add(out, text, len);
		sl_jscan_free(&s);
		return;
	}
	struct splice sp[MAX_SPLICES];
	unsigned n = 0;
	static const struct sl_abuf none;
	int v = sl_jscan_get(&s, 0, "content");
	if (sl_jscan_is_type(&s, v, JSMN_STRING))
		splice_value(sp, &n, &s, v, "\"", &c->text, "\"");
	v = sl_jscan_get(&s, 0, "tokens");
	if (sl_jscan_is_type(&s, v, JSMN_ARRAY))
		splice_value(sp, &n, &s, v, "[",
		             return_tokens ? &c->tokens : &none, "]");
	v = sl_jscan_get(&s, sl_jscan_get(&s, 0, "generation_settings"),
	                 "stream");
	if (v >= 0 && sl_jscan_is(&s, v, "true"))
		splice_value(sp, &n, &s, v, "false", &none, "");
	if (c->probs.len &&
	    sl_jscan_get(&s, 0, "completion_probabilities") < 0) {
		/* A last member, before the closing brace. */
		size_t close = (size_t)s.tok[0].end - 1;
		sp[n++] = (struct splice){
		    close, close,
		    s.tok[0].size ? ",\"completion_probabilities\":["
		                  : "\"completion_probabilities\":[",
		    &c->probs, "]"};
	}
	splice_out(out, text, len, sp, n);
	sl_jscan_free(&s);
}

static void native_result(struct sl_assembler *a, struct sl_abuf *out)
{
	bool many = a->n_choices > 1;
	if (many)
		buf_add(out, "[", 1);
	bool first = true;
	for (unsigned i = 0; i < a->n_choices; i++) {
		const struct sl_choice_parts *c = a->choices[i];
		if (!c || !c->final.len)
			continue;
		if (!first)
			buf_add(out, ",", 1);
		first = false;
		emit_native(out, c->final.data, c->final.len, c,
		            a->return_tokens);
	}
	if (many)
		buf_add(out, "]", 1);
}

/* /v1/completions: a choice's finish object with its joined parts. */
static void emit_text_choice(struct sl_abuf *out,
                             const struct sl_choice_parts *c)
{
	struct sl_jscan s;
	if (scan(&s, c->final.data, c->final.len) != 0) {
		buf_add(out, c->final.data, c->final.len);
		sl_jscan_free(&s);
		return;
	}
	struct splice sp[MAX_SPLICES];
	unsigned n = 0;
	splice_value(sp, &n, &s, sl_jscan_get(&s, 0, "text"), "\"", &c->text,
	             "\"");
	if (c->probs.len)
		splice_value(sp, &n, &s, sl_jscan_get(&s, 0, "logprobs"),
		             "{\"content\":[", &c->probs, "]}");
	splice_out(out, c->final.data, c->final.len, sp, n);
	sl_jscan_free(&s);
}

static void emit_chat_message(struct sl_abuf *out,
                              const struct sl_choice_parts *c)
{
	buf_str(out, "{\"role\":\"assistant\"");
	if (c->reasoning.len) {
		buf_str(out, ",\"reasoning_content\":\"");
		buf_add(out, c->reasoning.data, c->reasoning.len);
		buf_str(out, "\"");
	}
	if (c->text.len == 0 && c->n_calls > 0) {
		buf_str(out, ",\"content\":null");
	} else {
		buf_str(out, ",\"content\":\"");
		buf_add(out, c->text.data, c->text.len);
		buf_str(out, "\"");
	}
	if (c->n_calls > 0) {
		buf_str(out, ",\"tool_calls\":[");
		for (unsigned i = 0; i < c->n_calls; i++) {
			const struct tool_call *t = &c->calls[i];
			if (i)
				buf_str(out, ",");
			buf_str(out, "{\"type\":");
			if (t->type.len)
				buf_add(out, t->type.data, t->type.len);
			else
				buf_str(out, "\"function\"");
			buf_str(out, ",\"function\":{\"name\":");
			if (t->name.len)
				buf_add(out, t->name.data, t->name.len);
			else
				buf_str(out, "\"\"");
			buf_str(out, ",\"arguments\":\"");
			buf_add(out, t->arguments.data, t->arguments.len);
			buf_str(out, "\"},\"id\":");
			if (t->id.len)
				buf_add(out, t->id.data, t->id.len);
			else
				buf_str(out, "\"\"");
			buf_str(out, "}");
		}
		buf_str(out, "]");
	}
	buf_str(out, "}");
}

/* A member of the object at obj, as written: ,"key":value */
static void copy_member(struct sl_abuf *out, const struct sl_jscan *s, int obj,
                        const char *key)
{
	int v = sl_jscan_get(s, obj, key);
	if (v < 0)
		return;
	buf_str(out, ",\"");
	buf_str(out, key);
	buf_str(out, "\":");
	buf_raw(out, s, v);
}

static void emit_chat_choice(struct sl_abuf *out,
                             const struct sl_choice_parts *c, unsigned index)
{
	struct sl_jscan s;
	bool ok = c->final.len && scan(&s, c->final.data, c->final.len) == 0;
	buf_str(out, "{\"finish_reason\":");
	int v = ok ? sl_jscan_get(&s, 0, "finish_reason") : -1;
	if (v >= 0)
		buf_raw(out, &s, v);
	else
		buf_str(out, "null");
	char idx[24];
	snprintf(idx, sizeof(idx), ",\"index\":%u", index);
	buf_str(out, idx);
	buf_str(out, ",\"message\":");
	emit_chat_message(out, c);
	if (c->probs.len) {
		buf_str(out, ",\"logprobs\":{\"content\":[");
		buf_add(out, c->probs.data, c->probs.len);
		buf_str(out, "]}");
	}
	buf_str(out, "}");
	if (c->final.len)
		sl_jscan_free(&s);
}

/* The choice "__verbose" describes, for its content and probabilities. */
static const struct sl_choice_parts *
verbose_choice(const struct sl_assembler *a)
{
	static const struct sl_choice_parts none;
	unsigned i = a->verbose_index >= 0 ? (unsigned)a->verbose_index : 0;
	return i < a->n_choices && a->choices[i] ? a->choices[i] : &none;
}

static void emit_choices(struct sl_assembler *a, struct sl_abuf *out)
{
	buf_add(out, "[", 1);
	bool first = true;
	for (unsigned i = 0; i < a->n_choices; i++) {
		const struct sl_choice_parts *c = a->choices[i];
		bool chat = a->kind == SL_ASSEMBLE_CHAT;
		/* A text choice without its finish (a stream cut short) has
		 * no object to build on: it is left out. */
		if (!c || (!chat && !c->final.len))
			continue;
		if (!first)
			buf_add(out, ",", 1);
		first = false;
		if (chat)
			emit_chat_choice(out, c, i);
		else
			emit_text_choice(out, c);
	}
	buf_add(out, "]", 1);
}

static void text_result(struct sl_assembler *a, struct sl_abuf *out)
{
	const struct sl_abuf *base = a->base.len ? &a->base : &a->last;
	struct sl_jscan s;
	if (scan_base(a, base, &s) != 0) {
		buf_add(out, base->data, base->len);
		sl_jscan_free(&s);
		return;
	}
	struct sl_abuf choices = {0}, verbose = {0};
	emit_choices(a, &choices);
	struct splice sp[MAX_SPLICES];
	unsigned n = 0;
	splice_value(sp, &n, &s, sl_jscan_get(&s, 0, "choices"), "", &choices,
	             "");
	int v = sl_jscan_get(&s, 0, "__verbose");
	if (v >= 0) {
		size_t start, end;
		sl_jscan_extent(&s, v, &start, &end);
		emit_native(&verbose, base->data + start, end - start,
		            verbose_choice(a), a->return_tokens);
		splice_value(sp, &n, &s, v, "", &verbose, "");
	}
	splice_out(out, base->data, base->len, sp, n);
	buf_free(&choices);
	buf_free(&verbose);
	sl_jscan_free(&s);
}

/* Top-level members of a chat answer, in llama-server's order. */
static const char *const chat_order[] = {
    "created", "model", "system_fingerprint", "object",
    "usage",   "id",    "__verbose",          "timings"};

static bool in_chat_order(const struct sl_jscan *s, int key)
{
	if (sl_jscan_is(s, key, "choices"))
		return true;
	for (size_t i = 0; i < SL_ARRAY_SIZE(chat_order); i++)
		if (sl_jscan_is(s, key, chat_order[i]))
			return true;
	return false;
}

static void chat_result(struct sl_assembler *a, struct sl_abuf *out)
{
	const struct sl_abuf *base = a->base.len ? &a->base : &a->last;
	struct sl_jscan s;
	bool ok =
	    scan_base(a, base, &s) == 0 && sl_jscan_is_type(&s, 0, JSMN_OBJECT);
	buf_str(out, "{\"choices\":");
	emit_choices(a, out);
	for (size_t i = 0; ok && i < SL_ARRAY_SIZE(chat_order); i++) {
		const char *key = chat_order[i];
		if (strcmp(key, "object") == 0) {
			buf_str(out, ",\"object\":\"chat.completion\"");
		} else if (strcmp(key, "__verbose") == 0) {
			if (!a->verbose.len)
				continue;
			buf_str(out, ",\"__verbose\":");
			emit_native(out, a->verbose.data, a->verbose.len,
			            verbose_choice(a), a->return_tokens);
		} else {
			copy_member(out, &s, 0, key);
		}
	}
	/*
	 * Members this list does not know go last, as written. jsmn takes a
	 * key without a value ({"a"}), so each key is checked to hold one,
	 * as sl_jscan_get does: the value token may not exist at all.
	 */
	int k = 1;
	for (int m = 0; ok && m < s.tok[0].size && k + 1 < s.n; m++) {
		if (!sl_jscan_is_type(&s, k, JSMN_STRING) || s.tok[k].size != 1)
			break;
		int v = k + 1;
		if (!in_chat_order(&s, k)) {
			buf_str(out, ",");
			buf_raw(out, &s, k);
			buf_str(out, ":");
			buf_raw(out, &s, v);
		}
		k = sl_jscan_skip(&s, v);
	}
	buf_str(out, "}");
	sl_jscan_free(&s);
}

char *sl_assembler_result(struct sl_assembler *a, size_t *len)
{
	if (!a->seen_event)
		return NULL;
	struct sl_abuf out = {0};
	if (a->error.len)
		buf_add(&out, a->error.data, a->error.len);
	else if (a->kind == SL_ASSEMBLE_NATIVE)
		native_result(a, &out);
	else if (a->kind == SL_ASSEMBLE_TEXT)
		text_result(a, &out);
	else
		chat_result(a, &out);
	buf_add(&out, "", 0); /* NUL-terminated even when empty */
	*len = out.len;
	return out.data;
}

int sl_assembler_status(const struct sl_assembler *a)
{
	return a->error.len ? a->error_status : 200;
}

/* ---- which requests are assembled ---- */

static bool is_true(const json_t *body, const char *key)
{
	return json_is_true(json_object_get(body, key));
}

/* A count field ("n", "n_cmpl") asking for more than one choice. */
static bool many(const json_t *body, const char *key)
{
	const json_t *v = json_object_get(body, key);
	return json_is_number(v) && json_number_value(v) > 1;
}

/* The client asked for token probabilities. */
static bool wants_probs(const json_t *body)
{
	const json_t *lp = json_object_get(body, "logprobs");
	return json_is_true(lp) ||
	       (json_is_number(lp) && json_number_value(lp) > 0) ||
	       (json_is_number(json_object_get(body, "n_probs")) &&
	        json_number_value(json_object_get(body, "n_probs")) > 0);
}

/* The client gave stop words. */
static bool has_stop(const json_t *body)
{
	const json_t *stop = json_object_get(body, "stop");
	return (json_is_string(stop) && json_string_length(stop) > 0) ||
	       json_array_size(stop) > 0;
}

/*
 * response_fields (native only) picks members of the plain answer by path.
 * The stream's final event is filtered the same way, so a path is
 * reproducible when the final event holds the plain answer's value:
 *   "tokens", "completion_probabilities": the final event has only [] or
 *     nothing; the values are in the partial events, which are not
 *     filtered but whose paths sluice would have to resolve itself;
 *   "generation_settings" (whole, or "/stream"): says "stream": true;
 *   "index" is fine, but without it a prompt array's final events cannot
 *     be told apart, so prompt arrays with response_fields are relayed;
 *   n_probs: the plain answer has completion_probabilities only when a
 *     path names them, which the assembler, not seeing the body, cannot
 *     tell from a final event that merely lacks them.
 */
static bool fields_reproducible(const json_t *body)
{
	const json_t *fields = json_object_get(body, "response_fields");
	if (!fields)
		return true;
	if (!json_is_array(fields) || wants_probs(body) ||
	    json_is_array(json_object_get(body, "prompt")) ||
	    many(body, "n_cmpl"))
		return false;
	size_t i;
	const json_t *f;
	json_array_foreach(fields, i, f)
	{
		const char *p = json_string_value(f);
		if (!p || strncmp(p, "tokens", 6) == 0 ||
		    strncmp(p, "completion_probabilities", 24) == 0 ||
		    strcmp(p, "generation_settings") == 0 ||
		    strcmp(p, "generation_settings/stream") == 0)
			return false;
	}
	return true;
}

/*
 * Relayed plain (false) for:
 *   probabilities (n_probs, logprobs) with stop words: when a stop word
 *     ends the answer, the plain answer drops as many trailing
 *     probabilities as the stop word has tokens (by llama-server's own
 *     tokenization of the word), while the stream has sent them already.
 *   response_fields: native, see fields_reproducible(); on the OpenAI
 *     endpoints 0.7.0 ignores it, but sluice does not rely on that.
 *   n > 1 on chat: the stream carries one usage event for all choices
 *     where the plain answer has the first choice's; they may differ.
 *   return_tokens on OpenAI endpoints: it shows only inside __verbose,
 *     whose token ids the finish event does not carry.
 *   tools on chat: tool calls could not be checked against a live
 *     llama-server (the demo model's template has none), so they are not
 *     claimed exact; the assembler still joins them (tested on recorded
 *     shapes) for sluice's other callers.
 * Measured equal, so assembled: n_probs, post_sampling_probs, logprobs,
 * top_logprobs, timings_per_token, stop words, return_tokens (native),
 * prompt arrays and n_cmpl (native), n and prompt arrays
 * (/v1/completions), __verbose (a -v llama-server), text with NUL bytes.
 */
/*
 * What sl_assemble_reproducible() below reads, less what matters only
 * beside another of these: stop words only with probabilities, "prompt"
 * and "n_cmpl" only with response_fields.
 */
bool sl_assemble_member_matters(const char *name, size_t n)
{
	/* Lengths known when compiling: this runs on every member of every
	 * relayed body. */
	static const struct sl_jscan_key matter[] = {
	    SL_JSCAN_KEY("logprobs"),
	    SL_JSCAN_KEY("n_probs"),
	    SL_JSCAN_KEY("response_fields"),
	    SL_JSCAN_KEY("return_tokens"),
	    SL_JSCAN_KEY("n"),
	    SL_JSCAN_KEY("tools"),
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(matter); i++)
		if (matter[i].len == n && memcmp(matter[i].name, name, n) == 0)
			return true;
	return false;
}

bool sl_assemble_reproducible(enum sl_assemble_kind kind, const json_t *body)
{
	if (kind == SL_ASSEMBLE_NONE || (wants_probs(body) && has_stop(body)))
		return false;
	if (kind == SL_ASSEMBLE_NATIVE)
		return fields_reproducible(body);
	if (json_object_get(body, "response_fields") ||
	    is_true(body, "return_tokens"))
		return false;
	return kind == SL_ASSEMBLE_TEXT ||
	       (!many(body, "n") &&
	        json_array_size(json_object_get(body, "tools")) == 0);
}

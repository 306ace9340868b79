/* event_scan.c: recognising upstream events from their JSON text. */
#include "sluice/json/event_scan.h"

#include "sluice/base/common.h"

#include <stdlib.h>
#include <string.h>

/*
 * An integer as jansson's json_integer_value() reads it: a number written
 * without fraction or exponent, else 0. Digits past what int64 holds (which
 * jansson refuses outright) read as 0 too.
 */
static int64_t int_value(const struct sl_jscan *s, int i)
{
	if (i < 0 || sl_jscan_type(s, i) != JSMN_PRIMITIVE)
		return 0;
	const char *p = sl_jscan_text(s, i);
	size_t n = sl_jscan_len(s, i);
	bool negative = n > 0 && p[0] == '-';
	size_t k = negative;
	if (k == n)
		return 0;
	uint64_t v = 0;
	for (; k < n; k++) {
		if (p[k] < '0' || p[k] > '9' || v > (UINT64_MAX - 9) / 10)
			return 0;
		v = v * 10 + (uint64_t)(p[k] - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		return 0;
	return negative ? -(int64_t)v : (int64_t)v;
}

static bool is_integer(const struct sl_jscan *s, int i)
{
	if (i < 0 || sl_jscan_type(s, i) != JSMN_PRIMITIVE)
		return false;
	const char *p = sl_jscan_text(s, i);
	size_t n = sl_jscan_len(s, i);
	/* 0 is an integer; int_value's 0 for anything else is not. */
	if (n == 1 && p[0] == '0')
		return true;
	if (n == 2 && p[0] == '-' && p[1] == '0')
		return true;
	return int_value(s, i) != 0;
}

/*
 * A string with at least one character. Its length as written is enough:
 * every escape stands for at least one byte ("\u0000" for one NUL).
 */
static bool nonempty_string(const struct sl_jscan *s, int i)
{
	return i >= 0 && sl_jscan_type(s, i) == JSMN_STRING &&
	       sl_jscan_len(s, i) > 0;
}

/* An array's element count; 0 for anything else or nothing. */
static int array_size(const struct sl_jscan *s, int i)
{
	return i >= 0 && sl_jscan_type(s, i) == JSMN_ARRAY ? s->tok[i].size : 0;
}

/* Anthropic's and the Responses API's events. */
static void scan_typed(const struct sl_jscan *s, struct sl_event_facts *f)
{
	if (sl_jscan_get(s, 0, "error") >= 0) {
		f->error = true;
		return;
	}
	int type = sl_jscan_get(s, 0, "type");
	int usage = -1, prompt_usage = -1;
	/*
	 * The plain answers (relayed, counted by proxy.c): a Responses
	 * answer is an object "response" with no type, an Anthropic one of
	 * type "message"; both with the answer's usage.
	 */
	int object = sl_jscan_get(s, 0, "object");
	if (type < 0 && sl_jscan_is_type(s, object, JSMN_STRING) &&
	    sl_jscan_is(s, object, "response"))
		usage = sl_jscan_get(s, 0, "usage");
	else if (type < 0 || sl_jscan_type(s, type) != JSMN_STRING)
		return;
	else if (sl_jscan_is(s, type, "message"))
		usage = sl_jscan_get(s, 0, "usage");
	else if (sl_jscan_is(s, type, "content_block_delta") ||
	         sl_jscan_is(s, type, "response.output_text.delta")) {
		f->arrivals = 1;
		f->per_arrival = 1;
	} else if (sl_jscan_is(s, type, "message_start")) {
		/* Its usage is the prompt's; its output_tokens is no count. */
		prompt_usage =
		    sl_jscan_get(s, sl_jscan_get(s, 0, "message"), "usage");
	} else if (sl_jscan_is(s, type, "message_delta")) {
		usage = sl_jscan_get(s, 0, "usage");
	} else if (sl_jscan_is(s, type, "response.completed")) {
		usage =
		    sl_jscan_get(s, sl_jscan_get(s, 0, "response"), "usage");
	}
	int out = sl_jscan_get(s, usage, "output_tokens");
	if (is_integer(s, out)) {
		f->has_count = true;
		f->count = int_value(s, out);
	}
	int in = sl_jscan_get(s, prompt_usage >= 0 ? prompt_usage : usage,
	                      "input_tokens");
	if (is_integer(s, in)) {
		f->has_prompt = true;
		f->prompt_tokens = int_value(s, in);
	}
}

/* The timings object at token t, if it is one with the numbers needed. */
static void read_timings(const struct sl_jscan *s, int t,
                         struct sl_event_facts *f)
{
	if (t < 0 || sl_jscan_type(s, t) != JSMN_OBJECT)
		return;
	struct sl_event_timings v = {0};
	if (!sl_jscan_number(s, sl_jscan_get(s, t, "prompt_n"), &v.prompt_n) ||
	    !sl_jscan_number(s, sl_jscan_get(s, t, "prompt_ms"),
	                     &v.prompt_ms) ||
	    !sl_jscan_number(s, sl_jscan_get(s, t, "predicted_n"),
	                     &v.predicted_n) ||
	    !sl_jscan_number(s, sl_jscan_get(s, t, "predicted_per_token_ms"),
	                     &v.per_token_ms))
		return;
	if (!sl_jscan_number(s, sl_jscan_get(s, t, "cache_n"), &v.cache_n))
		v.cache_n = 0;
	f->has_timings = true;
	f->timings = v;
}

/* Whether a member is absent or null: nothing for an assembler to read. */
static bool absent(const struct sl_jscan *s, int i)
{
	return i < 0 || (sl_jscan_type(s, i) == JSMN_PRIMITIVE &&
	                 sl_jscan_is(s, i, "null"));
}

/* A choice's index as the assembler reads it (absent: 0), else -1. */
static long choice_index(const struct sl_jscan *s, int i)
{
	return i < 0 ? 0 : sl_jscan_small_uint(s, i);
}

/* llama-server's /completion events. */
static void scan_native(const struct sl_jscan *s, struct sl_event_facts *f)
{
	enum {
		ERROR,
		INDEX,
		STOP,
		TOKENS,
		CONTENT,
		PREDICTED,
		EVALUATED,
		PROBS,
		TIMINGS,
		N_KEYS
	};
	static const struct sl_jscan_key keys[N_KEYS] = {
	    [ERROR] = SL_JSCAN_KEY("error"),
	    [INDEX] = SL_JSCAN_KEY("index"),
	    [STOP] = SL_JSCAN_KEY("stop"),
	    [TOKENS] = SL_JSCAN_KEY("tokens"),
	    [CONTENT] = SL_JSCAN_KEY("content"),
	    [PREDICTED] = SL_JSCAN_KEY("tokens_predicted"),
	    [EVALUATED] = SL_JSCAN_KEY("tokens_evaluated"),
	    [PROBS] = SL_JSCAN_KEY("completion_probabilities"),
	    [TIMINGS] = SL_JSCAN_KEY("timings"),
	};
	int v[N_KEYS];
	sl_jscan_members(s, 0, keys, v, N_KEYS);
	if (v[ERROR] >= 0) {
		f->error = true;
		return;
	}
	f->index = int_value(s, v[INDEX]);
	if (!(v[STOP] >= 0 && sl_jscan_type(s, v[STOP]) == JSMN_PRIMITIVE &&
	      sl_jscan_is(s, v[STOP], "false"))) {
		f->final = true;
		f->tokens_predicted = int_value(s, v[PREDICTED]);
		f->has_prompt = is_integer(s, v[EVALUATED]);
		f->prompt_tokens = int_value(s, v[EVALUATED]);
		read_timings(s, v[TIMINGS], f);
		return;
	}
	int n = array_size(s, v[TOKENS]);
	if (n == 0 && nonempty_string(s, v[CONTENT]))
		n = 1;
	if (n > 0) {
		f->arrivals = 1;
		f->per_arrival = (uint64_t)n;
	}
	/*
	 * A plain token event (event_scan.h): what varies from one to the
	 * next is its content, its token ids and the count; probabilities
	 * would vary too, so an event with them is no plain one.
	 */
	int tokens = v[TOKENS];
	if (v[PROBS] >= 0 || !sl_jscan_is_type(s, v[CONTENT], JSMN_STRING) ||
	    !sl_jscan_is_type(s, tokens, JSMN_ARRAY) ||
	    choice_index(s, v[INDEX]) < 0 ||
	    (v[PREDICTED] >= 0 && !is_integer(s, v[PREDICTED])))
		return;
	for (int k = 0, t = tokens + 1; k < s->tok[tokens].size; k++, t++)
		if (t >= s->n || !is_integer(s, t))
			return;
	f->piece = v[CONTENT];
	f->piece_kind = SL_PIECE_NATIVE;
	f->piece_choice = choice_index(s, v[INDEX]);
	f->tokens = tokens;
	f->predicted = v[PREDICTED];
}

/* OpenAI's chunks: one token per choice that carries any output. */
static void scan_openai(const struct sl_jscan *s, struct sl_event_facts *f)
{
	enum { ERROR, USAGE, CHOICES, TIMINGS, VERBOSE, N_KEYS };
	static const struct sl_jscan_key keys[N_KEYS] = {
	    [ERROR] = SL_JSCAN_KEY("error"),
	    [USAGE] = SL_JSCAN_KEY("usage"),
	    [CHOICES] = SL_JSCAN_KEY("choices"),
	    [TIMINGS] = SL_JSCAN_KEY("timings"),
	    [VERBOSE] = SL_JSCAN_KEY("__verbose")};
	int v[N_KEYS];
	sl_jscan_members(s, 0, keys, v, N_KEYS);
	if (v[ERROR] >= 0) {
		f->error = true;
		return;
	}
	int usage = v[USAGE], choices = v[CHOICES];
	if (usage >= 0 && sl_jscan_type(s, usage) == JSMN_OBJECT) {
		f->has_count = true;
		f->count =
		    int_value(s, sl_jscan_get(s, usage, "completion_tokens"));
		int p = sl_jscan_get(s, usage, "prompt_tokens");
		f->has_prompt = is_integer(s, p);
		f->prompt_tokens = int_value(s, p);
	}
	/*
	 * llama-server sends usage only when asked (stream_options), but
	 * timings on every last chunk: the prompt is its cached part plus
	 * the part evaluated.
	 */
	int timings = v[TIMINGS];
	read_timings(s, timings, f);
	if (!f->has_prompt && timings >= 0 &&
	    sl_jscan_type(s, timings) == JSMN_OBJECT) {
		int cached = sl_jscan_get(s, timings, "cache_n");
		int evaluated = sl_jscan_get(s, timings, "prompt_n");
		if (is_integer(s, evaluated)) {
			f->has_prompt = true;
			f->prompt_tokens =
			    int_value(s, cached) + int_value(s, evaluated);
		}
	}
	enum { DELTA, TEXT, INDEX, FINISH, LOGPROBS, N_CHOICE };
	static const struct sl_jscan_key choice_keys[N_CHOICE] = {
	    [DELTA] = SL_JSCAN_KEY("delta"),
	    [TEXT] = SL_JSCAN_KEY("text"),
	    [INDEX] = SL_JSCAN_KEY("index"),
	    [FINISH] = SL_JSCAN_KEY("finish_reason"),
	    [LOGPROBS] = SL_JSCAN_KEY("logprobs")};
	enum { CONTENT, REASONING, TOOL_CALLS, N_DELTA };
	static const struct sl_jscan_key delta_keys[N_DELTA] = {
	    [CONTENT] = SL_JSCAN_KEY("content"),
	    [REASONING] = SL_JSCAN_KEY("reasoning_content"),
	    [TOOL_CALLS] = SL_JSCAN_KEY("tool_calls")};
	int n = array_size(s, choices);
	int c = choices + 1;
	int cv[N_CHOICE], dv[N_DELTA];
	for (int k = 0; k < n && c < s->n; k++, c = sl_jscan_skip(s, c)) {
		sl_jscan_members(s, c, choice_keys, cv, N_CHOICE);
		sl_jscan_members(s, cv[DELTA], delta_keys, dv, N_DELTA);
		if (nonempty_string(s, cv[TEXT]) ||
		    nonempty_string(s, dv[CONTENT]) ||
		    nonempty_string(s, dv[REASONING]) ||
		    array_size(s, dv[TOOL_CALLS]) > 0)
			f->arrivals++;
	}
	f->per_arrival = f->arrivals > 0;
	/*
	 * A plain token event (event_scan.h): with one choice, cv and dv
	 * still hold its members. Its one piece is whichever of the three
	 * strings is present; the other two and everything else an
	 * assembler reads must be absent or null.
	 */
	if (n != 1 || f->arrivals != 1 || !absent(s, usage) ||
	    !absent(s, timings) || !absent(s, v[VERBOSE]) ||
	    !absent(s, cv[FINISH]) || !absent(s, cv[LOGPROBS]) ||
	    !absent(s, dv[TOOL_CALLS]) || choice_index(s, cv[INDEX]) < 0)
		return;
	const int pieces[] = {cv[TEXT], dv[CONTENT], dv[REASONING]};
	const enum sl_event_piece kinds[] = {SL_PIECE_TEXT, SL_PIECE_CONTENT,
	                                     SL_PIECE_REASONING};
	int found = -1;
	for (int k = 0; k < 3; k++) {
		if (absent(s, pieces[k]))
			continue;
		if (found >= 0 || !nonempty_string(s, pieces[k]))
			return;
		found = k;
	}
	if (found < 0)
		return;
	f->piece = pieces[found];
	f->piece_kind = kinds[found];
	f->piece_choice = choice_index(s, cv[INDEX]);
}

/* An object's facts; each dialect looks for "error" among its members. */
static void scan_object(const struct sl_jscan *s, enum sl_event_dialect dialect,
                        struct sl_event_facts *f)
{
	switch (dialect) {
	case SL_DIALECT_NATIVE: scan_native(s, f); break;
	case SL_DIALECT_OPENAI: scan_openai(s, f); break;
	case SL_DIALECT_TYPED: scan_typed(s, f); break;
	}
}

void sl_event_scan(struct sl_jscan *s, const char *data, size_t len,
                   enum sl_event_dialect dialect, struct sl_event_facts *f)
{
	*f =
	    (struct sl_event_facts){.piece = -1, .tokens = -1, .predicted = -1};
	/* A scan to free even when nothing is parsed. */
	s->tok = s->inline_tok;
	s->n = 0;
	if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
		f->done = true;
		return;
	}
	/* A token takes at least one byte, so len + 1 never limits. */
	if (sl_jscan_parse(s, data, len, (unsigned)len + 1) != 0)
		return;
	f->json = true;
	if (sl_jscan_type(s, 0) != JSMN_OBJECT)
		return;
	f->object = true;
	scan_object(s, dialect, f);
}

void sl_event_scan_answer(struct sl_jscan *s, const char *data, size_t len,
                          enum sl_event_dialect dialect,
                          struct sl_event_facts *f)
{
	/*
	 * The containers whose members a plain answer's counts are: events
	 * nest them deeper (message_start's message.usage), answers do not.
	 */
	static const struct sl_jscan_key counted[] = {SL_JSCAN_KEY("usage"),
	                                              SL_JSCAN_KEY("timings")};
	*f =
	    (struct sl_event_facts){.piece = -1, .tokens = -1, .predicted = -1};
	if (sl_jscan_parse_shallow(s, data, len, counted,
	                           (int)SL_ARRAY_SIZE(counted),
	                           (unsigned)len + 1) != 0)
		return;
	f->json = f->object = true;
	scan_object(s, dialect, f);
}

/* ---- the shape of token events ---- */

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
	       (c >= 'A' && c <= 'F');
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/*
 * The end of a string's inside that starts at p[at]: the index of its
 * closing quote, with no control byte unescaped and every escape whole
 * (RFC 8259, 7), or 0 when there is none. Stricter than jsmn, which lets
 * control bytes through: such an event is scanned in full.
 */
static size_t string_end(const char *p, size_t at, size_t n)
{
	for (size_t i = at; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c == '"')
			return i;
		if (c < 0x20)
			return 0;
		if (c != '\\')
			continue;
		if (++i == n)
			return 0;
		if (p[i] == 'u') {
			if (n - i < 5 || !is_hex(p[i + 1]) ||
			    !is_hex(p[i + 2]) || !is_hex(p[i + 3]) ||
			    !is_hex(p[i + 4]))
				return 0;
			i += 4;
		} else if (p[i] == '\0' || !strchr("\"\\/bfnrt", p[i])) {
			return 0;
		}
	}
	return 0;
}

/* The end of an integer at p[at] (a sign, digits), or 0 for none. */
static size_t int_end(const char *p, size_t at, size_t n)
{
	size_t i = at + (at < n && p[at] == '-');
	size_t digits = i;
	while (i < n && is_digit(p[i]))
		i++;
	return i > digits ? i : 0;
}

/*
 * The end of a hole of `kind` that starts at p[at], or 0 when what is
 * there is no such value. An empty array's inside ends where it starts.
 */
static size_t hole_end(enum sl_event_hole kind, const char *p, size_t at,
                       size_t n)
{
	switch (kind) {
	case SL_HOLE_STRING: return string_end(p, at, n);
	case SL_HOLE_INT: return int_end(p, at, n);
	case SL_HOLE_INTS:
		if (at < n && p[at] == ']')
			return at;
		for (size_t i = at;;) {
			i = int_end(p, i, n);
			if (i == 0 || i == n || p[i] != ',')
				return i;
			i++;
		}
	}
	return 0;
}

/* Adds a hole for token i's value, the inside of a string or array. */
static void add_hole(struct sl_event_shape *sh, const struct sl_jscan *s, int i,
                     enum sl_event_hole kind)
{
	size_t start = (size_t)s->tok[i].start, end = (size_t)s->tok[i].end;
	if (kind == SL_HOLE_INTS) {
		start++; /* jsmn's array spans its brackets */
		end--;
	}
	unsigned h = sh->n_holes++;
	while (h > 0 && sh->holes[h - 1].start > start) {
		sh->holes[h] = sh->holes[h - 1];
		h--;
	}
	sh->holes[h].start = start;
	sh->holes[h].end = end;
	sh->holes[h].kind = kind;
}

/* Which hole starts at `start`. */
static unsigned hole_at(const struct sl_event_shape *sh, size_t start)
{
	unsigned h = 0;
	while (h + 1 < sh->n_holes && sh->holes[h].start != start)
		h++;
	return h;
}

void sl_event_shape_learn(struct sl_event_shape *sh, const struct sl_jscan *s,
                          const struct sl_event_facts *f)
{
	if (f->piece < 0 || s->len > SL_EVENT_SHAPE_MAX)
		return;
	sh->n_holes = 0;
	add_hole(sh, s, f->piece, SL_HOLE_STRING);
	if (f->tokens >= 0)
		add_hole(sh, s, f->tokens, SL_HOLE_INTS);
	if (f->predicted >= 0)
		add_hole(sh, s, f->predicted, SL_HOLE_INT);
	/* Each hole must hold what it will be matched as (no spaces). */
	for (unsigned h = 0; h < sh->n_holes; h++)
		if (hole_end(sh->holes[h].kind, s->text, sh->holes[h].start,
		             s->len) != sh->holes[h].end) {
			sl_event_shape_free(sh);
			return;
		}
	if (sh->cap < s->len) {
		sh->cap = s->len;
		free(sh->text);
		sh->text = sl_xmalloc(sh->cap);
	}
	memcpy(sh->text, s->text, s->len);
	sh->len = s->len;
	sh->piece_hole = hole_at(sh, (size_t)s->tok[f->piece].start);
	sh->tokens_hole =
	    f->tokens >= 0
	        ? (int)hole_at(sh, (size_t)s->tok[f->tokens].start + 1)
	        : -1;
	sh->facts = *f;
	sh->facts.piece = sh->facts.tokens = sh->facts.predicted = -1;
}

bool sl_event_shape_match(const struct sl_event_shape *sh, const char *data,
                          size_t len, struct sl_event_facts *f,
                          struct sl_event_match *m)
{
	if (!sh->text)
		return false;
	size_t at = 0, from = 0;
	size_t starts[SL_EVENT_SHAPE_HOLES], ends[SL_EVENT_SHAPE_HOLES];
	for (unsigned h = 0; h < sh->n_holes; h++) {
		size_t same = sh->holes[h].start - from;
		if (len - at < same ||
		    memcmp(data + at, sh->text + from, same) != 0)
			return false;
		at += same;
		size_t end = hole_end(sh->holes[h].kind, data, at, len);
		if (end == 0)
			return false;
		starts[h] = at;
		ends[h] = end;
		at = end;
		from = sh->holes[h].end;
	}
	if (len - at != sh->len - from ||
	    memcmp(data + at, sh->text + from, len - at) != 0)
		return false;
	unsigned p = sh->piece_hole;
	*m = (struct sl_event_match){.piece = data + starts[p],
	                             .piece_len = ends[p] - starts[p]};
	*f = sh->facts;
	if (sh->tokens_hole < 0) {
		/* OpenAI: one token per non-empty piece, as the shape's. */
		return m->piece_len > 0;
	}
	/* Native: its tokens' count, or 1 for text without ids. */
	unsigned t = (unsigned)sh->tokens_hole;
	m->tokens = data + starts[t];
	m->tokens_len = ends[t] - starts[t];
	uint64_t n = 0;
	if (m->tokens_len > 0) {
		n = 1;
		for (size_t i = 0; i < m->tokens_len; i++)
			n += m->tokens[i] == ',';
	}
	if (n == 0 && m->piece_len > 0)
		n = 1;
	f->arrivals = n > 0;
	f->per_arrival = n;
	return true;
}

void sl_event_shape_free(struct sl_event_shape *sh)
{
	free(sh->text);
	*sh = (struct sl_event_shape){0};
}

void sl_event_read(struct sl_event_shape *sh, struct sl_jscan *s,
                   const char *data, size_t len, enum sl_event_dialect dialect,
                   struct sl_event_facts *f, struct sl_event_match *m)
{
	s->tok = s->inline_tok;
	s->n = 0;
	if (sl_event_shape_match(sh, data, len, f, m))
		return;
	*m = (struct sl_event_match){0};
	sl_event_scan(s, data, len, dialect, f);
	sl_event_shape_learn(sh, s, f);
}

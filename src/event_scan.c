/* event_scan.c: recognising upstream events from their JSON text. */
#include "sluice/event_scan.h"

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
	if (type < 0 || sl_jscan_type(s, type) != JSMN_STRING)
		return;
	if (sl_jscan_is(s, type, "content_block_delta") ||
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
		return;
	}
	int n = array_size(s, v[TOKENS]);
	if (n == 0 && nonempty_string(s, v[CONTENT]))
		n = 1;
	if (n > 0) {
		f->arrivals = 1;
		f->per_arrival = (uint64_t)n;
	}
}

/* OpenAI's chunks: one token per choice that carries any output. */
static void scan_openai(const struct sl_jscan *s, struct sl_event_facts *f)
{
	enum { ERROR, USAGE, CHOICES, TIMINGS, N_KEYS };
	static const struct sl_jscan_key keys[N_KEYS] = {
	    [ERROR] = SL_JSCAN_KEY("error"),
	    [USAGE] = SL_JSCAN_KEY("usage"),
	    [CHOICES] = SL_JSCAN_KEY("choices"),
	    [TIMINGS] = SL_JSCAN_KEY("timings")};
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
	enum { DELTA, TEXT, N_CHOICE };
	static const struct sl_jscan_key choice_keys[N_CHOICE] = {
	    [DELTA] = SL_JSCAN_KEY("delta"), [TEXT] = SL_JSCAN_KEY("text")};
	enum { CONTENT, REASONING, TOOL_CALLS, N_DELTA };
	static const struct sl_jscan_key delta_keys[N_DELTA] = {
	    [CONTENT] = SL_JSCAN_KEY("content"),
	    [REASONING] = SL_JSCAN_KEY("reasoning_content"),
	    [TOOL_CALLS] = SL_JSCAN_KEY("tool_calls")};
	int n = array_size(s, choices);
	int c = choices + 1;
	for (int k = 0; k < n && c < s->n; k++, c = sl_jscan_skip(s, c)) {
		int cv[N_CHOICE], dv[N_DELTA];
		sl_jscan_members(s, c, choice_keys, cv, N_CHOICE);
		sl_jscan_members(s, cv[DELTA], delta_keys, dv, N_DELTA);
		if (nonempty_string(s, cv[TEXT]) ||
		    nonempty_string(s, dv[CONTENT]) ||
		    nonempty_string(s, dv[REASONING]) ||
		    array_size(s, dv[TOOL_CALLS]) > 0)
			f->arrivals++;
	}
	f->per_arrival = f->arrivals > 0;
}

void sl_event_scan(struct sl_jscan *s, const char *data, size_t len,
                   enum sl_event_dialect dialect, struct sl_event_facts *f)
{
	*f = (struct sl_event_facts){0};
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
	/* Each dialect looks for "error" among the members it reads. */
	switch (dialect) {
	case SL_DIALECT_NATIVE: scan_native(s, f); break;
	case SL_DIALECT_OPENAI: scan_openai(s, f); break;
	case SL_DIALECT_TYPED: scan_typed(s, f); break;
	}
}

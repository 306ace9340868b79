/*
 * assemble.c: streamed events into one answer.
 *
 * Text arrives in many small pieces: it is appended to growable buffers
 * (amortised O(1) per piece) and made into JSON strings once, at the end.
 */
#include "sluice/assemble.h"

#include "sluice/common.h"

#include <stdlib.h>
#include <string.h>

struct buf {
	char *data;
	size_t len, cap;
	bool seen; /* a piece arrived, even an empty one */
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
	b->seen = true;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		b->data = sl_xrealloc(b->data, cap);
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

static void buf_add_json(struct buf *b, json_t *v)
{
	if (json_is_string(v))
		buf_add(b, json_string_value(v), json_string_length(v));
}

static json_t *buf_json(const struct buf *b)
{
	return json_stringn(b->data ? b->data : "", b->len);
}

/* A tool call put together from its deltas. */
struct tool_call {
	json_t *id, *type, *name;
	struct buf arguments;
};

#define MAX_TOOL_CALLS 32

struct sl_choice_parts {
	int index;
	struct buf text;      /* text, or the chat message's content */
	json_t *final;        /* native: the event with "stop": true */
	json_t *tokens;       /* native: token ids */
	json_t *probs;        /* native: completion_probabilities */
	struct buf reasoning; /* chat: reasoning_content */
	json_t *role;
	json_t *finish_reason;
	json_t *logprobs; /* arrays in it are joined across events */
	struct tool_call calls[MAX_TOOL_CALLS];
	unsigned n_calls;
};

/* Top-level fields of OpenAI answers, kept from the events that have them. */
static const char *const top_fields[] = {"created", "model",
                                         "system_fingerprint", "id"};

void sl_assembler_init(struct sl_assembler *a, enum sl_assemble_kind kind,
                       bool return_tokens)
{
	memset(a, 0, sizeof(*a));
	a->kind = kind;
	a->return_tokens = return_tokens;
}

static void choice_free(struct sl_choice_parts *c)
{
	free(c->text.data);
	free(c->reasoning.data);
	json_decref(c->final);
	json_decref(c->tokens);
	json_decref(c->probs);
	json_decref(c->role);
	json_decref(c->finish_reason);
	json_decref(c->logprobs);
	for (unsigned i = 0; i < c->n_calls; i++) {
		json_decref(c->calls[i].id);
		json_decref(c->calls[i].type);
		json_decref(c->calls[i].name);
		free(c->calls[i].arguments.data);
	}
	free(c);
}

void sl_assembler_free(struct sl_assembler *a)
{
	for (size_t i = 0; i < SL_ARRAY_SIZE(top_fields); i++)
		json_decref(a->top[i]);
	json_decref(a->usage);
	json_decref(a->timings);
	for (unsigned i = 0; i < a->n_choices; i++)
		if (a->choices[i])
			choice_free(a->choices[i]);
	memset(a, 0, sizeof(*a));
}

/* Replaces *slot with a new reference to v, when v is there and not null. */
static void keep(json_t **slot, json_t *v)
{
	if (!v || json_is_null(v))
		return;
	json_decref(*slot);
	*slot = json_incref(v);
}

/* Logprobs arrive as objects of arrays; join each array. */
static void merge_logprobs(json_t **into, json_t *lp)
{
	if (!json_is_object(lp))
		return;
	if (!*into) {
		*into = json_deep_copy(lp);
		return;
	}
	const char *key;
	json_t *v;
	json_object_foreach(lp, key, v)
	{
		json_t *have = json_object_get(*into, key);
		if (json_is_array(have) && json_is_array(v))
			json_array_extend(have, v);
		else
			json_object_set(*into, key, v);
	}
}

/* The parts of choice `index` (an event's "index" field), made on first use. */
static struct sl_choice_parts *choice_at(struct sl_assembler *a, json_t *index)
{
	json_int_t i = json_is_integer(index) ? json_integer_value(index) : 0;
	if (i < 0 || i >= SL_ASSEMBLE_MAX_CHOICES)
		return NULL;
	if (!a->choices[i]) {
		a->choices[i] = sl_xcalloc(1, sizeof(*a->choices[i]));
		a->choices[i]->index = (int)i;
		a->n_choices = SL_MAX(a->n_choices, (unsigned)i + 1);
	}
	return a->choices[i];
}

/* Appends an array's items to *into, made on first use. */
static void append_all(json_t **into, json_t *from)
{
	if (!json_is_array(from))
		return;
	if (!*into)
		*into = json_array();
	json_array_extend(*into, from);
}

static int add_tool_calls(struct sl_choice_parts *c, json_t *calls)
{
	size_t i;
	json_t *d;
	json_array_foreach(calls, i, d)
	{
		json_t *idx = json_object_get(d, "index");
		size_t k = json_is_integer(idx)
		               ? (size_t)json_integer_value(idx)
		               : c->n_calls;
		if (k >= MAX_TOOL_CALLS)
			return SL_EINVAL;
		while (c->n_calls <= k)
			c->n_calls++;
		struct tool_call *t = &c->calls[k];
		json_t *fn = json_object_get(d, "function");
		keep(&t->id, json_object_get(d, "id"));
		keep(&t->type, json_object_get(d, "type"));
		keep(&t->name, json_object_get(fn, "name"));
		buf_add_json(&t->arguments, json_object_get(fn, "arguments"));
	}
	return 0;
}

static int add_choices(struct sl_assembler *a, json_t *choices)
{
	size_t i;
	json_t *ch;
	json_array_foreach(choices, i, ch)
	{
		struct sl_choice_parts *c =
		    choice_at(a, json_object_get(ch, "index"));
		if (!c)
			return SL_EINVAL;
		keep(&c->finish_reason, json_object_get(ch, "finish_reason"));
		merge_logprobs(&c->logprobs, json_object_get(ch, "logprobs"));
		if (a->kind == SL_ASSEMBLE_TEXT) {
			buf_add_json(&c->text, json_object_get(ch, "text"));
			continue;
		}
		json_t *delta = json_object_get(ch, "delta");
		keep(&c->role, json_object_get(delta, "role"));
		buf_add_json(&c->text, json_object_get(delta, "content"));
		buf_add_json(&c->reasoning,
		             json_object_get(delta, "reasoning_content"));
		json_t *calls = json_object_get(delta, "tool_calls");
		if (json_is_array(calls) && add_tool_calls(c, calls) != 0)
			return SL_EINVAL;
	}
	return 0;
}

int sl_assembler_add(struct sl_assembler *a, json_t *event)
{
	if (json_is_null(event))
		return 0;
	if (!json_is_object(event))
		return SL_EINVAL;
	keep(&a->usage, json_object_get(event, "usage"));
	keep(&a->timings, json_object_get(event, "timings"));
	if (a->kind == SL_ASSEMBLE_NATIVE) {
		struct sl_choice_parts *c =
		    choice_at(a, json_object_get(event, "index"));
		if (!c)
			return SL_EINVAL;
		a->seen_event = true;
		buf_add_json(&c->text, json_object_get(event, "content"));
		append_all(&c->tokens, json_object_get(event, "tokens"));
		append_all(&c->probs,
		           json_object_get(event, "completion_probabilities"));
		if (json_is_true(json_object_get(event, "stop")) || !c->final)
			keep(&c->final, event);
		return 0;
	}
	for (size_t i = 0; i < SL_ARRAY_SIZE(top_fields); i++)
		keep(&a->top[i], json_object_get(event, top_fields[i]));
	a->seen_event = true;
	json_t *choices = json_object_get(event, "choices");
	return json_is_array(choices) ? add_choices(a, choices) : 0;
}

static json_t *native_one(const struct sl_assembler *a,
                          const struct sl_choice_parts *c)
{
	json_t *r = json_deep_copy(c->final);
	json_object_set_new(r, "content", buf_json(&c->text));
	json_object_set_new(r, "tokens",
	                    a->return_tokens && c->tokens
	                        ? json_incref(c->tokens)
	                        : json_array());
	if (json_array_size(c->probs) > 0)
		json_object_set(r, "completion_probabilities", c->probs);
	json_t *gs = json_object_get(r, "generation_settings");
	if (json_is_object(gs))
		json_object_set_new(gs, "stream", json_false());
	return r;
}

/* One prompt: an object; a prompt array: an array, as llama-server does. */
static json_t *native_result(struct sl_assembler *a)
{
	if (a->n_choices == 1 && a->choices[0])
		return native_one(a, a->choices[0]);
	json_t *all = json_array();
	for (unsigned i = 0; i < a->n_choices; i++)
		if (a->choices[i])
			json_array_append_new(all,
			                      native_one(a, a->choices[i]));
	return all;
}

static json_t *chat_message(const struct sl_choice_parts *c)
{
	json_t *m = json_object();
	json_object_set_new(m, "role",
	                    c->role ? json_incref(c->role)
	                            : json_string("assistant"));
	json_object_set_new(m, "content",
	                    c->text.seen || c->n_calls == 0 ? buf_json(&c->text)
	                                                    : json_null());
	if (c->reasoning.len > 0)
		json_object_set_new(m, "reasoning_content",
		                    buf_json(&c->reasoning));
	if (c->n_calls > 0) {
		json_t *calls = json_array();
		for (unsigned i = 0; i < c->n_calls; i++) {
			const struct tool_call *t = &c->calls[i];
			json_array_append_new(
			    calls,
			    json_pack("{s:O?, s:O?, s:{s:O?, s:o}}", "id",
			              t->id, "type", t->type, "function",
			              "name", t->name, "arguments",
			              buf_json(&t->arguments)));
		}
		json_object_set_new(m, "tool_calls", calls);
	}
	return m;
}

static json_t *openai_result(struct sl_assembler *a)
{
	bool chat = a->kind == SL_ASSEMBLE_CHAT;
	json_t *choices = json_array();
	for (unsigned i = 0; i < a->n_choices; i++) {
		const struct sl_choice_parts *c = a->choices[i];
		if (!c)
			continue;
		json_t *finish = c->finish_reason
		                     ? json_incref(c->finish_reason)
		                     : json_null();
		json_t *lp =
		    c->logprobs ? json_incref(c->logprobs) : json_null();
		if (chat)
			json_array_append_new(
			    choices,
			    json_pack("{s:o, s:i, s:o, s:o}", "finish_reason",
			              finish, "index", c->index, "message",
			              chat_message(c), "logprobs", lp));
		else
			json_array_append_new(
			    choices,
			    json_pack("{s:o, s:i, s:o, s:o}", "text",
			              buf_json(&c->text), "index", c->index,
			              "logprobs", lp, "finish_reason", finish));
	}
	/* llama-server's own order: choices, created, model, fingerprint,
	 * object, usage, id, timings. */
	json_t *r = json_object();
	json_object_set_new(r, "choices", choices);
	for (size_t i = 0; i < 3; i++)
		if (a->top[i])
			json_object_set(r, top_fields[i], a->top[i]);
	json_object_set_new(
	    r, "object",
	    json_string(chat ? "chat.completion" : "text_completion"));
	if (a->usage)
		json_object_set(r, "usage", a->usage);
	if (a->top[3])
		json_object_set(r, "id", a->top[3]);
	if (a->timings)
		json_object_set(r, "timings", a->timings);
	return r;
}

json_t *sl_assembler_result(struct sl_assembler *a)
{
	if (!a->seen_event)
		return NULL;
	return a->kind == SL_ASSEMBLE_NATIVE ? native_result(a)
	                                     : openai_result(a);
}

bool sl_assemble_reproducible(enum sl_assemble_kind kind, const json_t *body)
{
	(void)body;
	return kind != SL_ASSEMBLE_NONE;
}

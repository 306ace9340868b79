/*
 * fuzz_assemble.c: plain answers assembled from any events (assemble.c).
 *
 * Input layout: one control byte, then events, one per line (LF). The
 * control byte picks the kind (low two bits: native, text, chat; 3 is
 * native too), return_tokens (bit 2), and whether lines jansson refuses
 * are fed too (bit 3; by default they are skipped, as the proxy skips
 * them, so that most inputs reach the checks on valid events below;
 * fed, they test robustness alone). A line's "data: " prefix is
 * dropped and empty lines are skipped, so a recorded stream is a seed as
 * it is (corpus/fuzz_assemble holds llama-server 0.7.0's recordings).
 *
 * The proxy hands the assembler only events that jansson parses (with
 * EVENT_JSON_FLAGS: any value, NUL allowed), and answers 502 as soon as
 * the assembler refuses one; the assembled result is used only when no
 * event was refused. So the invariants are checked on exactly that case:
 * every line parsed by jansson and every sl_assembler_add returned 0.
 * Then:
 *   - the result is NULL exactly when no event but "null" and "[DONE]"
 *     came;
 *   - after an error event ({"error": ...}) it is that event's text as
 *     written, and the status is 400 to 599 (an escaped "error" key makes
 *     no error event to jsmn, which compares keys as written: nothing is
 *     checked after one);
 *   - else the status is 200 and the result is valid JSON (jansson, same
 *     flags): an object, or for native answers an array of objects when
 *     events named more than one index;
 *   - when the events are free of backslashes and of duplicate keys (so
 *     that jsmn's keys as written and jansson's agree), the text is every
 *     piece joined: native, one index: the answer's "content" (when a
 *     string) is every event's "content" string joined, and its "tokens"
 *     (when an array) every event's "tokens" joined when return_tokens,
 *     else []; text: each answer choice's "text" (when a string) is the
 *     "text" strings of that index joined; chat: each choice's
 *     message.content is the delta "content" strings joined (null only
 *     when none came), and reasoning_content, present exactly when some
 *     came, the "reasoning_content" strings joined.
 * Every line fed is also fed as the proxy reads events (sl_event_read:
 * plain token events matched to the stream's shape rather than scanned)
 * to a second assembler. Whenever every sl_assembler_add returned 0, that
 * one must have accepted every event too, and its answer and status must
 * be the first's to the byte.
 * Whatever the lines were, nothing may crash, leak or read out of bounds.
 */
#include "sluice/json/assemble.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RETURN_TOKENS_BIT 0x04
#define EVERY_LINE_BIT 0x08
#define KIND_MASK 0x03

#define EVENT_JSON_FLAGS (JSON_DECODE_ANY | JSON_ALLOW_NUL)

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_assemble: %s\n", #cond);         \
			abort();                                               \
		}                                                              \
	} while (0)

static const enum sl_assemble_kind kinds[] = {
    SL_ASSEMBLE_NATIVE, SL_ASSEMBLE_TEXT, SL_ASSEMBLE_CHAT, SL_ASSEMBLE_NATIVE};

/* What the fed events add up to, as jansson reads them. */
struct expect {
	bool all_valid;   /* every event parsed, every add returned 0 */
	bool any_event;   /* an event besides "null" and "[DONE]" */
	bool plain_keys;  /* no backslash, no duplicate key anywhere */
	bool one_index;   /* native: every event of index 0 */
	bool error_event; /* an error event came (the first ends it) */
	const char *error_text;
	size_t error_len;
	/* Per choice: the text strings joined (native "content", text
	 * "text", chat delta "content") and chat's "reasoning_content". */
	json_t *text[SL_ASSEMBLE_MAX_CHOICES];
	json_t *reasoning[SL_ASSEMBLE_MAX_CHOICES];
	json_t *tokens; /* native: the "tokens" arrays joined */
};

/* The same lines, read as the proxy reads them. */
struct shaped {
	struct sl_assembler a;
	struct sl_event_shape shape;
	enum sl_event_dialect dialect;
	bool plain_ok;  /* every sl_assembler_add returned 0 */
	bool shaped_ok; /* and every add here */
};

static void feed_shaped(struct shaped *sh, const char *line, size_t len)
{
	struct sl_jscan s;
	struct sl_event_facts f;
	struct sl_event_match m;
	sl_event_read(&sh->shape, &s, line, len, sh->dialect, &f, &m);
	int rc = 0;
	if (m.piece)
		rc = sl_assembler_add_piece(&sh->a, line, len, &f, &m);
	else if (f.json)
		rc = sl_assembler_add_scanned(&sh->a, &s);
	sl_jscan_free(&s);
	if (rc != 0)
		sh->shaped_ok = false;
}

/* Appends a piece, when it is a string, to the joined text in *slot. */
static void join(json_t **slot, const json_t *piece)
{
	if (!json_is_string(piece))
		return;
	if (!*slot)
		*slot = json_string("");
	size_t have = json_string_length(*slot);
	size_t add = json_string_length(piece);
	char *joined = malloc(have + add + 1);
	CHECK(joined);
	memcpy(joined, json_string_value(*slot), have);
	memcpy(joined + have, json_string_value(piece), add);
	json_string_setn_nocheck(*slot, joined, have + add);
	free(joined);
}

/* A choice's index as the assembler reads it: absent is 0. */
static size_t index_of(const json_t *obj)
{
	const json_t *index = json_object_get(obj, "index");
	return index ? (size_t)json_integer_value(index) : 0;
}

/* The joined text in a slot, "" when nothing came. */
static bool text_is(const json_t *slot, const json_t *answer_text)
{
	return slot ? json_equal(slot, answer_text)
	            : json_string_length(answer_text) == 0;
}

/* Native: notes index, content and tokens of one (plain-keyed) event. */
static void note_native(struct expect *e, json_t *doc)
{
	json_t *index = json_object_get(doc, "index");
	if (index &&
	    !(json_is_integer(index) && json_integer_value(index) == 0))
		e->one_index = false;
	join(&e->text[0], json_object_get(doc, "content"));
	json_t *tokens = json_object_get(doc, "tokens");
	if (json_is_array(tokens))
		json_array_extend(e->tokens, tokens);
}

/*
 * OpenAI: joins each choice's pieces. The assembler took the event, so
 * every index in it is a small integer.
 */
static void note_openai(struct expect *e, json_t *doc,
                        enum sl_assemble_kind kind)
{
	json_t *choices = json_object_get(doc, "choices");
	size_t i;
	json_t *ch;
	json_array_foreach(choices, i, ch)
	{
		size_t at = index_of(ch);
		/*
		 * With a duplicate key, jsmn (first match) and jansson (last)
		 * may read different "index" members: only plain keys
		 * promise that both agree (see the file's comment).
		 */
		if (at >= SL_ASSEMBLE_MAX_CHOICES && !e->plain_keys)
			continue;
		CHECK(at < SL_ASSEMBLE_MAX_CHOICES);
		if (kind == SL_ASSEMBLE_TEXT) {
			join(&e->text[at], json_object_get(ch, "text"));
		} else {
			json_t *delta = json_object_get(ch, "delta");
			join(&e->text[at], json_object_get(delta, "content"));
			join(&e->reasoning[at],
			     json_object_get(delta, "reasoning_content"));
		}
	}
}

static void feed(struct sl_assembler *a, struct shaped *sh, struct expect *e,
                 const char *line, size_t len, enum sl_assemble_kind kind,
                 bool every_line)
{
	static const char prefix[] = "data: ";
	if (len >= sizeof(prefix) - 1 &&
	    memcmp(line, prefix, sizeof(prefix) - 1) == 0) {
		line += sizeof(prefix) - 1;
		len -= sizeof(prefix) - 1;
	}
	if (len == 0)
		return;
	bool done = len == 6 && memcmp(line, "[DONE]", 6) == 0;
	json_t *doc =
	    done ? NULL : json_loadb(line, len, EVENT_JSON_FLAGS, NULL);
	if (!done && !doc) {
		if (!every_line)
			return;
		e->all_valid = false;
	}
	bool was_error = e->error_event;
	if (sl_assembler_add(a, line, len) != 0) {
		e->all_valid = false;
		sh->plain_ok = false;
	}
	feed_shaped(sh, line, len);
	/* After a refusal nothing is checked: the proxy answers 502. */
	if (!e->all_valid || !json_is_object(doc) || was_error) {
		json_decref(doc);
		return;
	}
	e->any_event = true;
	json_t *strict = json_loadb(
	    line, len, EVENT_JSON_FLAGS | JSON_REJECT_DUPLICATES, NULL);
	bool plain = strict && !memchr(line, '\\', len);
	json_decref(strict);
	if (!plain)
		e->plain_keys = false;
	if (json_object_get(doc, "error")) {
		/* An escaped "error" key is no error event to jsmn, which
		 * reads keys as written: nothing is then expected. */
		if (!plain)
			e->all_valid = false;
		e->error_event = true;
		e->error_text = line;
		e->error_len = len;
	}
	if (kind == SL_ASSEMBLE_NATIVE && !e->error_event)
		note_native(e, doc);
	else if (!e->error_event)
		note_openai(e, doc, kind);
	json_decref(doc);
}

/*
 * OpenAI: each answer choice's text is its pieces joined; in chat, its
 * reasoning too (absent when none came), and "index" the choice's own.
 */
static void check_openai(const struct expect *e, json_t *answer,
                         enum sl_assemble_kind kind)
{
	json_t *choices = json_object_get(answer, "choices");
	size_t i;
	json_t *ch;
	json_array_foreach(choices, i, ch)
	{
		size_t at = index_of(ch);
		if (at >= SL_ASSEMBLE_MAX_CHOICES)
			continue; /* a text finish object's own index */
		if (kind == SL_ASSEMBLE_TEXT) {
			json_t *text = json_object_get(ch, "text");
			if (json_is_string(text))
				CHECK(text_is(e->text[at], text));
			continue;
		}
		json_t *msg = json_object_get(ch, "message");
		json_t *content = json_object_get(msg, "content");
		if (json_is_string(content))
			CHECK(text_is(e->text[at], content));
		else
			CHECK(json_is_null(content) &&
			      json_string_length(e->text[at]) == 0);
		json_t *reasoning = json_object_get(msg, "reasoning_content");
		if (reasoning)
			CHECK(json_is_string(reasoning) &&
			      text_is(e->reasoning[at], reasoning));
		else
			CHECK(json_string_length(e->reasoning[at]) == 0);
	}
}

/* The native checks on content and tokens, for one index. */
static void check_native(const struct expect *e, json_t *answer,
                         bool return_tokens)
{
	CHECK(json_is_object(answer));
	json_t *content = json_object_get(answer, "content");
	if (json_is_string(content))
		CHECK(text_is(e->text[0], content));
	json_t *tokens = json_object_get(answer, "tokens");
	if (json_is_array(tokens)) {
		if (return_tokens)
			CHECK(json_equal(tokens, e->tokens));
		else
			CHECK(json_array_size(tokens) == 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	enum sl_assemble_kind kind = kinds[data[0] & KIND_MASK];
	bool return_tokens = data[0] & RETURN_TOKENS_BIT;
	const char *text = (const char *)data + 1;
	size_t len = size - 1;

	struct sl_assembler a;
	sl_assembler_init(&a, kind, return_tokens);
	struct shaped sh = {.dialect = kind == SL_ASSEMBLE_NATIVE
	                                   ? SL_DIALECT_NATIVE
	                                   : SL_DIALECT_OPENAI,
	                    .plain_ok = true,
	                    .shaped_ok = true};
	sl_assembler_init(&sh.a, kind, return_tokens);
	struct expect e = {.all_valid = true,
	                   .plain_keys = true,
	                   .one_index = true,
	                   .tokens = json_array()};
	size_t from = 0;
	while (from < len) {
		const char *nl = memchr(text + from, '\n', len - from);
		size_t to = nl ? (size_t)(nl - text) : len;
		feed(&a, &sh, &e, text + from, to - from, kind,
		     data[0] & EVERY_LINE_BIT);
		from = to + 1;
	}

	size_t out_len = 0;
	char *out = sl_assembler_result(&a, &out_len);
	int status = sl_assembler_status(&a);
	if (out)
		CHECK(strlen(out) <= out_len && out[out_len] == '\0');
	if (sh.plain_ok) {
		size_t shaped_len = 0;
		char *shaped = sl_assembler_result(&sh.a, &shaped_len);
		CHECK(sh.shaped_ok);
		CHECK((shaped != NULL) == (out != NULL));
		CHECK(shaped_len == out_len &&
		      (!out || memcmp(shaped, out, out_len) == 0));
		CHECK(sl_assembler_status(&sh.a) == status);
		free(shaped);
	}
	sl_assembler_free(&sh.a);
	sl_event_shape_free(&sh.shape);
	if (e.all_valid) {
		CHECK((out != NULL) == e.any_event);
		if (e.error_event) {
			CHECK(status >= 400 && status <= 599);
			CHECK(out_len == e.error_len &&
			      memcmp(out, e.error_text, out_len) == 0);
		} else if (out) {
			CHECK(status == 200);
			json_error_t err;
			json_t *answer =
			    json_loadb(out, out_len, EVENT_JSON_FLAGS, &err);
			if (!answer)
				fprintf(stderr,
				        "fuzz_assemble: not JSON (%s at %d): "
				        "%.*s\n",
				        err.text, err.position, (int)out_len,
				        out);
			CHECK(answer);
			if (kind == SL_ASSEMBLE_NATIVE &&
			    json_is_array(answer)) {
				CHECK(!e.one_index || !e.plain_keys);
				size_t i;
				json_t *v;
				json_array_foreach(answer, i, v)
				    CHECK(json_is_object(v));
			} else {
				CHECK(json_is_object(answer));
			}
			if (kind == SL_ASSEMBLE_NATIVE && e.one_index &&
			    e.plain_keys)
				check_native(&e, answer, return_tokens);
			else if (kind != SL_ASSEMBLE_NATIVE && e.plain_keys)
				check_openai(&e, answer, kind);
			json_decref(answer);
		}
	}
	free(out);
	for (size_t i = 0; i < SL_ASSEMBLE_MAX_CHOICES; i++) {
		json_decref(e.text[i]);
		json_decref(e.reasoning[i]);
	}
	json_decref(e.tokens);
	sl_assembler_free(&a);
	return 0;
}

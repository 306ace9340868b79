/*
 * fuzz_assemble.c: plain answers assembled from any events (assemble.c).
 *
 * Input layout: one control byte, then events, one per line (LF). The
 * control byte picks the kind (low two bits: native, text, chat; 3 is
 * native too) and return_tokens (bit 2). A line's "data: " prefix is
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
 *     written, and the status is 400 to 599;
 *   - else the status is 200 and the result is valid JSON (jansson, same
 *     flags): an object, or for native answers an array of objects when
 *     events named more than one index;
 *   (an event whose "error" key is escaped is not one to jsmn, which
 *   compares keys as written: nothing is checked after one)
 *   - native, one index, events free of backslashes and of duplicate
 *     keys (so that jsmn's keys as written and jansson's agree): when the
 *     answer's "content" is a string it is every event's "content" string
 *     joined, and its "tokens" (when an array) every event's "tokens"
 *     joined when return_tokens, else [].
 * Whatever the lines were, nothing may crash, leak or read out of bounds.
 */
#include "sluice/assemble.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RETURN_TOKENS_BIT 0x04
#define KIND_MASK 0x03
/* Events that matter to the checks; later lines are still fed. */
#define MAX_EVENTS 4096

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
	json_t *content; /* native: the "content" strings joined */
	json_t *tokens;  /* native: the "tokens" arrays joined */
};

/* Native: notes index, content and tokens of one (plain-keyed) event. */
static void note_native(struct expect *e, json_t *doc)
{
	json_t *index = json_object_get(doc, "index");
	if (index &&
	    !(json_is_integer(index) && json_integer_value(index) == 0))
		e->one_index = false;
	json_t *content = json_object_get(doc, "content");
	if (json_is_string(content)) {
		size_t have = json_string_length(e->content);
		size_t add = json_string_length(content);
		char *joined = malloc(have + add + 1);
		CHECK(joined);
		memcpy(joined, json_string_value(e->content), have);
		memcpy(joined + have, json_string_value(content), add);
		json_string_setn_nocheck(e->content, joined, have + add);
		free(joined);
	}
	json_t *tokens = json_object_get(doc, "tokens");
	if (json_is_array(tokens))
		json_array_extend(e->tokens, tokens);
}

static void feed(struct sl_assembler *a, struct expect *e, const char *line,
                 size_t len, enum sl_assemble_kind kind)
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
	if (!done && !doc)
		e->all_valid = false;
	bool was_error = e->error_event;
	if (sl_assembler_add(a, line, len) != 0)
		e->all_valid = false;
	if (!json_is_object(doc) || was_error) {
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
	json_decref(doc);
}

/* The native checks on content and tokens, for one index. */
static void check_native(const struct expect *e, json_t *answer,
                         bool return_tokens)
{
	CHECK(json_is_object(answer));
	json_t *content = json_object_get(answer, "content");
	if (json_is_string(content))
		CHECK(json_equal(content, e->content));
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
	struct expect e = {.all_valid = true,
	                   .plain_keys = true,
	                   .one_index = true,
	                   .content = json_string(""),
	                   .tokens = json_array()};
	size_t from = 0;
	for (unsigned n = 0; from < len && n < MAX_EVENTS; n++) {
		const char *nl = memchr(text + from, '\n', len - from);
		size_t to = nl ? (size_t)(nl - text) : len;
		feed(&a, &e, text + from, to - from, kind);
		from = to + 1;
	}

	size_t out_len = 0;
	char *out = sl_assembler_result(&a, &out_len);
	int status = sl_assembler_status(&a);
	if (out)
		CHECK(strlen(out) <= out_len && out[out_len] == '\0');
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
			json_decref(answer);
		}
	}
	free(out);
	json_decref(e.content);
	json_decref(e.tokens);
	sl_assembler_free(&a);
	return 0;
}

/*
 * test_assemble.c: streamed events gathered into one answer, byte for byte.
 *
 * assemble_recordings.h holds real llama-server 0.7.0 streams and the plain
 * answers llama-server gave to the same requests (tests/record_assemble.py
 * says how they were recorded). The cases below them are written by hand,
 * in the shapes llama-server uses, for what the demo model cannot produce:
 * tool calls, reasoning, escapes and NUL bytes, an error mid-stream.
 */
#include "sluice/json/assemble.h"

#include "sluice/base/common.h"
#include "test.h"

struct recording {
	const char *name;
	enum sl_assemble_kind kind;
	bool return_tokens;
	const char *stream; /* as llama-server sent it */
	const char *want;   /* the plain answer */
};

#include "assemble_recordings.h"

/*
 * Every answer is assembled twice: from sl_assembler_add() per event, and
 * as the proxy does it, each event read against the stream's shape
 * (sl_event_read: plain token events matched, not scanned). The two must
 * be the same to the byte. Matches are counted, so that a test can tell
 * that the second way was taken.
 */
struct twice {
	struct sl_assembler plain, shaped;
	struct sl_event_shape shape;
	enum sl_event_dialect dialect;
	unsigned matched;
};

static unsigned shape_matches; /* over every answer so far */

static void twice_init(struct twice *t, enum sl_assemble_kind kind, bool tokens)
{
	sl_assembler_init(&t->plain, kind, tokens);
	sl_assembler_init(&t->shaped, kind, tokens);
	t->shape = (struct sl_event_shape){0};
	t->dialect =
	    kind == SL_ASSEMBLE_NATIVE ? SL_DIALECT_NATIVE : SL_DIALECT_OPENAI;
	t->matched = 0;
}

static void twice_add(struct twice *t, const char *data, size_t len)
{
	ASSERT_EQ(sl_assembler_add(&t->plain, data, len), 0);
	struct sl_jscan s;
	struct sl_event_facts f;
	struct sl_event_match m;
	sl_event_read(&t->shape, &s, data, len, t->dialect, &f, &m);
	if (m.piece) {
		t->matched++;
		shape_matches++;
		ASSERT_EQ(sl_assembler_add_piece(&t->shaped, data, len, &f, &m),
		          0);
	} else if (f.json) {
		ASSERT_EQ(sl_assembler_add_scanned(&t->shaped, &s), 0);
	}
	sl_jscan_free(&s);
}

/* The answer, checked to be the same both ways. */
static char *twice_result(struct twice *t, int *status)
{
	size_t len = 0, shaped_len = 0;
	char *s = sl_assembler_result(&t->plain, &len);
	char *shaped = sl_assembler_result(&t->shaped, &shaped_len);
	ASSERT(s != NULL && shaped != NULL);
	ASSERT_EQ(strlen(s), len);
	ASSERT_STR_EQ(shaped, s);
	*status = sl_assembler_status(&t->plain);
	ASSERT_EQ(sl_assembler_status(&t->shaped), *status);
	free(shaped);
	sl_assembler_free(&t->plain);
	sl_assembler_free(&t->shaped);
	sl_event_shape_free(&t->shape);
	return s;
}

/* Feeds each event's data ("data: " lines; one line each here). */
static void feed_stream(struct twice *t, const char *stream)
{
	const char *p = stream;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		if (n > 6 && memcmp(p, "data: ", 6) == 0)
			twice_add(t, p + 6, n - 6);
		p += n + (nl != NULL);
	}
}

static char *assemble_stream(enum sl_assemble_kind kind, bool tokens,
                             const char *stream, int *status)
{
	struct twice t;
	twice_init(&t, kind, tokens);
	feed_stream(&t, stream);
	return twice_result(&t, status);
}

static void test_recordings(void)
{
	for (size_t i = 0; i < SL_ARRAY_SIZE(recordings); i++) {
		const struct recording *r = &recordings[i];
		fprintf(stderr, "   %s\n", r->name);
		int status;
		char *s = assemble_stream(r->kind, r->return_tokens, r->stream,
		                          &status);
		ASSERT_STR_EQ(s, r->want);
		ASSERT_EQ(status, 200);
		free(s);
	}
}

/* Events given as their data texts. */
static char *assemble(enum sl_assemble_kind kind, const char *const *events,
                      int *status)
{
	struct twice t;
	twice_init(&t, kind, false);
	for (; *events; events++)
		twice_add(&t, *events, strlen(*events));
	return twice_result(&t, status);
}

#define EVENTS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Escapes are joined as written: a NUL, a quote, a split surrogate pair. */
static void test_escapes_joined_as_written(void)
{
	int status;
	char *s = assemble(
	    SL_ASSEMBLE_NATIVE,
	    EVENTS("{\"index\":0,\"content\":\"a\\u0000\",\"tokens\":[1],"
	           "\"stop\":false}",
	           "{\"index\":0,\"content\":\"\\\"\\ud83d\",\"tokens\":[2],"
	           "\"stop\":false}",
	           "{\"index\":0,\"content\":\"\\ude00\\n\",\"tokens\":[3],"
	           "\"stop\":false}",
	           "{\"index\":0,\"content\":\"\",\"tokens\":[],\"stop\":true,"
	           "\"p\":0.923,\"generation_settings\":{\"stream\":true,"
	           "\"top_p\":0.949999988079071}}"),
	    &status);
	ASSERT_STR_EQ(s, "{\"index\":0,\"content\":\"a\\u0000\\\"\\ud83d"
	                 "\\ude00\\n\",\"tokens\":[],\"stop\":true,\"p\":0.923,"
	                 "\"generation_settings\":{\"stream\":false,\"top_p\":"
	                 "0.949999988079071}}");
	ASSERT_EQ(status, 200);
	free(s);
}

/*
 * Chat deltas as llama-server's common_chat_msg_diff writes them: reasoning
 * first, then a tool call whose arguments come in pieces. The plain
 * message (common_chat_msg::to_json_oaicompat) is role, reasoning_content,
 * content (null: no text and a tool call), tool_calls {type, function,
 * id}.
 */
static void test_chat_tool_calls_and_reasoning(void)
{
	int status;
	char *s = assemble(
	    SL_ASSEMBLE_CHAT,
	    EVENTS(
	        "{\"choices\":[{\"finish_reason\":null,\"index\":0,"
	        "\"delta\":{\"role\":\"assistant\",\"content\":null}}],"
	        "\"created\":1,\"id\":\"c\",\"model\":\"m\","
	        "\"system_fingerprint\":\"f\",\"object\":"
	        "\"chat.completion.chunk\"}",
	        "{\"choices\":[{\"finish_reason\":null,\"index\":0,"
	        "\"delta\":{\"reasoning_content\":\"I think\"}}],"
	        "\"created\":1,\"id\":\"c\"}",
	        "{\"choices\":[{\"finish_reason\":null,\"index\":0,"
	        "\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\","
	        "\"type\":\"function\",\"function\":{\"name\":\"get\","
	        "\"arguments\":\"{\\\"a\\\":\"}}]}}],\"created\":1}",
	        "{\"choices\":[{\"finish_reason\":null,\"index\":0,"
	        "\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
	        "{\"arguments\":\"1.50}\"}}]}}],\"created\":1}",
	        "{\"choices\":[{\"finish_reason\":\"tool_calls\",\"index\":0,"
	        "\"delta\":{}}],\"created\":1}",
	        "{\"choices\":[],\"created\":1,\"id\":\"c\",\"model\":\"m\","
	        "\"system_fingerprint\":\"f\",\"object\":"
	        "\"chat.completion.chunk\",\"usage\":{\"completion_tokens\":"
	        "5},\"timings\":{\"prompt_ms\":0.10}}",
	        "[DONE]"),
	    &status);
	ASSERT_STR_EQ(
	    s, "{\"choices\":[{\"finish_reason\":\"tool_calls\",\"index\":0,"
	       "\"message\":{\"role\":\"assistant\",\"reasoning_content\":"
	       "\"I think\",\"content\":null,\"tool_calls\":[{\"type\":"
	       "\"function\",\"function\":{\"name\":\"get\",\"arguments\":"
	       "\"{\\\"a\\\":1.50}\"},\"id\":\"call_1\"}]}}],\"created\":1,"
	       "\"model\":\"m\",\"system_fingerprint\":\"f\",\"object\":"
	       "\"chat.completion\",\"usage\":{\"completion_tokens\":5},"
	       "\"id\":\"c\",\"timings\":{\"prompt_ms\":0.10}}");
	free(s);
}

/*
 * An error event mid-stream ends the answer: it is the answer, as written,
 * with its code as the status; what follows is ignored.
 */
static void test_error_mid_stream(void)
{
	const char *error = "{\"error\":{\"code\":503,\"message\":\"Loading "
	                    "model\",\"type\":\"unavailable_error\"}}";
	int status;
	char *s =
	    assemble(SL_ASSEMBLE_TEXT,
	             EVENTS("{\"choices\":[{\"text\":\"a\",\"index\":0,"
	                    "\"logprobs\":null,\"finish_reason\":null}]}",
	                    error,
	                    "{\"choices\":[{\"text\":\"b\",\"index\":0,"
	                    "\"logprobs\":null,\"finish_reason\":null}]}"),
	             &status);
	ASSERT_STR_EQ(s, error);
	ASSERT_EQ(status, 503);
	free(s);
	/* A code that is no HTTP error status answers 500. */
	s = assemble(SL_ASSEMBLE_NATIVE, EVENTS("{\"error\":{\"code\":7}}"),
	             &status);
	ASSERT_EQ(status, 500);
	free(s);
}

/* A prompt array's stream opens with null; a missing finish is left out. */
static void test_null_event_and_cut_stream(void)
{
	int status;
	char *s =
	    assemble(SL_ASSEMBLE_NATIVE,
	             EVENTS("null",
	                    "{\"index\":1,\"content\":\"x\","
	                    "\"stop\":false}",
	                    "{\"index\":0,\"content\":\"a\",\"stop\":false}",
	                    "{\"index\":0,\"content\":\"\",\"stop\":true}"),
	             &status);
	ASSERT_STR_EQ(s, "[{\"index\":0,\"content\":\"a\",\"stop\":true},"
	                 "{\"index\":1,\"content\":\"x\",\"stop\":false}]");
	free(s);
	s = assemble(SL_ASSEMBLE_TEXT,
	             EVENTS("{\"choices\":[{\"text\":\"a\",\"index\":1,"
	                    "\"finish_reason\":null}]}",
	                    "{\"choices\":[{\"text\":\"b\",\"index\":0,"
	                    "\"finish_reason\":\"stop\"}],\"usage\":{}}"),
	             &status);
	ASSERT_STR_EQ(s, "{\"choices\":[{\"text\":\"b\",\"index\":0,"
	                 "\"finish_reason\":\"stop\"}],\"usage\":{}}");
	free(s);
}

static void test_refusals(void)
{
	struct sl_assembler a;
	sl_assembler_init(&a, SL_ASSEMBLE_CHAT, false);
	size_t len;
	ASSERT(sl_assembler_result(&a, &len) == NULL); /* nothing came */
	ASSERT_EQ(sl_assembler_add(&a, "[1]", 3), SL_EINVAL);
	ASSERT_EQ(sl_assembler_add(&a, "{\"a\":", 5), SL_EINVAL);
	char ev[96];
	snprintf(ev, sizeof(ev), "{\"choices\":[{\"index\":%d}]}",
	         SL_ASSEMBLE_MAX_CHOICES - 1);
	ASSERT_EQ(sl_assembler_add(&a, ev, strlen(ev)), 0);
	snprintf(ev, sizeof(ev), "{\"choices\":[{\"index\":%d}]}",
	         SL_ASSEMBLE_MAX_CHOICES);
	ASSERT_EQ(sl_assembler_add(&a, ev, strlen(ev)), SL_EINVAL);
	snprintf(ev, sizeof(ev),
	         "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":"
	         "[{\"index\":%d}]}}]}",
	         SL_ASSEMBLE_MAX_TOOL_CALLS);
	ASSERT_EQ(sl_assembler_add(&a, ev, strlen(ev)), SL_EINVAL);
	sl_assembler_free(&a);
}

/*
 * Found by fuzz_assemble: jsmn takes a key without a value ({"a"}), and
 * the chat answer copied the base event's unknown members by counting
 * keys, reading the token past the last one for the missing value. The
 * members before it are copied; the broken one ends the copying. With 62
 * members the tokens fill a grown array of 128 exactly, so the read past
 * it is a heap overflow under ASan; either way the answer differed.
 */
static void test_chat_key_without_value(void)
{
	int status;
	char *s = assemble(SL_ASSEMBLE_CHAT,
	                   EVENTS("{\"choices\":[],\"x\":1,\"a\"}"), &status);
	ASSERT_STR_EQ(s, "{\"choices\":[],\"object\":\"chat.completion\","
	                 "\"x\":1}");
	ASSERT_EQ(status, 200);
	free(s);

	char event[2048] = "{\"choices\":[]";
	char want[2048] = "{\"choices\":[],\"object\":\"chat.completion\"";
	for (int i = 0; i < 62; i++) {
		char member[32];
		snprintf(member, sizeof(member), ",\"k%d\":%d", i, i);
		strcat(event, member);
		strcat(want, member);
	}
	strcat(event, ",\"a\"}");
	strcat(want, "}");
	s = assemble(SL_ASSEMBLE_CHAT, EVENTS(event), &status);
	ASSERT_STR_EQ(s, want);
	free(s);
}

static bool reproducible(enum sl_assemble_kind kind, const char *body)
{
	json_t *doc = json_loads(body, 0, NULL);
	ASSERT(doc != NULL);
	bool r = sl_assemble_reproducible(kind, doc);
	json_decref(doc);
	return r;
}

static void test_reproducible(void)
{
	ASSERT(reproducible(SL_ASSEMBLE_NATIVE, "{\"n_probs\":2}"));
	ASSERT(reproducible(SL_ASSEMBLE_NATIVE, "{\"stop\":[\"x\"]}"));
	ASSERT(!reproducible(SL_ASSEMBLE_NATIVE,
	                     "{\"stop\":[\"x\"],\"n_probs\":2}"));
	ASSERT(!reproducible(SL_ASSEMBLE_CHAT,
	                     "{\"stop\":\"x\",\"logprobs\":true}"));
	ASSERT(reproducible(SL_ASSEMBLE_NATIVE,
	                    "{\"response_fields\":[\"content\"]}"));
	ASSERT(!reproducible(SL_ASSEMBLE_NATIVE,
	                     "{\"response_fields\":[\"tokens\"]}"));
	ASSERT(!reproducible(SL_ASSEMBLE_NATIVE,
	                     "{\"response_fields\":[\"content\"],"
	                     "\"prompt\":[\"a\",\"b\"]}"));
	ASSERT(!reproducible(SL_ASSEMBLE_NATIVE,
	                     "{\"response_fields\":[\"content\"],"
	                     "\"n_probs\":1}"));
	ASSERT(!reproducible(SL_ASSEMBLE_TEXT, "{\"response_fields\":[]}"));
	ASSERT(reproducible(SL_ASSEMBLE_TEXT, "{\"n\":2}"));
	ASSERT(!reproducible(SL_ASSEMBLE_CHAT, "{\"n\":2}"));
	ASSERT(!reproducible(SL_ASSEMBLE_CHAT, "{\"return_tokens\":true}"));
	ASSERT(!reproducible(SL_ASSEMBLE_CHAT,
	                     "{\"tools\":[{\"type\":\"function\"}]}"));
	ASSERT(!reproducible(SL_ASSEMBLE_NONE, "{}"));
}

/* A chat token event: `piece` as written, `created` as given. */
static char *chat_token(const char *member, const char *piece, int created)
{
	char *e = NULL;
	ASSERT(asprintf(&e,
	                "{\"choices\":[{\"finish_reason\":null,\"index\":0,"
	                "\"delta\":{\"%s\":\"%s\"}}],\"created\":%d,\"id\":"
	                "\"chatcmpl-x\",\"model\":\"m\",\"system_"
	                "fingerprint\":\"f\",\"object\":\"chat.completion."
	                "chunk\"}",
	                member, piece, created) > 0);
	return e;
}

/*
 * Plain token events matched to the stream's shape: escapes of every kind
 * in the piece, a shape relearnt when "created" turns, reasoning pieces,
 * and events of other shapes among them. The answer must be the same as
 * from scanning every event (twice_result), and exactly the plain token
 * events after the first of each shape must have been matched.
 */
static void test_shape_matched_events(void)
{
	struct {
		const char *member, *piece;
		int created;
		bool matched;
	} tokens[] = {
	    {"content", "Hel", 1, false}, /* scanned: the shape */
	    {"content", "lo", 1, true},
	    {"content", "\\\"", 1, true},
	    {"content", "\\u00e9", 1, true},
	    {"content", "\\\\", 1, true},
	    {"content", "\\n", 1, true},
	    {"content", " w", 2, false}, /* a new second: a new shape */
	    {"content", "or", 2, true},
	    {"reasoning_content", "hm", 2, false},
	    {"reasoning_content", " ok", 2, true},
	    {"content", "ld", 2, false},
	    {"content", "\\ud83d\\ude00", 2, true},
	};
	struct twice t;
	twice_init(&t, SL_ASSEMBLE_CHAT, false);
	const char *role =
	    "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{"
	    "\"role\":\"assistant\",\"content\":null}}],\"created\":1,"
	    "\"id\":\"chatcmpl-x\",\"model\":\"m\",\"system_fingerprint\":"
	    "\"f\",\"object\":\"chat.completion.chunk\"}";
	twice_add(&t, role, strlen(role));
	unsigned want = 0;
	for (size_t i = 0; i < SL_ARRAY_SIZE(tokens); i++) {
		char *e = chat_token(tokens[i].member, tokens[i].piece,
		                     tokens[i].created);
		unsigned before = t.matched;
		twice_add(&t, e, strlen(e));
		ASSERT_EQ(t.matched - before, tokens[i].matched ? 1u : 0u);
		want += tokens[i].matched;
		free(e);
	}
	const char *finish =
	    "{\"choices\":[{\"finish_reason\":\"length\",\"index\":0,"
	    "\"delta\":{}}],\"created\":2,\"id\":\"chatcmpl-x\",\"model\":"
	    "\"m\",\"system_fingerprint\":\"f\",\"object\":\"chat."
	    "completion.chunk\",\"timings\":{\"cache_n\":0,\"prompt_n\":3}}";
	twice_add(&t, finish, strlen(finish));
	twice_add(&t, "[DONE]", 6);
	ASSERT_EQ(t.matched, want);
	int status;
	char *s = twice_result(&t, &status);
	ASSERT_EQ(status, 200);
	ASSERT(strstr(s, "\"content\":\"Hello\\\"\\u00e9\\\\\\n world"
	                 "\\ud83d\\ude00\"") != NULL);
	ASSERT(strstr(s, "\"reasoning_content\":\"hm ok\"") != NULL);
	free(s);
}

/* A native token event: `content` and `tokens` as written. */
static char *native_token(const char *content, const char *tokens, int n)
{
	char *e = NULL;
	ASSERT(asprintf(&e,
	                "{\"index\":0,\"content\":\"%s\",\"tokens\":[%s],"
	                "\"stop\":false,\"id_slot\":-1,\"tokens_predicted\":%d,"
	                "\"tokens_evaluated\":7}",
	                content, tokens, n) > 0);
	return e;
}

/*
 * Native token events matched to their shape: the content, the token ids
 * (one, several, none) and the count differ from event to event. With
 * return_tokens the ids are joined; the answer is the same as from
 * scanning every event, and every plain token event after the first was
 * matched.
 */
static void test_shape_matched_native_events(void)
{
	struct {
		const char *content, *tokens;
	} tokens[] = {
	    {"Hel", "15043"},   {"lo", "29892"},     {"", "227"},
	    {"\\u00e9", "169"}, {" w", "281,29877"}, {"or\\\"ld", "1"},
	    {"!", ""},
	};
	for (int return_tokens = 0; return_tokens < 2; return_tokens++) {
		struct twice t;
		twice_init(&t, SL_ASSEMBLE_NATIVE, return_tokens);
		for (size_t i = 0; i < SL_ARRAY_SIZE(tokens); i++) {
			char *e = native_token(tokens[i].content,
			                       tokens[i].tokens, (int)i + 1);
			twice_add(&t, e, strlen(e));
			free(e);
		}
		ASSERT_EQ(t.matched, SL_ARRAY_SIZE(tokens) - 1);
		const char *final =
		    "{\"index\":0,\"content\":\"\",\"tokens\":[],\"id_slot\":0,"
		    "\"stop\":true,\"model\":\"m\",\"tokens_predicted\":8,"
		    "\"tokens_evaluated\":7,\"generation_settings\":{"
		    "\"stream\":true},\"stop_type\":\"limit\"}";
		twice_add(&t, final, strlen(final));
		int status;
		char *s = twice_result(&t, &status);
		ASSERT_EQ(status, 200);
		ASSERT(strstr(s, "\"content\":\"Hello\\u00e9 wor\\\"ld!\"") !=
		       NULL);
		ASSERT(strstr(s, return_tokens
		                     ? "\"tokens\":[15043,29892,227,169,281,"
		                       "29877,1]"
		                     : "\"tokens\":[]") != NULL);
		free(s);
	}
}

int main(void)
{
	RUN(test_recordings);
	RUN(test_shape_matched_events);
	RUN(test_shape_matched_native_events);
	RUN(test_escapes_joined_as_written);
	RUN(test_chat_tool_calls_and_reasoning);
	RUN(test_error_mid_stream);
	RUN(test_null_event_and_cut_stream);
	RUN(test_refusals);
	RUN(test_chat_key_without_value);
	RUN(test_reproducible);
	return 0;
}

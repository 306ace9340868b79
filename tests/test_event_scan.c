/*
 * Unit tests for event_scan.c: what each kind of upstream event says, for
 * events recorded from llama-server 0.7.0 (demo-tiny model) as it sent
 * them, and a few it sends rarely (errors, a filtered final event, NUL).
 */
#include "sluice/json/event_scan.h"

#include "sluice/base/common.h"
#include "test.h"

/* Recorded from llama-server 0.7.0 (demo-tiny model), as sent. */
static const char native_token[] =
    "{\"index\":0,\"content\":\"\\\"\",\"tokens\":[261],\"stop\":false,\"id_"
    "slot\":-1,\"tokens_predicted\":1,\"tokens_evaluated\":7}";
static const char native_final[] =
    "{\"index\":0,\"content\":\"\",\"tokens\":[],\"id_slot\":0,\"stop\":true,"
    "\"model\":\"build/tests/"
    "demo-tiny.gguf\",\"tokens_predicted\":3,\"tokens_evaluated\":7,"
    "\"generation_settings\":{\"seed\":4294967295,\"temperature\":0."
    "800000011920929,\"dynatemp_range\":0.0,\"dynatemp_exponent\":1.0,\"top_"
    "k\":40,\"top_p\":0.949999988079071,\"min_p\":0.05000000074505806,\"top_n_"
    "sigma\":-1.0,\"xtc_probability\":0.0,\"xtc_threshold\":0."
    "10000000149011612,\"typical_p\":1.0,\"repeat_last_n\":64,\"repeat_"
    "penalty\":1.0,\"presence_penalty\":0.0,\"frequency_penalty\":0.0,\"dry_"
    "multiplier\":0.0,\"dry_base\":1.75,\"dry_allowed_length\":2,\"dry_penalty_"
    "last_n\":64,\"dry_sequence_breakers\":[\"\\n\",\":\",\"\\\"\",\"*\"],"
    "\"mirostat\":0,\"mirostat_tau\":5.0,\"mirostat_eta\":0.10000000149011612,"
    "\"adaptive_target\":-1.0,\"adaptive_decay\":0.8999999761581421,\"stop\":[]"
    ",\"max_tokens\":3,\"n_predict\":3,\"n_keep\":0,\"n_discard\":0,\"ignore_"
    "eos\":false,\"stream\":true,\"logit_bias\":[],\"n_probs\":0,\"min_keep\":"
    "0,\"grammar\":\"\",\"grammar_lazy\":false,\"grammar_triggers\":[],"
    "\"preserved_tokens\":[],\"chat_format\":\"Content-only\",\"reasoning_"
    "format\":\"deepseek\",\"reasoning_in_content\":false,\"generation_"
    "prompt\":\"\",\"samplers\":[\"penalties\",\"dry\",\"top_n_sigma\",\"top_"
    "k\",\"typ_p\",\"top_p\",\"min_p\",\"xtc\",\"temperature\"],\"speculative."
    "types\":\"none\",\"timings_per_token\":false,\"post_sampling_probs\":"
    "false,\"backend_sampling\":false,\"lora\":[]},\"prompt\":\"<s> "
    "hello\",\"has_new_line\":false,\"truncated\":false,\"stop_type\":"
    "\"limit\",\"stopping_word\":\"\",\"tokens_cached\":9,\"timings\":{\"cache_"
    "n\":6,\"prompt_n\":1,\"prompt_ms\":0.435,\"prompt_per_token_ms\":0.435,"
    "\"prompt_per_second\":2298.8505747126437,\"predicted_n\":3,\"predicted_"
    "ms\":0.298,\"predicted_per_token_ms\":0.149,\"predicted_per_second\":6711."
    "4093959731545}}";
static const char native_probs10[] =
    "{\"index\":0,\"content\":\"C\",\"tokens\":[294],\"stop\":false,\"id_"
    "slot\":-1,\"tokens_predicted\":2,\"tokens_evaluated\":7,\"completion_"
    "probabilities\":[{\"id\":294,\"token\":\"C\",\"bytes\":[67],\"logprob\":-"
    "2.148714780807495,\"top_logprobs\":[{\"id\":294,\"token\":\"C\",\"bytes\":"
    "[67],\"logprob\":-2.148714780807495},{\"id\":263,\"token\":\"$\","
    "\"bytes\":[36],\"logprob\":-2.381047010421753},{\"id\":359,\"token\":\" "
    "is\",\"bytes\":[32,105,115],\"logprob\":-2.424715757369995},{\"id\":401,"
    "\"token\":\" "
    "into\",\"bytes\":[32,105,110,116,111],\"logprob\":-2.5478827953338623},{"
    "\"id\":261,\"token\":\"\\\"\",\"bytes\":[34],\"logprob\":-3."
    "0746028423309326},{\"id\":361,\"token\":\" "
    "that\",\"bytes\":[32,116,104,97,116],\"logprob\":-3.257387638092041},{"
    "\"id\":262,\"token\":\"#\",\"bytes\":[35],\"logprob\":-3.301953077316284},"
    "{\"id\":279,\"token\":\"4\",\"bytes\":[52],\"logprob\":-3.475722074508667}"
    ",{\"id\":382,\"token\":\" "
    "we\",\"bytes\":[32,119,101],\"logprob\":-3.531763792037964},{\"id\":342,"
    "\"token\":\"s\",\"bytes\":[115],\"logprob\":-3.661005735397339}]}]}";
static const char chat_probs5[] =
    "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":"
    "\" some\"},\"logprobs\":{\"content\":[{\"id\":397,\"token\":\" "
    "some\",\"bytes\":[32,115,111,109,101],\"logprob\":-0.8520258665084839,"
    "\"top_logprobs\":[{\"id\":397,\"token\":\" "
    "some\",\"bytes\":[32,115,111,109,101],\"logprob\":-0.8520258665084839},{"
    "\"id\":379,\"token\":\" "
    "all\",\"bytes\":[32,97,108,108],\"logprob\":-1.3142890930175781},{\"id\":"
    "377,\"token\":\" "
    "but\",\"bytes\":[32,98,117,116],\"logprob\":-2.462127685546875},{\"id\":"
    "404,\"token\":\" "
    "two\",\"bytes\":[32,116,119,111],\"logprob\":-3.5983619689941406},{\"id\":"
    "277,\"token\":\"2\",\"bytes\":[50],\"logprob\":-4.020208358764648}]}]}}],"
    "\"created\":1795457481,\"id\":\"chatcmpl-"
    "Uj3kLnZGczKdtNoIt3v6clOyhyGv71Fo\",\"model\":\"build/tests/"
    "demo-tiny.gguf\",\"system_fingerprint\":\"b11669-Debian\",\"object\":"
    "\"chat.completion.chunk\"}";

/* Scans `data` (its strlen) and checks it took no heap tokens. */
static struct sl_event_facts scan(const char *data,
                                  enum sl_event_dialect dialect)
{
	struct sl_jscan s;
	struct sl_event_facts f;
	sl_event_scan(&s, data, strlen(data), dialect, &f);
	ASSERT(s.tok == s.inline_tok);
	sl_jscan_free(&s);
	return f;
}

static void test_native_token(void)
{
	struct sl_event_facts f = scan(native_token, SL_DIALECT_NATIVE);
	ASSERT(f.json && f.object && !f.error && !f.done && !f.final);
	ASSERT_EQ(f.arrivals, 1);
	ASSERT_EQ(f.per_arrival, 1);
	ASSERT_EQ(f.index, 0);
	ASSERT(!f.has_count);
}

/* Every "tokens" entry counts, and an event with several is one arrival. */
static void test_native_several_tokens(void)
{
	struct sl_event_facts f = scan("{\"index\":2,\"content\":\"ab\","
	                               "\"tokens\":[1,2,3],\"stop\":false}",
	                               SL_DIALECT_NATIVE);
	ASSERT_EQ(f.arrivals, 1);
	ASSERT_EQ(f.per_arrival, 3);
	ASSERT_EQ(f.index, 2);
	/* Without "tokens" (response_fields), nonempty content is one. */
	f = scan("{\"content\":\"x\",\"stop\":false}", SL_DIALECT_NATIVE);
	ASSERT_EQ(f.arrivals, 1);
	ASSERT_EQ(f.per_arrival, 1);
	f = scan("{\"content\":\"\",\"tokens\":[],\"stop\":false}",
	         SL_DIALECT_NATIVE);
	ASSERT_EQ(f.arrivals, 0);
	ASSERT(!f.final);
}

/* "\u0000" is a piece of text like any other: one token. */
static void test_native_nul(void)
{
	struct sl_event_facts f =
	    scan("{\"index\":0,\"content\":\"\\u0000\",\"stop\":false}",
	         SL_DIALECT_NATIVE);
	ASSERT(f.json && !f.final);
	ASSERT_EQ(f.arrivals, 1);
	ASSERT_EQ(f.per_arrival, 1);
}

static void test_native_final(void)
{
	struct sl_event_facts f = scan(native_final, SL_DIALECT_NATIVE);
	ASSERT(f.object && f.final && !f.error);
	ASSERT_EQ(f.arrivals, 0);
	ASSERT_EQ(f.tokens_predicted, 3);
	ASSERT_EQ(f.index, 0);
	/* Its nested "stop": [] and "n_predict" are not the event's own. */
	ASSERT(!f.has_count);
}

/* A final event filtered by response_fields says no "stop" at all. */
static void test_native_filtered_final(void)
{
	struct sl_event_facts f = scan("{\"content\":\"\"}", SL_DIALECT_NATIVE);
	ASSERT(f.object && f.final);
	ASSERT_EQ(f.tokens_predicted, 0);
	ASSERT_EQ(f.arrivals, 0);
	f = scan("{\"index\":1,\"tokens_predicted\":7}", SL_DIALECT_NATIVE);
	ASSERT(f.final);
	ASSERT_EQ(f.index, 1);
	ASSERT_EQ(f.tokens_predicted, 7);
	/* A "stop" that is not the literal false ends the prompt too. */
	f = scan("{\"stop\":\"false\",\"tokens\":[5]}", SL_DIALECT_NATIVE);
	ASSERT(f.final);
	ASSERT_EQ(f.arrivals, 0);
}

/* n_probs 10: about 150 tokens, still inside SL_JSCAN_INLINE. */
static void test_native_probs(void)
{
	struct sl_event_facts f = scan(native_probs10, SL_DIALECT_NATIVE);
	ASSERT(!f.final);
	ASSERT_EQ(f.arrivals, 1);
	ASSERT_EQ(f.per_arrival, 1);
}

static void test_error(void)
{
	const char *err = "{\"error\":{\"code\":500,\"message\":\"boom\","
	                  "\"type\":\"server_error\"}}";
	for (int d = SL_DIALECT_NATIVE; d <= SL_DIALECT_TYPED; d++) {
		struct sl_event_facts f = scan(err, (enum sl_event_dialect)d);
		ASSERT(f.object && f.error);
		ASSERT_EQ(f.arrivals, 0);
		ASSERT(!f.final);
	}
	/* Only a top-level member: text that mentions an error is text. */
	struct sl_event_facts f =
	    scan("{\"content\":\"error\",\"x\":{\"error\":1},\"stop\":false}",
	         SL_DIALECT_NATIVE);
	ASSERT(!f.error);
	ASSERT_EQ(f.arrivals, 1);
}

static void test_done_and_non_json(void)
{
	struct sl_event_facts f = scan("[DONE]", SL_DIALECT_OPENAI);
	ASSERT(f.done && !f.json);
	f = scan("null", SL_DIALECT_NATIVE); /* a prompt array's opening */
	ASSERT(f.json && !f.object && !f.final);
	f = scan("{\"content\":", SL_DIALECT_NATIVE);
	ASSERT(!f.json && !f.object && !f.final && !f.done);
	f = scan("[DONE] ", SL_DIALECT_OPENAI);
	ASSERT(!f.done && !f.json);
}

static void test_openai(void)
{
	struct sl_event_facts f =
	    scan("{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{"
	         "\"role\":\"assistant\",\"content\":null}}],\"created\":1,"
	         "\"object\":\"chat.completion.chunk\"}",
	         SL_DIALECT_OPENAI);
	ASSERT(f.object && !f.error);
	ASSERT_EQ(f.arrivals, 0);
	f = scan(chat_probs5, SL_DIALECT_OPENAI);
	ASSERT_EQ(f.arrivals, 1);
	ASSERT_EQ(f.per_arrival, 1);
	/* /v1/completions: "text"; two choices with output: two arrivals. */
	f = scan(
	    "{\"choices\":[{\"text\":\"E\",\"index\":0},{\"text\":\"\"},"
	    "{\"text\":\"F\",\"index\":1}],\"object\":\"text_completion\"}",
	    SL_DIALECT_OPENAI);
	ASSERT_EQ(f.arrivals, 2);
	ASSERT_EQ(f.per_arrival, 1);
	f = scan("{\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}},"
	         "{\"delta\":{\"tool_calls\":[{\"index\":0}]}},"
	         "{\"delta\":{\"tool_calls\":[]}}]}",
	         SL_DIALECT_OPENAI);
	ASSERT_EQ(f.arrivals, 2);
	f = scan("{\"choices\":[],\"usage\":{\"completion_tokens\":3,"
	         "\"prompt_tokens\":52,\"total_tokens\":55}}",
	         SL_DIALECT_OPENAI);
	ASSERT(f.has_count);
	ASSERT_EQ(f.count, 3);
	ASSERT_EQ(f.arrivals, 0);
	/* A usage object without the count says 0, as jansson read it. */
	f = scan("{\"usage\":{}}", SL_DIALECT_OPENAI);
	ASSERT(f.has_count);
	ASSERT_EQ(f.count, 0);
	f = scan("{\"usage\":null}", SL_DIALECT_OPENAI);
	ASSERT(!f.has_count);
}

static void test_typed(void)
{
	struct sl_event_facts f =
	    scan("{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{"
	         "\"type\":\"text_delta\",\"text\":\" some\"}}",
	         SL_DIALECT_TYPED);
	ASSERT_EQ(f.arrivals, 1);
	ASSERT_EQ(f.per_arrival, 1);
	f = scan("{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
	         "\"max_tokens\",\"stop_sequence\":null},\"usage\":{"
	         "\"output_tokens\":3}}",
	         SL_DIALECT_TYPED);
	ASSERT_EQ(f.arrivals, 0);
	ASSERT(f.has_count);
	ASSERT_EQ(f.count, 3);
	f = scan("{\"type\":\"response.output_text.delta\",\"item_id\":\"m\","
	         "\"delta\":\" all\"}",
	         SL_DIALECT_TYPED);
	ASSERT_EQ(f.arrivals, 1);
	f = scan("{\"type\":\"response.completed\",\"response\":{\"usage\":{"
	         "\"input_tokens\":54,\"output_tokens\":3}},\"usage\":{"
	         "\"output_tokens\":9}}",
	         SL_DIALECT_TYPED);
	ASSERT(f.has_count);
	ASSERT_EQ(f.count, 3);
	/* message_start's usage is the prompt's, not the answer's. */
	f = scan("{\"type\":\"message_start\",\"message\":{\"usage\":{"
	         "\"output_tokens\":0}},\"usage\":{\"output_tokens\":5}}",
	         SL_DIALECT_TYPED);
	ASSERT(!f.has_count);
	/* A count that is not an integer is not taken. */
	f = scan("{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":"
	         "3.0}}",
	         SL_DIALECT_TYPED);
	ASSERT(!f.has_count);
}

/*
 * Plain answers, which proxy.c reads for their counts when it relays them
 * (llama-server 0.7.0's, shortened): the same members as a stream's last
 * events, plus the typed APIs' whole answers.
 */
/*
 * A plain answer's facts from a full scan, checked against
 * sl_event_scan_answer's shallow one: the counts must agree.
 */
static struct sl_event_facts plain(const char *data,
                                   enum sl_event_dialect dialect)
{
	struct sl_event_facts f = scan(data, dialect), g;
	struct sl_jscan s;
	sl_event_scan_answer(&s, data, strlen(data), dialect, &g);
	sl_jscan_free(&s);
	ASSERT_EQ(g.object, f.object);
	ASSERT_EQ(g.error, f.error);
	ASSERT_EQ(g.has_count, f.has_count);
	ASSERT_EQ(g.count, f.count);
	ASSERT_EQ(g.has_prompt, f.has_prompt);
	ASSERT_EQ(g.prompt_tokens, f.prompt_tokens);
	ASSERT_EQ(g.final, f.final);
	ASSERT_EQ(g.tokens_predicted, f.tokens_predicted);
	return f;
}

static void test_plain_answers(void)
{
	struct sl_event_facts f = plain(
	    "{\"choices\":[{\"finish_reason\":\"length\",\"index\":0,"
	    "\"message\":{\"role\":\"assistant\",\"content\":\" all\"}}],"
	    "\"object\":\"chat.completion\",\"usage\":{\"completion_tokens\":3,"
	    "\"prompt_tokens\":54,\"total_tokens\":57},\"timings\":{"
	    "\"cache_n\":53,\"prompt_n\":1}}",
	    SL_DIALECT_OPENAI);
	ASSERT(f.has_count && f.has_prompt);
	ASSERT_EQ(f.count, 3);
	ASSERT_EQ(f.prompt_tokens, 54);
	f = plain(
	    "{\"index\":0,\"content\":\"^ w\",\"tokens\":[],\"stop\":true,"
	    "\"tokens_predicted\":3,\"tokens_evaluated\":4}",
	    SL_DIALECT_NATIVE);
	ASSERT(f.final && f.has_prompt);
	ASSERT_EQ(f.tokens_predicted, 3);
	ASSERT_EQ(f.prompt_tokens, 4);
	f = plain(
	    "{\"id\":\"c\",\"type\":\"message\",\"role\":\"assistant\","
	    "\"content\":[{\"type\":\"text\",\"text\":\" some\"}],"
	    "\"usage\":{\"cache_read_input_tokens\":0,\"input_tokens\":54,"
	    "\"output_tokens\":3}}",
	    SL_DIALECT_TYPED);
	ASSERT(f.has_count && f.has_prompt && f.arrivals == 0);
	ASSERT_EQ(f.count, 3);
	ASSERT_EQ(f.prompt_tokens, 54);
	f = plain(
	    "{\"id\":\"resp_E\",\"object\":\"response\",\"output\":[{"
	    "\"type\":\"message\"}],\"status\":\"completed\",\"usage\":{"
	    "\"input_tokens\":54,\"output_tokens\":3,\"total_tokens\":57}}",
	    SL_DIALECT_TYPED);
	ASSERT(f.has_count && f.has_prompt);
	ASSERT_EQ(f.count, 3);
	ASSERT_EQ(f.prompt_tokens, 54);
	/* "object" names a response only as a string. */
	f = plain("{\"object\":[\"response\"],\"usage\":{\"output_tokens\":3}}",
	          SL_DIALECT_TYPED);
	ASSERT(!f.has_count);
	/* Without usage, llama-server's timings give the prompt. */
	f = plain("{\"choices\":[{\"message\":{\"content\":\"}]\\\"\"}}],"
	          "\"timings\":{\"cache_n\":2,\"prompt_n\":3}}",
	          SL_DIALECT_OPENAI);
	ASSERT(f.has_prompt && !f.has_count);
	ASSERT_EQ(f.prompt_tokens, 5);
	f = plain("{\"error\":{\"code\":500,\"message\":\"x\"},"
	          "\"usage\":{\"completion_tokens\":3}}",
	          SL_DIALECT_OPENAI);
	ASSERT(f.error && !f.has_count);
	/* A native answer to several prompts is an array: not counted. */
	f = plain("[{\"content\":\"a\",\"stop\":true,\"tokens_predicted\":1}]",
	          SL_DIALECT_NATIVE);
	ASSERT(!f.object && !f.final);
}

/*
 * A native answer's settings are skipped, not read, and its timings stay
 * in the scan for proxy.c's time to first token.
 */
static void test_answer_timings(void)
{
	static const char answer[] =
	    "{\"content\":\"a \\\"}\\\" b\",\"stop\":true,"
	    "\"generation_settings\":{\"n_predict\":3,\"samplers\":[\"top_k\"]}"
	    ","
	    "\"tokens_predicted\":3,\"tokens_evaluated\":4,"
	    "\"timings\":{\"prompt_n\":4,\"predicted_ms\":1.5}}";
	struct sl_event_facts f = plain(answer, SL_DIALECT_NATIVE);
	ASSERT(f.final && f.has_prompt);
	ASSERT_EQ(f.tokens_predicted, 3);
	ASSERT_EQ(f.prompt_tokens, 4);
	struct sl_jscan s;
	sl_event_scan_answer(&s, answer, strlen(answer), SL_DIALECT_NATIVE, &f);
	int settings = sl_jscan_get(&s, 0, "generation_settings");
	ASSERT(sl_jscan_is_type(&s, settings, JSMN_OBJECT));
	ASSERT_EQ(s.tok[settings].size, 0);
	double ms = 0;
	ASSERT(sl_jscan_number(
	    &s,
	    sl_jscan_get(&s, sl_jscan_get(&s, 0, "timings"), "predicted_ms"),
	    &ms));
	ASSERT(ms == 1.5);
	sl_jscan_free(&s);
}

/* The prompt's token count, for a tenant's usage (keys.h). */
static void test_prompt_counts(void)
{
	struct sl_event_facts f;
	/* OpenAI chunks: usage when asked for, else llama-server's timings. */
	f = scan("{\"choices\":[],\"usage\":{\"completion_tokens\":4,"
	         "\"prompt_tokens\":54}}",
	         SL_DIALECT_OPENAI);
	ASSERT(f.has_prompt);
	ASSERT_EQ(f.prompt_tokens, 54);
	f = scan("{\"choices\":[{\"finish_reason\":\"length\",\"index\":0,"
	         "\"delta\":{}}],\"timings\":{\"cache_n\":53,\"prompt_n\":1,"
	         "\"predicted_n\":4}}",
	         SL_DIALECT_OPENAI);
	ASSERT(f.has_prompt);
	ASSERT_EQ(f.prompt_tokens, 54);
	ASSERT(!f.has_count);
	f = scan("{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}",
	         SL_DIALECT_OPENAI);
	ASSERT(!f.has_prompt);
	/* Native: the final event's tokens_evaluated. */
	f = scan("{\"content\":\"\",\"stop\":true,\"tokens_predicted\":3,"
	         "\"tokens_evaluated\":4}",
	         SL_DIALECT_NATIVE);
	ASSERT(f.has_prompt);
	ASSERT_EQ(f.prompt_tokens, 4);
	f = scan("{\"content\":\"x\",\"stop\":false,\"tokens_evaluated\":4}",
	         SL_DIALECT_NATIVE);
	ASSERT(!f.has_prompt);
	/* Typed: message_start's input_tokens, response.completed's. */
	f = scan("{\"type\":\"message_start\",\"message\":{\"usage\":{"
	         "\"input_tokens\":12,\"output_tokens\":0}}}",
	         SL_DIALECT_TYPED);
	ASSERT(f.has_prompt);
	ASSERT_EQ(f.prompt_tokens, 12);
	ASSERT(!f.has_count);
	f = scan("{\"type\":\"response.completed\",\"response\":{\"usage\":{"
	         "\"input_tokens\":54,\"output_tokens\":3}}}",
	         SL_DIALECT_TYPED);
	ASSERT(f.has_prompt);
	ASSERT_EQ(f.prompt_tokens, 54);
}

/* Reads `data` against `sh`; returns the piece matched, or NULL. */
static const char *read_event(struct sl_event_shape *sh, const char *data,
                              struct sl_event_facts *f, size_t *piece_len)
{
	struct sl_jscan s;
	struct sl_event_match m;
	sl_event_read(sh, &s, data, strlen(data), SL_DIALECT_OPENAI, f, &m);
	sl_jscan_free(&s);
	*piece_len = m.piece_len;
	return m.piece;
}

#define CHUNK(piece)                                                           \
	"{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{"        \
	"\"content\":\"" piece "\"}}],\"created\":5,\"id\":\"c\"}"

/*
 * Which events are plain token events, and which later events match the
 * shape one of them leaves: only those that differ in a valid, non-empty
 * piece of text.
 */
static void test_shape(void)
{
	struct sl_event_shape sh = {0};
	struct sl_event_facts f;
	size_t n;
	/* Not plain token events: nothing learnt. */
	const char *not_plain[] = {
	    "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
	    "\"content\":null}}]}",
	    "{\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,"
	    "\"delta\":{\"content\":\"a\"}}]}",
	    "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],"
	    "\"usage\":{\"completion_tokens\":1}}",
	    "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],"
	    "\"timings\":{\"prompt_n\":1}}",
	    "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},"
	    "\"logprobs\":{\"content\":[]}}]}",
	    "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\","
	    "\"reasoning_content\":\"b\"}}]}",
	    "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\","
	    "\"tool_calls\":[]}}]}",
	    "{\"choices\":[{\"index\":\"0\",\"delta\":{\"content\":\"a\"}}]}",
	    "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}},"
	    "{\"index\":1,\"delta\":{\"content\":\"b\"}}]}",
	    "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],"
	    "\"__verbose\":{}}",
	    CHUNK(""),
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(not_plain); i++) {
		ASSERT(read_event(&sh, not_plain[i], &f, &n) == NULL);
		ASSERT_EQ(f.piece, -1);
		ASSERT(sh.text == NULL);
	}
	/* A plain token event is scanned and becomes the shape... */
	ASSERT(read_event(&sh, CHUNK("Hi"), &f, &n) == NULL);
	ASSERT(f.piece >= 0);
	ASSERT_EQ(f.piece_kind, SL_PIECE_CONTENT);
	ASSERT_EQ(f.piece_choice, 0);
	ASSERT(sh.text != NULL);
	/* ... which later ones match, with the same facts. */
	const char *matching[][2] = {
	    {CHUNK(" there"), " there"},
	    {CHUNK("\\\""), "\\\""},
	    {CHUNK("\\u00E9\\/"), "\\u00E9\\/"},
	    {CHUNK("\\\\"), "\\\\"},
	    {CHUNK("\\b\\f\\n\\r\\t"), "\\b\\f\\n\\r\\t"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(matching); i++) {
		const char *piece = read_event(&sh, matching[i][0], &f, &n);
		ASSERT(piece != NULL);
		ASSERT_EQ(n, strlen(matching[i][1]));
		ASSERT(memcmp(piece, matching[i][1], n) == 0);
		ASSERT(f.json && f.object && !f.error);
		ASSERT_EQ(f.arrivals, 1);
		ASSERT_EQ(f.per_arrival, 1);
		ASSERT_EQ(f.piece_kind, SL_PIECE_CONTENT);
	}
	/* Scanned in full: what is not the shape around a valid string. */
	const char *others[] = {
	    CHUNK("a\\"),      /* the closing quote escaped */
	    CHUNK("a\\x"),     /* no such escape */
	    CHUNK("\\u00g0"),  /* not hex */
	    CHUNK("\\u00"),    /* cut short */
	    CHUNK("a\tb"),     /* a raw control byte */
	    CHUNK("a\", \"b"), /* a quote: another member */
	    CHUNK(""),         /* no piece */
	    "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{"
	    "\"content\":\"a\"}}],\"created\":6,\"id\":\"c\"}",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(others); i++) {
		sl_event_shape_free(&sh);
		ASSERT(read_event(&sh, CHUNK("Hi"), &f, &n) == NULL);
		ASSERT(sh.text != NULL);
		ASSERT(read_event(&sh, others[i], &f, &n) == NULL);
	}
	/* A plain token event that did not match is the new shape: the
	 * last above said "created": 6, so 5 no longer matches. */
	ASSERT(read_event(&sh, CHUNK("b"), &f, &n) == NULL);
	ASSERT(read_event(&sh, CHUNK("c"), &f, &n) != NULL);
	sl_event_shape_free(&sh);
	ASSERT(sh.text == NULL);
}

/*
 * Native token events: the shape has three holes (content, tokens and the
 * count), each matched by kind; the facts follow the new token ids.
 */
static void test_native_shape(void)
{
	struct sl_event_shape sh = {0};
	struct sl_jscan s;
	struct sl_event_facts f;
	struct sl_event_match m;
	/* With probabilities, or final: no plain token event. */
	const char *not_plain[] = {native_probs10, native_final};
	for (size_t i = 0; i < SL_ARRAY_SIZE(not_plain); i++) {
		sl_event_read(&sh, &s, not_plain[i], strlen(not_plain[i]),
		              SL_DIALECT_NATIVE, &f, &m);
		sl_jscan_free(&s);
		ASSERT(m.piece == NULL && sh.text == NULL);
	}
	sl_event_read(&sh, &s, native_token, strlen(native_token),
	              SL_DIALECT_NATIVE, &f, &m);
	sl_jscan_free(&s);
	ASSERT(m.piece == NULL && sh.text != NULL);
	ASSERT_EQ(sh.n_holes, 3);
#define NATIVE(content, tokens, n)                                             \
	"{\"index\":0,\"content\":\"" content "\",\"tokens\":[" tokens         \
	"],\"stop\":false,\"id_slot\":-1,\"tokens_predicted\":" n              \
	",\"tokens_evaluated\":7}"
	const struct {
		const char *event, *piece, *tokens;
		unsigned per_arrival;
	} matching[] = {
	    {NATIVE("a", "7", "2"), "a", "7", 1},
	    {NATIVE("", "227", "3"), "", "227", 1},
	    {NATIVE("bc", "1,22,-3", "40"), "bc", "1,22,-3", 3},
	    {NATIVE("d", "", "41"), "d", "", 1},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(matching); i++) {
		const char *e = matching[i].event;
		ASSERT(sl_event_shape_match(&sh, e, strlen(e), &f, &m));
		ASSERT_EQ(m.piece_len, strlen(matching[i].piece));
		ASSERT(memcmp(m.piece, matching[i].piece, m.piece_len) == 0);
		ASSERT_EQ(m.tokens_len, strlen(matching[i].tokens));
		ASSERT(memcmp(m.tokens, matching[i].tokens, m.tokens_len) == 0);
		ASSERT_EQ(f.arrivals, 1);
		ASSERT_EQ(f.per_arrival, matching[i].per_arrival);
		ASSERT(!f.final && f.json && f.object);
	}
	/* No text, no ids: no token. */
	const char *nothing = NATIVE("", "", "5");
	ASSERT(sl_event_shape_match(&sh, nothing, strlen(nothing), &f, &m));
	ASSERT_EQ(f.arrivals, 0);
	/* Not the shape's values: scanned in full. */
	const char *others[] = {
	    NATIVE("a", "1, 2", "2"), NATIVE("a", "1,", "2"),
	    NATIVE("a", "1.5", "2"),  NATIVE("a", "x", "2"),
	    NATIVE("a", "1", "2.0"),  NATIVE("a", "1", ""),
	    NATIVE("a\\", "1", "2"),  NATIVE("a", "1", "2") " ",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(others); i++)
		ASSERT(!sl_event_shape_match(&sh, others[i], strlen(others[i]),
		                             &f, &m));
#undef NATIVE
	sl_event_shape_free(&sh);
}

int main(void)
{
	RUN(test_native_token);
	RUN(test_native_several_tokens);
	RUN(test_native_nul);
	RUN(test_native_final);
	RUN(test_native_filtered_final);
	RUN(test_native_probs);
	RUN(test_error);
	RUN(test_done_and_non_json);
	RUN(test_openai);
	RUN(test_typed);
	RUN(test_plain_answers);
	RUN(test_answer_timings);
	RUN(test_prompt_counts);
	RUN(test_shape);
	RUN(test_native_shape);
	return 0;
}

/* test_assemble.c: streamed events gathered into one answer. */
#include "sluice/assemble.h"

#include "sluice/common.h"
#include "test.h"

/* Feeds events given as JSON texts; returns the answer as compact JSON. */
static char *assemble(enum sl_assemble_kind kind, bool tokens,
                      const char *const *events)
{
	struct sl_assembler a;
	sl_assembler_init(&a, kind, tokens);
	for (; *events; events++) {
		json_error_t err;
		json_t *ev = json_loads(*events, JSON_DECODE_ANY, &err);
		if (!ev)
			TEST_FAIL("bad test event %s: %s", *events, err.text);
		ASSERT_EQ(sl_assembler_add(&a, ev), 0);
		json_decref(ev);
	}
	json_t *r = sl_assembler_result(&a);
	ASSERT(r != NULL);
	char *s =
	    json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	json_decref(r);
	sl_assembler_free(&a);
	return s;
}

#define EVENTS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_native(void)
{
	char *s = assemble(
	    SL_ASSEMBLE_NATIVE, false,
	    EVENTS("{\"content\":\"He\",\"tokens\":[1],\"stop\":false}",
	           "{\"content\":\"llo\",\"tokens\":[2],\"stop\":false}",
	           "{\"content\":\"\",\"tokens\":[],\"stop\":true,"
	           "\"stop_type\":\"limit\",\"generation_settings\":"
	           "{\"stream\":true}}"));
	ASSERT_STR_EQ(s, "{\"content\":\"Hello\",\"generation_settings\":"
	                 "{\"stream\":false},\"stop\":true,\"stop_type\":"
	                 "\"limit\",\"tokens\":[]}");
	free(s);
	s = assemble(
	    SL_ASSEMBLE_NATIVE, true,
	    EVENTS("{\"content\":\"a\",\"tokens\":[7]}",
	           "{\"content\":\"b\",\"tokens\":[8],\"stop\":true}"));
	ASSERT_CONTAINS(s, "\"tokens\":[7,8]");
	ASSERT_CONTAINS(s, "\"content\":\"ab\"");
	free(s);
	/* A prompt array: a null first, interleaved indexes, an array out. */
	s = assemble(SL_ASSEMBLE_NATIVE, false,
	             EVENTS("null", "{\"index\":0,\"content\":\"a\"}",
	                    "{\"index\":1,\"content\":\"x\"}",
	                    "{\"index\":0,\"content\":\"b\"}",
	                    "{\"index\":0,\"content\":\"\",\"stop\":true}",
	                    "{\"index\":1,\"content\":\"y\"}",
	                    "{\"index\":1,\"content\":\"\",\"stop\":true}"));
	ASSERT_STR_EQ(s, "[{\"content\":\"ab\",\"index\":0,\"stop\":true,"
	                 "\"tokens\":[]},{\"content\":\"xy\",\"index\":1,"
	                 "\"stop\":true,\"tokens\":[]}]");
	free(s);
}

static void test_text_with_two_choices(void)
{
	char *s = assemble(
	    SL_ASSEMBLE_TEXT, false,
	    EVENTS("{\"id\":\"c1\",\"created\":5,\"model\":\"m\",\"choices\":"
	           "[{\"index\":0,\"text\":\"A\",\"finish_reason\":null}]}",
	           "{\"id\":\"c1\",\"choices\":[{\"index\":1,\"text\":\"X\","
	           "\"finish_reason\":null}]}",
	           "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"text\":\"B\","
	           "\"finish_reason\":\"length\"},{\"index\":1,\"text\":"
	           "\"Y\",\"finish_reason\":\"stop\"}]}",
	           "{\"id\":\"c1\",\"choices\":[],\"usage\":"
	           "{\"completion_tokens\":4}}"));
	ASSERT_STR_EQ(
	    s, "{\"choices\":[{\"finish_reason\":\"length\",\"index\":0,"
	       "\"logprobs\":null,\"text\":\"AB\"},{\"finish_reason\":"
	       "\"stop\",\"index\":1,\"logprobs\":null,\"text\":\"XY\"}],"
	       "\"created\":5,\"id\":\"c1\",\"model\":\"m\",\"object\":"
	       "\"text_completion\",\"usage\":{\"completion_tokens\":4}}");
	free(s);
}

static void test_chat_tool_calls_reasoning_logprobs(void)
{
	char *s = assemble(
	    SL_ASSEMBLE_CHAT, false,
	    EVENTS("{\"id\":\"k\",\"choices\":[{\"index\":0,\"delta\":"
	           "{\"role\":\"assistant\",\"content\":null}}]}",
	           "{\"id\":\"k\",\"choices\":[{\"index\":0,\"delta\":"
	           "{\"reasoning_content\":\"think\"},\"logprobs\":"
	           "{\"content\":[{\"t\":1}]}}]}",
	           "{\"id\":\"k\",\"choices\":[{\"index\":0,\"delta\":"
	           "{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":"
	           "\"function\",\"function\":{\"name\":\"get\","
	           "\"arguments\":\"{\\\"a\\\":\"}}]},\"logprobs\":"
	           "{\"content\":[{\"t\":2}]}}]}",
	           "{\"id\":\"k\",\"choices\":[{\"index\":0,\"delta\":"
	           "{\"tool_calls\":[{\"index\":0,\"function\":"
	           "{\"arguments\":\"1}\"}}]},\"finish_reason\":"
	           "\"tool_calls\"}]}"));
	ASSERT_STR_EQ(
	    s, "{\"choices\":[{\"finish_reason\":\"tool_calls\",\"index\":0,"
	       "\"logprobs\":{\"content\":[{\"t\":1},{\"t\":2}]},\"message\":"
	       "{\"content\":null,\"reasoning_content\":\"think\",\"role\":"
	       "\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":"
	       "\"{\\\"a\\\":1}\",\"name\":\"get\"},\"id\":\"call_1\","
	       "\"type\":\"function\"}]}}],\"id\":\"k\",\"object\":"
	       "\"chat.completion\"}");
	free(s);
}

static void test_refusals(void)
{
	struct sl_assembler a;
	sl_assembler_init(&a, SL_ASSEMBLE_CHAT, false);
	ASSERT(sl_assembler_result(&a) == NULL); /* nothing came */
	json_t *arr = json_array();
	ASSERT_EQ(sl_assembler_add(&a, arr), SL_EINVAL);
	json_decref(arr);
	json_t *many = json_pack("{s:[{s:i}]}", "choices", "index", 0);
	for (int i = 0; i < SL_ASSEMBLE_MAX_CHOICES; i++) {
		json_integer_set(
		    json_object_get(
		        json_array_get(json_object_get(many, "choices"), 0),
		        "index"),
		    i);
		ASSERT_EQ(sl_assembler_add(&a, many), 0);
	}
	json_integer_set(
	    json_object_get(json_array_get(json_object_get(many, "choices"), 0),
	                    "index"),
	    SL_ASSEMBLE_MAX_CHOICES);
	ASSERT_EQ(sl_assembler_add(&a, many), SL_EINVAL);
	json_decref(many);
	sl_assembler_free(&a);
}

int main(void)
{
	RUN(test_native);
	RUN(test_text_with_two_choices);
	RUN(test_chat_tool_calls_reasoning_logprobs);
	RUN(test_refusals);
	return 0;
}

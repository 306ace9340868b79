/* Unit tests for request.c: body checks, priorities, the upstream body. */
#include "sluice/relay/request.h"

#include "sluice/base/common.h"
#include "sluice/json/native_api.h"
#include "test.h"

#include <jansson.h>

static const struct sl_request_options opts = {.max_tokens_cap = 64,
                                               .stream_upstream = true};

static const struct sl_endpoint *endpoint(const char *path)
{
	for (unsigned i = 0; i < sl_n_endpoints; i++)
		if (strcmp(sl_endpoints[i].path, path) == 0)
			return &sl_endpoints[i];
	TEST_FAIL("no endpoint %s", path);
}

/* Validates `body` (NUL-terminated here) on `path`; returns the code. */
static int check(struct sl_request *r, const char *path, const char *header,
                 const char *body)
{
	return sl_request_validate(r, endpoint(path), header, body,
	                           strlen(body), &opts);
}

/* The priority a request ends with, or -1 when it is refused. */
static double priority_of(const char *header, const char *body)
{
	struct sl_request r;
	int rc = check(&r, "/v1/completions", header, body);
	double p = rc == 0 ? r.priority : -1;
	if (rc == 0)
		ASSERT(!strstr(r.body, "priority"));
	else
		ASSERT_EQ(r.status, 400);
	sl_request_free(&r);
	return p;
}

static void test_priority_header(void)
{
	ASSERT(priority_of("urgent", "{}") == 2);
	ASSERT(priority_of("batch", "{}") == 0);
	ASSERT(priority_of("7.25", "{}") == 7.25);
	ASSERT(priority_of("100", "{}") == 100);
	ASSERT(priority_of("0", "{}") == 0);
	ASSERT(priority_of(NULL, "{}") == 1);
	/* The header wins over the field, which is dropped either way. */
	ASSERT(priority_of("batch", "{\"priority\":\"urgent\"}") == 0);
	static const char *const bad[] = {
	    "0x10",   " 5",   "5 ",  "+5",  "-0",    "1e1",   "inf",
	    "nan",    "1.",   ".5",  "5..", "101",   "100.5", "",
	    "Urgent", "high", "1,5", "5\t", "0x1p3",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad); i++)
		if (priority_of(bad[i], "{}") != -1)
			TEST_FAIL("X-Priority \"%s\" was accepted", bad[i]);
}

static void test_long_priority_is_read_whole(void)
{
	/*
	 * 70 characters: the old parser cut it to 63 and accepted "1.000...";
	 * the whole value is a valid number, so it must still be read whole,
	 * and a value that only goes wrong after character 63 must fail.
	 */
	char good[80], bad[80];
	memset(good, '0', sizeof(good));
	good[0] = '1';
	good[1] = '.';
	good[70] = '\0';
	memcpy(bad, good, sizeof(bad));
	bad[68] = 'x';
	ASSERT(priority_of(good, "{}") == 1);
	ASSERT(priority_of(bad, "{}") == -1);

	char body[128];
	snprintf(body, sizeof(body), "{\"priority\":\"%s\"}", bad);
	ASSERT(priority_of(NULL, body) == -1);
}

static void test_priority_field(void)
{
	ASSERT(priority_of(NULL, "{\"priority\":\"urgent\"}") == 2);
	ASSERT(priority_of(NULL, "{\"priority\":\"2.5\"}") == 2.5);
	/* A JSON number is the number itself, exponent and all. */
	ASSERT(priority_of(NULL, "{\"priority\":3}") == 3);
	ASSERT(priority_of(NULL, "{\"priority\":0.1}") == 0.1);
	ASSERT(priority_of(NULL, "{\"priority\":1e1}") == 10);
	ASSERT(priority_of(NULL, "{\"priority\":100}") == 100);
	ASSERT(priority_of(NULL, "{\"priority\":100.0000001}") == -1);
	ASSERT(priority_of(NULL, "{\"priority\":-0.5}") == -1);
	ASSERT(priority_of(NULL, "{\"priority\":1e400}") == -1);
	ASSERT(priority_of(NULL, "{\"priority\":\" 5\"}") == -1);
	ASSERT(priority_of(NULL, "{\"priority\":\"0x10\"}") == -1);
	ASSERT(priority_of(NULL, "{\"priority\":true}") == -1);
	ASSERT(priority_of(NULL, "{\"priority\":null}") == -1);
	/* A NUL inside the string does not end it early. */
	ASSERT(priority_of(NULL, "{\"priority\":\"urgent\\u0000x\"}") == -1);
}

static void test_priority_messages(void)
{
	struct sl_request r;
	ASSERT_EQ(check(&r, "/completion", "0x10", "{}"), SL_EINVAL);
	ASSERT_STR_EQ(r.error, "X-Priority: expected urgent, normal, batch or "
	                       "a number from 0 to 100, got \"0x10\"");
	ASSERT(r.body == NULL);
	ASSERT_EQ(check(&r, "/completion", NULL, "{\"priority\":\" 5\"}"),
	          SL_EINVAL);
	ASSERT_STR_EQ(r.error, "\"priority\": expected urgent, normal, batch "
	                       "or a number from 0 to 100, got \" 5\"");
	ASSERT_EQ(check(&r, "/completion", NULL, "{\"priority\":150}"),
	          SL_EINVAL);
	ASSERT_STR_EQ(r.error, "\"priority\": expected urgent, normal, batch "
	                       "or a number from 0 to 100, got 150");
	ASSERT_EQ(check(&r, "/completion", NULL, "{\"priority\":[1]}"),
	          SL_EINVAL);
	ASSERT_STR_EQ(r.error,
	              "\"priority\" must be urgent, normal, batch or a number");
	/* A long bad value is quoted in part only. */
	char big[300];
	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ASSERT_EQ(check(&r, "/completion", big, "{}"), SL_EINVAL);
	ASSERT_CONTAINS(r.error, "got \"zzzz");
	ASSERT_CONTAINS(r.error, "zzz\"...");
	ASSERT(strlen(r.error) < 200);
	/* ...and cut between UTF-8 characters, never inside one. */
	char accented[200] = "{\"priority\":\"a";
	for (int i = 0; i < 40; i++)
		strcat(accented, "\xc3\xa9");
	strcat(accented, "\"}");
	ASSERT_EQ(check(&r, "/completion", NULL, accented), SL_EINVAL);
	ASSERT_CONTAINS(r.error, "got \"a\xc3\xa9");
	ASSERT_CONTAINS(r.error, "\xc3\xa9\"...");
}

static void test_body_checks(void)
{
	struct sl_request r;
	ASSERT_EQ(check(&r, "/v1/completions", NULL, "[1]"), SL_EINVAL);
	ASSERT_STR_EQ(r.error, "the request body must be a JSON object");
	ASSERT_EQ(check(&r, "/v1/completions", NULL, "{\"stream\":1}"),
	          SL_EINVAL);
	ASSERT_STR_EQ(r.error, "\"stream\" must be true or false");
	ASSERT_EQ(check(&r, "/completion", NULL, "{\"n_discard\":-1}"),
	          SL_EINVAL);
	ASSERT_STR_EQ(r.error, "\"n_discard\" must be a non-negative integer "
	                       "below 2^31");
	/* llama-server reads it into an int32: 2^32 - 1 would be -1 there. */
	ASSERT_EQ(check(&r, "/completion", NULL, "{\"n_discard\":4294967295}"),
	          SL_EINVAL);
	ASSERT_EQ(check(&r, "/completion", NULL, "{\"n_discard\":2147483647}"),
	          0);
	sl_request_free(&r);
	ASSERT_EQ(check(&r, "/completion", NULL, "{\"a\":"), SL_EINVAL);
	ASSERT_CONTAINS(r.error,
	                "malformed JSON in the request body at line 1");
	/* jansson takes a raw NUL right after a number; JSON does not. */
	static const char nul[] = "{\"x\":[0e9\0 ],\"y\":1}";
	ASSERT_EQ(sl_request_validate(&r, endpoint("/v1/completions"), NULL,
	                              nul, sizeof(nul) - 1, &opts),
	          SL_EINVAL);
	ASSERT_STR_EQ(
	    r.error,
	    "malformed JSON in the request body at byte 9: a NUL byte");
	ASSERT_EQ(check(&r, "/generate", NULL, "{}"), SL_EINVAL);
	ASSERT_STR_EQ(r.error, "\"prompt\" is required and must be a string");
	ASSERT_EQ(r.status, 400);
	/* Endpoints without a body take none, and ignore X-Priority. */
	ASSERT_EQ(check(&r, "/v1/models", "junk", ""), 0);
	ASSERT(r.body == NULL);
	ASSERT(r.priority == 1);
}

static void test_upstream_bodies(void)
{
	struct sl_request r;
	/* A plain OpenAI answer is asked for as a stream, with usage. */
	ASSERT_EQ(check(&r, "/v1/chat/completions", NULL,
	                "{\"messages\":[],\"priority\":\"batch\"}"),
	          0);
	ASSERT_STR_EQ(r.body, "{\"messages\":[],\"stream\":true,"
	                      "\"stream_options\":{\"include_usage\":true}}");
	ASSERT_EQ(r.body_len, strlen(r.body));
	ASSERT(!r.stream && r.assemble && r.assemblable);
	ASSERT_EQ(r.assemble_kind, SL_ASSEMBLE_CHAT);
	sl_request_free(&r);

	ASSERT_EQ(check(&r, "/v1/completions", NULL, "{\"stream\":true}"), 0);
	ASSERT_STR_EQ(r.body, "{\"stream\":true}");
	ASSERT(r.stream && !r.assemble && !r.assemblable);
	sl_request_free(&r);

	ASSERT_EQ(check(&r, "/completion", NULL,
	                "{\"prompt\":\"a\",\"return_tokens\":true}"),
	          0);
	ASSERT(r.assemble && r.return_tokens);
	ASSERT_EQ(r.assemble_kind, SL_ASSEMBLE_NATIVE);
	sl_request_free(&r);

	/* Embeddings never stream. */
	ASSERT_EQ(check(&r, "/v1/embeddings", NULL, "{\"input\":\"a\"}"), 0);
	ASSERT(!r.assemble && !r.assemblable && !r.stream);
	ASSERT_STR_EQ(r.body, "{\"input\":\"a\"}");
	sl_request_free(&r);

	/* /generate: mapped onto /completion, max_tokens capped. */
	ASSERT_EQ(check(&r, "/generate", "urgent",
	                "{\"prompt\":\"hi\",\"max_tokens\":1000}"),
	          0);
	ASSERT_STR_EQ(r.body, "{\"prompt\":\"hi\",\"n_predict\":64,"
	                      "\"stream\":true,\"cache_prompt\":true}");
	ASSERT(r.priority == 2 && r.assemble && !r.stream);
	sl_request_free(&r);

	ASSERT_EQ(check(&r, "/infer", NULL, "{\"query\":\"q\"}"), 0);
	ASSERT_CONTAINS(r.body, "\"prompt\":\"q\"");
	sl_request_free(&r);

	struct sl_request_options plain = opts;
	plain.stream_upstream = false;
	const char *body = "{\"prompt\":\"a\"}";
	ASSERT_EQ(sl_request_validate(&r, endpoint("/completion"), NULL, body,
	                              strlen(body), &plain),
	          0);
	/* Relayed plain, though a stream could have stopped it. */
	ASSERT(!r.assemble && r.assemblable);
	ASSERT_STR_EQ(r.body, body);
	sl_request_free(&r);
}

static void test_nul_in_strings_survives(void)
{
	struct sl_request r;
	/* \u0000 is valid JSON: accepted, and written back as \u0000. */
	static const char *const paths[] = {"/completion", "/v1/completions",
	                                    "/v1/chat/completions"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(paths); i++) {
		ASSERT_EQ(check(&r, paths[i], NULL,
		                "{\"prompt\":\"a\\u0000b\",\"stream\":true}"),
		          0);
		ASSERT_STR_EQ(r.body,
		              "{\"prompt\":\"a\\u0000b\",\"stream\":true}");
		sl_request_free(&r);
	}
	ASSERT_EQ(check(&r, "/generate", NULL, "{\"prompt\":\"a\\u0000b\"}"),
	          0);
	ASSERT_CONTAINS(r.body, "\"prompt\":\"a\\u0000b\"");
	sl_request_free(&r);
	ASSERT_EQ(check(&r, "/infer", NULL, "{\"query\":\"\\u0000q\"}"), 0);
	ASSERT_CONTAINS(r.body, "\"prompt\":\"\\u0000q\"");
	sl_request_free(&r);
	/* A raw NUL byte inside a string is not JSON. */
	static const char raw[] = "{\"prompt\":\"a\0b\"}";
	ASSERT_EQ(sl_request_validate(&r, endpoint("/completion"), NULL, raw,
	                              sizeof(raw) - 1, &opts),
	          SL_EINVAL);
}

/*
 * Validates `body` on `path` and checks the upstream body is exactly
 * `want`, byte for byte (NULs included: the length is compared too).
 */
static void expect_upstream(const char *path, const char *body,
                            const char *want)
{
	struct sl_request r;
	int rc = check(&r, path, NULL, body);
	if (rc != 0)
		TEST_FAIL("%s refused %s: %s", path, body, r.error);
	if (r.body_len != strlen(want) || memcmp(r.body, want, r.body_len))
		TEST_FAIL("%s: %s\n  went upstream as %s\n  expected       %s",
		          path, body, r.body, want);
	sl_request_free(&r);
}

/* The same, for a body that must go upstream unchanged. */
static void expect_untouched(const char *path, const char *body)
{
	expect_upstream(path, body, body);
}

static void test_untouched_body_is_byte_identical(void)
{
	/* Numbers as written, spacing, key order, escapes, \u0000. */
	static const char body[] =
	    "  {\"stream\" : true,\n\t\"temperature\":0.1, \"top_p\":1e-7,"
	    "\"n\":1.0, \"z\":[ 1 , {\"b\":2,\"a\":1} ],\r\n"
	    "\"prompt\":\"caf\\u00e9 \\ud83d\\ude00 \\u0000 \\\"q\\\" \\/\","
	    "\"a\":-0.0, \"big\":12345678901234567890123, \"e\":1E+2 }  ";
	static const char *const paths[] = {"/completion", "/v1/completions",
	                                    "/v1/chat/completions",
	                                    "/v1/embeddings"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(paths); i++)
		expect_untouched(paths[i], body);
	/* An endpoint that is never assembled leaves "stream" alone. */
	expect_untouched("/v1/embeddings",
	                 "{\"input\":\"a\",\"stream\":false}");
	expect_untouched("/v1/embeddings", "{}");

	/* Without --stream-upstream a plain request goes as written too. */
	struct sl_request_options plain = opts;
	plain.stream_upstream = false;
	struct sl_request r;
	const char *text = "{ \"prompt\":\"a\", \"temperature\":0.1 }";
	ASSERT_EQ(sl_request_validate(&r, endpoint("/v1/completions"), NULL,
	                              text, strlen(text), &plain),
	          0);
	ASSERT(!r.assemble);
	ASSERT_STR_EQ(r.body, text);
	sl_request_free(&r);
}

static void test_priority_member_is_cut_out(void)
{
	const char *path = "/v1/completions";
	/* First, middle, last, only: the rest stays as written. */
	expect_upstream(path,
	                "{ \"priority\":\"batch\", \"a\":0.1,\"stream\":true}",
	                "{ \"a\":0.1,\"stream\":true}");
	expect_upstream(path,
	                "{\"a\":0.1 ,\n \"priority\" : 5 ,\n \"stream\":true}",
	                "{\"a\":0.1 ,\n \"stream\":true}");
	expect_upstream(path,
	                "{\"stream\":true, \"a\":[1, 2] , \"priority\":1}",
	                "{\"stream\":true, \"a\":[1, 2]}");
	expect_upstream(path, "{\"stream\":true,\"priority\":1 }\n",
	                "{\"stream\":true }\n");
	expect_upstream("/v1/embeddings", " { \"priority\" : \"urgent\" } ",
	                " {  } ");
	/* Every copy of a repeated key goes (jansson reads the last). */
	expect_upstream("/v1/embeddings",
	                "{\"priority\":1,\"input\":\"x\",\"priority\":2}",
	                "{\"input\":\"x\"}");
	/* A key spelled with escapes is the same key to llama-server. */
	expect_upstream("/v1/embeddings",
	                "{\"input\":\"x\",\"pri\\u006frity\":\"batch\"}",
	                "{\"input\":\"x\"}");
	ASSERT(priority_of(NULL, "{\"pri\\u006frity\":\"batch\"}") == 0);
	/* Only sluice's top-level field: nested ones are the client's. */
	expect_upstream("/v1/embeddings",
	                "{\"input\":{\"priority\":1},\"priority\":2,"
	                "\"x\":[{\"priority\":3}],\"p\":\"priority\"}",
	                "{\"input\":{\"priority\":1},\"x\":[{\"priority\":3}],"
	                "\"p\":\"priority\"}");
	/* Removed when X-Priority decides too. */
	struct sl_request r;
	ASSERT_EQ(check(&r, "/v1/embeddings", "batch",
	                "{\"priority\":\"urgent\",\"input\":\"a\"}"),
	          0);
	ASSERT_STR_EQ(r.body, "{\"input\":\"a\"}");
	ASSERT(r.priority == 0);
	sl_request_free(&r);
}

static void test_stream_fields_are_set_in_place(void)
{
	static const char usage[] = "{\"include_usage\":true}";
	char want[256];
	/* false becomes true where it was; stream_options is added. */
	snprintf(want, sizeof(want),
	         "{\"stream\" : true, \"temperature\":0.1,"
	         "\"stream_options\":%s}",
	         usage);
	expect_upstream("/v1/completions",
	                "{\"stream\" : false, \"temperature\":0.1}", want);
	/* stream_options replaced where it was; stream added. */
	snprintf(want, sizeof(want),
	         "{\"stream_options\": %s ,\"messages\":[],\"stream\":true}",
	         usage);
	expect_upstream("/v1/chat/completions",
	                "{\"stream_options\": {\"include_usage\":false,"
	                "\"x\":1} ,\"messages\":[]}",
	                want);
	/* Both replaced, priority gone, order kept. */
	snprintf(want, sizeof(want),
	         "{\"stream\":true,\"n\":1e-7,\"stream_options\":%s}", usage);
	expect_upstream("/v1/chat/completions",
	                "{\"priority\":1,\"stream\":false,\"n\":1e-7,"
	                "\"stream_options\":null}",
	                want);
	/* Only member, and an empty object. */
	snprintf(want, sizeof(want), "{\"stream\":true,\"stream_options\":%s}",
	         usage);
	expect_upstream("/v1/completions", "{\"priority\":1}", want);
	snprintf(want, sizeof(want), "{ \"stream\":true,\"stream_options\":%s}",
	         usage);
	expect_upstream("/v1/completions", "{ }", want);
	/* Every copy of a repeated "stream", escaped spellings too. */
	snprintf(
	    want, sizeof(want),
	    "{\"stream\":true,\"str\\u0065am\":true,\"stream_options\":%s}",
	    usage);
	expect_upstream("/v1/completions",
	                "{\"stream\":false,\"str\\u0065am\":false}", want);
	/* The native endpoint gets no stream_options; its own is kept. */
	expect_upstream("/completion",
	                "{\"prompt\":\"a\",\"stream_options\":{\"x\":1}}",
	                "{\"prompt\":\"a\",\"stream_options\":{\"x\":1},"
	                "\"stream\":true}");
}

/*
 * A body validated to be relayed plain and asked for as a stream when it
 * is dispatched (sl_request_stream_body) goes upstream as the one
 * validated with stream_upstream set: the same bytes.
 */
static void test_stream_body_after_validation(void)
{
	static const struct {
		const char *path, *body;
	} cases[] = {
	    {"/v1/completions", "{\"stream\" : false, \"temperature\":0.1}"},
	    {"/v1/chat/completions",
	     "{\"priority\":1,\"messages\":[{\"role\":\"user\","
	     "\"content\":\"[{\"}],\"stream_options\":null}"},
	    {"/completion", " { \"prompt\":\"x\", \"n_predict\": 4 } "},
	    {"/v1/completions", "{}"},
	};
	const struct sl_request_options plain = {.max_tokens_cap = 64};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		const char *b = cases[i].body;
		const struct sl_endpoint *ep = endpoint(cases[i].path);
		struct sl_request relayed, streamed;
		ASSERT_EQ(sl_request_validate(&relayed, ep, NULL, b, strlen(b),
		                              &plain),
		          0);
		ASSERT(relayed.assemblable && !relayed.assemble);
		ASSERT_EQ(sl_request_validate(&streamed, ep, NULL, b, strlen(b),
		                              &opts),
		          0);
		ASSERT(streamed.assemble);
		char *out;
		size_t len;
		ASSERT_EQ(sl_request_stream_body(relayed.assemble_kind,
		                                 relayed.body, relayed.body_len,
		                                 &out, &len),
		          0);
		if (len != streamed.body_len || memcmp(out, streamed.body, len))
			TEST_FAIL("%s %s: asked for as a stream later: %s, at "
			          "once: %s",
			          cases[i].path, b, out, streamed.body);
		free(out);
		sl_request_free(&relayed);
		sl_request_free(&streamed);
	}
	char *out = NULL;
	size_t len = 0;
	ASSERT_EQ(
	    sl_request_stream_body(SL_ASSEMBLE_TEXT, "[1]", 3, &out, &len),
	    SL_EINVAL);
}

static void test_huge_numbers_are_relayed_as_written(void)
{
	/*
	 * llama-server 0.7.0 takes integers beyond int64 (a seed of
	 * 18446744073709551615 is read, 99999999999999999999 too) and answers
	 * 1e400 with a 400 of its own: all go upstream as written.
	 */
	static const char *const bodies[] = {
	    "{\"seed\":18446744073709551615,\"stream\":true}",
	    "{\"stream\":true, \"seed\":99999999999999999999}",
	    "{\"seed\":-9223372036854775809,\"stream\":true}",
	    "{\"stream\":true,\"seed\":1e400,\"x\":[-1E+999]}",
	    "{\"stream\":true,\"a\":[18446744073709551616,1e400,"
	    "{\"b\":-99999999999999999999}]}",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bodies); i++)
		expect_untouched("/v1/completions", bodies[i]);
	char want[256];
	snprintf(want, sizeof(want),
	         "{\"seed\":18446744073709551615,\"stream\":true,"
	         "\"stream_options\":{\"include_usage\":true}}");
	expect_upstream("/v1/chat/completions",
	                "{\"seed\":18446744073709551615,\"priority\":1}", want);

	struct sl_request r;
	/* Sluice's own fields are still checked, with the number as written. */
	ASSERT_EQ(check(&r, "/v1/completions", NULL,
	                "{\"seed\":18446744073709551615,\"priority\":1e400}"),
	          SL_EINVAL);
	ASSERT_STR_EQ(r.error, "\"priority\": expected urgent, normal, batch "
	                       "or a number from 0 to 100, got 1e400");
	ASSERT_EQ(check(&r, "/v1/completions", NULL,
	                "{\"priority\":-18446744073709551615}"),
	          SL_EINVAL);
	ASSERT_CONTAINS(r.error, "got -18446744073709551615");
	ASSERT_EQ(check(&r, "/completion", NULL,
	                "{\"n_discard\":18446744073709551615}"),
	          SL_EINVAL);
	ASSERT_CONTAINS(r.error, "\"n_discard\" must be");
	/* Integers stay integers beside a huge one. */
	ASSERT_EQ(check(&r, "/completion", NULL,
	                "{\"n_discard\":5,\"seed\":18446744073709551615}"),
	          0);
	ASSERT(r.priority == 1);
	sl_request_free(&r);
	ASSERT_EQ(check(&r, "/v1/completions", NULL, "{\"stream\":1e400}"),
	          SL_EINVAL);
	ASSERT_STR_EQ(r.error, "\"stream\" must be true or false");
	/* Malformed text after a huge number is reported where it is. */
	ASSERT_EQ(check(&r, "/v1/completions", NULL,
	                "{\"seed\":18446744073709551615,}"),
	          SL_EINVAL);
	ASSERT_CONTAINS(r.error, "column 30");
	/* Not numbers in JSON's grammar: no stand-in makes them valid. */
	ASSERT_EQ(
	    check(&r, "/v1/completions", NULL, "{\"a\":1e400,\"b\":0x1p9999}"),
	    SL_EINVAL);
	ASSERT_EQ(check(&r, "/v1/completions", NULL, "{\"a\":1e400,\"b\":01}"),
	          SL_EINVAL);
	/* sluice's own native APIs keep refusing what jansson cannot hold. */
	ASSERT_EQ(check(&r, "/generate", NULL,
	                "{\"prompt\":\"a\",\"seed\":18446744073709551615}"),
	          SL_EINVAL);
	ASSERT_CONTAINS(r.error, "malformed JSON");
}

/*
 * A body of `depth` levels, malloc'd: an object whose "prompt" is the
 * string "x" inside depth - 1 arrays.
 */
static char *nested_body(unsigned depth)
{
	char *body = sl_xmalloc(2 * depth + 32);
	struct sl_join j = {.p = body, .cap = 2 * depth + 32};
	sl_join_str(&j, "{\"prompt\":");
	for (unsigned i = 1; i < depth; i++)
		sl_join_str(&j, "[");
	sl_join_str(&j, "\"x\"");
	for (unsigned i = 1; i < depth; i++)
		sl_join_str(&j, "]");
	sl_join_str(&j, "}");
	ASSERT(j.len + 1 < j.cap);
	return body;
}

/*
 * Validates `body` both ways, with the fast path and with jansson's alone,
 * and checks that the results are the same.
 */
static void compare_paths(const struct sl_endpoint *ep, const char *header,
                          const char *body, bool stream_upstream,
                          bool want_fast)
{
	struct sl_request_options o = {.max_tokens_cap = 64,
	                               .stream_upstream = stream_upstream};
	struct sl_request fast, slow;
	int rc = sl_request_validate(&fast, ep, header, body, strlen(body), &o);
	o.jansson_only = true;
	int slow_rc =
	    sl_request_validate(&slow, ep, header, body, strlen(body), &o);
	ASSERT_EQ(rc, slow_rc);
	ASSERT(!slow.read_fast);
	if (rc != 0) {
		ASSERT_EQ(fast.status, slow.status);
		ASSERT_STR_EQ(fast.error, slow.error);
		return;
	}
	if (fast.read_fast != (want_fast && ep->json_body))
		TEST_FAIL("%s %s: read_fast %d", ep->path, body,
		          fast.read_fast);
	ASSERT(fast.priority == slow.priority);
	ASSERT_EQ(fast.priority_given, slow.priority_given);
	ASSERT_EQ(fast.stream, slow.stream);
	ASSERT_EQ(fast.assemble, slow.assemble);
	ASSERT_EQ(fast.assemblable, slow.assemblable);
	ASSERT_EQ(fast.assemble_kind, slow.assemble_kind);
	ASSERT_EQ(fast.return_tokens, slow.return_tokens);
	ASSERT_EQ(fast.max_tokens, slow.max_tokens);
	ASSERT_EQ(fast.choices, slow.choices);
	ASSERT_EQ(fast.outputs, slow.outputs);
	ASSERT_EQ(fast.model == NULL, slow.model == NULL);
	if (fast.model)
		ASSERT_STR_EQ(fast.model, slow.model);
	ASSERT_EQ(fast.body_len, slow.body_len);
	ASSERT(fast.body_len == 0 ||
	       memcmp(fast.body, slow.body, fast.body_len) == 0);
	ASSERT(memcmp(&fast.affinity, &slow.affinity, sizeof(fast.affinity)) ==
	       0);
	sl_request_free(&fast);
	sl_request_free(&slow);
}

/*
 * The fast path (yajl and jsmn) and jansson's path give the same result
 * for every body: the same refusal, or the same priority, stream and
 * assembly decisions, model, affinity key and upstream body. Bodies that
 * hold nothing the fast path leaves to jansson must take it.
 */
static void test_fast_path_agrees_with_jansson(void)
{
	static const struct {
		const char *body;
		bool fast;
	} bodies[] = {
	    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
	     "\"Hi\"}],\"max_tokens\":16,\"stream\":false,\"temperature\":0.7}",
	     true},
	    {"{\"prompt\":\"a\\nb\",\"stream\":true,\"stop\":[\"x\"]}", true},
	    {" {\"stream\":true,\"stream\":false} ", true},
	    {"{\"model\":1,\"seed\":18446744073709551615}", true},
	    {"{\"model\":\"a\",\"model\":\"b\",\"x\":1e400}", true},
	    {"{}", true},
	    {"{\"model\":\"caf\xc3\xa9\"}", true},
	    {"{\"prompt\":\"\\ud800\"}", false},
	    {"{\"prompt\":\"\\u00e9\\\\u\"}", true},
	    {"{\"prompt\":\"\\ud83d\\ude00 \xf0\x9f\x98\x80\"}", true},
	    {"{\"prompt\":\"\\u0000\"}", false},
	    {"{\"m\":[{\"\\u0000t\":\"hi\"}]}", false},
	    {"{\"prompt\":\"\\udc00\"}", false},
	    {"{\"prompt\":\"\\ud800\\u0041\"}", false},
	    {"{\"prompt\":\"\\u00g0\"}", false},
	    {"{\"prompt\":\"\xc0\xaf\"}", false},
	    {"{\"prompt\":\"\xed\xa0\x80\"}", false},
	    {"{\"prompt\":\"\xf4\x90\x80\x80\"}", false},
	    {"{\"prompt\":\"\xe2\x82\"}", false},
	    {"{\"model\":\"a\\/b\"}", false},
	    {"{\"str\\u0065am\":true}", false},
	    {"{\"a\\/\":true}", false},
	    {"{\"stream\":1}", false},
	    {"{\"stream\":null}", false},
	    {"{\"stream\":\"false\" }", false},
	    {"{\"stream\":\"true\"}", false},
	    {"{\"priority\":\"urgent\"}", false},
	    {"{\"n_discard\":5}", false},
	    {"{\"n\":2}", false},
	    {"{\"prompt\":[\"a\",[1,2],\"b\"],\"n_cmpl\":2}", true},
	    {"{\"logprobs\":true,\"stop\":\"x\"}", false},
	    {"{\"tools\":[]}", false},
	    {"{\"return_tokens\":true}", false},
	    {"{\"response_fields\":[\"content\"]}", false},
	    {"[1]", false},
	    {"\"x\"", false},
	    {"{\"a\":1,}", false},
	    {"{\"a\":01}", false},
	    {"{\"a\":\"x\ty\"}", false},
	    {"{\"a\":1} x", false},
	    {"{\"a\":[1,\v2]}", false},
	    {"{\"a\":{\"b\":1\f}}", false},
	    {"{\"a\":1\v}", false},
	    {"", false},
	};
	static const char *const paths[] = {"/v1/chat/completions",
	                                    "/v1/completions", "/completion",
	                                    "/v1/embeddings", "/tokenize"};
	static const char *const headers[] = {NULL, "urgent", "bogus"};
	for (size_t b = 0; b < SL_ARRAY_SIZE(bodies); b++)
		for (size_t p = 0; p < SL_ARRAY_SIZE(paths); p++)
			for (size_t h = 0; h < SL_ARRAY_SIZE(headers); h++)
				for (int up = 0; up < 2; up++)
					compare_paths(
					    endpoint(paths[p]), headers[h],
					    bodies[b].body, up, bodies[b].fast);
	/*
	 * Nesting: at sluice's bound (the fast path takes it), past it and
	 * past jansson's own limit of 2048 (both refused, alike).
	 */
	static const unsigned depths[] = {SL_JSCAN_DEPTH_MAX,
	                                  SL_JSCAN_DEPTH_MAX + 1, 3000};
	for (size_t d = 0; d < SL_ARRAY_SIZE(depths); d++) {
		char *body = nested_body(depths[d]);
		compare_paths(endpoint("/v1/completions"), NULL, body, true,
		              depths[d] <= SL_JSCAN_DEPTH_MAX);
		free(body);
	}
}

/*
 * The native APIs' fast path (request.c, native_members) gives what
 * jansson's whole document gives, for every body: the members read, the
 * last of duplicates, names with escapes, "stop" and the containers whose
 * contents nothing reads, and numbers at the edges of jansson's range
 * anywhere in the body, which it refuses (the fast path leaves those to
 * it). A body that needs no decision of jansson's takes the fast path.
 */
static void test_native_fast_path_agrees_with_jansson(void)
{
	static const struct {
		const char *body;
		bool fast;
	} bodies[] = {
	    {"{\"prompt\":\"hi\",\"max_tokens\":5,\"stream\":true,\"stop\":"
	     "[\"a\",\"b\"],\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,"
	     "\"seed\":7,\"priority\":\"urgent\",\"model\":\"m\"}",
	     true},
	    {"{\"query\":\"q\",\"priority\":3,\"x\":{\"query\":1}}", true},
	    {" {\n\"prompt\" : \"p\" ,\"query\":\"q\"} ", true},
	    {"{\"prompt\":\"a\",\"prompt\":\"b\",\"query\":5,\"query\":\"c\"}",
	     true},
	    {"{\"pr\\u006fmpt\":\"x\",\"\\u0071uery\":\"y\"}", true},
	    {"{\"prompt\":\"caf\\u00e9 \\ud83d\\ude00 \xc3\xa9\\/\\\"\\n\"}",
	     true},
	    {"{\"prompt\":\"p\",\"stop\":[],\"query\":\"q\"}", true},
	    {"{\"prompt\":\"p\",\"stop\":[\"a\\\"b\",\"\\u00e9\"]}", true},
	    {"{\"prompt\":\"p\",\"stop\":[1],\"stop\":[\"x\"]}", true},
	    {"{\"prompt\":\"p\",\"stop\":[1,\"a\"]}", true},
	    {"{\"prompt\":\"p\",\"stop\":[\"a\",[\"b\"]]}", true},
	    {"{\"prompt\":\"p\",\"stop\":[\"a\",{}]}", true},
	    {"{\"prompt\":\"p\",\"stop\":\"x\"}", true},
	    {"{\"prompt\":\"p\",\"stop\":{\"a\":1}}", true},
	    {"{\"prompt\":[\"a\"],\"query\":{\"x\":1}}", true},
	    {"{\"prompt\":\"p\",\"max_tokens\":[1],\"query\":[]}", true},
	    {"{\"prompt\":\"p\",\"stream\":false,\"stream\":true}", true},
	    {"{\"prompt\":\"p\",\"stream\":\"true\"}", true},
	    {"{\"prompt\":\"p\",\"stream\":{}}", true},
	    {"{\"prompt\":\"p\",\"n_discard\":-1}", true},
	    {"{\"prompt\":\"p\",\"n_discard\":[]}", true},
	    {"{\"prompt\":\"p\",\"model\":[1],\"query\":\"q\"}", true},
	    {"{\"prompt\":\"p\",\"model\":null,\"query\":\"q\"}", true},
	    {"{\"prompt\":\"p\",\"priority\":[1]}", true},
	    {"{\"prompt\":\"p\",\"priority\":150}", true},
	    {"{\"prompt\":\"p\",\"priority\":{\"a\":1}}", true},
	    {"{\"prompt\":\"p\",\"priority\":\"batch\",\"priority\":7.5}",
	     true},
	    {"{\"prompt\":\"p\",\"max_tokens\":0}", true},
	    {"{\"prompt\":\"p\",\"max_tokens\":\"5\"}", true},
	    {"{\"prompt\":\"p\",\"max_tokens\":1e2}", true},
	    {"{\"prompt\":\"p\",\"seed\":1.5,\"query\":\"q\"}", true},
	    {"{\"prompt\":\"p\",\"seed\":4294967296}", true},
	    {"{\"prompt\":\"p\",\"temperature\":101}", true},
	    {"{\"prompt\":\"p\",\"top_p\":-0.0,\"top_k\":0}", true},
	    /* Numbers at the edges of jansson's range, anywhere. */
	    {"{\"prompt\":\"p\",\"query\":\"q\",\"x\":[9223372036854775807,"
	     "-9223372036854775807,1e308,-1e308,1e-400,123456789012345678]}",
	     true},
	    {"{\"prompt\":\"p\",\"query\":\"q\",\"x\":-9223372036854775808}",
	     true},
	    {"{\"prompt\":\"p\",\"x\":[9223372036854775808]}", false},
	    {"{\"prompt\":\"p\",\"x\":{\"y\":-9223372036854775809}}", false},
	    {"{\"prompt\":\"p\",\"x\":[1e300,1e301,1e308,0.1e309,1.7e308,"
	     "123e-2,1e-99999999999,-0.0e0,1e+2]}",
	     true},
	    {"{\"prompt\":\"p\",\"x\":1e400}", false},
	    {"{\"prompt\":\"p\",\"x\":10e308}", false},
	    {"{\"prompt\":\"p\",\"x\":0.5e309}", false},
	    {"{\"prompt\":\"p\",\"x\":-1.8e+308}", false},
	    {"{\"prompt\":\"p\",\"x\":1E99999999999}", false},
	    {"{\"prompt\":\"p\",\"x\":[-2E+308]}", false},
	    {"{\"prompt\":\"p\",\"seed\":18446744073709551615}", false},
	    {"{\"prompt\":\"p\",\"priority\":1e400}", false},
	    /* Slow for what jansson must judge. */
	    {"{\"st\\u006fp\":[\"x\"],\"prompt\":\"p\"}", false},
	    {"{\"prompt\":\"p\\u0000q\",\"query\":\"\\u0000\"}", false},
	    {"{\"prompt\":\"p\",\"model\":\"a\\u0000b\"}", false},
	    {"{\"prompt\":\"\\ud800\"}", false},
	    {"{\"prompt\":\"\xc0\xaf\"}", false},
	    {"{\"prompt\":\"p\",\"x\":[1,\v2]}", false},
	    {"{\"prompt\":\"p\",}", false},
	    {"{\"prompt\":\"p\"} x", false},
	    {"{\"prompt\":\"p\",\"x\":01}", false},
	    {"[\"prompt\"]", false},
	    {"\"prompt\"", false},
	    {"", false},
	};
	static const char *const paths[] = {"/generate", "/infer"};
	static const char *const headers[] = {NULL, "urgent", "bogus"};
	for (size_t b = 0; b < SL_ARRAY_SIZE(bodies); b++)
		for (size_t p = 0; p < SL_ARRAY_SIZE(paths); p++)
			for (size_t h = 0; h < SL_ARRAY_SIZE(headers); h++)
				for (int up = 0; up < 2; up++)
					compare_paths(
					    endpoint(paths[p]), headers[h],
					    bodies[b].body, up, bodies[b].fast);
	/*
	 * Reals written long: past 300 characters without an exponent the
	 * fast path converts them to see (request.c, SL_REAL_SURE_LEN); 10^308
	 * is within a double, 10^309 beyond.
	 */
	static const unsigned digits[] = {290, 299, 300, 301, 309, 310, 400};
	for (size_t d = 0; d < SL_ARRAY_SIZE(digits); d++) {
		char body[512];
		struct sl_join j = SL_JOIN(body);
		sl_join_str(&j, "{\"prompt\":\"p\",\"x\":1");
		for (unsigned i = 1; i < digits[d]; i++)
			sl_join_str(&j, "0");
		sl_join_str(&j, ".5}");
		ASSERT(j.len + 1 < sizeof(body));
		compare_paths(endpoint("/generate"), NULL, body, true,
		              digits[d] <= 309);
	}
}

/*
 * A wide body of about `size` bytes, malloc'd: `head`, then items
 * separated by commas, then `tail`. An item is `item`, or with `after`
 * the item's index between the two: "k" 7 "":1" is "k7":1.
 */
static char *wide_body(const char *head, const char *item, const char *after,
                       const char *tail, size_t size)
{
	char *body = sl_xmalloc(size + 64);
	struct sl_join j = {.p = body, .cap = size + 64};
	sl_join_str(&j, head);
	for (unsigned n = 0; j.len + 64 < size; n++) {
		if (n)
			sl_join_str(&j, ",");
		sl_join_str(&j, item);
		if (after) {
			sl_join_u64(&j, n);
			sl_join_str(&j, after);
		}
	}
	sl_join_str(&j, tail);
	ASSERT(j.len + 1 < j.cap);
	return body;
}

/*
 * A wide body, a megabyte of members or elements that /generate and
 * /infer ignore, maps exactly as a small one does, by the fast path; one
 * that holds a number jansson cannot, however deep in what is ignored, is
 * refused as before, at its line and column.
 */
static void test_native_wide_bodies_map_exactly(void)
{
	static const size_t size = 1u << 20;
	struct sl_request r;
	/* {"query":"...","a":[1,1,...]} */
	char *body = wide_body("{\"query\":\"What is \\\"wide\\\"?\","
	                       "\"a\":[",
	                       "1", NULL, "]}", size);
	ASSERT_EQ(check(&r, "/infer", "batch", body), 0);
	ASSERT_STR_EQ(r.body, "{\"prompt\":\"What is \\\"wide\\\"?\","
	                      "\"n_predict\":64,\"stream\":true,"
	                      "\"cache_prompt\":true}");
	ASSERT(r.read_fast && r.priority == 0 && r.priority_given);
	ASSERT(r.assemble && !r.stream && r.max_tokens == 64);
	sl_request_free(&r);
	compare_paths(endpoint("/infer"), NULL, body, true, true);
	compare_paths(endpoint("/generate"), NULL, body, true, true);
	free(body);

	/* Many members, each an array 22 deep, the ones read among them. */
	body =
	    wide_body("{\"k\":0,\"prompt\":\"p\",\"max_tokens\":9,"
	              "\"stop\":[\"\\n\"],\"seed\":3,\"priority\":\"urgent\","
	              "\"stream\":true,\"model\":\"m\",\"temperature\":0,",
	              "\"k", "\":[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]",
	              ",\"prompt\":\"last\"}", size);
	ASSERT_EQ(check(&r, "/generate", NULL, body), 0);
	ASSERT_STR_EQ(r.body, "{\"prompt\":\"last\",\"n_predict\":9,"
	                      "\"stream\":true,\"cache_prompt\":true,"
	                      "\"stop\":[\"\\n\"],\"temperature\":0,"
	                      "\"seed\":3}");
	ASSERT(r.read_fast && r.priority == 2 && r.stream && !r.assemble);
	ASSERT_STR_EQ(r.model, "m");
	ASSERT_EQ(r.max_tokens, 9);
	sl_request_free(&r);
	compare_paths(endpoint("/generate"), NULL, body, true, true);
	free(body);

	/* An integer past int64 near the end: jansson's refusal, as ever. */
	body = wide_body("{\"prompt\":\"p\",\"a\":[", "1", NULL,
	                 ",99999999999999999999]}", size);
	ASSERT_EQ(check(&r, "/generate", NULL, body), SL_EINVAL);
	ASSERT_CONTAINS(r.error, "malformed JSON in the request body at line "
	                         "1, column ");
	ASSERT_CONTAINS(r.error, "too big integer");
	ASSERT(!r.read_fast);
	compare_paths(endpoint("/generate"), NULL, body, true, false);
	free(body);
}

/* The output bound a body gives a key's tpm (request.h, max_tokens). */
static int64_t bound_of(const char *path, const char *body)
{
	struct sl_request r;
	ASSERT_EQ(check(&r, path, NULL, body), 0);
	int64_t n = r.max_tokens;
	sl_request_free(&r);
	return n;
}

static void test_max_tokens_bound(void)
{
	static const struct {
		const char *body;
		int64_t bound;
	} cases[] = {
	    {"{}", -1},
	    {"{\"max_tokens\":16}", 16},
	    {"{\"n_predict\":7}", 7},
	    {"{\"max_completion_tokens\":9}", 9},
	    {"{\"max_output_tokens\":5}", 5},
	    /* Whichever llama-server takes, the largest covers it. */
	    {"{\"max_tokens\":3,\"n_predict\":40}", 40},
	    {"{\"max_tokens\":50,\"max_completion_tokens\":6}", 50},
	    {"{\"max_tokens\":3,\"max_tokens\":30}", 30},
	    /* llama-server's "until the context is full". */
	    {"{\"n_predict\":-1,\"max_tokens\":3}", -1},
	    {"{\"max_tokens\":3,\"max_completion_tokens\":-2}", -1},
	    /* null is absent; what is no number bounds nothing. */
	    {"{\"max_tokens\":null,\"n_predict\":4}", 4},
	    {"{\"max_tokens\":null}", -1},
	    {"{\"max_tokens\":\"5\"}", -1},
	    {"{\"max_tokens\":[5]}", -1},
	    /* llama-server truncates reals: rounded up, they are safe. */
	    {"{\"max_tokens\":2.5}", 3},
	    {"{\"max_tokens\":1e1}", 10},
	    {"{\"max_tokens\":1e300}", INT64_C(4294967295)},
	    /* As jansson and llama-server read names, escapes decoded. */
	    {"{\"max_\\u0074okens\":12}", 12},
	    /* Only the top level counts. */
	    {"{\"x\":{\"max_tokens\":1}}", -1},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++)
		for (int chat = 0; chat < 2; chat++) {
			const char *path =
			    chat ? "/v1/chat/completions" : "/completion";
			int64_t got = bound_of(path, cases[i].body);
			if (got != cases[i].bound)
				TEST_FAIL("%s %s: %lld, not %lld", path,
				          cases[i].body, (long long)got,
				          (long long)cases[i].bound);
		}
	/* What generates nothing, nothing; the native APIs, their own. */
	ASSERT_EQ(bound_of("/v1/embeddings", "{\"input\":\"x\"}"), 0);
	ASSERT_EQ(bound_of("/v1/embeddings", "{\"max_tokens\":-1}"), 0);
	ASSERT_EQ(bound_of("/generate", "{\"prompt\":\"x\"}"),
	          SL_GENERATE_DEFAULT_TOKENS);
	ASSERT_EQ(bound_of("/generate", "{\"prompt\":\"x\",\"max_tokens\":5}"),
	          5);
}

/* The outputs a body asks for (request.h): choices and outputs. */
static void outputs_of(const char *path, const char *body, uint32_t *choices,
                       uint32_t *outputs)
{
	struct sl_request r;
	ASSERT_EQ(check(&r, path, NULL, body), 0);
	*choices = r.choices;
	*outputs = r.outputs;
	sl_request_free(&r);
}

/*
 * Issue 41: a prompt array and "n" ask for several outputs, each up to
 * the output bound, which a key's tpm must reserve and charge; counted as
 * llama-server 0.7.0 counts them (measured), on the endpoints that read
 * them.
 */
static void test_outputs(void)
{
	static const struct {
		const char *body;
		uint32_t choices, prompts;
	} cases[] = {
	    {"{}", 1, 1},
	    {"{\"prompt\":\"a\"}", 1, 1},
	    /* Strings, arrays of ids, and ids mixed with text: each one. */
	    {"{\"prompt\":[\"a\",\"b\",\"c\"]}", 1, 3},
	    {"{\"prompt\":[[1,2,3],[4,5,6]]}", 1, 2},
	    {"{\"prompt\":[\"a\",[4,5,6],[\"b\",7]]}", 1, 3},
	    {"{\"prompt\":[{\"prompt_string\":\"a\"},\"b\"]}", 1, 2},
	    /* A number in the array: one prompt, of ids or mixed. */
	    {"{\"prompt\":[1,2,3]}", 1, 1},
	    {"{\"prompt\":[\"a\",\"b\",-5]}", 1, 1},
	    {"{\"prompt\":[\"[1]\",\"]\"]}", 1, 2},
	    /* Refused by llama-server, generating nothing. */
	    {"{\"prompt\":[]}", 1, 1},
	    /* The last "prompt", as llama-server reads duplicates. */
	    {"{\"prompt\":[\"a\",\"b\"],\"prompt\":\"c\"}", 1, 1},
	    {"{\"prompt\":\"c\",\"prompt\":[\"a\",\"b\"]}", 1, 2},
	    {"{\"x\":{\"prompt\":[\"a\",\"b\"]}}", 1, 1},
	    /* n, or n_cmpl when it is there: it wins (measured). */
	    {"{\"n\":3}", 3, 1},
	    {"{\"n_cmpl\":2}", 2, 1},
	    {"{\"n\":2,\"n_cmpl\":1}", 1, 1},
	    {"{\"n\":1,\"n_cmpl\":4}", 4, 1},
	    {"{\"n\":4,\"n_cmpl\":null}", 4, 1},
	    {"{\"n\":null}", 1, 1},
	    {"{\"\\u006e\":2}", 2, 1},
	    /* A real is truncated (1.5: one output); no number, one. */
	    {"{\"n\":2.9}", 2, 1},
	    {"{\"n\":\"3\"}", 1, 1},
	    {"{\"n\":0}", 1, 1},
	    {"{\"n\":-2}", 1, 1},
	    {"{\"n\":true}", 1, 1},
	    {"{\"n\":1e300}", SL_REQUEST_OUTPUTS_MAX, 1},
	    /* Both: every prompt that many times. */
	    {"{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":2}", 2, 3},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(cases); i++) {
		/* Prompt arrays on the completions; n on chat too. */
		static const struct {
			const char *path;
			bool n, prompts;
		} paths[] = {
		    {"/completion", true, true},
		    {"/completions", true, true},
		    {"/v1/completions", true, true},
		    {"/v1/chat/completions", true, false},
		    {"/v1/responses", true, false},
		    {"/infill", true, false},
		    {"/v1/messages", false, false},
		    {"/v1/embeddings", false, false},
		};
		for (size_t p = 0; p < SL_ARRAY_SIZE(paths); p++) {
			uint32_t choices, outputs;
			outputs_of(paths[p].path, cases[i].body, &choices,
			           &outputs);
			uint32_t want_choices =
			    paths[p].n ? cases[i].choices : 1;
			uint64_t want =
			    (uint64_t)want_choices *
			    (paths[p].prompts ? cases[i].prompts : 1);
			if (choices != want_choices ||
			    outputs != SL_MIN(want, SL_REQUEST_OUTPUTS_MAX))
				TEST_FAIL("%s %s: %u choices, %u outputs; "
				          "expected %u, %llu",
				          paths[p].path, cases[i].body, choices,
				          outputs, want_choices,
				          (unsigned long long)want);
		}
	}
	/* Saturated, not wrapped: many prompts, each many times. */
	uint32_t choices, outputs;
	outputs_of("/completion",
	           "{\"prompt\":[\"a\",\"b\",\"c\",\"d\"],\"n\":3e8}", &choices,
	           &outputs);
	ASSERT_EQ(choices, 300000000);
	ASSERT_EQ(outputs, SL_REQUEST_OUTPUTS_MAX);
	/* sluice's own APIs ask for one. */
	outputs_of("/generate", "{\"prompt\":\"x\",\"n\":3}", &choices,
	           &outputs);
	ASSERT_EQ(outputs, 1);
}

/*
 * A body nested deeper than SL_JSCAN_DEPTH_MAX is refused before any
 * parser reads it, with a message that names the limit, on every
 * endpoint that takes a body; brackets inside strings do not count.
 */
static void test_deep_bodies_are_refused(void)
{
	static char big[32768];
	static const char *const paths[] = {
	    "/v1/chat/completions", "/completion", "/generate", "/infer"};
	char want[128];
	snprintf(want, sizeof(want),
	         "the request body nests objects and arrays deeper than %d "
	         "levels",
	         SL_JSCAN_DEPTH_MAX);
	for (size_t p = 0; p < SL_ARRAY_SIZE(paths); p++) {
		static const unsigned depths[] = {SL_JSCAN_DEPTH_MAX + 1,
		                                  100000};
		for (size_t d = 0; d < SL_ARRAY_SIZE(depths); d++) {
			struct sl_request r;
			char *body = nested_body(depths[d]);
			ASSERT_EQ(check(&r, paths[p], NULL, body), SL_EINVAL);
			ASSERT_EQ(r.status, 400);
			ASSERT_STR_EQ(r.error, want);
			free(body);
		}
	}
	/*
	 * A quote inside a primitive, which jsmn takes for one of its
	 * characters, hides no nest: jansson refuses 1e400 first, and the
	 * scan for its stand-ins reads the whole body with jsmn.
	 */
	struct sl_join at = {.p = big, .cap = sizeof(big)};
	sl_join_str(&at, "{\"a\":[1e400\"],\"b\":");
	for (int i = 0; i < 10000; i++)
		sl_join_str(&at, "[");
	for (int i = 0; i < 10000; i++)
		sl_join_str(&at, "]");
	sl_join_str(&at, "\"}");
	ASSERT(at.len + 1 < at.cap);
	for (size_t p = 0; p < SL_ARRAY_SIZE(paths); p++) {
		struct sl_request r;
		ASSERT_EQ(check(&r, paths[p], NULL, big), SL_EINVAL);
		ASSERT_STR_EQ(r.error, want);
	}
	/* At the bound: relayed as written. */
	struct sl_request r;
	char *body = nested_body(SL_JSCAN_DEPTH_MAX);
	ASSERT_EQ(check(&r, "/v1/embeddings", NULL, body), 0);
	ASSERT_STR_EQ(r.body, body);
	sl_request_free(&r);
	free(body);
	/* Brackets in a string are text. */
	body = sl_xmalloc(4096);
	struct sl_join j = {.p = body, .cap = 4096};
	sl_join_str(&j, "{\"prompt\":\"");
	for (int i = 0; i < 4 * SL_JSCAN_DEPTH_MAX; i++)
		sl_join_str(&j, "[{");
	sl_join_str(&j, "\"}");
	ASSERT_EQ(check(&r, "/v1/embeddings", NULL, body), 0);
	ASSERT_STR_EQ(r.body, body);
	sl_request_free(&r);
	free(body);
}

/*
 * A "model" that is not a string is refused, naming the field, on both
 * paths and every endpoint that takes a body, rather than read as no model
 * (the default one). null is no model; the last of duplicates counts, as
 * jansson reads it.
 */
static void test_model_must_be_a_string(void)
{
	static const struct {
		const char *body, *error;
	} bad[] = {
	    {"{\"model\":5,\"prompt\":\"hi\"}", "a number"},
	    {"{\"model\":-1.5e3}", "a number"},
	    {"{\"model\":{\"x\":1}}", "an object"},
	    {"{\"model\":[\"m\"]}", "an array"},
	    {"{\"model\":true}", "a boolean"},
	    {"{\"model\":\"m\",\"model\":false}", "a boolean"},
	};
	static const char *const paths[] = {
	    "/v1/chat/completions", "/v1/completions", "/completion",
	    "/v1/embeddings",       "/generate",       "/infer"};
	for (size_t b = 0; b < SL_ARRAY_SIZE(bad); b++) {
		char want[128];
		snprintf(want, sizeof(want),
		         "\"model\" must be a string, the name of a model; "
		         "got %s",
		         bad[b].error);
		for (size_t p = 0; p < SL_ARRAY_SIZE(paths); p++) {
			struct sl_request r;
			ASSERT_EQ(check(&r, paths[p], NULL, bad[b].body),
			          SL_EINVAL);
			ASSERT_EQ(r.status, 400);
			ASSERT_STR_EQ(r.error, want);
			ASSERT(r.model == NULL);
			compare_paths(endpoint(paths[p]), NULL, bad[b].body,
			              true, false);
		}
	}
	struct sl_request r;
	ASSERT_EQ(
	    check(&r, "/v1/completions", NULL, "{\"model\":\"a\\u0000b\"}"),
	    SL_EINVAL);
	ASSERT_STR_EQ(r.error,
	              "\"model\" holds a NUL character; no model is named so");
	/* null is no model, on either path. */
	ASSERT_EQ(check(&r, "/v1/completions", NULL,
	                "{\"model\":null,\"prompt\":\"hi\"}"),
	          0);
	ASSERT(r.model == NULL);
	ASSERT(r.read_fast);
	sl_request_free(&r);
	compare_paths(endpoint("/v1/completions"), NULL,
	              "{\"model\":null,\"prompt\":\"hi\"}", true, true);
	ASSERT_EQ(
	    check(&r, "/v1/completions", NULL, "{\"model\":5,\"model\":\"m\"}"),
	    0);
	ASSERT_STR_EQ(r.model, "m");
	sl_request_free(&r);
	compare_paths(endpoint("/v1/completions"), NULL,
	              "{\"model\":5,\"model\":\"m\"}", true, true);
}

int main(void)
{
	RUN(test_priority_header);
	RUN(test_long_priority_is_read_whole);
	RUN(test_priority_field);
	RUN(test_priority_messages);
	RUN(test_body_checks);
	RUN(test_deep_bodies_are_refused);
	RUN(test_fast_path_agrees_with_jansson);
	RUN(test_native_fast_path_agrees_with_jansson);
	RUN(test_native_wide_bodies_map_exactly);
	RUN(test_model_must_be_a_string);
	RUN(test_upstream_bodies);
	RUN(test_nul_in_strings_survives);
	RUN(test_untouched_body_is_byte_identical);
	RUN(test_priority_member_is_cut_out);
	RUN(test_stream_fields_are_set_in_place);
	RUN(test_stream_body_after_validation);
	RUN(test_huge_numbers_are_relayed_as_written);
	RUN(test_max_tokens_bound);
	RUN(test_outputs);
	return 0;
}

/*
 * fuzz_request.c: request validation (request.c) on any body and priority.
 *
 * Input layout: one control byte, then an X-Priority value up to the first
 * LF when the control byte asks for one, then the JSON body. The control
 * byte picks the endpoint (low bits), whether the header is present (bit 6)
 * and --stream-upstream (bit 7).
 *
 * Invariants checked: a refusal is a 400 with a message and no body; an
 * accepted request has a priority in range and an upstream body that is a
 * JSON object without "priority", whose stream field agrees with what the
 * exchange will expect; a body nested deeper than SL_JSCAN_DEPTH_MAX is
 * refused, saying so; a relayed body is the client's document less
 * "priority" (plus the stream fields when assembled), and the client's
 * bytes exactly when nothing had to change. And the fast paths (yajl and
 * jsmn, request.c's read_fast and, for /generate and /infer,
 * native_members) agree with jansson's path in everything: the refusal
 * and its message, or every field of the result.
 */
#include "sluice/relay/request.h"

#include "sluice/base/common.h"
#include "sluice/json/json_scan.h"
#include "sluice/sched/sched.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_BIT 0x40
#define STREAM_UPSTREAM_BIT 0x80

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_request: %s\n", #cond);          \
			abort();                                               \
		}                                                              \
	} while (0)

/*
 * Loads JSON text as sluice's checks see it; integers beyond int64 as
 * reals, so that both sides of a comparison read them alike. NULL when a
 * real overflows (1e400: the text is relayed for llama-server to refuse).
 */
static json_t *load(const char *text, size_t len)
{
	json_error_t err;
	json_t *doc = json_loadb(
	    text, len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &err);
	if (!doc)
		CHECK(json_error_code(&err) == json_error_numeric_overflow);
	return doc;
}

/*
 * An accepted body: a JSON object without "priority", whose "stream"
 * agrees with what the exchange will expect. A relayed one is the client's
 * document less "priority", with the stream fields set when assembled;
 * and with nothing to change, the client's bytes exactly.
 */
static void check_upstream_body(const struct sl_endpoint *ep,
                                const struct sl_request *r, const char *body,
                                size_t len)
{
	json_t *doc = load(r->body, r->body_len);
	if (!doc) {
		CHECK(ep->api == SL_API_RELAY);
		return;
	}
	CHECK(json_is_object(doc));
	CHECK(!json_object_get(doc, "priority"));
	json_t *stream = json_object_get(doc, "stream");
	/* Whatever is assembled is asked for as a stream. */
	if (r->assemble)
		CHECK(json_is_true(stream));
	CHECK(!(r->assemble && r->stream));
	CHECK(!r->assemble || r->assemblable);
	if (ep->api == SL_API_RELAY) {
		json_t *want = load(body, len);
		if (!want) {
			/*
			 * The client's text overflows a real and the relayed
			 * one does not: the overflow sat in a member sluice
			 * replaced or dropped (an earlier duplicate of
			 * "stream" or "priority"; jansson and llama-server
			 * read the last). Nothing left to compare it with.
			 */
			json_decref(doc);
			return;
		}
		bool had_priority = json_object_get(want, "priority") != NULL;
		json_object_del(want, "priority");
		if (r->assemble) {
			json_object_set_new(want, "stream", json_true());
			if (r->assemble_kind != SL_ASSEMBLE_NATIVE)
				json_object_set_new(
				    want, "stream_options",
				    json_pack("{s:b}", "include_usage", 1));
		}
		CHECK(json_equal(want, doc));
		if (!had_priority && !r->assemble)
			CHECK(r->body_len == len &&
			      memcmp(r->body, body, len) == 0);
		json_decref(want);
	}
	json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t control = data[0];
	const struct sl_endpoint *ep =
	    &sl_endpoints[(control & 0x3f) % sl_n_endpoints];
	struct sl_request_options opts = {
	    .max_tokens_cap = 64,
	    .stream_upstream = (control & STREAM_UPSTREAM_BIT) != 0,
	};
	const char *rest = (const char *)data + 1;
	size_t left = size - 1;
	char *header = NULL;
	if (control & HEADER_BIT) {
		const char *lf = memchr(rest, '\n', left);
		size_t n = lf ? (size_t)(lf - rest) : left;
		header = malloc(n + 1);
		CHECK(header);
		memcpy(header, rest, n);
		header[n] = '\0'; /* a NUL inside ends it, as in sluice */
		rest += lf ? n + 1 : n;
		left -= lf ? n + 1 : n;
	}
	/* The body gets no NUL terminator: the validator must not need one. */
	char *body = malloc(left ? left : 1);
	CHECK(body);
	memcpy(body, rest, left);

	struct sl_request r, slow;
	int rc = sl_request_validate(&r, ep, header, body, left, &opts);
	struct sl_request_options jansson_only = opts;
	jansson_only.jansson_only = true;
	int slow_rc =
	    sl_request_validate(&slow, ep, header, body, left, &jansson_only);
	CHECK(rc == slow_rc);
	if (rc != 0) {
		CHECK(r.status == slow.status);
		CHECK(strcmp(r.error, slow.error) == 0);
	} else {
		CHECK(r.priority == slow.priority);
		CHECK(r.priority_given == slow.priority_given);
		CHECK(r.stream == slow.stream && r.assemble == slow.assemble);
		CHECK(r.assemblable == slow.assemblable);
		CHECK(r.assemble_kind == slow.assemble_kind);
		CHECK(r.return_tokens == slow.return_tokens);
		CHECK(r.max_tokens == slow.max_tokens);
		CHECK(r.choices == slow.choices && r.outputs == slow.outputs);
		CHECK((r.model == NULL) == (slow.model == NULL));
		CHECK(!r.model || strcmp(r.model, slow.model) == 0);
		CHECK(r.body_len == slow.body_len);
		CHECK(!r.body || memcmp(r.body, slow.body, r.body_len) == 0);
		CHECK(memcmp(&r.affinity, &slow.affinity, sizeof(r.affinity)) ==
		      0);
	}
	sl_request_free(&slow);
	if (ep->json_body && sl_jscan_shape(body, left) == SL_JSCAN_TOO_DEEP)
		CHECK(rc != 0 && strstr(r.error, "nests objects and arrays"));
	if (rc != 0) {
		CHECK(rc == SL_EINVAL);
		CHECK(r.status == 400);
		CHECK(r.error[0] != '\0');
		CHECK(memchr(r.error, '\0', sizeof(r.error)) != NULL);
		CHECK(r.body == NULL);
	} else {
		CHECK(isfinite(r.priority));
		CHECK(r.priority >= SL_PRIORITY_MIN &&
		      r.priority <= SL_PRIORITY_MAX);
		if (!ep->json_body) {
			CHECK(r.body == NULL);
		} else {
			CHECK(r.body != NULL);
			CHECK(strlen(r.body) == r.body_len);
			check_upstream_body(ep, &r, body, left);
		}
	}
	sl_request_free(&r);
	free(body);
	free(header);
	return 0;
}

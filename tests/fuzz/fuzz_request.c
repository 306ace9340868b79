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
 * exchange will expect.
 */
#include "sluice/request.h"

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

	struct sl_request r;
	int rc = sl_request_validate(&r, ep, header, body, left, &opts);
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
			json_error_t err;
			json_t *doc = json_loadb(r.body, r.body_len,
			                         JSON_ALLOW_NUL, &err);
			CHECK(json_is_object(doc));
			CHECK(!json_object_get(doc, "priority"));
			json_t *stream = json_object_get(doc, "stream");
			/* Whatever is assembled is asked for as a stream. */
			if (r.assemble)
				CHECK(json_is_true(stream));
			CHECK(!(r.assemble && r.stream));
			json_decref(doc);
		}
	}
	sl_request_free(&r);
	free(body);
	free(header);
	return 0;
}

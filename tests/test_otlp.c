/*
 * Unit tests for the pure parts of traces: traceparent read and written
 * (W3C Trace Context level 1), ids, samplers (trace_context.c), the
 * key=value lists and the traces URL (otel_syntax.c), and the OTLP
 * encoding (otlp.c): protobuf read back by a small reader here, field by
 * field with every length checked, and JSON read back by jansson.
 * tests/test_trace.py checks the same encodings against OpenTelemetry's
 * own definitions.
 */
#include "sluice/config/otel_syntax.h"
#include "sluice/ops/otlp.h"
#include "sluice/ops/trace_context.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#define TRACE_HEX "0af7651916cd43dd8448eb211c80319c"
#define SPAN_HEX "b7ad6b7169203331"

static void test_traceparent_parse(void)
{
	struct sl_trace_parent p;
	ASSERT_EQ(sl_traceparent_parse("00-" TRACE_HEX "-" SPAN_HEX "-01", &p),
	          0);
	ASSERT_EQ(p.trace_id[0], 0x0a);
	ASSERT_EQ(p.trace_id[15], 0x9c);
	ASSERT_EQ(p.span_id[0], 0xb7);
	ASSERT_EQ(p.span_id[7], 0x31);
	ASSERT_EQ(p.flags, 1);
	/* Later versions: the first 55 characters, when a '-' follows. */
	ASSERT_EQ(
	    sl_traceparent_parse("cc-" TRACE_HEX "-" SPAN_HEX "-00-what", &p),
	    0);
	ASSERT_EQ(p.flags, 0);
	const char *bad[] = {
	    NULL,
	    "",
	    "00-" TRACE_HEX "-" SPAN_HEX "-0",    /* short */
	    "00-" TRACE_HEX "-" SPAN_HEX "-01-x", /* 00 goes no further */
	    "cc-" TRACE_HEX "-" SPAN_HEX "-01x",  /* no '-' after */
	    "ff-" TRACE_HEX "-" SPAN_HEX "-01",   /* version ff */
	    "00-0AF7651916CD43DD8448EB211C80319C-" SPAN_HEX "-01", /* upper */
	    "00-00000000000000000000000000000000-" SPAN_HEX "-01",
	    "00-" TRACE_HEX "-0000000000000000-01",
	    "00_" TRACE_HEX "-" SPAN_HEX "-01",
	    "00-" TRACE_HEX "_" SPAN_HEX "-01",
	    "00-" TRACE_HEX "-" SPAN_HEX "-0g",
	    " 00-" TRACE_HEX "-" SPAN_HEX "-01",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (sl_traceparent_parse(bad[i], &p) == 0)
			TEST_FAIL("accepted traceparent %zu: %s", i,
			          bad[i] ? bad[i] : "(null)");
}

static void test_traceparent_format(void)
{
	struct sl_trace_parent p;
	ASSERT_EQ(sl_traceparent_parse("00-" TRACE_HEX "-" SPAN_HEX "-01", &p),
	          0);
	char out[SL_TRACEPARENT_LEN + 1];
	sl_traceparent_format(out, p.trace_id, p.span_id, 0);
	ASSERT_STR_EQ(out, "00-" TRACE_HEX "-" SPAN_HEX "-00");
	ASSERT_EQ(strlen(out), SL_TRACEPARENT_LEN);
}

static void test_ids(void)
{
	struct sl_trace_rng a, b;
	sl_trace_rng_seed_with(&a, 42);
	sl_trace_rng_seed_with(&b, 42);
	uint8_t x[16], y[16], z[16];
	sl_trace_rng_id(&a, x, 16);
	sl_trace_rng_id(&b, y, 16);
	ASSERT(memcmp(x, y, 16) == 0); /* seeded alike: the same ids */
	sl_trace_rng_id(&a, z, 16);
	ASSERT(memcmp(x, z, 16) != 0);
	/* Seeded from the kernel: ids differ, and none is all zeros. */
	sl_trace_rng_seed(&a);
	uint8_t zero[8] = {0}, prev[8] = {0};
	for (int i = 0; i < 1000; i++) {
		uint8_t id[8];
		sl_trace_rng_id(&a, id, 8);
		ASSERT(memcmp(id, zero, 8) != 0);
		ASSERT(memcmp(id, prev, 8) != 0);
		memcpy(prev, id, 8);
	}
}

static void test_samplers(void)
{
	uint8_t low[16] = {0}, high[16];
	low[15] = 1; /* last 7 bytes: tiny */
	memset(high, 0xff, sizeof(high));
	struct sl_trace_parent yes = {.flags = 1}, no = {.flags = 0};
	ASSERT(sl_trace_sampled(SL_OTEL_ALWAYS_ON, 0, high, &no));
	ASSERT(!sl_trace_sampled(SL_OTEL_ALWAYS_OFF, 1, low, &yes));
	/* traceidratio: by the id, whatever the parent says. */
	ASSERT(sl_trace_sampled(SL_OTEL_TRACEIDRATIO, 0.5, low, &no));
	ASSERT(!sl_trace_sampled(SL_OTEL_TRACEIDRATIO, 0.5, high, &yes));
	ASSERT(!sl_trace_sampled(SL_OTEL_TRACEIDRATIO, 0, low, NULL));
	ASSERT(sl_trace_sampled(SL_OTEL_TRACEIDRATIO, 1, high, NULL));
	/* Parent-based: the parent's flag, else the root sampler. */
	ASSERT(
	    sl_trace_sampled(SL_OTEL_PARENTBASED_TRACEIDRATIO, 0, high, &yes));
	ASSERT(
	    !sl_trace_sampled(SL_OTEL_PARENTBASED_TRACEIDRATIO, 1, low, &no));
	ASSERT(!sl_trace_sampled(SL_OTEL_PARENTBASED_TRACEIDRATIO, 0.5, high,
	                         NULL));
	ASSERT(
	    sl_trace_sampled(SL_OTEL_PARENTBASED_TRACEIDRATIO, 0.5, low, NULL));
	ASSERT(sl_trace_sampled(SL_OTEL_PARENTBASED_ALWAYS_ON, 0, high, NULL));
	ASSERT(!sl_trace_sampled(SL_OTEL_PARENTBASED_ALWAYS_ON, 0, high, &no));
	ASSERT(!sl_trace_sampled(SL_OTEL_PARENTBASED_ALWAYS_OFF, 0, low, NULL));
	ASSERT(sl_trace_sampled(SL_OTEL_PARENTBASED_ALWAYS_OFF, 0, low, &yes));
	/* A ratio keeps about its share of random ids. */
	struct sl_trace_rng r;
	sl_trace_rng_seed_with(&r, 7);
	unsigned kept = 0;
	for (int i = 0; i < 10000; i++) {
		uint8_t id[16];
		sl_trace_rng_id(&r, id, 16);
		kept += sl_trace_sampled(SL_OTEL_TRACEIDRATIO, 0.25, id, NULL);
	}
	ASSERT(kept > 2300 && kept < 2700);
}

static void test_pairs(void)
{
	struct sl_otel_pair *p;
	unsigned n;
	char why[256];
	ASSERT_EQ(sl_otel_pairs_parse(" a = 1 ,b=x%2Cy%3dz,c=", false, &p, &n,
	                              why, sizeof(why)),
	          0);
	ASSERT_EQ(n, 3);
	ASSERT_STR_EQ(p[0].key, "a");
	ASSERT_STR_EQ(p[0].value, "1");
	ASSERT_STR_EQ(p[1].value, "x,y=z");
	ASSERT_STR_EQ(p[2].value, "");
	sl_otel_pairs_free(p, n);
	ASSERT_EQ(sl_otel_pairs_parse("", true, &p, &n, why, sizeof(why)), 0);
	ASSERT_EQ(n, 0);
	/* Header lines: names are tokens, values without control bytes. */
	ASSERT_EQ(sl_otel_pairs_parse("Authorization=Bearer%20t", true, &p, &n,
	                              why, sizeof(why)),
	          0);
	ASSERT_STR_EQ(p[0].value, "Bearer t");
	sl_otel_pairs_free(p, n);
	ASSERT_EQ(sl_otel_pairs_parse("a b=1", true, &p, &n, why, sizeof(why)),
	          SL_EINVAL);
	ASSERT_STR_EQ(why, "item 1's key \"a b\" is no header name");
	ASSERT_EQ(sl_otel_pairs_parse("x=1%0d%0aEvil: 1", true, &p, &n, why,
	                              sizeof(why)),
	          SL_EINVAL);
	ASSERT_STR_EQ(why, "item 1 (x) has a value holding a control byte");
	ASSERT_EQ(
	    sl_otel_pairs_parse("a=1,,b=2", false, &p, &n, why, sizeof(why)),
	    SL_EINVAL);
	ASSERT_STR_EQ(why, "item 2 is empty");
	ASSERT_EQ(sl_otel_pairs_parse("=1", false, &p, &n, why, sizeof(why)),
	          SL_EINVAL);
	ASSERT_EQ(sl_otel_pairs_parse("a=%4", false, &p, &n, why, sizeof(why)),
	          SL_EINVAL);
	ASSERT_EQ(sl_otel_pairs_parse("a=%00", false, &p, &n, why, sizeof(why)),
	          SL_EINVAL);
}

static void test_traces_url(void)
{
	char *u = sl_otel_traces_url("http://c:4318", "");
	ASSERT_STR_EQ(u, "http://c:4318/v1/traces");
	free(u);
	u = sl_otel_traces_url("http://c:4318/base/", NULL);
	ASSERT_STR_EQ(u, "http://c:4318/base/v1/traces");
	free(u);
	u = sl_otel_traces_url("http://c:4318", "https://t/x");
	ASSERT_STR_EQ(u, "https://t/x");
	free(u);
	ASSERT(sl_otel_traces_url("", "") == NULL);
}

static void test_copy_text(void)
{
	char out[8];
	sl_trace_copy_text(out, sizeof(out),
	                   "ab\x01\xff"
	                   "c",
	                   5);
	ASSERT_STR_EQ(out, "ab??c");
	/* Cut between characters: "é" (2 bytes) does not fit after 6. */
	sl_trace_copy_text(out, sizeof(out), "abcdef\xc3\xa9", 8);
	ASSERT_STR_EQ(out, "abcdef");
	sl_trace_copy_text(out, sizeof(out), "d\xc3\xa9mo", 5);
	ASSERT_STR_EQ(out, "d\xc3\xa9mo");
}

/* ---- a protobuf reader, just enough to check the writer ---- */

struct field {
	unsigned number, wire;
	uint64_t value;      /* varint, fixed */
	const uint8_t *data; /* length-delimited */
	size_t len;
};

static uint64_t read_varint(const uint8_t **p, const uint8_t *end)
{
	uint64_t v = 0;
	for (int shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return v;
	}
	TEST_FAIL("a varint runs past its message");
	return 0;
}

/* The next field of [*p, end); false at the end. Fails on a bad length. */
static bool next_field(const uint8_t **p, const uint8_t *end, struct field *f)
{
	if (*p == end)
		return false;
	uint64_t tag = read_varint(p, end);
	f->number = (unsigned)(tag >> 3);
	f->wire = (unsigned)(tag & 7);
	switch (f->wire) {
	case 0: f->value = read_varint(p, end); break;
	case 1:
	case 5: {
		size_t n = f->wire == 1 ? 8 : 4;
		ASSERT((size_t)(end - *p) >= n);
		f->value = 0;
		for (size_t i = 0; i < n; i++)
			f->value |= (uint64_t)(*p)[i] << (8 * i);
		*p += n;
		break;
	}
	case 2:
		f->len = read_varint(p, end);
		ASSERT(f->len <= (size_t)(end - *p));
		f->data = *p;
		*p += f->len;
		break;
	default: TEST_FAIL("wire type %u", f->wire);
	}
	return true;
}

/* The first field `number` of a message; fails when there is none. */
static struct field find(const uint8_t *data, size_t len, unsigned number)
{
	const uint8_t *p = data, *end = data + len;
	struct field f;
	while (next_field(&p, end, &f))
		if (f.number == number)
			return f;
	TEST_FAIL("no field %u", number);
	return f;
}

static bool is_string(const struct field *f, const char *s)
{
	return f->wire == 2 && f->len == strlen(s) &&
	       memcmp(f->data, s, f->len) == 0;
}

/* Span attribute `key`'s AnyValue, or a zeroed field when absent. */
static struct field attribute(const struct field *span, const char *key)
{
	const uint8_t *p = span->data, *end = span->data + span->len;
	struct field f, none = {0};
	while (next_field(&p, end, &f)) {
		if (f.number != 9)
			continue;
		struct field k = find(f.data, f.len, 1);
		if (is_string(&k, key))
			return find(f.data, f.len, 2);
	}
	return none;
}

static void fill_record(struct sl_trace_record *r)
{
	memset(r, 0, sizeof(*r));
	struct sl_trace_parent p;
	sl_traceparent_parse("00-" TRACE_HEX "-" SPAN_HEX "-01", &p);
	memcpy(r->span.trace_id, p.trace_id, 16);
	memcpy(r->span.parent_id, p.span_id, 8);
	memset(r->span.span_id, 0x11, 8);
	memset(r->span.queue_id, 0x22, 8);
	memset(r->span.upstream_id, 0x33, 8);
	r->span.has_parent = true;
	r->span.sampled = true;
	r->span.route = "/v1/chat/completions";
	r->span.queued_ns = 1000;
	r->span.dispatched_ns = 2000;
	r->span.first_token_ns = 2500;
	r->span.upstream_end_ns = 2900;
	r->span.upstream_method = "POST";
	r->span.upstream_status = 200;
	r->span.attempts = 1;
	r->span.operation = "chat";
	strcpy(r->span.request_model, "demo");
	strcpy(r->span.response_model, "demo-tiny");
	r->span.max_tokens = 7;
	strcpy(r->span.finish_reasons[0], "length");
	r->span.n_reasons = 1;
	r->start_ns = 500;
	r->end_ns = 3000;
	r->method = "POST";
	r->status = 200;
	strcpy(r->upstream, "http://[::1]:8081");
	r->input_tokens = 54;
	r->output_tokens = 7;
	r->priority = "normal";
	r->queue_ms = 0;
	r->batch_size = 1;
	r->outcome = "ok";
	strcpy(r->request_id, "abc");
}

static void test_protobuf(void)
{
	struct sl_trace_record r;
	fill_record(&r);
	/* A long tracestate: a span over 127 bytes, its length in 2 bytes. */
	char state[300];
	memset(state, 'x', sizeof(state) - 1);
	state[0] = 'k';
	state[1] = '=';
	state[sizeof(state) - 1] = '\0';
	r.trace_state = state;
	struct sl_otel_pair attrs[] = {{"service.name", "ignored"},
	                               {"team", "a,b"}};
	struct sl_otlp_resource res = {"svc", attrs, 2};
	struct sl_trace_record *list[] = {&r};
	char *out;
	size_t len;
	sl_otlp_encode(SL_OTEL_HTTP_PROTOBUF, &res, list, 1, &out, &len);
	const uint8_t *data = (const uint8_t *)out;
	/* ExportTraceServiceRequest: one ResourceSpans, to the last byte. */
	const uint8_t *p = data, *end = data + len;
	struct field rs;
	ASSERT(next_field(&p, end, &rs));
	ASSERT_EQ(rs.number, 1);
	ASSERT(p == end);
	struct field resource = find(rs.data, rs.len, 1);
	/* Resource: service.name, then team; the list's service.name not. */
	const uint8_t *q = resource.data, *q_end = resource.data + resource.len;
	struct field kv;
	unsigned n_attrs = 0;
	while (next_field(&q, q_end, &kv)) {
		struct field key = find(kv.data, kv.len, 1);
		struct field any = find(kv.data, kv.len, 2);
		struct field s = find(any.data, any.len, 1);
		if (n_attrs == 0) {
			ASSERT(is_string(&key, "service.name"));
			ASSERT(is_string(&s, "svc"));
		} else {
			ASSERT(is_string(&key, "team"));
			ASSERT(is_string(&s, "a,b"));
		}
		n_attrs++;
	}
	ASSERT_EQ(n_attrs, 2);
	struct field ss = find(rs.data, rs.len, 2);
	struct field scope = find(ss.data, ss.len, 1);
	struct field scope_name = find(scope.data, scope.len, 1);
	ASSERT(is_string(&scope_name, "sluice"));
	/* Three spans: the request's, the queue's, the call's. */
	struct field spans[3];
	unsigned n = 0;
	q = ss.data;
	q_end = ss.data + ss.len;
	while (next_field(&q, q_end, &kv))
		if (kv.number == 2) {
			ASSERT(n < 3);
			spans[n++] = kv;
		}
	ASSERT_EQ(n, 3);
	struct field server = spans[0];
	ASSERT(server.len > 300);
	struct field f = find(server.data, server.len, 1);
	ASSERT_EQ(f.len, 16);
	ASSERT(memcmp(f.data, r.span.trace_id, 16) == 0);
	f = find(server.data, server.len, 4);
	ASSERT(memcmp(f.data, r.span.parent_id, 8) == 0);
	f = find(server.data, server.len, 3);
	ASSERT(is_string(&f, state));
	f = find(server.data, server.len, 5);
	ASSERT(is_string(&f, "POST /v1/chat/completions"));
	ASSERT_EQ(find(server.data, server.len, 6).value, 2);
	ASSERT_EQ(find(server.data, server.len, 7).value, 500);
	ASSERT_EQ(find(server.data, server.len, 8).value, 3000);
	ASSERT_EQ(find(server.data, server.len, 16).value, 0x301);
	struct field v = attribute(&server, "gen_ai.request.max_tokens");
	ASSERT_EQ(find(v.data, v.len, 3).value, 7);
	v = attribute(&server, "gen_ai.response.model");
	f = find(v.data, v.len, 1);
	ASSERT(is_string(&f, "demo-tiny"));
	v = attribute(&server, "gen_ai.response.finish_reasons");
	struct field array = find(v.data, v.len, 5);
	struct field first = find(array.data, array.len, 1);
	f = find(first.data, first.len, 1);
	ASSERT(is_string(&f, "length"));
	struct field event = find(server.data, server.len, 11);
	ASSERT_EQ(find(event.data, event.len, 1).value, 2500);
	/* The children: the server span is their parent. */
	for (int i = 1; i < 3; i++) {
		f = find(spans[i].data, spans[i].len, 4);
		ASSERT(memcmp(f.data, r.span.span_id, 8) == 0);
		ASSERT_EQ(find(spans[i].data, spans[i].len, 16).value, 0x101);
	}
	ASSERT_EQ(find(spans[1].data, spans[1].len, 7).value, 1000);
	ASSERT_EQ(find(spans[1].data, spans[1].len, 8).value, 2000);
	f = find(spans[2].data, spans[2].len, 2);
	ASSERT_EQ(f.data[0], 0x33);
	f = find(spans[2].data, spans[2].len, 5);
	ASSERT(is_string(&f, "chat demo"));
	ASSERT_EQ(find(spans[2].data, spans[2].len, 8).value, 2900);
	v = attribute(&spans[2], "server.address");
	f = find(v.data, v.len, 1);
	ASSERT(is_string(&f, "::1"));
	v = attribute(&spans[2], "server.port");
	ASSERT_EQ(find(v.data, v.len, 3).value, 8081);
	free(out);
}

static void test_json(void)
{
	struct sl_trace_record r;
	fill_record(&r);
	r.span.queued_ns = 0; /* not queued: two spans */
	r.status = 503;
	r.reason = "queue_timeout";
	struct sl_otlp_resource res = {"svc", NULL, 0};
	struct sl_trace_record *list[] = {&r};
	char *out;
	size_t len;
	sl_otlp_encode(SL_OTEL_HTTP_JSON, &res, list, 1, &out, &len);
	json_error_t e;
	json_t *doc = json_loadb(out, len, 0, &e);
	ASSERT(doc != NULL);
	json_t *spans = json_object_get(
	    json_array_get(
	        json_object_get(
	            json_array_get(json_object_get(doc, "resourceSpans"), 0),
	            "scopeSpans"),
	        0),
	    "spans");
	ASSERT_EQ(json_array_size(spans), 2);
	json_t *server = json_array_get(spans, 0);
	ASSERT_STR_EQ(json_string_value(json_object_get(server, "traceId")),
	              TRACE_HEX);
	ASSERT_STR_EQ(
	    json_string_value(json_object_get(server, "parentSpanId")),
	    SPAN_HEX);
	ASSERT_STR_EQ(
	    json_string_value(json_object_get(server, "startTimeUnixNano")),
	    "500");
	ASSERT_EQ(json_integer_value(json_object_get(server, "kind")), 2);
	json_t *status = json_object_get(server, "status");
	ASSERT_EQ(json_integer_value(json_object_get(status, "code")), 2);
	ASSERT_STR_EQ(json_string_value(json_object_get(status, "message")),
	              "queue_timeout");
	/* An int attribute's value is a string, as 64-bit ones are. */
	json_t *a;
	size_t i;
	bool found = false;
	json_array_foreach(json_object_get(server, "attributes"), i, a)
	{
		if (strcmp(json_string_value(json_object_get(a, "key")),
		           "http.response.status_code") != 0)
			continue;
		found = true;
		ASSERT_STR_EQ(json_string_value(json_object_get(
		                  json_object_get(a, "value"), "intValue")),
		              "503");
	}
	ASSERT(found);
	json_decref(doc);
	free(out);
}

int main(void)
{
	RUN(test_traceparent_parse);
	RUN(test_traceparent_format);
	RUN(test_ids);
	RUN(test_samplers);
	RUN(test_pairs);
	RUN(test_traces_url);
	RUN(test_copy_text);
	RUN(test_protobuf);
	RUN(test_json);
	return 0;
}

/*
 * otlp.c: finished requests' spans as OTLP, protobuf or JSON (see otlp.h).
 *
 * Both forms are written by one walk over each record (emit_record), which
 * calls the small sink below; the sink writes protobuf fields as they come
 * or builds the JSON document, so that what a span holds is said once.
 */
#include "sluice/ops/otlp.h"

#include "sluice/base/common.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistr.h>

#include "sl_build_config.h"

/* The instrumentation scope every span belongs to: sluice itself. */
#define OTLP_SCOPE_NAME "sluice"

/* OTLP's SpanKind and Status.StatusCode values (trace.proto). */
enum { KIND_INTERNAL = 1, KIND_SERVER = 2, KIND_CLIENT = 3 };
enum { STATUS_UNSET = 0, STATUS_ERROR = 2 };
/*
 * Span.flags: the W3C trace flags in bits 0-7, then whether the next bit
 * is known (0x100) and says the parent is remote (0x200).
 */
#define SPAN_FLAGS_HAS_IS_REMOTE 0x100u
#define SPAN_FLAGS_IS_REMOTE 0x200u

void sl_trace_copy_text(char *dst, size_t cap, const char *text, size_t n)
{
	size_t out = 0, i = 0;
	while (i < n) {
		ucs4_t uc;
		const uint8_t *s = (const uint8_t *)text + i;
		int len = u8_mbtoucr(&uc, s, n - i);
		bool ok = len > 0 && uc >= 0x20 && uc != 0x7f;
		size_t take = ok ? (size_t)len : 1;
		if (out + (ok ? take : 1) >= cap)
			break;
		if (ok)
			memcpy(dst + out, s, take);
		else
			dst[out] = '?';
		out += ok ? take : 1;
		i += take;
	}
	dst[out] = '\0';
}

unsigned sl_trace_record_spans(const struct sl_trace_record *r)
{
	return 1 + (r->span.queued_ns != 0) + (r->span.dispatched_ns != 0);
}

/* ---- protobuf, by hand (see the header for why) ---- */

/* Protobuf's wire types. */
enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

struct pb {
	uint8_t *p;
	size_t len, cap;
};

static void pb_need(struct pb *b, size_t n)
{
	if (b->len + n <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + n)
		cap *= 2;
	b->p = sl_xrealloc(b->p, cap);
	b->cap = cap;
}

static unsigned varint_len(uint64_t v)
{
	unsigned n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static void put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p = (uint8_t)v;
}

static void pb_varint(struct pb *b, uint64_t v)
{
	pb_need(b, 10);
	put_varint(b->p + b->len, v);
	b->len += varint_len(v);
}

static void pb_tag(struct pb *b, unsigned field, unsigned wire)
{
	pb_varint(b, (uint64_t)field << 3 | wire);
}

static void pb_bytes(struct pb *b, unsigned field, const void *data, size_t n)
{
	pb_tag(b, field, WIRE_LEN);
	pb_varint(b, n);
	pb_need(b, n);
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void pb_string(struct pb *b, unsigned field, const char *s)
{
	pb_bytes(b, field, s, strlen(s));
}

static void pb_fixed64(struct pb *b, unsigned field, uint64_t v)
{
	pb_tag(b, field, WIRE_FIXED64);
	pb_need(b, 8);
	for (int i = 0; i < 8; i++)
		b->p[b->len++] = (uint8_t)(v >> (8 * i));
}

static void pb_fixed32(struct pb *b, unsigned field, uint32_t v)
{
	pb_tag(b, field, WIRE_FIXED32);
	pb_need(b, 4);
	for (int i = 0; i < 4; i++)
		b->p[b->len++] = (uint8_t)(v >> (8 * i));
}

/*
 * A nested message: its tag, then one byte kept for its length, which
 * pb_close writes once the message is done, moving the message up when
 * the length needs more bytes than one (a message of 128 bytes or more).
 * Returns where the message starts.
 */
static size_t pb_open(struct pb *b, unsigned field)
{
	pb_tag(b, field, WIRE_LEN);
	pb_need(b, 1);
	b->p[b->len++] = 0;
	return b->len;
}

static void pb_close(struct pb *b, size_t at)
{
	size_t n = b->len - at;
	unsigned extra = varint_len(n) - 1;
	if (extra) {
		pb_need(b, extra);
		memmove(b->p + at + extra, b->p + at, n);
		b->len += extra;
	}
	put_varint(b->p + at - 1, n);
}

/* ---- the sink: protobuf fields, or the JSON document ---- */

struct sink {
	bool json;
	struct pb pb;
	size_t span_at; /* protobuf: where the open span starts */
	/* JSON: the spans' array, and the open span's parts */
	json_t *spans, *span, *attrs, *events;
};

/* A hex id, as OTLP/JSON writes ids. */
static json_t *hex_id(const uint8_t *id, size_t n)
{
	char text[2 * SL_TRACE_ID_BYTES + 1];
	sl_trace_hex(text, id, n);
	return json_string(text);
}

/* A 64-bit integer as proto3's JSON mapping writes one: a string. */
static json_t *int64_text(int64_t v)
{
	char text[24];
	snprintf(text, sizeof(text), "%lld", (long long)v);
	return json_string(text);
}

static json_t *u64_text(uint64_t v)
{
	char text[24];
	snprintf(text, sizeof(text), "%llu", (unsigned long long)v);
	return json_string(text);
}

struct span_head {
	const uint8_t *trace_id, *span_id, *parent_id; /* parent: NULL */
	const char *trace_state;                       /* NULL: none */
	const char *name;
	int kind;
	uint64_t start_ns, end_ns;
	uint32_t flags;
};

static void span_begin(struct sink *s, const struct span_head *h)
{
	if (s->json) {
		s->span = json_object();
		json_object_set_new(s->span, "traceId",
		                    hex_id(h->trace_id, SL_TRACE_ID_BYTES));
		json_object_set_new(s->span, "spanId",
		                    hex_id(h->span_id, SL_SPAN_ID_BYTES));
		if (h->trace_state)
			json_object_set_new(s->span, "traceState",
			                    json_string(h->trace_state));
		if (h->parent_id)
			json_object_set_new(
			    s->span, "parentSpanId",
			    hex_id(h->parent_id, SL_SPAN_ID_BYTES));
		json_object_set_new(s->span, "flags",
		                    json_integer((json_int_t)h->flags));
		json_object_set_new(s->span, "name", json_string(h->name));
		json_object_set_new(s->span, "kind", json_integer(h->kind));
		json_object_set_new(s->span, "startTimeUnixNano",
		                    u64_text(h->start_ns));
		json_object_set_new(s->span, "endTimeUnixNano",
		                    u64_text(h->end_ns));
		s->attrs = json_array();
		s->events = json_array();
		return;
	}
	/* ScopeSpans.spans = 2; the Span's own fields by number. */
	s->span_at = pb_open(&s->pb, 2);
	pb_bytes(&s->pb, 1, h->trace_id, SL_TRACE_ID_BYTES);
	pb_bytes(&s->pb, 2, h->span_id, SL_SPAN_ID_BYTES);
	if (h->trace_state)
		pb_string(&s->pb, 3, h->trace_state);
	if (h->parent_id)
		pb_bytes(&s->pb, 4, h->parent_id, SL_SPAN_ID_BYTES);
	pb_string(&s->pb, 5, h->name);
	pb_tag(&s->pb, 6, WIRE_VARINT);
	pb_varint(&s->pb, (uint64_t)h->kind);
	pb_fixed64(&s->pb, 7, h->start_ns);
	pb_fixed64(&s->pb, 8, h->end_ns);
	pb_fixed32(&s->pb, 16, h->flags);
}

/* A KeyValue's start (Span.attributes = 9), or the JSON pair's. */
static size_t pb_key(struct sink *s, unsigned field, const char *key)
{
	size_t at = pb_open(&s->pb, field);
	pb_string(&s->pb, 1, key);
	return at;
}

static void json_attr(json_t *attrs, const char *key, json_t *value)
{
	json_array_append_new(
	    attrs, json_pack("{s:s, s:o}", "key", key, "value", value));
}

static void attr_str(struct sink *s, const char *key, const char *value)
{
	if (s->json) {
		json_attr(s->attrs, key,
		          json_pack("{s:s}", "stringValue", value));
		return;
	}
	size_t kv = pb_key(s, 9, key);
	size_t any = pb_open(&s->pb, 2);
	pb_string(&s->pb, 1, value); /* AnyValue.string_value */
	pb_close(&s->pb, any);
	pb_close(&s->pb, kv);
}

static void attr_int(struct sink *s, const char *key, int64_t value)
{
	if (s->json) {
		json_t *v = json_object();
		json_object_set_new(v, "intValue", int64_text(value));
		json_attr(s->attrs, key, v);
		return;
	}
	size_t kv = pb_key(s, 9, key);
	size_t any = pb_open(&s->pb, 2);
	pb_tag(&s->pb, 3, WIRE_VARINT); /* AnyValue.int_value */
	pb_varint(&s->pb, (uint64_t)value);
	pb_close(&s->pb, any);
	pb_close(&s->pb, kv);
}

static void attr_strs(struct sink *s, const char *key,
                      const char (*values)[SL_TRACE_REASON_MAX + 1], unsigned n)
{
	if (s->json) {
		json_t *list = json_array();
		for (unsigned i = 0; i < n; i++)
			json_array_append_new(
			    list, json_pack("{s:s}", "stringValue", values[i]));
		json_attr(s->attrs, key,
		          json_pack("{s:{s:o}}", "arrayValue", "values", list));
		return;
	}
	size_t kv = pb_key(s, 9, key);
	size_t any = pb_open(&s->pb, 2);
	size_t array = pb_open(&s->pb, 5); /* AnyValue.array_value */
	for (unsigned i = 0; i < n; i++) {
		size_t v = pb_open(&s->pb, 1); /* ArrayValue.values */
		pb_string(&s->pb, 1, values[i]);
		pb_close(&s->pb, v);
	}
	pb_close(&s->pb, array);
	pb_close(&s->pb, any);
	pb_close(&s->pb, kv);
}

static void span_event(struct sink *s, const char *name, uint64_t time_ns)
{
	if (s->json) {
		json_t *e = json_object();
		json_object_set_new(e, "timeUnixNano", u64_text(time_ns));
		json_object_set_new(e, "name", json_string(name));
		json_array_append_new(s->events, e);
		return;
	}
	size_t at = pb_open(&s->pb, 11); /* Span.events */
	pb_fixed64(&s->pb, 1, time_ns);
	pb_string(&s->pb, 2, name);
	pb_close(&s->pb, at);
}

static void span_error(struct sink *s, const char *message)
{
	if (s->json) {
		json_object_set_new(s->span, "status",
		                    json_pack("{s:i, s:s}", "code",
		                              STATUS_ERROR, "message",
		                              message));
		return;
	}
	size_t at = pb_open(&s->pb, 15); /* Span.status */
	pb_string(&s->pb, 2, message);
	pb_tag(&s->pb, 3, WIRE_VARINT);
	pb_varint(&s->pb, STATUS_ERROR);
	pb_close(&s->pb, at);
}

static void span_end(struct sink *s)
{
	if (s->json) {
		json_object_set_new(s->span, "attributes", s->attrs);
		if (json_array_size(s->events))
			json_object_set_new(s->span, "events", s->events);
		else
			json_decref(s->events);
		json_array_append_new(s->spans, s->span);
		s->span = s->attrs = s->events = NULL;
		return;
	}
	pb_close(&s->pb, s->span_at);
}

/* ---- what a record's spans say ---- */

/* "http://host:port/..." into host and port (80 or 443 when not given). */
static void split_url(const char *url, char *host, size_t size, long *port)
{
	bool tls = strncmp(url, "https://", 8) == 0;
	const char *p = strstr(url, "://");
	p = p ? p + 3 : url;
	const char *at = strpbrk(p, "@/");
	if (at && *at == '@')
		p = at + 1;
	const char *end;
	if (*p == '[') {
		p++;
		end = strchr(p, ']');
		if (!end)
			end = p + strlen(p);
	} else {
		end = p + strcspn(p, ":/");
	}
	snprintf(host, size, "%.*s", (int)(end - p), p);
	const char *colon = *end == ']' ? end + 1 : end;
	*port = *colon == ':' ? strtol(colon + 1, NULL, 10) : tls ? 443 : 80;
}

static void emit_server(struct sink *s, const struct sl_trace_record *r)
{
	const struct sl_trace_span *sp = &r->span;
	char name[128];
	if (sp->route)
		snprintf(name, sizeof(name), "%s %s", r->method, sp->route);
	else
		snprintf(name, sizeof(name), "%s", r->method);
	struct span_head h = {
	    .trace_id = sp->trace_id,
	    .span_id = sp->span_id,
	    .parent_id = sp->has_parent ? sp->parent_id : NULL,
	    .trace_state = r->trace_state,
	    .name = name,
	    .kind = KIND_SERVER,
	    .start_ns = r->start_ns,
	    .end_ns = r->end_ns,
	    .flags = SL_TRACE_FLAG_SAMPLED | SPAN_FLAGS_HAS_IS_REMOTE |
	             (sp->has_parent ? SPAN_FLAGS_IS_REMOTE : 0),
	};
	span_begin(s, &h);
	attr_str(s, "http.request.method", r->method);
	if (sp->route)
		attr_str(s, "http.route", sp->route);
	attr_int(s, "http.response.status_code", r->status);
	if (sp->operation) {
		attr_str(s, "gen_ai.operation.name", sp->operation);
		if (sp->request_model[0])
			attr_str(s, "gen_ai.request.model", sp->request_model);
		if (sp->response_model[0])
			attr_str(s, "gen_ai.response.model",
			         sp->response_model);
		if (sp->max_tokens >= 0)
			attr_int(s, "gen_ai.request.max_tokens",
			         sp->max_tokens);
		if (r->input_tokens >= 0)
			attr_int(s, "gen_ai.usage.input_tokens",
			         r->input_tokens);
		if (r->output_tokens >= 0)
			attr_int(s, "gen_ai.usage.output_tokens",
			         r->output_tokens);
		if (sp->n_reasons)
			attr_strs(s, "gen_ai.response.finish_reasons",
			          sp->finish_reasons, sp->n_reasons);
	}
	if (r->request_id[0])
		attr_str(s, "sluice.request_id", r->request_id);
	if (r->priority)
		attr_str(s, "sluice.priority", r->priority);
	if (r->queue_ms >= 0)
		attr_int(s, "sluice.queue_ms", r->queue_ms);
	if (r->batch_size)
		attr_int(s, "sluice.batch_size", r->batch_size);
	if (r->tenant)
		attr_str(s, "sluice.tenant", r->tenant);
	if (r->outcome)
		attr_str(s, "sluice.outcome", r->outcome);
	if (r->reason)
		attr_str(s, "sluice.reject_reason", r->reason);
	if (sp->first_token_ns)
		span_event(s, "sluice.first_token", sp->first_token_ns);
	/* HTTP's rule for a server: only 5xx are its errors. */
	if (r->status >= 500) {
		char code[16];
		snprintf(code, sizeof(code), "%d", r->status);
		attr_str(s, "error.type", code);
		span_error(s, r->reason ? r->reason : "");
	}
	span_end(s);
}

static void emit_queue(struct sink *s, const struct sl_trace_record *r)
{
	const struct sl_trace_span *sp = &r->span;
	struct span_head h = {
	    .trace_id = sp->trace_id,
	    .span_id = sp->queue_id,
	    .parent_id = sp->span_id,
	    .name = "sluice.queue",
	    .kind = KIND_INTERNAL,
	    .start_ns = sp->queued_ns,
	    .end_ns = sp->dispatched_ns ? sp->dispatched_ns : r->end_ns,
	    .flags = SL_TRACE_FLAG_SAMPLED | SPAN_FLAGS_HAS_IS_REMOTE,
	};
	span_begin(s, &h);
	if (r->priority)
		attr_str(s, "sluice.priority", r->priority);
	if (r->batch_size)
		attr_int(s, "sluice.batch_size", r->batch_size);
	/* Refused from the queue: why (a timeout, a displacement, a drain). */
	if (!sp->dispatched_ns && r->reason)
		attr_str(s, "sluice.reject_reason", r->reason);
	span_end(s);
}

static void emit_upstream(struct sink *s, const struct sl_trace_record *r)
{
	const struct sl_trace_span *sp = &r->span;
	char name[SL_TRACE_MODEL_MAX + 64];
	const char *method = sp->upstream_method ? sp->upstream_method : "";
	/* GenAI's client span name, else HTTP's. */
	if (sp->operation && sp->request_model[0])
		snprintf(name, sizeof(name), "%s %s", sp->operation,
		         sp->request_model);
	else
		snprintf(name, sizeof(name), "%s", method);
	struct span_head h = {
	    .trace_id = sp->trace_id,
	    .span_id = sp->upstream_id,
	    .parent_id = sp->span_id,
	    .name = name,
	    .kind = KIND_CLIENT,
	    .start_ns = sp->dispatched_ns,
	    .end_ns = sp->upstream_end_ns ? sp->upstream_end_ns : r->end_ns,
	    .flags = SL_TRACE_FLAG_SAMPLED | SPAN_FLAGS_HAS_IS_REMOTE,
	};
	span_begin(s, &h);
	attr_str(s, "http.request.method", method);
	if (r->upstream[0]) {
		char host[96];
		long port;
		split_url(r->upstream, host, sizeof(host), &port);
		attr_str(s, "server.address", host);
		attr_int(s, "server.port", port);
	}
	if (sp->upstream_status)
		attr_int(s, "http.response.status_code", sp->upstream_status);
	if (sp->operation) {
		attr_str(s, "gen_ai.operation.name", sp->operation);
		if (sp->request_model[0])
			attr_str(s, "gen_ai.request.model", sp->request_model);
		if (sp->response_model[0])
			attr_str(s, "gen_ai.response.model",
			         sp->response_model);
	}
	if (sp->attempts > 1)
		attr_int(s, "sluice.attempts", sp->attempts);
	/* HTTP's rule for a client: 4xx and 5xx are errors, as is silence. */
	bool cancelled = r->outcome && strcmp(r->outcome, "cancelled") == 0;
	if (sp->upstream_status >= 400) {
		char code[24];
		snprintf(code, sizeof(code), "%ld", sp->upstream_status);
		attr_str(s, "error.type", code);
		span_error(s, "");
	} else if (!sp->upstream_status && !cancelled) {
		attr_str(s, "error.type", "no_answer");
		span_error(s, "no answer from the upstream");
	}
	span_end(s);
}

static void emit_record(struct sink *s, const struct sl_trace_record *r)
{
	emit_server(s, r);
	if (r->span.queued_ns)
		emit_queue(s, r);
	if (r->span.dispatched_ns)
		emit_upstream(s, r);
}

/* ---- the request around them ---- */

static json_t *json_resource(const struct sl_otlp_resource *res)
{
	json_t *attrs = json_array();
	json_attr(attrs, "service.name",
	          json_pack("{s:s}", "stringValue", res->service_name));
	for (unsigned i = 0; i < res->n_attributes; i++)
		if (strcmp(res->attributes[i].key, "service.name") != 0)
			json_attr(attrs, res->attributes[i].key,
			          json_pack("{s:s}", "stringValue",
			                    res->attributes[i].value));
	return json_pack("{s:o}", "attributes", attrs);
}

static void pb_resource_attr(struct pb *b, const char *key, const char *value)
{
	size_t kv = pb_open(b, 1); /* Resource.attributes */
	pb_string(b, 1, key);
	size_t any = pb_open(b, 2);
	pb_string(b, 1, value);
	pb_close(b, any);
	pb_close(b, kv);
}

void sl_otlp_encode(enum sl_otel_protocol protocol,
                    const struct sl_otlp_resource *resource,
                    struct sl_trace_record *const *records, unsigned n,
                    char **out, size_t *len)
{
	struct sink s = {.json = protocol == SL_OTEL_HTTP_JSON};
	if (s.json) {
		s.spans = json_array();
		for (unsigned i = 0; i < n; i++)
			emit_record(&s, records[i]);
		json_t *doc = json_pack(
		    "{s:[{s:o, s:[{s:{s:s, s:s}, s:o}]}]}", "resourceSpans",
		    "resource", json_resource(resource), "scopeSpans", "scope",
		    "name", OTLP_SCOPE_NAME, "version", SL_VERSION, "spans",
		    s.spans);
		char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
		json_decref(doc);
		if (!text)
			abort(); /* only when memory is gone: sl_xmalloc's rule
			          */
		*out = text;
		*len = strlen(text);
		return;
	}
	/* ExportTraceServiceRequest.resource_spans = 1 */
	size_t rs = pb_open(&s.pb, 1);
	size_t r = pb_open(&s.pb, 1); /* ResourceSpans.resource */
	pb_resource_attr(&s.pb, "service.name", resource->service_name);
	for (unsigned i = 0; i < resource->n_attributes; i++)
		if (strcmp(resource->attributes[i].key, "service.name") != 0)
			pb_resource_attr(&s.pb, resource->attributes[i].key,
			                 resource->attributes[i].value);
	pb_close(&s.pb, r);
	size_t ss = pb_open(&s.pb, 2);    /* ResourceSpans.scope_spans */
	size_t scope = pb_open(&s.pb, 1); /* ScopeSpans.scope */
	pb_string(&s.pb, 1, OTLP_SCOPE_NAME);
	pb_string(&s.pb, 2, SL_VERSION);
	pb_close(&s.pb, scope);
	for (unsigned i = 0; i < n; i++)
		emit_record(&s, records[i]);
	pb_close(&s.pb, ss);
	pb_close(&s.pb, rs);
	*out = (char *)s.pb.p;
	*len = s.pb.len;
}

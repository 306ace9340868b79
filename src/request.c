/* request.c: a client's JSON body, checked and rewritten for the upstream. */
#include "sluice/request.h"

#include "sluice/common.h"
#include "sluice/native_api.h"
#include "sluice/sched.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SL_PRINTF(2, 3)
static int refuse(struct sl_request *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->error, sizeof(r->error), fmt, ap);
	va_end(ap);
	r->status = 400;
	return SL_EINVAL;
}

/*
 * Parses the JSON body and checks the fields sluice itself relies on. A
 * string may hold \u0000 (JSON allows it; json_dumps writes it back the
 * same way), so the parser is told to accept NUL.
 */
static json_t *parse_body(struct sl_request *r, const char *body, size_t len)
{
	json_error_t jerr;
	json_t *doc = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
	if (!doc) {
		refuse(r,
		       "malformed JSON in the request body at line %d, column "
		       "%d (byte %d): %s",
		       jerr.line, jerr.column, jerr.position, jerr.text);
		return NULL;
	}
	json_t *v;
	int rc = 0;
	if (!json_is_object(doc))
		rc = refuse(r, "the request body must be a JSON object");
	else if ((v = json_object_get(doc, "stream")) && !json_is_boolean(v))
		rc = refuse(r, "\"stream\" must be true or false");
	else if ((v = json_object_get(doc, "n_discard")) &&
	         (!json_is_integer(v) || json_integer_value(v) < 0))
		/* A negative n_discard overflowed llama-server's heap once. */
		rc = refuse(r, "\"n_discard\" must be a non-negative integer");
	if (rc != 0) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

/* Refuses a priority text, quoting at most SL_REQUEST_QUOTE_MAX bytes. */
static int bad_priority(struct sl_request *r, const char *where,
                        const char *text, size_t len)
{
	size_t shown = SL_MIN(len, (size_t)SL_REQUEST_QUOTE_MAX);
	/* Cut between characters: the message must stay valid UTF-8. */
	while (shown > 0 && shown < len && (text[shown] & 0xc0) == 0x80)
		shown--;
	return refuse(r,
	              "%s: expected urgent, normal, batch or a number from %g "
	              "to %g, got \"%.*s\"%s",
	              where, SL_PRIORITY_MIN, SL_PRIORITY_MAX, (int)shown, text,
	              len > shown ? "..." : "");
}

/*
 * The priority: X-Priority, else the body's "priority" (removed: it is
 * sluice's, not llama-server's), else normal. The whole value counts: a
 * string is parsed in full (one holding a NUL is refused, not cut short),
 * and a JSON number is taken as the number it is.
 */
static int take_priority(struct sl_request *r, json_t *doc, const char *header)
{
	json_t *field = json_object_get(doc, "priority");
	if (header) {
		if (sl_priority_parse(header, &r->priority) != 0)
			return bad_priority(r, "X-Priority", header,
			                    strlen(header));
	} else if (json_is_string(field)) {
		const char *text = json_string_value(field);
		size_t len = json_string_length(field);
		if (strlen(text) != len ||
		    sl_priority_parse(text, &r->priority) != 0)
			return bad_priority(r, "\"priority\"", text, len);
	} else if (json_is_number(field)) {
		double v = json_number_value(field);
		if (!isfinite(v) || v < SL_PRIORITY_MIN || v > SL_PRIORITY_MAX)
			return refuse(
			    r,
			    "\"priority\": expected urgent, normal, "
			    "batch or a number from %g to %g, got %.17g",
			    SL_PRIORITY_MIN, SL_PRIORITY_MAX, v);
		r->priority = v;
	} else if (field) {
		return refuse(r, "\"priority\" must be urgent, normal, batch "
		                 "or a number");
	}
	json_object_del(doc, "priority");
	return 0;
}

/*
 * A generation the client wants as one answer is requested as a stream (see
 * assemble.h for why); OpenAI endpoints also need the usage event then.
 */
static void ask_for_stream(struct sl_request *r, const struct sl_endpoint *ep,
                           json_t *doc)
{
	r->assemble = true;
	r->assemble_kind = ep->stream_end == SL_END_STOP ? SL_ASSEMBLE_NATIVE
	                   : strstr(ep->path, "chat")    ? SL_ASSEMBLE_CHAT
	                                                 : SL_ASSEMBLE_TEXT;
	r->return_tokens = json_is_true(json_object_get(doc, "return_tokens"));
	json_object_set_new(doc, "stream", json_true());
	if (r->assemble_kind != SL_ASSEMBLE_NATIVE)
		json_object_set_new(doc, "stream_options",
		                    json_pack("{s:b}", "include_usage", 1));
}

/*
 * The body llama-server gets. Relayed bodies go as the client wrote them
 * unless sluice changed them; the native APIs are mapped onto /completion.
 */
static int build_body(struct sl_request *r, const struct sl_endpoint *ep,
                      json_t *doc, const struct sl_request_options *opts)
{
	json_t *out = doc;
	if (ep->api != SL_API_RELAY) {
		char err[256];
		unsigned cap = opts->max_tokens_cap;
		out = ep->api == SL_API_GENERATE
		          ? sl_generate_body(doc, cap, err, sizeof(err))
		          : sl_infer_body(doc, cap, err, sizeof(err));
		if (!out)
			return refuse(r, "%s", err);
		r->stream = ep->api == SL_API_GENERATE &&
		            json_is_true(json_object_get(doc, "stream"));
		if (!r->stream) {
			r->assemble = true;
			r->assemble_kind = SL_ASSEMBLE_NATIVE;
		}
	} else {
		r->stream = json_is_true(json_object_get(doc, "stream"));
		if (ep->stream_end != SL_END_NONE && !r->stream &&
		    opts->stream_upstream)
			ask_for_stream(r, ep, doc);
	}
	r->body = json_dumps(out, JSON_COMPACT);
	if (out != doc)
		json_decref(out);
	/* json_dumps fails only when memory is gone: sl_xmalloc's rule. */
	if (!r->body)
		abort();
	r->body_len = strlen(r->body);
	return 0;
}

int sl_request_validate(struct sl_request *r, const struct sl_endpoint *ep,
                        const char *priority_header, const char *body,
                        size_t len, const struct sl_request_options *opts)
{
	memset(r, 0, sizeof(*r));
	r->priority = SL_PRIORITY_NORMAL;
	if (!ep->json_body)
		return 0;
	json_t *doc = parse_body(r, body, len);
	if (!doc)
		return SL_EINVAL;
	int rc = take_priority(r, doc, priority_header);
	if (rc == 0)
		rc = build_body(r, ep, doc, opts);
	json_decref(doc);
	return rc;
}

void sl_request_free(struct sl_request *r)
{
	free(r->body);
	r->body = NULL;
	r->body_len = 0;
}

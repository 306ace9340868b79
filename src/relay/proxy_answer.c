/*
 * proxy_answer.c: answering the client.
 *
 * What goes back to the client beyond relayed bytes: errors in the
 * endpoint's own shape (a JSON error, or an error event in a stream that
 * has begun), the end of a stream, an answer assembled from upstream
 * events (/generate's and /infer's rebuilt, or a plain answer that was
 * asked for as a stream), and the token counts of a relayed plain answer,
 * read from the part of it kept for that.
 */
#include "proxy_impl.h"

#include "sluice/base/log.h"
#include "sluice/json/native_api.h"
#include "sluice/ops/stats.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The totals the access log and metrics want, while req is still valid. */
void exchange_note_totals(struct exchange *x)
{
	struct sl_request_info *info = &x->req->info;
	if (x->tokens_final > x->tokens_seen) {
		sl_stats_tokens(x->relay->stats,
		                x->tokens_final - x->tokens_seen,
		                uv_now(x->relay->loop));
		x->tokens_seen = x->tokens_final;
	}
	info->tokens = (unsigned)x->tokens_seen;
	exchange_slo_note(x);
	info->prompt_tokens = (unsigned)exchange_prompt_tokens(x);
	exchange_trace_totals(x);
}

/* The client side is over: no more calls to the HTTP server about it. */
void exchange_client_done(struct exchange *x)
{
	x->req = NULL;
}

void exchange_respond_error(struct exchange *x, int status, const char *type,
                            const char *message)
{
	exchange_note_totals(x);
	if (!x->req->info.outcome)
		x->req->info.outcome = status >= 500 ? "failed" : "rejected";
	sl_http_respond_error(x->req, status, type, exchange_own_headers(x),
	                      "%s", message);
	exchange_client_done(x);
}

/* One event, one chunk; `name` NULL for an event without a name. */
static void write_named_event(struct exchange *x, const char *name, json_t *doc)
{
	char *text = json_dumps(doc, JSON_COMPACT);
	char *event = sl_xasprintf("%s%s%sdata: %s\n\n", name ? "event: " : "",
	                           name ? name : "", name ? "\n" : "", text);
	sl_http_stream_write(x->req, event, strlen(event));
	free(event);
	free(text);
}

void exchange_write_event(struct exchange *x, json_t *doc)
{
	write_named_event(x, NULL, doc);
}

/*
 * An SSE event with an OpenAI-shaped error, then the end of the stream. The
 * streams of typed events (Anthropic's, the Responses API's) get it as an
 * "error" event of their own kind, which their clients read.
 */
static void end_stream_with_error(struct exchange *x, int code,
                                  const char *message)
{
	json_t *j = json_pack(
	    "{s:{s:s, s:s, s:i}}", "error", "message", message, "type",
	    code == 503 ? "unavailable_error" : "server_error", "code", code);
	bool typed = x->ep->stream_end == SL_END_EOF;
	if (typed)
		json_object_set_new(j, "type", json_string("error"));
	write_named_event(x, typed ? "error" : NULL, j);
	json_decref(j);
	exchange_note_totals(x);
	x->req->info.outcome = "failed";
	sl_http_stream_end(x->req);
	exchange_client_done(x);
}

/* Whatever response the client is owed, for a stream sluice gives up on. */
void exchange_fail(struct exchange *x, int status, const char *message)
{
	x->gave_up = true;
	/* What came before the failure, the client gets before it. */
	exchange_relay_flush(x);
	if (!x->req)
		return;
	if (!x->head_sent)
		exchange_respond_error(x, status,
		                       status == 504   ? "timeout_error"
		                       : status == 503 ? "unavailable_error"
		                                       : "server_error",
		                       message);
	else if (x->mode == MODE_SSE)
		end_stream_with_error(x, status, message);
	else {
		/* A plain body cut short can only be shown by closing. */
		exchange_note_totals(x);
		x->req->info.outcome = "failed";
		sl_http_abort(x->req);
		exchange_client_done(x);
	}
}

static double ms_since(uint64_t start_ns)
{
	return (double)(sl_now_ns() - start_ns) / 1e6;
}

/*
 * /generate's totals, for its answer and its last event. `text` is a JSON
 * string (borrowed), or NULL for ""; kept as a JSON value, not a C string,
 * so that a NUL in it does not cut it short.
 */
static json_t *generate_totals(struct exchange *x, json_t *text, json_t *final)
{
	return json_pack("{s:s, s:o, s:I, s:s, s:I, s:I, s:i}", "id", x->id,
	                 "text", text ? json_incref(text) : json_string(""),
	                 "tokens", (json_int_t)x->tokens_seen, "finish_reason",
	                 sl_finish_reason(final), "queue_ms",
	                 (json_int_t)x->queue_ms, "latency_ms",
	                 (json_int_t)ms_since(x->req->start_ns), "batch_size",
	                 (int)x->batch_size);
}

static void respond_json(struct exchange *x, int status, json_t *doc)
{
	char *body = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY);
	sl_http_respond(x->req, status, SL_HTTP_JSON, exchange_own_headers(x),
	                body, strlen(body));
	free(body);
	exchange_client_done(x);
}

/*
 * The assembled answer, in the shape the client's API promises: relayed
 * APIs get the assembler's bytes unchanged; /generate and /infer take the
 * content and totals from it, parsed once here.
 */
void exchange_finish_answer(struct exchange *x)
{
	x->ended = true;
	size_t n;
	char *body = sl_assembler_result(x->answer, &n);
	if (!body) {
		exchange_respond_error(
		    x, 502, "server_error",
		    "upstream ended its answer without any content");
		return;
	}
	exchange_note_totals(x);
	int status = sl_assembler_status(x->answer);
	/* An upstream error is relayed as written, whatever the API. */
	if (status != 200 || x->ep->api == SL_API_RELAY) {
		sl_http_respond(x->req, status, SL_HTTP_JSON,
		                exchange_own_headers(x), body, n);
		free(body);
		exchange_client_done(x);
		return;
	}
	json_t *doc = json_loadb(body, n, EVENT_JSON_FLAGS, NULL);
	free(body);
	json_t *text = json_object_get(doc, "content");
	if (!json_is_string(text))
		text = NULL;
	json_t *out = NULL;
	if (x->ep->api == SL_API_GENERATE)
		out = generate_totals(x, text, doc);
	else
		out = json_pack("{s:o, s:s}", "response",
		                text ? json_incref(text) : json_string(""),
		                "id", x->id);
	respond_json(x, 200, out ? out : doc);
	json_decref(out);
	json_decref(doc);
}

/* The stream ended as it should: its end goes to the client. */
void exchange_end_ok(struct exchange *x)
{
	x->ended = true;
	if (x->assemble) {
		exchange_finish_answer(x);
		return;
	}
	if (x->ep->api == SL_API_GENERATE) {
		json_t *totals = generate_totals(x, NULL, x->final);
		exchange_write_event(x, totals);
		json_decref(totals);
	}
	exchange_note_totals(x);
	/* The events held back and the body's end, in one write. */
	sl_http_stream_end_with(x->req, x->relayed, x->relay_n);
	x->relay_n = 0;
	exchange_client_done(x);
}

/* A relayed plain answer's bytes, kept to be counted at its end. */
void exchange_keep_answer(struct exchange *x, const char *data, size_t len)
{
	if (!x->keep || x->kept.over)
		return;
	if (x->kept.prefix)
		len = SL_MIN(len, SL_PROXY_USAGE_PREFIX_MAX - x->kept.len);
	if (len == 0)
		return;
	if (len > SL_PROXY_ANSWER_KEEP_MAX - x->kept.len) {
		sl_debug("%s: answer past %u bytes: its tokens go uncounted",
		         x->id, SL_PROXY_ANSWER_KEEP_MAX);
		x->kept.over = true;
		free(x->kept.p);
		x->kept.p = NULL;
		x->kept.len = x->kept.cap = 0;
		return;
	}
	size_t need = x->kept.len + len;
	if (need > x->kept.cap) {
		size_t cap =
		    SL_MAX(need, SL_MAX(x->kept.cap * 2,
		                        (size_t)SL_PROXY_ANSWER_KEEP_MIN));
		x->kept.cap = SL_MIN(cap, (size_t)SL_PROXY_ANSWER_KEEP_MAX);
		x->kept.p = sl_xrealloc(x->kept.p, x->kept.cap);
	}
	memcpy(x->kept.p + x->kept.len, data, len);
	x->kept.len = need;
}

/*
 * ---- Counting every output ----
 *
 * A request may ask for several outputs (request.h: a prompt array's
 * prompts, n of each), which llama-server generates as it would requests
 * of their own, and a key's tpm is charged for all of them. What
 * llama-server 0.7.0 says of their counts (measured on the demo model):
 *   - native /completion: each output ends with its own final event
 *     (an "index" apiece: prompt * n + choice), tokens_predicted and
 *     tokens_evaluated; a plain answer is a JSON array of those finals
 *     (one object when there is one output);
 *   - /v1/completions streams: each choice's finish chunk carries a
 *     usage of its own; chat streams, with include_usage, a chunk of
 *     usage (no choices) after each choice's finish, else timings on the
 *     finish (on every chunk with timings_per_token) and no usage;
 *   - the Responses API: each output a response.completed with its
 *     usage; a plain answer is a JSON array of responses;
 *   - a plain OpenAI answer with several choices carries one usage, the
 *     first choice's (its prompt the first prompt's), whatever n or the
 *     prompts: the others' counts are nowhere in it;
 *   - every output says its prompt's count, but a prompt is evaluated
 *     once for its n outputs (llama-server's prompt_tokens_total grows by
 *     it once).
 * So an event with an output's count (a native final, a usage) ends that
 * output: the counts add up, and the prompt counts, n for each prompt,
 * are divided by n. A plain OpenAI answer's other choices are charged as
 * its usage's: exact when all ran to the same bound, else an estimate.
 */

uint64_t exchange_prompt_tokens(const struct exchange *x)
{
	if (!x->prompt_summed)
		return x->prompt_last;
	uint64_t n = SL_MAX(x->choices, 1u);
	return (x->prompt_sum + n - 1) / n;
}

/*
 * What an event, or a plain answer, says of the counts, for `times`
 * outputs alike (a plain OpenAI answer's choices).
 */
void exchange_count_event(struct exchange *x, const struct sl_event_facts *f,
                          uint64_t times)
{
	bool native = x->ep->stream_end == SL_END_STOP;
	uint64_t prompt = (uint64_t)SL_MAX(f->prompt_tokens, (int64_t)0);
	if (!(native ? f->final : f->has_count)) {
		if (f->has_prompt)
			x->prompt_last = prompt;
		return;
	}
	int64_t count = native ? f->tokens_predicted : f->count;
	x->tokens_final += (uint64_t)SL_MAX(count, (int64_t)0) * times;
	if (f->has_prompt) {
		x->prompt_sum += prompt * times;
		x->prompt_summed = true;
	}
}

/*
 * The prompt tokens of an answer kept in part (embeddings, rerank): the
 * OpenAI forms' usage, which llama-server writes before the vectors or
 * results. Its native /embedding answer has none, and goes uncounted.
 */
static void count_leading_usage(struct exchange *x)
{
	static const struct sl_jscan_key usage = SL_JSCAN_KEY("usage");
	size_t start, end;
	if (!sl_jscan_leading_member(x->kept.p, x->kept.len, &usage, &start,
	                             &end))
		return;
	struct sl_jscan s;
	if (sl_jscan_parse(&s, x->kept.p + start, end - start,
	                   (unsigned)(end - start) + 1) == 0) {
		long n = sl_jscan_small_uint(
		    &s, sl_jscan_get(&s, 0, "prompt_tokens"));
		if (n > 0)
			x->prompt_last = (uint64_t)n;
	}
	sl_jscan_free(&s);
}

/* The choices of a plain OpenAI answer `s` scanned: 1 for none. */
static uint64_t choices_in(const struct sl_jscan *s)
{
	int choices = sl_jscan_get(s, 0, "choices");
	if (!sl_jscan_is_type(s, choices, JSMN_ARRAY))
		return 1;
	const char *text = sl_jscan_text(s, choices);
	size_t len = sl_jscan_len(s, choices), at = 0, start, end;
	uint64_t n = 0;
	while (sl_jscan_next_element(text, len, &at, &start, &end))
		n++;
	return SL_MAX(n, UINT64_C(1));
}

/*
 * An answer that is an array, one element an output (native answers to
 * several outputs, the Responses API's to n): each element's counts.
 */
static void count_elements(struct exchange *x)
{
	size_t at = 0, start, end;
	while (
	    sl_jscan_next_element(x->kept.p, x->kept.len, &at, &start, &end)) {
		struct sl_jscan s;
		struct sl_event_facts f;
		sl_event_scan_answer(&s, x->kept.p + start, end - start,
		                     exchange_dialect_of(x), &f);
		exchange_count_event(x, &f, 1);
		sl_jscan_free(&s);
	}
}

/*
 * A relayed plain answer's token counts: its usage (OpenAI, Anthropic,
 * Responses) or tokens_predicted and tokens_evaluated (native), read as
 * from a stream's last event, for every output in it (above).
 */
void exchange_count_answer(struct exchange *x)
{
	if (!x->keep || x->kept.over)
		return;
	exchange_trace_answer(x);
	if (x->kept.prefix) {
		count_leading_usage(x);
		return;
	}
	/* JSON's spacing, then what the answer is. */
	size_t first = 0;
	while (first < x->kept.len &&
	       (x->kept.p[first] == ' ' || x->kept.p[first] == '\t' ||
	        x->kept.p[first] == '\r' || x->kept.p[first] == '\n'))
		first++;
	if (first < x->kept.len && x->kept.p[first] == '[') {
		count_elements(x);
		return;
	}
	struct sl_jscan s;
	struct sl_event_facts f;
	enum sl_event_dialect dialect = exchange_dialect_of(x);
	sl_event_scan_answer(&s, x->kept.p, x->kept.len, dialect, &f);
	exchange_count_event(x, &f,
	                     dialect == SL_DIALECT_OPENAI ? choices_in(&s) : 1);
	if (f.has_timings) {
		x->has_timings = true;
		x->timings = f.timings;
	}
	/*
	 * Time to first token: llama-server times the generation from its
	 * first token to the answer (timings.predicted_ms), so the answer's
	 * arrival less that is when the first token came.
	 */
	double predicted_ms;
	int ms =
	    sl_jscan_get(&s, sl_jscan_get(&s, 0, "timings"), "predicted_ms");
	if (x->tokens_final > 0 && sl_jscan_number(&s, ms, &predicted_ms) &&
	    predicted_ms >= 0) {
		double took = (double)(sl_now_ns() - x->req->start_ns) / 1e9;
		double ttft = SL_MAX(took - predicted_ms / 1000, 0.0);
		x->req->info.ttft_ms = (int64_t)(ttft * 1000);
		sl_stats_first_token(x->relay->stats, x->priority, ttft);
		exchange_slo_first_token(x, ttft);
	}
	sl_jscan_free(&s);
}

/*
 * proxy_trace.c: what an exchange tells its request's trace (ops/trace.h).
 *
 * Each function here is called where the exchange learns a fact: its
 * model and bounds as it is checked, its entry into the queue, each
 * dispatch upstream, the transfer's end, the answer's events and totals.
 * Each first asks whether the request is traced and sampled
 * (exchange_trace): with tracing off that is one pointer test, and an
 * unsampled request is only given its traceparent (proxy_transfer.c).
 * Nothing here reads text the relay did not already scan, but for a
 * relayed plain answer's model and finish reasons, read from the answer
 * kept for its usage.
 */
#include "proxy_impl.h"

#include "sluice/ops/trace.h"
#include "sluice/relay/request.h"

#include <string.h>

/* The request's span when it is recorded, else NULL. */
static struct sl_trace_span *recorded(const struct exchange *x)
{
	struct sl_trace_span *sp = exchange_trace(x);
	return sp && sp->sampled ? sp : NULL;
}

/*
 * gen_ai.operation.name of an endpoint, by the GenAI conventions' names;
 * NULL for one that generates nothing (tokenize, props, rerank...).
 */
static const char *operation_of(const struct sl_endpoint *ep)
{
	static const struct {
		const char *path, *operation;
	} ops[] = {
	    {"/v1/chat/completions", "chat"},
	    {"/chat/completions", "chat"},
	    {"/v1/messages", "chat"},
	    {"/v1/responses", "chat"},
	    {"/responses", "chat"},
	    {"/v1/completions", "text_completion"},
	    {"/completion", "text_completion"},
	    {"/completions", "text_completion"},
	    {"/infill", "text_completion"},
	    {"/generate", "text_completion"},
	    {"/infer", "text_completion"},
	    {"/v1/embeddings", "embeddings"},
	    {"/embeddings", "embeddings"},
	    {"/embedding", "embeddings"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(ops); i++)
		if (strcmp(ep->path, ops[i].path) == 0)
			return ops[i].operation;
	return NULL;
}

void exchange_trace_start(struct exchange *x, const struct sl_request *checked,
                          const struct sl_model *m)
{
	struct sl_trace_span *sp = recorded(x);
	if (!sp)
		return;
	sp->operation = operation_of(x->ep);
	/* The name the client asked for, else the model that serves it. */
	const char *name = checked->model ? checked->model : m->name;
	sl_trace_copy_text(sp->request_model, sizeof(sp->request_model), name,
	                   strlen(name));
	sp->max_tokens = checked->max_tokens;
}

void exchange_trace_queued(struct exchange *x)
{
	struct sl_trace_span *sp = recorded(x);
	if (sp && !sp->queued_ns)
		sp->queued_ns = sl_now_ns();
}

void exchange_trace_dispatched(struct exchange *x, const char *method)
{
	struct sl_trace_span *sp = recorded(x);
	if (!sp)
		return;
	/* The first attempt opens the call's span; a retry lengthens it. */
	if (!sp->dispatched_ns)
		sp->dispatched_ns = x->dispatched_ns;
	sp->upstream_method = method;
	sp->attempts++;
}

void exchange_trace_transfer_done(struct exchange *x)
{
	struct sl_trace_span *sp = recorded(x);
	if (!sp)
		return;
	sp->upstream_end_ns = sl_now_ns();
	long status = exchange_upstream_status(x);
	if (status)
		sp->upstream_status = status;
}

void exchange_trace_totals(struct exchange *x)
{
	struct sl_trace_span *sp = recorded(x);
	if (!sp)
		return;
	if (x->first_token_ns && !sp->first_token_ns)
		sp->first_token_ns = x->first_token_ns;
	long status = x->upstream && exchange_transfer_active(x)
	                  ? exchange_upstream_status(x)
	                  : 0;
	if (status)
		sp->upstream_status = status;
}

/* A string's bytes as written, quotes off, into a span's field. */
static void take_string(char *dst, size_t cap, const char *text, size_t start,
                        size_t end)
{
	if (end - start >= 2 && text[start] == '"')
		sl_trace_copy_text(dst, cap, text + start + 1, end - start - 2);
}

static void take_reason(struct sl_trace_span *sp, long index, const char *text,
                        size_t len)
{
	if (index < 0 || index >= SL_TRACE_REASONS_MAX)
		return;
	sl_trace_copy_text(sp->finish_reasons[index],
	                   sizeof(sp->finish_reasons[index]), text, len);
	if ((unsigned)index + 1 > sp->n_reasons)
		sp->n_reasons = (unsigned)index + 1;
}

/* A string member of the object at obj into dst; false when none. */
static bool scan_string(const struct sl_jscan *s, int obj, const char *key,
                        char *dst, size_t cap)
{
	int v = sl_jscan_get(s, obj, key);
	if (!sl_jscan_is_type(s, v, JSMN_STRING))
		return false;
	sl_trace_copy_text(dst, cap, sl_jscan_text(s, v), sl_jscan_len(s, v));
	return true;
}

void exchange_trace_event(struct exchange *x, const struct sl_jscan *s)
{
	struct sl_trace_span *sp = recorded(x);
	if (!sp)
		return;
	/* The model: OpenAI's and native events', Anthropic's, Responses'. */
	if (!scan_string(s, 0, "model", sp->response_model,
	                 sizeof(sp->response_model)) &&
	    !scan_string(s, sl_jscan_get(s, 0, "message"), "model",
	                 sp->response_model, sizeof(sp->response_model)))
		scan_string(s, sl_jscan_get(s, 0, "response"), "model",
		            sp->response_model, sizeof(sp->response_model));
	/* Why each output ended, in the dialect's words. */
	int choices = sl_jscan_get(s, 0, "choices");
	if (sl_jscan_is_type(s, choices, JSMN_ARRAY)) {
		int n = s->tok[choices].size;
		for (int i = 0, c = choices + 1; i < n;
		     i++, c = sl_jscan_skip(s, c)) {
			int r = sl_jscan_get(s, c, "finish_reason");
			if (!sl_jscan_is_type(s, r, JSMN_STRING))
				continue;
			long index =
			    sl_jscan_small_uint(s, sl_jscan_get(s, c, "index"));
			take_reason(sp, index < 0 ? i : index,
			            sl_jscan_text(s, r), sl_jscan_len(s, r));
		}
		return;
	}
	int r = sl_jscan_get(s, 0, "stop_type"); /* native, at its end */
	if (!sl_jscan_is_type(s, r, JSMN_STRING))
		r = sl_jscan_get(s, sl_jscan_get(s, 0, "delta"), "stop_reason");
	if (!sl_jscan_is_type(s, r, JSMN_STRING))
		return;
	long index = sl_jscan_small_uint(s, sl_jscan_get(s, 0, "index"));
	take_reason(sp, index < 0 ? 0 : index, sl_jscan_text(s, r),
	            sl_jscan_len(s, r));
}

void exchange_trace_answer(struct exchange *x)
{
	struct sl_trace_span *sp = recorded(x);
	if (!sp || !x->kept.p)
		return;
	const char *text = x->kept.p;
	size_t len = x->kept.len, start, end;
	static const struct sl_jscan_key model = SL_JSCAN_KEY("model"),
	                                 choices = SL_JSCAN_KEY("choices"),
	                                 finish = SL_JSCAN_KEY("finish_reason"),
	                                 stop_type = SL_JSCAN_KEY("stop_type"),
	                                 stop_reason =
	                                     SL_JSCAN_KEY("stop_reason");
	if (sl_jscan_leading_member(text, len, &model, &start, &end))
		take_string(sp->response_model, sizeof(sp->response_model),
		            text, start, end);
	if (sl_jscan_leading_member(text, len, &choices, &start, &end)) {
		size_t at = 0, e_start, e_end;
		const char *list = text + start;
		for (long i = 0; i < SL_TRACE_REASONS_MAX &&
		                 sl_jscan_next_element(list, end - start, &at,
		                                       &e_start, &e_end);
		     i++) {
			size_t r_start, r_end;
			if (sl_jscan_leading_member(list + e_start,
			                            e_end - e_start, &finish,
			                            &r_start, &r_end) &&
			    r_end - r_start >= 2 &&
			    list[e_start + r_start] == '"')
				take_reason(sp, i, list + e_start + r_start + 1,
				            r_end - r_start - 2);
		}
		return;
	}
	if (sl_jscan_leading_member(text, len, &stop_type, &start, &end) ||
	    sl_jscan_leading_member(text, len, &stop_reason, &start, &end))
		if (end - start >= 2 && text[start] == '"')
			take_reason(sp, 0, text + start + 1, end - start - 2);
}

/*
 * request.c: one exchange with the target, on libsluice's HTTP/1.1
 * client (http.h says why not libcurl). It builds the body of the
 * session's current turn, sends it with the tenant's key, X-Priority,
 * the model and its SLOs (X-SLO-TTFT-Ms, X-SLO-TPOT-Ms), and reads the
 * answer: tokens as they stream, usage and llama-server's timings,
 * sluice's Server-Timing, and a refusal's Retry-After and reason.
 * Everything lands in the request's record; each refusal also in the
 * run's list of them.
 */
#include "engine.h"
#include "http.h"

#include "sluice/base/common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* An error answer's body kept for its reason: sluice's are a few hundred
 * bytes; past this the rest is dropped, not failed on. */
#define ERROR_BODY_MAX (64u * 1024)

static const char *const endpoint_paths[] = {"/v1/chat/completions",
                                             "/v1/completions", "/completion",
                                             "/generate", "/infer"};

static struct record *rec_of(struct session *s)
{
	return &s->e->r->recs[s->x.rec];
}

/* The prompt: the chat history, or for the other endpoints the text. */
static json_t *prompt_of(struct session *s)
{
	const char *text = s->conv->turns[s->turn].text;
	if (s->b->o.endpoint == EP_CHAT) {
		if (!s->history)
			s->history = json_array();
		json_array_append_new(
		    s->history,
		    json_pack("{s:s, s:s}", "role", "user", "content", text));
		return json_incref(s->history);
	}
	const char *before = s->history ? json_string_value(s->history) : "";
	char *joined =
	    sl_xasprintf("%s%s%s", before, *before ? "\n\n" : "", text);
	json_t *p = json_string(joined);
	free(joined);
	json_decref(s->history);
	s->history = json_incref(p);
	return p;
}

static char *request_body(struct session *s, uint64_t seed)
{
	const struct options *o = &s->b->o;
	json_t *prompt = prompt_of(s);
	int max = (int)s->conv->turns[s->turn].output_tokens;
	json_t *j;
	switch (o->endpoint) {
	case EP_CHAT: j = json_pack("{s:o}", "messages", prompt); break;
	case EP_INFER: j = json_pack("{s:o}", "query", prompt); break;
	default: j = json_pack("{s:o}", "prompt", prompt); break;
	}
	if (o->endpoint != EP_INFER) {
		json_object_set_new(j,
		                    o->endpoint == EP_COMPLETION ? "n_predict"
		                                                 : "max_tokens",
		                    json_integer(max));
		json_object_set_new(j, "temperature",
		                    json_real(o->temperature));
		json_object_set_new(j, "stream", json_boolean(o->stream));
		/* Unique per request: llama-server's /slots shows it, so a
		 * left request's slot can be found. */
		json_object_set_new(j, "seed", json_integer((json_int_t)seed));
	}
	if (s->model >= 0)
		json_object_set_new(j, "model",
		                    json_string(o->models[s->model]));
	/* Exact token counts from OpenAI streams come in a usage event. */
	if (o->stream &&
	    (o->endpoint == EP_CHAT || o->endpoint == EP_COMPLETIONS))
		json_object_set_new(j, "stream_options",
		                    json_pack("{s:b}", "include_usage", 1));
	char *body = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return body;
}

/* ---- reading the answer ---- */

static bool nonempty(json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0;
}

static void keep_reply(struct exchange *x, json_t *text)
{
	if (!nonempty(text))
		return;
	size_t len = json_string_length(text);
	/* Past the bound the reply is cut, not holed: nothing more joins. */
	if (x->reply_full || x->reply_len + len > MAX_REPLY) {
		x->reply_full = true;
		return;
	}
	x->reply = sl_xrealloc(x->reply, x->reply_len + len + 1);
	memcpy(x->reply + x->reply_len, json_string_value(text), len);
	x->reply_len += len;
	x->reply[x->reply_len] = '\0';
}

/* An exchange's first room for gaps: a short answer's worth. */
#define GAPS_FIRST 16

static void add_gap(struct exchange *x, double ms)
{
	if (x->n_gaps == x->cap_gaps) {
		x->cap_gaps = x->cap_gaps ? 2 * x->cap_gaps : GAPS_FIRST;
		x->gaps = sl_xrealloc(x->gaps, x->cap_gaps * sizeof(*x->gaps));
	}
	x->gaps[x->n_gaps++] = ms;
}

static void token(struct session *s)
{
	struct record *rec = rec_of(s);
	uint64_t now = sl_now_ns();
	if (rec->first_ns) {
		if (!rec->warmup)
			add_gap(&s->x, (double)(now - rec->end_ns) / 1e6);
	} else {
		rec->first_ns = now;
	}
	rec->end_ns = now; /* the last token so far */
	rec->tokens_seen++;
}

static uint32_t count(json_t *v)
{
	return json_is_integer(v) && json_integer_value(v) > 0
	           ? (uint32_t)json_integer_value(v)
	           : 0;
}

/* Usage and timings, wherever the endpoint puts them. */
static void read_counts(struct record *rec, json_t *j)
{
	json_t *usage = json_object_get(j, "usage");
	if (json_is_object(usage)) {
		rec->output_tokens =
		    count(json_object_get(usage, "completion_tokens"));
		rec->input_tokens =
		    count(json_object_get(usage, "prompt_tokens"));
	}
	if (json_object_get(j, "tokens_predicted") &&
	    (json_is_true(json_object_get(j, "stop")))) {
		rec->output_tokens =
		    count(json_object_get(j, "tokens_predicted"));
		rec->input_tokens =
		    count(json_object_get(j, "tokens_evaluated"));
	}
	json_t *gt = json_object_get(j, "tokens"); /* /generate's totals */
	if (json_is_integer(gt) && json_object_get(j, "finish_reason"))
		rec->output_tokens = count(gt);
	json_t *t = json_object_get(j, "timings");
	if (json_is_object(t)) {
		json_t *pm = json_object_get(t, "prompt_ms");
		if (json_is_number(pm))
			rec->llama_prompt_ms = json_number_value(pm);
		json_t *pn = json_object_get(t, "predicted_n");
		if (json_is_number(pn))
			rec->llama_predicted_n = json_number_value(pn);
		rec->cached_tokens = count(json_object_get(t, "cache_n"));
	}
}

/* One event of a stream, or a whole answer. */
static void read_json(struct session *s, json_t *j, bool streamed)
{
	struct record *rec = rec_of(s);
	read_counts(rec, j);
	json_t *c = json_array_get(json_object_get(j, "choices"), 0);
	json_t *piece;
	switch (s->b->o.endpoint) {
	case EP_CHAT:
		piece = json_object_get(
		    json_object_get(c, streamed ? "delta" : "message"),
		    "content");
		break;
	case EP_COMPLETIONS: piece = json_object_get(c, "text"); break;
	case EP_COMPLETION: piece = json_object_get(j, "content"); break;
	case EP_GENERATE:
		piece = json_object_get(j, "finish_reason")
		            ? NULL
		            : json_object_get(j, "text");
		break;
	default: piece = NULL; break;
	}
	keep_reply(&s->x, piece);
	if (streamed && nonempty(piece))
		token(s);
}

static int on_event(const char *ev, size_t len, void *arg)
{
	struct session *s = arg;
	char probe[16];
	long n = sl_sse_event_data(ev, len, probe, sizeof(probe));
	if (n < 0 || !strcmp(probe, "[DONE]"))
		return 0;
	char *data = sl_xmalloc((size_t)n + 1);
	sl_sse_event_data(ev, len, data, (size_t)n + 1);
	json_t *j = json_loads(data, JSON_DECODE_ANY, NULL);
	free(data);
	if (json_object_get(j, "error"))
		snprintf(s->x.error, sizeof(s->x.error),
		         "error event in stream");
	else
		read_json(s, j, true);
	json_decref(j);
	return 0;
}

/* An error answer's body, kept whole up to ERROR_BODY_MAX. */
static void keep_error_body(struct exchange *x, const char *data, size_t len)
{
	len = SL_MIN(len, ERROR_BODY_MAX - x->resp_len);
	if (len == 0)
		return;
	x->resp = sl_xrealloc(x->resp, x->resp_len + len + 1);
	memcpy(x->resp + x->resp_len, data, len);
	x->resp_len += len;
	x->resp[x->resp_len] = '\0';
}

static int on_body(struct sl_h1_request *r, const char *data, size_t len)
{
	struct session *s = r->data;
	struct exchange *x = &s->x;
	/* A refusal or an error: no tokens, a body kept for its reason. */
	if (r->status < 200 || r->status >= 300) {
		keep_error_body(x, data, len);
		return SL_H1_GO_ON;
	}
	if (s->b->o.stream) {
		if (sl_sse_feed(&x->sse, data, len, on_event, s) != 0) {
			snprintf(x->error, sizeof(x->error),
			         "an event of the stream is over %u bytes",
			         SL_SSE_MAX_EVENT);
			return SL_H1_STOP;
		}
		/* A planned leave: stopping closes the connection, which is
		 * how a client leaves. */
		if (x->leave && rec_of(s)->tokens_seen >= s->b->o.cancel_tokens)
			return SL_H1_STOP;
		return SL_H1_GO_ON;
	}
	struct record *rec = rec_of(s);
	if (!rec->first_ns)
		rec->first_ns = sl_now_ns(); /* a plain answer's first byte */
	if (x->resp_len + len > MAX_BODY) {
		snprintf(x->error, sizeof(x->error),
		         "the answer is over %u bytes", MAX_BODY);
		return SL_H1_STOP;
	}
	x->resp = sl_xrealloc(x->resp, x->resp_len + len + 1);
	memcpy(x->resp + x->resp_len, data, len);
	x->resp_len += len;
	x->resp[x->resp_len] = '\0';
	return SL_H1_GO_ON;
}

/* "queue;dur=1.5, upstream;dur=20, predicted;dur=40.2" into the record's
 * four figures. */
static void read_server_timing(struct record *rec, const char *v)
{
	static const char *const names[] = {"queue", "upstream", "ttft",
	                                    "predicted"};
	double *dest[] = {&rec->queue_ms, &rec->upstream_ms,
	                  &rec->server_ttft_ms, &rec->predicted_ms};
	while (*v) {
		v += strspn(v, " \t,");
		size_t name_len = strcspn(v, ";, \t\r\n");
		const char *end = v + strcspn(v, ",\r\n");
		const char *dur = strstr(v, "dur=");
		for (size_t i = 0; i < SL_ARRAY_SIZE(names); i++)
			if (name_len == strlen(names[i]) &&
			    !strncmp(v, names[i], name_len) && dur && dur < end)
				*dest[i] = strtod(dur + 4, NULL);
		if (!*end || *end == '\r' || *end == '\n')
			break;
		v = end + 1;
	}
}

/*
 * A refusal's wait in ms (seconds times unit), at most --timeout: a date
 * or garbage is no wait asked (-1), and no server holds the bench longer
 * than it would wait for an answer.
 */
static long wait_ms(const struct session *s, const char *v, double unit)
{
	char *end;
	double d = strtod(v, &end);
	if (end == v || !isfinite(d) || d < 0)
		return -1;
	return (long)SL_MIN(d * unit, s->b->o.timeout_s * 1000);
}

static int on_header(struct sl_h1_request *r, const char *data, size_t len)
{
	struct session *s = r->data;
	/* The head's first line: a refusal's time is taken here. */
	if (!rec_of(s)->head_ns)
		rec_of(s)->head_ns = sl_now_ns();
	char line[512];
	snprintf(line, sizeof(line), "%.*s", (int)SL_MIN(len, 511u), data);
	char *colon = strchr(line, ':');
	if (!colon)
		return SL_H1_GO_ON;
	*colon = '\0';
	const char *v = colon + 1 + strspn(colon + 1, " \t");
	if (!strcasecmp(line, "server-timing"))
		read_server_timing(rec_of(s), v);
	else if (!strcasecmp(line, "retry-after") && s->x.retry_after_ms < 0)
		s->x.retry_after_ms = wait_ms(s, v, 1000);
	else if (!strcasecmp(line, "retry-after-ms"))
		s->x.retry_after_ms = wait_ms(s, v, 1);
	return SL_H1_GO_ON;
}

static void fail(struct record *rec, const char *why)
{
	if (!rec->error)
		rec->error = sl_xstrdup(why);
}

/*
 * The attempt's inter-token gaps join the run's when its stream was
 * served whole (issue 41): the gaps of a stream cut short, failed or left
 * on purpose describe no answer that was served, and a refused attempt
 * has none. They are dropped either way.
 */
static void keep_gaps(struct session *s)
{
	struct exchange *x = &s->x;
	struct record *rec = rec_of(s);
	if (rec->ok && !rec->cancelled)
		for (size_t i = 0; i < x->n_gaps; i++)
			bs_add(&s->e->r->itl, x->gaps[i]);
	x->n_gaps = 0;
}

/*
 * A refusal's reason, and the refusal in the run's list when the request
 * is measured: every attempt refused counts, a retried one's too.
 */
static void note_refusal(struct session *s, uint64_t now)
{
	struct exchange *x = &s->x;
	struct record *rec = rec_of(s);
	struct run *r = s->e->r;
	slo_refusal_reason(x->resp, x->resp_len, rec->reason,
	                   sizeof(rec->reason));
	/* A head without a single header line: its end is as near. */
	if (!rec->head_ns)
		rec->head_ns = now;
	if (rec->warmup)
		return;
	if (r->n_refusals == r->cap_refusals) {
		r->cap_refusals = r->cap_refusals ? 2 * r->cap_refusals : 256;
		r->refusals = sl_xrealloc(
		    r->refusals, r->cap_refusals * sizeof(*r->refusals));
	}
	struct refusal *f = &r->refusals[r->n_refusals++];
	f->ms = (double)(rec->head_ns - rec->try_sent_ns) / 1e6;
	f->status = rec->status;
	f->retry_after = x->retry_after_ms >= 0;
	memcpy(f->reason, rec->reason, sizeof(f->reason));
}

static void on_done(struct sl_h1_request *r, enum sl_h1_result result)
{
	struct session *s = r->data;
	struct exchange *x = &s->x;
	struct record *rec = rec_of(s);
	int status = r->status;
	rec->status = status;
	uint64_t now = sl_now_ns();
	if (status == 429 || status == 503)
		note_refusal(s, now);
	bool whole = result == SL_H1_OK;
	if (x->leave &&
	    ((result == SL_H1_STOPPED && !x->error[0]) || x->left)) {
		rec->cancelled = true;
		rec->left_ns = now;
		/* Left as planned: before any answer (a plain one still being
		 * generated) or during a 2xx one; an error status stays one. */
		rec->ok = status == 0 || (status >= 200 && status < 300);
	} else {
		rec->ok =
		    whole && status >= 200 && status < 300 && !x->error[0];
		rec->end_ns = now;
		if (rec->ok && !s->b->o.stream && x->resp) {
			json_t *j = json_loads(x->resp, JSON_DECODE_ANY, NULL);
			read_json(s, j, false);
			json_decref(j);
		}
		if (rec->ok && !rec->output_tokens)
			rec->output_tokens = rec->tokens_seen;
	}
	if (!rec->ok) {
		char why[SL_H1_ERROR_MAX + 32];
		if (x->error[0])
			snprintf(why, sizeof(why), "%s", x->error);
		else if (!whole)
			snprintf(why, sizeof(why), "%s: %s",
			         sl_h1_result_name(result), r->error);
		else
			snprintf(why, sizeof(why), "HTTP %d", status);
		fail(rec, why);
	} else {
		free(rec->error);
		rec->error = NULL;
	}
	keep_gaps(s);
	engine_exchange_done(s);
}

void exchange_leave(struct session *s)
{
	sl_h1_abort(&s->x.r);
	s->x.left = true;
	on_done(&s->x.r, SL_H1_STOPPED);
}

void exchange_timeout(struct session *s)
{
	sl_h1_abort(&s->x.r);
	snprintf(s->x.error, sizeof(s->x.error),
	         "no whole answer within --timeout %g s", s->b->o.timeout_s);
	on_done(&s->x.r, SL_H1_STOPPED);
}

void exchange_clear(struct session *s)
{
	struct exchange *x = &s->x;
	sl_h1_request_free(&x->r);
	free(x->headers);
	sl_sse_free(&x->sse);
	free(x->body);
	free(x->resp);
	free(x->reply);
	free(x->gaps);
	memset(x, 0, sizeof(*x));
}

static void add_header(struct exchange *x, const char *name, const char *v)
{
	char *h =
	    sl_xasprintf("%s%s: %s\r\n", x->headers ? x->headers : "", name, v);
	free(x->headers);
	x->headers = h;
}

/* The request's SLOs as sluice reads them (the Gateway API Inference
 * Extension's names): whole milliseconds, rounded up; e2el has none. */
static void add_slo_headers(struct exchange *x, const struct slo *slo)
{
	char v[32];
	if (slo->ttft_ms > 0) {
		snprintf(v, sizeof(v), "%ld", slo_header_ms(slo->ttft_ms));
		add_header(x, "X-SLO-TTFT-Ms", v);
	}
	if (slo->tpot_ms > 0) {
		snprintf(v, sizeof(v), "%ld", slo_header_ms(slo->tpot_ms));
		add_header(x, "X-SLO-TPOT-Ms", v);
	}
}

/* Sends the record's request (again, for a retry). */
static void send_it(struct session *s)
{
	struct bench *b = s->b;
	struct exchange *x = &s->x;
	struct record *rec = rec_of(s);
	struct sl_h1_request *r = &x->r;
	sl_h1_request_free(r);
	memset(r, 0, sizeof(*r));
	r->method = "POST";
	r->target = endpoint_paths[b->o.endpoint];
	r->headers = x->headers;
	r->body = x->body;
	r->body_len = strlen(x->body);
	r->has_body = true;
	r->connect_timeout_ms = HB_CONNECT_TIMEOUT_MS;
	r->on_header = on_header;
	r->on_body = on_body;
	r->on_done = on_done;
	r->data = s;
	x->error[0] = '\0';
	x->retry_after_ms = -1;
	x->sent_ns = sl_now_ns();
	if (!rec->sent_ns)
		rec->sent_ns = x->sent_ns;
	rec->try_sent_ns = x->sent_ns;
	rec->head_ns = 0;
	/* The URL was checked at start: this cannot be refused. */
	sl_h1_start(&b->h1, r, b->o.url, HB_MAX_CONNS);
}

void exchange_resend(struct session *s)
{
	struct exchange *x = &s->x;
	sl_sse_free(&x->sse);
	sl_sse_init(&x->sse, SL_SSE_MAX_EVENT);
	free(x->resp);
	x->resp = NULL;
	x->resp_len = 0;
	free(x->reply);
	x->reply = NULL;
	x->reply_len = 0;
	struct record *rec = rec_of(s);
	rec->first_ns = rec->end_ns = 0;
	rec->tokens_seen = 0;
	rec->retries++;
	/* The figures below are the last answer's: none from a refusal. */
	rec->queue_ms = rec->upstream_ms = NAN;
	rec->server_ttft_ms = rec->predicted_ms = NAN;
	rec->reason[0] = '\0';
	send_it(s);
}

void exchange_start(struct session *s)
{
	struct bench *b = s->b;
	struct run *r = s->e->r;
	struct exchange *x = &s->x;
	memset(x, 0, sizeof(*x));
	x->s = s;
	if (r->n_recs == r->cap_recs) {
		r->cap_recs = r->cap_recs ? 2 * r->cap_recs : 1024;
		r->recs = sl_xrealloc(r->recs, r->cap_recs * sizeof(*r->recs));
	}
	x->rec = r->n_recs++;
	struct record *rec = rec_of(s);
	memset(rec, 0, sizeof(*rec));
	rec->conv = s->conv_id;
	rec->turn = s->turn;
	rec->tenant = (int16_t)s->tenant;
	rec->model = (int16_t)s->model;
	rec->prio = (int8_t)s->prio;
	rec->slo_class = (int8_t)s->slo_class;
	rec->seed = ++b->next_seed;
	rec->intended_ns = s->intended_ns;
	rec->warmup =
	    (double)(s->intended_ns - r->start_ns) / 1e9 < b->o.warmup_s;
	rec->slot_freed = -1;
	rec->input_tokens = s->conv->turns[s->turn].input_tokens;
	rec->queue_ms = rec->upstream_ms = NAN;
	rec->server_ttft_ms = rec->predicted_ms = NAN;
	rec->llama_prompt_ms = rec->llama_predicted_n = NAN;
	x->leave =
	    b->o.cancel_share > 0 && wl_rng_unit(&b->rng) < b->o.cancel_share;
	sl_sse_init(&x->sse, SL_SSE_MAX_EVENT);
	x->body = request_body(s, rec->seed);
	add_header(x, "Content-Type", "application/json");
	const char *key =
	    s->tenant >= 0 ? b->o.tenants[s->tenant].key : b->o.api_key;
	if (key) {
		char bearer[512];
		snprintf(bearer, sizeof(bearer), "Bearer %s", key);
		add_header(x, "Authorization", bearer);
	}
	if (s->prio != PRIO_NONE)
		add_header(x, "X-Priority", prio_names[s->prio]);
	if (b->o.slo_headers)
		add_slo_headers(x, options_slo_of(&b->o, s->slo_class));
	send_it(s);
}

/* The reply, appended to the history for the next turn. */
void exchange_keep_reply(struct session *s)
{
	struct exchange *x = &s->x;
	const char *reply = x->reply ? x->reply : "";
	if (s->b->o.endpoint == EP_CHAT) {
		json_array_append_new(s->history,
		                      json_pack("{s:s, s:s}", "role",
		                                "assistant", "content", reply));
		return;
	}
	char *joined =
	    sl_xasprintf("%s\n\n%s", json_string_value(s->history), reply);
	json_decref(s->history);
	s->history = json_string(joined);
	free(joined);
}

/* The wait a refusal asked for, in ms; -1 when it asked none. */
long exchange_retry_after_ms(const struct session *s)
{
	return s->x.retry_after_ms;
}

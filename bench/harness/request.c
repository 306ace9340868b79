/*
 * request.c: one exchange with the target. It builds the body of the
 * session's current turn, sends it with the tenant's key, X-Priority and
 * the model, and reads the answer: tokens as they stream, usage and
 * llama-server's timings, sluice's Server-Timing and a refusal's
 * Retry-After. Everything lands in the request's record.
 */
#include "engine.h"

#include "sluice/base/common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
		json_array_append_new(s->history,
		                      json_pack("{s:s, s:s}", "role", "user",
		                                "content", text));
		return json_incref(s->history);
	}
	const char *before = s->history ? json_string_value(s->history) : "";
	char *joined = sl_xasprintf("%s%s%s", before, *before ? "\n\n" : "",
	                            text);
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
		json_object_set_new(j, o->endpoint == EP_COMPLETION
		                           ? "n_predict"
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
	if (x->reply_len + len > MAX_REPLY)
		return;
	x->reply = sl_xrealloc(x->reply, x->reply_len + len + 1);
	memcpy(x->reply + x->reply_len, json_string_value(text), len);
	x->reply_len += len;
	x->reply[x->reply_len] = '\0';
}

static void token(struct session *s)
{
	struct record *rec = rec_of(s);
	uint64_t now = sl_now_ns();
	if (rec->first_ns) {
		if (!rec->warmup)
			bs_add(&s->e->r->itl,
			       (double)(now - rec->end_ns) / 1e6);
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

static size_t on_data(char *data, size_t size, size_t n, void *arg)
{
	struct session *s = arg;
	struct exchange *x = &s->x;
	size_t len = size * n;
	if (s->b->o.stream) {
		if (sl_sse_feed(&x->sse, data, len, on_event, s) != 0)
			return 0;
		/* A planned leave: returning short makes libcurl stop and
		 * close the connection, which is how a client leaves. */
		if (x->leave && rec_of(s)->tokens_seen >= s->b->o.cancel_tokens)
			return 0;
		return len;
	}
	struct record *rec = rec_of(s);
	if (!rec->first_ns)
		rec->first_ns = sl_now_ns(); /* a plain answer's first byte */
	if (x->resp_len + len > MAX_BODY)
		return 0;
	x->resp = sl_xrealloc(x->resp, x->resp_len + len + 1);
	memcpy(x->resp + x->resp_len, data, len);
	x->resp_len += len;
	x->resp[x->resp_len] = '\0';
	return len;
}

/* "queue;dur=1.5, upstream;dur=20" into the record's three figures. */
static void read_server_timing(struct record *rec, const char *v)
{
	static const char *const names[] = {"queue", "upstream", "ttft"};
	double *dest[] = {&rec->queue_ms, &rec->upstream_ms,
	                  &rec->server_ttft_ms};
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

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
	struct session *s = arg;
	size_t len = size * n;
	char line[512];
	snprintf(line, sizeof(line), "%.*s", (int)SL_MIN(len, 511u), data);
	char *colon = strchr(line, ':');
	if (!colon)
		return len;
	*colon = '\0';
	const char *v = colon + 1 + strspn(colon + 1, " \t");
	if (!strcasecmp(line, "server-timing"))
		read_server_timing(rec_of(s), v);
	else if (!strcasecmp(line, "retry-after") && !s->x.retry_after[0])
		snprintf(s->x.retry_after, sizeof(s->x.retry_after), "%.0f",
		         strtod(v, NULL) * 1000);
	else if (!strcasecmp(line, "retry-after-ms"))
		snprintf(s->x.retry_after, sizeof(s->x.retry_after), "%.0f",
		         strtod(v, NULL));
	return len;
}

static void fail(struct record *rec, const char *why)
{
	if (!rec->error)
		rec->error = sl_xstrdup(why);
}

static void on_done(struct sl_transfer *t, CURLcode rc)
{
	struct session *s = t->data;
	struct exchange *x = &s->x;
	struct record *rec = rec_of(s);
	long status = 0;
	curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
	rec->status = (int)status;
	uint64_t now = sl_now_ns();
	if (x->leave && (rc == CURLE_WRITE_ERROR || x->left)) {
		rec->cancelled = true;
		rec->left_ns = now;
		/* Left as planned: before any answer (a plain one still being
		 * generated) or during a 2xx one; an error status stays one. */
		rec->ok = status == 0 || (status >= 200 && status < 300);
	} else {
		rec->ok = rc == CURLE_OK && status >= 200 && status < 300 &&
		          !x->error[0];
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
		char why[CURL_ERROR_SIZE + 32];
		if (rc != CURLE_OK)
			snprintf(why, sizeof(why), "%s",
			         x->error[0] ? x->error
			                     : curl_easy_strerror(rc));
		else if (x->error[0])
			snprintf(why, sizeof(why), "%s", x->error);
		else
			snprintf(why, sizeof(why), "HTTP %ld", status);
		fail(rec, why);
	} else {
		free(rec->error);
		rec->error = NULL;
	}
	engine_exchange_done(s);
}

void exchange_leave(struct session *s)
{
	sl_curl_abort(&s->b->curl, &s->x.t);
	s->x.left = true;
	on_done(&s->x.t, CURLE_ABORTED_BY_CALLBACK);
}

void exchange_clear(struct session *s)
{
	struct exchange *x = &s->x;
	if (x->t.easy)
		sl_curl_easy_done(&s->b->curl, x->t.easy);
	curl_slist_free_all(x->headers);
	sl_sse_free(&x->sse);
	free(x->body);
	free(x->resp);
	free(x->reply);
	memset(x, 0, sizeof(*x));
}

static void add_header(struct exchange *x, const char *name, const char *v)
{
	char *h = sl_xasprintf("%s: %s", name, v);
	x->headers = curl_slist_append(x->headers, h);
	free(h);
}

/* Sends the record's request (again, for a retry). */
static void send_it(struct session *s)
{
	struct bench *b = s->b;
	struct exchange *x = &s->x;
	struct record *rec = rec_of(s);
	CURL *e = sl_curl_easy(&b->curl);
	if (!e) {
		fail(rec, "libcurl cannot make a handle");
		engine_exchange_done(s);
		return;
	}
	x->t.easy = e;
	x->t.on_done = on_done;
	x->t.data = s;
	char *url = sl_xasprintf("%s%s", b->o.url,
	                         endpoint_paths[b->o.endpoint]);
	curl_easy_setopt(e, CURLOPT_URL, url);
	free(url);
	sl_curl_common_options(e);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, s);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->error);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(b->o.timeout_s * 1000));
	/* Small reads: 2,000 streams must fit in a few tens of MB. */
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 4096L);
	x->error[0] = '\0';
	x->retry_after[0] = '\0';
	if (!rec->sent_ns)
		rec->sent_ns = sl_now_ns();
	if (sl_curl_start(&b->curl, &x->t) != 0) {
		fail(rec, "cannot start a transfer");
		sl_curl_easy_done(&b->curl, e);
		x->t.easy = NULL;
		engine_exchange_done(s);
	}
}

void exchange_resend(struct session *s)
{
	struct exchange *x = &s->x;
	if (x->t.easy)
		sl_curl_easy_done(&s->b->curl, x->t.easy);
	x->t.easy = NULL;
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
	rec->seed = ++b->next_seed;
	rec->intended_ns = s->intended_ns;
	rec->warmup =
	    (double)(s->intended_ns - r->start_ns) / 1e9 < b->o.warmup_s;
	rec->slot_freed = -1;
	rec->input_tokens = s->conv->turns[s->turn].input_tokens;
	rec->queue_ms = rec->upstream_ms = rec->server_ttft_ms = NAN;
	rec->llama_prompt_ms = rec->llama_predicted_n = NAN;
	x->leave = b->o.cancel_share > 0 &&
	           wl_rng_unit(&b->rng) < b->o.cancel_share;
	sl_sse_init(&x->sse, SL_SSE_MAX_EVENT);
	x->body = request_body(s, rec->seed);
	add_header(x, "Content-Type", "application/json");
	x->headers = curl_slist_append(x->headers, "Expect:");
	const char *key = s->tenant >= 0 ? b->o.tenants[s->tenant].key
	                                 : b->o.api_key;
	if (key) {
		char bearer[512];
		snprintf(bearer, sizeof(bearer), "Bearer %s", key);
		add_header(x, "Authorization", bearer);
	}
	if (s->prio != PRIO_NONE)
		add_header(x, "X-Priority", prio_names[s->prio]);
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
	char *joined = sl_xasprintf("%s\n\n%s", json_string_value(s->history),
	                            reply);
	json_decref(s->history);
	s->history = json_string(joined);
	free(joined);
}

/* The wait a refusal asked for, in ms; -1 when it asked none. */
long exchange_retry_after_ms(const struct session *s)
{
	return s->x.retry_after[0] ? strtol(s->x.retry_after, NULL, 10) : -1;
}

/*
 * proxy.c: exchanges between clients and upstreams.
 *
 * An exchange is freed when three things are over: the client side (the
 * response is complete, or the client is gone), the transfer (done, or
 * aborted), and its timer's close. Each callback below ends one of them and
 * then calls exchange_release().
 *
 * Timers: one per exchange. Until the first response byte it enforces
 * --upstream-timeout; after it, --upstream-idle-timeout between bytes,
 * measured lazily (each byte only records the time; the timer re-arms
 * itself for the remainder when it fires early). While the transfer is
 * paused for a slow client, silence is the client's doing, not the
 * upstream's, and does not count.
 */
#include "sluice/proxy.h"

#include "sluice/assemble.h"
#include "sluice/common.h"
#include "sluice/log.h"
#include "sluice/sse.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Everything that occupies a llama-server slot goes through the queue;
 * embeddings do too, since llama-server runs them in slots.
 */
const struct sl_endpoint sl_endpoints[] = {
	{"/v1/chat/completions", HTTP_POST, "/v1/chat/completions",
	 SL_END_DONE, true, true},
	{"/v1/completions", HTTP_POST, "/v1/completions", SL_END_DONE, true,
	 true},
	{"/completion", HTTP_POST, "/completion", SL_END_STOP, true, true},
	{"/v1/embeddings", HTTP_POST, "/v1/embeddings", SL_END_NONE, true,
	 true},
	{"/v1/models", HTTP_GET, "/v1/models", SL_END_NONE, false, false},
};
const unsigned sl_n_endpoints = SL_ARRAY_SIZE(sl_endpoints);

/* Largest non-streamed answer sluice assembles from an upstream stream. */
#define SL_PROXY_MAX_ANSWER (64u * 1024 * 1024)

enum relay_mode {
	MODE_WAITING, /* no response byte yet */
	MODE_BODY,    /* relaying a plain body */
	MODE_SSE,     /* relaying events one by one */
};

struct exchange {
	struct sl_app *app;
	struct sl_http_request *req; /* NULL once the client side is over */
	const struct sl_endpoint *ep;
	struct sl_upstream *upstream;
	char *body; /* what is sent upstream */
	size_t body_len;
	struct sl_sched_item item; /* while waiting in sluice's queue */
	double priority;
	uint64_t arrived_ms;
	char sched_headers[80]; /* X-Queue-Ms and X-Batch-Size, once known */
	bool stream;   /* the client asked for "stream": true */
	bool assemble; /* it did not, but llama-server is asked to stream */
	struct sl_assembler answer;
	size_t answer_bytes;

	struct sl_transfer transfer;
	struct curl_slist *headers;
	char error[CURL_ERROR_SIZE];
	uv_timer_t timer;
	uint64_t last_byte_ms; /* loop time of the last upstream byte */
	bool timer_closed;

	enum relay_mode mode;
	bool head_sent; /* the client's response has begun */
	struct sl_sse sse;
	bool ended;  /* the end marker (or an error event) went out */
	bool paused; /* the transfer waits for the client to catch up */
};

static void exchange_release(struct exchange *x);

/* ---- the client side ---- */

/* The client side is over: no more callbacks from the HTTP server. */
static void client_done(struct exchange *x)
{
	x->req = NULL;
}

static void respond_error(struct exchange *x, int status, const char *type,
			  const char *message)
{
	sl_http_respond_error(x->req, status, type, x->sched_headers, "%s",
			      message);
	client_done(x);
}

/* An SSE event with an OpenAI-shaped error, then the end of the stream. */
static void end_stream_with_error(struct exchange *x, int code,
				  const char *message)
{
	json_t *j = json_pack("{s:{s:s, s:s, s:i}}", "error", "message",
			      message, "type", "server_error", "code", code);
	char *doc = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	char *event = sl_xasprintf("data: %s\n\n", doc);
	sl_http_stream_write(x->req, event, strlen(event));
	free(event);
	free(doc);
	sl_http_stream_end(x->req);
	client_done(x);
}

/* HTTP server: the client went away before its response was complete. */
static void on_client_abort(struct sl_http_request *req)
{
	struct exchange *x = req->handler_data;
	sl_debug("%s: client left; cancelling its request", req->id);
	client_done(x);
	sl_sched_remove(&x->app->sched, &x->item);
	/* Removing the handle closes the connection: llama-server stops. */
	sl_curl_abort(&x->app->curl, &x->transfer);
	exchange_release(x);
}

/* HTTP server: the client caught up; let the upstream talk again. */
static void on_client_drain(struct sl_http_request *req)
{
	struct exchange *x = req->handler_data;
	if (!x->paused || !x->transfer.active)
		return;
	x->paused = false;
	x->last_byte_ms = uv_now(&x->app->loop);
	/* May call on_upstream_data before it returns: state is updated. */
	curl_easy_pause(x->transfer.easy, CURLPAUSE_CONT);
}

/* ---- reading the upstream's answer ---- */

static bool json_stop_true(const char *data)
{
	json_t *j = json_loads(data, 0, NULL);
	bool stop = json_is_true(json_object_get(j, "stop"));
	json_decref(j);
	return stop;
}

/* Whether an event ends the stream (end marker, or an upstream error). */
static bool event_ends_stream(const struct exchange *x, const char *event,
			      size_t len)
{
	char small[256];
	long n = sl_sse_event_data(event, len, small, sizeof(small));
	if (n < 0)
		return false;
	if (x->ep->stream_end == SL_END_DONE && strcmp(small, "[DONE]") == 0)
		return true;
	/* Cheap look first; parse only events that may carry the marker. */
	bool maybe_stop = x->ep->stream_end == SL_END_STOP &&
			  memmem(event, len, "\"stop\":true", 11);
	bool maybe_error = memmem(event, len, "\"error\"", 7) != NULL;
	if (!maybe_stop && !maybe_error)
		return false;
	char *data = (size_t)n < sizeof(small) ? NULL : sl_xmalloc((size_t)n + 1);
	if (data)
		sl_sse_event_data(event, len, data, (size_t)n + 1);
	const char *text = data ? data : small;
	bool ends = (maybe_stop && json_stop_true(text));
	if (!ends && maybe_error) {
		json_t *j = json_loads(text, 0, NULL);
		ends = json_object_get(j, "error") != NULL;
		json_decref(j);
	}
	free(data);
	return ends;
}

/* An event's data, malloc'd; NULL for an event without data. */
static char *event_data(const char *event, size_t len)
{
	char probe[1];
	long n = sl_sse_event_data(event, len, probe, sizeof(probe));
	if (n < 0)
		return NULL;
	char *data = sl_xmalloc((size_t)n + 1);
	sl_sse_event_data(event, len, data, (size_t)n + 1);
	return data;
}

static void finish_answer(struct exchange *x)
{
	json_t *doc = sl_assembler_result(&x->answer);
	if (!doc) {
		respond_error(x, 502, "server_error",
			      "upstream ended its answer without any content");
		return;
	}
	char *body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	sl_http_respond(x->req, 200, "application/json; charset=utf-8",
			x->sched_headers, body, strlen(body));
	free(body);
	client_done(x);
}

/* An upstream error event, answered as the error response it stands for. */
static void answer_error(struct exchange *x, json_t *doc)
{
	json_t *code = json_object_get(json_object_get(doc, "error"), "code");
	json_int_t status = json_is_integer(code) ? json_integer_value(code)
						  : 500;
	if (status < 400 || status > 599)
		status = 500;
	char *body = json_dumps(doc, JSON_COMPACT);
	sl_http_respond(x->req, (int)status, "application/json",
			x->sched_headers, body, strlen(body));
	free(body);
	client_done(x);
}

/* For a client that wants one answer: gather the event instead of relaying. */
static int assemble_event(struct exchange *x, const char *event, size_t len)
{
	x->answer_bytes += len;
	if (x->answer_bytes > SL_PROXY_MAX_ANSWER) {
		respond_error(x, 502, "server_error",
			      "upstream answer too large to assemble");
		return 0;
	}
	char *data = event_data(event, len);
	if (!data)
		return 0; /* a comment: a keep-alive ping */
	if (strcmp(data, "[DONE]") == 0) {
		free(data);
		finish_answer(x);
		return 0;
	}
	json_t *doc = json_loads(data, 0, NULL);
	free(data);
	if (json_object_get(doc, "error")) {
		answer_error(x, doc);
	} else if (sl_assembler_add(&x->answer, doc) != 0) {
		respond_error(x, 502, "server_error",
			      "upstream sent an event sluice cannot read");
	} else if (x->ep->stream_end == SL_END_STOP &&
		   json_is_true(json_object_get(doc, "stop"))) {
		finish_answer(x);
	}
	json_decref(doc);
	return 0;
}

static int on_event(const char *event, size_t len, void *arg)
{
	struct exchange *x = arg;
	if (x->ended || !x->req)
		return 0;
	if (x->assemble)
		return assemble_event(x, event, len);
	sl_http_stream_write(x->req, event, len);
	if (!x->req || !event_ends_stream(x, event, len))
		return 0;
	x->ended = true;
	sl_http_stream_end(x->req);
	client_done(x);
	return 0;
}

/* The first byte: answer the client's head in the right mode. */
static void start_response(struct exchange *x)
{
	long status = 0;
	char *ctype = NULL;
	curl_off_t length = -1;
	CURL *e = x->transfer.easy;
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ctype);
	curl_easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
	if ((x->stream || x->assemble) && status == 200 && ctype &&
	    strncmp(ctype, "text/event-stream", 17) == 0) {
		x->mode = MODE_SSE;
		sl_sse_init(&x->sse, SL_SSE_MAX_EVENT);
		if (x->assemble)
			return; /* answered once the stream is complete */
		x->head_sent = true;
		char extra[160];
		snprintf(extra, sizeof(extra),
			 "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
			 "%s",
			 x->sched_headers);
		sl_http_stream_start(x->req, 200, "text/event-stream", extra,
				     -1);
		return;
	}
	x->mode = MODE_BODY;
	x->head_sent = true;
	sl_http_stream_start(x->req, (int)status,
			     ctype ? ctype : "application/octet-stream",
			     x->sched_headers, length);
}

/* CURLOPT_WRITEFUNCTION: the upstream's body, as it arrives. */
static size_t on_upstream_data(char *data, size_t size, size_t n, void *arg)
{
	struct exchange *x = arg;
	size_t len = size * n;
	if (!x->req)
		return len; /* the client side is over: let it finish */
	/* Back-pressure: leave the bytes with libcurl until the client reads. */
	if (sl_http_backlog(x->req) > SL_HTTP_BACKLOG_HIGH) {
		x->paused = true;
		return CURL_WRITEFUNC_PAUSE;
	}
	x->last_byte_ms = uv_now(&x->app->loop);
	if (x->mode == MODE_WAITING)
		start_response(x);
	if (x->mode == MODE_BODY) {
		sl_http_stream_write(x->req, data, len);
		return len;
	}
	if (sl_sse_feed(&x->sse, data, len, on_event, x) != 0) {
		/* One event larger than SL_SSE_MAX_EVENT: give up on it. */
		end_stream_with_error(x, 502, "upstream sent an oversized event");
		return 0;
	}
	return len;
}

/* ---- the end of a transfer ---- */

static bool is_timeout(CURLcode rc)
{
	return rc == CURLE_OPERATION_TIMEDOUT;
}

static void finish_client(struct exchange *x, CURLcode result)
{
	if (result == CURLE_OK && x->mode == MODE_WAITING)
		start_response(x); /* an empty body */
	if (result == CURLE_OK && x->mode == MODE_BODY) {
		sl_http_stream_end(x->req);
		client_done(x);
		return;
	}
	if (result == CURLE_OK && x->mode == MODE_SSE) {
		sl_sse_finish(&x->sse, on_event, x);
		if (x->req && x->head_sent)
			end_stream_with_error(x, 502,
					      "upstream closed the stream "
					      "before its end");
		else if (x->req)
			respond_error(x, 502, "server_error",
				      "upstream closed the stream before its "
				      "end");
		return;
	}
	char message[CURL_ERROR_SIZE + 64];
	snprintf(message, sizeof(message), "upstream request failed: %s",
		 x->error[0] ? x->error : curl_easy_strerror(result));
	int status = is_timeout(result) ? 504 : 502;
	if (!x->head_sent) {
		respond_error(x, status,
			      status == 504 ? "timeout_error" : "server_error",
			      message);
	} else if (x->mode == MODE_SSE) {
		end_stream_with_error(x, status, message);
	} else {
		/* A plain body cut short can only be shown by closing. */
		sl_http_abort(x->req);
		client_done(x);
	}
}

static void on_transfer_done(struct sl_transfer *t, CURLcode result)
{
	struct exchange *x = t->data;
	uv_timer_stop(&x->timer);
	if (result != CURLE_OK)
		sl_warn("%s: upstream %s%s: %s",
			x->req ? x->req->id : "-", x->upstream->url,
			x->ep->upstream_path,
			x->error[0] ? x->error : curl_easy_strerror(result));
	if (x->req)
		finish_client(x, result);
	exchange_release(x);
}

/* The first-byte or idle deadline. */
static void on_timer(uv_timer_t *t)
{
	struct exchange *x = t->data;
	const struct sl_config *cfg = x->app->cfg;
	if (!x->transfer.active)
		return;
	uint64_t now = uv_now(&x->app->loop);
	if (x->mode != MODE_WAITING || x->paused) {
		uint64_t quiet = x->paused ? 0 : now - x->last_byte_ms;
		if (quiet < cfg->upstream_idle_timeout_ms) {
			uv_timer_start(&x->timer, on_timer,
				       cfg->upstream_idle_timeout_ms - quiet, 0);
			return;
		}
	}
	snprintf(x->error, sizeof(x->error),
		 x->mode == MODE_WAITING
			 ? "no answer within --upstream-timeout (%.1f s)"
			 : "upstream silent for --upstream-idle-timeout (%.1f s)",
		 (double)(x->mode == MODE_WAITING
				  ? cfg->upstream_timeout_ms
				  : cfg->upstream_idle_timeout_ms) /
			 1000.0);
	sl_curl_abort(&x->app->curl, &x->transfer);
	sl_warn("%s: %s", x->req ? x->req->id : "-", x->error);
	if (x->req)
		finish_client(x, CURLE_OPERATION_TIMEDOUT);
	exchange_release(x);
}

/* ---- lifetime ---- */

static void on_timer_closed(uv_handle_t *h)
{
	struct exchange *x = h->data;
	if (x->mode == MODE_SSE)
		sl_sse_free(&x->sse);
	if (x->assemble)
		sl_assembler_free(&x->answer);
	free(x->body);
	free(x);
}

/* Frees the exchange once the client side and the transfer are both over. */
static void exchange_release(struct exchange *x)
{
	if (x->req || x->transfer.active || x->timer_closed)
		return;
	x->timer_closed = true;
	x->app->exchanges--;
	curl_easy_cleanup(x->transfer.easy);
	curl_slist_free_all(x->headers);
	uv_close((uv_handle_t *)&x->timer, on_timer_closed);
	if (x->upstream) {
		/* A slot is free: the queue's top may go. */
		x->upstream->inflight--;
		sl_app_kick_scheduler(x->app);
	}
	sl_app_maybe_drained(x->app);
}

/* ---- starting ---- */

/* Builds and starts the upstream transfer. Returns 0 or an error. */
static int start_transfer(struct exchange *x, struct sl_upstream *u)
{
	const struct sl_config *cfg = x->app->cfg;
	CURL *e = curl_easy_init();
	if (!e)
		return SL_ECURL;
	x->transfer.easy = e;
	x->transfer.on_done = on_transfer_done;
	x->transfer.data = x;
	x->upstream = u;
	u->inflight++;

	char *url = sl_xasprintf("%s%s", u->url, x->ep->upstream_path);
	curl_easy_setopt(e, CURLOPT_URL, url);
	free(url);
	sl_curl_common_options(e);
	x->headers = curl_slist_append(x->headers, "Expect:");
	x->headers = curl_slist_append(x->headers,
				       "Content-Type: application/json");
	char *id = sl_xasprintf("X-Request-Id: %s", x->req->id);
	x->headers = curl_slist_append(x->headers, id);
	free(id);
	if (u->api_key) {
		char *auth = sl_xasprintf("Authorization: Bearer %s", u->api_key);
		x->headers = curl_slist_append(x->headers, auth);
		free(auth);
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
	if (x->ep->json_body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)x->body_len);
	}
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)cfg->upstream_connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_upstream_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->error);

	uv_timer_start(&x->timer, on_timer, cfg->upstream_timeout_ms, 0);
	return sl_curl_start(&x->app->curl, &x->transfer);
}

/* Checks the JSON body; on a problem answers 400 and returns NULL. */
static json_t *validate_body(struct sl_http_request *req)
{
	json_error_t jerr;
	json_t *doc = json_loadb(req->body, req->body_len, 0, &jerr);
	if (!doc) {
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
				      "malformed JSON in the request body at "
				      "line %d, column %d (byte %d): %s",
				      jerr.line, jerr.column, jerr.position,
				      jerr.text);
		return NULL;
	}
	bool ok = false;
	json_t *v;
	if (!json_is_object(doc)) {
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
				      "the request body must be a JSON object");
	} else if ((v = json_object_get(doc, "stream")) && !json_is_boolean(v)) {
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
				      "\"stream\" must be true or false");
	} else if ((v = json_object_get(doc, "priority")) &&
		   !(json_is_string(v) || json_is_number(v))) {
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
				      "\"priority\" must be urgent, normal, "
				      "batch or a number");
	} else if ((v = json_object_get(doc, "n_discard")) &&
		   (!json_is_integer(v) || json_integer_value(v) < 0)) {
		/* A negative n_discard overflowed llama-server's heap once. */
		sl_http_respond_error(req, 400, "invalid_request_error", NULL,
				      "\"n_discard\" must be a non-negative "
				      "integer");
	} else {
		ok = true;
	}
	if (!ok) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

/*
 * A generation the client wants as one answer is requested as a stream (see
 * assemble.h for why); OpenAI endpoints also need the usage event then.
 */
static void ask_for_stream(struct exchange *x, json_t *doc)
{
	enum sl_assemble_kind kind =
		x->ep->stream_end == SL_END_STOP ? SL_ASSEMBLE_NATIVE
		: strstr(x->ep->path, "chat")	 ? SL_ASSEMBLE_CHAT
						 : SL_ASSEMBLE_TEXT;
	x->assemble = true;
	sl_assembler_init(&x->answer, kind,
			  json_is_true(json_object_get(doc, "return_tokens")));
	json_object_set_new(doc, "stream", json_true());
	if (kind != SL_ASSEMBLE_NATIVE)
		json_object_set_new(doc, "stream_options",
				    json_pack("{s:b}", "include_usage", 1));
}

/*
 * The request's priority: X-Priority, else the body's "priority" (which is
 * removed: it is sluice's, not llama-server's), else normal. On a bad value
 * answers 400 and returns false.
 */
static bool take_priority(struct sl_http_request *req, json_t *doc,
			  double *priority, bool *body_changed)
{
	*priority = SL_PRIORITY_NORMAL;
	json_t *field = json_object_get(doc, "priority");
	char text[64] = "";
	const char *where = NULL;
	const char *header = sl_http_header(req, "X-Priority");
	if (header) {
		snprintf(text, sizeof(text), "%s", header);
		where = "X-Priority";
	} else if (json_is_string(field)) {
		snprintf(text, sizeof(text), "%s", json_string_value(field));
		where = "\"priority\"";
	} else if (json_is_number(field)) {
		snprintf(text, sizeof(text), "%.17g", json_number_value(field));
		where = "\"priority\"";
	}
	if (field) {
		json_object_del(doc, "priority");
		*body_changed = true;
	}
	if (!where)
		return true;
	if (sl_priority_parse(text, priority) == 0)
		return true;
	sl_http_respond_error(req, 400, "invalid_request_error", NULL,
			      "%s: expected urgent, normal, batch or a number "
			      "from %g to %g, got \"%s\"",
			      where, SL_PRIORITY_MIN, SL_PRIORITY_MAX, text);
	return false;
}

static struct exchange *exchange_of(struct sl_sched_item *item)
{
	return sl_container_of(item, struct exchange, item);
}

void sl_proxy_dispatch(void *ctx, struct sl_sched_item **items, unsigned n,
		       uint64_t now_ms)
{
	struct sl_app *app = ctx;
	for (unsigned i = 0; i < n; i++) {
		struct exchange *x = exchange_of(items[i]);
		snprintf(x->sched_headers, sizeof(x->sched_headers),
			 "X-Queue-Ms: %llu\r\nX-Batch-Size: %u\r\n",
			 (unsigned long long)(now_ms - x->arrived_ms), n);
		char why[160];
		struct sl_upstream *u =
			sl_app_pick_upstream(app, true, why, sizeof(why));
		int rc = u ? start_transfer(x, u) : SL_EAGAIN;
		if (rc != 0) {
			respond_error(x, 502, "server_error",
				      "cannot start the upstream request");
			x->transfer.active = false;
			exchange_release(x);
		}
	}
}

void sl_proxy_expire(void *ctx, struct sl_sched_item *item, uint64_t now_ms)
{
	struct sl_app *app = ctx;
	struct exchange *x = exchange_of(item);
	uint64_t waited = now_ms - x->arrived_ms;
	snprintf(x->sched_headers, sizeof(x->sched_headers),
		 "X-Queue-Ms: %llu\r\n", (unsigned long long)waited);
	sl_http_respond_error(x->req, 503, "unavailable_error",
			      x->sched_headers,
			      "the request waited %.1f s in sluice's queue "
			      "without a free slot (--queue-timeout %.1f s)",
			      (double)waited / 1000.0,
			      (double)app->cfg->queue_timeout_ms / 1000.0);
	client_done(x);
	exchange_release(x);
}

void sl_proxy_handle(struct sl_app *app, struct sl_http_request *req,
		     const struct sl_endpoint *ep)
{
	json_t *doc = NULL;
	if (ep->json_body && !(doc = validate_body(req)))
		return;
	double priority = SL_PRIORITY_NORMAL;
	bool body_changed = false;
	if (ep->json_body &&
	    !take_priority(req, doc, &priority, &body_changed)) {
		json_decref(doc);
		return;
	}

	/* With no upstream ready at all, waiting helps nobody: say so now. */
	char why[160];
	struct sl_upstream *u =
		sl_app_pick_upstream(app, false, why, sizeof(why));
	if (!u) {
		sl_http_respond_error(req, 503, "unavailable_error",
				      "Retry-After: 1\r\n", "%s", why);
		json_decref(doc);
		return;
	}

	struct exchange *x = sl_xcalloc(1, sizeof(*x));
	x->app = app;
	x->req = req;
	x->ep = ep;
	x->stream = json_is_true(json_object_get(doc, "stream"));
	x->priority = priority;
	x->item.heap_index = SL_SCHED_NOT_QUEUED;
	if (ep->stream_end != SL_END_NONE && !x->stream)
		ask_for_stream(x, doc);
	if (x->assemble || body_changed) {
		x->body = json_dumps(doc, JSON_COMPACT);
		x->body_len = strlen(x->body);
	} else if (ep->json_body) {
		/* Relayed as the client wrote it. */
		x->body = sl_xmalloc(req->body_len + 1);
		memcpy(x->body, req->body, req->body_len + 1);
		x->body_len = req->body_len;
	}
	json_decref(doc);
	uv_timer_init(&app->loop, &x->timer);
	x->timer.data = x;
	app->exchanges++;
	req->handler_data = x;
	req->on_abort = on_client_abort;
	req->on_drain = on_client_drain;

	if (!ep->scheduled) {
		if (start_transfer(x, u) != 0) {
			respond_error(x, 502, "server_error",
				      "cannot start the upstream request");
			exchange_release(x);
		}
		return;
	}
	x->arrived_ms = uv_now(&app->loop);
	if (sl_sched_push(&app->sched, &x->item, priority, x->arrived_ms) != 0) {
		char extra[48];
		unsigned retry = sl_sched_retry_after_s(&app->sched,
							x->arrived_ms);
		snprintf(extra, sizeof(extra), "Retry-After: %u\r\n", retry);
		sl_http_respond_error(req, 429, "rate_limit_error", extra,
				      "sluice's queue is full (%u requests "
				      "waiting, --max-queue); retry in %u s",
				      sl_sched_depth(&app->sched), retry);
		client_done(x);
		exchange_release(x);
		return;
	}
	sl_app_kick_scheduler(app);
}

/*
 * proxy_transfer.c: an exchange's upstream transfer, started and driven.
 *
 * An exchange goes to an http:// upstream through sluice's own client
 * (h1_client.h), unless --upstream-client curl, and to an https:// one
 * through libcurl. This piece starts either with the request's target,
 * method, body and headers, counts it on its upstream while it runs, and
 * pauses, resumes or aborts it; both clients then call the same callbacks
 * (header lines, body bytes, done with a CURLcode), so that nothing above
 * depends on which carried the request.
 */
#include "proxy_impl.h"

#include "sluice/ops/trace.h"

#include <stdlib.h>
#include <string.h>

bool exchange_transfer_active(const struct exchange *x)
{
	return x->native ? x->h1.active : x->transfer.active;
}

/* Stops the transfer without its done callback; closes its connection. */
void exchange_transfer_abort(struct exchange *x)
{
	if (x->native)
		sl_h1_abort(&x->h1);
	else
		sl_curl_abort(x->relay->curl, &x->transfer);
}

/* Lets a paused transfer go on (once its coalescing wait is over too). */
void exchange_transfer_resume(struct exchange *x)
{
	x->paused = false;
	x->last_byte_ms = uv_now(x->relay->loop);
	if (x->native) {
		if (!x->coalesced)
			sl_h1_resume(&x->h1);
		return;
	}
	/* May call exchange_on_upstream_data before it returns: state is
	 * updated. */
	curl_easy_pause(x->transfer.easy, CURLPAUSE_CONT);
}

long exchange_upstream_status(const struct exchange *x)
{
	long status = 0;
	if (x->native)
		return x->h1.status;
	curl_easy_getinfo(x->transfer.easy, CURLINFO_RESPONSE_CODE, &status);
	return status;
}

static int on_native_header(struct sl_h1_request *r, const char *line,
                            size_t len)
{
	exchange_on_upstream_header((char *)line, 1, len, r->data);
	return SL_H1_GO_ON;
}

/*
 * The native client's body bytes. They are taken whole, even by a slow
 * client; then, at the read's end, reading stops until the client has
 * caught up, so that at most one read (SL_H1_READ_BUF) more than the
 * high-water mark waits.
 */
int exchange_on_native_body(struct sl_h1_request *r, const char *data,
                            size_t len)
{
	struct exchange *x = r->data;
	if (exchange_on_upstream_data((char *)data, 1, len, x) != len)
		return SL_H1_STOP;
	return SL_H1_GO_ON;
}

/*
 * The exchange takes a slot of `u`, as a stream or not (proxy_leaving.c); a
 * watch takes none.
 */
void exchange_upstream_take(struct exchange *x, struct sl_upstream *u)
{
	x->upstream = u;
	x->dispatched_ms = uv_now(x->relay->loop);
	x->dispatched_ns = sl_now_ns();
	if (x->ep->watch) {
		u->watches++;
		return;
	}
	u->inflight++;
	exchange_slo_taken(x, u);
	if (x->assemblable && !x->assemble &&
	    exchange_plain_as_stream(x->relay, u))
		exchange_ask_for_stream(x);
	/* Only clients' streams: plain answers assembled from streams where
	 * clients' ran would keep one another so for ever. */
	if (x->stream) {
		x->counts_stream = true;
		u->streams++;
	}
	/*
	 * llama-server sends a stream's head with its first token, so until a
	 * byte comes the request may be waiting in its own queue (occupancy.c
	 * lets only one do so). A plain answer's head comes at its end, which
	 * says nothing of when it started: not counted.
	 */
	if (exchange_upstream_streams(x)) {
		x->counts_unstarted = true;
		u->unstarted++;
	}
	sl_occupancy_taken(u);
}

/* The first bytes of the answer came: llama-server has started it. */
void exchange_upstream_started(struct exchange *x)
{
	if (!x->counts_unstarted)
		return;
	x->counts_unstarted = false;
	x->upstream->unstarted--;
}

/* The method upstream: the endpoint's own (a HEAD goes as a GET). */
static const char *upstream_method(const struct exchange *x)
{
	if (x->ep->method == HTTP_DELETE)
		return "DELETE";
	return x->has_body ? "POST" : "GET";
}

/* A body relayed as written goes with its own type; sluice's are JSON. */
static const char *upstream_content_type(const struct exchange *x)
{
	return x->content_type ? x->content_type : "application/json";
}

/*
 * The native client's request: the same header lines libcurl is given
 * below, as one string.
 */
static int start_native(struct exchange *x, struct sl_upstream *u)
{
	const struct sl_config *cfg = x->relay->cfg;
	struct sl_h1_request *r = &x->h1;
	free(x->h1_headers);
	static const char type_name[] = "Content-Type: ";
	static const char id_name[] = "X-Request-Id: ";
	static const char encoding[] = "Accept-Encoding: ";
	static const char bearer[] = "Authorization: Bearer ";
	static const char parent_name[] = "traceparent: ";
	static const char state_name[] = "tracestate: ";
	const char *type = upstream_content_type(x);
	char parent[SL_TRACEPARENT_LEN + 1];
	bool traced = sl_trace_traceparent(x->req, parent);
	const char *state = traced ? sl_trace_tracestate(x->req) : NULL;
	size_t size = sizeof(type_name) + strlen(type) + 2 + sizeof(id_name) +
	              strlen(x->id) + 2;
	if (x->accept_encoding)
		size += sizeof(encoding) + strlen(x->accept_encoding) + 2;
	if (u->api_key)
		size += sizeof(bearer) + strlen(u->api_key) + 2;
	if (x->passed_request)
		size += strlen(x->passed_request);
	if (traced)
		size += sizeof(parent_name) + SL_TRACEPARENT_LEN + 2;
	if (state)
		size += sizeof(state_name) + strlen(state) + 2;
	struct sl_join j = {.p = sl_xmalloc(size), .cap = size};
	sl_join_str(&j, type_name);
	sl_join_str(&j, type);
	sl_join_str(&j, "\r\n");
	sl_join_str(&j, id_name);
	sl_join_str(&j, x->id);
	sl_join_str(&j, "\r\n");
	if (x->accept_encoding) {
		sl_join_str(&j, encoding);
		sl_join_str(&j, x->accept_encoding);
		sl_join_str(&j, "\r\n");
	}
	if (u->api_key) {
		sl_join_str(&j, bearer);
		sl_join_str(&j, u->api_key);
		sl_join_str(&j, "\r\n");
	}
	if (traced) {
		sl_join_str(&j, parent_name);
		sl_join_str(&j, parent);
		sl_join_str(&j, "\r\n");
	}
	if (state) {
		sl_join_str(&j, state_name);
		sl_join_str(&j, state);
		sl_join_str(&j, "\r\n");
	}
	if (x->passed_request)
		sl_join_str(&j, x->passed_request);
	x->h1_headers = j.p;
	r->method = upstream_method(x);
	r->target = x->target;
	r->headers = x->h1_headers;
	r->body = x->body;
	r->body_len = x->body_len;
	r->has_body = x->has_body;
	r->connect_timeout_ms = cfg->upstream_connect_timeout_ms;
	r->on_header = on_native_header;
	r->on_body = exchange_on_native_body;
	r->on_read_end = exchange_on_native_read_end;
	r->on_done = exchange_on_native_done;
	r->data = x;
	/*
	 * The pool's bound: the slots and the spares, less the spare that
	 * the health check takes (libcurl keeps that connection open between
	 * checks, outside this pool), so that both together stay within
	 * SL_UPSTREAM_SPARE_CONNS of the slots, as through libcurl alone.
	 * The watches open add theirs, which they hold for long.
	 */
	int rc = sl_h1_start(x->relay->h1, r, u->request_url,
	                     u->total_slots + SL_UPSTREAM_SPARE_CONNS - 1 +
	                         x->relay->watches);
	if (rc == 0)
		uv_timer_start(&x->timer, exchange_on_timer,
		               exchange_first_byte_ms(x, NULL), 0);
	return rc;
}

/* Builds and starts the upstream transfer. Returns 0 or an error. */
static int start_transfer(struct exchange *x, struct sl_upstream *u)
{
	const struct sl_config *cfg = x->relay->cfg;
	/* The next tie goes to the upstream after this one. */
	*x->relay->next_upstream = u->index + 1;
	x->transfer.on_done = exchange_on_transfer_done;
	x->transfer.data = x;
	exchange_upstream_take(x, u);
	exchange_trace_dispatched(x, upstream_method(x));
	struct sl_join upstream = SL_JOIN(x->req->info.upstream);
	sl_join_str(&upstream, u->url);
	/* A URL the native client cannot take (https) goes to libcurl. */
	x->native = cfg->upstream_client == SL_UPSTREAM_CLIENT_NATIVE;
	if (x->native && start_native(x, u) == 0)
		return 0;
	x->native = false;
	CURL *e = sl_curl_easy(x->relay->curl);
	if (!e)
		return SL_ECURL;
	x->transfer.easy = e;

	char *url = sl_xconcat(u->request_url, x->target);
	curl_easy_setopt(e, CURLOPT_URL, url);
	free(url);
	sl_curl_common_options(e);
	if (x->ep->method == HTTP_DELETE)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
	x->headers = curl_slist_append(x->headers, "Expect:");
	char *type = sl_xconcat("Content-Type: ", upstream_content_type(x));
	x->headers = curl_slist_append(x->headers, type);
	free(type);
	char *id = sl_xconcat("X-Request-Id: ", x->id);
	x->headers = curl_slist_append(x->headers, id);
	free(id);
	if (x->accept_encoding) {
		/* Relayed as sent: libcurl does not decode it (no
		 * CURLOPT_ACCEPT_ENCODING), so Content-Encoding passes too. */
		char *ae = sl_xconcat("Accept-Encoding: ", x->accept_encoding);
		x->headers = curl_slist_append(x->headers, ae);
		free(ae);
	}
	if (u->api_key) {
		char *auth = sl_xconcat("Authorization: Bearer ", u->api_key);
		x->headers = curl_slist_append(x->headers, auth);
		free(auth);
	}
	/* The trace (ops/trace.h): this call's span is llama-server's parent.
	 */
	char parent[SL_TRACEPARENT_LEN + 1];
	if (sl_trace_traceparent(x->req, parent)) {
		char *line = sl_xconcat("traceparent: ", parent);
		x->headers = curl_slist_append(x->headers, line);
		free(line);
		const char *state = sl_trace_tracestate(x->req);
		if (state) {
			line = sl_xconcat("tracestate: ", state);
			x->headers = curl_slist_append(x->headers, line);
			free(line);
		}
	}
	/* The passed lines, one list entry each, without their CRLF. */
	for (const char *p = x->passed_request; p && *p;) {
		const char *eol = strstr(p, "\r\n");
		char *line = sl_xasprintf("%.*s", (int)(eol - p), p);
		x->headers = curl_slist_append(x->headers, line);
		free(line);
		p = eol + 2;
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
	if (x->has_body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
		                 (curl_off_t)x->body_len);
	}
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
	                 (long)cfg->upstream_connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, exchange_on_upstream_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION,
	                 exchange_on_upstream_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->error);

	uv_timer_start(&x->timer, exchange_on_timer,
	               exchange_first_byte_ms(x, NULL), 0);
	return sl_curl_start(x->relay->curl, &x->transfer);
}

/* Starts at once, or answers 502 and lets the exchange go. */
void exchange_start_or_fail(struct exchange *x, struct sl_upstream *u)
{
	if (u && start_transfer(x, u) == 0)
		return;
	x->transfer.active = false;
	x->h1.active = false;
	exchange_respond_error(x, 502, "server_error",
	                       "cannot start the upstream request");
	exchange_release(x);
}

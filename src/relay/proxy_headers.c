/*
 * proxy_headers.c: header fields across the exchange.
 *
 * Which of the client's headers go upstream (per endpoint: the ones
 * llama-server reads), which of the upstream's response headers come back
 * (never the hop-by-hop ones, nor those sluice writes itself), sluice's
 * own (the queue's and Server-Timing) for each head it writes, and the
 * start of the client's response once the upstream's head is in, when
 * the exchange learns whether it relays a body or reads events.
 */
#include "proxy_impl.h"

#include "sluice/base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* RFC 9110, 5.6.2: the characters of a token, such as a field name. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool name_is(const char *name, size_t len, const char *literal)
{
	return strlen(literal) == len && strncasecmp(name, literal, len) == 0;
}

static bool name_has_prefix(const char *name, size_t len, const char *prefix)
{
	size_t n = strlen(prefix);
	return len >= n && strncasecmp(name, prefix, n) == 0;
}

/* The prefix of the headers /cors-proxy sends its target, less it. */
#define PROXY_HEADER_PREFIX "X-Llama-Server-Proxy-Header-"

/*
 * Whether the client's header `name` goes upstream on an endpoint that
 * passes `pass` (enum sl_pass); `stream`: the client asked for a stream.
 */
static bool request_header_passes(unsigned pass, const char *name, bool stream)
{
	size_t len = strlen(name);
	if ((pass & SL_PASS_CONVERSATION) && stream &&
	    name_is(name, len, "X-Conversation-Id"))
		return true;
	if ((pass & SL_PASS_TOOL) && (name_is(name, len, "X-Tool-Cwd") ||
	                              name_is(name, len, "X-Tool-Runtime") ||
	                              name_is(name, len, "X-Resp-Type")))
		return true;
	/* A bare prefix names no header: llama-server skips it too. */
	return (pass & SL_PASS_PROXY_HEADERS) &&
	       len > sizeof(PROXY_HEADER_PREFIX) - 1 &&
	       name_has_prefix(name, len, PROXY_HEADER_PREFIX);
}

/*
 * The client's header lines that go upstream ("Name: value\r\n" each, as
 * the client wrote them; its HTTP parser checked them), or NULL for none.
 * Bounded by --max-header-size. Malloc'd.
 */
char *exchange_passed_request_headers(const struct sl_endpoint *ep,
                                      const struct sl_http_request *req,
                                      bool stream)
{
	if (!ep->pass)
		return NULL;
	size_t size = 1;
	for (unsigned i = 0; i < req->n_headers; i++) {
		const struct sl_http_header *h = &req->headers[i];
		if (request_header_passes(ep->pass, h->name, stream))
			size += strlen(h->name) + 2 + h->value_len + 2;
	}
	if (size == 1)
		return NULL;
	struct sl_join j = {.p = sl_xmalloc(size), .cap = size};
	for (unsigned i = 0; i < req->n_headers; i++) {
		const struct sl_http_header *h = &req->headers[i];
		if (!request_header_passes(ep->pass, h->name, stream))
			continue;
		sl_join_str(&j, h->name);
		sl_join_str(&j, ": ");
		sl_join_mem(&j, h->value, h->value_len);
		sl_join_str(&j, "\r\n");
	}
	return j.p;
}

/*
 * Whether a field is not passed on: hop-by-hop (RFC 9110, 7.6.1: they
 * describe the upstream connection, not the answer), or one sluice writes
 * itself, on this answer or on others, so that a client never reads two of
 * one: its own framing, Server, Date, X-Request-Id, CORS, the queue's
 * (X-Priority, X-Queue-Ms, X-Batch-Size, Server-Timing), refusals'
 * (Retry-After, retry-after-ms) and a key's limits (keys.c); for a stream,
 * the cache headers it adds (header_withheld). Names compare without case,
 * as HTTP's do. Vary is a list that sluice's "Vary: Origin" adds to: the
 * upstream's goes beside it (the web UI's assets vary on the
 * Accept-Encoding passed on).
 */
static bool header_always_withheld(const char *name, size_t len)
{
#define NAME(s)                                                                \
	{                                                                      \
		s, sizeof(s) - 1                                               \
	}
	/* With their lengths: this runs for every header line. */
	static const struct {
		const char *name;
		size_t len;
	} withheld[] = {
	    NAME("Connection"),
	    NAME("Keep-Alive"),
	    NAME("TE"),
	    NAME("Trailer"),
	    NAME("Transfer-Encoding"),
	    NAME("Upgrade"),
	    NAME("Server"),
	    NAME("Date"),
	    NAME("Content-Length"),
	    NAME("Content-Type"),
	    NAME("X-Request-Id"),
	    NAME("X-Priority"),
	    NAME("X-Queue-Ms"),
	    NAME("X-Batch-Size"),
	    NAME("Server-Timing"),
	    NAME("Retry-After"),
	    NAME("retry-after-ms"),
	    NAME("x-ratelimit-limit-requests"),
	    NAME("x-ratelimit-remaining-requests"),
	    NAME("x-ratelimit-reset-requests"),
	    NAME("x-ratelimit-limit-tokens"),
	    NAME("x-ratelimit-remaining-tokens"),
	    NAME("x-ratelimit-reset-tokens"),
	};
#undef NAME
	for (size_t i = 0; i < SL_ARRAY_SIZE(withheld); i++)
		if (withheld[i].len == len &&
		    strncasecmp(name, withheld[i].name, len) == 0)
			return true;
	return name_has_prefix(name, len, "Proxy-") ||
	       name_has_prefix(name, len, "Access-Control-");
}

/* The rest, known once the whole head is in: the mode and Connection. */
static bool header_withheld(const struct exchange *x, const char *name,
                            size_t len)
{
	if (x->mode == MODE_SSE && (name_is(name, len, "Cache-Control") ||
	                            name_is(name, len, "X-Accel-Buffering")))
		return true;
	/* The names the upstream's Connection header lists. */
	const char *p = x->connection;
	while (*p) {
		while (*p == ',' || *p == ' ' || *p == '\t')
			p++;
		size_t n = strcspn(p, ", \t");
		if (n && n == len && strncasecmp(p, name, len) == 0)
			return true;
		p += n;
	}
	return false;
}

/*
 * CURLOPT_HEADERFUNCTION: one line of the upstream's head. The lines worth
 * keeping are stored; which of them reach the client is decided once the
 * whole head is in (exchange_start_response), since a Connection header may
 * come last. A line that is malformed, overlong or holds bytes a head may not
 * carry is dropped, never the answer: the upstream's headers are extras.
 */
size_t exchange_on_upstream_header(char *line, size_t size, size_t n, void *arg)
{
	struct exchange *x = arg;
	size_t len = size * n;
	if (x->mode != MODE_WAITING)
		return len; /* trailers after a chunked body */
	if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
		/* A new head (after a 1xx): only the last one counts. */
		x->passed_len = 0;
		x->connection[0] = '\0';
		x->connection_overflow = false;
		return len;
	}
	size_t end = len;
	while (end && (line[end - 1] == '\r' || line[end - 1] == '\n'))
		end--;
	const char *colon = memchr(line, ':', end);
	if (!colon || colon == line)
		return len; /* the blank line, a fold, or junk */
	size_t name_len = (size_t)(colon - line);
	for (size_t i = 0; i < name_len; i++)
		if (!is_tchar((unsigned char)line[i]))
			return len;
	bool connection = name_is(line, name_len, "Connection");
	/* Most of llama-server's own lines: not even read further. */
	if (!connection && header_always_withheld(line, name_len))
		return len;
	const char *v = colon + 1;
	while (v < line + end && (*v == ' ' || *v == '\t'))
		v++;
	size_t v_len = (size_t)(line + end - v);
	while (v_len && (v[v_len - 1] == ' ' || v[v_len - 1] == '\t'))
		v_len--;
	if (v_len > SL_PROXY_PASSED_VALUE_MAX)
		return len;
	char value[SL_PROXY_PASSED_VALUE_MAX + 1];
	memcpy(value, v, v_len);
	value[v_len] = '\0';
	if (!sl_http_field_value_ok(value, SL_PROXY_PASSED_VALUE_MAX))
		return len;
	if (connection) {
		size_t have = strlen(x->connection);
		if (have + 1 + v_len > SL_PROXY_CONNECTION_MAX) {
			sl_debug(
			    "%s: upstream's Connection list over %u bytes: "
			    "none of its headers is passed on",
			    x->id, SL_PROXY_CONNECTION_MAX);
			x->connection_overflow = true;
			return len;
		}
		char *out = x->connection + have;
		if (have)
			*out++ = ',';
		memcpy(out, value, v_len + 1);
		return len;
	}
	size_t need = name_len + 2 + v_len + 2;
	if (x->passed_len + need > SL_PROXY_PASSED_HEADERS_MAX) {
		sl_debug("%s: upstream header %.*s dropped: over %u bytes of "
		         "passed headers",
		         x->id, (int)name_len, line,
		         SL_PROXY_PASSED_HEADERS_MAX);
		return len;
	}
	/* Grown line by line: an answer holds what it passes, no more. */
	x->passed = sl_xrealloc(x->passed, x->passed_len + need + 1);
	char *out = x->passed + x->passed_len;
	memcpy(out, line, name_len);
	memcpy(out + name_len, ": ", 2);
	memcpy(out + name_len + 2, value, v_len);
	memcpy(out + name_len + 2 + v_len, "\r\n", 2);
	x->passed_len += need;
	x->passed[x->passed_len] = '\0';
	return len;
}

/*
 * The head's extra lines for the client: the upstream's passed headers
 * (now that the mode is known), then `own`. Malloc'd.
 */
static char *response_extras(const struct exchange *x, const char *own)
{
	size_t cap = x->passed_len + strlen(own) + 1;
	char *out = sl_xmalloc(cap);
	size_t k = 0;
	size_t passed = x->connection_overflow ? 0 : x->passed_len;
	for (size_t i = 0; i < passed;) {
		const char *line = x->passed + i;
		const char *eol = strstr(line, "\r\n");
		size_t line_len = (size_t)(eol - line) + 2;
		size_t name_len = (size_t)(strchr(line, ':') - line);
		if (!header_withheld(x, line, name_len)) {
			memcpy(out + k, line, line_len);
			k += line_len;
		}
		i += line_len;
	}
	memcpy(out + k, own, strlen(own) + 1);
	return out;
}

/* Nanoseconds as milliseconds with one decimal: "45.6". */
static void join_ms(struct sl_join *j, uint64_t ns)
{
	uint64_t tenths = (ns + 50000) / 100000;
	sl_join_u64(j, tenths / 10);
	sl_join_str(j, ".");
	sl_join_u64(j, tenths % 10);
}

/*
 * sluice's own lines for the head it writes now: the queue's
 * (sched_headers), then Server-Timing with what is known at this moment
 * (src/relay/README.md, Headers). queue: the whole milliseconds of
 * X-Queue-Ms, once the request left the queue; upstream: from the
 * dispatch until now, when the head is written; ttft: from the dispatch
 * until the first token event, where one was read before the head. An
 * answer that neither waited in the queue nor went upstream has none.
 * Bounded by own_headers; called once per head, so no per-event cost.
 */
const char *exchange_own_headers(struct exchange *x)
{
	struct sl_join j = SL_JOIN(x->own_headers);
	sl_join_str(&j, x->sched_headers);
	bool queued = x->queue_ms >= 0, sent = x->upstream != NULL;
	bool predicted = x->has_prediction;
	if (!queued && !sent && !predicted)
		return x->own_headers;
	sl_join_str(&j, "Server-Timing: ");
	if (queued) {
		sl_join_str(&j, "queue;dur=");
		sl_join_u64(&j, (uint64_t)x->queue_ms);
	}
	if (sent) {
		sl_join_str(&j, queued ? ", upstream;dur=" : "upstream;dur=");
		join_ms(&j, sl_now_ns() - x->dispatched_ns);
	}
	if (sent && x->first_token_ns &&
	    x->first_token_ns >= x->dispatched_ns) {
		sl_join_str(&j, ", ttft;dur=");
		join_ms(&j, x->first_token_ns - x->dispatched_ns);
	}
	if (predicted) {
		/* The TTFT predicted at its arrival (proxy_slo.c). */
		sl_join_str(&j, queued || sent ? ", predicted;dur="
		                               : "predicted;dur=");
		join_ms(&j,
		        (uint64_t)(SL_MAX(x->predicted.ttft_ms, 0.0) * 1e6));
	}
	sl_join_str(&j, "\r\n");
	return x->own_headers;
}

/*
 * sl_http_trailers_cb of a stream relayed event by event, for a client that
 * sent "TE: trailers": the Server-Timing its head could not carry
 * (src/relay/README.md, Headers). ttft: from the request's first byte at
 * sluice to its first token event, which sluice writes to the client in
 * the loop turn that reads it; total: from the same first byte to now,
 * when the body's end is written. A stream that ended before any token
 * (an error event) says total alone. Once per stream, at its end.
 */
static size_t exchange_trailers(struct sl_http_request *req, char *out,
                                size_t size)
{
	const struct exchange *x = req->handler_data;
	struct sl_join j = {.p = out, .cap = size};
	uint64_t now = sl_now_ns();
	sl_join_str(&j, "Server-Timing: ");
	if (x && x->first_token_ns && x->first_token_ns >= req->start_ns) {
		sl_join_str(&j, "ttft;dur=");
		join_ms(&j, x->first_token_ns - req->start_ns);
		sl_join_str(&j, ", ");
	}
	sl_join_str(&j, "total;dur=");
	join_ms(&j, now >= req->start_ns ? now - req->start_ns : 0);
	sl_join_str(&j, "\r\n");
	return j.len;
}

/*
 * The first byte: answer the client's head in the right mode. Returns
 * false when the upstream's head cannot be relayed (the client got 502).
 */
bool exchange_start_response(struct exchange *x)
{
	const struct sl_config *cfg = x->relay->cfg;
	long status = exchange_upstream_status(x);
	char *ctype = NULL;
	curl_off_t length = -1;
	if (x->native) {
		ctype = x->h1.content_type;
		length = x->h1.content_length;
	} else {
		curl_easy_getinfo(x->transfer.easy, CURLINFO_CONTENT_TYPE,
		                  &ctype);
		curl_easy_getinfo(x->transfer.easy,
		                  CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
	}
	/* Both go into the client's head: only sane values do. */
	if (status < 200 || status > 599) {
		char message[96];
		snprintf(message, sizeof(message),
		         "upstream answered with status %ld", status);
		exchange_fail(x, 502, message);
		return false;
	}
	if (ctype && !sl_http_field_value_ok(ctype, SL_HTTP_CONTENT_TYPE_MAX)) {
		exchange_fail(x, 502,
		              "upstream answered with an invalid or overlong "
		              "Content-Type");
		return false;
	}
	/* From now on the upstream may not fall silent for long. */
	uv_timer_start(&x->timer, exchange_on_timer,
	               cfg->upstream_idle_timeout_ms, 0);
	if ((x->stream || x->assemble) && status == 200 && ctype &&
	    strncmp(ctype, "text/event-stream", 17) == 0) {
		x->mode = MODE_SSE;
		sl_sse_init(&x->sse, SL_SSE_MAX_EVENT);
		if (x->assemble)
			return true; /* answered once the stream is complete */
		x->head_sent = true;
		char own[sizeof(x->own_headers) + 64];
		snprintf(own, sizeof(own),
		         "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
		         "%s",
		         exchange_own_headers(x));
		char *extra = response_extras(x, own);
		/* Used only where the client sent "TE: trailers" (http.h). */
		x->req->trailer = "Server-Timing";
		x->req->on_trailers = exchange_trailers;
		sl_http_stream_start(x->req, 200, "text/event-stream", extra,
		                     -1);
		free(extra);
		return true;
	}
	x->mode = MODE_BODY;
	x->head_sent = true;
	/*
	 * A generation's answer is kept whole for its counts; that of another
	 * slot user (embeddings, rerank) only in part, for the usage that
	 * leads its vectors or results.
	 */
	x->keep = status == 200 &&
	          (x->ep->stream_end != SL_END_NONE || x->ep->scheduled);
	x->kept.prefix = x->ep->stream_end == SL_END_NONE;
	if (status >= 400)
		x->req->info.outcome = "failed"; /* llama-server said no */
	char *extra = response_extras(x, exchange_own_headers(x));
	sl_http_stream_start(x->req, (int)status,
	                     ctype ? ctype : "application/octet-stream", extra,
	                     length);
	free(extra);
	return true;
}

/*
 * Whether the upstream's 5xx, before any byte of it went to the client,
 * is kept from the client so that the request is sent again. Only a
 * queued generation request is, since sluice owns its body and its
 * place; one for a named upstream (?upstream=) may go to no other.
 */
bool exchange_hold_5xx(struct exchange *x)
{
	long status = exchange_upstream_status(x);
	if (status < 500 || status > 599 || !x->req || x->head_sent ||
	    x->pinned || !x->ep->scheduled ||
	    x->retries >= x->relay->cfg->retries)
		return false;
	x->failed_status = status;
	return true;
}

/* http.c: a whole-answer HTTP call on sl_h1 (see http.h). */
#include "http.h"

#include "sluice/base/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool hb_url_ok(const char *url, char *err, size_t errlen)
{
	if (sl_h1_supports(url))
		return true;
	if (!strncmp(url, "https://", 8))
		snprintf(err, errlen,
		         "%s: sluice-bench speaks plain HTTP/1.1 (http://); "
		         "measure the gateway behind its TLS terminator",
		         url);
	else
		snprintf(err, errlen, "%s: expected http://HOST[:PORT][/PATH]",
		         url);
	return false;
}

static void finish(struct hb_call *c, int status, const char *err)
{
	c->busy = false;
	uv_timer_stop(&c->timer);
	c->cb(c, status, err);
}

static int on_body(struct sl_h1_request *r, const char *data, size_t len)
{
	struct hb_call *c = r->data;
	if (c->len + len > HB_BODY_MAX) {
		snprintf(c->error, sizeof(c->error),
		         "the answer is over %u bytes", HB_BODY_MAX);
		return SL_H1_STOP;
	}
	c->body = sl_xrealloc(c->body, c->len + len + 1);
	memcpy(c->body + c->len, data, len);
	c->len += len;
	c->body[c->len] = '\0';
	return SL_H1_GO_ON;
}

static void on_done(struct sl_h1_request *r, enum sl_h1_result result)
{
	struct hb_call *c = r->data;
	if (result == SL_H1_OK) {
		finish(c, r->status, NULL);
		return;
	}
	if (!c->error[0])
		snprintf(c->error, sizeof(c->error), "%s",
		         r->error[0] ? r->error : sl_h1_result_name(result));
	finish(c, 0, c->error);
}

static void on_deadline(uv_timer_t *t)
{
	struct hb_call *c = t->data;
	sl_h1_abort(&c->r);
	snprintf(c->error, sizeof(c->error),
	         "no answer within the time "
	         "allowed");
	finish(c, 0, c->error);
}

void hb_call_init(struct hb_call *c, struct sl_h1 *h1, uv_loop_t *loop)
{
	memset(c, 0, sizeof(*c));
	c->h1 = h1;
	uv_timer_init(loop, &c->timer);
	c->timer.data = c;
}

static void clear(struct hb_call *c)
{
	sl_h1_request_free(&c->r);
	free(c->headers);
	free(c->request_body);
	free(c->target);
	free(c->body);
	c->headers = c->request_body = c->target = c->body = NULL;
	c->len = 0;
}

int hb_call_start(struct hb_call *c, const char *method, const char *base_url,
                  const char *target, const char *key, const char *body,
                  uint64_t timeout_ms, hb_call_cb cb)
{
	if (c->busy)
		return -1;
	clear(c);
	c->error[0] = '\0';
	c->headers =
	    sl_xasprintf("%s%s%s%s", key ? "Authorization: Bearer " : "",
	                 key ? key : "", key ? "\r\n" : "",
	                 body ? "Content-Type: application/json\r\n" : "");
	c->target = sl_xstrdup(target);
	memset(&c->r, 0, sizeof(c->r));
	c->r.method = method;
	c->r.target = c->target;
	c->r.headers = c->headers;
	if (body) {
		c->request_body = sl_xstrdup(body);
		c->r.body = c->request_body;
		c->r.body_len = strlen(body);
		c->r.has_body = true;
	}
	c->r.connect_timeout_ms = HB_CONNECT_TIMEOUT_MS;
	c->r.on_body = on_body;
	c->r.on_done = on_done;
	c->r.data = c;
	c->cb = cb;
	if (sl_h1_start(c->h1, &c->r, base_url, HB_MAX_CONNS) != 0)
		return -1;
	c->busy = true;
	uv_timer_start(&c->timer, on_deadline, timeout_ms, 0);
	return 0;
}

void hb_call_abort(struct hb_call *c)
{
	if (!c->busy)
		return;
	sl_h1_abort(&c->r);
	uv_timer_stop(&c->timer);
	c->busy = false;
}

static void on_timer_closed(uv_handle_t *h)
{
	struct hb_call *c = h->data;
	clear(c);
	if (c->on_closed)
		c->on_closed(c);
}

void hb_call_close(struct hb_call *c, void (*on_closed)(struct hb_call *))
{
	hb_call_abort(c);
	c->on_closed = on_closed;
	uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

/* fanout.c: one GET to every upstream, the answers in one array. */
#include "sluice/fleet/fanout.h"

#include "sluice/base/common.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct part {
	struct sl_get get;
	struct sl_fanout *f;
	char *name;
	long status; /* 0: no answer (error says why) */
	char error[CURL_ERROR_SIZE];
	bool done;
};

struct sl_fanout {
	struct sl_curl *curl;
	struct part *parts;
	unsigned n, pending;
	sl_fanout_cb cb;
	void *data;
};

static void on_part_done(struct sl_get *g, long status, const char *err)
{
	struct part *p = sl_container_of(g, struct part, get);
	p->status = status;
	if (err)
		snprintf(p->error, sizeof(p->error), "%s", err);
	p->done = true;
	/* The owner may free the fanout, this part included: nothing after. */
	if (--p->f->pending == 0)
		p->f->cb(p->f, p->f->data);
}

struct sl_fanout *sl_fanout_start(struct sl_curl *curl,
                                  struct sl_upstream *const *upstreams,
                                  unsigned n, const char *target,
                                  long timeout_ms, sl_fanout_cb cb, void *data)
{
	struct sl_fanout *f = sl_xcalloc(1, sizeof(*f));
	f->curl = curl;
	f->parts = sl_xcalloc(n ? n : 1, sizeof(*f->parts));
	f->n = n;
	f->cb = cb;
	f->data = data;
	/* Counted first: a part cannot finish inside sl_get_start. */
	f->pending = n;
	for (unsigned i = 0; i < n; i++) {
		struct part *p = &f->parts[i];
		const struct sl_upstream *u = upstreams[i];
		p->f = f;
		p->name = sl_xstrdup(u->name);
		char *url = sl_xasprintf("%s%s", u->request_url, target);
		int rc = sl_get_start(curl, &p->get, url, u->api_key,
		                      timeout_ms, on_part_done);
		free(url);
		if (rc != 0) {
			snprintf(p->error, sizeof(p->error),
			         "cannot start the request");
			p->done = true;
			f->pending--;
		}
	}
	return f;
}

unsigned sl_fanout_pending(const struct sl_fanout *f)
{
	return f->pending;
}

unsigned sl_fanout_answered(const struct sl_fanout *f)
{
	unsigned n = 0;
	for (unsigned i = 0; i < f->n; i++)
		n += f->parts[i].status != 0;
	return n;
}

/* Appends `s` to the growing text *buf of *len bytes. */
static void append(char **buf, size_t *len, const char *s, size_t n)
{
	*buf = sl_xrealloc(*buf, *len + n + 1);
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = '\0';
}

/* Appends v's JSON text and drops v; NULL (text not UTF-8) is null. */
static void append_json(char **buf, size_t *len, json_t *v)
{
	if (!v) {
		append(buf, len, "null", 4);
		return;
	}
	char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!text)
		abort(); /* only when memory is gone: sl_xmalloc's rule */
	append(buf, len, text, strlen(text));
	free(text);
	json_decref(v);
}

char *sl_fanout_json(const struct sl_fanout *f, size_t *len)
{
	char *buf = NULL;
	*len = 0;
	append(&buf, len, "[", 1);
	for (unsigned i = 0; i < f->n; i++) {
		const struct part *p = &f->parts[i];
		if (i)
			append(&buf, len, ",", 1);
		append(&buf, len, "{\"upstream\":", 12);
		append_json(&buf, len, json_string(p->name));
		char status[48];
		snprintf(status, sizeof(status), ",\"status\":%ld,\"body\":",
		         p->status ? p->status : 502);
		append(&buf, len, status, strlen(status));
		const char *body = p->get.body ? p->get.body : "";
		size_t body_len = p->get.body ? p->get.body_len : 0;
		json_t *check = NULL;
		if (p->status)
			check =
			    json_loadb(body, body_len, JSON_DECODE_ANY, NULL);
		if (check) {
			/* Valid JSON: spliced as written, numbers untouched. */
			append(&buf, len, body, body_len);
			json_decref(check);
		} else if (p->status) {
			append_json(&buf, len, json_stringn(body, body_len));
		} else {
			char message[CURL_ERROR_SIZE + 64];
			snprintf(message, sizeof(message),
			         "upstream did not answer: %s", p->error);
			append_json(&buf, len,
			            json_pack("{s:{s:i, s:s, s:s}}", "error",
			                      "code", 502, "message", message,
			                      "type", "server_error"));
		}
		append(&buf, len, "}", 1);
	}
	append(&buf, len, "]", 1);
	return buf;
}

void sl_fanout_free(struct sl_fanout *f)
{
	for (unsigned i = 0; i < f->n; i++) {
		sl_get_reset(f->curl, &f->parts[i].get);
		free(f->parts[i].name);
	}
	free(f->parts);
	free(f);
}

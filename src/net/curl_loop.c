/*
 * curl_loop.c: libcurl multi on libuv, after curl's docs/examples/multi-uv.c.
 */
#include "sluice/net/curl_loop.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"
#include "sluice/net/h1_client.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* One watched socket. */
struct curl_sock {
	uv_poll_t poll;
	curl_socket_t fd;
	struct sl_curl *curl;
};

static void curl_unref(struct sl_curl *c)
{
	if (--c->open_handles == 0 && c->on_closed)
		c->on_closed(c);
}

static void on_sock_closed(uv_handle_t *h)
{
	struct curl_sock *s = sl_container_of(h, struct curl_sock, poll);
	struct sl_curl *c = s->curl;
	free(s);
	curl_unref(c);
}

static void on_timer_closed(uv_handle_t *h)
{
	curl_unref(h->data);
}

/* Reports every finished transfer. */
static void drain_messages(struct sl_curl *c)
{
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(c->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		struct sl_transfer *t = NULL;
		CURL *easy = msg->easy_handle;
		CURLcode result = msg->data.result;
		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
		curl_multi_remove_handle(c->multi, easy);
		t->active = false;
		t->on_done(t, result);
	}
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	struct curl_sock *s = sl_container_of(p, struct curl_sock, poll);
	struct sl_curl *c = s->curl;
	int flags = 0;
	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	int running;
	/* May close `s` through on_socket(REMOVE): do not touch it after. */
	curl_multi_socket_action(c->multi, s->fd, flags, &running);
	drain_messages(c);
}

static void on_timeout(uv_timer_t *t)
{
	struct sl_curl *c = t->data;
	int running;
	curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	drain_messages(c);
}

/* CURLMOPT_TIMERFUNCTION: never calls libcurl itself. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct sl_curl *c = userp;
	(void)multi;
	if (timeout_ms < 0)
		uv_timer_stop(&c->timer);
	else
		uv_timer_start(&c->timer, on_timeout, (uint64_t)timeout_ms, 0);
	return 0;
}

/* CURLMOPT_SOCKETFUNCTION */
static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
                          void *socketp)
{
	struct sl_curl *c = userp;
	struct curl_sock *s = socketp;
	/* Which socket the transfer is on, and whether its request is out
	 * (see struct sl_transfer); a handle of no transfer has none. */
	struct sl_transfer *t = NULL;
	if (easy)
		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
	if (t && t->easy == easy) {
		if (what != CURL_POLL_REMOVE) {
			t->fd = fd;
			t->reading = what == CURL_POLL_IN;
		} else if (t->fd == fd) {
			t->fd = CURL_SOCKET_BAD;
			t->reading = false;
		}
	}

	if (what == CURL_POLL_REMOVE) {
		if (s) {
			/*
			 * Close now, not later: libcurl may reuse this fd
			 * number at once, and libuv refuses a second poll
			 * handle on an fd it still watches.
			 */
			uv_poll_stop(&s->poll);
			uv_close((uv_handle_t *)&s->poll, on_sock_closed);
			curl_multi_assign(c->multi, fd, NULL);
		}
		return 0;
	}
	if (!s) {
		s = sl_xcalloc(1, sizeof(*s));
		s->fd = fd;
		s->curl = c;
		if (uv_poll_init_socket(c->loop, &s->poll, fd) != 0) {
			free(s);
			return -1;
		}
		c->open_handles++;
		curl_multi_assign(c->multi, fd, s);
	}
	int events = 0;
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		events |= UV_READABLE;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		events |= UV_WRITABLE;
	uv_poll_start(&s->poll, events, on_poll);
	return 0;
}

int sl_curl_init(struct sl_curl *c, uv_loop_t *loop)
{
	memset(c, 0, sizeof(*c));
	c->loop = loop;
	c->multi = curl_multi_init();
	if (!c->multi)
		return SL_ECURL;
	uv_timer_init(loop, &c->timer);
	c->timer.data = c;
	c->open_handles = 1;
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
	return 0;
}

void sl_curl_close(struct sl_curl *c, void (*on_closed)(struct sl_curl *))
{
	c->on_closed = on_closed;
	while (c->pooled > 0)
		curl_easy_cleanup(c->pool[--c->pooled]);
	/* Closes cached connections, calling on_curl_socket(REMOVE). */
	curl_multi_cleanup(c->multi);
	c->multi = NULL;
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

/* CURLOPT_SOCKOPTFUNCTION: a connection's socket, before it connects. */
static int on_curl_sockopt(void *data, curl_socket_t fd, curlsocktype purpose)
{
	(void)data;
	if (purpose == CURLSOCKTYPE_IPCXN)
		sl_upstream_socket(fd);
	return CURL_SOCKOPT_OK;
}

void sl_curl_common_options(CURL *e)
{
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	/*
	 * Upstreams are reached directly: an http_proxy meant for the outside
	 * world must not carry llama-server traffic, or its API key.
	 */
	curl_easy_setopt(e, CURLOPT_PROXY, "");
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	/* Segments that fit a window reopened small (SL_UPSTREAM_MSS). */
	curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_curl_sockopt);
}

CURL *sl_curl_easy(struct sl_curl *c)
{
	return c->pooled > 0 ? c->pool[--c->pooled] : curl_easy_init();
}

void sl_curl_easy_done(struct sl_curl *c, CURL *easy)
{
	if (!easy)
		return;
	if (c->pooled == SL_CURL_EASY_POOL || !c->multi) {
		curl_easy_cleanup(easy);
		return;
	}
	curl_easy_reset(easy);
	c->pool[c->pooled++] = easy;
}

int sl_curl_start(struct sl_curl *c, struct sl_transfer *t)
{
	curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t);
	t->fd = CURL_SOCKET_BAD;
	t->reading = false;
	if (curl_multi_add_handle(c->multi, t->easy) != CURLM_OK)
		return SL_ECURL;
	t->active = true;
	return 0;
}

void sl_curl_abort(struct sl_curl *c, struct sl_transfer *t)
{
	if (!t->active)
		return;
	curl_multi_remove_handle(c->multi, t->easy);
	t->active = false;
}

bool sl_curl_sent(const struct sl_transfer *t)
{
	return t->active && t->fd != CURL_SOCKET_BAD && t->reading;
}

bool sl_curl_half_close(struct sl_transfer *t)
{
	if (!sl_curl_sent(t))
		return false;
	/* Read at the transfer's end (the connection is then closed, not
	 * kept): a half-closed one is of no use to the next transfer. */
	curl_easy_setopt(t->easy, CURLOPT_FORBID_REUSE, 1L);
	return shutdown(t->fd, SHUT_WR) == 0;
}

static size_t on_get_body(char *data, size_t size, size_t n, void *userp)
{
	struct sl_get *g = userp;
	size_t len = size * n;
	if (g->body_len + len > SL_GET_BODY_MAX)
		return 0; /* fails the transfer: CURLE_WRITE_ERROR */
	g->body = sl_xrealloc(g->body, g->body_len + len + 1);
	memcpy(g->body + g->body_len, data, len);
	g->body_len += len;
	g->body[g->body_len] = '\0';
	return len;
}

static void on_get_done(struct sl_transfer *t, CURLcode result)
{
	struct sl_get *g = t->data;
	long status = 0;
	if (result == CURLE_OK)
		curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
	else if (!g->error[0])
		snprintf(g->error, sizeof(g->error), "%s",
		         curl_easy_strerror(result));
	g->cb(g, status, result == CURLE_OK ? NULL : g->error);
}

bool sl_get_busy(const struct sl_get *g)
{
	return g->transfer.active;
}

int sl_get_start(struct sl_curl *c, struct sl_get *g, const char *url,
                 const char *api_key, long timeout_ms, sl_get_cb cb)
{
	if (!g->transfer.easy) {
		g->transfer.easy = curl_easy_init();
		if (!g->transfer.easy)
			return SL_ECURL;
	}
	CURL *e = g->transfer.easy;
	curl_easy_reset(e);
	curl_slist_free_all(g->headers);
	g->headers = NULL;
	if (api_key) {
		char *auth = sl_xasprintf("Authorization: Bearer %s", api_key);
		g->headers = curl_slist_append(NULL, auth);
		free(auth);
	}
	free(g->body);
	g->body = NULL;
	g->body_len = 0;
	g->error[0] = '\0';
	g->cb = cb;
	g->transfer.on_done = on_get_done;
	g->transfer.data = g;

	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, g->headers);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
	sl_curl_common_options(e);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_get_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, g);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, g->error);
	return sl_curl_start(c, &g->transfer);
}

void sl_get_reset(struct sl_curl *c, struct sl_get *g)
{
	sl_curl_abort(c, &g->transfer);
	if (g->transfer.easy)
		curl_easy_cleanup(g->transfer.easy);
	curl_slist_free_all(g->headers);
	free(g->body);
	memset(g, 0, sizeof(*g));
}

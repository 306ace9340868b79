/*
 * h1_client.c: the client's pools and their connections (see h1_client.h):
 * each upstream's addresses, resolved once; its queue of requests waiting
 * for a connection; each connection's life, from connecting through busy
 * and idle to draining and closing; and what becomes of a connection when
 * the exchange on it ends: kept, left for the peer to close or closed, its
 * request sent again on a fresh one when a kept connection was stale, and
 * only then on_done. One exchange on a connection (its request written,
 * its response read and parsed) is h1_exchange.c's; h1_client_impl.h
 * declares what the two share.
 */
#include "sluice/net/h1_client.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"

#include "h1_client_impl.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

const char *sl_h1_result_name(enum sl_h1_result r)
{
	switch (r) {
	case SL_H1_OK: return "ok";
	case SL_H1_REFUSED: return "refused";
	case SL_H1_UNRESOLVED: return "unresolved";
	case SL_H1_CONNECT_TIMEOUT: return "connect_timeout";
	case SL_H1_SEND_FAILED: return "send_failed";
	case SL_H1_NOTHING: return "nothing";
	case SL_H1_PARTIAL: return "partial";
	case SL_H1_BAD_RESPONSE: return "bad_response";
	case SL_H1_STOPPED: return "stopped";
	}
	return "?";
}

static void pool_kick(struct sl_h1_pool *p);

/* ---- requests ---- */

static void request_done(struct sl_h1_request *r, enum sl_h1_result result)
{
	r->active = false;
	r->paused = false;
	r->conn = NULL;
	r->on_done(r, result);
}

static void wait_push(struct sl_h1_pool *p, struct sl_h1_request *r, bool front)
{
	r->wait_next = NULL;
	if (!p->wait_head) {
		p->wait_head = p->wait_tail = r;
	} else if (front) {
		r->wait_next = p->wait_head;
		p->wait_head = r;
	} else {
		p->wait_tail->wait_next = r;
		p->wait_tail = r;
	}
}

static struct sl_h1_request *wait_pop(struct sl_h1_pool *p)
{
	struct sl_h1_request *r = p->wait_head;
	if (r) {
		p->wait_head = r->wait_next;
		if (!p->wait_head)
			p->wait_tail = NULL;
		r->wait_next = NULL;
	}
	return r;
}

static void wait_remove(struct sl_h1_pool *p, struct sl_h1_request *r)
{
	struct sl_h1_request *prev = NULL;
	for (struct sl_h1_request *w = p->wait_head; w; w = w->wait_next) {
		if (w != r) {
			prev = w;
			continue;
		}
		if (prev)
			prev->wait_next = r->wait_next;
		else
			p->wait_head = r->wait_next;
		if (p->wait_tail == r)
			p->wait_tail = prev;
		r->wait_next = NULL;
		return;
	}
}

/* ---- connections ---- */

static void on_conn_handle_closed(uv_handle_t *h)
{
	struct sl_h1_conn *c = h->data;
	if (--c->open_handles == 0) {
		free(c->line);
		free(c);
	}
}

static void list_remove(struct sl_h1_conn **list, struct sl_h1_conn *c)
{
	struct sl_h1_conn **at = list;
	while (*at && *at != c)
		at = &(*at)->idle_next;
	if (*at)
		*at = c->idle_next;
	c->idle_next = NULL;
}

/*
 * Closes the connection (its request, if any, was detached by the caller)
 * and frees its place in the pool. Waiting requests are the caller's to
 * move on (pool_kick), once it is done with the pool.
 */
void sl_h1_conn_close(struct sl_h1_conn *c)
{
	if (c->state == CONN_CLOSING)
		return;
	if (c->state == CONN_IDLE)
		list_remove(&c->pool->idle, c);
	if (c->state == CONN_DRAINING)
		list_remove(&c->pool->draining, c);
	else
		c->pool->conns--;
	c->state = CONN_CLOSING;
	uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
	uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

/* Takes the request off its connection. */
static struct sl_h1_request *conn_detach(struct sl_h1_conn *c)
{
	struct sl_h1_request *r = c->req;
	c->req = NULL;
	if (r)
		r->conn = NULL;
	return r;
}

static void on_idle_timer(uv_timer_t *t);

/* A response was read whole on a connection worth keeping. */
static void conn_idle(struct sl_h1_conn *c)
{
	struct sl_h1_pool *p = c->pool;
	c->state = CONN_IDLE;
	/* Read while idle, so that a peer's close is seen at once. */
	sl_h1_read_on(c, true);
	struct sl_h1_request *w = wait_pop(p);
	if (w) {
		sl_h1_conn_send(c, w);
		return;
	}
	c->idle_next = p->idle;
	p->idle = c;
	c->idle_since = uv_now(c->timer.loop);
	if (!c->idle_armed) {
		c->idle_armed = true;
		uv_timer_start(&c->timer, on_idle_timer, SL_H1_IDLE_MS, 0);
	}
}

/*
 * The peer closed a connection right after a chunked answer on it: it
 * does so after every one (llama-server 0.7.0 does, after each stream).
 * From now on such connections are not reused but left for the peer to
 * close, which spares each next request a write in vain and a resend.
 * A drained connection that the peer keeps open unlearns it
 * (on_idle_timer): an upstream restarted as another version, or a close
 * that was not about the answer after all.
 */
void sl_h1_learn_streams_close(struct sl_h1_pool *p)
{
	if (p->streams_close)
		return;
	p->streams_close = true;
	sl_debug("upstream %s closes its connection after each chunked "
	         "answer: those connections are left for it to close",
	         p->url);
}

/*
 * Whether the peer's close of `c`, seen now, came right after a chunked
 * answer: only such a close says that the peer closes after each. One
 * that comes a while later is its idle timeout, or its end (a restart).
 */
bool sl_h1_closed_after_stream(const struct sl_h1_conn *c)
{
	return c->after_chunked &&
	       uv_now(c->timer.loop) - c->answered_ms < SL_H1_STREAM_CLOSE_MS;
}

/* Leaves `c`, answered, for the peer to close; it no longer counts. */
static void conn_drain(struct sl_h1_conn *c)
{
	struct sl_h1_pool *p = c->pool;
	c->state = CONN_DRAINING;
	p->conns--;
	c->idle_next = p->draining;
	p->draining = c;
	sl_h1_read_on(c, true);
	/* Closed by sluice if the peer does not after all. */
	c->idle_armed = false;
	uv_timer_start(&c->timer, on_idle_timer, SL_H1_IDLE_MS, 0);
}

/* The request on `c` ended: the connection is kept or closed first. */
void sl_h1_conn_finish(struct sl_h1_conn *c, bool keep, bool chunked,
                       enum sl_h1_result result)
{
	struct sl_h1_pool *p = c->pool;
	struct sl_h1_request *r = conn_detach(c);
	if (keep && result == SL_H1_OK && !c->half_closed && !p->h1->closing) {
		c->served++;
		c->after_chunked = chunked;
		c->answered_ms = uv_now(c->timer.loop);
		if (chunked && p->streams_close) {
			conn_drain(c);
			pool_kick(p);
		} else {
			conn_idle(c);
		}
	} else {
		sl_h1_conn_close(c);
		pool_kick(p);
	}
	request_done(r, result);
}

static void conn_open(struct sl_h1_pool *p, struct sl_h1_request *r);

/*
 * The request on `c` was written to a kept connection that the peer had
 * closed (no byte of an answer came): nothing was processed, so it is
 * sent once more, on a fresh connection. Returns false when that does not
 * apply.
 */
bool sl_h1_resend_if_stale(struct sl_h1_conn *c)
{
	struct sl_h1_request *r = c->req;
	/* A half-closed one was given up on: it is not sent again. */
	if (!r || c->got_byte || c->served == 0 || r->resent || c->half_closed)
		return false;
	struct sl_h1_pool *p = c->pool;
	if (sl_h1_closed_after_stream(c))
		sl_h1_learn_streams_close(p);
	sl_debug("upstream %s: a kept connection was closed by the peer; "
	         "sending the request again on a new one",
	         p->url);
	r->resent = true;
	conn_detach(c);
	sl_h1_conn_close(c);
	if (p->conns < p->max_conns)
		conn_open(p, r);
	else
		wait_push(p, r, true);
	pool_kick(p);
	return true;
}

/* The connection failed; its request (if any) ends with `result`. */
void sl_h1_conn_fail(struct sl_h1_conn *c, enum sl_h1_result result,
                     const char *fmt, ...)
{
	struct sl_h1_pool *p = c->pool;
	struct sl_h1_request *r = conn_detach(c);
	sl_h1_conn_close(c);
	if (r) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->error, sizeof(r->error), fmt, ap);
		va_end(ap);
	}
	pool_kick(p);
	if (r)
		request_done(r, result);
}

/* ---- connecting ---- */

/*
 * A connection attempt failed. A name with several addresses (localhost:
 * ::1 and 127.0.0.1) gets each tried in turn, as libcurl does, before the
 * request fails; the pool then starts from the next one. Returns true when
 * the request went on to another address.
 */
static bool try_next_address(struct sl_h1_conn *c)
{
	struct sl_h1_pool *p = c->pool;
	struct sl_h1_request *r = c->req;
	if (!r || ++r->addr_tries >= p->n_addrs)
		return false;
	if (p->addr_at == c->addr)
		p->addr_at = (c->addr + 1) % p->n_addrs;
	sl_debug("upstream %s: connecting failed; trying its next address",
	         p->url);
	conn_detach(c);
	sl_h1_conn_close(c);
	conn_open(p, r);
	return true;
}

static void on_connect_timer(uv_timer_t *t)
{
	struct sl_h1_conn *c = t->data;
	struct sl_h1_request *r = c->req;
	if (try_next_address(c))
		return;
	if (c->deferred_error)
		sl_h1_conn_fail(
		    c, SL_H1_REFUSED, "cannot connect to upstream %s: %s",
		    c->pool->authority, uv_strerror(c->deferred_error));
	else
		sl_h1_conn_fail(c, SL_H1_CONNECT_TIMEOUT,
		                "no connection to upstream %s within %.1f s",
		                c->pool->authority,
		                r ? (double)r->connect_timeout_ms / 1000.0
		                  : 0.0);
}

static void on_idle_timer(uv_timer_t *t)
{
	struct sl_h1_conn *c = t->data;
	c->idle_armed = false;
	/* Busy again: conn_idle arms it anew once it is idle. */
	if (c->state == CONN_BUSY)
		return;
	if (c->state == CONN_IDLE) {
		uint64_t idle = uv_now(t->loop) - c->idle_since;
		if (idle < SL_H1_IDLE_MS) {
			c->idle_armed = true;
			uv_timer_start(t, on_idle_timer, SL_H1_IDLE_MS - idle,
			               0);
			return;
		}
	}
	if (c->state == CONN_DRAINING && c->pool->streams_close) {
		/*
		 * Left for the peer to close, and still open: it keeps its
		 * connections after chunked answers, so they are reused again
		 * (and peeked at again, to learn it anew if it changes).
		 * Otherwise each answer would open a connection and leave
		 * one open here, thousands under load.
		 */
		c->pool->streams_close = false;
		c->pool->streams_kept = 0;
		sl_debug("upstream %s kept a connection open after a chunked "
		         "answer: connections are reused after them again",
		         c->pool->url);
	}
	sl_debug("upstream %s: closing a connection idle for %u ms",
	         c->pool->url, SL_H1_IDLE_MS);
	sl_h1_conn_close(c);
}

static void on_connect(uv_connect_t *req, int status)
{
	struct sl_h1_conn *c = req->handle->data;
	if (status == UV_ECANCELED || c->state == CONN_CLOSING)
		return;
	uv_timer_stop(&c->timer);
	if (status < 0 && try_next_address(c))
		return;
	if (status < 0) {
		sl_h1_conn_fail(c, SL_H1_REFUSED,
		                "cannot connect to upstream %s: %s",
		                c->pool->authority, uv_strerror(status));
		return;
	}
	sl_h1_read_on(c, true);
	sl_h1_conn_send(c, c->req);
}

/* Opens a new connection for `r`; the pool has room for it. */
static void conn_open(struct sl_h1_pool *p, struct sl_h1_request *r)
{
	struct sl_h1_conn *c = sl_xcalloc(1, sizeof(*c));
	uv_loop_t *loop = p->h1->loop;
	c->pool = p;
	c->state = CONN_CONNECTING;
	c->req = r;
	r->conn = c;
	p->conns++;
	sl_debug("upstream %s: opening connection %u of at most %u", p->url,
	         p->conns, p->max_conns);
	c->addr = p->addr_at;
	const struct sockaddr_storage *to = &p->addrs[c->addr];
	/* The socket now, to set it up before it connects. */
	if (uv_tcp_init_ex(loop, &c->tcp, to->ss_family) == 0) {
		uv_os_fd_t fd;
		if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
			sl_upstream_socket(fd);
	} else {
		/* None (out of descriptors, say): connecting makes one, or
		 * fails and says why. */
		uv_tcp_init(loop, &c->tcp);
	}
	uv_timer_init(loop, &c->timer);
	c->tcp.data = c;
	c->timer.data = c;
	c->open_handles = 2;
	/* Tokens go out in small writes: Nagle would hold each one back. */
	uv_tcp_nodelay(&c->tcp, 1);
	int rc = uv_tcp_connect(&c->connect, &c->tcp,
	                        (const struct sockaddr *)to, on_connect);
	if (rc != 0) {
		/* Reported from the loop: sl_h1_start never calls on_done. */
		c->deferred_error = rc;
		uv_timer_start(&c->timer, on_connect_timer, 0, 0);
		return;
	}
	uv_timer_start(&c->timer, on_connect_timer, r->connect_timeout_ms, 0);
}

void sl_upstream_socket(uv_os_sock_t fd)
{
	int mss = SL_UPSTREAM_MSS;
	if (setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss)) != 0)
		sl_debug("upstream socket: cannot set TCP_MAXSEG to %d: %s",
		         mss, strerror(errno));
}

/* ---- pools ---- */

static void pool_free(struct sl_h1_pool *p);

static void on_resolved(uv_getaddrinfo_t *gai, int status,
                        struct addrinfo *res);

/* Moves waiting requests on: onto idle or new connections, or resolves. */
static void pool_kick(struct sl_h1_pool *p)
{
	if (!p->resolved) {
		if (p->wait_head && !p->resolving && !p->h1->closing) {
			struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
			p->resolving = true;
			int rc =
			    uv_getaddrinfo(p->h1->loop, &p->gai, on_resolved,
			                   p->name, p->port, &hints);
			if (rc != 0) {
				/* The requests wait for the next kick (a new
				 * request tries again) or their timeout. */
				p->resolving = false;
				sl_warn("upstream %s: cannot start resolving "
				        "%s: %s",
				        p->url, p->name, uv_strerror(rc));
			}
		}
		return;
	}
	while (p->wait_head) {
		if (p->idle) {
			struct sl_h1_conn *c = p->idle;
			p->idle = c->idle_next;
			c->idle_next = NULL;
			sl_h1_conn_send(c, wait_pop(p));
		} else if (p->conns < p->max_conns) {
			conn_open(p, wait_pop(p));
		} else {
			return;
		}
	}
}

static void on_resolved(uv_getaddrinfo_t *gai, int status, struct addrinfo *res)
{
	struct sl_h1_pool *p = sl_container_of(gai, struct sl_h1_pool, gai);
	p->resolving = false;
	if (p->h1->closing) {
		/* sl_h1_close() left this pool for its lookup to end. */
		uv_freeaddrinfo(res);
		struct sl_h1_pool **at = &p->h1->pools;
		while (*at != p)
			at = &(*at)->next;
		*at = p->next;
		pool_free(p);
		return;
	}
	p->n_addrs = p->addr_at = 0;
	for (struct addrinfo *a = status == 0 ? res : NULL;
	     a && p->n_addrs < SL_H1_ADDRS_MAX; a = a->ai_next) {
		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		memcpy(&p->addrs[p->n_addrs++], a->ai_addr, a->ai_addrlen);
	}
	p->resolved = p->n_addrs > 0;
	uv_freeaddrinfo(res);
	if (p->resolved) {
		pool_kick(p);
		return;
	}
	/*
	 * The name did not resolve: the requests waiting for it fail, and
	 * the next request tries again. The list is taken first, since an
	 * on_done may start a request (and a new lookup) for this pool.
	 */
	struct sl_h1_request *r = p->wait_head, *next;
	p->wait_head = p->wait_tail = NULL;
	for (; r; r = next) {
		next = r->wait_next;
		r->wait_next = NULL;
		snprintf(r->error, sizeof(r->error),
		         "cannot resolve upstream host %s: %s", p->name,
		         uv_strerror(status));
		request_done(r, SL_H1_UNRESOLVED);
	}
}

static void pool_free(struct sl_h1_pool *p)
{
	free(p->url);
	free(p->authority);
	free(p->name);
	free(p->prefix);
	free(p);
}

/*
 * Parses "http://host[:port][/path]" into p. Returns false for anything
 * else (userinfo, an empty host, a bad port).
 */
static bool parse_url(struct sl_h1_pool *p, const char *url)
{
	if (strncasecmp(url, "http://", 7) != 0)
		return false;
	const char *a = url + 7;
	size_t alen = strcspn(a, "/?#");
	if (alen == 0 || memchr(a, '@', alen))
		return false;
	const char *host = a, *port = NULL;
	size_t hlen = alen;
	if (a[0] == '[') {
		const char *close = memchr(a, ']', alen);
		if (!close)
			return false;
		host = a + 1;
		hlen = (size_t)(close - host);
		if (close + 1 < a + alen) {
			if (close[1] != ':')
				return false;
			port = close + 2;
		}
	} else {
		const char *colon = memchr(a, ':', alen);
		if (colon) {
			hlen = (size_t)(colon - a);
			port = colon + 1;
		}
	}
	size_t plen = port ? (size_t)(a + alen - port) : 0;
	if (hlen == 0 || (port && (plen == 0 || plen > 5)))
		return false;
	unsigned long n = 80;
	if (port) {
		n = 0;
		for (size_t i = 0; i < plen; i++) {
			if (port[i] < '0' || port[i] > '9')
				return false;
			n = n * 10 + (unsigned long)(port[i] - '0');
		}
		if (n == 0 || n > 65535)
			return false;
	}
	snprintf(p->port, sizeof(p->port), "%lu", n);
	p->name = sl_xmalloc(hlen + 1);
	memcpy(p->name, host, hlen);
	p->name[hlen] = '\0';
	p->authority = sl_xmalloc(alen + 1);
	memcpy(p->authority, a, alen);
	p->authority[alen] = '\0';
	p->prefix = sl_xstrdup(a + alen);
	/* A numeric address needs no resolving. */
	struct sockaddr_in *v4 = (struct sockaddr_in *)&p->addrs[0];
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&p->addrs[0];
	if (uv_ip4_addr(p->name, (int)n, v4) == 0 ||
	    uv_ip6_addr(p->name, (int)n, v6) == 0) {
		p->resolved = true;
		p->n_addrs = 1;
	}
	return true;
}

static bool pool_empty(const struct sl_h1_pool *p)
{
	return p->conns == 0 && !p->draining && !p->wait_head && !p->resolving;
}

/*
 * Drops the pools nobody uses any more (a managed llama-server gets a new
 * port at each restart, so its old URL's pool stays empty for good).
 * Called only where no pool pointer is held.
 */
static void pools_sweep(struct sl_h1 *h)
{
	struct sl_h1_pool **at = &h->pools;
	while (*at) {
		struct sl_h1_pool *p = *at;
		if (pool_empty(p)) {
			*at = p->next;
			pool_free(p);
		} else {
			at = &p->next;
		}
	}
}

static struct sl_h1_pool *pool_get(struct sl_h1 *h, const char *url)
{
	for (struct sl_h1_pool *p = h->pools; p; p = p->next)
		if (strcmp(p->url, url) == 0)
			return p;
	struct sl_h1_pool *p = sl_xcalloc(1, sizeof(*p));
	if (!parse_url(p, url)) {
		pool_free(p);
		return NULL;
	}
	pools_sweep(h);
	p->h1 = h;
	p->url = sl_xstrdup(url);
	p->next = h->pools;
	h->pools = p;
	return p;
}

/* ---- the interface ---- */

void sl_h1_init(struct sl_h1 *h, uv_loop_t *loop)
{
	memset(h, 0, sizeof(*h));
	h->loop = loop;
}

void sl_h1_close(struct sl_h1 *h)
{
	h->closing = true;
	for (struct sl_h1_pool *p = h->pools; p; p = p->next) {
		while (p->idle)
			sl_h1_conn_close(p->idle);
		while (p->draining)
			sl_h1_conn_close(p->draining);
		if (p->resolving)
			uv_cancel((uv_req_t *)&p->gai);
		if (p->conns)
			sl_warn("upstream %s: %u connections still busy at "
			        "shutdown",
			        p->url, p->conns);
	}
	/*
	 * A pool still resolving stays until its lookup ends: on_resolved
	 * runs whether or not uv_cancel() stopped the lookup, and frees it.
	 */
	struct sl_h1_pool **at = &h->pools;
	while (*at) {
		struct sl_h1_pool *p = *at;
		if (p->conns == 0 && !p->draining && !p->resolving) {
			*at = p->next;
			pool_free(p);
		} else {
			at = &p->next;
		}
	}
}

bool sl_h1_supports(const char *base_url)
{
	struct sl_h1_pool p = {0};
	bool ok = parse_url(&p, base_url);
	free(p.name);
	free(p.authority);
	free(p.prefix);
	return ok;
}

int sl_h1_start(struct sl_h1 *h, struct sl_h1_request *r, const char *base_url,
                unsigned max_conns)
{
	struct sl_h1_pool *p = pool_get(h, base_url);
	if (!p)
		return SL_EINVAL;
	p->max_conns = max_conns ? max_conns : 1;
	r->pool = p;
	r->conn = NULL;
	r->wait_next = NULL;
	r->status = 0;
	r->content_length = -1;
	free(r->content_type);
	r->content_type = NULL;
	r->error[0] = '\0';
	r->active = true;
	r->paused = false;
	r->resent = false;
	r->addr_tries = 0;
	if (p->resolved && p->idle && !p->wait_head) {
		struct sl_h1_conn *c = p->idle;
		p->idle = c->idle_next;
		c->idle_next = NULL;
		sl_h1_conn_send(c, r);
	} else if (p->resolved && !p->wait_head && p->conns < p->max_conns) {
		conn_open(p, r);
	} else {
		wait_push(p, r, false);
		pool_kick(p);
	}
	return 0;
}

void sl_h1_abort(struct sl_h1_request *r)
{
	if (!r->active)
		return;
	r->active = false;
	r->paused = false;
	struct sl_h1_pool *p = r->pool;
	struct sl_h1_conn *c = r->conn;
	if (c) {
		/* An answer not read to its end leaves the connection unusable;
		 * closing it is also what stops llama-server generating. */
		conn_detach(c);
		sl_h1_conn_close(c);
		pool_kick(p);
	} else {
		wait_remove(p, r);
	}
}

void sl_h1_request_free(struct sl_h1_request *r)
{
	free(r->content_type);
	r->content_type = NULL;
}

unsigned sl_h1_pool_conns(const struct sl_h1 *h, const char *base_url)
{
	for (const struct sl_h1_pool *p = h->pools; p; p = p->next)
		if (strcmp(p->url, base_url) == 0)
			return p->conns;
	return 0;
}

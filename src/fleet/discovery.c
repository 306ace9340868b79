/*
 * discovery.c: a DNS name's addresses, looked up with c-ares on the loop.
 *
 * c-ares runs on sluice's loop as curl does (curl's multi-uv.c pattern):
 * ARES_OPT_SOCK_STATE_CB says which sockets to watch, each gets a
 * uv_poll_t, and one uv_timer_t fires when c-ares's next timeout is due.
 * Every call into c-ares goes through process() or start_lookup(), which
 * re-arm that timer afterwards and finish a close asked for meanwhile.
 */
#include "sluice/fleet/discovery.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"

#include <arpa/inet.h>
#include <ares.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static const char *const result_names[] = {
    [SL_DNS_OK] = "ok",
    [SL_DNS_EMPTY] = "empty",
    [SL_DNS_TIMEOUT] = "timeout",
    [SL_DNS_ERROR] = "error",
};

const char *sl_dns_result_name(enum sl_dns_result r)
{
	return result_names[r];
}

/* One socket c-ares asked to watch. */
struct dns_poll {
	uv_poll_t poll;
	ares_socket_t fd;
	struct sl_discovery *d;
	struct dns_poll *next;
};

struct sl_discovery {
	uv_loop_t *loop;
	const struct sl_discovery_hooks *hooks;
	void *data;
	char *target; /* "NAME:PORT" as given */
	char name[SL_DISCOVERY_NAME_MAX + 1];
	unsigned port;
	uint64_t refresh_ms;

	ares_channel channel;
	struct dns_poll *polls; /* the sockets watched now */
	uv_timer_t ares_timer;  /* c-ares's next timeout */
	uv_timer_t refresh_timer;
	unsigned open_handles;
	unsigned in_ares; /* depth of calls into c-ares under way */
	bool looking_up;  /* a lookup is under way */
	bool closing;     /* sl_discovery_close() was called */
	bool torn_down;   /* the channel is gone and the handles closing */
	bool over_limit;  /* the last answer had too many addresses */

	/* The set, sorted by text, so that two sets compare in one walk. */
	char addrs[SL_DISCOVERY_MAX_ADDRS][SL_DISCOVERY_ADDR_LEN];
	unsigned n_addrs;
	/* How the last lookup ended: its result and c-ares status. */
	enum sl_dns_result last_result;
	int last_status;
	bool any_lookup; /* a lookup has ended */
	unsigned long long lookups[SL_DNS_RESULTS];
};

void sl_discovery_url(const char *addr, unsigned port, char *buf, size_t size)
{
	bool v6 = strchr(addr, ':') != NULL;
	snprintf(buf, size, "http://%s%s%s:%u", v6 ? "[" : "", addr,
	         v6 ? "]" : "", port);
}

/* ---- closing ---- */

static void on_handle_closed(uv_handle_t *h)
{
	struct sl_discovery *d = h->data;
	if (h->type == UV_POLL)
		free(sl_container_of((uv_poll_t *)h, struct dns_poll, poll));
	if (--d->open_handles > 0)
		return;
	if (d->hooks->on_closed)
		d->hooks->on_closed(d);
	free(d->target);
	free(d);
}

static void close_poll(struct sl_discovery *d, struct dns_poll *p)
{
	struct dns_poll **at = &d->polls;
	while (*at != p)
		at = &(*at)->next;
	*at = p->next;
	uv_close((uv_handle_t *)&p->poll, on_handle_closed);
}

/*
 * The end, once no call into c-ares is under way: ares_destroy() ends the
 * lookup (its callback sees ARES_EDESTRUCTION) and closes the sockets,
 * telling the socket-state callback, which closes their polls.
 */
static void tear_down(struct sl_discovery *d)
{
	if (d->torn_down)
		return;
	d->torn_down = true;
	ares_destroy(d->channel);
	d->channel = NULL;
	while (d->polls)
		close_poll(d, d->polls);
	uv_close((uv_handle_t *)&d->ares_timer, on_handle_closed);
	uv_close((uv_handle_t *)&d->refresh_timer, on_handle_closed);
}

void sl_discovery_close(struct sl_discovery *d)
{
	if (d->closing)
		return;
	d->closing = true;
	uv_timer_stop(&d->refresh_timer);
	if (d->in_ares == 0)
		tear_down(d);
	/* Else the call into c-ares under way finishes it (done_ares). */
}

/* ---- c-ares on the loop ---- */

static void on_ares_timer(uv_timer_t *t);

/* After each call into c-ares: its next timeout, or the pending close. */
static void done_ares(struct sl_discovery *d)
{
	if (--d->in_ares > 0)
		return;
	if (d->closing) {
		tear_down(d);
		return;
	}
	struct timeval tv;
	if (!ares_timeout(d->channel, NULL, &tv)) {
		uv_timer_stop(&d->ares_timer);
		return;
	}
	uint64_t ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
	/* Rounded up: firing early would only find nothing due. */
	if (tv.tv_usec % 1000)
		ms++;
	uv_timer_start(&d->ares_timer, on_ares_timer, ms, 0);
}

static void process(struct sl_discovery *d, ares_socket_t rfd,
                    ares_socket_t wfd)
{
	d->in_ares++;
	ares_process_fd(d->channel, rfd, wfd);
	done_ares(d);
}

static void on_ares_timer(uv_timer_t *t)
{
	process(t->data, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct dns_poll *p = sl_container_of(h, struct dns_poll, poll);
	/* An error on the socket: let c-ares read it and see. */
	bool r = status < 0 || (events & UV_READABLE);
	bool w = status < 0 || (events & UV_WRITABLE);
	process(p->d, r ? p->fd : ARES_SOCKET_BAD, w ? p->fd : ARES_SOCKET_BAD);
}

/* ARES_OPT_SOCK_STATE_CB: watch `fd` for these events, or no longer. */
static void on_sock_state(void *data, ares_socket_t fd, int readable,
                          int writable)
{
	struct sl_discovery *d = data;
	struct dns_poll *p = d->polls;
	while (p && p->fd != fd)
		p = p->next;
	if (!readable && !writable) {
		if (p)
			close_poll(d, p);
		return;
	}
	if (!p) {
		p = sl_xcalloc(1, sizeof(*p));
		int rc = uv_poll_init_socket(d->loop, &p->poll, fd);
		if (rc != 0) {
			/* c-ares times the query out; the next lookup tries
			 * again. */
			sl_error("dns %s: cannot watch a resolver socket: %s",
			         d->target, uv_strerror(rc));
			free(p);
			return;
		}
		p->fd = fd;
		p->d = d;
		p->poll.data = d;
		p->next = d->polls;
		d->polls = p;
		d->open_handles++;
	}
	int events =
	    (readable ? UV_READABLE : 0) | (writable ? UV_WRITABLE : 0);
	uv_poll_start(&p->poll, events, on_poll);
}

/* ---- lookups ---- */

static void on_refresh_timer(uv_timer_t *t);

static int compare_addrs(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The answer's addresses, sorted, without repeats, at most the limit. */
static unsigned collect(const struct ares_addrinfo *res,
                        char out[][SL_DISCOVERY_ADDR_LEN], bool *truncated)
{
	/* Room for each address twice: c-ares may repeat one. */
	char all[SL_DISCOVERY_MAX_ADDRS * 2][SL_DISCOVERY_ADDR_LEN];
	unsigned n = 0;
	*truncated = false;
	for (const struct ares_addrinfo_node *a = res ? res->nodes : NULL; a;
	     a = a->ai_next) {
		const void *ip;
		if (a->ai_family == AF_INET)
			ip = &((const struct sockaddr_in *)(const void *)
			           a->ai_addr)
			          ->sin_addr;
		else if (a->ai_family == AF_INET6)
			ip = &((const struct sockaddr_in6 *)(const void *)
			           a->ai_addr)
			          ->sin6_addr;
		else
			continue;
		if (n == SL_ARRAY_SIZE(all))
			*truncated = true;
		else if (inet_ntop(a->ai_family, ip, all[n], sizeof(all[n])))
			n++;
	}
	qsort(all, n, sizeof(all[0]), compare_addrs);
	unsigned k = 0;
	for (unsigned i = 0; i < n; i++) {
		if (k > 0 && strcmp(all[i], out[k - 1]) == 0)
			continue;
		if (k == SL_DISCOVERY_MAX_ADDRS) {
			*truncated = true;
			break;
		}
		memcpy(out[k++], all[i], sizeof(all[i]));
	}
	return k;
}

/*
 * The set becomes `next`: the addresses that appeared are reported first,
 * so that an owner replacing one upstream by another has the new one on
 * its way before the old one goes.
 */
static void replace_set(struct sl_discovery *d,
                        char next[][SL_DISCOVERY_ADDR_LEN], unsigned n)
{
	char old[SL_DISCOVERY_MAX_ADDRS][SL_DISCOVERY_ADDR_LEN];
	unsigned n_old = d->n_addrs;
	memcpy(old, d->addrs, sizeof(old[0]) * n_old);
	memcpy(d->addrs, next, sizeof(next[0]) * n);
	d->n_addrs = n;
	for (unsigned i = 0, j = 0; i < n && !d->closing; i++) {
		while (j < n_old && strcmp(old[j], next[i]) < 0)
			j++;
		if (j == n_old || strcmp(old[j], next[i]) != 0)
			d->hooks->on_added(d, next[i]);
	}
	for (unsigned j = 0, i = 0; j < n_old && !d->closing; j++) {
		while (i < n && strcmp(next[i], old[j]) < 0)
			i++;
		if (i == n || strcmp(next[i], old[j]) != 0)
			d->hooks->on_removed(d, old[j]);
	}
}

/* One line per change in how lookups end: no flood while it lasts. */
static void log_outcome(struct sl_discovery *d, enum sl_dns_result r,
                        int status, unsigned n)
{
	enum sl_dns_result prev = d->last_result;
	bool same = d->any_lookup && d->last_result == r &&
	            (r == SL_DNS_OK || d->last_status == status);
	bool was_ok = !d->any_lookup || d->last_result == SL_DNS_OK;
	d->any_lookup = true;
	d->last_result = r;
	d->last_status = status;
	if (same)
		return;
	switch (r) {
	case SL_DNS_OK:
		if (!was_ok && prev == SL_DNS_EMPTY)
			sl_info("dns %s: the name has addresses again (%u)",
			        d->target, n);
		else if (!was_ok)
			sl_info("dns %s: lookups answer again", d->target);
		break;
	case SL_DNS_EMPTY:
		sl_warn("dns %s: the name has no address (%s): no upstream "
		        "from it until it has",
		        d->target, ares_strerror(status));
		break;
	case SL_DNS_TIMEOUT:
	case SL_DNS_ERROR:
		sl_warn("dns %s: lookup failed: %s; keeping the addresses "
		        "known (%u) until a lookup answers",
		        d->target, ares_strerror(status), d->n_addrs);
		break;
	case SL_DNS_RESULTS: break;
	}
}

static void on_lookup(void *arg, int status, int timeouts,
                      struct ares_addrinfo *res)
{
	struct sl_discovery *d = arg;
	(void)timeouts;
	d->looking_up = false;
	if (status == ARES_EDESTRUCTION || status == ARES_ECANCELLED ||
	    d->closing) {
		ares_freeaddrinfo(res);
		return;
	}
	char next[SL_DISCOVERY_MAX_ADDRS][SL_DISCOVERY_ADDR_LEN];
	unsigned n = 0;
	bool over = false;
	enum sl_dns_result r;
	if (status == ARES_SUCCESS) {
		n = collect(res, next, &over);
		r = n > 0 ? SL_DNS_OK : SL_DNS_EMPTY;
		if (n == 0)
			status = ARES_ENODATA;
	} else if (status == ARES_ENOTFOUND || status == ARES_ENODATA) {
		r = SL_DNS_EMPTY;
	} else if (status == ARES_ETIMEOUT) {
		r = SL_DNS_TIMEOUT;
	} else {
		r = SL_DNS_ERROR;
	}
	ares_freeaddrinfo(res);
	d->lookups[r]++;
	if (over && !d->over_limit)
		sl_warn("dns %s: more than the %d addresses sluice follows; "
		        "using the first %d by their text",
		        d->target, SL_DISCOVERY_MAX_ADDRS,
		        SL_DISCOVERY_MAX_ADDRS);
	d->over_limit = over;
	log_outcome(d, r, status, n);
	uv_timer_start(&d->refresh_timer, on_refresh_timer, d->refresh_ms, 0);
	if (r == SL_DNS_OK || r == SL_DNS_EMPTY)
		replace_set(d, next, n);
}

static void start_lookup(struct sl_discovery *d)
{
	if (d->closing || d->looking_up)
		return;
	struct ares_addrinfo_hints hints = {
	    .ai_family = AF_UNSPEC,
	    /* Sorting connects a UDP socket per address; sluice sorts. */
	    .ai_flags = ARES_AI_NOSORT,
	};
	d->looking_up = true;
	d->in_ares++;
	ares_getaddrinfo(d->channel, d->name, NULL, &hints, on_lookup, d);
	done_ares(d);
}

static void on_refresh_timer(uv_timer_t *t)
{
	start_lookup(t->data);
}

/* ---- lifetime ---- */

struct sl_discovery *sl_discovery_new(uv_loop_t *loop, const char *target,
                                      const char *server, uint64_t refresh_ms,
                                      const struct sl_discovery_hooks *hooks,
                                      void *data, char *err, size_t err_size)
{
	static bool ares_ready;
	if (!ares_ready) {
		int rc = ares_library_init(ARES_LIB_INIT_ALL);
		if (rc != ARES_SUCCESS) {
			snprintf(err, err_size, "cannot set up c-ares: %s",
			         ares_strerror(rc));
			return NULL;
		}
		ares_ready = true;
	}
	struct sl_discovery *d = sl_xcalloc(1, sizeof(*d));
	d->loop = loop;
	d->hooks = hooks;
	d->data = data;
	if (sl_discovery_parse_target(target, d->name, &d->port, err,
	                              err_size) != 0)
		goto fail_free;
	bool own_server = server && server[0];
	struct ares_options opts = {
	    .sock_state_cb = on_sock_state,
	    .sock_state_cb_data = d,
	    .timeout = SL_DISCOVERY_TRY_MS,
	    .tries = SL_DISCOVERY_TRIES,
	    /* With a resolver named, ask it alone: not /etc/hosts too. */
	    .lookups = (char *)"b",
	};
	int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS |
	           ARES_OPT_TRIES | (own_server ? ARES_OPT_LOOKUPS : 0);
	int rc = ares_init_options(&d->channel, &opts, mask);
	if (rc != ARES_SUCCESS) {
		snprintf(err, err_size,
		         "--upstream-dns %s: cannot set up "
		         "c-ares: %s",
		         target, ares_strerror(rc));
		goto fail_free;
	}
	if (own_server) {
		rc = ares_set_servers_ports_csv(d->channel, server);
		if (rc != ARES_SUCCESS) {
			snprintf(err, err_size, "--dns-server %s: %s", server,
			         ares_strerror(rc));
			goto fail_channel;
		}
	}
	d->target = sl_xstrdup(target);
	d->refresh_ms = refresh_ms;
	uv_timer_init(loop, &d->ares_timer);
	uv_timer_init(loop, &d->refresh_timer);
	d->ares_timer.data = d;
	d->refresh_timer.data = d;
	d->open_handles = 2;
	return d;

fail_channel:
	ares_destroy(d->channel);
fail_free:
	free(d);
	return NULL;
}

void sl_discovery_start(struct sl_discovery *d)
{
	start_lookup(d);
}

void *sl_discovery_data(const struct sl_discovery *d)
{
	return d->data;
}

const char *sl_discovery_target(const struct sl_discovery *d)
{
	return d->target;
}

const char *sl_discovery_name(const struct sl_discovery *d)
{
	return d->name;
}

unsigned sl_discovery_port(const struct sl_discovery *d)
{
	return d->port;
}

unsigned sl_discovery_count(const struct sl_discovery *d)
{
	return d->n_addrs;
}

unsigned long long sl_discovery_lookups(const struct sl_discovery *d,
                                        enum sl_dns_result r)
{
	return d->lookups[r];
}

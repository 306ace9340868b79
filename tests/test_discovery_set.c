/*
 * test_discovery_set.c: what each lookup's outcome does to a discovery's
 * address set, and the parsing of its options. No socket: the lookup's
 * callback is called with answers made here, as c-ares would call it.
 * discovery.c is included (as h2o's unit tests do) to reach that callback.
 */
#include "../src/fleet/discovery.c"

#include "test.h"

#include <stdarg.h>

/* What the hooks saw: "+ADDR" and "-ADDR" lines, in order. */
static char events[8192];
static unsigned closed;

static void on_added(struct sl_discovery *d, const char *addr)
{
	(void)d;
	snprintf(events + strlen(events), sizeof(events) - strlen(events),
	         "+%s\n", addr);
}

static void on_removed(struct sl_discovery *d, const char *addr)
{
	(void)d;
	snprintf(events + strlen(events), sizeof(events) - strlen(events),
	         "-%s\n", addr);
}

static void on_closed(struct sl_discovery *d)
{
	(void)d;
	closed++;
}

static const struct sl_discovery_hooks hooks = {
    .on_added = on_added,
    .on_removed = on_removed,
    .on_closed = on_closed,
};

/* An answer as ares_getaddrinfo() hands it over (freed by the callback). */
static struct ares_addrinfo *answer(const char *first, ...)
{
	struct ares_addrinfo *res = calloc(1, sizeof(*res));
	struct ares_addrinfo_node **tail = &res->nodes;
	va_list ap;
	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *)) {
		struct ares_addrinfo_node *n = calloc(1, sizeof(*n));
		if (strchr(a, ':')) {
			struct sockaddr_in6 *s6 = calloc(1, sizeof(*s6));
			s6->sin6_family = AF_INET6;
			ASSERT(inet_pton(AF_INET6, a, &s6->sin6_addr) == 1);
			n->ai_family = AF_INET6;
			n->ai_addr = (struct sockaddr *)s6;
			n->ai_addrlen = sizeof(*s6);
		} else {
			struct sockaddr_in *s4 = calloc(1, sizeof(*s4));
			s4->sin_family = AF_INET;
			ASSERT(inet_pton(AF_INET, a, &s4->sin_addr) == 1);
			n->ai_family = AF_INET;
			n->ai_addr = (struct sockaddr *)s4;
			n->ai_addrlen = sizeof(*s4);
		}
		*tail = n;
		tail = &n->ai_next;
	}
	va_end(ap);
	return res;
}

/* One lookup ends; returns the events it caused. */
static const char *lookup(struct sl_discovery *d, int status,
                          struct ares_addrinfo *res)
{
	events[0] = '\0';
	d->looking_up = true;
	on_lookup(d, status, 0, res);
	ASSERT(!d->looking_up);
	return events;
}

static void test_the_set_follows_the_answers(void)
{
	uv_loop_t loop;
	uv_loop_init(&loop);
	char err[256];
	struct sl_discovery *d =
	    sl_discovery_new(&loop, "llama.test:8080", "127.0.0.1:53", 5000,
	                     &hooks, NULL, err, sizeof(err));
	ASSERT(d);
	ASSERT_STR_EQ(sl_discovery_name(d), "llama.test");
	ASSERT_EQ(sl_discovery_port(d), 8080);

	ASSERT_STR_EQ(lookup(d, ARES_SUCCESS, answer("127.0.0.2", NULL)),
	              "+127.0.0.2\n");
	/* A repeat in the answer, and one new address. */
	ASSERT_STR_EQ(
	    lookup(d, ARES_SUCCESS,
	           answer("127.0.0.3", "127.0.0.2", "127.0.0.3", NULL)),
	    "+127.0.0.3\n");
	ASSERT_EQ(sl_discovery_count(d), 2);
	/* The same answer: nothing to say. */
	ASSERT_STR_EQ(
	    lookup(d, ARES_SUCCESS, answer("127.0.0.2", "127.0.0.3", NULL)),
	    "");
	/* Failures keep the set. */
	ASSERT_STR_EQ(lookup(d, ARES_ETIMEOUT, NULL), "");
	ASSERT_STR_EQ(lookup(d, ARES_ETIMEOUT, NULL), "");
	ASSERT_STR_EQ(lookup(d, ARES_ESERVFAIL, NULL), "");
	ASSERT_STR_EQ(lookup(d, ARES_ECONNREFUSED, NULL), "");
	ASSERT_EQ(sl_discovery_count(d), 2);
	ASSERT_EQ(sl_discovery_lookups(d, SL_DNS_TIMEOUT), 2);
	ASSERT_EQ(sl_discovery_lookups(d, SL_DNS_ERROR), 2);
	/* A move: the new address is reported before the old ones go. */
	ASSERT_STR_EQ(lookup(d, ARES_SUCCESS, answer("fd00::5", NULL)),
	              "+fd00::5\n-127.0.0.2\n-127.0.0.3\n");
	/* NXDOMAIN, or a name with no address: the set empties. */
	ASSERT_STR_EQ(lookup(d, ARES_ENOTFOUND, NULL), "-fd00::5\n");
	ASSERT_STR_EQ(lookup(d, ARES_SUCCESS, answer("127.0.0.2", NULL)),
	              "+127.0.0.2\n");
	ASSERT_STR_EQ(lookup(d, ARES_ENODATA, NULL), "-127.0.0.2\n");
	ASSERT_STR_EQ(lookup(d, ARES_SUCCESS, answer("127.0.0.2", NULL)),
	              "+127.0.0.2\n");
	ASSERT_STR_EQ(lookup(d, ARES_SUCCESS, answer(NULL)), "-127.0.0.2\n");
	ASSERT_EQ(sl_discovery_lookups(d, SL_DNS_EMPTY), 3);
	ASSERT_EQ(sl_discovery_lookups(d, SL_DNS_OK), 6);

	sl_discovery_close(d);
	/* Closed only once its handles are: from the loop. */
	ASSERT_EQ(closed, 0);
	uv_run(&loop, UV_RUN_DEFAULT);
	ASSERT_EQ(closed, 1);
	ASSERT_EQ(uv_loop_close(&loop), 0);
}

static void test_an_answer_over_the_limit_is_cut(void)
{
	uv_loop_t loop;
	uv_loop_init(&loop);
	char err[256];
	struct sl_discovery *d = sl_discovery_new(
	    &loop, "many.test:80", NULL, 5000, &hooks, NULL, err, sizeof(err));
	ASSERT(d);
	/* 70 addresses, 10.0.0.100 to 10.0.0.169: the lowest 64 by text. */
	struct ares_addrinfo *res = answer(NULL);
	struct ares_addrinfo_node **tail = &res->nodes;
	for (unsigned i = 0; i < 70; i++) {
		char a[32];
		snprintf(a, sizeof(a), "10.0.0.%u", 100 + i);
		struct ares_addrinfo *one = answer(a, NULL);
		*tail = one->nodes;
		tail = &one->nodes->ai_next;
		free(one);
	}
	lookup(d, ARES_SUCCESS, res);
	ASSERT_EQ(sl_discovery_count(d), SL_DISCOVERY_MAX_ADDRS);
	ASSERT(d->over_limit);
	ASSERT_CONTAINS(events, "+10.0.0.163\n");
	ASSERT(!strstr(events, "+10.0.0.164\n"));
	sl_discovery_close(d);
	uv_run(&loop, UV_RUN_DEFAULT);
	ASSERT_EQ(uv_loop_close(&loop), 0);
}

static void test_targets_and_servers(void)
{
	char name[SL_DISCOVERY_NAME_MAX + 1], err[512];
	unsigned port = 0;
	ASSERT_EQ(sl_discovery_parse_target("llama-server:8080", name, &port,
	                                    err, sizeof(err)),
	          0);
	ASSERT_STR_EQ(name, "llama-server");
	ASSERT_EQ(port, 8080);
	ASSERT_EQ(sl_discovery_parse_target("a.b_c.svc.cluster.local:1", name,
	                                    &port, err, sizeof(err)),
	          0);
	ASSERT_STR_EQ(name, "a.b_c.svc.cluster.local");
	static const char *const bad_targets[] = {
	    "llama",    ":80",      "llama:",    "llama:0",  "llama:65536",
	    "llama:-1", "llama:8o", "lla ma:80", "[::1]:80", "llama:+80",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad_targets); i++) {
		ASSERT_EQ(sl_discovery_parse_target(bad_targets[i], NULL, NULL,
		                                    err, sizeof(err)),
		          SL_EINVAL);
		ASSERT_CONTAINS(err, "expected NAME:PORT");
	}
	char longest[SL_DISCOVERY_NAME_MAX + 8];
	memset(longest, 'a', SL_DISCOVERY_NAME_MAX);
	strcpy(longest + SL_DISCOVERY_NAME_MAX, ":80");
	ASSERT_EQ(
	    sl_discovery_parse_target(longest, NULL, NULL, err, sizeof(err)),
	    0);
	memset(longest, 'a', SL_DISCOVERY_NAME_MAX + 1);
	strcpy(longest + SL_DISCOVERY_NAME_MAX + 1, ":80");
	ASSERT_EQ(
	    sl_discovery_parse_target(longest, NULL, NULL, err, sizeof(err)),
	    SL_EINVAL);

	static const char *const good_servers[] = {"127.0.0.1:53", "[::1]:5353",
	                                           "[fd00::a]:1"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(good_servers); i++)
		ASSERT_EQ(sl_discovery_parse_server(good_servers[i], err,
		                                    sizeof(err)),
		          0);
	static const char *const bad_servers[] = {
	    "127.0.0.1", "127.0.0.1:0",    "::1:53",   "[::1]",
	    "dns:53",    "[127.0.0.1]:53", "1.2.3:53", ":53",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad_servers); i++) {
		ASSERT_EQ(
		    sl_discovery_parse_server(bad_servers[i], err, sizeof(err)),
		    SL_EINVAL);
		ASSERT_CONTAINS(err, "expected IP:PORT or [IPv6]:PORT");
	}

	char url[128];
	sl_discovery_url("10.0.0.5", 8080, url, sizeof(url));
	ASSERT_STR_EQ(url, "http://10.0.0.5:8080");
	sl_discovery_url("fd00::5", 8080, url, sizeof(url));
	ASSERT_STR_EQ(url, "http://[fd00::5]:8080");
}

int main(void)
{
	RUN(test_the_set_follows_the_answers);
	RUN(test_an_answer_over_the_limit_is_cut);
	RUN(test_targets_and_servers);
	return 0;
}

/*
 * Unit tests for client_addr.c: addresses, CIDR ranges, and the
 * X-Forwarded-For walk behind trusted proxies (nginx's real_ip_recursive).
 */
#include "sluice/net/client_addr.h"

#include "sluice/base/common.h"

#include "test.h"

#include <arpa/inet.h>

/* ip as text, for comparisons (static; valid until the next call). */
static const char *text(struct sl_ip ip)
{
	static char buf[SL_CLIENT_ADDR_MAX];
	sl_ip_format(&ip, buf, sizeof(buf));
	return buf;
}

static struct sl_ip ip_of(const char *s)
{
	struct sl_ip ip;
	if (sl_ip_parse(s, strlen(s), &ip) != 0)
		TEST_FAIL("not an address: %s", s);
	return ip;
}

static int parse_cidr(const char *s, struct sl_cidr *c)
{
	return sl_cidr_parse(s, strlen(s), c);
}

static void test_addresses(void)
{
	ASSERT_STR_EQ(text(ip_of("192.0.2.1")), "192.0.2.1");
	ASSERT_STR_EQ(text(ip_of("2001:DB8:0::1")), "2001:db8::1");
	/* A dual-stack listener's view of an IPv4 client. */
	struct sl_ip m = ip_of("::ffff:192.0.2.7");
	ASSERT_EQ(m.family, 4);
	ASSERT_STR_EQ(text(m), "192.0.2.7");

	const char *bad[] = {"",
	                     " 1.2.3.4",
	                     "1.2.3.4 ",
	                     "1.2.3",
	                     "1.2.3.4:80",
	                     "[::1]",
	                     "::1%lo",
	                     "unknown",
	                     "256.1.1.1",
	                     "1.2.3.4/32",
	                     "1111:2222:3333:4444:5555:6666:7777:8888:9999"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad); i++) {
		struct sl_ip ip;
		if (sl_ip_parse(bad[i], strlen(bad[i]), &ip) != SL_EINVAL)
			TEST_FAIL("took \"%s\" for an address", bad[i]);
		ASSERT_EQ(ip.family, 0);
	}
	/* Only len bytes are read, and a NUL inside them is refused. */
	struct sl_ip ip;
	ASSERT_EQ(sl_ip_parse("10.0.0.1junk", 8, &ip), 0);
	ASSERT_STR_EQ(text(ip), "10.0.0.1");
	ASSERT_EQ(sl_ip_parse("10.0\0.0.1", 9, &ip), SL_EINVAL);

	struct sl_ip none = {0};
	ASSERT_STR_EQ(text(none), "");

	ASSERT(sl_ip_is_loopback(&(struct sl_ip){0}) == false);
	const char *loop[] = {"127.0.0.1", "127.255.0.9", "::1",
	                      "::ffff:127.0.0.1"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(loop); i++) {
		struct sl_ip l = ip_of(loop[i]);
		if (!sl_ip_is_loopback(&l))
			TEST_FAIL("%s is loopback", loop[i]);
	}
	const char *outside[] = {"0.0.0.0",  "::",  "128.0.0.1",
	                         "10.0.0.1", "::2", "fe80::1"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(outside); i++) {
		struct sl_ip o = ip_of(outside[i]);
		if (sl_ip_is_loopback(&o))
			TEST_FAIL("%s is not loopback", outside[i]);
	}
}

static void test_sockaddr(void)
{
	struct sockaddr_in a4 = {.sin_family = AF_INET};
	inet_pton(AF_INET, "198.51.100.4", &a4.sin_addr);
	struct sl_ip ip;
	ASSERT_EQ(sl_ip_from_sockaddr((struct sockaddr *)&a4, &ip), 0);
	ASSERT_STR_EQ(text(ip), "198.51.100.4");

	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
	inet_pton(AF_INET6, "::ffff:198.51.100.5", &a6.sin6_addr);
	ASSERT_EQ(sl_ip_from_sockaddr((struct sockaddr *)&a6, &ip), 0);
	ASSERT_EQ(ip.family, 4);
	ASSERT_STR_EQ(text(ip), "198.51.100.5");
	inet_pton(AF_INET6, "2001:db8::5", &a6.sin6_addr);
	ASSERT_EQ(sl_ip_from_sockaddr((struct sockaddr *)&a6, &ip), 0);
	ASSERT_STR_EQ(text(ip), "2001:db8::5");

	struct sockaddr un = {.sa_family = AF_UNIX};
	ASSERT_EQ(sl_ip_from_sockaddr(&un, &ip), SL_EINVAL);
	ASSERT_EQ(ip.family, 0);
}

/* Whether text `ip` is inside the one range `cidr`. */
static bool in(const char *cidr, const char *ip)
{
	struct sl_cidr c;
	if (parse_cidr(cidr, &c) != 0)
		TEST_FAIL("not a range: %s", cidr);
	struct sl_ip a = ip_of(ip);
	return sl_cidr_match(&c, 1, &a);
}

static void test_cidr_parse(void)
{
	struct sl_cidr c;
	ASSERT_EQ(parse_cidr("10.0.0.0/8", &c), 0);
	ASSERT_EQ(c.net.family, 4);
	ASSERT_EQ(c.prefix, 8);
	ASSERT_STR_EQ(text(c.net), "10.0.0.0");
	/* A bare address is one host. */
	ASSERT_EQ(parse_cidr("192.0.2.9", &c), 0);
	ASSERT_EQ(c.prefix, 32);
	ASSERT_EQ(parse_cidr("2001:db8::1", &c), 0);
	ASSERT_EQ(c.prefix, 128);
	/* Host bits are cleared. */
	ASSERT_EQ(parse_cidr("10.1.2.3/12", &c), 0);
	ASSERT_STR_EQ(text(c.net), "10.0.0.0");
	ASSERT_EQ(parse_cidr("2001:db8:abcd:ef01::7/35", &c), 0);
	ASSERT_STR_EQ(text(c.net), "2001:db8:a000::");
	ASSERT_EQ(c.prefix, 35);
	/* A mapped range of IPv4 addresses is an IPv4 range. */
	ASSERT_EQ(parse_cidr("::ffff:10.0.0.0/104", &c), 0);
	ASSERT_EQ(c.net.family, 4);
	ASSERT_EQ(c.prefix, 8);
	ASSERT_STR_EQ(text(c.net), "10.0.0.0");
	ASSERT_EQ(parse_cidr("::ffff:10.1.2.3/104", &c), 0);
	ASSERT_STR_EQ(text(c.net), "10.0.0.0");
	/* Shorter, it would be the IPv6 range ::/8 (::1 in it): refused. */
	ASSERT_EQ(parse_cidr("::ffff:10.0.0.0/8", &c), SL_EINVAL);
	ASSERT_EQ(parse_cidr("0.0.0.0/0", &c), 0);
	ASSERT_EQ(c.prefix, 0);
	ASSERT_EQ(parse_cidr("::/0", &c), 0);
	ASSERT_EQ(c.net.family, 6);

	const char *bad[] = {"",
	                     "/8",
	                     "10.0.0.0/",
	                     "10.0.0.0/33",
	                     "::/129",
	                     "10.0.0.0/-1",
	                     "10.0.0.0/+8",
	                     "10.0.0.0/ 8",
	                     "10.0.0.0/8 ",
	                     "10.0.0.0/0x8",
	                     "10.0.0.0/0008",
	                     "10.0.0.0/8/8",
	                     "10.0.0/8",
	                     "host.example",
	                     "10.0.0.0/abc",
	                     "*"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad); i++)
		if (parse_cidr(bad[i], &c) != SL_EINVAL)
			TEST_FAIL("took \"%s\" for a range", bad[i]);
}

static void test_cidr_match(void)
{
	ASSERT(in("127.0.0.0/8", "127.0.0.1"));
	ASSERT(in("127.0.0.0/8", "127.255.255.255"));
	ASSERT(!in("127.0.0.0/8", "128.0.0.0"));
	ASSERT(!in("127.0.0.0/8", "126.255.255.255"));
	/* A prefix that ends inside a byte. */
	ASSERT(in("10.0.0.0/12", "10.15.255.255"));
	ASSERT(!in("10.0.0.0/12", "10.16.0.0"));
	ASSERT(in("192.0.2.9", "192.0.2.9"));
	ASSERT(!in("192.0.2.9", "192.0.2.8"));
	ASSERT(in("0.0.0.0/0", "203.0.113.1"));
	ASSERT(in("2001:db8::/32", "2001:db8:ffff::1"));
	ASSERT(!in("2001:db8::/32", "2001:db9::1"));
	ASSERT(in("fe80::/10", "febf::1"));
	ASSERT(!in("fe80::/10", "fec0::1"));
	ASSERT(in("::1", "::1"));
	ASSERT(in("2001:db8::1/128", "2001:db8::1"));
	/* Families never match each other; mapped addresses are IPv4. */
	ASSERT(!in("::/0", "192.0.2.1"));
	ASSERT(!in("0.0.0.0/0", "::1"));
	ASSERT(in("127.0.0.0/8", "::ffff:127.0.0.2"));
	ASSERT(in("::ffff:127.0.0.0/104", "127.0.0.2"));

	struct sl_cidr set[2];
	ASSERT_EQ(parse_cidr("10.0.0.0/8", &set[0]), 0);
	ASSERT_EQ(parse_cidr("fd00::/8", &set[1]), 0);
	struct sl_ip a = ip_of("fd12::1"), b = ip_of("11.0.0.1"), none = {0};
	ASSERT(sl_cidr_match(set, 2, &a));
	ASSERT(!sl_cidr_match(set, 2, &b));
	ASSERT(!sl_cidr_match(set, 2, &none));
	ASSERT(!sl_cidr_match(set, 0, &a));
}

/*
 * The client of a request from `peer` carrying the X-Forwarded-For lines
 * in `xff` (NULL-terminated), behind the trusted ranges in `trusted`
 * (comma-separated), as text.
 */
static const char *client(const char *trusted, const char *peer,
                          const char *const *xff)
{
	struct sl_cidr ranges[8];
	unsigned n = 0;
	for (const char *p = trusted; *p;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		ASSERT(n < SL_ARRAY_SIZE(ranges));
		if (sl_cidr_parse(p, len, &ranges[n++]) != 0)
			TEST_FAIL("not a range: %.*s", (int)len, p);
		p += len + (comma ? 1 : 0);
	}
	struct sl_http_header h[8];
	unsigned nh = 0;
	/* Other headers around them must not matter. */
	h[nh++] = (struct sl_http_header){"Host", "x", 1};
	for (; xff && *xff; xff++) {
		ASSERT(nh + 2 < SL_ARRAY_SIZE(h));
		/* The name's case must not matter either. */
		const char *name =
		    nh % 4 == 1 ? "X-Forwarded-For" : "x-forwarded-for";
		h[nh++] = (struct sl_http_header){name, *xff, strlen(*xff)};
		h[nh++] = (struct sl_http_header){"X-Other", "9.9.9.9", 7};
	}
	struct sl_ip p = peer ? ip_of(peer) : (struct sl_ip){0};
	return text(sl_client_addr_resolve(ranges, n, &p, h, nh));
}

#define XFF(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_untrusted_peer(void)
{
	/* No trusted proxy: the header is ignored. */
	ASSERT_STR_EQ(client("", "127.0.0.1", XFF("1.2.3.4")), "127.0.0.1");
	/* A peer outside the ranges: ignored too. */
	ASSERT_STR_EQ(client("10.0.0.0/8", "192.0.2.1", XFF("1.2.3.4")),
	              "192.0.2.1");
	/* An unknown peer (a socketpair) stays unknown. */
	ASSERT_STR_EQ(client("0.0.0.0/0", NULL, XFF("1.2.3.4")), "");
}

static void test_trusted_peer(void)
{
	const char *lo = "127.0.0.0/8";
	/* Without the header, the peer. */
	ASSERT_STR_EQ(client(lo, "127.0.0.1", NULL), "127.0.0.1");
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("203.0.113.5")),
	              "203.0.113.5");
	/* Spoofed on the left: the first untrusted from the right wins. */
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("1.2.3.4, 127.0.0.5")),
	              "1.2.3.4");
	ASSERT_STR_EQ(
	    client(lo, "127.0.0.1", XFF("6.6.6.6, 1.2.3.4, 127.0.0.5")),
	    "1.2.3.4");
	/* Every address trusted: the leftmost. */
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("127.0.0.9, 127.0.0.5")),
	              "127.0.0.9");
	/* Several lines are one list, in order. */
	ASSERT_STR_EQ(
	    client(lo, "127.0.0.1", XFF("5.5.5.5, 127.0.0.3", "127.0.0.4")),
	    "5.5.5.5");
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("5.5.5.5", "6.6.6.6")),
	              "6.6.6.6");
	/* Several ranges, IPv6 among them; a mapped peer is IPv4. */
	ASSERT_STR_EQ(client("10.0.0.0/8,fd00::/8", "::ffff:10.1.1.1",
	                     XFF("2001:db8::9, fd00::1, 10.2.2.2")),
	              "2001:db8::9");
	ASSERT_STR_EQ(client("::1", "::1", XFF("::ffff:198.51.100.1")),
	              "198.51.100.1");
	/* Spaces, tabs and empty elements. */
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF(" \t8.8.8.8\t ,, , ")),
	              "8.8.8.8");
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF(",")), "127.0.0.1");
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("")), "127.0.0.1");
}

static void test_garbage_stops_the_walk(void)
{
	const char *lo = "127.0.0.0/8";
	/* Garbage right away: the peer stands. */
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("not-an-address")),
	              "127.0.0.1");
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("unknown")), "127.0.0.1");
	/* Garbage after a trusted hop: that hop stands. */
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("9.9.9.9, junk, 127.0.0.7")),
	              "127.0.0.7");
	/* Garbage left of the client found is never reached. */
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("junk, 9.9.9.9")), "9.9.9.9");
	/* Ports, brackets, overlong and odd bytes. */
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("9.9.9.9:443")), "127.0.0.1");
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("[2001:db8::1]")),
	              "127.0.0.1");
	char big[300];
	memset(big, '1', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF(big)), "127.0.0.1");
	ASSERT_STR_EQ(client(lo, "127.0.0.1", XFF("\xff\xfe, \x01")),
	              "127.0.0.1");
	/* A line with garbage stops the walk before earlier lines. */
	ASSERT_STR_EQ(
	    client(lo, "127.0.0.1", XFF("4.4.4.4", "bogus, 127.0.0.2")),
	    "127.0.0.2");
}

/* A header value that is not NUL-terminated where value_len ends. */
static void test_reads_only_value_len(void)
{
	struct sl_cidr lo;
	ASSERT_EQ(parse_cidr("127.0.0.0/8", &lo), 0);
	struct sl_ip peer = ip_of("127.0.0.1");
	const struct sl_http_header h = {"X-Forwarded-For", "7.7.7.7, 8.8.8.8",
	                                 7};
	ASSERT_STR_EQ(text(sl_client_addr_resolve(&lo, 1, &peer, &h, 1)),
	              "7.7.7.7");
}

int main(void)
{
	RUN(test_addresses);
	RUN(test_sockaddr);
	RUN(test_cidr_parse);
	RUN(test_cidr_match);
	RUN(test_untrusted_peer);
	RUN(test_trusted_peer);
	RUN(test_garbage_stops_the_walk);
	RUN(test_reads_only_value_len);
	return 0;
}

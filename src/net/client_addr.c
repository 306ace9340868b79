/*
 * client_addr.c: addresses, CIDR ranges and the X-Forwarded-For walk; see
 * client_addr.h.
 */
#include "sluice/net/client_addr.h"

#include "sluice/base/common.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ::ffff:0:0/96, the IPv4-mapped IPv6 addresses. */
static const uint8_t mapped_prefix[12] = {0, 0, 0, 0, 0,    0,
                                          0, 0, 0, 0, 0xff, 0xff};

/* A mapped IPv6 address becomes the IPv4 address it holds. */
static void unmap(struct sl_ip *ip)
{
	if (ip->family != 6 ||
	    memcmp(ip->bytes, mapped_prefix, sizeof(mapped_prefix)) != 0)
		return;
	memmove(ip->bytes, ip->bytes + 12, 4);
	memset(ip->bytes + 4, 0, 12);
	ip->family = 4;
}

int sl_ip_parse(const char *s, size_t len, struct sl_ip *out)
{
	char text[SL_CLIENT_ADDR_MAX];
	memset(out, 0, sizeof(*out));
	if (len == 0 || len >= sizeof(text) || memchr(s, '\0', len))
		return SL_EINVAL;
	memcpy(text, s, len);
	text[len] = '\0';
	if (inet_pton(AF_INET, text, out->bytes) == 1) {
		out->family = 4;
		return 0;
	}
	if (inet_pton(AF_INET6, text, out->bytes) == 1) {
		out->family = 6;
		unmap(out);
		return 0;
	}
	memset(out, 0, sizeof(*out));
	return SL_EINVAL;
}

int sl_ip_from_sockaddr(const struct sockaddr *sa, struct sl_ip *out)
{
	memset(out, 0, sizeof(*out));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
		memcpy(out->bytes, &a->sin_addr, 4);
		out->family = 4;
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
		memcpy(out->bytes, &a->sin6_addr, 16);
		out->family = 6;
		unmap(out);
		return 0;
	}
	return SL_EINVAL;
}

void sl_ip_format(const struct sl_ip *ip, char *buf, size_t size)
{
	if (size == 0)
		return;
	buf[0] = '\0';
	if (ip->family == 0 || !inet_ntop(ip->family == 4 ? AF_INET : AF_INET6,
	                                  ip->bytes, buf, (socklen_t)size))
		buf[0] = '\0';
}

bool sl_ip_is_loopback(const struct sl_ip *ip)
{
	static const uint8_t v6_loopback[16] = {[15] = 1};
	if (ip->family == 4)
		return ip->bytes[0] == 127;
	return ip->family == 6 && memcmp(ip->bytes, v6_loopback, 16) == 0;
}

/* Clears every bit of ip past the first `prefix`. */
static void mask(struct sl_ip *ip, unsigned prefix)
{
	for (unsigned i = 0; i < 16; i++) {
		unsigned keep = prefix >= 8 * (i + 1) ? 8
		                : prefix > 8 * i      ? prefix - 8 * i
		                                      : 0;
		ip->bytes[i] &= (uint8_t)(0xff00u >> keep);
	}
}

int sl_cidr_parse(const char *s, size_t len, struct sl_cidr *out)
{
	const char *slash = memchr(s, '/', len);
	size_t addr_len = slash ? (size_t)(slash - s) : len;
	memset(out, 0, sizeof(*out));
	struct sl_ip ip;
	char text[SL_CLIENT_ADDR_MAX];
	if (addr_len == 0 || addr_len >= sizeof(text) ||
	    memchr(s, '\0', addr_len))
		return SL_EINVAL;
	/* Parsed without unmapping, so that the prefix counts IPv6 bits. */
	memcpy(text, s, addr_len);
	text[addr_len] = '\0';
	memset(&ip, 0, sizeof(ip));
	if (inet_pton(AF_INET, text, ip.bytes) == 1)
		ip.family = 4;
	else if (inet_pton(AF_INET6, text, ip.bytes) == 1)
		ip.family = 6;
	else
		return SL_EINVAL;

	unsigned max = ip.family == 4 ? 32 : 128, prefix = max;
	if (slash) {
		const char *p = slash + 1, *end = s + len;
		/* One to three digits: no sign, no space, no "0x". */
		if (p == end || end - p > 3)
			return SL_EINVAL;
		prefix = 0;
		for (; p < end; p++) {
			if (*p < '0' || *p > '9')
				return SL_EINVAL;
			prefix = prefix * 10 + (unsigned)(*p - '0');
		}
		if (prefix > max)
			return SL_EINVAL;
	}
	/*
	 * A mapped range of /96 or more holds IPv4 addresses only. One
	 * shorter ("::ffff:10.0.0.0/8" meant as 10/8) would be the IPv6
	 * range ::/8 once masked, holding ::1 and no IPv4 peer: refused.
	 */
	if (ip.family == 6 &&
	    memcmp(ip.bytes, mapped_prefix, sizeof(mapped_prefix)) == 0) {
		if (prefix < 96)
			return SL_EINVAL;
		unmap(&ip);
		prefix -= 96;
	}
	mask(&ip, prefix);
	out->net = ip;
	out->prefix = prefix;
	return 0;
}

static bool cidr_contains(const struct sl_cidr *c, const struct sl_ip *ip)
{
	if (c->net.family != ip->family)
		return false;
	unsigned whole = c->prefix / 8, bits = c->prefix % 8;
	if (memcmp(c->net.bytes, ip->bytes, whole) != 0)
		return false;
	if (bits == 0)
		return true;
	uint8_t m = (uint8_t)(0xff00u >> bits);
	return (ip->bytes[whole] & m) == c->net.bytes[whole];
}

bool sl_cidr_match(const struct sl_cidr *ranges, unsigned n,
                   const struct sl_ip *ip)
{
	if (ip->family == 0)
		return false;
	for (unsigned i = 0; i < n; i++)
		if (cidr_contains(&ranges[i], ip))
			return true;
	return false;
}

static bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

/*
 * Walks one X-Forwarded-For value from its right end. Returns false when
 * the walk is over (an untrusted address or garbage was met), true when it
 * should go on into the header line before this one.
 */
static bool walk_value(const struct sl_cidr *trusted, unsigned n_trusted,
                       const char *value, size_t len, struct sl_ip *client)
{
	const char *end = value + len;
	while (end > value) {
		const char *start = end;
		while (start > value && start[-1] != ',')
			start--;
		const char *a = start, *b = end;
		while (a < b && is_ows(*a))
			a++;
		while (b > a && is_ows(b[-1]))
			b--;
		/* The comma before this element, or the value's start. */
		end = start > value ? start - 1 : value;
		if (a == b)
			continue; /* an empty element: "a, , b" */
		struct sl_ip ip;
		if (sl_ip_parse(a, (size_t)(b - a), &ip) != 0)
			return false;
		*client = ip;
		if (!sl_cidr_match(trusted, n_trusted, &ip))
			return false;
	}
	return true;
}

struct sl_ip sl_client_addr_resolve(const struct sl_cidr *trusted,
                                    unsigned n_trusted,
                                    const struct sl_ip *peer,
                                    const struct sl_http_header *headers,
                                    unsigned n_headers)
{
	struct sl_ip client = *peer;
	if (!sl_cidr_match(trusted, n_trusted, peer))
		return client;
	for (unsigned i = n_headers; i-- > 0;) {
		const struct sl_http_header *h = &headers[i];
		if (!h->name || !h->value ||
		    strcasecmp(h->name, "X-Forwarded-For") != 0)
			continue;
		if (!walk_value(trusted, n_trusted, h->value, h->value_len,
		                &client))
			break;
	}
	return client;
}

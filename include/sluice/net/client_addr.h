/*
 * client_addr.h: who a request comes from, behind trusted proxies.
 *
 * Every request gets a client address: its connection's TCP peer, or, when
 * that peer is a trusted proxy (--trusted-proxy), the address the proxy
 * puts into X-Forwarded-For. The header is read as nginx's realip module
 * does with real_ip_recursive on: from the right, skipping addresses that
 * are themselves trusted, so that a chain of proxies (a balancer in front
 * of nginx in front of sluice) yields the first address none of them
 * vouches for. What a client writes at the left of the header itself is
 * never believed unless every proxy to its right is trusted.
 *
 * Glossary:
 *   peer     the address at the other end of the TCP connection.
 *   trusted  inside one of the --trusted-proxy CIDRs: its X-Forwarded-For
 *            is believed.
 *   mapped   an IPv4-mapped IPv6 address (::ffff:192.0.2.1), which a
 *            dual-stack listener reports for an IPv4 client; it is taken
 *            as the IPv4 address it holds, for matching and for text.
 */
#ifndef SLUICE_CLIENT_ADDR_H
#define SLUICE_CLIENT_ADDR_H

#include "sluice/net/http_rules.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Room for any address as text, IPv6 included, with its NUL. */
#define SL_CLIENT_ADDR_MAX INET6_ADDRSTRLEN

/* An IPv4 or IPv6 address; family 0: none (unknown). */
struct sl_ip {
	uint8_t family;    /* 4 or 6, or 0 */
	uint8_t bytes[16]; /* network order; IPv4 in the first 4 */
};

/* An address range: the addresses whose first `prefix` bits are net's. */
struct sl_cidr {
	struct sl_ip net; /* host bits zero */
	unsigned prefix;  /* 0..32 for IPv4, 0..128 for IPv6 */
};

/*
 * Parses an address ("192.0.2.1", "2001:db8::1") from s[0..len), nothing
 * around it; a mapped address becomes IPv4. Returns 0 or SL_EINVAL.
 */
int sl_ip_parse(const char *s, size_t len, struct sl_ip *out);

/* The address of an AF_INET or AF_INET6 sockaddr; SL_EINVAL for others. */
int sl_ip_from_sockaddr(const struct sockaddr *sa, struct sl_ip *out);

/*
 * Writes ip as text ("192.0.2.1", "2001:db8::1") into buf, which should
 * hold SL_CLIENT_ADDR_MAX bytes; "" for family 0.
 */
void sl_ip_format(const struct sl_ip *ip, char *buf, size_t size);

/* Whether ip is a loopback address: 127.0.0.0/8 or ::1. */
bool sl_ip_is_loopback(const struct sl_ip *ip);

/*
 * Parses "ADDR/PREFIX" or a bare ADDR (a /32 or /128) from s[0..len).
 * Bits past the prefix are cleared ("10.1.2.3/8" is 10.0.0.0/8, as nginx
 * and Go read it). A mapped IPv6 range of /96 or longer becomes the IPv4
 * range it holds. Returns 0 or SL_EINVAL.
 */
int sl_cidr_parse(const char *s, size_t len, struct sl_cidr *out);

/* Whether ip is inside one of the n ranges (an IPv4 address only matches
 * IPv4 ranges, an IPv6 one IPv6 ranges). False for family 0. */
bool sl_cidr_match(const struct sl_cidr *ranges, unsigned n,
                   const struct sl_ip *ip);

/*
 * The client address of a request from `peer` with these headers: peer,
 * unless peer is trusted and the request has X-Forwarded-For. Then the
 * X-Forwarded-For elements, every such header line joined in order as one
 * comma list, are walked from the right: each is taken as the client, and
 * the walk goes on past it only while it is trusted too. An element that
 * is not an address (a port, "unknown", garbage) stops the walk; the
 * address taken last stands. Empty elements are skipped (RFC 9110, 5.6.1).
 *
 * The walk costs one parse per element it visits, and it visits only
 * while the addresses are trusted: a client cannot make it longer than
 * its own header, which --max-header-size bounds.
 */
struct sl_ip sl_client_addr_resolve(const struct sl_cidr *trusted,
                                    unsigned n_trusted,
                                    const struct sl_ip *peer,
                                    const struct sl_http_header *headers,
                                    unsigned n_headers);

#endif

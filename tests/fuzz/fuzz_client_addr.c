/*
 * fuzz_client_addr.c: addresses, ranges and the X-Forwarded-For walk
 * (client_addr.c) on any bytes.
 *
 * The input is split at '\n': the first part is a --trusted-proxy range,
 * the second a peer address, each later one (at most MAX_HEADERS) the
 * value of a header line, most of them X-Forwarded-For in varied case.
 * Invariants checked:
 *   - a range that parses has family 4 or 6, a prefix within it, and
 *     holds its own network address;
 *   - an address that parses formats into text that parses back to it;
 *   - the walk agrees with a plain reference: every X-Forwarded-For value
 *     joined with commas, in order, then read from the right, empty
 *     elements skipped, stopping at garbage or at the first address no
 *     range trusts; the peer alone when it is not trusted.
 */
#include "sluice/net/client_addr.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* More header lines than a test needs to mix names and orders. */
#define MAX_HEADERS 8

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_client_addr: %s\n", #cond);      \
			abort();                                               \
		}                                                              \
	} while (0)

static bool same_ip(const struct sl_ip *a, const struct sl_ip *b)
{
	return a->family == b->family &&
	       memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

static void check_range(const char *s, size_t len)
{
	struct sl_cidr c;
	if (sl_cidr_parse(s, len, &c) != 0)
		return;
	CHECK(c.net.family == 4 || c.net.family == 6);
	CHECK(c.prefix <= (c.net.family == 4 ? 32u : 128u));
	CHECK(sl_cidr_match(&c, 1, &c.net));
}

static void check_address(const char *s, size_t len)
{
	struct sl_ip ip, back;
	if (sl_ip_parse(s, len, &ip) != 0)
		return;
	char text[SL_CLIENT_ADDR_MAX];
	sl_ip_format(&ip, text, sizeof(text));
	CHECK(sl_ip_parse(text, strlen(text), &back) == 0);
	CHECK(same_ip(&ip, &back));
}

static bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

/* The walk as the header's definition reads, on the joined list. */
static struct sl_ip reference(const struct sl_cidr *trusted, unsigned n,
                              const struct sl_ip *peer, const char *list,
                              size_t len)
{
	struct sl_ip client = *peer;
	if (!sl_cidr_match(trusted, n, peer))
		return client;
	size_t end = len;
	for (;;) {
		size_t start = end;
		while (start > 0 && list[start - 1] != ',')
			start--;
		size_t a = start, b = end;
		while (a < b && is_ows(list[a]))
			a++;
		while (b > a && is_ows(list[b - 1]))
			b--;
		if (a < b) {
			struct sl_ip ip;
			if (sl_ip_parse(list + a, b - a, &ip) != 0)
				return client;
			client = ip;
			if (!sl_cidr_match(trusted, n, &ip))
				return client;
		}
		if (start == 0)
			return client;
		end = start - 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = {"X-Forwarded-For",
	                                    "x-forwarded-for", "Forwarded",
	                                    "X-FORWARDED-FOR"};
	const char *text = (const char *)data;
	const char *parts[MAX_HEADERS + 2];
	size_t lens[MAX_HEADERS + 2];
	unsigned n_parts = 0;
	size_t at = 0;
	while (n_parts < MAX_HEADERS + 2 && at <= size) {
		const char *nl = memchr(text + at, '\n', size - at);
		size_t end = nl ? (size_t)(nl - text) : size;
		parts[n_parts] = text + at;
		lens[n_parts++] = end - at;
		if (!nl)
			break;
		at = end + 1;
	}

	struct sl_cidr trusted[3];
	unsigned n_trusted = 0;
	CHECK(sl_cidr_parse("127.0.0.0/8", 11, &trusted[n_trusted++]) == 0);
	CHECK(sl_cidr_parse("fd00::/8", 8, &trusted[n_trusted++]) == 0);
	check_range(parts[0], lens[0]);
	if (sl_cidr_parse(parts[0], lens[0], &trusted[n_trusted]) == 0)
		n_trusted++;

	struct sl_ip peer;
	if (n_parts > 1)
		check_address(parts[1], lens[1]);
	if (n_parts < 2 || sl_ip_parse(parts[1], lens[1], &peer) != 0)
		CHECK(sl_ip_parse("127.0.0.1", 9, &peer) == 0);

	struct sl_http_header headers[MAX_HEADERS];
	unsigned n_headers = 0;
	char *joined = malloc(size + MAX_HEADERS + 1);
	CHECK(joined);
	size_t joined_len = 0;
	for (unsigned i = 2; i < n_parts; i++) {
		check_address(parts[i], lens[i]);
		/* The first byte picks the name, so inputs can mix them. */
		const char *name =
		    names[lens[i] ? (unsigned char)parts[i][0] % 4 : 0];
		headers[n_headers++] = (struct sl_http_header){
		    .name = name, .value = parts[i], .value_len = lens[i]};
		if (strcmp(name, "Forwarded") == 0)
			continue;
		if (joined_len > 0)
			joined[joined_len++] = ',';
		memcpy(joined + joined_len, parts[i], lens[i]);
		joined_len += lens[i];
	}

	struct sl_ip got = sl_client_addr_resolve(trusted, n_trusted, &peer,
	                                          headers, n_headers);
	struct sl_ip want =
	    reference(trusted, n_trusted, &peer, joined, joined_len);
	CHECK(same_ip(&got, &want));
	CHECK(got.family == 4 || got.family == 6);
	free(joined);
	return 0;
}

/*
 * discovery_syntax.c: the text of a DNS target ("NAME:PORT") and of a
 * resolver's address ("IP:PORT", "[IPv6]:PORT"), checked and split (see
 * discovery_syntax.h). Pure parsing: no c-ares, no loop, so that the
 * configuration can check what discovery.c will follow.
 */
#include "sluice/config/discovery_syntax.h"

#include "sluice/base/common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int parse_port(const char *s, unsigned *port)
{
	char *end;
	if (*s < '0' || *s > '9')
		return SL_EINVAL;
	unsigned long n = strtoul(s, &end, 10);
	if (*end || n == 0 || n > 65535)
		return SL_EINVAL;
	*port = (unsigned)n;
	return 0;
}

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

int sl_discovery_parse_target(const char *target, char *name, unsigned *port,
                              char *err, size_t err_size)
{
	const char *colon = strrchr(target, ':');
	size_t len = colon ? (size_t)(colon - target) : 0;
	unsigned p;
	bool ok = colon && len > 0 && len <= SL_DISCOVERY_NAME_MAX &&
	          parse_port(colon + 1, &p) == 0;
	for (size_t i = 0; ok && i < len; i++)
		ok = name_char(target[i]);
	if (!ok) {
		/* A URL's credentials written here by mistake stay hidden. */
		char *shown = sl_url_shown(target);
		snprintf(err, err_size,
		         "expected NAME:PORT (a DNS name of at most %d "
		         "characters, a port from 1 to 65535), got \"%s\"",
		         SL_DISCOVERY_NAME_MAX, shown);
		free(shown);
		return SL_EINVAL;
	}
	if (name) {
		memcpy(name, target, len);
		name[len] = '\0';
	}
	if (port)
		*port = p;
	return 0;
}

int sl_discovery_parse_server(const char *server, char *err, size_t err_size)
{
	char host[SL_DISCOVERY_ADDR_LEN];
	const char *colon = strrchr(server, ':');
	const char *start = server, *end = colon;
	if (colon && server[0] == '[' && colon > server && colon[-1] == ']') {
		start = server + 1;
		end = colon - 1;
	}
	size_t len = end ? (size_t)(end - start) : 0;
	unsigned port;
	unsigned char buf[sizeof(struct in6_addr)];
	bool ok = colon && len > 0 && len < sizeof(host) &&
	          parse_port(colon + 1, &port) == 0;
	if (ok) {
		memcpy(host, start, len);
		host[len] = '\0';
		bool v6 = start != server;
		ok = inet_pton(v6 ? AF_INET6 : AF_INET, host, buf) == 1;
	}
	if (!ok) {
		snprintf(err, err_size,
		         "expected IP:PORT or [IPv6]:PORT, got \"%s\"", server);
		return SL_EINVAL;
	}
	return 0;
}

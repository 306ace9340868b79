/*
 * discovery_syntax.h: how a DNS name to follow (--upstream-dns NAME:PORT, a
 * model's dns:) and the resolver to ask (--dns-server IP:PORT) are
 * written, checked when the configuration is read.
 *
 * The options are checked before anything runs, with the rest of the
 * configuration (config.c, models_config.c); discovery.h, which follows
 * such a name on the loop, parses the same text again when it starts. The
 * syntax is kept here, below both, so that reading the configuration
 * needs nothing of the fleet.
 */
#ifndef SLUICE_DISCOVERY_SYNTAX_H
#define SLUICE_DISCOVERY_SYNTAX_H

#include <stddef.h>

/* Longest NAME: a DNS name has at most 253 characters. */
#define SL_DISCOVERY_NAME_MAX 253
/* Room for an address as text (INET6_ADDRSTRLEN). */
#define SL_DISCOVERY_ADDR_LEN 46

/*
 * Checks "NAME:PORT" (a DNS name, a port from 1 to 65535). Returns 0, or
 * SL_EINVAL with a line for the user in `err`. `name` (NULL, or room for
 * SL_DISCOVERY_NAME_MAX + 1 bytes) and `port` (or NULL) receive the parts.
 */
int sl_discovery_parse_target(const char *target, char *name, unsigned *port,
                              char *err, size_t err_size);

/*
 * Checks a resolver's address, "IP:PORT" or "[IPv6]:PORT". Returns 0, or
 * SL_EINVAL with a line for the user in `err`.
 */
int sl_discovery_parse_server(const char *server, char *err, size_t err_size);

#endif

/*
 * discovery.h: following a DNS name's addresses (--upstream-dns NAME:PORT),
 * as a Kubernetes headless Service lists the pods behind it.
 *
 * One sl_discovery resolves one NAME (A and AAAA, with c-ares) every
 * --dns-refresh, without blocking the loop, and reports how the set of
 * addresses changed: each address that appeared, each that vanished. It
 * knows nothing of upstreams; its owner turns addresses into them.
 *
 * Answers and what they do to the set:
 *   addresses      the set becomes exactly the answer (at most
 *                  SL_DISCOVERY_MAX_ADDRS of them, the lowest first; more
 *                  are left out, with one log line while it lasts)
 *   NXDOMAIN or    the set becomes empty. Kubernetes answers so for a
 *   no address     headless Service with no ready pod: there is then
 *                  nothing to send work to, as with no upstream ready.
 *   failure        (SERVFAIL, refused, timeout, ...) the set stays as it
 *                  was: a resolver that is down says nothing about the
 *                  pods. One log line when lookups start failing (or fail
 *                  in another way), one when they succeed again.
 *
 * Not handled yet: an IPv6 link-local answer's scope (fe80::1%eth0) is
 * not kept, so such an address would not connect; the TTL is not read (the
 * name is asked again every --dns-refresh whatever it says).
 *
 * Lifetime: sl_discovery_new(), sl_discovery_start(), and
 * sl_discovery_close(), after which hooks->on_closed reports the end and
 * the discovery frees itself. No hook runs during sl_discovery_close().
 *
 * Glossary:
 *   target   "NAME:PORT" as given; PORT is where each address is served
 *   lookup   one ares_getaddrinfo() of NAME; a new one starts
 *            --dns-refresh after the last ended, never two at once
 *   result   how a lookup ended, for the metrics (enum sl_dns_result)
 *
 * Re-entrancy (c-ares 1.18): ares_process_fd() may run the lookup's
 * callback and the socket-state callback before it returns, and
 * ares_getaddrinfo() may run the lookup's callback before it returns (an
 * immediate failure). Each updates its state before calling out, and the
 * hooks may not call back into this module except sl_discovery_close().
 */
#ifndef SLUICE_DISCOVERY_H
#define SLUICE_DISCOVERY_H

#include "sluice/config/discovery_syntax.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/*
 * Addresses one name may give: as many as sluice holds upstreams
 * (SL_MAX_UPSTREAMS), since each address becomes one.
 */
#define SL_DISCOVERY_MAX_ADDRS 64
/*
 * A DNS query unanswered this long is sent again; after
 * SL_DISCOVERY_TRIES tries (c-ares doubles the wait each round) the lookup
 * has failed. A resolver on the same network answers in milliseconds.
 */
#define SL_DISCOVERY_TRY_MS 1000
#define SL_DISCOVERY_TRIES 2

/* How a lookup ended, for sluice_dns_lookups_total{result}. */
enum sl_dns_result {
	SL_DNS_OK,      /* at least one address */
	SL_DNS_EMPTY,   /* NXDOMAIN, or the name has no address */
	SL_DNS_TIMEOUT, /* no answer from the resolver */
	SL_DNS_ERROR,   /* SERVFAIL, refused, or anything else */
	SL_DNS_RESULTS,
};

const char *sl_dns_result_name(enum sl_dns_result r);

struct sl_discovery;

struct sl_discovery_hooks {
	/* `addr` (text: "10.0.0.5", "fd00::5") joined the set. */
	void (*on_added)(struct sl_discovery *d, const char *addr);
	/* `addr` left the set. */
	void (*on_removed)(struct sl_discovery *d, const char *addr);
	/* Closed; `d` is freed when this returns. May be NULL. */
	void (*on_closed)(struct sl_discovery *d);
};

/*
 * A new discovery of `target` (checked with sl_discovery_parse_target),
 * asking `server` (checked with sl_discovery_parse_server), or the
 * system's resolvers (/etc/resolv.conf) when it is NULL or "". Returns
 * NULL with a line in `err` when c-ares cannot be set up. Nothing runs
 * until sl_discovery_start().
 */
struct sl_discovery *sl_discovery_new(uv_loop_t *loop, const char *target,
                                      const char *server, uint64_t refresh_ms,
                                      const struct sl_discovery_hooks *hooks,
                                      void *data, char *err, size_t err_size);

/* Starts the first lookup now. */
void sl_discovery_start(struct sl_discovery *d);

/* Stops looking up and closes; see Lifetime above. */
void sl_discovery_close(struct sl_discovery *d);

/* The owner's pointer given to sl_discovery_new(). */
void *sl_discovery_data(const struct sl_discovery *d);
/* "NAME:PORT" as given; NAME alone; PORT. Owned by `d`. */
const char *sl_discovery_target(const struct sl_discovery *d);
const char *sl_discovery_name(const struct sl_discovery *d);
unsigned sl_discovery_port(const struct sl_discovery *d);
/* Addresses in the set now. */
unsigned sl_discovery_count(const struct sl_discovery *d);
/* Lookups that ended with `r`, since the start. */
unsigned long long sl_discovery_lookups(const struct sl_discovery *d,
                                        enum sl_dns_result r);

/*
 * The upstream URL for `addr` and `port`: http://ADDR:PORT, or
 * http://[ADDR]:PORT for IPv6. Writes at most `size` bytes.
 */
void sl_discovery_url(const char *addr, unsigned port, char *buf, size_t size);

#endif

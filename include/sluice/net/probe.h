/*
 * probe.h: `sluice --probe URL`, a health check that needs no other tool.
 *
 * A container image built on a slim base has neither curl nor wget, so its
 * HEALTHCHECK runs sluice itself: one GET, answered 2xx or not. The probe
 * runs before (and instead of) the event loop, so it may block.
 */
#ifndef SLUICE_PROBE_H
#define SLUICE_PROBE_H

#include <stddef.h>

/*
 * The whole probe, connection and answer together, gets this long. Five
 * seconds is far beyond what /health takes on a loaded host (it answers
 * from memory) and well inside the 30 s a container runtime's health check
 * allows by default, so a wedged gateway is reported rather than killed
 * by the runtime's own timeout.
 */
#define SL_PROBE_TIMEOUT_S 5

/*
 * GETs `url` (http:// or https://; no proxy, no redirects followed) and
 * returns 0 when the answer's status is 2xx. Otherwise returns SL_EUPSTREAM
 * (the server answered with another status) or SL_ECURL (no answer:
 * refused, timed out, a bad URL) and writes one line naming the cause into
 * `err`. libcurl must have been initialised (curl_global_init).
 */
int sl_probe(const char *url, char *err, size_t err_size);

#endif

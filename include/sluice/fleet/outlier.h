/*
 * outlier.h: outlier ejection of one upstream, as pure arithmetic on an
 * injected clock (Envoy's consecutive-failure outlier detection).
 *
 * An upstream that fails `eject_after` requests or health checks in a row
 * is ejected: it takes no work for a period that starts at the base
 * (--eject-time) and doubles with each ejection in a row, up to
 * SL_EJECT_TIME_MAX_MS. It returns only through a successful health check
 * once the period is over. A successful request resets both the count and
 * the period. A passing health check forgives only failed health checks:
 * an upstream that answers /health can still fail every request, and its
 * checks must not hide that.
 */
#ifndef SLUICE_OUTLIER_H
#define SLUICE_OUTLIER_H

#include <stdbool.h>
#include <stdint.h>

struct sl_outlier {
	unsigned failures; /* consecutive failed requests or checks */
	unsigned streak;   /* ejections since the last good request */
	unsigned long long ejections; /* ever, for the metrics */
	bool last_was_check; /* the last failure was a health check's */
	bool ejected;
	uint64_t until_ms; /* while ejected: the period's end */
};

/* The period of the n-th ejection in a row (n >= 1). */
uint64_t sl_outlier_period_ms(uint64_t base_ms, unsigned n);

/*
 * A failure at `now_ms`, of a health check or of a request. Returns true
 * when it ejects the upstream (never when eject_after is 0, when already
 * ejected, or when !may_eject).
 */
bool sl_outlier_failed(struct sl_outlier *o, bool check, unsigned eject_after,
                       uint64_t base_ms, bool may_eject, uint64_t now_ms);

/* A request succeeded: the count and the period start over. */
void sl_outlier_request_ok(struct sl_outlier *o);

/*
 * A health check succeeded at `now_ms`. Returns true when it ends an
 * ejection whose period is over.
 */
bool sl_outlier_check_ok(struct sl_outlier *o, uint64_t now_ms);

/* Milliseconds of the ejection still to run (0 when not ejected). */
uint64_t sl_outlier_remaining_ms(const struct sl_outlier *o, uint64_t now_ms);

#endif

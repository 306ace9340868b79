/*
 * outlier.c: the arithmetic of outlier ejection; see outlier.h.
 */
#include "sluice/fleet/outlier.h"

#include "sluice/config/config.h"

uint64_t sl_outlier_period_ms(uint64_t base_ms, unsigned n)
{
	uint64_t period = base_ms;
	for (unsigned i = 1; i < n && period < SL_EJECT_TIME_MAX_MS; i++)
		period *= 2;
	return period < SL_EJECT_TIME_MAX_MS ? period : SL_EJECT_TIME_MAX_MS;
}

bool sl_outlier_failed(struct sl_outlier *o, bool check, unsigned eject_after,
                       uint64_t base_ms, bool may_eject, uint64_t now_ms)
{
	if (o->ejected)
		return false;
	o->failures++;
	o->last_was_check = check;
	if (eject_after == 0 || o->failures < eject_after || !may_eject)
		return false;
	o->streak++;
	o->ejections++;
	o->ejected = true;
	o->failures = 0;
	o->until_ms = now_ms + sl_outlier_period_ms(base_ms, o->streak);
	return true;
}

void sl_outlier_request_ok(struct sl_outlier *o)
{
	o->failures = 0;
	if (!o->ejected)
		o->streak = 0;
}

bool sl_outlier_check_ok(struct sl_outlier *o, uint64_t now_ms)
{
	if (o->last_was_check)
		o->failures = 0;
	if (!o->ejected || now_ms < o->until_ms)
		return false;
	o->ejected = false;
	return true;
}

uint64_t sl_outlier_remaining_ms(const struct sl_outlier *o, uint64_t now_ms)
{
	return o->ejected && o->until_ms > now_ms ? o->until_ms - now_ms : 0;
}

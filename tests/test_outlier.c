/*
 * test_outlier.c: outlier ejection's arithmetic with an injected clock.
 */
#include "sluice/fleet/outlier.h"

#include "sluice/config/config.h"
#include "test.h"

static void test_period_doubles_up_to_the_cap(void)
{
	ASSERT_EQ(sl_outlier_period_ms(5000, 1), 5000);
	ASSERT_EQ(sl_outlier_period_ms(5000, 2), 10000);
	ASSERT_EQ(sl_outlier_period_ms(5000, 3), 20000);
	ASSERT_EQ(sl_outlier_period_ms(5000, 7), 300000);
	ASSERT_EQ(sl_outlier_period_ms(5000, 1000000), SL_EJECT_TIME_MAX_MS);
	ASSERT_EQ(sl_outlier_period_ms(SL_EJECT_TIME_MAX_MS, 1),
	          SL_EJECT_TIME_MAX_MS);
}

static void test_ejects_after_n_in_a_row(void)
{
	struct sl_outlier o = {0};
	ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 0));
	ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 1));
	/* A success in between starts the count over. */
	sl_outlier_request_ok(&o);
	ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 2));
	ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 3));
	ASSERT(!o.ejected);
	ASSERT(sl_outlier_failed(&o, false, 3, 1000, true, 10));
	ASSERT(o.ejected);
	ASSERT_EQ(o.ejections, 1);
	ASSERT_EQ(sl_outlier_remaining_ms(&o, 10), 1000);
	ASSERT_EQ(sl_outlier_remaining_ms(&o, 600), 410);
	/* Failures while ejected change nothing. */
	ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 20));
	ASSERT_EQ(o.until_ms, 1010);
	/* A health check before the end does not bring it back. */
	ASSERT(!sl_outlier_check_ok(&o, 1009));
	ASSERT(o.ejected);
	ASSERT(sl_outlier_check_ok(&o, 1010));
	ASSERT(!o.ejected);
	ASSERT_EQ(sl_outlier_remaining_ms(&o, 1010), 0);

	/* Failing again at once: the next period is twice as long. */
	for (int i = 0; i < 2; i++)
		ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 2000));
	ASSERT(sl_outlier_failed(&o, false, 3, 1000, true, 2000));
	ASSERT_EQ(o.until_ms, 4000);
	ASSERT(sl_outlier_check_ok(&o, 4000));
	for (int i = 0; i < 2; i++)
		ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 5000));
	ASSERT(sl_outlier_failed(&o, false, 3, 1000, true, 5000));
	ASSERT_EQ(o.until_ms, 9000);
	ASSERT_EQ(o.ejections, 3);

	/* A good request after the return: the period starts over. */
	ASSERT(sl_outlier_check_ok(&o, 9000));
	sl_outlier_request_ok(&o);
	for (int i = 0; i < 2; i++)
		ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 10000));
	ASSERT(sl_outlier_failed(&o, false, 3, 1000, true, 10000));
	ASSERT_EQ(o.until_ms, 11000);
}

static void test_off_and_held_back(void)
{
	struct sl_outlier o = {0};
	for (int i = 0; i < 100; i++)
		ASSERT(!sl_outlier_failed(&o, false, 0, 1000, true, 0));
	ASSERT(!o.ejected);
	/* The last usable upstream is not ejected: that would serve nobody. */
	struct sl_outlier p = {0};
	for (int i = 0; i < 5; i++)
		ASSERT(!sl_outlier_failed(&p, false, 1, 1000, false, 0));
	ASSERT(!p.ejected);
	ASSERT(sl_outlier_failed(&p, false, 1, 1000, true, 0));
}

static void test_checks_forgive_only_checks(void)
{
	struct sl_outlier o = {0};
	/* Failed requests stand through passing health checks. */
	ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 0));
	ASSERT(!sl_outlier_check_ok(&o, 1));
	ASSERT(!sl_outlier_failed(&o, false, 3, 1000, true, 2));
	ASSERT(!sl_outlier_check_ok(&o, 3));
	ASSERT(sl_outlier_failed(&o, false, 3, 1000, true, 4));
	/* Failed health checks are forgiven by a passing one. */
	struct sl_outlier p = {0};
	ASSERT(!sl_outlier_failed(&p, true, 3, 1000, true, 0));
	ASSERT(!sl_outlier_failed(&p, true, 3, 1000, true, 1));
	ASSERT(!sl_outlier_check_ok(&p, 2));
	ASSERT_EQ(p.failures, 0);
	ASSERT(!sl_outlier_failed(&p, true, 3, 1000, true, 3));
	ASSERT(!sl_outlier_failed(&p, true, 3, 1000, true, 4));
	ASSERT(sl_outlier_failed(&p, true, 3, 1000, true, 5));
}

int main(void)
{
	RUN(test_period_doubles_up_to_the_cap);
	RUN(test_ejects_after_n_in_a_row);
	RUN(test_off_and_held_back);
	RUN(test_checks_forgive_only_checks);
	return 0;
}

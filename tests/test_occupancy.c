/*
 * test_occupancy.c: what sluice believes of a remote llama-server's
 * /metrics and /slots (fleet/upstream.h, "Occupancy"): a reading that can
 * be true, and nothing else (issue 41, item 3).
 */
#include "sluice/base/common.h"
#include "sluice/fleet/upstream.h"
#include "test.h"

#include <stdio.h>
#include <uv.h>

/* A /metrics answer as llama-server writes it, with these two values. */
static const char *metrics(const char *processing, const char *deferred)
{
	static char body[512];
	snprintf(body, sizeof(body),
	         "# HELP llamacpp:requests_processing Number of requests "
	         "processing.\n"
	         "# TYPE llamacpp:requests_processing gauge\n"
	         "llamacpp:requests_processing %s\n"
	         "# HELP llamacpp:requests_deferred Number of requests "
	         "deferred.\n"
	         "# TYPE llamacpp:requests_deferred gauge\n"
	         "llamacpp:requests_deferred %s\n"
	         "llamacpp:n_busy_slots_per_decode 0\n",
	         processing, deferred);
	return body;
}

static void test_whole_numbers_in_decimal_are_read(void)
{
	unsigned p = 99, d = 99;
	ASSERT(sl_occupancy_parse_metrics(metrics("3", "0"), 4, &p, &d));
	ASSERT_EQ(p, 3);
	ASSERT_EQ(d, 0);
	/* C++ writes a double so too: a fraction of 0, an exponent. */
	ASSERT(sl_occupancy_parse_metrics(metrics("4.0", "1e+01"), 4, &p, &d));
	ASSERT_EQ(p, 4);
	ASSERT_EQ(d, 10);
	/* A Windows line end, or spaces after the value. */
	ASSERT(sl_occupancy_parse_metrics(metrics("2\r", "1  "), 4, &p, &d));
	ASSERT_EQ(p, 2);
	ASSERT_EQ(d, 1);
}

static void test_what_cannot_be_a_count_is_refused(void)
{
	/* What strtod() would take, and a count cannot be. */
	static const char *const bad[] = {
	    "NaN", "nan",  "inf", "+Inf", "-1",  "-0", "+1", "0x10",  "0x1p2",
	    "1.5", "1e-1", "",    "1e",   "1 2", "3x", ".5", "1e999",
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(bad); i++) {
		unsigned p = 99, d = 99;
		if (sl_occupancy_parse_metrics(metrics(bad[i], "0"), 4, &p, &d))
			TEST_FAIL("processing \"%s\" was taken as %u", bad[i],
			          p);
		if (sl_occupancy_parse_metrics(metrics("0", bad[i]), 4, &p, &d))
			TEST_FAIL("deferred \"%s\" was taken as %u", bad[i], d);
		ASSERT_EQ(p, 99);
		ASSERT_EQ(d, 99);
	}
}

static void test_more_busy_slots_than_slots_is_refused(void)
{
	unsigned p = 99, d = 99;
	ASSERT(sl_occupancy_parse_metrics(metrics("4", "0"), 4, &p, &d));
	ASSERT(!sl_occupancy_parse_metrics(metrics("5", "0"), 4, &p, &d));
	ASSERT(!sl_occupancy_parse_metrics(metrics("1e6", "0"), 4, &p, &d));
	/* A queue may be longer than the slots, not without bound. */
	char most[32], more[32];
	snprintf(most, sizeof(most), "%u", 4 * SL_OCCUPANCY_DEFERRED_PER_SLOT);
	snprintf(more, sizeof(more), "%u",
	         4 * SL_OCCUPANCY_DEFERRED_PER_SLOT + 1);
	ASSERT(sl_occupancy_parse_metrics(metrics("4", most), 4, &p, &d));
	ASSERT_EQ(d, 4 * SL_OCCUPANCY_DEFERRED_PER_SLOT);
	ASSERT(!sl_occupancy_parse_metrics(metrics("4", more), 4, &p, &d));
}

static void test_a_gauge_missing_or_labelled_is_no_reading(void)
{
	unsigned p, d;
	ASSERT(!sl_occupancy_parse_metrics("llamacpp:requests_processing 1\n",
	                                   4, &p, &d));
	ASSERT(!sl_occupancy_parse_metrics(
	    "llamacpp:requests_processing{x=\"1\"} 1\n"
	    "llamacpp:requests_deferred 0\n",
	    4, &p, &d));
	/* A longer name that starts alike is another gauge. */
	ASSERT(
	    !sl_occupancy_parse_metrics("llamacpp:requests_processing_total 1\n"
	                                "llamacpp:requests_deferred 0\n",
	                                4, &p, &d));
	ASSERT(
	    !sl_occupancy_parse_metrics("<html>Not Found</html>", 4, &p, &d));
}

static void test_slots_count_their_busy_ones(void)
{
	unsigned p = 99;
	ASSERT(sl_occupancy_parse_slots("[{\"id\":0,\"is_processing\":true},"
	                                "{\"id\":1,\"is_processing\":false}]",
	                                2, &p));
	ASSERT_EQ(p, 1);
	/* More busy than /props' slots: not this llama-server's. */
	ASSERT(!sl_occupancy_parse_slots(
	    "[{\"is_processing\":true},{\"is_processing\":true},"
	    "{\"is_processing\":true}]",
	    2, &p));
	ASSERT(!sl_occupancy_parse_slots("{\"error\":{}}", 2, &p));
	ASSERT(!sl_occupancy_parse_slots("not json", 2, &p));
	ASSERT_EQ(p, 1);
}

static void on_tick(uv_timer_t *t)
{
	(void)t;
}

/*
 * A reading gone by (none yet, here) lets one request go while none of
 * sluice's is there, and holds the rest for a poll; a full queue
 * (sl_occupancy_press) lets sluice's own count stand instead, for that
 * turn of the loop only (upstream.h, "Occupancy").
 */
static void test_a_full_queue_takes_the_slots_an_old_reading_holds(void)
{
	uv_loop_t loop;
	ASSERT_EQ(uv_loop_init(&loop), 0);
	struct sl_config cfg = {.occupancy_poll_ms = 200};
	struct sl_upstream u = {.loop = &loop,
	                        .cfg = &cfg,
	                        .state = SL_UPSTREAM_READY,
	                        .server_slots = 4,
	                        .total_slots = 4};
	ASSERT(sl_occupancy_polled(&u));
	ASSERT_EQ(sl_occupancy_free(&u, 4, 0), 1);
	ASSERT_EQ(sl_occupancy_free(&u, 4, 1), 0);
	sl_occupancy_press(&u);
	ASSERT_EQ(sl_occupancy_free(&u, 4, 1), 3);
	ASSERT_EQ(sl_occupancy_free(&u, 4, 4), 0);
	/* The next turn of the loop: the reading holds them back again. */
	uv_timer_t tick;
	uv_timer_init(&loop, &tick);
	uint64_t pressed = uv_now(&loop);
	while (uv_now(&loop) == pressed) {
		uv_timer_start(&tick, on_tick, 1, 0);
		uv_run(&loop, UV_RUN_ONCE);
	}
	ASSERT_EQ(sl_occupancy_free(&u, 4, 1), 0);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	ASSERT_EQ(uv_loop_close(&loop), 0);
}

int main(void)
{
	test_whole_numbers_in_decimal_are_read();
	test_what_cannot_be_a_count_is_refused();
	test_more_busy_slots_than_slots_is_refused();
	test_a_gauge_missing_or_labelled_is_no_reading();
	test_slots_count_their_busy_ones();
	test_a_full_queue_takes_the_slots_an_old_reading_holds();
	return 0;
}

/*
 * test.h: the few assertion macros sluice's C unit tests use.
 *
 * Each test program is one meson test. A failed assertion prints where and
 * what, then exits non-zero at once, so the first failure is the one shown.
 */
#ifndef SLUICE_TEST_H
#define SLUICE_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_FAIL(...)                                                    \
	do {                                                              \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);           \
		fprintf(stderr, __VA_ARGS__);                             \
		fputc('\n', stderr);                                      \
		exit(1);                                                  \
	} while (0)

#define ASSERT(cond)                                                      \
	do {                                                              \
		if (!(cond))                                              \
			TEST_FAIL("assertion failed: %s", #cond);         \
	} while (0)

#define ASSERT_EQ(a, b)                                                   \
	do {                                                              \
		long long a_ = (long long)(a), b_ = (long long)(b);       \
		if (a_ != b_)                                             \
			TEST_FAIL("%s == %s failed: %lld != %lld", #a, #b, \
				  a_, b_);                                \
	} while (0)

#define ASSERT_STR_EQ(a, b)                                               \
	do {                                                              \
		const char *a_ = (a), *b_ = (b);                          \
		if (!a_ || !b_ || strcmp(a_, b_) != 0)                    \
			TEST_FAIL("%s == %s failed: \"%s\" != \"%s\"", #a, \
				  #b, a_ ? a_ : "(null)",                 \
				  b_ ? b_ : "(null)");                    \
	} while (0)

#define ASSERT_CONTAINS(haystack, needle)                                 \
	do {                                                              \
		const char *h_ = (haystack), *n_ = (needle);              \
		if (!h_ || !strstr(h_, n_))                               \
			TEST_FAIL("\"%s\" does not contain \"%s\"",       \
				  h_ ? h_ : "(null)", n_);                \
	} while (0)

/* Runs one test function, printing its name for the log. */
#define RUN(fn)                                                           \
	do {                                                              \
		fprintf(stderr, "-- %s\n", #fn);                          \
		fn();                                                     \
	} while (0)

#endif

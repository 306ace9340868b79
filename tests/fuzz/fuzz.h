/*
 * fuzz.h: what the libFuzzer targets share.
 *
 * The targets split their input at pseudo-random points; the points come
 * from the input's own bytes, so that a finding reproduces from its file.
 */
#ifndef SLUICE_FUZZ_H
#define SLUICE_FUZZ_H

#include <stdint.h>

/* xorshift32; a zero state (which would stay zero) starts from a constant. */
static inline uint32_t fuzz_next_random(uint32_t *state)
{
	uint32_t x = *state ? *state : 0x9e3779b9u;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *state = x;
}

#endif

/*
 * trace_context.c: traceparent read and written, ids, sampling (see
 * trace_context.h).
 */
#include "sluice/ops/trace_context.h"

#include "sluice/base/common.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static int hex_digit(char c)
{
	/* Lowercase only: W3C's traceparent refuses uppercase. */
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* n bytes from 2n lowercase hex digits; false on any other character. */
static bool unhex(const char *p, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hex_digit(p[2 * i]), lo = hex_digit(p[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	uint8_t any = 0;
	for (size_t i = 0; i < n; i++)
		any |= p[i];
	return any == 0;
}

int sl_traceparent_parse(const char *value, struct sl_trace_parent *out)
{
	if (!value)
		return SL_EINVAL;
	size_t len = strlen(value);
	uint8_t version;
	if (len < SL_TRACEPARENT_LEN || !unhex(value, &version, 1) ||
	    version == 0xff || value[2] != '-' || value[35] != '-' ||
	    value[52] != '-')
		return SL_EINVAL;
	/* Version 00 is exactly 55 characters; later ones may go on. */
	if (version == 0 ? len != SL_TRACEPARENT_LEN
	                 : len > SL_TRACEPARENT_LEN && value[55] != '-')
		return SL_EINVAL;
	struct sl_trace_parent p;
	if (!unhex(value + 3, p.trace_id, SL_TRACE_ID_BYTES) ||
	    !unhex(value + 36, p.span_id, SL_SPAN_ID_BYTES) ||
	    !unhex(value + 53, &p.flags, 1) ||
	    all_zero(p.trace_id, SL_TRACE_ID_BYTES) ||
	    all_zero(p.span_id, SL_SPAN_ID_BYTES))
		return SL_EINVAL;
	*out = p;
	return 0;
}

void sl_trace_hex(char *out, const uint8_t *bytes, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

void sl_traceparent_format(char *out, const uint8_t *trace_id,
                           const uint8_t *span_id, uint8_t flags)
{
	memcpy(out, "00-", 3);
	sl_trace_hex(out + 3, trace_id, SL_TRACE_ID_BYTES);
	out[35] = '-';
	sl_trace_hex(out + 36, span_id, SL_SPAN_ID_BYTES);
	out[52] = '-';
	sl_trace_hex(out + 53, &flags, 1);
}

/* ---- ids ---- */

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256**: one 64-bit output. */
static uint64_t next(struct sl_trace_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

/* splitmix64, to spread one seed over the state, as Vigna advises. */
static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void sl_trace_rng_seed_with(struct sl_trace_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix(&seed);
}

void sl_trace_rng_seed(struct sl_trace_rng *r)
{
	if (getrandom(r->s, sizeof(r->s), GRND_NONBLOCK) ==
	        (ssize_t)sizeof(r->s) &&
	    !all_zero((const uint8_t *)r->s, sizeof(r->s)))
		return;
	/* Early boot without entropy: unique enough to spread spans. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	sl_trace_rng_seed_with(r, (uint64_t)ts.tv_nsec ^
	                              ((uint64_t)ts.tv_sec << 20) ^
	                              ((uint64_t)getpid() << 48));
}

void sl_trace_rng_id(struct sl_trace_rng *r, uint8_t *out, size_t n)
{
	do {
		for (size_t i = 0; i < n; i += 8) {
			uint64_t v = next(r);
			size_t k = n - i < 8 ? n - i : 8;
			memcpy(out + i, &v, k);
		}
	} while (all_zero(out, n));
}

/* ---- sampling ---- */

/* The traceidratio decision on a trace id alone (see the header). */
static bool ratio_keeps(double ratio, const uint8_t *trace_id)
{
	if (ratio >= 1.0)
		return true;
	if (!(ratio > 0.0))
		return false;
	uint64_t r = 0;
	for (int i = SL_TRACE_ID_BYTES - 7; i < SL_TRACE_ID_BYTES; i++)
		r = r << 8 | trace_id[i];
	return (double)r < ratio * 72057594037927936.0; /* 2^56 */
}

bool sl_trace_sampled(enum sl_otel_sampler sampler, double ratio,
                      const uint8_t *trace_id,
                      const struct sl_trace_parent *parent)
{
	switch (sampler) {
	case SL_OTEL_ALWAYS_ON: return true;
	case SL_OTEL_ALWAYS_OFF: return false;
	case SL_OTEL_TRACEIDRATIO: return ratio_keeps(ratio, trace_id);
	case SL_OTEL_PARENTBASED_ALWAYS_ON:
	case SL_OTEL_PARENTBASED_ALWAYS_OFF:
	case SL_OTEL_PARENTBASED_TRACEIDRATIO:
		/* A caller's decision stands, whichever way it went. */
		if (parent)
			return parent->flags & SL_TRACE_FLAG_SAMPLED;
		if (sampler == SL_OTEL_PARENTBASED_ALWAYS_ON)
			return true;
		if (sampler == SL_OTEL_PARENTBASED_ALWAYS_OFF)
			return false;
		return ratio_keeps(ratio, trace_id);
	}
	return false;
}

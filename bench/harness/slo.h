/*
 * slo.h: service-level objectives as sluice-bench writes, sends and
 * judges them: an SLO spec ("ttft=500ms,tpot=50ms"), a mix of SLO classes
 * (--slo-mix), the whole milliseconds its headers carry, a refusal's
 * reason, and how far sluice's predicted time to first token fell from
 * the one measured. Pure functions, no loop and no I/O: unit-tested on
 * their own (tests/test_bench_slo.c).
 *
 * Glossary:
 *   SLO        a bound on one latency of a request: time to first token
 *              (ttft), time per output token after the first (tpot), end
 *              to end (e2el), in milliseconds; 0 is no bound.
 *   SLO class  a name, its SLOs and its share of the conversations.
 *   shed       a refusal (429 or 503) whose error "reason" starts with
 *              "slo_": sluice predicted that it could not meet the
 *              request's SLO (issue 40's SLO-aware admission).
 *   relative error  (predicted - actual) / actual, for a request whose
 *              answer carried sluice's predicted TTFT (Server-Timing
 *              "predicted") and whose TTFT was measured; its absolute
 *              value is the predictor's error.
 */
#ifndef SLUICE_BENCH_SLO_H
#define SLUICE_BENCH_SLO_H

#include <stdbool.h>
#include <stddef.h>

struct slo {
	double ttft_ms, tpot_ms, e2el_ms; /* 0: not set */
};

/* Classes in one --slo-mix: a handful say what a fleet serves. */
#define SLO_MAX_CLASSES 8
/* A class's name, its NUL included. */
#define SLO_NAME_MAX 32
/* A refusal's reason kept, its NUL included: sluice's are "slo_ttft" and
 * "slo_deadline"; a longer one is cut. */
#define SLO_REASON_MAX 32
/* The largest SLO taken, in ms: a day. Past it, it bounds nothing a
 * benchmark waits for, and its header stays a small integer. */
#define SLO_MAX_MS 86400000.0

struct slo_class {
	char name[SLO_NAME_MAX];
	struct slo slo;
	double share; /* of the conversations, in (0, 1]; all add up to 1 */
};

/*
 * Parses "ttft=MS<sep>tpot=MS<sep>e2el=MS" (any of them, in any order;
 * "e2e=" too) into *s, each a duration "500", "500ms" or "0.5s". An empty
 * spec and an empty piece are errors, not SLOs that every request meets.
 * Returns 0, or -1 with a one-line reason in err.
 */
int slo_parse(struct slo *s, const char *spec, char sep, char *err,
              size_t errlen);

/*
 * Parses "NAME:SPEC:SHARE,..." into classes (SLO_MAX_CLASSES at most),
 * SPEC being slo_parse's with '/' between its pieces: "interactive:
 * ttft=500ms/tpot=50ms:0.8,batch:ttft=30s:0.2". Names are letters,
 * digits, '_', '-' and '.', each given once; shares add up to 1. Sets *n.
 * Returns 0, or -1 with a one-line reason in err.
 */
int slo_mix_parse(struct slo_class *classes, unsigned *n, const char *spec,
                  char *err, size_t errlen);

/* The class that u (uniform in [0, 1)) falls in, by cumulative share. */
unsigned slo_class_draw(const struct slo_class *classes, unsigned n, double u);

/* Whether s bounds anything. */
bool slo_any(const struct slo *s);

/* An SLO in the whole milliseconds of its header (X-SLO-TTFT-Ms,
 * X-SLO-TPOT-Ms): rounded up, so that the header never asks for more
 * than the SLO that is judged; at least 1. */
long slo_header_ms(double ms);

/*
 * The "reason" of an error answer's body ({"error": {..., "reason": R}})
 * into out (cut to outlen - 1 bytes). Returns whether there was one; out
 * is "" when not.
 */
bool slo_refusal_reason(const char *body, size_t len, char *out, size_t outlen);

/* Whether a refusal's reason is an SLO's: "slo_" and more. */
bool slo_is_shed(const char *reason);

/*
 * (predicted - actual) / actual, both in ms; NAN when either is unknown
 * (NAN), predicted is negative, or actual is not above 0.
 */
double slo_relative_error(double predicted_ms, double actual_ms);

#endif

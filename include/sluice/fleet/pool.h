/*
 * pool.h: the upstreams of one model, and the choice among them.
 *
 * A pool holds pointers to upstreams the app owns (app_state.h); it never starts,
 * stops or frees one. Requests of the model go to the usable member with
 * the most room: the fewest requests in flight per slot, ties in turn.
 * Upstreams of other models are never considered, so a model without free
 * slots leaves the others' choices alone.
 *
 * Invariants: members are distinct, kept in the order of their index (their
 * place in the app's upstream list); at most SL_POOL_MAX.
 *
 * Every call is O(members).
 */
#ifndef SLUICE_POOL_H
#define SLUICE_POOL_H

#include "sluice/fleet/affinity.h"
#include "sluice/fleet/upstream.h"

#include <stdbool.h>
#include <stddef.h>

/* Members of one pool: a model's replicas or remote upstreams. */
#define SL_POOL_MAX 64

struct sl_pool {
	struct sl_upstream *members[SL_POOL_MAX];
	unsigned n;
};

/*
 * Adds `u` (not a member yet; its index set) in index order; returns 0,
 * or SL_EINVAL when full.
 */
int sl_pool_add(struct sl_pool *p, struct sl_upstream *u);

/* Removes `u` if it is a member (it stopped). */
void sl_pool_remove(struct sl_pool *p, const struct sl_upstream *u);

bool sl_pool_contains(const struct sl_pool *p, const struct sl_upstream *u);

/* Prefix affinity for one pick (affinity.h). */
struct sl_pool_affinity {
	struct sl_affinity *table;
	const struct sl_affinity_key *key;
	/*
	 * The most requests in flight the replica holding the prefix may
	 * have beyond the least busy qualifying one and still be chosen.
	 */
	unsigned margin;
	enum sl_affinity_result result; /* out, when a key was matched */
};

/*
 * A request's service level, for a pick among replicas (sched/README.md,
 * "Deadlines"): the time left to its TTFT deadline (or none), its TPOT
 * level (or none), and what predicts its costs on each member (predict.h).
 */
struct sl_pool_slo {
	bool has_ttft, has_tpot;
	double ttft_left_ms; /* its TTFT deadline less now */
	double tpot_ms;      /* its TPOT level */
	double prompt_bytes; /* its body's bytes */
	double out_tokens;   /* the tokens it is predicted to generate */
};

/*
 * The usable member with the most room, or NULL with the reason, for the
 * client, in `why`. With need_slot, only one with a free slot qualifies.
 * Ties go in turn: the first qualifying member whose index (its place in
 * the app's list) is at or after `next` wins, wrapping around. `avoid` (or
 * NULL), the upstream a request just failed on, is picked only when no
 * other qualifies. With `aff` (or NULL) and a key to match, the usable
 * member that served the longest known prefix of the request (its home)
 * is chosen instead, when it qualifies and has at most aff->margin
 * requests in flight beyond the one with the most room; aff->result says
 * how it went: BUSY when the home cannot take it now (full, avoided, or
 * beyond the margin). The table is only read: the caller stores the
 * choice it makes (and keeps a BUSY prefix's home as it was: the detour
 * is for this request only).
 *
 * With `slo` (or NULL) and every qualifying member's latency model known
 * (predict.h), the member with the most predicted headroom takes it
 * instead of the one with the most room: headroom is the time left to
 * its TTFT deadline less its predicted TTFT there, and for a TPOT level
 * its level less the predicted TPOT there with one more sequence, times
 * its tokens; the lesser of the two when it has both (ties: the most
 * room, as above). Its prefix's home is kept while its headroom there is
 * not negative: affinity never costs a request its service level.
 */
struct sl_upstream *sl_pool_pick(const struct sl_pool *p, bool need_slot,
                                 const struct sl_upstream *avoid, unsigned next,
                                 struct sl_pool_affinity *aff,
                                 const struct sl_pool_slo *slo, char *why,
                                 size_t size);

/* Free slots across the usable members: the model's capacity now. */
unsigned sl_pool_free_slots(const struct sl_pool *p);

/* Slots in all across the usable members. */
unsigned sl_pool_total_slots(const struct sl_pool *p);

/*
 * Whether a member that cannot take work now is expected soon: starting
 * (a managed llama-server loading its model, a remote one under its first
 * check), restarting after an exit, or ready but suspect or ejected.
 */
bool sl_pool_expected(const struct sl_pool *p);

/* Whether a usable member other than `u` is left (ejection's rule). */
bool sl_pool_other_usable(const struct sl_pool *p, const struct sl_upstream *u);

/* Members that are ready. */
unsigned sl_pool_ready(const struct sl_pool *p);

#endif

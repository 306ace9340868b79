/*
 * sched_impl.h: what the pieces of the scheduler share (sched.h is what
 * the rest of sluice sees): the flows and bands of fair queuing (flows.c,
 * sched.h "Fair queuing"), which sched.c drives. Flows are the
 * scheduler's own: they live in its struct sl_sched and its items, and
 * only its pieces include this header.
 *
 * A flow is one owner's tenant, with its weighted service; a band is one
 * initial priority; a flow queue (flowq) is a flow's waiting requests in
 * one band, oldest first. Each band keeps its flow queues in three heaps:
 * least service first (who goes next), fewest running per unit of weight
 * first (who may take the fair reserve) and longest queue per unit of
 * weight first (who gives up a request when the queue is full).
 */
#ifndef SLUICE_SCHED_IMPL_H
#define SLUICE_SCHED_IMPL_H

#include "sluice/sched/sched.h"

/* Whether a is due before b: the earlier due, then the earlier push. */
static inline bool sl_sched_due_before(const struct sl_sched_item *a,
                                       const struct sl_sched_item *b)
{
	if (a->due_ms != b->due_ms)
		return a->due_ms < b->due_ms;
	return a->order < b->order;
}

/* A queued item enters, or leaves, the work-ahead treap. */
void sl_ahead_insert(struct sl_sched *s, struct sl_sched_item *it);
void sl_ahead_remove(struct sl_sched *s, struct sl_sched_item *it);

void sl_flows_init(struct sl_sched_flows *fl, unsigned max_queue);
void sl_flows_free(struct sl_sched_flows *fl);

/* The item holds its flow (found or made) until sl_flows_release(). */
void sl_flows_hold(struct sl_sched_flows *fl, struct sl_sched_item *it);
void sl_flows_release(struct sl_sched_flows *fl, struct sl_sched_item *it);

/*
 * The held item joins its flow's queue in its band: at the tail (an
 * arrival) or the head (a requeue). A flow new to the band is lifted to
 * the band's least service first.
 */
void sl_flows_enter(struct sl_sched_flows *fl, struct sl_sched_item *it,
                    bool at_head);
void sl_flows_leave(struct sl_sched_flows *fl, struct sl_sched_item *it);

/* The oldest request of the least-served flow in top's band. */
struct sl_sched_item *sl_flows_next(const struct sl_sched_item *top);

/*
 * The oldest request, in top's band, of the flow with the fewest requests
 * running per unit of weight.
 */
struct sl_sched_item *sl_flows_fewest(const struct sl_sched_item *top);

/* The newest request of the longest flow queue in worst's band. */
struct sl_sched_item *sl_flows_victim(const struct sl_sched_item *worst);

/*
 * Whether the held, not yet queued, item's flow, given the victim's
 * place, would have a queue in victim's band no longer, per unit of
 * weight, than victim's flow keeps: then it may take that place.
 */
bool sl_flows_may_displace(const struct sl_sched_item *it,
                           const struct sl_sched_item *victim);

/*
 * Whether flow f has fewer requests in flight than its share of `slots`:
 * its weight's part of the weights of every flow held now (waiting or in
 * flight).
 */
bool sl_flows_below_share(const struct sl_sched_flows *fl,
                          const struct sl_sched_flow *f, unsigned slots);

void sl_flows_charge(struct sl_sched_flow *f, double service);

double sl_flows_service(const struct sl_sched_flows *fl, uint64_t id);

#endif

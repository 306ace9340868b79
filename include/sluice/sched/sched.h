/*
 * sched.h: sluice's own queue: priorities with aging, micro-batches,
 * slot-aware dispatch, admission control and queue deadlines.
 *
 * llama-server queues what exceeds its slots in an unbounded FIFO. sluice
 * keeps the queue itself and never sends an upstream more requests than it
 * has free slots, so priorities and back-pressure are real.
 *
 * Aging: a request's effective priority is its initial priority plus
 * aging_rate times the seconds it has waited. Every request ages at the same
 * rate, so the order by (initial priority - aging_rate * arrival time) never
 * changes as time passes, and a binary heap keyed on it is exact, with no
 * periodic pass over the queue. Ties go to the earlier arrival.
 *
 * Admission: at most max_queue wait. A full queue still takes a request
 * that outranks its least important one, which is refused instead: under
 * overload, urgent traffic displaces batch traffic rather than bouncing.
 * The least important is the lowest ranked of the requests not asked as
 * urgent, however long they have aged, and of the urgent ones only when
 * no other waits: so an urgent arrival is not refused while any other
 * request waits.
 *
 * Urgent reserve: the last urgent_reserve free slots go only to requests
 * whose priority is urgent by now, so an urgent request finds a slot
 * without waiting for someone else's generation to end. Those asked as
 * urgent go first, the best of them; a request only aged to urgent takes
 * one when none of them waits (so nothing waits on the reserve for ever,
 * not even behind another sluice that keeps filling the other slots of a
 * shared llama-server), though it ranks before them for every other slot.
 * A reserved slot that no urgent request takes sits idle: under overload
 * each one costs other traffic a slot's worth of throughput.
 *
 * Urgent reserve, auto (urgent_reserve SL_SCHED_RESERVE_AUTO): the reserve
 * is sized from the traffic seen, and is 0 while no urgent requests come.
 * Three decayed sums, all with a memory of SL_SCHED_LOAD_MEMORY_MS, give
 * the urgent arrival rate lambda, and, by Little's law (mean busy slots =
 * dispatch rate * hold), the mean time S a request holds its slot. The
 * owner says how many slots there are in all (n). Under overload, with
 * other requests always waiting, the reserve behaves as a small queue: an
 * urgent arrival takes a reserved slot (the deficit d, reserved slots
 * taken, grows by one) and any slot that frees, urgent or not, goes back
 * to the reserve (d shrinks) until it is full again; n - R + d slots are
 * busy, each freeing at rate 1/S. An urgent request waits only when it
 * arrives with d = R. With load a = lambda * S and exponential holds this
 * birth-death chain gives
 *     1 / P(wait) = sum over j = 0..R of  n (n-1) ... (n-j+1) / a^j
 * and the reserve is the smallest R with P(wait) at most
 * SL_SCHED_URGENT_WAIT_TARGET, within [1, n - 1]: each step adds one term,
 * so it costs O(R). With fewer than SL_SCHED_URGENT_MIN_SEEN urgent
 * arrivals in memory the reserve is 0, so it decays back to 0 after
 * urgent traffic stops (from 13 a second, in about 20 s). The estimate is
 * refreshed at every sl_sched_run(), which also samples the slots once
 * (two owner calls) and decays the sums (an exp()): O(1). The model
 * assumes overload; below it the reserve is larger than needed, and costs
 * only what other traffic would have used beyond n - R slots.
 *
 * Micro-batching, fixed window (window_ms a duration): a window opens when
 * a request arrives and nothing is pending. When it closes (at its
 * deadline, or early once the pending requests fill every free slot) up to
 * the free slots' worth of requests leave the top of the heap as one batch.
 * Urgent requests skip the window when a slot is free. With no slot free,
 * requests wait, and each freed slot goes to whatever is on top at that
 * moment.
 *
 * Micro-batching, auto window (window_ms SL_SCHED_WINDOW_AUTO): a window
 * only holds what it can help. Holding a request while a slot is free costs
 * its whole wait and buys nothing unless the window changes who gets the
 * slot, which it can only do when the slots are contested: more requests
 * wait than there are free slots, and they are not all of one priority
 * class (within one class the heap's order is arrival order, which leaving
 * at once gives as well). So requests leave at once while the free slots
 * take them all, or while everyone waiting is of one class; when a slot
 * is free and contested, a window opens (its length: see
 * SL_SCHED_AUTO_WINDOW_SHARE below), and at its deadline (or as soon as
 * the contest ends: enough slots freed, or waiting requests left; or the
 * queue fills) the free slots' worth leave the top as one batch.
 * Urgent requests still skip it when a slot is free. A slot that frees
 * while the queue is contested opens the next window, so under mixed
 * overload freed slots are gathered into batches; under uniform overload
 * each freed slot is taken at once, as llama-server's own queue would.
 *
 * Fair queuing (fair on): inside a band, the requests of one initial
 * priority, the backlogged flow (the owner's tenant) with the least
 * weighted service goes next, as in the Virtual Token Counter of Sheng et
 * al. (OSDI 2024). Everyone in a band ages alike, so the band's keys are
 * its arrival order and aging decides only when the band is served, not
 * who in it: so a dispatch takes the top of the heap as before, and if
 * the least-served flow's oldest request is another one, the two swap
 * their places (key and seq) first. Which band goes, and when, is
 * exactly what it was without fairness: aging, the urgent reserve, the
 * windows and admission see the same keys. Service is counted per flow
 * in tokens divided by the flow's weight: an item's `cost` when it leaves
 * (the owner's estimate of its prompt), then whatever the owner charges
 * as the answer is generated and counted (sl_sched_charge). A flow that
 * becomes backlogged in a band is lifted to the least service of the
 * flows backlogged there, so an idle spell banks no credit. A full queue
 * sheds, in the band that would lose a request, the newest request of the
 * flow with the longest queue there per unit of weight; an arrival of that
 * band whose flow's queue would then be no longer takes its place. Flows
 * are kept while they have requests
 * queued or held (pushed and not yet released), so their number is
 * bounded by the queue and the slots. Cost: O(log n) per event, plus a
 * walk of the flow's bands (a tenant seldom uses more than a few
 * priorities).
 *
 * Fair reserve (fair_reserve, with fair on): slots are not taken back once
 * given, so a light tenant beside a flood, first in line, still waits for
 * one of the flood's generations to end. The last fair_reserve free slots
 * beyond the urgent reserve go only to the next request whose flow runs
 * fewer than its share of the slots (total_slots less the urgent reserve,
 * split by weight among the flows held now), and is not the only flow held
 * (or to an urgent request, which may take any slot). So a flood alone
 * fills all but the reserve, and beside it holds the larger of that and
 * its share, while another tenant starts at once as long as it runs fewer
 * than its own share. The owner gives its upstreams that many slots more
 * than a flood should fill.
 *
 * Deadlines (sched/README.md, "Deadlines"): an item may carry a service
 * level, as slo_start_ms, the latest moment it may leave the queue and
 * still see its first token in time (its TTFT deadline less the time the
 * owner predicts it takes upstream). Such an item is sheddable: once that
 * moment has passed while it waits, it leaves the queue at once
 * (ops->late) rather than take a slot only to be late. Inside a band
 * (and, with fair queuing, inside the flow whose turn it is), the item
 * due first goes first: earliest deadline first, where an item without a
 * service level counts as due once it has waited SL_SCHED_DUE_CLASSES
 * priority class's worth of aging (5 s at the default rate; the queue
 * timeout with aging off). So one that waits behind a stream of tighter
 * deadlines still goes within that time: nothing starves, and a band
 * without service levels keeps its arrival order. The dispatch takes the
 * due item through the same swap of places as fair queuing's, so the
 * band's keys, aging, the reserves and admission see what they saw
 * before. Only the earliest slo_start_ms of the whole queue is looked at
 * (a fourth heap, of the items with one, finds it in O(1)); when it is in
 * another band or flow than the one served, that band goes in arrival
 * order this time.
 *
 * Work ahead (sl_sched_ahead): each item carries the owner's estimate of
 * the time it will hold a slot (service_ms); a treap ordered as the
 * dispatch serves them (higher initial priority first, then the earlier
 * due) sums it, so that the work queued ahead of a request that arrives
 * now is known in O(log n), for the owner's prediction of its wait.
 * Aging between bands is not counted in it: a lower band's old request
 * that has aged past a newer one is counted behind it.
 *
 * The module is pure logic: time comes in as arguments and the owner
 * supplies the free-slot count and what to do with a batch or an expired
 * request. It never calls back into itself: work that a callback causes (a
 * slot freed by a failed dispatch) is picked up by the same sl_sched_run(),
 * but for an item the dispatch puts back (sl_sched_requeue).
 *
 * Glossary:
 *   item     one queued request, embedded in its owner's struct
 *   key      initial priority - aging_rate * arrival seconds; larger first
 *   window   the batching window, open or closed
 *   batch    the requests dispatched together at one moment
 *   due      when an item should leave at the latest: slo_start_ms, or
 *            for one without a service level, its arrival plus
 *            sl_sched_due_wait_ms()
 */
#ifndef SLUICE_SCHED_H
#define SLUICE_SCHED_H

#include <stdbool.h>
#include <stdint.h>

/* Priority classes; a request counts as urgent from 2 up, as in Forge. */
#define SL_PRIORITY_BATCH 0.0
#define SL_PRIORITY_NORMAL 1.0
#define SL_PRIORITY_URGENT 2.0
/* Accepted range for numeric priorities. */
#define SL_PRIORITY_MIN 0.0
#define SL_PRIORITY_MAX 100.0
/* Dispatch times remembered to estimate the drain rate (Retry-After). */
#define SL_SCHED_RATE_SAMPLES 64
/*
 * Retry-After: the time one place in line is assumed to take before two
 * dispatches have been seen (1 s, what every refusal said before there was
 * a measure), and the least step (dispatches measured at one instant,
 * a batch, would make it 0: refused clients are still spread this far
 * apart); the least a refused client is told to wait (a client that comes
 * back sooner only finds the same full queue), and the most (past that the
 * estimate means little, and clients give up anyway).
 */
#define SL_SCHED_RETRY_DEFAULT_STEP_MS 1000
#define SL_SCHED_RETRY_MIN_STEP_MS 10
#define SL_SCHED_RETRY_MIN_MS 100
#define SL_SCHED_RETRY_MAX_MS 120000
/*
 * window_ms meaning "auto" (see Micro-batching above), and how long an
 * auto window gathers: at most 50 ms, the project's micro-batch, and at
 * most a tenth of the time a request holds its slot, measured as the auto
 * reserve measures it (Little's law over SL_SCHED_LOAD_MEMORY_MS; the
 * owner must give total_slots, else every window is the full 50 ms). A
 * contested slot idles while its window gathers, so under mixed-priority
 * overload, where every freed slot opens one, the share bounds what the
 * windows cost: about a tenth of the throughput at most. Against real
 * generations (seconds) that is the whole 50 ms; against the demo model's
 * 64 tokens (about 60 ms) 6 ms, where a fixed 50 ms left each slot idle
 * almost half the time (0.77x throughput; bench/RESULTS.md as of f8c757c).
 */
#define SL_SCHED_WINDOW_AUTO UINT64_MAX
#define SL_SCHED_AUTO_WINDOW_MS 50
#define SL_SCHED_AUTO_WINDOW_SHARE 0.1
/* Priority classes counted for the auto window: batch, normal, urgent. */
#define SL_SCHED_CLASSES 3
#define SL_SCHED_URGENT_CLASS 2
/*
 * urgent_reserve meaning "auto" (see Urgent reserve, auto, above).
 *
 * The estimates' memory: 5 s holds about 65 arrivals at 13 urgent
 * requests a second (10% of twice a 67/s capacity), so lambda is known
 * within about 12%, and forgets a finished burst within tens of seconds.
 *
 * A first urgent arrival after a quiet spell opens a new measure of the
 * rate, counted over at least SL_SCHED_URGENT_MIN_SPAN_MS. Two arrivals
 * in 250 ms read as 8 a second, so the reserve a spell needs is kept from
 * its second arrival on, while the normal requests holding the slots
 * finish (in test_sched's simulation, 8 urgent a second on 4 slots of 65 ms:
 * 2.6 of a spell's first 16 urgent requests wait, against 2.9 with 1 s).
 * A shorter span would read two close arrivals as a flood.
 *
 * The share of urgent arrivals allowed to find no free slot under
 * overload: 1 in 20. Such an arrival waits for the next slot to free, a
 * fraction of one generation (S / n on average), so the p99 of urgent
 * waits falls inside that short tail; each further reserved slot costs
 * other traffic a whole slot, so a tighter target is dear (on 4 slots,
 * 1% would reserve 3 where 5% reserves 2 at the load above).
 *
 * Urgent arrivals in memory (decayed) below which the reserve is 0: one.
 * A lone urgent request is not traffic worth idling a slot for; from a
 * second one on the reserve holds, for up to 3.5 s (5 s * ln 2) after
 * two close arrivals. Not handled: so the first two urgent requests of a
 * spell find nothing kept. Half an arrival would keep a slot after the first
 * one for 3.5 s (in test_sched's simulation, 1.7 of a spell's first 16 urgent
 * requests wait rather than 2.6), but then every lone urgent request
 * under overload holds a slot from other traffic for seconds.
 *
 * While free slots sit reserved and other requests wait, sl_sched_run()
 * asks to be called again after SL_SCHED_RESERVE_RECHECK_MS, as the
 * reserve may have shrunk; so a request held back by a reserve that no
 * longer holds it waits at most that long.
 */
#define SL_SCHED_RESERVE_AUTO UINT32_MAX
#define SL_SCHED_LOAD_MEMORY_MS 5000
#define SL_SCHED_URGENT_MIN_SPAN_MS 250
#define SL_SCHED_URGENT_WAIT_TARGET 0.05
#define SL_SCHED_URGENT_MIN_SEEN 1.0
#define SL_SCHED_RESERVE_RECHECK_MS 100
/*
 * Service, the unit of fair queuing, in tokens: each prompt token counts
 * 1 and each generated one 2, the weights the Virtual Token Counter was
 * evaluated with, as a generated token holds a slot for a whole step
 * where a prompt token is one of a batch. The owner counts with them.
 */
#define SL_SCHED_SERVICE_PROMPT_TOKEN 1.0
#define SL_SCHED_SERVICE_OUTPUT_TOKEN 2.0
/*
 * An item without a service level counts as due after the aging that
 * lifts it this many priority classes (sched.h, "Deadlines").
 */
#define SL_SCHED_DUE_CLASSES 1.0
/* heap_index of an item that is not queued. */
#define SL_SCHED_NOT_QUEUED UINT32_MAX
/* Hash buckets for flows and bands, at most (chains grow past it). */
#define SL_SCHED_BUCKETS_MAX 4096u

struct sl_sched_flow;
struct sl_sched_flowq;
struct sl_sched_band;

struct sl_sched_item {
	double priority; /* initial */
	double key;      /* see the glossary */
	uint64_t seq;    /* arrival order, for ties */
	uint64_t arrival_ms;
	uint64_t deadline_ms;              /* queue timeout */
	uint32_t heap_index;               /* place in the best-first heap */
	uint32_t bottom_index;             /* place in the worst-first heap */
	uint32_t urgent_index;             /* in the urgent heap, if asked so */
	struct sl_sched_item *prev, *next; /* arrival-order list */
	/*
	 * Fair queuing: set by the owner before sl_sched_push(). flow_id
	 * names whose request it is (0: the default flow); weight is that
	 * flow's share (> 0; 0 reads as 1); cost is the service charged to
	 * the flow when the item leaves the queue for a slot.
	 */
	uint64_t flow_id;
	double weight;
	double cost;
	/*
	 * Deadlines: set by the owner before sl_sched_push(). slo_start_ms
	 * is the latest moment the item may leave the queue and still meet
	 * its service level, 0 for none; service_ms is the time it is
	 * predicted to hold a slot (0 when unknown), summed by
	 * sl_sched_ahead(); stall_ms what its start costs the requests
	 * running beside it (its prompt's evaluation).
	 */
	uint64_t slo_start_ms;
	double service_ms;
	double stall_ms;
	/* Kept by the scheduler: see the glossary; its place among those
	 * with slo_start_ms; its node in the work-ahead treap. */
	uint64_t due_ms;
	uint32_t slo_index;
	uint64_t order; /* a tie-breaker that swaps never change */
	struct sl_sched_item *tl, *tr;
	uint32_t tprio;
	unsigned tcount;
	double twork;
	/* Kept by the scheduler: the flow held from push to release. */
	struct sl_sched_flow *flow;
	struct sl_sched_flowq *flowq;        /* while queued */
	struct sl_sched_item *fprev, *fnext; /* its flow's list in its band */
};

struct sl_sched_config {
	double aging_rate;         /* priority per second waited */
	uint64_t window_ms;        /* 0: none; SL_SCHED_WINDOW_AUTO: auto */
	unsigned max_batch;        /* 0: as many as there are free slots */
	unsigned max_queue;        /* waiting requests at most */
	uint64_t queue_timeout_ms; /* longest wait */
	bool urgent_bypass;        /* urgent requests skip the window */
	/* Free slots only urgent requests take; SL_SCHED_RESERVE_AUTO: auto. */
	unsigned urgent_reserve;
	bool fair; /* fair queuing across flows inside each band */
	/* Free slots kept for flows below their share (fair on only). */
	unsigned fair_reserve;
};

struct sl_sched_ops {
	/* Slots free now, across every upstream. */
	unsigned (*free_slots)(void *ctx);
	/*
	 * A batch leaves: items[0..n) in priority order, no longer queued. The
	 * callee owns them again (and must start them, or fail them).
	 */
	void (*dispatch)(void *ctx, struct sl_sched_item **items, unsigned n,
	                 uint64_t now_ms);
	/* An item waited queue_timeout_ms; it is no longer queued. */
	void (*expire)(void *ctx, struct sl_sched_item *item, uint64_t now_ms);
	/*
	 * An item's slo_start_ms passed while it waited: its service level
	 * can no longer be met. It is no longer queued. NULL: expire.
	 */
	void (*late)(void *ctx, struct sl_sched_item *item, uint64_t now_ms);
	/*
	 * A full queue let a more important arrival take this item's place;
	 * it is no longer queued. Called from inside sl_sched_push().
	 */
	void (*shed)(void *ctx, struct sl_sched_item *item, uint64_t now_ms);
	/*
	 * Slots in all, busy or free, across every upstream. Asked by the
	 * auto urgent reserve and the fair reserve; NULL keeps the one at 0
	 * and the other for urgent requests only.
	 */
	unsigned (*total_slots)(void *ctx);
};

/*
 * What the auto urgent reserve has seen: sums decayed by
 * exp(-age / SL_SCHED_LOAD_MEMORY_MS), brought to at_ms.
 */
struct sl_sched_load {
	uint64_t at_ms;
	double urgent;     /* urgent arrivals */
	double dispatched; /* requests dispatched, any priority */
	double busy_ms;    /* busy slots integrated over time */
	unsigned busy;     /* busy slots since at_ms (sampled at each run) */
	unsigned slots;    /* slots in all, at the last sample */
	uint64_t urgent_since_ms; /* first arrival of this urgent spell */
};

/* The flows and bands of fair queuing: two chained hash tables. */
struct sl_sched_flows {
	struct sl_sched_flow **flows; /* by flow_id */
	struct sl_sched_band **bands; /* by initial priority */
	unsigned mask;                /* buckets - 1 */
	unsigned n_flows;
	double weights; /* of the flows held now, summed */
};

struct sl_sched {
	struct sl_sched_config cfg;
	struct sl_sched_flows fl;
	const struct sl_sched_ops *ops;
	void *ctx;
	struct sl_sched_item **heap;   /* best first; cfg.max_queue entries */
	struct sl_sched_item **bottom; /* worst first; the same items */
	struct sl_sched_item **urgent; /* best first; those asked urgent */
	struct sl_sched_item **slo;    /* earliest slo_start_ms first */
	unsigned n;
	unsigned n_slo;              /* items with a service level */
	struct sl_sched_item *treap; /* work ahead, in serving order */
	uint32_t treap_rng;          /* the treap's priorities */
	struct sl_sched_item *oldest, *newest; /* arrival-order list */
	uint64_t seq;
	uint64_t epoch_ms; /* time zero for keys, to keep them small */
	bool window_open;
	uint64_t window_deadline_ms;
	/* Waiting requests per priority class (sl_priority_class order). */
	unsigned class_count[SL_SCHED_CLASSES];
	bool running;     /* inside sl_sched_run: no re-entry */
	bool came_back;   /* a dispatch of this run requeued an item */
	unsigned reserve; /* the urgent reserve now (auto: as last sized) */
	struct sl_sched_load load;    /* for the auto reserve */
	struct sl_sched_item **batch; /* scratch for dispatch */

	/* Statistics */
	uint64_t batches;                        /* batches dispatched */
	uint64_t dispatched;                     /* items dispatched */
	uint64_t rate_ms[SL_SCHED_RATE_SAMPLES]; /* recent dispatch times */
	unsigned rate_next, rate_count;
	/* The latest time a refused client was told to come back. */
	uint64_t retry_horizon_ms;
};

/* Returns 0, or SL_EINVAL for a bad config (max_queue 0). */
int sl_sched_init(struct sl_sched *s, const struct sl_sched_config *cfg,
                  const struct sl_sched_ops *ops, void *ctx, uint64_t now_ms);
void sl_sched_free(struct sl_sched *s);

/*
 * Queues an item with its initial priority. When max_queue requests are
 * already waiting, the item takes the place of the least important one if
 * it outranks it (that one goes to ops->shed), else returns SL_EFULL.
 * Returns 0 when queued. Call sl_sched_run() after.
 */
int sl_sched_push(struct sl_sched *s, struct sl_sched_item *item,
                  double priority, uint64_t now_ms);

/*
 * Puts back an item that left the queue but could not be served (its
 * upstream failed before answering), with the key, arrival order and
 * deadline it had: it goes back to its place, not to the end. A full queue
 * treats it as sl_sched_push() treats an arrival: it takes the place of a
 * less important item (ops->shed) or SL_EFULL is returned. An item whose
 * deadline has passed expires at the next sl_sched_run(). Does not open a
 * batching window. O(log n), plus a walk of the arrival-order list from its
 * newest end to the item's place (requeues are rare). Call sl_sched_run()
 * after; called from inside ops->dispatch (the owner found no slot for the
 * item after all), it ends that run's dispatching instead, so that a free
 * count the owner cannot fill does not send the item round and round: it
 * waits for the next run (a slot freed, an arrival, a timer).
 */
int sl_sched_requeue(struct sl_sched *s, struct sl_sched_item *item,
                     uint64_t now_ms);

/* Takes a queued item out (its client left), in O(log n). */
void sl_sched_remove(struct sl_sched *s, struct sl_sched_item *item);

/*
 * Fair queuing: charges `service` tokens (may be negative, a correction)
 * to the flow of an item pushed and not yet released; its flow's service
 * grows by service / weight. Does nothing when fairness is off.
 */
void sl_sched_charge(struct sl_sched *s, struct sl_sched_item *item,
                     double service);

/*
 * The owner is done with an item it pushed (served, refused, gone): its
 * hold on its flow ends (and it leaves the queue, if still there). Call it
 * once per successful push; harmless for an item never pushed.
 */
void sl_sched_release(struct sl_sched *s, struct sl_sched_item *item);

/* A flow's weighted service so far (0 for a flow not kept), for tests. */
double sl_sched_flow_service(const struct sl_sched *s, uint64_t flow_id);

bool sl_sched_queued(const struct sl_sched_item *item);

/*
 * Makes every decision due at now_ms: expires, then dispatches what the
 * window and the free slots allow. Call it after a push, a removal, a freed
 * slot, or at the time it returns: the next moment something is due, or
 * UINT64_MAX when nothing is.
 */
uint64_t sl_sched_run(struct sl_sched *s, uint64_t now_ms);

/* Waiting requests. */
unsigned sl_sched_depth(const struct sl_sched *s);

/*
 * The queued requests a request of initial `priority`, due at `due_ms`,
 * would wait behind: those of a higher initial priority, and those of its
 * own due no later (sched.h, "Work ahead"). Their number in *count and
 * their service_ms summed in *work_ms. O(log n).
 */
void sl_sched_ahead(const struct sl_sched *s, double priority, uint64_t due_ms,
                    unsigned *count, double *work_ms);

/*
 * The first `max` (at most) requests sl_sched_ahead() counts, in the
 * order the queue serves them, into out[]; returns how many. O(max + log
 * n).
 */
unsigned sl_sched_ahead_items(const struct sl_sched *s, double priority,
                              uint64_t due_ms, const struct sl_sched_item **out,
                              unsigned max);

/*
 * How long a request without a service level waits before it counts as
 * due: the aging that lifts it SL_SCHED_DUE_CLASSES classes, or with aging
 * off the queue timeout.
 */
uint64_t sl_sched_due_wait_ms(const struct sl_sched *s);

/* Requests waiting with a service level. */
unsigned sl_sched_slo_depth(const struct sl_sched *s);

/*
 * Free slots kept for urgent requests now: the configured number, or the
 * auto reserve as the latest sl_sched_run() sized it.
 */
unsigned sl_sched_urgent_reserve(const struct sl_sched *s);

/*
 * Milliseconds a client refused now should wait before it tries again, and
 * the refusal is remembered: each refused client is given its own place in
 * line, so that refused clients come back spread out rather than all at
 * once. Its rank is the queue's depth, or, when more is owed, the clients
 * already told to come back later; the wait is (rank + 1) steps, one step
 * being the time between dispatches measured over the recent ones (running
 * to now, so a stalled drain counts as slow). Between SL_SCHED_RETRY_MIN_MS
 * and SL_SCHED_RETRY_MAX_MS.
 */
uint64_t sl_sched_retry_after_ms(struct sl_sched *s, uint64_t now_ms);

/* Whole seconds for a Retry-After header: ms rounded up, at least 1. */
unsigned sl_sched_retry_after_s(uint64_t ms);

/*
 * Parses a priority, the whole NUL-terminated text: "urgent", "normal",
 * "batch" or a plain decimal number (digits, optionally a fraction: no
 * sign, spaces, hex or exponent) in [SL_PRIORITY_MIN, SL_PRIORITY_MAX].
 * Returns 0 or SL_EINVAL.
 */
int sl_priority_parse(const char *text, double *out);

/* "urgent", "normal" or "batch": the class of a priority, for labels. */
const char *sl_priority_class(double priority);

#endif

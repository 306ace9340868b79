/*
 * engine.c: one run: when each request goes, and who sends it.
 *
 * Closed loop: N clients, each running conversations back to back; a
 * --ramp starts them evenly over its length. Open loop: arrivals follow a
 * renewal process (constant, exponential or gamma gaps of mean 1) in a
 * warped time whose rate climbs linearly over the ramp, then holds: the
 * k-th arrival is due when the integral of the rate reaches the k-th sum
 * of gaps. Each request's latency counts from when it was due (its
 * intended start), never from when the bench managed to send it, so a
 * bench or a server that falls behind shows as latency instead of hiding
 * it (coordinated omission).
 */
#include "engine.h"

#include "sluice/base/common.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How often requests past --timeout are looked for. */
#define DEADLINE_SWEEP_MS 250
/* sluice's summary (batches) is read before and after each run. */
#define SUMMARY_TIMEOUT_MS 5000

static void check_finished(struct engine *e);
static void start_turn(struct session *s);

static uint64_t ms_ceil(uint64_t ns)
{
	return (ns + 999999) / 1000000;
}

/*
 * Arms t to fire once, no sooner than due_ns (sl_now_ns's clock). libuv
 * counts a timeout from its loop time, in whole milliseconds and taken
 * before the callback that arms it ran: a delay counted from sl_now_ns()
 * fires up to a millisecond or more early, which sent a user's next turn
 * before its think time was over and killed --kill-pid before --kill-at.
 * Counted from the loop time, it cannot.
 */
static void timer_at(uv_timer_t *t, uv_timer_cb cb, uint64_t due_ns)
{
	uint64_t loop_ns = uv_now(t->loop) * 1000000;
	uv_timer_start(t, cb, due_ns > loop_ns ? ms_ceil(due_ns - loop_ns) : 0,
	               0);
}

/* ---- who sends it ---- */

static int pick_tenant(struct bench *b)
{
	const struct options *o = &b->o;
	if (o->n_tenants == 0)
		return -1;
	double total = 0, acc = 0;
	for (unsigned i = 0; i < o->n_tenants; i++)
		total += o->tenants[i].weight;
	double u = wl_rng_unit(&b->rng) * total;
	for (unsigned i = 0; i < o->n_tenants; i++) {
		acc += o->tenants[i].weight;
		if (u < acc)
			return (int)i;
	}
	return (int)o->n_tenants - 1;
}

static int pick_prio(struct bench *b, int tenant)
{
	if (tenant >= 0 && b->o.tenants[tenant].prio != PRIO_NONE)
		return b->o.tenants[tenant].prio;
	if (!b->o.has_mix)
		return PRIO_NONE;
	double u = wl_rng_unit(&b->rng), acc = 0;
	for (int c = PRIO_URGENT; c < N_PRIOS; c++) {
		acc += b->o.mix[c];
		if (u < acc)
			return c;
	}
	return PRIO_NORMAL;
}

/* A conversation's SLO class, every turn of it: a user's application
 * does not change its needs mid-conversation. */
static int pick_slo_class(struct bench *b)
{
	const struct options *o = &b->o;
	if (o->n_slo_classes == 0)
		return -1;
	return (int)slo_class_draw(o->slo_classes, o->n_slo_classes,
	                           wl_rng_unit(&b->class_rng));
}

/* ---- sessions ---- */

static void on_session_closed(uv_handle_t *h)
{
	struct session *s = h->data;
	json_decref(s->history);
	free(s);
}

static void end_session(struct session *s)
{
	struct engine *e = s->e;
	bool client = s->client;
	exchange_clear(s);
	if (s->prev)
		s->prev->next = s->next;
	else
		e->live = s->next;
	if (s->next)
		s->next->prev = s->prev;
	e->active--;
	uv_close((uv_handle_t *)&s->timer, on_session_closed);
	if (client && !e->stop_issuing)
		start_session(e, true, sl_now_ns());
	check_finished(e);
}

void start_session(struct engine *e, bool client, uint64_t intended_ns)
{
	struct bench *b = e->b;
	struct session *s = sl_xcalloc(1, sizeof(*s));
	s->b = b;
	s->e = e;
	s->client = client;
	s->conv = wl_next(&b->wl);
	s->conv_id = (uint32_t)e->sessions++;
	s->tenant = pick_tenant(b);
	s->prio = pick_prio(b, s->tenant);
	s->slo_class = pick_slo_class(b);
	s->model = b->o.n_model_seq
	               ? b->o.model_seq[s->conv_id % b->o.n_model_seq]
	               : -1;
	s->intended_ns = intended_ns;
	uv_timer_init(&b->loop, &s->timer);
	s->timer.data = s;
	s->next = e->live;
	if (e->live)
		e->live->prev = s;
	e->live = s;
	e->active++;
	start_turn(s);
}

static void arm_leave(struct session *s);

static void on_session_timer(uv_timer_t *t)
{
	struct session *s = t->data;
	enum session_wait w = s->wait;
	s->wait = WAIT_NONE;
	if (w == WAIT_THINK)
		start_turn(s);
	else if (w == WAIT_RETRY) {
		exchange_resend(s);
		arm_leave(s);
	} else if (w == WAIT_LEAVE && s->busy)
		exchange_leave(s);
}

/* A plain answer left on purpose: its client goes after a while. */
static void arm_leave(struct session *s)
{
	struct bench *b = s->b;
	if (s->busy && s->x.leave && !b->o.stream) {
		s->wait = WAIT_LEAVE;
		timer_at(&s->timer, on_session_timer,
		         sl_now_ns() + (uint64_t)(b->o.cancel_ms * 1e6));
	}
}

static void start_turn(struct session *s)
{
	struct engine *e = s->e;
	if (e->stop_issuing) {
		end_session(s);
		return;
	}
	if (++e->issued >= e->b->o.requests)
		e->stop_issuing = true;
	s->busy = true;
	exchange_start(s);
	arm_leave(s);
}

static bool refused(int status)
{
	return status == 429 || status == 503;
}

void engine_exchange_done(struct session *s)
{
	struct engine *e = s->e;
	struct bench *b = s->b;
	struct record *rec = &e->r->recs[s->x.rec];
	long wait_ms = exchange_retry_after_ms(s);
	if (s->wait == WAIT_LEAVE) {
		uv_timer_stop(&s->timer);
		s->wait = WAIT_NONE;
	}
	if (!rec->ok && refused(rec->status) && wait_ms >= 0) {
		rec->retry_after = true;
		if (b->o.retry && rec->retries < b->o.max_retries) {
			s->wait = WAIT_RETRY;
			timer_at(&s->timer, on_session_timer,
			         sl_now_ns() + (uint64_t)wait_ms * 1000000);
			return;
		}
	}
	s->busy = false;
	if (rec->ok)
		e->ok_count++;
	else
		e->failed_count++;
	if (rec->cancelled && b->o.llama_url)
		scrape_left(e, s->x.rec);
	bool more = rec->ok && !rec->cancelled &&
	            s->turn + 1 < s->conv->n_turns && !e->stop_issuing;
	if (!more) {
		end_session(s);
		return;
	}
	exchange_keep_reply(s);
	exchange_clear(s);
	s->turn++;
	s->intended_ns = sl_now_ns() + (uint64_t)(b->o.think_s * 1e9);
	if (b->o.think_s > 0) {
		s->wait = WAIT_THINK;
		timer_at(&s->timer, on_session_timer, s->intended_ns);
	} else {
		start_turn(s);
	}
	check_finished(e);
}

/* ---- arrivals ---- */

/* Arrivals due by warped time x (the integral of the rate to then). */
static double warped_to_s(const struct engine *e, double x)
{
	double rate = e->r->rate, ramp = e->b->o.ramp_s;
	double during = rate * ramp / 2; /* arrivals due during the ramp */
	if (x < during)
		return sqrt(2 * ramp * x / rate);
	return ramp + (x - during) / rate;
}

static double next_gap(struct engine *e)
{
	struct bench *b = e->b;
	switch (b->o.arrivals) {
	case ARR_CONSTANT: return 1;
	case ARR_GAMMA:
		return rng_gamma(&b->rng, b->o.burstiness) / b->o.burstiness;
	default: return -log(wl_rng_unit(&b->rng));
	}
}

/*
 * Every arrival that is due goes now, each with its own intended time:
 * the loop's timers step in milliseconds and high rates fall between.
 */
static void on_arrival(uv_timer_t *t)
{
	struct engine *e = t->data;
	uint64_t now = sl_now_ns();
	while (!e->stop_issuing && e->next_arrival_ns <= now) {
		if (e->active < MAX_OPEN_INFLIGHT)
			start_session(e, false, e->next_arrival_ns);
		else
			e->r->dropped++;
		e->next_unit += next_gap(e);
		e->next_arrival_ns =
		    e->r->start_ns +
		    (uint64_t)(warped_to_s(e, e->next_unit) * 1e9);
	}
	if (!e->stop_issuing)
		timer_at(&e->arrivals, on_arrival, e->next_arrival_ns);
	check_finished(e);
}

/* Closed loop: client i starts at ramp * i / N. */
static void on_client_due(uv_timer_t *t)
{
	struct engine *e = t->data;
	unsigned n = e->r->concurrency;
	double ramp = e->b->o.ramp_s;
	uint64_t now = sl_now_ns();
	while (!e->stop_issuing && e->clients_started < n) {
		uint64_t due = e->r->start_ns +
		               (uint64_t)(ramp * e->clients_started / n * 1e9);
		if (due > now) {
			timer_at(&e->arrivals, on_client_due, due);
			break;
		}
		e->clients_started++;
		start_session(e, true, due);
	}
	check_finished(e);
}

/* ---- the run's course ---- */

static void on_progress(uv_timer_t *t)
{
	struct engine *e = t->data;
	uint64_t ok = e->ok_count, failed = e->failed_count;
	double s = (double)(sl_now_ns() - e->r->start_ns) / 1e9;
	fprintf(stderr,
	        "\r%s %s%g: %llu/%llu sent, %llu answered, %llu failed, "
	        "%.1f req/s   ",
	        e->b->o.label, e->r->rate > 0 ? "rate " : "c=",
	        e->r->rate > 0 ? e->r->rate : (double)e->r->concurrency,
	        (unsigned long long)e->issued,
	        (unsigned long long)e->b->o.requests, (unsigned long long)ok,
	        (unsigned long long)failed, s > 0 ? (double)ok / s : 0);
}

static void on_duration_over(uv_timer_t *t)
{
	struct engine *e = t->data;
	e->stop_issuing = true;
	/* Users thinking between turns stop here; what is out finishes. */
	for (struct session *s = e->live, *next; s; s = next) {
		next = s->next;
		if (s->wait == WAIT_THINK) {
			uv_timer_stop(&s->timer);
			s->wait = WAIT_NONE;
			end_session(s);
		}
	}
	check_finished(e);
}

static void on_kill_due(uv_timer_t *t)
{
	struct engine *e = t->data;
	/* Once per invocation: by a later run the PID may be another's. */
	if (e->b->killed_once)
		return;
	e->b->killed_once = true;
	if (kill(e->b->o.kill_pid, SIGKILL) == 0) {
		e->r->killed = true;
		e->r->killed_ns = sl_now_ns();
	} else {
		fprintf(stderr, "sluice-bench: --kill-pid %d: %s\n",
		        e->b->o.kill_pid, strerror(errno));
	}
}

/* The run gives up on a request with no whole answer after --timeout. */
static void on_deadlines(uv_timer_t *t)
{
	struct engine *e = t->data;
	uint64_t now = sl_now_ns();
	uint64_t limit = (uint64_t)(e->b->o.timeout_s * 1e9);
	for (struct session *s = e->live, *next; s; s = next) {
		next = s->next;
		if (s->busy && s->wait != WAIT_RETRY && s->x.sent_ns &&
		    now - s->x.sent_ns > limit)
			exchange_timeout(s);
	}
}

static void one_closed(struct engine *e)
{
	if (--e->open_timers > 0)
		return;
	struct bench *b = e->b;
	void (*done)(struct bench *) = e->done;
	free(e->pending_left);
	free(e);
	b->engine = NULL;
	done(b);
}

static void on_timer_closed(uv_handle_t *h)
{
	one_closed(h->data);
}

static void on_call_closed(struct hb_call *c)
{
	one_closed(c->data);
}

static void close_engine(struct engine *e)
{
	scrape_stop(e);
	uv_timer_t *timers[] = {&e->arrivals, &e->progress,    &e->ender,
	                        &e->killer,   &e->slots_timer, &e->scrape_timer,
	                        &e->deadlines};
	struct hb_call *calls[] = {&e->summary, &e->slots, &e->sluice_scrape,
	                           &e->llama_scrape};
	e->open_timers = SL_ARRAY_SIZE(timers) + SL_ARRAY_SIZE(calls);
	for (size_t i = 0; i < SL_ARRAY_SIZE(timers); i++)
		uv_close((uv_handle_t *)timers[i], on_timer_closed);
	for (size_t i = 0; i < SL_ARRAY_SIZE(calls); i++)
		hb_call_close(calls[i], on_call_closed);
}

static void read_summary(struct engine *e, double *batches, double *batched)
{
	*batches = *batched = NAN;
	json_t *j =
	    e->summary.body ? json_loads(e->summary.body, 0, NULL) : NULL;
	json_t *n = json_object_get(j, "batches");
	json_t *avg = json_object_get(j, "avg_batch_size");
	if (json_is_number(n) && json_is_number(avg)) {
		*batches = json_number_value(n);
		*batched = json_number_value(avg) * *batches;
	}
	json_decref(j);
}

static void on_summary_after(struct hb_call *c, int status, const char *err)
{
	struct engine *e = c->data;
	struct run *r = e->r;
	(void)err;
	double batches = NAN, batched = NAN;
	if (status == 200)
		read_summary(e, &batches, &batched);
	r->batches = batches - e->batches_before;
	r->avg_batch_size =
	    r->batches > 0 ? (batched - e->batched_before) / r->batches : NAN;
	if (r->batches == 0)
		r->avg_batch_size = 0;
	close_engine(e);
}

static void fetch_summary(struct engine *e, hb_call_cb cb)
{
	if (hb_call_start(&e->summary, "GET", e->b->o.metrics_url,
	                  "/metrics?format=json", e->b->o.metrics_key, NULL,
	                  SUMMARY_TIMEOUT_MS, cb))
		cb(&e->summary, 0, "cannot start");
}

/* Once nothing is out and every left request's slot is settled. */
static void check_finished(struct engine *e)
{
	if (!e->stop_issuing && e->b->interrupted)
		e->stop_issuing = true;
	if (e->finishing || !e->stop_issuing || e->active > 0 ||
	    !e->r->start_ns)
		return;
	if (!e->r->end_ns) {
		e->r->end_ns = sl_now_ns();
		uv_timer_stop(&e->arrivals);
		uv_timer_stop(&e->progress);
		uv_timer_stop(&e->ender);
		uv_timer_stop(&e->killer);
		uv_timer_stop(&e->deadlines);
		uv_timer_stop(&e->scrape_timer);
		if (!e->b->o.quiet && isatty(STDERR_FILENO))
			fputc('\n', stderr);
	}
	if (!scrape_settled(e))
		return; /* scrape.c calls again */
	e->finishing = true;
	fetch_summary(e, on_summary_after);
}

void engine_check(struct engine *e)
{
	check_finished(e);
}

static void start_load(struct engine *e)
{
	struct bench *b = e->b;
	struct run *r = e->r;
	r->start_ns = sl_now_ns();
	/* Interrupted while the summary was read: send nothing. */
	if (b->interrupted)
		e->stop_issuing = true;
	scrape_start(e);
	uv_timer_start(&e->deadlines, on_deadlines, DEADLINE_SWEEP_MS,
	               DEADLINE_SWEEP_MS);
	if (!b->o.quiet && isatty(STDERR_FILENO))
		uv_timer_start(&e->progress, on_progress, 250, 250);
	if (b->o.duration_s > 0)
		timer_at(&e->ender, on_duration_over,
		         r->start_ns + (uint64_t)(b->o.duration_s * 1e9));
	if (b->o.kill_at_s > 0)
		timer_at(&e->killer, on_kill_due,
		         r->start_ns + (uint64_t)(b->o.kill_at_s * 1e9));
	if (r->rate > 0) {
		e->next_unit = 0;
		e->next_arrival_ns = r->start_ns;
		on_arrival(&e->arrivals);
	} else {
		on_client_due(&e->arrivals);
	}
}

static void on_summary_before(struct hb_call *c, int status, const char *err)
{
	struct engine *e = c->data;
	(void)err;
	if ((status == 401 || status == 403) && !e->b->metrics_refused_said) {
		e->b->metrics_refused_said = true;
		fprintf(stderr,
		        "sluice-bench: %s/metrics answered %d: the batch "
		        "columns stay empty; give sluice's admin key with "
		        "--metrics-key\n",
		        e->b->o.metrics_url, status);
	}
	if (status == 200)
		read_summary(e, &e->batches_before, &e->batched_before);
	else
		e->batches_before = e->batched_before = NAN;
	start_load(e);
}

void engine_run(struct bench *b, struct run *r, void (*done)(struct bench *))
{
	struct engine *e = sl_xcalloc(1, sizeof(*e));
	e->b = b;
	e->r = r;
	e->done = done;
	b->engine = e;
	uv_timer_t *timers[] = {&e->arrivals, &e->progress,    &e->ender,
	                        &e->killer,   &e->slots_timer, &e->scrape_timer,
	                        &e->deadlines};
	for (size_t i = 0; i < SL_ARRAY_SIZE(timers); i++) {
		uv_timer_init(&b->loop, timers[i]);
		timers[i]->data = e;
	}
	struct hb_call *calls[] = {&e->summary, &e->slots, &e->sluice_scrape,
	                           &e->llama_scrape};
	for (size_t i = 0; i < SL_ARRAY_SIZE(calls); i++) {
		hb_call_init(calls[i], &b->h1, &b->loop);
		calls[i]->data = e;
	}
	fetch_summary(e, on_summary_before);
}

/* SIGINT: no more requests; what is out finishes and is reported. */
void engine_interrupt(struct bench *b)
{
	struct engine *e = b->engine;
	b->interrupted = true;
	if (e && e->r->start_ns)
		on_duration_over(&e->ender);
}

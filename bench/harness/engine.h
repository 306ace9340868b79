/*
 * engine.h: what engine.c (when requests go) and request.c (what one
 * exchange sends and reads) share.
 *
 * A session is one conversation of one user: its turns go one after
 * another, each a request, with the user's think time between a reply and
 * the next turn. A closed-loop client runs sessions back to back; an
 * open-loop arrival starts one. The session owns the one uv timer that
 * serves its pauses (think time, Retry-After, a planned leave), and is
 * freed from that timer's close callback.
 */
#ifndef SLUICE_BENCH_ENGINE_H
#define SLUICE_BENCH_ENGINE_H

#include "harness.h"
#include "http.h"

struct session;

struct exchange {
	struct session *s;
	struct sl_h1_request r;
	char *headers;    /* "Name: value\r\n" lines */
	uint64_t sent_ns; /* of this try: --timeout counts from it */
	char *body;
	struct sl_sse sse;
	char *resp; /* a plain answer, whole */
	size_t resp_len;
	char *reply; /* the reply's text, for the next turn */
	size_t reply_len;
	size_t rec;      /* index into the run's records */
	bool reply_full; /* MAX_REPLY reached: the rest is not kept */
	bool leave;      /* this one leaves early */
	bool left;       /* and has */
	char error[SL_H1_ERROR_MAX];
	long retry_after_ms; /* a refusal's Retry-After; -1: none */
	/* This attempt's inter-token gaps, ms: the run's ITL takes them only
	 * when the stream is served whole. Grown from GAPS_FIRST, not from
	 * bs_samples' 1024: a hundred thousand streams may be out at once. */
	double *gaps;
	size_t n_gaps, cap_gaps;
};

enum session_wait { WAIT_NONE, WAIT_THINK, WAIT_RETRY, WAIT_LEAVE };

struct session {
	struct bench *b;
	struct engine *e;
	const struct wl_conv *conv;
	uint32_t conv_id;
	unsigned turn;
	int tenant, model, prio;
	int slo_class; /* -1: no --slo-mix */
	bool client;   /* a closed-loop client's: it starts another when done */
	json_t *history; /* chat: the messages so far; else the text so far */
	uv_timer_t timer;
	enum session_wait wait;
	uint64_t intended_ns; /* of the turn waiting to go */
	bool busy;            /* the exchange is out */
	struct exchange x;
	struct session *prev, *next; /* the engine's live sessions */
};

/* request.c */
/* Starts s->x for the session's current turn; the record is made. */
void exchange_start(struct session *s);
/* Sends the same request again (a retry after Retry-After). */
void exchange_resend(struct session *s);
/* Appends the reply to the session's history for its next turn. */
void exchange_keep_reply(struct session *s);
/* The wait a refusal asked for, in ms; -1 when it asked none. */
long exchange_retry_after_ms(const struct session *s);
/* Frees what the exchange holds (not the session). */
void exchange_clear(struct session *s);
/* Its client leaves now: the connection closes mid-answer. */
void exchange_leave(struct session *s);
/* It gave up: no whole answer within --timeout. */
void exchange_timeout(struct session *s);
/* Called by request.c when the exchange is over. */
void engine_exchange_done(struct session *s);
/* engine.c: a new session, a closed-loop client's or an arrival's. */
void start_session(struct engine *e, bool client, uint64_t intended_ns);
/* Whether the run is over now (scrape.c calls it when it settles). */
void engine_check(struct engine *e);

/* The engine's state for one run. */
struct engine {
	struct bench *b;
	struct run *r;
	void (*done)(struct bench *);
	uv_timer_t arrivals, progress, ender, killer;
	unsigned open_timers;
	uint64_t issued;   /* requests sent (turns, not retries) */
	uint64_t sessions; /* sessions started */
	uint64_t active;   /* sessions alive */
	uint64_t ok_count, failed_count;
	double next_unit; /* open loop: the next arrival in warped time */
	uint64_t next_arrival_ns;
	unsigned clients_started;
	bool stop_issuing, finishing;
	struct session *live;
	/* /slots for left requests; /metrics sampled. */
	struct hb_call slots, sluice_scrape, llama_scrape, summary;
	uv_timer_t slots_timer, scrape_timer, deadlines;
	size_t *pending_left;
	size_t n_pending_left, cap_pending_left;
	bool slots_unmarked; /* a busy slot showed no seed */
	uint64_t finish_ns;
	double batches_before, batched_before;
};

/* scrape.c */
void scrape_start(struct engine *e);
void scrape_left(struct engine *e, size_t rec);
bool scrape_settled(struct engine *e);
void scrape_stop(struct engine *e);

#endif

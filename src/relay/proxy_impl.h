/*
 * proxy_impl.h: what the pieces of the proxy share (proxy.h is what the
 * rest of sluice sees).
 *
 * An exchange is one client request on its way through sluice: validated,
 * queued, carried by an upstream transfer, relayed back. Its life and its
 * place in the queue are proxy.c's; the transfer is proxy_transfer.c's,
 * and its end, retries and requeues proxy_retry.c's; header fields both
 * ways are proxy_headers.c's; the body, relayed event by event or whole,
 * proxy_stream.c's; what sluice writes to the client itself
 * proxy_answer.c's; and a client that leaves mid-generation
 * proxy_leaving.c's. Each piece opens with what it owns.
 */
#ifndef SLUICE_PROXY_IMPL_H
#define SLUICE_PROXY_IMPL_H

#include "sluice/relay/proxy.h"

#include "sluice/base/common.h"
#include "sluice/json/assemble.h"
#include "sluice/json/event_scan.h"
#include "sluice/fleet/latency.h"
#include "sluice/net/h1_client.h"
#include "sluice/net/sse.h"

#include <jansson.h>

/*
 * How the upstream events that are rebuilt (/generate's), and answers
 * assembled from events, are parsed into objects; every other event is
 * only scanned (event_scan.h).
 * JSON_DECODE_ANY: a prompt array's stream opens with "null". JSON_ALLOW_NUL:
 * "\u0000" is valid JSON, and text (or a final event echoing a prompt) may hold
 * it; without the flag the whole event would be dropped. Strings are then read
 * with their length (json_string_length), never as C strings.
 */
#define EVENT_JSON_FLAGS (JSON_DECODE_ANY | JSON_ALLOW_NUL)

/*
 * How long each upstream has to answer a fanned-out GET /props or /slots:
 * llama-server answers both from its HTTP thread at once, so one that
 * takes longer is reported as failed rather than hold the whole answer for
 * --upstream-timeout.
 */
#define SL_PROXY_FANOUT_TIMEOUT_MS 10000L

/* Largest non-streamed answer sluice assembles from an upstream stream. */
#define SL_PROXY_MAX_ANSWER (64u * 1024 * 1024)
/* The final 503 of every request still in flight when a drain times out. */
#define SL_PROXY_DRAIN_MESSAGE "sluice is shutting down: --drain-timeout passed"
/*
 * Retry-After for a 503 whose end nobody can predict (no upstream ready,
 * shutting down): the one-second hint clients have always had.
 */
#define SL_PROXY_UNAVAILABLE_RETRY "Retry-After: 1\r\nretry-after-ms: 1000\r\n"

/*
 * A request's own service level, in whole milliseconds (proxy_slo.c): the
 * Gateway API Inference Extension's names, so that its clients work as
 * they are. Never sent upstream.
 */
#define SL_SLO_TTFT_HEADER "X-SLO-TTFT-Ms"
#define SL_SLO_TPOT_HEADER "X-SLO-TPOT-Ms"

/* The queue's header lines, at most (X-Queue-Ms, Retry-After, ...). */
#define SL_PROXY_SCHED_HEADERS_MAX 160
/*
 * The most a Server-Timing line takes: three metrics of at most 20 digits
 * each, their names and the line's end (107 bytes).
 */
#define SL_PROXY_TIMING_MAX 160

enum relay_mode {
	MODE_WAITING, /* no response byte yet */
	MODE_BODY,    /* relaying a plain body */
	MODE_SSE,     /* reading events one by one */
};

struct exchange {
	struct sl_relay *relay;
	struct exchange *prev, *next; /* the relay's list */
	/*
	 * Coalescing (--stream-coalesce): while tokens come about as fast as
	 * the window or faster, the transfer stays paused on the app's list
	 * (co_prev, co_next), and each tick of the app's one timer reads it
	 * once (sl_h1_read_paused), taking what came since at once.
	 */
	struct exchange *co_prev, *co_next;
	uint64_t co_tick; /* the tick that put it on the list */
	bool coalesced;
	bool tick_read;  /* the read being scanned is a tick's */
	bool tick_empty; /* the last tick found nothing to read */
	/* In the read being scanned: plain token events, and other events. */
	unsigned read_tokens, read_others;
	uint64_t read_end_ns;        /* when the last read of tokens ended */
	struct sl_http_request *req; /* NULL once the client side is over */
	const struct sl_endpoint *ep;
	struct sl_model *model;       /* whose queue and upstreams */
	struct sl_upstream *upstream; /* set when dispatched */
	char *target;                 /* upstream path and query, malloc'd */
	char *body;                   /* what is sent upstream */
	size_t body_len;
	struct sl_affinity_key affinity; /* its prompt's prefix (affinity.h) */
	bool has_body;                   /* body goes upstream (a POST) */
	char *content_type;    /* of a body relayed as written: the client's */
	char *accept_encoding; /* the UI's: relayed, so gzip passes */
	/* The client's headers that go upstream (enum sl_pass), or NULL. */
	char *passed_request;
	/*
	 * A stream asked for with X-Conversation-Id: llama-server keeps it
	 * for GET /v1/stream and finishes it when its client leaves.
	 */
	bool resumable;
	struct sl_fanout *fanout; /* a GET asked of every upstream */
	char id[SL_HTTP_REQUEST_ID_MAX + 1];

	struct sl_sched_item item; /* while waiting in sluice's queue */
	/*
	 * Deadlines (proxy_slo.c): its service level (0s: none), what the
	 * prediction was asked and said at its arrival, its place in its
	 * upstream's running list, and the timings of its answer.
	 */
	struct sl_slo slo;
	struct sl_latency_ask ask;
	struct sl_latency predicted;
	bool has_prediction;
	struct sl_predict_run run;
	struct sl_event_timings timings;
	bool has_timings;
	/* Service charged to its flow for this attempt (exchange_charge). */
	double attempt_charged;
	double priority;
	uint64_t arrived_ms;
	/* -1 until it leaves the queue, dispatched or refused. */
	int64_t queue_ms;
	uint64_t dispatched_ms; /* when its request went upstream */
	uint64_t dispatched_ns; /* the same, for Server-Timing (sl_now_ns) */
	/*
	 * Its client left while the upstream had its request: the
	 * connection is half-closed and the answer read to its end, which is
	 * when llama-server has let go of the slot (proxy_leaving.c).
	 */
	bool left;
	uint64_t left_ms;
	bool left_bytes; /* bytes of its answer came after it left */
	/*
	 * A relayed plain answer left after llama-server had been generating
	 * it for less than SL_STREAM_UPSTREAM_LEFT_MS: how long it runs on is
	 * judged when it ends (exchange_judge_left_plain).
	 */
	bool left_plain;
	/* It keeps its upstream quiet until quiet_end_ms (proxy_leaving.c). */
	bool quieting;
	uint64_t quiet_end_ms;
	bool counts_stream; /* counted in its upstream's streams */
	/* Counted in its upstream's unstarted: no byte of its answer yet. */
	bool counts_unstarted;
	unsigned batch_size;
	/* X-Queue-Ms and X-Batch-Size once known; Retry-After on refusals. */
	char sched_headers[SL_PROXY_SCHED_HEADERS_MAX];
	/* With Server-Timing, as a head writes them (exchange_own_headers). */
	char own_headers[SL_PROXY_SCHED_HEADERS_MAX + SL_PROXY_TIMING_MAX];

	bool stream;   /* the client wants events */
	bool assemble; /* it wants one answer, built from upstream events */
	/*
	 * It wants one answer that a stream would let its client stop, and
	 * how that answer would be assembled (exchange_ask_for_stream).
	 */
	bool assemblable;
	enum sl_assemble_kind assemble_kind;
	bool return_tokens;
	/* While assemble: allocated then, as most answers are relayed. */
	struct sl_assembler *answer;
	size_t answer_bytes;
	/* The stream's plain token events, learned to skip their scans. */
	struct sl_event_shape shape;
	json_t *final; /* /generate streams: the event with "stop": true */

	/*
	 * The upstream side: a libcurl transfer, or (native) a request of
	 * sluice's own client (h1_client.h) with its header lines.
	 */
	bool native;
	struct sl_transfer transfer;
	struct curl_slist *headers;
	struct sl_h1_request h1;
	char *h1_headers;
	/*
	 * The upstream's response header lines worth passing on, "Name:
	 * value\r\n" each (at most SL_PROXY_PASSED_HEADERS_MAX bytes), and the
	 * names its Connection header lists, which are hop-by-hop too.
	 */
	char *passed;
	size_t passed_len;
	char connection[SL_PROXY_CONNECTION_MAX + 1];
	bool connection_overflow; /* the list was too long: pass nothing */
	char error[CURL_ERROR_SIZE];
	uv_timer_t timer;
	uint64_t last_byte_ms;
	bool released;
	/* Resends after failures that used one up (--retries). */
	unsigned retries;
	/*
	 * The upstream the last attempt failed on, avoided by the next while
	 * another is ready; only compared, never followed.
	 */
	const struct sl_upstream *failed_on;
	long failed_status; /* its 5xx, kept from the client to resend */
	bool sent_back;     /* a dispatch found no upstream for it */
	bool pinned;        /* for the upstream the client named (?upstream=) */

	enum relay_mode mode;
	bool head_sent; /* the client's response has begun */
	struct sl_sse sse;
	/*
	 * While a piece of the upstream's body is scanned (feed_data: NULL
	 * otherwise), the relayed events found in the read it came from so
	 * far, written together when the read is done: one write per read,
	 * not per event. libcurl says only where a piece ends, the native
	 * client also where its read does (exchange_on_native_read_end), and
	 * llama-server sends each event as its own chunk.
	 */
	const char *feed_data;
	size_t feed_len;
	uv_buf_t relayed[SL_HTTP_WRITEV_MAX];
	unsigned relay_n;
	/*
	 * A relayed plain answer of a generation, kept (at most
	 * SL_PROXY_ANSWER_KEEP_MAX bytes) so that its usage can be read at
	 * its end: the token counts the access log, metrics and tenants get
	 * from a stream's last events otherwise.
	 */
	bool keep;
	struct {
		char *p;
		size_t len, cap;
		bool over;   /* past the bound: dropped, not counted */
		bool prefix; /* only its start (SL_PROXY_USAGE_PREFIX_MAX) */
	} kept;
	bool ended;   /* the stream's end went out as it should */
	bool gave_up; /* sluice stopped relaying: the transfer must stop too */
	bool paused;  /* the transfer waits for the client to catch up */

	/*
	 * What was seen of the generation: tokens as they arrived, and the
	 * counts that end its outputs, added up (exchange_count_event).
	 */
	uint64_t first_token_ns, last_token_ns;
	uint64_t tokens_seen, tokens_final;
	/*
	 * Its prompts' tokens as the upstream counted them
	 * (exchange_prompt_tokens): summed over the outputs whose ends said
	 * them, each of `choices` outputs saying its prompt's; else the last
	 * count said by an event that ends none (a chat chunk's timings, an
	 * Anthropic stream's message_start, an embeddings answer's usage).
	 */
	uint64_t prompt_sum, prompt_last;
	bool prompt_summed;
	uint32_t choices;          /* outputs of each prompt (request.h) */
	unsigned prompts, stopped; /* native streams: indexes seen, ended */
};

/*
 * The functions one piece calls in another, by the piece that defines
 * them; each is described where it is defined.
 */
/* proxy.c */
uint64_t exchange_first_byte_ms(const struct exchange *x, const char **option);
void exchange_refused_from_queue(struct exchange *x, uint64_t now_ms);
void exchange_on_timer(uv_timer_t *t);
void exchange_release(struct exchange *x);
void exchange_charge(struct exchange *x);

/* proxy_transfer.c */
bool exchange_transfer_active(const struct exchange *x);
void exchange_transfer_abort(struct exchange *x);
void exchange_transfer_resume(struct exchange *x);
long exchange_upstream_status(const struct exchange *x);
int exchange_on_native_body(struct sl_h1_request *r, const char *data,
                            size_t len);
void exchange_upstream_take(struct exchange *x, struct sl_upstream *u);
void exchange_upstream_started(struct exchange *x);
void exchange_start_or_fail(struct exchange *x, struct sl_upstream *u);

/* proxy_retry.c */
void exchange_finish_client(struct exchange *x, CURLcode result);
bool exchange_try_again(struct exchange *x, CURLcode result);
void exchange_on_transfer_done(struct sl_transfer *t, CURLcode result);
void exchange_on_native_done(struct sl_h1_request *r, enum sl_h1_result result);

/* proxy_answer.c */
void exchange_note_totals(struct exchange *x);
void exchange_client_done(struct exchange *x);
void exchange_respond_error(struct exchange *x, int status, const char *type,
                            const char *message);
void exchange_write_event(struct exchange *x, json_t *doc);
void exchange_fail(struct exchange *x, int status, const char *message);
void exchange_finish_answer(struct exchange *x);
void exchange_end_ok(struct exchange *x);
void exchange_keep_answer(struct exchange *x, const char *data, size_t len);
void exchange_count_event(struct exchange *x, const struct sl_event_facts *f,
                          uint64_t times);
uint64_t exchange_prompt_tokens(const struct exchange *x);
void exchange_count_answer(struct exchange *x);

/* proxy_stream.c */
void exchange_coalesce_unlink(struct exchange *x);
enum sl_event_dialect exchange_dialect_of(const struct exchange *x);
void exchange_relay_flush(struct exchange *x);
int exchange_on_event(const char *event, size_t len, void *arg);
size_t exchange_on_upstream_data(char *data, size_t size, size_t n, void *arg);
bool exchange_holds(struct exchange *x, unsigned tokens, unsigned others,
                    bool tick_read);
void exchange_on_native_read_end(struct sl_h1_request *r);

/* proxy_headers.c */
char *exchange_passed_request_headers(const struct sl_endpoint *ep,
                                      const struct sl_http_request *req,
                                      bool stream);
size_t exchange_on_upstream_header(char *line, size_t size, size_t n,
                                   void *arg);
const char *exchange_own_headers(struct exchange *x);
bool exchange_start_response(struct exchange *x);
bool exchange_hold_5xx(struct exchange *x);

/* proxy_slo.c */
bool exchange_slo_headers(const struct sl_http_request *req, struct sl_slo *out,
                          char *why, size_t size);
void exchange_slo_resolve(struct exchange *x, const struct sl_slo *asked);
bool exchange_slo_admit(struct exchange *x, uint64_t now_ms);
const struct sl_pool_slo *exchange_slo_pick(const struct exchange *x,
                                            uint64_t now_ms,
                                            struct sl_pool_slo *out);
void exchange_slo_taken(struct exchange *x, struct sl_upstream *u);
void exchange_slo_first_token(struct exchange *x, double ttft_s);
void exchange_slo_progress(struct exchange *x);
void exchange_slo_let_go(struct exchange *x);
void exchange_slo_busy(struct exchange *x, struct sl_upstream *u);
void exchange_slo_note(struct exchange *x);

/* proxy_trace.c */
struct sl_request;
void exchange_trace_start(struct exchange *x, const struct sl_request *checked,
                          const struct sl_model *m);
void exchange_trace_queued(struct exchange *x);
void exchange_trace_dispatched(struct exchange *x, const char *method);
void exchange_trace_transfer_done(struct exchange *x);
void exchange_trace_totals(struct exchange *x);
void exchange_trace_event(struct exchange *x, const struct sl_jscan *s);
void exchange_trace_answer(struct exchange *x);

/* Its request's trace (ops/otlp.h), or NULL: not traced, or no client. */
static inline struct sl_trace_span *exchange_trace(const struct exchange *x)
{
	return x->req ? x->req->info.trace : NULL;
}

/* proxy_leaving.c */
bool exchange_upstream_streams(const struct exchange *x);
bool exchange_plain_as_stream(const struct sl_relay *relay,
                              const struct sl_upstream *u);
void exchange_ask_for_stream(struct exchange *x);
void exchange_judge_left_plain(struct exchange *x);
void exchange_quiet_end(struct exchange *x);
void exchange_upstream_let_go(struct exchange *x);
void exchange_on_client_abort(struct sl_http_request *req);
void exchange_on_client_drain(struct sl_http_request *req);

#endif

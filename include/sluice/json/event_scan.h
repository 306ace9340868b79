/*
 * event_scan.h: what one upstream event says, read without building objects.
 *
 * Most upstream events are relayed unchanged or handed to the assembler as
 * written; sluice only needs to know what each one is: a token (and how many
 * tokens it carries), the end of a prompt's generation, the final counts,
 * the end of the stream, or an error. sl_event_scan() learns that from the
 * event's data with one jsmn pass (json_scan.h) and no allocation for events
 * of up to SL_JSCAN_INLINE tokens, which llama-server's token events are.
 *
 * It reads what proxy.c used to read from a jansson parse, with the same
 * meaning: absent or mistyped members count as jansson's accessors made
 * them count (an integer that is not one reads 0, a string that is not one
 * is empty). Unlike jansson, jsmn checks structure and not every detail of
 * the grammar (nor UTF-8): the data comes from llama-server.
 *
 * Glossary:
 *   dialect   the shape of a stream's events: llama-server's native
 *             /completion events, OpenAI chunks, or typed events
 *             (Anthropic's Messages and OpenAI's Responses).
 *   arrival   one moment tokens were seen: a native event is one arrival
 *             of its "tokens" count; an OpenAI chunk one arrival of one
 *             token per choice with text in it.
 *   final     a native event that is not a token event: one that does not
 *             say "stop": false (the last, which says true or, filtered by
 *             the request's response_fields, nothing at all).
 */
#ifndef SLUICE_EVENT_SCAN_H
#define SLUICE_EVENT_SCAN_H

#include "sluice/json/json_scan.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sl_event_dialect {
	SL_DIALECT_NATIVE, /* /completion: "content", "tokens", "stop" */
	SL_DIALECT_OPENAI, /* "choices", "usage", then [DONE] */
	SL_DIALECT_TYPED,  /* "type": content_block_delta, response.* */
};

/* Which member holds a plain token event's piece of text. */
enum sl_event_piece {
	SL_PIECE_NONE,
	SL_PIECE_TEXT,      /* choices[i].text (/v1/completions) */
	SL_PIECE_CONTENT,   /* choices[i].delta.content (chat) */
	SL_PIECE_REASONING, /* choices[i].delta.reasoning_content */
	SL_PIECE_NATIVE,    /* a native event's "content", with "tokens" */
};

struct sl_event_facts {
	bool done;   /* the data is the [DONE] marker */
	bool json;   /* the data is one JSON value */
	bool object; /* ... and that value is an object */
	bool error;  /* the object has a top-level "error" member */

	/* Tokens seen: `arrivals` times `per_arrival` tokens. */
	unsigned arrivals;
	uint64_t per_arrival;

	/* Native: the prompt's index, and whether this event ends it. */
	int64_t index;
	bool final;
	int64_t tokens_predicted; /* of a final event; 0 when absent */

	/*
	 * The answer's token count as the upstream reports it (OpenAI's
	 * usage.completion_tokens, the typed usage.output_tokens), when this
	 * event carries one.
	 */
	bool has_count;
	int64_t count;

	/*
	 * The prompt's token count as the upstream reports it, when this
	 * event carries one: OpenAI's usage.prompt_tokens, else llama-server's
	 * timings (cache_n + prompt_n, the cached part included); the native
	 * final event's tokens_evaluated; the typed usage.input_tokens.
	 */
	bool has_prompt;
	int64_t prompt_tokens;

	/*
	 * llama-server's timings, when this event (the last of an OpenAI or
	 * native stream) or answer carries them: what the latency model
	 * learns from (sched/predict.h). cache_n is 0 where absent.
	 */
	bool has_timings;
	struct sl_event_timings {
		double prompt_n, cache_n, prompt_ms, predicted_n, per_token_ms;
	} timings;

	/*
	 * A plain token event: in OpenAI's dialect, one choice whose only
	 * output is one non-empty string, with no finish, usage, timings,
	 * logprobs or anything else an assembler reads; in the native one,
	 * "stop": false with "content", integer "tokens" and
	 * "tokens_predicted", and no probabilities. `piece` is the string's
	 * token, -1 for any other event; `piece_kind` which member it is and
	 * `piece_choice` the choice's index (native: the prompt's). Native:
	 * `tokens` and `predicted` are the other two members' tokens.
	 */
	int piece;
	enum sl_event_piece piece_kind;
	long piece_choice;
	int tokens, predicted;
};

/*
 * Scans `len` bytes of an event's data (the text after "data: ", joined;
 * borrowed) in `dialect`. `s` is the caller's scan, left holding the tokens
 * until the caller's sl_jscan_free(s), which it must call whatever this
 * returns. Fills `f`; data that is not JSON gives a zeroed f (done aside).
 */
void sl_event_scan(struct sl_jscan *s, const char *data, size_t len,
                   enum sl_event_dialect dialect, struct sl_event_facts *f);

/*
 * The counts of a plain answer (a whole response body, not an event): as
 * sl_event_scan() gives them (has_count and count, has_prompt and
 * prompt_tokens, final and tokens_predicted, error), read from a shallow
 * scan (sl_jscan_parse_shallow) that opens only "usage" and "timings".
 * An answer is mostly its text, which the scan skips with memchr where
 * jsmn would read it byte by byte. What lies in other containers (choices,
 * a native answer's tokens, an event's message.usage) is not read, so
 * arrivals and pieces stay empty; `s` holds the shallow tokens, for the
 * caller to read timings from, until its sl_jscan_free(s). Text that is no
 * object gives a zeroed f.
 */
void sl_event_scan_answer(struct sl_jscan *s, const char *data, size_t len,
                          enum sl_event_dialect dialect,
                          struct sl_event_facts *f);

/*
 * The shape of a stream's plain token events, so that most of them need no
 * scan at all. llama-server writes a stream's events from one template:
 * between two token events of an OpenAI stream only the piece of text
 * differs (and "created", once a second); in a native stream, the piece,
 * the "tokens" array and the "tokens_predicted" count. So once a plain
 * token event has been scanned, a later event whose bytes are the same
 * around those members (its *holes*), each holding a value of its kind
 * (a valid JSON string, integers), says what that one said, with its own
 * piece and tokens: a few memcmp calls and a pass over the holes' bytes,
 * where a scan tokenizes 150-250 bytes into two dozen tokens and walks
 * them.
 *
 * Nothing is assumed about the upstream: an event of any other shape simply
 * does not match and is scanned in full, and a plain token event that is
 * scanned becomes the new shape.
 */
#define SL_EVENT_SHAPE_MAX 4096 /* bytes; longer events are not kept */
#define SL_EVENT_SHAPE_HOLES 3

enum sl_event_hole {
	SL_HOLE_STRING, /* a string's inside, escapes as written */
	SL_HOLE_INT,    /* an integer */
	SL_HOLE_INTS,   /* an array's inside: integers and commas, or "" */
};

struct sl_event_shape {
	char *text; /* the shape event's data, malloc'd; NULL before one */
	size_t len, cap;
	struct {
		size_t start, end; /* its bytes in text, holes in order */
		enum sl_event_hole kind;
	} holes[SL_EVENT_SHAPE_HOLES];
	unsigned n_holes;
	unsigned piece_hole; /* which hole is the piece */
	int tokens_hole;     /* native: which is "tokens"; else -1 */
	struct sl_event_facts facts;
};

/* A matched event's piece and, native, its "tokens" (inside `data`). */
struct sl_event_match {
	const char *piece; /* inner bytes, escapes as written; NULL: none */
	size_t piece_len;
	const char *tokens; /* the array's inside, without brackets */
	size_t tokens_len;
};

/*
 * Keeps the event that `s` scanned, whose facts `f` name a piece, as the
 * shape to match. Events of other kinds and longer than SL_EVENT_SHAPE_MAX
 * are ignored.
 */
void sl_event_shape_learn(struct sl_event_shape *sh, const struct sl_jscan *s,
                          const struct sl_event_facts *f);

/*
 * Whether `len` bytes of `data` are the shape's event with other values in
 * its holes (an OpenAI piece must not be empty). If so, fills `f` with what
 * a scan would have said (its `piece` then -1, as there are no tokens) and
 * `m` with the new piece and tokens.
 */
bool sl_event_shape_match(const struct sl_event_shape *sh, const char *data,
                          size_t len, struct sl_event_facts *f,
                          struct sl_event_match *m);

void sl_event_shape_free(struct sl_event_shape *sh);

/*
 * One event of a stream, read the cheapest way: matched to the stream's
 * shape (m->piece then set, and `s` holds no tokens), else scanned in full
 * into `s` (m->piece NULL), a plain token event then becoming the shape.
 * Either way `f` says what the event says, and the caller sl_jscan_free()s
 * `s`.
 */
void sl_event_read(struct sl_event_shape *sh, struct sl_jscan *s,
                   const char *data, size_t len, enum sl_event_dialect dialect,
                   struct sl_event_facts *f, struct sl_event_match *m);

#endif

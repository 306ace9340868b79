/*
 * assemble.h: builds a non-streamed answer out of a streamed one.
 *
 * Why: llama-server (0.7.0, build 11669, and others) keeps generating a
 * non-streamed request after its client has gone, although it logs that it
 * cancelled it; a streamed request stops at the next token. So sluice always
 * asks llama-server for a stream, and for a client that wanted one JSON
 * answer it gathers the events here into the bytes llama-server would have
 * sent. Cancellation then works for every request, and per-token timings
 * are seen for every request too.
 *
 * How: the answer is spliced together from byte slices of the events, never
 * parsed into objects and printed again, so numbers, escapes and key order
 * stay as llama-server wrote them. The members of the final event are copied
 * as written; the text pieces are joined (the inner bytes of JSON strings
 * concatenate as written, since every escape is self-contained); arrays such
 * as completion_probabilities, logprobs.content and tokens are joined
 * element by element. The rules per endpoint were measured against
 * llama-server 0.7.0 (see assemble.c and tests/test_assemble.c).
 *
 * Glossary:
 *   native   /completion, /completions, /infill: events carry "content"
 *            and an "index" (one per prompt of a prompt array); the one
 *            with "stop": true holds the final fields. Several prompts
 *            answer as a JSON array.
 *   text     /v1/completions: choices[].text; each choice's finish event
 *            carries usage and timings; then [DONE].
 *   chat     /v1/chat/completions: choices[].delta (content,
 *            reasoning_content, tool_calls), then a usage event, [DONE].
 *   final    the event (or choice object) that ends one choice: the plain
 *            answer is that event with the joined parts spliced in.
 */
#ifndef SLUICE_ASSEMBLE_H
#define SLUICE_ASSEMBLE_H

#include "sluice/json/event_scan.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct sl_jscan;

enum sl_assemble_kind {
	SL_ASSEMBLE_NONE, /* the endpoint's plain answers are relayed as sent */
	SL_ASSEMBLE_NATIVE,
	SL_ASSEMBLE_TEXT,
	SL_ASSEMBLE_CHAT
};

/*
 * Choices (or prompts of a prompt array) per answer; events naming a
 * higher index are refused. Choices are looked up by index, in O(1).
 */
#define SL_ASSEMBLE_MAX_CHOICES 256

/* Tool calls per chat choice; a delta naming a higher index is refused. */
#define SL_ASSEMBLE_MAX_TOOL_CALLS 32

/** A growable byte buffer: appends are amortised O(1). */
struct sl_abuf {
	char *data;
	size_t len, cap;
};

struct sl_choice_parts;

struct sl_assembler {
	enum sl_assemble_kind kind;
	bool return_tokens; /* native: the client asked for token ids */
	bool seen_event;
	struct sl_abuf last; /* the latest event, as written */
	struct sl_abuf base; /* OpenAI: the event whose top-level members
	                        the answer takes (see assemble.c) */
	jsmntok_t *base_tok; /* its scan's tokens, kept for the answer */
	int base_n;
	int base_index;         /* text: the choice whose finish is `base` */
	struct sl_abuf verbose; /* OpenAI: the finish event's "__verbose" */
	int verbose_index;      /* the choice that "__verbose" describes */
	struct sl_abuf error; /* an error event, as written; ends the answer */
	int error_status;
	struct sl_choice_parts *choices[SL_ASSEMBLE_MAX_CHOICES];
	unsigned n_choices; /* highest index seen + 1 */
};

/*
 * Starts an assembler for one answer. return_tokens: the client's body had
 * "return_tokens": true (native answers then carry every token id).
 */
void sl_assembler_init(struct sl_assembler *a, enum sl_assemble_kind kind,
                       bool return_tokens);
void sl_assembler_free(struct sl_assembler *a);

/*
 * Adds one event: `data` is the JSON text after "data: " (borrowed; only
 * what the answer needs is copied). A "null" event (llama-server opens the
 * stream of a prompt array with one) and "[DONE]" are skipped. An error
 * event ({"error": {...}}) ends the answer: it becomes the result, and
 * sl_assembler_status() gives its code; later events are ignored.
 * Returns 0, or SL_EINVAL when the event is not a JSON object or names a
 * choice or tool call past the limits.
 */
int sl_assembler_add(struct sl_assembler *a, const char *data, size_t len);

/*
 * The same for an event whose data the caller has scanned already (with
 * a token limit of its own; the assembler's applies too): saves a second
 * scan of every event. `s` is borrowed, its text the event's data.
 */
int sl_assembler_add_scanned(struct sl_assembler *a, const struct sl_jscan *s);

/*
 * The same for a plain token event matched to its stream's shape
 * (event_scan.h) rather than scanned: `data` is the event's data, `f` and
 * `m` what the match said. Adds exactly what sl_assembler_add_scanned()
 * would have for that event.
 */
int sl_assembler_add_piece(struct sl_assembler *a, const char *data, size_t len,
                           const struct sl_event_facts *f,
                           const struct sl_event_match *m);

/*
 * The whole answer as JSON text, malloc'd and NUL-terminated, owned by the
 * caller; its length in *len. NULL if no event came. After an error event,
 * the error event's text as written.
 */
char *sl_assembler_result(struct sl_assembler *a, size_t *len);

/*
 * The HTTP status the result goes out with: 200, or after an error event
 * its "code" when that is a status from 400 to 599, else 500.
 */
int sl_assembler_status(const struct sl_assembler *a);

/*
 * Whether the assembler rebuilds llama-server's plain answer to this
 * request body exactly; when not, the request is relayed plain instead.
 * assemble.c lists the fields that make it false, each with its reason.
 */
bool sl_assemble_reproducible(enum sl_assemble_kind kind, const json_t *body);

/*
 * Whether a top-level member of this name (n bytes, as written) can make
 * sl_assemble_reproducible() false. A body with none of them is
 * reproducible for every kind but SL_ASSEMBLE_NONE, which lets a body be
 * judged from its member names alone (request.c's fast path).
 */
bool sl_assemble_member_matters(const char *name, size_t n);

#endif

/*
 * assemble.h: builds a non-streamed answer out of a streamed one.
 *
 * Why: llama-server (0.7.0, build 11669, and others) keeps generating a
 * non-streamed request after its client has gone, although it logs that it
 * cancelled it; a streamed request stops at the next token. So sluice always
 * asks llama-server for a stream, and for a client that wanted one JSON
 * answer it gathers the events here into the shape llama-server would have
 * sent: the text joined, the final fields (usage, timings, finish reason)
 * taken from the last events. Cancellation then works for every request,
 * and per-token timings are seen for every request too.
 *
 * Glossary:
 *   native   /completion: events carry "content" and an "index" (one per
 *            prompt of a prompt array); the one with "stop": true holds
 *            the final fields. Several prompts answer as a JSON array.
 *   text     /v1/completions: choices[].text, then a usage event, [DONE].
 *   chat     /v1/chat/completions: choices[].delta (content,
 *            reasoning_content, tool_calls), then a usage event, [DONE].
 */
#ifndef SLUICE_ASSEMBLE_H
#define SLUICE_ASSEMBLE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

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

struct sl_choice_parts;

struct sl_assembler {
	enum sl_assemble_kind kind;
	bool return_tokens; /* native: the client asked for token ids */
	json_t *top[4];     /* OpenAI: id, created, model, fingerprint */
	json_t *usage, *timings;
	struct sl_choice_parts *choices[SL_ASSEMBLE_MAX_CHOICES];
	unsigned n_choices; /* highest index seen + 1 */
	bool seen_event;
};

void sl_assembler_init(struct sl_assembler *a, enum sl_assemble_kind kind,
                       bool return_tokens);
void sl_assembler_free(struct sl_assembler *a);

/*
 * Adds one event's data (borrowed). A null event (llama-server opens the
 * stream of a prompt array with one) is skipped. Returns 0, or SL_EINVAL
 * when the event is not an object or names a choice past the limit.
 */
int sl_assembler_add(struct sl_assembler *a, json_t *event);

/*
 * Whether the assembler rebuilds llama-server's plain answer to this
 * request body exactly; when not, the request is relayed plain instead.
 */
bool sl_assemble_reproducible(enum sl_assemble_kind kind, const json_t *body);

/* The whole answer, a new reference; NULL if no event came. */
json_t *sl_assembler_result(struct sl_assembler *a);

#endif

/*
 * endpoints.c: the table of what sluice relays, and how. endpoints.h describes
 * the fields; routes.c matches requests against it.
 */
#include "sluice/relay/endpoints.h"

#include "sluice/base/common.h"

/*
 * The endpoints llama-server 0.7.0 serves, with its methods. Everything that
 * occupies a llama-server slot (generation, embeddings, rerank, infill,
 * Anthropic's messages, responses, transcriptions, decisions) goes through
 * sluice's queue, with priority, cancellation and metrics; the cheap ones go
 * straight through, so that a tokenize does not wait behind a queue of
 * generations.
 *
 * Bodies: where json_body is set, a JSON object sluice validates and may
 * rewrite (request.h); the others are relayed as the client wrote them,
 * so that llama-server judges them and answers with its own errors (and
 * POST /lora-adapters takes an array).
 *
 * Aliases keep their own path upstream: llama-server answers /embedding and
 * /embeddings with its native embeddings handler, not the OpenAI one of
 * /v1/embeddings, and /completions like /completion.
 *
 * Upstream, a request goes with the endpoint's own method (a HEAD as a
 * GET), and a body relayed as written with the client's Content-Type.
 */
/* clang-format off */
#define EPX(path, method, end, json, sched, assemble, admin, pass, watch)      \
	{path, method, path, end, json, sched, SL_API_RELAY, assemble, admin, \
	 false, false, pass, watch, 0}
#define EP(path, method, end, json, sched, assemble, admin)                    \
	EPX(path, method, end, json, sched, assemble, admin, 0, false)
/*
 * A generation: a stream of it may be kept for GET /v1/stream; `outputs`
 * names the fields that ask it for several (endpoints.h).
 */
#define GEN(path, end, assemble, outputs)                                      \
	{path, HTTP_POST, path, end, true, true, SL_API_RELAY, assemble,      \
	 false, false, false, SL_PASS_CONVERSATION, false, outputs}
#define N_AND_PROMPTS (SL_OUTPUTS_N | SL_OUTPUTS_PROMPTS)
const struct sl_endpoint sl_endpoints[] = {
	GEN("/v1/chat/completions", SL_END_DONE, SL_ASSEMBLE_CHAT, SL_OUTPUTS_N),
	GEN("/chat/completions", SL_END_DONE, SL_ASSEMBLE_CHAT, SL_OUTPUTS_N),
	GEN("/v1/completions", SL_END_DONE, SL_ASSEMBLE_TEXT, N_AND_PROMPTS),
	GEN("/completion", SL_END_STOP, SL_ASSEMBLE_NATIVE, N_AND_PROMPTS),
	GEN("/completions", SL_END_STOP, SL_ASSEMBLE_NATIVE, N_AND_PROMPTS),
	GEN("/infill", SL_END_STOP, SL_ASSEMBLE_NATIVE, SL_OUTPUTS_N),
	/* Anthropic's events ("event: ...\ndata: ...") end with the transfer. */
	GEN("/v1/messages", SL_END_EOF, SL_ASSEMBLE_NONE, 0),
	GEN("/v1/responses", SL_END_EOF, SL_ASSEMBLE_NONE, SL_OUTPUTS_N),
	GEN("/responses", SL_END_EOF, SL_ASSEMBLE_NONE, SL_OUTPUTS_N),
	/*
	 * OpenAI's transcriptions: a multipart form (the audio file and the
	 * fields), relayed as written with its own Content-Type; llama-server
	 * turns it into a chat completion of the model, which takes a slot.
	 * With the form's "stream" its events end with the transfer.
	 */
	EP("/v1/audio/transcriptions", HTTP_POST, SL_END_EOF, false, true,
	   SL_ASSEMBLE_NONE, false),
	EP("/audio/transcriptions", HTTP_POST, SL_END_EOF, false, true,
	   SL_ASSEMBLE_NONE, false),
	/*
	 * A decision model's answers to questions about a state
	 * ({"state", "questions"}: probabilities, no text): evaluated in a
	 * slot, so queued; relayed as written, since llama-server answers a
	 * body it refuses with its own statuses (422, 413).
	 */
	EP("/v1/systemone", HTTP_POST, SL_END_NONE, false, true,
	   SL_ASSEMBLE_NONE, false),
	EP("/v1/embeddings", HTTP_POST, SL_END_NONE, true, true,
	   SL_ASSEMBLE_NONE, false),
	EP("/embeddings", HTTP_POST, SL_END_NONE, true, true,
	   SL_ASSEMBLE_NONE, false),
	EP("/embedding", HTTP_POST, SL_END_NONE, true, true,
	   SL_ASSEMBLE_NONE, false),
	EP("/rerank", HTTP_POST, SL_END_NONE, true, true, SL_ASSEMBLE_NONE,
	   false),
	EP("/v1/rerank", HTTP_POST, SL_END_NONE, true, true,
	   SL_ASSEMBLE_NONE, false),
	EP("/reranking", HTTP_POST, SL_END_NONE, true, true,
	   SL_ASSEMBLE_NONE, false),
	EP("/v1/reranking", HTTP_POST, SL_END_NONE, true, true,
	   SL_ASSEMBLE_NONE, false),
	/* Cheap: answered by llama-server's HTTP thread, no slot. */
	EP("/tokenize", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/detokenize", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/apply-template", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/v1/messages/count_tokens", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/chat/completions/input_tokens", HTTP_POST, SL_END_NONE, false,
	   false, SL_ASSEMBLE_NONE, false),
	EP("/v1/chat/completions/input_tokens", HTTP_POST, SL_END_NONE, false,
	   false, SL_ASSEMBLE_NONE, false),
	EP("/responses/input_tokens", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/v1/responses/input_tokens", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	/*
	 * {"id": "chatcmpl-...", "action": "reasoning_end"}: ends the
	 * reasoning of a generation under way (one that asked for
	 * "reasoning_control"); a task of llama-server's, not a slot.
	 */
	EP("/v1/chat/completions/control", HTTP_POST, SL_END_NONE, false,
	   false, SL_ASSEMBLE_NONE, false),
	/*
	 * Resumable streams: a stream asked for with X-Conversation-Id is
	 * kept by llama-server, which goes on generating when its client
	 * leaves. GET /v1/stream?conv_id=ID&from=BYTE replays its bytes and
	 * follows it to its end (a watch); DELETE stops and forgets it (204);
	 * POST /v1/streams/lookup says which of {"conversation_ids": [...]}
	 * it holds.
	 */
	EPX("/v1/stream", HTTP_GET, SL_END_NONE, false, false,
	    SL_ASSEMBLE_NONE, false, 0, true),
	EP("/v1/stream", HTTP_DELETE, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/v1/streams/lookup", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/v1/models", HTTP_GET, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/models", HTTP_GET, SL_END_NONE, false, false, SL_ASSEMBLE_NONE,
	   false),
	/*
	 * llama-server's router mode (--models-dir, --models-preset: it runs
	 * a llama-server per model, on demand): the models' states as events
	 * (a watch), and the admin's actions on them: load, unload, download
	 * one (POST /models {"model": "REPO"}), delete a downloaded one
	 * (DELETE /models?model=NAME). Another llama-server answers 404. With
	 * a models: section sluice answers these itself (models_api.h).
	 */
	EPX("/models/sse", HTTP_GET, SL_END_NONE, false, false,
	    SL_ASSEMBLE_NONE, false, 0, true),
	EP("/models/load", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, true),
	EP("/models/unload", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, true),
	EP("/models", HTTP_POST, SL_END_NONE, false, false, SL_ASSEMBLE_NONE,
	   true),
	EP("/models", HTTP_DELETE, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, true),
	EP("/lora-adapters", HTTP_GET, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/tools", HTTP_GET, SL_END_NONE, false, false, SL_ASSEMBLE_NONE,
	   false),
	/*
	 * Admin actions change llama-server's state for every client. POST
	 * /tools runs a built-in tool on the upstream's host (when llama-server
	 * enables them): an admin action too, although llama-server itself
	 * asks only for its API key. /cors-proxy fetches a URL from the
	 * upstream's host, with the headers the client names.
	 */
	EP("/lora-adapters", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, true),
	EPX("/tools", HTTP_POST, SL_END_NONE, false, false, SL_ASSEMBLE_NONE,
	    true, SL_PASS_TOOL, false),
	EPX("/cors-proxy", HTTP_GET, SL_END_NONE, false, false,
	    SL_ASSEMBLE_NONE, true, SL_PASS_PROXY_HEADERS, false),
	EPX("/cors-proxy", HTTP_POST, SL_END_NONE, false, false,
	    SL_ASSEMBLE_NONE, true, SL_PASS_PROXY_HEADERS, false),
	/* Each describes one llama-server: see per_upstream in proxy.h. */
	{"/props", HTTP_GET, "/props", SL_END_NONE, false, false,
	 SL_API_RELAY, SL_ASSEMBLE_NONE, false, false, true, 0, false, 0},
	{"/props", HTTP_POST, "/props", SL_END_NONE, false, false,
	 SL_API_RELAY, SL_ASSEMBLE_NONE, true, false, true, 0, false, 0},
	{"/slots", HTTP_GET, "/slots", SL_END_NONE, false, false,
	 SL_API_RELAY, SL_ASSEMBLE_NONE, false, false, true, 0, false, 0},
	/* POST /slots/{id}?action=save|restore|erase */
	{"/slots/", HTTP_POST, "/slots/", SL_END_NONE, false, false,
	 SL_API_RELAY, SL_ASSEMBLE_NONE, true, true, true, 0, false, 0},
	/* sluice's native APIs, mapped onto /completion. */
	{"/generate", HTTP_POST, "/completion", SL_END_STOP, true, true,
	 SL_API_GENERATE, SL_ASSEMBLE_NATIVE, false, false, false, 0, false, 0},
	{"/infer", HTTP_POST, "/completion", SL_END_STOP, true, true,
	 SL_API_INFER, SL_ASSEMBLE_NATIVE, false, false, false, 0, false, 0},
};
/* clang-format on */
#undef N_AND_PROMPTS
#undef GEN
#undef EP
#undef EPX
const unsigned sl_n_endpoints = SL_ARRAY_SIZE(sl_endpoints);

/* Its path is the client's own: upstream_path NULL (see upstream_target). */
const struct sl_endpoint sl_proxy_ui_endpoint = {
    .path = "/",
    .method = HTTP_GET,
    .upstream_path = NULL,
    .stream_end = SL_END_NONE,
    .api = SL_API_RELAY,
    .assemble = SL_ASSEMBLE_NONE,
    .prefix = true,
    .pass = 0,
    .watch = false,
};

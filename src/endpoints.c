/*
 * endpoints.c: the table of what sluice relays, and how. proxy.h describes
 * the fields; routes.c matches requests against it.
 */
#include "sluice/proxy.h"

#include "sluice/common.h"

/*
 * The endpoints llama-server 0.7.0 serves, with its methods. Everything that
 * occupies a llama-server slot (generation, embeddings, rerank, infill,
 * Anthropic's messages, responses) goes through sluice's queue, with
 * priority, cancellation and metrics; the cheap ones go straight through, so
 * that a tokenize does not wait behind a queue of generations.
 *
 * Bodies: a scheduled endpoint's body is a JSON object sluice validates and
 * may rewrite (request.h); the others are relayed as the client wrote them,
 * so that llama-server judges them and answers with its own errors (and
 * POST /lora-adapters takes an array).
 *
 * Aliases keep their own path upstream: llama-server answers /embedding and
 * /embeddings with its native embeddings handler, not the OpenAI one of
 * /v1/embeddings, and /completions like /completion.
 */
/* clang-format off */
#define EP(path, method, end, json, sched, assemble, admin)                    \
	{path, method, path, end, json, sched, SL_API_RELAY, assemble, admin, \
	 false, false}
const struct sl_endpoint sl_endpoints[] = {
	EP("/v1/chat/completions", HTTP_POST, SL_END_DONE, true, true,
	   SL_ASSEMBLE_CHAT, false),
	EP("/chat/completions", HTTP_POST, SL_END_DONE, true, true,
	   SL_ASSEMBLE_CHAT, false),
	EP("/v1/completions", HTTP_POST, SL_END_DONE, true, true,
	   SL_ASSEMBLE_TEXT, false),
	EP("/completion", HTTP_POST, SL_END_STOP, true, true,
	   SL_ASSEMBLE_NATIVE, false),
	EP("/completions", HTTP_POST, SL_END_STOP, true, true,
	   SL_ASSEMBLE_NATIVE, false),
	EP("/infill", HTTP_POST, SL_END_STOP, true, true, SL_ASSEMBLE_NATIVE,
	   false),
	/* Anthropic's events ("event: ...\ndata: ...") end with the transfer. */
	EP("/v1/messages", HTTP_POST, SL_END_EOF, true, true,
	   SL_ASSEMBLE_NONE, false),
	EP("/v1/responses", HTTP_POST, SL_END_EOF, true, true,
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
	EP("/v1/models", HTTP_GET, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/models", HTTP_GET, SL_END_NONE, false, false, SL_ASSEMBLE_NONE,
	   false),
	EP("/lora-adapters", HTTP_GET, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, false),
	EP("/tools", HTTP_GET, SL_END_NONE, false, false, SL_ASSEMBLE_NONE,
	   false),
	/*
	 * Admin actions change llama-server's state for every client. POST
	 * /tools runs a built-in tool on the upstream's host (when llama-server
	 * enables them): an admin action too, although llama-server itself
	 * asks only for its API key.
	 */
	EP("/lora-adapters", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, true),
	EP("/tools", HTTP_POST, SL_END_NONE, false, false, SL_ASSEMBLE_NONE,
	   true),
	EP("/cors-proxy", HTTP_GET, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, true),
	EP("/cors-proxy", HTTP_POST, SL_END_NONE, false, false,
	   SL_ASSEMBLE_NONE, true),
	/* Each describes one llama-server: see per_upstream in proxy.h. */
	{"/props", HTTP_GET, "/props", SL_END_NONE, false, false,
	 SL_API_RELAY, SL_ASSEMBLE_NONE, false, false, true},
	{"/props", HTTP_POST, "/props", SL_END_NONE, false, false,
	 SL_API_RELAY, SL_ASSEMBLE_NONE, true, false, true},
	{"/slots", HTTP_GET, "/slots", SL_END_NONE, false, false,
	 SL_API_RELAY, SL_ASSEMBLE_NONE, false, false, true},
	/* POST /slots/{id}?action=save|restore|erase */
	{"/slots/", HTTP_POST, "/slots/", SL_END_NONE, false, false,
	 SL_API_RELAY, SL_ASSEMBLE_NONE, true, true, true},
	/* sluice's native APIs, mapped onto /completion. */
	{"/generate", HTTP_POST, "/completion", SL_END_STOP, true, true,
	 SL_API_GENERATE, SL_ASSEMBLE_NATIVE, false, false, false},
	{"/infer", HTTP_POST, "/completion", SL_END_STOP, true, true,
	 SL_API_INFER, SL_ASSEMBLE_NATIVE, false, false, false},
};
/* clang-format on */
#undef EP
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
};

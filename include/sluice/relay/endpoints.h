/*
 * endpoints.h: the endpoints sluice relays, as data.
 *
 * One entry per method and path: where it goes upstream, whether it
 * streams and how a stream ends, whether sluice validates its JSON body
 * and queues it for a slot, which native API it speaks, which of the
 * client's headers go with it. The route table (routes.c) reads it to
 * dispatch, request.c to validate a body, the proxy to relay.
 */
#ifndef SLUICE_ENDPOINTS_H
#define SLUICE_ENDPOINTS_H

#include "sluice/json/assemble.h"

#include <llhttp.h>
#include <stdbool.h>

/* What the client's API is: relayed as is, or one of the native APIs. */
enum sl_api { SL_API_RELAY, SL_API_GENERATE, SL_API_INFER };

enum sl_stream_end {
	SL_END_NONE, /* the endpoint does not stream */
	SL_END_DONE, /* "data: [DONE]" */
	SL_END_STOP, /* a JSON chunk with "stop": true */
	SL_END_EOF, /* the transfer's end (Anthropic's and Responses' events) */
};

/*
 * The body's fields that ask llama-server for several outputs in one
 * request, each generated as a request of its own would be, where the
 * endpoint reads them (llama-server 0.7.0, measured): a key's tpm
 * reserves and charges every output (request.h, outputs).
 */
enum sl_outputs {
	/*
	 * "n_cmpl", else "n": that many outputs of each prompt. Read by
	 * chat, /v1/completions, /completion (and so /infill, which takes
	 * its parameters as /completion does) and the Responses API, whose
	 * plain answer is then an array of responses; /v1/messages ignores
	 * both.
	 */
	SL_OUTPUTS_N = 1u << 0,
	/*
	 * "prompt" as an array: one prompt for each element, unless it
	 * holds a number (then it is one prompt of token ids, or of text
	 * and ids mixed). /completion and /v1/completions; chat ignores a
	 * "prompt", /infill takes only a string.
	 */
	SL_OUTPUTS_PROMPTS = 1u << 1,
};

struct sl_endpoint {
	const char *path;
	llhttp_method_t method;
	const char *upstream_path;
	enum sl_stream_end stream_end;
	/*
	 * The request carries a JSON object that sluice validates (and may
	 * rewrite, request.h); without it a POST's body goes upstream as the
	 * client wrote it, for llama-server to judge.
	 */
	bool json_body;
	bool scheduled; /* it takes a slot: through sluice's queue */
	enum sl_api api;
	/* How a plain answer is built from a stream; NONE: relayed plain. */
	enum sl_assemble_kind assemble;
	bool admin;  /* changes llama-server's state: needs the admin key */
	bool prefix; /* path is a prefix: "/slots/" matches "/slots/0" */
	/* Describes one upstream: "?upstream=NAME"; a GET answers for all. */
	bool per_upstream;
	/* The client's request headers llama-server reads here (SL_PASS_*). */
	unsigned pass;
	/*
	 * A watch: an answer that stays open for as long as the upstream has
	 * something to say (GET /models/sse, GET /v1/stream), with no
	 * first-byte or idle timeout; at most SL_PROXY_WATCHES_MAX at once.
	 */
	bool watch;
	/* Which fields ask for several outputs (SL_OUTPUTS_*); 0: none. */
	unsigned outputs;
};

/*
 * The client's request headers that go upstream (all others stay with
 * sluice, its key above all), on the endpoints whose `pass` names them.
 */
enum sl_pass {
	/*
	 * X-Conversation-Id, on a stream the client asked for: llama-server
	 * keeps its events for GET /v1/stream, and goes on generating when
	 * the client leaves.
	 */
	SL_PASS_CONVERSATION = 1u << 0,
	/* X-Tool-Cwd, X-Tool-Runtime and X-Resp-Type, for POST /tools. */
	SL_PASS_TOOL = 1u << 1,
	/*
	 * X-Llama-Server-Proxy-Header-NAME, which /cors-proxy sends its
	 * target as NAME.
	 */
	SL_PASS_PROXY_HEADERS = 1u << 2,
};

/* The relayed endpoints, for the route table. */
extern const struct sl_endpoint sl_endpoints[];
extern const unsigned sl_n_endpoints;

/*
 * With --ui: any GET that no route matches goes to the upstream as is, for
 * llama-server's web UI and its assets (not scheduled: a page load takes no
 * slot).
 */
extern const struct sl_endpoint sl_proxy_ui_endpoint;

#endif

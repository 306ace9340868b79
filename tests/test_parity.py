"""Differential test: the same requests sent straight to llama-server and
through sluice (--upstream, same llama-server) must get the same answers.

Each row of TABLE is one request: method, path with its query, headers,
body, and whether the client asks for a stream. Both answers are compared
on their status, their relevant headers and their bodies: JSON as values
(numbers as written, so that 0.923 and 0.92300000000000004 differ), event
streams as sequences of events. What may differ is named, with a reason:
values that change from run to run (IGNORED_KEYS), headers that are
framing or each server's own (IGNORED_HEADERS), headers only sluice sends
(SLUICE_HEADERS), and rows where sluice deliberately answers otherwise
(Row.sluice, Row.wording). Everything else must match.

llama-server 0.7.0's behaviour behind the rows was probed with curl; the
notes are in /work/notes/llama-probe.md (not part of the repository).
"""

import base64
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import sluice_test as st

# Not a measure: how long a busy machine may take before a request fails.
SAFETY_NET_S = 120

# Small answers keep the table fast; the demo model never stops early.
N = 3

# An origin for the CORS rows: llama-server echoes it back.
ORIGIN = "http://parity.example"

# The admin key sluice gets, when its build knows --admin-key.
ADMIN_KEY = "parity-admin-key"

# JSON keys whose values change between two sends of the same request.
# Their presence is still compared; their values are not.
IGNORED_KEYS = {
    "id": "answer ids (chatcmpl-..., resp_..., msg_...) are random per "
          "answer; only string ids are ignored, token and slot ids are "
          "compared",
    "created": "wall-clock seconds",
    "created_at": "wall-clock seconds",
    "completed_at": "wall-clock seconds",
    "timings": "measured durations (and cache_n, below)",
    "tokens_cached": "prompt-cache state: the second send of a prompt "
                     "finds it cached",
    "cached_tokens": "prompt-cache state",
    "cache_n": "prompt-cache state",
    "cache_read_input_tokens": "prompt-cache state (/v1/messages)",
    "id_slot": "which slot llama-server picked: cache affinity and the "
               "order of requests",
    "item_id": "/v1/responses item ids (msg_...), random per answer",
}
# system_fingerprint is compared on purpose: llama-server writes its build
# there ("b11669-Debian"), the same for both sends to one upstream.

# Response headers not compared, with the reason.
IGNORED_HEADERS = {
    "server": "each server names itself (sluice: sluice/VERSION)",
    "date": "sluice adds Date (llama-server sends none); wall-clock",
    "content-length": "framing: sluice may frame a body otherwise",
    "transfer-encoding": "framing",
    "connection": "hop-by-hop (llama-server closes after errors)",
    "keep-alive": "hop-by-hop",
    "accept-ranges": "cpp-httplib's own, only on HEAD and files",
}
# Headers only sluice sends: deliberate, documented in src/relay/README.md.
SLUICE_HEADERS = {
    "x-request-id": "sluice's request id",
    "x-queue-ms": "time the request waited in sluice's queue",
    "x-batch-size": "size of the batch the request was dispatched in",
    "server-timing": "sluice's queue, upstream and first-token times",
    "x-priority": "the priority a queued request got "
                  "(src/tenants/README.md)",
    "cache-control": "sluice's own caching policy (no-cache on its event "
                     "streams, no-store on /health)",
    "access-control-max-age": "sluice lets browsers cache its preflight "
                              "answer (llama-server sends none)",
    "vary": "sluice's Access-Control-Allow-Origin depends on the request's "
            "Origin, so it says Vary: Origin for shared caches",
}


# sluice answers a method an endpoint does not take itself, as HTTP says.
WRONG_METHOD = (405, "invalid_request_error",
                "sluice answers 405 with Allow (RFC 9110, 15.5.6); "
                "llama-server 0.7.0 answers 404")


class Row:
    """One request of the table.

    name: what the row checks (the subTest label).
    body: a dict or list (sent as JSON), str or bytes (sent as is), or None.
    stream: the answer is an event stream.
    any_order: a stream with several choices (prompt arrays, n, n_cmpl),
        whose events interleave differently from run to run: compared
        choice by choice.
    ignore: more keys (name: reason) not compared in this row.
    project: a function reducing both JSON bodies to what is comparable.
    wording: a reason why an error's message is sluice's own (sluice
        answers it before any upstream sees the request); status, type and
        code are still compared.
    sluice: (status, error type or None, reason): a deliberate difference;
        sluice must answer this instead of what llama-server answers.
    admin: send sluice's admin key.
    ignore_headers: more headers (name: reason) not compared in this row.
    alt_status: (status, reason): a status sluice may answer instead of
        llama-server's, the rest of the answer being compared as usual.
    """

    def __init__(self, name, method, path, body=None, headers=None,
                 stream=False, any_order=False, ignore=None, project=None,
                 wording=None, sluice=None, admin=False, ignore_headers=None,
                 alt_status=None):
        self.name = name
        self.method = method
        self.path = path
        self.body = body
        self.headers = dict(headers or {})
        self.stream = stream
        self.any_order = any_order
        self.ignore = dict(ignore or {})
        self.project = project
        self.wording = wording
        self.sluice = sluice
        self.admin = admin
        self.ignore_headers = dict(ignore_headers or {})
        self.alt_status = alt_status

    def payload(self):
        if self.body is None:
            return None
        if isinstance(self.body, (dict, list)):
            return json.dumps(self.body).encode()
        if isinstance(self.body, str):
            return self.body.encode()
        return self.body


def gen(path, stream=False, **fields):
    """A generation body for path: a short deterministic answer."""
    body = {"temperature": 0}
    if path in ("/completion", "/completions", "/infill"):
        body.update(prompt="Hello", n_predict=N)
    elif path in ("/v1/completions",):
        body.update(prompt="Hello", max_tokens=N)
    elif path == "/v1/responses":
        body.update(input="Hello", max_output_tokens=N)
    else:
        body.update(messages=[{"role": "user", "content": "Hello"}],
                    max_tokens=N)
    if stream:
        body["stream"] = True
    body.update(fields)
    return body


def slots_view(doc):
    """What /slots says that does not depend on past requests."""
    if not isinstance(doc, list):
        return doc
    return [{k: s.get(k) for k in ("id", "n_ctx", "speculative",
                                   "is_processing")} for s in doc]


def health_view(doc):
    """sluice's /health is its own document; both say "status"."""
    if not isinstance(doc, dict) or "error" in doc:
        return doc
    return {"status": doc.get("status")}


def embeddings_view(doc):
    """Embeddings with every value replaced by a marker, keeping their
    shape (how many vectors of how many values): the demo model's
    embeddings are noise that changes from run to run (denormals, NaN, the
    sign of zero; measured by sending a row twice straight). base64
    vectors are decoded to count their floats."""

    def shape(v):
        if isinstance(v, list):
            return [shape(x) for x in v]
        if isinstance(v, str):
            return ["<float>"] * (len(base64.b64decode(v)) // 4)
        return "<float>"

    if isinstance(doc, list):
        return [embeddings_view(x) for x in doc]
    if isinstance(doc, dict):
        return {k: shape(v) if k == "embedding" else embeddings_view(v)
                for k, v in doc.items()}
    return doc


# A transcription request as OpenAI's SDK sends it: a multipart form with
# the audio file (a few bytes of a WAV header here) and the model.
FORM_BOUNDARY = "parity-form-boundary"
FORM_TYPE = "multipart/form-data; boundary=" + FORM_BOUNDARY
FORM = (("--%s\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n"
         "whisper-1\r\n--%s\r\nContent-Disposition: form-data; "
         "name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n"
         % (FORM_BOUNDARY, FORM_BOUNDARY)).encode()
        + b"RIFF\x24\x00\x00\x00WAVE" + ("\r\n--%s--\r\n"
                                          % FORM_BOUNDARY).encode())

HUGE_SEED = 18446744073709551615  # 2^64 - 1: beyond int64
HUGER_SEED = 99999999999999999999  # beyond uint64: llama-server reads a double
CHAT = [{"role": "user", "content": "Hello"}]
LONG_PROMPT = "hello " * 500  # ~3000 tokens, more than the 2048 of a slot

OWN_JSON_CHECK = ("sluice checks that a body is one JSON object itself "
                  "before it forwards anything (LLAMA-SERVER.md: validate "
                  "in the gateway); its message is its own")
# llama-server answers a preflight 200 with an empty text/html body
# (cpp-httplib's defaults); issue 10 asks sluice for 204, which browsers
# take as well. The Access-Control-* headers are compared either way.
PREFLIGHT_204 = (204, "an empty preflight answer may say so: 204")
PREFLIGHT_TYPE = {"content-type": "an empty preflight body has no type "
                                  "worth comparing"}
ADMIN_403 = (403, "permission_error",
             "an admin action (changes llama-server's state) without "
             "sluice's admin key")

TABLE = [
    # Health, models, state.
    Row("health", "GET", "/health", project=health_view),
    Row("v1 health alias", "GET", "/v1/health", project=health_view),
    Row("ready is sluice's own", "GET", "/ready",
        sluice=(200, None, "sluice's readiness check; llama-server 0.7.0 "
                           "has no /ready (404)")),
    Row("metrics are sluice's own", "GET", "/metrics", admin=True,
        sluice=(200, None, "sluice's own Prometheus metrics (they need the "
                           "admin key when one is set); llama-server "
                           "without --metrics answers 501")),
    Row("models", "GET", "/models"),
    Row("v1 models", "GET", "/v1/models"),
    Row("v1 models with a query", "GET", "/v1/models?reload=1"),
    Row("v1 models with an origin", "GET", "/v1/models",
        headers={"Origin": ORIGIN}),
    Row("v1 models, HEAD", "HEAD", "/v1/models"),
    Row("props", "GET", "/props"),
    Row("slots", "GET", "/slots", project=slots_view),
    Row("slots with a query", "GET", "/slots?fail_on_no_slot=1",
        project=slots_view),
    Row("lora adapters", "GET", "/lora-adapters"),
    Row("tools (disabled)", "GET", "/tools"),
    Row("tools post (disabled)", "POST", "/tools", {}, admin=True),
    # POST /tools runs a tool on the upstream's host: an admin action.
    Row("tools post without admin key", "POST", "/tools", {},
        sluice=ADMIN_403),

    # Admin actions: refused without the admin key, relayed with it.
    Row("slot erase without admin key", "POST", "/slots/0?action=erase",
        {}, sluice=ADMIN_403),
    Row("slot save without admin key", "POST", "/slots/0?action=save",
        {"filename": "parity.bin"}, sluice=ADMIN_403),
    Row("slot restore without admin key", "POST",
        "/slots/0?action=restore", {"filename": "parity.bin"},
        sluice=ADMIN_403),
    Row("props post without admin key", "POST", "/props", {},
        sluice=ADMIN_403),
    Row("lora adapters post without admin key", "POST", "/lora-adapters",
        [], sluice=ADMIN_403),
    Row("cors proxy without admin key", "GET",
        "/cors-proxy?url=http://127.0.0.1:1/", sluice=ADMIN_403),
    Row("slot erase", "POST", "/slots/0?action=erase", {}, admin=True,
        ignore={"n_erased": "what the slot held: the previous rows"}),
    Row("slot save", "POST", "/slots/1?action=save",
        {"filename": "parity.bin"}, admin=True,
        ignore={"n_saved": "what the slot held", "n_written": "same"}),
    Row("slot restore", "POST", "/slots/1?action=restore",
        {"filename": "parity.bin"}, admin=True,
        ignore={"n_restored": "what the file held", "n_read": "same"}),
    Row("slot bad action", "POST", "/slots/0?action=bogus", {}, admin=True),
    Row("props post", "POST", "/props", {}, admin=True),
    Row("lora adapters post", "POST", "/lora-adapters", [], admin=True),
    Row("cors proxy", "GET", "/cors-proxy?url=http://127.0.0.1:1/",
        admin=True),

    # Cheap endpoints.
    Row("tokenize", "POST", "/tokenize", {"content": "Hello world"}),
    Row("tokenize with pieces", "POST", "/tokenize",
        {"content": "Hello world", "with_pieces": True}),
    Row("tokenize with an origin", "POST", "/tokenize",
        {"content": "Hi"}, headers={"Origin": ORIGIN}),
    Row("detokenize", "POST", "/detokenize", {"tokens": [300, 301, 302]}),
    Row("apply template", "POST", "/apply-template", {"messages": CHAT}),
    Row("messages count tokens", "POST", "/v1/messages/count_tokens",
        {"messages": CHAT}),
    Row("input tokens", "POST", "/chat/completions/input_tokens",
        {"messages": CHAT}),
    Row("v1 input tokens", "POST", "/v1/chat/completions/input_tokens",
        {"messages": CHAT}),

    # Embeddings and reranking (the upstream has both flags).
    Row("embedding", "POST", "/embedding", {"content": "Hello"},
        project=embeddings_view),
    Row("embeddings", "POST", "/embeddings", {"input": "Hello"},
        project=embeddings_view),
    Row("v1 embeddings", "POST", "/v1/embeddings",
        {"input": ["Hello", "abc"]}, project=embeddings_view),
    Row("v1 embeddings base64", "POST", "/v1/embeddings",
        {"input": "Hello", "encoding_format": "base64"},
        project=embeddings_view),
    Row("rerank", "POST", "/rerank",
        {"query": "a", "documents": ["a b", "c"], "top_n": 2}),
    Row("v1 rerank", "POST", "/v1/rerank",
        {"query": "a", "documents": ["a b", "c"]}),
    Row("reranking", "POST", "/reranking",
        {"query": "a", "documents": ["a b", "c"]}),
    Row("v1 reranking", "POST", "/v1/reranking",
        {"query": "a", "documents": ["a b", "c"], "return_text": True}),
    Row("infill (the demo model has no FIM tokens)", "POST", "/infill",
        {"input_prefix": "def f(", "input_suffix": "):\n",
         "n_predict": N, "temperature": 0}),

    # /completion and its alias.
    Row("completion", "POST", "/completion", gen("/completion")),
    Row("completion stream", "POST", "/completion",
        gen("/completion", True), stream=True),
    Row("completion with a query string", "POST", "/completion?parity=1",
        gen("/completion")),
    Row("completion sent as curl -d sends it", "POST", "/completion",
        gen("/completion"),
        headers={"Content-Type": "application/x-www-form-urlencoded"}),
    Row("completions alias", "POST", "/completions", gen("/completion")),
    Row("completions alias stream", "POST", "/completions",
        gen("/completion", True), stream=True),
    Row("completion n_probs", "POST", "/completion",
        gen("/completion", n_probs=2)),
    Row("completion n_probs stream", "POST", "/completion",
        gen("/completion", True, n_probs=2), stream=True),
    Row("completion post_sampling_probs", "POST", "/completion",
        gen("/completion", n_probs=2, post_sampling_probs=True)),
    Row("completion return_tokens", "POST", "/completion",
        gen("/completion", return_tokens=True)),
    Row("completion __verbose", "POST", "/completion",
        gen("/completion", __verbose=True)),
    Row("completion response_fields", "POST", "/completion",
        gen("/completion", response_fields=[
            "content", "tokens_predicted", "generation_settings/n_predict"])),
    Row("completion response_fields stream", "POST", "/completion",
        gen("/completion", True, response_fields=["content", "stop_type"]),
        stream=True),
    Row("completion prompt array", "POST", "/completion",
        gen("/completion", prompt=["Hello", "World"])),
    Row("completion prompt array stream", "POST", "/completion",
        gen("/completion", True, prompt=["Hello", "World"]), stream=True,
        any_order=True),
    Row("completion prompt of token ids", "POST", "/completion",
        gen("/completion", prompt=[299, 328, 335])),
    Row("completion n_cmpl", "POST", "/completion",
        gen("/completion", n_cmpl=2)),
    Row("completion n_cmpl stream", "POST", "/completion",
        gen("/completion", True, n_cmpl=2), stream=True, any_order=True),
    Row("completion stop word", "POST", "/completion",
        gen("/completion", n_predict=12, stop=["e"])),
    Row("completion grammar", "POST", "/completion",
        gen("/completion", grammar='root ::= [a-c]+')),
    Row("completion json_schema", "POST", "/completion",
        gen("/completion", json_schema={"type": "object"})),
    Row("completion seed, default temperature", "POST", "/completion",
        {"prompt": "Hello", "n_predict": N, "seed": 42}),
    Row("completion seed 2^64-1", "POST", "/completion",
        gen("/completion", seed=HUGE_SEED)),
    Row("completion seed beyond 2^64", "POST", "/completion",
        gen("/completion", seed=HUGER_SEED)),
    Row("completion seed 2^64-1 stream", "POST", "/completion",
        gen("/completion", True, seed=HUGE_SEED), stream=True),

    # OpenAI text completions.
    Row("v1 completions", "POST", "/v1/completions", gen("/v1/completions")),
    Row("v1 completions stream", "POST", "/v1/completions",
        gen("/v1/completions", True), stream=True),
    Row("v1 completions logprobs", "POST", "/v1/completions",
        gen("/v1/completions", logprobs=2)),
    Row("v1 completions logprobs stream", "POST", "/v1/completions",
        gen("/v1/completions", True, logprobs=2), stream=True),
    Row("v1 completions prompt array", "POST", "/v1/completions",
        gen("/v1/completions", prompt=["Hello", "World"])),
    Row("v1 completions prompt array stream", "POST", "/v1/completions",
        gen("/v1/completions", True, prompt=["Hello", "World"]),
        stream=True, any_order=True),
    Row("v1 completions n", "POST", "/v1/completions",
        gen("/v1/completions", n=2)),
    Row("v1 completions stop", "POST", "/v1/completions",
        gen("/v1/completions", max_tokens=12, stop="e")),
    Row("v1 completions seed 2^64-1", "POST", "/v1/completions",
        gen("/v1/completions", seed=HUGE_SEED)),

    # OpenAI chat and its alias.
    Row("chat", "POST", "/v1/chat/completions", gen("/v1/chat/completions")),
    Row("chat stream", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", True), stream=True),
    Row("chat alias", "POST", "/chat/completions",
        gen("/v1/chat/completions")),
    Row("chat alias stream", "POST", "/chat/completions",
        gen("/v1/chat/completions", True), stream=True),
    Row("chat stream with an origin", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", True), stream=True,
        headers={"Origin": ORIGIN}),
    Row("chat logprobs", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", logprobs=True, top_logprobs=2)),
    Row("chat logprobs stream", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", True, logprobs=True, top_logprobs=2),
        stream=True),
    Row("chat n_probs", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", n_probs=2)),
    Row("chat n", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", n=2)),
    Row("chat n stream", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", True, n=2), stream=True, any_order=True),
    Row("chat include_usage stream", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", True,
            stream_options={"include_usage": True}), stream=True),
    Row("chat __verbose", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", __verbose=True)),
    Row("chat response_fields and return_tokens (ignored by chat)", "POST",
        "/v1/chat/completions",
        gen("/v1/chat/completions", response_fields=["content"],
            return_tokens=True)),
    Row("chat stop", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", max_tokens=12, stop=["e"])),
    Row("chat json_schema", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", response_format={
            "type": "json_schema",
            "json_schema": {"schema": {"type": "object"}}})),
    Row("chat grammar", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", grammar="root ::= [a-c]+")),
    Row("chat seed 2^64-1", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", seed=HUGE_SEED)),
    Row("chat empty messages", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", messages=[])),

    # Anthropic messages and OpenAI responses.
    Row("messages", "POST", "/v1/messages", gen("/v1/messages"),
        ignore={"input_tokens": "/v1/messages counts the prompt minus "
                                "the cached part (it ignores cache_prompt)"}),
    Row("messages stream", "POST", "/v1/messages",
        gen("/v1/messages", True), stream=True,
        ignore={"input_tokens": "as above"}),
    Row("responses", "POST", "/v1/responses", gen("/v1/responses")),
    Row("responses stream", "POST", "/v1/responses",
        gen("/v1/responses", True), stream=True),
    Row("responses alias", "POST", "/responses", gen("/v1/responses")),
    Row("responses alias stream", "POST", "/responses",
        gen("/v1/responses", True), stream=True),
    Row("responses input tokens", "POST", "/responses/input_tokens",
        {"input": "Hello"}),
    Row("v1 responses input tokens", "POST", "/v1/responses/input_tokens",
        {"input": [{"role": "user", "content": "Hello"}]}),

    # Reasoning control of a generation under way: none is here.
    Row("chat control without an id", "POST",
        "/v1/chat/completions/control", {}),
    Row("chat control of no generation", "POST",
        "/v1/chat/completions/control",
        {"id": "chatcmpl-none", "action": "reasoning_end"}),
    Row("chat control, unknown action", "POST",
        "/v1/chat/completions/control",
        {"id": "chatcmpl-none", "action": "bogus"}),

    # Transcriptions: a multipart form, relayed with its own type; the
    # demo model hears nothing (501).
    Row("transcriptions", "POST", "/v1/audio/transcriptions", FORM,
        headers={"Content-Type": FORM_TYPE}),
    Row("transcriptions alias", "POST", "/audio/transcriptions", FORM,
        headers={"Content-Type": FORM_TYPE}),

    # A decision model's answers (the demo model is none: 501).
    Row("systemone", "POST", "/v1/systemone",
        {"state": "x", "questions": {"q": {"type": "noul",
                                           "instructions": "y"}}}),
    Row("systemone, malformed body", "POST", "/v1/systemone", "junk"),

    # Resumable streams (test_resumable_stream makes one).
    Row("stream without a conversation", "GET", "/v1/stream"),
    Row("stream of an unknown conversation", "GET",
        "/v1/stream?conv_id=parity-none&from=0"),
    Row("stream delete", "DELETE", "/v1/stream?conv_id=parity-none"),
    Row("stream delete without a conversation", "DELETE", "/v1/stream"),
    Row("streams lookup", "POST", "/v1/streams/lookup",
        {"conversation_ids": ["parity-none"]}),

    # Router mode's endpoints: this llama-server is no router (404);
    # RouterParity has one.
    Row("models load", "POST", "/models/load", {"model": "x"}, admin=True),
    Row("models unload", "POST", "/models/unload", {"model": "x"},
        admin=True),
    Row("models add", "POST", "/models", {"model": "x/y"}, admin=True),
    Row("models delete", "DELETE", "/models?model=x", admin=True),
    Row("models events", "GET", "/models/sse"),
    Row("models load without admin key", "POST", "/models/load",
        {"model": "x"}, sluice=ADMIN_403),
    Row("models delete without admin key", "DELETE", "/models?model=x",
        sluice=ADMIN_403),

    # Bad inputs.
    Row("malformed JSON", "POST", "/completion",
        '{"prompt": "Hello", "n_predict": 3,', wording=OWN_JSON_CHECK),
    Row("malformed JSON, chat", "POST", "/v1/chat/completions", "not json",
        wording=OWN_JSON_CHECK),
    Row("empty body", "POST", "/completion", "", wording=OWN_JSON_CHECK),
    Row("JSON array body", "POST", "/completion", [1, 2],
        wording=OWN_JSON_CHECK),
    Row("JSON string body", "POST", "/v1/completions", '"Hello"',
        wording=OWN_JSON_CHECK),
    Row("wrong type n_predict", "POST", "/completion",
        gen("/completion", n_predict="five")),
    Row("wrong type temperature", "POST", "/v1/chat/completions",
        gen("/v1/chat/completions", temperature="hot")),
    Row("wrong type prompt", "POST", "/completion",
        gen("/completion", prompt=123)),
    Row("missing prompt", "POST", "/completion", {"n_predict": N}),
    Row("missing messages", "POST", "/v1/chat/completions",
        {"max_tokens": N}),
    Row("messages not an array", "POST", "/v1/chat/completions",
        {"messages": "Hello", "max_tokens": N}),
    Row("anthropic missing messages (500)", "POST", "/v1/messages",
        {"max_tokens": N}),
    Row("responses missing input", "POST", "/v1/responses",
        {"max_output_tokens": N}),
    Row("bad grammar", "POST", "/completion",
        gen("/completion", grammar="root ::= [a")),
    Row("bad grammar stream", "POST", "/completion",
        gen("/completion", True, grammar="root ::= [a")),
    Row("prompt beyond the context", "POST", "/completion",
        gen("/completion", prompt=LONG_PROMPT)),
    Row("tokenize wrong type", "POST", "/tokenize", {"content": 5}),
    Row("unknown endpoint", "GET", "/nonexistent",
        wording="sluice answers unknown paths itself"),
    Row("unknown endpoint with an origin", "POST", "/v1/nonexistent", {},
        headers={"Origin": ORIGIN},
        wording="sluice answers unknown paths itself"),
    Row("not an endpoint: /api/tags", "GET", "/api/tags",
        wording="sluice answers unknown paths itself"),
    Row("web UI off: /", "GET", "/",
        wording="sluice answers unknown paths itself"),
    Row("web UI off: /index.html", "GET", "/index.html",
        wording="sluice answers unknown paths itself"),
    Row("web UI off: /bundle.js", "GET", "/bundle.js",
        wording="sluice answers unknown paths itself"),
    Row("web UI off: /bundle.css", "GET", "/bundle.css",
        wording="sluice answers unknown paths itself"),
    Row("wrong method: GET /completion", "GET", "/completion",
        sluice=WRONG_METHOD),
    Row("wrong method: GET /v1/chat/completions", "GET",
        "/v1/chat/completions",
        sluice=WRONG_METHOD),
    Row("wrong method: PUT /completion", "PUT", "/completion",
        gen("/completion"), sluice=WRONG_METHOD),
    Row("wrong method: POST /v1/models", "POST", "/v1/models", {},
        sluice=WRONG_METHOD),
    Row("wrong method: DELETE /tokenize", "DELETE", "/tokenize",
        sluice=WRONG_METHOD),

    # CORS preflights: answered without a key, for any path.
    Row("preflight", "OPTIONS", "/v1/chat/completions", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization"},
        alt_status=PREFLIGHT_204, ignore_headers=PREFLIGHT_TYPE),
    Row("preflight of an unknown path", "OPTIONS", "/nonexistent", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "GET"},
        alt_status=PREFLIGHT_204, ignore_headers=PREFLIGHT_TYPE),
]


class Num:
    """A JSON number as written: 0.923 and 0.92300000000000004 differ.
    Zero is zero whatever its sign: the demo model's zero embeddings
    change sign from run to run."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = "0.0" if float(text) == 0 else text

    def __eq__(self, other):
        return isinstance(other, Num) and other.text == self.text

    def __hash__(self):
        return hash(self.text)

    def __repr__(self):
        return self.text


def parse_json(data):
    return json.loads(data, parse_float=Num)


def normalise(value, ignore):
    """value with every ignored key's value replaced by a marker, so that
    the key's presence is still compared."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ignore and not (k == "id" and not isinstance(v, str)):
                out[k] = "<ignored>"
            else:
                out[k] = normalise(v, ignore)
        return out
    if isinstance(value, list):
        return [normalise(v, ignore) for v in value]
    return value


def diff(a, b, where="body"):
    """Lines naming each place where a (straight) and b (sluice) differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            at = "%s.%s" % (where, k)
            if k not in b:
                out.append("%s: only straight: %s" % (at, short(a[k])))
            elif k not in a:
                out.append("%s: only through sluice: %s" % (at, short(b[k])))
            else:
                out += diff(a[k], b[k], at)
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        for i in range(max(len(a), len(b))):
            at = "%s[%d]" % (where, i)
            if i >= len(b):
                out.append("%s: only straight: %s" % (at, short(a[i])))
            elif i >= len(a):
                out.append("%s: only through sluice: %s" % (at, short(b[i])))
            else:
                out += diff(a[i], b[i], at)
        return out
    if type(a) is not type(b) or a != b:
        return ["%s: straight %s, through sluice %s"
                % (where, short(a), short(b))]
    return []


def short(value, limit=160):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def sse_events(data):
    """An event stream as [(field names, event name, data)], data parsed
    as JSON where it is JSON. Comments (keep-alives) are left out: when
    they come depends on time. Bytes after the last blank line become an
    event of their own, so that a torn stream shows."""
    text = data.decode("utf-8", "replace")
    blocks = text.split("\n\n")
    tail = blocks.pop()
    events = []
    for block in blocks:
        fields, name, lines = [], None, []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields.append(field)
            if field == "event":
                name = value
            elif field == "data":
                lines.append(value)
        if not fields:
            continue
        payload = "\n".join(lines)
        try:
            payload = parse_json(payload)
        except ValueError:
            pass
        events.append((tuple(fields), name, payload))
    if tail:
        events.append((("<unterminated>",), None, tail))
    return events


def choice_index(payload):
    """The choice an event belongs to, or None."""
    if not isinstance(payload, dict):
        return None
    if isinstance(payload.get("index"), int):
        return payload["index"]
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and isinstance(
            choices[0], dict):
        return choices[0].get("index")
    return None


def by_choice(events):
    """Interleaved events of several choices, choice by choice: events
    before the first choice's, each choice's in its order, then the rest."""
    head, tail, choices = [], [], {}
    for event in events:
        i = choice_index(event[2])
        if i is None:
            (tail if choices else head).append(event)
        else:
            choices.setdefault(i, []).append(event)
    return {"before": head, "choices": {str(i): choices[i]
                                        for i in sorted(choices)},
            "after": tail}


class Answer:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # [(lower name, value)]
        self.body = body

    def header(self, name):
        values = [v for k, v in self.headers if k == name]
        return values[0] if values else None

    def is_json(self):
        return (self.header("content-type") or "").startswith(
            "application/json")


def send(port, row, extra_headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port,
                                      timeout=SAFETY_NET_S)
    try:
        headers = dict(row.headers)
        payload = row.payload()
        if payload is not None:
            headers.setdefault("Content-Type", "application/json")
        headers.update(extra_headers or {})
        conn.request(row.method, row.path, body=payload, headers=headers)
        r = conn.getresponse()
        return Answer(r.status, [(k.lower(), v) for k, v in r.getheaders()],
                      r.read())
    finally:
        conn.close()


def compare_headers(straight, through, ignore=()):
    """Differences in the headers that matter (see IGNORED_HEADERS and
    SLUICE_HEADERS). An empty Access-Control-Allow-Origin (llama-server's
    answer to a request without Origin) counts as sluice's "*"."""

    def relevant(answer):
        out = {}
        for k, v in answer.headers:
            if k in IGNORED_HEADERS or k in ignore:
                continue
            if k == "access-control-allow-origin" and not v.strip():
                # llama-server's empty value where the request has no
                # Origin; sluice says "*" there (deliberate:
                # src/relay/README.md).
                v = "*"
            out.setdefault(k, []).append(v)
        return out

    a, b = relevant(straight), relevant(through)
    problems = []
    for k in sorted(set(a) | set(b)):
        if k not in b:
            problems.append("header %s: straight %r, through sluice none"
                            % (k, a[k]))
        elif k not in a:
            if k not in SLUICE_HEADERS:
                problems.append("header %s: only through sluice: %r"
                                % (k, b[k]))
        elif a[k] != b[k]:
            problems.append("header %s: straight %r, through sluice %r"
                            % (k, a[k], b[k]))
    return problems


def error_view(doc):
    """An error body without its message (see Row.wording)."""
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return {"error": {k: v for k, v in doc["error"].items()
                          if k != "message"}}
    return doc


def compare(row, straight, through):
    """Lines describing every difference between the two answers."""
    problems = []
    if straight.status != through.status and not (
            row.alt_status and through.status == row.alt_status[0]):
        problems.append("status: straight %d, through sluice %d"
                        % (straight.status, through.status))
    problems += compare_headers(straight, through, row.ignore_headers)
    ignore = dict(IGNORED_KEYS, **row.ignore)
    if row.stream and straight.header("content-type") == "text/event-stream":
        a = [(f, n, normalise(d, ignore))
             for f, n, d in sse_events(straight.body)]
        b = [(f, n, normalise(d, ignore))
             for f, n, d in sse_events(through.body)]
        if row.any_order:
            a, b = by_choice(a), by_choice(b)
        return problems + diff(a, b, "events")
    # An answer without content (HEAD, 204) is compared as bytes: none.
    if straight.is_json() and row.method != "HEAD" and straight.body:
        try:
            a = parse_json(straight.body)
        except ValueError as e:
            return problems + ["straight body is not JSON (%s): %r"
                               % (e, straight.body[:200])]
        try:
            b = parse_json(through.body)
        except ValueError as e:
            return problems + ["body through sluice is not JSON (%s): %r"
                               % (e, through.body[:200])]
        if row.project:
            a, b = row.project(a), row.project(b)
        if row.wording:
            a, b = error_view(a), error_view(b)
        return problems + diff(normalise(a, ignore), normalise(b, ignore))
    if straight.body != through.body:
        problems.append("body: straight %r, through sluice %r"
                        % (straight.body[:200], through.body[:200]))
    return problems


class Parity(st.TestCase):
    """One llama-server with embeddings, reranking and slot files (a
    generation still works with --embeddings on: probed), and sluice in
    front of it, as it comes: plain answers relayed."""

    sluice_args = ()

    @classmethod
    def setUpClass(cls):
        cls.slot_dir = tempfile.mkdtemp(prefix="sluice-parity-slots-")
        cls.ls = None
        try:
            cls.ls = st.LlamaServer(
                st.MODEL_TINY, slots=2, ctx=2048,
                extra=("--embeddings", "--reranking",
                       "--slot-save-path", cls.slot_dir))
            cls.sl = st.Sluice("--upstream", cls.ls.url, "--batch-window",
                               "0", "--admin-key", ADMIN_KEY,
                               *cls.sluice_args)
        except BaseException:
            if cls.ls:
                cls.ls.kill()
            shutil.rmtree(cls.slot_dir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            assert cls.sl.stop() == 0
        finally:
            cls.ls.kill()
            shutil.rmtree(cls.slot_dir, ignore_errors=True)

    def test_table(self):
        failed = []
        for row in TABLE:
            with self.subTest(row=row.name):
                problems = self.check_row(row)
                if problems:
                    failed.append(row.name)
                    self.fail("%s %s (%s):\n  %s" % (
                        row.method, row.path, row.name,
                        "\n  ".join(problems)))
        if failed:
            print("\nparity: %d of %d rows differ: %s"
                  % (len(failed), len(TABLE), "; ".join(failed)))

    def check_row(self, row):
        straight = send(self.ls.port, row)
        extra = {}
        if row.admin:
            extra["Authorization"] = "Bearer " + ADMIN_KEY
        through = send(self.sl.port, row, extra)
        if row.sluice is None:
            return compare(row, straight, through)
        # A deliberate difference: sluice's own answer, checked for itself.
        status, error_type, _ = row.sluice
        problems = []
        if through.status != status:
            problems.append("status through sluice: %d, expected %d (%s)"
                            % (through.status, status, row.sluice[2]))
        if error_type is not None:
            try:
                got = parse_json(through.body)["error"]["type"]
            except (ValueError, KeyError, TypeError):
                got = through.body[:200]
            if got != error_type:
                problems.append("error type through sluice: %r, expected %r"
                                % (got, error_type))
            if through.header("content-type") != \
                    "application/json; charset=utf-8":
                problems.append("Content-Type through sluice: %r"
                                % through.header("content-type"))
        return problems

    def test_rows_are_deterministic(self):
        # The premise of the table: the same row sent twice straight to
        # llama-server gets the same answer, up to what the table ignores.
        # A row failing here is the table's fault, not sluice's.
        for row in TABLE:
            if row.sluice is not None:
                continue
            with self.subTest(row=row.name):
                problems = compare(row, send(self.ls.port, row),
                                   send(self.ls.port, row))
                self.assertEqual(problems, [], "%s %s (%s)" % (
                    row.method, row.path, row.name))

    def test_every_llama_server_endpoint_has_a_row(self):
        # The endpoints of issue 10, item 1: a row for each, so that a new
        # alias cannot be forgotten in the table.
        wanted = {
            "/health", "/v1/health", "/models", "/v1/models", "/props",
            "/slots", "/lora-adapters", "/tools", "/cors-proxy",
            "/completion", "/completions", "/v1/completions",
            "/chat/completions", "/v1/chat/completions", "/embedding",
            "/embeddings", "/v1/embeddings", "/rerank", "/v1/rerank",
            "/reranking", "/v1/reranking", "/infill", "/tokenize",
            "/detokenize", "/apply-template", "/v1/messages",
            "/v1/messages/count_tokens", "/v1/responses",
            "/chat/completions/input_tokens",
            "/v1/chat/completions/input_tokens", "/slots/0", "/slots/1",
            "/responses", "/responses/input_tokens",
            "/v1/responses/input_tokens", "/v1/chat/completions/control",
            "/v1/audio/transcriptions", "/audio/transcriptions",
            "/v1/stream", "/v1/streams/lookup", "/models/load",
            "/models/unload", "/models/sse", "/v1/systemone",
        }
        have = {row.path.split("?")[0] for row in TABLE}
        self.assertEqual(wanted - have, set())


    def test_resumable_stream(self):
        # A stream asked for through sluice with X-Conversation-Id is kept
        # by llama-server: GET /v1/stream replays its bytes (from any byte
        # offset), straight and through sluice alike, and they are the
        # bytes sluice relayed; DELETE forgets it.
        conv = "parity-%s" % type(self).__name__
        live = send(self.sl.port, Row(
            "resumable", "POST", "/v1/chat/completions",
            gen("/v1/chat/completions", True),
            headers={"X-Conversation-Id": conv}, stream=True))
        self.assertEqual(live.status, 200, live.body)
        for query in ("", "&from=0", "&from=57"):
            with self.subTest(query=query):
                row = Row("replay", "GET",
                          "/v1/stream?conv_id=%s%s" % (conv, query))
                straight = send(self.ls.port, row)
                through = send(self.sl.port, row)
                self.assertEqual(straight.status, 200, straight.body)
                self.assertEqual(through.status, 200, through.body)
                self.assertEqual(through.body, straight.body)
                self.assertEqual(compare_headers(straight, through), [])
                offset = int(query.rpartition("=")[2] or 0)
                self.assertEqual(through.body, live.body[offset:])
        lookup = Row("lookup", "POST", "/v1/streams/lookup",
                     {"conversation_ids": [conv, "parity-none"]})
        self.assertEqual(
            compare(lookup, send(self.ls.port, lookup),
                    send(self.sl.port, lookup)), [])
        got = parse_json(send(self.sl.port, lookup).body)
        self.assertEqual([s["conversation_id"] for s in got], [conv])
        gone = send(self.sl.port,
                    Row("delete", "DELETE", "/v1/stream?conv_id=" + conv))
        self.assertEqual(gone.status, 204)
        self.assertEqual(gone.body, b"")
        replay = Row("replay", "GET", "/v1/stream?conv_id=" + conv)
        self.assertEqual(send(self.ls.port, replay).status, 404)


class ParityAssembled(Parity):
    """The same table with plain answers asked for as streams and
    assembled, as --stream-upstream auto does where streams run:
    the answers must not change."""

    sluice_args = ("--stream-upstream", "on")


class RouterServer(st.Process):
    """llama-server in router mode (--models-dir DIR): it runs one
    llama-server per model of DIR, on demand, and its /props says
    "role": "router". Stopped with SIGTERM, so that it stops its own."""

    def __init__(self, models_dir):
        self.port = st.free_port()
        argv = [st.llama_server_path(), "--host", "127.0.0.1", "--port",
                str(self.port), "--models-dir", models_dir]
        env = dict(os.environ, LLAMA_ARG_UI="0", LLAMA_ARG_NO_WEBUI="1")
        super().__init__(argv, env=env, name="router")
        self.url = "http://127.0.0.1:%d" % self.port
        st.wait_until(self._up, 60, "the router to answer")

    def _up(self):
        try:
            return st.request(self.port, "GET", "/props",
                              timeout=2).status == 200
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.wait_exit(30)
        finally:
            self.kill()


def read_event(client):
    """The next event of a chunked event stream RawClient is reading."""
    while b"\n\n" not in client.pending:
        size = int(client._take_line().split(b";")[0], 16)
        if size == 0:
            raise EOFError("the stream ended")
        client.pending += client._take(size)
        client._take(2)
    event, _, client.pending = client.pending.partition(b"\n\n")
    return event + b"\n\n"


def open_watch(port, path, headers=None):
    """A RawClient whose GET of path has begun: its head read (a router
    sends it with the first event), events to read with read_event."""
    c = st.RawClient(port, timeout=SAFETY_NET_S)
    c.pending = b""
    c.request("GET", path, headers=headers)
    return c


class RouterParity(st.TestCase):
    """sluice in front of llama-server's router mode: its /models
    endpoints relayed (the admin's ones with the admin key), the model
    events watched for as long as they come, and the router recognised."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sluice-parity-router-")
        shutil.copy(st.MODEL_TINY, os.path.join(cls.dir, "tiny.gguf"))
        cls.router = cls.sl = None
        try:
            cls.router = cls.ls = RouterServer(cls.dir)
            # Timeouts far shorter than a watch's silences.
            cls.sl = st.Sluice("--upstream", cls.router.url,
                               "--admin-key", ADMIN_KEY,
                               "--upstream-timeout", "1",
                               "--upstream-idle-timeout", "1")
        except BaseException:
            if cls.router:
                cls.router.stop()
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            assert cls.sl.stop() == 0
        finally:
            cls.router.stop()
            shutil.rmtree(cls.dir, ignore_errors=True)

    # What a router answers that changes nothing; status lists what
    # its models did (an "args" with the port each last ran on).
    ROWS = [
        Row("router props", "GET", "/props"),
        Row("router models", "GET", "/models"),
        Row("router v1 models", "GET", "/v1/models"),
        Row("load an unknown model", "POST", "/models/load",
            {"model": "nope"}, admin=True),
        Row("load without a model", "POST", "/models/load", {},
            admin=True),
        Row("load, malformed body", "POST", "/models/load", "junk",
            admin=True),
        Row("unload a model not running", "POST", "/models/unload",
            {"model": "nope"}, admin=True),
        Row("delete without a model", "DELETE", "/models", admin=True),
        Row("delete a model not downloaded", "DELETE", "/models?model=tiny",
            admin=True),
        Row("add without a model", "POST", "/models", {}, admin=True),
        Row("a completion for an unknown model", "POST", "/completion",
            dict(gen("/completion"), model="nope")),
        Row("load without admin key", "POST", "/models/load",
            {"model": "tiny"}, sluice=ADMIN_403),
        Row("unload without admin key", "POST", "/models/unload",
            {"model": "tiny"}, sluice=ADMIN_403),
    ]

    def test_table(self):
        for row in self.ROWS:
            with self.subTest(row=row.name):
                problems = Parity.check_row(self, row)
                if problems:
                    self.fail("%s %s (%s):\n  %s" % (
                        row.method, row.path, row.name,
                        "\n  ".join(problems)))

    def test_sluice_knows_a_router(self):
        self.sl.wait_line(r"upstream %s is a llama-server router"
                          % re.escape(self.router.url))
        self.assertTrue(self.sl.upstream()["router"])
        # A router has no slots of its own: --slots counts, said once
        # without alarm.
        self.assertEqual(self.sl.count_lines(r"assuming \d+ slots?"), 0)

    def test_model_events_are_watched_as_long_as_they_come(self):
        straight = open_watch(self.router.port, "/models/sse")
        through = open_watch(self.sl.port, "/models/sse")
        # Silent for longer than sluice's --upstream-timeout and
        # --upstream-idle-timeout (1 s each): a watch has neither. (The
        # condition waited for is time itself.)
        time.sleep(2.5)
        load = Row("load", "POST", "/models/load", {"model": "tiny"},
                   admin=True)
        r = send(self.sl.port, load, {"Authorization": "Bearer " + ADMIN_KEY})
        self.assertEqual((r.status, parse_json(r.body)),
                         (200, {"success": True}))
        status, head = through.read_head()
        self.assertEqual(status, 200)
        self.assertEqual(head["content-type"], "text/event-stream")
        self.assertEqual(straight.read_head()[0], 200)
        first = read_event(straight)
        self.assertIn(b'"event":"model_status"', first)
        self.assertEqual(read_event(through), first)
        # The next (loaded, or failed where the router cannot start a
        # llama-server), whenever it comes.
        self.assertEqual(read_event(through), read_event(straight))
        straight.close()
        through.close()
        self.assertEqual(self.sl.count_lines(r"no answer within|silent for"),
                         0)


class ClientKeys(st.TestCase):
    """sluice --api-key K against llama-server --api-key K: the same
    statuses and error types for the same credentials."""

    KEY = "parity-client-key"

    @classmethod
    def setUpClass(cls):
        cls.ls = st.LlamaServer(st.MODEL_TINY, slots=1, ctx=1024,
                                extra=("--api-key", cls.KEY))
        try:
            cls.sl = st.Sluice("--upstream", cls.ls.url,
                               "--upstream-api-key", cls.KEY,
                               "--api-key", cls.KEY, "--batch-window", "0")
        except BaseException:
            cls.ls.kill()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            assert cls.sl.stop() == 0
        finally:
            cls.ls.kill()

    def rows(self):
        """The table of this class. The message of a 401 may be sluice's
        own; its status, type and code may not."""
        body = gen("/completion")
        bearer = {"Authorization": "Bearer " + self.KEY}
        rows = [
            Row("no key", "POST", "/completions", body),
            Row("wrong key", "POST", "/completions", body,
                headers={"Authorization": "Bearer wrong"}),
            Row("wrong X-Api-Key", "POST", "/completions", body,
                headers={"X-Api-Key": "wrong"}),
            Row("Authorization: Bearer", "POST", "/completions", body,
                headers=bearer),
            Row("X-Api-Key", "POST", "/completions", body,
                headers={"X-Api-Key": self.KEY}),
            Row("a wrong Authorization wins over a right X-Api-Key", "POST",
                "/completions", body,
                headers={"Authorization": "Bearer wrong",
                         "X-Api-Key": self.KEY}),
            Row("models need the key", "GET", "/v1/models"),
            Row("unknown path needs the key", "GET", "/nonexistent"),
            Row("public health", "GET", "/health", project=health_view),
            Row("public v1 health", "GET", "/v1/health",
                project=health_view),
            Row("preflight needs no key", "OPTIONS", "/completions",
                headers={"Origin": ORIGIN,
                         "Access-Control-Request-Method": "POST"},
                alt_status=PREFLIGHT_204, ignore_headers=PREFLIGHT_TYPE),
            Row("401 with an origin", "POST", "/completions", body,
                headers={"Origin": ORIGIN}),
        ]
        for row in rows:
            row.wording = "sluice checks client keys itself"
        return rows

    def test_keys(self):
        for row in self.rows():
            with self.subTest(row=row.name):
                straight = send(self.ls.port, row)
                through = send(self.sl.port, row)
                problems = compare(row, straight, through)
                if problems:
                    self.fail("%s %s (%s):\n  %s" % (
                        row.method, row.path, row.name,
                        "\n  ".join(problems)))


if __name__ == "__main__":
    st.main()

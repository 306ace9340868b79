"""Every llama-server endpoint through sluice: aliases and the Anthropic,
Responses, rerank, tokenize and admin endpoints answer as llama-server
does; the cheap ones skip the queue; query strings and upstream response
headers pass; /props and /slots answer per upstream; --ui relays the web
UI."""

import glob
import gzip
import hashlib
import http.server
import json
import os
import re
import shutil
import struct
import subprocess
import threading
import time
import zlib

import sluice_test as st

# Fields that differ between two runs of the same request.
VOLATILE = {"id", "created", "created_at", "completed_at", "timings",
            "system_fingerprint", "id_slot", "id_task", "cache_read_input_tokens",
            "cached_tokens", "input_tokens_details", "tokens_cached"}


# In a usage object: how much of the prompt was in llama-server's cache.
CACHE_DEPENDENT = {"input_tokens", "prompt_tokens", "total_tokens"}


def stable(doc, parent=None):
    """doc without its volatile fields, at any depth (and, in usage, the
    counts that depend on what the prompt cache held)."""
    if isinstance(doc, dict):
        return {k: stable(v, k) for k, v in doc.items()
                if k not in VOLATILE and k != "item_id"
                and not (parent == "usage" and k in CACHE_DEPENDENT)}
    if isinstance(doc, (list, tuple)):
        return [stable(v) for v in doc]
    return doc


def shape(doc):
    """doc with every number replaced by its type: llama-server's native
    embeddings (one vector per token, no pooling) differ from run to run
    on the demo model, their shape does not."""
    if isinstance(doc, dict):
        return {k: shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [shape(v) for v in doc]
    if isinstance(doc, float) or doc is None:
        return "number"
    return doc


def chat(prompt, n=6, **extra):
    return {"messages": [{"role": "user", "content": prompt}],
            "max_tokens": n, "temperature": 0, "seed": 7, **extra}


# sluice's admin key in these tests.
ADMIN = "endpoints-admin-key"

# (method, path, body): answered the same straight and through sluice.
SAME_ANSWER = [
    ("GET", "/models", None),
    ("GET", "/v1/models", None),
    ("GET", "/lora-adapters", None),
    ("GET", "/tools", None),
    ("GET", "/cors-proxy", None),
    ("POST", "/tokenize", {"content": "hello world"}),
    ("POST", "/tokenize", "not json"),
    ("POST", "/detokenize", {"tokens": [300, 301, 302]}),
    ("POST", "/apply-template", chat("hi")),
    ("POST", "/v1/messages/count_tokens", dict(chat("hi"), model="m")),
    ("POST", "/chat/completions/input_tokens", chat("hi")),
    ("POST", "/v1/chat/completions/input_tokens", chat("hi")),
    ("POST", "/embedding", {"content": "hello"}),
    ("POST", "/embeddings", {"content": "hello"}),
    ("POST", "/embeddings", {"input": "hello"}),
    ("POST", "/v1/embeddings", {"input": "hello"}),
    ("POST", "/rerank", {"query": "a", "documents": ["b", "c d"]}),
    ("POST", "/v1/rerank", {"query": "a", "documents": ["b", "c d"]}),
    ("POST", "/reranking", {"query": "a", "documents": ["b", "c d"]}),
    ("POST", "/v1/reranking", {"query": "a", "documents": ["b", "c d"]}),
    ("POST", "/infill", {"input_prefix": "a", "input_suffix": "b",
                         "n_predict": 3}),
    ("POST", "/completions", {"prompt": "Once", "n_predict": 6,
                              "temperature": 0, "seed": 7}),
    ("POST", "/v1/messages", dict(chat("Hello there"), model="m")),
    ("POST", "/v1/responses", {"model": "m", "input": "Hello there",
                               "max_output_tokens": 6, "temperature": 0}),
    ("POST", "/props", {}),
    ("POST", "/slots/0?action=erase", {}),
    ("POST", "/lora-adapters", []),
]


def sse_events(body):
    """[(event name or None, data as JSON or str)] of an SSE body."""
    out = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        joined = "\n".join(data)
        try:
            out.append((name, json.loads(joined)))
        except ValueError:
            out.append((name, joined))
    return out


def metric(port, name):
    """The sum of a metric's samples in sluice's /metrics (0 when none)."""
    text = st.request(port, "GET", "/metrics", headers={
        "Authorization": "Bearer " + ADMIN}).body.decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"%s(\{[^}]*\})? (\S+)$" % re.escape(name), line)
        if m:
            total += float(m.group(2))
    return total


class RealEndpoints(st.RelayTestCase):
    """One llama-server with embeddings and reranking on, sluice in front."""

    slots = 2

    @classmethod
    def setUpClass(cls):
        cls.ls = st.LlamaServer(st.MODEL_TINY, slots=cls.slots, ctx=2048,
                                extra=("--embeddings", "--reranking"))
        cls.sl = st.Sluice("--upstream", cls.ls.url, "--admin-key", ADMIN)

    def both(self, method, path, body):
        direct = st.request(self.ls.port, method, path, body=body)
        # The admin key opens the admin actions (and works as a client
        # key): their answers are llama-server's once allowed.
        relayed = st.request(self.sl.port, method, path, body=body,
                             headers={"Authorization": "Bearer " + ADMIN})
        return direct, relayed

    def test_every_endpoint_answers_as_llama_server(self):
        for method, path, body in SAME_ANSWER:
            with self.subTest(method=method, path=path, body=body):
                direct, relayed = self.both(method, path, body)
                self.assertEqual(relayed.status, direct.status,
                                 relayed.body[:300])
                self.assertEqual(relayed.header("Content-Type"),
                                 direct.header("Content-Type"))
                self.assertNotEqual(relayed.status, 404, relayed.body)
                # The demo model's embeddings are noise whose zeros
                # change sign from run to run: their shape is compared.
                same = shape if "embedding" in path else stable
                self.assertEqual(same(relayed.json()), same(direct.json()))

    def test_chat_alias_answers_as_v1(self):
        # An OpenAI client whose base URL lacks /v1 posts here.
        for stream in (False, True):
            with self.subTest(stream=stream):
                body = chat("Tell me", 8, stream=stream)
                direct = self.ls.post("/v1/chat/completions", body)
                relayed = self.sl.post("/chat/completions", body)
                self.assertEqual(relayed.status, 200, relayed.body)
                if not stream:
                    self.assertEqual(
                        relayed.json()["choices"][0]["message"]["content"],
                        direct.json()["choices"][0]["message"]["content"])
                    continue
                def text(r):
                    return "".join(
                        (d["choices"][0]["delta"].get("content") or "")
                        for _, d in sse_events(r.body)
                        if isinstance(d, dict) and d.get("choices"))
                self.assertEqual(text(relayed), text(direct))
                self.assertEqual(sse_events(relayed.body)[-1],
                                 (None, "[DONE]"))

    def test_messages_stream_relayed_event_by_event(self):
        body = dict(chat("Hello there", 7, stream=True), model="m")
        direct = self.ls.post("/v1/messages", body)
        c = st.RawClient(self.sl.port)
        c.request("POST", "/v1/messages", body)
        status, headers = c.read_head()
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/event-stream")
        chunks = [data for _, data in c.chunks()]
        c.close()
        # Whole events in each chunk (those of one upstream read share
        # one), "event: NAME\ndata: JSON\n\n" as sent.
        for chunk in chunks:
            self.assertRegex(chunk.decode(),
                             r"^(event: [a-z_]+\ndata: \{.*\}\n\n)+$")
        relayed = sse_events(b"".join(chunks))
        want = sse_events(direct.body)
        self.assertEqual([n for n, _ in relayed], [n for n, _ in want])
        self.assertEqual(stable(relayed), stable(want))
        self.assertEqual(relayed[-1][0], "message_stop")

    def test_responses_stream_ends_with_the_transfer(self):
        body = {"model": "m", "input": "Hello there", "stream": True,
                "max_output_tokens": 5, "temperature": 0}
        direct = self.ls.post("/v1/responses", body)
        relayed = self.sl.post("/v1/responses", body)
        self.assertEqual(relayed.status, 200)
        got, want = sse_events(relayed.body), sse_events(direct.body)
        self.assertEqual(stable(got), stable(want))
        self.assertEqual(got[-1][0], "response.completed")

    def test_messages_tokens_are_counted(self):
        before = metric(self.sl.port, "sluice_generated_tokens_total")
        ttft = metric(self.sl.port,
                      "sluice_time_to_first_token_seconds_count")
        r = self.sl.post("/v1/messages",
                         dict(chat("Count me", 5, stream=True), model="m"))
        self.assertEqual(r.status, 200)
        self.assertEqual(
            metric(self.sl.port, "sluice_generated_tokens_total") - before, 5)
        self.assertEqual(metric(
            self.sl.port, "sluice_time_to_first_token_seconds_count") - ttft,
            1)

    def test_props_and_slots_with_one_upstream_are_relayed_as_is(self):
        direct, relayed = self.both("GET", "/props", None)
        self.assertEqual(relayed.status, 200)
        self.assertEqual(relayed.json(), direct.json())
        slots = self.sl.get("/slots").json()
        self.assertEqual([s["id"] for s in slots], list(range(self.slots)))

    def test_v1_health_is_sluices_health(self):
        r = self.sl.get("/v1/health")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json().keys(), self.sl.health().json().keys())
        self.assertEqual(r.json()["upstreams"][0]["url"], self.ls.url)

    def test_unknown_path_and_wrong_method(self):
        r = self.sl.get("/no/such/thing")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json()["error"]["type"], "not_found_error")
        r = self.sl.get("/no/such/thing")
        self.assertEqual(r.json()["error"]["message"],
                         "no such endpoint: /no/such/thing")
        r = self.sl.get("/")  # no --ui: no page, and a word on how
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json()["error"]["message"],
                         "no such endpoint: /; llama-server's web UI is "
                         "relayed here only with --ui on, and the API is "
                         "under /v1/ (e.g. POST /v1/chat/completions)")
        r = self.sl.get("/tokenize")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("Allow"), "POST")


class Queueing(st.TestCase):
    """One slot, a long generation in it: what needs a slot waits in
    sluice's queue, the cheap endpoints do not."""

    def test_cheap_endpoints_do_not_wait_and_slot_users_queue(self):
        ls = self.llama_server(st.MODEL_TINY, slots=1, ctx=16384,
                               extra=("--embeddings", "--reranking"))
        s = self.sluice("--upstream", ls.url, "--max-queue", "8",
                        "--queue-timeout", "120")
        busy = st.RawClient(s.port)
        # n_probs makes each event ~4 KB, so the unread stream fills the
        # socket buffers and holds the slot until this client reads.
        busy.request("POST", "/completion",
                     {"prompt": "x", "n_predict": 12000, "stream": True,
                      "n_probs": 50})
        busy.read_head()
        st.wait_until(lambda: s.health().json()["inflight"] == 1, 30,
                      "the generation to hold the slot")
        waits_before = metric(s.port, "sluice_queue_wait_seconds_count")
        results = {}

        def post(path, body):
            results[path] = st.request(s.port, "POST", path, body=body,
                                       timeout=120)

        queued = [("/v1/messages", dict(chat("hi", 3), model="m")),
                  ("/v1/responses", {"model": "m", "input": "hi",
                                     "max_output_tokens": 3}),
                  ("/v1/rerank", {"query": "a", "documents": ["b"]}),
                  ("/embedding", {"content": "hi"}),
                  ("/embeddings", {"content": "hi"}),
                  ("/chat/completions", chat("hi", 3))]
        threads = [threading.Thread(target=post, args=q) for q in queued]
        for t in threads:
            t.start()
        st.wait_until(lambda: s.health().json()["queued"] == len(queued),
                      30, "every slot user to be queued")
        # Straight through, while the queue holds the others.
        for path, body in [("/tokenize", {"content": "hello"}),
                           ("/detokenize", {"tokens": [300]}),
                           ("/apply-template", chat("hi")),
                           ("/v1/messages/count_tokens",
                            dict(chat("hi"), model="m"))]:
            r = st.request(s.port, "POST", path, body=body, timeout=10)
            self.assertEqual(r.status, 200, (path, r.body))
            self.assertEqual(r.json(), ls.post(path, body).json())
        for path in ("/props", "/slots", "/v1/models", "/models",
                     "/lora-adapters"):
            self.assertEqual(s.get(path, timeout=10).status, 200, path)
        self.assertEqual(s.health().json()["queued"], len(queued))
        busy.close()  # frees the slot: the queue drains
        for t in threads:
            t.join(120)
        for path, _ in queued:
            self.assertEqual(results[path].status, 200,
                             (path, results[path].body))
            self.assertIsNotNone(results[path].header("X-Queue-Ms"), path)
        self.assertEqual(
            metric(s.port, "sluice_queue_wait_seconds_count") - waits_before,
            len(queued))


class Cancellation(st.TestCase):

    def test_leaving_a_messages_stream_frees_the_slot(self):
        ls = self.llama_server(st.MODEL_TINY, slots=1, ctx=16384)
        s = self.sluice("--upstream", ls.url)
        c = st.RawClient(s.port)
        c.request("POST", "/v1/messages",
                  dict(chat("go on", 12000, stream=True), model="m"))
        self.assertEqual(c.read_head()[0], 200)
        for _, chunk in c.chunks():
            if b"content_block_delta" in chunk:
                break
        c.close()
        end = s.wait_line(r"path=/v1/messages status=200 .*outcome=(\w+)",
                          60)
        self.assertEqual(end.group(1), "cancelled", s.output())

        def slot():
            return st.request(ls.port, "GET", "/slots").json()[0]
        st.wait_until(lambda: not slot()["is_processing"], 60,
                      "the slot to go idle")
        # Stopped early, not run to its 12000 tokens.
        self.assertLess(slot()["next_token"][0]["n_decoded"], 12000)


class HoldingUpstream(http.server.ThreadingHTTPServer):
    """A stand-in llama-server whose GET /models/sse sends one event and
    then holds the answer open until stop(), as a router does between
    model events; one slot; every other path answers {"ok":true}."""

    daemon_threads = True

    def __init__(self):
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), _HoldingHandler)
        self.url = "http://127.0.0.1:%d" % self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def handle_error(self, request, client_address):
        pass  # a watch's connection closed by sluice is no error

    def stop(self):
        self.release.set()
        self.shutdown()
        self.server_close()


class _HoldingHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.path != "/models/sse":
            body = (b'{"total_slots":1}' if self.path == "/props"
                    else b'{"ok":true}')
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        event = b'data: {"event":"hello"}\n\n'
        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.flush()
        self.server.release.wait(120)
        self.close_connection = True

    do_POST = do_GET


class Relaying(st.TestCase):

    def test_watches_are_bounded_and_take_no_ones_connection(self):
        up = HoldingUpstream()
        self.addCleanup(up.stop)
        s = self.sluice("--upstream", up.url, "--upstream-timeout", "1",
                        "--upstream-idle-timeout", "1", "--queue-timeout",
                        "3")
        watches = []
        for _ in range(4):
            c = st.RawClient(s.port)
            c.request("GET", "/models/sse")
            self.assertEqual(c.read_head()[0], 200)
            self.assertEqual(next(c.chunks())[1],
                             b'data: {"event":"hello"}\n\n')
            watches.append(c)
        # Four watches hold four connections to a one-slot upstream, and
        # still a request gets one of its own.
        self.assertEqual(s.post("/tokenize", {"content": "x"},
                                timeout=10).status, 200)
        # Nor do they take its slot: a generation goes to it, not waiting
        # out --queue-timeout for a slot.
        r = s.post("/completion", {"prompt": "x"}, timeout=10)
        self.assertEqual(r.status, 200, r.body)
        r = s.get("/models/sse", timeout=10)
        self.assertEqual(r.status, 503)
        self.assertEqual(r.header("Retry-After"), "1")
        self.assertIn("4 watches", r.json()["error"]["message"])
        # A watch whose client left makes room (and is not read on).
        watches.pop().close()

        def another():
            c = st.RawClient(s.port)
            c.request("GET", "/models/sse")
            if c.read_head()[0] == 200:
                return c
            c.read_response()
            c.close()
            return None
        watches.append(st.wait_until(another, 30, "room for a watch"))
        # Silent for longer than --upstream-timeout and
        # --upstream-idle-timeout: a watch has neither. (Time itself is
        # what is waited for.)
        time.sleep(2.5)
        self.assertEqual(s.count_lines(r"no answer within|silent for"), 0)
        # Draining ends them at once: sluice exits long before
        # --drain-timeout (30 s), each watch's answer ended properly.
        self.assertEqual(s.stop(), 0)
        hello = b'data: {"event":"hello"}\n\n'
        for c in watches:
            # To the last chunk: what was relayed, then the end.
            rest = b"".join(d for _, d in c.chunks())
            self.assertIn(rest, (b"", hello))
            c.close()

    def test_query_strings_reach_the_upstream(self):
        rec = self.recording_upstream()
        s = self.sluice("--upstream", rec.url, "--admin-key", ADMIN)
        admin = {"Authorization": "Bearer " + ADMIN}
        self.assertEqual(s.get("/v1/models?reload=1").status, 200)
        self.assertEqual(s.get("/models?a=1&b=%20x").status, 200)
        r = s.post("/slots/0?action=erase", {"x": 1}, headers=admin)
        self.assertEqual(r.status, 200)
        self.assertEqual(
            s.post("/slots/12?action=restore", {}, headers=admin).status,
            200)
        self.assertEqual(
            s.get("/slots?fail_on_no_slot=1&upstream=%s" % rec.url).status,
            200)
        self.assertEqual(rec.targets("/v1/models"), ["/v1/models?reload=1"])
        self.assertEqual(rec.targets("/models"), ["/models?a=1&b=%20x"])
        self.assertEqual(rec.targets("/slots"),
                         ["/slots/0?action=erase", "/slots/12?action=restore",
                          "/slots?fail_on_no_slot=1"])
        # A body sluice need not read goes as the client wrote it.
        self.assertEqual(rec.seen[2].body, b'{"x": 1}')
        self.assertEqual(s.stop(), 0)  # and nothing leaked

    def test_answers_without_content_have_no_framing(self):
        # RFC 9110, 6.4.1: a 204 or 304 ends with its head. sluice relays
        # them with their reason phrases and with neither Content-Length
        # nor chunked framing, whatever the upstream sent (llama-server's
        # DELETE /v1/stream says "Content-Length: 0"; another may say
        # nothing, or give a 304 the length of what it stands for).
        def answer(got):
            query = got.target.partition("?")[2].split("&")[-1]
            if query == "n=204":
                return 204, "application/json", None
            if query == "n=204-0":
                return 204, "application/json", None, [
                    ("Content-Length", "0")]
            if query == "n=304":
                return 304, "application/json", None, [("ETag", '"e1"')]
            if query == "n=304-42":
                return 304, "application/json", None, [
                    ("Content-Length", "42")]
            return 200, "application/json", b'{"ok":true}'
        rec = self.recording_upstream(answer=answer)
        # Both ways to an upstream: sluice's own client and libcurl.
        for client in ("native", "curl"):
            with self.subTest(client=client):
                self.check_no_framing(rec, client)

    def check_no_framing(self, rec, client):
        s = self.sluice("--upstream", rec.url, "--upstream-client", client)
        c = st.RawClient(s.port)
        for query, line in (("n=204", "HTTP/1.1 204 No Content"),
                            ("n=204-0", "HTTP/1.1 204 No Content"),
                            ("n=304", "HTTP/1.1 304 Not Modified"),
                            ("n=304-42", "HTTP/1.1 304 Not Modified")):
            with self.subTest(query=query):
                # On one connection: a stray byte after a head would
                # spoil the next answer.
                c.request("GET", "/v1/models?" + query)
                status, head = c.read_head()
                self.assertEqual(c.status_line, line)
                self.assertNotIn("content-length", head)
                self.assertNotIn("transfer-encoding", head)
                self.assertEqual(head["connection"], "keep-alive")
                if query == "n=304":
                    self.assertEqual(head["etag"], '"e1"')
                c.request("GET", "/v1/models")
                self.assertEqual(c.read_response()[::2],
                                 (200, b'{"ok":true}'))
                self.assertEqual(c.buf, b"")
        # DELETE /v1/stream: llama-server's own 204, relayed as DELETE.
        c.request("DELETE", "/v1/stream?conv_id=c1&n=204-0")
        self.assertEqual(c.read_head()[0], 204)
        self.assertEqual(c.status_line, "HTTP/1.1 204 No Content")
        c.request("GET", "/v1/models")
        self.assertEqual(c.read_response()[0], 200)
        c.close()
        self.assertEqual([(r.method, r.target) for r in rec.received()
                          if r.target.startswith("/v1/stream")][-1],
                         ("DELETE", "/v1/stream?conv_id=c1&n=204-0"))
        self.assertEqual(s.stop(), 0)

    def test_the_headers_llama_server_reads_go_upstream(self):
        # The client's headers stay with sluice, but for those llama-server
        # reads on the endpoint: /cors-proxy's X-Llama-Server-Proxy-Header-*
        # (sent to its target without the prefix), POST /tools' X-Tool-*,
        # and a stream's X-Conversation-Id (kept for GET /v1/stream). A
        # form goes with its own Content-Type (and its boundary).
        rec = self.recording_upstream(answer=st.models_or_completion)
        s = self.sluice("--upstream", rec.url, "--admin-key", ADMIN)
        admin = {"Authorization": "Bearer " + ADMIN}
        # TE (a stream's trailers, hop-by-hop) is sluice's alone too.
        mine = {"Cookie": "session=secret", "X-Custom": "mine",
                "X-Conversation-Id": "c1", "X-Tool-Cwd": "/tmp",
                "TE": "trailers"}
        target = "/cors-proxy?url=http://127.0.0.1:1/x"
        r = s.get(target, headers=dict(
            admin, **mine, **{
                "X-Llama-Server-Proxy-Header-Accept": "application/json",
                "x-llama-server-proxy-header-authorization": "Bearer t",
                "X-Llama-Server-Proxy-Header-": "a bare prefix"}))
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(s.post("/tools", {"tool": "get_info"}, headers=dict(
            admin, **mine, **{"X-Tool-Runtime": "none",
                              "X-Resp-Type": "json"})).status, 200)
        for stream in (True, False):
            self.assertEqual(s.post("/v1/completions", {
                "prompt": "x", "stream": stream}, headers=mine).status, 200)
        form_type = "multipart/form-data; boundary=b0"
        form = (b"--b0\r\nContent-Disposition: form-data; name=\"model\""
                b"\r\n\r\nw\r\n--b0--\r\n")
        r = st.request(s.port, "POST", "/v1/audio/transcriptions",
                       body=form, headers={"Content-Type": form_type})
        self.assertEqual(r.status, 200, r.body)
        self.assertIsNotNone(r.header("X-Queue-Ms"))  # it took a slot
        proxied, tools, streamed, plain, audio = rec.received()

        def passed(got):
            own = {"host", "content-type", "content-length", "x-request-id",
                   "user-agent", "accept", "connection"}
            return sorted((k.lower(), v) for k, v in got.headers.items()
                          if k.lower() not in own)

        self.assertEqual(proxied.target, target)
        self.assertEqual(passed(proxied), [
            ("x-llama-server-proxy-header-accept", "application/json"),
            ("x-llama-server-proxy-header-authorization", "Bearer t")])
        self.assertEqual(passed(tools), [
            ("x-resp-type", "json"), ("x-tool-cwd", "/tmp"),
            ("x-tool-runtime", "none")])
        self.assertEqual(passed(streamed), [("x-conversation-id", "c1")])
        self.assertEqual(passed(plain), [])
        self.assertEqual((audio.target, audio.body), (
            "/v1/audio/transcriptions", form))
        self.assertEqual(audio.headers["Content-Type"], form_type)
        self.assertEqual(tools.headers["Content-Type"], "application/json")
        self.assertEqual(s.stop(), 0)

    def test_typed_stream_cut_short_ends_with_a_typed_error(self):
        events = (b'event: message_start\ndata: {"type":"message_start"}\n\n'
                  b'event: content_block_delta\ndata: {"type":'
                  b'"content_block_delta","delta":{"text":"a"}}\n\n')
        rec = self.recording_upstream(
            body=events, content_type="text/event-stream", cut=True)
        s = self.sluice("--upstream", rec.url)
        r = s.post("/v1/messages", {"messages": [], "stream": True})
        self.assertEqual(r.status, 200)
        got = sse_events(r.body)
        self.assertEqual(got[:2], sse_events(events))
        name, data = got[2]
        self.assertEqual(name, "error")
        self.assertEqual(data["type"], "error")
        self.assertEqual(data["error"]["type"], "server_error")
        self.assertEqual(len(got), 3)
        self.assertEqual(s.stop(), 0)

    def test_upstream_headers_pass_except_hop_by_hop_and_sluices_own(self):
        long_value = "v" * 5000
        rec = self.recording_upstream(extra_headers=[
            ("X-Custom", "kept"),
            ("Set-Cookie", "a=b; Path=/"),
            ("ETag", 'W/"123"'),
            ("Connection", "X-Hop"),
            ("X-Hop", "named in Connection"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Authenticate", "Basic"),
            ("Upgrade", "h2c"),
            ("TE", "trailers"),
            ("Access-Control-Allow-Origin", "https://evil.example"),
            ("X-Request-Id", "upstreams-own"),
            ("X-Queue-Ms", "999999"),
            ("X-Bad", "a\x01b"),
            ("X-Long", long_value),
        ])
        s = self.sluice("--upstream", rec.url)
        r = s.post("/tokenize", {"content": "x"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b'{"ok":true}')
        names = [k.lower() for k, _ in r.headers]
        self.assertEqual(r.header("X-Custom"), "kept")
        self.assertEqual(r.header("Set-Cookie"), "a=b; Path=/")
        self.assertEqual(r.header("ETag"), 'W/"123"')
        for gone in ("x-hop", "keep-alive", "proxy-authenticate", "upgrade",
                     "te", "x-queue-ms", "x-bad", "x-long"):
            self.assertNotIn(gone, names)
        # CORS is sluice's: its own answer (the default, *), not the
        # upstream's.
        self.assertEqual(r.headers_named("Access-Control-Allow-Origin"),
                         ["*"])
        self.assertNotEqual(r.header("X-Request-Id"), "upstreams-own")
        self.assertTrue(r.header("Server").startswith("sluice"))
        for once in ("server", "date", "content-type", "content-length",
                     "x-request-id", "connection"):
            self.assertEqual(names.count(once), 1, (once, r.headers))
        self.assertEqual(s.stop(), 0)

    def test_sluices_own_headers_never_come_twice(self):
        # Every name sluice writes on some answer of its own, sent by the
        # upstream in another case than sluice writes it: none of the
        # upstream's reaches the client, beside sluice's or instead of it.
        own = ["X-PRIORITY", "x-queue-ms", "x-batch-size", "SERVER-TIMING",
               "retry-after", "Retry-After-Ms", "X-Request-ID",
               "X-RateLimit-Limit-Requests", "X-RATELIMIT-REMAINING-REQUESTS",
               "x-ratelimit-reset-requests", "X-RateLimit-Limit-Tokens",
               "x-ratelimit-remaining-tokens", "X-Ratelimit-Reset-Tokens",
               "Access-Control-Allow-Origin", "server", "DATE"]
        rec = self.recording_upstream(
            answer=st.models_or_completion,
            extra_headers=[(name, "upstream's") for name in own] +
            [("X-Custom", "kept")])
        config = os.path.join(self.tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write("keys:\n  k:\n    hash: sha256:%s\n    rpm: 10\n"
                    "    tpm: 10000\n"
                    % hashlib.sha256(b"sk-k").hexdigest())
        s = self.sluice("--config", config, "--upstream", rec.url)
        r = s.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                   headers={"Authorization": "Bearer sk-k",
                            "X-Priority": "batch"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("X-Custom"), "kept")
        for name in own:
            self.assertNotIn("upstream's", r.headers_named(name),
                             (name, r.headers))
        # What sluice writes on this answer, once.
        for name in own:
            if name.lower() not in ("retry-after", "retry-after-ms"):
                self.assertEqual(len(r.headers_named(name)), 1,
                                 (name, r.headers))
        self.assertEqual(r.header("X-Priority"), "batch")
        self.assertEqual(r.header("x-ratelimit-limit-requests"), "10")
        self.assertEqual(r.header("x-ratelimit-limit-tokens"), "10000")
        self.assertEqual(s.stop(), 0)

    def test_an_overlong_connection_list_passes_nothing(self):
        # sluice cannot know every name such a list makes hop-by-hop, so it
        # passes none of the upstream's extra headers.
        names = ["X-Hop-%03d" % i for i in range(40)]
        rec = self.recording_upstream(extra_headers=[
            ("X-Custom", "kept"),
            ("Connection", ", ".join(names)),
            ("X-Hop-039", "listed last")])
        s = self.sluice("--upstream", rec.url)
        r = s.post("/tokenize", {"content": "x"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b'{"ok":true}')
        self.assertIsNone(r.header("X-Hop-039"))
        self.assertIsNone(r.header("X-Custom"))
        self.assertTrue(r.header("Server").startswith("sluice"))
        self.assertEqual(s.stop(), 0)

    def test_too_many_upstream_headers_are_cut_not_refused(self):
        many = [("X-Many-%03d" % i, "x" * 100) for i in range(200)]
        rec = self.recording_upstream(extra_headers=many)
        s = self.sluice("--upstream", rec.url)
        r = s.post("/tokenize", {"content": "x"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b'{"ok":true}')
        kept = [k for k, _ in r.headers if k.startswith("X-Many-")]
        # In order, from the first, up to sluice's bound (8 KiB).
        self.assertEqual(kept, ["X-Many-%03d" % i for i in range(len(kept))])
        self.assertGreater(len(kept), 40)
        self.assertLess(len(kept), 200)

    def test_ui_assets_relayed_with_their_encoding(self):
        page = b"<html>" + b"x" * 2000 + b"</html>"
        zipped = gzip.compress(page)
        rec = self.recording_upstream(
            body=zipped, content_type="text/html",
            extra_headers=[("Content-Encoding", "gzip"),
                           ("Vary", "Accept-Encoding")])
        plain = self.sluice("--upstream", rec.url)
        self.assertEqual(plain.get("/").status, 404)
        self.assertEqual(plain.get("/assets/app.js").status, 404)
        self.assertEqual(rec.targets("/"), [])
        s = self.sluice("--upstream", rec.url, "--ui", "on")
        r = s.get("/assets/app.js?v=3",
                  headers={"Accept-Encoding": "gzip, br"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, zipped)
        self.assertEqual(r.header("Content-Encoding"), "gzip")
        # The upstream's Vary, beside sluice's own (CORS depends on Origin).
        self.assertEqual(r.headers_named("Vary"), ["Origin", "Accept-Encoding"])
        self.assertEqual(rec.targets("/assets"), ["/assets/app.js?v=3"])
        self.assertEqual(rec.seen[-1].headers.get("Accept-Encoding"), "gzip, br")
        self.assertEqual(s.get("/").status, 200)
        self.assertEqual(rec.targets("/"), ["/assets/app.js?v=3", "/"])
        # Only GET (and HEAD): the UI takes no other method.
        self.assertEqual(s.post("/assets/app.js", {}).status, 404)
        # Nothing that could fold into another endpoint upstream.
        for sneaky in ("/cors%2Dproxy", "/a/../cors-proxy", "/./props",
                       "/a/..", "/x%2F..%2Fslots", "/cors-proxy;x",
                       "/metrics,", "/a\\..\\cors-proxy"):
            self.assertEqual(s.get(sneaky).status, 404, sneaky)
        # A fragment is no part of a request target: refused before any
        # route (libcurl would drop it, making /cors-proxy upstream).
        for sneaky in ("/cors-proxy#x", "/metrics#"):
            self.assertEqual(s.get(sneaky).status, 400, sneaky)
        self.assertEqual(rec.targets("/"), ["/assets/app.js?v=3", "/"])
        self.assertEqual(s.stop(), 0)


class SeveralUpstreams(st.TestCase):

    def test_props_and_slots_answer_per_upstream(self):
        a = self.llama_server(st.MODEL_TINY, slots=1, ctx=1024)
        b = self.llama_server(st.MODEL_TINY, slots=3, ctx=512)
        s = self.sluice("--upstream", a.url, "--upstream", b.url)
        s.wait_all_upstreams_ready(30)
        names = [u["name"] for u in s.health().json()["upstreams"]]
        self.assertEqual(names, [a.url, b.url])
        for path in ("/props", "/slots"):
            with self.subTest(path=path):
                r = s.get(path)
                self.assertEqual(r.status, 200, r.body)
                got = r.json()
                self.assertEqual([g["upstream"] for g in got], names)
                self.assertEqual([g["status"] for g in got], [200, 200])
                direct = [st.request(u.port, "GET", path).json()
                          for u in (a, b)]
                if path == "/props":
                    self.assertEqual([g["body"] for g in got], direct)
                else:
                    self.assertEqual([[x["n_ctx"] for x in g["body"]]
                                      for g in got],
                                     [[1024], [512] * 3])
                # One upstream's own answer, unchanged.
                one = s.get("%s?upstream=%s" % (path, b.url))
                self.assertEqual(one.status, 200)
                if path == "/props":
                    self.assertEqual(one.body,
                                     st.request(b.port, "GET", path).body)
                else:
                    self.assertEqual(len(one.json()), 3)
                r = s.get("%s?upstream=http://nowhere" % path)
                self.assertEqual(r.status, 404)
                self.assertEqual(r.json()["error"]["type"], "not_found_error")
                # The name and value read as llama-server reads a query:
                # percent-decoded ("%75" is "u"), the last one counting.
                for query in ("%%75pstream=%s" % b.url.replace(":", "%3A"),
                              "upstream=%s&upstre%%61m=%s" % (a.url, b.url)):
                    one = s.get("%s?%s" % (path, query))
                    self.assertEqual(one.status, 200, (query, one.body))
                    if path == "/props":
                        self.assertEqual(one.body, st.request(
                            b.port, "GET", path).body, query)
                    else:
                        self.assertEqual(len(one.json()), 3, query)
                r = s.get(path + "?upstream=" + a.url + "%00")
                self.assertEqual(r.status, 400)
                self.assertIn("NUL", r.json()["error"]["message"])
        self.assertEqual(s.stop(), 0)

    def test_an_upstream_that_does_not_answer_is_reported(self):
        a = self.llama_server(st.MODEL_TINY, slots=1, ctx=1024)
        b = self.llama_server(st.MODEL_TINY, slots=1, ctx=1024)
        s = self.sluice("--upstream", a.url, "--upstream", b.url)
        s.wait_all_upstreams_ready(30)
        b.kill()
        got = s.get("/props").json()
        self.assertEqual([g["status"] for g in got], [200, 502])
        self.assertEqual(got[1]["body"]["error"]["type"], "server_error")
        # A request for the dead one is answered as failed, at once: it
        # neither waits in the queue nor goes to the other upstream.
        r = s.get("/props?upstream=%s" % b.url)
        self.assertIn(r.status, (502, 503), r.body)
        self.assertIsNone(r.header("X-Queue-Ms"))
        a.kill()
        r = s.get("/props")
        self.assertEqual(r.status, 502)
        self.assertEqual([g["status"] for g in r.json()], [502, 502])
        self.assertEqual(s.stop(), 0)

    def test_a_state_change_names_its_upstream(self):
        a = self.llama_server(st.MODEL_TINY, slots=1, ctx=1024)
        b = self.llama_server(st.MODEL_TINY, slots=1, ctx=1024)
        s = self.sluice("--upstream", a.url, "--upstream", b.url,
                        "--admin-key", ADMIN)
        s.wait_all_upstreams_ready(30)
        admin = {"Authorization": "Bearer " + ADMIN}
        for path in ("/props", "/slots/0?action=erase"):
            with self.subTest(path=path):
                r = s.post(path, {}, headers=admin)
                self.assertEqual(r.status, 400, r.body)
                self.assertIn("?upstream=NAME", r.json()["error"]["message"])
                sep = "&" if "?" in path else "?"
                one = s.post("%s%supstream=%s" % (path, sep, b.url), {},
                             headers=admin)
                direct = st.request(b.port, "POST", path, body={})
                self.assertEqual(one.status, direct.status, one.body)
                self.assertEqual(one.json(), direct.json())
        self.assertEqual(s.stop(), 0)


def simplechat_dir():
    """Debian's legacy web UI next to the provisioned llama-server, or
    None. The Debian build serves only what its package installed under
    /usr/share; the provisioned wrapper names that folder (as
    LLAMA_ARG_STATIC_PATH), so `--ui on` needs nothing more."""
    server = os.path.realpath(st.llama_server_path())
    roots = [os.path.join(os.path.dirname(server), "..", "prefix")]
    roots += [os.path.join(os.path.dirname(server), "..")]
    for root in roots:
        for d in glob.glob(os.path.join(
                root, "usr/share/llama.cpp/llama-server/*ui*")):
            if os.path.exists(os.path.join(d, "index.html")):
                return os.path.realpath(d)
    return None


def png_colours(path):
    """The distinct colours of an 8-bit RGB(A) PNG."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    bpp = 4 if ctype == 6 else 3
    stride = width * bpp
    prev = bytearray(stride)
    colours = set()
    i = 0
    for _ in range(height):
        f = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[x] = (line[x] + pr) & 255
        for x in range(0, stride, bpp):
            colours.add(bytes(line[x:x + 3]))
        prev = line
    return colours


class WebUI(st.TestCase):

    def test_a_person_can_chat_through_the_ui(self):
        ui = simplechat_dir()
        browser = shutil.which("chromium")
        self.assertTrue(ui and browser, "needs chromium (deploy/setup.sh "
                        "--tests installs it) and llama-server's web UI")
        s = self.sluice("--model", st.MODEL_TINY, "--ui", "on")
        b = st.DevTools(browser, os.path.join(self.tmp, "profile"))
        self.addCleanup(b.close)
        b.open("http://127.0.0.1:%d/" % s.port)
        st.wait_until(lambda: b.eval(
            "document.readyState == 'complete' && "
            "!!document.gMe"), 60, "the page and its scripts")
        # Debian's SimpleChat asks port 8080 of the page's host; a person
        # sets the base URL in its settings, here to sluice's.
        b.eval("document.gMe.baseURL = window.location.origin; true")
        b.eval("document.getElementById('user-in').value = 'Hello';"
               "document.getElementById('user-btn').click(); true")
        answer = st.wait_until(lambda: b.eval(
            "[...document.querySelectorAll('.role-assistant')]"
            ".map(e => e.textContent).join('')"), 60, "the model's answer")
        self.assertGreater(len(answer.strip()), 0)
        self.assertRegex(s.output(), r"path=/chat/completions status=200")

    def test_browser_loads_the_ui_through_sluice(self):
        ui = simplechat_dir()
        browser = shutil.which("chromium")
        self.assertTrue(ui and browser, "needs chromium (deploy/setup.sh "
                        "--tests installs it) and llama-server's web UI")
        s = self.sluice("--model", st.MODEL_TINY, "--ui", "on")
        r = s.get("/")
        self.assertEqual(r.status, 200)
        self.assertTrue(r.header("Content-Type").startswith("text/html"))
        with open(os.path.join(ui, "index.html"), "rb") as f:
            self.assertEqual(r.body, f.read())
        url = "http://127.0.0.1:%d/" % s.port
        profile = os.path.join(self.tmp, "profile")
        common = [browser, "--headless", "--no-sandbox", "--disable-gpu",
                  "--user-data-dir=" + profile, "--window-size=1200,800",
                  "--virtual-time-budget=5000"]
        dom = subprocess.run(common + ["--dump-dom", url],
                             capture_output=True, timeout=180, text=True)
        self.assertIn("SimpleChat", dom.stdout, dom.stderr[-2000:])
        self.assertRegex(dom.stdout, r"<(div|button|textarea)[^>]*>")
        # Written into the page by its scripts, which came through sluice.
        self.assertIn("apiRequestOptions", dom.stdout)
        shot = os.path.join(self.tmp, "ui.png")
        run = subprocess.run(common + ["--screenshot=" + shot, url],
                             capture_output=True, timeout=180, text=True)
        self.assertTrue(os.path.exists(shot), run.stderr[-2000:])
        self.assertGreater(len(png_colours(shot)), 8)
        # The page's scripts came through sluice too.
        self.assertRegex(s.output(), r"path=/simplechat\.js status=200")

    def test_without_ui_the_page_is_not_relayed(self):
        self.assertTrue(simplechat_dir(), "needs llama-server's web UI")
        s = self.sluice("--model", st.MODEL_TINY)
        self.assertEqual(s.get("/").status, 404)
        self.assertEqual(s.get("/simplechat.js").status, 404)


if __name__ == "__main__":
    st.main()

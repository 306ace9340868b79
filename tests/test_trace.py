"""OpenTelemetry traces (src/ops/README.md, Traces): spans exported to a
collector over OTLP/HTTP, checked against OpenTelemetry's own OTLP
definitions (tests/otlp/decode.js, the protobuf form) and the OTLP/JSON
mapping (the JSON form); the client's traceparent honoured and sluice's
sent upstream; sampling; a collector that is down or hangs; the flush at
shutdown; bad values refused at start.

The collector is a small HTTP server on loopback that keeps what it is
POSTed. The protobuf decoder needs node and tests/otlp's npm packages
(./deploy/setup.sh --tests installs them)."""

import http.server
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import unittest

import sluice_test as st

HERE = os.path.dirname(os.path.abspath(__file__))
DECODER = os.path.join(HERE, "otlp", "decode.js")
KEY = "trace-test-client-key-0123456789"
# How long a condition may take on a busy machine before a test gives up.
WAIT_S = 60
# Exports every 50 ms: the tests wait for spans, never for the schedule.
FAST = {"OTEL_BSP_SCHEDULE_DELAY": "50"}


class Collector(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP collector on a free loopback port: keeps each POST's
    path, headers and body, and answers `status`. With hang, each POST is
    held unanswered until release() (or stop())."""

    daemon_threads = True

    def __init__(self, status=200, hang=False):
        self.posts = []
        self.lock = threading.Lock()
        self.status = status
        self.held = threading.Event() if hang else None
        self.arrived = threading.Event()
        super().__init__(("127.0.0.1", 0), _CollectorHandler)
        self.url = "http://127.0.0.1:%d" % self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def handle_error(self, request, client_address):
        pass  # sluice giving up an export mid-way is no error here

    def bodies(self):
        with self.lock:
            return [p[2] for p in self.posts]

    def release(self):
        if self.held:
            self.held.set()

    def stop(self):
        self.release()
        self.shutdown()
        self.server_close()


class _CollectorHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        srv = self.server
        srv.arrived.set()
        if srv.held is not None:
            srv.held.wait(WAIT_S)
        with srv.lock:
            srv.posts.append((self.path, self.headers, body))
        self.send_response(srv.status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


def decode_protobuf(bodies):
    """Each body decoded by OpenTelemetry's definitions: a list of
    ExportTraceServiceRequest documents (ids as hex)."""
    if not bodies:
        return []
    node = shutil.which("node")
    modules = os.path.join(HERE, "otlp", "node_modules")
    if not node or not os.path.isdir(modules):
        raise AssertionError("node or tests/otlp/node_modules is missing: "
                             "run ./deploy/setup.sh --tests")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, b in enumerate(bodies):
            path = os.path.join(tmp, "%d.pb" % i)
            with open(path, "wb") as f:
                f.write(b)
            files.append(path)
        out = subprocess.run([node, DECODER, *files], capture_output=True,
                             text=True, timeout=WAIT_S)
    if out.returncode != 0:
        raise AssertionError("the OTLP decoder failed: " + out.stderr)
    return [json.loads(line) for line in out.stdout.splitlines()]


def spans_of(docs):
    return [s for d in docs for rs in d["resourceSpans"]
            for ss in rs["scopeSpans"] for s in ss.get("spans", [])]


def value_of(v):
    """An AnyValue as Python: intValue's string as an int."""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [value_of(x) for x in v["arrayValue"].get("values", [])]
    raise AssertionError("unexpected AnyValue %r" % v)


def attrs(obj):
    return {kv["key"]: value_of(kv["value"]) for kv in obj.get("attributes",
                                                             [])}


def metric(sl, name):
    text = sl.get("/metrics", headers={"Authorization": "Bearer " + KEY}).body
    m = re.search(r"^%s (\d+)$" % re.escape(name), text.decode(), re.M)
    return int(m.group(1)) if m else None


def new_parent(sampled=True):
    trace, span = secrets.token_hex(16), secrets.token_hex(8)
    return trace, span, "00-%s-%s-%s" % (trace, span, "01" if sampled
                                         else "00")


def otel_env(collector, **more):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url}
    env.update(FAST)
    env.update(more)
    return env


class SpanChecks:
    """The shape every traced request's spans have, checked exactly."""

    def wait_spans(self, decode, trace_id, n):
        """The spans of trace_id, once n of them have been exported."""
        def found():
            spans = [s for s in spans_of(decode())
                     if s["traceId"] == trace_id]
            return spans if len(spans) >= n else None
        spans = st.wait_until(found, WAIT_S, "%d spans of trace %s"
                              % (n, trace_id), interval=0.2)
        self.assertEqual(len(spans), n, spans)
        return spans

    def tree(self, spans, trace_id, parent_id):
        """(server, queue, upstream) of one request's three spans."""
        by_kind = {s["kind"]: s for s in spans}
        self.assertEqual(sorted(by_kind), [1, 2, 3], spans)
        server, queue, upstream = by_kind[2], by_kind[1], by_kind[3]
        # The request's span is a child of the client's, in its trace.
        self.assertEqual(server["traceId"], trace_id)
        self.assertEqual(server["parentSpanId"], parent_id)
        # Its parent is remote, and it is sampled (Span.flags).
        self.assertEqual(int(server["flags"]), 0x301)
        for child in (queue, upstream):
            self.assertEqual(child["traceId"], trace_id)
            self.assertEqual(child["parentSpanId"], server["spanId"])
            self.assertEqual(int(child["flags"]), 0x101)
        self.assertEqual(len({server["spanId"], queue["spanId"],
                              upstream["spanId"], parent_id}), 4)
        t = lambda s, k: int(s[k])
        # The children lie inside the request, the wait before the call.
        self.assertLessEqual(t(server, "startTimeUnixNano"),
                             t(queue, "startTimeUnixNano"))
        self.assertLessEqual(t(queue, "endTimeUnixNano"),
                             t(upstream, "startTimeUnixNano"))
        self.assertLessEqual(t(upstream, "startTimeUnixNano"),
                             t(upstream, "endTimeUnixNano"))
        self.assertLessEqual(t(upstream, "endTimeUnixNano"),
                             t(server, "endTimeUnixNano"))
        self.assertEqual(queue["name"], "sluice.queue")
        return server, queue, upstream

    def check_chat(self, spans, trace_id, parent_id, answer, usage,
                   finish, max_tokens, request_id):
        server, queue, upstream = self.tree(spans, trace_id, parent_id)
        self.assertEqual(server["name"], "POST /v1/chat/completions")
        a = attrs(server)
        expected = {
            "http.request.method": "POST",
            "http.route": "/v1/chat/completions",
            "http.response.status_code": 200,
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "trace-model",
            "gen_ai.response.model": answer["model"],
            "gen_ai.request.max_tokens": max_tokens,
            "gen_ai.usage.input_tokens": usage["prompt_tokens"],
            "gen_ai.usage.output_tokens": usage["completion_tokens"],
            "gen_ai.response.finish_reasons": [finish],
            "sluice.request_id": request_id,
            "sluice.priority": "normal",
            "sluice.batch_size": 1,
            "sluice.outcome": "ok",
        }
        queue_ms = a.pop("sluice.queue_ms")
        self.assertGreaterEqual(queue_ms, 0)
        self.assertEqual(a, expected)
        # The first token came while the upstream answered.
        (event,) = server["events"]
        self.assertEqual(event["name"], "sluice.first_token")
        self.assertLessEqual(int(upstream["startTimeUnixNano"]),
                             int(event["timeUnixNano"]))
        self.assertLessEqual(int(event["timeUnixNano"]),
                             int(server["endTimeUnixNano"]))
        self.assertEqual(upstream["name"], "chat trace-model")
        u = attrs(upstream)
        self.assertEqual(u["http.request.method"], "POST")
        self.assertEqual(u["server.address"], "127.0.0.1")
        self.assertEqual(u["server.port"], self.ls.port)
        self.assertEqual(u["http.response.status_code"], 200)
        self.assertEqual(u["gen_ai.response.model"], answer["model"])
        self.assertEqual(attrs(queue), {"sluice.priority": "normal",
                                        "sluice.batch_size": 1})
        return server


class TraceThroughLlamaServer(SpanChecks, st.TestCase):
    """One llama-server on the tiny demo model; a sluice exporting
    protobuf and one exporting JSON, each to its own collector."""

    @classmethod
    def setUpClass(cls):
        cls.ls = st.LlamaServer(st.MODEL_TINY, slots=2)
        cls.pb = Collector()
        cls.js = Collector()
        resource = "deployment.environment.name=test,team=a%2Cb"
        cls.sl = st.Sluice("--upstream", cls.ls.url, "--api-key", KEY,
                           env=otel_env(cls.pb, OTEL_SERVICE_NAME="sl-test",
                                        OTEL_RESOURCE_ATTRIBUTES=resource))
        cls.sl_json = st.Sluice(
            "--upstream", cls.ls.url, "--api-key", KEY,
            "--otel-exporter-otlp-protocol", "http/json",
            env=otel_env(cls.js))

    @classmethod
    def tearDownClass(cls):
        for s in (cls.sl, cls.sl_json):
            assert s.stop() == 0
        cls.ls.kill()
        cls.pb.stop()
        cls.js.stop()

    def chat(self, sl, traceparent, stream=False, max_tokens=5):
        body = {"model": "trace-model", "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": "Say hello."}]}
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        r = sl.post("/v1/chat/completions", body, headers={
            "Authorization": "Bearer " + KEY, "traceparent": traceparent,
            "tracestate": "vendor=abc,other=x"}, timeout=WAIT_S)
        self.assertEqual(r.status, 200, r.body)
        return r

    def test_protobuf_spans_decoded_by_opentelemetry(self):
        trace, parent, tp = new_parent()
        r = self.chat(self.sl, tp, max_tokens=6)
        answer = r.json()
        spans = self.wait_spans(lambda: decode_protobuf(self.pb.bodies()),
                                trace, 3)
        server = self.check_chat(spans, trace, parent, answer,
                                 answer["usage"],
                                 answer["choices"][0]["finish_reason"], 6,
                                 r.header("X-Request-Id"))
        self.assertEqual(server["traceState"], "vendor=abc,other=x")
        (post,) = [p for p in self.pb.posts if any(
            s["traceId"] == trace for s in spans_of(decode_protobuf([p[2]])))]
        self.assertEqual(post[0], "/v1/traces")
        self.assertEqual(post[1]["Content-Type"], "application/x-protobuf")
        doc = decode_protobuf([post[2]])[0]
        (rs,) = doc["resourceSpans"]
        self.assertEqual(attrs(rs["resource"]), {
            "service.name": "sl-test",
            "deployment.environment.name": "test", "team": "a,b"})
        (ss,) = rs["scopeSpans"]
        self.assertEqual(ss["scope"]["name"], "sluice")
        # The client's key is no attribute, nor anywhere in an export.
        for body in self.pb.bodies():
            self.assertNotIn(KEY.encode(), body)
            self.assertNotIn(b"Say hello", body)

    def test_stream_counts_and_first_token(self):
        trace, parent, tp = new_parent()
        r = self.chat(self.sl, tp, stream=True)
        events = [json.loads(line[6:]) for line in r.body.decode()
                  .splitlines() if line.startswith("data: {")]
        usage = events[-1]["usage"]
        finish = [e["choices"][0]["finish_reason"] for e in events
                  if e.get("choices") and e["choices"][0].get(
                      "finish_reason")]
        self.assertEqual(len(finish), 1, events)
        spans = self.wait_spans(lambda: decode_protobuf(self.pb.bodies()),
                                trace, 3)
        self.check_chat(spans, trace, parent, events[0], usage, finish[0],
                        5, r.header("X-Request-Id"))

    def test_json_export_follows_the_otlp_json_mapping(self):
        trace, parent, tp = new_parent()
        r = self.chat(self.sl_json, tp)
        answer = r.json()

        def docs():
            return [json.loads(b) for b in self.js.bodies()]
        spans = self.wait_spans(docs, trace, 3)
        self.check_chat(spans, trace, parent, answer, answer["usage"],
                        answer["choices"][0]["finish_reason"], 5,
                        r.header("X-Request-Id"))
        for path, headers, body in list(self.js.posts):
            self.assertEqual(path, "/v1/traces")
            self.assertEqual(headers["Content-Type"], "application/json")
            self.check_json_mapping(json.loads(body))

    def check_json_mapping(self, doc):
        """OTLP/JSON: lowerCamelCase names, ids as lowercase hex, 64-bit
        integers as decimal strings, enums as numbers."""
        def walk(node):
            if isinstance(node, dict):
                for k, v in node.items():
                    self.assertRegex(k, r"^[a-z][a-zA-Z]*$")
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
        walk(doc)
        for s in spans_of([doc]):
            self.assertRegex(s["traceId"], r"^[0-9a-f]{32}$")
            self.assertRegex(s["spanId"], r"^[0-9a-f]{16}$")
            if "parentSpanId" in s:
                self.assertRegex(s["parentSpanId"], r"^[0-9a-f]{16}$")
            for k in ("startTimeUnixNano", "endTimeUnixNano"):
                self.assertIsInstance(s[k], str)
                self.assertRegex(s[k], r"^[1-9][0-9]{18}$")
            self.assertIsInstance(s["kind"], int)
            self.assertIsInstance(s["flags"], int)
            for kv in s["attributes"]:
                (kind,) = kv["value"].keys()
                self.assertIn(kind, ("stringValue", "intValue",
                                     "arrayValue"))
                if kind == "intValue":
                    self.assertIsInstance(kv["value"][kind], str)
            for e in s.get("events", []):
                self.assertIsInstance(e["timeUnixNano"], str)
            if "status" in s:
                self.assertIsInstance(s["status"]["code"], int)


class Propagation(SpanChecks, st.TestCase):
    """What the upstream is sent, seen by a recording stand-in."""

    def start(self, *args, env=None):
        rec = self.recording_upstream(answer=st.models_or_completion)
        sl = self.sluice("--upstream", rec.url, *args, env=env)
        return rec, sl

    def complete(self, sl, headers=None):
        r = sl.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                    headers=headers or {})
        self.assertEqual(r.status, 200, r.body)
        return r

    def test_sluice_sends_llama_server_a_traceparent_of_its_call(self):
        for client in ("native", "curl"):
            with self.subTest(client=client):
                collector = Collector()
                self.addCleanup(collector.stop)
                rec, sl = self.start("--upstream-client", client,
                                     env=otel_env(collector))
                trace, parent, tp = new_parent()
                self.complete(sl, {"traceparent": tp,
                                   "tracestate": "vendor=abc"})
                (got,) = rec.received()
                m = re.fullmatch(r"00-%s-([0-9a-f]{16})-01" % trace,
                                 got.headers["traceparent"])
                self.assertIsNotNone(m, got.headers["traceparent"])
                self.assertEqual(got.headers.get_all("traceparent"),
                                 [got.headers["traceparent"]])
                self.assertEqual(got.headers["tracestate"], "vendor=abc")
                spans = self.wait_spans(
                    lambda: decode_protobuf(collector.bodies()), trace, 3)
                server, _, upstream = self.tree(spans, trace, parent)
                # llama-server's parent is the call's span.
                self.assertEqual(upstream["spanId"], m.group(1))
                self.assertEqual(upstream["name"],
                                 "text_completion default")
                self.assertEqual(attrs(server)["gen_ai.request.max_tokens"],
                                 1)

    def test_without_tracing_nothing_is_added_or_passed_on(self):
        collector = Collector()
        self.addCleanup(collector.stop)
        for env in ({}, otel_env(collector, OTEL_SDK_DISABLED="true")):
            with self.subTest(env=env):
                rec, sl = self.start(env=env)
                _, _, tp = new_parent()
                self.complete(sl, {"traceparent": tp, "tracestate": "a=b"})
                (got,) = rec.received()
                self.assertIsNone(got.headers["traceparent"])
                self.assertIsNone(got.headers["tracestate"])
                self.assertIsNone(metric(sl, "sluice_trace_spans_queued"))
                self.assertFalse(sl.count_lines(r"traces: spans go to"))
                self.assertEqual(sl.stop(), 0)
        self.assertEqual(collector.bodies(), [])

    def test_samplers(self):
        """Ratio 0 exports nothing; the parent-based sampler follows the
        client's sampled flag either way, and says so upstream."""
        collector = Collector()
        self.addCleanup(collector.stop)
        rec, sl = self.start(env=otel_env(
            collector, OTEL_TRACES_SAMPLER="parentbased_traceidratio",
            OTEL_TRACES_SAMPLER_ARG="0"))
        kept, _, tp_kept = new_parent(sampled=True)
        dropped, _, tp_dropped = new_parent(sampled=False)
        self.complete(sl, {"traceparent": tp_kept})
        self.complete(sl, {"traceparent": tp_dropped})
        self.complete(sl)  # a root: ratio 0 keeps none
        sent = [g.headers["traceparent"] for g in rec.received()]
        self.assertTrue(sent[0].startswith("00-%s-" % kept))
        self.assertTrue(sent[0].endswith("-01"))
        self.assertTrue(sent[1].startswith("00-%s-" % dropped))
        self.assertTrue(sent[1].endswith("-00"))
        self.assertRegex(sent[2], r"^00-[0-9a-f]{32}-[0-9a-f]{16}-00$")
        root = sent[2][3:35]
        self.assertNotIn(root, (kept, dropped))
        # At its stop sluice flushes what waits: all there is, then.
        self.assertEqual(sl.stop(), 0)
        traces = {s["traceId"] for s in
                  spans_of(decode_protobuf(collector.bodies()))}
        self.assertEqual(traces, {kept})

        # traceidratio 0 ignores the parent: nothing at all.
        rec, sl = self.start(env=otel_env(
            collector, OTEL_TRACES_SAMPLER="traceidratio",
            OTEL_TRACES_SAMPLER_ARG="0"))
        before = len(collector.bodies())
        self.complete(sl, {"traceparent": new_parent()[2]})
        self.assertTrue(rec.received()[0].headers["traceparent"]
                        .endswith("-00"))
        self.assertEqual(sl.stop(), 0)
        self.assertEqual(len(collector.bodies()), before)


class CollectorTrouble(st.TestCase):
    """A collector that is down or hangs costs requests nothing: its spans
    are dropped and counted, and memory stays bounded."""

    def start(self, env):
        rec = self.recording_upstream(answer=st.models_or_completion)
        sl = self.sluice("--upstream", rec.url, "--api-key", KEY, env=env)
        return rec, sl

    def complete(self, sl):
        r = sl.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                    headers={"Authorization": "Bearer " + KEY})
        self.assertEqual(r.status, 200, r.body)

    def dropped(self, sl, reason):
        return metric(sl, 'sluice_trace_spans_dropped_total{reason="%s"}'
                      % reason)

    def test_collector_down(self):
        down = "http://127.0.0.1:%d" % st.free_port()
        rec, sl = self.start({"OTEL_EXPORTER_OTLP_ENDPOINT": down, **FAST})
        for _ in range(5):
            self.complete(sl)
        # Each request: its span, its wait in the queue, its call.
        st.wait_until(lambda: self.dropped(sl, "export_failed") == 15,
                      WAIT_S, "15 spans dropped as export_failed")
        self.assertEqual(metric(sl, "sluice_trace_spans_exported_total"), 0)
        self.assertEqual(sl.count_lines(r"warn +traces: export to "
                                        r"http://127\.0\.0\.1:\d+/v1/traces "
                                        r"failed"), 1)

    def test_collector_that_hangs(self):
        collector = Collector(hang=True)
        self.addCleanup(collector.stop)
        # The export's own timeouts far off: it hangs until released.
        rec, sl = self.start(otel_env(
            collector, OTEL_BSP_MAX_QUEUE_SIZE="6",
            OTEL_BSP_MAX_EXPORT_BATCH_SIZE="3",
            OTEL_EXPORTER_OTLP_TIMEOUT="600000",
            OTEL_BSP_EXPORT_TIMEOUT="600000"))
        n = 10
        self.complete(sl)
        self.assertTrue(collector.arrived.wait(WAIT_S))
        for _ in range(n - 1):
            self.complete(sl)
        # One export (3 spans) hangs; 6 spans wait; the rest are dropped.
        queued = metric(sl, "sluice_trace_spans_queued")
        full = self.dropped(sl, "queue_full")
        self.assertLessEqual(queued, 6)
        self.assertEqual(queued + full, 3 * n - 3)
        self.assertEqual(metric(sl, "sluice_trace_spans_exported_total"), 0)
        collector.release()
        st.wait_until(lambda: metric(sl, "sluice_trace_spans_exported_total")
                      == 3 * n - full, WAIT_S, "the waiting spans exported")
        self.assertEqual(metric(sl, "sluice_trace_spans_queued"), 0)

    def test_pending_spans_are_flushed_on_drain(self):
        collector = Collector()
        self.addCleanup(collector.stop)
        rec, sl = self.start(otel_env(collector,
                                      OTEL_BSP_SCHEDULE_DELAY="3600000"))
        self.complete(sl)
        self.assertEqual(metric(sl, "sluice_trace_spans_queued"), 3)
        self.assertEqual(collector.bodies(), [])
        self.assertEqual(sl.stop(), 0)
        spans = spans_of(decode_protobuf(collector.bodies()))
        self.assertEqual(sorted(s["kind"] for s in spans), [1, 2, 3])

    def test_a_hanging_collector_cannot_hold_the_stop(self):
        collector = Collector(hang=True)
        self.addCleanup(collector.stop)
        rec, sl = self.start(otel_env(collector,
                                      OTEL_BSP_SCHEDULE_DELAY="3600000",
                                      SLUICE_DRAIN_TIMEOUT="1"))
        self.complete(sl)
        sl.proc.send_signal(signal.SIGTERM)
        self.assertTrue(collector.arrived.wait(WAIT_S))
        # Within the drain's deadline (at least a second), not the
        # export's own timeout (10 s).
        self.assertEqual(sl.wait_exit(timeout=8), 0)


def run_sluice(*args, env=None):
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLUICE_", "OTEL_"))
            or k == "SLUICE_LLAMA_SERVER"}
    full.update(env or {})
    return subprocess.run([st.SLUICE, *args], capture_output=True, text=True,
                          env=full, timeout=WAIT_S)


class BadValues(unittest.TestCase):

    def test_a_bad_value_stops_the_start_with_one_line(self):
        cases = [
            ([], {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
             'OTEL_EXPORTER_OTLP_PROTOCOL: expected http/protobuf or '
             'http/json, got "grpc"'),
            ([], {"OTEL_TRACES_SAMPLER_ARG": "1.5"},
             'OTEL_TRACES_SAMPLER_ARG: expected a number from 0 to 1, '
             'got "1.5"'),
            ([], {"OTEL_TRACES_SAMPLER": "jaeger_remote"},
             "OTEL_TRACES_SAMPLER: expected always_on, always_off, "),
            (["--otel-traces-sampler", "sometimes"], {},
             "--otel-traces-sampler: expected "),
            ([], {"OTEL_EXPORTER_OTLP_HEADERS": "api-key"},
             "OTEL_EXPORTER_OTLP_HEADERS: item 1 has no '=' "
             "(expected key=value)"),
            (["--otel-exporter-otlp-headers", "a=1,bad name=2"], {},
             '--otel-exporter-otlp-headers: item 2\'s key "bad name" is '
             "no header name"),
            ([], {"OTEL_RESOURCE_ATTRIBUTES": "a=%zz"},
             "OTEL_RESOURCE_ATTRIBUTES: item 1 (a) has a broken %XX "
             "escape in its value"),
            ([], {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
             "OTEL_EXPORTER_OTLP_ENDPOINT: expected an http:// or https:// "
             "URL"),
            ([], {"OTEL_BSP_MAX_QUEUE_SIZE": "100",
                  "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "200"},
             "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: 200 is more than "
             "--otel-bsp-max-queue-size (100)"),
            ([], {"OTEL_BSP_SCHEDULE_DELAY": "5s"},
             "OTEL_BSP_SCHEDULE_DELAY: expected "),
        ]
        for args, env, line in cases:
            with self.subTest(args=args, env=env):
                r = run_sluice(*args, env=env)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(r.stdout, "")
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertTrue(lines[0].startswith("sluice: " + line),
                                lines[0])

    def test_header_values_are_never_shown(self):
        secret = "Bearer%20s3cr3t-token"
        r = run_sluice(env={"OTEL_EXPORTER_OTLP_HEADERS":
                            "Authorization=%s%%zz" % secret})
        self.assertEqual(r.returncode, 2)
        self.assertNotIn("s3cr3t", r.stderr)
        r = run_sluice("--help")
        self.assertIn("[OTEL_EXPORTER_OTLP_HEADERS; default: none]",
                      r.stdout)


if __name__ == "__main__":
    unittest.main()

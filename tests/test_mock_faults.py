"""The mock llama-server (bench/mock-llama-server): its own answers, and
sluice in front of it with the faults it injects (failures, hangs, closed
connections, a slow start, and /metrics or /slots answers that are late,
wrong or missing).

The mock's text is fixed: token k is " tok<k>", so an answer of n tokens is
" tok0 tok1 ... tok<n-1>" and every test can check text exactly."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import sluice_test as st

MOCK = os.environ.get("SLUICE_MOCK_BIN") or os.path.join(
    os.path.dirname(st.SLUICE), "bench", "mock-llama-server")

PATHS = ("/completion", "/v1/completions", "/v1/chat/completions")
JSON_TYPE = "application/json; charset=utf-8"

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240

# The load of the occupancy fault tests: LOAD_REQUESTS plain answers at
# once, each LOAD_TOKENS tokens at LOAD_TOKEN_MS (about 0.2 s), on
# LOAD_SLOTS slots: six waves, with requests waiting in sluice's queue (so
# that it polls) for most of the run.
LOAD_SLOTS = 4
LOAD_REQUESTS = 24
LOAD_TOKENS = 10
LOAD_TOKEN_MS = 20
# A fault may cost a poll's timeout or two; beyond this share of the time
# the same load takes without the fault, the fault held dispatch (before
# issue 41: 2 to 4 times as long, or for ever).
LOAD_SLOWDOWN_MAX = 1.5
# /metrics answered this late: past a poll's timeout (half of
# --occupancy-poll, 200 ms by default), within the two seconds sluice's
# polls used to wait.
SLOW_METRICS_MS = 1000
# ... and never, as far as sluice's polls can tell.
HUNG_METRICS_MS = 3600000


def expected_text(n):
    return "".join(" tok%d" % k for k in range(n))


def body_for(path, n, stream, prompt="one two three", **extra):
    """A request for n tokens (None: the mock's --tokens)."""
    body = {"stream": stream, **extra}
    if path == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if n is not None:
        body["n_predict" if path == "/completion" else "max_tokens"] = n
    return body


def split_events(data):
    """The SSE events in a body: each "data: <json or [DONE]>\\n\\n"."""
    text = data.decode()
    assert text.endswith("\n\n"), "body does not end an event: %r" % text[-80:]
    events = []
    for block in text[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, block
        payload = block[6:]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def read_stream(port, path, body, by_event=False):
    """(status, headers, [payloads]) of a whole chunked answer: each
    chunk's, or by_event each SSE event's (RawClient.events)."""
    c = st.RawClient(port, timeout=SAFETY_NET_S)
    try:
        c.request("POST", path, body)
        status, head = c.read_head()
        parts = c.events() if by_event else c.chunks()
        return status, head, [part for _, part in parts]
    finally:
        c.close()


def stream_events(port, path, n=None):
    """(status, [each SSE event's data]) of a streamed request for n tokens
    on path: JSON events parsed, "[DONE]" as it is."""
    status, _, raw = read_stream(port, path, body_for(path, n, True),
                                 by_event=True)
    return status, [st.sse_data(e) for e in raw]


def busy_slots(port):
    r = st.request(port, "GET", "/slots", timeout=SAFETY_NET_S)
    assert r.status == 200, r.status
    return sum(1 for s in r.json() if s["is_processing"])


class Mock(st.Process):
    """The mock on a free port; extra arguments go on its command line."""

    LISTENING = (r"^mock-llama-server listening on "
                 r"http://127\.0\.0\.1:(\d+) \((\d+) slots\)$")

    def __init__(self, *args, env=None):
        full_env = {k: v for k, v in os.environ.items()
                    if not k.startswith("SLUICE_MOCK_")}
        full_env.update(env or {})
        super().__init__([MOCK, "--port", "0", *args], env=full_env,
                         name="mock")
        self.wait_line(r"listening on", timeout=SAFETY_NET_S)
        first = re.match(self.LISTENING, self.lines[0])
        assert first, "first line: %r" % self.lines[0]
        self.port = int(first.group(1))
        self.slots = int(first.group(2))
        self.url = "http://127.0.0.1:%d" % self.port
        self.started = time.monotonic()

    def get(self, path):
        return st.request(self.port, "GET", path, timeout=SAFETY_NET_S)

    def post(self, path, body, **kw):
        return st.request(self.port, "POST", path, body=body, **kw)

    def stop(self, timeout=SAFETY_NET_S):
        """SIGTERM; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.wait_exit(timeout)
        self.proc.stderr.close()
        return code


class MockTestCase(st.TestCase):

    def mock(self, *args, **kw):
        m = Mock(*args, **kw)
        # Last in, first out: runs after tearDown has stopped sluice.
        self.addCleanup(self.assert_clean_exit, m)
        return m

    def assert_clean_exit(self, m):
        """SIGTERM ends the mock with status 0 and nothing more to say (a
        sanitizer report or a leaked handle would say something)."""
        code = m.stop()
        self.assertEqual(code, 0, m.output())
        self.assertEqual(len(m.lines), 1, m.output())

    def check_stream(self, path, events, n, usage):
        """Checks one stream's events; returns its text."""
        text = "".join(st.delta_of(path, e) for e in events
                       if isinstance(e, dict))
        self.assertEqual(text, expected_text(n))
        if path == "/completion":
            self.assertNotIn("[DONE]", events)
            for k, e in enumerate(events[:-1]):
                self.assertEqual(e["content"], " tok%d" % k)
                self.assertIs(e["stop"], False)
            last = events[-1]
            self.assertEqual(len(events), n + 1)
            self.assertIs(last["stop"], True)
            self.assertEqual(last["content"], "")
            self.assertEqual(last["stop_type"], "limit")
            self.assertEqual(last["tokens_predicted"], n)
            self.assertEqual(last["tokens_evaluated"], 3)
            self.assertIn("timings", last)
            return
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(events.count("[DONE]"), 1)
        body = events[:-1]
        if path == "/v1/chat/completions":
            self.assertEqual(body[0]["choices"][0]["delta"],
                             {"role": "assistant", "content": None})
            body = body[1:]
        tokens = body[:n]
        for k, e in enumerate(tokens):
            self.assertEqual(st.delta_of(path, e), " tok%d" % k)
            self.assertIsNone(e["choices"][0]["finish_reason"])
            self.assertNotIn("usage", e)
        finish = body[n]
        self.assertEqual(finish["choices"][0]["finish_reason"], "length")
        want_usage = {"completion_tokens": n, "prompt_tokens": 3,
                      "total_tokens": n + 3}
        if path == "/v1/completions":
            # llama-server puts usage in the finish event, asked or not.
            self.assertEqual(len(body), n + 1)
            got = finish["usage"]
        elif usage:
            self.assertEqual(len(body), n + 2)
            self.assertNotIn("usage", finish)
            self.assertEqual(body[n + 1]["choices"], [])
            got = body[n + 1]["usage"]
        else:
            self.assertEqual(len(body), n + 1)
            self.assertNotIn("usage", finish)
            return
        self.assertEqual({k: got[k] for k in want_usage}, want_usage)


class MockFraming(MockTestCase):
    """Answers straight from the mock have llama-server's shapes."""

    def test_plain_answers(self):
        m = self.mock("--tokens", "5")
        for path in PATHS:
            for n in (None, 0, 7):
                with self.subTest(path=path, n=n):
                    r = m.post(path, body_for(path, n, False))
                    self.assertEqual(r.status, 200)
                    self.assertEqual(r.header("Content-Type"), JSON_TYPE)
                    self.assertEqual(int(r.header("Content-Length")),
                                     len(r.body))
                    doc = r.json()
                    want = 5 if n is None else n
                    self.assertEqual(st.text_of(path, doc),
                                     expected_text(want))
                    if path == "/completion":
                        self.assertIs(doc["stop"], True)
                        self.assertEqual(doc["stop_type"], "limit")
                        self.assertEqual(doc["tokens_predicted"], want)
                        self.assertEqual(doc["tokens_evaluated"], 3)
                        self.assertIn("timings", doc)
                        continue
                    choice = doc["choices"][0]
                    self.assertEqual(choice["finish_reason"], "length")
                    self.assertEqual(doc["usage"]["completion_tokens"], want)
                    self.assertEqual(doc["usage"]["prompt_tokens"], 3)
                    self.assertEqual(doc["usage"]["total_tokens"], want + 3)
                    if path == "/v1/chat/completions":
                        self.assertEqual(doc["object"], "chat.completion")
                        self.assertEqual(choice["message"]["role"],
                                         "assistant")
                    else:
                        self.assertEqual(doc["object"], "text_completion")

    def test_streams(self):
        m = self.mock("--tokens", "4")
        for path in PATHS:
            for n, usage in ((None, False), (0, False), (6, False),
                             (6, True)):
                extra = ({"stream_options": {"include_usage": True}}
                         if usage else {})
                with self.subTest(path=path, n=n, usage=usage):
                    status, head, chunks = read_stream(
                        m.port, path, body_for(path, n, True, **extra))
                    self.assertEqual(status, 200)
                    self.assertEqual(head["content-type"],
                                     "text/event-stream")
                    self.assertEqual(head["transfer-encoding"], "chunked")
                    # Unpaced, the whole stream is one chunk.
                    self.assertEqual(len(chunks), 1)
                    self.check_stream(path, split_events(chunks[0]),
                                      4 if n is None else n, usage)

    def test_paced_streams_are_one_step_per_chunk(self):
        # As llama-server: the chat role shares the first token's chunk,
        # the usage event the finish event's, and [DONE] has its own.
        m = self.mock("--token-delay-ms", "2")
        n = 3
        opts = {"stream_options": {"include_usage": True}}
        for path, sizes in (("/completion", [1, 1, 1, 1]),
                            ("/v1/completions", [1, 1, 1, 1, 1]),
                            ("/v1/chat/completions", [2, 1, 1, 2, 1])):
            with self.subTest(path=path):
                status, _, chunks = read_stream(
                    m.port, path, body_for(path, n, True, **opts))
                self.assertEqual(status, 200)
                per_chunk = [split_events(c) for c in chunks]
                self.assertEqual([len(e) for e in per_chunk], sizes)
                self.check_stream(path, sum(per_chunk, []), n, True)

    def test_errors_have_llama_servers_shape(self):
        m = self.mock()
        r = m.post("/completion", '{"prompt": ')
        self.assertEqual(r.status, 400)
        self.assertEqual(r.header("Content-Type"), JSON_TYPE)
        err = r.json()["error"]
        self.assertEqual((err["code"], err["type"]),
                         (400, "invalid_request_error"))
        r = m.post("/v1/chat/completions", [1, 2])
        self.assertEqual(r.status, 400)
        r = m.get("/nowhere")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json(), {"error": {
            "code": 404, "message": "File Not Found",
            "type": "not_found_error"}})

    def test_props_and_slots(self):
        m = self.mock("--slots", "3")
        props = m.get("/props").json()
        self.assertEqual(props["total_slots"], 3)
        self.assertEqual(props["default_generation_settings"]["n_ctx"], 4096)
        self.assertEqual(m.get("/slots").json(), [
            {"id": i, "n_ctx": 4096, "is_processing": False}
            for i in range(3)])
        self.assertEqual(m.get("/health").json(), {"status": "ok"})


class MockOptions(MockTestCase):

    def run_mock(self, *args, env=None):
        full_env = {k: v for k, v in os.environ.items()
                    if not k.startswith("SLUICE_MOCK_")}
        full_env.update(env or {})
        p = subprocess.run([MOCK, *args], env=full_env, timeout=SAFETY_NET_S,
                              capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr

    def test_bad_values_exit_2_with_one_line(self):
        for args, env, names in (
                (["--slots", "x"], {}, "--slots"),
                (["--slots=0"], {}, "--slots"),
                (["--fail-rate", "1.5"], {}, "--fail-rate"),
                (["--port", "-1"], {}, "--port"),
                ([], {"SLUICE_MOCK_TOKENS": "many"}, "SLUICE_MOCK_TOKENS"),
                (["--no-such-option"], {}, "--no-such-option")):
            with self.subTest(args=args, env=env):
                code, _, err = self.run_mock(*args, env=env)
                self.assertEqual(code, 2)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn(names, err)

    def test_help_names_every_env_twin(self):
        code, out, _ = self.run_mock("--help")
        self.assertEqual(code, 0)
        for name in ("port", "slots", "tokens", "prompt-delay-ms",
                     "token-delay-ms", "fail-rate", "fail-status",
                     "hang-rate", "close-rate", "start-delay-ms", "seed",
                     "occupancy-delay-ms", "occupancy-status",
                     "metrics-value", "occupancy-faults"):
            self.assertIn("--" + name, out)
            self.assertIn("SLUICE_MOCK_" + name.upper().replace("-", "_"),
                          out)

    def test_flag_wins_over_env(self):
        m = self.mock(env={"SLUICE_MOCK_SLOTS": "3"})
        self.assertEqual(m.get("/props").json()["total_slots"], 3)
        m = self.mock("--slots=5", env={"SLUICE_MOCK_SLOTS": "3"})
        self.assertEqual(m.get("/props").json()["total_slots"], 5)

    def test_faults_repeat_with_the_seed(self):
        def statuses(seed):
            m = self.mock("--fail-rate", "0.5", "--seed", seed)
            return [m.post("/completion", body_for("/completion", 1, False))
                    .status for _ in range(40)]
        first = statuses("7")
        self.assertEqual(statuses("7"), first)
        self.assertEqual(set(first), {200, 500})
        self.assertNotEqual(statuses("8"), first)


class ThroughSluice(MockTestCase):
    """sluice with the mock as its upstream."""

    def pair(self, *mock_args, sluice_args=()):
        m = self.mock(*mock_args)
        s = self.sluice("--upstream", m.url, *sluice_args)
        return m, s

    def test_text_is_exact(self):
        m, s = self.pair("--tokens", "9")
        for path in PATHS:
            for n in (None, 1, 12):
                want = expected_text(9 if n is None else n)
                with self.subTest(path=path, n=n, stream=False):
                    r = s.post(path, body_for(path, n, False))
                    self.assertEqual(r.status, 200, r.body[:300])
                    self.assertEqual(st.text_of(path, r.json()), want)
                with self.subTest(path=path, n=n, stream=True):
                    status, events = stream_events(s.port, path, n)
                    self.assertEqual(status, 200)
                    self.assertEqual(events[-1] == "[DONE]",
                                     path != "/completion")
                    self.assertEqual("".join(st.delta_of(path, e)
                                             for e in events
                                             if isinstance(e, dict)), want)

    def test_failure_is_relayed(self):
        m, s = self.pair("--fail-rate", "1", "--fail-status", "500")
        want = {"error": {"code": 500, "message": "mock failure",
                          "type": "server_error"}}
        self.assertEqual(m.post("/completion",
                                body_for("/completion", 2, False)).json(),
                         want)
        for path in PATHS:
            for stream in (False, True):
                with self.subTest(path=path, stream=stream):
                    r = s.post(path, body_for(path, 2, stream))
                    self.assertEqual(r.status, 500)
                    self.assertEqual(r.json(), want)

    def test_hang_gives_504_and_frees_the_slot(self):
        # A relayed plain answer comes whole: --upstream-plain-timeout.
        # A stream's first byte is its first token: --upstream-timeout.
        # After a client's stream, plain answers to that upstream are
        # asked for as streams (--stream-upstream auto): the same.
        m, s = self.pair("--hang-rate", "1", "--slots", "2",
                         sluice_args=("--upstream-timeout", "1",
                                      "--upstream-plain-timeout", "2"))
        for stream, seconds, option in (
                (False, 2, "--upstream-plain-timeout"),
                (True, 1, "--upstream-timeout"),
                (False, 1, "--upstream-timeout")):
            with self.subTest(stream=stream, option=option):
                self.assert_hang_times_out(m, s, stream, seconds, option)

    def assert_hang_times_out(self, m, s, stream, seconds, option):
        result = {}

        def ask():
            t0 = time.monotonic()
            result["r"] = s.post("/v1/chat/completions",
                                 body_for("/v1/chat/completions", 4, stream),
                                 timeout=SAFETY_NET_S)
            result["elapsed"] = time.monotonic() - t0

        t = threading.Thread(target=ask)
        t.start()
        # The hanging request holds a mock slot while sluice waits.
        st.wait_until(lambda: busy_slots(m.port) == 1, SAFETY_NET_S,
                      "a busy slot")
        t.join(SAFETY_NET_S)
        self.assertFalse(t.is_alive())
        r = result["r"]
        self.assertEqual(r.status, 504, r.body)
        err = r.json()["error"]
        self.assertEqual(err["code"], 504)
        self.assertEqual(err["type"], "timeout_error")
        self.assertIn("no answer within %s (%d.0 s)" % (option, seconds),
                      err["message"])
        # The mock never answers: the 504 itself says the timeout ended it,
        # and not before its time.
        self.assertGreaterEqual(result["elapsed"], seconds - 0.1)
        # sluice closed its upstream connection: the mock's slot is free.
        st.wait_until(lambda: busy_slots(m.port) == 0, SAFETY_NET_S,
                      "idle slots")

    SWITCH = (r"a client left a plain answer llama-server was generating: "
              r"plain answers sent to \S+ are asked for as streams for 60 s")

    def test_left_plain_answer_starts_streams_only_if_it_cost(self):
        # --stream-upstream auto asks for plain answers as streams for a
        # while after a client left one that the upstream spent
        # SL_STREAM_UPSTREAM_LEFT_MS (1 s) or more on, before its client
        # left or after; one that ends soon after wasted little. The mock
        # stops an answer as soon as sluice tells it that its client left
        # (the connection half-closed), so the cost is the time before:
        # none when the client leaves as soon as the mock takes its
        # request, and over a second when it leaves 1.2 s later (the time
        # is the condition here: the mock's answer is 2.5 s away). What
        # sluice logged of both times decides, whatever the machine's
        # timing.
        for wait_s in (0, 1.2):
            with self.subTest(wait_s=wait_s):
                m, s = self.pair("--prompt-delay-ms", "2500",
                                 sluice_args=("--log-level", "debug"))
                path = "/v1/chat/completions"
                c = st.RawClient(s.port)
                c.request("POST", path, body_for(path, 2, False))
                st.wait_until(lambda: busy_slots(m.port) == 1,
                              SAFETY_NET_S, "the mock to take it")
                time.sleep(wait_s)
                c.close()
                before = int(s.wait_line(
                    r"its client left a plain answer llama-server had "
                    r"been generating for (\d+) ms",
                    timeout=SAFETY_NET_S).group(1))
                after = 0
                if before < 1000:
                    after = int(s.wait_line(
                        r"the plain answer its client left ran on for "
                        r"(\d+) ms", timeout=SAFETY_NET_S).group(1))
                # The mock stopped it: its slot is free long before the
                # answer's time, and sluice counts nothing in flight.
                st.wait_until(lambda: busy_slots(m.port) == 0,
                              SAFETY_NET_S, "the mock to stop it")
                st.wait_until(lambda: s.health().json()["inflight"] == 0,
                              SAFETY_NET_S, "nothing in flight")
                # A request after it: its access line comes after any
                # line the left answer's end made.
                r = s.post(path, body_for(path, 2, False),
                           timeout=SAFETY_NET_S)
                self.assertEqual(r.status, 200)
                s.wait_line(r"access id=%s " % r.header("X-Request-Id"),
                            timeout=SAFETY_NET_S)
                switched = s.count_lines(self.SWITCH) == 1
                self.assertEqual(switched, before >= 1000 or after >= 1000,
                                 "%d ms before, %d after" % (before, after))
                if wait_s:
                    self.assertTrue(switched, s.output())
                self.assertEqual(s.stop(), 0)

    def check_cut_streams(self, s, n):
        # Each path's stream through s: the first n tokens, exact, then
        # sluice's error event in place of the end.
        for path in PATHS:
            with self.subTest(path=path, stream=True):
                status, events = stream_events(s.port, path)
                self.assertEqual(status, 200)
                self.assertNotIn("[DONE]", events)
                last = events[-1]
                self.assertEqual(last["error"]["code"], 502)
                self.assertEqual(last["error"]["type"], "server_error")
                self.assertEqual("".join(st.delta_of(path, e)
                                         for e in events[:-1]),
                                 expected_text(n))

    def test_close_mid_held_stream_gives_an_error_event(self):
        # Tokens 2 ms apart and a window of 20 ms: the stream is held and
        # read by the window's ticks, which read the mock's close too.
        m, s = self.pair("--close-rate", "1", "--tokens", "60",
                         "--token-delay-ms", "2",
                         sluice_args=("--stream-coalesce", "20ms"))
        self.check_cut_streams(s, 30)
        # Held: the 30 tokens came in a handful of chunks.
        status, _, got = read_stream(s.port, "/completion",
                                     body_for("/completion", None, True))
        self.assertEqual(status, 200)
        self.assertLessEqual(len(got), 30 // 3, got)

    def test_close_mid_stream_gives_an_error_event(self):
        m, s = self.pair("--close-rate", "1", "--tokens", "10")
        # Straight from the mock: half the tokens, then the connection
        # ends without the chunked body's end.
        c = st.RawClient(m.port)
        c.request("POST", "/completion", body_for("/completion", None, True))
        self.assertEqual(c.read_head()[0], 200)
        events = []
        with self.assertRaises(EOFError):
            for _, chunk in c.chunks():
                events += split_events(chunk)
        c.close()
        self.assertEqual([e["content"] for e in events],
                         [" tok%d" % k for k in range(5)])
        # A plain request: closed before any answer.
        c = st.RawClient(m.port)
        c.request("POST", "/completion", body_for("/completion", None, False))
        self.assertTrue(c.at_eof())
        self.assertEqual(c.buf, b"")
        c.close()

        self.check_cut_streams(s, 5)
        for path in PATHS:
            with self.subTest(path=path, stream=False):
                r = s.post(path, body_for(path, None, False))
                self.assertEqual(r.status, 502, r.body)
                self.assertEqual(r.json()["error"]["code"], 502)

    def test_ready_once_the_mock_has_loaded(self):
        # Long enough that a slow start of sluice still finds it loading.
        m = self.mock("--start-delay-ms", "5000")
        loading = {"error": {"code": 503, "message": "Loading model",
                             "type": "unavailable_error"}}
        r = m.get("/health")
        self.assertEqual((r.status, r.json()), (503, loading))
        r = m.post("/completion", body_for("/completion", 1, False))
        self.assertEqual((r.status, r.json()), (503, loading))
        s = self.sluice("--upstream", m.url, "--health-interval", "0.2",
                        wait_ready=False)
        self.assertEqual(s.ready_status(), 503)
        # Loading, not down, once sluice has asked.
        said = s.wait_line(r"upstream %s is (loading its model|down)"
                           % re.escape(m.url), SAFETY_NET_S)
        self.assertEqual(said.group(1), "loading its model")
        self.assertEqual(s.upstream()["state"], "starting")
        # What needs a slot waits for it, rather than get 503.
        got = {}
        early = threading.Thread(target=lambda: got.update(r=s.post(
            "/completion", body_for("/completion", 2, False),
            timeout=SAFETY_NET_S)))
        early.start()
        st.wait_until(lambda: "r" in got or s.health().json()["queued"] == 1,
                      SAFETY_NET_S, "the request to be queued")
        self.assertNotIn("r", got)
        self.assertEqual(s.ready_status(), 503)
        # Still loading after sluice said 503: it said so for that reason.
        self.assertEqual(m.get("/health").status, 503)
        s.wait_ready(SAFETY_NET_S)
        self.assertGreaterEqual(time.monotonic() - m.started, 5.0)
        self.assertEqual(m.get("/health").json(), {"status": "ok"})
        early.join(SAFETY_NET_S)
        self.assertEqual(got["r"].status, 200)
        self.assertEqual(st.text_of("/completion", got["r"].json()),
                         expected_text(2))
        r = s.post("/completion", body_for("/completion", 3, False))
        self.assertEqual(st.text_of("/completion", r.json()), expected_text(3))
        self.assertEqual(s.count_lines(r"is loading its model"), 1)


    def test_fast_tokens_come_together_whole(self):
        # Tokens 1 ms apart. With a window of 50 ms, sluice reads them (and
        # relays what came) at most once a window after the first two, so
        # 60 tokens come in a handful of chunks; without one, each of the
        # mock's steps is a chunk. Either way every event is the mock's, in
        # its order, the finish and [DONE] included.
        m = self.mock("--token-delay-ms", "1")
        held = self.sluice("--upstream", m.url, "--stream-coalesce", "50ms")
        each = self.sluice("--upstream", m.url, "--stream-coalesce", "0")
        n = 60
        for path in PATHS:
            chunks = {}
            for name, s in (("held", held), ("each", each)):
                with self.subTest(path=path, coalesce=name):
                    status, _, got = read_stream(
                        s.port, path, body_for(path, n, True))
                    self.assertEqual(status, 200)
                    self.check_stream(
                        path, sum((split_events(c) for c in got), []), n,
                        False)
                    chunks[name] = len(got)
            # The mock's steps: one per token, the finish, and for the
            # OpenAI paths [DONE]; the held relay has a fourth of that at
            # most (two before the first wait, one per 50 ms window, the
            # finish and [DONE]).
            self.assertLessEqual(chunks["held"], n // 4, chunks)
            self.assertGreater(chunks["each"], chunks["held"], chunks)

    def test_client_leaving_a_held_stream_cancels_it(self):
        # Tokens 20 ms apart and a window of 100 ms: the stream is held
        # most of the time, so that is where its client leaves it. The
        # mock would take 4096 x 20 ms = 82 s to finish it.
        m = self.mock("--slots", "1", "--token-delay-ms", "20",
                      "--tokens", "4096")
        s = self.sluice("--upstream", m.url, "--stream-coalesce", "100ms")
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.request("POST", "/completion", body_for("/completion", None, True))
        self.assertEqual(c.read_head()[0], 200)
        chunks = c.chunks()
        sizes = [len(split_events(next(chunks)[1])) for _ in range(3)]
        c.close()
        # The third chunk came after a wait, with what the window gathered.
        self.assertGreater(sizes[2], 1, sizes)
        st.wait_until(lambda: busy_slots(m.port) == 0, 60,
                      "the mock's slot freed before the answer's end")
        status, _, got = read_stream(s.port, "/completion",
                                     body_for("/completion", 5, True))
        self.assertEqual(status, 200)
        self.check_stream("/completion",
                          sum((split_events(c) for c in got), []), 5, False)


class Timeouts(MockTestCase):

    def test_upstream_falling_silent_mid_stream(self):
        # A token every 10 s against --upstream-idle-timeout 1: the error
        # must come after the first token and before the second.
        m = self.mock("--slots", "1", "--token-delay-ms", "10000",
                      "--tokens", "5")
        s = self.sluice("--upstream", m.url, "--upstream-idle-timeout", "1")
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.request("POST", "/completion", body_for("/completion", 5, True))
        self.assertEqual(c.read_head()[0], 200)
        events = [(t, json.loads(event.decode()[6:])) for t, event in
                  c.events()]
        c.close()
        self.assertEqual(len(events), 2, events)  # one token, the error
        first, last = events
        self.assertEqual(first[1]["content"], " tok0")
        self.assertEqual(last[1]["error"]["code"], 504)
        self.assertIn("--upstream-idle-timeout", last[1]["error"]["message"])
        self.assertGreaterEqual(last[0] - first[0], 0.9)
        st.wait_until(lambda: busy_slots(m.port) == 0, SAFETY_NET_S,
                      "the slot freed")

    def test_drain_timeout_ends_what_is_left_properly(self):
        # Two slots: a stream under way, a plain request in flight (its
        # answer not begun), and one waiting in the queue. Each answer
        # would take the mock 1000 x 100 ms = 100 s.
        tokens, delay_s = 1000, 0.1
        m = self.mock("--slots", "2", "--token-delay-ms",
                      str(int(delay_s * 1000)), "--tokens", str(tokens))
        s = self.sluice("--upstream", m.url, "--drain-timeout", "1")
        stream = st.RawClient(s.port, timeout=SAFETY_NET_S)
        stream.request("POST", "/completion",
                       body_for("/completion", tokens, True))
        self.assertEqual(stream.read_head()[0], 200)
        stream_events = stream.events()
        first = st.sse_data(next(stream_events)[1])
        self.assertEqual(first["content"], " tok0")
        plain = st.RawClient(s.port, timeout=SAFETY_NET_S)
        plain.request("POST", "/completion",
                      body_for("/completion", tokens, False))
        st.wait_until(lambda: busy_slots(m.port) == 2, SAFETY_NET_S,
                      "both slots")
        queued = st.RawClient(s.port, timeout=SAFETY_NET_S)
        queued.request("POST", "/v1/completions",
                       body_for("/v1/completions", tokens, False))
        st.wait_until(lambda: s.health().json()["queued"] == 1, SAFETY_NET_S,
                      "a queued request")
        started = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        # The stream: an error event, then its terminating chunk.
        events = [st.sse_data(e) for _, e in stream_events]
        err = events[-1]["error"]
        self.assertEqual(err["code"], 503)
        self.assertEqual(err["type"], "unavailable_error")
        self.assertEqual(err["message"],
                         "sluice is shutting down: --drain-timeout passed")
        self.assertTrue(all("error" not in e for e in events[:-1]))
        self.assertGreaterEqual(time.monotonic() - started, 0.9)
        # The plain requests, in flight and queued: 503 with Retry-After.
        for c in (plain, queued):
            status, head, body = c.read_response()
            self.assertEqual(status, 503, body)
            self.assertEqual(head["retry-after"], "1")
            self.assertEqual(head["retry-after-ms"], "1000")
            self.assertEqual(json.loads(body)["error"], err)
            self.assertTrue(c.at_eof())
        for c in (stream, plain, queued):
            c.close()
        self.assertEqual(s.wait_exit(SAFETY_NET_S), 0)
        # Ended by the drain timeout, long before the answers would be.
        self.assertLess(time.monotonic() - started, tokens * delay_s)
        s.wait_line(r"drain timeout: 3 requests still in flight; ending "
                    r"them with 503 or an error event")
        st.wait_until(lambda: busy_slots(m.port) == 0, SAFETY_NET_S,
                      "the slots freed")


class Queueing(MockTestCase):

    def test_requests_beyond_the_slots_wait(self):
        # Each stream lasts 20 x 200 ms = 4 s: long enough that the first
        # two are still under way when the test looks, even on a busy machine.
        m = self.mock("--slots", "2", "--token-delay-ms", "200",
                      "--tokens", "20")
        results = [dict() for _ in range(4)]

        def stream(i):
            out = results[i]
            c = st.RawClient(m.port, timeout=SAFETY_NET_S)
            try:
                c.request("POST", "/completion",
                          body_for("/completion", None, True))
                out["status"], _ = c.read_head()
                out["head"] = time.monotonic()
                events = [e for _, ch in c.chunks()
                          for e in split_events(ch)]
                out["end"] = time.monotonic()
                out["text"] = "".join(e["content"] for e in events)
            finally:
                c.close()

        threads = [threading.Thread(target=stream, args=(i,))
                   for i in range(4)]
        for t in threads:
            t.start()
        # Tokens start at once for requests that hold a slot; the other
        # two hear nothing until a slot frees, four seconds later.
        st.wait_until(lambda: sum("head" in r for r in results) == 2,
                      SAFETY_NET_S, "two streams to start")
        self.assertEqual(busy_slots(m.port), 2)
        self.assertEqual(sum("head" in r for r in results), 2)
        for t in threads:
            t.join(SAFETY_NET_S)
            self.assertFalse(t.is_alive())
        for r in results:
            self.assertEqual(r["status"], 200)
            self.assertEqual(r["text"], expected_text(20))
        by_start = sorted(results, key=lambda r: r["head"])
        first_end = min(r["end"] for r in by_start[:2])
        for r in by_start[2:]:
            self.assertGreaterEqual(r["head"], first_end - 0.01)
        self.assertEqual(busy_slots(m.port), 0)


def occupancy_polls(s):
    """{result: count} of sluice_upstream_occupancy_polls_total."""
    text = s.get("/metrics").body.decode()
    return {m.group(1): int(float(m.group(2))) for m in re.finditer(
        r'^sluice_upstream_occupancy_polls_total\{[^}]*result="(\w+)"\} '
        r'(\S+)$', text, re.M)}


class OccupancyFaults(MockTestCase):
    """sluice polls a remote upstream's occupancy (src/fleet/occupancy.c);
    a /metrics that is slow, hung, wrong or missing must cost it neither
    throughput nor its polling (issue 41, item 3): a reading is checked,
    a poll times out, sluice's own count holds meanwhile, and polling
    comes back to /metrics once it answers again."""

    LOAD = ("--slots", str(LOAD_SLOTS), "--token-delay-ms",
            str(LOAD_TOKEN_MS))

    def load(self, s, timeout):
        """Seconds LOAD_REQUESTS plain requests sent at once through s
        take, each answered whole."""
        results = []

        def one():
            try:
                r = st.request(s.port, "POST", "/completion",
                               body=body_for("/completion", LOAD_TOKENS,
                                             False), timeout=timeout)
            except OSError as e:
                results.append(("no answer in %.1f s" % timeout, str(e)))
                return
            results.append((r.status, st.text_of("/completion", r.json())))
        threads = [threading.Thread(target=one)
                   for _ in range(LOAD_REQUESTS)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        self.assertEqual(results, [(200, expected_text(LOAD_TOKENS))] *
                         LOAD_REQUESTS)
        return elapsed

    def assert_no_sanitizer_report(self, s):
        for word in ("runtime error", "Sanitizer"):
            self.assertNotIn(word, s.output())

    def test_a_bad_metrics_answer_costs_no_throughput(self):
        """The same load through sluice to a mock whose /metrics is slow,
        hung, NaN, above the slot count or hex, against one whose /metrics
        is true: about as fast, every poll of the faulty one failed (and
        none was taken for a reading), and /health says so."""
        clean = self.mock(*self.LOAD)
        s = self.sluice("--upstream", clean.url)
        base = self.load(s, SAFETY_NET_S)
        self.assertGreater(occupancy_polls(s)["ok"], 0)
        clean_occupancy = s.upstream()["occupancy"]
        # Twice the slots: more than any reading of 4 slots may say.
        faults = {"slow": ("--occupancy-delay-ms", str(SLOW_METRICS_MS)),
                  "hung": ("--occupancy-delay-ms", str(HUNG_METRICS_MS)),
                  "nan": ("--metrics-value", "NaN"),
                  "huge": ("--metrics-value", "1e6"),
                  "hex": ("--metrics-value", "0x10"),
                  "above the slots": ("--metrics-value",
                                      str(2 * LOAD_SLOTS))}
        for name, args in faults.items():
            with self.subTest(fault=name):
                m = self.mock(*self.LOAD, *args)
                s = self.sluice("--upstream", m.url)
                took = self.load(s, LOAD_SLOWDOWN_MAX * base + 10)
                self.assertLessEqual(took, LOAD_SLOWDOWN_MAX * base,
                                     "%.2f s against %.2f s" % (took, base))
                polls = occupancy_polls(s)
                self.assertEqual(polls["ok"], 0)
                self.assertGreater(polls["failed"], 0)
                occupancy = s.upstream()["occupancy"]
                self.assertEqual(occupancy["source"], "metrics")
                self.assertGreater(occupancy["failed"], 0)
                self.assertEqual(occupancy["others"], 0)
                self.assert_no_sanitizer_report(s)
        self.assertEqual(clean_occupancy["failed"], 0)

    def test_polling_recovers_once_metrics_answers_right(self):
        """Three NaN answers, then true ones: sluice counts its own
        meanwhile, then reads /metrics again."""
        m = self.mock(*self.LOAD, "--metrics-value", "NaN",
                      "--occupancy-faults", "3")
        s = self.sluice("--upstream", m.url)
        self.load(s, SAFETY_NET_S)
        polls = occupancy_polls(s)
        self.assertEqual(polls["failed"], 3)
        self.assertGreater(polls["ok"], 0)
        occupancy = s.upstream()["occupancy"]
        self.assertEqual((occupancy["source"], occupancy["failed"]),
                         ("metrics", 0))
        self.assert_no_sanitizer_report(s)

    def test_a_missing_metrics_is_asked_again(self):
        """/metrics answers 404 (and /slots too, the second time): sluice
        reads /slots (or counts its own), and goes back to /metrics once it
        answers, rather than never asking again."""
        for faults in (1, 2):
            with self.subTest(faults=faults):
                m = self.mock("--slots", "1", "--token-delay-ms",
                              str(LOAD_TOKEN_MS), "--occupancy-status",
                              "404", "--occupancy-faults", str(faults))
                s = self.sluice("--upstream", m.url)
                # One slot, three answers of two seconds: requests wait in
                # sluice's queue, and it polls, for about four seconds.
                results = []

                def one():
                    r = st.request(s.port, "POST", "/completion",
                                   body=body_for("/completion", 100, False),
                                   timeout=SAFETY_NET_S)
                    results.append(r.status)
                threads = [threading.Thread(target=one) for _ in range(3)]
                for t in threads:
                    t.start()
                url = re.escape(m.url)
                s.wait_line(r"upstream %s: /metrics answered 404; reading "
                            r"its occupancy from /slots" % url,
                            timeout=SAFETY_NET_S)
                if faults == 2:
                    s.wait_line(r"upstream %s: neither /metrics nor /slots "
                                r"tells its occupancy \(/slots answered "
                                r"404\)" % url, timeout=SAFETY_NET_S)
                s.wait_line(r"upstream %s: /metrics answers again; reading "
                            r"its occupancy from it$" % url,
                            timeout=SAFETY_NET_S)
                for t in threads:
                    t.join()
                self.assertEqual(results, [200] * 3)
                occupancy = s.upstream()["occupancy"]
                self.assertEqual((occupancy["source"], occupancy["failed"]),
                                 ("metrics", 0))
                self.assertGreater(occupancy_polls(s)["ok"], 0)


class Shutdown(MockTestCase):

    def test_sigterm_with_requests_in_flight(self):
        # One hanging request holds the only slot, one waits for it, and
        # one paced stream is mid-answer on a second mock: SIGTERM must
        # still close everything and exit 0 (checked by the cleanup).
        hang = self.mock("--slots", "1", "--hang-rate", "1")
        paced = self.mock("--token-delay-ms", "100", "--tokens", "1000")
        clients = [st.RawClient(p, timeout=SAFETY_NET_S)
                   for p in (hang.port, hang.port, paced.port)]
        for c in clients:
            c.request("POST", "/completion",
                      body_for("/completion", None, True))
        st.wait_until(lambda: busy_slots(hang.port) == 1, SAFETY_NET_S,
                      "hang")
        self.assertEqual(clients[2].read_head()[0], 200)
        for m in (hang, paced):
            self.assertEqual(m.stop(), 0, m.output())
        for c in clients:
            self.assertTrue(c.at_eof())
            c.close()


if __name__ == "__main__":
    st.main()

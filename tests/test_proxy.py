"""The proxy path against a real llama-server: exact relaying, streaming,
cancellation, back-pressure, limits and faults."""

import concurrent.futures
import json
import os
import signal
import threading
import time

import promcheck
import sluice_test as st

PROMPTS = [
    "Hello world", "The quick brown fox", "Once upon a time", "a",
    "What is 2+2?", "Tell me a story about a dragon", "1 2 3 4 5",
    "zzz", "The river runs north", "Light and stone", "How are you?",
    "List three colours", "fn main() {}", "SELECT * FROM t;",
    "\u00e9t\u00e9 \u00e0 Paris", "The end.",
]
N_TOKENS = 24


def body_for(path, prompt, stream, n=N_TOKENS, **extra):
    common = {"temperature": 0, "seed": 42, "stream": stream, **extra}
    if path == "/completion":
        return {"prompt": prompt, "n_predict": n, **common}
    if path == "/v1/completions":
        return {"prompt": prompt, "max_tokens": n, **common}
    return {"messages": [{"role": "user", "content": prompt}],
            "max_tokens": n, **common}


def is_end(path, event):
    if path == "/completion":
        return isinstance(event, dict) and event.get("stop") is True
    return event == "[DONE]"


def stream_text(port, path, body, headers=None):
    """Streams one request; returns (text, [arrival times], head, events).
    Each HTTP chunk must hold whole SSE events, and the stream must end
    with the endpoint's end marker, then the end of the chunked body."""
    c = st.RawClient(port)
    try:
        c.request("POST", path, body, headers)
        status, head = c.read_head()
        assert status == 200, (status, head, c.buf[:300])
        assert head["content-type"] == "text/event-stream", head
        assert head["cache-control"] == "no-cache", head
        assert head["x-accel-buffering"] == "no", head
        text, times, events, ended = "", [], [], False
        for t, chunk in c.events():
            assert not ended, "event after the end marker"
            event = st.sse_data(chunk)
            events.append(event)
            times.append(t)
            if is_end(path, event):
                ended = True
            if isinstance(event, dict):
                assert "error" not in event, event
                text += st.delta_of(path, event)
        assert ended, "the stream ended without its end marker"
        return text, times, head, events
    finally:
        c.close()


def plain_text(port, path, body, timeout=30):
    r = st.request(port, "POST", path, body=body, timeout=timeout)
    assert r.status == 200, (r.status, r.body[:300])
    return st.text_of(path, r.json())


class Relay(st.RelayTestCase):
    """Answers straight from llama-server and through sluice, compared:
    sluice as it comes (plain answers relayed), and `on`, one that asks for
    plain answers as streams and assembles them (as the default, auto,
    does once a client has left one: Cancellation)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.on = st.Sluice("--upstream", cls.ls.url,
                               "--stream-upstream", "on")
        except BaseException:
            super().tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            assert cls.on.stop() == 0
        finally:
            super().tearDownClass()

    def test_exactness_streamed_and_not(self):
        for path in ("/completion", "/v1/completions", "/v1/chat/completions"):
            for prompt in PROMPTS:
                with self.subTest(path=path, prompt=prompt):
                    direct = plain_text(self.ls.port, path,
                                        body_for(path, prompt, False))
                    self.assertEqual(len(direct) > 0, True)
                    for s in (self.sl, self.on):
                        through = plain_text(s.port, path,
                                             body_for(path, prompt, False))
                        self.assertEqual(through, direct)
                    streamed, _, _, _ = stream_text(
                        self.sl.port, path, body_for(path, prompt, True))
                    self.assertEqual(streamed, direct)

    def test_plain_answers_have_llama_servers_own_shape(self):
        # Assembled from a stream, a plain answer is llama-server's own.
        volatile = {"id", "created", "timings", "id_slot", "tokens_cached"}
        for path in ("/completion", "/v1/completions", "/v1/chat/completions"):
            with self.subTest(path=path):
                body = body_for(path, "shape", False)
                direct = self.ls.post(path, body).json()
                r = self.on.post(path, body)
                self.assertEqual(r.header("Content-Type"),
                                 "application/json; charset=utf-8")
                through = r.json()
                self.assertEqual(set(through), set(direct))
                for k in set(direct) - volatile - {"usage", "choices",
                                                   "generation_settings"}:
                    self.assertEqual(through[k], direct[k], k)
                if path == "/completion":
                    self.assertEqual(through["generation_settings"],
                                     direct["generation_settings"])
                    continue
                self.assertEqual(through["usage"]["completion_tokens"],
                                 direct["usage"]["completion_tokens"])
                self.assertEqual(through["usage"]["prompt_tokens"],
                                 direct["usage"]["prompt_tokens"])
                d, t = direct["choices"][0], through["choices"][0]
                for k in d:
                    self.assertEqual(t[k], d[k], k)

    def test_plain_answers_relayed_as_they_come(self):
        # By default (auto) and with --stream-upstream off, plain answers
        # are relayed, not assembled; their tokens are still counted.
        for args in ((), ("--stream-upstream", "off")):
            with self.subTest(args=args):
                self.assert_relayed(
                    self.sluice("--upstream", self.ls.url, *args))

    def assert_relayed(self, s):
        for path in ("/completion", "/v1/completions", "/v1/chat/completions"):
            with self.subTest(path=path):
                body = body_for(path, "relay", False)
                direct = self.ls.post(path, body)
                r = s.post(path, body)
                self.assertEqual(r.status, 200)
                self.assertEqual(st.text_of(path, r.json()),
                                 st.text_of(path, direct.json()))
                # llama-server's own Content-Type, not sluice's.
                self.assertEqual(r.header("Content-Type"),
                                 direct.header("Content-Type"))
        # Streams are streams either way.
        text, _, _, _ = stream_text(s.port, "/completion",
                                    body_for("/completion", "relay", True))
        self.assertEqual(text, plain_text(self.ls.port, "/completion",
                                          body_for("/completion", "relay",
                                                   False)))
        # Three plain answers and a stream of N_TOKENS tokens each: all
        # counted, all with a time to first token (a plain one from
        # llama-server's timings), but only the stream's gaps between
        # tokens seen, as nothing was assembled from events.
        r = s.get("/metrics")
        self.assertEqual(r.status, 200)
        seen = promcheck.check(r.body.decode())
        self.assertEqual(
            promcheck.value(seen, "sluice_generated_tokens_total"),
            4 * N_TOKENS)
        self.assertEqual(
            promcheck.value(seen, "sluice_time_to_first_token_seconds_count",
                            priority="normal"), 4)
        self.assertEqual(
            promcheck.value(seen, "sluice_inter_token_seconds_count"),
            N_TOKENS - 1)

    def test_upstream_connections_stay_within_slots_plus_two(self):
        # Every connection holds one of llama-server's HTTP threads: the
        # relay's pool and the health check's kept connection together.
        # One llama-server has closed (CLOSE_WAIT, state 08) holds none:
        # it is one sluice left for llama-server to close after a stream,
        # and sluice closes it as soon as it reads that close.
        port = self.ls.port
        pid = self.sl.proc.pid
        # The most seen at once, and their TCP states and local ports
        # then, for a failure to say what they were.
        most = [0, []]
        done = threading.Event()

        def count():
            inodes = set()
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
            # By inode: the kernel writes /proc/net/tcp a page at a time,
            # so a socket can be listed twice while connections come and
            # go (a failure once counted 9 lines for 5 sockets).
            held = {}
            with open("/proc/net/tcp") as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    remote_port = int(fields[2].split(":")[1], 16)
                    if (remote_port == port and fields[9] in inodes
                            and fields[3] != "08"):
                        held[fields[9]] = "%s:%d" % (
                            fields[3], int(fields[1].split(":")[1], 16))
            if len(held) > most[0]:
                most[0], most[1] = len(held), sorted(held.values())

        def sample():
            while not done.is_set():
                count()
                time.sleep(0.005)  # a sampling interval, not a wait

        t = threading.Thread(target=sample)
        t.start()
        # 64 clients at once on 4 slots: the last answers come after 16
        # rounds of generation, however long a busy machine takes for them
        # (the timeout is a safety net, not a measure).
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            list(pool.map(lambda i: plain_text(
                self.sl.port, "/completion",
                body_for("/completion", "pool %d" % i, False, n=4),
                timeout=240), range(128)))
        done.set()
        t.join()
        # With 64 client threads holding the GIL the sampler may get no
        # turn while the answers come; the connections stay pooled after
        # them, so one more look always sees them.
        count()
        self.assertGreaterEqual(most[0], 1)
        # 4 slots, 2 spare; "state:local port" of each (TCP states in hex:
        # 01 established, 02 connecting).
        self.assertLessEqual(most[0], 4 + 2, most[1])

    def test_64_concurrent_requests_each_get_their_own_text(self):
        path = "/completion"
        prompts = ["request number %d says %s" % (i, PROMPTS[i % 16])
                   for i in range(64)]
        expected = [plain_text(self.ls.port, path, body_for(path, p, False))
                    for p in prompts]
        self.assertGreater(len(set(expected)), 48)  # distinct prompts, texts

        def one(i):
            if i % 2:
                return stream_text(self.sl.port, path,
                                   body_for(path, prompts[i], True))[0]
            return plain_text(self.sl.port, path,
                              body_for(path, prompts[i], False))

        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            got = list(pool.map(one, range(64)))
        for i in range(64):
            self.assertEqual(got[i], expected[i], "request %d" % i)

    def test_three_pipelined_requests_answered_in_order(self):
        path = "/completion"
        prompts = PROMPTS[:3]
        expected = [plain_text(self.ls.port, path, body_for(path, p, False))
                    for p in prompts]
        c = st.RawClient(self.sl.port)
        payload = b""
        for p in prompts:
            body = json.dumps(body_for(path, p, False)).encode()
            payload += (b"POST /completion HTTP/1.1\r\nHost: t\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(body)) + body
        c.send(payload)
        for i in range(3):
            status, head, body = c.read_response()
            self.assertEqual(status, 200)
            self.assertEqual(head["connection"], "keep-alive")
            self.assertEqual(json.loads(body)["content"], expected[i])
        # The connection is still good for more.
        c.request("GET", "/health")
        self.assertEqual(c.read_response()[0], 200)
        c.close()

    def test_request_ids(self):
        r = self.sl.post("/completion", body_for("/completion", "x", False),
                         headers={"X-Request-Id": "client-chosen-7"})
        self.assertEqual(r.header("X-Request-Id"), "client-chosen-7")
        r = self.sl.post("/completion", body_for("/completion", "x", False))
        self.assertRegex(r.header("X-Request-Id"), r"^[0-9a-f]{16}$")

    def test_models_and_relayed_upstream_errors(self):
        r = self.sl.get("/v1/models")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["data"][0]["object"], "model")
        # llama-server without --embeddings refuses; its answer is relayed.
        direct = self.ls.post("/v1/embeddings", {"input": "hi"})
        r = self.sl.post("/v1/embeddings", {"input": "hi"})
        self.assertEqual(r.status, direct.status)
        self.assertNotEqual(r.status, 200)
        self.assertEqual(r.json()["error"]["code"], direct.json()["error"]["code"])

    def test_bad_requests_get_openai_shaped_errors(self):
        def error_of(r, status):
            self.assertEqual(r.status, status, r.body)
            err = r.json()["error"]
            self.assertEqual(err["code"], status)
            self.assertIsInstance(err["type"], str)
            return err["message"]

        msg = error_of(self.sl.post("/completion", '{"prompt": "x",\n "n"}'),
                       400)
        # jansson counts the bytes read, the offending "}" included.
        self.assertIn("malformed JSON in the request body at line 2, column "
                      "5 (byte 21)", msg)
        msg = error_of(self.sl.post("/completion", '["prompt"]'), 400)
        self.assertIn("must be a JSON object", msg)
        msg = error_of(self.sl.post("/completion",
                                    {"prompt": "x", "stream": "yes"}), 400)
        self.assertIn('"stream" must be true or false', msg)
        msg = error_of(self.sl.post("/completion",
                                    {"prompt": "x", "n_discard": -5}), 400)
        self.assertIn("n_discard", msg)
        msg = error_of(self.sl.get("/v1/nothing-here"), 404)
        self.assertIn("/v1/nothing-here", msg)
        r = self.sl.get("/v1/chat/completions")
        error_of(r, 405)
        self.assertEqual(r.header("Allow"), "POST")

    def test_size_limits(self):
        c = st.RawClient(self.sl.port)
        c.send("GET /health HTTP/1.1\r\nX-Big: %s\r\n\r\n" % ("a" * 17000))
        status, head, body = c.read_response()
        self.assertEqual(status, 431)
        self.assertTrue(c.at_eof())
        c.close()
        c = st.RawClient(self.sl.port)
        c.send("POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
               % (1024 * 1024 + 1))
        status, _, body = c.read_response()
        self.assertEqual(status, 413)
        self.assertIn(b"body too large", body)
        c.close()
        c = st.RawClient(self.sl.port)
        c.send("POST /completion HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
               "\r\n")
        chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
        try:
            for _ in range(17):
                c.send(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused mid-upload; the answer is still there to read
        status, _, _ = c.read_response()
        self.assertEqual(status, 413)
        c.close()


def timed_events(port, path, body, on_event=None):
    """Streams one request; returns (start, [arrival times], [events]).
    on_event(index, event), if given, runs as each event arrives."""
    c = st.RawClient(port)
    try:
        start = time.monotonic()
        c.request("POST", path, body)
        status, _ = c.read_head()
        assert status == 200, (status, c.buf[:300])
        times, events = [], []
        for t, chunk in c.events():
            times.append(t)
            events.append(st.sse_data(chunk))
            if on_event:
                on_event(len(events) - 1, events[-1])
        return start, times, events
    finally:
        c.close()


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


class Streaming(st.TestCase):

    # The mock's pace: whatever the load on the machine, its tokens come at
    # least this far apart, so a stream of N_PACED lasts seconds.
    TOKEN_MS = 40
    N_PACED = 50

    def test_events_arrive_as_they_are_generated(self):
        m = self.mock_llama_server("--slots", "1",
                                   "--token-delay-ms", str(self.TOKEN_MS))
        s = self.sluice("--upstream", m.url)
        body = body_for("/completion", "Once upon a time", True,
                        n=self.N_PACED)
        # The same generation straight from the mock, for its own pace on
        # this machine now.
        _, direct, direct_events = timed_events(m.port, "/completion", body)
        busy_at_first = []

        def on_event(index, event):
            if index == 0:
                busy_at_first.append(m.busy_slots())

        _, relayed, events = timed_events(s.port, "/completion", body,
                                          on_event)
        texts = ["".join(st.delta_of("/completion", e)
                         for e in evs if isinstance(e, dict))
                 for evs in (direct_events, events)]
        self.assertEqual(texts, [st.mock_text(self.N_PACED)] * 2)
        self.assertIs(events[-1].get("stop"), True)
        self.assertEqual(len(events), len(direct_events))
        # The first event reached the client while the mock was still
        # generating: sluice relays, it does not collect the answer first.
        self.assertEqual(busy_at_first, [1])
        # And the events trickle in at the mock's pace rather than in
        # bursts: a relay that held events back and sent several at once
        # would make most gaps nearly zero.
        gap = median([b - a for a, b in zip(relayed, relayed[1:])])
        direct_gap = median([b - a for a, b in zip(direct, direct[1:])])
        self.assertGreaterEqual(direct_gap, self.TOKEN_MS / 1000 / 2)
        self.assertGreater(gap, direct_gap / 2,
                           "relayed gaps %.3f s, the mock's %.3f s"
                           % (gap, direct_gap))
        self.assertEqual(s.stop(), 0)


# llama-server's log lines for a slot taking a task and letting it go.
LAUNCH = r"launch_slot_: id +(\d+) \| task (\d+) \| processing task"
RELEASE = (r"release: id +(\d+) \| task %s \| stop processing: "
           r"n_tokens = (\d+)")
# What sluice logs (at debug level) when an answer whose client left ends.
LEFT_ENDED = r"%s: the answer its client left ended (\d+) ms after it left"
RELAYED_LEFT = (r"%s: its client left a plain answer llama-server had been "
                r"generating for (\d+) ms")


class Cancellation(st.TestCase):
    """A client that leaves frees llama-server's slot long before its
    generation would have ended, and sluice counts the slot as taken until
    llama-server has let go of it. A stream stops at its next token. A
    plain answer relayed as it comes stops when llama-server next checks
    on its client: when its wait for results passes a second without one,
    anyone's (LLAMA-SERVER.md), which sluice makes room for by sending that
    llama-server nothing new meanwhile. A plain answer sent where a stream
    runs is asked for as a stream."""

    N = 6000  # tokens asked for: far more than the test waits for
    PACE_TOKENS = 20  # tokens timed to learn llama-server's pace
    # How soon the slot of a left answer must be free (issue 28): the
    # second llama-server's check of a plain answer takes, and room.
    FREED_WITHIN_MS = 2000
    # A stream that llama-server finishes though its client left (a
    # resumable one): long enough that a request sent after its client
    # left finds it still being generated, on any machine.
    RUNS_ON = 1000

    def setUp(self):
        super().setUp()
        self.ls = self.llama_server(st.MODEL_SLOW, slots=1, ctx=8192)
        self.s = self.sluice("--upstream", self.ls.url)

    def assert_slot_freed_after(self, leave, ls=None):
        st.assert_slot_freed_after(ls or self.ls, leave, self.N,
                                   self.PACE_TOKENS, 60)

    def assert_stopped(self, ls, s, rid, task, since):
        """The answer of request rid (llama-server's task) was stopped,
        not finished, and its end reached sluice within FREED_WITHIN_MS of
        its client leaving. Watched in the logs, not by asking /slots: a
        poll of llama-server is a result that puts its check off."""
        tokens = int(ls.wait_line(RELEASE % task, timeout=60,
                                  start=since).group(2))
        self.assertLess(tokens, self.N / 2, "the generation ran on")
        ms = int(s.wait_line(LEFT_ENDED % rid, timeout=60).group(1))
        self.assertLessEqual(ms, self.FREED_WITHIN_MS)

    def queued(self, s):
        r = s.get("/metrics")
        self.assertEqual(r.status, 200)
        return promcheck.value(promcheck.check(r.body.decode()),
                               "sluice_queue_depth", priority="normal",
                               model="default")

    def launched(self, ls, since):
        """(line index, slot, task) of the next task llama-server takes
        after line `since`."""
        m = ls.wait_line(LAUNCH, timeout=60, start=since)
        return (ls.lines.index(m.string, since), int(m.group(1)),
                int(m.group(2)))

    def test_client_leaving_mid_stream(self):
        c = st.RawClient(self.s.port)
        c.request("POST", "/completion",
                  body_for("/completion", "go on", True, n=self.N))
        self.assertEqual(c.read_head()[0], 200)
        chunks = c.chunks()
        for _ in range(3):
            next(chunks)
        self.assert_slot_freed_after(c.close)

    def test_client_leaving_while_waiting_for_a_plain_answer(self):
        s = self.sluice("--upstream", self.ls.url, "--stream-upstream", "on")
        c = st.RawClient(s.port)
        c.request("POST", "/completion",
                  body_for("/completion", "go on", False, n=self.N))
        self.assert_slot_freed_after(c.close)

    def test_relayed_plain_answer_left_on_an_idle_upstream_stops(self):
        # Through sluice's own client and through libcurl (which https
        # upstreams take) alike.
        for client in ("native", "curl"):
            with self.subTest(client=client):
                s = self.sluice("--upstream", self.ls.url, "--log-level",
                                "debug", "--upstream-client", client)
                since = len(self.ls.lines)
                c = st.RawClient(s.port)
                c.request("POST", "/completion",
                          body_for("/completion", "go on", False,
                                   n=self.N),
                          headers={"X-Request-Id": "idle-" + client})
                _, _, task = self.launched(self.ls, since)
                # Generating: the tokens decoded so far grow (asked of
                # /slots before the client leaves, never after).
                st.wait_until(
                    lambda: st.decoding(self.ls)[1] > self.PACE_TOKENS, 60,
                    "the generation to be under way")
                c.close()
                # Relayed as it came, not asked for as a stream.
                s.wait_line(RELAYED_LEFT % ("idle-" + client), timeout=60)
                self.assert_stopped(self.ls, s, "idle-" + client, task,
                                    since)
                st.wait_until(lambda: s.health().json()["inflight"] == 0,
                              60, "sluice to count nothing in flight")
                self.assertEqual(s.stop(), 0)

    def test_plain_answer_left_beside_a_stream_stops(self):
        # Beside a stream, llama-server would never check on a plain
        # answer's client (each token is a result): sluice asks for it as
        # a stream, and it stops at once; the stream goes on.
        ls = self.llama_server(st.MODEL_SLOW, slots=2, ctx=8192)
        s = self.sluice("--upstream", ls.url, "--log-level", "debug")
        since = len(ls.lines)
        other = st.RawClient(s.port)
        other.request("POST", "/completion",
                      body_for("/completion", "other", True, n=self.N))
        self.assertEqual(other.read_head()[0], 200)
        other_chunks = other.chunks()
        next(other_chunks)
        at, _, other_task = self.launched(ls, since)
        c = st.RawClient(s.port)
        c.request("POST", "/completion",
                  body_for("/completion", "go on", False, n=self.N),
                  headers={"X-Request-Id": "busy-plain"})
        _, _, task = self.launched(ls, at + 1)
        st.wait_until(lambda: st.decoding(ls)[1] > 0, 60,
                      "the generations to be under way")
        c.close()
        self.assert_stopped(ls, s, "busy-plain", task, since)
        self.assertEqual(s.count_lines(RELAYED_LEFT % "busy-plain"), 0,
                         "it was relayed plain, not asked for as a stream")
        # The stream is still going, its slot never let go.
        for _ in range(3):
            next(other_chunks)
        self.assertEqual(ls.count_lines(RELEASE % other_task), 0)
        other.close()

    def test_left_plain_answer_holds_its_slot_and_quiets_its_upstream(self):
        # Two slots: the next request finds one free in llama-server, yet
        # waits in sluice's queue while the left answer is being stopped,
        # and goes to llama-server only once its slot is let go (its task
        # starts after the release, on the freed slot).
        ls = self.llama_server(st.MODEL_SLOW, slots=2, ctx=8192)
        s = self.sluice("--upstream", ls.url, "--log-level", "debug")
        since = len(ls.lines)
        c = st.RawClient(s.port)
        c.request("POST", "/completion",
                  body_for("/completion", "go on", False, n=self.N),
                  headers={"X-Request-Id": "left"})
        at, _, task = self.launched(ls, since)
        st.wait_until(lambda: st.decoding(ls)[1] > 0, 60,
                      "the generation to be under way")
        c.close()
        s.wait_line(RELAYED_LEFT % "left", timeout=60)
        r = s.post("/completion", body_for("/completion", "next", False, n=4),
                   timeout=60)
        self.assertEqual(r.status, 200, r.body)
        released = ls.lines.index(
            ls.wait_line(RELEASE % task, timeout=60, start=since).string,
            since)
        next_at, _, _ = self.launched(ls, at + 1)
        self.assertGreater(next_at, released,
                           "the next request reached llama-server while "
                           "the left answer was still being generated")
        self.assert_stopped(ls, s, "left", task, since)

    def test_left_plain_answer_that_cost_a_second_streams_the_next(self):
        # A relayed plain answer its client leaves after llama-server
        # spent a second or more on it: plain answers to that upstream are
        # asked for as streams for a while (clients that leave tend to do
        # so again), so the next one left stops at once: watched through
        # /slots, which would keep a relayed one from stopping.
        s = self.sluice("--upstream", self.ls.url, "--log-level", "debug")
        c = st.RawClient(s.port)
        c.request("POST", "/completion",
                  body_for("/completion", "go on", False, n=self.N),
                  headers={"X-Request-Id": "costly"})
        st.wait_until(lambda: st.decoding(self.ls)[1] > 0, 60,
                      "the generation to start")
        # The cost is time: llama-server generates it for over a second.
        time.sleep(1.2)
        c.close()
        ran = int(s.wait_line(RELAYED_LEFT % "costly",
                              timeout=60).group(1))
        self.assertGreaterEqual(ran, 1000)
        s.wait_line(r"a client left a plain answer llama-server was "
                    r"generating: plain answers sent to \S+ are asked for "
                    r"as streams for 60 s", timeout=60)
        st.wait_until(lambda: s.health().json()["inflight"] == 0, 60,
                      "the left answer to end")
        c = st.RawClient(s.port)
        c.request("POST", "/completion",
                  body_for("/completion", "go on", False, n=self.N))
        self.assert_slot_freed_after(c.close)

    def test_a_resumable_stream_goes_on_when_its_client_leaves(self):
        # llama-server keeps a stream asked for with X-Conversation-Id and
        # finishes it when its client leaves (measured on 0.7.0), for GET
        # /v1/stream to replay. So sluice reads it to its end, keeping its
        # slot counted until then, as it does a plain answer left by its
        # client: the next request waits in sluice's queue meanwhile.
        # Its bytes after the leave count as the answer's: an idle
        # timeout far shorter than the rest of the generation does not
        # cut it (nor free its slot early).
        s = self.sluice("--upstream", self.ls.url, "--queue-timeout", "3600",
                        "--upstream-idle-timeout", "1")
        c = st.RawClient(s.port)
        c.request("POST", "/completion",
                  body_for("/completion", "go on", True, n=self.RUNS_ON),
                  headers={"X-Conversation-Id": "left-1"})
        self.assertEqual(c.read_head()[0], 200)
        next(c.chunks())
        c.close()
        done = {}
        b = threading.Thread(target=lambda: done.update(r=s.post(
            "/completion", body_for("/completion", "next", False, n=4),
            timeout=600)))
        b.start()
        try:
            st.wait_until(
                lambda: self.queued(s) == 1 or not st.slot_busy(self.ls), 60,
                "the next request to be queued")
            self.assertTrue(st.slot_busy(self.ls),
                            "the left stream ended before the next request "
                            "was queued: RUNS_ON is too small")
            self.assertEqual(self.queued(s), 1)
        finally:
            b.join(600)
        self.assertEqual(done["r"].status, 200)
        # The whole stream, kept: its last event says it stopped.
        r = s.get("/v1/stream?conv_id=left-1", timeout=600)
        self.assertEqual(r.status, 200)
        last = json.loads(r.body.rstrip(b"\n").rsplit(b"\n\n", 1)[1][6:])
        self.assertEqual((last["stop"], last["tokens_predicted"]),
                         (True, self.RUNS_ON))
        st.wait_until(lambda: s.health().json()["inflight"] == 0, 60,
                      "sluice to count nothing in flight")
        self.assertEqual(s.count_lines(r"silent for|no answer within"), 0,
                         s.output())

    def test_client_leaving_a_paused_stream(self):
        # A client that stops reading has its stream paused (back-pressure)
        # before it leaves: through libcurl, whose paused transfer's
        # socket is not watched, as through sluice's own client, the
        # upstream is told and the slot freed.
        for client in ("native", "curl"):
            with self.subTest(client=client):
                s = self.sluice("--upstream", self.ls.url, "--log-level",
                                "debug", "--upstream-client", client)
                rid = "paused-" + client
                c = st.RawClient(s.port, rcvbuf=4096)
                c.request("POST", "/completion",
                          body_for("/completion", "go on", True, n=self.N,
                                   n_probs=50),
                          headers={"X-Request-Id": rid})
                s.wait_line(r"%s: its client reads slower than the "
                            r"upstream writes: reading paused" % rid,
                            timeout=60)
                self.assert_slot_freed_after(c.close)
                s.wait_line(r"%s: client left; the upstream is told" % rid,
                            timeout=60)
                self.assertEqual(s.stop(), 0)


class SlowReader(st.TestCase):

    def test_memory_stays_bounded(self):
        ls = self.llama_server(st.MODEL_TINY, slots=1, ctx=16384)
        # Under AddressSanitizer freed memory sits in a quarantine (up to
        # 256 MB) and would count as growth: measure live memory instead.
        asan = os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0"
        s = self.sluice("--upstream", ls.url, "--send-timeout", "120",
                        env={"ASAN_OPTIONS": asan})
        warm = st.RawClient(s.port)
        warm.request("POST", "/completion",
                      body_for("/completion", "warm", True, n=50, n_probs=10))
        warm.read_head()
        for _ in warm.chunks():
            pass
        warm.close()
        baseline = st.vm_hwm_kib(s.proc.pid)

        # About 12 MB of events (n_probs makes each ~1 KB), read at a few
        # bytes per second through a 4 KiB receive buffer.
        c = st.RawClient(s.port, rcvbuf=4096)
        c.request("POST", "/completion",
                  body_for("/completion", "slow", True, n=12000, n_probs=10))
        got = 0
        last_decoded, still_since = -1, time.monotonic()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            got += len(c.sock.recv(16))
            time.sleep(0.25)  # the client's pace: this is the slow reader
            slots = st.request(ls.port, "GET", "/slots").json()
            decoded = slots[0]["next_token"][0]["n_decoded"]
            if not slots[0]["is_processing"]:
                break  # llama-server produced everything
            if decoded != last_decoded:
                last_decoded, still_since = decoded, time.monotonic()
            elif time.monotonic() - still_since > 3:
                break  # llama-server itself is held back
        grown = st.vm_hwm_kib(s.proc.pid) - baseline
        self.assertLess(got, 4096)
        # Without back-pressure sluice would hold most of the ~12 MB.
        self.assertLess(grown, 3 * 1024, "sluice grew by %d KiB" % grown)
        c.close()
        self.assertEqual(s.stop(), 0)


    def test_client_that_stops_reading_is_dropped(self):
        # --send-timeout: no bytes taken for 2 s ends the request, and
        # llama-server's slot with it.
        ls = self.llama_server(st.MODEL_TINY, slots=1, ctx=16384)
        s = self.sluice("--upstream", ls.url, "--send-timeout", "2")
        c = st.RawClient(s.port, rcvbuf=4096)
        # n_probs 50 makes each event ~4 KB, so few tokens fill the socket
        # buffers even when a busy machine's llama-server is slow.
        c.request("POST", "/completion",
                  body_for("/completion", "stuck", True, n=12000, n_probs=50))
        started = time.monotonic()
        # The client reads nothing (reading would be progress): sluice
        # drops it once its backlog has not moved for 2 s. How soon that
        # is depends on how fast llama-server fills the socket buffers, so
        # what is checked is that the request ended cancelled, before its
        # ~46 MB were generated; the deadline is only a safety net.
        end = s.wait_line(r"path=/completion status=200 .*outcome=(\w+)",
                          240)
        self.assertEqual(end.group(1), "cancelled", s.output())
        self.assertGreaterEqual(time.monotonic() - started, 2)
        st.wait_until(lambda: not st.slot_busy(ls), 30, "the slot to go idle")
        self.assertTrue(c.at_eof(5))  # what was sent, then the close
        c.close()


# How far sluice's event-loop clock may lag the tests' own (see its use).
LOOP_CLOCK_SLACK = 0.01


class HeaderTimeout(st.TestCase):

    HEADER_TIMEOUT = 2

    def test_dripping_client_is_cut_off_while_others_are_served(self):
        s = self.sluice("--model", st.MODEL_TINY,
                        "--header-timeout", str(self.HEADER_TIMEOUT))
        head = b"GET /health HTTP/1.1\r\nX-Slow: yes\r\n\r\n"
        c = st.RawClient(s.port)
        start = time.monotonic()
        sent, next_byte_at, served, cut = 0, start, 0, False
        # One thread plays both parts: the dripping client sends a byte a
        # second (its pace, not a wait), and between its bytes other
        # requests are served. Each one counts only if the dripping client
        # was still connected after its answer came, so it was served while
        # that client held its connection open.
        while not cut and sent < len(head):
            if time.monotonic() >= next_byte_at:
                try:
                    c.send(head[sent:sent + 1])
                    sent += 1
                except (BrokenPipeError, ConnectionResetError):
                    pass
                next_byte_at = time.monotonic() + 1
            r = s.post("/completion", body_for("/completion", "hi", False,
                                               n=4))
            self.assertEqual(r.status, 200)
            cut = c.at_eof(0)
            served += not cut
        took = time.monotonic() - start
        cut = cut or c.at_eof(5)
        self.assertTrue(cut, "the dripping client sent its whole head")
        self.assertIn(b"HTTP/1.1 408 Request Timeout", c.buf)
        c.close()
        self.assertGreater(served, 0)
        # Not before the timeout, and counted over the whole head, not per
        # byte: a timer restarted by each byte would never have fired.
        # libuv's timers run on a millisecond clock read coarsely
        # (CLOCK_MONOTONIC_COARSE, a few ms behind this test's clock), so
        # "not before" holds to within LOOP_CLOCK_SLACK.
        self.assertGreaterEqual(took, self.HEADER_TIMEOUT - LOOP_CLOCK_SLACK)
        self.assertLess(sent, len(head))


class Faults(st.TestCase):

    def test_upstream_down_gives_503(self):
        s = self.sluice("--upstream", "http://127.0.0.1:%d" % st.free_port(),
                        wait_ready=False)
        st.wait_until(lambda: s.upstream()["state"] == "down", 10, "down")
        r = s.post("/completion", {"prompt": "x"})
        self.assertEqual(r.status, 503)
        self.assertEqual(r.json()["error"]["type"], "unavailable_error")
        self.assertIn("no upstream is ready", r.json()["error"]["message"])

    def test_upstream_starting_queues_what_needs_a_slot(self):
        fake = os.path.join(self.tmp, "fake-llama-server")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\nexec sleep 600\n")
        os.chmod(fake, 0o755)
        s = self.sluice("--model", st.MODEL_TINY, "--llama-server", fake,
                        "--queue-timeout", "1", wait_ready=False)
        # What skips the queue is told to come back.
        r = s.post("/tokenize", {"content": "x"})
        self.assertEqual(r.status, 503)
        self.assertIn("llama-server is starting", r.json()["error"]["message"])
        self.assertEqual(r.header("Retry-After"), "1")
        # What needs a slot waits for the start, here in vain.
        r = s.post("/v1/chat/completions",
                   {"messages": [{"role": "user", "content": "x"}]})
        self.assertEqual(r.status, 503)
        self.assertIn("--queue-timeout", r.json()["error"]["message"])
        self.assertGreaterEqual(int(r.header("X-Queue-Ms")), 1000)

    def test_llama_server_killed_mid_stream(self):
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1")
        pid = s.upstream()["pid"]
        c = st.RawClient(s.port)
        c.request("POST", "/v1/completions",
                  body_for("/v1/completions", "go", True, n=5000))
        self.assertEqual(c.read_head()[0], 200)
        events = []
        for _, chunk in c.events():  # ends at the terminating chunk
            events.append(st.sse_data(chunk))
            if len(events) == 5:
                os.kill(pid, signal.SIGKILL)
        self.assertGreater(len(events), 5)
        last = events[-1]
        self.assertIn("error", last)
        self.assertEqual(last["error"]["code"], 502)
        self.assertEqual(last["error"]["type"], "server_error")
        self.assertNotIn("[DONE]", events)
        c.close()


if __name__ == "__main__":
    st.main()

"""Nothing lost: requests survive a llama-server crash, refused clients are
told when to come back (each its own time), upstream heads that cannot be
relayed become 502, and text holding NUL characters arrives whole."""

import json
import math
import os
import signal
import socket
import threading
import time

import sluice_test as st
from test_mock_faults import (MockTestCase, PATHS, body_for,
                              expected_text, stream_events)

N_CRASH = 200  # tokens per request in the crash test: still in flight

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240


def crash_body(path, stream):
    body = {"temperature": 0, "seed": 42, "stream": stream}
    if path == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": "go"}]
    else:
        body["prompt"] = "go"
    body["n_predict" if path == "/completion" else "max_tokens"] = N_CRASH
    return body


def tokens_of(path, doc):
    if path == "/completion":
        return doc["tokens_predicted"]
    return doc["usage"]["completion_tokens"]


class CrashSurvival(st.TestCase):

    def plain(self, port, path, out):
        try:
            r = st.request(port, "POST", path, crash_body(path, False),
                           timeout=SAFETY_NET_S)
            out["status"] = r.status
            out["body"] = r.body
        except Exception as e:  # reported by the assertions below
            out["exception"] = repr(e)

    def stream(self, port, path, out, on_event=None):
        """A streamed request; on_event() is called at each event."""
        c = st.RawClient(port, timeout=SAFETY_NET_S)
        try:
            c.request("POST", path, crash_body(path, True))
            out["status"], _ = c.read_head()
            # events() ends only at the terminating chunk: a cut stream
            # raises EOFError instead.
            events = []
            for _, e in c.events():
                events.append(st.sse_data(e))
                if on_event:
                    on_event()
            out["events"] = events
        except Exception as e:
            out["exception"] = repr(e)
        finally:
            c.close()

    def gated_llama_server(self):
        """(a stand-in for llama-server, its gate): a script that runs the
        real one, except that while the gate (a FIFO) exists a launch
        first waits for the test to open it, so that a restart lasts as
        long as the test needs."""
        gate = os.path.join(self.tmp, "gate")
        script = os.path.join(self.tmp, "llama-server")
        with open(script, "w") as f:
            f.write('#!/bin/sh\nif [ -p "%s" ]; then read _ < "%s"; fi\n'
                    'exec "%s" "$@"\n' % (gate, gate,
                                           st.llama_server_path()))
        os.chmod(script, 0o755)
        return script, gate

    def test_queued_requests_survive_a_crash(self):
        # A long queue timeout: on a loaded machine the 33 requests after
        # the restart may take a while, and none should expire.
        script, gate = self.gated_llama_server()
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "8",
                        "--queue-timeout", "300", "--llama-server", script)
        # The text each endpoint gives, for the exactness checks.
        want = {}
        for path in PATHS:
            r = s.post(path, crash_body(path, False), timeout=SAFETY_NET_S)
            self.assertEqual(r.status, 200, r.body[:300])
            want[path] = st.text_of(path, r.json())
        pid = s.upstream()["pid"]
        os.mkfifo(gate)  # the restart waits for the test

        # Kill llama-server while its 8 slots are busy and the rest wait
        # in sluice's queue. Left to run, it may answer them all before a
        # busy test sees that moment (8 answers take about a second), so
        # it is stopped while the requests come, and killed by the first
        # stream's first event once it runs again: mid-generation, with
        # the queue still full.
        crashed = threading.Event()
        crashing = threading.Lock()

        def crash():
            with crashing:
                if not crashed.is_set():
                    os.kill(pid, signal.SIGKILL)
                    crashed.set()

        os.kill(pid, signal.SIGSTOP)
        jobs = []
        for i in range(32):
            path = PATHS[i % len(PATHS)]
            out = {"path": path, "stream": i % 2 == 1}
            if out["stream"]:
                target, args = self.stream, (s.port, path, out, crash)
            else:
                target, args = self.plain, (s.port, path, out)
            jobs.append((out, threading.Thread(target=target, args=args,
                                               daemon=True)))
        for _, t in jobs:
            t.start()
        st.wait_until(lambda: (lambda h: h["inflight"] == 8
                               and h["queued"] == 24)(s.health().json()),
                      SAFETY_NET_S, "8 requests in flight and 24 queued")
        os.kill(pid, signal.SIGCONT)
        self.assertTrue(crashed.wait(SAFETY_NET_S), "no stream began")
        # The restart waits at the gate: what was in flight has failed
        # (cut, or back in the queue), and the queue holds still.
        st.wait_until(lambda: (lambda u: u["state"] == "restarting"
                               and u["inflight"] == 0)(s.upstream()),
                      SAFETY_NET_S, "the restart")
        queued = s.health().json()["queued"]
        # Meanwhile a new request waits for the restart instead of 503.
        late = {}
        late_thread = threading.Thread(
            target=self.plain, args=(s.port, "/completion", late),
            daemon=True)
        late_thread.start()
        st.wait_until(lambda: s.health().json()["queued"] == queued + 1,
                      SAFETY_NET_S, "the new request in the queue")
        self.assertNotIn("status", late)
        self.assertEqual(s.upstream()["state"], "restarting")

        def open_gate():
            try:
                fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: the relaunch is not at the gate yet
                return False
            os.write(fd, b"go\n")
            os.close(fd)
            return True
        st.wait_until(open_gate, SAFETY_NET_S, "the relaunch at the gate")

        deadline = time.monotonic() + SAFETY_NET_S
        late_thread.join(deadline - time.monotonic())
        self.assertEqual(late.get("status"), 200, late)
        self.assertEqual(json.loads(late["body"])["content"],
                         want["/completion"])
        for _, t in jobs:
            t.join(max(0, deadline - time.monotonic()))
            self.assertFalse(t.is_alive(), "a request hangs")
        plain_ok = streams_ok = streams_failed = 0
        for out, _ in jobs:
            path = out["path"]
            self.assertNotIn("exception", out, out)
            self.assertEqual(out["status"], 200, out)
            if not out["stream"]:
                doc = json.loads(out["body"])
                self.assertEqual(st.text_of(path, doc), want[path], path)
                self.assertEqual(tokens_of(path, doc), N_CRASH)
                plain_ok += 1
                continue
            events = out["events"]
            last = events[-1]
            if isinstance(last, dict) and "error" in last:
                # Cut by the crash: an error event, then a clean end.
                self.assertEqual(last["error"]["code"], 502, last)
                self.assertEqual(last["error"]["type"], "server_error")
                streams_failed += 1
            else:
                if path == "/completion":
                    self.assertTrue(last["stop"], last)
                else:
                    self.assertEqual(last, "[DONE]")
                self.assertEqual("".join(st.delta_of(path, e)
                                         for e in events
                                         if isinstance(e, dict)),
                                 want[path])
                streams_ok += 1
        self.assertEqual(plain_ok, 16)
        self.assertEqual(streams_ok + streams_failed, 16)
        # Only a stream that had started may fail: at most the 8 that
        # held a slot.
        self.assertLessEqual(streams_failed, 8)
        s.wait_line(r"queued to be sent again", SAFETY_NET_S)
        self.assertEqual(s.upstream()["restarts"], 1)

    def test_queue_timeout_while_the_upstream_is_gone(self):
        # A remote upstream that vanishes: what was queued waits for it,
        # then gets 503 with Retry-After when its queue time is up.
        m = MockUpstream()
        self.addCleanup(m.close)
        s = self.sluice("--upstream", m.url, "--queue-timeout", "1.5",
                        "--health-interval", "30")
        r = s.post("/completion", {"prompt": "x", "n_predict": 1},
                   timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200, r.body)
        m.refuse = True  # every connection is closed at once
        t0 = time.monotonic()
        r = s.post("/completion", {"prompt": "x", "n_predict": 1},
                   timeout=SAFETY_NET_S)
        waited = time.monotonic() - t0
        self.assertEqual(r.status, 503, r.body)
        self.assertEqual(r.json()["error"]["type"], "unavailable_error")
        self.assertIn("--queue-timeout", r.json()["error"]["message"])
        ms = int(r.header("retry-after-ms"))
        self.assertGreater(ms, 0)
        self.assertEqual(int(r.header("Retry-After")),
                         max(1, math.ceil(ms / 1000)))
        self.assertGreaterEqual(waited, 1.4)
        self.assertTrue(s.upstream().get("suspect"), s.upstream())
        # Sent once, then (the upstream suspect, its probe failing) held.
        self.assertEqual(m.posts, 2)


class MockUpstream:
    """A tiny llama-server stand-in on a raw socket, whose generation
    answer is whatever bytes a test sets: for heads sluice must refuse."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.answer = None  # raw bytes for POSTs; None: a tiny answer
        self.refuse = False  # close POST connections with no answer
        self.posts = 0
        self.closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self):
        self.closed = True
        self.sock.close()

    def _serve(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,),
                             daemon=True).start()

    def _handle(self, conn):
        with conn:
            conn.settimeout(SAFETY_NET_S)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, rest = data.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split()[:2]
                length = 0
                for line in lines[1:]:
                    k, v = line.split(":", 1)
                    if k.strip().lower() == "content-length":
                        length = int(v)
                while len(rest) < length:
                    rest += conn.recv(65536)
                if method == "POST":
                    self.posts += 1
                    if self.refuse:
                        return
                    conn.sendall(self.answer or self._json(
                        {"content": "hi", "stop": True}))
                elif path == "/props":
                    conn.sendall(self._json({"total_slots": 1}))
                elif self.refuse:
                    return
                else:
                    conn.sendall(self._json({"status": "ok"}))
            except OSError:
                return

    @staticmethod
    def _json(doc, status=200, ctype=b"application/json"):
        body = json.dumps(doc).encode()
        return (b"HTTP/1.1 %d OK\r\nContent-Type: %s\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (status, ctype, len(body), body))


class UpstreamHead(st.TestCase):
    """The upstream's status and Content-Type go into the client's head:
    only values that fit there are relayed."""

    def test_bad_status_or_content_type_gives_502(self):
        m = MockUpstream()
        self.addCleanup(m.close)
        s = self.sluice("--upstream", m.url, "--health-interval", "30")
        body = {"prompt": "x", "n_predict": 1}
        # A sane head is relayed as it came.
        m.answer = MockUpstream._json({"content": "ok"}, status=404,
                                      ctype=b"application/json; x=1")
        r = s.post("/completion", body)
        self.assertEqual(r.status, 404)
        self.assertEqual(r.header("Content-Type"), "application/json; x=1")
        self.assertEqual(r.json(), {"content": "ok"})
        cases = {
            "a long Content-Type": MockUpstream._json(
                {"content": "x"}, ctype=b"application/json; p=" + b"a" * 300),
            "a control byte": MockUpstream._json(
                {"content": "x"}, ctype=b"application/json;\x01x=1"),
            "a byte above 0x7e": MockUpstream._json(
                {"content": "x"}, ctype=b"application/json; x=\xff"),
            "status 700": MockUpstream._json({"content": "x"}, status=700),
        }
        for what, answer in cases.items():
            with self.subTest(what):
                m.answer = answer
                c = st.RawClient(s.port, timeout=SAFETY_NET_S)
                c.request("POST", "/completion", body)
                status, head, raw = c.read_response()
                c.close()
                self.assertEqual(status, 502, (head, raw))
                err = json.loads(raw)["error"]
                self.assertEqual(err["code"], 502)
                self.assertEqual(err["type"], "server_error")
                self.assertIn("upstream answered with", err["message"])
                self.assertEqual(head["content-type"], "application/json; charset=utf-8")


class RetryAfter(MockTestCase):

    def test_refused_clients_are_spread_out(self):
        # One slot, one place in the queue, each answer ~0.2 s.
        m = self.mock("--slots", "1", "--tokens", "5",
                      "--token-delay-ms", "40")
        s = self.sluice("--upstream", m.url, "--max-queue", "1")
        body = body_for("/completion", None, False)
        # A little history, so that sluice has a drain rate to go by.
        warm = [threading.Thread(target=s.post, args=("/completion", body),
                                 kwargs={"timeout": SAFETY_NET_S})
                for _ in range(3)]
        for t in warm:
            t.start()
        for t in warm:
            t.join(SAFETY_NET_S)
        n = 20
        first = [None] * n
        final = [None] * n
        go = threading.Barrier(n)

        def client(i):
            go.wait()
            for attempt in range(3):  # the OpenAI SDK retries twice
                r = s.post("/completion", body, timeout=SAFETY_NET_S)
                if attempt == 0:
                    first[i] = r
                if r.status != 429:
                    break
                time.sleep(int(r.header("retry-after-ms")) / 1000)
            final[i] = r

        threads = [threading.Thread(target=client, args=(i,))
                   for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(SAFETY_NET_S)
            self.assertFalse(t.is_alive())
        refused = [r for r in first if r.status == 429]
        # Only one can run and one wait: most of a burst is refused.
        self.assertGreaterEqual(len(refused), n // 2)
        waits = []
        for r in refused:
            ms = int(r.header("retry-after-ms"))
            self.assertEqual(int(r.header("Retry-After")),
                             max(1, math.ceil(ms / 1000)))
            self.assertIn("retry in", r.json()["error"]["message"])
            waits.append(ms)
        # Each refused client has its own time to come back, spaced by
        # at least the smallest step sluice uses.
        waits.sort()
        self.assertEqual(len(set(waits)), len(waits), waits)
        for a, b in zip(waits, waits[1:]):
            self.assertGreaterEqual(b - a, 10, waits)
        ok = sum(1 for r in final if r.status == 200)
        for r in final:
            if r.status == 200:
                self.assertEqual(r.json()["content"], expected_text(5))
        self.assertGreaterEqual(ok, n * 3 // 4,
                                "%d of %d succeeded; waits %s"
                                % (ok, n, waits))


class Nul(MockTestCase):

    def test_text_with_nul_arrives_whole(self):
        m = self.mock("--tokens", "4", "--nul-pieces", "1")
        s = self.sluice("--upstream", m.url)
        want = "".join(" tok%d\x00" % k for k in range(4))
        for path in PATHS:
            with self.subTest(path=path, stream=False):
                r = s.post(path, body_for(path, None, False))
                self.assertEqual(r.status, 200, r.body[:300])
                doc = r.json()
                self.assertEqual(st.text_of(path, doc), want)
                self.assertEqual(doc["usage"]["completion_tokens"]
                                 if path != "/completion"
                                 else doc["tokens_predicted"], 4)
            with self.subTest(path=path, stream=True):
                status, events = stream_events(s.port, path)
                self.assertEqual(status, 200)
                self.assertEqual("".join(st.delta_of(path, e)
                                         for e in events
                                         if isinstance(e, dict)), want)
        r = s.post("/generate", {"prompt": "x", "max_tokens": 4})
        self.assertEqual(r.status, 200, r.body[:300])
        self.assertEqual(r.json()["text"], want)
        r = s.post("/infer", {"query": "x"})
        self.assertEqual(r.status, 200, r.body[:300])
        text = r.json()["response"]
        n = text.count("\x00")
        self.assertGreater(n, 0)
        self.assertEqual(text, "".join(" tok%d\x00" % k for k in range(n)))

    def test_prompt_of_token_ids_as_llama_server_answers(self):
        # The final event echoes the prompt, whose detokenized ids hold a
        # NUL on the demo model.
        direct = self.llama_server(st.MODEL_TINY)
        s = self.sluice("--model", st.MODEL_TINY)
        body = {"prompt": [1, 2, 3], "n_predict": 4, "temperature": 0}
        want = direct.post("/completion", body)
        self.assertEqual(want.status, 200)
        r = s.post("/completion", body)
        self.assertEqual(r.status, 200, r.body[:300])
        got = r.json()
        self.assertEqual(got["content"], want.json()["content"])
        self.assertEqual(got["tokens_predicted"], 4)
        self.assertIn("\x00", got["prompt"])


if __name__ == "__main__":
    st.main()

"""Hostile and unusual clients against a real sluice (in front of the mock
llama-server): a flood of pipelined requests from clients that never read,
bodies nested far too deep, HEAD on GET endpoints, absolute-form targets, a
smuggling attempt."""

import os
import re
import select
import socket
import statistics
import threading
import time

import sluice_test as st
from test_mock_faults import Mock

# Pipelined by each flooding connection, as in the attack that was seen.
FLOOD_REQUESTS = 10000
FLOOD_CONNECTIONS = 4
# What sluice may grow by while they flood: each connection holds at most
# its read-ahead and about one answer past the pipeline bound (64 KiB each),
# far below this; without the bound it grew by hundreds of MB.
GROWTH_LIMIT_KIB = 64 * 1024

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240

# --max-body's default: the deep bodies are as large as a client may send.
MAX_BODY = 1 << 20
# How much later than before the attack /health may be answered while deep
# bodies arrive (the margin). Before the nesting bound one such
# body held sluice's loop for seconds (200 KB) to minutes (1 MiB).
HEALTH_MARGIN_S = 0.050
# The slowest single /health answer allowed during the attack, beyond the
# slowest before it: far above a busy machine's hiccups, far below a stall.
HEALTH_CEILING_S = 1.0
# How long one /health probe may wait before the test gives up on it: far
# past the ceiling, so a probe that waits this long has failed already.
PROBE_TIMEOUT_S = 30
# Nesting sluice refuses past (json_scan.h, SL_JSCAN_DEPTH_MAX).
DEPTH_MAX = 64


def answered(port):
    """Requests sluice has answered, from its own counter."""
    text = st.request(port, "GET", "/metrics",
                      timeout=SAFETY_NET_S).body.decode()
    return sum(int(v) for v in
               re.findall(r"^sluice_requests_total\{[^}]*\} (\d+)$", text,
                          re.M))


def nest(before, opening, inner, closing, after, size):
    """before, then as many levels of opening ... closing around inner as
    fit in size bytes, then after."""
    levels = (size - len(before) - len(inner) - len(after)) // (
        len(opening) + len(closing))
    return before + opening * levels + inner + closing * levels + after


def deep_bodies():
    """Ten (path, body) nested far past DEPTH_MAX, no larger than MAX_BODY:
    the shapes that held sluice's loop, on relayed and native endpoints."""
    chat = '{"messages":[{"role":"user","content":"hi"}],"x":'
    side_by_side = ",".join(["[" * 2040 + "]" * 2040] * 250)
    bodies = [
        ("/v1/chat/completions", nest(chat, "[", "1", "]", "}", MAX_BODY)),
        ("/v1/chat/completions", '{"x":' + "[" * 100000 + "]" * 100000 +
         "}"),
        ("/v1/completions", '{"prompt":"hi","x":[' + side_by_side + "]}"),
        ("/completion", nest("", '{"a":', "1", "}", "", MAX_BODY)),
        ("/v1/chat/completions",
         nest('{"messages":', '[{"content":', '"hi"', "}]", "}", MAX_BODY)),
        ("/generate", nest('{"prompt":"hi","x":', "[", "1", "]", "}",
                           MAX_BODY)),
        ("/v1/embeddings", nest('{"input":', "[", '"hi"', "]", "}",
                                MAX_BODY // 2)),
        # Brackets in a string count for nothing: past them, the nest.
        ("/v1/completions", nest('{"prompt":"' + "[{" * 1000 + '","x":',
                                 "[", "1", "]", "}", MAX_BODY)),
        # A quote inside a number starts no string for jsmn: the nest
        # after it is no string's text.
        ("/completion", nest('{"prompt":"hi","x":[1e400"],"y":', "[", "1",
                             "]", '"}', MAX_BODY)),
        ("/v1/chat/completions",
         nest(chat, "[{},", "1", "]", "}", MAX_BODY)),
    ]
    for _, body in bodies:
        assert len(body) <= MAX_BODY, len(body)
    return bodies


def health_latency(client):
    """Seconds from asking /health on client's connection to the whole
    answer."""
    start = time.monotonic()
    client.request("GET", "/health")
    status, _, _ = client.read_response()
    assert status == 200, status
    return time.monotonic() - start


def send_until_stopped(sock, data):
    """Sends data without ever reading; returns once all of it is sent or
    the socket stays unwritable for a second (the server stopped
    reading)."""
    sock.setblocking(False)
    sent = 0
    while sent < len(data):
        try:
            sent += sock.send(data[sent:])
        except BlockingIOError:
            _, writable, _ = select.select([], [sock], [], 1.0)
            if not writable:
                break
    return sent


class Hostile(st.TestCase):

    def setUp(self):
        super().setUp()
        self.mock = Mock()
        self.addCleanup(self.mock.stop)

    def start(self, **kw):
        return self.sluice("--upstream", self.mock.url, **kw)

    def test_pipelined_flood_without_reading_is_bounded(self):
        # Under AddressSanitizer freed memory sits in a quarantine and
        # would count as growth: measure live memory instead.
        asan = os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0"
        s = self.start(env={"ASAN_OPTIONS": asan})
        for _ in range(3):  # warm up: the /metrics text, the allocator
            answered(s.port)
        baseline = st.vm_hwm_kib(s.proc.pid)

        flood = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * FLOOD_REQUESTS
        socks = []
        for _ in range(FLOOD_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", s.port))
            socks.append(sock)
            send_until_stopped(sock, flood)

        # Another client is served meanwhile.
        r = st.request(s.port, "GET", "/health", timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200)

        # Wait until the flood stops being answered: between two readings
        # only our own reading was answered.
        last = [answered(s.port)]

        def settled():
            time.sleep(0.5)
            now = answered(s.port)
            done = now - last[0] <= 1
            last[0] = now
            return done
        st.wait_until(settled, SAFETY_NET_S,
                      "sluice to stop answering the flood")
        flooded = last[0] - 3
        grown = st.vm_hwm_kib(s.proc.pid) - baseline
        said = "sluice grew by %d KiB answering %d requests" % (grown,
                                                                flooded)
        self.assertLess(grown, GROWTH_LIMIT_KIB, said)
        # It stopped well short of answering everything it was sent.
        self.assertLess(flooded, FLOOD_CONNECTIONS * FLOOD_REQUESTS / 2,
                        said)
        self.assertEqual(s.health().status, 200)
        for sock in socks:
            sock.close()
        self.assertEqual(s.stop(), 0)

    def test_deep_bodies_leave_health_answered(self):
        s = self.start()
        bodies = deep_bodies()
        probe = st.RawClient(s.port, timeout=PROBE_TIMEOUT_S)
        before = [health_latency(probe) for _ in range(50)]

        answers = []

        def attack(path, body):
            answers.append((path, st.request(
                s.port, "POST", path, body=body,
                headers={"Content-Type": "application/json"},
                timeout=SAFETY_NET_S)))
        # Daemons: against a sluice that stalls they would outlive the
        # test.
        threads = [threading.Thread(target=attack, args=b, daemon=True)
                   for b in bodies]
        for t in threads:
            t.start()
        # /health asked for over and over until every deep body has its
        # answer, so that the probes span the whole attack.
        during = [health_latency(probe)]
        while any(t.is_alive() for t in threads):
            during.append(health_latency(probe))
        for t in threads:
            t.join()
        probe.close()

        self.assertEqual(len(answers), len(bodies))
        for path, r in answers:
            self.assertEqual(r.status, 400, (path, r.body[:200]))
            error = r.json()["error"]
            self.assertEqual(error["type"], "invalid_request_error")
            self.assertEqual(error["message"],
                             "the request body nests objects and arrays "
                             "deeper than %d levels" % DEPTH_MAX)
        # Compared with the same sluice just before, not with a figure: a
        # busy machine (or AddressSanitizer) slows both alike. The median
        # holds the 50 ms, which one stall of sluice's loop per
        # body would break for most probes; every single answer stays
        # within a ceiling that a machine's hiccup does not reach and a
        # stall does.
        said = "/health before: median %.1f ms, max %.1f; during %d " \
               "probes: median %.1f ms, max %.1f" % (
                   statistics.median(before) * 1e3, max(before) * 1e3,
                   len(during), statistics.median(during) * 1e3,
                   max(during) * 1e3)
        self.assertLessEqual(statistics.median(during),
                             statistics.median(before) + HEALTH_MARGIN_S,
                             said)
        self.assertLessEqual(max(during), max(before) + HEALTH_CEILING_S,
                             said)
        self.assertEqual(s.stop(), 0)

    def test_head_on_get_endpoints(self):
        s = self.start()
        for path in ("/health", "/metrics", "/v1/models"):
            get = s.get(path)
            self.assertEqual(get.status, 200, path)
            c = st.RawClient(s.port, timeout=SAFETY_NET_S)
            # HEAD, then GET on the same connection: the HEAD answer has
            # no body, so the GET's status line follows its head at once.
            c.send("HEAD %s HTTP/1.1\r\nHost: x\r\n\r\n"
                   "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" % path)
            status, head = c.read_head()
            self.assertEqual(status, 200, path)
            self.assertTrue("content-length" in head
                            or head.get("transfer-encoding") == "chunked",
                            head)
            if "content-length" in head and path != "/metrics":
                self.assertEqual(int(head["content-length"]), len(get.body))
            status, _, body = c.read_response()
            self.assertEqual(status, 200)
            self.assertIn(b'"status"', body)
            c.close()
        r = s.post("/health", "{}")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("Allow"), "GET, HEAD")
        r = s.post("/v1/models", "{}")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("Allow"), "GET, HEAD")
        self.assertEqual(s.stop(), 0)

    def test_absolute_form_and_smuggling(self):
        s = self.start()
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.send("GET http://127.0.0.1:%d/health?x=1 HTTP/1.1\r\nHost: x\r\n"
               "\r\n" % s.port)
        status, _, body = c.read_response()
        self.assertEqual(status, 200)
        self.assertIn(b'"status"', body)
        c.close()

        # CVE-2025-23167's shape: nothing may be dispatched, so nothing
        # reaches the upstream.
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\rXPOST /v1/completions "
               b"HTTP/1.1\r\nHost: x\r\nContent-Length: 36\r\n\r\n"
               b'{"prompt":"SMUGGLED","max_tokens":2}')
        status, head, body = c.read_response()
        self.assertEqual(status, 400)
        self.assertEqual(head["connection"], "close")
        self.assertTrue(c.at_eof())
        c.close()
        metrics = st.request(s.port, "GET", "/metrics").body.decode()
        self.assertNotIn('endpoint="/v1/completions"', metrics)
        self.assertIn("sluice_generated_tokens_total 0\n", metrics)
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    st.main()

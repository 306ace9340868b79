"""Hostile and unusual clients against a real sluice (in front of the mock
llama-server): a flood of pipelined requests from clients that never read,
HEAD on GET endpoints, absolute-form targets, a smuggling attempt, bodies
left one byte short (with and without a key), bodies nested far too deep or
chained for jsmn, a chunk larger than the body limit, header values with
trailing whitespace, HTTP/1.2."""

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

# The unfinished-body attack, scaled down for a busy 2-core machine: each
# connection sends a body of --max-body's default (1 MiB) but its last
# byte, and waits. ATTACKERS of them held 1 MiB each before
# --max-body-memory; BODY_MEMORY_MIB bounds them all now.
BODY = 1024 * 1024
ATTACKERS = 48
BODY_MEMORY_MIB = 8
# What sluice may grow by besides the bodies it admits: heads, buffers and
# the allocator's own; far below the ATTACKERS MiB of the attack.
OVERHEAD_KIB = 8 * 1024

KEY = "hostile-test-key"
ORIGIN = "http://page.example"

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


def chained_bodies():
    """Two (path, body) no deeper than DEPTH_MAX that jsmn would read for
    the square of their size: a colon after anything but a key hangs what
    follows under it, and a closing bracket where nothing is open walks
    back every link. A number beyond jansson's range sends a relayed body
    to jsmn's full scan (request.c, load_with_stand_ins)."""
    keys = '{"seed":1e999,"x":[]:' + '"a":' * (MAX_BODY // 8) + '"a"}:'
    arrays = '[1e999]:' + '[]:' * (MAX_BODY // 6)
    bodies = [
        ("/v1/chat/completions", keys + "}" * (MAX_BODY - len(keys))),
        ("/v1/chat/completions", arrays + "]" * (MAX_BODY - len(arrays))),
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


def unfinished_body(port, headers=""):
    """A connection that sends a head for a body of BODY bytes, then all of
    it but the last byte, and waits; returns its socket. A connection
    refused at its head is closed on; that is not an error here."""
    sock = socket.create_connection(("127.0.0.1", port))
    head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/json\r\n%sContent-Length: %d\r\n"
            "\r\n" % (headers, BODY)).encode()
    try:
        send_until_stopped(sock, head + b" " * (BODY - 1))
    except OSError:
        pass
    return sock


def metric(port, name):
    """One sample of sluice's /metrics, by its full name with labels."""
    text = st.request(port, "GET", "/metrics",
                      timeout=SAFETY_NET_S).body.decode()
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    assert m, "no %s in /metrics" % name
    return float(m.group(1))


def health_median(port, n=7):
    """The median time /health takes to answer on new connections, in
    seconds."""
    times = []
    for _ in range(n):
        start = time.monotonic()
        r = st.request(port, "GET", "/health", timeout=SAFETY_NET_S)
        times.append(time.monotonic() - start)
        assert r.status == 200, r.status
    return statistics.median(times)


class Hostile(st.TestCase):

    def setUp(self):
        super().setUp()
        self.mock = Mock()
        self.addCleanup(self.mock.stop)

    def start(self, *args, **kw):
        return self.sluice("--upstream", self.mock.url, *args, **kw)

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

    def test_deep_and_chained_bodies_leave_health_answered(self):
        deep = "the request body nests objects and arrays deeper than " \
            "%d levels" % DEPTH_MAX
        # Refused for the number, as jansson found it first: jsmn never
        # reads the rest.
        chained = "malformed JSON in the request body at line 1, column " \
            "%d (byte %d): real number overflow near '1e999'"
        bodies = [(path, body, deep) for path, body in deep_bodies()] + \
            [(path, body, chained % ((body.index("1e999") + 5,) * 2))
             for path, body in chained_bodies()]
        s = self.start()
        probe = st.RawClient(s.port, timeout=PROBE_TIMEOUT_S)
        before = [health_latency(probe) for _ in range(50)]

        answers = []

        def attack(path, body, message):
            answers.append((path, message, st.request(
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
        for path, message, r in answers:
            self.assertEqual(r.status, 400, (path, r.body[:200]))
            error = r.json()["error"]
            self.assertEqual(error["type"], "invalid_request_error")
            self.assertEqual(error["message"], message)
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

    def test_unfinished_bodies_hold_at_most_max_body_memory(self):
        asan = os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0"
        s = self.start("--max-body-memory", "%dM" % BODY_MEMORY_MIB,
                       env={"ASAN_OPTIONS": asan})
        for _ in range(3):  # warm up: the /metrics text, the allocator
            answered(s.port)
        baseline = st.vm_hwm_kib(s.proc.pid)
        before = health_median(s.port)

        socks = [unfinished_body(s.port) for _ in range(ATTACKERS)]
        # As many bodies as fit are held, and not one more...
        self.assertEqual(metric(s.port, "sluice_body_memory_bytes"),
                         BODY_MEMORY_MIB * BODY)
        grown = st.vm_hwm_kib(s.proc.pid) - baseline
        self.assertLess(grown, BODY_MEMORY_MIB * 1024 + OVERHEAD_KIB,
                        "sluice grew by %d KiB" % grown)
        # ...the others were refused before their bodies were read.
        self.assertEqual(
            metric(s.port, 'sluice_rejected_total{reason="body_memory"}'),
            ATTACKERS - BODY_MEMORY_MIB)
        # Other clients are served meanwhile; a new body is told to retry.
        during = health_median(s.port)
        self.assertLess(during, before + HEALTH_MARGIN_S,
                        "/health: %.3f s before, %.3f s during" %
                        (before, during))
        r = st.request(s.port, "POST", "/v1/completions",
                       {"prompt": "hi", "max_tokens": 2},
                       timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 503)
        self.assertEqual(r.header("Retry-After"), "1")
        self.assertEqual(r.header("retry-after-ms"), "1000")
        self.assertEqual(r.json()["error"]["type"], "server_error")

        # The memory comes back as the attackers go.
        for sock in socks:
            sock.close()
        st.wait_until(
            lambda: metric(s.port, "sluice_body_memory_bytes") == 0,
            SAFETY_NET_S, "the bodies' memory to come back")
        r = st.request(s.port, "POST", "/v1/completions",
                       {"prompt": "hi", "max_tokens": 2},
                       timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(s.stop(), 0)

    def test_a_request_without_a_key_is_refused_at_its_head(self):
        asan = os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0"
        s = self.start("--api-key", KEY, "--body-timeout", "120",
                       env={"ASAN_OPTIONS": asan})
        whole = st.request(s.port, "POST", "/v1/completions", {"prompt": "x"},
                           headers={"Origin": ORIGIN}, timeout=SAFETY_NET_S)
        self.assertEqual(whole.status, 401)

        # The head alone gets the same answer: no body is ever sent.
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: %s\r\n"
               "Content-Length: %d\r\n\r\n" % (ORIGIN, BODY))
        status, head, body = c.read_response()
        self.assertEqual(status, 401)
        self.assertEqual(body, whole.body)
        for name in ("content-type", "access-control-allow-origin", "vary"):
            self.assertEqual(head.get(name), whole.header(name), name)
        self.assertEqual(head["connection"], "close")
        self.assertTrue(c.at_eof())
        c.close()
        # Expect: 100-continue gets it in place of the 100.
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
               "Expect: 100-continue\r\nContent-Length: 12\r\n\r\n")
        self.assertEqual(c.read_response()[0], 401)
        c.close()
        # An admin action with a client key: its 403, from the head too.
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.send("POST /props HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
               "%s\r\nContent-Length: 100\r\n\r\n" % KEY)
        status, _, body = c.read_response()
        self.assertEqual(status, 403)
        self.assertIn(b"is an admin action", body)
        c.close()
        # Requests that need no key are not judged early: a wrong method
        # on a health check reads its body and says 405.
        r = st.request(s.port, "POST", "/health", "{}", timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 405)

        # The unfinished-body attack without a key costs no memory, and a
        # client with the key is served meanwhile.
        for _ in range(3):
            answered_with_key = st.request(
                s.port, "GET", "/metrics",
                headers={"Authorization": "Bearer " + KEY},
                timeout=SAFETY_NET_S)
            self.assertEqual(answered_with_key.status, 200)
        baseline = st.vm_hwm_kib(s.proc.pid)
        socks = [unfinished_body(s.port) for _ in range(ATTACKERS)]
        grown = st.vm_hwm_kib(s.proc.pid) - baseline
        self.assertLess(grown, OVERHEAD_KIB, "sluice grew by %d KiB" % grown)
        r = st.request(s.port, "POST", "/v1/completions",
                       {"prompt": "hi", "max_tokens": 2},
                       headers={"Authorization": "Bearer " + KEY},
                       timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200, r.body)
        for sock in socks:
            sock.close()
        self.assertEqual(s.stop(), 0)

    def test_whitespace_after_a_key_is_not_part_of_it(self):
        # RFC 9110, 5.5; test_access.py compares with llama-server.
        s = self.start("--api-key", KEY)
        r = st.request(s.port, "GET", "/v1/models",
                       headers={"Authorization": "Bearer %s \t " % KEY},
                       timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(s.stop(), 0)

    def test_http_1_2_is_http_1_1(self):
        # RFC 9110, 2.5: kept alive, two answers on one connection.
        s = self.start()
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.send("GET /health HTTP/1.2\r\nHost: x\r\n\r\n"
               "GET /health HTTP/1.2\r\nHost: x\r\n\r\n")
        for _ in range(2):
            status, head, _ = c.read_response()
            self.assertEqual(status, 200)
            self.assertEqual(head["connection"], "keep-alive")
        c.close()
        self.assertEqual(s.stop(), 0)

    def test_a_chunk_over_max_body_is_refused_at_its_size_line(self):
        # 413 at once, with no wait for its data (the body timeout is two
        # minutes here), as nginx does.
        s = self.start("--max-body", "1K", "--body-timeout", "120")
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
               "Transfer-Encoding: chunked\r\n\r\n401\r\n")
        status, _, body = c.read_response()
        self.assertEqual(status, 413)
        self.assertIn(b"request body too large", body)
        c.close()
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    st.main()

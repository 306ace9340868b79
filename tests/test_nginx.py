"""sluice behind nginx: Debian's nginx runs the shipped
deploy/nginx/sluice.conf in front of a real sluice and llama-server.

The file under test is the shipped one, included from a minimal nginx.conf's
http {} block as a user would include it; the test substitutes only the
addresses, ports and (in one test) the timeouts. nginx runs as a child of
the test, in the foreground, in a temporary prefix of its own, with
master_process off so that it is one process the test can always stop.

What is checked: events reach the client one by one as sluice sends them;
a generation longer than nginx's default read timeout allows is not cut
(and with that default it would be); a client that leaves through nginx
frees llama-server's slot; 429 and its Retry-After pass through; sluice's
access log shows the real client's address and the request id nginx
passes; what nginx sends sluice (HTTP/1.1, kept-alive connections, the
forwarding headers); client_max_body_size equals sluice's --max-body.
"""

import concurrent.futures
import http.server
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import threading
import time

import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 120

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                    "deploy", "nginx", "sluice.conf")

# nginx's own default for proxy_read_timeout (its documentation).
NGINX_DEFAULT_READ_TIMEOUT_S = 60.0

# The test's clients connect to nginx from this loopback address, nginx
# reaches sluice from 127.0.0.1: sluice's access log can tell them apart.
CLIENT_ADDR = "127.0.0.2"
DIRECT_ADDR = "127.0.0.3"

# How much later the first token may reach a client through nginx than
# straight from sluice, median against median over the same requests.
# nginx adds well under a millisecond; this is room for a busy 2-core
# machine's scheduling, and far less than a buffering proxy would add
# (the whole generation).
FIRST_TOKEN_TOLERANCE_S = 0.030

ONE_THREAD = st.LLAMA_ONE_THREAD
SLUICE_ONE_THREAD = ["--llama-arg=" + a for a in ONE_THREAD]


def site_text():
    with open(SITE) as f:
        return f.read()


def directives(text, name):
    """The values of every (uncommented) `name VALUE;` line in text."""
    return re.findall(r"^\s*%s\s+([^;#]+);" % re.escape(name), text,
                      re.MULTILINE)


def nginx_seconds(value):
    """An nginx time value ("3600s", "1h", "500ms", "90") in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    total = 0.0
    for number, unit in re.findall(r"(\d+)(ms|s|m|h|d)?", value.strip()):
        total += int(number) * units[unit or "s"]
    return total


def nginx_bytes(value):
    """An nginx size ("1m", "512k", "1048576") in bytes."""
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", value.strip())
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20,
                              "g": 1 << 30}[m.group(2).lower()]


def sluice_bytes(value):
    m = re.fullmatch(r"(\d+)([KMG]?)", value.strip())
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20,
                              "G": 1 << 30}[m.group(2)]


def render_site(upstream_port, listen_port, read_timeout_s=None):
    """The shipped file with its addresses pointed at the test's ports and,
    when read_timeout_s is given, proxy_read_timeout set to it."""
    text = site_text()
    subs = [
        (r"^(\s*)server 127\.0\.0\.1:8080;",
         r"\g<1>server 127.0.0.1:%d;" % upstream_port),
        (r"^(\s*)listen 80;", r"\g<1>listen 127.0.0.1:%d;" % listen_port),
        (r"^\s*listen \[::\]:80;\n", ""),
    ]
    if read_timeout_s is not None:
        # Present in the shipped file or not, the test sets its own value:
        # the caller scales what the file says (or nginx's default).
        ms = "proxy_read_timeout %dms;" % max(1, round(read_timeout_s * 1000))
        if directives(text, "proxy_read_timeout"):
            subs.append((r"^(\s*)proxy_read_timeout [^;#]+;", r"\g<1>" + ms))
        else:
            subs.append((r"(proxy_pass http://sluice;)", r"\1\n        " + ms))
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text, flags=re.MULTILINE)
        assert n == 1, "%s: %r matched %d times" % (SITE, pattern, n)
    return text


class Nginx(st.Process):
    """Debian's nginx with one site file, on a free loopback port."""

    def __init__(self, tmp, upstream_port, read_timeout_s=None):
        if not os.access(NGINX, os.X_OK):
            raise AssertionError("no nginx at %s: deploy/setup.sh --tests "
                                 "installs Debian's" % NGINX)
        self.port = st.free_port()
        os.makedirs(tmp, exist_ok=True)
        site = os.path.join(tmp, "sluice.conf")
        with open(site, "w") as f:
            f.write(render_site(upstream_port, self.port, read_timeout_s))
        self.error_log = os.path.join(tmp, "error.log")
        conf = os.path.join(tmp, "nginx.conf")
        temp = {k: os.path.join(tmp, k) for k in
                ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
        with open(conf, "w") as f:
            f.write("""\
master_process off;
pid %(tmp)s/nginx.pid;
error_log %(err)s info;
events { worker_connections 1024; }
http {
    access_log %(tmp)s/access.log;
    client_body_temp_path %(client_body)s;
    proxy_temp_path %(proxy)s;
    fastcgi_temp_path %(fastcgi)s;
    uwsgi_temp_path %(uwsgi)s;
    scgi_temp_path %(scgi)s;
    include %(site)s;
}
""" % dict(temp, tmp=tmp, err=self.error_log, site=site))
        super().__init__([NGINX, "-p", tmp + "/", "-c", conf,
                          "-e", self.error_log, "-g", "daemon off;"],
                         name="nginx")
        st.wait_until(self._listening, 30, "nginx to listen")

    def _listening(self):
        if self.proc.poll() is not None:
            raise AssertionError("nginx exited with %s:\n%s\n%s" % (
                self.proc.returncode, self.output(), self.errors()))
        try:
            socket.create_connection(("127.0.0.1", self.port), 1).close()
            return True
        except OSError:
            return False

    def errors(self):
        try:
            with open(self.error_log) as f:
                return f.read()
        except FileNotFoundError:
            return ""


def client(port, source=CLIENT_ADDR):
    """A RawClient connected from source (a loopback address): made
    without its constructor, which connects from 127.0.0.1."""
    c = st.RawClient.__new__(st.RawClient)
    c.sock = socket.socket()
    c.sock.settimeout(SAFETY_NET_S)
    c.sock.bind((source, 0))
    c.sock.connect(("127.0.0.1", port))
    c.buf = b""
    return c


def completion(prompt, n, stream):
    return {"prompt": prompt, "n_predict": n, "temperature": 0,
            "stream": stream}


def timed_stream(port, body, source=CLIENT_ADDR, on_event=None):
    """Streams body on /completion. Returns (time from sending the request to
    each event's arrival, the events). on_event(index) runs as each event
    arrives."""
    c = client(port, source)
    try:
        start = time.monotonic()
        c.request("POST", "/completion", body)
        status, head = c.read_head()
        assert status == 200, (status, head, c.buf[:300])
        assert head["content-type"] == "text/event-stream", head
        times, events, rest = [], [], b""
        for t, chunk in c.chunks():
            # nginx re-frames the body: a chunk may hold several events
            # when they arrived together.
            rest += chunk
            while b"\n\n" in rest:
                one, rest = rest.split(b"\n\n", 1)
                times.append(t - start)
                events.append(st.sse_data(one + b"\n\n"))
                if on_event:
                    on_event(len(events) - 1)
        assert rest == b"", rest
        return times, events
    finally:
        c.close()


def text_of(events):
    return "".join(e["content"] for e in events if isinstance(e, dict))


def access_line(s, rid):
    """sluice's access log line for request id rid, once written."""
    return s.wait_line(r" access id=%s .*" % re.escape(rid),
                       timeout=SAFETY_NET_S).group(0)


class NginxTestCase(st.TestCase):

    def nginx(self, upstream_port, read_timeout_s=None, name="nginx"):
        n = Nginx(os.path.join(self.tmp, name), upstream_port,
                  read_timeout_s)
        self._processes.append(n)
        return n


class Streaming(NginxTestCase):
    """The same streamed requests straight to sluice and through nginx."""

    PAIRS = 5
    N = 200

    def test_events_reach_the_client_one_by_one(self):
        ls = self.llama_server(st.MODEL_SLOW, slots=1, ctx=4096,
                               extra=ONE_THREAD)
        s = self.sluice("--upstream", ls.url)
        ng = self.nginx(s.port)
        body = completion("Once upon a time", self.N, True)
        # Events at which llama-server is asked how far it has got.
        sampled = range(0, self.N, self.N // 4)
        seen = []

        def on_event(index):
            if index in sampled:
                seen.append((index, *st.decoding(ls)))

        runs = {"direct": [], "nginx": []}
        for _ in range(self.PAIRS):
            # Alternated, so that a busy spell of the machine falls on both.
            runs["direct"].append(timed_stream(s.port, body, DIRECT_ADDR))
            runs["nginx"].append(timed_stream(ng.port, body,
                                              on_event=on_event))
        texts = {text_of(events) for way in runs.values()
                 for _, events in way}
        self.assertEqual(len(texts), 1, texts)
        self.assertEqual({len(events) for way in runs.values()
                          for _, events in way}, {self.N + 1})
        # One by one: whenever a sampled event reached the client through
        # nginx, llama-server was still generating, and had got no further
        # than a quarter of the generation past it. A proxy that held
        # events back would deliver them late, in bunches, or at the end.
        # (Counted in tokens, this holds whatever the machine's pace.)
        self.assertEqual(len(seen), self.PAIRS * len(sampled))
        for index, busy, decoded in seen:
            self.assertTrue(busy, (index, decoded))
            self.assertLess(decoded - (index + 1), self.N // 4,
                            (index, decoded))
        # The first token: through nginx within a small tolerance of
        # straight from sluice, median against median.
        first = {way: statistics.median(times[0] for times, _ in r)
                 for way, r in runs.items()}
        self.assertLessEqual(first["nginx"] - first["direct"],
                             FIRST_TOKEN_TOLERANCE_S, first)
        self.assertEqual(s.stop(), 0)


class LongGeneration(NginxTestCase):
    """proxy_read_timeout is the longest silence nginx allows between two
    reads from sluice, and a plain answer is silent until its generation
    ends (sluice assembles it). Scaled down alike, so that a generation
    lasts longer than nginx's default would allow, the shipped timeout lets
    it finish, and the default cuts it.

    A machine's pace varies several times over from one generation to the
    next when it is busy, so the two nginx get the same request at the same
    moment: llama-server generates both in one batch, step by step together,
    and one is cut while the other, no further along, is not. The scale puts
    the generation's length as measured just before in the middle (on a log
    scale) between the two timeouts: nginx's default (60 s) and the file's
    (3600 s) are 60 times apart, so the pace may change almost 8 times over
    either way before the test can no longer tell."""

    N = 600

    def at_once(self, ports, body):
        """body POSTed to every port in ports at the same moment: [(the
        response, seconds it took)]."""
        def one(port):
            started = time.monotonic()
            r = st.request(port, "POST", "/completion", body=body,
                           timeout=SAFETY_NET_S)
            return r, time.monotonic() - started

        with concurrent.futures.ThreadPoolExecutor(len(ports)) as pool:
            return list(pool.map(one, ports))

    def test_plain_answer_longer_than_the_default_timeout_is_not_cut(self):
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "2",
                        *SLUICE_ONE_THREAD)
        body = completion("A long story", self.N, False)
        # Two at once, as the test sends them: the median of three rounds,
        # the first of which pays for loading the model's pages.
        took = []
        for _ in range(3):
            answers = self.at_once([s.port, s.port], body)
            for r, _ in answers:
                self.assertEqual(r.status, 200)
                self.assertEqual(r.json()["tokens_predicted"], self.N)
            took.append(max(t for _, t in answers))
        direct = answers[0][0].json()
        shipped = directives(site_text(), "proxy_read_timeout")
        shipped_s = (nginx_seconds(shipped[-1]) if shipped
                     else NGINX_DEFAULT_READ_TIMEOUT_S)
        scale = (statistics.median(took) / NGINX_DEFAULT_READ_TIMEOUT_S
                 / math.sqrt(shipped_s / NGINX_DEFAULT_READ_TIMEOUT_S))
        default_scaled = NGINX_DEFAULT_READ_TIMEOUT_S * scale

        # nginx's default, scaled, and the file's, scaled alike (without
        # a proxy_read_timeout in the file, the two would be the same).
        short = self.nginx(s.port, default_scaled, name="default")
        ng = self.nginx(s.port, shipped_s * scale, name="shipped")
        (cut, _), (whole, whole_took) = self.at_once([short.port, ng.port],
                                                     body)
        self.assertEqual(cut.status, 504, cut.body[:300])
        self.assertIn("upstream timed out", short.errors())
        # sluice saw nginx leave, and cancelled.
        s.wait_line(r" access id=\S+ .*method=POST path=/completion "
                    r"status=499 .*outcome=cancelled", SAFETY_NET_S)

        self.assertEqual(whole.status, 200, (whole.body[:300], ng.errors()))
        self.assertGreater(whole_took, default_scaled)
        self.assertEqual(whole.json()["tokens_predicted"], self.N)
        self.assertEqual(whole.json().keys(), direct.keys())
        self.assertNotIn("upstream timed out", ng.errors())
        self.assertEqual(s.stop(), 0)


class Disconnect(NginxTestCase):
    """A client that leaves nginx frees llama-server's slot long before its
    generation would have ended."""

    N = 6000  # tokens asked for: far more than the test waits for
    PACE_TOKENS = 20  # tokens timed to learn llama-server's pace

    def setUp(self):
        super().setUp()
        self.ls = self.llama_server(st.MODEL_SLOW, slots=1, ctx=8192,
                                   extra=ONE_THREAD)
        # Plain answers asked for as streams from the first (the default,
        # auto, does so once a client has left one: test_proxy), so that
        # leaving stops a plain answer too.
        self.s = self.sluice("--upstream", self.ls.url,
                             "--stream-upstream", "on")
        self.ng = self.nginx(self.s.port)

    def assert_slot_freed_after(self, leave):
        """The slot goes idle once the client leaves, well before the
        generation would end; then sluice counts nothing in flight."""
        st.assert_slot_freed_after(self.ls, leave, self.N, self.PACE_TOKENS,
                                   SAFETY_NET_S)
        st.wait_until(lambda: self.s.health().json()["inflight"] == 0,
                      SAFETY_NET_S, "sluice to count nothing in flight")

    def test_client_leaving_mid_stream(self):
        c = client(self.ng.port)
        c.request("POST", "/completion", completion("go on", self.N, True),
                  headers={"X-Request-Id": "leaves-mid-stream"})
        self.assertEqual(c.read_head()[0], 200)
        next(c.chunks())
        self.assert_slot_freed_after(c.close)
        self.assertRegex(access_line(self.s, "leaves-mid-stream"),
                         r" status=200 .* outcome=cancelled")

    def test_client_leaving_while_waiting_for_a_plain_answer(self):
        c = client(self.ng.port)
        c.request("POST", "/completion", completion("go on", self.N, False),
                  headers={"X-Request-Id": "leaves-waiting"})
        self.assert_slot_freed_after(c.close)
        self.assertRegex(access_line(self.s, "leaves-waiting"),
                         r" status=499 .* outcome=cancelled")


class Refusal(NginxTestCase):

    def test_429_and_retry_after_pass_through(self):
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1",
                        "--max-queue", "1", *SLUICE_ONE_THREAD)
        ng = self.nginx(s.port)
        # One request holds the slot, one waits: the queue is full.
        holder = client(ng.port)
        holder.request("POST", "/completion", completion("hold", 4000, True))
        self.assertEqual(holder.read_head()[0], 200)
        next(holder.chunks())
        waiting = client(ng.port)
        waiting.request("POST", "/completion", completion("wait", 4, False))
        st.wait_until(lambda: s.health().json()["queued"] == 1,
                      SAFETY_NET_S, "one request queued")

        direct = st.request(s.port, "POST", "/completion",
                            body=completion("refused", 4, False),
                            timeout=SAFETY_NET_S)
        through = st.request(ng.port, "POST", "/completion",
                             body=completion("refused", 4, False),
                             timeout=SAFETY_NET_S)
        for r in (direct, through):
            self.assertEqual(r.status, 429, r.body[:300])
            ms = int(r.header("retry-after-ms"))
            self.assertEqual(int(r.header("Retry-After")),
                             max(1, -(-ms // 1000)))
            err = r.json()["error"]
            self.assertEqual(err["type"], "rate_limit_error")
            # The body names the same wait as the headers: nginx passed
            # sluice's answer, headers and body, as sluice wrote it.
            self.assertIn("retry in %.1f s" % (ms / 1000), err["message"])
            self.assertEqual(len(r.headers_named("Retry-After")), 1)
        # Every header sluice sends with a 429 arrives through nginx, but
        # the two nginx writes itself.
        names = {k.lower() for k, _ in direct.headers} - {"server", "date"}
        self.assertLessEqual(names, {k.lower() for k, _ in through.headers})

        holder.close()
        self.assertEqual(waiting.read_response()[0], 200)
        waiting.close()
        self.assertEqual(s.stop(), 0)


class ClientAddress(NginxTestCase):

    def test_access_log_shows_the_real_client_and_request_id(self):
        s = self.sluice("--model", st.MODEL_TINY,
                        "--trusted-proxy", "127.0.0.1/32")
        ng = self.nginx(s.port)

        def get(port, source, headers):
            c = client(port, source)
            c.request("GET", "/v1/models", headers=headers)
            status, head, _ = c.read_response()
            c.close()
            self.assertEqual(status, 200)
            return head["x-request-id"]

        # Through nginx, from CLIENT_ADDR, with an id of the client's own.
        rid = get(ng.port, CLIENT_ADDR, {"X-Request-Id": "from-the-client"})
        self.assertEqual(rid, "from-the-client")
        self.assertIn(" client=%s " % CLIENT_ADDR, access_line(s, rid))
        # Without one, nginx's $request_id (32 hex digits; sluice's own are
        # 16): the same id in nginx's log and sluice's.
        rid = get(ng.port, CLIENT_ADDR, {})
        self.assertRegex(rid, r"^[0-9a-f]{32}$")
        self.assertIn(" client=%s " % CLIENT_ADDR, access_line(s, rid))
        # A client that claims another address in X-Forwarded-For through
        # nginx is still logged with its own: nginx appends the address it
        # sees, and that is the one sluice takes from its trusted proxy.
        rid = get(ng.port, CLIENT_ADDR, {"X-Forwarded-For": "203.0.113.9"})
        self.assertIn(" client=%s " % CLIENT_ADDR, access_line(s, rid))
        # Straight to sluice from an address it does not trust, the header
        # counts for nothing.
        rid = get(s.port, DIRECT_ADDR, {"X-Forwarded-For": "203.0.113.9"})
        self.assertIn(" client=%s " % DIRECT_ADDR, access_line(s, rid))
        self.assertEqual(s.stop(), 0)


class Seen(http.server.BaseHTTPRequestHandler):
    """Records each request's HTTP version, headers and the peer's port."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        with self.server.lock:
            self.server.seen.append((self.request_version,
                                     self.client_address[1], self.headers))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class Forwarding(NginxTestCase):

    def test_what_nginx_sends_sluice(self):
        # A recorder in sluice's place shows the request as sluice gets it.
        rec = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Seen)
        rec.daemon_threads = True
        rec.seen, rec.lock = [], threading.Lock()
        threading.Thread(target=rec.serve_forever, daemon=True).start()
        self.addCleanup(rec.server_close)
        self.addCleanup(rec.shutdown)
        ng = self.nginx(rec.server_address[1])
        for i in range(3):
            c = client(ng.port)
            c.request("GET", "/health", headers={
                "X-Request-Id": "r%d" % i, "Connection": "close",
                "X-Forwarded-For": "198.51.100.7"})
            self.assertEqual(c.read_response()[0], 200)
            c.close()
        self.assertEqual(len(rec.seen), 3)
        # HTTP/1.1 on one kept-alive connection, though each client closed
        # its own.
        self.assertEqual({version for version, _, _ in rec.seen},
                         {"HTTP/1.1"})
        self.assertEqual(len({port for _, port, _ in rec.seen}), 1)
        for i, (_, _, headers) in enumerate(rec.seen):
            self.assertEqual(headers["X-Request-Id"], "r%d" % i)
            self.assertEqual(headers["X-Forwarded-For"],
                             "198.51.100.7, %s" % CLIENT_ADDR)
            self.assertEqual(headers["X-Forwarded-Proto"], "http")
            self.assertIsNone(headers["Connection"])

    def test_body_limit_matches_sluices(self):
        help_text = subprocess.run([st.SLUICE, "--help"], check=True,
                                   capture_output=True, text=True).stdout
        default = re.search(r"SLUICE_MAX_BODY; default: (\w+)\]", help_text)
        limit = sluice_bytes(default.group(1))
        self.assertEqual([nginx_bytes(v) for v in
                          directives(site_text(), "client_max_body_size")],
                         [limit])
        s = self.sluice("--model", st.MODEL_TINY)
        ng = self.nginx(s.port)
        # A body of exactly the limit reaches sluice (which finds it is
        # no JSON); one byte more is refused by nginx before sluice.
        for size, status, by in ((limit, 400, "sluice"),
                                 (limit + 1, 413, "nginx")):
            r = st.request(ng.port, "POST", "/completion", body=b"x" * size,
                           headers={"Content-Type": "application/json"},
                           timeout=SAFETY_NET_S)
            self.assertEqual(r.status, status)
            self.assertEqual(r.header("Content-Type").startswith(
                "application/json"), by == "sluice", r.headers)
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    st.main()

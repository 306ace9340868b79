"""Helpers for sluice's integration tests: run sluice (and llama-server)
as real processes on loopback and talk HTTP to them.

Only the Python standard library is used. Every wait is for a condition
(a log line, a state in /health, a process exit) with a deadline, never a
bare sleep.
"""

import collections
import contextlib
import http.client
import http.server
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SLUICE = os.environ.get("SLUICE_BIN", "build/sluice")
MOCK = os.environ.get("SLUICE_MOCK_BIN") or os.path.join(
    os.path.dirname(SLUICE), "bench", "mock-llama-server")
MODEL_TINY = os.environ.get("SLUICE_MODEL_TINY")
MODEL_SLOW = os.environ.get("SLUICE_MODEL_SLOW")


# llama-server on one thread: on a busy machine its pace then drops in
# proportion, where with a thread per core a generation can stall for
# seconds whenever one of them loses its core (two 600-token generations at
# once took 100 s instead of 4 beside two busy loops on two cores; 64
# requests through four slots fell from 0.5 s to 4 s and more per wave).
# The environment sets it for every llama-server a test starts, directly or
# through sluice (a --threads on the command line still wins); the flags
# are for tests that spell it out in a configuration file.
os.environ.setdefault("LLAMA_ARG_THREADS", "1")
LLAMA_ONE_THREAD = ("--threads", "1")


def cache_dir():
    return os.environ.get("SLUICE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "sluice")


def llama_server_path():
    """The llama-server the tests use, found as sluice finds it."""
    given = os.environ.get("SLUICE_LLAMA_SERVER")
    if given:
        return given
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    return os.path.join(cache_dir(), "llama.cpp", "bin", "llama-server")


def wait_until(predicate, timeout, what, interval=0.02):
    """Polls predicate() until it returns a true value; fails after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s"
                                 % (timeout, what))
        time.sleep(interval)


def slot_busy(ls):
    """Whether any slot of llama-server ls is processing."""
    slots = request(ls.port, "GET", "/slots").json()
    return any(s["is_processing"] for s in slots)


def decoding(ls):
    """(busy, tokens decoded so far) of a one-slot llama-server."""
    slot = request(ls.port, "GET", "/slots").json()[0]
    # An idle slot that has not run a task yet has no next_token.
    tokens = (slot.get("next_token") or [{}])[0]
    return slot["is_processing"], tokens.get("n_decoded", 0)


def assert_slot_freed_after(ls, leave, n_tokens, pace_tokens, timeout):
    """Times pace_tokens tokens of the generation of n_tokens in progress
    on one-slot llama-server ls, calls leave(), then waits for the slot to
    go idle: within half the time the rest of the generation would take at
    that pace, so the client's leaving, not the end of the generation,
    freed it. Relative to the pace measured now, this holds however busy
    the machine is. timeout bounds each wait for tokens."""
    first = wait_until(
        lambda: (lambda b, d: d if b and d > 0 else None)(*decoding(ls)),
        timeout, "generation to start")
    t1 = time.monotonic()
    later = wait_until(
        lambda: (lambda b, d: d if b and d >= first + pace_tokens
                 else None)(*decoding(ls)),
        timeout, "%d more tokens" % pace_tokens)
    per_token = (time.monotonic() - t1) / (later - first)
    leave()
    rest = (n_tokens - later) * per_token
    wait_until(lambda: not slot_busy(ls), rest / 2,
               "the slot to go idle (the generation would have taken "
               "%.1f s more)" % rest)


def pid_alive(pid):
    """True while pid runs. A zombie counts as gone: it has exited and holds
    nothing; only its parent's reaping is left."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        # Gone before the open, or between the open and the read (ESRCH).
        return False
    return state != "Z"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def headers_named(self, name):
        """Every value of a header that may come more than once."""
        return [v for k, v in self.headers if k.lower() == name.lower()]


def request(port, method, path, body=None, headers=None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            headers = dict(headers or {}, **{"Content-Type": "application/json"})
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return Response(r.status, r.getheaders(), r.read())
    finally:
        conn.close()


class RawClient:
    """HTTP/1.1 over a plain socket, to see what a library would hide:
    chunk boundaries, their arrival times, pipelining, slow reading."""

    def __init__(self, port, rcvbuf=None, timeout=30):
        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data if isinstance(data, bytes) else data.encode())

    def request(self, method, path, body=None, headers=None):
        """Sends one request (not waiting for the answer)."""
        payload = b""
        if body is not None:
            payload = (json.dumps(body) if isinstance(body, (dict, list))
                       else body)
            payload = payload.encode() if isinstance(payload, str) else payload
        lines = ["%s %s HTTP/1.1" % (method, path), "Host: test"]
        for k, v in (headers or {}).items():
            lines.append("%s: %s" % (k, v))
        if body is not None:
            lines.append("Content-Type: application/json")
            lines.append("Content-Length: %d" % len(payload))
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed; unread: %r" % self.buf[:200])
        self.buf += data

    def _take_line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_head(self):
        """(status, {lowercase name: value}); the status line as sent is
        kept in self.status_line."""
        self.status_line = self._take_line().decode()
        status = int(self.status_line.split()[1])
        headers = {}
        while True:
            line = self._take_line()
            if not line:
                return status, headers
            k, v = line.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()

    def chunks(self):
        """Yields (arrival time, chunk) of a chunked body, to its end."""
        while True:
            size = int(self._take_line().split(b";")[0], 16)
            if size == 0:
                self._take_line()
                return
            data = self._take(size)
            self._take(2)
            yield time.monotonic(), data

    def events(self):
        """Yields (arrival time, event) of a chunked SSE body, to its end:
        each chunk split at its events' blank lines. sluice writes whole
        events only (those of one upstream read share a chunk), so a
        chunk must end where an event ends."""
        for t, chunk in self.chunks():
            assert chunk.endswith(b"\n\n"), \
                "a chunk that ends inside an event: %r" % chunk[-200:]
            for event in chunk[:-2].split(b"\n\n"):
                yield t, event + b"\n\n"

    def read_response(self):
        """(status, headers, body) of one complete response."""
        status, headers = self.read_head()
        if "content-length" in headers:
            body = self._take(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            body = b"".join(c for _, c in self.chunks())
        else:
            body = b""
        return status, headers, body

    def at_eof(self, timeout=2):
        """True when the server closes the connection within timeout;
        whatever arrives meanwhile is kept in self.buf."""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except (socket.timeout, BlockingIOError):
            return False
        except ConnectionResetError:
            return True
        finally:
            self.sock.settimeout(old)

    def close(self):
        self.sock.close()


def sse_data(chunk):
    """The data of one SSE event (from RawClient.events): a JSON value or
    the string "[DONE]"; None for a comment."""
    text = chunk.decode()
    assert text.endswith("\n\n"), "not one whole event: %r" % text
    data = [line[5:].lstrip() for line in text.split("\n")
            if line.startswith("data:")]
    if not data:
        return None
    joined = "\n".join(data)
    return joined if joined == "[DONE]" else json.loads(joined)


def text_of(path, doc):
    """The generated text of a whole (non-streamed) answer on path."""
    if path == "/completion":
        return doc["content"]
    if path == "/v1/completions":
        return doc["choices"][0]["text"]
    return doc["choices"][0]["message"]["content"]


def delta_of(path, event):
    """The text one streamed event on path adds ("" for none)."""
    if path == "/completion":
        return event.get("content", "")
    if not event.get("choices"):
        return ""
    if path == "/v1/completions":
        return event["choices"][0].get("text") or ""
    return event["choices"][0]["delta"].get("content") or ""


def vm_hwm_kib(pid):
    """Peak resident memory of a process, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for %d" % pid)


# Lines of each process's log that a failed test shows after its traceback:
# the events that led up to the failure, short enough to read there.
LOG_TAIL_LINES = 40

# Every Process started that may still matter to a test: those a test
# started, and those its class started for all its tests (TestCase.run
# prints their logs' tails when it fails, and forgets the ones that ended).
_started = []


class Process:
    """A child process whose stderr is collected line by line."""

    def __init__(self, argv, env=None, name="process", cwd=None):
        self.name = name
        self.lines = []
        self.killed = False  # by kill(), while it ran
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=env, cwd=cwd)
        _started.append(self)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if os.environ.get("SLUICE_TEST_ECHO"):
                sys.stderr.write("[%s] %s\n" % (self.name, line))
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, pattern, timeout=30, start=0):
        """Waits for a line matching pattern (after line index start)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines[start:]:
                    m = regex.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None
                                 and not self._reader.is_alive()):
                    raise AssertionError(
                        "%s: no line matching %r; it said:\n%s"
                        % (self.name, pattern, "\n".join(self.lines[-30:])))
                self._cond.wait(min(left, 0.2))

    def count_lines(self, pattern):
        regex = re.compile(pattern)
        with self._cond:
            return sum(1 for line in self.lines if regex.search(line))

    def wait_lines(self, pattern, n, timeout=30):
        """The number of lines matching pattern, once it is n or more: a
        line written before an answer can reach the reader thread after
        the answer reaches the test."""
        wait_until(lambda: self.count_lines(pattern) >= n, timeout,
                   "%d lines matching %r" % (n, pattern))
        return self.count_lines(pattern)

    def output(self):
        with self._cond:
            return "\n".join(self.lines)

    def tail(self, n=LOG_TAIL_LINES):
        """The last n lines of its log, under a line that says whose they
        are and how the process stands."""
        with self._cond:
            lines, total = self.lines[-n:], len(self.lines)
        code = self.proc.poll()
        state = ("running" if code is None
                 else "killed by the test" if self.killed
                 else "killed by signal %d" % -code if code < 0
                 else "exited with status %d" % code)
        head = "---- %s (pid %d, %s): %s ----" % (
            self.name, self.proc.pid, state,
            "the last %d of %d lines" % (len(lines), total)
            if total > len(lines) else
            "%d line%s" % (total, "" if total == 1 else "s"))
        return "\n".join([head] + lines)

    def wait_exit(self, timeout=30):
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s did not exit within %.1f s" %
                                 (self.name, timeout))
        self._reader.join(5)
        self.proc.stderr.close()
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.killed = True
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        if not self.proc.stderr.closed:
            self.proc.stderr.close()


class Sluice(Process):
    """sluice on a free port. Extra arguments go on its command line; cwd:
    the directory it runs in (relative paths start there)."""

    def __init__(self, *args, env=None, wait_ready=True, timeout=60,
                 cwd=None):
        full_env = dict(os.environ)
        full_env.pop("SLUICE_LLAMA_SERVER", None)
        for k in list(full_env):
            if k.startswith("SLUICE_") and k not in ("SLUICE_BIN",):
                full_env.pop(k)
            # OpenTelemetry's variables are sluice's options too.
            if k.startswith("OTEL_"):
                full_env.pop(k)
        full_env.update(env or {})
        argv = [SLUICE, "--listen", "127.0.0.1:0"]
        if "--llama-server" not in args:
            argv += ["--llama-server", llama_server_path()]
        argv += list(args)
        super().__init__(argv, env=full_env, name="sluice", cwd=cwd)
        self.port = None
        if wait_ready is not None:
            m = self.wait_line(r"listening on http://[^ ]+:(\d+)", timeout)
            self.port = int(m.group(1))
        if wait_ready:
            self.wait_ready(timeout)

    def wait_ready(self, timeout=60):
        return wait_until(lambda: self.ready_status() == 200, timeout,
                          "sluice to be ready")

    def reload(self, pattern, timeout=30):
        """Sends SIGHUP and returns the match of the first log line after
        it that matches pattern."""
        mark = len(self.lines)
        self.proc.send_signal(signal.SIGHUP)
        return self.wait_line(pattern, start=mark, timeout=timeout)

    def wait_all_upstreams_ready(self, timeout=60):
        """Waits until every upstream /health lists is ready (/ready needs
        only one)."""
        return wait_until(lambda: all(u["state"] == "ready" for u in
                                      self.health().json()["upstreams"]),
                          timeout, "every upstream ready")

    def health(self):
        return request(self.port, "GET", "/health", timeout=5)

    def ready(self):
        return request(self.port, "GET", "/ready", timeout=5)

    def ready_status(self):
        try:
            return self.ready().status
        except OSError:
            return None

    def upstream(self, index=0):
        return self.health().json()["upstreams"][index]

    def get(self, path, **kw):
        return request(self.port, "GET", path, **kw)

    def post(self, path, body, **kw):
        return request(self.port, "POST", path, body=body, **kw)

    def access_order(self, ids):
        """The ids among ids in the order sluice's access log lines name
        them. With one slot, requests finish in the order they were
        dispatched, so this is the order sluice chose, whatever CPU the
        client threads got."""
        found = []
        for line in self.output().splitlines():
            m = re.search(r" access id=(\S+) ", line)
            if m and m.group(1) in ids:
                found.append(m.group(1))
        return found

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait_exit(timeout)


class LlamaServer(Process):
    """A llama-server started directly by a test, on a free port."""

    def __init__(self, model, slots=2, ctx=2048, extra=()):
        self.port = free_port()
        argv = [llama_server_path(), "--host", "127.0.0.1",
                "--port", str(self.port), "-m", model, "-np", str(slots),
                "-c", str(slots * ctx), "--no-kv-unified", *extra]
        # No web UI, as sluice starts it: through the environment, which
        # builds from before and after --no-webui became --no-ui both read.
        env = dict(os.environ, LLAMA_ARG_UI="0", LLAMA_ARG_NO_WEBUI="1")
        super().__init__(argv, env=env, name="llama-server")
        self.url = "http://127.0.0.1:%d" % self.port
        wait_until(self._healthy, 60, "llama-server to be healthy")

    def _healthy(self):
        try:
            return request(self.port, "GET", "/health", timeout=2).status == 200
        except OSError:
            return False

    def post(self, path, body, **kw):
        return request(self.port, "POST", path, body=body, **kw)


class MockLlamaServer(Process):
    """bench/mock-llama-server on a free port; extra arguments go on its
    command line. Its timing is what it is told (--prompt-delay-ms,
    --token-delay-ms), whatever the load on the machine: tests that measure
    sluice's timing compare against it. Its text is fixed: token k is
    " tok<k>" (see mock_text)."""

    def __init__(self, *args):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SLUICE_MOCK_")}
        super().__init__([MOCK, "--port", "0", *args], env=env,
                         name="mock")
        m = self.wait_line(r"^mock-llama-server listening on "
                           r"http://127\.0\.0\.1:(\d+) ", timeout=10)
        self.port = int(m.group(1))
        self.url = "http://127.0.0.1:%d" % self.port

    def busy_slots(self):
        r = request(self.port, "GET", "/slots", timeout=5)
        assert r.status == 200, r.status
        return sum(1 for s in r.json() if s["is_processing"])


# One request a RecordingUpstream received: its method, its target as sent
# (path and query), its headers (an http.client.HTTPMessage: every line in
# order, .get() ignores case) and its body.
Received = collections.namedtuple("Received", "method target headers body")


class RecordingUpstream(http.server.ThreadingHTTPServer):
    """A stand-in llama-server on a free loopback port that records what
    sluice relays. It answers sluice's own checks itself, unrecorded: /health
    healthy and /props with total_slots. Every other request is kept in
    `seen` as a Received and answered with status, content_type, body and
    extra_headers, or with what answer(received) returns: a (status,
    content type, body) triple, for a test whose answer depends on the
    request, or a quadruple with this answer's own extra headers. A body of
    None is no body and no Content-Length (for 204 and
    304, which end with their head). With cut, each answer promises more
    body than it sends and the connection closes, as an upstream that dies
    mid-answer."""

    daemon_threads = True
    # What a body is promised beyond what is sent, with cut.
    CUT_MISSING_BYTES = 100

    def __init__(self, body=b'{"ok":true}', status=200,
                 content_type="application/json", extra_headers=(),
                 answer=None, total_slots=2, cut=False):
        self.seen = []
        self.lock = threading.Lock()
        self.answer = answer or (lambda _: (status, content_type, body))
        self.extra_headers = list(extra_headers)
        self.props = json.dumps({"total_slots": total_slots}).encode()
        self.cut = cut
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        self.port = self.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.serve_forever,
                                       daemon=True)
        self.thread.start()

    def handle_error(self, request, client_address):
        pass  # sluice closing a pooled connection at exit is no error

    def received(self):
        """A copy of what has been recorded so far."""
        with self.lock:
            return list(self.seen)

    def targets(self, prefix):
        """The targets received that start with prefix, in order."""
        return [r.target for r in self.received()
                if r.target.startswith(prefix)]

    def stop(self):
        self.shutdown()
        self.server_close()


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _handle(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        srv = self.server
        own = self.path in ("/health", "/props")
        extra = srv.extra_headers
        if self.path == "/health":
            status, ctype, out = 200, "application/json", b'{"status":"ok"}'
        elif self.path == "/props":
            status, ctype, out = 200, "application/json", srv.props
        else:
            got = Received(self.command, self.path, self.headers, body)
            with srv.lock:
                srv.seen.append(got)
            answer = srv.answer(got)
            status, ctype, out = answer[:3]
            if len(answer) > 3:
                extra = answer[3]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in ([] if own else extra):
            self.send_header(k, v)
        cut = srv.cut and not own
        missing = srv.CUT_MISSING_BYTES if cut else 0
        if out is not None:
            self.send_header("Content-Length", str(len(out) + missing))
        self.end_headers()
        if self.command != "HEAD" and out is not None:
            self.wfile.write(out)
        if cut:
            self.close_connection = True

    do_GET = do_POST = do_HEAD = do_DELETE = _handle


def models_or_completion(received):
    """A RecordingUpstream answer for tests that need llama-server's shapes:
    an empty model list on /v1/models, a one-token text completion on any
    other target."""
    if received.target == "/v1/models":
        doc = {"object": "list", "data": []}
    else:
        doc = {"id": "cmpl-rec", "object": "text_completion",
               "choices": [{"index": 0, "text": "ok",
                            "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                         "total_tokens": 2}}
    return 200, "application/json", json.dumps(doc).encode()


def mock_text(n):
    """The text of the mock's answer of n tokens."""
    return "".join(" tok%d" % k for k in range(n))


@contextlib.contextmanager
def failure_notes(result, notes):
    """Appends what notes() returns (once, and only if needed; nothing
    when it is empty) to each failure or error that a unittest result
    receives inside the block: a report then says what the processes were
    doing when it failed."""
    reports = (result.failures, result.errors) if result else ()
    before = [len(r) for r in reports]
    try:
        yield
    finally:
        text = None
        for r, n in zip(reports, before):
            for i in range(n, len(r)):
                if text is None:
                    text = notes()
                if text:
                    test, report = r[i]
                    r[i] = (test, "%s\nThe logs' tails:\n%s\n"
                            % (report, text))


class DevTools:
    """Chromium driven over its DevTools pipe (--remote-debugging-pipe:
    NUL-separated JSON on fds 3 and 4), to use a page as a person would."""

    def __init__(self, browser, profile):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def wire():
            # Through fresh copies: a pipe end may already be fd 3 or 4,
            # and dup2 onto itself would leave it close-on-exec.
            a, b = os.dup(to_r), os.dup(from_w)
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.proc = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-pipe", "--user-data-dir=" + profile,
             "--window-size=1200,800", "about:blank"],
            preexec_fn=wire, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self.buf, self.next_id, self.session = b"", 0, None

    def call(self, method, params=None, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("method") == "Page.javascriptDialogOpening":
                    # An alert blocks the page: say what it said.
                    raise AssertionError("the page alerted: %s"
                                         % reply["params"]["message"])
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise AssertionError(reply["error"])
                    return reply["result"]
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_r], [], [], left)[0]:
                raise AssertionError("no DevTools answer to " + method)
            data = os.read(self.from_r, 1 << 16)
            if not data:
                raise AssertionError("chromium closed its DevTools pipe")
            self.buf += data

    def open(self, url, headers=None):
        """Opens url in a new tab; `headers` go with every request of
        the tab (its page's fetches too), as an extension would add
        them."""
        target = self.call("Target.createTarget",
                           {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target,
                                  "flatten": True})["sessionId"]
        self.call("Page.enable")  # to hear of alerts
        if headers:
            self.call("Network.enable")
            self.call("Network.setExtraHTTPHeaders", {"headers": headers})
        self.call("Page.navigate", {"url": url})

    def eval(self, expression):
        r = self.call("Runtime.evaluate",
                      {"expression": expression, "returnByValue": True})
        return r["result"].get("value")

    def close(self):
        self.session = None
        try:
            self.call("Browser.close", timeout=10)
        except AssertionError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_w)
        os.close(self.from_r)


class TestCase(unittest.TestCase):
    """Cleans up every process and temporary directory a test made. When
    a test fails, its report ends with the tail of the log of every
    process it ran with (sluice, llama-server, the mock...): those it
    started and those its class had started for it."""

    def run(self, result=None):
        with_it = [p for p in _started if p.proc.poll() is None]
        mark = len(_started)
        try:
            with failure_notes(result, lambda: "\n".join(
                    p.tail() for p in with_it + _started[mark:])):
                return super().run(result)
        finally:
            # What ended has nothing more to say to the next tests.
            _started[:] = [p for p in _started if p.proc.poll() is None]

    def setUp(self):
        self._processes = []
        self.tmp = tempfile.mkdtemp(prefix="sluice-test-")

    def tearDown(self):
        for p in self._processes:
            p.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def sluice(self, *args, **kw):
        s = Sluice(*args, **kw)
        self._processes.append(s)
        return s

    def llama_server(self, *args, **kw):
        s = LlamaServer(*args, **kw)
        self._processes.append(s)
        return s

    def mock_llama_server(self, *args):
        m = MockLlamaServer(*args)
        self._processes.append(m)
        return m

    def recording_upstream(self, **kw):
        r = RecordingUpstream(**kw)
        self.addCleanup(r.stop)
        return r


class RelayTestCase(TestCase):
    """One llama-server on the tiny demo model for the whole class, and
    sluice in front of it (with sluice_args), so that answers straight from
    llama-server and through sluice can be compared."""

    slots = 4
    sluice_args = ()

    @classmethod
    def setUpClass(cls):
        cls.ls = LlamaServer(MODEL_TINY, slots=cls.slots, ctx=2048)
        cls.sl = Sluice("--upstream", cls.ls.url, *cls.sluice_args)

    @classmethod
    def tearDownClass(cls):
        assert cls.sl.stop() == 0
        cls.ls.kill()


def main():
    unittest.main(verbosity=2)

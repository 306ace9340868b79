"""The HTTP parsing and smuggling corpus (tests/corpus/http).

Each file is sent, byte for byte, on one connection to a sluice whose only
upstream is a recording server. The first response must have the status the
MANIFEST gives (0: the connection closes with no answer at all), a case
marked "close" must see the connection closed after that response with
nothing more, and the upstream must receive exactly as many requests as the
case allows: none for a refused request, and never the SMUGGLED prompt.
Every case is checked and every failure reported together.
"""

import os
import socket

import sluice_test as st

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "corpus", "http")
# Long enough for a loaded machine; a case that keeps its connection open
# without answering fails here rather than hanging the suite.
READ_TIMEOUT = 30
# How long a "close" case may take to close after its response: a safety
# net for a busy machine, where sluice closes at once.
CLOSE_TIMEOUT = 30


def read_manifest():
    cases = []
    with open(os.path.join(CORPUS, "MANIFEST")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, status, forwarded, close = line.split()
            cases.append((name, {int(s) for s in status.split(",")},
                          int(forwarded), close == "close"))
    return cases


class Conn:
    """One raw connection that sends a file and reads the first response."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(READ_TIMEOUT)
        self.buf = b""
        self.eof = False

    def send(self, data):
        # sluice may refuse early and stop reading: that is no error here.
        try:
            self.sock.sendall(data)
        except OSError:
            pass

    def _fill(self):
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
        self.buf += data
        return bool(data)

    def first_response(self, head_request):
        """(status, rest of the bytes) or (0, b"") when closed at once."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                if not self.buf:
                    return 0, b""
                raise AssertionError("incomplete head: %r" % self.buf[:200])
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if not parts[0].startswith(b"HTTP/1."):
            raise AssertionError("not an HTTP/1 status line: %r" % lines[0])
        status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            k, v = line.split(b":", 1)
            headers[k.strip().lower()] = v.strip()
        if head_request or status in (204, 304) or status < 200:
            return status, b""
        if b"content-length" in headers:
            n = int(headers[b"content-length"])
            while len(self.buf) < n and self._fill():
                pass
            self.buf = self.buf[n:]
        elif headers.get(b"transfer-encoding") == b"chunked":
            while True:
                while b"\r\n" not in self.buf:
                    if not self._fill():
                        raise AssertionError("truncated chunked body")
                size_line, self.buf = self.buf.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                while len(self.buf) < size + 2 and self._fill():
                    pass
                self.buf = self.buf[size + 2:]
                if size == 0:
                    break
        return status, self.buf

    def closes(self, timeout):
        """True when the server closes within timeout; what arrives before
        stays in self.buf."""
        self.sock.settimeout(timeout)
        try:
            while self._fill():
                pass
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


class Corpus(st.TestCase):

    def setUp(self):
        super().setUp()
        self.upstream = self.recording_upstream(
            answer=st.models_or_completion, total_slots=4)
        # Plain answers relayed as they come: the recorder speaks no SSE.
        self.sl = self.sluice("--upstream", self.upstream.url,
                              "--stream-upstream", "off")

    def received(self):
        return self.upstream.received()

    def run_case(self, name, statuses, forwarded, must_close):
        """Returns a list of what went wrong with one case."""
        with open(os.path.join(CORPUS, name), "rb") as f:
            data = f.read()
        problems = []
        before = len(self.received())
        c = Conn(self.sl.port)
        try:
            c.send(data)
            try:
                status, rest = c.first_response(data.startswith(b"HEAD "))
            except (AssertionError, socket.timeout, ValueError) as e:
                return ["no readable first response (%s)" % e]
            if status not in statuses:
                problems.append("status %d, expected %s"
                                % (status, "/".join(map(str, sorted(
                                    statuses)))))
            # Whatever follows the first response is another response.
            if rest and not rest.startswith(b"HTTP/1."):
                problems.append("bytes after the first response that start "
                                "no response: %r" % rest[:60])
            if must_close and status != 0:
                if not c.closes(CLOSE_TIMEOUT):
                    problems.append("connection still open %d s after the "
                                    "response" % CLOSE_TIMEOUT)
                elif c.buf:
                    problems.append("more after the response that should "
                                    "have been the last: %r" % c.buf[:60])
        finally:
            c.close()
        # A refused request reaches no upstream, nor does what follows it.
        if not 200 <= status < 300:
            forwarded = 0
        self.allowed += forwarded
        # A forwarded request is complete upstream before sluice answers
        # it, but pipelined ones may still be on their way: wait for them.
        try:
            st.wait_until(lambda: len(self.received()) - before >= forwarded,
                          READ_TIMEOUT, "forwarded requests")
        except AssertionError:
            pass
        got = len(self.received()) - before
        if got != forwarded:
            problems.append("%d requests reached the upstream, expected %d"
                            % (got, forwarded))
        return problems

    def test_corpus(self):
        cases = read_manifest()
        files = {f for f in os.listdir(CORPUS) if f != "MANIFEST"}
        self.assertEqual(files, {name for name, *_ in cases},
                         "every corpus file is in MANIFEST, and only those")
        failures = []
        self.allowed = 0
        for name, statuses, forwarded, must_close in cases:
            problems = self.run_case(name, statuses, forwarded, must_close)
            print("%-30s %s" % (name, "; ".join(problems) or "ok"),
                  flush=True)
            if problems:
                failures.append("%s: %s" % (name, "; ".join(problems)))
        # Late arrivals count too: once sluice is idle, the total is exact.
        st.wait_until(lambda: self.sl.health().json()["inflight"] == 0,
                      READ_TIMEOUT, "sluice to be idle")
        received = self.received()
        if len(received) != self.allowed:
            failures.append("the upstream got %d requests in all, expected "
                            "%d" % (len(received), self.allowed))
        smuggled = [r for r in received
                    if b"SMUGGLED" in r.body or "SMUGGLED" in r.target]
        if smuggled:
            failures.append("the SMUGGLED prompt reached the upstream %d "
                            "times" % len(smuggled))
        self.assertEqual(failures, [], "%d of %d cases failed:\n%s" % (
            len(failures), len(cases), "\n".join(failures)))


if __name__ == "__main__":
    st.main()

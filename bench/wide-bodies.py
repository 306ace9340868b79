#!/usr/bin/env python3
"""Wide bodies on the native APIs, and another client meanwhile:
bench/wide-bodies.py [--shape deep|flat|members] [--seconds S]
[--rounds R] [--sluice PATH]...

Starts the mock llama-server (zero delays) and, for each sluice binary
(build/sluice unless --sluice names some, say one of an older commit), a
sluice in front of it (--max-tokens-cap 1: every answer is one token, so
that the bodies are what costs). Two clients post 1 MiB bodies
(--max-body's default) back to back, one to /generate and one to /infer,
each on its own keep-alive connection: {"prompt": "p", "query": "q",
"a": ...}, where "a" fills the megabyte with what the native APIs ignore:
arrays 62 deep side by side (deep, the costliest body sluice takes),
ones ([1,1,...], flat), or "a" is one member of many ({"k0":1,...},
members). A third client asks /health, one request after another on one
keep-alive connection, for S seconds (10), and its times are the figures:
every request is a wait for sluice's event loop.

Prints one Markdown row per binary and round (each round runs every
binary in turn, so a busy machine's drift hits them alike): the bodies
posted, sluice's CPU time per body (/proc's utime and stime over the
run: what each body held the loop, whatever else the machine ran),
/health's p50 with nobody posting, and its p50, p99 and max while the two
post.

Needs a build (./deploy/setup.sh).
"""
import argparse
import multiprocessing
import os
import socket
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("SLUICE_BIN", os.path.join(ROOT, "build", "sluice"))
os.environ.setdefault("SLUICE_MOCK_BIN",
                      os.path.join(ROOT, "build", "bench",
                                   "mock-llama-server"))
import sluice_test as st  # noqa: E402

BODY = 1024 * 1024
# The deepest sluice takes is 64 levels (SL_JSCAN_DEPTH_MAX): the body's
# object and the array "a" are two of them.
DEEP = 62
# /health requests with nobody posting, for the idle figure.
IDLE_REQUESTS = 200


def wide_body(shape):
    """1 MiB: what the native APIs read, then what they ignore."""
    head = b'{"prompt":"p","query":"q",'
    room = BODY - len(head) - 2
    if shape == "deep":
        one = b"[" * DEEP + b"]" * DEEP
        n = (room - 6) // (len(one) + 1)
        filling = b'"a":[' + b",".join([one] * n) + b"]"
    elif shape == "flat":
        filling = b'"a":[' + b",".join([b"1"] * ((room - 6) // 2)) + b"]"
    else:
        members, size, k = [], 0, 0
        while True:
            m = b'"k%d":1' % k
            if size + len(m) + 1 > room:
                break
            members.append(m)
            size += len(m) + 1
            k += 1
        filling = b",".join(members)
    return head + filling + b"}"


class Connection:
    """One keep-alive HTTP/1.1 connection: a request, then its answer."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(60)
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise SystemExit("sluice closed the connection")
        self.buf += data

    def exchange(self, data):
        """Sends a request and reads its answer; returns the status."""
        self.sock.sendall(data)
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if fields.get("transfer-encoding", "").lower() == "chunked":
            while True:
                while b"\r\n" not in self.buf:
                    self._fill()
                size_line, self.buf = self.buf.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                while len(self.buf) < size + 2:
                    self._fill()
                self.buf = self.buf[size + 2:]
                if size == 0:
                    break
        else:
            length = int(fields.get("content-length", "0"))
            while len(self.buf) < length:
                self._fill()
            self.buf = self.buf[length:]
        return status


def poster(port, path, body, stop, started, count):
    """Posts `body` to `path` until `stop`, one answer before the next."""
    c = Connection(port)
    data = (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b"\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(body)) +
            body)
    while not stop.is_set():
        status = c.exchange(data)
        if status != 200:
            raise SystemExit("%s answered %d" % (path, status))
        with count.get_lock():
            count.value += 1
        started.set()


def health_times(port, seconds=None, requests=None):
    """/health, one request after another: the times in ms."""
    c = Connection(port)
    data = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    times = []
    end = time.monotonic() + seconds if seconds else None
    while (end and time.monotonic() < end) or \
            (requests and len(times) < requests):
        start = time.perf_counter()
        status = c.exchange(data)
        times.append((time.perf_counter() - start) * 1000)
        if status != 200:
            raise SystemExit("/health answered %d" % status)
    return times


def percentile(times, p):
    s = sorted(times)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def cpu_ms(pid):
    """A process's CPU time so far (utime and stime), in ms."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / \
        os.sysconf("SC_CLK_TCK")


def measure(binary, mock, body, seconds):
    """One run against one sluice binary: its table row's figures."""
    st.SLUICE = binary
    s = st.Sluice("--upstream", mock.url, "--max-tokens-cap", "1")
    try:
        idle = statistics.median(health_times(s.port,
                                              requests=IDLE_REQUESTS))
        stop = multiprocessing.Event()
        count = multiprocessing.Value("i", 0)
        procs = []
        for path in ("/generate", "/infer"):
            started = multiprocessing.Event()
            p = multiprocessing.Process(
                target=poster,
                args=(s.port, path, body, stop, started, count))
            p.start()
            procs.append((p, started))
        for p, started in procs:
            if not started.wait(60):
                raise SystemExit("no answer to a wide body in 60 s")
        with count.get_lock():
            count.value = 0
        cpu = cpu_ms(s.proc.pid)
        times = health_times(s.port, seconds=seconds)
        posted = count.value
        cpu = cpu_ms(s.proc.pid) - cpu
        stop.set()
        for p, _ in procs:
            p.join(60)
    finally:
        s.stop()
    return posted, cpu / max(posted, 1), idle, times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("deep", "flat", "members"),
                    default="deep")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sluice", action="append",
                    help="a sluice binary (default: build/sluice); "
                    "several run in turn each round")
    a = ap.parse_args()
    binaries = a.sluice or [os.environ["SLUICE_BIN"]]
    body = wide_body(a.shape)
    mock = st.MockLlamaServer()
    print("| sluice | round | bodies posted | CPU ms per body "
          "| /health p50 idle ms | p50 ms | p99 ms | max ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    try:
        for r in range(a.rounds):
            for binary in binaries:
                posted, cpu, idle, times = measure(binary, mock, body,
                                                   a.seconds)
                print("| %s | %d | %d | %.1f | %.2f | %.2f | %.1f | %.1f |" %
                      (binary, r + 1, posted, cpu, idle,
                       statistics.median(times), percentile(times, 99),
                       max(times)), flush=True)
    finally:
        mock.kill()


if __name__ == "__main__":
    main()

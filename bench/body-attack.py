#!/usr/bin/env python3
"""Unfinished bodies, measured: bench/body-attack.py [--connections N]
[--api-key] [--sluice PATH] [-- SLUICE-ARGS...]

Starts the mock llama-server (zero delays) and sluice in front of it, then
opens N connections (1000 by default) that each send the head of a POST
/v1/completions with a body of 1 MiB (--max-body's default) and all of that
body but its last byte, and hold it there, as in issue 28's attack. With
--api-key, sluice needs a key and the attackers send none.

Prints one Markdown table row: sluice's resident memory (VmRSS) before the
attack, with every attacker holding, and its peak (VmHWM); the memory
sluice says its bodies reserve (sluice_body_memory_bytes, 0 where the
gauge does not exist); how the attackers were answered; and the median
/health time before and during the attack (21 requests each). --sluice
points at another build (say, one of an older commit) to compare.

Needs a build (./deploy/setup.sh) and a file limit above N + 100
(ulimit -n).
"""
import argparse
import collections
import os
import re
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
KEY = "bench-key"


def proc_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit("no %s for pid %d" % (field, pid))


def health_median(port, n=21):
    times = []
    for _ in range(n):
        start = time.monotonic()
        r = st.request(port, "GET", "/health", timeout=60)
        times.append(time.monotonic() - start)
        if r.status != 200:
            raise SystemExit("/health answered %d" % r.status)
    return statistics.median(times)


def body_memory(port, headers):
    text = st.request(port, "GET", "/metrics", headers=headers,
                      timeout=60).body.decode()
    m = re.search(r"^sluice_body_memory_bytes (\d+)$", text, re.M)
    return int(m.group(1)) if m else 0


def attack(port):
    """One attacker: the head, then the body but its last byte. Returns
    its socket, still open, once all is sent or sluice stops taking it
    (refused at its head: sluice reads on for a moment, then closes)."""
    sock = socket.create_connection(("127.0.0.1", port))
    data = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % BODY).encode() + b" " * (BODY - 1)
    sock.settimeout(2)
    try:
        sock.sendall(data)
    except OSError:
        pass
    return sock


def answer_of(sock):
    """The status an attacker got, or "none" while it holds."""
    sock.settimeout(0)
    try:
        head = sock.recv(64)
    except BlockingIOError:
        return "none"
    except OSError:
        return "reset"
    m = re.match(rb"HTTP/1\.1 (\d+)", head)
    return m.group(1).decode() if m else "closed"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--api-key", action="store_true",
                    help="sluice needs a key; the attackers send none")
    ap.add_argument("--sluice", help="the sluice binary (default: build/)")
    ap.add_argument("sluice_args", nargs="*")
    a = ap.parse_args()
    if a.sluice:
        st.SLUICE = a.sluice
    mock = st.MockLlamaServer()
    args = ["--upstream", mock.url, "--max-connections",
            str(a.connections + 100)] + a.sluice_args
    headers = {}
    if a.api_key:
        args += ["--api-key", KEY]
        headers = {"Authorization": "Bearer " + KEY}
    s = st.Sluice(*args)
    try:
        for _ in range(3):
            st.request(s.port, "GET", "/metrics", headers=headers)
        before = proc_kib(s.proc.pid, "VmRSS")
        health_before = health_median(s.port)
        socks = [attack(s.port) for _ in range(a.connections)]
        health_during = health_median(s.port)
        rss = proc_kib(s.proc.pid, "VmRSS")
        hwm = proc_kib(s.proc.pid, "VmHWM")
        reserved = body_memory(s.port, headers)
        answers = collections.Counter(answer_of(k) for k in socks)
        for k in socks:
            k.close()
    finally:
        s.stop()
        mock.kill()
    said = ", ".join("%d %s" % (n, what)
                     for what, n in sorted(answers.items()))
    print("| %d%s | %.0f MiB | %.0f MiB | %.0f MiB | %.0f MiB | %s | %.1f ms "
          "| %.1f ms |" %
          (a.connections, " (no key)" if a.api_key else "",
           before / 1024, rss / 1024, hwm / 1024, reserved / 2**20, said,
           health_before * 1000, health_during * 1000))


if __name__ == "__main__":
    main()

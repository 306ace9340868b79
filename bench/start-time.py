#!/usr/bin/env python3
"""How long sluice-bench takes from being started to its first request on
the wire, beside what the same costs /bin/true (a process start alone) and
curl (a process that loads the same libcurl): each is started N times, in
turn, and timed from the spawn to the first bytes on a listening socket
(/bin/true: to its exit). Prints a Markdown table of medians and minima.

    python3 bench/start-time.py [--rounds N] [--bench build/bench/sluice-bench]
"""

import argparse
import os
import socket
import statistics
import subprocess
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def first_bytes(argv, listener):
    """Seconds from spawning argv to the first bytes it sends to
    listener; the process is then stopped."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    conn, _ = listener.accept()
    conn.recv(1)
    took = time.perf_counter() - start
    conn.close()
    proc.kill()
    proc.wait()
    # Connections it opened meanwhile must not pass for the next one's.
    listener.setblocking(False)
    try:
        while True:
            listener.accept()[0].close()
    except BlockingIOError:
        pass
    listener.setblocking(True)
    return took


def exit_time(argv):
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--bench", default=os.path.join(
        ROOT, "build", "bench", "sluice-bench"))
    args = ap.parse_args()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    url = "http://127.0.0.1:%d" % listener.getsockname()[1]
    runs = {
        "/bin/true (start and exit)": lambda: exit_time(["/bin/true"]),
        "curl (to its request)": lambda: first_bytes(
            ["curl", "-s", "-o", "/dev/null", url + "/health"], listener),
        "sluice-bench (to its first request)": lambda: first_bytes(
            [args.bench, "--url", url, "--requests", "1",
             "--scrape-interval", "0", "--quiet"], listener),
    }
    times = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            times[name].append(run() * 1000)
    print("| process | median ms | min ms |")
    print("| --- | ---: | ---: |")
    for name, ts in times.items():
        print("| %s | %.1f | %.1f |" % (name, statistics.median(ts),
                                        min(ts)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Does sluice-bench measure what llama-server itself reports? Against one
llama-server, in rounds, the same streamed /completion requests are timed
by sluice-bench and by a minimal client written here (a raw socket, timed
from before it connects to the first token's bytes). Each answer's own
`timings` give llama-server's prompt time (prompt_ms) and its tokens
(predicted_n). Prints, per client, the median of TTFT - prompt_ms (what
the network, HTTP and llama-server's own hand-offs add to the prompt) and
whether the tokens counted equal predicted_n.

    python3 bench/trust.py --url http://127.0.0.1:8081 [--rounds 5] [--requests 20]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.parse

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BENCH = os.path.join(ROOT, "build", "bench", "sluice-bench")


def raw_request(host, port, body):
    """(TTFT ms, tokens seen, the final event's timings) of one stream."""
    data = json.dumps(body).encode()
    head = ("POST /completion HTTP/1.1\r\nHost: %s\r\nContent-Type: "
            "application/json\r\nContent-Length: %d\r\nConnection: close"
            "\r\n\r\n" % (host, len(data))).encode()
    # From before connecting, as llama-server closes after each stream and
    # every client's request opens a connection.
    start = time.perf_counter()
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(head + data)
    buf, first, tokens, timings = b"", None, 0, None
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                i = line.find(b"data: ")
                if i < 0:
                    continue
                ev = json.loads(line[i + 6:])
                if ev.get("content"):
                    tokens += 1
                    if first is None:
                        first = time.perf_counter()
                if ev.get("stop"):
                    timings = ev.get("timings")
    s.close()
    return (first - start) * 1000, tokens, timings


def by_raw(url, n, max_tokens):
    u = urllib.parse.urlsplit(url)
    gaps, same = [], 0
    for i in range(n):
        body = {"prompt": "river stone light north quiet field %d" % i,
                "n_predict": max_tokens, "stream": True, "seed": i,
                "temperature": 0}
        ttft, tokens, t = raw_request(u.hostname, u.port, body)
        gaps.append(ttft - t["prompt_ms"])
        same += tokens == t["predicted_n"]
    return gaps, same


def by_bench(url, n, max_tokens):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.jsonl")
        subprocess.run([BENCH, "--url", url, "--endpoint", "completion",
                        "--requests", str(n), "--max-tokens",
                        str(max_tokens), "--scrape-interval", "0",
                        "--quiet", "--jsonl", out],
                       stdout=subprocess.DEVNULL, check=False)
        recs = [json.loads(line) for line in open(out)]
    gaps = [r["ttft_ms"] - r["llama_prompt_ms"] for r in recs]
    same = sum(r["output_tokens"] == r["llama_predicted_n"] for r in recs)
    return gaps, same


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="a llama-server")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    result = {"sluice-bench": ([], 0), "raw socket client": ([], 0)}
    for _ in range(args.rounds):
        for name, run in (("sluice-bench", by_bench),
                          ("raw socket client", by_raw)):
            gaps, same = run(args.url, args.requests, args.max_tokens)
            result[name] = (result[name][0] + gaps, result[name][1] + same)
    n = args.rounds * args.requests
    print("| client | requests | TTFT - prompt_ms p50 | p90 | tokens = predicted_n |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (gaps, same) in result.items():
        gaps.sort()
        print("| %s | %d | %.2f ms | %.2f ms | %d of %d |" % (
            name, len(gaps), statistics.median(gaps),
            gaps[int(0.9 * (len(gaps) - 1))], same, n))


if __name__ == "__main__":
    main()

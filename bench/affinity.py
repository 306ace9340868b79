#!/usr/bin/env python3
"""Prefix affinity, measured: bench/affinity.py [--rounds N] [--turns N]

Two llama-servers of the slow demo model (4 slots each by default, one
thread each) behind
one sluice, which is started twice per round: with --affinity on and with
--affinity off, alternating. The workload is what affinity is for: 8 long
system prompts, each followed by many short user turns, sent by 4 clients at
once (client i cycles through the prompts starting at prompt 2i, so every
prompt is in use all the time). Four clients on eight slots: sluice sends a
request to a replica with a free slot (it never holds one back while a slot
is free), so affinity can only choose where both replicas have room; with
every slot busy the one free slot decides. The first WARMUP turns of each
client are not counted: they load the prompts into the slots, from whatever
the run before left there.

llama-server 0.7.0 also keeps prompts' KV states in host memory
(--cache-ram, 8 GiB by default) and restores them into any slot. The demo
model's states are a few megabytes, so that cache soon holds every prompt on
both replicas and either mode hits; a real model's states are hundreds of
megabytes per long prompt, and a replica's cache holds a few. So the
replicas run with --cache-ram 0 by default (--cache-ram MIB to change it):
only the slots' own KV cache counts, as for prompts that do not fit. Every answer carries llama-server's own
timings: prompt_n is the prompt tokens it evaluated, cache_n the tokens it
took from a slot's cache. The table gives, per mode, the share of prompt
tokens served from the cache and the requests per second.

Needs a build (./deploy/setup.sh); writes a Markdown table to stdout.
"""
import argparse
import concurrent.futures
import json
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("SLUICE_BIN", os.path.join(ROOT, "build", "sluice"))
import sluice_test as st  # noqa: E402

MODEL = os.path.join(ROOT, "build", "tests", "demo-slow.gguf")
PROMPTS = 8
CLIENTS = 4
SLOTS = 4
WARMUP = 2
# About 1,500 tokens each: long against the turns (a dozen tokens), short
# against a slot's context.
SYSTEM_CHARS = 1500


def system_prompt(i):
    words = ["policy", "ledger", "harbor", "violet", "engine", "meadow",
             "signal", "copper", "quartz", "window", "thread", "summit"]
    out, k = [], i * 7919
    while sum(len(w) + 1 for w in out) < SYSTEM_CHARS:
        k = (k * 1103515245 + 12345) % (1 << 31)
        out.append(words[k % len(words)])
    return "You are assistant %d. Rules: %s." % (i, " ".join(out))


def client(port, c, turns, results):
    for t in range(WARMUP + turns):
        p = (2 * c + t) % PROMPTS
        body = {"messages": [
            {"role": "system", "content": system_prompt(p)},
            {"role": "user", "content": "Question %d from client %d?" % (t, c)}],
            "max_tokens": 4, "temperature": 0}
        r = st.request(port, "POST", "/v1/chat/completions", body=body,
                       timeout=300)
        if r.status != 200:
            raise RuntimeError("status %d: %s" % (r.status, r.body[:200]))
        timings = r.json()["timings"]
        if t >= WARMUP:
            results.append((timings["prompt_n"], timings.get("cache_n", 0),
                            time.monotonic()))


def run(upstreams, affinity, turns):
    s = st.Sluice("--upstream", upstreams[0].url, "--upstream",
                  upstreams[1].url, "--affinity", affinity)
    try:
        s.wait_all_upstreams_ready()
        results = []
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            futures = [pool.submit(client, s.port, c, turns, results)
                       for c in range(CLIENTS)]
            for f in futures:
                f.result()
        picks = {}
        for line in s.get("/metrics").body.decode().splitlines():
            m = re.match(r'sluice_affinity_picks_total\{result="(\w+)"\} '
                         r'(\d+)', line)
            if m:
                picks[m.group(1)] = int(m.group(2))
    finally:
        s.stop()
    prompt = sum(r[0] for r in results)
    cached = sum(r[1] for r in results)
    # Throughput over the counted turns: from the first counted answer
    # to the last, per answer in between.
    ends = sorted(r[2] for r in results)
    return {"cached_share": cached / (prompt + cached),
            "evaluated": prompt, "cached": cached,
            "rps": (len(ends) - 1) / (ends[-1] - ends[0]),
            "picks": picks}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--slots", type=int, default=SLOTS,
                    help="slots per llama-server")
    ap.add_argument("--cache-ram", type=int, default=0,
                    help="llama-server's --cache-ram, MiB (0: off)")
    args = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit("bench/affinity.py: %s is missing: build first "
                 "(./deploy/setup.sh)" % MODEL)
    servers = [st.LlamaServer(MODEL, slots=args.slots, ctx=4096,
                              extra=st.LLAMA_ONE_THREAD +
                              ("--cache-ram", str(args.cache_ram)))
               for _ in range(2)]
    runs = {"on": [], "off": []}
    try:
        for r in range(args.rounds):
            # Each run starts from cold caches' worth of churn: the other
            # mode's run left every slot holding some prompt, which is the
            # steady state either way.
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                res = run(servers, mode, args.turns)
                runs[mode].append(res)
                print("round %d affinity %s: %s" % (r + 1, mode,
                                                    json.dumps(res)),
                      file=sys.stderr)
    finally:
        for s in servers:
            s.kill()
    print("| affinity | prompt tokens from cache (median) | tokens evaluated "
          "(median) | requests/s (median) |")
    print("| --- | ---: | ---: | ---: |")
    for mode in ("on", "off"):
        rs = runs[mode]
        print("| %s | %.1f%% | %d | %.2f |" % (
            mode, 100 * statistics.median(x["cached_share"] for x in rs),
            statistics.median(x["evaluated"] for x in rs),
            statistics.median(x["rps"] for x in rs)))


if __name__ == "__main__":
    main()

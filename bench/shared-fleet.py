#!/usr/bin/env python3
"""Several sluices, one llama-server, measured:

    bench/shared-fleet.py MODEL SECONDS RATE [two|third|one]

A llama-server of MODEL (4 slots, one thread, --metrics) and, for `two`,
two sluices in front of it with no split of its slots (--max-queue
$MAXQ, default 16, each); for `third`, one sluice, and a third client
calling llama-server directly, two requests at a time; for `one`, one
sluice alone, for scale. First 40 urgent requests one at a time
(the unloaded time to first token); with RATE 0, a closed loop of 16 for
5 s through the first sluice gives the capacity, and RATE is twice that
shared among the sluices. Then one sluice-bench per sluice, Poisson
arrivals at RATE for SECONDS, 10% urgent, streams of TOK (64) tokens,
while llama-server's /metrics and the sluices' queues are sampled every
50 ms. Prints the share of samples with every slot busy among those with
a request waiting in a sluice's queue, llama-server's deferred requests,
and each run's outcomes and urgent time to first token. Run from the
repository root, after a build."""
import json, os, re, subprocess, sys, threading, time, urllib.request
LS = "/root/.cache/sluice/llama.cpp/bin/llama-server"
MODEL = sys.argv[1]; DUR = int(sys.argv[2]); RATE = float(sys.argv[3])
MODE = sys.argv[4] if len(sys.argv) > 4 else "two"
OUT = os.environ.get("OUT", "/tmp/shared-fleet")
os.makedirs(OUT, exist_ok=True)
LP, S1, S2 = 18941, 18942, 18943
def get(url):
    return urllib.request.urlopen(url, timeout=5).read().decode()
def val(text, name):
    m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else 0.0
procs = []
env = dict(os.environ, LLAMA_ARG_UI="0", LLAMA_ARG_NO_WEBUI="1")
procs.append(subprocess.Popen([LS, "--host", "127.0.0.1", "--port", str(LP), "-m", MODEL, "-np", "4", "-c", "8192", "--no-kv-unified", "--metrics", "--threads", "1", "--threads-http", "32"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
sluices = [S1] if MODE in ("third", "one") else [S1, S2]
for p in sluices:
    procs.append(subprocess.Popen(["build/sluice", "--listen", "127.0.0.1:%d" % p, "--upstream", "http://127.0.0.1:%d" % LP, "--max-queue", os.environ.get("MAXQ", "16")], stdout=subprocess.DEVNULL, stderr=open("%s/sluice-%d.log" % (OUT, p), "w")))
def up(p):
    try: return urllib.request.urlopen("http://127.0.0.1:%d/ready" % p, timeout=2).status == 200
    except Exception: return False
while not all(up(p) for p in sluices): time.sleep(0.2)
bench = "build/bench/sluice-bench"
common = ["--max-tokens", os.environ.get("TOK", "64"), "--stream", "on"]
# Unloaded urgent TTFT, one at a time.
subprocess.run([bench, "--url", "http://127.0.0.1:%d" % S1, "--concurrency", "1", "--requests", "40", "--priority-mix", "urgent=1", "--json", OUT + "/unloaded.json"] + common, stdout=subprocess.DEVNULL)
if RATE == 0:
    subprocess.run([bench, "--url", "http://127.0.0.1:%d" % S1, "--concurrency", "16", "--duration", "5", "--requests", "100000", "--json", OUT + "/cap.json"] + common, stdout=subprocess.DEVNULL)
    cap = json.load(open(OUT + "/cap.json"))["runs"][0]["request_throughput"]
    RATE = round(cap * 2 / len(sluices), 1)
    print("capacity %.1f req/s; each of %d sluice-benches at %.1f" % (cap, len(sluices), RATE))
samples = []; stop = threading.Event()
def sample():
    while not stop.is_set():
        t = get("http://127.0.0.1:%d/metrics" % LP)
        q = 0
        for p in sluices:
            q += sum(float(v) for v in re.findall(r"^sluice_queue_depth\{[^}]*\} (\S+)$", get("http://127.0.0.1:%d/metrics" % p), re.M))
        samples.append((val(t, "llamacpp:requests_processing"), val(t, "llamacpp:requests_deferred"), q))
        stop.wait(0.05)
th = threading.Thread(target=sample); th.start()
runs = []
third = []
if MODE == "third":
    # A third client calls llama-server directly, closed loop, 2 at a time.
    def direct():
        body = json.dumps({"prompt": "hello", "n_predict": 64}).encode()
        while not stop.is_set():
            r = urllib.request.Request("http://127.0.0.1:%d/completion" % LP, data=body, headers={"Content-Type": "application/json"})
            third.append(urllib.request.urlopen(r, timeout=60).status)
    dth = [threading.Thread(target=direct) for _ in range(2)]
    for d in dth: d.start()
for i, p in enumerate(sluices):
    runs.append(subprocess.Popen([bench, "--url", "http://127.0.0.1:%d" % p, "--rate", str(RATE), "--duration", str(DUR), "--requests", "100000", "--priority-mix", "urgent=0.1,normal=0.9", "--json", OUT + "/loaded%d.json" % i, "--seed", str(i + 1)] + common, stdout=subprocess.DEVNULL))
for r in runs: r.wait()
stop.set(); th.join()
if MODE == "third":
    for d in dth: d.join()
for p in procs: p.terminate()
waiting = [s for s in samples if s[2] > 0]
full = sum(1 for s in waiting if s[0] + 0 >= 4)
print("samples", len(samples), "while waiting", len(waiting), "slots full while waiting %.3f" % (full / max(1, len(waiting))))
print("max deferred", max(s[1] for s in samples), "deferred>0 share %.3f" % (sum(1 for s in samples if s[1] > 0) / len(samples)))
print("samples by deferred", {int(d): sum(1 for s in samples if s[1] == d) for d in sorted(set(s[1] for s in samples))})
if third: print("third client answers", len(third), set(third))
def show(f):
    r = json.load(open(f))["runs"][0]
    u = r["groups"]["priority"]["urgent"] if "groups" in r and r["groups"].get("priority") else r
    o = r["outcomes"]["all"]
    print("%s: %d requests, 2xx %d, 429 %d, 503 %d, other %d; urgent TTFT p50 %.1f p99 %.1f ms (%d urgent)" % (os.path.basename(f), r["num_prompts"], o["2xx"], o["429"], o["503"], o["other"], u["median_ttft_ms"], u["p99_ttft_ms"], u["num_prompts"]))
for f in [OUT + "/unloaded.json"] + [OUT + "/loaded%d.json" % i for i in range(len(sluices))]:
    show(f)

"""sluice-bench (bench/harness) end to end: against bench/mock-llama-server,
whose delays are what it is told, through sluice, and against a real
llama-server where only it can answer (its /slots). Each test runs the
bench once or a few times, briefly, and checks its JSON document and its
per-request JSONL: the open-loop schedule, latency from the intended start
(coordinated omission), the SLO arithmetic, tenants and fairness,
admission outcomes and Retry-After, Server-Timing, cancellation, failover,
a model mix, the SLO search, repetitions, multi-turn sessions and the
errors of bad options.

No figure is compared with an absolute time: latencies have the mock's
set delays as lower bounds, and the arrivals' intended times are the
generator's seeded schedule, the same on any machine."""

import hashlib
import http.server
import json
import math
import os
import re
import statistics
import subprocess
import threading
import time

import sluice_test as st

BENCH = os.path.join(os.path.dirname(st.SLUICE), "bench", "sluice-bench")
SHAREGPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "bench", "data", "sharegpt-sample.json")

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240

# The mock's timers count whole milliseconds (libuv's clock), so a wait it
# is told to make can end up to this much earlier than a finer clock says.
MOCK_CLOCK_MS = 1


def gaps(times):
    times = sorted(times)
    return [b - a for a, b in zip(times, times[1:])]


def cv(xs):
    """Coefficient of variation: standard deviation over mean."""
    return statistics.pstdev(xs) / statistics.fmean(xs)


def end_ms(rec):
    """When a request's answer ended, from the run's start."""
    return rec["intended_ms"] + rec["e2el_ms"]


def ok(rec):
    return rec["error"] is None and 200 <= rec["status"] < 300


def keys_yaml(keys):
    """{name: secret} as a sluice configuration file's keys: section."""
    lines = ["keys:"]
    for name, secret in keys.items():
        lines += ["  %s:" % name, "    hash: sha256:%s"
                  % hashlib.sha256(secret.encode()).hexdigest()]
    return "\n".join(lines) + "\n"


def metric(text, line_start):
    """The value of the one /metrics line that starts with line_start."""
    (value,) = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith(line_start + " ")]
    return value


def words(text):
    """Words as the mock counts them into a prompt's tokens."""
    return len(text.split())


def sharegpt_turns(path, max_turns):
    """Per conversation of the file that has a user turn: its first
    max_turns user turns, each (text, max_tokens from the reply after it:
    4 tokens to 3 words)."""
    with open(path) as f:
        convs = json.load(f)
    out = []
    for conv in convs:
        turns = conv["conversations"]
        mine = []
        for i, t in enumerate(turns):
            if t["from"] not in ("human", "user") or not t["value"].strip():
                continue
            if len(mine) == max_turns:
                break
            reply = turns[i + 1]["value"] if i + 1 < len(turns) else ""
            mine.append((t["value"], max(1, (words(reply) * 4 + 2) // 3)))
        if mine:
            out.append(mine)
    return out


def jain(xs):
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def nearest_rank(xs, p):
    """The p-th percentile as sluice-bench takes it: the ceil(p/100 n)-th
    of the n sorted values."""
    xs = sorted(xs)
    return xs[max(1, math.ceil(p / 100 * len(xs))) - 1]


class Answer:
    """What a ScriptedSluice answers one request with: a status, header
    lines, and for a 200 a stream of chat events, each after its delay (s)
    from the one before; for an error, a JSON body."""

    def __init__(self, status=200, headers=(), tokens=(), body=None):
        self.status, self.headers = status, list(headers)
        self.tokens, self.body = list(tokens), body


def refusal(status, reason=None, retry_after=True, predicted=None,
            queue=None):
    """sluice's refusal as issue 40 writes it: the error body (with its
    reason when one), Retry-After and retry-after-ms, Server-Timing."""
    kind = "rate_limit_error" if status == 429 else "unavailable_error"
    err = {"code": status, "message": "refused", "type": kind}
    if reason:
        err["reason"] = reason
    headers = []
    if retry_after:
        headers += [("Retry-After", "1"), ("retry-after-ms", "20")]
    timing = []
    if queue is not None:
        timing.append("queue;dur=%g" % queue)
    if predicted is not None:
        timing.append("predicted;dur=%.1f" % predicted)
    if timing:
        headers.append(("Server-Timing", ", ".join(timing)))
    return Answer(status, headers, body=json.dumps({"error": err}))


def served(predicted=None, first_s=0.0, tokens=3):
    """A stream of `tokens` tokens, the first after first_s seconds, with
    sluice's predicted TTFT in Server-Timing when given."""
    headers = []
    if predicted is not None:
        headers.append(("Server-Timing",
                        "queue;dur=0, upstream;dur=1.5, predicted;dur=%.1f"
                        % predicted))
    return Answer(200, headers, tokens=[first_s] + [0.0] * (tokens - 1))


class ScriptedSluice(http.server.ThreadingHTTPServer):
    """A stand-in for a sluice with SLO-aware admission (issue 40, which
    sluice itself may not have yet): each chat request is answered with
    what script(body, headers) returns (an Answer), and recorded in `seen`
    as (its body's seed, its headers). Anything else (the bench's
    /metrics) is a 404."""

    daemon_threads = True

    def __init__(self, script):
        self.script = script
        self.seen = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.url = "http://127.0.0.1:%d" % self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def handle_error(self, request, client_address):
        pass  # the bench closing a kept-alive connection is no error

    def stop(self):
        self.shutdown()
        self.server_close()


class _ScriptedHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Each event goes at once, as sluice sends it (TCP_NODELAY).
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n))
        srv = self.server
        with srv.lock:
            srv.seen.append((body.get("seed"), self.headers))
        a = srv.script(body, self.headers)
        self.send_response(a.status)
        for k, v in a.headers:
            self.send_header(k, v)
        if a.status != 200:
            out = a.body.encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for k, delay in enumerate(a.tokens):
            if delay:
                time.sleep(delay)  # the answer's pace, as a server's
            event = {"choices": [{"index": 0, "delta":
                                  {"content": " tok%d" % k}}]}
            self.chunk(b"data: %s\n\n" % json.dumps(event).encode())
        usage = {"choices": [], "usage": {"prompt_tokens": 1,
                                          "completion_tokens":
                                          len(a.tokens)}}
        self.chunk(b"data: %s\n\ndata: [DONE]\n\n"
                   % json.dumps(usage).encode())
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Bench(st.TestCase):

    def run_bench(self, *args, rc=0, env=None):
        """Runs sluice-bench to its end (with env's variables added to
        its environment); returns (its finished process, the JSON
        document, the JSONL records). Checks its exit status."""
        out = os.path.join(self.tmp, "run.json")
        lines = os.path.join(self.tmp, "run.jsonl")
        r = subprocess.run([BENCH, "--quiet", "on", "--json", out,
                            "--jsonl", lines, *args],
                           capture_output=True, text=True,
                           env=dict(os.environ, **(env or {})),
                           timeout=SAFETY_NET_S)
        if rc is not None:
            self.assertEqual(r.returncode, rc, r.stderr)
        with open(out) as f:
            doc = json.load(f)
        with open(lines) as f:
            recs = [json.loads(line) for line in f]
        self.assertEqual(doc["tool"], "sluice-bench")
        return r, doc, recs

    def mock(self, *args):
        return self.mock_llama_server(*args)

    def scripted(self, script):
        srv = ScriptedSluice(script)
        self.addCleanup(srv.stop)
        return srv

    def check_adds_up(self, run, sent):
        self.assertEqual(run["success"] + run["fail"], sent)
        self.assertEqual(run["requests"], sent)
        self.assertEqual(run["num_prompts"], sent)
        self.assertEqual(run["completed"], run["success"])
        self.assertEqual(run["failed"], run["fail"])
        self.assertLessEqual(run["p50_latency_ms"], run["p95_latency_ms"])
        self.assertLessEqual(run["p95_latency_ms"], run["p99_latency_ms"])
        self.assertGreater(run["req_per_s"], 0)
        self.assertEqual(run["req_per_s"], run["request_throughput"])
        self.assertEqual(run["p50_latency_ms"], run["median_e2el_ms"])
        self.assertEqual(run["elapsed_s"], run["duration"])

    # ---- the figures of the Markdown table, kept from the first bench ----

    def test_closed_loop_sweep_through_sluice(self):
        m = self.mock("--slots", "8", "--token-delay-ms", "1",
                      "--tokens", "12")
        s = self.sluice("--upstream", m.url)
        r, doc, recs = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port,
            "--endpoint", "chat", "--stream", "on",
            "--max-tokens", "12", "--requests", "40",
            "--concurrency-sweep", "1,4")
        runs = doc["runs"]
        self.assertEqual([x["concurrency"] for x in runs], [1, 4])
        self.assertEqual([x["max_concurrency"] for x in runs], [1, 4])
        self.assertEqual([x["request_rate"] for x in runs], [None, None])
        for k, run in enumerate(runs):
            self.check_adds_up(run, 40)
            self.assertEqual(run["fail"], 0)
            self.assertLessEqual(run["ttft_p50_ms"], run["ttft_p99_ms"])
            self.assertLessEqual(run["ttft_p99_ms"], run["p99_latency_ms"])
            self.assertIsNotNone(run["itl_p99_ms"])
            self.assertEqual(run["itl_p99_ms"], run["p99_itl_ms"])
            # 12 tokens each, counted from the usage event.
            self.assertEqual(run["total_output_tokens"], 12 * 40)
            self.assertAlmostEqual(run["output_tokens_per_s"],
                                   12 * run["req_per_s"], delta=1e-9)
            # Batches come from sluice's own summary.
            self.assertGreaterEqual(run["batches"], 1)
            self.assertGreaterEqual(run["avg_batch_size"], 1)
            mine = [x for x in recs if x["run"] == k]
            self.assertEqual(len(mine), 40)
            self.assertEqual([x["output_tokens"] for x in mine], [12] * 40)
        # The Markdown table has a column for every figure of a run.
        header = r.stdout.splitlines()[0]
        for col in ("requests", "concurrency", "success", "fail",
                    "avg latency ms", "p95 latency ms", "req/s",
                    "avg batch size", "batches", "p50 latency ms",
                    "p99 latency ms", "TTFT p50 ms", "TTFT p99 ms",
                    "ITL p99 ms", "output tok/s", "goodput req/s"):
            self.assertIn("| %s |" % col, header)

    def test_metrics_behind_an_admin_key(self):
        # sluice keeps /metrics for its admin key: without it the batch
        # columns are empty and sluice-bench says why, once; with
        # --metrics-key they are filled. A bare --quiet is --quiet on.
        m = self.mock("--slots", "2", "--tokens", "4")
        s = self.sluice("--upstream", m.url, "--api-key", "client",
                        "--admin-key", "admin")
        url = "http://127.0.0.1:%d" % s.port
        common = ("--url", url, "--api-key", "client", "--max-tokens", "4",
                  "--requests", "4", "--concurrency-sweep", "1,2")
        r, doc, _ = self.run_bench(*common, "--quiet")
        self.assertEqual(r.stderr, "sluice-bench: %s/metrics answered 403: "
                         "the batch columns stay empty; give sluice's "
                         "admin key with --metrics-key\n" % url)
        self.assertEqual([x["batches"] for x in doc["runs"]], [None, None])
        r, doc, _ = self.run_bench(*common, "--metrics-key", "admin")
        self.assertEqual(r.stderr, "")
        for run in doc["runs"]:
            self.assertGreaterEqual(run["batches"], 1)

    def test_open_loop_with_a_priority_mix_and_failures(self):
        m = self.mock("--slots", "4", "--fail-rate", "0.25", "--seed", "3")
        s = self.sluice("--upstream", m.url)
        # sluice sends a 500 once more (--retries 1): a quarter of the
        # requests fail at the mock, fewer reach the bench.
        r, doc, recs = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port,
            "--endpoint", "completion", "--stream", "off",
            "--rate", "100", "--requests", "120",
            "--priority-mix", "urgent=0.3,normal=0.7", rc=1)
        # Some requests failed: exit status 1, so that scripts notice.
        (run,) = doc["runs"]
        self.check_adds_up(run, 120)
        self.assertEqual(len(recs), 120)
        self.assertEqual(run["request_rate"], 100)
        self.assertEqual(run["burstiness"], 1)
        self.assertIsNone(run["max_concurrency"])
        prios = run["groups"]["priority"]
        self.assertEqual(sorted(prios), ["normal", "urgent"])
        for name, g in prios.items():
            mine = [x for x in recs if x["priority"] == name]
            self.assertEqual(g["num_prompts"], len(mine))
            self.assertEqual(g["completed"], sum(map(ok, mine)))
            self.assertEqual(g["failed"], len(mine) - g["completed"])
        self.assertEqual(sum(g["num_prompts"] for g in prios.values()), 120)
        failed = [x for x in recs if not ok(x)]
        self.assertEqual(run["fail"], len(failed))
        self.assertGreater(run["fail"], 0)
        self.assertGreater(run["success"], run["fail"])
        self.assertEqual({x["error"] for x in failed}, {"HTTP 500"})
        self.assertEqual(run["outcomes"]["all"]["other"], len(failed))
        # The Markdown table: the run, then one row per priority sent
        # (the tables after it, of sluice's predictions, are another
        # matter).
        first_table = r.stdout.split("\n\n")[0].splitlines()
        rows = [line.split("|")[1].strip()
                for line in first_table[2:] if line.startswith("|")]
        self.assertEqual(rows, ["run", "urgent", "normal"])
        # The run lasts from its first arrival to its last answer.
        self.assertGreaterEqual(run["duration"] * 1000,
                                max(map(end_ms, recs)) - 1e-6)
        self.assertAlmostEqual(run["req_per_s"],
                               run["success"] / run["elapsed_s"],
                               delta=1e-9)

    # ---- open loop: the schedule of arrivals ----

    def arrivals(self, url, *args):
        """The sorted intended starts (ms) of one open-loop run."""
        _, doc, recs = self.run_bench(
            "--url", url, "--endpoint", "completion", "--stream", "off",
            "--max-tokens", "1", "--requests", "100000", *args)
        (run,) = doc["runs"]
        self.assertEqual(run["num_prompts"], len(recs))
        self.assertEqual(run["fail"], 0)
        # Each goes when it is due, never before.
        for x in recs:
            self.assertGreaterEqual(x["sent_ms"], x["intended_ms"])
        return run, sorted(x["intended_ms"] for x in recs)

    def test_open_loop_arrivals_follow_their_process(self):
        # The intended starts are the generator's seeded schedule, which
        # no machine's speed changes; the mock answers at once.
        m = self.mock("--slots", "64")
        rate, duration = 1000, 2
        mean_gap = 1000 / rate
        common = ("--rate", str(rate), "--duration", str(duration))

        # Poisson: exponential gaps, mean 1/rate, coefficient of variation
        # 1. Over n gaps the mean's standard error is mean/sqrt(n), and the
        # CV's about 1/sqrt(n) (the delta method: an exponential's excess
        # kurtosis is 6): the tolerances are four standard errors.
        run, t = self.arrivals(m.url, *common, "--arrivals", "poisson")
        self.assertEqual(run["burstiness"], 1)
        g = gaps(t)
        n = len(g)
        self.assertAlmostEqual(statistics.fmean(g), mean_gap,
                               delta=4 * mean_gap / math.sqrt(n))
        self.assertAlmostEqual(cv(g), 1, delta=4 / math.sqrt(n))

        # Constant: the gaps are all 1/rate, to the nanosecond (times are
        # whole nanoseconds, rounded down).
        run, t = self.arrivals(m.url, *common, "--arrivals", "constant")
        self.assertIsNone(run["burstiness"])
        self.assertEqual(t[0], 0)
        for k, x in enumerate(t):
            self.assertAlmostEqual(x, k * mean_gap, delta=2e-6)
        g = gaps(t)
        self.assertLess(cv(g), 1e-6)

        # Gamma of shape k = 0.25: CV^2 = 1/k = 4. The mean's standard
        # error is CV * mean/sqrt(n); CV^2's, by the delta method, about
        # CV^2 * sqrt((2 + 2/k) / n) (skewness 2/sqrt(k), excess kurtosis
        # 6/k). Four of those around 4 still keep Poisson's 1 out.
        k = 0.25
        run, t = self.arrivals(m.url, *common, "--arrivals", "gamma",
                               "--burstiness", str(k))
        self.assertEqual(run["burstiness"], k)
        g = gaps(t)
        n = len(g)
        self.assertAlmostEqual(statistics.fmean(g), mean_gap,
                               delta=4 * 2 * mean_gap / math.sqrt(n))
        se = (1 / k) * math.sqrt((2 + 2 / k) / n)
        self.assertAlmostEqual(cv(g) ** 2, 1 / k, delta=4 * se)
        self.assertGreater(1 / k - 4 * se, 1)

    def test_a_ramp_raises_the_rate_linearly(self):
        m = self.mock("--slots", "64")
        # Constant gaps in time warped by a rate rising linearly over the
        # ramp: arrival k is due at sqrt(2 * ramp * k / rate) during it
        # (rate * ramp / 2 of them), then every 1/rate: the first ramp's
        # length of time holds half as many as the next, exactly.
        rate, ramp = 200, 0.5
        _, t = self.arrivals(m.url, "--rate", str(rate), "--ramp", str(ramp),
                             "--duration", str(2.5 * ramp),
                             "--arrivals", "constant")
        during = int(rate * ramp / 2)
        for k, x in enumerate(t):
            due = (math.sqrt(2 * ramp * k / rate) if k < during
                   else ramp + (k - during) / rate)
            self.assertAlmostEqual(x, 1000 * due, delta=1e-5)
        first = sum(1 for x in t if x < 1000 * ramp)
        second = sum(1 for x in t if 1000 * ramp <= x < 2000 * ramp)
        self.assertEqual((first, second), (during, 2 * during))

        # Poisson arrivals: about half as many, within four standard
        # errors of the ratio of two Poisson counts.
        rate, ramp = 400, 1
        _, t = self.arrivals(m.url, "--rate", str(rate), "--ramp", str(ramp),
                             "--duration", str(2 * ramp))
        first = sum(1 for x in t if x < 1000 * ramp)
        second = sum(1 for x in t if 1000 * ramp <= x < 2000 * ramp)
        self.assertLess(first, second)
        se = 0.5 * math.sqrt(1 / first + 1 / second)
        self.assertAlmostEqual(first / second, 0.5, delta=4 * se)

    def test_latency_counts_from_the_intended_start(self):
        # Coordinated omission: one slot that takes at least P + 4 T per
        # answer of 5 tokens, and arrivals three times faster than that.
        # A bench that timed each request from when it went out would
        # hide the queue; this one counts from when each was due.
        prompt_ms, token_ms, tokens = 20, 20, 5
        least = prompt_ms + (tokens - 1) * token_ms - MOCK_CLOCK_MS
        m = self.mock("--slots", "1", "--prompt-delay-ms", str(prompt_ms),
                      "--token-delay-ms", str(token_ms))
        s = self.sluice("--upstream", m.url)
        n = 20
        _, doc, recs = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port,
            "--rate", str(3 * 1000 / least), "--arrivals", "constant",
            "--requests", str(n), "--max-tokens", str(tokens))
        (run,) = doc["runs"]
        self.assertEqual((run["completed"], len(recs)), (n, n))
        for x in recs:
            self.assertEqual(x["output_tokens"], tokens)
            # TTFT and E2EL run from the intended start, which came
            # before the request went out.
            self.assertGreaterEqual(x["sent_ms"], x["intended_ms"])
            self.assertGreaterEqual(
                x["ttft_ms"], x["sent_ms"] - x["intended_ms"]
                + prompt_ms - MOCK_CLOCK_MS)
            self.assertGreaterEqual(
                x["e2el_ms"], x["sent_ms"] - x["intended_ms"] + least)
            self.assertGreaterEqual(x["e2el_ms"], x["ttft_ms"])
        # One slot serves them one after another: the k-th answer to end
        # (from 0) ends no sooner than (k + 1) answers' time after the
        # run's start, however soon it was sent.
        for k, end in enumerate(sorted(map(end_ms, recs))):
            self.assertGreaterEqual(end, (k + 1) * least)
        # The queue builds: the last arrivals wait longest.
        by_arrival = [x["e2el_ms"] for x in
                      sorted(recs, key=lambda x: x["intended_ms"])]
        tenth = n // 10
        self.assertGreater(statistics.median(by_arrival[-tenth:]),
                           statistics.median(by_arrival[:tenth]))
        self.assertAlmostEqual(run["mean_e2el_ms"],
                               statistics.fmean(x["e2el_ms"] for x in recs),
                               delta=1e-9 * run["mean_e2el_ms"])

    # ---- SLOs and goodput ----

    def test_slo_arithmetic_on_known_delays(self):
        prompt_ms, token_ms, tokens = 40, 10, 4
        m = self.mock("--slots", "4", "--prompt-delay-ms", str(prompt_ms),
                      "--token-delay-ms", str(token_ms))
        common = ("--url", m.url, "--max-tokens", str(tokens),
                  "--concurrency", "2", "--requests", "12")

        def check_records(recs):
            for x in recs:
                self.assertEqual(x["output_tokens"], tokens)
                self.assertGreaterEqual(x["ttft_ms"],
                                        prompt_ms - MOCK_CLOCK_MS)
                # TPOT: the gaps after the first token, which the mock
                # spaces token_ms apart. The bench times them from when
                # the first token reached it, so they look shorter by as
                # much as that token came late (its TTFT beyond the
                # prompt's delay): that much is the bound.
                self.assertAlmostEqual(
                    x["tpot_ms"], (x["e2el_ms"] - x["ttft_ms"]) / (tokens - 1),
                    delta=1e-9 * x["tpot_ms"])
                self.assertGreaterEqual(
                    x["tpot_ms"] * (tokens - 1),
                    (tokens - 1) * token_ms - (x["ttft_ms"] - prompt_ms)
                    - MOCK_CLOCK_MS)

        # Half the prompt's delay: no request can meet it.
        _, doc, recs = self.run_bench(*common, "--slo", "ttft=%g" %
                                      (prompt_ms / 2))
        (run,) = doc["runs"]
        check_records(recs)
        self.assertEqual(run["slo"], {"ttft_ms": prompt_ms / 2,
                                      "tpot_ms": None, "e2el_ms": None})
        self.assertEqual(run["completed"], 12)
        self.assertEqual((run["goodput_fraction"], run["request_goodput"]),
                         (0, 0))
        self.assertGreaterEqual(run["mean_ttft_ms"], prompt_ms - MOCK_CLOCK_MS)
        self.assertAlmostEqual(run["mean_tpot_ms"],
                               statistics.fmean(x["tpot_ms"] for x in recs),
                               delta=1e-9 * run["mean_tpot_ms"])

        # A minute for everything, in each of the units taken: all meet.
        _, doc, recs = self.run_bench(
            *common, "--slo", "ttft=60s,tpot=60000ms,e2e=60000")
        (run,) = doc["runs"]
        check_records(recs)
        self.assertEqual(run["slo"], {"ttft_ms": 60000, "tpot_ms": 60000,
                                      "e2el_ms": 60000})
        self.assertEqual(run["goodput_fraction"], 1)
        self.assertEqual(run["request_goodput"], run["request_throughput"])

    def test_goodput_recomputed_from_the_records(self):
        # One slot and arrivals faster than it serves, so latencies grow
        # through the run; a quarter of the answers fail at once. Whatever
        # the machine's pace, the run's goodput must be what its records
        # say: the requests answered whole that met every SLO.
        prompt_ms, token_ms, tokens = 40, 10, 4
        least = prompt_ms + (tokens - 1) * token_ms - MOCK_CLOCK_MS
        m = self.mock("--slots", "1", "--prompt-delay-ms", str(prompt_ms),
                      "--token-delay-ms", str(token_ms),
                      "--fail-rate", "0.25", "--seed", "5")
        slo = {"ttft_ms": 250, "tpot_ms": 15, "e2el_ms": 300}
        n = 16
        _, doc, recs = self.run_bench(
            "--url", m.url, "--max-tokens", str(tokens),
            "--rate", "40", "--arrivals", "constant", "--requests", str(n),
            "--slo", "ttft=250ms,tpot=15,e2el=0.3s", rc=1)
        (run,) = doc["runs"]
        self.assertEqual(run["slo"], slo)
        answered = [x for x in recs if ok(x)]
        good = [x for x in answered
                if x["ttft_ms"] <= slo["ttft_ms"]
                and x["tpot_ms"] <= slo["tpot_ms"]
                and x["e2el_ms"] <= slo["e2el_ms"]]
        self.assertEqual(run["completed"], len(answered))
        self.assertLess(run["completed"], n)
        self.assertEqual(run["goodput_fraction"], len(good) / n)
        self.assertAlmostEqual(run["request_goodput"],
                               len(good) / run["duration"], delta=1e-9)
        self.assertEqual(run["groups"]["priority"]["none"]["request_goodput"],
                         run["request_goodput"])
        # The slot serves the answers one after another, the last of them
        # ending no sooner than len(answered) answers' time from the
        # start, past its E2E SLO: not every answer can be good.
        last = max(answered, key=end_ms)
        self.assertGreater(len(answered) * least - last["intended_ms"],
                           slo["e2el_ms"])
        self.assertLess(len(good), len(answered))

    def test_itl_counts_only_the_streams_that_completed(self):
        # Inter-token gaps measure served answers: those of a stream cut
        # short (the mock closes every answer half-way) or left on purpose
        # are not counted (issue 41). Each run's tokens did come, gaps
        # apart, before the cut or the leave.
        m = self.mock("--slots", "2", "--token-delay-ms", "5",
                      "--close-rate", "1")
        _, doc, recs = self.run_bench(
            "--url", m.url, "--max-tokens", "8", "--concurrency", "2",
            "--requests", "4", rc=1)
        (run,) = doc["runs"]
        self.assertEqual(run["failed"], 4)
        self.assertEqual({x["ttft_ms"] is None for x in recs}, {False})
        self.assertEqual((run["median_itl_ms"], run["p99_itl_ms"],
                          run["itl_p99_ms"]), (None, None, None))

        m = self.mock("--slots", "2", "--token-delay-ms", "5")
        common = ("--url", m.url, "--max-tokens", "8", "--concurrency", "2",
                  "--requests", "4")
        _, doc, recs = self.run_bench(*common, "--cancel-share", "1",
                                      "--cancel-after-tokens", "4")
        (run,) = doc["runs"]
        self.assertEqual(run["cancelled"], 4)
        self.assertEqual((run["median_itl_ms"], run["p99_itl_ms"]),
                         (None, None))
        # The same streams served whole: their gaps count.
        _, doc, recs = self.run_bench(*common)
        (run,) = doc["runs"]
        self.assertEqual(run["completed"], 4)
        self.assertIsNotNone(run["median_itl_ms"])

    # ---- who sends it: tenants ----

    def test_tenants_shares_and_fairness_through_sluice(self):
        m = self.mock("--slots", "8")
        config = os.path.join(self.tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write(keys_yaml({"a": "sk-a", "b": "sk-b"}))
        s = self.sluice("--config", config, "--upstream", m.url,
                        "--admin-key", "admin")
        n = 200
        r, doc, recs = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port, "--metrics-key", "admin",
            "--tenant", "a:sk-a:1", "--tenant", "b:sk-b:3:urgent",
            "--concurrency", "4", "--requests", str(n), "--max-tokens", "4")
        (run,) = doc["runs"]
        self.assertEqual(run["completed"], n)
        tenants = run["groups"]["tenant"]
        self.assertEqual(sorted(tenants), ["a", "b"])
        a, b = tenants["a"], tenants["b"]
        self.assertEqual(a["num_prompts"] + b["num_prompts"], n)
        for name, g in tenants.items():
            mine = [x for x in recs if x["tenant"] == name]
            self.assertEqual(g["num_prompts"], len(mine))
            self.assertEqual(g["completed"], len(mine))
            self.assertEqual(g["service_tokens"],
                             sum(x["input_tokens"] + x["output_tokens"]
                                 for x in mine))
        # Shares 1 and 3: b's count is binomial(n, 3/4), within four
        # standard errors.
        self.assertAlmostEqual(b["num_prompts"], 0.75 * n,
                               delta=4 * math.sqrt(n * 0.75 * 0.25))
        # b's priority went with each of its requests; a's none.
        self.assertEqual({x["priority"] for x in recs if x["tenant"] == "b"},
                         {"urgent"})
        self.assertEqual(run["groups"]["priority"]["urgent"]["num_prompts"],
                         b["num_prompts"])
        self.assertEqual(run["groups"]["priority"]["none"]["num_prompts"],
                         a["num_prompts"])
        # sluice saw each tenant's key, and served it the same tokens.
        usage = s.get("/v1/usage",
                      headers={"Authorization": "Bearer admin"}).json()
        for name, g in tenants.items():
            u = usage["keys"][name]
            self.assertEqual(u["requests"], g["num_prompts"])
            self.assertEqual(u["prompt_tokens"] + u["completion_tokens"],
                             g["service_tokens"])
        # Jain's index over service per unit of weight.
        fair = run["fairness"]
        self.assertEqual(fair["over"], "tenant")
        self.assertEqual(fair["weights"], {"a": 1, "b": 3})
        self.assertAlmostEqual(
            fair["jain_index"],
            jain([a["service_tokens"] / 1, b["service_tokens"] / 3]),
            delta=1e-12)
        # The Markdown table of tenants.
        lines = r.stdout.splitlines()
        at = lines.index("| run | tenant | weight | requests | success | "
                         "fail | TTFT p99 ms | goodput req/s | "
                         "service tokens | Jain |")
        cells = [[c.strip() for c in line.split("|")[1:-1]]
                 for line in lines[at + 2:at + 4]]
        self.assertEqual([c[:6] + [c[8]] for c in cells], [
            ["0", "a", "1", str(a["num_prompts"]), str(a["completed"]), "0",
             str(a["service_tokens"])],
            ["0", "b", "3", str(b["num_prompts"]), str(b["completed"]), "0",
             str(b["service_tokens"])]])
        self.assertEqual(cells[0][9], "%.3f" % fair["jain_index"])

    # ---- admission: 429, Retry-After, retries ----

    def test_admission_outcomes_and_retry_after(self):
        # One slot and room for one waiting request: of six clients, most
        # are refused with 429 and sluice's Retry-After.
        m = self.mock("--slots", "1", "--token-delay-ms", "30")
        s = self.sluice("--upstream", m.url, "--max-queue", "1")
        n = 18
        common = ("--url", "http://127.0.0.1:%d" % s.port,
                  "--concurrency", "6", "--requests", str(n),
                  "--max-tokens", "4",
                  "--priority-mix", "urgent=0.5,batch=0.5")

        def check_sums(run, recs):
            outcomes = run["outcomes"]
            self.assertEqual(sorted(outcomes), ["all", "batch", "urgent"])
            for field in outcomes["all"]:
                self.assertEqual(outcomes["all"][field],
                                 outcomes["urgent"][field]
                                 + outcomes["batch"][field], field)
            for prio in ("urgent", "batch"):
                mine = [x for x in recs if x["priority"] == prio]
                o = outcomes[prio]
                self.assertEqual(o["2xx"], sum(map(ok, mine)))
                self.assertEqual(o["429"],
                                 sum(x["status"] == 429 for x in mine))
                self.assertEqual(o["retried"],
                                 sum(x["retries"] > 0 for x in mine))
                self.assertEqual(o["retried_ok"],
                                 sum(x["retries"] > 0 and ok(x)
                                     for x in mine))
            all_ = outcomes["all"]
            self.assertEqual(all_["2xx"] + all_["429"] + all_["503"]
                             + all_["other"] + all_["left"], n)
            self.assertEqual(all_["2xx"], run["completed"])

        # Refused requests go again when Retry-After says.
        _, doc, recs = self.run_bench(*common, "--retry", "on",
                                      "--max-retries", "100")
        (run,) = doc["runs"]
        check_sums(run, recs)
        o = run["outcomes"]["all"]
        self.assertGreater(o["retry_after"], 0)
        self.assertGreater(o["retried"], 0)
        self.assertEqual(o["retried"], sum(x["retries"] > 0 for x in recs))
        # Every refused request went again, until it was answered.
        self.assertEqual(o["retry_after"], o["retried"])
        self.assertEqual(o["retried_ok"], o["retried"])
        self.assertEqual(run["completed"], n)

        # Without retries, the 429s stay failures.
        _, doc, recs = self.run_bench(*common, "--retry", "off", rc=1)
        (run,) = doc["runs"]
        check_sums(run, recs)
        o = run["outcomes"]["all"]
        self.assertEqual((o["retried"], o["retried_ok"]), (0, 0))
        self.assertGreater(o["429"], 0)
        self.assertEqual(o["retry_after"], o["429"])
        self.assertEqual(run["failed"], o["429"])
        self.assertEqual({x["retries"] for x in recs}, {0})
        self.assertEqual({x["error"] for x in recs if not ok(x)},
                         {"HTTP 429"})

    # ---- Server-Timing: sluice's queue apart from its upstream ----

    def test_no_server_timing_from_llama_server_alone(self):
        m = self.mock("--slots", "2")
        _, doc, recs = self.run_bench("--url", m.url, "--requests", "6",
                                      "--max-tokens", "2")
        self.assertIsNone(doc["runs"][0]["server_timing"])
        for x in recs:
            self.assertEqual((x["queue_ms"], x["upstream_ms"],
                              x["server_ttft_ms"]), (None, None, None))

    def test_server_timing_through_sluice(self):
        # Needs sluice's Server-Timing header (queue;dur=, upstream;dur=,
        # ttft;dur=; src/relay/README.md), which sluice sends from issue
        # 31 on: a sluice without it fails here, on the header's absence.
        prompt_ms = 30
        m = self.mock("--slots", "1", "--prompt-delay-ms", str(prompt_ms),
                      "--token-delay-ms", "5")
        s = self.sluice("--upstream", m.url)
        _, doc, recs = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port, "--concurrency", "3",
            "--requests", "9", "--max-tokens", "3")
        (run,) = doc["runs"]
        st_ = run["server_timing"]
        self.assertIsNotNone(st_, "sluice sent no Server-Timing")
        for x in recs:
            self.assertTrue(ok(x))
            self.assertIsNotNone(x["queue_ms"])
            self.assertIsNotNone(x["upstream_ms"])
            self.assertGreaterEqual(x["queue_ms"], 0)
            # The upstream's part holds the mock's prompt delay (sluice
            # writes it in tenths of a millisecond, rounded); both parts
            # come before the first token reached the bench, within what
            # sluice rounds (its queue counts whole milliseconds).
            self.assertGreaterEqual(x["upstream_ms"],
                                    prompt_ms - MOCK_CLOCK_MS - 0.05)
            self.assertLessEqual(x["queue_ms"] + x["upstream_ms"],
                                 x["ttft_ms"] + 2)
        # Three clients on one slot: requests waited in sluice's queue.
        self.assertGreater(max(x["queue_ms"] for x in recs), 0)
        for name, field in (("queue", "queue_ms"),
                            ("upstream", "upstream_ms")):
            values = [x[field] for x in recs]
            self.assertAlmostEqual(st_[name]["mean"],
                                   statistics.fmean(values), delta=1e-9)
            self.assertEqual(st_[name]["p50"], statistics.median(values))
            self.assertGreaterEqual(st_[name]["p50"], 0)
            self.assertLessEqual(st_[name]["p50"], st_[name]["p99"])

    # ---- SLO-aware admission (issue 40): headers, classes, sheds ----

    def test_slo_headers_carry_the_slos_in_whole_milliseconds(self):
        srv = self.scripted(lambda body, headers: served())
        common = ("--url", srv.url, "--requests", "4", "--max-tokens", "3")

        def sent():
            """Each request's SLO headers, in order; then forgotten."""
            got = [(h.get_all("X-SLO-TTFT-Ms"), h.get_all("X-SLO-TPOT-Ms"))
                   for _, h in srv.seen]
            srv.seen.clear()
            return got

        # Off by default, whatever the SLOs.
        self.run_bench(*common, "--slo", "ttft=500ms")
        self.assertEqual(sent(), [(None, None)] * 4)
        # ttft and tpot, once each, in whole milliseconds rounded up
        # (never stricter than what is judged); e2el has no header.
        self.run_bench(*common, "--slo", "ttft=0.5s,tpot=20.2,e2el=9s",
                       "--slo-headers", "on")
        self.assertEqual(sent(), [(["500"], ["21"])] * 4)
        # Only what was given; the environment's twin turns them on.
        self.run_bench(*common, "--slo", "tpot=7",
                       env={"SLUICE_BENCH_SLO_HEADERS": "on"})
        self.assertEqual(sent(), [(None, ["7"])] * 4)
        r = subprocess.run([BENCH, "--help"], capture_output=True,
                           text=True, timeout=SAFETY_NET_S)
        self.assertIn("  --slo-headers on|off\n", r.stdout)
        self.assertIn("[SLUICE_BENCH_SLO_HEADERS; default: off]", r.stdout)
        self.assertIn("[SLUICE_BENCH_SLO_MIX; default: none]", r.stdout)

    def test_slo_mix_draws_a_class_per_conversation(self):
        srv = self.scripted(lambda body, headers: served(tokens=2))
        n = 300
        shares = {"interactive": 0.6, "batch": 0.3, "offline": 0.1}
        mix = ("interactive:ttft=500ms/tpot=50ms:0.6,batch:ttft=30s:0.3,"
               "offline:e2el=600s:0.1")
        # What each class sends: offline's e2el has no header.
        headers = {"interactive": (["500"], ["50"]),
                   "batch": (["30000"], None), "offline": (None, None)}
        slos = {"interactive": {"ttft_ms": 500, "tpot_ms": 50,
                                "e2el_ms": None},
                "batch": {"ttft_ms": 30000, "tpot_ms": None,
                          "e2el_ms": None},
                "offline": {"ttft_ms": None, "tpot_ms": None,
                            "e2el_ms": 600000}}
        common = ("--url", srv.url, "--requests", str(n), "--concurrency",
                  "4", "--max-tokens", "2", "--slo-mix", mix)
        _, doc, recs = self.run_bench(*common, "--slo-headers", "on")
        (run,) = doc["runs"]
        classes = run["slo_classes"]
        self.assertEqual(list(classes), list(shares))
        # Each request carried its class's headers (the server saw them
        # by its body's seed), and the report counts each class exactly.
        seen = {seed: (h.get_all("X-SLO-TTFT-Ms"), h.get_all("X-SLO-TPOT-Ms"))
                for seed, h in srv.seen}
        self.assertEqual(len(seen), n)
        for x in recs:
            self.assertEqual(seen[x["seed"]], headers[x["slo_class"]])
        for name, share in shares.items():
            count = sum(x["slo_class"] == name for x in recs)
            c = classes[name]
            self.assertEqual((c["num_prompts"], c["served"], c["share"],
                              c["slo"]), (count, count, share, slos[name]))
            # Binomial(n, share), within four standard errors.
            self.assertAlmostEqual(count, share * n, delta=4 * math.sqrt(
                n * share * (1 - share)))
        # The draws are the seed's alone: the same seed gives each
        # conversation the same class, with other draws asked for too;
        # another seed, other classes.
        by_conv = {x["conv"]: x["slo_class"] for x in recs}
        _, _, again = self.run_bench(*common, "--priority-mix",
                                     "urgent=0.5,normal=0.5",
                                     "--cancel-share", "0.1")
        self.assertEqual({x["conv"]: x["slo_class"] for x in again},
                         by_conv)
        _, _, other = self.run_bench(*common, "--seed", "2")
        self.assertNotEqual({x["conv"]: x["slo_class"] for x in other},
                            by_conv)
        # Every turn of a conversation keeps its class.
        _, _, turns = self.run_bench(
            "--url", srv.url, "--dataset", "sharegpt", "--dataset-path",
            SHAREGPT, "--max-turns", "3", "--concurrency", "2",
            "--requests", "24", "--slo-mix", mix)
        convs = {}
        for x in turns:
            convs.setdefault(x["conv"], set()).add(x["slo_class"])
        self.assertGreater(max(sum(x["conv"] == c for x in turns)
                               for c in convs), 1)
        self.assertEqual({len(v) for v in convs.values()}, {1})

    def test_search_under_a_slo_mix(self):
        # Each step meets its SLOs when the share of requests that met
        # their own class's does: the batch class (half the requests)
        # waits 0.3 s for its first token, twice its TTFT SLO; the other
        # class's first tokens come at once, within its minute.
        def answer(body, headers):
            slow = headers.get("X-SLO-TTFT-Ms") == "150"
            return served(first_s=self.SLOW_S if slow else 0)

        srv = self.scripted(answer)
        page = os.path.join(self.tmp, "search.html")
        _, doc, recs = self.run_bench(
            "--url", srv.url, "--search", "on", "--search-range", "2-4",
            "--search-steps", "2", "--duration", "0.5",
            "--requests", "100000", "--slo-headers", "on", "--slo-mix",
            "fast:ttft=60s:0.5,batch:ttft=150ms:0.5",
            "--search-goodput", "0.01", "--html", page)
        search = doc["search"]
        self.assertEqual(search["slo_classes"], {
            "fast": {"ttft_ms": 60000, "tpot_ms": None, "e2el_ms": None},
            "batch": {"ttft_ms": 150, "tpot_ms": None, "e2el_ms": None}})
        for step in search["steps"]:
            mine = [x for x in recs if x["run"] == step["run"]]
            met = [x for x in mine if x["slo_met"]]
            self.assertEqual(step["goodput_fraction"], len(met) / len(mine))
            # Not one batch request met its 150 ms.
            self.assertEqual({x["slo_class"] for x in met}, {"fast"})
        with open(page) as f:
            self.assertIn("SLOs: fast, TTFT at most 60000 ms; batch, TTFT "
                          "at most 150 ms", f.read())

    # The answers of ScriptedSluice in test_slo_attainment_...: by the
    # request's seed modulo 7, (status, reason, Retry-After, predicted).
    SLO_SCRIPT = {0: (429, "slo_ttft", True, 900.0),
                  1: (503, "slo_deadline", True, 700.5),
                  2: (429, None, True, None),        # queue full
                  3: (429, "slo_ttft", False, 12.5),
                  4: (200, None, False, 2.0),        # served at once
                  5: (200, None, False, 250.0),      # first token at 0.3 s
                  6: (500, None, False, None)}
    SLOW_S = 0.3

    @classmethod
    def slo_answer(cls, body, headers):
        status, reason, retry, predicted = cls.SLO_SCRIPT[body["seed"] % 7]
        if status == 200:
            first = cls.SLOW_S if body["seed"] % 7 == 5 else 0
            return served(predicted, first_s=first)
        if status == 500:
            return Answer(500, body='{"error":{"code":500}}')
        return refusal(status, reason, retry, predicted,
                       queue=3 if status == 503 else None)

    def test_slo_attainment_sheds_refusals_and_the_predictor(self):
        srv = self.scripted(self.slo_answer)
        n = 28  # four of each answer
        classes = {"interactive": 150, "batch": 60000}  # TTFT SLOs, ms
        html = os.path.join(self.tmp, "run.html")
        csv = os.path.join(self.tmp, "run.csv")
        r, doc, recs = self.run_bench(
            "--url", srv.url, "--requests", str(n), "--concurrency", "2",
            "--max-tokens", "3", "--retry", "off", "--slo-headers", "on",
            "--slo-mix", "interactive:ttft=150ms:0.5,batch:ttft=60s:0.5",
            "--html", html, "--csv", csv, rc=1)
        (run,) = doc["runs"]
        self.assertEqual(len(recs), n)
        errors, signed, refused = [], [], []
        for x in recs:
            status, reason, retry, predicted = self.SLO_SCRIPT[x["seed"] % 7]
            self.assertEqual((x["status"], x["reason"], x["predicted_ms"],
                              x["retries"]),
                             (status, reason, predicted, 0))
            if status in (429, 503):
                # From its send to the refusal's head: within its
                # end-to-end time, which counts from its intended start.
                self.assertGreaterEqual(x["refused_ms"], 0)
                self.assertLessEqual(x["refused_ms"], x["e2el_ms"])
                refused.append(x)
            else:
                self.assertIsNone(x["refused_ms"])
            if status != 200:
                self.assertEqual((x["actual_ttft_ms"], x["predictor_error"],
                                  x["slo_met"]), (None, None, False))
                continue
            # The TTFT held to the prediction runs from the send (one
            # attempt: the request's own), not from the intended start.
            actual = x["actual_ttft_ms"]
            self.assertAlmostEqual(
                actual, x["ttft_ms"] - (x["sent_ms"] - x["intended_ms"]),
                delta=1e-6)
            if x["seed"] % 7 == 5:
                self.assertGreaterEqual(actual, 1000 * self.SLOW_S - 1)
            self.assertEqual(x["predictor_error"],
                             abs(predicted - actual) / actual)
            errors.append(x["predictor_error"])
            signed.append((predicted - actual) / actual)
            self.assertIs(x["slo_met"],
                          x["ttft_ms"] <= classes[x["slo_class"]])

        # Per class, each request in one outcome by its last answer.
        for name, ttft in classes.items():
            mine = [x for x in recs if x["slo_class"] == name]
            c = run["slo_classes"][name]
            shed = [x for x in mine if x["reason"] in ("slo_ttft",
                                                       "slo_deadline")]
            other_refused = [x for x in mine if x["status"] in (429, 503)
                             and x not in shed]
            ok_ = [x for x in mine if ok(x)]
            failed = [x for x in mine if x["status"] == 500]
            met = [x for x in ok_ if x["ttft_ms"] <= ttft]
            self.assertEqual(
                (c["num_prompts"], c["served"], c["shed"], c["refused"],
                 c["other"], c["left"], c["admitted"], c["met"]),
                (len(mine), len(ok_), len(shed), len(other_refused),
                 len(failed), 0, len(ok_) + len(failed), len(met)))
            self.assertEqual(c["attainment"], len(met) / len(mine))
            self.assertEqual(c["admitted_attainment"],
                             len(met) / (len(ok_) + len(failed)))
            self.assertAlmostEqual(c["request_goodput"],
                                   len(met) / run["duration"], delta=1e-9)
            mine_err = [x["predictor_error"] for x in ok_]
            self.assertEqual(c["median_predictor_error"],
                             nearest_rank(mine_err, 50))
            self.assertEqual(c["p90_predictor_error"],
                             nearest_rank(mine_err, 90))
        # The interactive class's slow answers missed its 150 ms, which
        # the batch class's 60 s did not bound.
        slow = [x for x in recs if x["seed"] % 7 == 5]
        self.assertIn(False, [x["slo_met"] for x in slow
                              if x["slo_class"] == "interactive"])
        self.assertLess(run["slo_classes"]["interactive"][
            "admitted_attainment"], 1)

        # Run-wide: sheds, attainment of the admitted, every refusal's
        # time and Retry-After, by kind, and the predictor's error.
        self.assertEqual(run["shed"], sum(x["reason"] is not None
                                          for x in recs))
        good = sum(x["slo_met"] for x in recs)
        admitted = sum(x["status"] in (200, 500) for x in recs)
        self.assertEqual(run["admitted_attainment"], good / admitted)
        self.assertEqual(run["goodput_fraction"], good / n)
        times = [x["refused_ms"] for x in refused]
        kinds = {"429 slo_ttft": (8, 4), "503 slo_deadline": (4, 4),
                 "429": (4, 4)}
        ref = run["refusals"]
        self.assertEqual((ref["count"], ref["retry_after"],
                          ref["retry_after_share"], ref["median_ms"],
                          ref["p99_ms"]),
                         (16, 12, 0.75, nearest_rank(times, 50),
                          nearest_rank(times, 99)))
        self.assertEqual((run["median_refusal_ms"], run["p99_refusal_ms"]),
                         (ref["median_ms"], ref["p99_ms"]))
        self.assertEqual(sorted(ref["by_kind"]), sorted(kinds))
        for kind, (count, with_retry) in kinds.items():
            mine = [x["refused_ms"] for x in refused
                    if "%d%s" % (x["status"], " " + x["reason"]
                                 if x["reason"] else "") == kind]
            self.assertEqual(ref["by_kind"][kind],
                             {"count": count, "retry_after": with_retry,
                              "retry_after_share": with_retry / count,
                              "median_ms": nearest_rank(mine, 50),
                              "p99_ms": nearest_rank(mine, 99)})
        self.assertEqual(run["predictor"],
                         {"requests": 8,
                          "median_error": nearest_rank(errors, 50),
                          "p90_error": nearest_rank(errors, 90),
                          "median_signed_error": nearest_rank(signed, 50)})
        self.assertEqual((run["median_predictor_error"],
                          run["p90_predictor_error"]),
                         (run["predictor"]["median_error"],
                          run["predictor"]["p90_error"]))
        self.check_slo_reports(r.stdout, run, html, csv)

        # With retries, every refused attempt counts: those with
        # Retry-After went twice, and were refused twice.
        _, doc, recs = self.run_bench(
            "--url", srv.url, "--requests", str(n), "--concurrency", "2",
            "--max-tokens", "3", "--retry", "on", "--max-retries", "1",
            "--slo-mix", "interactive:ttft=150ms:0.5,batch:ttft=60s:0.5",
            rc=1)
        (run,) = doc["runs"]
        self.assertEqual((run["refusals"]["count"],
                          run["refusals"]["retry_after"]), (28, 24))
        self.assertEqual(run["outcomes"]["all"]["retried"], 12)
        self.assertEqual({x["retries"] for x in recs
                          if x["seed"] % 7 in (0, 1, 2)}, {1})

    def check_slo_reports(self, stdout, run, html, csv):
        """The SLO classes and the refusals in the Markdown tables, the
        CSV's columns, the HTML page and `sluice-bench report`."""
        lines = stdout.splitlines()
        at = lines.index(
            "| run | class | SLOs | requests | served | shed | refused | "
            "other | attainment | of admitted | goodput req/s | TTFT p99 ms "
            "| pred. error p50 | pred. error p90 |")

        def pct(v):
            return "%.1f%%" % (100 * v)

        for line, (name, c) in zip(lines[at + 2:at + 4],
                                   run["slo_classes"].items()):
            cells = [x.strip() for x in line.split("|")[1:-1]]
            self.assertEqual(cells, [
                "0", name, "ttft=%gms" % c["slo"]["ttft_ms"],
                str(c["num_prompts"]), str(c["served"]), str(c["shed"]),
                str(c["refused"]), str(c["other"]), pct(c["attainment"]),
                pct(c["admitted_attainment"]),
                "%.2f" % c["request_goodput"], "%.2f" % c["p99_ttft_ms"],
                pct(c["median_predictor_error"]),
                pct(c["p90_predictor_error"])])
        at = lines.index(
            "| run | refusals | with Retry-After | refusal p50 ms | refusal "
            "p99 ms | predicted | pred. error p50 | pred. error p90 |")
        ref, pred = run["refusals"], run["predictor"]
        self.assertEqual(lines[at + 2], "| 0 | %d | %d | %.2f | %.2f | %d | "
                         "%s | %s |" % (ref["count"], ref["retry_after"],
                                       ref["median_ms"], ref["p99_ms"],
                                       pred["requests"],
                                       pct(pred["median_error"]),
                                       pct(pred["p90_error"])))
        # `report` prints the same tables from the JSON document.
        r = subprocess.run([BENCH, "report", os.path.join(self.tmp,
                                                          "run.json")],
                           capture_output=True, text=True,
                           timeout=SAFETY_NET_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        tables = stdout[stdout.index("\n| run | class |"):]
        self.assertTrue(r.stdout.endswith(tables), r.stdout)
        with open(csv) as f:
            head, row = [line.rstrip("\n").split(",") for line in f]
        extra = dict(zip(head, row))
        self.assertEqual(
            [extra[k] for k in ("shed", "admitted attainment",
                                "refusal p50 ms", "refusal p99 ms",
                                "predictor error p50",
                                "predictor error p90")],
            ["%d" % run["shed"], "%.4f" % run["admitted_attainment"],
             "%.4f" % run["median_refusal_ms"],
             "%.4f" % run["p99_refusal_ms"],
             "%.4f" % run["median_predictor_error"],
             "%.4f" % run["p90_predictor_error"]])
        with open(html) as f:
            page = f.read()
        for id_ in ("slo-classes", "admission", "refusal-kinds"):
            self.assertIn('<table id="%s">' % id_, page)
        self.assertIn("<td>429 slo_ttft</td>", page)
        self.assertIn("<td>interactive</td><td>ttft=150ms</td>", page)

    # ---- scenarios: cancellation, failover, model swaps ----

    def test_cancelled_streams_free_their_slots(self):
        # A real llama-server, for its /slots, which shows the seed of
        # each busy slot's request: the bench finds its left requests
        # there. The slow demo model takes seconds for 300 tokens; a
        # client that leaves after 2 of them must not hold the slot.
        ls = self.llama_server(st.MODEL_SLOW, slots=2, ctx=1024)
        s = self.sluice("--upstream", ls.url)
        n = 6
        _, doc, recs = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port, "--llama-url", ls.url,
            "--concurrency", "2", "--requests", str(n), "--stream", "on",
            "--max-tokens", "300", "--cancel-share", "0.5",
            "--cancel-after-tokens", "2", "--slots-interval", "0.25")
        (run,) = doc["runs"]
        cancel = run["scenarios"]["cancel"]
        left = [x for x in recs if x["cancelled"]]
        self.assertGreater(len(left), 0)
        self.assertLess(len(left), n)
        self.assertEqual(cancel["left"], len(left))
        self.assertEqual(run["cancelled"], len(left))
        # llama-server stops a stream whose client left: every slot freed.
        self.assertEqual(cancel["slot_freed"], cancel["left"])
        self.assertEqual((cancel["still_running"], cancel["unknown"]), (0, 0))
        for x in left:
            self.assertIs(x["slot_freed"], True)
            self.assertEqual((x["status"], x["error"], x["e2el_ms"]),
                             (200, None, None))
            self.assertIsNotNone(x["ttft_ms"])
        for x in recs:
            if not x["cancelled"]:
                self.assertNotIn("slot_freed", x)
                self.assertEqual(x["output_tokens"], 300)
        # Left requests are neither completed nor failed.
        self.assertEqual((run["completed"], run["failed"]),
                         (n - len(left), 0))
        # sluice saw each of them leave mid-answer.
        text = s.get("/metrics").body.decode()
        self.assertEqual(
            metric(text, 'sluice_cancelled_total{stage="inflight"}'),
            len(left))

    def test_plain_answers_left_on_purpose_are_not_failures(self):
        # Plain answers of 10 tokens take at least 180 ms at the mock;
        # half the clients leave after 60 ms, before any answer. Without
        # --llama-url, whether their slots were freed stays unknown.
        m = self.mock("--slots", "4", "--token-delay-ms", "20")
        n = 8
        _, doc, recs = self.run_bench(
            "--url", m.url, "--stream", "off", "--max-tokens", "10",
            "--concurrency", "2", "--requests", str(n),
            "--cancel-share", "0.5", "--cancel-after-ms", "60")
        (run,) = doc["runs"]
        left = [x for x in recs if x["cancelled"]]
        self.assertGreater(len(left), 0)
        self.assertEqual(run["cancelled"], len(left))
        self.assertEqual((run["completed"], run["failed"]),
                         (n - len(left), 0))
        self.assertEqual(run["scenarios"]["cancel"],
                         {"left": len(left), "slot_freed": 0,
                          "still_running": 0, "unknown": len(left),
                          "freed_after_ms": None})
        for x in left:
            self.assertEqual((x["status"], x["error"], x["ttft_ms"],
                              x["e2el_ms"], x["slot_freed"]),
                             (0, None, None, None, None))
        # The others came whole once generated, which is no time per token.
        for x in recs:
            if not x["cancelled"]:
                self.assertGreaterEqual(x["ttft_ms"], 9 * 20 - MOCK_CLOCK_MS)
                self.assertIsNone(x["tpot_ms"])
        self.assertIsNone(run["mean_tpot_ms"])

    def test_failover_when_a_replica_dies_mid_run(self):
        # Two mocks behind sluice, answers of 10 tokens 40 ms apart; the
        # bench kills one of them half a second in. What was out on it is
        # lost or retried by sluice; later requests go to the other.
        a = self.mock("--slots", "2", "--token-delay-ms", "40")
        b = self.mock("--slots", "2", "--token-delay-ms", "40")
        s = self.sluice("--upstream", a.url, "--upstream", b.url)
        s.wait_all_upstreams_ready()
        kill_at = 0.5
        r, doc, recs = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port,
            "--concurrency", "4", "--duration", "2", "--requests", "100000",
            "--max-tokens", "10", "--kill-at", str(kill_at),
            "--kill-pid", str(a.proc.pid), "--scrape-interval", "0.2",
            rc=None)
        self.assertEqual(a.proc.wait(SAFETY_NET_S), -9)
        (run,) = doc["runs"]
        f = run["scenarios"]["failover"]
        self.assertIs(f["killed"], True)
        self.assertGreaterEqual(f["at_s"], kill_at)
        at_ms = f["at_s"] * 1000
        # Out when the kill came: sent before it, ended after it.
        out = [x for x in recs
               if x["sent_ms"] <= at_ms <= end_ms(x)]
        after = [x for x in recs if x["sent_ms"] > at_ms]
        self.assertGreaterEqual(f["in_flight"], 1)
        self.assertEqual(f["in_flight"], len(out))
        self.assertEqual(f["lost"], sum(not ok(x) for x in out))
        self.assertEqual(f["in_flight"],
                         f["lost"] + sum(map(ok, out)))
        self.assertEqual(f["completed_after"], sum(map(ok, after)))
        self.assertEqual(f["failed_after"], len(after) - f["completed_after"])
        self.assertGreater(f["completed_after"], 0)
        # sluice's own count of the requests it sent again, from its
        # /metrics: a number, perhaps 0.
        self.assertIsInstance(f["sluice_retries"], float)
        self.assertGreaterEqual(f["sluice_retries"], 0)
        self.assertEqual(r.returncode, 1 if run["failed"] else 0)

    def test_model_mix_through_sluice(self):
        # Two models, each a mock of its own; b's answers start 30 ms
        # late, so its requests show where sluice sent them.
        delay_ms = 30
        a = self.mock("--slots", "4")
        b = self.mock("--slots", "4", "--prompt-delay-ms", str(delay_ms))
        config = os.path.join(self.tmp, "models.yaml")
        with open(config, "w") as f:
            f.write("default-model: a\nmodels:\n"
                    "  a:\n    upstreams: [%s]\n"
                    "  b:\n    upstreams: [%s]\n" % (a.url, b.url))
        s = self.sluice("--config", config)
        n = 30
        _, doc, recs = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port, "--concurrency", "3",
            "--requests", str(n), "--max-tokens", "3",
            "--model-mix", "a,b,a")
        (run,) = doc["runs"]
        models = run["groups"]["model"]
        self.assertEqual(sorted(models), ["a", "b"])
        # The mix repeats a, b, a: two a for each b.
        self.assertEqual((models["a"]["num_prompts"],
                          models["b"]["num_prompts"]), (2 * n // 3, n // 3))
        for x in recs:
            self.assertTrue(ok(x))
            self.assertEqual(x["model"], ["a", "b", "a"][x["conv"] % 3])
            if x["model"] == "b":
                self.assertGreaterEqual(x["ttft_ms"],
                                        delay_ms - MOCK_CLOCK_MS)
        swap = run["scenarios"]["swap"]
        # Each model's first request, cold.
        first = {}
        for x in recs:
            first.setdefault(x["model"], x["ttft_ms"])
        self.assertEqual(swap["cold_ttft_ms"], first)
        # A switch: a request (not a model's first) whose model differs
        # from the one of the request sent just before it.
        switches, prev, seen = 0, None, set()
        for x in recs:
            if x["model"] in seen and x["ttft_ms"] is not None:
                switches += x["model"] != prev
            seen.add(x["model"])
            prev = x["model"]
        self.assertEqual(swap["switches"], switches)
        self.assertGreater(switches, 0)

    # ---- the search for the highest rate within the SLOs ----

    def test_search_for_the_highest_rate_within_the_slo(self):
        # Two slots, each answer at least 100 ms: about 20 per second at
        # most. The search's steps must agree with one another, whatever
        # rates this machine sustains.
        m = self.mock("--slots", "2", "--token-delay-ms", "25")
        _, doc, recs = self.run_bench(
            "--url", m.url, "--max-tokens", "5", "--search", "on",
            "--slo", "e2el=400", "--duration", "1", "--requests", "30",
            "--search-range", "2-200", "--search-steps", "5")
        search, runs = doc["search"], doc["runs"]
        steps = search["steps"]
        self.assertEqual(search["slo"], {"ttft_ms": None, "tpot_ms": None,
                                         "e2el_ms": 400})
        self.assertEqual(search["min_goodput_fraction"], 0.9)
        self.assertGreaterEqual(len(steps), 2)
        self.assertLessEqual(len(steps), 5)
        self.assertEqual(len(runs), len(steps))
        # The top of the range first, then the bottom.
        self.assertEqual([x["request_rate"] for x in steps[:2]], [200, 2])
        for k, step in enumerate(steps):
            run = runs[step["run"]]
            self.assertEqual(step["run"], k)
            self.assertEqual(run["request_rate"], step["request_rate"])
            self.assertEqual(step["goodput_fraction"], run["goodput_fraction"])
            self.assertEqual(step["request_goodput"], run["request_goodput"])
            self.assertEqual(step["p99_ttft_ms"], run["p99_ttft_ms"])
            self.assertIs(step["met"], step["goodput_fraction"] >= 0.9)
            # The fraction from the run's own records.
            mine = [x for x in recs if x["run"] == k]
            good = [x for x in mine if ok(x) and x["e2el_ms"] <= 400]
            self.assertEqual(step["goodput_fraction"], len(good) / len(mine))
            self.assertTrue(2 <= step["request_rate"] <= 200)
        # 200 per second sends all 30 at once to 2 slots: the last ends
        # no sooner than 15 answers' time (1.5 s), past the SLO.
        self.assertIs(steps[0]["met"], False)
        met = [x["request_rate"] for x in steps if x["met"]]
        if met:
            self.assertEqual(search["best_rate"], max(met))
            for x in steps:
                if x["request_rate"] > search["best_rate"]:
                    self.assertIs(x["met"], False)
        else:
            self.assertIsNone(search["best_rate"])
        # Each step after the second lies between the highest rate that
        # met and the lowest above it that did not.
        for k in range(2, len(steps)):
            before = steps[:k]
            lo = max(x["request_rate"] for x in before if x["met"])
            hi = min(x["request_rate"] for x in before
                     if not x["met"] and x["request_rate"] > lo)
            self.assertAlmostEqual(steps[k]["request_rate"],
                                   math.sqrt(lo * hi), delta=1e-9)

    # ---- repetitions ----

    def test_num_runs_summarises_the_repetitions(self):
        m = self.mock("--slots", "2", "--token-delay-ms", "2")
        _, doc, recs = self.run_bench(
            "--url", m.url, "--concurrency", "2", "--requests", "10",
            "--max-tokens", "3", "--num-runs", "3")
        runs = doc["runs"]
        self.assertEqual([(x["level"], x["repeat"]) for x in runs],
                         [(0, 0), (0, 1), (0, 2)])
        self.assertEqual(sorted({x["run"] for x in recs}), [0, 1, 2])
        metrics = doc["repeats"]["metrics"]
        for field in ("request_throughput", "mean_e2el_ms", "duration",
                      "p99_ttft_ms", "num_prompts"):
            values = [x[field] for x in runs]
            got = metrics[field]
            self.assertEqual(got["n"], 3)
            self.assertAlmostEqual(got["mean"], statistics.fmean(values),
                                   delta=1e-9 * abs(got["mean"]))
            self.assertAlmostEqual(got["std"], statistics.stdev(values),
                                   delta=1e-9 * abs(got["mean"]))
            self.assertAlmostEqual(got["cv"], got["std"] / got["mean"],
                                   delta=1e-12)
        self.assertEqual(metrics["num_prompts"]["std"], 0)
        self.assertNotIn("level", metrics)
        self.assertNotIn("repeat", metrics)

    # ---- multi-turn sessions ----

    def test_sharegpt_conversations_replay_with_the_servers_replies(self):
        # Each user's turns go one after another, the server's reply and a
        # think time between them; each turn carries the history. The
        # mock counts a prompt's words as its tokens and answers with as
        # many words as max_tokens asks, so the counts are exact.
        m = self.mock("--slots", "4", "--token-delay-ms", "2")
        think_ms, max_turns = 200, 3
        _, doc, recs = self.run_bench(
            "--url", m.url, "--endpoint", "chat", "--dataset", "sharegpt",
            "--dataset-path", SHAREGPT, "--max-turns", str(max_turns),
            "--think-time", str(think_ms / 1000), "--concurrency", "2",
            "--requests", "12")
        (run,) = doc["runs"]
        self.assertEqual((run["num_prompts"], run["failed"]), (12, 0))
        file_turns = sharegpt_turns(SHAREGPT, max_turns)
        convs = {}
        for x in recs:
            convs.setdefault(x["conv"], []).append(x)
        self.assertGreater(max(map(len, convs.values())), 1)
        for conv, turns in convs.items():
            # Turns 0, 1, ... in order, as many as the file has at most.
            self.assertEqual([x["turn"] for x in turns],
                             list(range(len(turns))))
            expected = file_turns[conv % len(file_turns)]
            self.assertLessEqual(len(turns), len(expected))
            history = 0
            for x, (text, max_tokens) in zip(turns, expected):
                self.assertEqual(x["output_tokens"], max_tokens)
                # The prompt: every earlier turn and reply, then this one.
                history += words(text)
                self.assertEqual(x["input_tokens"], history)
                history += x["output_tokens"]
            for before, after in zip(turns, turns[1:]):
                # Sent once the reply had ended and the user had thought.
                self.assertGreaterEqual(after["intended_ms"],
                                        end_ms(before) + think_ms - 1e-6)
                self.assertGreaterEqual(after["sent_ms"],
                                        after["intended_ms"])

    # ---- help ----

    def test_metrics_url_has_one_default(self):
        # Its help said "(default: --url)" above "[...; default: none]":
        # none is what it is, and its help says what none stands for.
        r = subprocess.run([BENCH, "--help"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = re.search(r"^  --metrics-url URL\n {6}(.*)\n {6}\[(.*)\]$",
                      r.stdout, re.MULTILINE)
        self.assertIsNotNone(m, r.stdout)
        self.assertEqual(m.group(2), "SLUICE_BENCH_METRICS_URL; default: none")
        self.assertNotIn("default", m.group(1))
        self.assertIn("none: the one at --url", m.group(1))

    # ---- bad options ----

    def test_bad_options_exit_2_naming_the_cause(self):
        missing = os.path.join(self.tmp, "missing.json")
        not_json = os.path.join(self.tmp, "not.json")
        with open(not_json, "w") as f:
            f.write("# not JSON\n")
        cases = [
            (["--slo", "ttft=abc"], '--slo: ttft: expected milliseconds '
             '(500, 500ms or 0.5s), got "abc"'),
            (["--slo", "ttft=0"], '--slo: ttft must be above 0, got "0"'),
            (["--slo", "p99=5"],
             '--slo: expected ttft=, tpot= or e2el=, got "p99=5"'),
            # An empty --slo, or an empty piece of one, is a mistake,
            # not an SLO every request meets (issue 41).
            (["--slo", ""], "--slo: empty; give one or more of ttft=MS, "
             "tpot=MS, e2el=MS"),
            (["--slo", ","], '--slo: "," has an empty piece'),
            (["--slo", "ttft=1,,tpot=2"],
             '--slo: "ttft=1,,tpot=2" has an empty piece'),
            (["--slo", "ttft=1,"], '--slo: "ttft=1," has an empty piece'),
            (["--tenant", "a:sk-a"], '--tenant: expected '
             'NAME:KEY:WEIGHT[:PRIORITY], got "a:sk-a"'),
            (["--tenant", "a:sk-a:heavy"], '--tenant a: the weight must be '
             'a number from 1e-06 to 1e+06, got "heavy"'),
            (["--tenant", "a:sk-a:1:vip"],
             '--tenant a: priority "vip" is not urgent, normal or batch'),
            (["--tenant", "a:sk-a:1;a:sk-b:2"], '--tenant: "a" given twice'),
            (["--input-len", "uniform:9-3"],
             '--input-len: "uniform:9-3": the low end is above the high end'),
            (["--input-len", "lots"], '--input-len: "lots": expected N, '
             'uniform:LOW-HIGH, normal:MEAN,SD or hist:V:W,V:W,...'),
            (["--dataset", "sharegpt"],
             "--dataset sharegpt: needs --dataset-path FILE"),
            (["--dataset", "sharegpt", "--dataset-path", missing],
             "%s: No such file or directory" % missing),
            (["--dataset", "sharegpt", "--dataset-path", not_json],
             "%s:1:1: '[' or '{' expected near '#'" % not_json),
            (["--search", "on", "--duration", "1"],
             "--search: give the SLOs to meet with --slo or --slo-mix"),
            (["--slo-headers", "on"], "--slo-headers: no ttft or tpot SLO "
             "to send: give them with --slo or --slo-mix"),
            (["--slo-headers", "on", "--slo", "e2el=5s"], "--slo-headers: "
             "no ttft or tpot SLO to send: give them with --slo or "
             "--slo-mix"),
            (["--slo-headers=maybe"],
             '--slo-headers: expected on or off, got "maybe"'),
            (["--slo-mix", ""], "--slo-mix: empty; give NAME:SLOS:SHARE,..."),
            (["--slo-mix", "a:ttft=1s:0.5"],
             "--slo-mix: the shares add up to 0.5, not 1"),
            (["--slo-mix", "a:ttft=1s,tpot=5:1"], '--slo-mix: expected '
             'NAME:SLOS:SHARE, got "a:ttft=1s"'),
            (["--slo-mix", "a:ttft=1s:1", "--slo", "ttft=1"],
             "--slo-mix: not with --slo (each class has its own SLOs)"),
            (["--kill-at", "1"], "--kill-at: give the replica's --kill-pid"),
        ]
        for args, line in cases:
            with self.subTest(args=args):
                # Nothing listens on port 1: the options fail first.
                r = subprocess.run([BENCH, "--url", "http://127.0.0.1:1",
                                    *args], capture_output=True, text=True,
                                   timeout=SAFETY_NET_S)
                self.assertEqual((r.returncode, r.stdout, r.stderr),
                                 (2, "", "sluice-bench: %s\n" % line))


if __name__ == "__main__":
    st.main()

"""sluice-bench against the mock llama-server through sluice: a short run
whose report must add up."""

import json
import os
import subprocess
import time

import sluice_test as st

BENCH = os.path.join(os.path.dirname(st.SLUICE), "bench", "sluice-bench")
MOCK = os.environ.get("SLUICE_MOCK_BIN") or os.path.join(
    os.path.dirname(st.SLUICE), "bench", "mock-llama-server")

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240


class Bench(st.TestCase):

    def start_mock(self, *args):
        mock = st.Process([MOCK, "--port", "0", *args], name="mock")
        self._processes.append(mock)
        port = int(mock.wait_line(r"listening on http://127.0.0.1:(\d+)",
                                  timeout=SAFETY_NET_S).group(1))
        return port

    def run_bench(self, *args):
        """(the finished process, its runs, its wall-clock seconds)."""
        out = os.path.join(self.tmp, "run.json")
        started = time.monotonic()
        r = subprocess.run([BENCH, "--quiet", "on", "--json", out, *args],
                           capture_output=True, text=True,
                           timeout=SAFETY_NET_S)
        wall_s = time.monotonic() - started
        with open(out) as f:
            return r, json.load(f)["runs"], wall_s

    def check_adds_up(self, run, sent):
        self.assertEqual(run["success"] + run["fail"], sent)
        self.assertEqual(run["requests"], sent)
        self.assertLessEqual(run["p50_latency_ms"], run["p95_latency_ms"])
        self.assertLessEqual(run["p95_latency_ms"], run["p99_latency_ms"])
        self.assertGreater(run["req_per_s"], 0)

    def test_closed_loop_sweep_through_sluice(self):
        port = self.start_mock("--slots", "8", "--token-delay-ms", "1",
                               "--tokens", "12")
        s = self.sluice("--upstream", "http://127.0.0.1:%d" % port)
        r, runs, _ = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port,
            "--endpoint", "chat", "--stream", "on",
            "--max-tokens", "12", "--requests", "40",
            "--concurrency-sweep", "1,4")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([x["concurrency"] for x in runs], [1, 4])
        for run in runs:
            self.check_adds_up(run, 40)
            self.assertEqual(run["fail"], 0)
            self.assertLessEqual(run["ttft_p50_ms"], run["ttft_p99_ms"])
            self.assertLessEqual(run["ttft_p99_ms"], run["p99_latency_ms"])
            self.assertIsNotNone(run["itl_p99_ms"])
            # 12 tokens each, counted from the usage event.
            self.assertAlmostEqual(run["output_tokens_per_s"],
                                   12 * run["req_per_s"], delta=1)
            # Batches come from sluice's own summary.
            self.assertGreaterEqual(run["batches"], 1)
            self.assertGreaterEqual(run["avg_batch_size"], 1)
        # The Markdown table has a column for every figure of a run.
        header = r.stdout.splitlines()[0]
        for col in ("requests", "concurrency", "success", "fail",
                    "avg latency ms", "p95 latency ms", "req/s",
                    "avg batch size", "batches", "p50 latency ms",
                    "p99 latency ms", "TTFT p50 ms", "TTFT p99 ms",
                    "ITL p99 ms", "output tok/s"):
            self.assertIn("| %s |" % col, header)

    def test_metrics_behind_an_admin_key(self):
        # sluice keeps /metrics for its admin key: without it the batch
        # columns are empty and sluice-bench says why, once; with
        # --metrics-key they are filled. A bare --quiet is --quiet on.
        port = self.start_mock("--slots", "2", "--tokens", "4")
        s = self.sluice("--upstream", "http://127.0.0.1:%d" % port,
                        "--api-key", "client", "--admin-key", "admin")
        url = "http://127.0.0.1:%d" % s.port
        common = ("--url", url, "--api-key", "client", "--max-tokens", "4",
                  "--requests", "4", "--concurrency-sweep", "1,2")
        r, runs, _ = self.run_bench(*common, "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "sluice-bench: %s/metrics answered 403: "
                         "the batch columns stay empty; give sluice's "
                         "admin key with --metrics-key\n" % url)
        self.assertEqual([x["batches"] for x in runs], [None, None])
        r, runs, _ = self.run_bench(*common, "--metrics-key", "admin")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        for run in runs:
            self.assertGreaterEqual(run["batches"], 1)

    def test_open_loop_for_two_seconds_with_a_priority_mix_and_failures(self):
        port = self.start_mock("--slots", "4", "--fail-rate", "0.25",
                               "--seed", "3")
        s = self.sluice("--upstream", "http://127.0.0.1:%d" % port)
        rate, duration = 100, 2
        r, runs, wall_s = self.run_bench(
            "--url", "http://127.0.0.1:%d" % s.port,
            "--endpoint", "completion", "--stream", "off",
            "--rate", str(rate), "--duration", str(duration),
            "--requests", "100000",
            "--priority-mix", "urgent=0.3,normal=0.7")
        self.assertEqual(r.returncode, 1)  # some requests failed: exit 1
        total, urgent, normal = runs
        self.assertEqual([total["class"], urgent["class"], normal["class"]],
                         ["all", "urgent", "normal"])
        sent = total["success"] + total["fail"]
        # About rate x duration; fewer when a busy machine stalls the bench.
        self.assertGreater(sent, rate * duration / 2)
        self.check_adds_up(total, sent)
        self.assertEqual(urgent["requests"] + normal["requests"], sent)
        self.assertGreater(total["fail"], 0)
        self.assertGreater(total["success"], total["fail"])
        # The run lasts its duration, then as long as the last answers take:
        # no less, and no more than the bench process itself ran.
        self.assertGreaterEqual(total["elapsed_s"], duration)
        self.assertLessEqual(total["elapsed_s"], wall_s)
        self.assertAlmostEqual(total["req_per_s"],
                               total["success"] / total["elapsed_s"],
                               delta=0.1)


if __name__ == "__main__":
    st.main()

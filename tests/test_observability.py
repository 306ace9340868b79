"""Prometheus /metrics, the JSON summary, /health and /ready, the access
log."""

import json
import os
import re
import signal

import promcheck
import sluice_test as st


def completion(prompt, n=8, **extra):
    return {"prompt": prompt, "n_predict": n, "temperature": 0, **extra}


def metrics(s):
    r = s.get("/metrics")
    assert r.status == 200, r.status
    assert r.header("Content-Type").startswith("text/plain; version=0.0.4")
    return promcheck.check(r.body.decode())


class Checker(st.TestCase):
    """The checker itself refuses what Prometheus would."""

    def test_it_catches_bad_expositions(self):
        bad = [
            "1bad_name 1\n",
            "x{a=\"b\" 1\n",
            "x{a=\"\\q\"} 1\n",
            "# TYPE x counter\n# TYPE x counter\nx 1\n",
            "x 1\ny 2\nx 3\n",
            "x 1\nx 2\n",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 5\nh_bucket{le=\"+Inf\"} 4\n"
            "h_sum 1\nh_count 4\n",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
            "h_sum 1\nh_count 3\n",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
            "x 1",
            "a:b 1\n",  # promtool's lint: colons are for recording rules
            "# TYPE c counter\nc 1\n",  # and counters end in _total
        ]
        for text in bad:
            with self.subTest(text=text):
                with self.assertRaises(promcheck.ExpositionError):
                    promcheck.check(text)
        good = promcheck.check("# HELP x_total X.\n# TYPE x_total counter\n"
                               "x_total{a=\"1\"} 2\n"
                               "# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
                               "h_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n")
        self.assertEqual(promcheck.value(good, "x_total", a="1"), 2)


class Metrics(st.TestCase):

    def setUp(self):
        super().setUp()
        self.s = self.sluice("--model", st.MODEL_TINY,
                             "--log-format", "json")

    def test_counters_move_by_exactly_the_traffic(self):
        s = self.s
        before = metrics(s)
        # 10 requests: 7 answered, 3 refused (one malformed body, one bad
        # priority, one body that is not an object).
        for i in range(7):
            self.assertEqual(s.post("/completion",
                                    completion("p%d" % i, n=8)).status, 200)
        self.assertEqual(s.post("/completion", "{oops").status, 400)
        self.assertEqual(s.post("/completion", completion("x"),
                                headers={"X-Priority": "soon"}).status, 400)
        self.assertEqual(s.post("/completion", "[1]").status, 400)
        after = metrics(s)

        def moved(name, **labels):
            return (promcheck.value(after, name, **labels) -
                    promcheck.value(before, name, **labels))

        self.assertEqual(moved("sluice_requests_total",
                               endpoint="/completion", code="200"), 7)
        self.assertEqual(moved("sluice_requests_total",
                               endpoint="/completion", code="400"), 3)
        self.assertEqual(moved("sluice_rejected_total", reason="invalid"), 3)
        self.assertEqual(moved("sluice_rejected_total", reason="queue_full"), 0)
        # The demo model never stops early: exactly 8 tokens each.
        self.assertEqual(moved("sluice_generated_tokens_total"), 56)
        self.assertEqual(moved("sluice_queue_wait_seconds_count",
                               priority="normal"), 7)
        self.assertEqual(moved("sluice_time_to_first_token_seconds_count",
                               priority="normal"), 7)
        self.assertEqual(moved("sluice_inter_token_seconds_count"), 7 * 7)
        self.assertEqual(moved("sluice_request_duration_seconds_count",
                               endpoint="/completion"), 10)
        self.assertGreaterEqual(moved("sluice_batch_size_count"), 1)
        self.assertEqual(promcheck.value(after, "sluice_inflight"), 0)
        self.assertEqual(promcheck.value(after, "sluice_queue_depth",
                                         priority="normal"), 0)
        # Each upstream's state, and llama-server's own metrics, labelled
        # with a name that outlives restarts (the URL's port does not).
        url = "managed"
        self.assertEqual(s.upstream()["name"], url)
        self.assertEqual(promcheck.value(after, "sluice_upstream_up",
                                         upstream=url), 1)
        self.assertEqual(promcheck.value(after, "sluice_upstream_slots",
                                         upstream=url), 4)
        relayed = [k for k in after if k[0].startswith("llamacpp_")]
        self.assertTrue(relayed, "no llamacpp metrics relayed")
        self.assertTrue(all(dict(labels).get("upstream") == url
                            for _, labels in relayed))
        # llama-server's own figures are cached for about a second.
        st.wait_until(lambda: promcheck.value(
            metrics(s), "llamacpp_tokens_predicted_total", upstream=url) >= 56,
            5, "llama-server's metrics to catch up")

    def test_cancellations_are_counted_by_stage(self):
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1")
        before = metrics(s)
        holder = st.RawClient(s.port)
        holder.request("POST", "/completion",
                       completion("hold", n=3000, stream=True))
        self.assertEqual(holder.read_head()[0], 200)
        next(holder.chunks())
        waiting = st.RawClient(s.port)
        waiting.request("POST", "/completion", completion("wait"))
        st.wait_until(lambda: s.health().json()["queued"] == 1, 10, "queued")
        waiting.close()
        st.wait_until(lambda: s.health().json()["queued"] == 0, 5, "removed")
        holder.close()
        st.wait_until(lambda: s.health().json()["inflight"] == 0, 5, "idle")
        after = metrics(s)
        self.assertEqual(
            promcheck.value(after, "sluice_cancelled_total", stage="queued") -
            promcheck.value(before, "sluice_cancelled_total", stage="queued"), 1)
        self.assertEqual(
            promcheck.value(after, "sluice_cancelled_total", stage="inflight") -
            promcheck.value(before, "sluice_cancelled_total", stage="inflight"),
            1)

    def test_json_summary(self):
        s = self.s
        for i in range(5):
            s.post("/v1/completions", {"prompt": "q%d" % i, "max_tokens": 16})
        for r in (s.get("/metrics?format=json"),
                  s.get("/metrics", headers={"Accept": "application/json"})):
            self.assertEqual(r.status, 200)
            doc = r.json()
            for key in ("queue_depth", "inflight", "requests",
                        "p50_latency_ms", "p95_latency_ms", "p99_latency_ms",
                        "p99_ttft_ms", "batches", "avg_batch_size",
                        "tokens_per_second", "upstreams"):
                self.assertIn(key, doc)
            self.assertGreaterEqual(doc["requests"], 5)
            self.assertGreater(doc["p50_latency_ms"], 0)
            self.assertLessEqual(doc["p50_latency_ms"], doc["p95_latency_ms"])
            self.assertLessEqual(doc["p95_latency_ms"], doc["p99_latency_ms"])
            self.assertGreater(doc["p99_ttft_ms"], 0)
            self.assertGreaterEqual(doc["avg_batch_size"], 1)
            self.assertEqual(doc["upstreams"][0]["state"], "ready")
            self.assertEqual(doc["quantile_error_bound"], 0.125)

    def test_access_log_one_json_line_per_request(self):
        s = self.s
        paths = ["/completion", "/v1/models", "/nope", "/health", "/completion"]
        for p in paths:
            if p == "/completion":
                s.post(p, completion("log", n=4))
            else:
                s.get(p)
        s.stop()
        lines = s.output().splitlines()
        for line in lines:
            json.loads(line)  # every line is JSON, llama-server's too
        access = [json.loads(l) for l in lines
                  if json.loads(l).get("msg") == "access"]
        mine = [a for a in access if a["path"] in paths][-len(paths):]
        self.assertEqual([a["path"] for a in mine], paths)
        first = mine[0]
        for key in ("id", "method", "path", "status", "priority", "queue_ms",
                    "ttft_ms", "total_ms", "tokens", "bytes", "upstream",
                    "outcome"):
            self.assertIn(key, first)
        self.assertEqual(first["status"], 200)
        self.assertEqual(first["tokens"], 4)
        self.assertEqual(first["priority"], "normal")
        self.assertEqual(first["outcome"], "ok")
        self.assertGreaterEqual(first["queue_ms"], 0)
        self.assertTrue(first["upstream"].startswith("http://127.0.0.1:"))
        self.assertEqual(mine[2]["status"], 404)
        self.assertEqual(mine[2]["outcome"], "rejected")

    def test_text_access_log_reads_well(self):
        s = self.sluice("--model", st.MODEL_TINY)
        s.post("/completion", completion("text", n=3),
               headers={"X-Request-Id": "trace 1"})
        m = s.wait_line(r"info  access id=(\S+) method=POST path=/completion "
                        r"status=200 priority=normal queue_ms=\d+ ttft_ms=\d+ "
                        r"total_ms=\d+ tokens=3 bytes=\d+ upstream=http://\S+ "
                        r"outcome=ok$")
        self.assertRegex(m.group(1), r"^[0-9a-f]{16}$")  # "trace 1" refused


class Readiness(st.TestCase):

    def test_ready_during_a_restart_and_after(self):
        s = self.sluice("--model", st.MODEL_TINY)
        self.assertEqual(s.ready().status, 200)
        before = metrics(s)
        self.assertEqual(promcheck.value(
            before, "sluice_upstream_restarts_total", upstream="managed"), 0)
        self.assertIn(("sluice_upstream_restarts_total",
                       (("upstream", "managed"),)), before)
        os.kill(s.upstream()["pid"], signal.SIGKILL)
        st.wait_until(lambda: s.ready_status() == 503, 10, "/ready 503")
        self.assertEqual(s.health().status, 200)  # alive all along
        st.wait_until(lambda: s.ready_status() == 200, 30, "/ready 200")
        # The same series moves from 0 to 1: rate() sees the restart.
        m = metrics(s)
        self.assertEqual(promcheck.value(m, "sluice_upstream_restarts_total",
                                         upstream="managed"), 1)
        self.assertEqual(len([k for k in m if
                              k[0] == "sluice_upstream_restarts_total"]), 1)

    def test_draining_is_not_ready_and_finishes_what_is_in_flight(self):
        # The mock's tokens come TOKEN_MS apart whatever the load, so its
        # stream of N tokens is still in flight for seconds after the first
        # one, and the drain timeout is far longer than the whole stream.
        token_ms, n = 40, 100
        m = self.mock_llama_server("--slots", "1",
                                   "--token-delay-ms", str(token_ms))
        s = self.sluice("--upstream", m.url,
                        "--drain-timeout", str(20 * n * token_ms // 1000))
        c = st.RawClient(s.port)
        c.request("POST", "/completion", completion("long", n=n, stream=True))
        self.assertEqual(c.read_head()[0], 200)
        chunks = c.chunks()
        first = st.sse_data(next(chunks)[1])
        s.proc.send_signal(signal.SIGTERM)
        s.wait_line("draining")
        r = s.ready()
        self.assertEqual(r.status, 503)
        self.assertEqual(r.json()["state"], "draining")
        self.assertEqual(r.header("Connection"), "close")
        r = s.post("/completion", completion("late"))
        self.assertEqual(r.status, 503)
        self.assertIn("shutting down", r.json()["error"]["message"])
        # All that happened while the stream was still being generated.
        self.assertEqual(m.busy_slots(), 1)
        # The stream in flight finishes whole while sluice drains.
        events = [first] + [st.sse_data(chunk) for _, chunk in chunks]
        self.assertTrue(events[-1].get("stop"))
        self.assertEqual("".join(e.get("content", "") for e in events),
                         st.mock_text(n))
        c.close()
        self.assertEqual(s.wait_exit(15), 0)


# A log line of sluice's text format, and one llama-server line relayed.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
                      r"(debug|info |warn |error) (.*)$")
RELAYED = re.compile(r"^llama-server\[(\d+)\]: ")


class StartupLog(st.TestCase):
    """What a user sees when sluice starts: a few lines of its own;
    llama-server's chatter only at debug level."""

    def test_start_up_is_a_few_lines_of_sluices_own(self):
        # Waiting for its log line rather than polling /ready keeps access
        # lines out of what is read.
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "2",
                        wait_ready=False)
        s.wait_line(r"sluice \S+ is ready on", 60)
        self.assertEqual(s.stop(), 0)
        said = [LOG_LINE.match(line).group(1, 2) for line in s.lines]
        port, up = s.port, r"http://127\.0\.0\.1:\d+"
        expected = [
            ("info ", r"listening on http://127\.0\.0\.1:%d" % port),
            ("info ", r"started llama-server\[\d+\] on %s \(2 slots, 4096 "
                      r"tokens of context each\)" % up),
            ("info ", r"upstream %s is ready with 2 slots" % up),
            ("info ", r"sluice \S+ is ready on http://127\.0\.0\.1:%d" % port),
            ("info ", r"received Terminated; shutting down"),
            ("info ", r"llama-server exited with status 0"),
        ]
        self.assertEqual(len(said), len(expected), s.output())
        for (level, text), (want_level, pattern) in zip(said, expected):
            self.assertEqual(level, want_level, text)
            self.assertRegex(text, "^%s$" % pattern)

    def test_llama_servers_lines_at_debug_level_without_deprecated_flags(self):
        s = self.sluice("--model", st.MODEL_TINY, "--log-level", "debug")
        pid = s.upstream()["pid"]
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().decode().split("\0")
        self.assertEqual(s.stop(), 0)
        relayed = []
        for line in s.lines:
            level, text = LOG_LINE.match(line).group(1, 2)
            m = RELAYED.match(text)
            if m:
                self.assertEqual(level, "debug", line)
                self.assertEqual(int(m.group(1)), pid)
                relayed.append(text[m.end():])
        self.assertTrue(relayed, s.output())
        # Whatever options llama-server itself calls deprecated (0.7.0:
        # "Use --ui/--no-ui (or deprecated --webui/--no-webui) ..."), sluice
        # does not pass them.
        deprecated = set()
        for text in relayed:
            for group in re.findall(r"deprecated ((?:-[-\w]+/?)+)", text,
                                    re.IGNORECASE):
                deprecated.update(f for f in group.split("/") if f)
        self.assertFalse(deprecated & set(argv),
                         "passed deprecated options: %s"
                         % sorted(deprecated & set(argv)))

if __name__ == "__main__":
    st.main()

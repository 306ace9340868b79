"""Prometheus /metrics, the JSON summary, /health and /ready, the access
log; and upstream credentials, shown in none of them."""

import base64
import json
import os
import re
import resource
import signal
import socket
import subprocess
import time
import urllib.parse

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
        # 10 requests: 7 answered (4 plain, 3 streamed), 3 refused (one
        # malformed body, one bad priority, one body that is not an
        # object).
        for i in range(7):
            self.assertEqual(s.post("/completion",
                                    completion("p%d" % i, n=8,
                                               stream=i >= 4)).status, 200)
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
        # The plain answers' first tokens come from llama-server's
        # timings; the gaps between tokens are seen in streams only.
        self.assertEqual(moved("sluice_inter_token_seconds_count"), 3 * 7)
        self.assertEqual(moved("sluice_request_duration_seconds_count",
                               endpoint="/completion"), 10)
        self.assertGreaterEqual(moved("sluice_batch_size_count"), 1)
        self.assertEqual(promcheck.value(after, "sluice_inflight"), 0)
        # No urgent request came: the auto reserve keeps nothing.
        self.assertEqual(promcheck.value(after, "sluice_urgent_reserve"), 0)
        # Each model has its queue; --model names it after the file.
        self.assertEqual(promcheck.value(after, "sluice_queue_depth",
                                         priority="normal",
                                         model="demo-tiny"), 0)
        # Each upstream's state, and llama-server's own metrics, labelled
        # with a name that outlives restarts (the URL's port does not).
        url = "managed"
        self.assertEqual(s.upstream()["name"], url)
        self.assertEqual(promcheck.value(after, "sluice_upstream_up",
                                         upstream=url, model="demo-tiny"), 1)
        self.assertEqual(promcheck.value(after, "sluice_upstream_slots",
                                         upstream=url, model="demo-tiny"), 4)
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
        self.assertEqual(list(first)[3:], [
            "id", "client", "method", "path", "status", "priority",
            "queue_ms", "ttft_ms", "predicted_ttft_ms", "total_ms", "tokens",
            "bytes", "upstream", "outcome", "reason"])
        self.assertEqual(first["client"], "127.0.0.1")
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
        m = s.wait_line(r"info  access id=(\S+) client=127\.0\.0\.1 "
                        r"method=POST path=/completion "
                        r"status=200 priority=normal queue_ms=\d+ ttft_ms=\d+ "
                        r"predicted_ttft_ms=\d+ total_ms=\d+ tokens=3 "
                        r"bytes=\d+ upstream=http://\S+ outcome=ok "
                        r"reason=-$")
        self.assertRegex(m.group(1), r"^[0-9a-f]{16}$")  # "trace 1" refused


def exposition_types(text):
    """{family: type} from an exposition's TYPE lines."""
    return dict(m.groups() for m in
                re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M))


def proc_statm_bytes(pid):
    """(virtual, resident) bytes as /proc/<pid>/statm says."""
    with open("/proc/%d/statm" % pid) as f:
        size, resident = f.read().split()[:2]
    page = os.sysconf("SC_PAGE_SIZE")
    return int(size) * page, int(resident) * page


def proc_cpu_seconds(pid):
    """utime + stime of /proc/<pid>/stat, in seconds (whole clock ticks)."""
    with open("/proc/%d/stat" % pid) as f:
        # After the command's closing parenthesis, field 3 (state) comes
        # first: utime and stime, fields 14 and 15, are at 11 and 12.
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


# How far a reading of sluice's memory may stray from the test's reading of
# /proc around the same scrape: what one scrape allocates, with room to
# spare (the sanitizers' allocators included).
MEMORY_TOLERANCE = 2 << 20
# utime and stime are each truncated to whole ticks in /proc/<pid>/stat.
CPU_TICKS_TOLERANCE = 2


class ProcessMetrics(st.TestCase):
    """The process collector's families, checked against what /proc says
    about sluice's pid from outside."""

    def setUp(self):
        super().setUp()
        self.launched = time.time()
        self.s = self.sluice("--model", st.MODEL_TINY)
        self.ready_by = time.time()
        self.pid = self.s.proc.pid

    def scrape(self):
        r = self.s.get("/metrics")
        self.assertEqual(r.status, 200)
        text = r.body.decode()
        return promcheck.check(text), text

    def test_families_are_typed_as_the_client_libraries_type_them(self):
        samples, text = self.scrape()
        types = exposition_types(text)
        want = {"process_cpu_seconds_total": "counter",
                "process_resident_memory_bytes": "gauge",
                "process_virtual_memory_bytes": "gauge",
                "process_open_fds": "gauge",
                "process_max_fds": "gauge",
                "process_start_time_seconds": "gauge",
                "sluice_build_info": "gauge"}
        for name, kind in want.items():
            self.assertEqual(types.get(name), kind, name)
            self.assertIn("# HELP %s " % name, text)
            if name != "sluice_build_info":  # its labels: below
                self.assertEqual([k for k in samples if k[0] == name],
                                 [(name, ())])

    def test_cpu_seconds_are_sluices_own_and_grow_with_work(self):
        first = promcheck.value(self.scrape()[0], "process_cpu_seconds_total")
        self.assertGreater(first, 0)
        tick = 1 / os.sysconf("SC_CLK_TCK")

        client = st.RawClient(self.s.port)
        self.addCleanup(client.close)

        def worked():
            for _ in range(1000):
                client.request("GET", "/health")
                self.assertEqual(client.read_response()[0], 200)
            now = promcheck.value(self.scrape()[0],
                                  "process_cpu_seconds_total")
            # Enough ticks that system time alone is more than the
            # tolerance below: user time alone would not pass.
            return now >= first + 25 * tick
        st.wait_until(worked, 120, "sluice's CPU seconds to grow")
        # User and system time of sluice itself (not of its llama-server),
        # as the kernel counts them for its pid around the same scrape.
        before = proc_cpu_seconds(self.pid)
        cpu = promcheck.value(self.scrape()[0], "process_cpu_seconds_total")
        after = proc_cpu_seconds(self.pid)
        self.assertGreaterEqual(cpu, before - CPU_TICKS_TOLERANCE * tick)
        self.assertLessEqual(cpu, after + CPU_TICKS_TOLERANCE * tick)

    def test_memory_is_what_statm_says(self):
        before = proc_statm_bytes(self.pid)
        samples = self.scrape()[0]
        after = proc_statm_bytes(self.pid)
        shown = (promcheck.value(samples, "process_virtual_memory_bytes"),
                 promcheck.value(samples, "process_resident_memory_bytes"))
        for what, v, b, a in zip(("virtual", "resident"), shown, before,
                                 after):
            with self.subTest(what=what):
                self.assertGreater(v, 0)
                self.assertGreaterEqual(v, min(b, a) - MEMORY_TOLERANCE)
                self.assertLessEqual(v, max(b, a) + MEMORY_TOLERANCE)
        self.assertLessEqual(shown[1], shown[0])

    def test_open_fds_follow_client_connections(self):
        self.scrape()  # the relay of llama-server's metrics opens its own

        def fds_shown():
            before = proc_open_fds(self.pid)
            v = promcheck.value(self.scrape()[0], "process_open_fds")
            after = proc_open_fds(self.pid)
            # The scrape's own connection is open while it is counted.
            self.assertGreaterEqual(v, min(before, after))
            self.assertLessEqual(v, max(before, after) + 1)
            return v
        idle = fds_shown()
        clients = []
        for _ in range(5):
            c = st.RawClient(self.s.port)
            self.addCleanup(c.close)
            c.request("GET", "/health")
            self.assertEqual(c.read_response()[0], 200)
            clients.append(c)
        self.assertEqual(fds_shown(), idle + 5)
        for c in clients:
            c.close()
        st.wait_until(lambda: proc_open_fds(self.pid) <= idle, 10,
                      "sluice to close the connections")
        self.assertEqual(fds_shown(), idle)
        self.assertEqual(
            promcheck.value(self.scrape()[0], "process_max_fds"),
            resource.prlimit(self.pid, resource.RLIMIT_NOFILE)[0])

    def test_start_time_is_when_sluice_started(self):
        start = promcheck.value(self.scrape()[0], "process_start_time_seconds")
        # Printed with microseconds.
        self.assertGreaterEqual(start, self.launched - 1e-6)
        self.assertLessEqual(start, self.ready_by + 1e-6)
        self.assertEqual(promcheck.value(self.scrape()[0],
                                         "process_start_time_seconds"),
                         start)

    def test_build_info_names_this_build(self):
        out = subprocess.run([st.SLUICE, "--version"], capture_output=True,
                             text=True, check=True).stdout
        m = re.match(r"sluice (\S+) \(libuv (\S+), libcurl/(\S+) .*, "
                     r"llhttp (\S+)\)$", out.strip())
        self.assertTrue(m, out)
        samples = self.scrape()[0]
        series = [k for k in samples if k[0] == "sluice_build_info"]
        self.assertEqual(series, [("sluice_build_info", (
            ("libcurl", m.group(3)), ("libuv", m.group(2)),
            ("llhttp", m.group(4)), ("version", m.group(1))))])
        self.assertEqual(samples[series[0]], 1)

    def test_json_summary_has_the_same_process_figures(self):
        prom = self.scrape()[0]
        doc = self.s.get("/metrics?format=json").json()["process"]
        self.assertEqual(
            sorted(doc), ["cpu_seconds", "max_fds", "open_fds",
                          "resident_memory_bytes", "start_time_seconds",
                          "virtual_memory_bytes"])
        self.assertEqual(doc["max_fds"],
                         promcheck.value(prom, "process_max_fds"))
        self.assertEqual(doc["start_time_seconds"],
                         int(promcheck.value(prom,
                                             "process_start_time_seconds")))
        self.assertGreaterEqual(doc["cpu_seconds"],
                                promcheck.value(prom,
                                                "process_cpu_seconds_total"))
        self.assertGreater(doc["resident_memory_bytes"], 0)
        self.assertGreater(doc["open_fds"], 0)



# Credentials in upstream URLs (issue 28, item B): what must never show.
PASSWORD = "pw-S3kr1t-x9"
TOKEN = "sk-T0ken-q7"


class UpstreamCredentials(st.TestCase):
    """An upstream URL's userinfo is used for its requests and shown
    nowhere: logs, /health, /ready, /metrics (text and JSON), answers
    relayed or refused, --check-config and its errors."""

    def assert_hidden(self, where, text):
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        for secret in (PASSWORD, TOKEN):
            self.assertNotIn(secret, text, where)

    def test_no_surface_shows_an_upstream_password(self):
        ls = self.llama_server(st.MODEL_TINY, slots=2, ctx=1024)
        with_password = "http://alice:%s@127.0.0.1:%d" % (PASSWORD, ls.port)
        token_alone = "http://%s@127.0.0.1:%d" % (TOKEN, ls.port)
        down = "http://dave:%s@127.0.0.1:1" % PASSWORD
        shown = ["http://alice:***@127.0.0.1:%d" % ls.port,
                 "http://***@127.0.0.1:%d" % ls.port,
                 "http://dave:***@127.0.0.1:1"]
        s = self.sluice("--upstream", with_password, "--upstream",
                        token_alone, "--upstream", down, "--log-level",
                        "debug", "--health-interval", "0.2")
        for url in shown[:2]:
            s.wait_line(r"info  upstream %s is ready" % re.escape(url))
        s.wait_line(r"warn  upstream %s is down: " % re.escape(shown[2]))
        answers = []
        for stream in (False, True):
            r = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 4,
                                           "stream": stream})
            self.assertEqual(r.status, 200)
            answers.append(r)
        # The three upstreams by name: asked all at once, and one by one.
        answers.append(s.get("/props"))
        for url, status in zip(shown, (200, 200, 503)):
            r = s.get("/props?upstream=" + urllib.parse.quote(url))
            self.assertEqual(r.status, status, (url, r.body))
            answers.append(r)
        health = s.health().json()
        self.assertEqual(sorted(u["name"] for u in health["upstreams"]),
                         sorted(shown))
        self.assertEqual(sorted(u["url"] for u in health["upstreams"]),
                         sorted(shown))
        answers += [s.get("/ready"), s.get("/metrics"),
                    s.get("/metrics?format=json")]
        self.assertIn('upstream="%s"' % shown[0],
                      answers[-2].body.decode())
        for r in answers:
            self.assert_hidden(r.body, r.body)
            self.assert_hidden(r.headers, repr(r.headers))
        self.assert_hidden("/health", json.dumps(health))
        # The access log names the upstream as /health does.
        s.wait_line(r" access .* path=/v1/completions .* upstream=(%s|%s) "
                    % (re.escape(shown[0]), re.escape(shown[1])))
        self.assertEqual(s.stop(), 0)
        self.assert_hidden("the log", s.output())

    def test_check_config_and_its_errors_hide_passwords(self):
        path = os.path.join(self.tmp, "sluice.yaml")
        with open(path, "w") as f:
            f.write("upstream:\n  - http://alice:%s@10.0.0.5:8080\n"
                    "  - http://%s@10.0.0.6:8080/base\n" % (PASSWORD, TOKEN))
        r = subprocess.run([st.SLUICE, "--check-config", path],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertIn("upstream: [\"http://alice:***@10.0.0.5:8080\", "
                      "\"http://***@10.0.0.6:8080/base\"]  # file\n",
                      r.stdout)
        self.assert_hidden("--check-config", r.stdout)
        with open(path, "w") as f:
            f.write("models:\n  m:\n    upstreams:\n"
                    "      - http://alice:%s@10.0.0.5:8080\n" % PASSWORD)
        r = subprocess.run([st.SLUICE, "--check-config", path],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertIn("      - \"http://alice:***@10.0.0.5:8080\"\n",
                      r.stdout)
        self.assert_hidden("--check-config models:", r.stdout)
        # Refusals quote what was written, less the credentials; a
        # password with a '/' in it, which no URL parser takes, too.
        for args, quoted in (
                (["--upstream", "ftp://eve:%s@h" % PASSWORD],
                 "ftp://eve:***@h"),
                (["--upstream", "http://eve:%s/x@h" % PASSWORD],
                 "http://eve:***@h"),
                (["--upstream-dns", "eve:%s@h:80" % PASSWORD],
                 "eve:***@h:80")):
            r = subprocess.run([st.SLUICE, *args], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn('got "%s"' % quoted, r.stderr)
            self.assert_hidden(args, r.stderr)
        r = subprocess.run([st.SLUICE, "--probe",
                            "http://eve:%s@127.0.0.1:1/health" % PASSWORD],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith(
            "sluice: --probe http://eve:***@127.0.0.1:1/health: "), r.stderr)

    def test_a_new_password_in_the_file_is_noted_on_reload(self):
        # upstream: is not reloaded; SIGHUP says it changed, though
        # the text it compares shows no password.
        up = self.recording_upstream(answer=st.models_or_completion)
        path = os.path.join(self.tmp, "sluice.yaml")
        url = "http://bob:%s@127.0.0.1:%d" % (PASSWORD, up.port)
        with open(path, "w") as f:
            f.write("upstream: [%s]\n" % url)
        s = self.sluice("--config", path)
        with open(path, "w") as f:
            f.write("upstream: [%s]\n" % url.replace(PASSWORD, TOKEN))
        s.reload(r"warn  SIGHUP: upstream changed; ignored until a "
                 r"restart")
        self.assertEqual(s.stop(), 0)
        self.assert_hidden("the log", s.output())

    def test_the_credentials_still_go_upstream(self):
        for client in ("native", "curl"):
            with self.subTest(client=client):
                up = self.recording_upstream(answer=st.models_or_completion)
                url = "http://bob:%s@127.0.0.1:%d" % (PASSWORD, up.port)
                s = self.sluice("--upstream", url, "--upstream-client",
                                client)
                r = s.post("/v1/completions", {"prompt": "hi",
                                               "max_tokens": 1})
                self.assertEqual(r.status, 200, r.body)
                sent = up.received()[-1].headers["Authorization"]
                self.assertEqual(sent, "Basic " + base64.b64encode(
                    ("bob:" + PASSWORD).encode()).decode())
                self.assertEqual(s.stop(), 0)
                self.assert_hidden("the log", s.output())

class Readiness(st.TestCase):

    def test_ready_during_a_restart_and_after(self):
        s = self.sluice("--model", st.MODEL_TINY)
        self.assertEqual(s.ready().status, 200)
        before = metrics(s)
        self.assertEqual(promcheck.value(
            before, "sluice_upstream_restarts_total", upstream="managed",
            model="demo-tiny"), 0)
        self.assertIn(("sluice_upstream_restarts_total",
                       (("model", "demo-tiny"), ("upstream", "managed"))),
                      before)
        os.kill(s.upstream()["pid"], signal.SIGKILL)
        st.wait_until(lambda: s.ready_status() == 503, 10, "/ready 503")
        self.assertEqual(s.health().status, 200)  # alive all along
        st.wait_until(lambda: s.ready_status() == 200, 30, "/ready 200")
        # The same series moves from 0 to 1: rate() sees the restart.
        m = metrics(s)
        self.assertEqual(promcheck.value(m, "sluice_upstream_restarts_total",
                                         upstream="managed",
                                         model="demo-tiny"), 1)
        self.assertEqual(len([k for k in m if
                              k[0] == "sluice_upstream_restarts_total"]), 1)

    def test_draining_is_not_ready_and_finishes_what_is_in_flight(self):
        # The mock's tokens come TOKEN_MS apart whatever the load, so its
        # stream of N tokens is still in flight for seconds after the first
        # one, and the drain timeout is far longer than the whole stream.
        token_ms, n = 40, 100
        m = self.mock_llama_server("--slots", "1",
                                   "--token-delay-ms", str(token_ms))
        drain_s = 20 * n * token_ms // 1000
        s = self.sluice("--upstream", m.url, "--drain-timeout", str(drain_s))
        c = st.RawClient(s.port)
        c.request("POST", "/completion", completion("long", n=n, stream=True))
        self.assertEqual(c.read_head()[0], 200)
        chunks = c.events()
        first = st.sse_data(next(chunks)[1])
        s.proc.send_signal(signal.SIGTERM)
        s.wait_line(r"info  draining: waiting up to %d\.0 s for 1 request "
                    r"in flight$" % drain_s)
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


# sluice's Server-Timing (src/relay/README.md, Headers): its metrics in
# this order, the queue's in whole milliseconds (X-Queue-Ms's), the others
# with one decimal; every queued request's carries the TTFT predicted for
# it as it arrived.
TIMING_METRICS = {"queue": r"\d+", "upstream": r"\d+\.\d", "ttft": r"\d+\.\d",
                  "predicted": r"\d+\.\d"}
SAFETY_NET_S = 60


def server_timing(headers):
    """The one Server-Timing header of an answer, as {metric: ms} in the
    order sent. `headers`: (name, value) pairs or a RawClient head."""
    pairs = headers.items() if isinstance(headers, dict) else headers
    values = [v for k, v in pairs if k.lower() == "server-timing"]
    assert len(values) == 1, headers
    out = {}
    for item in values[0].split(", "):
        name, _, dur = item.partition(";dur=")
        assert name in TIMING_METRICS and name not in out, values[0]
        assert re.fullmatch(TIMING_METRICS[name], dur), values[0]
        out[name] = float(dur)
    order = [k for k in TIMING_METRICS if k in out]
    assert list(out) == order, values[0]
    return out


def chat(n, **extra):
    return {"messages": [{"role": "user", "content": "Say something."}],
            "max_tokens": n, "temperature": 0, **extra}


class ServerTiming(st.TestCase):
    """Server-Timing tells a load generator sluice's queue time apart from
    its upstream's."""

    def stream_head(self, s, body):
        """The head of a stream through sluice, its body read to the
        end."""
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.request("POST", "/v1/chat/completions", dict(body, stream=True))
        status, head = c.read_head()
        self.assertEqual(status, 200)
        events = [st.sse_data(e) for _, e in c.events()]
        self.assertEqual(events[-1], "[DONE]")
        c.close()
        return head

    def test_llama_servers_answers(self):
        ls = self.llama_server(st.MODEL_TINY)
        relayed = self.sluice("--upstream", ls.url, "--stream-upstream", "off")
        built = self.sluice("--upstream", ls.url, "--stream-upstream", "on")
        # A plain answer relayed as llama-server writes it (whole, at its
        # end): sluice's head goes with its first byte, before its tokens
        # are read, so no ttft.
        r = relayed.post("/v1/chat/completions", chat(4))
        self.assertEqual(r.status, 200)
        t = server_timing(r.headers)
        self.assertEqual(list(t), ["queue", "upstream", "predicted"])
        self.assertEqual(t["queue"], int(r.header("X-Queue-Ms")))
        # One built from a stream is answered at the stream's end, its
        # first token long read.
        r = built.post("/v1/chat/completions", chat(4))
        self.assertEqual(r.status, 200)
        t = server_timing(r.headers)
        self.assertEqual(list(t), ["queue", "upstream", "ttft", "predicted"])
        self.assertEqual(t["queue"], int(r.header("X-Queue-Ms")))
        self.assertLessEqual(t["ttft"], t["upstream"])
        # A stream's head goes with its first event, before sluice reads
        # it: queue and upstream only.
        for s in (relayed, built):
            head = self.stream_head(s, chat(4))
            t = server_timing(head)
            self.assertEqual(list(t), ["queue", "upstream", "predicted"])
            self.assertEqual(t["queue"], int(head["x-queue-ms"]))
        for s in (relayed, built):
            self.assertEqual(s.stop(), 0)

    def test_set_delays_show(self):
        # The mock's first token comes PROMPT_MS after it takes a request,
        # the next ones TOKEN_MS apart; its plain answer at the last
        # token. Its loop's clock may count whole milliseconds, so it may
        # start timing up to 1 ms before sluice's dispatch is over.
        prompt_ms, token_ms, n = 200, 100, 3
        m = self.mock_llama_server("--prompt-delay-ms", str(prompt_ms),
                                   "--token-delay-ms", str(token_ms))
        relayed = self.sluice("--upstream", m.url, "--stream-upstream", "off")
        built = self.sluice("--upstream", m.url, "--stream-upstream", "on")
        whole_ms = prompt_ms + (n - 1) * token_ms
        r = relayed.post("/v1/chat/completions", chat(n))
        t = server_timing(r.headers)
        self.assertEqual(list(t), ["queue", "upstream", "predicted"])
        self.assertGreaterEqual(t["upstream"], whole_ms - 1)
        r = built.post("/v1/chat/completions", chat(n))
        t = server_timing(r.headers)
        self.assertEqual(list(t), ["queue", "upstream", "ttft", "predicted"])
        self.assertGreaterEqual(t["ttft"], prompt_ms - 1)
        self.assertGreaterEqual(t["upstream"], whole_ms - 1)
        self.assertLessEqual(t["ttft"], t["upstream"])
        # The mock's stream begins with its first token.
        t = server_timing(self.stream_head(relayed, chat(n)))
        self.assertGreaterEqual(t["upstream"], prompt_ms - 1)
        for s in (relayed, built):
            self.assertEqual(s.stop(), 0)

    def test_refusals_from_the_queue_carry_the_queue_only(self):
        # One slot, held for good by a request the mock never answers; one
        # place in the queue.
        m = self.mock_llama_server("--slots", "1", "--hang-rate", "1")
        s = self.sluice("--upstream", m.url, "--max-queue", "1",
                        "--queue-timeout", "1s")
        holder = st.RawClient(s.port, timeout=SAFETY_NET_S)
        holder.request("POST", "/v1/chat/completions", chat(4))
        st.wait_until(lambda: s.health().json()["inflight"] == 1,
                      SAFETY_NET_S, "the slot to be taken")
        waiting = st.RawClient(s.port, timeout=SAFETY_NET_S)
        waiting.request("POST", "/v1/chat/completions", chat(4))
        st.wait_until(lambda: s.health().json()["queued"] == 1,
                      SAFETY_NET_S, "one request to wait")
        # The queue is full: refused on arrival, having waited nothing.
        r = s.post("/v1/chat/completions", chat(4), timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 429)
        self.assertRegex(r.headers_named("Server-Timing")[0],
                         r"^queue;dur=0, predicted;dur=\d+\.\d$")
        # The one waiting runs out of --queue-timeout.
        status, head, _ = waiting.read_response()
        self.assertEqual(status, 503)
        t = server_timing(head)
        self.assertEqual(list(t), ["queue", "predicted"])
        self.assertEqual(t["queue"], int(head["x-queue-ms"]))
        self.assertGreaterEqual(t["queue"], 1000)
        for c in (holder, waiting):
            c.close()

    def test_the_upstreams_own_is_not_passed_on(self):
        rec = self.recording_upstream(
            extra_headers=[("Server-Timing", "db;dur=53")])
        s = self.sluice("--upstream", rec.url)
        # /tokenize goes straight through, never queued: upstream only.
        r = s.post("/tokenize", {"content": "x"})
        self.assertEqual(r.status, 200)
        self.assertEqual(list(server_timing(r.headers)), ["upstream"])
        self.assertEqual(s.stop(), 0)


def raw_exchange(port, path, body, headers=()):
    """One request on a connection of its own, asking for the close, and
    every byte of its answer: (answer, milliseconds from before the
    request was sent to the close that ended the answer)."""
    payload = json.dumps(body).encode()
    lines = ["POST %s HTTP/1.1" % path, "Host: test",
             "Content-Type: application/json",
             "Content-Length: %d" % len(payload), "Connection: close",
             *("%s: %s" % h for h in headers)]
    sock = socket.create_connection(("127.0.0.1", port),
                                    timeout=SAFETY_NET_S)
    start = time.monotonic()
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
    raw = b""
    while True:
        data = sock.recv(65536)
        if not data:
            break
        raw += data
    elapsed_ms = (time.monotonic() - start) * 1000
    sock.close()
    return raw, elapsed_ms


def parse_chunked(raw):
    """A chunked answer read exactly (RFC 9112, 7.1): (status, [(name,
    value)] of its head, [chunk], [trailer line]). Fails on a size line that
    is not bare hex, a chunk without its CRLF, or a byte after the end."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    assert sep, raw[:200]
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = [(k, v.strip()) for k, _, v in
               (line.partition(":") for line in lines[1:])]
    chunks, pos = [], 0
    while True:
        eol = rest.index(b"\r\n", pos)
        size_line = rest[pos:eol]
        assert re.fullmatch(rb"[0-9a-f]+", size_line), size_line
        size, pos = int(size_line, 16), eol + 2
        if size == 0:
            break
        chunks.append(rest[pos:pos + size])
        assert rest[pos + size:pos + size + 2] == b"\r\n", rest[pos:][:200]
        pos += size + 2
    trailers = []
    while True:
        eol = rest.index(b"\r\n", pos)
        line, pos = rest[pos:eol], eol + 2
        if not line:
            break
        trailers.append(line.decode())
    assert pos == len(rest), "bytes after the end: %r" % rest[pos:]
    return status, headers, chunks, trailers


def named(headers, name):
    return [v for k, v in headers if k.lower() == name.lower()]


# The trailer a stream asked with "TE: trailers" ends with (src/relay/
# README.md, Headers): ttft where a token was relayed, then total.
TRAILER = re.compile(r"Server-Timing: (?:ttft;dur=(\d+\.\d), )?"
                     r"total;dur=(\d+\.\d)")


class ServerTimingTrailer(st.TestCase):
    """A stream whose client sent "TE: trailers" ends with the
    Server-Timing its head could not carry: the first token's time and the
    whole stream's. Without it, nothing changes."""

    def events(self, chunks):
        """The SSE events of a stream's chunks, each chunk whole events."""
        out = []
        for chunk in chunks:
            self.assertTrue(chunk.endswith(b"\n\n"), chunk[-200:])
            out += [st.sse_data(e + b"\n\n")
                    for e in chunk[:-2].split(b"\n\n")]
        return out

    def stream(self, s, path, body, te):
        """(events, head, trailers, client's ms) of one stream."""
        raw, elapsed_ms = raw_exchange(
            s.port, path, dict(body, stream=True),
            [("TE", te)] if te else [])
        status, head, chunks, trailers = parse_chunked(raw)
        self.assertEqual(status, 200, raw[:300])
        self.assertEqual(named(head, "Transfer-Encoding"), ["chunked"])
        return self.events(chunks), head, trailers, elapsed_ms

    def test_streams_end_with_their_timings_when_asked(self):
        s = self.sluice("--model", st.MODEL_TINY)
        asks = [("/v1/chat/completions", chat(6)),
                ("/completion", completion("Once upon a time", n=6))]
        for path, body in asks:
            with self.subTest(path=path):
                plain, head, trailers, _ = self.stream(s, path, body, None)
                # Without TE: no Trailer, and the body ends "0\r\n\r\n".
                self.assertEqual(named(head, "Trailer"), [])
                self.assertEqual(trailers, [])
                for te in ("trailers", "deflate;q=0.5, Trailers"):
                    events, head, trailers, elapsed_ms = self.stream(
                        s, path, body, te)
                    self.assertEqual(named(head, "Trailer"),
                                     ["Server-Timing"])
                    self.assertEqual(len(trailers), 1, trailers)
                    m = TRAILER.fullmatch(trailers[0])
                    self.assertTrue(m and m.group(1), trailers)
                    ttft, total = float(m.group(1)), float(m.group(2))
                    self.assertGreater(ttft, 0)
                    self.assertLessEqual(ttft, total)
                    self.assertLessEqual(total, elapsed_ms)
                    # The head's timings are as ever; its upstream time
                    # (dispatch to the head, which goes with the first
                    # event) lies within the trailer's ttft (arrival to
                    # the first token).
                    t = server_timing(head)
                    self.assertEqual(list(t),
                                     ["queue", "upstream", "predicted"])
                    self.assertLessEqual(t["upstream"], ttft)
                    # The events are those of a stream asked without TE:
                    # the same pieces of text (temperature 0), the same
                    # end. (How many events carry none, llama-server
                    # decides from run to run: the chat role's may come
                    # apart or not.)
                    for got in (events, plain):
                        if path == "/completion":
                            self.assertTrue(got[-1]["stop"])
                        else:
                            self.assertEqual(got[-1], "[DONE]")
                    ends = 0 if path == "/completion" else 1
                    pieces = [[st.delta_of(path, e)
                               for e in got[:len(got) - ends]
                               if st.delta_of(path, e)]
                              for got in (events, plain)]
                    self.assertTrue(pieces[0])
                    self.assertEqual(pieces[0], pieces[1])
        self.assertEqual(s.stop(), 0)

    def test_a_stream_cut_short_says_its_total(self):
        # The upstream dies after a role event and one token (then after the
        # role event alone): the stream ends with sluice's error event, and
        # its trailer says ttft only where a token was relayed.
        role = b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
        token = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
        for events, has_ttft in ((role + token, True), (role, False)):
            with self.subTest(has_ttft=has_ttft):
                rec = self.recording_upstream(
                    body=events, content_type="text/event-stream", cut=True)
                s = self.sluice("--upstream", rec.url)
                got, head, trailers, elapsed_ms = self.stream(
                    s, "/v1/chat/completions", chat(4), "trailers")
                self.assertIn("error", got[-1], got)
                self.assertEqual(named(head, "Trailer"), ["Server-Timing"])
                self.assertEqual(len(trailers), 1, trailers)
                m = TRAILER.fullmatch(trailers[0])
                self.assertTrue(m, trailers)
                self.assertEqual(m.group(1) is not None, has_ttft, trailers)
                self.assertLessEqual(float(m.group(2)), elapsed_ms)
                self.assertEqual(s.stop(), 0)

    def test_plain_answers_carry_none(self):
        # An answer with a length, relayed or built from a stream, has no
        # chunks to end with trailers: its head is as ever.
        s = self.sluice("--model", st.MODEL_TINY, "--stream-upstream", "on")
        raw, _ = raw_exchange(s.port, "/v1/chat/completions", chat(4),
                              [("TE", "trailers")])
        head = raw.partition(b"\r\n\r\n")[0].decode().lower()
        self.assertIn("\r\ncontent-length: ", head)
        self.assertNotIn("trailer", head)
        self.assertNotIn("transfer-encoding", head)
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    st.main()

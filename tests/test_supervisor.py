"""sluice spawns, watches, restarts and stops a real llama-server."""

import os
import re
import shlex
import signal
import threading

import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240


class Supervisor(st.TestCase):

    def test_becomes_healthy_with_the_slots_it_asked_for(self):
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "3",
                        "--startup-timeout", "60")
        h = s.health()
        self.assertEqual(h.status, 200)
        self.assertEqual(s.ready().status, 200)
        doc = h.json()
        self.assertEqual(doc["status"], "ok")
        self.assertEqual(doc["demo_model"], False)
        (up,) = doc["upstreams"]
        self.assertEqual(up["state"], "ready")
        self.assertTrue(up["managed"])
        # total_slots comes back from llama-server's /props.
        self.assertEqual(up["slots"], 3)
        self.assertEqual(up["restarts"], 0)
        self.assertTrue(st.pid_alive(up["pid"]))
        # llama-server is on loopback and refuses requests without the key.
        port = int(up["url"].rsplit(":", 1)[1])
        self.assertTrue(up["url"].startswith("http://127.0.0.1:"))
        r = st.request(port, "GET", "/props")
        self.assertEqual(r.status, 401)
        self.assertEqual(s.stop(), 0)

    def test_restarts_llama_server_after_kill_9(self):
        s = self.sluice("--model", st.MODEL_TINY)
        first = s.upstream()
        os.kill(first["pid"], signal.SIGKILL)
        # /ready turns 503 during the restart; /health, the liveness
        # check, stays 200 and says why.
        seen = st.wait_until(
            lambda: (lambda r: r if r.status == 503 else None)(s.ready()),
            SAFETY_NET_S, "/ready to report the restart")
        self.assertEqual(seen.json()["upstreams"][0]["state"], "restarting")
        self.assertEqual(seen.json()["status"], "unavailable")
        h = s.health()
        self.assertEqual(h.status, 200)
        self.assertIn(h.json()["upstreams"][0]["state"],
                      ("restarting", "ready"))
        # ... then ready again, on a new process, with the restart counted.
        s.wait_ready(SAFETY_NET_S)
        again = s.upstream()
        self.assertEqual(again["state"], "ready")
        self.assertEqual(again["restarts"], 1)
        self.assertNotEqual(again["pid"], first["pid"])
        self.assertFalse(st.pid_alive(first["pid"]))
        s.wait_line(r"llama-server was killed by signal 9 .*restarting it")
        self.assertEqual(s.stop(), 0)

    def test_sigterm_exits_0_and_stops_llama_server(self):
        s = self.sluice("--model", st.MODEL_TINY)
        pid = s.upstream()["pid"]
        self.assertEqual(s.stop(signal.SIGTERM, timeout=SAFETY_NET_S), 0)
        self.assertFalse(st.pid_alive(pid))
        s.wait_line(r"received Terminated; shutting down")

    def test_sigint_exits_0_too(self):
        s = self.sluice("--model", st.MODEL_TINY)
        pid = s.upstream()["pid"]
        self.assertEqual(s.stop(signal.SIGINT, timeout=SAFETY_NET_S), 0)
        self.assertFalse(st.pid_alive(pid))

    def test_sigkill_of_sluice_leaves_no_llama_server(self):
        s = self.sluice("--model", st.MODEL_TINY)
        pid = s.upstream()["pid"]
        s.proc.kill()
        s.wait_exit(SAFETY_NET_S)
        # The kernel delivers the parent-death signal at once.
        st.wait_until(lambda: not st.pid_alive(pid), SAFETY_NET_S,
                      "llama-server %d to die with sluice" % pid)

    def test_nonexistent_llama_server_path(self):
        s = self.sluice("--model", st.MODEL_TINY, "--llama-server",
                        "/nonexistent/llama-server", wait_ready=None)
        self.assertNotEqual(s.wait_exit(SAFETY_NET_S), 0)
        self.assertIn("--llama-server /nonexistent/llama-server: no such file",
                      s.output())

    def test_model_that_is_not_gguf(self):
        bad = os.path.join(self.tmp, "garbage.gguf")
        with open(bad, "wb") as f:
            f.write(b"this is not a model\n" * 100)
        s = self.sluice("--model", bad, wait_ready=None)
        self.assertNotEqual(s.wait_exit(SAFETY_NET_S), 0)
        self.assertIn("--model %s: not a GGUF model file" % bad, s.output())

    def test_corrupt_model_fails_with_llama_servers_own_words(self):
        # Valid magic, truncated body: only llama-server can tell.
        bad = os.path.join(self.tmp, "truncated.gguf")
        with open(st.MODEL_TINY, "rb") as src, open(bad, "wb") as dst:
            dst.write(src.read(3000))
        s = self.sluice("--model", bad, wait_ready=None)
        self.assertEqual(s.wait_exit(SAFETY_NET_S), 1)
        m = s.wait_line(r"llama-server exited with status (\d+) before it "
                        r"became ready; its last output: (.+)")
        self.assertNotEqual(m.group(1), "0")
        # The relayed tail names llama-server's reason.
        self.assertRegex(m.group(2), r"(?i)failed to load|gguf|error")

    def test_model_file_missing(self):
        missing = os.path.join(self.tmp, "missing.gguf")
        s = self.sluice("--model", missing, wait_ready=None)
        self.assertNotEqual(s.wait_exit(SAFETY_NET_S), 0)
        self.assertIn("--model %s: No such file or directory" % missing,
                      s.output())

    def test_startup_timeout_names_the_cause_and_kills_the_child(self):
        fake = os.path.join(self.tmp, "fake-llama-server")
        pidfile = os.path.join(self.tmp, "pid")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho \"fake llama-server: loading forever\"\n"
                    "echo $$ > %s\nexec sleep 600\n" % pidfile)
        os.chmod(fake, 0o755)
        s = self.sluice("--model", st.MODEL_TINY, "--llama-server", fake,
                        "--startup-timeout", "1", "--stop-timeout", "2",
                        wait_ready=None)
        self.assertEqual(s.wait_exit(SAFETY_NET_S), 1)
        m = s.wait_line(r"llama-server did not become ready within 1\.0 s "
                        r"\(last check: (.+)\); its last output: (.+)")
        self.assertIn("fake llama-server: loading forever", m.group(2))
        with open(pidfile) as f:
            self.assertFalse(st.pid_alive(int(f.read())))

    def test_listen_address_in_use(self):
        a = self.sluice("--model", st.MODEL_TINY)
        b = self.sluice("--model", st.MODEL_TINY, "--listen",
                        "127.0.0.1:%d" % a.port, wait_ready=None)
        # sluice's own --listen comes after the helper's, so it wins.
        self.assertEqual(b.wait_exit(SAFETY_NET_S), 1)
        self.assertIn("--listen 127.0.0.1:%d: address already in use"
                      % a.port, b.output())


class FirstStart(st.TestCase):
    """A request sent as soon as sluice listens, while llama-server starts:
    it waits in the queue for the start, and hears at once when the start
    fails (llama.cpp's own suite polls /health, which is sluice's liveness
    and 200 at once, and then sends)."""

    def gated_llama_server(self):
        """A llama-server that starts once the test makes the file `gate`:
        a start as long as the test needs. Returns its path and the gate."""
        gate = os.path.join(self.tmp, "gate")
        path = os.path.join(self.tmp, "gated-llama-server")
        with open(path, "w") as f:
            f.write("#!/bin/sh\nwhile [ ! -e %s ]; do sleep 0.05; done\n"
                    "exec %s \"$@\"\n" % (shlex.quote(gate),
                                          shlex.quote(st.llama_server_path())))
        os.chmod(path, 0o755)
        return path, gate

    def send_while_starting(self, s, body):
        """Sends `body` to /completion, in a thread, once sluice listens;
        returns the thread and a dict that gets its answer as "r" once it
        is queued (an answer before that fails the test)."""
        got = {}
        t = threading.Thread(target=lambda: got.update(r=s.post(
            "/completion", body, timeout=SAFETY_NET_S)))
        t.start()
        st.wait_until(lambda: "r" in got or s.health().json()["queued"] == 1,
                      SAFETY_NET_S, "the request to be queued")
        self.assertNotIn("r", got, "answered while llama-server started: %r"
                         % (got.get("r") and got["r"].body))
        # Not ready meanwhile: /ready says so, and /health says why.
        ready = s.ready()
        self.assertEqual(ready.status, 503)
        self.assertEqual(ready.json()["upstreams"][0]["state"], "starting")
        return t, got

    def test_a_request_sent_while_llama_server_starts_waits_for_it(self):
        exe, gate = self.gated_llama_server()
        s = self.sluice("--model", st.MODEL_TINY, "--llama-server", exe,
                        wait_ready=False)
        body = {"prompt": "Once upon a time", "n_predict": 16,
                "temperature": 0}
        t, got = self.send_while_starting(s, body)
        open(gate, "w").close()
        t.join(SAFETY_NET_S)
        r = got["r"]
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["tokens_predicted"], 16)
        # The answer llama-server gives once it is ready.
        s.wait_ready(SAFETY_NET_S)
        again = s.post("/completion", body, timeout=SAFETY_NET_S)
        self.assertEqual(again.status, 200)
        self.assertEqual(r.json()["content"], again.json()["content"])
        self.assertEqual(s.stop(), 0)

    def test_a_request_waiting_for_a_start_that_fails_gets_503_at_once(self):
        # Valid magic, truncated body: llama-server exits on loading it.
        bad = os.path.join(self.tmp, "truncated.gguf")
        with open(st.MODEL_TINY, "rb") as src, open(bad, "wb") as dst:
            dst.write(src.read(3000))
        exe, gate = self.gated_llama_server()
        s = self.sluice("--model", bad, "--llama-server", exe,
                        "--queue-timeout", "600", wait_ready=False)
        t, got = self.send_while_starting(s, {"prompt": "x"})
        open(gate, "w").close()
        t.join(SAFETY_NET_S)
        r = got["r"]
        self.assertEqual(r.status, 503, r.body)
        err = r.json()["error"]
        self.assertEqual(err["type"], "unavailable_error")
        self.assertEqual(err["message"], "model truncated could not start, "
                         "and sluice is shutting down; sluice's log says why")
        self.assertEqual(r.header("Retry-After"), "1")
        # Not at --queue-timeout: when the start failed.
        queue = re.match(r"queue;dur=(\d+)", r.header("Server-Timing"))
        self.assertLess(int(queue.group(1)), 600 * 1000)
        self.assertEqual(s.wait_exit(SAFETY_NET_S), 1)
        s.wait_line(r"llama-server exited with status \d+ before it became "
                    r"ready")


class DemoModel(st.TestCase):

    def test_default_is_the_demo_model_with_one_warning(self):
        cache = os.path.join(self.tmp, "cache")
        s = self.sluice("--cache-dir", cache)
        self.assertTrue(s.health().json()["demo_model"])
        written = os.path.join(cache, "demo-tiny-v1.gguf")
        self.assertTrue(os.path.isfile(written))
        s.wait_line(r"serving the DEMO model: it generates random text")
        self.assertEqual(s.count_lines(r"DEMO model"), 1)
        self.assertIn("--model FILE.gguf", s.output())
        self.assertIn("--hf-repo", s.output())
        # Its answers stop at 256 tokens unless the request says otherwise
        # (the documented --n-predict of the demo's llama-server).
        chat = {"messages": [{"role": "user", "content": "hi"}]}
        for extra, tokens in (({}, 256), ({"max_tokens": 300}, 300)):
            r = s.post("/v1/chat/completions", dict(chat, **extra),
                       timeout=SAFETY_NET_S)
            self.assertEqual(r.status, 200)
            self.assertEqual((r.json()["usage"]["completion_tokens"],
                              r.json()["choices"][0]["finish_reason"]),
                             (tokens, "length"))
        self.assertEqual(s.stop(), 0)
        # Written once: a second start reuses the file as it is.
        mtime = os.stat(written).st_mtime_ns
        s2 = self.sluice("--cache-dir", cache)
        self.assertEqual(s2.count_lines(r"wrote the demo model"), 0)
        self.assertEqual(os.stat(written).st_mtime_ns, mtime)
        # The cached model is exactly what --write-demo-model writes.
        out = os.path.join(self.tmp, "again.gguf")
        st.subprocess.run([st.SLUICE, "--write-demo-model", out], check=True)
        with open(out, "rb") as a, open(written, "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertEqual(s2.stop(), 0)


class DemoOutput(st.TestCase):

    def test_output_is_printable_text(self):
        s = self.sluice("--model", st.MODEL_TINY)
        texts = []
        # Enough text to meet the printable pieces several times each, and
        # little enough that a busy machine's llama-server makes it in time.
        for body in ({"prompt": "Hello", "n_predict": 600},  # sampling
                     {"prompt": "Hello", "n_predict": 600, "temperature": 0},
                     {"prompt": "\u00e9\n\t{}", "n_predict": 300}):
            r = s.post("/completion", body, timeout=SAFETY_NET_S)
            self.assertEqual(r.status, 200)
            text = r.json()["content"]
            # Generation runs to n_predict: the model never stops early.
            self.assertEqual(r.json()["tokens_predicted"], body["n_predict"])
            texts.append(text)
        for text in texts:
            bad = [c for c in text if not (" " <= c <= "~")]
            self.assertEqual(bad, [], "unprintable output: %r" % bad[:10])


class RemoteUpstream(st.TestCase):

    def test_upstream_flag_spawns_nothing_and_checks_the_remote(self):
        ls = self.llama_server(st.MODEL_TINY, slots=2)
        s = self.sluice("--upstream", ls.url)
        (up,) = s.health().json()["upstreams"]
        self.assertEqual(up["url"], ls.url)
        self.assertEqual(up["name"], ls.url)
        self.assertFalse(up["managed"])
        self.assertEqual(up["state"], "ready")
        self.assertEqual(up["slots"], 2)
        self.assertNotIn("started llama-server", s.output())
        # The remote going away turns it down and /health 503.
        ls.kill()
        st.wait_until(lambda: s.upstream()["state"] == "down", SAFETY_NET_S,
                      "the upstream to be reported down")
        self.assertEqual(s.ready().status, 503)
        self.assertEqual(s.health().status, 200)
        self.assertEqual(s.stop(), 0)

    def test_llama_server_url_is_one_upstream(self):
        ls = self.llama_server(st.MODEL_TINY, slots=1)
        s = self.sluice(env={"LLAMA_SERVER_URL": ls.url})
        (up,) = s.health().json()["upstreams"]
        self.assertEqual(up["url"], ls.url)
        self.assertEqual(up["slots"], 1)

    def test_managed_and_remote_together(self):
        ls = self.llama_server(st.MODEL_TINY, slots=1)
        s = self.sluice("--upstream", ls.url, "--model", st.MODEL_TINY)
        s.wait_all_upstreams_ready(SAFETY_NET_S)
        ups = s.health().json()["upstreams"]
        self.assertEqual([u["managed"] for u in ups], [True, False])


if __name__ == "__main__":
    st.main()

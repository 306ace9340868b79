"""Failover and ejection across replicas: a request whose upstream fails
before any byte reached its client is sent again, to another replica where
one is ready (--retries); an upstream that keeps failing is ejected for a
while and returns through a health check (--eject-after, --eject-time)."""

import json
import os
import signal
import threading
import time

import promcheck
import sluice_test as st
from test_mock_faults import MockTestCase, PATHS, body_for, expected_text
from test_resilience import crash_body, tokens_of, N_CRASH

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240


def metrics(s):
    r = s.get("/metrics", timeout=SAFETY_NET_S)
    assert r.status == 200, r.status
    return promcheck.check(r.body.decode())


# Upstreams given by --upstream alone serve the one model named "default";
# the upstream series carry it as their model label.
def retries(s, upstream, reason):
    return promcheck.value(metrics(s), "sluice_upstream_retries_total",
                           upstream=upstream, model="default",
                           reason=reason)


def upstream_named(s, name):
    for u in s.health().json()["upstreams"]:
        if u["name"] == name:
            return u
    raise AssertionError("no upstream %s in /health" % name)


class KillOneReplica(st.TestCase):

    def test_every_plain_request_survives_a_kill(self):
        a = self.llama_server(st.MODEL_TINY, slots=4,
                              extra=st.LLAMA_ONE_THREAD)
        b = self.llama_server(st.MODEL_TINY, slots=4,
                              extra=st.LLAMA_ONE_THREAD)
        s = self.sluice("--upstream", a.url, "--upstream", b.url,
                        "--queue-timeout", "300")
        s.wait_all_upstreams_ready(SAFETY_NET_S)
        # The text each endpoint gives, from the replica that survives.
        want = {}
        for path in PATHS:
            r = b.post(path, crash_body(path, False), timeout=SAFETY_NET_S)
            self.assertEqual(r.status, 200, r.body[:300])
            want[path] = st.text_of(path, r.json())

        outs = [{"path": PATHS[i % len(PATHS)]} for i in range(32)]

        def ask(out):
            try:
                r = s.post(out["path"], crash_body(out["path"], False),
                           timeout=SAFETY_NET_S)
                out["status"], out["body"] = r.status, r.body
            except Exception as e:  # reported by the assertions below
                out["exception"] = repr(e)

        threads = [threading.Thread(target=ask, args=(o,), daemon=True)
                   for o in outs]
        # One replica dies with requests in flight while the other works
        # through the queue. These answers are short: run free, the two
        # can answer all 32 before a busy test looks. So both are stopped
        # while the requests come, until each has some in flight (sluice
        # sends one at a time to a replica that has not started the last:
        # fleet/occupancy.c) and the rest wait in sluice's queue; then b
        # goes on and a is killed.
        for ls in (a, b):
            os.kill(ls.proc.pid, signal.SIGSTOP)
        for t in threads:
            t.start()
        st.wait_until(lambda: (lambda h: all(
            u["inflight"] > 0 for u in h["upstreams"]) and
            h["inflight"] + h["queued"] == 32)(s.health().json()),
            SAFETY_NET_S, "requests in flight on both replicas, the rest "
            "queued")
        os.kill(b.proc.pid, signal.SIGCONT)
        os.kill(a.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + SAFETY_NET_S
        for t in threads:
            t.join(max(0, deadline - time.monotonic()))
            self.assertFalse(t.is_alive(), "a request hangs")
        for out in outs:
            path = out["path"]
            self.assertNotIn("exception", out, out)
            self.assertEqual(out["status"], 200, out)
            doc = json.loads(out["body"])
            self.assertEqual(st.text_of(path, doc), want[path], path)
            self.assertEqual(tokens_of(path, doc), N_CRASH)
            if path != "/completion":
                self.assertEqual(doc["choices"][0]["finish_reason"],
                                 "length")
        # What was in flight on the dead replica was sent again: cut, or
        # refused when sluice had taken it but not yet connected.
        self.assertGreater(retries(s, a.url, "transport") +
                           retries(s, a.url, "refused"), 0)
        self.assertEqual(retries(s, b.url, "transport"), 0)
        s.wait_line(r"queued to be sent again", SAFETY_NET_S)


class Retry5xx(MockTestCase):
    """A replica that answers 500 to every generation, beside a good one.
    With one slot each and requests one at a time, sluice takes them in
    turn, so at least every other request meets the bad one first. Prefix
    affinity is off: it would send these alike requests where the first
    one went, and turns are what these tests count on."""

    def pair(self, *sluice_args):
        bad = self.mock("--fail-rate", "1", "--fail-status", "500",
                        "--slots", "1")
        good = self.mock("--slots", "1", "--tokens", "5")
        s = self.sluice("--upstream", bad.url, "--upstream", good.url,
                        "--affinity", "off", *sluice_args)
        s.wait_all_upstreams_ready(SAFETY_NET_S)
        return bad, good, s

    def test_a_5xx_is_sent_to_the_other_replica(self):
        bad, good, s = self.pair("--eject-after", "0")
        for i in range(6):
            path = PATHS[i % len(PATHS)]
            with self.subTest(i=i, path=path):
                r = s.post(path, body_for(path, None, i % 2 == 1),
                           timeout=SAFETY_NET_S)
                self.assertEqual(r.status, 200, r.body[:300])
        # Each that met the bad replica first was sent again, once.
        resent = retries(s, bad.url, "5xx")
        self.assertGreaterEqual(resent, 3)
        self.assertEqual(s.wait_lines(r"\(it answered 500\); queued to be "
                                      r"sent again", resent, SAFETY_NET_S),
                         resent)
        self.assertEqual(retries(s, good.url, "5xx"), 0)
        # Nothing was ejected: --eject-after 0.
        self.assertEqual(upstream_named(s, bad.url)["ejections"], 0)

    def test_retries_0_relays_the_failure(self):
        bad, good, s = self.pair("--retries", "0", "--eject-after", "0")
        statuses = []
        for i in range(4):
            r = s.post("/completion", body_for("/completion", None, False),
                       timeout=SAFETY_NET_S)
            statuses.append(r.status)
            if r.status == 500:
                self.assertEqual(r.json()["error"]["message"],
                                 "mock failure")
            else:
                self.assertEqual(r.json()["content"], expected_text(5))
        self.assertEqual(sorted(statuses), [200, 200, 500, 500])
        self.assertEqual(retries(s, bad.url, "5xx"), 0)

    def test_a_failing_replica_is_ejected_and_returns(self):
        bad, good, s = self.pair("--eject-after", "2", "--eject-time", "1",
                                 "--health-interval", "0.1")

        def ask_until_ejected():
            for _ in range(20):
                r = s.post("/completion",
                           body_for("/completion", None, False),
                           timeout=SAFETY_NET_S)
                self.assertEqual(r.status, 200, r.body[:300])
                self.assertEqual(r.json()["content"], expected_text(5))
                u = upstream_named(s, bad.url)
                if u.get("ejected"):
                    return u
            self.fail("the failing replica was never ejected")

        u = ask_until_ejected()
        self.assertEqual(u["ejections"], 1)
        self.assertLessEqual(u["ejected_ms"], 1000)
        # The two failures that ejected it, each sent again.
        self.assertEqual(retries(s, bad.url, "5xx"), 2)
        self.assertEqual(promcheck.value(metrics(s), "sluice_upstream_ejected",
                                         upstream=bad.url, model="default"), 1)
        self.assertEqual(s.wait_lines(r"upstream %s ejected for 1\.0 s "
                                      r"after 2 failures in a row"
                                      % bad.url, 1, SAFETY_NET_S), 1)
        # Its /health answers, so a health check brings it back.
        st.wait_until(lambda: not upstream_named(s, bad.url).get("ejected"),
                      SAFETY_NET_S, "the replica's return")
        s.wait_line(r"upstream %s returns from ejection" % bad.url,
                    SAFETY_NET_S)
        self.assertEqual(promcheck.value(metrics(s), "sluice_upstream_ejected",
                                         upstream=bad.url, model="default"), 0)
        # Failing again at once: ejected for twice as long.
        u = ask_until_ejected()
        self.assertEqual(u["ejections"], 2)
        self.assertLessEqual(u["ejected_ms"], 2000)
        self.assertEqual(retries(s, bad.url, "5xx"), 4)
        self.assertEqual(s.wait_lines(r"upstream %s ejected for 2\.0 s "
                                      r"after 2 failures in a row"
                                      % bad.url, 1, SAFETY_NET_S), 1)
        self.assertEqual(promcheck.value(
            metrics(s), "sluice_upstream_ejections_total",
            upstream=bad.url, model="default"), 2)


if __name__ == "__main__":
    st.main()

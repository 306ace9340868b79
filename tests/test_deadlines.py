"""Deadlines (src/sched/README.md): service levels per request, by key and
by option; a request refused at once when its level is predicted out of
reach, one that leaves the queue when its level goes out of reach while it
waits, neither charged to its key; and, at twice a real llama-server's
capacity, requests with a level served within it or refused, those
without one untouched."""

import concurrent.futures
import hashlib
import re
import threading
import time

import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240


def completion(prompt, n=16, stream=False):
    return {"prompt": prompt, "n_predict": n, "temperature": 0,
            "stream": stream}


def hold_the_slot(port, n=20000):
    """A long stream that keeps the one slot busy; returns its client (close
    it to free the slot) once its first event has arrived."""
    c = st.RawClient(port, timeout=SAFETY_NET_S)
    c.request("POST", "/completion", completion("hold", n=n, stream=True))
    status, _ = c.read_head()
    assert status == 200
    next(c.chunks())
    return c


def server_timing(r):
    """{metric: ms} of a response's Server-Timing."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r"([a-z-]+);dur=([0-9.]+)", r.header("Server-Timing") or "")}


def metric(s, pattern, headers=None):
    """The value of the /metrics line matching pattern (0 when absent)."""
    text = s.get("/metrics", headers=headers).body.decode()
    m = re.search(r"^%s (\S+)$" % pattern, text, re.M)
    return float(m.group(1)) if m else 0.0


def wait_metric(s, pattern, value, headers=None):
    """Waits for a /metrics line to say value: a request is counted as its
    exchange ends, which may be a moment after its client has the answer."""
    st.wait_until(lambda: metric(s, pattern, headers) == value, 30,
                  "%s to be %s" % (pattern, value))


def queued(s):
    return s.health().json()["queued"]


def train(s, n=12, tokens=64):
    """Answers enough requests for sluice's latency model to be trusted;
    returns their mean time from send to end, in seconds."""
    took = []
    for i in range(n):
        t = time.monotonic()
        r = s.post("/completion", completion("warm %d" % i, n=tokens,
                                             stream=True),
                   timeout=SAFETY_NET_S)
        assert r.status == 200, r.status
        took.append(time.monotonic() - t)
    st.wait_until(lambda: s.health().json()["upstreams"][0]
                  ["latency_model"]["known"], 30, "the model to be known")
    return sum(took) / len(took)


class Levels(st.TestCase):

    def test_a_bad_level_gets_400(self):
        s = self.sluice("--model", st.MODEL_TINY)
        for name, value in (("X-SLO-TTFT-Ms", "0"),
                            ("X-SLO-TTFT-Ms", "abc"),
                            ("X-SLO-TTFT-Ms", "1e3"),
                            ("X-SLO-TTFT-Ms", "-5"),
                            ("X-SLO-TTFT-Ms", "500.5"),
                            ("X-SLO-TTFT-Ms", "3600001"),
                            ("X-SLO-TPOT-Ms", "fast")):
            r = s.post("/completion", completion("x"),
                       headers={name: value})
            self.assertEqual(r.status, 400, (name, value))
            self.assertEqual(
                r.json()["error"]["message"],
                '%s: expected whole milliseconds from 1 to 3600000, got '
                '"%s"' % (name, value))
        # Good ones pass, and the level is not llama-server's business:
        # the answer is as without it.
        plain = s.post("/completion", completion("x"))
        r = s.post("/completion", completion("x"),
                   headers={"X-SLO-TTFT-Ms": "60000",
                            "X-SLO-TPOT-Ms": "1000"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["content"], plain.json()["content"])
        # Every queued answer says what was predicted for it.
        self.assertIn("predicted", server_timing(r))
        self.assertEqual(s.stop(), 0)

    def test_levels_are_not_sent_upstream(self):
        up = self.recording_upstream(answer=st.models_or_completion)
        s = self.sluice("--upstream", up.url)
        r = s.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                   headers={"X-SLO-TTFT-Ms": "500", "X-SLO-TPOT-Ms": "50"})
        self.assertEqual(r.status, 200)
        got = up.received()[-1]
        self.assertIsNone(got.headers.get("X-SLO-TTFT-Ms"))
        self.assertIsNone(got.headers.get("X-SLO-TPOT-Ms"))
        self.assertEqual(s.stop(), 0)


class Shedding(st.TestCase):

    def test_a_request_leaves_the_queue_when_its_level_is_out_of_reach(self):
        # A fresh sluice: its latency model knows nothing yet, so nothing
        # is refused on arrival, and a queued request is shed only once its
        # deadline itself has passed.
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1",
                        "--slo-ttft", "normal=300ms")
        holder = hold_the_slot(s.port)
        results = {}

        def send(rid, headers):
            t = time.monotonic()
            results[rid] = (s.post("/completion", completion(rid, n=2),
                                   headers=dict(headers, **{
                                       "X-Request-Id": rid}),
                                   timeout=SAFETY_NET_S),
                            time.monotonic() - t)

        # Its level from --slo-ttft (normal), one without any (batch),
        # one asked by header.
        threads = [threading.Thread(target=send, args=a) for a in (
            ("by-option", {}),
            ("none", {"X-Priority": "batch"}),
            ("by-header", {"X-SLO-TTFT-Ms": "600"}))]
        for t in threads:
            t.start()
        st.wait_until(lambda: "by-option" in results and
                      "by-header" in results, SAFETY_NET_S,
                      "the two with levels to be shed")
        for rid, level in (("by-option", 300), ("by-header", 600)):
            r, took = results[rid]
            self.assertEqual(r.status, 503, r.body)
            err = r.json()["error"]
            self.assertEqual(err["reason"], "slo_deadline")
            self.assertEqual(err["type"], "unavailable_error")
            self.assertIn("within its service level of %d ms" % level,
                          err["message"])
            self.assertGreaterEqual(int(r.header("Retry-After")), 1)
            self.assertGreaterEqual(int(r.header("retry-after-ms")), 100)
            # It waited its level out, not the queue timeout.
            self.assertGreaterEqual(server_timing(r)["queue"], level)
            self.assertLess(took, 30)
        # The one without a level waits on, untouched.
        self.assertNotIn("none", results)
        self.assertEqual(queued(s), 1)
        holder.close()
        st.wait_until(lambda: "none" in results, SAFETY_NET_S,
                      "the one without a level to be served")
        self.assertEqual(results["none"][0].status, 200)
        s.wait_line(r" access id=by-header .* status=503 .*"
                    r"outcome=rejected reason=slo_deadline$")
        self.assertEqual(metric(s, r'sluice_slo_requests_total\{'
                                r'priority="normal",key="",'
                                r'outcome="shed"\}'), 2)
        self.assertEqual(metric(s, r'sluice_rejected_total\{'
                                r'reason="slo_deadline"\}'), 2)
        self.assertEqual(s.stop(), 0)

    def test_a_request_is_refused_at_once_when_predicted_late(self):
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "1")
        train(s)
        # A generation of 20,000 tokens holds the slot for seconds: a
        # request behind it cannot see its first token within 200 ms.
        holder = hold_the_slot(s.port)
        r = s.post("/completion", completion("late", n=4),
                   headers={"X-SLO-TTFT-Ms": "200", "X-Request-Id": "late"})
        self.assertEqual(r.status, 429, r.body)
        err = r.json()["error"]
        self.assertEqual(err["reason"], "slo_ttft")
        self.assertEqual(err["type"], "rate_limit_error")
        self.assertRegex(err["message"], r"^sluice predicts a time to first "
                         r"token of up to \d+ ms for this request")
        retry_ms = int(r.header("retry-after-ms"))
        self.assertGreaterEqual(retry_ms, 100)
        self.assertEqual(int(r.header("Retry-After")),
                         max(1, -(-retry_ms // 1000)))
        self.assertGreater(server_timing(r)["predicted"], 200)
        # At once: never queued, while the slot is still held.
        s.wait_line(r" access id=late .* status=429 .*queue_ms=-1 .*"
                    r"reason=slo_ttft$")
        self.assertTrue(st.wait_until(lambda: s.health().json()
                                      ["upstreams"][0]["inflight"] == 1,
                                      5, "the holder still in flight"))
        # A level it can meet: queued behind the holder, served once it
        # has gone.
        self.assertEqual(queued(s), 0)
        holder.close()
        r = s.post("/completion", completion("fine", n=4),
                   headers={"X-SLO-TTFT-Ms": "60000", "X-Request-Id": "fine"})
        self.assertEqual(r.status, 200)
        s.wait_line(r" access id=fine .* status=200 .* outcome=ok")
        wait_metric(s, r'sluice_slo_requests_total\{priority="normal",'
                    r'key="",outcome="met"\}', 1)
        self.assertEqual(s.stop(), 0)

    def test_a_refused_request_is_not_charged_to_its_key(self):
        keys = """keys:
  team:
    hash: sha256:%s
    rpm: 3
    slo: {ttft: 300ms}
""" % hashlib.sha256(b"team-secret").hexdigest()
        path = self.tmp + "/sluice.yaml"
        with open(path, "w") as f:
            f.write(keys)
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "1",
                        "--config", path, "--admin-key", "admin-secret")
        auth = {"Authorization": "Bearer team-secret"}
        admin = {"Authorization": "Bearer admin-secret"}
        holder = st.RawClient(s.port, timeout=SAFETY_NET_S)
        holder.request("POST", "/completion",
                       completion("hold", n=100000, stream=True),
                       headers=auth)
        self.assertEqual(holder.read_head()[0], 200)
        next(holder.chunks())
        # The key's level: shed from the queue after 300 ms.
        r = s.post("/completion", completion("shed", n=2), headers=auth,
                   timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 503)
        self.assertEqual(r.json()["error"]["reason"], "slo_deadline")
        holder.close()
        # rpm 3: the holder and two more; the shed one took nothing
        # (without its refund the second of these would be refused).
        for i in range(2):
            r = s.post("/completion", completion("ok %d" % i, n=2),
                       headers=dict(auth, **{"X-SLO-TTFT-Ms": "60000"}),
                       timeout=SAFETY_NET_S)
            self.assertEqual(r.status, 200, r.body)
        r = s.post("/completion", completion("over", n=2), headers=auth)
        self.assertEqual(r.status, 429)
        self.assertNotIn("reason", r.json().get("error", {}))
        st.wait_until(lambda: s.get("/v1/usage", headers=admin).json()
                      ["keys"]["team"]["requests"] == 3, 30,
                      "the key's usage to count three requests")
        self.assertEqual(metric(s, r'sluice_slo_requests_total\{'
                                r'priority="normal",key="team",'
                                r'outcome="shed"\}', admin), 1)
        self.assertEqual(s.stop(), 0)


class Overload(st.TestCase):
    """Twice the capacity of a real llama-server, measured in the test."""

    def flood(self, s, rate, seconds, level_ms, with_level):
        """Sends requests at `rate` a second for `seconds`, every tenth one
        without a level; returns [(has level, response, seconds taken)]."""
        results, lock = [], threading.Lock()

        def send(i):
            headers = {"X-Request-Id": "f%d" % i}
            has = with_level and i % 10 != 0
            if has:
                headers["X-SLO-TTFT-Ms"] = str(level_ms)
            t = time.monotonic()
            r = s.post("/completion", completion("flood %d" % (i % 7),
                                                 n=self.tokens,
                                                 stream=True),
                       headers=headers, timeout=SAFETY_NET_S)
            with lock:
                results.append((has, r, time.monotonic() - t))

        n = int(rate * seconds)
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=96) as pool:
            for i in range(n):
                # Open loop: each at its time, whatever came back.
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(send, i)
        return results

    tokens = 128

    def test_twice_capacity_served_within_or_refused(self):
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "2")
        # The same llama-server, unloaded: a request's time, and so the
        # capacity of its two slots.
        service = train(s, n=16, tokens=self.tokens)
        capacity = 2 / service
        level_ms = max(int(4 * service * 1000), 100)
        rate, seconds = 2 * capacity, 4.0

        def late(results):
            served = [r for has, r, _ in results if r.status == 200 and has]
            timing = [server_timing(r) for r in served]
            return served, [t for t in timing
                            if t["queue"] + t.get("ttft", 0) > level_ms]

        # Without levels the same flood leaves most answers late: the
        # queue grows for as long as it lasts.
        before = self.flood(s, rate, seconds, level_ms, with_level=False)
        self.assertTrue(all(r.status == 200 for _, r, _ in before))
        st.wait_until(lambda: queued(s) == 0 and s.health().json()
                      ["upstreams"][0]["inflight"] == 0, SAFETY_NET_S,
                      "the first flood to drain")
        served_before = [r for _, r, _ in before]
        late_before = [t for t in map(server_timing, served_before)
                       if t["queue"] + t.get("ttft", 0) > level_ms]
        self.assertGreater(len(late_before), len(served_before) / 2,
                           "the flood is no overload: the test measures "
                           "nothing")

        results = self.flood(s, rate, seconds, level_ms, with_level=True)
        served, late_now = late(results)
        refused = [(r, took) for has, r, took in results
                   if has and r.status != 200]
        # Those without a level: untouched, all served.
        self.assertTrue(all(r.status == 200 for has, r, _ in results
                            if not has))
        # Those with one: served, or refused with a time to come back.
        for r, _ in refused:
            self.assertIn(r.status, (429, 503), r.body)
            self.assertIn(r.json()["error"]["reason"],
                          ("slo_ttft", "slo_deadline"))
            self.assertGreaterEqual(int(r.header("Retry-After")), 1)
        self.assertGreater(len(served), 0)
        self.assertGreater(len(refused), 0)
        # Served within the level, but for a few: a tenth, where the flood
        # without levels left most late.
        self.assertLessEqual(len(late_now), len(served) / 10,
                             "%d of %d served late (%d of %d without "
                             "levels)" % (len(late_now), len(served),
                                          len(late_before),
                                          len(served_before)))
        # Refused at once: most within a request's time, where a queued
        # one waits several.
        at_once = [took for r, took in refused if r.status == 429]
        if at_once:
            at_once.sort()
            self.assertLess(at_once[len(at_once) // 2], service)
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    st.main()

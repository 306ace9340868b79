"""DNS discovery (--upstream-dns NAME:PORT): sluice follows a name's
addresses as a Kubernetes headless Service lists its pods. A DNS server of
the test's own (dns_server.py, on 127.0.0.1; the system's resolver is never
touched) answers NAME with 127.0.0.2, 127.0.0.3 or both, each address with
a mock llama-server listening there on the same port, while traffic runs."""

import http.client
import json
import os
import re
import threading

import promcheck
import sluice_test as st
from dns_server import DnsServer

NAME = "llama.sluice.test"
# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 120
# The mock's pace, so that a long answer stays in flight while the DNS
# answer changes (refreshed every REFRESH) and a short one is quick.
TOKEN_DELAY_MS = 20
SHORT_TOKENS = 3
REFRESH = "200ms"


class Mock(st.Process):
    """bench/mock-llama-server on `host` (a loopback address)."""

    def __init__(self, host, port, *args):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SLUICE_MOCK_")}
        super().__init__([st.MOCK, "--host", host, "--port", str(port),
                          *args], env=env, name="mock " + host)
        m = self.wait_line(r"^mock-llama-server listening on http://"
                           + re.escape(host) + r":(\d+) ", timeout=10)
        self.port = int(m.group(1))
        self.url = "http://%s:%d" % (host, self.port)


def completion(port, tokens, request_id, timeout=SAFETY_NET_S):
    return st.request(port, "POST", "/v1/completions",
                      body={"prompt": "hi", "max_tokens": tokens},
                      headers={"X-Request-Id": request_id}, timeout=timeout)


def text(r):
    return r.json()["choices"][0]["text"]


def sample(samples, metric, **labels):
    """A sample's value, or 0 (promcheck.value, for a label called
    "name", which that function's own argument takes)."""
    return samples.get((metric, tuple(sorted(labels.items()))), 0)


def metrics(s):
    r = s.get("/metrics", timeout=SAFETY_NET_S)
    assert r.status == 200, r.status
    return promcheck.check(r.body.decode())


class Discovery(st.TestCase):

    def setUp(self):
        super().setUp()
        self.dns = DnsServer()
        self.addCleanup(self.dns.stop)

    def mocks(self):
        """Mocks on 127.0.0.2 and 127.0.0.3, on one port (the second takes
        the port the first was given)."""
        args = ("--slots", "8", "--token-delay-ms", str(TOKEN_DELAY_MS))
        a = Mock("127.0.0.2", 0, *args)
        self._processes.append(a)
        b = Mock("127.0.0.3", a.port, *args)
        self._processes.append(b)
        return a, b

    def discovering(self, port, *extra, wait_ready=True):
        return self.sluice("--upstream-dns", "%s:%d" % (NAME, port),
                           "--dns-server", self.dns.address,
                           "--dns-refresh", REFRESH, *extra,
                           wait_ready=wait_ready)

    def upstreams(self, s):
        return {u["url"]: u for u in s.health().json()["upstreams"]}

    def served_by(self, s, request_id):
        """The upstream sluice's access log names for the request."""
        m = s.wait_line(r" access id=%s .*upstream=(\S+)"
                        % re.escape(request_id), timeout=SAFETY_NET_S)
        return m.group(1)

    def test_follows_the_answer_without_failing_a_request(self):
        a, b = self.mocks()
        self.dns.set(NAME, ["127.0.0.2"])
        s = self.discovering(a.port)
        ups = self.upstreams(s)
        self.assertEqual(list(ups), [a.url])
        self.assertEqual(ups[a.url]["origin"], "dns:%s:%d" % (NAME, a.port))

        # Traffic: short requests, one after another on each of 3 threads,
        # until the end; every one must succeed with the mock's text.
        stop = threading.Event()
        results, lock = [], threading.Lock()

        def traffic(k):
            n = 0
            while not stop.is_set():
                rid = "t%d-%d" % (k, n)
                n += 1
                try:
                    r = completion(s.port, SHORT_TOKENS, rid)
                    got = (r.status, text(r) if r.status == 200 else
                           r.body[:200])
                except (OSError, http.client.HTTPException) as e:
                    got = (None, repr(e))
                with lock:
                    results.append((rid, got))

        threads = [threading.Thread(target=traffic, args=(k,))
                   for k in range(3)]
        for t in threads:
            t.start()
        self.addCleanup(stop.set)

        # A long stream that starts while 127.0.0.2 is the only address:
        # it must finish there, whole, after that address has gone.
        # 8 s at the mock's pace: ample for two DNS refreshes and a health
        # check, even on a busy machine.
        long_tokens = 400
        conn = http.client.HTTPConnection("127.0.0.1", s.port,
                                          timeout=SAFETY_NET_S)
        self.addCleanup(conn.close)
        conn.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "long", "max_tokens": long_tokens, "stream": True}),
            headers={"Content-Type": "application/json",
                     "X-Request-Id": "long"})
        long_r = conn.getresponse()
        self.assertEqual(long_r.status, 200)
        long_r.readline()  # its first event: it is under way on .2

        # Both: the new address is checked, then used.
        self.dns.set(NAME, ["127.0.0.2", "127.0.0.3"])
        st.wait_until(lambda: self.upstreams(s).get(b.url, {})
                      .get("state") == "ready", SAFETY_NET_S,
                      "127.0.0.3 to be ready")
        # Only .3: .2 drains (it is still listed while the stream runs
        # there) and takes no new work.
        self.dns.set(NAME, ["127.0.0.3"])
        st.wait_until(lambda: self.upstreams(s).get(a.url, {})
                      .get("draining"), SAFETY_NET_S, "127.0.0.2 draining")
        # The drain waits for the stream (and whatever short request was
        # still there).
        self.assertGreaterEqual(self.upstreams(s)[a.url]["inflight"], 1)
        for k in range(4):
            rid = "after-%d" % k
            r = completion(s.port, SHORT_TOKENS, rid)
            self.assertEqual((r.status, text(r)),
                             (200, st.mock_text(SHORT_TOKENS)))
            self.assertEqual(self.served_by(s, rid), b.url)
        self.assertIn(a.url, self.upstreams(s),
                      "127.0.0.2 went before its stream ended")

        # The stream ends whole, on .2; then .2 is removed.
        pieces = []
        for line in long_r.read().decode().split("\n"):
            if line.startswith("data: {"):
                pieces.append(json.loads(line[6:])["choices"][0]["text"])
        # The first event was read above: the first token's piece.
        self.assertEqual(" tok0" + "".join(pieces),
                         st.mock_text(long_tokens))
        self.assertEqual(self.served_by(s, "long"), a.url)
        st.wait_until(lambda: a.url not in self.upstreams(s), SAFETY_NET_S,
                      "127.0.0.2 to leave /health")
        s.wait_line(r"upstream %s drained; removing it" % re.escape(a.url))
        self.assertEqual(list(self.upstreams(s)), [b.url])

        # Its metric series went with it; the lookups are counted.
        m = metrics(s)
        ups = {dict(labels).get("upstream") for (name, labels) in m
               if name == "sluice_upstream_up"}
        self.assertEqual(ups, {b.url})
        target = "%s:%d" % (NAME, a.port)
        self.assertGreaterEqual(sample(
            m, "sluice_dns_lookups_total", name=target, result="ok"), 3)
        self.assertEqual(sample(m, "sluice_dns_addresses", name=target), 1)

        # A move with no overlap, .3 to .2: the new address is checked
        # while the old one drains, and requests wait for it meanwhile.
        self.dns.set(NAME, ["127.0.0.2"])
        st.wait_until(lambda: [(url, u["state"]) for url, u in
                               self.upstreams(s).items()]
                      == [(a.url, "ready")], SAFETY_NET_S,
                      "127.0.0.2 alone, ready")
        rid = "moved-back"
        r = completion(s.port, SHORT_TOKENS, rid)
        self.assertEqual(r.status, 200)
        self.assertEqual(self.served_by(s, rid), a.url)

        stop.set()
        for t in threads:
            t.join(SAFETY_NET_S)
        failed = [(rid, got) for rid, got in results
                  if got != (200, st.mock_text(SHORT_TOKENS))]
        self.assertEqual(failed, [])
        served = {self.served_by(s, rid) for rid, _ in results}
        self.assertEqual(served, {a.url, b.url})
        self.assertEqual(s.stop(), 0)

    def test_a_failing_resolver_keeps_the_set(self):
        a, _ = self.mocks()
        self.dns.set(NAME, ["127.0.0.2"])
        s = self.discovering(a.port)
        target = "%s:%d" % (NAME, a.port)

        def lookups(result):
            return sample(metrics(s), "sluice_dns_lookups_total",
                          name=target, result=result)

        def still_served(rid):
            self.assertEqual(list(self.upstreams(s)), [a.url])
            self.assertFalse(self.upstreams(s)[a.url].get("draining"))
            r = completion(s.port, SHORT_TOKENS, rid)
            self.assertEqual((r.status, text(r)),
                             (200, st.mock_text(SHORT_TOKENS)))

        # No answer at all: two lookups time out, logged once.
        self.dns.mode("drop")
        st.wait_until(lambda: lookups("timeout") >= 2, SAFETY_NET_S,
                      "two lookups to time out")
        self.assertEqual(s.wait_lines(r"dns %s: lookup failed" %
                                      re.escape(target), 1, SAFETY_NET_S),
                         1)
        still_served("during-timeouts")

        # SERVFAIL: a new way of failing, one more line; the set stays.
        self.dns.mode("servfail")
        st.wait_until(lambda: lookups("error") >= 2, SAFETY_NET_S,
                      "two lookups to fail")
        self.assertEqual(s.wait_lines(r"dns %s: lookup failed" %
                                      re.escape(target), 2, SAFETY_NET_S),
                         2)
        still_served("during-servfail")

        # Answers again: one line says so.
        self.dns.mode("answer")
        s.wait_line(r"dns %s: lookups answer again" % re.escape(target),
                    timeout=SAFETY_NET_S)
        still_served("answers-again")

        # NXDOMAIN (a headless Service with no ready pod): the set empties,
        # and requests get 503 as with no upstream ready.
        self.dns.set(NAME, None)
        st.wait_until(lambda: not self.upstreams(s), SAFETY_NET_S,
                      "the upstream to be removed")
        r = completion(s.port, SHORT_TOKENS, "no-upstream")
        self.assertEqual(r.status, 503)
        self.assertEqual(s.wait_lines(r"dns %s: the name has no address"
                                      % re.escape(target), 1, SAFETY_NET_S),
                         1)
        # The address comes back: a new upstream, checked and used.
        self.dns.set(NAME, ["127.0.0.2"])
        s.wait_ready(SAFETY_NET_S)
        still_served("back")
        self.assertEqual(s.stop(), 0)

    def test_bad_values_are_refused(self):
        for args, line in (
                (["--upstream-dns", "llama"],
                 '--upstream-dns: expected NAME:PORT (a DNS name of at most '
                 '253 characters, a port from 1 to 65535), got "llama"'),
                (["--upstream-dns", "llama:0"],
                 '--upstream-dns: expected NAME:PORT (a DNS name of at most '
                 '253 characters, a port from 1 to 65535), got "llama:0"'),
                (["--upstream-dns", "a:80", "--dns-server", "resolver:53"],
                 '--dns-server: expected IP:PORT or [IPv6]:PORT, got '
                 '"resolver:53"'),
                (["--upstream-dns", "a:80", "--dns-server", "::1:53"],
                 '--dns-server: expected IP:PORT or [IPv6]:PORT, got '
                 '"::1:53"'),
                (["--dns-refresh", "10ms"], None),
                (["--upstream-dns", "a:80", "SLUICE_DNS_SERVER=10.0.0.1"],
                 'SLUICE_DNS_SERVER: expected IP:PORT or [IPv6]:PORT, got '
                 '"10.0.0.1"')):
            with self.subTest(args=args):
                env = dict(a.split("=", 1) for a in args if "=" in a)
                args = [a for a in args if "=" not in a]
                s = self.sluice(*args, env=env, wait_ready=None)
                self.assertEqual(s.wait_exit(SAFETY_NET_S), 2)
                out = s.output().splitlines()
                self.assertEqual(len(out), 1, out)
                if line:
                    self.assertEqual(out[0], "sluice: " + line)
                else:
                    self.assertTrue(out[0].startswith(
                        "sluice: --dns-refresh: "), out)

    def test_ipv6_and_several_names(self):
        """An AAAA answer becomes an http://[ADDR]:PORT upstream, and each
        --upstream-dns name is followed on its own (nothing listens at
        these addresses: they only have to be listed)."""
        self.dns.set(NAME, ["::1"])
        self.dns.set("other." + NAME, ["127.0.0.9"])
        s = self.discovering(9, "--upstream-dns", "other.%s:10" % NAME,
                             wait_ready=False)
        st.wait_until(lambda: len(self.upstreams(s)) == 2, SAFETY_NET_S,
                      "both names' upstreams")
        self.assertEqual({url: u["origin"] for url, u in
                          self.upstreams(s).items()},
                         {"http://[::1]:9": "dns:%s:9" % NAME,
                          "http://127.0.0.9:10": "dns:other.%s:10" % NAME})
        self.assertEqual(s.stop(), 0)

    def test_a_model_of_a_models_section_follows_its_dns_name(self):
        """models: a model by upstreams: beside one by dns: NAME:PORT: the
        addresses found join that model's pool (and leave it when the
        answer moves on), and a request goes to the model it names."""
        a, b = self.mocks()
        c = Mock("127.0.0.4", 0, "--slots", "8")
        self._processes.append(c)
        self.dns.set(NAME, ["127.0.0.2"])
        path = os.path.join(self.tmp, "sluice.yaml")
        with open(path, "w") as f:
            f.write("models:\n"
                    "  fixed:\n"
                    "    upstreams: [%s]\n"
                    "  found:\n"
                    "    dns: %s:%d\n" % (c.url, NAME, a.port))
        s = self.sluice("--config", path, "--dns-server", self.dns.address,
                        "--dns-refresh", REFRESH, wait_ready=False)

        def pool(name):
            for m in s.health().json()["models"]:
                if m["name"] == name:
                    return m["upstreams"]
            raise AssertionError("no model " + name)

        def ask(model, rid):
            r = st.request(s.port, "POST", "/v1/completions",
                           body={"model": model, "prompt": "hi",
                                 "max_tokens": SHORT_TOKENS},
                           headers={"X-Request-Id": rid},
                           timeout=SAFETY_NET_S)
            self.assertEqual((r.status, text(r)),
                             (200, st.mock_text(SHORT_TOKENS)))
            return self.served_by(s, rid)

        def ready(name, url):
            ups = self.upstreams(s)
            return (pool(name) == [url] and url in ups
                    and ups[url]["state"] == "ready")

        st.wait_until(lambda: ready("found", a.url), SAFETY_NET_S,
                      "127.0.0.2 in model found")
        st.wait_until(lambda: ready("fixed", c.url), SAFETY_NET_S,
                      "the fixed upstream ready")
        self.assertEqual(self.upstreams(s)[a.url]["origin"],
                         "dns:%s:%d" % (NAME, a.port))
        self.assertEqual(ask("found", "f1"), a.url)
        self.assertEqual(ask("fixed", "x1"), c.url)

        # The answer moves to 127.0.0.3: it joins "found", 127.0.0.2
        # leaves it, and "fixed" keeps its own.
        self.dns.set(NAME, ["127.0.0.3"])
        st.wait_until(lambda: ready("found", b.url), SAFETY_NET_S,
                      "127.0.0.3 replacing 127.0.0.2 in model found")
        self.assertNotIn(a.url, self.upstreams(s))
        self.assertEqual(pool("fixed"), [c.url])
        self.assertEqual(ask("found", "f2"), b.url)
        self.assertEqual(ask("fixed", "x2"), c.url)
        target = "%s:%d" % (NAME, a.port)
        self.assertEqual(sample(metrics(s), "sluice_dns_addresses",
                                name=target), 1)

        # A reload that gives "found" another name: the old name's
        # upstream drains and leaves, the new name's joins.
        other = "other." + NAME
        self.dns.set(other, ["127.0.0.2"])
        with open(path, "w") as f:
            f.write("models:\n"
                    "  fixed:\n"
                    "    upstreams: [%s]\n"
                    "  found:\n"
                    "    dns: %s:%d\n" % (c.url, other, a.port))
        s.reload(r"models reloaded: 2 models; changed: found \(dns\)$",
                 timeout=SAFETY_NET_S)
        st.wait_until(lambda: ready("found", a.url), SAFETY_NET_S,
                      "the new name's address in model found")
        self.assertNotIn(b.url, self.upstreams(s))
        self.assertEqual(ask("found", "f3"), a.url)
        samples = metrics(s)
        self.assertEqual(sample(samples, "sluice_dns_addresses",
                                name="%s:%d" % (other, a.port)), 1)
        self.assertEqual(sample(samples, "sluice_dns_addresses",
                                name=target), 0)
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    st.main()

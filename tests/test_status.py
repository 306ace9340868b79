"""The status page (issue 42): GET /status, a page that reads
GET /status.json every second. Its document checked exactly over plain
HTTP; the page in headless Chromium, against /health and /metrics at the
same moment, on a real llama-server with the demo models."""

import base64
import os
import re
import shutil

import sluice_test as st
from test_tenants import (bearer, completion, hold, keys_yaml, metric,
                          send_queued)

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240
ADMIN = "admin-secret"
KEYS = {"alice": {"secret": "sk-alice", "rpm": 600, "tpm": 100000},
        "bob": {"secret": "sk-bob"}}

# The document's fields, exactly (src/ops/README.md, "The status page").
TOP = {"health", "metrics", "now_ms", "listed", "models", "tenants",
       "recent", "history"}
RECENT = {"seq", "at_ms", "method", "path", "model", "key", "priority",
          "status", "outcome", "reason", "queue_ms", "ttft_ms", "total_ms",
          "tokens", "tokens_per_s", "upstream"}
MODEL = {"name", "queue", "urgent_reserve", "fair_reserve", "slots", "busy"}
TENANT = {"name", "revoked", "rpm", "tpm", "max_concurrent", "in_flight",
          "requests_last_minute", "tokens_last_minute", "requests_left",
          "tokens_left", "requests", "prompt_tokens", "completion_tokens"}
HISTORY = {"sample_ms", "samples", "t_ms", "requests", "failed", "tokens",
           "queued", "busy", "slots", "ttft_p50_ms", "ttft_p99_ms"}
# The rings' bounds (status.h).
RECENT_MAX = 50


def basic(password, user="me"):
    creds = base64.b64encode(("%s:%s" % (user, password)).encode())
    return {"Authorization": "Basic " + creds.decode()}


def six_digits(v):
    """v with every float written to 6 significant digits, as /metrics'
    summary writes them."""
    if isinstance(v, dict):
        return {k: six_digits(x) for k, x in v.items()}
    if isinstance(v, list):
        return [six_digits(x) for x in v]
    return float("%.6g" % v) if isinstance(v, float) else v


def chat(n=4):
    return {"messages": [{"role": "user", "content": "hi"}],
            "max_tokens": n, "temperature": 0}


class StatusCase(st.TestCase):
    def keys_config(self):
        config = os.path.join(self.tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write(keys_yaml(KEYS))
        return ("--config", config)

    def status(self, s):
        r = s.get("/status.json", headers=bearer(ADMIN))
        self.assertEqual(r.status, 200, r.body)
        return r.json()


class Document(StatusCase):

    def test_the_document_says_what_health_and_metrics_say(self):
        s = self.sluice("--model", st.MODEL_TINY, "--admin-key", ADMIN,
                        *self.keys_config())
        sent = [("sk-alice", 200), ("sk-alice", 200), ("sk-bob", 200),
                ("sk-nobody", 401)]
        for secret, status in sent:
            r = s.post("/v1/chat/completions", chat(),
                       headers=bearer(secret), timeout=SAFETY_NET_S)
            self.assertEqual(r.status, status)
        # Neither the health checks nor the page's own reads are listed.
        s.health()
        self.status(s)

        r = s.get("/status.json", headers=bearer(ADMIN))
        self.assertNotIn(b"sk-alice", r.body)
        doc = r.json()
        health = s.health().json()
        summary = s.get("/metrics?format=json",
                        headers=bearer(ADMIN)).json()
        self.assertEqual(set(doc), TOP)
        # /health's document whole, but for the second it was made in.
        for d in (doc["health"], health):
            del d["uptime_s"]
        self.assertEqual(doc["health"], health)
        # /metrics' summary whole, but for what the process spent since;
        # its numbers to the 6 digits /metrics writes.
        for d in (doc["metrics"], summary):
            del d["process"], d["tokens_per_second"]
        self.assertEqual(six_digits(doc["metrics"]), summary)

        self.assertEqual(doc["listed"], 4)
        recent = doc["recent"]
        self.assertEqual([set(x) for x in recent], [RECENT] * 4)
        # Newest first.
        self.assertEqual([x["seq"] for x in recent], [4, 3, 2, 1])
        self.assertEqual([x["status"] for x in recent],
                         [401, 200, 200, 200])
        self.assertEqual([x["key"] for x in recent],
                         ["", "bob", "alice", "alice"])
        self.assertEqual([x["outcome"] for x in recent],
                         ["rejected", "ok", "ok", "ok"])
        model = health["default_model"]
        for x in recent[1:]:
            self.assertEqual((x["method"], x["path"], x["model"],
                              x["priority"], x["tokens"]),
                             ("POST", "/v1/chat/completions", model,
                              "normal", 4))
            self.assertGreaterEqual(x["ttft_ms"], 0)
            self.assertGreaterEqual(x["total_ms"], x["ttft_ms"])
            self.assertEqual(x["upstream"], health["upstreams"][0]["url"])
        self.assertEqual((recent[0]["model"], recent[0]["queue_ms"],
                          recent[0]["ttft_ms"], recent[0]["tokens_per_s"]),
                         ("", None, None, None))

        self.assertEqual([set(m) for m in doc["models"]], [MODEL])
        m = doc["models"][0]
        self.assertEqual((m["name"], m["queue"], m["busy"]),
                         (model, {"urgent": 0, "normal": 0, "batch": 0}, 0))
        self.assertEqual(m["slots"], health["upstreams"][0]["slots"])

        # Each tenant's minute is what its usage counted.
        usage = s.get("/v1/usage", headers=bearer(ADMIN)).json()["keys"]
        tenants = {t["name"]: t for t in doc["tenants"]}
        self.assertEqual(set(tenants), {"alice", "bob"})
        for name, t in tenants.items():
            self.assertEqual(set(t), TENANT)
            u = usage[name]
            tokens = u["prompt_tokens"] + u["completion_tokens"]
            self.assertEqual((t["requests"], t["prompt_tokens"],
                              t["completion_tokens"]),
                             (u["requests"], u["prompt_tokens"],
                              u["completion_tokens"]))
            self.assertEqual((t["requests_last_minute"],
                              t["tokens_last_minute"]),
                             (u["requests"], tokens))
            self.assertEqual(t["in_flight"], 0)
        self.assertEqual((tenants["alice"]["rpm"], tenants["alice"]["tpm"]),
                         (600, 100000))
        # Two taken from a bucket of 600 that refills ten a second.
        self.assertLessEqual(tenants["alice"]["requests_left"], 600)
        self.assertGreaterEqual(tenants["alice"]["requests_left"], 598)
        self.assertEqual((tenants["bob"]["rpm"], tenants["bob"]["requests_left"],
                          tenants["bob"]["tokens_left"]), (0, None, None))
        self.assertEqual(set(doc["history"]), HISTORY)

    def test_the_history_adds_up_to_the_counters(self):
        s = self.sluice("--model", st.MODEL_TINY)
        for n in (3, 5):
            self.assertEqual(s.post("/v1/chat/completions", chat(n),
                                    timeout=SAFETY_NET_S).status, 200)
        self.assertEqual(s.get("/nothing").status, 404)

        def settled():
            # Once a sample came after the last request, the samples hold
            # every listed request and every token generated.
            doc = self.status(s)
            h = doc["history"]
            text = s.get("/metrics").body.decode()
            tokens = metric(text, "sluice_generated_tokens_total")
            return (sum(h["requests"]) == doc["listed"] == 3 and
                    sum(h["tokens"]) == tokens == 8) and h
        h = st.wait_until(settled, SAFETY_NET_S, "a sample after the last "
                          "request")
        self.assertEqual((h["sample_ms"], h["samples"]), (1000, 300))
        n = len(h["t_ms"])
        self.assertGreaterEqual(n, 1)
        for field in HISTORY - {"sample_ms", "samples"}:
            self.assertEqual(len(h[field]), n, field)
        self.assertEqual(sum(h["failed"]), 1)  # the 404
        self.assertEqual(h["t_ms"], sorted(h["t_ms"]))
        self.assertEqual(h["slots"][-1], s.upstream()["slots"])
        # Two first tokens came, so some sample has their quantiles.
        self.assertTrue(any(p is not None for p in h["ttft_p99_ms"]))

    def test_the_last_requests_keep_the_newest_fifty(self):
        s = self.sluice("--model", st.MODEL_TINY)
        for i in range(RECENT_MAX + 5):
            self.assertEqual(s.get("/nothing-%d" % i).status, 404)
        doc = self.status(s)
        self.assertEqual(doc["listed"], RECENT_MAX + 5)
        self.assertEqual([x["path"] for x in doc["recent"]],
                         ["/nothing-%d" % i for i in
                          range(RECENT_MAX + 4, 4, -1)])

    def test_the_page_and_its_document_need_the_admin_key(self):
        s = self.sluice("--model", st.MODEL_TINY, "--admin-key", ADMIN,
                        *self.keys_config())
        for path in ("/status", "/status.json"):
            # As /metrics: 401 without a key, 403 with a client's.
            r = s.get(path)
            self.assertEqual(r.status, 401)
            self.assertEqual(r.header("WWW-Authenticate"),
                             'Basic realm="sluice", charset="UTF-8"')
            self.assertEqual(s.get("/metrics").status, 401)
            self.assertEqual(s.get(path, headers=bearer("sk-alice")).status,
                             403)
            self.assertEqual(s.get("/metrics",
                                   headers=bearer("sk-alice")).status, 403)
            self.assertEqual(s.get(path, headers=basic("sk-alice")).status,
                             403)
            self.assertEqual(s.get(path, headers=basic("wrong")).status,
                             401)
            self.assertEqual(s.get(path, headers=basic(ADMIN)).status, 200)
            self.assertEqual(s.get(path, headers=basic(ADMIN, "")).status,
                             200)
            self.assertEqual(s.get(path, headers=bearer(ADMIN)).status, 200)
        # Basic credentials open the status page only: elsewhere they are
        # no key.
        self.assertEqual(s.get("/metrics", headers=basic(ADMIN)).status, 401)

    def test_the_page_is_served_whole_with_its_policy(self):
        s = self.sluice("--model", st.MODEL_TINY)
        r = s.get("/status")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Content-Type"), "text/html; charset=utf-8")
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "src", "ops", "status.html"),
                  "rb") as f:
            self.assertEqual(r.body, f.read())
        csp = r.header("Content-Security-Policy")
        self.assertRegex(csp, r"^default-src 'none'; script-src "
                         r"'sha256-[A-Za-z0-9+/]{43}='; style-src "
                         r"'sha256-[A-Za-z0-9+/]{43}='; connect-src 'self';")
        # Nothing it could load from elsewhere.
        self.assertNotRegex(r.body, rb"(src|href)=|https?://(?!www\.w3\.org)")


class Page(StatusCase):
    """The page in headless Chromium, as a person opens it."""

    def setUp(self):
        super().setUp()
        browser = shutil.which("chromium")
        self.assertTrue(browser, "needs chromium (deploy/setup.sh --tests "
                        "installs it)")
        self.browser = st.DevTools(browser,
                                   os.path.join(self.tmp, "profile"))
        self.addCleanup(self.browser.close)

    def page(self, what):
        """Runs a page expression (JSON-able result)."""
        return self.browser.eval(what)

    def figure(self, selector):
        return self.page("(() => { const e = document.querySelector(%r); "
                         "return e ? e.textContent : null; })()" % selector)

    def updates(self):
        return self.page("Number((document.body || {dataset: {}})"
                         ".dataset.updates || 0)")

    def wait_fresh(self):
        """Waits until the page has rendered a document asked for after
        this call (two updates on: one may have been on its way)."""
        start = self.updates()
        st.wait_until(lambda: self.updates() >= start + 2, SAFETY_NET_S,
                      "the page to update twice")

    def test_the_page_shows_what_health_and_metrics_say(self):
        # One slot held by a stream, two requests queued behind it: a
        # moment that stays put while the page and the test look at it.
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1",
                        "--admin-key", ADMIN, *self.keys_config())
        self.assertEqual(s.post("/v1/chat/completions", chat(),
                                headers=bearer("sk-bob"),
                                timeout=SAFETY_NET_S).status, 200)
        s.wait_line(r"path=/v1/chat/completions status=200")
        holder = hold(s, bearer("sk-alice"))
        self.addCleanup(holder.close)
        answers = {}
        waiting = [send_queued(s, rid, bearer("sk-bob"), answers)
                   for rid in ("q1", "q2")]

        self.browser.open("http://127.0.0.1:%d/status" % s.port,
                          headers=basic(ADMIN))
        st.wait_until(lambda: self.updates() >= 1, SAFETY_NET_S,
                      "the page's first update")
        # Its own style applied and its own script ran: the policy lets
        # both through, by their hashes.
        self.assertEqual(self.page("getComputedStyle(document.querySelector"
                                   "('header')).display"), "flex")
        health = s.health().json()
        text = s.get("/metrics", headers=bearer(ADMIN)).body.decode()
        summary = s.get("/metrics?format=json",
                        headers=bearer(ADMIN)).json()
        self.wait_fresh()

        up = health["upstreams"][0]
        model = health["default_model"]
        self.assertEqual((health["queued"], health["inflight"]), (2, 1))
        self.assertEqual(self.figure("#queued"), str(health["queued"]))
        self.assertEqual(self.figure("#inflight"), str(health["inflight"]))
        self.assertEqual(self.figure("#slots-busy"),
                         "%d" % metric(text, "sluice_inflight"))
        self.assertEqual(self.figure("#slots-total"), str(up["slots"]))
        self.assertEqual(self.figure("#served"), str(summary["requests"]))
        self.assertEqual(self.figure("#version"), health["version"])
        row = 'tr[data-model="%s"] ' % model
        for c in ("urgent", "normal", "batch"):
            self.assertEqual(
                self.figure(row + ".q-" + c),
                "%d" % metric(text, "sluice_queue_depth", priority=c,
                              model=model))
        self.assertEqual(self.figure(row + ".state"), "ready")
        row = 'tr[data-upstream="%s"] ' % up["name"]
        labels = {"upstream": up["name"], "model": model}
        self.assertEqual(self.figure(row + ".busy"), str(up["inflight"]))
        self.assertEqual(self.figure(row + ".total"),
                         "%d" % metric(text, "sluice_upstream_slots",
                                       **labels))
        self.assertEqual(self.figure(row + ".restarts"),
                         "%d" % metric(text, "sluice_upstream_restarts_total",
                                       **labels))
        row = 'tr[data-tenant="bob"] '
        self.assertEqual(self.figure(row + ".requests"),
                         "%d" % metric(text, "sluice_key_requests_total",
                                       key="bob", model=model))
        # The last requests: as the access log has them, newest first.
        logged = re.findall(r" access .*path=(/v1/chat/completions|"
                            r"/completion) status=(\d+)", s.output())
        self.assertEqual(
            self.page("[...document.querySelectorAll('#recent tbody tr')]"
                      ".map(r => r.querySelector('.status').textContent)"),
            [status for _, status in reversed(logged)])

        # Live: once the slot is let go, the queued requests appear
        # without a reload, and the queue empties.
        listed = int(self.page("document.body.dataset.listed"))
        holder.close()
        for t in waiting:
            t.join(SAFETY_NET_S)
        self.assertEqual([answers[r].status for r in ("q1", "q2")],
                         [200, 200])
        st.wait_until(lambda: self.figure("#queued") == "0" and
                      int(self.page("document.body.dataset.listed")) ==
                      listed + 3, SAFETY_NET_S, "the page to show the end")
        rows = self.page(
            "[...document.querySelectorAll('#recent tbody tr')].slice(0, 3)"
            ".map(r => [r.querySelector('.key').textContent, "
            "r.querySelector('.outcome').dataset.outcome])")
        # The holder left (cancelled), and bob's two were served.
        self.assertEqual(sorted(rows), [["alice", "cancelled"],
                                        ["bob", "ok"], ["bob", "ok"]])


if __name__ == "__main__":
    st.main()

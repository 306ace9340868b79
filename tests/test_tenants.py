"""Tenants (issue 14): API keys from the configuration file's keys:, each
with its own models, priority ceiling, rate limits and concurrency, against
a real llama-server on the demo models."""

import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import threading
import time

import promcheck
import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240

ADMIN = "admin-secret"


def digest(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def keys_yaml(keys):
    """keys: {name: {"secret": ..., field: value}} as a keys: section."""
    lines = ["keys:"]
    for name, fields in keys.items():
        lines.append("  %s:" % name)
        lines.append("    hash: %s" % digest(fields["secret"]))
        for k, v in fields.items():
            if k == "secret":
                continue
            if isinstance(v, list):
                v = "[%s]" % ", ".join(v)
            lines.append("    %s: %s" % (k, v))
    return "\n".join(lines) + "\n"


def bearer(secret):
    return {"Authorization": "Bearer " + secret}


def chat(n=8, **extra):
    return dict({"messages": [{"role": "user", "content": "hi"}],
                 "max_tokens": n, "temperature": 0}, **extra)


def completion(prompt, n=20, stream=False):
    return {"prompt": prompt, "n_predict": n, "temperature": 0,
            "stream": stream}


def hold(s, headers):
    """A long stream through sluice s, once its first token came: it holds
    a slot until closed."""
    holder = st.RawClient(s.port, timeout=SAFETY_NET_S)
    holder.request("POST", "/completion",
                   completion("hold", n=4000, stream=True), headers=headers)
    status, _ = holder.read_head()
    assert status == 200, status
    next(holder.chunks())
    return holder


def send_queued(s, rid, headers, answers):
    """Sends a short /completion for rid from a thread of its own, and
    returns the thread once sluice s has queued it; the response lands in
    answers[rid]."""
    queued = s.health().json()["queued"]

    def send():
        answers[rid] = s.post("/completion", completion(rid, n=4),
                              headers=headers, timeout=SAFETY_NET_S)
    t = threading.Thread(target=send)
    t.start()
    st.wait_until(lambda: s.health().json()["queued"] == queued + 1,
                  SAFETY_NET_S, "%s queued" % rid)
    return t


def usage_of(r):
    """(prompt, completion) tokens of an OpenAI answer."""
    u = r.json()["usage"]
    return u["prompt_tokens"], u["completion_tokens"]


def metric(text, name, **labels):
    samples = promcheck.check(text)
    key = (name, tuple(sorted(labels.items())))
    return samples.get(key)


# OpenAI's reset durations: "6s", "1m0s", "250ms".
RESET = re.compile(r"^(\d+ms|(\d+h)?(\d+m)?\d+s)$")


class Tenants(st.TestCase):
    """sluice in front of one shared 4-slot llama-server on the tiny model,
    a configuration file per test."""

    @classmethod
    def setUpClass(cls):
        cls.ls = st.LlamaServer(st.MODEL_TINY, slots=4, ctx=1024)

    @classmethod
    def tearDownClass(cls):
        cls.ls.kill()

    def start(self, keys, *args):
        self.config = os.path.join(self.tmp, "sluice.yaml")
        with open(self.config, "w") as f:
            f.write(keys_yaml(keys))
        return self.sluice("--config", self.config, "--upstream",
                           self.ls.url, "--admin-key", ADMIN, *args)

    def usage(self, s):
        r = s.get("/v1/usage", headers=bearer(ADMIN))
        self.assertEqual(r.status, 200)
        return r.json()["keys"]

    def test_hash_key_prints_the_line_to_paste(self):
        out = subprocess.run([st.SLUICE, "--hash-key"], input=b"test\n",
                             capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.decode(), "hash: %s\n" % digest("test"))
        self.assertEqual(digest("test"), "sha256:9f86d081884c7d659a2feaa0c55"
                         "ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")

    def test_ten_a_minute_gets_exactly_ten_in_a_burst(self):
        s = self.start({"ten": {"secret": "sk-ten", "rpm": 10}})
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(15) as pool:
            answers = list(pool.map(
                lambda i: s.post("/v1/chat/completions", chat(n=1),
                                 headers=bearer("sk-ten"),
                                 timeout=SAFETY_NET_S), range(15)))
        elapsed = time.monotonic() - t0
        ok = [r for r in answers if r.status == 200]
        refused = [r for r in answers if r.status == 429]
        self.assertEqual(len(ok) + len(refused), 15)
        # The bucket refills one request every 6 s: a burst shorter than
        # that gets exactly 10 through; a slower one (a busy machine) may
        # get one more per 6 s it took, never fewer.
        self.assertLessEqual(len(ok), 10 + int(elapsed / 6))
        self.assertGreaterEqual(len(ok), 10)
        if elapsed < 6:
            self.assertEqual(len(ok), 10)
        # Each answer says what is left: the ten say 9 down to 0 (and one
        # let in by a refill, 0 again).
        left = sorted(int(r.header("x-ratelimit-remaining-requests"))
                      for r in ok)
        self.assertEqual(left[-10:] if len(ok) == 10 else sorted(set(left)),
                         list(range(10)))
        for r in answers:
            self.assertEqual(r.header("x-ratelimit-limit-requests"), "10")
            self.assertRegex(r.header("x-ratelimit-reset-requests"), RESET)
            # A key without tpm has no token headers.
            self.assertIsNone(r.header("x-ratelimit-limit-tokens"))
        for r in refused:
            self.assertEqual(r.header("x-ratelimit-remaining-requests"), "0")
            retry = int(r.header("Retry-After"))
            self.assertGreaterEqual(retry, 1)
            self.assertLessEqual(retry, 6)
            self.assertLessEqual(int(r.header("retry-after-ms")), 6000)
            err = r.json()["error"]
            self.assertEqual(err["type"], "requests")
            self.assertEqual(err["code"], "rate_limit_exceeded")
            self.assertIsNone(err["param"])
            self.assertRegex(err["message"],
                             r"^Rate limit reached for key ten on requests "
                             r"per min \(RPM\): Limit 10\. Please try again "
                             r"in \d\.\ds\.$")
        # The refused never reached llama-server; the rest are counted.
        self.assertEqual(self.usage(s)["ten"]["requests"], len(ok))

    def test_tokens_per_minute_stop_once_usage_crosses(self):
        tpm = 300
        s = self.start({"tok": {"secret": "sk-tok", "tpm": tpm}})
        t0 = time.monotonic()
        used = []  # tokens of each answered request, from its usage
        refused = None
        for _ in range(40):
            r = s.post("/v1/chat/completions", chat(n=8),
                       headers=bearer("sk-tok"), timeout=SAFETY_NET_S)
            if r.status == 429:
                refused = r
                break
            self.assertEqual(r.status, 200, r.body)
            self.assertEqual(r.header("x-ratelimit-limit-tokens"), str(tpm))
            used.append(usage_of(r))
        elapsed = time.monotonic() - t0
        self.assertIsNotNone(refused, "never stopped: %r" % used)
        prompt = sum(p for p, _ in used)
        generated = sum(c for _, c in used)
        before_last = sum(p + c for p, c in used[:-1])
        err = refused.json()["error"]
        self.assertEqual(err["type"], "tokens")
        self.assertEqual(err["code"], "rate_limit_exceeded")
        # Each request reserves its max_tokens and a quarter of its body's
        # bytes (issue 28); one is refused once what is left is less.
        asked = int(re.search(r" Requested (\d+)\.", err["message"])[1])
        self.assertGreaterEqual(asked, 8 + len(json.dumps(chat(n=8))) // 4)
        left = int(refused.header("x-ratelimit-remaining-tokens"))
        self.assertLess(left, asked)
        # Refused: what was used leaves less than that (it refills tpm/60
        # a second, so the request before was let in while under it plus
        # that refill).
        self.assertGreater(prompt + generated, tpm - asked)
        self.assertLess(before_last, tpm + tpm * elapsed / 60)
        self.assertGreaterEqual(len(used), 2)
        self.assertRegex(refused.header("x-ratelimit-reset-tokens"), RESET)
        self.assertGreaterEqual(int(refused.header("Retry-After")), 1)
        # The same figures in /v1/usage and /metrics.
        mine = self.usage(s)["tok"]
        self.assertEqual(mine["requests"], len(used))
        self.assertEqual(mine["completion_tokens"], generated)
        self.assertEqual(mine["prompt_tokens"], prompt)
        text = s.get("/metrics", headers=bearer(ADMIN)).body.decode()
        self.assertEqual(metric(text, "sluice_key_requests_total",
                                key="tok", model="default"), len(used))
        self.assertEqual(metric(text, "sluice_key_prompt_tokens_total",
                                key="tok", model="default"), prompt)
        self.assertEqual(metric(text, "sluice_key_completion_tokens_total",
                                key="tok", model="default"), generated)

    def test_wrong_missing_and_revoked_keys_get_401(self):
        s = self.start({"a": {"secret": "sk-a"}, "b": {"secret": "sk-b"}})
        for headers in ({}, bearer("sk-c"), bearer("sk-aa"), bearer("sk-"),
                        {"Authorization": "Bearer " + digest("sk-a")}):
            r = s.post("/v1/chat/completions", chat(n=1), headers=headers)
            self.assertEqual(r.status, 401, headers)
            self.assertEqual(r.json()["error"],
                             {"message": "Invalid API Key",
                              "type": "authentication_error", "code": 401})
        for key in ("sk-a", "sk-b"):
            r = s.post("/v1/chat/completions", chat(n=1),
                       headers=bearer(key))
            self.assertEqual(r.status, 200, key)
        # X-Api-Key works as for --api-key.
        r = s.post("/v1/chat/completions", chat(n=1),
                   headers={"X-Api-Key": "sk-b"})
        self.assertEqual(r.status, 200)
        # The access log names the key, never the secret.
        s.wait_line(r" access .* status=200 .* outcome=ok reason=- key=b$")
        self.assertNotIn("sk-b", s.output())

        # b revoked, a's secret changed: both old secrets are refused.
        with open(self.config, "w") as f:
            f.write(keys_yaml({"a": {"secret": "sk-a2"},
                               "c": {"secret": "sk-c"}}))
        s.reload(r"keys reloaded: 2 keys; added: c; changed: a; "
                 r"removed: b$")
        for key, status in (("sk-a", 401), ("sk-b", 401), ("sk-a2", 200),
                            ("sk-c", 200)):
            r = s.post("/v1/chat/completions", chat(n=1),
                       headers=bearer(key))
            self.assertEqual(r.status, status, key)
        usage = self.usage(s)
        self.assertTrue(usage["b"]["revoked"])
        self.assertEqual(usage["b"]["requests"], 2)  # kept since start
        self.assertFalse(usage["a"]["revoked"])

        # A broken file keeps the keys as they were.
        with open(self.config, "w") as f:
            f.write("keys:\n  a:\n    rpm: 5\n")
        m = s.reload(r"error SIGHUP: keys not reloaded, the old ones "
                     r"stay: (.*)$")
        self.assertEqual(m.group(1), "%s:3: keys.a: no hash: (sluice "
                         "--hash-key reads the secret and prints the line)"
                         % self.config)
        r = s.post("/v1/chat/completions", chat(n=1), headers=bearer("sk-c"))
        self.assertEqual(r.status, 200)
        self.assertEqual(s.stop(), 0)

    def test_models_off_the_list_look_unknown_and_usage_is_admin_only(self):
        # Two models on the one llama-server: "narrow" may use tiny, by its
        # name or its alias, and nothing else; "wide" may use both.
        self.config = os.path.join(self.tmp, "sluice.yaml")
        with open(self.config, "w") as f:
            f.write(keys_yaml({"narrow": {"secret": "sk-n",
                                          "models": ["tiny"]},
                               "wide": {"secret": "sk-w"}}))
            f.write("models:\n"
                    "  tiny:\n    upstreams: [%s]\n    aliases: [small]\n"
                    "  other:\n    upstreams: [%s]\n"
                    % (self.ls.url, self.ls.url))
        s = self.sluice("--config", self.config, "--admin-key", ADMIN)
        # Ready is one model's upstream ready: these requests need both.
        s.wait_all_upstreams_ready()
        for model in ("other", "secret-model"):
            r = s.post("/v1/chat/completions", chat(n=1, model=model),
                       headers=bearer("sk-n"))
            self.assertEqual(r.status, 404, model)
            # Word for word what a model that does not exist gets.
            self.assertEqual(r.json(), {"error": {
                "message": "The model `%s` does not exist." % model,
                "type": "invalid_request_error", "param": "model",
                "code": "model_not_found"}})
        for key, model in (("sk-n", "tiny"), ("sk-n", "small"),
                           ("sk-w", "other")):
            r = s.post("/v1/chat/completions", chat(n=1, model=model),
                       headers=bearer(key))
            self.assertEqual(r.status, 200, (key, model))
        # Without a model field: the default model, tiny, allowed.
        r = s.post("/v1/chat/completions", chat(n=1), headers=bearer("sk-n"))
        self.assertEqual(r.status, 200)
        # /v1/models lists a key's own models only.
        listed = {key: [m["id"] for m in s.get(
            "/v1/models", headers=bearer(key)).json()["data"]]
            for key in ("sk-n", "sk-w")}
        self.assertEqual(listed, {"sk-n": ["tiny"],
                                  "sk-w": ["tiny", "other"]})
        # Usage counts under the model's own name, whatever it was called.
        usage = self.usage(s)
        self.assertEqual(set(usage["narrow"]["models"]), {"tiny"})
        self.assertEqual(usage["narrow"]["models"]["tiny"]["requests"], 3)
        self.assertEqual(set(usage["wide"]["models"]), {"other"})
        self.assertEqual(usage["wide"]["models"]["other"]["requests"], 1)
        # A tenant's key is not the admin key.
        r = s.get("/v1/usage", headers=bearer("sk-w"))
        self.assertEqual(r.status, 403)
        r = s.get("/v1/usage")
        self.assertEqual(r.status, 401)


    def test_without_models_section_a_list_names_the_model_that_serves(self):
        # One model, named "tiny" here, takes any name in a request, as
        # llama-server does: a key listing it may send any name; a key
        # listing only names that are not served can use nothing, and
        # sluice says so at start.
        s = self.start({"mine": {"secret": "sk-m", "models": ["tiny"]},
                        "typo": {"secret": "sk-t", "models": ["tiyn"]}},
                       "--model-name", "tiny")
        s.wait_line(r"keys\.typo: models: tiyn: sluice serves one model, "
                    r"tiny \(--model-name\), which takes any name")
        self.assertEqual(s.count_lines(r"keys\.mine: "), 0)
        for model in ("tiny", "gpt-4o", None):
            extra = {"model": model} if model else {}
            r = s.post("/v1/chat/completions", chat(n=1, **extra),
                       headers=bearer("sk-m"))
            self.assertEqual(r.status, 200, model)
            self.assertEqual(s.post("/v1/chat/completions",
                                    chat(n=1, **extra),
                                    headers=bearer("sk-t")).status,
                             404, model)
        # Named as the key listed it: still not the model that serves.
        r = s.post("/v1/chat/completions", chat(n=1, model="tiyn"),
                   headers=bearer("sk-t"))
        self.assertEqual(r.json()["error"]["message"],
                         "The model `tiyn` does not exist.")
        # Usage counts under the serving model's name, whatever was asked.
        self.assertEqual(self.usage(s)["mine"]["models"]["tiny"]["requests"],
                         3)

    def test_with_models_section_a_list_names_models_or_aliases(self):
        self.config = os.path.join(self.tmp, "sluice.yaml")
        with open(self.config, "w") as f:
            f.write(keys_yaml({"one": {"secret": "sk-1",
                                       "models": ["small", "nope"]}}))
            f.write("models:\n"
                    "  tiny:\n    upstreams: [%s]\n    aliases: [small]\n"
                    "  other:\n    upstreams: [%s]\n"
                    % (self.ls.url, self.ls.url))
        s = self.sluice("--config", self.config)
        s.wait_all_upstreams_ready()
        s.wait_line(r"keys\.one: models: nope: no such model or alias")
        # Listed by its alias, tiny is the key's under either name, and as
        # the default; other is not, whatever it is called.
        for model, status in (("tiny", 200), ("small", 200), (None, 200),
                              ("other", 404), ("nope", 404)):
            extra = {"model": model} if model else {}
            r = s.post("/v1/chat/completions", chat(n=1, **extra),
                       headers=bearer("sk-1"))
            self.assertEqual(r.status, status, model)

    def test_embeddings_and_rerank_charge_their_prompt_tokens(self):
        # Their answers carry a usage ahead of the vectors or results: the
        # prompt tokens in it are the tenant's, in /v1/usage and against
        # its tokens per minute, however long the answer runs.
        ls = self.llama_server(st.MODEL_TINY, slots=2, ctx=1024,
                               extra=("--embeddings", "--reranking"))
        # Room, after the first two, for the third's reservation (a
        # quarter of its kilobyte of body): it is admitted, and its 950 or
        # so prompt tokens take the key past its minute.
        tpm = 400
        self.config = os.path.join(self.tmp, "sluice.yaml")
        with open(self.config, "w") as f:
            f.write(keys_yaml({"emb": {"secret": "sk-e", "tpm": tpm},
                               "free": {"secret": "sk-f"}}))
        s = self.sluice("--config", self.config, "--upstream", ls.url,
                        "--admin-key", ADMIN)
        many = ["text number %d of many" % i for i in range(40)]
        asked = [("/v1/embeddings", {"input": "hello there"}),
                 ("/v1/rerank", {"query": "a b", "documents": ["c", "d e"]}),
                 ("/v1/embeddings", {"input": many})]
        used = []
        for path, body in asked:
            r = s.post(path, body, headers=bearer("sk-e"))
            self.assertEqual(r.status, 200, (path, r.body[:300]))
            used.append(r.json()["usage"]["prompt_tokens"])
        # The last answer runs past the first bytes kept: its usage leads.
        self.assertGreater(len(r.body), 4096)
        self.assertLess(sum(used[:-1]), tpm)
        self.assertGreater(sum(used), tpm)
        # Past its tokens per minute, the key's next request is refused.
        r = s.post("/v1/embeddings", {"input": "one more"},
                   headers=bearer("sk-e"))
        self.assertEqual(r.status, 429, r.body[:300])
        self.assertEqual(r.json()["error"]["type"], "tokens")
        mine = self.usage(s)["emb"]
        self.assertEqual(mine["requests"], len(asked))
        self.assertEqual(mine["prompt_tokens"], sum(used))
        self.assertEqual(mine["completion_tokens"], 0)
        # The native /embedding answer has no usage: a request, no tokens.
        r = s.post("/embedding", {"content": "hi"}, headers=bearer("sk-f"))
        self.assertEqual(r.status, 200, r.body[:300])
        self.assertNotIn(b"usage", r.body)
        free = self.usage(s)["free"]
        self.assertEqual((free["requests"], free["prompt_tokens"]), (1, 0))

    def charged(self, s, secret, name, path, body):
        """The answer to one request of key `name`, and the (prompt,
        completion) tokens /v1/usage counted for it."""
        before = self.usage(s)[name]
        r = s.post(path, body, headers=bearer(secret), timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200, (path, r.body[:300]))
        st.wait_until(
            lambda: self.usage(s)[name]["requests"] == before["requests"] + 1,
            SAFETY_NET_S, "the request to be counted")
        after = self.usage(s)[name]
        return r, (after["prompt_tokens"] - before["prompt_tokens"],
                   after["completion_tokens"] - before["completion_tokens"])

    def test_every_output_of_a_prompt_array_or_n_is_charged(self):
        # Issue 41: several prompts, or n outputs of one, are generated
        # as requests of their own would be, and /v1/usage counts every
        # output (the demo model never stops early: each runs to the
        # bound, which the answers show). A prompt, evaluated once for its
        # n outputs, counts once.
        s = self.start({"many": {"secret": "sk-m", "tpm": 1000000}})
        k = 6
        prompts = ["alpha", "beta gamma", [5, 6, 7]]

        def charged(path, body):
            return self.charged(s, "sk-m", "many", path, body)

        # Native, plain: an array of results, each with its counts.
        r, got = charged("/completion", completion(prompts, n=k))
        results = r.json()
        self.assertEqual(len(results), 3)
        self.assertEqual([e["tokens_predicted"] for e in results], [k] * 3)
        self.assertEqual(got, (sum(e["tokens_evaluated"] for e in results),
                               3 * k))
        # OpenAI, plain: one usage, the first choice's, for all three.
        same = ["the same words"] * 3
        r, got = charged("/v1/completions",
                         {"prompt": same, "max_tokens": k, "temperature": 0})
        answer = r.json()
        self.assertEqual([c["finish_reason"] for c in answer["choices"]],
                         ["length"] * 3)
        self.assertEqual(answer["usage"]["completion_tokens"], k)
        self.assertEqual(got, (3 * answer["usage"]["prompt_tokens"], 3 * k))
        # Chat, plain, n = 3: three choices, one usage.
        r, got = charged("/v1/chat/completions", dict(chat(n=k), n=3))
        answer = r.json()
        self.assertEqual([c["finish_reason"] for c in answer["choices"]],
                         ["length"] * 3)
        chat_prompt = answer["usage"]["prompt_tokens"]
        self.assertEqual(got, (chat_prompt, 3 * k))
        # The Responses API, plain, n = 2: an array of responses.
        r, got = charged("/v1/responses",
                         {"input": "hi", "max_output_tokens": k, "n": 2,
                          "temperature": 0})
        answers = r.json()
        self.assertEqual([a["usage"]["output_tokens"] for a in answers],
                         [k, k])
        self.assertEqual(got, (answers[0]["usage"]["input_tokens"], 2 * k))

        # Streams: each output ends with its own counts.
        r, got = charged("/completion",
                         dict(completion(prompts[:2], n=k, stream=True), n=2))
        finals = [e for e in sse_objects(r.body) if e.get("stop") is True]
        self.assertEqual(sorted(e["index"] for e in finals), [0, 1, 2, 3])
        self.assertEqual([e["tokens_predicted"] for e in finals], [k] * 4)
        self.assertEqual(got, (sum(e["tokens_evaluated"] for e in finals) // 2,
                               4 * k))
        two_each = {"prompt": prompts[1:], "max_tokens": k, "n": 2,
                    "temperature": 0}
        r, got = charged("/v1/completions", dict(two_each, stream=True))
        usages = [e["usage"] for e in sse_objects(r.body) if e.get("usage")]
        self.assertEqual([u["completion_tokens"] for u in usages], [k] * 4)
        streamed = (sum(u["prompt_tokens"] for u in usages) // 2, 4 * k)
        self.assertEqual(got, streamed)
        # Chat, n = 3, without usage: every choice's pieces, one a token.
        r, got = charged("/v1/chat/completions",
                         dict(chat(n=k), n=3, stream=True))
        pieces = [c["index"] for e in sse_objects(r.body)
                  for c in e["choices"] if c["delta"].get("content")]
        self.assertEqual(sorted(pieces), sorted([0, 1, 2] * k))
        self.assertEqual(got, (chat_prompt, 3 * k))

        # A plain answer asked for as a stream (--stream-upstream on) is
        # counted from its outputs' own usages, as the stream was.
        s.stop()
        s = self.start({"many": {"secret": "sk-m", "tpm": 1000000}},
                       "--stream-upstream", "on")
        r, got = charged("/v1/completions", two_each)
        self.assertEqual(len(r.json()["choices"]), 4)
        self.assertEqual(got, streamed)

    def test_the_reservation_covers_every_output(self):
        # Issue 41: a request reserves its bound for each of its outputs,
        # so a burst of prompt arrays cannot pass the key's minute, and
        # one whose outputs alone are past it is refused for good.
        tpm, k = 500, 100
        s = self.start({"tok": {"secret": "sk-tok", "tpm": tpm}})
        h = bearer("sk-tok")
        r = s.post("/v1/completions",
                   {"prompt": ["p%d" % i for i in range(6)], "max_tokens": k},
                   headers=h)
        self.assertEqual(r.status, 429, r.body[:300])
        self.assertIsNone(r.header("Retry-After"))
        self.assertEqual(r.json()["error"]["message"],
                         "Request too large for key tok on tokens per min "
                         "(TPM): Limit 500, Requested 600 (6 outputs of 100)"
                         ". Ask for fewer tokens (max_tokens) or outputs (n, "
                         "prompts).")
        r = s.post("/v1/chat/completions", dict(chat(n=200), n=3), headers=h)
        self.assertEqual(r.status, 429, r.body[:300])
        self.assertIn("Requested 600 (3 outputs of 200).",
                      r.json()["error"]["message"])
        # Two prompts of 100 each: two such fit in the minute, not three.
        body = completion(["x", "y"], n=k, stream=True)
        reserve = 2 * k + len(json.dumps(body)) // 4
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(
                lambda i: s.post("/completion", body, headers=h,
                                 timeout=SAFETY_NET_S), range(8)))
        elapsed = time.monotonic() - t0
        ok = [r for r in answers if r.status == 200]
        refused = [r for r in answers if r.status == 429]
        self.assertEqual(len(ok) + len(refused), 8)
        self.assertGreaterEqual(len(ok), tpm // reserve)
        for r in ok:
            finals = [e for e in sse_objects(r.body) if e.get("stop") is True]
            self.assertEqual([e["tokens_predicted"] for e in finals], [k, k])
        for r in refused:
            self.assertIn("Requested %d." % reserve,
                          r.json()["error"]["message"])
        st.wait_until(lambda: self.usage(s)["tok"]["in_flight"] == 0,
                      SAFETY_NET_S, "the requests to end")
        mine = self.usage(s)["tok"]
        self.assertEqual(mine["completion_tokens"], 2 * k * len(ok))
        total = mine["prompt_tokens"] + mine["completion_tokens"]
        self.assertLessEqual(total, tpm + tpm * elapsed / 60)

    def test_api_keys_keep_working_and_every_queued_answer_says_its_priority(
            self):
        s = self.start({"batchy": {"secret": "sk-b", "max-priority": "batch",
                                   "rpm": 2}},
                       "--api-key", "plain-key")
        for key, asked, got in (("plain-key", "7.5", "7.5"),
                                ("plain-key", None, "normal"),
                                ("sk-b", "7.5", "batch"),
                                ("sk-b", "batch", "batch")):
            headers = bearer(key)
            if asked:
                headers["X-Priority"] = asked
            r = s.post("/completion", completion("p", n=1), headers=headers)
            self.assertEqual(r.status, 200, (key, asked))
            self.assertEqual(r.header("X-Priority"), got, (key, asked))
            # Only a key with limits has rate-limit headers.
            self.assertEqual(r.header("x-ratelimit-limit-requests"),
                             "2" if key == "sk-b" else None)
        # An endpoint that takes no slot is not queued: no priority, and
        # it passes with the bucket empty (one refills every 30 s).
        r = s.post("/tokenize", {"content": "hi"}, headers=bearer("sk-b"))
        self.assertEqual(r.status, 200)
        self.assertIsNone(r.header("X-Priority"))
        self.assertEqual(r.header("x-ratelimit-remaining-requests"), "0")



def sse_objects(body):
    """The JSON objects of an SSE body's data lines, in order ([DONE] and
    a prompt array's "null" events left out)."""
    found = []
    for line in body.decode().split("\n"):
        if line.startswith("data: {"):
            found.append(json.loads(line[6:]))
    return found


def stream_usage(body):
    """(prompt, completion) tokens of a streamed OpenAI answer: its last
    event with a usage."""
    found = None
    for line in body.decode().split("\n"):
        if line.startswith("data: {"):
            u = json.loads(line[6:]).get("usage")
            if u:
                found = (u["prompt_tokens"], u["completion_tokens"])
    return found


class TokensReserved(st.TestCase):
    """Issue 28: a key's tpm is checked when a request is admitted, against
    its max_tokens and its prompt's estimate, so that requests at once
    cannot pass it together; each gives back what it did not use when it
    ends, unless llama-server goes on with it."""

    def start(self, upstream, keys):
        self.config = os.path.join(self.tmp, "sluice.yaml")
        with open(self.config, "w") as f:
            f.write(keys_yaml(keys))
        return self.sluice("--config", self.config, "--upstream", upstream,
                           "--admin-key", ADMIN)

    def usage(self, s):
        r = s.get("/v1/usage", headers=bearer(ADMIN))
        self.assertEqual(r.status, 200)
        return r.json()["keys"]

    def remaining(self, s, key):
        """The key's tokens left, from a request that takes none."""
        r = s.post("/tokenize", {"content": "x"}, headers=bearer(key))
        self.assertEqual(r.status, 200)
        return int(r.header("x-ratelimit-remaining-tokens"))

    def test_forty_streams_at_once_stay_within_the_minute(self):
        tpm, n = 500, 100
        ls = self.llama_server(st.MODEL_TINY, slots=4, ctx=1024)
        s = self.start(ls.url, {"tok": {"secret": "sk-tok", "tpm": tpm}})
        body = {"prompt": "hi", "max_tokens": n, "temperature": 0,
                "stream": True}
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(40) as pool:
            answers = list(pool.map(
                lambda i: s.post("/v1/completions", body,
                                 headers=bearer("sk-tok"),
                                 timeout=SAFETY_NET_S), range(40)))
        elapsed = time.monotonic() - t0
        ok = [r for r in answers if r.status == 200]
        refused = [r for r in answers if r.status == 429]
        self.assertEqual(len(ok) + len(refused), 40)
        # What they used, as the upstream counted it, is within the
        # minute and what it refilled while they ran.
        used = [stream_usage(r.body) for r in ok]
        mine = self.usage(s)["tok"]
        self.assertEqual(mine["requests"], len(ok))
        self.assertEqual(mine["prompt_tokens"], sum(p for p, _ in used))
        self.assertEqual(mine["completion_tokens"], n * len(ok))
        total = mine["prompt_tokens"] + mine["completion_tokens"]
        self.assertLessEqual(total, tpm + tpm * elapsed / 60)
        # Each reserved its 100 and a quarter of its body's bytes: four
        # fit in a full bucket, and each was let generate them all.
        reserve = n + len(json.dumps(body)) // 4
        self.assertGreaterEqual(len(ok), tpm // reserve)
        self.assertEqual([c for _, c in used], [n] * len(ok))
        for r in refused:
            self.assertGreaterEqual(int(r.header("Retry-After")), 1)
            err = r.json()["error"]
            self.assertEqual((err["type"], err["code"]),
                             ("tokens", "rate_limit_exceeded"))
            self.assertRegex(err["message"],
                             r"^Rate limit reached for key tok on tokens "
                             r"per min \(TPM\): Limit 500, Used \d+, "
                             r"Requested %d\. Please try again in \d+\.\ds\.$"
                             % reserve)
        # Ended, each gave back what its prompt's estimate was over.
        left = self.remaining(s, "sk-tok")
        self.assertGreaterEqual(left, tpm - total)
        self.assertLessEqual(
            left, tpm - total + tpm * (time.monotonic() - t0) / 60 + 1)
        # More than the whole minute can never pass: no Retry-After.
        r = s.post("/v1/completions", dict(body, max_tokens=tpm + 1),
                   headers=bearer("sk-tok"))
        self.assertEqual(r.status, 429)
        self.assertIsNone(r.header("Retry-After"))
        self.assertEqual(r.json()["error"]["message"],
                         "Request too large for key tok on tokens per min "
                         "(TPM): Limit 500, Requested 501. Ask for fewer "
                         "tokens (max_tokens).")

    def test_a_client_leaving_gives_back_what_was_not_generated(self):
        # Generations long enough to be running still when the next
        # request comes, on any machine.
        tpm, n = 3000, 2000
        ls = self.llama_server(st.MODEL_SLOW, slots=2, ctx=8192)
        s = self.start(ls.url, {"tok": {"secret": "sk-tok", "tpm": tpm},
                                "plain": {"secret": "sk-plain", "tpm": tpm}})
        body = {"prompt": "go on", "max_tokens": n, "temperature": 0}
        plain_reserve = n + len(json.dumps(body)) // 4

        # First, before any stream ran on this upstream: a plain answer is
        # relayed as it comes. One whose client leaves is stopped
        # (test_proxy.py), but how far it got is never read: its
        # reservation stays taken, and the next one does not fit.
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        # Before the reservation: what refilled since is at most what
        # refills from now until the reading below.
        t_plain = time.monotonic()
        c.request("POST", "/v1/completions", body=body,
                  headers=dict(bearer("sk-plain"), **{"X-Request-Id": "b"}))
        st.wait_until(lambda: st.slot_busy(ls), SAFETY_NET_S,
                      "the generation to start")
        c.close()
        s.wait_line(r" access id=b ", timeout=SAFETY_NET_S)
        r = s.post("/v1/completions", body, headers=bearer("sk-plain"))
        self.assertEqual(r.status, 429, r.body)
        left = self.remaining(s, "sk-plain")
        refill = tpm * (time.monotonic() - t_plain) / 60
        self.assertLessEqual(left, tpm - plain_reserve + refill + 1)
        st.wait_until(lambda: s.health().json()["inflight"] == 0,
                      SAFETY_NET_S, "the left answer to be stopped")

        # A stream holds its reservation while it runs: a second as large
        # does not fit beside it.
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.request("POST", "/v1/completions", body=dict(body, stream=True),
                  headers=dict(bearer("sk-tok"), **{"X-Request-Id": "a"}))
        self.assertEqual(c.read_head()[0], 200)
        events = c.events()
        for _ in range(3):
            next(events)
        r = s.post("/v1/completions", body, headers=bearer("sk-tok"))
        self.assertEqual(r.status, 429, r.body)
        self.assertIn("Requested %d." % plain_reserve,
                      r.json()["error"]["message"])
        self.assertTrue(st.slot_busy(ls), "the stream ended too soon")
        # Its client leaves: llama-server stops, and what it did not
        # generate is given back.
        c.close()
        s.wait_line(r" access id=a .*status=200 ", timeout=SAFETY_NET_S)
        st.wait_until(lambda: not st.slot_busy(ls), SAFETY_NET_S,
                      "the slot to go idle")
        generated = self.usage(s)["tok"]["completion_tokens"]
        self.assertLess(generated, n)
        left = self.remaining(s, "sk-tok")
        self.assertGreaterEqual(left, tpm - generated)
        self.assertGreater(left, plain_reserve)

        # After a stream ran here, a plain answer is asked for as a stream
        # too: one whose client leaves gives back what it did not
        # generate, as a stream does, and the next one fits.
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.request("POST", "/v1/completions", body=body,
                  headers=dict(bearer("sk-tok"), **{"X-Request-Id": "c"}))
        st.wait_until(lambda: st.slot_busy(ls), SAFETY_NET_S,
                      "the generation to start")
        c.close()
        s.wait_line(r" access id=c ", timeout=SAFETY_NET_S)
        st.wait_until(lambda: s.health().json()["inflight"] == 0,
                      SAFETY_NET_S, "the left answer to be stopped")
        self.assertGreater(self.remaining(s, "sk-tok"), plain_reserve)
        r = s.post("/v1/completions", dict(body, max_tokens=4),
                   headers=bearer("sk-tok"))
        self.assertEqual(r.status, 200, r.body)


class ReloadKeepsAuthentication(st.TestCase):
    """Issue 28: a reload never turns authentication off, whatever it
    removes (the keys: section, its last key, its keys' hashes, the file's
    api-key or admin-key), and a key it removes is refused at once."""

    @classmethod
    def setUpClass(cls):
        cls.ls = st.LlamaServer(st.MODEL_TINY, slots=2, ctx=1024)

    @classmethod
    def tearDownClass(cls):
        cls.ls.kill()

    def write(self, text):
        with open(self.config, "w") as f:
            f.write(text)

    def reload(self, s, pattern):
        return s.reload(pattern, timeout=SAFETY_NET_S)

    def assert_locked(self, s, *revoked):
        """Every endpoint but the health checks wants a key, and none of
        `revoked` is one."""
        for key in (None,) + revoked:
            headers = bearer(key) if key else {}
            for method, path in (("GET", "/metrics"), ("GET", "/v1/models"),
                                 ("GET", "/props"), ("GET", "/slots"),
                                 ("POST", "/v1/chat/completions"),
                                 ("GET", "/no/such/path")):
                r = st.request(s.port, method, path, headers=headers,
                               body=chat(n=1) if method == "POST" else None)
                self.assertEqual(r.status, 401, (key, path))
        for path in ("/health", "/ready", "/v1/health"):
            self.assertEqual(s.get(path).status, 200, path)

    def test_removing_or_emptying_keys_keeps_requiring_a_key(self):
        self.config = os.path.join(self.tmp, "sluice.yaml")
        self.write(keys_yaml({"a": {"secret": "sk-a"}}))
        s = self.sluice("--config", self.config, "--upstream", self.ls.url)
        self.assertEqual(s.post("/v1/chat/completions", chat(n=1),
                                headers=bearer("sk-a")).status, 200)
        self.assertEqual(s.get("/metrics", headers=bearer("sk-a")).status,
                         200)
        self.assert_locked(s)
        # The section gone: a's secret is revoked, and nothing is open.
        self.write("slots: 2\n")
        self.reload(s, r"keys reloaded: 0 keys; added: none; changed: "
                    r"none; removed: a$")
        self.assert_locked(s, "sk-a")
        s.wait_line(r"warn  SIGHUP: keys: is gone and no --api-key is set: "
                    r"every client request is refused \(401\)")
        # A key again, then its hash changed: the old secret is refused.
        self.write(keys_yaml({"b": {"secret": "sk-b"}}))
        self.reload(s, r"keys reloaded: 1 key; added: b;")
        self.assertEqual(s.get("/v1/models", headers=bearer("sk-b")).status,
                         200)
        self.write(keys_yaml({"b": {"secret": "sk-b2"}}))
        self.reload(s, r"keys reloaded: 1 key; added: none; changed: b;")
        self.assertEqual(s.get("/v1/models", headers=bearer("sk-b2")).status,
                         200)
        self.assertEqual(s.get("/v1/models", headers=bearer("sk-b")).status,
                         401)
        # The section emptied: the same as gone.
        self.write("keys: {}\n")
        self.reload(s, r"keys reloaded: 0 keys; added: none; changed: "
                    r"none; removed: b$")
        self.assert_locked(s, "sk-a", "sk-b", "sk-b2")
        s.wait_line(r"warn  SIGHUP: keys: lists no key and no --api-key is "
                    r"set")
        # Every entry commented out leaves "keys:" alone, which is no
        # mapping: refused, the (empty) keys stay.
        self.write("keys:\n#  b:\n#    hash: %s\n" % digest("sk-b2"))
        self.reload(s, r"error SIGHUP: keys not reloaded, the old ones "
                    r"stay: .*:1: keys: a section: expected a mapping")
        self.assert_locked(s, "sk-b2")
        self.assertEqual(s.stop(), 0)

    def test_a_file_without_its_client_and_admin_keys_keeps_them(self):
        self.config = os.path.join(self.tmp, "sluice.yaml")
        self.write("api-key: [file-key]\nadmin-key: file-admin\n" +
                   keys_yaml({"a": {"secret": "sk-a"}}))
        s = self.sluice("--config", self.config, "--upstream", self.ls.url)
        self.write("# every key gone\n")
        self.reload(s, r"warn  SIGHUP: api-key, admin-key changed; ignored "
                    r"until a restart")
        # The file's keys stay as started; the tenant key is revoked.
        self.assertEqual(s.get("/v1/models",
                               headers=bearer("file-key")).status, 200)
        self.assertEqual(s.get("/metrics", headers=bearer("file-key")).status,
                         403)
        self.assertEqual(s.get("/metrics",
                               headers=bearer("file-admin")).status, 200)
        for key in (None, "sk-a"):
            self.assertEqual(s.get("/v1/models", headers=bearer(key)
                                   if key else {}).status, 401, key)
            self.assertEqual(s.get("/metrics", headers=bearer(key)
                                   if key else {}).status, 401, key)
        # With a client key left, no outage to warn of.
        self.assertEqual(s.count_lines(r"no --api-key is set"), 0)
        self.assertEqual(s.stop(), 0)

    def test_an_empty_keys_section_at_start_requires_a_key(self):
        self.config = os.path.join(self.tmp, "sluice.yaml")
        self.write("keys: {}\n")
        s = self.sluice("--config", self.config, "--upstream", self.ls.url)
        self.assert_locked(s)
        s.wait_line(r"warn  keys: lists no key and no --api-key is set")
        # --check-config keeps the section, as the start read it.
        out = subprocess.run([st.SLUICE, "--check-config", self.config],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.endswith("\nkeys: {}\n"), out.stdout)


class Priority(st.TestCase):
    def test_batch_keys_urgent_is_clamped_and_waits_behind_an_urgent_one(self):
        config = os.path.join(self.tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write(keys_yaml({
                "batchy": {"secret": "sk-batch", "max-priority": "batch"},
                "lazy": {"secret": "sk-lazy", "default-priority": "batch"},
                "ops": {"secret": "sk-ops"}}))
        # One slot, contested; no aging, so that order is priority alone.
        s = self.sluice("--config", config, "--model", st.MODEL_SLOW,
                        "--slots", "1", "--aging-rate", "0")
        holder = hold(s, bearer("sk-ops"))

        answers = {}
        sends = [("batchy-urgent", "sk-batch", "urgent"),
                 ("lazy-default", "sk-lazy", None),
                 ("ops-urgent", "sk-ops", "urgent")]
        threads = []
        # Each is queued before the next is sent.
        for rid, key, priority in sends:
            headers = dict(bearer(key), **{"X-Request-Id": rid})
            if priority:
                headers["X-Priority"] = priority
            threads.append(send_queued(s, rid, headers, answers))
        holder.close()
        for t in threads:
            t.join(SAFETY_NET_S)
        ids = [rid for rid, _, _ in sends]
        self.assertEqual({rid: r.status for rid, r in answers.items()},
                         {rid: 200 for rid in ids})
        self.assertEqual(answers["batchy-urgent"].header("X-Priority"),
                         "batch")
        self.assertEqual(answers["lazy-default"].header("X-Priority"),
                         "batch")
        self.assertEqual(answers["ops-urgent"].header("X-Priority"), "urgent")
        st.wait_until(lambda: len(s.access_order(ids)) == 3, SAFETY_NET_S,
                      "the three access log lines")
        # ops' urgent one went first although it came last; the two batch
        # ones in their order of arrival.
        self.assertEqual(s.access_order(ids),
                         ["ops-urgent", "batchy-urgent", "lazy-default"])
        s.wait_line(r" access id=batchy-urgent .* priority=batch .* "
                    r"key=batchy$")


class Concurrency(st.TestCase):
    def test_two_at_once_holds_under_twenty_concurrent_requests(self):
        # Four slots upstream and four in sluice: only the key limits.
        ls = self.llama_server(st.MODEL_SLOW, slots=4, ctx=1024,
                               extra=st.LLAMA_ONE_THREAD)
        config = os.path.join(self.tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write(keys_yaml({"pair": {"secret": "sk-pair",
                                        "max-concurrent": 2}}))
        s = self.sluice("--config", config, "--upstream", ls.url,
                        "--admin-key", ADMIN)
        busy, done = [], threading.Event()

        def sample():
            while not done.is_set():
                slots = st.request(ls.port, "GET", "/slots").json()
                busy.append(sum(1 for x in slots if x["is_processing"]))

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            with concurrent.futures.ThreadPoolExecutor(20) as pool:
                answers = list(pool.map(
                    lambda i: s.post("/completion",
                                     completion("c%d" % i, n=300),
                                     headers=bearer("sk-pair"),
                                     timeout=SAFETY_NET_S), range(20)))
        finally:
            done.set()
            sampler.join(SAFETY_NET_S)
        ok = [r for r in answers if r.status == 200]
        refused = [r for r in answers if r.status == 429]
        self.assertEqual(len(ok) + len(refused), 20)
        self.assertGreaterEqual(len(ok), 2)
        self.assertGreater(len(refused), 0)
        # Never more than two at the upstream, and two were seen there.
        self.assertLessEqual(max(busy), 2)
        self.assertEqual(max(busy), 2)
        for r in refused:
            err = r.json()["error"]
            self.assertEqual(err["code"], "rate_limit_exceeded")
            self.assertEqual(err["message"],
                             "Rate limit reached for key pair on concurrent "
                             "requests: Limit 2. Please try again when one "
                             "has ended.")
            self.assertEqual(r.header("Retry-After"), "1")
        # Every place came back: two more go through at once.
        st.wait_until(lambda: s.get("/v1/usage", headers=bearer(ADMIN))
                      .json()["keys"]["pair"]["in_flight"] == 0,
                      SAFETY_NET_S, "no request of pair in flight")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            again = list(pool.map(
                lambda i: s.post("/completion", completion("d%d" % i, n=4),
                                 headers=bearer("sk-pair"),
                                 timeout=SAFETY_NET_S), range(2)))
        self.assertEqual([r.status for r in again], [200, 200])


if __name__ == "__main__":
    st.main()

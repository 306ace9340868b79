"""Many models behind one sluice (issue 13, item 2): a models: section with
two managed llama-servers, routing by the request's "model" (aliases too),
the default model, 404 for an unknown one, /v1/models, /health, and one
model's full slots not holding the other's requests."""

import json
import threading
import time

import promcheck
import sluice_test as st

# Fields that differ between any two answers, whoever serves them. Prompts
# are sent with "cache_prompt": false, so that what a slot held before
# (which differs between the two llama-servers) does not show in the counts.
VARYING = ("id", "created", "timings")

TINY_SLOTS, TINY_CTX = 2, 2048
SLOW_SLOTS, SLOW_CTX = 1, 4096


def config(tmp, default="small"):
    """The YAML file: tiny (aliases small and t) and slow, one llama-server
    thread each, as the test's own llama-servers have."""
    text = """
default-model: %s
models:
  tiny:
    model: %s
    slots: %d
    ctx-size: %d
    args: [%s]
    aliases: [small, t]
  slow:
    model: %s
    slots: %d
    ctx-size: %d
    args: [%s]
    max-queue: 4
""" % (default, st.MODEL_TINY, TINY_SLOTS, TINY_CTX,
       ", ".join(st.LLAMA_ONE_THREAD), st.MODEL_SLOW, SLOW_SLOTS, SLOW_CTX,
       ", ".join(st.LLAMA_ONE_THREAD))
    path = tmp + "/models.yaml"
    with open(path, "w") as f:
        f.write(text)
    return path


def without(doc, keys=VARYING):
    if isinstance(doc, dict):
        return {k: without(v, keys) for k, v in doc.items() if k not in keys}
    if isinstance(doc, list):
        return [without(v, keys) for v in doc]
    return doc


def chat(prompt, n=8, **extra):
    return {"messages": [{"role": "user", "content": prompt}],
            "max_tokens": n, "temperature": 0, "seed": 11,
            "cache_prompt": False, **extra}


class Models(st.TestCase):

    @classmethod
    def setUpClass(cls):
        # Each model's own llama-server, started as sluice starts it (slots,
        # context, one thread, the model's name as its alias): the answers
        # through sluice must be theirs.
        cls.direct = {
            "tiny": st.LlamaServer(st.MODEL_TINY, slots=TINY_SLOTS,
                                   ctx=TINY_CTX,
                                   extra=("--alias", "tiny",
                                          *st.LLAMA_ONE_THREAD)),
            "slow": st.LlamaServer(st.MODEL_SLOW, slots=SLOW_SLOTS,
                                   ctx=SLOW_CTX,
                                   extra=("--alias", "slow",
                                          *st.LLAMA_ONE_THREAD)),
        }

    @classmethod
    def tearDownClass(cls):
        for ls in cls.direct.values():
            ls.kill()

    def start(self, **kw):
        self.before = int(time.time())
        s = self.sluice("--config", config(self.tmp, **kw))
        s.wait_all_upstreams_ready()
        self.after = int(time.time())
        return s

    def direct_answer(self, name, path, body):
        r = self.direct[name].post(path, body)
        self.assertEqual(r.status, 200, r.body)
        return r.json()

    def test_routing_aliases_and_the_default(self):
        s = self.start()
        for path, body in [("/v1/chat/completions", chat("Hello")),
                           ("/v1/completions",
                            {"prompt": "Once upon", "max_tokens": 8,
                             "temperature": 0, "seed": 3,
                             "cache_prompt": False}),
                           ("/completion",
                            {"prompt": "Once upon", "n_predict": 8,
                             "temperature": 0, "seed": 3,
                             "cache_prompt": False})]:
            want = {n: without(self.direct_answer(n, path, body))
                    for n in ("tiny", "slow")}
            self.assertNotEqual(want["tiny"], want["slow"], path)
            # By name, by alias, and without a name (default: small).
            for asked, served in [("tiny", "tiny"), ("slow", "slow"),
                                  ("small", "tiny"), ("t", "tiny"),
                                  (None, "tiny")]:
                sent = dict(body) if asked is None else dict(body,
                                                            model=asked)
                r = s.post(path, sent)
                with self.subTest(path=path, model=asked):
                    self.assertEqual(r.status, 200, r.body)
                    self.assertEqual(without(r.json()), want[served])

    def test_default_model_by_name(self):
        s = self.start(default="slow")
        body = {"prompt": "Once upon", "n_predict": 6, "temperature": 0,
                "seed": 3, "cache_prompt": False}
        r = s.post("/completion", body)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(without(r.json()),
                         without(self.direct_answer("slow", "/completion",
                                                    body)))
        self.assertEqual(s.health().json()["default_model"], "slow")

    def test_an_unknown_model_is_404_in_openai_words(self):
        s = self.start()
        for path, body in [("/v1/chat/completions",
                            chat("hi", model="gpt-4o")),
                           ("/v1/embeddings",
                            {"input": "hi", "model": "gpt-4o"})]:
            r = s.post(path, body)
            self.assertEqual(r.status, 404, r.body)
            self.assertEqual(r.json(), {"error": {
                "message": "The model `gpt-4o` does not exist.",
                "type": "invalid_request_error", "param": "model",
                "code": "model_not_found"}})
        # A GET names its model in the query.
        r = s.get("/props?model=nope")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json()["error"]["code"], "model_not_found")

    def test_v1_models_lists_every_model(self):
        s = self.start()
        for path in ("/v1/models", "/models"):
            r = s.get(path)
            self.assertEqual(r.status, 200, r.body)
            doc = r.json()
            created = [m["created"] for m in doc["data"]]
            self.assertEqual(len(set(created)), 1)
            self.assertTrue(self.before <= created[0] <= self.after,
                            (self.before, created, self.after))
            self.assertEqual(doc, {"object": "list", "data": [
                {"id": "tiny", "object": "model", "created": created[0],
                 "owned_by": "sluice", "aliases": ["small", "t"],
                 "state": "ready"},
                {"id": "slow", "object": "model", "created": created[0],
                 "owned_by": "sluice", "aliases": [], "state": "ready"}]})

    def test_health_and_props_per_model(self):
        s = self.start()
        h = s.health().json()
        self.assertEqual(
            [(m["name"], m["state"], m["aliases"], m["upstreams"])
             for m in h["models"]],
            [("tiny", "ready", ["small", "t"], ["tiny"]),
             ("slow", "ready", [], ["slow"])])
        self.assertEqual([u["name"] for u in h["upstreams"]],
                         ["tiny", "slow"])
        # ?model= picks whose llama-server answers; without it, the
        # default model's.
        for query, name in [("?model=slow", "slow"), ("?model=t", "tiny"),
                            ("", "tiny")]:
            r = s.get("/props" + query)
            self.assertEqual(r.status, 200, r.body)
            self.assertEqual(r.json()["total_slots"],
                             {"tiny": TINY_SLOTS, "slow": SLOW_SLOTS}[name])
            self.assertEqual(r.json()["model_alias"], name)
        # The metrics label each model's queue and upstreams.
        m = promcheck.check(s.get("/metrics").body.decode())
        self.assertEqual(promcheck.value(m, "sluice_upstream_slots",
                                         upstream="slow", model="slow"),
                         SLOW_SLOTS)
        self.assertIn(("sluice_queue_depth",
                       (("model", "tiny"), ("priority", "normal"))), m)

    def test_a_full_model_does_not_hold_the_others(self):
        s = self.start()
        # Fill slow's only slot with a long generation, streamed...
        busy = st.RawClient(s.port)
        busy.request("POST", "/completion",
                     {"model": "slow", "prompt": "go on", "n_predict": 3000,
                      "ignore_eos": True, "stream": True})
        self.assertEqual(busy.read_head()[0], 200)
        next(busy.chunks())

        def model_doc(name):
            return [m for m in s.health().json()["models"]
                    if m["name"] == name][0]

        # ...and queue another request for slow behind it.
        results = {}

        def queued():
            results["slow"] = s.post("/completion", {
                "model": "slow", "prompt": "x", "n_predict": 2}, timeout=120)
        t = threading.Thread(target=queued)
        t.start()
        st.wait_until(lambda: model_doc("slow")["queued"] == 1, 30,
                      "a slow request to be queued")
        # tiny answers while slow's slot is taken and its queue waits.
        body = chat("Hello", model="tiny")
        r = s.post("/v1/chat/completions", body, timeout=30)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(without(r.json()),
                         without(self.direct_answer(
                             "tiny", "/v1/chat/completions", body)))
        slow = model_doc("slow")
        self.assertEqual((slow["inflight"], slow["queued"]), (1, 1),
                         "slow's generation ended before tiny answered")
        # Leaving frees slow's slot: its queued request goes.
        busy.close()
        t.join(120)
        self.assertEqual(results["slow"].status, 200, results["slow"].body)
        self.assertIsNotNone(results["slow"].header("X-Queue-Ms"))


class OneModel(st.TestCase):
    """Without a models: section: one model, named after the file."""

    def test_named_after_the_file_and_any_name_goes_to_it(self):
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "1",
                        "--llama-arg=--threads", "--llama-arg=1")
        h = s.health().json()
        self.assertEqual([(m["name"], m["upstreams"]) for m in h["models"]],
                         [("demo-tiny", ["managed"])])
        # llama-server itself reports the name, not the cache path.
        ids = [m["id"] for m in s.get("/v1/models").json()["data"]]
        self.assertEqual(ids, ["demo-tiny"])
        # As before models were named: the one model takes any name.
        r = s.post("/v1/chat/completions", chat("hi", 2, model="whatever"))
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["model"], "demo-tiny")

    def test_model_name(self):
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "1",
                        "--model-name", "mine",
                        "--llama-arg=--threads", "--llama-arg=1")
        ids = [m["id"] for m in s.get("/v1/models").json()["data"]]
        self.assertEqual(ids, ["mine"])
        self.assertEqual(s.health().json()["models"][0]["name"], "mine")


if __name__ == "__main__":
    st.main()

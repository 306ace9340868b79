"""Many models behind one sluice (issue 13, items 2 and 3): a models:
section with two managed llama-servers, routing by the request's "model"
(aliases too), the default model, 404 for an unknown one, /v1/models,
/health, one model's full slots not holding the other's requests; and
loading on demand: preload: false, idle-timeout, and --max-loaded stopping
the least recently used idle model, never one in use."""

import datetime
import os
import re
import subprocess
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


def config(tmp, default="small", top="", tiny="", slow="", more=""):
    """The YAML file: tiny (aliases small and t) and slow, one llama-server
    thread each, as the test's own llama-servers have; `top` adds
    top-level lines, `tiny` and `slow` keys of those models, `more` other
    models."""
    text = """
default-model: %s
%s
models:
  tiny:
    model: %s
    slots: %d
    ctx-size: %d
    args: [%s]
    aliases: [small, t]
%s
  slow:
    model: %s
    slots: %d
    ctx-size: %d
    args: [%s]
    max-queue: 4
%s
%s
""" % (default, top, st.MODEL_TINY, TINY_SLOTS, TINY_CTX,
       ", ".join(st.LLAMA_ONE_THREAD), tiny, st.MODEL_SLOW, SLOW_SLOTS,
       SLOW_CTX, ", ".join(st.LLAMA_ONE_THREAD), slow, more)
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


class WithDirect(st.TestCase):
    """Each model's own llama-server beside sluice, to compare answers."""

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

    def states(self, s):
        return {m["name"]: m["state"] for m in s.health().json()["models"]}

    def model_doc(self, s, name):
        return [m for m in s.health().json()["models"]
                if m["name"] == name][0]

    def assert_served_by(self, s, name, asked=None):
        """A completion asking for `asked` (default: name) through sluice
        equals name's own llama-server's; returns sluice's answer."""
        body = {"model": asked or name, "prompt": "Once upon",
                "n_predict": 6, "temperature": 0, "seed": 5,
                "cache_prompt": False}
        r = s.post("/completion", body, timeout=60)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(without(r.json()),
                         without(self.direct_answer(name, "/completion",
                                                    body)))
        return r


class Models(WithDirect):

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


def log_time(line):
    """The timestamp a sluice log line starts with, in seconds."""
    stamp = line.split()[0].rstrip("Z")
    return datetime.datetime.fromisoformat(stamp).timestamp()


class OnDemand(WithDirect):

    def test_preload_false_starts_on_the_first_request_and_idles_out(self):
        s = self.sluice("--config", config(
            self.tmp, tiny="    preload: false\n    idle-timeout: 2"))
        st.wait_until(lambda: self.states(s)["slow"] == "ready", 60,
                      "slow to be ready")
        self.assertEqual(self.states(s), {"tiny": "stopped",
                                          "slow": "ready"})
        self.assertEqual(self.model_doc(s, "tiny")["upstreams"], [])
        m = promcheck.check(s.get("/metrics").body.decode())
        for state in ("stopped", "starting", "ready", "stopping"):
            self.assertEqual(promcheck.value(m, "sluice_model_state",
                                             model="tiny", state=state),
                             state == "stopped", state)
        self.assertEqual([(d["id"], d["state"]) for d in
                          s.get("/v1/models").json()["data"]],
                         [("tiny", "stopped"), ("slow", "ready")])
        # A GET that takes no slot does not start it.
        r = s.get("/props?model=tiny")
        self.assertEqual(r.status, 503)
        self.assertEqual(r.json()["error"]["message"],
                         "model tiny is stopped; a request that needs a "
                         "slot starts it")
        # The first request starts it, and waits in the queue meanwhile:
        # its X-Queue-Ms covers the start as sluice's log timed it.
        r = self.assert_served_by(s, "tiny")
        lines = s.output().splitlines()
        start = [l for l in lines
                 if "model tiny: starting (a request needs it)" in l]
        self.assertEqual(len(start), 1, s.output())
        ready = [l for l in lines[lines.index(start[0]):]
                 if re.search(r"upstream \S+ is ready", l)][0]
        # The log stamps are read from the clock as each line is written,
        # but the queue times by the loop's clock, read once per turn: the
        # dispatch can carry the stamp of the turn that saw the upstream
        # ready, taken before the "ready" line was written. Allow for one
        # busy turn (sanitizers, a loaded machine); a start takes hundreds.
        took_ms = round((log_time(ready) - log_time(start[0])) * 1000)
        self.assertGreaterEqual(int(r.header("X-Queue-Ms")), took_ms - 25)
        # One look, well within the idle-timeout of its answer.
        h = s.health().json()
        up = [m for m in h["models"] if m["name"] == "tiny"][0]
        self.assertEqual((up["state"], up["upstreams"]), ("ready", ["tiny"]))
        pid = [u["pid"] for u in h["upstreams"] if u["name"] == "tiny"][0]
        # Unused for idle-timeout: stopped, its llama-server gone.
        st.wait_until(lambda: self.states(s)["tiny"] == "stopped", 30,
                      "tiny to stop after its idle-timeout")
        s.wait_line(r"model tiny: stopping \(idle-timeout passed\)")
        st.wait_until(lambda: not st.pid_alive(pid), 30,
                      "tiny's llama-server to exit")
        self.assertEqual(self.states(s)["slow"], "ready")
        # And it starts again on demand.
        self.assert_served_by(s, "tiny", asked="small")

    def test_max_loaded_stops_the_least_recently_used(self):
        self.check_lru_swap("max-loaded: 2", r"--max-loaded 2")

    def test_memory_budget_stops_the_least_recently_used(self):
        # Room for tiny and slow, the two preloaded; third (tiny's file
        # again) fits only once one of them has stopped.
        budget = (os.path.getsize(st.MODEL_TINY) +
                  os.path.getsize(st.MODEL_SLOW))
        self.check_lru_swap("memory-budget: %d" % budget,
                            r"--memory-budget %d" % budget)

    def check_lru_swap(self, top, limit):
        third = ("  third:\n    model: %s\n    slots: 1\n    ctx-size: %d\n"
                 "    args: [%s]\n    preload: false\n"
                 % (st.MODEL_TINY, TINY_CTX, ", ".join(st.LLAMA_ONE_THREAD)))
        s = self.sluice("--config", config(self.tmp, top=top, more=third))
        st.wait_until(lambda: self.states(s) == {
            "tiny": "ready", "slow": "ready", "third": "stopped"}, 60,
            "tiny and slow to be ready")
        # slow, then tiny: slow is now the least recently used.
        self.assert_served_by(s, "slow")
        self.assert_served_by(s, "tiny")
        r = s.post("/completion", {"model": "third", "prompt": "x",
                                   "n_predict": 2}, timeout=60)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.states(s), {"tiny": "ready", "slow": "stopped",
                                          "third": "ready"})
        s.wait_line(r"model slow: stopping \(%s: room for third\)" % limit)
        # Now tiny is: slow's return stops it.
        self.assert_served_by(s, "slow")
        self.assertEqual(self.states(s), {"tiny": "stopped", "slow": "ready",
                                          "third": "ready"})

    def test_a_model_in_use_is_never_stopped_for_another(self):
        s = self.sluice("--config", config(
            self.tmp, top="max-loaded: 1", tiny="    preload: false"))
        st.wait_until(lambda: self.states(s)["slow"] == "ready", 60,
                      "slow to be ready")
        busy = st.RawClient(s.port)
        busy.request("POST", "/completion",
                     {"model": "slow", "prompt": "go on", "n_predict": 3000,
                      "ignore_eos": True, "stream": True})
        self.assertEqual(busy.read_head()[0], 200)
        next(busy.chunks())
        results = {}

        def ask_tiny():
            results["tiny"] = s.post("/completion", {
                "model": "tiny", "prompt": "x", "n_predict": 2}, timeout=120)
        t = threading.Thread(target=ask_tiny)
        t.start()
        st.wait_until(lambda: self.model_doc(s, "tiny")["queued"] == 1, 30,
                      "tiny's request to wait")
        # slow is generating: tiny waits for it, and slow keeps running.
        slow = self.model_doc(s, "slow")
        self.assertEqual((slow["state"], slow["inflight"]), ("ready", 1))
        self.assertEqual(self.states(s)["tiny"], "stopped")
        # Its generation over (the client left), slow makes room.
        busy.close()
        t.join(120)
        self.assertEqual(results["tiny"].status, 200, results["tiny"].body)
        self.assertEqual(self.states(s), {"tiny": "ready",
                                          "slow": "stopped"})
        self.assertIsNotNone(results["tiny"].header("X-Queue-Ms"))


    def test_the_admin_loads_and_unloads_as_with_llama_servers_router(self):
        # With a models: section sluice is the router: POST /models/load
        # and /models/unload start and stop its managed models (admin
        # actions, as llama-server's router mode takes them); adding,
        # deleting and watching models say where those come from.
        third = ("  third:\n    model: %s\n    slots: 1\n    ctx-size: %d\n"
                 "    args: [%s]\n    preload: false\n"
                 % (st.MODEL_TINY, TINY_CTX, ", ".join(st.LLAMA_ONE_THREAD)))
        s = self.sluice("--admin-key", "adm", "--config", config(
            self.tmp, top="max-loaded: 2", tiny="    preload: false",
            more=third))
        admin = {"Authorization": "Bearer adm"}
        st.wait_until(lambda: self.states(s)["slow"] == "ready", 60,
                      "slow to be ready")

        def act(path, model, body=None):
            return s.post(path, {"model": model} if body is None else body,
                          headers=admin)

        self.assertEqual(s.post("/models/load", {"model": "tiny"}).status,
                         403)
        r = act("/models/load", "small")  # an alias names it too
        self.assertEqual((r.status, r.json()), (200, {"success": True}))
        s.wait_line(r"model tiny: starting \(POST /models/load\)")
        st.wait_until(lambda: self.states(s)["tiny"] == "ready", 60,
                      "tiny to start")
        self.assertEqual(act("/models/load", "tiny").json(),
                         {"success": True})  # running already
        self.assert_served_by(s, "tiny")
        r = act("/models/load", "third")
        self.assertEqual(r.status, 400)
        self.assertEqual(r.json()["error"]["message"],
                         "no room for model third within --max-loaded 2: "
                         "unload another first")
        r = act("/models/load", "nope")
        self.assertEqual((r.status, r.json()["error"]["code"]),
                         (404, "model_not_found"))
        for bad in ({}, {"model": ""}, "junk"):
            r = act("/models/load", None, body=bad)
            self.assertEqual(r.status, 400, r.body)
        # Never under a request: a busy model stays.
        busy = st.RawClient(s.port)
        busy.request("POST", "/completion",
                     {"model": "slow", "prompt": "go on", "n_predict": 3000,
                      "ignore_eos": True, "stream": True})
        self.assertEqual(busy.read_head()[0], 200)
        next(busy.chunks())
        r = act("/models/unload", "slow")
        self.assertEqual(r.status, 400)
        self.assertIn("model slow is in use", r.json()["error"]["message"])
        busy.close()
        st.wait_until(lambda: self.model_doc(s, "slow")["inflight"] == 0,
                      60, "slow's request to end")
        r = act("/models/unload", "slow")
        self.assertEqual((r.status, r.json()), (200, {"success": True}))
        s.wait_line(r"model slow: stopping \(POST /models/unload\)")
        st.wait_until(lambda: self.states(s)["slow"] == "stopped", 60,
                      "slow to stop")
        self.assertEqual(act("/models/unload", "slow").status, 200)
        self.assertEqual(act("/models/load", "third").status, 200)
        st.wait_until(lambda: self.states(s) == {
            "tiny": "ready", "slow": "stopped", "third": "ready"}, 60,
            "third to start")
        # The models are the configuration file's.
        for method, path in (("POST", "/models"), ("DELETE", "/models"),
                             ("GET", "/models/sse")):
            r = st.request(s.port, method, path, body=b"{}" if method ==
                           "POST" else None, headers=admin)
            self.assertEqual(r.status, 501, (path, r.body))
            self.assertEqual(r.json()["error"]["type"], "not_supported_error")
        self.assertEqual(s.stop(), 0)

    def test_a_model_that_cannot_start_fails_its_requests_not_sluice(self):
        broken = self.tmp + "/broken.gguf"
        with open(broken, "wb") as f:
            f.write(b"GGUF" + bytes(60))  # the magic, then nothing valid
        s = self.sluice("--config", config(
            self.tmp, tiny="    preload: false", slow="    preload: false",
            more="  broken:\n    model: %s\n    preload: false\n" % broken))
        # Nothing runs before a request, and sluice is ready all the same
        # (self.sluice waited for /ready): each model starts on demand.
        self.assertEqual(self.states(s), {"tiny": "stopped",
                                          "slow": "stopped",
                                          "broken": "stopped"})
        self.assertEqual(s.health().json()["upstreams"], [])
        r = s.post("/completion", {"model": "broken", "prompt": "x",
                                   "n_predict": 2}, timeout=60)
        self.assertEqual(r.status, 503, r.body)
        self.assertEqual(r.json()["error"]["message"],
                         "model broken could not start; sluice's log says "
                         "why")
        s.wait_line(r"model broken: llama-server \S.* before it became "
                    r"ready")
        st.wait_until(lambda: self.states(s)["broken"] == "stopped", 30,
                      "broken to be stopped")
        # sluice goes on serving the others.
        self.assert_served_by(s, "tiny")
        self.assert_served_by(s, "slow")


class CheckConfig(st.TestCase):

    def test_check_config_prints_the_models_back(self):
        path = config(self.tmp, top="max-loaded: 1",
                      tiny="    preload: false\n    idle-timeout: 90")
        r = subprocess.run([st.SLUICE, "--check-config", path],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertIn("default-model: small  # file\n", r.stdout)
        self.assertIn("max-loaded: 1  # file\n", r.stdout)
        models = r.stdout[r.stdout.index("\nmodels:\n") + 1:]
        self.assertEqual(models, """models:
  tiny:
    model: %s
    slots: %d
    ctx-size: %d
    replicas: 1
    args:
      - "--threads"
      - 1
    preload: false
    idle-timeout: 90
    aliases:
      - small
      - t
    max-queue: 1024
    queue-timeout: 60
  slow:
    model: %s
    slots: %d
    ctx-size: %d
    replicas: 1
    args:
      - "--threads"
      - 1
    preload: true
    idle-timeout: 0
    max-queue: 4
    queue-timeout: 60
""" % (st.MODEL_TINY, TINY_SLOTS, TINY_CTX, st.MODEL_SLOW, SLOW_SLOTS,
       SLOW_CTX))

    def test_a_bad_model_is_one_line_naming_file_line_and_key(self):
        path = config(self.tmp, slow="    replicas: many")
        r = subprocess.run([st.SLUICE, "--check-config", path],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        with open(path) as f:
            line = [n for n, text in enumerate(f.read().split("\n"), 1)
                    if "replicas: many" in text][0]
        self.assertEqual(r.stderr.strip().splitlines()[-1],
                         "sluice: %s:%d: models.slow.replicas: expected a "
                         "whole number from 1 to 16, got \"many\""
                         % (path, line))


    def test_a_model_beyond_the_memory_budget_is_refused_at_start(self):
        budget = os.path.getsize(st.MODEL_SLOW) - 1
        s = st.Sluice("--config", config(
            self.tmp, top="memory-budget: %d" % budget), wait_ready=None)
        self.assertNotEqual(s.wait_exit(30), 0)
        s.wait_line(r"models\.slow: %d bytes of model files \(with its "
                    r"replicas\) is more than --memory-budget %d: it could "
                    r"never run$" % (os.path.getsize(st.MODEL_SLOW), budget))


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

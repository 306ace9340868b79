"""SIGHUP reloads the models (issue 13, item 1): a running sluice with a
models: section re-reads its file, and models come, go and change without
dropping a connection or a request in flight; a file that cannot be read
changes nothing and holds nothing up. Remote models on mock
llama-servers (their text is known: st.mock_text), and one managed model on
the tiny demo model."""

import json
import os
import signal

import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 120
# The mocks' pace. A long stream (LONG tokens, LONG * TOKEN_DELAY_MS = 10 s)
# is still running when a reload that takes milliseconds has been applied;
# a short answer is quick.
TOKEN_DELAY_MS = 20
LONG = 500
SHORT = 3
MANAGED_TOKENS = 256


def models_yaml(models):
    """A models: section from {name: {key: value or list}}."""
    lines = ["models:"]
    for name, keys in models.items():
        lines.append("  %s:" % name)
        for k, v in keys.items():
            if isinstance(v, list):
                v = "[%s]" % ", ".join(v)
            lines.append("    %s: %s" % (k, v))
    return "\n".join(lines) + "\n"


class Stream:
    """A streamed completion through sluice, read event by event."""

    def __init__(self, port, model, tokens, **extra):
        self.client = st.RawClient(port, timeout=SAFETY_NET_S)
        self.client.request("POST", "/v1/completions",
                            body=dict({"model": model, "prompt": "hi",
                                       "max_tokens": tokens,
                                       "stream": True}, **extra))
        self.status, _ = self.client.read_head()
        self.events = self.client.events()
        self.text = ""
        self.done = False

    def read(self, n=None):
        """Reads n events (None: to the end)."""
        for _, chunk in self.events:
            event = st.sse_data(chunk)
            if event == "[DONE]":
                self.done = True
            elif event is not None:
                self.text += st.delta_of("/v1/completions", event)
            if n is not None:
                n -= 1
                if n == 0:
                    return
        self.client.close()


class Reload(st.TestCase):

    def setUp(self):
        super().setUp()
        self.path = os.path.join(self.tmp, "sluice.yaml")

    def mock(self, slots=8):
        return self.mock_llama_server("--slots", str(slots),
                                      "--token-delay-ms",
                                      str(TOKEN_DELAY_MS))

    def write(self, text):
        with open(self.path, "w") as f:
            f.write(text)

    def reload(self, s, pattern):
        """Sends SIGHUP and waits for the log line matching pattern."""
        return s.reload(pattern, timeout=SAFETY_NET_S)

    def ask(self, s, model, rid):
        return st.request(s.port, "POST", "/v1/completions",
                          body={"model": model, "prompt": "hi",
                                "max_tokens": SHORT},
                          headers={"X-Request-Id": rid},
                          timeout=SAFETY_NET_S)

    def assert_answers(self, s, model, rid, url):
        """model answers with the mock's text, from the upstream at url."""
        r = self.ask(s, model, rid)
        self.assertEqual((r.status, r.json()["choices"][0]["text"]),
                         (200, st.mock_text(SHORT)), model)
        m = s.wait_line(r" access id=%s .*upstream=(\S+)" % rid,
                        timeout=SAFETY_NET_S)
        self.assertEqual(m.group(1), url)

    def pools(self, s):
        return {m["name"]: m["upstreams"]
                for m in s.health().json()["models"]}

    def upstream_states(self, s):
        return {u["url"]: u["state"] for u in s.health().json()["upstreams"]}

    def test_models_added_removed_and_changed_while_streams_run(self):
        a1, a2, b = self.mock(), self.mock(), self.mock()
        c = self.mock(slots=1)
        self.write(models_yaml({"a": {"upstreams": [a1.url],
                                      "aliases": ["alpha"]},
                                "c": {"upstreams": [c.url]}}))
        s = self.sluice("--config", self.path)
        st.wait_until(lambda: self.upstream_states(s) ==
                      {a1.url: "ready", c.url: "ready"}, SAFETY_NET_S,
                      "both upstreams ready")

        # Streams on a (two by name, one by alias) and one on c, each
        # under way (its first event read) before the reload.
        streams = [Stream(s.port, m, LONG) for m in ("a", "a", "alpha")]
        on_c = Stream(s.port, "c", LONG)
        for x in streams + [on_c]:
            self.assertEqual(x.status, 200)
            x.read(1)
        # c's one slot is taken: another request for c waits in its queue.
        waiting = st.RawClient(s.port, timeout=SAFETY_NET_S)
        waiting.request("POST", "/v1/completions",
                        body={"model": "c", "prompt": "hi",
                              "max_tokens": SHORT})
        st.wait_until(lambda: [m["queued"] for m in
                               s.health().json()["models"]] == [0, 1],
                      SAFETY_NET_S, "a request in c's queue")

        # b added, c removed, a with one more upstream and one more alias.
        self.write(models_yaml({"a": {"upstreams": [a1.url, a2.url],
                                      "aliases": ["alpha", "first"]},
                                "b": {"upstreams": [b.url]}}))
        self.reload(s, r"models reloaded: 2 models; added: b; removed: c; "
                       r"changed: a \(aliases, upstreams\)$")
        # Applied while every stream still ran at its mock.
        self.assertEqual((a1.busy_slots(), c.busy_slots()), (3, 1))
        # What waited in c's queue is told that c went.
        status, _, body = waiting.read_response()
        self.assertEqual((status, json.loads(body)["error"]["message"]),
                         (503, "model c was removed from sluice's "
                               "configuration"))
        waiting.close()

        r = self.ask(s, "c", "gone")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.json()["error"]["code"], "model_not_found")
        self.assertEqual(r.json()["error"]["message"],
                         "The model `c` does not exist.")
        self.assert_answers(s, "b", "b1", b.url)
        st.wait_until(lambda: self.upstream_states(s).get(a2.url) ==
                      "ready", SAFETY_NET_S, "a's new upstream ready")
        self.assertEqual(self.pools(s), {"a": [a1.url, a2.url],
                                         "b": [b.url]})
        # a1 holds three streams, a2 none: the new alias's request goes
        # to a2, the one with the most room.
        self.assert_answers(s, "first", "f1", a2.url)

        # Every stream finishes whole, the one on c too, and then c's
        # upstream, drained, leaves.
        for x in streams + [on_c]:
            x.read()
            self.assertEqual((x.text, x.done), (st.mock_text(LONG), True))
        st.wait_until(lambda: c.url not in self.upstream_states(s),
                      SAFETY_NET_S, "c's upstream gone")

        # A broken file changes nothing.
        self.write("models:\n  a:\n    slots: 2\n")
        m = self.reload(s, r"error SIGHUP: keys and models not reloaded, "
                           r"the old ones stay: (.*)$")
        self.assertEqual(m.group(1),
                         "%s:3: models.a: says neither where its model is "
                         "(model: FILE.gguf or hf-repo: REPO) nor where it "
                         "runs (upstreams: [URL] or dns: NAME:PORT)"
                         % self.path)
        self.assert_answers(s, "b", "b2", b.url)
        r = self.ask(s, "first", "f2")
        self.assertEqual(r.status, 200)
        self.assertEqual(self.pools(s), {"a": [a1.url, a2.url],
                                         "b": [b.url]})

        # Removing an upstream of a: it drains and leaves a's pool. A
        # top-level option that changed is named, and ignored.
        # b's queue limits change too.
        self.write("batch-window: 50ms\n" +
                   models_yaml({"a": {"upstreams": [a2.url]},
                                "b": {"upstreams": [b.url],
                                      "max-queue": 2}}))
        mark = len(s.lines)
        self.reload(s, r"models reloaded: 2 models; changed: a \(aliases, "
                       r"upstreams\); b \(queue limits\)$")
        s.wait_line(r"warn  SIGHUP: batch-window changed; ignored until a "
                    r"restart \(a reload applies only keys:, models:, "
                    r"default-model and max-loaded\)$", start=mark)
        st.wait_until(lambda: self.pools(s)["a"] == [a2.url], SAFETY_NET_S,
                      "a1 gone from a")
        self.assertEqual(self.ask(s, "alpha", "al").status, 404)
        self.assert_answers(s, "a", "a3", a2.url)
        self.assert_answers(s, "b", "b3", b.url)
        self.assertEqual(s.stop(), 0)

    def test_a_managed_model_added_then_relaunched(self):
        """A managed model added by a reload starts as at start-up; a
        change of its launch settings starts new llama-servers while the
        old one finishes its stream and stops."""
        r = self.mock()
        tiny = {"model": os.environ["SLUICE_MODEL_SLOW"], "slots": "1",
                "ctx-size": "4096",
                "args": [json.dumps(a) for a in st.LLAMA_ONE_THREAD]}
        self.write(models_yaml({"r": {"upstreams": [r.url]}}))
        s = self.sluice("--config", self.path)
        self.write(models_yaml({"r": {"upstreams": [r.url]}, "t": tiny}))
        self.reload(s, r"models reloaded: 2 models; added: t$")
        st.wait_until(lambda: s.health().json()["models"][1]["state"] ==
                      "ready", SAFETY_NET_S, "t started")
        old_pid = s.health().json()["upstreams"][1]["pid"]
        # Greedy: the same request gets the same text from any
        # llama-server of this model.
        x = Stream(s.port, "t", MANAGED_TOKENS, temperature=0)
        self.assertEqual(x.status, 200)
        x.read(1)

        self.write(models_yaml({"r": {"upstreams": [r.url]},
                                "t": dict(tiny, slots="2")}))
        mark = len(s.lines)
        self.reload(s, r"models reloaded: 2 models; changed: t \(launch "
                       r"settings\)$")
        # The old llama-server held the stream when the reload came...
        s.wait_line(r"upstream \S+ \(from the configuration\) is going: no "
                    r"new work for it, 1 requests in flight there finish "
                    r"first$", start=mark)
        # ...and it finishes there, whole.
        x.read()
        self.assertTrue(x.done)

        def new_one_ready():
            ups = s.health().json()["upstreams"]
            return (len(ups) == 2 and ups[1]["state"] == "ready"
                    and ups[1]["pid"] != old_pid and ups[1]["slots"] == 2)
        st.wait_until(new_one_ready, SAFETY_NET_S, "t relaunched")
        st.wait_until(lambda: not st.pid_alive(old_pid), SAFETY_NET_S,
                      "the old llama-server stopped")
        got = st.request(s.port, "POST", "/v1/completions",
                         body={"model": "t", "prompt": "hi",
                               "max_tokens": MANAGED_TOKENS,
                               "temperature": 0}, timeout=SAFETY_NET_S)
        self.assertEqual(got.status, 200)
        self.assertEqual(got.json()["usage"]["completion_tokens"],
                         MANAGED_TOKENS)
        self.assertEqual(got.json()["choices"][0]["text"], x.text)

        # An idle-timeout given by a reload counts from then: t, unused,
        # stops.
        self.write(models_yaml({"r": {"upstreams": [r.url]},
                                "t": dict(tiny, slots="2",
                                          **{"idle-timeout": "1"})}))
        mark = len(s.lines)
        self.reload(s, r"models reloaded: 2 models; changed: t "
                       r"\(idle-timeout\)$")
        s.wait_line(r"model t: stopping \(idle-timeout passed\)$",
                    start=mark, timeout=SAFETY_NET_S)
        st.wait_until(lambda: s.health().json()["models"][1]["state"] ==
                      "stopped", SAFETY_NET_S, "t stopped")
        self.assertEqual(s.stop(), 0)

    def test_a_config_path_that_is_a_fifo_is_refused_and_sigterm_works(self):
        """The file turned into a FIFO (issue 41, item 5): a reload is
        refused with one line at once, rather than its worker waiting for
        a writer for ever (every later reload held behind it, and the
        shutdown too); sluice serves meanwhile, reloads again once the file
        is back, and stops on SIGTERM (the second ends the drain the
        first began)."""
        r = self.mock()
        self.write(models_yaml({"r": {"upstreams": [r.url]}}))
        s = self.sluice("--config", self.path)
        os.remove(self.path)
        os.mkfifo(self.path)
        self.reload(s, r"error SIGHUP: keys and models not reloaded, the old "
                       r"ones stay: --config %s: cannot read it: not a "
                       r"regular file \(a FIFO\)$" % self.path)
        self.assert_answers(s, "r", "r1", r.url)
        os.remove(self.path)
        self.write(models_yaml({"r": {"upstreams": [r.url],
                                      "aliases": ["again"]}}))
        self.reload(s, r"models reloaded: 1 model; changed: r \(aliases\)$")
        self.assert_answers(s, "again", "r2", r.url)
        # A stream holds the drain the first SIGTERM starts; the second
        # ends it.
        x = Stream(s.port, "r", LONG)
        self.assertEqual(x.status, 200)
        x.read(1)
        mark = len(s.lines)
        s.proc.send_signal(signal.SIGTERM)
        s.wait_line(r"info  draining: waiting up to", start=mark)
        s.proc.send_signal(signal.SIGTERM)
        s.wait_line(r"warn  received Terminated again; stopping now$",
                    start=mark)
        self.assertEqual(s.wait_exit(SAFETY_NET_S), 0)
        # Cut short, not waited for.
        try:
            x.read()
        except EOFError:
            pass
        self.assertFalse(x.done)


if __name__ == "__main__":
    st.main()

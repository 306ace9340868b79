"""A load nobody waits for is cancelled (issue 32, item 3): a model loaded
on demand whose requests all left (their clients gone, or their
queue-timeout passed) stops loading, its llama-server gone, and a later
request loads it again; a model with preload: true goes on loading.

The loads are held by a llama-server wrapper: while the file
hold-NAME exists in the test's directory, the model whose --alias is NAME
does not start loading (a slow start, injected), so that "before it is
ready" is a state the test holds, not a race it hopes to win."""

import os
import re
import stat

import promcheck
import sluice_test as st
import test_models as tm

WRAPPER = """#!/bin/sh
# llama-server, held before it starts while %(dir)s/hold-ALIAS exists.
alias=
prev=
for a; do
	[ "$prev" = --alias ] && alias=$a
	prev=$a
done
while [ -e "%(dir)s/hold-$alias" ]; do sleep 0.05; done
exec %(real)s "$@"
"""


class LoadCancel(tm.WithDirect):

    def setUp(self):
        super().setUp()
        self.wrapper = os.path.join(self.tmp, "llama-server")
        with open(self.wrapper, "w") as f:
            f.write(WRAPPER % {"dir": self.tmp,
                               "real": st.llama_server_path()})
        os.chmod(self.wrapper, stat.S_IRWXU)

    def hold(self, name):
        open(os.path.join(self.tmp, "hold-" + name), "w").close()

    def release(self, name):
        os.unlink(os.path.join(self.tmp, "hold-" + name))

    def pid(self, s, name):
        ups = [u for u in s.health().json()["upstreams"]
               if u["name"] == name]
        return ups[0].get("pid") if ups else None

    def cancelled(self, s, name):
        r = s.get("/metrics", headers={"Authorization": "Bearer adm"})
        self.assertEqual(r.status, 200, r.body)
        m = promcheck.check(r.body.decode())
        return promcheck.value(m, "sluice_model_loads_cancelled_total",
                               model=name)

    def wait_loading(self, s, name):
        """Waits until `name` is starting with one request queued; returns
        its llama-server's pid (the held wrapper, execing it later)."""
        st.wait_until(lambda: self.model_doc(s, name)["queued"] == 1 and
                      self.states(s)[name] == "starting" and
                      self.pid(s, name), 60,
                      "%s to be loading for its request" % name)
        return self.pid(s, name)

    def ask_and_leave(self, s, name):
        """A client asks for `name`, waits until it loads, and leaves;
        returns the loading llama-server's pid."""
        c = st.RawClient(s.port)
        c.request("POST", "/completion", {"model": name, "prompt": "x",
                                          "n_predict": 2})
        pid = self.wait_loading(s, name)
        c.close()
        return pid

    def test_a_load_whose_client_left_stops_unless_preload(self):
        s = self.sluice("--llama-server", self.wrapper, "--admin-key", "adm",
                        "--config", tm.config(self.tmp,
                                              slow="    preload: false"))
        st.wait_until(lambda: self.states(s)["tiny"] == "ready", 60,
                      "tiny to be ready")
        # tiny preloads; stopped by the admin, a request loads it again
        # on demand, yet it is still a preload model.
        r = s.post("/models/unload", {"model": "tiny"},
                   headers={"Authorization": "Bearer adm"})
        self.assertEqual(r.status, 200, r.body)
        st.wait_until(lambda: self.states(s)["tiny"] == "stopped", 30,
                      "tiny to stop")
        self.hold("tiny")
        self.hold("slow")
        tiny_pid = self.ask_and_leave(s, "tiny")
        slow_pid = self.ask_and_leave(s, "slow")
        # slow's client left after tiny's: slow's grace had passed for
        # tiny's too once slow is cancelled.
        s.wait_line(r"model slow: stopping \(load cancelled, nobody waits "
                    r"for it: its last request's client left\)")
        st.wait_until(lambda: not st.pid_alive(slow_pid), 30,
                      "slow's held llama-server to exit")
        st.wait_until(lambda: self.states(s)["slow"] == "stopped", 30,
                      "slow to be stopped")
        self.assertEqual(self.cancelled(s, "slow"), 1)
        # preload: tiny goes on loading, nothing of it cancelled.
        self.assertEqual(self.states(s)["tiny"], "starting")
        self.assertTrue(st.pid_alive(tiny_pid))
        self.assertEqual(self.cancelled(s, "tiny"), 0)
        self.assertNotIn("model tiny: stopping (load", s.output())
        self.release("tiny")
        self.assert_served_by(s, "tiny")
        self.assertEqual(self.pid(s, "tiny"), tiny_pid)
        # A later request loads slow again, and is served.
        self.release("slow")
        self.assert_served_by(s, "slow")
        self.assertNotEqual(self.pid(s, "slow"), slow_pid)
        starts = re.findall(r"model slow: starting \(a request needs it\)",
                            s.output())
        self.assertEqual(len(starts), 2, s.output())
        self.assertEqual(self.cancelled(s, "slow"), 1)
        self.assertEqual(s.stop(), 0)

    def test_a_load_whose_request_timed_out_stops(self):
        s = self.sluice("--llama-server", self.wrapper, "--admin-key", "adm",
                        "--config",
                        tm.config(self.tmp, tiny="    preload: false\n"
                                  "    queue-timeout: 1s"))
        st.wait_until(lambda: self.states(s)["slow"] == "ready", 60,
                      "slow to be ready")
        self.hold("tiny")
        r = s.post("/completion", {"model": "tiny", "prompt": "x",
                                   "n_predict": 2}, timeout=60)
        self.assertEqual(r.status, 503, r.body)
        self.assertEqual(r.json()["error"]["type"], "unavailable_error")
        s.wait_line(r"model tiny: stopping \(load cancelled, nobody waits "
                    r"for it: its last request's queue-timeout passed\)")
        pid = [int(p) for p in re.findall(r"started llama-server\[(\d+)\]",
                                          s.output())][-1]
        st.wait_until(lambda: not st.pid_alive(pid), 30,
                      "tiny's held llama-server to exit")
        st.wait_until(lambda: self.states(s)["tiny"] == "stopped", 30,
                      "tiny to be stopped")
        self.assertEqual(self.cancelled(s, "tiny"), 1)
        self.assertEqual(self.states(s)["slow"], "ready")
        self.assertEqual(s.stop(), 0)


    def test_an_abandoned_load_makes_room_before_a_ready_model(self):
        third = ("  third:\n    model: %s\n    slots: 1\n    ctx-size: %d\n"
                 "    args: [%s]\n    preload: false\n"
                 % (st.MODEL_TINY, tm.TINY_CTX,
                    ", ".join(st.LLAMA_ONE_THREAD)))
        s = self.sluice("--llama-server", self.wrapper, "--admin-key", "adm",
                        "--config",
                        tm.config(self.tmp, top="max-loaded: 2",
                                  slow="    preload: false", more=third))
        st.wait_until(lambda: self.states(s)["tiny"] == "ready", 60,
                      "tiny to be ready")
        self.hold("slow")
        slow_pid = self.ask_and_leave(s, "slow")
        # third needs the room of one of the two running: slow's load,
        # which nobody waits for, goes rather than tiny, which is ready
        # (the least recently used). Had slow's grace passed before
        # third's request came, slow was cancelled already: the same end.
        r = s.post("/completion", {"model": "third", "prompt": "x",
                                   "n_predict": 2}, timeout=60)
        self.assertEqual(r.status, 200, r.body)
        s.wait_line(r"model slow: stopping \(load cancelled, nobody waits "
                    r"for it: its last request's client left"
                    r"(; --max-loaded 2: room for third)?\)")
        st.wait_until(lambda: not st.pid_alive(slow_pid), 30,
                      "slow's held llama-server to exit")
        self.assertEqual(self.states(s), {"tiny": "ready", "slow": "stopped",
                                          "third": "ready"})
        self.assertEqual(self.cancelled(s, "slow"), 1)
        self.assertNotIn("model tiny: stopping", s.output())
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    st.main()

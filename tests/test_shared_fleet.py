#!/usr/bin/env python3
"""Several sluices, and other clients, in front of one llama-server without
splitting its slots: sluice reads how busy llama-server is (its /metrics,
src/fleet/occupancy.c) and sends only what it has room for, plus at most one
request to wait in llama-server's own queue. The tests assert what happens,
never how long it takes."""

import json
import re
import select
import threading

import sluice_test as st

SLOTS = 2
# The loaded test's llama-server: with as many slots as sluices' requests
# could fill each, llama-server's queue would hold (sluices - 1) * slots
# requests if each sluice counted only its own.
LOADED_SLOTS = 4
# Long enough that a wave of requests is still running while the test
# looks; the tiny demo model makes them quick anyway.
TOKENS = 400
# Answers the tiny demo model ends well within a poll's settling time
# (SL_OCCUPANCY_SETTLE_MS, 50 ms), yet long enough to overlap when sent
# together; and enough of them that they outlast the first poll.
SHORT_TOKENS = 64
SHORT_REQUESTS = 24
# A prompt that the slow demo model reads for seconds (about 2,400
# tokens), long past a few polls, and the context each slot needs for it.
LONG_PROMPT = "hello " * 400
LONG_PROMPT_CTX = 4096


def llama_metrics(ls):
    """(requests_processing, requests_deferred) as llama-server tells."""
    text = st.request(ls.port, "GET", "/metrics", timeout=5).body.decode()
    def value(name):
        m = re.search(r"^llamacpp:%s (\S+)$" % name, text, re.M)
        return int(float(m.group(1)))
    return value("requests_processing"), value("requests_deferred")


def llama_counter(ls, name):
    text = st.request(ls.port, "GET", "/metrics", timeout=5).body.decode()
    return float(re.search(r"^llamacpp:%s (\S+)$" % name, text,
                           re.M).group(1))


def polls_ok(sl):
    text = sl.get("/metrics").body.decode()
    return sum(int(float(v)) for v in re.findall(
        r'^sluice_upstream_occupancy_polls_total\{[^}]*result="ok"\} (\S+)$',
        text, re.M))


def queue_depth(sl):
    text = sl.get("/metrics").body.decode()
    return sum(int(float(v)) for v in
               re.findall(r"^sluice_queue_depth\{[^}]*\} (\S+)$", text, re.M))


def completion(port, n=TOKENS, stream=False, timeout=120):
    body = json.dumps({"prompt": "hello", "n_predict": n, "stream": stream,
                       "temperature": 0})
    return st.request(port, "POST", "/completion", body=body,
                      headers={"Content-Type": "application/json"},
                      timeout=timeout)


class Sampler(threading.Thread):
    """Samples llama-server's occupancy until stopped."""

    def __init__(self, ls):
        super().__init__(daemon=True)
        self.ls = ls
        self.samples = []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            self.samples.append(llama_metrics(self.ls))
            self.done.wait(0.01)

    def stop(self):
        self.done.set()
        self.join()
        return self.samples


class HeldStream:
    """A client holding one slot with a stream, of llama-server itself or
    through a sluice, until closed (llama-server stops a stream at its next
    token then). With wait=False it does not wait for the answer to start
    (a request that sluice queues)."""

    def __init__(self, port, headers=None, wait=True, prompt="hello"):
        self.client = st.RawClient(port, timeout=60)
        body = json.dumps({"prompt": prompt, "n_predict": 100000,
                           "stream": True}).encode()
        self.client.request("POST", "/completion", body,
                            dict(headers or {},
                                 **{"Content-Type": "application/json"}))
        if wait:
            status, _ = self.client.read_head()
            assert status == 200, status

    def started(self):
        """Whether any byte of the answer came (llama-server sends a
        stream's head with its first token)."""
        return bool(self.client.buf) or bool(
            select.select([self.client.sock], [], [], 0)[0])

    def close(self):
        self.client.close()


def run_clients(port, n, results):
    """n requests to sluice at once, each from its own thread."""
    def one():
        results.append(completion(port).status)
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


class SharedFleet(st.TestCase):

    def start_llama_server(self, slots=SLOTS):
        self.ls = self.llama_server(st.MODEL_TINY, slots=slots,
                                    extra=("--metrics", "--threads-http",
                                           "32"))

    def sluices(self, n):
        return [self.sluice("--upstream", self.ls.url) for _ in range(n)]

    def test_two_sluices_share_the_slots_without_a_split(self):
        """Each sluice loaded with twice the slots: every request is
        served, none refused, and llama-server's own queue holds at most
        one request per sluice."""
        self.start_llama_server(LOADED_SLOTS)
        sluices = self.sluices(2)
        sampler = Sampler(self.ls)
        sampler.start()
        results, threads = [], []
        for sl in sluices:
            threads += run_clients(sl.port, 2 * LOADED_SLOTS, results)
        for t in threads:
            t.join()
        samples = sampler.stop()
        self.assertEqual(results, [200] * (4 * LOADED_SLOTS))
        # Loaded: the slots were seen full, so the bound below was tested.
        self.assertIn(LOADED_SLOTS, [p for p, _ in samples])
        self.assertLessEqual(max(d for _, d in samples), len(sluices))
        for sl in sluices:
            self.assertIn("occupancy", sl.upstream())

    def test_short_answers_fill_the_slots(self):
        """Answers that end sooner than a poll may follow a request sent
        still share llama-server's slots: a poll is held only so long for
        the requests sent meanwhile, so a reading comes, and sluice sends
        more than one at a time. (Each request sent used to hold the poll
        again, until the reading went stale and one went at a time.)"""
        self.start_llama_server(LOADED_SLOTS)
        sl = self.sluice("--upstream", self.ls.url)
        results = []

        def one():
            results.append(completion(sl.port, n=SHORT_TOKENS).status)
        threads = [threading.Thread(target=one)
                   for _ in range(SHORT_REQUESTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, [200] * SHORT_REQUESTS)
        self.assertGreater(polls_ok(sl), 0)
        # Every decode llama-server ran had one busy slot when they went
        # one at a time.
        self.assertGreater(llama_counter(self.ls, "n_busy_slots_per_decode"),
                           1)

    def test_a_race_for_the_last_slot_costs_a_wait(self):
        """Two idle sluices each send a request into llama-server's one
        free slot at once: one of them waits in llama-server's queue, and
        both are served."""
        self.start_llama_server()
        sluices = self.sluices(2)
        direct = HeldStream(self.ls.port)
        st.wait_until(lambda: llama_metrics(self.ls)[0] == 1, 30,
                      "the direct stream to hold a slot")
        results = []
        threads = []
        for sl in sluices:
            threads += run_clients(sl.port, 1, results)
        # Both went: one holds the last slot, the other waits for a slot
        # in llama-server's queue rather than failing.
        st.wait_until(lambda: llama_metrics(self.ls) == (SLOTS, 1), 30,
                      "the race's loser to wait in llama-server")
        direct.close()
        for t in threads:
            t.join()
        self.assertEqual(results, [200, 200])

    def test_the_urgent_reserve_holds_a_slot_both_sluices_keep(self):
        """Two sluices that keep one slot for urgent requests: with the
        others' requests seen, a sluice sends no normal request into
        llama-server's queue (it would take the kept slot), and an urgent
        request takes that slot while normal ones wait in both."""
        self.start_llama_server(LOADED_SLOTS)
        reserve = ("--urgent-reserve", "1")
        a, b = [self.sluice("--upstream", self.ls.url, *reserve)
                for _ in range(2)]
        held = [HeldStream(b.port) for _ in range(LOADED_SLOTS - 1)]
        st.wait_until(lambda: llama_metrics(self.ls)[0] == LOADED_SLOTS - 1,
                      30, "b's streams to hold all but the kept slot")
        waiting = [HeldStream(p, wait=False) for p in (a.port, b.port)]
        st.wait_until(lambda: (queue_depth(a), queue_depth(b)) == (1, 1),
                      30, "a normal request to wait in each sluice")
        polls = polls_ok(a)
        st.wait_until(lambda: polls_ok(a) > polls + 1, 30,
                      "a to read the others' requests")
        self.assertEqual(a.upstream()["occupancy"]["others"],
                         LOADED_SLOTS - 1)
        self.assertEqual(llama_metrics(self.ls), (LOADED_SLOTS - 1, 0))
        body = json.dumps({"prompt": "hello", "n_predict": 8,
                           "temperature": 0})
        r = st.request(a.port, "POST", "/completion", body=body,
                       headers={"Content-Type": "application/json",
                                "X-Priority": "urgent"}, timeout=60)
        self.assertEqual(r.status, 200)
        self.assertEqual(json.loads(r.body)["tokens_predicted"], 8)
        self.assertEqual((queue_depth(a), queue_depth(b)), (1, 1))
        for h in waiting + held:
            h.close()

    def test_a_request_not_started_keeps_the_extra_place(self):
        """The place a sluice may take in llama-server's queue is one
        request's: while one of its own has not started (llama-server is
        still reading its long prompt, and a reading cannot tell that from
        waiting in its queue), the next waits in sluice, though the queue
        reads empty. Once that one starts, the next takes the place."""
        self.ls = self.llama_server(st.MODEL_SLOW, slots=SLOTS,
                                    ctx=LONG_PROMPT_CTX,
                                    extra=("--metrics",))
        sl = self.sluice("--upstream", self.ls.url,
                         "--occupancy-poll", "100ms")
        direct = HeldStream(self.ls.port)
        st.wait_until(lambda: llama_metrics(self.ls)[0] == 1, 30,
                      "the direct stream to hold a slot")
        long = HeldStream(sl.port, wait=False, prompt=LONG_PROMPT)
        st.wait_until(lambda: llama_metrics(self.ls)[0] == SLOTS, 30,
                      "the long prompt to take the other slot")
        queued = HeldStream(sl.port, wait=False)
        st.wait_until(lambda: queue_depth(sl) == 1, 30,
                      "the next request to wait in sluice's queue")
        polls = polls_ok(sl)
        st.wait_until(lambda: polls_ok(sl) > polls + 1 or
                      queue_depth(sl) == 0, 30,
                      "sluice to read llama-server twice meanwhile")
        self.assertFalse(long.started(), "the prompt outlasted the polls")
        self.assertEqual(queue_depth(sl), 1)
        self.assertEqual(llama_metrics(self.ls), (SLOTS, 0))
        self.assertEqual(sl.upstream()["occupancy"]["unstarted"], 1)
        status, _ = long.client.read_head()
        self.assertEqual(status, 200)
        st.wait_until(lambda: llama_metrics(self.ls) == (SLOTS, 1), 30,
                      "the next to take the place in llama-server's queue")
        self.assertEqual(queue_depth(sl), 0)
        self.assertEqual(sl.upstream()["occupancy"]["unstarted"], 1)
        for h in (queued, long, direct):
            h.close()

    def test_a_third_client_makes_sluice_wait_in_its_own_queue(self):
        """While another client holds every slot, sluice's requests wait
        in sluice's queue (at most one in llama-server's), and all are
        served once that client is done."""
        self.start_llama_server()
        sl, = self.sluices(1)
        directs = [HeldStream(self.ls.port) for _ in range(SLOTS)]
        st.wait_until(lambda: llama_metrics(self.ls)[0] == SLOTS, 30,
                      "the direct streams to hold every slot")
        results = []
        threads = run_clients(sl.port, 2 * SLOTS, results)
        # sluice sees the others' requests, and holds all but one of its
        # own in its queue, that one in llama-server's.
        st.wait_until(lambda: sl.upstream()["occupancy"]["others"] == SLOTS,
                      30, "sluice to see the direct streams")
        st.wait_until(lambda: queue_depth(sl) == 2 * SLOTS - 1, 30,
                      "sluice to hold all but one request in its queue")
        self.assertEqual(llama_metrics(self.ls), (SLOTS, 1))
        # Its metrics tell llama-server's count beside its own.
        text = sl.get("/metrics").body.decode()
        labels = r'\{upstream="%s",model="[^"]*"' % re.escape(self.ls.url)
        self.assertRegex(text, r'\nsluice_upstream_slots_busy%s,'
                         r'source="llama-server"\} %d\n' % (labels, SLOTS))
        self.assertRegex(text, r'\nsluice_upstream_slots_busy%s,'
                         r'source="sluice"\} 1\n' % labels)
        self.assertRegex(text, r'\nsluice_upstream_requests_deferred%s\} '
                         r'1\n' % labels)
        self.assertRegex(text, r'\nsluice_upstream_occupancy_polls_total%s,'
                         r'result="ok"\} [1-9]' % labels)
        for d in directs:
            d.close()
        for t in threads:
            t.join()
        self.assertEqual(results, [200] * (2 * SLOTS))
        self.assertEqual(queue_depth(sl), 0)

    def test_polls_do_not_keep_a_left_plain_answer_running(self):
        """llama-server notices that a plain answer's client left only
        when a second passes without a result anywhere, and every poll of
        /metrics is a result. A long plain answer is left while another
        request waits behind it, so sluice polls: the answer still stops
        long before its end, and the waiting request is served."""
        self.start_llama_server(1)
        sl, = self.sluices(1)
        long_tokens = 100000
        left = st.RawClient(sl.port, timeout=60)
        body = json.dumps({"prompt": "hello", "n_predict": long_tokens,
                           "temperature": 0}).encode()
        left.request("POST", "/completion", body,
                     {"Content-Type": "application/json"})
        st.wait_until(lambda: llama_metrics(self.ls)[0] == 1, 30,
                      "the long answer to take the slot")
        results = []
        threads = run_clients(sl.port, 1, results)
        st.wait_until(lambda: queue_depth(sl) == 1, 30,
                      "the second request to wait in sluice's queue")
        polls = polls_ok(sl)
        st.wait_until(lambda: polls_ok(sl) > polls, 30,
                      "sluice to poll while a request waits")
        left.close()
        for t in threads:
            t.join()
        self.assertEqual(results, [200])
        predicted = llama_counter(self.ls, "tokens_predicted_total")
        self.assertLess(predicted, long_tokens / 10)

    def test_a_poll_that_is_off_counts_only_sluices_own(self):
        """--occupancy-poll 0: sluice sends as many as it has slots for,
        whatever others hold (and llama-server queues them)."""
        self.start_llama_server()
        sl = self.sluice("--upstream", self.ls.url, "--occupancy-poll", "0")
        directs = [HeldStream(self.ls.port) for _ in range(SLOTS)]
        st.wait_until(lambda: llama_metrics(self.ls)[0] == SLOTS, 30,
                      "the direct streams to hold every slot")
        results = []
        threads = run_clients(sl.port, SLOTS, results)
        st.wait_until(lambda: llama_metrics(self.ls)[1] == SLOTS, 30,
                      "sluice's requests to wait in llama-server's queue")
        self.assertNotIn("occupancy", sl.upstream())
        for d in directs:
            d.close()
        for t in threads:
            t.join()
        self.assertEqual(results, [200] * SLOTS)


if __name__ == "__main__":
    st.main()

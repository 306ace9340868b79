"""sluice's queue against a real llama-server: priorities, the batching
window, admission control, queue deadlines, cancellation while queued."""

import concurrent.futures
import json
import os
import signal
import threading
import time

import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240


def client(port):
    return st.RawClient(port, timeout=SAFETY_NET_S)


def completion(prompt, n=20, stream=False):
    return {"prompt": prompt, "n_predict": n, "temperature": 0,
            "stream": stream}


def hold_the_slot(port, n=4000):
    """Starts a long stream that keeps the one slot busy; returns the client
    (close it to free the slot) once the first event has arrived."""
    c = client(port)
    c.request("POST", "/completion", completion("hold", n=n, stream=True))
    status, _ = c.read_head()
    assert status == 200
    next(c.chunks())
    return c


def queued(s):
    return s.health().json()["queued"]


class Priorities(st.TestCase):

    def test_urgent_requests_overtake_a_waiting_normal_one(self):
        # No aging: the normal request must not become urgent while the
        # others arrive on a slow machine.
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1",
                        "--aging-rate", "0")
        holder = hold_the_slot(s.port)
        statuses, lock = {}, threading.Lock()

        def send(rid, priority):
            r = s.post("/completion", completion(rid, n=4),
                       headers={"X-Priority": priority, "X-Request-Id": rid},
                       timeout=SAFETY_NET_S)
            with lock:
                statuses[rid] = r.status

        ids = ["normal", "urgent0", "urgent1", "urgent2"]
        threads = []
        for i, rid in enumerate(ids):
            t = threading.Thread(target=send, args=(
                rid, "normal" if rid == "normal" else "urgent"))
            t.start()
            threads.append(t)
            # Each is queued before the next is sent: the normal one first.
            st.wait_until(lambda: queued(s) == i + 1, SAFETY_NET_S,
                          "%s queued" % rid)
        holder.close()  # the slot frees: the queue decides who goes next
        for t in threads:
            t.join(SAFETY_NET_S)
        self.assertEqual(statuses, {rid: 200 for rid in ids})
        # The order sluice dispatched them in, from its access log.
        st.wait_until(lambda: len(s.access_order(ids)) == 4, SAFETY_NET_S,
                      "the four access log lines")
        order = s.access_order(ids)
        self.assertEqual(order[-1], "normal", order)
        self.assertEqual(s.stop(), 0)

    def test_priority_in_the_body_and_invalid_priorities(self):
        s = self.sluice("--model", st.MODEL_TINY)
        r = s.post("/completion", dict(completion("x", n=4), priority=2))
        self.assertEqual(r.status, 200)
        r = s.post("/v1/chat/completions",
                   {"messages": [{"role": "user", "content": "x"}],
                    "max_tokens": 4, "priority": "batch"})
        self.assertEqual(r.status, 200)
        for headers, body, where in (
                ({"X-Priority": "asap"}, completion("x"), "X-Priority"),
                ({"X-Priority": "-3"}, completion("x"), "X-Priority"),
                ({}, dict(completion("x"), priority="high"), '"priority"'),
                ({}, dict(completion("x"), priority=1000), '"priority"'),
                ({}, dict(completion("x"), priority=[1]), '"priority"')):
            with self.subTest(headers=headers, body=body):
                r = s.post("/completion", body, headers=headers)
                self.assertEqual(r.status, 400)
                self.assertIn(where, r.json()["error"]["message"])


def queue_ms(r):
    return int(r.header("X-Queue-Ms"))


class Window(st.TestCase):

    def test_queue_ms_with_and_without_the_window(self):
        # A window long enough that no stall of a busy machine compares
        # with it: the bounds below are fractions of it, not fixed times.
        window_ms = 1000
        s = self.sluice("--model", st.MODEL_TINY,
                        "--batch-window", "%dms" % window_ms)
        lone = s.post("/completion", completion("lone", n=4))
        self.assertEqual(lone.header("X-Batch-Size"), "1")
        # A lone normal request waits out the window, once...
        self.assertGreaterEqual(queue_ms(lone), window_ms - 1)
        self.assertLess(queue_ms(lone), 2 * window_ms)
        # ...an urgent one skips it.
        urgent = s.post("/completion", completion("now", n=4),
                        headers={"X-Priority": "urgent"})
        self.assertLess(queue_ms(urgent), window_ms / 2)
        # Streams carry both headers too.
        c = client(s.port)
        c.request("POST", "/completion", completion("s", n=4, stream=True))
        status, head = c.read_head()
        self.assertEqual(status, 200)
        self.assertGreaterEqual(int(head["x-queue-ms"]), window_ms - 1)
        self.assertEqual(head["x-batch-size"], "1")
        c.close()
        self.assertEqual(s.stop(), 0)

        # Without a window neither waits: far less than the window above.
        s = self.sluice("--model", st.MODEL_TINY, "--batch-window", "0")
        for prio in ("normal", "urgent"):
            r = s.post("/completion", completion("x", n=4),
                       headers={"X-Priority": prio})
            self.assertLess(queue_ms(r), window_ms / 2, prio)

    def test_requests_within_one_window_leave_together(self):
        # A window far longer than sending eight requests takes, even on
        # a busy machine: closing early is what keeps the wait short.
        window_ms = 10000
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "8",
                        "--batch-window", "%dms" % window_ms)
        clients = [client(s.port) for _ in range(8)]
        for i, c in enumerate(clients):  # all eight within the window
            c.request("POST", "/completion", completion("r%d" % i, n=4))
        sizes = []
        for c in clients:
            status, head, body = c.read_response()
            self.assertEqual(status, 200)
            sizes.append(int(head["x-batch-size"]))
            self.assertLess(int(head["x-queue-ms"]), window_ms / 2)
            c.close()
        # Eight arrivals filled eight free slots: one batch, closed early.
        self.assertEqual(sizes, [8] * 8)


class AutoWindow(st.TestCase):
    """The default window, auto: it holds a request only while free slots
    are contested."""

    def test_a_lone_request_waits_for_no_window(self):
        # The same lone requests under auto (the default) and under the
        # old fixed window of 50 ms: only the fixed window holds them.
        fixed_ms = 50
        waits = {}
        for window in ("auto", "%dms" % fixed_ms):
            args = ("--model", st.MODEL_TINY)
            if window != "auto":
                args += ("--batch-window", window)
            s = self.sluice(*args)
            waits[window] = []
            for i in range(3):
                r = s.post("/completion", completion("lone%d" % i, n=4),
                           timeout=SAFETY_NET_S)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("X-Batch-Size"), "1")
                waits[window].append(queue_ms(r))
            self.assertEqual(s.stop(), 0)
        fixed = waits["%dms" % fixed_ms]
        self.assertGreaterEqual(min(fixed), fixed_ms - 1, waits)
        self.assertLess(max(waits["auto"]), min(fixed), waits)

    def test_contested_slots_gather_a_batch_and_urgent_goes_first(self):
        # Three slots, all held; two batch and two normal requests wait,
        # then an urgent stream that will keep its slot. No aging: classes
        # stay what they were however slow the machine.
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "3",
                        "--aging-rate", "0", "--log-level", "debug")
        holders = [hold_the_slot(s.port) for _ in range(3)]
        waiting = {}
        for i, (rid, prio) in enumerate([("b0", "batch"), ("b1", "batch"),
                                         ("n0", "normal"), ("n1", "normal"),
                                         ("u0", "urgent")]):
            c = client(s.port)
            c.request("POST", "/completion",
                      completion(rid, n=4000 if rid == "u0" else 4,
                                 stream=rid == "u0"),
                      headers={"X-Priority": prio, "X-Request-Id": rid})
            waiting[rid] = c
            st.wait_until(lambda: queued(s) == i + 1, SAFETY_NET_S,
                          "%s queued" % rid)
        # One slot frees: the urgent request, the last to come, takes it
        # at once, alone, while the four others still wait.
        holders[0].close()
        status, head = waiting["u0"].read_head()
        self.assertEqual(status, 200)
        self.assertEqual(head["x-batch-size"], "1")
        self.assertEqual(queued(s), 4)
        # Two slots free together, contested by four requests of two
        # classes: the window gathers, and the two normal ones leave as
        # one batch, ahead of the batch requests that came first.
        # Together: llama-server is paused until sluice has told it of
        # both leaves, so that it ends both in one step, not one each side
        # of a window (50 ms at most) that a busy machine can outlast.
        pid = s.health().json()["upstreams"][0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            holders[1].close()
            holders[2].close()
            s.wait_lines(r"client left", 3, timeout=SAFETY_NET_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        answers = {}
        for rid in ("n0", "n1"):
            status, head, _ = waiting[rid].read_response()
            self.assertEqual(status, 200, rid)
            answers[rid] = head
        self.assertEqual([answers[rid]["x-batch-size"] for rid in
                          ("n0", "n1")], ["2", "2"], answers)
        waiting["u0"].close()
        for rid in ("b0", "b1"):
            status, head, _ = waiting[rid].read_response()
            self.assertEqual(status, 200, rid)
            # Came first, left later: waited at least as long.
            self.assertGreaterEqual(int(head["x-queue-ms"]),
                                    int(answers["n0"]["x-queue-ms"]))
        for c in waiting.values():
            c.close()
        self.assertEqual(s.stop(), 0)


class Admission(st.TestCase):

    def test_burst_beyond_max_queue_gets_429_and_the_rest_succeed(self):
        # The queue's wait is not what this checks: a busy machine's
        # llama-server must not turn queued requests into 503s.
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1",
                        "--max-queue", "20", "--queue-timeout", "600")
        clients = [client(s.port) for _ in range(200)]
        for i, c in enumerate(clients):
            c.request("POST", "/completion", completion("b%d" % i, n=4))

        def answer(c):
            status, head, body = c.read_response()
            c.close()
            return status, head, body

        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(answer, clients))
        ok = [a for a in answers if a[0] == 200]
        refused = [a for a in answers if a[0] == 429]
        self.assertEqual(len(ok) + len(refused), 200,
                         sorted(a[0] for a in answers))
        self.assertGreaterEqual(len(ok), 21)   # the queue and the slot
        self.assertGreater(len(refused), 100)
        for status, head, body in refused:
            self.assertGreaterEqual(int(head["retry-after"]), 1)
            err = json.loads(body)["error"]
            self.assertEqual(err["type"], "rate_limit_error")
            self.assertIn("--max-queue", err["message"])
        for status, head, body in ok:
            self.assertEqual(len(json.loads(body)["content"]) > 0, True)
        self.assertEqual(s.stop(), 0)

    # The access log's lines of the burst's answers, and of its refusals.
    ANSWERED = r" access .* path=/completion status=(200|429) "
    REFUSED = r" access .* path=/completion status=429 "

    def burst(self, s, n):
        """Sends n requests at once, each on its own connection; returns the
        clients."""
        clients = [client(s.port) for _ in range(n)]
        for i, c in enumerate(clients):
            c.request("POST", "/completion", completion("burst %d" % i, n=4))
        return clients

    def test_a_burst_the_free_slots_take_is_not_refused_by_a_window(self):
        # A fixed window gathers until the pending requests fill the free
        # slots; a queue of 2 would be full before 4 slots were, and the
        # rest of the burst refused while they stay free.
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "4",
                        "--max-queue", "2", "--batch-window", "10")
        clients = self.burst(s, 6)
        st.wait_until(lambda: s.count_lines(self.ANSWERED) == 6
                      or s.count_lines(self.REFUSED),
                      SAFETY_NET_S, "the burst's answers or a refusal")
        self.assertEqual(s.count_lines(self.REFUSED), 0)
        for c in clients:
            self.assertEqual(c.read_response()[0], 200)
            c.close()
        self.assertEqual(s.stop(), 0)

    def test_a_burst_after_a_quiet_spell_is_not_refused_for_a_poll(self):
        # A remote upstream's occupancy was never polled (or not lately):
        # one request goes, and the rest wait for the poll their waiting
        # starts. A queue of 2 fills meanwhile: the rest of a burst that
        # 4 free slots take would be refused. The mock's requests hang, so
        # that what each slot holds stays put until the test looks.
        m = self.mock_llama_server("--slots", "4", "--hang-rate", "1")
        s = self.sluice("--upstream", m.url, "--max-queue", "2")
        clients = self.burst(s, 6)
        st.wait_until(lambda: (m.busy_slots() == 4 and queued(s) == 2)
                      or s.count_lines(self.REFUSED),
                      SAFETY_NET_S, "4 requests upstream and 2 queued")
        self.assertEqual(s.count_lines(self.REFUSED), 0)
        # What the poll then reads is sluice's own: nothing more goes.
        st.wait_until(lambda: s.upstream()["occupancy"]["processing"] == 4,
                      SAFETY_NET_S, "a poll that reads the 4")
        self.assertEqual((m.busy_slots(), queued(s)), (4, 2))
        for c in clients:
            c.close()
        self.assertEqual(s.stop(), 0)

    def test_queue_timeout_gives_503_and_nothing_is_forwarded(self):
        ls = self.llama_server(st.MODEL_SLOW, slots=1, ctx=8192)
        s = self.sluice("--upstream", ls.url, "--queue-timeout", "1")
        holder = hold_the_slot(s.port)
        started = time.monotonic()
        r = s.post("/completion", completion("too late"), timeout=SAFETY_NET_S)
        waited = time.monotonic() - started
        self.assertEqual(r.status, 503)
        self.assertIn("waited", r.json()["error"]["message"])
        self.assertIn("--queue-timeout", r.json()["error"]["message"])
        self.assertGreaterEqual(queue_ms(r), 1000)
        self.assertGreaterEqual(waited, 1.0)
        holder.close()
        self.assertEqual(ls.count_lines(r"launch_slot_"), 1)


class Overload(st.TestCase):

    def test_urgent_request_displaces_the_least_important_when_full(self):
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1",
                        "--max-queue", "2")
        holder = hold_the_slot(s.port)
        waiting = [client(s.port) for _ in range(2)]
        for i, c in enumerate(waiting):
            c.request("POST", "/completion", completion("normal %d" % i, n=4))
            st.wait_until(lambda: queued(s) == i + 1, SAFETY_NET_S, "queued")
        # Full of normal requests: another is refused itself, since it
        # ranks below them (it came last)...
        r = s.post("/completion", completion("refused"), timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 429)
        self.assertNotIn("took this one's place", r.json()["error"]["message"])
        # ...but an urgent one takes the place of the least important,
        # the later of the two.
        urgent = client(s.port)
        urgent.request("POST", "/completion", completion("urgent", n=4),
                       headers={"X-Priority": "urgent"})
        status, head, body = waiting[1].read_response()
        self.assertEqual(status, 429)
        self.assertIn("took this one's place", json.loads(body)["error"]
                      ["message"])
        self.assertGreaterEqual(int(head["retry-after"]), 1)
        holder.close()
        self.assertEqual(urgent.read_response()[0], 200)
        self.assertEqual(waiting[0].read_response()[0], 200)
        for c in (urgent, *waiting):
            c.close()

    def test_urgent_reserve_keeps_a_slot_for_urgent_requests(self):
        # No aging: the normal request stays normal however long the urgent
        # one takes on a busy machine, so the kept slot stays kept.
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "2",
                        "--urgent-reserve", "1", "--batch-window", "0",
                        "--aging-rate", "0")
        holder = hold_the_slot(s.port)
        # One slot is free, but it is kept: a normal request waits...
        normal = client(s.port)
        normal.request("POST", "/completion", completion("normal", n=4))
        st.wait_until(lambda: queued(s) == 1, SAFETY_NET_S,
                      "the normal one queued")
        # ...and an urgent one takes it, while the normal one still waits.
        r = s.post("/completion", completion("urgent", n=4),
                   headers={"X-Priority": "urgent"}, timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200)
        self.assertEqual(queued(s), 1)
        holder.close()
        status, head, _ = normal.read_response()
        normal.close()
        self.assertEqual(status, 200)
        self.assertGreater(int(head["x-queue-ms"]), 0)


class QueuedCancellation(st.TestCase):

    def test_client_leaving_while_queued_never_reaches_llama_server(self):
        ls = self.llama_server(st.MODEL_SLOW, slots=1, ctx=8192)
        s = self.sluice("--upstream", ls.url)
        holder = hold_the_slot(s.port)
        c = client(s.port)
        c.request("POST", "/completion", completion("never sent"))
        st.wait_until(lambda: queued(s) == 1, SAFETY_NET_S,
                      "the request queued")
        c.close()
        st.wait_until(lambda: queued(s) == 0, SAFETY_NET_S,
                      "the queue to empty")
        holder.close()
        # The next request goes through: llama-server saw two, not three.
        r = s.post("/completion", completion("after", n=4),
                   timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200)
        self.assertEqual(ls.count_lines(r"launch_slot_"), 2)
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    st.main()

"""sluice's queue against a real llama-server: priorities, the batching
window, admission control, queue deadlines, cancellation while queued."""

import concurrent.futures
import json
import threading
import time

import sluice_test as st


def completion(prompt, n=20, stream=False):
    return {"prompt": prompt, "n_predict": n, "temperature": 0,
            "stream": stream}


def hold_the_slot(port, n=4000):
    """Starts a long stream that keeps the one slot busy; returns the client
    (close it to free the slot) once the first event has arrived."""
    c = st.RawClient(port)
    c.request("POST", "/completion", completion("hold", n=n, stream=True))
    status, _ = c.read_head()
    assert status == 200
    next(c.chunks())
    return c


def queued(s):
    return s.health().json()["queued"]


class Priorities(st.TestCase):

    def test_urgent_requests_overtake_a_waiting_normal_one(self):
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1")
        holder = hold_the_slot(s.port)
        finished = []
        lock = threading.Lock()

        def send(name, priority):
            r = s.post("/completion", completion(name),
                       headers={"X-Priority": priority})
            assert r.status == 200, r.body
            with lock:
                finished.append(name)

        threads = [threading.Thread(target=send, args=("normal", "normal"))]
        threads[0].start()
        st.wait_until(lambda: queued(s) == 1, 10, "the normal one queued")
        for i in range(3):
            t = threading.Thread(target=send, args=("urgent%d" % i, "urgent"))
            t.start()
            threads.append(t)
        st.wait_until(lambda: queued(s) == 4, 10, "all four queued")
        holder.close()  # the slot frees: the queue decides who goes next
        for t in threads:
            t.join(60)
        self.assertEqual(len(finished), 4)
        self.assertEqual(finished[-1], "normal", finished)
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
        s = self.sluice("--model", st.MODEL_TINY)
        lone = s.post("/completion", completion("lone", n=4))
        self.assertEqual(lone.header("X-Batch-Size"), "1")
        # A lone normal request waits out the 50 ms window...
        self.assertGreaterEqual(queue_ms(lone), 49)
        self.assertLessEqual(queue_ms(lone), 150)
        # ...an urgent one skips it.
        urgent = s.post("/completion", completion("now", n=4),
                        headers={"X-Priority": "urgent"})
        self.assertLessEqual(queue_ms(urgent), 10)
        # Streams carry both headers too.
        c = st.RawClient(s.port)
        c.request("POST", "/completion", completion("s", n=4, stream=True))
        status, head = c.read_head()
        self.assertEqual(status, 200)
        self.assertGreaterEqual(int(head["x-queue-ms"]), 49)
        self.assertEqual(head["x-batch-size"], "1")
        c.close()
        self.assertEqual(s.stop(), 0)

        s = self.sluice("--model", st.MODEL_TINY, "--batch-window", "0")
        for prio in ("normal", "urgent"):
            r = s.post("/completion", completion("x", n=4),
                       headers={"X-Priority": prio})
            self.assertLessEqual(queue_ms(r), 10, prio)

    def test_requests_within_one_window_leave_together(self):
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "8",
                        "--batch-window", "200ms")
        clients = [st.RawClient(s.port) for _ in range(8)]
        for i, c in enumerate(clients):  # all eight within the window
            c.request("POST", "/completion", completion("r%d" % i, n=4))
        sizes = []
        for c in clients:
            status, head, body = c.read_response()
            self.assertEqual(status, 200)
            sizes.append(int(head["x-batch-size"]))
            c.close()
        # Eight arrivals filled eight free slots: one batch, closed early.
        self.assertEqual(sizes, [8] * 8)


class Admission(st.TestCase):

    def test_burst_beyond_max_queue_gets_429_and_the_rest_succeed(self):
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1",
                        "--max-queue", "20")
        clients = [st.RawClient(s.port) for _ in range(200)]
        for i, c in enumerate(clients):
            c.request("POST", "/completion", completion("b%d" % i, n=8))

        def answer(c):
            status, head, body = c.read_response()
            c.close()
            return status, head, body

        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(answer, clients))
        ok = [a for a in answers if a[0] == 200]
        refused = [a for a in answers if a[0] == 429]
        self.assertEqual(len(ok) + len(refused), 200)
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

    def test_queue_timeout_gives_503_and_nothing_is_forwarded(self):
        ls = self.llama_server(st.MODEL_SLOW, slots=1, ctx=8192)
        s = self.sluice("--upstream", ls.url, "--queue-timeout", "1")
        holder = hold_the_slot(s.port)
        started = time.monotonic()
        r = s.post("/completion", completion("too late"))
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
        waiting = [st.RawClient(s.port) for _ in range(2)]
        for i, c in enumerate(waiting):
            c.request("POST", "/completion", completion("normal %d" % i))
            st.wait_until(lambda: queued(s) == i + 1, 10, "queued")
        # Full of normal requests: another is refused itself, since it
        # ranks below them (it came last)...
        r = s.post("/completion", completion("refused"))
        self.assertEqual(r.status, 429)
        self.assertNotIn("took this one's place", r.json()["error"]["message"])
        # ...but an urgent one takes the place of the least important,
        # the later of the two.
        urgent = st.RawClient(s.port)
        urgent.request("POST", "/completion", completion("urgent"),
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
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "2",
                        "--urgent-reserve", "1", "--batch-window", "0")
        holder = hold_the_slot(s.port)
        # One slot is free, but it is kept: a normal request waits...
        normal = st.RawClient(s.port)
        normal.request("POST", "/completion", completion("normal"))
        st.wait_until(lambda: queued(s) == 1, 10, "the normal one queued")
        # ...and an urgent one takes it at once.
        r = s.post("/completion", completion("urgent"),
                   headers={"X-Priority": "urgent"})
        self.assertEqual(r.status, 200)
        self.assertLessEqual(queue_ms(r), 10)
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
        c = st.RawClient(s.port)
        c.request("POST", "/completion", completion("never sent"))
        st.wait_until(lambda: queued(s) == 1, 10, "the request queued")
        c.close()
        st.wait_until(lambda: queued(s) == 0, 5, "the queue to empty")
        holder.close()
        # The next request goes through: llama-server saw two, not three.
        r = s.post("/completion", completion("after"))
        self.assertEqual(r.status, 200)
        self.assertEqual(ls.count_lines(r"launch_slot_"), 2)
        self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    st.main()

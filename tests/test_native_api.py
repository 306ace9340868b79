"""The native APIs: /generate (prompt in, text and counts out) and /infer
(query in, response out)."""

import json
import threading

import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240


class Generate(st.RelayTestCase):

    sluice_args = ("--max-tokens-cap", "40")

    def direct(self, prompt, n):
        r = self.ls.post("/completion", {"prompt": prompt, "n_predict": n,
                                         "temperature": 0})
        return r.json()["content"]

    def test_generate(self):
        r = self.sl.post("/generate", {"prompt": "Hello", "max_tokens": 12,
                                       "temperature": 0})
        self.assertEqual(r.status, 200)
        doc = r.json()
        self.assertEqual(set(doc), {"id", "text", "tokens", "finish_reason",
                                    "queue_ms", "latency_ms", "batch_size"})
        self.assertEqual(doc["text"], self.direct("Hello", 12))
        self.assertEqual(doc["tokens"], 12)
        self.assertEqual(doc["finish_reason"], "length")
        self.assertEqual(doc["id"], r.header("X-Request-Id"))
        self.assertEqual(doc["batch_size"], int(r.header("X-Batch-Size")))
        self.assertEqual(doc["queue_ms"], int(r.header("X-Queue-Ms")))
        self.assertGreaterEqual(doc["latency_ms"], doc["queue_ms"])
        # Without max_tokens, 16 tokens; the cap bounds max_tokens.
        self.assertEqual(self.sl.post("/generate", {"prompt": "x"})
                         .json()["tokens"], 16)
        self.assertEqual(self.sl.post("/generate", {"prompt": "x",
                                                    "max_tokens": 500})
                         .json()["tokens"], 40)

    def test_generate_stream(self):
        c = st.RawClient(self.sl.port)
        c.request("POST", "/generate", {"prompt": "Hello", "max_tokens": 12,
                                        "temperature": 0, "stream": True})
        status, head = c.read_head()
        self.assertEqual(status, 200)
        self.assertEqual(head["content-type"], "text/event-stream")
        events = [st.sse_data(chunk) for _, chunk in c.events()]
        c.close()
        *deltas, totals = events
        self.assertTrue(all(set(e) == {"id", "text"} for e in deltas))
        self.assertEqual("".join(e["text"] for e in deltas),
                         self.direct("Hello", 12))
        self.assertEqual(totals["text"], "")
        self.assertEqual(totals["tokens"], 12)
        self.assertEqual(totals["finish_reason"], "length")
        self.assertEqual(totals["id"], head["x-request-id"])
        self.assertEqual(totals["batch_size"], int(head["x-batch-size"]))

    def test_generate_sampling_fields_and_stop(self):
        r = self.sl.post("/generate", {"prompt": "Hello", "max_tokens": 8,
                                       "temperature": 0.7, "top_p": 0.9,
                                       "top_k": 20, "seed": 7,
                                       "stop": ["zzzz"]})
        self.assertEqual(r.status, 200)
        again = self.sl.post("/generate", {"prompt": "Hello", "max_tokens": 8,
                                           "temperature": 0.7, "top_p": 0.9,
                                           "top_k": 20, "seed": 7,
                                           "stop": ["zzzz"]})
        self.assertEqual(again.json()["text"], r.json()["text"])  # seeded

    def test_generate_validation(self):
        cases = [
            ({}, '"prompt" is required'),
            ({"prompt": 5}, '"prompt" is required and must be a string'),
            ({"prompt": "x", "max_tokens": "9"}, '"max_tokens"'),
            ({"prompt": "x", "max_tokens": 0}, '"max_tokens"'),
            ({"prompt": "x", "temperature": "hot"}, '"temperature"'),
            ({"prompt": "x", "temperature": -1}, '"temperature"'),
            ({"prompt": "x", "top_p": 2}, '"top_p"'),
            ({"prompt": "x", "top_k": 1.5}, '"top_k"'),
            ({"prompt": "x", "seed": "s"}, '"seed"'),
            ({"prompt": "x", "stop": "end"}, '"stop"'),
            ({"prompt": "x", "stop": [1]}, '"stop"'),
            ({"prompt": "x", "stream": "yes"}, '"stream"'),
            ({"prompt": "x", "priority": "vip"}, '"priority"'),
        ]
        for body, message in cases:
            with self.subTest(body=body):
                r = self.sl.post("/generate", body)
                self.assertEqual(r.status, 400)
                self.assertIn(message, r.json()["error"]["message"])
        r = self.sl.post("/generate", "not json")
        self.assertEqual(r.status, 400)

    def test_infer(self):
        r = self.sl.post("/infer", {"query": "Hello"})
        self.assertEqual(r.status, 200)
        doc = r.json()
        self.assertEqual(set(doc), {"response", "id"})
        self.assertEqual(doc["id"], r.header("X-Request-Id"))
        self.assertGreater(len(doc["response"]), 0)
        r = self.sl.post("/infer", {"query": "Hello", "priority": 2})
        self.assertEqual(r.status, 200)
        for body, message in (({}, '"query" is required'),
                              ({"query": ["x"]}, '"query"'),
                              ({"query": "x", "priority": "top"},
                               '"priority"')):
            with self.subTest(body=body):
                r = self.sl.post("/infer", body)
                self.assertEqual(r.status, 400)
                self.assertIn(message, r.json()["error"]["message"])


class ClientText(st.RelayTestCase):
    """Request bodies are taken whole: NULs in text, priorities in full."""

    slots = 2

    def test_prompts_holding_nul_are_answered(self):
        # "\u0000" is valid JSON; llama-server takes it, so sluice must too.
        # Plain answers also need sluice to read upstream events that echo
        # the prompt with its NUL (JSON_ALLOW_NUL where events are parsed).
        prompt = "Hello\u0000world"
        cases = [
            ("/completion", {"prompt": prompt, "n_predict": 4}),
            ("/v1/completions", {"prompt": prompt, "max_tokens": 4}),
            ("/v1/chat/completions",
             {"messages": [{"role": "user", "content": prompt}],
              "max_tokens": 4}),
            ("/generate", {"prompt": prompt, "max_tokens": 4}),
            ("/infer", {"query": prompt}),
        ]
        for path, body in cases:
            for stream in (False, True):
                if path == "/infer" and stream:
                    continue
                with self.subTest(path=path, stream=stream):
                    r = self.sl.post(path, dict(body, stream=stream))
                    self.assertEqual(r.status, 200, r.body)
        # The whole prompt reaches llama-server, not the text up to the NUL:
        # it evaluates as many prompt tokens as when asked directly.
        body = {"prompt": prompt, "n_predict": 1, "cache_prompt": False}
        direct = self.ls.post("/completion", body).json()
        cut = self.ls.post("/completion", dict(body, prompt="Hello")).json()
        self.assertGreater(direct["tokens_evaluated"], cut["tokens_evaluated"])
        r = self.sl.post("/completion", body)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["tokens_evaluated"],
                         direct["tokens_evaluated"])

    def test_priorities_are_parsed_whole_and_strictly(self):
        expected = ("expected urgent, normal, batch or a number from 0 to "
                    "100, got ")
        long_bad = "1." + "0" * 66 + "x"
        for header, got in (("0x10", '"0x10"'), ("1e1", '"1e1"'),
                            ("inf", '"inf"'), ("+5", '"+5"'),
                            (long_bad, '"%s"...' % long_bad[:64])):
            with self.subTest(header=header):
                r = self.sl.post("/completion", {"prompt": "x",
                                                 "n_predict": 1},
                                 headers={"X-Priority": header})
                self.assertEqual(r.status, 400)
                self.assertEqual(r.json()["error"]["message"],
                                 "X-Priority: " + expected + got)
        for field, got in ((" 5", '" 5"'), ("0x10", '"0x10"'),
                           ("5 ", '"5 "'),
                           (long_bad, '"%s"...' % long_bad[:64]),
                           (150, "150")):
            with self.subTest(field=field):
                r = self.sl.post("/generate", {"prompt": "x",
                                               "max_tokens": 1,
                                               "priority": field})
                self.assertEqual(r.status, 400)
                self.assertEqual(r.json()["error"]["message"],
                                 '"priority": ' + expected + got)
        for header in ("7.5", "100", "batch"):
            with self.subTest(header=header):
                r = self.sl.post("/completion", {"prompt": "x",
                                                 "n_predict": 1},
                                 headers={"X-Priority": header})
                self.assertEqual(r.status, 200)
        r = self.sl.post("/generate", {"prompt": "x", "max_tokens": 1,
                                       "priority": 1e1})
        self.assertEqual(r.status, 200)


class NativePriorities(st.TestCase):

    def test_urgent_infer_and_generate_go_before_normal(self):
        # No aging: the normal request must not become urgent while the
        # others arrive on a slow machine. Few tokens each: the order is the
        # point, not the text.
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "1",
                        "--aging-rate", "0", "--max-tokens-cap", "8")
        # /completion is not capped: this stream holds the one slot.
        holder = st.RawClient(s.port, timeout=SAFETY_NET_S)
        holder.request("POST", "/completion", {"prompt": "hold",
                                               "n_predict": 4000,
                                               "stream": True})
        self.assertEqual(holder.read_head()[0], 200)
        next(holder.chunks())
        statuses, lock = {}, threading.Lock()

        def send(path, body, rid):
            r = s.post(path, body, headers={"X-Request-Id": rid},
                       timeout=SAFETY_NET_S)
            with lock:
                statuses[rid] = r.status

        requests = [
            ("/generate", {"prompt": "n", "max_tokens": 8, "priority": 1},
             "normal-generate"),
            ("/infer", {"query": "u", "priority": 2}, "urgent-infer"),
            ("/generate", {"prompt": "u", "max_tokens": 8,
                           "priority": "urgent"}, "urgent-generate"),
        ]
        threads = []
        for i, args in enumerate(requests):
            t = threading.Thread(target=send, args=args)
            t.start()
            threads.append(t)
            # Each is queued before the next is sent: the normal one first.
            st.wait_until(lambda: s.health().json()["queued"] == i + 1,
                          SAFETY_NET_S, "%s queued" % args[2])
        holder.close()  # the slot frees: the queue decides who goes next
        for t in threads:
            t.join(SAFETY_NET_S)
        ids = [rid for _, _, rid in requests]
        self.assertEqual(statuses, {rid: 200 for rid in ids})
        st.wait_until(lambda: len(s.access_order(ids)) == 3, SAFETY_NET_S,
                      "the three access log lines")
        order = s.access_order(ids)
        self.assertEqual(order[-1], "normal-generate", order)
        self.assertEqual(sorted(order[:2]), ["urgent-generate",
                                             "urgent-infer"])


if __name__ == "__main__":
    st.main()

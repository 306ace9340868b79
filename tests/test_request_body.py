"""Request bodies reach llama-server as the client wrote them: the exact
bytes an upstream receives (a capturing upstream), and llama-server's own
answers to numbers beyond 64 bits, straight and through sluice."""

import json

import sluice_test as st

# The bytes sluice adds to a plain OpenAI request it assembles.
STREAM_OPTIONS = b'"stream_options":{"include_usage":true}'


def smallest_answer(received):
    """The smallest valid answer for a request's endpoint: a JSON object, or
    for a stream a chat event, a usage event and [DONE]."""
    try:
        wants_stream = json.loads(received.body).get("stream") is True
    except ValueError:
        wants_stream = False
    if not wants_stream:
        return 200, "application/json", b'{"ok":true}'
    event = {"id": "c", "object": "chat.completion.chunk",
             "created": 1, "model": "m",
             "choices": [{"index": 0, "finish_reason": "stop",
                          "delta": {"content": "hi"}}]}
    usage = dict(event, choices=[], usage={
        "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
    sse = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n"
                   for e in (event, usage))
    return 200, "text/event-stream", sse + b"data: [DONE]\n\n"


class ExactBytes(st.TestCase):
    """What sluice sends upstream, byte for byte."""

    @classmethod
    def setUpClass(cls):
        cls.up = st.RecordingUpstream(answer=smallest_answer, total_slots=1)
        cls.sl = st.Sluice("--upstream", cls.up.url)
        # One that asks for plain answers as streams from the start.
        cls.on = st.Sluice("--upstream", cls.up.url,
                           "--stream-upstream", "on")

    @classmethod
    def tearDownClass(cls):
        assert cls.sl.stop() == 0
        assert cls.on.stop() == 0
        cls.up.stop()

    def send(self, path, body, via=None):
        r = st.request((via or self.sl).port, "POST", path, body=body,
                       headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 200, r.body[:300])
        got = self.up.received()[-1]
        self.assertEqual(got.target, path)
        return got.body

    def test_untouched_body_arrives_as_written(self):
        body = (b' {"input" : "caf\\u00e9 \\u0000",\n\t"x":0.1, "y":1e-7,'
                b' "seed":18446744073709551615, "z":-99999999999999999999,'
                b' "b":{"priority":1} } ')
        self.assertEqual(self.send("/v1/embeddings", body), body)
        stream = b'{"messages":[], "seed":18446744073709551615,"stream":true}'
        self.assertEqual(self.send("/v1/chat/completions", stream), stream)

    def test_only_sluices_changes_are_made(self):
        body = (b'{"priority":"batch", "temperature":0.1,'
                b' "seed":18446744073709551615 ,"messages":[]}')
        self.assertEqual(self.send("/v1/embeddings", body),
                         b'{"temperature":0.1, "seed":18446744073709551615'
                         b' ,"messages":[]}')
        # A plain chat request goes as written by default (auto, until
        # a client leaves one)...
        body = b'{"stream": false, "temperature":0.1, "messages":[]}'
        self.assertEqual(self.send("/v1/chat/completions", body), body)
        # ...and with --stream-upstream on it is asked for as a stream,
        # in place.
        self.assertEqual(self.send("/v1/chat/completions", body, self.on),
                         b'{"stream": true, "temperature":0.1, "messages":[],'
                         + STREAM_OPTIONS + b'}')

    def test_a_model_that_is_not_a_string_is_refused(self):
        # Before, such a body went upstream as if it named no model (the
        # default one): nothing of these may reach the upstream now.
        sent = len(self.up.received())
        for model, kind in (("5", "a number"), ('{"x":1}', "an object"),
                            ('["m"]', "an array"), ("true", "a boolean")):
            body = '{"model":%s,"messages":[]}' % model
            r = st.request(self.sl.port, "POST", "/v1/chat/completions",
                           body=body,
                           headers={"Content-Type": "application/json"})
            self.assertEqual(r.status, 400, r.body[:300])
            self.assertEqual(r.json()["error"], {
                "code": 400, "type": "invalid_request_error",
                "message": '"model" must be a string, the name of a '
                           'model; got %s' % kind})
        self.assertEqual(len(self.up.received()), sent)
        # null names no model, as llama-server reads it.
        body = b'{"model":null,"messages":[]}'
        self.assertEqual(self.send("/v1/chat/completions", body), body)


class HugeNumbers(st.RelayTestCase):
    """llama-server 0.7.0 takes integers beyond 64 bits (a seed of 2^64-1
    wraps to 4294967295, 99999999999999999999 gives 0) and refuses 1e400
    with a 400 of its own: through sluice the answers are the same."""

    def test_huge_seeds_are_llama_servers_to_read(self):
        # 2^64-1 becomes 4294967295, llama.cpp's "random seed", so only
        # the seed read is compared; 99999999999999999999 becomes 0, whose
        # text is fixed.
        for seed, read in (("18446744073709551615", 4294967295),
                           ("99999999999999999999", 0)):
            body = ('{"prompt":"Once upon a time","n_predict":8,'
                    '"seed":%s,"stream":true}' % seed)
            direct = self.ls.post("/completion", body)
            via = self.sl.post("/completion", body)
            self.assertEqual(direct.status, 200, direct.body[:300])
            self.assertEqual(via.status, 200, via.body[:300])
            self.assertEqual(final_seed(direct.body), read)
            self.assertEqual(final_seed(via.body), read)
        self.assertEqual(events_text(via.body), events_text(direct.body))

    def test_overflowing_real_gets_llama_servers_own_400(self):
        body = '{"prompt":"hi","n_predict":2,"seed":1e400}'
        for path in ("/completion", "/v1/completions"):
            direct = self.ls.post(path, body)
            via = self.sl.post(path, body)
            self.assertEqual(direct.status, 400, direct.body[:300])
            self.assertEqual(via.status, direct.status, via.body[:300])
            self.assertEqual(via.json(), direct.json())


def stream_events(raw):
    return [json.loads(line[6:]) for line in raw.decode().split("\n")
            if line.startswith("data: {")]


def events_text(raw):
    return "".join(e.get("content", "") for e in stream_events(raw))


def final_seed(raw):
    return stream_events(raw)[-1]["generation_settings"]["seed"]


if __name__ == "__main__":
    st.main()

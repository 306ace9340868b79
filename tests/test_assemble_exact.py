"""Assembled answers equal llama-server's own plain answers.

For a table of requests, each is sent to a real llama-server twice: plain,
and streamed as sluice asks for it (stream: true, and stream_options
include_usage on the OpenAI endpoints). The stream is fed to assemble_cat,
which runs sluice's assembler (src/json/assemble.c) on it; its answer must equal
the plain one member for member, in the same key order, with every number
and string written with the same bytes. Requests the assembler declares not
reproducible (sl_assemble_reproducible) are relayed plain by sluice: for
those the table checks that declaration instead.

Ignored, because they differ from one run to the next whatever sluice does:
  timings       measured durations (and cache_n, the cached prompt part);
  id, created   OpenAI answers' random id and clock second;
  id_slot       the slot that served the request (two slots here);
  tokens_cached, usage.prompt_tokens_details.cached_tokens: what the prompt
                cache held, which the request before changes.
The requests set cache_prompt: false so both runs compute the same numbers
(a cached prompt changes the batch shapes, and with them the last bits of
the probabilities).
"""

import json
import os
import subprocess

import sluice_test as st

ASSEMBLE_CAT = os.environ.get("SLUICE_ASSEMBLE_CAT") or os.path.join(
    os.path.dirname(st.SLUICE), "tests", "assemble_cat")

# Per-run values, by member name, at any depth.
PER_RUN = {"timings", "id", "created", "id_slot", "tokens_cached",
           "cached_tokens"}

NATIVE = ("/completion", "native")
NATIVE_ALIAS = ("/completions", "native")
TEXT = ("/v1/completions", "text")
CHAT = ("/v1/chat/completions", "chat")

HELLO = [{"role": "user", "content": "Hello"}]

# (name, endpoint, body, reproducible): bodies without stream fields.
TABLE = [
    ("native plain", NATIVE, {"prompt": "Hello", "n_predict": 6}, True),
    ("native alias", NATIVE_ALIAS, {"prompt": "Hello", "n_predict": 3}, True),
    ("native return_tokens", NATIVE,
     {"prompt": "Hello", "n_predict": 4, "return_tokens": True}, True),
    ("native n_probs", NATIVE, {"prompt": "Hello", "n_predict": 4,
                                "n_probs": 3}, True),
    ("native post_sampling_probs", NATIVE,
     {"prompt": "Hello", "n_predict": 3, "n_probs": 2,
      "post_sampling_probs": True}, True),
    ("native timings_per_token", NATIVE,
     {"prompt": "Hello", "n_predict": 3, "timings_per_token": True}, True),
    ("native prompt array", NATIVE,
     {"prompt": ["Hello", "Hi there", "x"], "n_predict": 3,
      "return_tokens": True}, True),
    ("native one-prompt array", NATIVE, {"prompt": ["Hello"],
                                         "n_predict": 2}, True),
    ("native n_cmpl", NATIVE, {"prompt": "Hello", "n_predict": 2,
                               "n_cmpl": 2}, True),
    ("native stop word", NATIVE,
     {"prompt": "Hello", "n_predict": 20, "stop": [" is"],
      "return_tokens": True}, True),
    ("native stop word with probabilities", NATIVE,
     {"prompt": "Hello", "n_predict": 20, "stop": [" is"],
      "n_probs": 1}, False),
    ("native stop word cut short", NATIVE,
     {"prompt": "Hello", "n_predict": 3, "stop": ["di"]}, True),
    ("native NUL and escapes in the prompt", NATIVE,
     {"prompt": "a\u0000b\"\\\n\u00e9", "n_predict": 3}, True),
    ("native response_fields", NATIVE,
     {"prompt": "Hello", "n_predict": 3,
      "response_fields": ["content", "generation_settings/n_predict",
                          "timings/prompt_n", "stop_type", "missing"]},
     True),
    ("native response_fields with n_probs", NATIVE,
     {"prompt": "Hello", "n_predict": 3, "n_probs": 2,
      "response_fields": ["content", "stop"]}, False),
    ("native response_fields tokens", NATIVE,
     {"prompt": "Hello", "n_predict": 3, "return_tokens": True,
      "response_fields": ["content", "tokens"]}, False),
    ("native response_fields generation_settings", NATIVE,
     {"prompt": "Hello", "n_predict": 3,
      "response_fields": ["generation_settings"]}, False),
    ("native __verbose asked by the client", NATIVE,
     {"prompt": "Hello", "n_predict": 3, "__verbose": True}, True),
    ("text plain", TEXT, {"prompt": "Hello", "max_tokens": 5}, True),
    ("text logprobs", TEXT, {"prompt": "Hello", "max_tokens": 3,
                             "logprobs": 2}, True),
    ("text n", TEXT, {"prompt": "Hello", "max_tokens": 2, "n": 2}, True),
    ("text prompt array", TEXT, {"prompt": ["Hello", "Hi"],
                                 "max_tokens": 3}, True),
    ("text stop word", TEXT, {"prompt": "Hello", "max_tokens": 20,
                              "stop": [" is"]}, True),
    ("text stop word with logprobs", TEXT,
     {"prompt": "Hello", "max_tokens": 20, "stop": [" is"],
      "logprobs": 1}, False),
    ("text return_tokens", TEXT, {"prompt": "Hello", "max_tokens": 2,
                                  "return_tokens": True}, False),
    ("chat plain", CHAT, {"messages": HELLO, "max_tokens": 5}, True),
    ("chat logprobs", CHAT, {"messages": HELLO, "max_tokens": 3,
                             "logprobs": True, "top_logprobs": 2}, True),
    ("chat stop word", CHAT, {"messages": HELLO, "max_tokens": 20,
                              "stop": ["N"]}, True),
    ("chat NUL in a message", CHAT,
     {"messages": [{"role": "user", "content": "a\u0000b"}],
      "max_tokens": 3}, True),
    ("chat stop word with logprobs", CHAT,
     {"messages": HELLO, "max_tokens": 20, "stop": "N",
      "logprobs": True}, False),
    ("chat n", CHAT, {"messages": HELLO, "max_tokens": 2, "n": 2}, False),
    ("chat tools", CHAT,
     {"messages": HELLO, "max_tokens": 3,
      "tools": [{"type": "function", "function": {"name": "get"}}]},
     False),
]


def ordered(text):
    """JSON text as nested lists of (key, value) pairs, numbers kept as the
    text they were written as, so order and spelling both count."""
    return json.loads(text, object_pairs_hook=list, parse_float=str,
                      parse_int=str)


def masked(doc):
    if isinstance(doc, list) and all(isinstance(p, tuple) and len(p) == 2
                                     for p in doc):
        return [(k, "<per-run>" if k in PER_RUN else masked(v))
                for k, v in doc]
    if isinstance(doc, list):
        return [masked(v) for v in doc]
    return doc


def assemble(kind, stream, return_tokens=False):
    argv = [ASSEMBLE_CAT, kind] + (["--return-tokens"] if return_tokens
                                   else [])
    p = subprocess.run(argv, input=stream, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode(), p.stderr.decode()


def reproducible(kind, body):
    p = subprocess.run([ASSEMBLE_CAT, kind, "--reproducible"],
                       input=json.dumps(body).encode(), capture_output=True,
                       timeout=60, check=True)
    return p.stdout.decode().strip() == "true"


def streamed(kind, body):
    body = dict(body, stream=True)
    if kind != "native":
        body["stream_options"] = {"include_usage": True}
    return body


class Exact(st.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.ls = st.LlamaServer(st.MODEL_TINY, slots=2, ctx=1024)
        # A verbose llama-server adds "__verbose" to OpenAI answers.
        cls.verbose = st.LlamaServer(st.MODEL_TINY, slots=2, ctx=1024,
                                     extra=("-v",))

    @classmethod
    def tearDownClass(cls):
        cls.ls.kill()
        cls.verbose.kill()

    def compare(self, server, name, endpoint, body, want_reproducible):
        path, kind = endpoint
        body = dict(body, temperature=0, seed=42, cache_prompt=False)
        self.assertEqual(reproducible(kind, body), want_reproducible, name)
        if not want_reproducible:
            return
        plain = server.post(path, body)
        self.assertEqual(plain.status, 200, name)
        self.assertTrue(plain.header("Content-Type")
                        .startswith("application/json"), name)
        stream = server.post(path, streamed(kind, body))
        self.assertEqual(stream.status, 200, name)
        self.assertTrue(stream.header("Content-Type")
                        .startswith("text/event-stream"), name)
        got, log = assemble(kind, stream.body,
                            body.get("return_tokens", False))
        self.assertIn("status 200", log)
        self.assertEqual(masked(ordered(got)),
                         masked(ordered(plain.body.decode())), name)

    def test_table(self):
        for name, endpoint, body, want in TABLE:
            with self.subTest(name):
                self.compare(self.ls, name, endpoint, body, want)

    def test_verbose_server(self):
        for name, endpoint, body, want in TABLE:
            if want and endpoint in (TEXT, CHAT, NATIVE):
                with self.subTest(name):
                    self.compare(self.verbose, name, endpoint, body, want)

    def test_numbers_are_written_as_llama_server_wrote_them(self):
        """The probabilities are floats with long expansions: each is the
        same text in the assembled answer as in llama-server's own."""
        body = {"prompt": "Hello", "n_predict": 3, "n_probs": 3,
                "temperature": 0, "seed": 42, "cache_prompt": False}
        plain = self.ls.post("/completion", body).body.decode()
        got, _ = assemble("native", self.ls.post(
            "/completion", streamed("native", body)).body)
        want = plain[plain.index('"completion_probabilities"'):]
        self.assertIn(want, got)
        self.assertIn('"temperature":0.0', got)
        self.assertIn('"top_p":0.949999988079071', got)

    def test_error_event_is_the_answer(self):
        """An upstream error event becomes the answer, with its code as
        the status (a prompt past the context is refused before the stream
        starts, so the event is fed as llama-server writes one)."""
        event = (b'data: {"error":{"code":400,"message":"x",'
                 b'"type":"invalid_request_error"}}\n\n')
        got, log = assemble("chat", event)
        self.assertEqual(got, event[6:-2].decode())
        self.assertIn("status 400", log)


if __name__ == "__main__":
    st.main()

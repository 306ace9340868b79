"""Client keys, the admin key and CORS, compared with llama-server's own.

llama-server 0.7.0 is the reference: its 401 bodies and its CORS preflight
are sent straight and through sluice, and must match. A recording upstream
shows that a client's key never leaves sluice. A headless Chromium loads a
page from another origin that streams a chat completion through sluice: the
text must be what llama-server streams for the same request, and with
--cors-origin none the browser must refuse it. Client addresses: the TCP
peer, or X-Forwarded-For from a trusted proxy, as the access log shows.
"""

import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import urllib.parse

import sluice_test as st

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 120

UPSTREAM_KEY = "upstream-only-key"
CLIENT_KEYS = ("client-key-1", "client-key-2")
FILE_KEY = "client-key-from-file"
ADMIN_KEY = "admin-key-9"
ORIGIN = "http://page.example:8000"

# What llama-server 0.7.0 answers a missing or wrong key, byte for byte.
BAD_KEY_BODY = (b'{"error":{"message":"Invalid API Key",'
                b'"type":"authentication_error","code":401}}')
ERROR_TYPE = "application/json; charset=utf-8"


def bearer(key):
    return {"Authorization": "Bearer " + key}


def send(port, method, path, body=None, headers=None):
    """One request; a dict body goes as JSON, a str verbatim."""
    return st.request(port, method, path, body=body, headers=headers,
                      timeout=SAFETY_NET_S)


def stream_text(port, path, body, headers=None):
    """The text a streamed answer on path carries, events joined."""
    conn = http.client.HTTPConnection("127.0.0.1", port,
                                      timeout=SAFETY_NET_S)
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers=dict(headers or {},
                                  **{"Content-Type": "application/json"}))
        r = conn.getresponse()
        assert r.status == 200, (r.status, r.read())
        raw = r.read().decode()
    finally:
        conn.close()
    text = ""
    for event in raw.split("\n\n"):
        for line in event.split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                text += st.delta_of(path, json.loads(line[6:]))
    return text


class Keys(st.TestCase):
    """One llama-server with a key of its own (the upstream key) and
    --props, and sluice in front with client keys and an admin key."""

    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                               "sluice-access-%d" % os.getpid())
        os.makedirs(cls.dir, exist_ok=True)
        cls.key_file = os.path.join(cls.dir, "keys")
        with open(cls.key_file, "w") as f:
            f.write("# one key per line\n\n%s\n" % FILE_KEY)
        cls.ls = st.LlamaServer(st.MODEL_TINY, slots=2, ctx=1024,
                                extra=("--api-key", UPSTREAM_KEY, "--props"))
        cls.sl = st.Sluice("--upstream", cls.ls.url,
                           "--upstream-api-key", UPSTREAM_KEY,
                           "--api-key", ",".join(CLIENT_KEYS),
                           "--api-key-file", cls.key_file,
                           "--admin-key", ADMIN_KEY, "--log-level", "debug")

    @classmethod
    def tearDownClass(cls):
        assert cls.sl.stop() == 0
        cls.ls.kill()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def both(self, method, path, body=None, direct=None, through=None):
        """The same request straight to llama-server (headers `direct`)
        and through sluice (headers `through`)."""
        return (send(self.ls.port, method, path, body, direct),
                send(self.sl.port, method, path, body, through))

    def test_401_equals_llama_servers(self):
        # Each case: the headers sent straight (with llama-server's key
        # where one is needed) and through sluice (with a client key).
        cases = [
            ({}, {}),
            (bearer("wrong"), bearer("wrong")),
            ({"X-Api-Key": "wrong"}, {"X-Api-Key": "wrong"}),
            # The scheme is case-sensitive, as in llama-server.
            ({"Authorization": "bearer " + UPSTREAM_KEY},
             {"Authorization": "bearer " + CLIENT_KEYS[0]}),
            # One space after the scheme, as in llama-server.
            ({"Authorization": "Bearer  " + UPSTREAM_KEY},
             {"Authorization": "Bearer  " + CLIENT_KEYS[0]}),
            ({"Authorization": "Basic " + UPSTREAM_KEY},
             {"Authorization": "Basic " + CLIENT_KEYS[0]}),
            # A wrong Authorization is not rescued by a right X-Api-Key.
            (dict(bearer("wrong"), **{"X-Api-Key": UPSTREAM_KEY}),
             dict(bearer("wrong"), **{"X-Api-Key": CLIENT_KEYS[0]})),
        ]
        requests = [("POST", "/completions", {"prompt": "hi"}),
                    ("POST", "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "hi"}]}),
                    ("GET", "/v1/models", None), ("GET", "/props", None),
                    ("GET", "/no/such/endpoint", None)]
        for method, path, body in requests:
            for direct, through in cases:
                with self.subTest(path=path, headers=through):
                    d, t = self.both(method, path, body,
                                     dict(direct, Origin=ORIGIN),
                                     dict(through, Origin=ORIGIN))
                    self.assertEqual(d.status, 401, d.body)
                    self.assertEqual(t.status, 401, t.body)
                    self.assertEqual(d.body, BAD_KEY_BODY)
                    self.assertEqual(t.body, d.body)
                    self.assertEqual(t.header("Content-Type"),
                                     d.header("Content-Type"))
                    self.assertEqual(t.header("Content-Type"), ERROR_TYPE)
                    self.assertEqual(
                        t.header("Access-Control-Allow-Origin"), ORIGIN)
                    self.assertEqual(
                        d.header("Access-Control-Allow-Origin"), ORIGIN)

    def test_every_key_form_answers_as_llama_server(self):
        body = {"prompt": "Once upon a time", "n_predict": 6,
                "temperature": 0}
        direct = send(self.ls.port, "POST", "/completion", body,
                      bearer(UPSTREAM_KEY))
        self.assertEqual(direct.status, 200, direct.body)
        forms = [bearer(CLIENT_KEYS[0]), bearer(CLIENT_KEYS[1]),
                 {"X-Api-Key": CLIENT_KEYS[1]}, bearer(FILE_KEY),
                 {"Authorization": CLIENT_KEYS[0]},  # no scheme, as there
                 {"X-Api-Key": "Bearer " + CLIENT_KEYS[0]},
                 # An empty Authorization leaves the choice to X-Api-Key.
                 {"Authorization": "", "X-Api-Key": FILE_KEY},
                 bearer(ADMIN_KEY)]  # the admin key serves clients too
        for headers in forms:
            with self.subTest(headers=headers):
                r = send(self.sl.port, "POST", "/completion", body, headers)
                self.assertEqual(r.status, 200, r.body)
                self.assertEqual(r.json()["content"],
                                 direct.json()["content"])

    def test_whitespace_around_a_key_is_not_part_of_it(self):
        # RFC 9110, 5.5: spaces and tabs after a field value are not part
        # of it; llama-server's HTTP library drops them too.
        body = {"prompt": "hi", "n_predict": 1}
        for pad in (" ", "\t", " \t "):
            for name, scheme in (("Authorization", "Bearer "),
                                 ("X-Api-Key", "")):
                with self.subTest(name=name, pad=pad):
                    d, t = self.both(
                        "POST", "/completion", body,
                        {name: scheme + UPSTREAM_KEY + pad},
                        {name: scheme + CLIENT_KEYS[0] + pad})
                    self.assertEqual(d.status, 200, d.body)
                    self.assertEqual(t.status, 200, t.body)

    def test_the_upstream_key_is_not_a_client_key(self):
        r = send(self.sl.port, "GET", "/v1/models", None,
                 bearer(UPSTREAM_KEY))
        self.assertEqual(r.status, 401)
        self.assertEqual(r.body, BAD_KEY_BODY)

    def test_health_checks_are_public(self):
        for path in ("/health", "/ready", "/v1/health"):
            with self.subTest(path=path):
                r = send(self.sl.port, "GET", path)
                self.assertEqual(r.status, 200, r.body)
                self.assertEqual(r.json()["status"], "ok")
        # llama-server agrees on the one both serve.
        self.assertEqual(send(self.ls.port, "GET", "/v1/health").status, 200)
        # Another method on a health check's path is a wrong method, not
        # a question for a key (llama-server: 404 there, without a key).
        for path in ("/health", "/v1/health"):
            with self.subTest(path=path, method="POST"):
                r = send(self.sl.port, "POST", path, {})
                self.assertEqual(r.status, 405, r.body)
                self.assertEqual(send(self.ls.port, "POST", path, {}).status,
                                 404)

    def test_metrics_need_the_admin_key_when_one_is_set(self):
        for headers, status in (({}, 401), (bearer("wrong"), 401),
                                (bearer(CLIENT_KEYS[0]), 403),
                                (bearer(ADMIN_KEY), 200)):
            with self.subTest(headers=headers):
                r = send(self.sl.port, "GET", "/metrics", None, headers)
                self.assertEqual(r.status, status, r.body)
                if status == 403:
                    err = r.json()["error"]
                    self.assertEqual(err["type"], "permission_error")
                    self.assertEqual(err["code"], 403)
                    self.assertEqual(err["message"],
                                     "GET /metrics needs the admin key")
                    self.assertEqual(r.header("Content-Type"), ERROR_TYPE)
        r = send(self.sl.port, "GET", "/metrics", None, bearer(ADMIN_KEY))
        self.assertIn("sluice_", r.body.decode())

    def test_admin_actions_need_the_admin_key(self):
        for headers, status in (({}, 401), (bearer("wrong"), 401),
                                (bearer(CLIENT_KEYS[0]), 403),
                                ({"X-Api-Key": FILE_KEY}, 403)):
            with self.subTest(headers=headers):
                r = send(self.sl.port, "POST", "/props", {}, headers)
                self.assertEqual(r.status, status, r.body)
                if status == 401:
                    self.assertEqual(r.body, BAD_KEY_BODY)
                else:
                    self.assertEqual(r.json(), {"error": {
                        "message": "POST /props needs the admin key",
                        "type": "permission_error", "code": 403}})
        direct = send(self.ls.port, "POST", "/props", {},
                      bearer(UPSTREAM_KEY))
        self.assertEqual(direct.status, 200, direct.body)
        r = send(self.sl.port, "POST", "/props", {}, bearer(ADMIN_KEY))
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json(), direct.json())

    def test_preflight_equals_llama_servers_and_needs_no_key(self):
        headers = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                   "Access-Control-Request-Headers": "Authorization"}
        for path in ("/completions", "/v1/chat/completions"):
            with self.subTest(path=path):
                d, t = self.both("OPTIONS", path, None, headers, headers)
                self.assertEqual(d.status, 200)
                self.assertEqual(t.status, d.status)
                self.assertEqual(t.body, b"")
                for name in ("Access-Control-Allow-Origin",
                             "Access-Control-Allow-Credentials",
                             "Access-Control-Allow-Methods",
                             "Access-Control-Allow-Headers"):
                    self.assertEqual(t.header(name), d.header(name), name)
                self.assertEqual(t.header("Access-Control-Allow-Origin"),
                                 ORIGIN)
                self.assertEqual(t.header("Access-Control-Allow-Headers"),
                                 "*")
                # sluice's addition: browsers keep the answer two hours.
                self.assertEqual(t.header("Access-Control-Max-Age"), "7200")

    def test_keys_are_never_logged(self):
        send(self.sl.port, "GET", "/v1/models", None, bearer("guess-key-77"))
        send(self.sl.port, "POST", "/props", {}, bearer(CLIENT_KEYS[1]))
        send(self.sl.port, "GET", "/metrics", None, bearer(ADMIN_KEY))
        self.sl.wait_line(r"access id=\S+ .*/metrics")
        log = self.sl.output()
        self.assertIn("access: POST /props refused: not the admin key", log)
        for secret in CLIENT_KEYS + (FILE_KEY, ADMIN_KEY, UPSTREAM_KEY,
                                     "guess-key-77"):
            self.assertNotIn(secret, log)


class Sources(st.TestCase):
    """Keys from the environment and a file; refusals without an admin
    key. A mock upstream: nothing here generates."""

    def test_keys_from_the_environment_and_a_file(self):
        mock = self.mock_llama_server()
        path = os.path.join(self.tmp, "keys")
        with open(path, "w") as f:
            f.write("file-key-1\r\n# retired: old-key\n  file-key-2  \n")
        s = self.sluice("--upstream", mock.url, "--api-key-file", path,
                        env={"SLUICE_API_KEY": "env-key-1, env-key-2",
                             "SLUICE_ADMIN_KEY": "env-admin"})
        for key, status in (("env-key-1", 200), ("env-key-2", 200),
                            ("file-key-1", 200), ("file-key-2", 200),
                            ("env-admin", 200), ("old-key", 401),
                            ("env-key-1, env-key-2", 401), ("", 401)):
            with self.subTest(key=key):
                r = send(s.port, "GET", "/v1/models", None, bearer(key))
                self.assertEqual(r.status, status, r.body)
        r = send(s.port, "POST", "/props", {}, bearer("env-key-1"))
        self.assertEqual(r.status, 403)

    def test_without_an_admin_key_admin_actions_are_refused(self):
        mock = self.mock_llama_server()
        s = self.sluice("--upstream", mock.url, "--api-key", "k1")
        message = ("POST /props is an admin action, and this sluice has no "
                   "admin key (--admin-key): it refuses every admin action")
        for headers, status in (({}, 401), (bearer("k1"), 403)):
            r = send(s.port, "POST", "/props", {}, headers)
            self.assertEqual(r.status, status, r.body)
        self.assertEqual(r.json()["error"]["message"], message)
        # /metrics then follows the client keys.
        self.assertEqual(send(s.port, "GET", "/metrics").status, 401)
        self.assertEqual(
            send(s.port, "GET", "/metrics", None, bearer("k1")).status, 200)
        # With no key of any kind set, everything is open but admin actions.
        s2 = self.sluice("--upstream", mock.url)
        self.assertEqual(send(s2.port, "GET", "/v1/models").status, 200)
        self.assertEqual(send(s2.port, "GET", "/metrics").status, 200)
        r = send(s2.port, "POST", "/props", {})
        self.assertEqual(r.status, 403)
        self.assertEqual(r.json()["error"]["message"], message)

    def test_the_upstream_never_sees_a_clients_key(self):
        rec = self.recording_upstream(answer=st.models_or_completion)
        s = self.sluice("--upstream", rec.url, "--api-key", "client-secret",
                        "--upstream-api-key", "up-secret",
                        "--stream-upstream", "off")
        self.assertEqual(send(s.port, "GET", "/v1/models", None,
                              bearer("client-secret")).status, 200)
        self.assertEqual(send(s.port, "POST", "/v1/completions",
                              {"prompt": "x", "max_tokens": 1},
                              {"X-Api-Key": "client-secret",
                               "Origin": ORIGIN}).status, 200)
        st.wait_until(lambda: len(rec.received()) >= 2,
                      SAFETY_NET_S, "both requests upstream")
        for _, path, message, _ in rec.received():
            headers = message.items()
            with self.subTest(path=path):
                names = [k.lower() for k, _ in headers]
                self.assertIn(("Authorization", "Bearer up-secret"),
                              headers)
                self.assertEqual(names.count("authorization"), 1)
                self.assertNotIn("x-api-key", names)
                self.assertNotIn("origin", names)
                for _, v in headers:
                    self.assertNotIn("client-secret", v)


class UpstreamKey(st.TestCase):
    """An upstream that wants a key sluice does not have answers /health
    (public) but 401 to everything sluice would relay: it is not ready,
    and the log says why (it was "ready", "assuming 4 slots")."""

    def test_an_upstream_that_refuses_sluice_is_not_ready(self):
        ls = self.llama_server(st.MODEL_TINY, slots=1, ctx=512,
                               extra=("--api-key", UPSTREAM_KEY))
        for args, why in (
                ((), r"it wants an API key; give sluice "
                     r"--upstream-api-key"),
                (("--upstream-api-key", "wrong"),
                 r"it refuses sluice's key \(--upstream-api-key\)")):
            with self.subTest(args=args):
                s = self.sluice("--upstream", ls.url, *args,
                                wait_ready=False)
                s.wait_line(r"upstream %s is down: /props answered 401: %s"
                            % (re.escape(ls.url), why))
                self.assertEqual(s.ready_status(), 503)
                self.assertEqual(s.upstream()["state"], "down")
                self.assertEqual(s.count_lines(r"assuming \d+ slots?"), 0)
                r = s.post("/v1/completions", {"prompt": "x",
                                               "max_tokens": 1})
                self.assertEqual(r.status, 503, r.body)
                self.assertEqual(s.stop(), 0)
        s = self.sluice("--upstream", ls.url, "--upstream-api-key",
                        UPSTREAM_KEY)
        self.assertEqual(s.upstream()["slots"], 1)


class ClientAddress(st.TestCase):
    """The client address in the access log: the TCP peer, or, from a
    --trusted-proxy, X-Forwarded-For read from the right past trusted
    addresses. A recording upstream: nothing here generates."""

    def setUp(self):
        super().setUp()
        self.n = 0

    def client_of(self, s, extra=b"", source="127.0.0.1", path="/health"):
        """Sends GET path from source with the raw header lines `extra`
        and returns the client its access line names."""
        self.n += 1
        rid = "xff-%d" % self.n
        with socket.socket() as c:
            c.settimeout(SAFETY_NET_S)
            c.bind((source, 0))
            c.connect(("127.0.0.1", s.port))
            c.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n"
                      b"X-Request-Id: " + rid.encode() + b"\r\n" + extra +
                      b"Connection: close\r\n\r\n")
            answer = b""
            while True:
                data = c.recv(65536)
                if not data:
                    break
                answer += data
        self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer[:200])
        m = s.wait_line(r" access id=%s client=(\S+) method=GET path=%s "
                        % (rid, path), timeout=SAFETY_NET_S)
        return m.group(1)

    def xff(self, *values):
        return b"".join(b"X-Forwarded-For: " + v + b"\r\n" for v in values)

    def test_without_trusted_proxies_the_peer_is_the_client(self):
        rec = self.recording_upstream()
        s = self.sluice("--upstream", rec.url)
        self.assertEqual(self.client_of(s), "127.0.0.1")
        self.assertEqual(self.client_of(s, source="127.0.0.2"), "127.0.0.2")
        # The header is not believed from anyone.
        self.assertEqual(self.client_of(s, self.xff(b"203.0.113.7")),
                         "127.0.0.1")

    def test_a_trusted_proxy_names_the_client(self):
        rec = self.recording_upstream()
        s = self.sluice("--upstream", rec.url, "--trusted-proxy",
                        "127.0.0.0/8")
        cases = [
            # No header: the peer.
            (b"", "127.0.0.1"),
            (self.xff(b"203.0.113.7"), "203.0.113.7"),
            # A spoofed chain: the first untrusted from the right.
            (self.xff(b"1.2.3.4, 127.0.0.5"), "1.2.3.4"),
            (self.xff(b"6.6.6.6, 1.2.3.4, 127.0.0.5"), "1.2.3.4"),
            # Several lines are one list.
            (self.xff(b"5.5.5.5, 127.0.0.3", b"127.0.0.4"), "5.5.5.5"),
            (self.xff(b"2001:db8::7"), "2001:db8::7"),
            (self.xff(b"::ffff:198.51.100.1"), "198.51.100.1"),
            # Garbage stops the walk: the last good address stands.
            (self.xff(b"not an address"), "127.0.0.1"),
            (self.xff(b"9.9.9.9, junk, 127.0.0.7"), "127.0.0.7"),
            (self.xff(b"9.9.9.9:443"), "127.0.0.1"),
            (self.xff(b"\xff\xfe\x80, ::::, " + b"1" * 4000), "127.0.0.1"),
            (self.xff(b",,, ,"), "127.0.0.1"),
        ]
        for extra, want in cases:
            with self.subTest(extra=extra[:60]):
                self.assertEqual(self.client_of(s, extra), want)
        # sluice lived through all of it.
        self.assertEqual(s.health().status, 200)

    def test_only_the_trusted_peers_header_counts(self):
        rec = self.recording_upstream()
        s = self.sluice("--upstream", rec.url,
                        env={"SLUICE_TRUSTED_PROXY": "10.0.0.0/8, 127.0.0.1"})
        extra = self.xff(b"203.0.113.9")
        self.assertEqual(self.client_of(s, extra), "203.0.113.9")
        self.assertEqual(self.client_of(s, extra, source="127.0.0.2"),
                         "127.0.0.2")
        # 127.0.0.2 is no trusted hop: the walk stops there.
        self.assertEqual(self.client_of(s, self.xff(b"203.0.113.9, "
                                                    b"127.0.0.2")),
                         "127.0.0.2")

    def test_x_forwarded_for_never_goes_upstream(self):
        rec = self.recording_upstream(answer=st.models_or_completion)
        s = self.sluice("--upstream", rec.url, "--trusted-proxy",
                        "127.0.0.1", "--stream-upstream", "off")
        r = send(s.port, "POST", "/v1/completions",
                 {"prompt": "x", "max_tokens": 1},
                 {"X-Forwarded-For": "203.0.113.9",
                  "X-Request-Id": "relayed-1"})
        self.assertEqual(r.status, 200, r.body)
        s.wait_line(r" access id=relayed-1 client=203\.0\.113\.9 ",
                    timeout=SAFETY_NET_S)
        got = rec.received()
        self.assertEqual([g.target for g in got], ["/v1/completions"])
        names = [k.lower() for k in got[0].headers.keys()]
        self.assertNotIn("x-forwarded-for", names)
        for v in got[0].headers.values():
            self.assertNotIn("203.0.113.9", v)


class Cors(st.TestCase):
    """Access-Control-Allow-Origin on every kind of answer."""

    def acao(self, r):
        return r.header("Access-Control-Allow-Origin")

    def test_every_answer_names_the_origin(self):
        mock = self.mock_llama_server("--tokens", "4")
        s = self.sluice("--upstream", mock.url, "--api-key", "k1")
        o = {"Origin": ORIGIN}
        key = dict(o, **bearer("k1"))
        ok = send(s.port, "GET", "/v1/models", None, key)
        self.assertEqual(ok.status, 200)
        missing = send(s.port, "GET", "/v1/nothing", None, key)
        self.assertEqual(missing.status, 404)
        self.assertEqual(missing.header("Content-Type"), ERROR_TYPE)
        refused = send(s.port, "GET", "/v1/models", None, o)
        self.assertEqual(refused.status, 401)
        for r in (ok, missing, refused):
            self.assertEqual(self.acao(r), ORIGIN)
            self.assertEqual(r.header("Vary"), "Origin")
        # Without an Origin: "*".
        self.assertEqual(self.acao(send(s.port, "GET", "/health")), "*")
        # A streamed answer.
        c = st.RawClient(s.port, timeout=SAFETY_NET_S)
        c.request("POST", "/v1/chat/completions",
                  {"messages": [{"role": "user", "content": "hi"}],
                   "stream": True}, key)
        status, head, _ = c.read_response()
        c.close()
        self.assertEqual(status, 200)
        self.assertEqual(head["content-type"], "text/event-stream")
        self.assertEqual(head["access-control-allow-origin"], ORIGIN)
        # A 503: the only upstream is down.
        mock.kill()
        st.wait_until(lambda: s.ready_status() == 503, SAFETY_NET_S,
                      "sluice to see its upstream gone")
        for r in (send(s.port, "GET", "/ready", None, o),
                  send(s.port, "POST", "/v1/completions",
                       {"prompt": "x"}, key)):
            self.assertEqual(r.status, 503, r.body)
            self.assertEqual(self.acao(r), ORIGIN)

    def test_a_list_of_origins(self):
        mock = self.mock_llama_server()
        s = self.sluice("--upstream", mock.url, "--cors-origin",
                        "http://a.test", "--cors-origin=" + ORIGIN)
        for origin in ("http://a.test", ORIGIN):
            with self.subTest(origin=origin):
                r = send(s.port, "GET", "/v1/models", None,
                         {"Origin": origin})
                self.assertEqual(self.acao(r), origin)
                self.assertEqual(r.header("Vary"), "Origin")
                p = send(s.port, "OPTIONS", "/v1/chat/completions", None,
                         {"Origin": origin,
                          "Access-Control-Request-Method": "POST"})
                self.assertEqual(p.status, 200)
                self.assertEqual(self.acao(p), origin)
                self.assertEqual(p.header("Access-Control-Allow-Methods"),
                                 "GET, POST, DELETE, OPTIONS")
        for origin in ("http://b.test", "http://a.test:80", None):
            with self.subTest(origin=origin):
                h = {"Origin": origin} if origin else {}
                r = send(s.port, "GET", "/v1/models", None, h)
                self.assertEqual(r.status, 200)
                self.assertIsNone(self.acao(r))
                self.assertEqual(r.header("Vary"), "Origin")
                p = send(s.port, "OPTIONS", "/v1/chat/completions", None, h)
                self.assertEqual(p.status, 200)
                self.assertEqual([k for k, _ in p.headers
                                  if k.lower().startswith("access-control")],
                                 [])

    # Origins a browser may send, each answered alike by llama-server's
    # --cors-origins localhost and sluice's --cors-origin localhost (0.7.0
    # measured: any port of localhost, 127.0.0.1 and [::1], http or
    # https; nothing else).
    LOCAL = ("http://localhost", "http://localhost:3000",
             "https://localhost:8443", "http://127.0.0.1:5173",
             "http://[::1]:8080")
    NOT_LOCAL = ("http://x.example", "http://localhost.evil.example",
                 "http://127.0.0.2", "http://LOCALHOST:1", "null",
                 "ftp://localhost")

    def test_localhost_as_llama_servers(self):
        ls = self.llama_server(st.MODEL_TINY, slots=1, ctx=512,
                               extra=("--cors-origins", "localhost"))
        s = self.sluice("--upstream", ls.url, "--cors-origin", "localhost")
        for origin in self.LOCAL + self.NOT_LOCAL:
            with self.subTest(origin=origin):
                h = {"Origin": origin}
                straight = send(ls.port, "GET", "/v1/models", None, h)
                through = send(s.port, "GET", "/v1/models", None, h)
                self.assertEqual(through.status, 200)
                self.assertEqual(self.acao(through), self.acao(straight))
                self.assertEqual(self.acao(through),
                                 origin if origin in self.LOCAL else None)
                self.assertEqual(through.header("Vary"), "Origin")
                p = send(s.port, "OPTIONS", "/v1/chat/completions", None,
                         dict(h, **{"Access-Control-Request-Method":
                                    "POST"}))
                self.assertEqual(p.status, 200)
                self.assertEqual(self.acao(p), self.acao(straight))
        # Without an Origin, no CORS header: llama-server sends none too.
        self.assertIsNone(self.acao(send(s.port, "GET", "/health")))

    def test_localhost_by_default_where_llama_server_runs_tools(self):
        # llama-server with tools (--tools, --agent, MCP servers) allows
        # only localhost origins unless --cors-origins says otherwise: so
        # does sluice when the llama-server it starts runs them.
        s = self.sluice("--model", st.MODEL_TINY, "--slots", "1",
                        "--ctx-size", "512", "--llama-arg=--tools",
                        "--llama-arg=get_info")
        s.wait_line(r"CORS: only pages on localhost, 127\.0\.0\.1 and "
                    r"\[::1\] may call sluice")
        # One slot, said so.
        s.wait_line(r"started llama-server\[\d+\] on \S+ \(1 slot, 512 "
                    r"tokens of context each\)")
        s.wait_line(r"upstream \S+ is ready with 1 slot$")
        tools = send(s.port, "GET", "/tools")
        self.assertEqual(tools.status, 200, tools.body)  # tools are on
        for origin in self.LOCAL + self.NOT_LOCAL:
            with self.subTest(origin=origin):
                r = send(s.port, "GET", "/v1/models", None,
                         {"Origin": origin})
                self.assertEqual(self.acao(r),
                                 origin if origin in self.LOCAL else None)
        # Said otherwise, as said.
        s2 = self.sluice("--model", st.MODEL_TINY, "--slots", "1",
                         "--ctx-size", "512", "--llama-arg=--tools",
                         "--llama-arg=get_info", "--cors-origin", "*")
        r = send(s2.port, "GET", "/v1/models", None,
                 {"Origin": "http://x.example"})
        self.assertEqual(self.acao(r), "http://x.example")
        self.assertEqual(s2.count_lines(r"CORS: only pages"), 0)

    def test_none_turns_cors_off(self):
        mock = self.mock_llama_server()
        s = self.sluice("--upstream", mock.url, "--cors-origin", "none")
        o = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
        for method, path in (("GET", "/v1/models"), ("GET", "/nothing"),
                             ("OPTIONS", "/v1/chat/completions")):
            with self.subTest(method=method, path=path):
                r = send(s.port, method, path, None, o)
                self.assertEqual([k for k, _ in r.headers
                                  if k.lower().startswith("access-control")
                                  or k.lower() == "vary"], [])
                if method == "OPTIONS":
                    self.assertEqual(r.status, 405)


PAGE = """<!doctype html>
<html><body><pre id="out">waiting</pre><script>
(async () => {
  const q = new URLSearchParams(location.search);
  const headers = {"Content-Type": "application/json",
                   "Authorization": "Bearer " + q.get("key")};
  let report;
  try {
    const r = await fetch(q.get("sluice") + "/v1/chat/completions", {
      method: "POST", headers, body: q.get("body")});
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "", text = "";
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      buf += decoder.decode(value, {stream: true});
      let end;
      while ((end = buf.indexOf("\\n\\n")) >= 0) {
        const event = buf.slice(0, end);
        buf = buf.slice(end + 2);
        for (const line of event.split("\\n")) {
          if (!line.startsWith("data: ") || line === "data: [DONE]")
            continue;
          const choice = JSON.parse(line.slice(6)).choices[0];
          if (choice && choice.delta.content) text += choice.delta.content;
        }
      }
    }
    document.getElementById("out").textContent = text;
    report = {ok: true, status: r.status,
              text: document.getElementById("out").textContent};
  } catch (e) {
    report = {ok: false, error: String(e)};
  }
  await fetch("/result", {method: "POST", body: JSON.stringify(report)});
})();
</script></body></html>
"""


class PageServer(http.server.BaseHTTPRequestHandler):
    """Serves PAGE and takes the page's report back (another origin than
    sluice's: another port)."""

    protocol_version = "HTTP/1.1"
    reports = []
    cond = threading.Condition()

    def do_GET(self):
        body = PAGE.encode() if self.path.startswith("/page") else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        report = json.loads(self.rfile.read(
            int(self.headers.get("Content-Length") or 0)))
        with PageServer.cond:
            PageServer.reports.append(report)
            PageServer.cond.notify_all()
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


class Browser(st.TestCase):
    """A page on another origin streams a chat completion through sluice
    in headless Chromium."""

    BODY = {"messages": [{"role": "user", "content": "Tell me a story"}],
            "stream": True, "temperature": 0, "max_tokens": 24}

    def setUp(self):
        super().setUp()
        self.chromium = shutil.which("chromium")
        if not self.chromium:
            self.fail("chromium not found: deploy/setup.sh --tests "
                      "installs it")
        self.page = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                    PageServer)
        threading.Thread(target=self.page.serve_forever, daemon=True).start()
        PageServer.reports.clear()

    def tearDown(self):
        self.page.shutdown()
        self.page.server_close()
        super().tearDown()

    def browse(self, sluice_port, key):
        """Runs the page in Chromium until it reports; returns the report."""
        query = "sluice=http://127.0.0.1:%d&key=%s&body=%s" % (
            sluice_port, key,
            urllib.parse.quote(json.dumps(self.BODY)))
        url = "http://127.0.0.1:%d/page.html?%s" % (
            self.page.server_address[1], query)
        proc = subprocess.Popen(
            [self.chromium, "--headless", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--user-data-dir=" + os.path.join(
                 self.tmp, "chromium-%d" % sluice_port), url],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            with PageServer.cond:
                if not PageServer.cond.wait_for(lambda: PageServer.reports,
                                                SAFETY_NET_S):
                    self.fail("the page never reported back")
                return PageServer.reports.pop()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def test_a_page_on_another_origin_streams_through_sluice(self):
        ls = self.llama_server(st.MODEL_TINY, slots=2, ctx=1024)
        expected = stream_text(ls.port, "/v1/chat/completions", self.BODY)
        self.assertTrue(expected)
        s = self.sluice("--upstream", ls.url, "--api-key", "browser-key")
        report = self.browse(s.port, "browser-key")
        self.assertEqual(report, {"ok": True, "status": 200,
                                  "text": expected})
        # A wrong key: the page can read the 401 (it names the origin).
        report = self.browse(s.port, "wrong")
        self.assertEqual(report, {"ok": True, "status": 401, "text": ""})
        # With CORS off, the browser refuses to let the page read it.
        off = self.sluice("--upstream", ls.url, "--api-key", "browser-key",
                          "--cors-origin", "none")
        report = self.browse(off.port, "browser-key")
        self.assertEqual(report, {"ok": False,
                                  "error": "TypeError: Failed to fetch"})


if __name__ == "__main__":
    st.main()

"""--upstream-client: sluice's own HTTP/1.1 client and libcurl relay the
same exchanges to the same answers, against a real llama-server; the native
client keeps one connection for requests that come in turn."""

import os
import socket

import sluice_test as st
from test_proxy import PROMPTS, body_for, plain_text, stream_text

PATHS = ("/completion", "/v1/completions", "/v1/chat/completions")


def upstream_local_ports(pid, upstream_port):
    """The local ports of pid's TCP connections to upstream_port."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].split(":")[1], 16)
            remote_port = int(fields[2].split(":")[1], 16)
            if remote_port == upstream_port and fields[9] in inodes:
                ports.add(local_port)
    return ports


# The largest segment sluice lets an upstream send it (SL_UPSTREAM_MSS,
# include/sluice/net/h1_client.h).
UPSTREAM_MSS = 8192


class SegmentSizes(st.RecordingUpstream):
    """A RecordingUpstream that notes, for each connection sluice opens to
    it, the largest segment the connection carries (TCP_MAXSEG: the least
    of what the two ends announced)."""

    def __init__(self, **kw):
        self.mss = []
        super().__init__(**kw)

    def process_request(self, request, client_address):
        self.mss.append(request.getsockopt(socket.IPPROTO_TCP,
                                           socket.TCP_MAXSEG))
        super().process_request(request, client_address)


class BothClients(st.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.ls = st.LlamaServer(st.MODEL_TINY, slots=2, ctx=2048)
        # Health checks (libcurl's) only at start: the connections seen
        # later are the relay's.
        common = ("--upstream", cls.ls.url, "--health-interval", "3600")
        cls.native = st.Sluice(*common, "--upstream-client", "native")
        cls.curl = st.Sluice(*common, "--upstream-client", "curl")

    @classmethod
    def tearDownClass(cls):
        assert cls.native.stop() == 0
        assert cls.curl.stop() == 0
        cls.ls.kill()

    def test_same_answers_as_llama_server(self):
        for path in PATHS:
            for prompt in PROMPTS[:3]:
                expected = plain_text(self.ls.port, path,
                                      body_for(path, prompt, False))
                for name, s in (("native", self.native),
                                ("curl", self.curl)):
                    with self.subTest(path=path, prompt=prompt,
                                      client=name):
                        self.assertEqual(
                            plain_text(s.port, path,
                                       body_for(path, prompt, False)),
                            expected)
                        text, _, _, _ = stream_text(
                            s.port, path, body_for(path, prompt, True))
                        self.assertEqual(text, expected)

    def test_native_reuses_its_connection(self):
        # llama-server 0.7.0 closes a connection after a streamed answer
        # (and sluice streams generations by default), but keeps it after
        # a plain one: /tokenize's, relayed as it comes.
        pid, port = self.native.proc.pid, self.ls.port
        # What is open before the first request is libcurl's (the health
        # check at start): this test runs first, and nothing else goes to
        # the upstream.
        before = upstream_local_ports(pid, port)
        seen = set()
        for i in range(10):
            r = self.native.post("/tokenize", {"content": PROMPTS[i]})
            self.assertEqual(r.status, 200)
            self.assertEqual(r.json(), st.request(
                port, "POST", "/tokenize", {"content": PROMPTS[i]}).json())
            # Kept after each answer, for the next request.
            kept = upstream_local_ports(pid, port) - before
            self.assertTrue(kept, "no connection kept after request %d" % i)
            seen |= kept
        # The whole answer is read before the client has it, so the next
        # request finds the connection idle: one for all ten.
        self.assertEqual(len(seen), 1, (before, seen))

    def test_relays_a_body_larger_than_one_write_takes(self):
        # Most of --max-body (1 MiB by default): more than a loopback
        # socket takes in one write before llama-server reads, so what
        # uv_try_write leaves is queued and must follow in order.
        words = " ".join(PROMPTS[i % 16] for i in range(80000))
        self.assertGreater(len(words), 900 * 1024)
        body = {"content": words[:900 * 1024]}
        want = st.request(self.ls.port, "POST", "/tokenize", body,
                          timeout=120).json()
        self.assertGreater(len(want["tokens"]), 100000)
        for name, s in (("native", self.native), ("curl", self.curl)):
            with self.subTest(client=name):
                r = s.post("/tokenize", body, timeout=120)
                self.assertEqual(r.status, 200, r.body[:300])
                self.assertEqual(r.json(), want)

    def test_upstream_segments_fit_a_small_window(self):
        # Over loopback a segment may be 64 KB. A stream held back by a
        # slow client closes the upstream's window, and when sluice reads
        # again the window may reopen smaller than that: Linux then sends
        # nothing until its next probe of the window, tens of seconds
        # later. So sluice announces smaller segments, both clients, for
        # its health checks as for what it relays.
        for client in ("native", "curl"):
            with self.subTest(client=client):
                up = SegmentSizes()
                self.addCleanup(up.stop)
                s = self.sluice("--upstream", up.url, "--upstream-client",
                                client)
                r = s.post("/tokenize", {"content": "x"})
                self.assertEqual(r.status, 200, r.body)
                self.assertEqual(up.targets("/tokenize"), ["/tokenize"])
                # The health check's connection (libcurl's), and the
                # native client's own (libcurl may relay on the check's).
                self.assertGreaterEqual(len(up.mss),
                                        2 if client == "native" else 1)
                for mss in up.mss:
                    self.assertLessEqual(mss, UPSTREAM_MSS, up.mss)


if __name__ == "__main__":
    st.main()

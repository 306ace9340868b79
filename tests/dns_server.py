"""A tiny DNS server on 127.0.0.1 for sluice's discovery tests: one UDP
socket that answers A and AAAA questions from a table the test changes as
it goes (RFC 1035's message format, written out here: it is test code, and
the standard library has no DNS).

Modes: "answer" (from the table: the addresses of the asked family, none
with NOERROR when the name has only the other family, NXDOMAIN for a name
not in the table), "drop" (no answer at all: the resolver times out) and
"servfail" (SERVFAIL for every question).
"""

import ipaddress
import socket
import struct
import threading

TYPE_A = 1
TYPE_AAAA = 28
CLASS_IN = 1
RCODE_NOERROR = 0
RCODE_SERVFAIL = 2
RCODE_NXDOMAIN = 3


def parse_question(msg):
    """(id, flags, name, qtype, end of the question) of a query, or None
    when it is not one this server can read."""
    if len(msg) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", msg[:6])
    if flags & 0x8000 or qdcount != 1:
        return None
    labels, pos = [], 12
    while True:
        if pos >= len(msg):
            return None
        n = msg[pos]
        pos += 1
        if n == 0:
            break
        if n & 0xC0 or pos + n > len(msg):
            return None  # a query's name is never compressed
        labels.append(msg[pos:pos + n].decode("ascii").lower())
        pos += n
    if pos + 4 > len(msg):
        return None
    qtype, qclass = struct.unpack("!HH", msg[pos:pos + 4])
    if qclass != CLASS_IN:
        return None
    return qid, flags, ".".join(labels), qtype, pos + 4


def build_answer(msg, qid, flags, qtype, question_end, rcode, addresses):
    """A response to `msg` with `rcode` and one record per address of the
    asked type (TTL 0: nothing is to be cached)."""
    records = b""
    count = 0
    for addr in addresses:
        ip = ipaddress.ip_address(addr)
        rtype = TYPE_A if ip.version == 4 else TYPE_AAAA
        if rtype != qtype:
            continue
        data = ip.packed
        # The name: a pointer to the question's, at offset 12.
        records += struct.pack("!HHHIH", 0xC00C, rtype, CLASS_IN, 0,
                               len(data)) + data
        count += 1
    # QR, the query's RD, RA, and the code.
    out_flags = 0x8000 | (flags & 0x0100) | 0x0080 | rcode
    header = struct.pack("!HHHHHH", qid, out_flags, 1, count, 0, 0)
    return header + msg[12:question_end] + records


class DnsServer:
    """The server, answering on its own thread from start to stop()."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.address = "127.0.0.1:%d" % self.port
        self._lock = threading.Lock()
        self._table = {}
        self._mode = "answer"
        self._queries = []  # (name, qtype, mode) of each query received
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def set(self, name, addresses):
        """`name` now has these addresses (a list of IPv4 and IPv6 texts);
        None removes it (NXDOMAIN)."""
        with self._lock:
            if addresses is None:
                self._table.pop(name.lower(), None)
            else:
                self._table[name.lower()] = list(addresses)

    def mode(self, mode):
        assert mode in ("answer", "drop", "servfail"), mode
        with self._lock:
            self._mode = mode

    def queries(self, name, mode=None):
        """How many questions for `name` came (in `mode`, or in any)."""
        with self._lock:
            return sum(1 for n, _, m in self._queries
                       if n == name.lower() and mode in (None, m))

    def _serve(self):
        while True:
            try:
                msg, peer = self.sock.recvfrom(4096)
            except OSError:
                return  # closed by stop()
            with self._lock:
                if self._stopping:
                    return
            q = parse_question(msg)
            if q is None:
                continue
            qid, flags, name, qtype, end = q
            with self._lock:
                mode = self._mode
                self._queries.append((name, qtype, mode))
                addresses = self._table.get(name)
            if mode == "drop":
                continue
            if mode == "servfail":
                reply = build_answer(msg, qid, flags, qtype, end,
                                     RCODE_SERVFAIL, [])
            elif addresses is None:
                reply = build_answer(msg, qid, flags, qtype, end,
                                     RCODE_NXDOMAIN, [])
            else:
                reply = build_answer(msg, qid, flags, qtype, end,
                                     RCODE_NOERROR, addresses)
            try:
                self.sock.sendto(reply, peer)
            except OSError:
                pass  # the resolver went away: nothing to tell

    def stop(self):
        with self._lock:
            self._stopping = True
        # A datagram to itself wakes the thread from recvfrom.
        try:
            self.sock.sendto(b"\0", ("127.0.0.1", self.port))
        except OSError:
            pass
        self._thread.join(5)
        self.sock.close()

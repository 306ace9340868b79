#!/usr/bin/env python3
"""A collector that takes every OTLP/HTTP export and answers 200 at once,
reading nothing of it: the far end of sluice's traces when what is measured
is sluice's own cost of tracing (bench/RESULTS.md, Traces).

    bench/otel-sink.py PORT
"""
import http.server
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])),
                                Sink).serve_forever()

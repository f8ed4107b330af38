"""A loopback HTTP receiver for push heartbeats (healthchecks.io's side of [[heartbeat]]), for tests."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A loopback HTTP server that records each GET's path; paths under /hang wait until released,
    under /garbled it answers no HTTP at all."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                outer.paths.append(self.path)
                if self.path.startswith("/hang"):
                    outer.release.wait(300)
                if self.path.startswith("/garbled"):  # no HTTP status line: urllib's BadStatusLine
                    self.wfile.write(b"HTTP/1.1 OK-ish\r\n\r\n")
                    return
                code = 404 if self.path.startswith("/missing") else 200
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

"""A webhook receiver for the OcrBatch callback on loopback (the operator runs as a local process):
it answers 500 to the first POST and 200 after, so a test sees the retry, and keeps every request."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """The callback's receiver: answers 500 to the first POST, 200 after; keeps every request."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(min(int(self.headers.get("Content-Length") or 0), 1 << 20))
                receiver.requests.append(({k: v for k, v in self.headers.items()}, body))
                self.send_response(500 if len(receiver.requests) == 1 else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/hooks/ocr"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

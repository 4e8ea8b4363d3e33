"""A small HTTP server in a thread that answers the worker's requests the way the OcrService's
/v1/ocr and /v1/chat/completions do (one page per request), for the worker's own tests: a page
whose body holds b"HANG" is never answered (the worker holds its document until it is killed),
one holding b"REFUSE" gets the server's 413; every answer may wait `delay` seconds (a batch that
lasts long enough to lose its storage mid-way). The runs against the real server and model are in
tests/server/test_batch_worker.py."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        time.sleep(self.server.delay)  # type: ignore[attr-defined]
        if b"HANG" in body:
            self.server.hung.wait()  # type: ignore[attr-defined]
            return
        if b"REFUSE" in body:
            status, answer = 413, {"error": {"message": "the image declares more than 64000000 pixels"}}
        elif self.path == "/v1/chat/completions":
            status, answer = 200, {"object": "chat.completion", "choices": [{"message": {"content": "ok"}}]}
        else:
            status, answer = 200, {"model": {"name": "m", "revision": "r"}, "pages": [{"text": "ok", "blocks": []}]}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class PageServer:
    def __init__(self, delay: float = 0.0) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.delay = delay  # type: ignore[attr-defined]  # seconds before each answer
        self.httpd.daemon_threads = True
        self.httpd.bodies = []  # type: ignore[attr-defined]
        self.httpd.hung = threading.Event()  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def bodies(self) -> list[bytes]:
        return self.httpd.bodies  # type: ignore[attr-defined]

    def __enter__(self) -> PageServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.hung.set()  # type: ignore[attr-defined]
        self.httpd.shutdown()
        self.httpd.server_close()

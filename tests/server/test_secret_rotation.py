"""Keys and certificates rotated in their mounted Secret files while clients keep sending: the real
server process re-reads them without a restart (ocr_server/runtime/credentials.py), and refuses bad new files.

The files are laid out and swapped the way kubelet updates a Secret volume (secret_volume.py).
"""

from __future__ import annotations

import re
import socket
import ssl
import threading
import time
from pathlib import Path

import httpx
import pytest

from ocr_server.runtime.credentials import POLL_SECONDS

from . import samples
from .conftest import ServerProcess, start_server
from .secret_volume import self_signed, write_secret_volume

pytestmark = pytest.mark.server

KEY_OLD, KEY_NEW, KEY_KEPT = "rotate-old-key-0001", "rotate-new-key-0002", "rotate-kept-key-0003"
# The poll interval, plus a second for a request in flight and a loaded machine.
RELOAD_BOUND = POLL_SECONDS + 3
PAGE = samples.png(64, 48, seed=5)


def _ocr(c: httpx.Client, key: str) -> int:
    return c.post("/v1/ocr", files={"file": ("p.png", PAGE, "image/png")},
                  headers={"Authorization": f"Bearer {key}"}).status_code


def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def _reloads(server: ServerProcess, secret: str, result: str, verify: ssl.SSLContext | None = None) -> float:
    """ocr_secret_reloads_total{secret, result} on the server's /metrics."""
    url = server.url.replace("http://", "https://") if verify else server.url
    text = httpx.get(url + "/metrics", verify=verify or False, timeout=10).text  # False: plain HTTP, no CA bundle
    m = re.search(rf'ocr_secret_reloads_total{{result="{result}",secret="{secret}"}} (\S+)', text)
    return float(m.group(1)) if m else 0.0


@pytest.fixture(scope="module")
def keyed(tiny_native, tmp_path_factory):
    """A server whose keys are API_KEYS_FILE in a Secret-like volume; the volume's directory."""
    tmp = tmp_path_factory.mktemp("keyed")
    vol = tmp / "api-keys-secret"
    write_secret_volume(vol, {"api-keys": f"{KEY_OLD}\n".encode()})
    server = start_server(tmp, {"MODEL_PATH": str(tiny_native), "API_KEYS_FILE": str(vol / "api-keys"),
                                "MAX_NEW_TOKENS": "4", "CACHE_ENTRIES": "0"})
    yield server, vol
    server.stop()


def _set_keys(server: ServerProcess, vol: Path, text: str, accepted: str) -> None:
    write_secret_volume(vol, {"api-keys": text.encode()})
    with server.client() as c:
        _until(lambda: _ocr(c, accepted) == 200, RELOAD_BOUND, f"{accepted} accepted")


def test_a_rotated_key_file_refuses_the_old_key_and_accepts_the_new_one_while_a_client_keeps_sending(keyed):
    """The client sends without pause and moves to the new key only once the old one is refused:
    every answer is a 200 but for that refusal, which comes within the reload bound."""
    server, vol = keyed
    _set_keys(server, vol, KEY_OLD, KEY_OLD)
    answers: list[tuple[float, str, int | str]] = []
    rotated = threading.Event()
    stop = threading.Event()
    rotated_at: list[float] = []

    def client() -> None:
        key = KEY_OLD
        with server.client(timeout=30) as c:
            while not stop.is_set():
                try:
                    status: int | str = _ocr(c, key)
                except httpx.HTTPError as exc:  # counted as a failure below, never retried
                    status = repr(exc)
                answers.append((time.monotonic(), key, status))
                if status == 401 and key == KEY_OLD and rotated.is_set():
                    key = KEY_NEW

    t = threading.Thread(target=client)
    t.start()
    try:
        _until(lambda: sum(1 for _, k, s in answers if k == KEY_OLD and s == 200) >= 2, 60,
               "two answers with the old key")
        write_secret_volume(vol, {"api-keys": f"{KEY_NEW}\n".encode()})
        rotated_at.append(time.monotonic())
        rotated.set()
        _until(lambda: sum(1 for _, k, s in answers if k == KEY_NEW and s == 200) >= 3, RELOAD_BOUND + 10,
               "three answers with the new key")
    finally:
        stop.set()
        t.join(30)
    refused = [a for a in answers if a[2] == 401]
    others = [a for a in answers if a[2] not in (200, 401)]
    print(f"\n{len(answers)} requests; the old key refused {refused[0][0] - rotated_at[0]:.2f}s after the swap")
    assert not others, others[:5]
    assert len(refused) == 1 and refused[0][1] == KEY_OLD and refused[0][0] > rotated_at[0], refused
    assert refused[0][0] - rotated_at[0] <= RELOAD_BOUND
    assert all(s == 200 for _, k, s in answers if k == KEY_NEW)
    assert sum(1 for t0, k, s in answers if k == KEY_OLD and s == 200 and t0 < rotated_at[0]) >= 1
    with server.client() as c:
        assert _ocr(c, KEY_OLD) == 401 and _ocr(c, KEY_NEW) == 200
    assert server.proc.poll() is None


@pytest.mark.parametrize("bad", ["", "short\n"], ids=["empty", "short key"])
def test_a_bad_new_key_file_keeps_the_loaded_keys_and_is_logged(keyed, bad):
    server, vol = keyed
    _set_keys(server, vol, KEY_KEPT, KEY_KEPT)
    failed = _reloads(server, "api_keys", "failed")
    write_secret_volume(vol, {"api-keys": bad.encode()})
    _until(lambda: _reloads(server, "api_keys", "failed") == failed + 1, RELOAD_BOUND, "the refusal counted")
    with server.client() as c:
        assert _ocr(c, KEY_KEPT) == 200  # never everyone locked out
        assert _ocr(c, "anything-at-all-123") == 401 and c.post(  # never auth off
            "/v1/ocr", files={"file": ("p.png", PAGE, "image/png")}).status_code == 401
    assert "the new" in server.log() and "is refused, the loaded one stays in use" in server.log()
    assert KEY_KEPT not in server.log()


# ---------- TLS ----------
class Tls:
    """A TLS server's address and the client context that trusts every certificate of the test."""

    def __init__(self, server: ServerProcess, vol: Path, certs: dict[int, tuple[bytes, bytes]]) -> None:
        self.server, self.vol, self.certs = server, vol, certs
        self.port = int(server.url.rsplit(":", 1)[1])
        self.context = ssl.create_default_context(cadata="".join(c.decode() for c, _ in certs.values()))

    def connect(self) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return self.context.wrap_socket(raw, server_hostname="127.0.0.1")

    def serial_of_new_connection(self) -> int:
        with self.connect() as s:
            return int(s.getpeercert()["serialNumber"], 16)

    def install(self, serial: int, key_of: int | None = None) -> None:
        cert, key = self.certs[serial]
        write_secret_volume(self.vol, {"tls.crt": cert, "tls.key": self.certs[key_of or serial][1]})


def get_health(s: ssl.SSLSocket) -> int:
    """GET /health on an open keep-alive connection; the status (the body is read whole)."""
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
    while len(body) < length:
        body += s.recv(4096)
    return int(head.split()[1])


@pytest.fixture(scope="module")
def tls(tiny_native, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    certs = {serial: self_signed(tmp / "certs", f"c{serial}", serial) for serial in (0x51, 0x52, 0x53, 0x54)}
    vol = tmp / "tls-secret"
    write_secret_volume(vol, {"tls.crt": certs[0x51][0], "tls.key": certs[0x51][1]})
    server = start_server(tmp, {"MODEL_PATH": str(tiny_native), "TLS_CERT_FILE": str(vol / "tls.crt"),
                                "TLS_KEY_FILE": str(vol / "tls.key"), "MAX_NEW_TOKENS": "4"}, wait_ready=False)
    t = Tls(server, vol, certs)
    try:
        _until(lambda: _https_health(t) == 200, 120, "HTTPS /health 200")
        yield t
    finally:
        server.stop()


def _https_health(t: Tls) -> int | None:
    if t.server.proc.poll() is not None:
        raise AssertionError(t.server.log()[-3000:])
    try:
        with t.connect() as s:
            return get_health(s)
    except OSError:
        return None


def test_a_renewed_certificate_is_served_to_new_connections_while_open_ones_keep_going(tls):
    tls.install(0x51)
    _until(lambda: tls.serial_of_new_connection() == 0x51, RELOAD_BOUND, "serial 0x51 served")
    kept = tls.connect()  # a keep-alive connection opened before the renewal
    assert get_health(kept) == 200
    failures: list[str] = []
    stop = threading.Event()

    def new_connections() -> None:
        while not stop.is_set():
            try:
                with tls.connect() as s:
                    if (status := get_health(s)) != 200:
                        failures.append(f"status {status}")
            except (OSError, ssl.SSLError) as exc:
                failures.append(repr(exc))

    t = threading.Thread(target=new_connections)
    t.start()
    try:
        renewed_at = time.monotonic()
        tls.install(0x52)
        _until(lambda: tls.serial_of_new_connection() == 0x52, RELOAD_BOUND, "serial 0x52 on a new connection")
        took = time.monotonic() - renewed_at
        for _ in range(5):
            assert get_health(kept) == 200  # the open connection goes on, on its old certificate
        assert int(kept.getpeercert()["serialNumber"], 16) == 0x51
    finally:
        stop.set()
        t.join(30)
        kept.close()
    print(f"\nthe renewed certificate served {took:.2f}s after the swap")
    assert not failures, failures[:5]
    assert tls.server.proc.poll() is None


def test_a_new_certificate_whose_key_does_not_match_keeps_the_served_pair(tls):
    tls.install(0x53)
    _until(lambda: tls.serial_of_new_connection() == 0x53, RELOAD_BOUND, "serial 0x53 served")
    failed = _reloads(tls.server, "tls", "failed", verify=tls.context)
    tls.install(0x54, key_of=0x53)  # 0x54's certificate with 0x53's key
    _until(lambda: _reloads(tls.server, "tls", "failed", verify=tls.context) == failed + 1, RELOAD_BOUND,
           "the refusal counted")
    assert tls.serial_of_new_connection() == 0x53 and _https_health(tls) == 200
    assert "not a valid pair" in tls.server.log()

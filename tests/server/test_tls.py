"""HTTPS: the operator's `spec.tls` mounts a certificate and sets TLS_CERT_FILE / TLS_KEY_FILE."""

from __future__ import annotations

import ssl
import time

import httpx
import pytest

from localcluster import pki

from .conftest import start_server


@pytest.fixture
def certificate(tmp_path):
    return pki.self_signed(tmp_path, "tls", san="IP:127.0.0.1", days=1)


def test_with_tls_files_the_server_answers_https_only(tiny_native, tmp_path, certificate):
    cert, key = certificate
    server = start_server(tmp_path, {"MODEL_PATH": str(tiny_native), "TLS_CERT_FILE": str(cert),
                                     "TLS_KEY_FILE": str(key)}, wait_ready=False)
    https = server.url.replace("http://", "https://")
    verified = ssl.create_default_context(cafile=str(cert))
    try:
        deadline, health = time.monotonic() + 120, None
        while time.monotonic() < deadline and server.proc.poll() is None:
            try:
                health = httpx.get(https + "/health", verify=verified, timeout=5)
                if health.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        assert health is not None and health.status_code == 200, server.log()[-2000:]
        assert health.json()["status"] == "ok"
        with pytest.raises(httpx.TransportError):
            httpx.get(server.url + "/health", timeout=5)  # plain HTTP on the TLS port fails
    finally:
        server.stop()

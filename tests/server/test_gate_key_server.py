"""The quality gate's key on the real server process (GATE_KEY_FILE, POD_IP; http/gatekey.py): taken
only on the gate's requests to the pod itself, re-read from its Secret volume without a restart."""

from __future__ import annotations

import pytest

from . import samples
from .conftest import start_server
from .secret_volume import write_secret_volume
from .test_secret_rotation import RELOAD_BOUND, _until

pytestmark = pytest.mark.server

API_KEY, GATE_OLD, GATE_NEW = "a-client-key-0001", "gk-old-gate-key-0002", "gk-new-gate-key-0003"
PAGE = samples.png(64, 48, seed=9)


@pytest.fixture(scope="module")
def gated(tiny_native, tmp_path_factory):
    """A server with a client key and a gate-key volume, whose pod IP is 127.0.0.1 (where it listens)."""
    tmp = tmp_path_factory.mktemp("gatekey")
    keys, gate = tmp / "api-keys-secret", tmp / "gate-key-secret"
    write_secret_volume(keys, {"api-keys": f"{API_KEY}\n".encode()})
    write_secret_volume(gate, {"gate-keys": f"{GATE_OLD}\n".encode()})
    golden = tmp / "golden"
    golden.mkdir()
    (golden / "p.png").write_bytes(PAGE)
    server = start_server(tmp, {"MODEL_PATH": str(tiny_native), "API_KEYS_FILE": str(keys / "api-keys"),
                                "GATE_KEY_FILE": str(gate / "gate-keys"), "POD_IP": "127.0.0.1",
                                "GOLDEN_DIR": str(golden), "MAX_NEW_TOKENS": "4", "CACHE_ENTRIES": "0"})
    yield server, gate
    server.stop()


def _codes(c, key: str) -> dict[str, int]:
    h = {"Authorization": f"Bearer {key}"}
    return {"/v1/ocr": c.post("/v1/ocr", files={"file": ("p.png", PAGE, "image/png")}, headers=h).status_code,
            "/v1/golden": c.get("/v1/golden", headers=h).status_code,
            "/v1/golden/p.png": c.get("/v1/golden/p.png", headers=h).status_code,
            "/v1/models": c.get("/v1/models", headers=h).status_code}


def test_the_gate_key_opens_the_golden_pages_and_ocr_sent_to_the_pod_ip_only(gated):
    server, _ = gated
    with server.client() as c:
        assert _codes(c, GATE_OLD) == {"/v1/ocr": 200, "/v1/golden": 200, "/v1/golden/p.png": 200, "/v1/models": 401}


def test_a_rotated_gate_key_file_is_taken_without_a_restart(gated):
    server, gate = gated
    pid = server.proc.pid
    write_secret_volume(gate, {"gate-keys": f"{GATE_NEW}\n".encode()})
    with server.client() as c:
        _until(lambda: _codes(c, GATE_NEW)["/v1/golden"] == 200, RELOAD_BOUND, "the new gate key accepted")
        assert _codes(c, GATE_OLD)["/v1/golden"] == 401
    assert server.proc.pid == pid and server.proc.poll() is None

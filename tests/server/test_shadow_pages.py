"""Shadow pages on real server processes (serving/shadow.py, http/shadow_routes.py): a serving pod
armed by the gate's key copies live /v1/ocr requests to a held pod after answering them, and
records hashes and distances, never a text.

Three tiny-model servers, started once for the module: `serving` (client keys, the gate's key file,
POD_IP 127.0.0.1, where it listens), `same` (the same weights and keys: a candidate at distance 0)
and `other` (other weights, no keys and no gate key file: a candidate whose answers differ, and a
server that has no shadow pages).
"""

from __future__ import annotations

import base64
import json
import re
import time

import httpx
import pytest

from ocr_server_testing import tiny_cache

from . import samples
from .conftest import start_server
from .secret_volume import write_secret_volume

pytestmark = pytest.mark.server

API_KEY, GATE_KEY = "a-client-key-0001", "gk-shadow-gate-key-0002"
CLIENT, GATE = {"Authorization": f"Bearer {API_KEY}"}, {"Authorization": f"Bearer {GATE_KEY}"}
ENV = {"MAX_NEW_TOKENS": "8", "POD_IP": "127.0.0.1"}
RECORD_KEYS = {"sha256", "servingSha256", "candidateSha256", "distance", "status", "servingOutcome",
               "candidateOutcome", "seconds", "error"}


@pytest.fixture(scope="module")
def servers(tiny_native, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shadow")
    keys, gate = tmp / "api-keys-secret", tmp / "gate-key-secret"
    write_secret_volume(keys, {"api-keys": f"{API_KEY}\n".encode()})
    write_secret_volume(gate, {"gate-keys": f"{GATE_KEY}\n".encode()})
    keyed = {"API_KEYS_FILE": str(keys / "api-keys"), "GATE_KEY_FILE": str(gate / "gate-keys"), **ENV}
    other_model = tiny_cache.cached(seed=1)  # other weights, read-only
    started = {}
    try:
        started["serving"] = start_server(tmp, {"MODEL_PATH": str(tiny_native), **keyed}, wait_ready=False)
        started["same"] = start_server(tmp, {"MODEL_PATH": str(tiny_native), **keyed}, wait_ready=False)
        started["other"] = start_server(tmp, {"MODEL_PATH": str(other_model), **ENV}, wait_ready=False)
        for server in started.values():
            _until(lambda: _health(server), 120, f"{server.url} ready")
        yield started
    finally:
        for server in started.values():
            server.stop()


def _health(server) -> bool:
    if server.proc.poll() is not None:
        raise AssertionError(f"server exited:\n{server.log()[-3000:]}")
    try:
        return server.get("/health").status_code == 200
    except httpx.TransportError:
        return False


def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def _arm(c: httpx.Client, target, **changes) -> httpx.Response:
    body = {"id": "attempt-1", "target": target.url, "samplePercent": 100, "maxPages": 32, "maxSeconds": 120,
            "noisePages": 0, "timeoutSeconds": 60, **changes}
    return c.put("/v1/shadow", json=body, headers=GATE)


def _ocr(c: httpx.Client, seed: int, headers=CLIENT) -> dict:
    answer = c.post("/v1/ocr", json={"image": base64.b64encode(samples.png(96, 64, seed=seed)).decode()}, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _metric(text: str, name: str, labels: str) -> float:
    m = re.search(rf"^{name}{{{labels}}} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else -1.0


def test_an_api_key_cannot_arm_shadow_pages(servers):
    with servers["serving"].client() as c:
        refused = c.put("/v1/shadow", json={"id": "a", "target": servers["same"].url}, headers=CLIENT)
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "unauthorized"
        assert c.get("/v1/shadow", headers=CLIENT).status_code == 401


def test_an_arm_whose_target_is_a_name_not_an_ip_is_refused_422(servers):
    with servers["serving"].client() as c:
        refused = c.put("/v1/shadow", json={"id": "a", "target": "http://ocr.team.svc:8000"}, headers=GATE)
    assert refused.status_code == 422 and refused.json()["error"]["param"] == "target"


def test_a_server_without_the_gate_key_file_has_no_shadow_pages(servers):
    with servers["other"].client() as c:
        answer = c.get("/v1/shadow", headers=GATE)
    assert answer.status_code == 404 and answer.json()["error"]["type"] == "shadow_unavailable"


def test_copies_to_the_same_weights_are_judged_at_distance_zero_with_no_text_in_the_report(servers):
    with servers["serving"].client() as c:
        armed = _arm(c, servers["same"], noisePages=1)
        assert armed.status_code == 200 and armed.json()["armed"] is True, armed.text
        texts = [_ocr(c, seed)["text"] for seed in (301, 302, 303)]
        report = _until(lambda: (r := c.get("/v1/shadow", headers=GATE).json())["pending"] == 0
                        and len(r["pages"]) == 3 and len(r["noise"]) == 1 and r, 90, "3 pages judged")
        c.delete("/v1/shadow", headers=GATE)
    assert report["id"] == "attempt-1" and report["seen"] == 3 and report["sampled"] == 3
    assert [p["distance"] for p in report["pages"]] == [0.0, 0.0, 0.0]
    assert all(set(p) == RECORD_KEYS and p["candidateSha256"] == p["servingSha256"] and p["error"] is None
               for p in report["pages"])
    assert report["noise"][0]["distance"] == 0.0 and report["noise"][0]["sha256"] == report["pages"][0]["sha256"]
    dumped = json.dumps(report)
    assert all(t and t not in dumped for t in texts), "a page's text is in the report"


def test_copies_to_other_weights_are_judged_at_a_distance_above_zero(servers):
    with servers["serving"].client() as c:
        assert _arm(c, servers["other"]).status_code == 200
        for seed in (311, 312):
            _ocr(c, seed)
        report = _until(lambda: (r := c.get("/v1/shadow", headers=GATE).json())["pending"] == 0
                        and len(r["pages"]) == 2 and r, 90, "2 pages judged")
        c.delete("/v1/shadow", headers=GATE)
    assert max(p["distance"] for p in report["pages"]) > 0
    assert all(p["candidateSha256"] and p["error"] is None for p in report["pages"])


def test_a_copy_the_held_pod_never_answers_is_recorded_unjudged_as_a_connection_error(servers):
    from localcluster.ports import free_port

    nobody = type("Nobody", (), {"url": f"http://127.0.0.1:{free_port()}"})
    with servers["serving"].client() as c:
        assert _arm(c, nobody).status_code == 200
        _ocr(c, 361)
        report = _until(lambda: (r := c.get("/v1/shadow", headers=GATE).json())["pending"] == 0
                        and len(r["pages"]) == 1 and r, 30, "1 page recorded")
        c.delete("/v1/shadow", headers=GATE)
    page = report["pages"][0]
    assert page["error"] == "connection" and page["distance"] is None and page["candidateSha256"] is None


def test_a_request_asking_for_no_retention_is_not_copied(servers):
    with servers["serving"].client() as c:
        assert _arm(c, servers["same"]).status_code == 200
        _ocr(c, 321, {**CLIENT, "Cache-Control": "no-store"})
        _ocr(c, 322, {**CLIENT, "X-OCR-Retention": "none"})
        report = c.delete("/v1/shadow", headers=GATE).json()
    assert report["sampled"] == 0 and report["skipped"]["noRetention"] == 2 and report["pages"] == []


def test_a_request_with_the_gate_key_is_not_copied(servers):
    with servers["serving"].client() as c:
        assert _arm(c, servers["same"]).status_code == 200
        _ocr(c, 331, GATE)
        report = c.delete("/v1/shadow", headers=GATE).json()
    assert report["seen"] == 0 and report["sampled"] == 0 and report["pages"] == []


def test_delete_disarms_and_forgets(servers):
    with servers["serving"].client() as c:
        assert _arm(c, servers["same"]).status_code == 200
        final = c.delete("/v1/shadow", headers=GATE).json()
        _ocr(c, 341)
        after = c.get("/v1/shadow", headers=GATE).json()
    assert final["id"] == "attempt-1" and final["armed"] is False
    assert after["id"] is None and after["armed"] is False and after["seen"] == 0 and after["pages"] == []


def test_the_answer_send_time_is_measured_for_sampled_and_other_answers(servers):
    with servers["serving"].client() as c:
        before = c.get("/metrics").text
        assert _arm(c, servers["same"], maxPages=1).status_code == 200
        _ocr(c, 351)  # sampled: the one page of the sample
        _ocr(c, 352)  # not: the sample is full
        c.delete("/v1/shadow", headers=GATE)
        after = c.get("/metrics").text
    for shadow in ("sampled", "none"):
        name, labels = "ocr_answer_send_seconds_count", f'shadow="{shadow}"'
        assert _metric(after, name, labels) == _metric(before, name, labels) + 1 >= 1

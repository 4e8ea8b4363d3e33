"""The quality gate on a service that requires API keys and serves HTTPS, on the REAL node.

One OcrService, `keyed`, with spec.auth (a user's key Secret), spec.tls (a self-signed
certificate) and spec.rollout.qualityGate (three golden pages on the model volume, pvcPath: the
gate lists and fetches them from the new pod, with its key); the operator runs as
a local process and sends the gate's requests to the new pod's IP with the gate key of the Secret
`keyed-gate-key` it created and owns (ocrservice/gatekey.py). Tiny model A (seed 0) settles through
the gate; tiny model B (seed 1, other random weights) is then rolled back with QualityRegression.
Clients without a key get 401 on every path that serves data, the golden pages included; the gate
key opens the golden pages and /v1/ocr only when sent to the pod itself. The operator never GETs
a Secret (its own tally of API requests), and leaves a same-named Secret it does not own as it is.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
import uuid

import httpx
import pytest

from localcluster.waiting import wait_for
from ocr_operator.ocrservice import naming
from tests.e2e.operator_fixtures import OcrHelpers, operator_log_if_the_test_fails, operator_namespace
from tests.e2e.realnode_fixtures import pod_ready, real_ocrservice, server_pods, service_client, tiny_model_claim, tls_secret
from tests.e2e.test_realnode_quality_gate import PAGES, model_b
from tests.server import samples

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

NAME, KEYS, TLS, GOLDEN = "keyed", "keyed-api-keys", "keyed-tls", "golden"
API_KEY = "a-client-key-0123456789"
GATE_TOKENS = 64
# Every path that serves data; health and metrics are open to probes and Prometheus by design.
KEYED_PATHS = [("POST", "/v1/ocr"), ("GET", "/v1/golden"), ("GET", "/v1/golden/page-1.png"), ("GET", "/v1/models"),
               ("POST", "/v1/chat/completions")]


def manifest(image: str, pvc: str, weights: str = "weights", marker: str | None = None) -> dict:
    return real_ocrservice(
        NAME, image, model={"pvc": {"claimName": pvc, "subPath": weights}},
        inference={"maxNewTokens": GATE_TOKENS},
        env=[{"name": "GATE_TEST_MARKER", "value": marker}] if marker else [],
        auth={"secretName": KEYS}, tls={"secretName": TLS},
        rollout={"qualityGate": {"goldenPages": {"pvcPath": GOLDEN}, "maxMeanDistance": 0.02,
                                 "maxPageDistance": 0.1, "maxNewTokens": GATE_TOKENS, "timeoutSeconds": 60}})


class Keyed:
    def __init__(self, cluster, namespace, operator, image, pvc, ca) -> None:
        self.cluster, self.namespace, self.operator, self.image, self.pvc, self.ca = (
            cluster, namespace, operator, image, pvc, ca)
        self.ocr = OcrHelpers(cluster, namespace)
        self.dns = f"{NAME}.{namespace}.svc"

    def status(self) -> dict:
        return (self.ocr.get("ocrs", NAME) or {}).get("status") or {}

    def settled(self) -> dict | None:
        obj = self.ocr.ready(NAME)
        st = (obj or {}).get("status") or {}
        pods = server_pods(self.cluster, self.namespace, NAME)
        if (obj and st.get("rollout", {}).get("phase") == "Healthy" and st.get("currentRevision") == st.get("desiredRevision")
                and len(pods) == 1 and all(pod_ready(p) and not p["metadata"].get("deletionTimestamp") for p in pods)):
            return st
        return None

    def client(self, api_key: str | None = None):
        return service_client(self.cluster, self.namespace, NAME, https=True, server_name=self.dns, ca=self.ca,
                              api_key=api_key, timeout=60)

    def pod_address(self) -> tuple[str, int]:
        (pod,) = [p for p in server_pods(self.cluster, self.namespace, NAME) if pod_ready(p)]
        return pod["status"]["podIP"], pod["spec"]["containers"][0]["ports"][0]["containerPort"]

    def gate_keys(self) -> list[str]:
        """What the operator wrote (read here by the test's admin, never by the operator)."""
        secret = self.ocr.get("secret", naming.gate_key_name(NAME))
        return base64.b64decode(secret["data"]["gate-keys"]).decode().split()

    def operator_requests(self) -> dict[str, float]:
        """The operator's own tally of API requests: 'METHOD resource' -> count."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.operator.metrics_port}/metrics", timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("ocr_operator_api_requests_total{"):
                labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")].split(","))
                out[f"{labels['method'].strip(chr(34))} {labels['resource'].strip(chr(34))}"] = float(line.rsplit(" ", 1)[1])
        return out


def _send(client: httpx.Client, method: str, url: str, headers: dict, **ext) -> int:
    if method == "POST" and url.endswith("/v1/ocr"):
        return client.post(url, files={"file": ("p.png", samples.png(64, 48, seed=7), "image/png")},
                           headers=headers, extensions=ext).status_code
    if method == "POST":
        return client.post(url, json={"model": "x", "messages": [{"role": "user", "content": "hi"}]}, headers=headers,
                           extensions=ext).status_code
    return client.get(url, headers=headers, extensions=ext).status_code


@pytest.fixture(scope="module")
def keyed(cluster, real_node, product_images, ocr_crd, tiny_model_volume, tmp_path_factory):
    work = tmp_path_factory.mktemp("gatekey")
    with operator_namespace(cluster, "t-realnode-gatekey", work / "operator.log") as (namespace, op):
        model_b(tiny_model_volume)
        for weights in ("weights", "weights-b"):  # the golden pages beside each model's weights
            folder = tiny_model_volume / weights / GOLDEN
            folder.mkdir(exist_ok=True)
            for page, data in PAGES.items():
                (folder / page).write_bytes(data)
            for path in [folder, *folder.iterdir()]:
                path.chmod(0o755 if path.is_dir() else 0o644)  # the server (uid 10001) reads what root wrote
        image = product_images.on_node("server")
        ca = tls_secret(cluster, namespace, TLS, f"{NAME}.{namespace}.svc", work)
        cluster.kubectl("create", "secret", "generic", KEYS, "-n", namespace, f"--from-literal=api-keys={API_KEY}")
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as pvc:
            service = Keyed(cluster, namespace, op, image, pvc, ca)
            t0 = time.monotonic()
            service.ocr.apply(manifest(image, pvc))
            st = wait_for(service.settled, timeout=300, interval=0.5, message=f"OcrService {NAME} settled")
            print(f"\nOcrService {NAME} (auth + tls + gate, model A) applied -> settled: {time.monotonic() - t0:.1f}s; "
                  f"first gate: {st.get('qualityGate')}")
            yield service


@pytest.fixture(autouse=True)
def _operator_log_on_failure(request, keyed):
    with operator_log_if_the_test_fails(request, keyed.operator):
        yield


def test_the_first_revision_passes_the_gate_with_the_gate_key_of_a_secret_the_operator_owns(keyed):
    st = keyed.status()
    assert st["qualityGate"]["phase"] == "Passed" and st["qualityGate"]["revision"] == st["currentRevision"], st
    secret = keyed.ocr.get("secret", naming.gate_key_name(NAME))
    owners = secret["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("OcrService", NAME)]
    assert len(keyed.gate_keys()) == 3  # the previous, current and next period's


def test_clients_without_a_key_get_401_on_every_path_including_the_golden_pages(keyed):
    client = keyed.client()
    try:
        codes = {f"{m} {p}": _send(client.client, m, p, {}, **client._ext()) for m, p in KEYED_PATHS}
        with_key = client.get("/v1/golden", headers={"Authorization": f"Bearer {API_KEY}"}).status_code
    finally:
        client.close()
    print(f"\nwithout a key: {codes}; GET /v1/golden with the client key: {with_key}")
    assert set(codes.values()) == {401}, codes
    assert with_key == 200


def test_the_gate_key_opens_only_the_golden_pages_and_ocr_sent_to_the_pod_itself(keyed):
    gate = {"Authorization": f"Bearer {keyed.gate_keys()[1]}"}
    ip, port = keyed.pod_address()
    svc = keyed.client()
    pod = httpx.Client(base_url=f"https://{ip}:{port}", verify=False, timeout=60, trust_env=False)
    try:
        to_pod = {f"{m} {p}": _send(pod, m, p, gate) for m, p in KEYED_PATHS}
        via_service = {f"{m} {p}": _send(svc.client, m, p, gate, **svc._ext()) for m, p in KEYED_PATHS}
    finally:
        pod.close()
        svc.close()
    print(f"\ngate key to the pod {ip}: {to_pod}\ngate key through the Service: {via_service}")
    assert to_pod == {"POST /v1/ocr": 200, "GET /v1/golden": 200, "GET /v1/golden/page-1.png": 200,
                      "GET /v1/models": 401, "POST /v1/chat/completions": 401}
    assert set(via_service.values()) == {401}, via_service


def test_model_b_is_rolled_back_with_quality_regression(keyed):
    a = keyed.status()["currentRevision"]
    t0 = time.monotonic()
    keyed.ocr.apply(manifest(keyed.image, keyed.pvc, weights=model_b_subpath(), marker=uuid.uuid4().hex[:8]))

    def rolled_back() -> dict | None:
        obj = keyed.ocr.get("ocrs", NAME) or {}
        st = obj.get("status") or {}
        done = (st.get("observedGeneration") == obj["metadata"]["generation"] and st.get("rollout", {}).get("phase") == "RolledBack"
                and st.get("failedRevision") == st.get("desiredRevision") and st.get("currentRevision") == a)
        return st if done else None

    st = wait_for(rolled_back, timeout=300, interval=0.5, message="model B rolled back")
    print(f"\nmodel B (auth + tls): applied -> rolled back in {time.monotonic() - t0:.1f}s; {st['failedMessage']}")
    assert st["failedReason"] == "QualityRegression", st
    assert st["qualityGate"]["phase"] == "Failed" and st["qualityGate"]["worstDistance"] > 0.1


def test_the_operator_never_gets_a_secret_and_leaves_one_it_does_not_own_as_it_is(keyed):
    other = "squatted"
    keyed.cluster.kubectl("create", "secret", "generic", naming.gate_key_name(other), "-n", keyed.namespace,
                          "--from-literal=gate-keys=the-user-s-own-value")
    before = keyed.ocr.get("secret", naming.gate_key_name(other))["metadata"]["resourceVersion"]
    body = manifest(keyed.image, keyed.pvc)
    body["metadata"]["name"] = other
    body["spec"]["replicas"] = 0
    keyed.ocr.apply(body)
    wait_for(lambda: "is not this OcrService's gate-key Secret" in keyed.operator.log_text(), timeout=60,
             message="the operator refusing the Secret it does not own")
    after = keyed.ocr.get("secret", naming.gate_key_name(other))
    requests = keyed.operator_requests()
    print(f"\noperator API requests on Secrets: { {k: v for k, v in requests.items() if 'secrets' in k} }")
    assert after["metadata"]["resourceVersion"] == before and not after["metadata"].get("ownerReferences")

    def degraded() -> dict | None:  # the user is told, not only the operator's log
        conds = {c["type"]: c for c in ((keyed.ocr.get("ocrs", other) or {}).get("status") or {}).get("conditions", [])}
        c = conds.get("Degraded") or {}
        return c if c.get("status") == "True" and c.get("reason") == "ChildConflict" else None

    cond = wait_for(degraded, timeout=60, interval=0.5, message=f"OcrService {other} Degraded with ChildConflict")
    assert "is not this OcrService's gate-key Secret" in cond["message"], cond
    wait_for(lambda: "gate-key Secret" in keyed.cluster.kubectl(
        "get", "events", "-n", keyed.namespace, "--field-selector", f"involvedObject.name={other},reason=ChildConflict",
        "-o", "json").stdout, timeout=60, interval=1, message=f"a ChildConflict Event on OcrService {other}")
    assert base64.b64decode(after["data"]["gate-keys"]) == b"the-user-s-own-value"
    assert not [k for k in requests if k.startswith("GET secrets")], json.dumps(requests)
    assert requests.get("POST secrets", 0) >= 1, requests  # its own gate-key Secrets, created
    keyed.ocr.delete("ocrs", other)


def model_b_subpath() -> str:
    return "weights-b"  # written by model_b() in the fixture

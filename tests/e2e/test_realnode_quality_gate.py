"""The quality gate (spec.rollout.qualityGate) on the REAL node: real server pods from the
product's image, the operator as a local process sending the golden pages to the new pod's IP.

One OcrService, `gated`, serves the whole module (a pod takes 30-60 s to start here); each test
starts from a good revision serving (`Gated.ensure_serving`: Healthy, or rolled back from a failed
one, else tiny model A applied and settled), so any test also runs alone. The
weights: tiny model A (seed 0) under the volume's `weights/`, tiny model B (seed 1, the same
architecture and tokenizer, other random weights) under `weights-b/`; `spec.model.pvc.subPath`
picks one. Three small golden pages in a ConfigMap; the gate asks GATE_TOKENS new tokens a page.

- model A -> model B: the gate reads B's pages far from A's recorded outputs, the revision fails
  with QualityRegression and is rolled back; a client sending through the Service meanwhile gets
  no failed request, and no pod of B is ever Ready;
- an env-only change (same weights, distance 0), with the operator SIGKILLed while the gate runs:
  the restarted operator sends the pages again and promotes the revision once (one
  QualityGatePassed event), the status records each page's distance;
- expected texts beside the pages are the reference instead of the last good revision's outputs;
- golden pages that are missing or too large hold a new revision back: a clear condition, and the
  Deployment keeps the running revision;
- the same pages as files on the model volume (goldenPages.pvcPath, beside the weights): the new
  pod lists and serves them (GOLDEN_DIR), the gate compares with the outputs recorded from the
  ConfigMap (same pages, same digest) and promotes the revision at distance 0.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid

import pytest
import yaml

from localcluster.operator_process import OperatorProcess
from localcluster.waiting import wait_for
from ocr_server_testing import tiny_cache
from ocr_operator.ocrservice import naming
from ocr_operator.ocrservice.render.deployment import PRESTOP_SLEEP_SECONDS
from ocr_operator.ocrservice.rollout.verdict import parse_records
from tests.e2e.operator_fixtures import OcrHelpers, operator_log_if_the_test_fails, operator_namespace
from tests.e2e.realnode_fixtures import (DEFAULT_MODEL_NAME, SteadyClient, pod_ready, real_ocrservice,
                                         server_pods, service_client, tiny_model_claim)
from tests.server import samples

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

NAME = "gated"
GOLDEN = "golden-pages"
PAGES = {f"page-{i}.png": samples.png(320, 240, seed=100 + i) for i in (1, 2, 3)}
GATE_TOKENS = 64  # 1-3 s a page on this machine: the operator can be killed mid-gate
MAX_REQUESTS, MAX_SECONDS = 400, 400


def golden_configmap(name: str = GOLDEN, pages: dict[str, bytes] = PAGES, expected: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "binaryData": {k: base64.b64encode(v).decode() for k, v in pages.items()},
            "data": {f"{k}.txt": v for k, v in (expected or {}).items()}}


def manifest(image: str, pvc: str, *, weights: str = "weights", env: dict[str, str] | None = None,
             golden: str = GOLDEN, pvc_path: str | None = None) -> dict:
    return real_ocrservice(
        NAME, image, model={"pvc": {"claimName": pvc, "subPath": weights}},
        inference={"maxNewTokens": GATE_TOKENS},  # the gate asks at most what the server allows
        env=[{"name": k, "value": v} for k, v in (env or {}).items()],
        rollout={"qualityGate": {"goldenPages": {"pvcPath": pvc_path} if pvc_path else {"configMapName": golden},
                                 "maxMeanDistance": 0.02,
                                 "maxPageDistance": 0.1, "maxNewTokens": GATE_TOKENS, "timeoutSeconds": 60}},
        # The product's stop sequence, which the promise of no failed client request rests on: a grace
        # period above the preStop sleep keeps it, so the old pod leaves the Service's endpoints
        # before SIGTERM closes its listener. The real-node default (3 s) drops the sleep, and a
        # promotion then raced kube-proxy: one 'Connection refused' in a make test on 2 cores.
        terminationGracePeriodSeconds=PRESTOP_SLEEP_SECONDS + 1)


class Gated:
    def __init__(self, cluster, namespace: str, operator: OperatorProcess, image: str, pvc: str, volume) -> None:
        self.cluster, self.namespace, self.operator, self.image, self.pvc = cluster, namespace, operator, image, pvc
        self.volume = volume  # the model volume's root folder (the PVC's hostPath)
        self.ocr = OcrHelpers(cluster, namespace)

    def manifest(self, **kw) -> dict:
        return manifest(self.image, self.pvc, **kw)

    def status(self) -> dict:
        return (self.ocr.get("ocrs", NAME) or {}).get("status") or {}

    def failed(self) -> dict | None:
        """The status once the operator saw the latest spec and rolled its revision back."""
        obj = self.ocr.get("ocrs", NAME) or {}
        st = obj.get("status") or {}
        if (st.get("observedGeneration") == obj.get("metadata", {}).get("generation")
                and st.get("rollout", {}).get("phase") == "RolledBack" and st.get("failedRevision") == st.get("desiredRevision")):
            return st
        return None

    def settled(self) -> dict | None:
        obj = self.ocr.ready(NAME)
        st = (obj or {}).get("status") or {}
        pods = server_pods(self.cluster, self.namespace, NAME)
        if (obj and st.get("rollout", {}).get("phase") == "Healthy" and st.get("currentRevision") == st.get("desiredRevision")
                and st.get("lastGoodRevision") == st.get("currentRevision") and len(pods) == 1
                and all(pod_ready(p) and not p["metadata"].get("deletionTimestamp") for p in pods)):
            return st
        return None

    def ensure(self, manifest_: dict, timeout: float = 300) -> dict:
        self.ocr.apply(manifest_)
        return wait_for(self.settled, timeout=timeout, interval=0.5, message=f"OcrService {NAME} settled")

    def ensure_serving(self) -> dict:
        """The golden pages as the module made them, and a good revision serving on one Ready pod
        (Healthy, or rolled back from a failed revision); else tiny model A applied and settled."""
        self.ocr.apply(golden_configmap())
        st = self.status()
        pods = server_pods(self.cluster, self.namespace, NAME)
        current = st.get("currentRevision")
        if (st.get("rollout", {}).get("phase") in ("Healthy", "RolledBack") and current == st.get("lastGoodRevision")
                and [(p["metadata"]["labels"].get(naming.REVISION_KEY), pod_ready(p)) for p in pods] == [(current, True)]):
            return st
        return self.ensure(self.manifest())

    def rolled_back(self, manifest_: dict, serving: str, what: str) -> tuple[dict, float]:
        """Apply `manifest_` and wait until the operator rolled its revision back to `serving`, then
        until the rolled-back revision's pods are gone: the status at the rollback, and the seconds
        from the apply to it."""
        t0 = time.monotonic()
        self.ocr.apply(manifest_)
        st = wait_for(lambda: (s := self.failed()) and s.get("currentRevision") == serving and s, timeout=300,
                      interval=0.5, message=f"{what} rolled back")
        took = time.monotonic() - t0
        wait_for(lambda: [p for p in server_pods(self.cluster, self.namespace, NAME)
                          if p["metadata"]["labels"][naming.REVISION_KEY] != serving] == [], timeout=60,
                 message=f"{what}'s pod gone")
        return st, took

    def records(self):
        return parse_records(self.ocr.get("configmap", naming.quality_name(NAME)))

    def events(self, reason: str) -> list[dict]:
        return [e for e in self.ocr.events(NAME) if e["reason"] == reason]


class ReadyWatch(threading.Thread):
    """Records every pod of the OcrService that is Ready, by revision, once a second."""

    def __init__(self, gated: Gated) -> None:
        super().__init__(daemon=True)
        self.gated = gated
        self.stop_event = threading.Event()
        self.ready: dict[str, set[str]] = {}

    def run(self) -> None:
        while not self.stop_event.wait(1.0):
            for p in server_pods(self.gated.cluster, self.gated.namespace, NAME):
                if pod_ready(p):
                    rev = p["metadata"]["labels"].get(naming.REVISION_KEY, "")
                    self.ready.setdefault(rev, set()).add(p["metadata"]["name"])

    def finish(self) -> dict[str, set[str]]:
        self.stop_event.set()
        self.join(timeout=30)
        return self.ready



def model_b(volume) -> str:
    """Tiny model B under the volume's weights-b/ (seed 1): the subPath that serves it."""
    out = volume / "weights-b" / DEFAULT_MODEL_NAME
    if not (out / ".complete").exists():
        t0 = time.monotonic()
        tiny_cache.copy_to(out, seed=1)
        (out / ".complete").write_text("")
        print(f"\ntiny model B copied from the cache of tiny models in {time.monotonic() - t0:.1f}s")
    for path in [volume / "weights-b", *(volume / "weights-b").rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return "weights-b"


@pytest.fixture(scope="module")
def gated(cluster, real_node, product_images, ocr_crd, tiny_model_volume, tmp_path_factory):
    with operator_namespace(cluster, "t-realnode-gate", tmp_path_factory.mktemp("gate") / "operator.log") as (namespace, op):
        model_b(tiny_model_volume)
        image = product_images.on_node("server")
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as pvc:
            service = Gated(cluster, namespace, op, image, pvc, tiny_model_volume)
            t0 = time.monotonic()
            st = service.ensure_serving()
            print(f"\nOcrService {NAME} (model A, gated) applied -> settled: {time.monotonic() - t0:.1f}s; "
                  f"first gate: {st.get('qualityGate')}")
            yield service


@pytest.fixture(autouse=True)
def _operator_log_on_failure(request, gated):
    with operator_log_if_the_test_fails(request, gated.operator):
        yield


def test_model_b_reads_worse_and_is_rolled_back_before_serving_while_clients_see_no_failure(gated):
    good = gated.ensure_serving()
    a = good["currentRevision"]
    baseline = gated.records().baseline
    assert baseline.revision == a and [o.page for o in baseline.outputs] == sorted(PAGES)
    assert all(o.tokens > 0 and len(o.sha256) == 64 for o in baseline.outputs), baseline
    owners = gated.ocr.get("configmap", naming.quality_name(NAME))["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o.get("controller")) for o in owners] == [("OcrService", NAME, True)]

    client = SteadyClient(service_client(gated.cluster, gated.namespace, NAME), first_seed=5000, max_new_tokens=8,
                          pause=0.2, max_seconds=MAX_SECONDS, max_requests=MAX_REQUESTS)
    watch = ReadyWatch(gated)
    client.start()
    watch.start()
    try:
        wait_for(lambda: client.ok >= 3 or client.failures, timeout=60, message="the client's first answers")
        st, took = gated.rolled_back(
            gated.manifest(weights="weights-b", env={"GATE_TEST_MARKER": f"run-{uuid.uuid4().hex[:8]}"}), a, "model B")
        answered = client.ok
        wait_for(lambda: client.ok >= answered + 3 or client.failures, timeout=60, message="3 answers after the rollback")
    finally:
        client.finish()
        ready = watch.finish()
    b = st["failedRevision"]
    gate = st["qualityGate"]
    print(f"\nmodel B: applied -> rolled back in {took:.1f}s; gate {gate['seconds']}s on {len(PAGES)} pages; "
          f"{st['failedMessage']}\nclient: {client.ok} answered, {len(client.failures)} failed")
    print(gated.cluster.kubectl("describe", "ocrs", NAME, "-n", gated.namespace).stdout)
    assert st["failedReason"] == "QualityRegression", st
    assert st["failedMessage"].startswith("page page-") and "> maxPageDistance 0.1" in st["failedMessage"]
    assert gate["phase"] == "Failed" and gate["revision"] == b and gate["worstDistance"] > 0.1
    assert client.failures == [], client.failures[:5]
    assert b not in ready, f"a pod of model B was Ready: {ready}"
    warnings = gated.events("RolledBack")
    assert any("QualityRegression" in e["message"] and b in e["message"] for e in warnings), warnings


def test_an_env_only_change_passes_with_distance_zero_and_is_promoted_once_across_an_operator_kill(gated):
    a = gated.ensure_serving()["currentRevision"]
    t0 = time.monotonic()
    gated.ocr.apply(gated.manifest(env={"GATE_TEST_MARKER": f"run-{uuid.uuid4().hex[:8]}"}))  # a new revision each run
    running = wait_for(lambda: (g := gated.status().get("qualityGate") or {}).get("phase") == "Running"
                       and g.get("revision") != a and g, timeout=240, interval=0.2, message="the gate running")
    gated.operator.kill()
    killed_at = time.monotonic() - t0
    time.sleep(2)
    log_before = len(gated.operator.log_path.read_text())
    gated.operator.start()
    st = wait_for(gated.settled, timeout=240, interval=0.5, message="the env-only revision promoted")
    took = time.monotonic() - t0
    c = st["currentRevision"]
    gate = st["qualityGate"]
    print(f"\nenv-only change: applied -> promoted in {took:.1f}s (operator killed {killed_at:.1f}s in, mid-gate on "
          f"pod {running['pod']}); gate {gate['seconds']}s on {len(PAGES)} pages, "
          f"{gate['seconds'] / len(PAGES):.2f}s a page; {gate['message']}")
    print(gated.cluster.kubectl("get", "ocrs", NAME, "-n", gated.namespace, "-o", "wide").stdout)
    assert c == running["revision"] and st["lastGoodRevision"] == c
    assert gate["phase"] == "Passed" and gate["meanDistance"] == 0.0 and gate["against"] == f"revision {a}"
    assert [p["name"] for p in gate["pages"]] == sorted(PAGES) and all(p["distance"] == 0.0 for p in gate["pages"])
    passed = [e for e in gated.events("QualityGatePassed") if c in e["message"]]
    assert len(passed) == 1 and passed[0].get("count", 1) == 1, passed
    assert gated.records().baseline.revision == c  # the promoted revision's outputs are the next baseline
    resumed = gated.operator.log_path.read_text()[log_before:]
    assert f"quality gate: gate job on pod {running['pod']} (revision {c})" in resumed, resumed[-2000:]


def test_expected_texts_beside_the_pages_are_the_reference_instead_of_the_last_good_output(gated):
    good = gated.ensure_serving()
    baseline = gated.records().baseline
    assert baseline.revision == good["lastGoodRevision"]
    truth = {o.page: o.text for o in baseline.outputs}
    truth["page-2.png"] = "an expected text the tiny model never writes"
    gated.ocr.apply(golden_configmap(expected=truth))
    gated.ocr.apply(gated.manifest(env={"GATE_TEST_MARKER": f"run-{uuid.uuid4().hex[:8]}"}))
    st = wait_for(gated.failed,
                  timeout=300, interval=0.5, message="the revision failed against the expected texts")
    gate = st["qualityGate"]
    print(f"\nagainst expected texts: {st['failedMessage']}")
    assert st["failedReason"] == "QualityRegression" and gate["against"] == "expected texts"
    assert gate["worstPage"] == "page-2.png" and st["failedMessage"].startswith("page page-2.png: distance")
    assert {p["name"]: p["distance"] for p in gate["pages"]}["page-1.png"] == 0.0


def test_missing_or_too_large_golden_pages_hold_a_new_revision_with_a_clear_condition(gated):
    a = gated.ensure_serving()["currentRevision"]

    def held(reason: str) -> dict | None:
        obj = gated.ocr.get("ocrs", NAME)
        cond = gated.ocr.condition(obj, "QualityGate")
        st = obj["status"]
        return obj if cond.get("reason") == reason and st.get("desiredRevision") != a \
            and obj["metadata"]["generation"] == st.get("observedGeneration") else None

    gated.ocr.apply(gated.manifest(env={"GATE_TEST_MARKER": "held"}, golden="no-such-pages"))
    obj = wait_for(lambda: held("GoldenPagesMissing"), timeout=60, message="held: pages missing")
    missing = gated.ocr.condition(obj, "QualityGate")["message"]
    big = {"huge.png": b"\x89PNG" + b"x" * (800 * 1024)}  # create, not apply: no last-applied copy of 800 KiB
    gated.cluster.kubectl("create", "-n", gated.namespace, "-f", "-",
                          input=yaml.safe_dump(golden_configmap("too-large-pages", big)))
    gated.ocr.apply(gated.manifest(env={"GATE_TEST_MARKER": "held"}, golden="too-large-pages"))
    obj = wait_for(lambda: held("GoldenPagesTooLarge"), timeout=60, message="held: pages too large")
    too_large = gated.ocr.condition(obj, "QualityGate")["message"]
    time.sleep(3)  # a rollout would have created a pod of the new revision by now
    pods = server_pods(gated.cluster, gated.namespace, NAME)
    deploy = gated.ocr.get("deploy", NAME)
    print(f"\nheld: {missing}\nheld: {too_large}")
    assert missing == ("spec.rollout.qualityGate.goldenPages.configMapName: ConfigMap no-such-pages not found in "
                       "the OcrService's namespace")
    assert "too-large-pages holds more than 786432 bytes of pages" in too_large
    assert gated.ocr.condition(obj, "Progressing")["reason"] == "GoldenPagesTooLarge"
    assert deploy["metadata"]["annotations"][naming.REVISION_KEY] == a
    assert [p["metadata"]["labels"][naming.REVISION_KEY] for p in pods] == [a]
    wait_for(lambda: any(e["type"] == "Warning" for e in gated.events("GoldenPagesMissing")), timeout=10,
             message="a GoldenPagesMissing Warning")  # events are posted off the reconcile path
    gated.ocr.delete("configmap", "too-large-pages")



def test_golden_pages_on_the_model_pvc_are_read_through_the_new_pod_and_promote_at_distance_zero(gated):
    good = gated.ensure_serving()
    a = good["currentRevision"]
    folder = gated.volume / "weights" / "golden"  # beside the weights, inside the mounted subPath
    folder.mkdir(exist_ok=True)
    for name, data in PAGES.items():
        (folder / name).write_bytes(data)
    for path in [folder, *folder.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # the server (uid 10001) reads what root wrote
    digest = gated.records().baseline.digest
    t0 = time.monotonic()
    gated.ocr.apply(gated.manifest(pvc_path="golden"))  # GOLDEN_DIR in the pods: a new revision
    st = wait_for(lambda: (s := gated.settled()) and s["currentRevision"] != a and s, timeout=240, interval=0.5,
                  message="the revision gated on the PVC's pages promoted")
    took = time.monotonic() - t0
    gate = st["qualityGate"]
    (pod,) = server_pods(gated.cluster, gated.namespace, NAME)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    print(f"\ngolden pages on the PVC: applied -> promoted in {took:.1f}s; gate {gate['seconds']}s; {gate['message']}")
    assert env["GOLDEN_DIR"] == "/models/golden"
    assert gate["phase"] == "Passed" and gate["revision"] == st["currentRevision"] and gate["meanDistance"] == 0.0
    assert gate["against"] == f"revision {a}" and gate["pagesDigest"] == digest  # the same pages as the ConfigMap's
    assert [p["name"] for p in gate["pages"]] == sorted(PAGES) and all(p["distance"] == 0.0 for p in gate["pages"])

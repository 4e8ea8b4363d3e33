"""Shadow pages (spec.rollout.qualityGate.shadow) on the REAL node: while a new revision's pod is
held back by the readiness gate, the serving pod copies the clients' live pages to it after each
answer is sent, and the gate judges the held pod's answers against the serving pod's.

The same machinery as test_realnode_quality_gate.py (real server pods from the product's image, the
operator as a local process), in its own namespace. The weights: tiny model A (`weights/`) and tiny
model B (`weights-b/`, other random weights); each manifest names its model revision (spec.model.revision
`tiny-a`, `tiny-b`), which every answer reports, so a client can tell which weights answered it. The
golden pages come with expected texts that neither tiny model writes (distance about 1 for both) and
golden thresholds of 1: the golden verdict passes whatever the weights, and only the shadow sample can
tell A from B.

- model A -> model B with a client sending pages through the Service: B passes the golden pages but
  fails the shadow sample and is rolled back with QualityRegression naming it; every client answer
  came from model A, none failed, no pod of B was ever Ready;
- an env-only change (the same weights) passes with shadow distance 0 and is promoted.
"""

from __future__ import annotations

import time
import uuid

import pytest

from localcluster.waiting import wait_for
from ocr_operator.ocrservice import naming
from tests.e2e.operator_fixtures import operator_log_if_the_test_fails, operator_namespace
from tests.e2e.realnode_fixtures import SteadyClient, pod_ready, server_pods, service_client, tiny_model_claim
from tests.e2e.test_realnode_quality_gate import (GATE_TOKENS, NAME, PAGES, Gated, ReadyWatch, golden_configmap,
                                                  manifest, model_b)

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

MISSED = "a page text that neither tiny model ever writes"
SHADOW = {"samplePercent": 100, "maxPages": 4, "maxSeconds": 120, "noisePages": 1,
          "maxMeanDistance": 0.05, "maxPageDistance": 0.2}
REVISION = {"weights": "tiny-a", "weights-b": "tiny-b"}
MAX_REQUESTS, MAX_SECONDS = 300, 400


class Shadowed(Gated):
    """The module's OcrService: golden pages both models miss equally, golden thresholds of 1, and the shadow sample."""

    def manifest(self, weights: str = "weights", **kw) -> dict:
        out = manifest(self.image, self.pvc, weights=weights, **kw)
        out["spec"]["model"]["revision"] = REVISION[weights]
        out["spec"]["rollout"]["qualityGate"].update(maxMeanDistance=1, maxPageDistance=1, shadow=dict(SHADOW))
        return out

    def ensure_serving(self) -> dict:
        self.ocr.apply(golden_configmap(expected={page: MISSED for page in PAGES}))
        st = self.status()
        current = st.get("currentRevision")
        pods = [(p["metadata"]["labels"].get(naming.REVISION_KEY), pod_ready(p))
                for p in server_pods(self.cluster, self.namespace, NAME)]
        if st.get("rollout", {}).get("phase") in ("Healthy", "RolledBack") and current == st.get("lastGoodRevision") \
                and pods == [(current, True)]:
            return st
        return self.ensure(self.manifest())


@pytest.fixture(scope="module")
def gated(cluster, real_node, product_images, ocr_crd, tiny_model_volume, tmp_path_factory):
    with operator_namespace(cluster, "t-realnode-shadow", tmp_path_factory.mktemp("shadow") / "operator.log") as (namespace, op):
        model_b(tiny_model_volume)
        image = product_images.on_node("server")
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as pvc:
            yield Shadowed(cluster, namespace, op, image, pvc, tiny_model_volume)


@pytest.fixture(autouse=True)
def _operator_log_on_failure(request, gated):
    with operator_log_if_the_test_fails(request, gated.operator):
        yield


def _client(gated: Shadowed, first_seed: int) -> SteadyClient:
    return SteadyClient(service_client(gated.cluster, gated.namespace, NAME), first_seed=first_seed,
                        max_new_tokens=8, pause=0.2, max_seconds=MAX_SECONDS, max_requests=MAX_REQUESTS)


def test_model_b_passes_the_golden_pages_but_fails_the_shadow_sample_and_no_client_answer_comes_from_it(gated):
    a = gated.ensure_serving()["currentRevision"]
    client, watch = _client(gated, 7000), ReadyWatch(gated)
    client.start()
    watch.start()
    try:
        wait_for(lambda: client.ok >= 3 or client.failures, timeout=60, message="the client's first answers")
        st, took = gated.rolled_back(gated.manifest(weights="weights-b"), a, "model B")
        answered = client.ok
        wait_for(lambda: client.ok >= answered + 2 or client.failures, timeout=60, message="answers after the rollback")
    finally:
        client.finish()
        ready = watch.finish()
    b, gate = st["failedRevision"], st["qualityGate"]
    shadow = gate["shadow"]
    print(f"\nmodel B: applied -> rolled back in {took:.1f}s; gate {gate['seconds']}s; shadow {shadow}\n"
          f"{st['failedMessage']}\nclient: {client.ok} answered ({dict(client.revisions)}), {len(client.failures)} failed")
    print(gated.cluster.kubectl("describe", "ocrs", NAME, "-n", gated.namespace).stdout)
    assert st["failedReason"] == "QualityRegression", st
    assert st["failedMessage"].startswith("shadow sample:"), st["failedMessage"]
    assert gate["phase"] == "Failed" and gate["revision"] == b
    assert gate["against"] == "expected texts" and gate["worstDistance"] <= 1  # the golden pages alone passed
    assert shadow["pages"] >= 1 and shadow["worstDistance"] > SHADOW["maxPageDistance"], shadow
    assert client.failures == [], client.failures[:5]
    assert set(client.revisions) == {"tiny-a"}, client.revisions  # no client answer from model B
    assert b not in ready, f"a pod of model B was Ready: {ready}"
    warnings = gated.events("RolledBack")
    assert any("QualityRegression: shadow sample" in e["message"] and b in e["message"] for e in warnings), warnings


def test_a_revision_with_the_same_weights_passes_with_shadow_distance_zero(gated):
    a = gated.ensure_serving()["currentRevision"]
    client = _client(gated, 9000)
    client.start()
    try:
        wait_for(lambda: client.ok >= 3 or client.failures, timeout=60, message="the client's first answers")
        t0 = time.monotonic()
        gated.ocr.apply(gated.manifest(env={"GATE_TEST_MARKER": f"run-{uuid.uuid4().hex[:8]}"}))
        st = wait_for(lambda: (s := gated.settled()) and s["currentRevision"] != a and s, timeout=300, interval=0.5,
                      message="the same weights promoted")
        took = time.monotonic() - t0
    finally:
        client.finish()
    gate = st["qualityGate"]
    shadow = gate["shadow"]
    added = max(0.0, shadow["seconds"] - gate["seconds"])  # the sample runs beside the golden pages
    print(f"\nsame weights: applied -> promoted in {took:.1f}s; golden pages {gate['seconds']}s ({len(PAGES)} pages of "
          f"{GATE_TOKENS} tokens); shadow {shadow}; the gate's added time {added:.2f}s, "
          f"{added / max(1, shadow['pages']):.3f}s a shadow page\n{gate['message']}\n"
          f"client: {client.ok} answered ({dict(client.revisions)}), {len(client.failures)} failed")
    assert gate["phase"] == "Passed" and gate["revision"] == st["currentRevision"]
    assert shadow["pages"] >= 1 and shadow["meanDistance"] == 0.0 and shadow["worstDistance"] == 0.0, shadow
    assert shadow["noiseFloor"] == 0.0, shadow
    assert client.failures == [], client.failures[:5]

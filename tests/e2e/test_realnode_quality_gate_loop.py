"""The quality gate's reference-free criteria on the REAL node: a model forced to loop fails the
gate on maxLoopRate before it serves, whatever its distances.

The same machinery as test_realnode_quality_gate.py (real server pods from the product's image,
the operator as a local process, three golden pages in a ConfigMap), in its own namespace: tiny
model A serves (weights/), then the spec moves to the looping tiny model (weights-loop/, the generator's
`--loop` variant from the cache of tiny models, ocr_server_testing.tiny_cache: it repeats <td>, which the n-gram guard lets
through, until the gate's budget ends) with maxLoopRate 0 and distance thresholds of 1 (so the
distances alone pass). The held pod answers every golden page with outcome loop, the revision
fails with QualityRegression naming maxLoopRate, and the operator rolls it back.
"""

from __future__ import annotations

import time

import pytest

from ocr_server_testing import tiny_cache
from tests.e2e.operator_fixtures import operator_namespace
from tests.e2e.realnode_fixtures import DEFAULT_MODEL_NAME, tiny_model_claim
from tests.e2e.test_realnode_quality_gate import NAME, PAGES, Gated

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

LOOP_WEIGHTS = "weights-loop"


def looping_model(volume) -> str:
    """The looping tiny model under the volume's weights-loop/: the subPath that serves it."""
    out = volume / LOOP_WEIGHTS / DEFAULT_MODEL_NAME
    if not (out / ".complete").exists():
        tiny_cache.copy_to(out, loop=True)
        (out / ".complete").write_text("")
    for path in [volume / LOOP_WEIGHTS, *(volume / LOOP_WEIGHTS).rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return LOOP_WEIGHTS


@pytest.fixture(scope="module")
def gated(cluster, real_node, product_images, ocr_crd, tiny_model_volume, tmp_path_factory):
    with operator_namespace(cluster, "t-realnode-loop", tmp_path_factory.mktemp("loop") / "operator.log") as (namespace, op):
        looping_model(tiny_model_volume)
        image = product_images.on_node("server")
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as pvc:
            yield Gated(cluster, namespace, op, image, pvc, tiny_model_volume)


def test_a_model_forced_to_loop_fails_the_gate_on_max_loop_rate_and_is_rolled_back_before_serving(gated):
    t_start = time.monotonic()
    a = gated.ensure_serving()["currentRevision"]
    spec = gated.manifest(weights=LOOP_WEIGHTS)
    spec["spec"]["rollout"]["qualityGate"].update(maxLoopRate=0.0, maxMeanDistance=1, maxPageDistance=1)
    try:
        st, took = gated.rolled_back(spec, a, "the looping model")
    except Exception:
        print(f"\n----- operator log -----\n{gated.operator.log_tail(150)}")
        raise
    looped = st["failedRevision"]
    print(f"\nlooping model: applied -> rolled back in {took:.1f}s (test {time.monotonic() - t_start:.1f}s); "
          f"gate {st['qualityGate'].get('seconds')}s on {len(PAGES)} pages; {st['failedMessage']}")
    print(gated.cluster.kubectl("describe", "ocrs", NAME, "-n", gated.namespace).stdout)
    assert st["failedReason"] == "QualityRegression", st
    assert st["failedMessage"].startswith(f"maxLoopRate: loop rate 1.0000 > 0 ({len(PAGES)} of {len(PAGES)} pages loop"), st
    assert st["qualityGate"]["phase"] == "Failed" and st["qualityGate"]["revision"] == looped
    warnings = gated.events("RolledBack")
    assert any("QualityRegression: maxLoopRate" in e["message"] and looped in e["message"] for e in warnings), warnings

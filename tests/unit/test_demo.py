"""`make demo` (hack/demo.py) without a cluster: the OcrServices it applies on the real node, step by
step, are valid specs, and its quality gate fits the gate's bounds."""

from __future__ import annotations

import argparse
import base64
import re

from ocr_limits import quality as gate_limits
from ocr_operator import spec as ocr_spec
from hack import demo_objects
from tests import hack_scripts
from tests.unit.operator.helpers import merge_patch

demo = hack_scripts.load("demo.py")


def ocrservice(image: str | None) -> dict:
    d = demo.Demo(argparse.Namespace(keep=False, timeout=120, skip_ocr=False))
    d.image = image
    return d.demo_ocrservice()


def test_each_real_node_step_applies_a_valid_spec_and_model_b_replaces_the_path_by_the_claim():
    step4 = ocrservice("localhost/causalflow-ocr-server-tiny:x")["spec"]
    step5 = merge_patch(step4, demo.CRASH_PATCH["spec"])
    step6 = merge_patch(step5, demo.model_b_patch("tiny-b-0123456789ab")["spec"])
    for spec in (step4, step5, step6):
        parsed = ocr_spec.parse(spec)
        assert parsed.rollout.quality_gate is not None and parsed.rollout.quality_gate.config_map == demo.GOLDEN
    assert step5["model"] == {"path": demo.MISSING_MODEL}
    assert step6["model"] == {"pvc": {"claimName": demo.MODEL_B_CLAIM, "subPath": "tiny-b-0123456789ab"}}
    gate, inference = step4["rollout"]["qualityGate"], step4["inference"]
    assert gate["maxNewTokens"] <= inference["maxNewTokens"] and gate["timeoutSeconds"] <= inference["timeoutSeconds"]


def test_the_kwok_fallback_applies_no_gate():
    """kwok's pods serve nothing: a gate there would fail every revision with QualityGateError."""
    spec = ocrservice(None)["spec"]
    assert "qualityGate" not in spec.get("rollout", {})
    assert ocr_spec.parse(spec).rollout.quality_gate is None


def test_the_golden_pages_fit_the_gate_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_objects, "DEMO_DIR", tmp_path)
    cm = demo.golden_configmap()
    pages = {k: base64.b64decode(v) for k, v in cm["binaryData"].items()}
    assert cm["metadata"] == {"name": demo.GOLDEN, "namespace": demo.NAMESPACE}
    assert sorted(pages) == sorted(demo.GOLDEN_PAGES) and len(pages) <= gate_limits.MAX_GOLDEN_PAGES
    assert all(re.fullmatch(gate_limits.GOLDEN_NAME_PATTERN, k) for k in pages)
    assert all(v.startswith(b"\x89PNG") for v in pages.values())
    assert sum(map(len, pages.values())) <= gate_limits.MAX_GOLDEN_BYTES


def test_model_b_lies_where_the_server_looks_for_its_model():
    """The claim is mounted at cacheDir (its subPath: MODELS_DIR's tiny-b-<digest>), the server reads
    cacheDir/<spec.model.name>: the demo writes model B at tiny-b-<digest>/<the default name>."""
    assert ocr_spec.Model.name == demo.MODEL_NAME and ocr_spec.Model.cache_dir == "/models"

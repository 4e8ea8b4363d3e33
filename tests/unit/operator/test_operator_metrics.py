"""The operator's Prometheus metrics (ocr_operator.metrics): names by Prometheus's conventions,
reconcile outcomes counted, OcrServices by phase and condition read from the controller's cache."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ocr_operator import wiring
from ocr_operator.metrics import NAMES, OperatorMetrics
from ocr_operator.ocrservice.controller import controller
from ocr_operator.runtime.controller import Runtime

from .helpers import owner


def samples(m: OperatorMetrics) -> dict[tuple[str, tuple], float]:
    text = generate_latest(m.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_every_family_is_declared_and_named_by_prometheus_conventions():
    m = OperatorMetrics()
    m.reconciled(0.01)
    m.rolled_back("CrashLoopBackOff")
    text = generate_latest(m.registry).decode()
    # (prometheus_client's *_created timestamps of counters and histograms are not families of ours)
    families = {f.name: f.type for f in text_string_to_metric_families(text) if not f.name.endswith("_created")}
    exported = {name + ("_total" if kind == "counter" else "") for name, kind in families.items()}
    assert exported == set(NAMES)
    for name, kind in families.items():
        assert name.startswith("ocr_operator_")
        if kind == "histogram":
            assert name.endswith("_seconds"), name
        if kind == "gauge":
            assert not name.endswith(("_total", "_count")), name


def test_successful_and_failed_reconciles_are_counted_with_their_duration():
    m = OperatorMetrics()
    m.reconciled(0.02)
    m.reconciled(0.03)
    m.failed("api", 0.5)
    s = samples(m)
    assert s[("ocr_operator_reconciles_total", (("result", "success"),))] == 2
    assert s[("ocr_operator_reconciles_total", (("result", "error"),))] == 1
    assert s[("ocr_operator_reconcile_errors_total", (("kind", "api"),))] == 1
    assert s[("ocr_operator_reconcile_errors_total", (("kind", "unexpected"),))] == 0
    assert s[("ocr_operator_reconcile_duration_seconds_count", ())] == 3
    assert abs(s[("ocr_operator_reconcile_duration_seconds_sum", ())] - 0.55) < 1e-9


def test_rollbacks_are_counted_by_the_failed_revisions_reason():
    m = OperatorMetrics()
    m.rolled_back("ImagePullBackOff")
    m.rolled_back("ImagePullBackOff")
    m.rolled_back(None)
    s = samples(m)
    assert s[("ocr_operator_rollbacks_total", (("reason", "ImagePullBackOff"),))] == 2
    assert s[("ocr_operator_rollbacks_total", (("reason", "Unknown"),))] == 1


def test_ocrservices_are_counted_by_rollout_phase_and_condition_from_the_controllers_cache():
    def body(name: str, phase: str, ready: str) -> dict:
        return owner(name=name, status={"rollout": {"phase": phase},
                                        "conditions": [{"type": "Ready", "status": ready}]})

    async def run() -> dict:
        c = controller(Runtime(None, wiring.store()), workers=1)
        m = OperatorMetrics()
        m.state.controller = c
        c.owner_event("ADDED", body("a", "Healthy", "True"))
        c.owner_event("ADDED", body("b", "Healthy", "True"))
        c.owner_event("ADDED", body("c", "RolledBack", "False"))
        return samples(m)

    s = asyncio.run(run())
    assert s[("ocr_operator_ocrservices", (("phase", "Healthy"),))] == 2
    assert s[("ocr_operator_ocrservices", (("phase", "RolledBack"),))] == 1
    assert s[("ocr_operator_ocrservice_conditions", (("status", "True"), ("type", "Ready")))] == 2
    assert s[("ocr_operator_ocrservice_conditions", (("status", "False"), ("type", "Ready")))] == 1
    assert s[("ocr_operator_workqueue_depth", ())] == 3


def test_api_requests_are_counted_by_method_and_resource():
    class CountingKube:
        by_request = {"PATCH ocrservices/status": 3, "POST events": 2}

    c = controller(Runtime(CountingKube(), wiring.store()), workers=1)
    m = OperatorMetrics()
    m.state.controller = c
    s = samples(m)
    assert s[("ocr_operator_api_requests_total", (("method", "PATCH"), ("resource", "ocrservices/status")))] == 3
    assert s[("ocr_operator_api_requests_total", (("method", "POST"), ("resource", "events")))] == 2


def test_the_quality_gates_last_verdict_is_exported_per_ocrservice_as_mean_and_worst_distance():
    async def run() -> dict:
        c = controller(Runtime(None, wiring.store()), workers=1)
        m = OperatorMetrics()
        m.state.controller = c
        c.owner_event("ADDED", owner(name="gated", status={"qualityGate": {
            "phase": "Failed", "meanDistance": 0.42, "worstDistance": 0.8}}))
        c.owner_event("ADDED", owner(name="running", status={"qualityGate": {"phase": "Running"}}))
        return samples(m)

    s = asyncio.run(run())
    where = (("namespace", "team-a"), ("ocrservice", "gated"))
    assert s[("ocr_operator_quality_gate_distance", where + (("stat", "mean"),))] == 0.42
    assert s[("ocr_operator_quality_gate_distance", where + (("stat", "worst"),))] == 0.8
    assert not [k for k in s if k[0] == "ocr_operator_quality_gate_distance" and ("ocrservice", "running") in k[1]]


def test_a_fetch_from_s3_under_way_is_exported_as_a_ratio_per_ocrservice():
    async def run() -> dict:
        c = controller(Runtime(None, wiring.store()), workers=1)
        m = OperatorMetrics()
        m.state.controller = c
        c.owner_event("ADDED", owner(name="fetching", status={"modelFetch": {"pod": "fetching-1", "percent": 42.5}}))
        c.owner_event("ADDED", owner(name="serving", status={}))
        return samples(m)

    s = asyncio.run(run())
    assert s[("ocr_operator_model_fetch_ratio", (("namespace", "team-a"), ("ocrservice", "fetching")))] == 0.425
    assert not [k for k in s if k[0] == "ocr_operator_model_fetch_ratio" and ("ocrservice", "serving") in k[1]]


def test_the_shadow_samples_distances_are_exported_beside_the_golden_pages():
    async def run() -> dict:
        c = controller(Runtime(None, wiring.store()), workers=1)
        m = OperatorMetrics()
        m.state.controller = c
        c.owner_event("ADDED", owner(name="gated", status={"qualityGate": {
            "phase": "Failed", "meanDistance": 0.9, "worstDistance": 0.95,
            "shadow": {"pages": 4, "meanDistance": 0.31, "worstDistance": 0.77}}}))
        c.owner_event("ADDED", owner(name="unsampled", status={"qualityGate": {
            "phase": "Passed", "meanDistance": 0.0, "worstDistance": 0.0, "shadow": {"pages": 0}}}))
        return samples(m)

    s = asyncio.run(run())
    where = (("namespace", "team-a"), ("ocrservice", "gated"))
    assert s[("ocr_operator_quality_gate_distance", where + (("stat", "shadowMean"),))] == 0.31
    assert s[("ocr_operator_quality_gate_distance", where + (("stat", "shadowWorst"),))] == 0.77
    assert not [k for k in s if k[0] == "ocr_operator_quality_gate_distance" and ("ocrservice", "unsampled") in k[1]
                and ("stat", "shadowMean") in k[1]]

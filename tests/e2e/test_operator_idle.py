"""Idle reconciles write nothing: measured from the API server's audit log."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import require_local
from tests.e2e.operator_fixtures import OperatorProcess, operator_kubeconfig, ocrservice
from localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e

IDLE_SECONDS = 60
# The HPA's metric: one no exporter publishes, so its ScalingActive message stays the same. With
# DCGM_FI_DEV_GPU_UTIL the message follows other tests' pods: any pod's series of that metric (any
# namespace) makes prometheus-adapter list it, and this HPA's "could not find the metric ... for
# pods" becomes "no metrics returned", and back ~30 s after those series end. The operator mirrors
# that message (a true change, rightly written), which is not what this test measures.
UNPUBLISHED_METRIC = "causalflow_idle_test_unpublished"


def test_a_minute_without_spec_changes_makes_zero_writes(cluster, ocr, ocr_crd, namespace, tmp_path):
    require_local(cluster)
    # Resync every 3 s, so the idle minute holds ~20 full reconciles, not zero.
    op = OperatorProcess(operator_kubeconfig(cluster), [namespace], tmp_path / "operator.log",
                         extra_env={"OCR_OPERATOR_RESYNC_SECONDS": "3"})
    op.start()
    started = time.time()
    try:
        ocr.apply(ocrservice("web", autoscaling={"minReplicas": 2, "maxReplicas": 3,
                                                 "metric": {"name": UNPUBLISHED_METRIC}},
                             networkPolicy={"enabled": True}))
        ocr.wait_ready("web")
        wait_for(lambda: ocr.get("ocrs", "web")["status"].get("rollout", {}).get("phase") == "Healthy", timeout=30,
                 message="rollout settled")

        def autoscaler_settled() -> bool:
            """The HPA has raised spec.replicas (default 1) to its minReplicas through the scale
            subresource (a spec change) and reported ScalingActive, and the status caught up."""
            obj = ocr.get("ocrs", "web")
            return (obj["spec"]["replicas"] == 2 and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
                    and ocr.condition(obj, "ScalingActive").get("status") in ("True", "False"))
        wait_for(autoscaler_settled, timeout=60, message="the HPA's first decisions recorded")
        time.sleep(3)  # let the last status write land
        before = op.probe()
        hpa_before = ocr.get("horizontalpodautoscalers", "web")
        since = time.time()
        for i in range(3):  # metadata-only touches wake the reconcile too; still nothing to write
            time.sleep(IDLE_SECONDS / 3)
            ocr.patch("ocrs", "web", {"metadata": {"annotations": {"example.com/touched": str(i)}}})
        time.sleep(2)
        after = op.probe()
        hpa_after = ocr.get("horizontalpodautoscalers", "web")
        converging = ocr.audit_writes(started)
        # The filter sees the operator's writes: creating the children and the status were some.
        assert any(e.get("objectRef", {}).get("resource") == "deployments" and e["verb"] == "patch"
                   for e in converging), "audit filter found no operator write at all"
        # ...and logs the body of each OcrService write, so an unexpected one below says what it changed.
        assert any(e["objectRef"].get("subresource") == "status" and e.get("requestObject", {}).get("status")
                   for e in converging), "no OcrService status write with its body in the audit log"
        writes = ocr.audit_writes(since)
        reconciles = after["reconciles"]["reconciles"] - before["reconciles"]["reconciles"]
        print(f"\nidle window {IDLE_SECONDS}s: {reconciles} reconciles, {len(writes)} operator writes")
        assert reconciles >= 10, (before, after)
        # The premise: nothing the operator mirrors changed meanwhile (the HPA writes its status only on a change).
        assert hpa_after["metadata"]["resourceVersion"] == hpa_before["metadata"]["resourceVersion"], (
            hpa_before["status"], hpa_after["status"])
        assert writes == [], [(e["verb"], e["objectRef"], e.get("userAgent"), e.get("requestObject")) for e in writes]
        assert op.alive()
    except BaseException:
        print(op.log_tail(150))
        raise
    finally:
        op.stop()

"""The operator survives crashes, API server restarts, field conflicts and broken images."""

from __future__ import annotations

import json
import random
import time

import pytest
import yaml

from tests.e2e.conftest import require_local
from tests.e2e.operator_fixtures import FIELD_MANAGER, ocrservice, private_operator
from localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e


def owned(ocr, kind, name="web"):
    return [o for o in ocr.list(kind) if any(r.get("name") == name for r in o["metadata"].get("ownerReferences") or ())]


def test_killed_mid_reconcile_and_restarted_it_converges_without_duplicates(ocr, ocr_operator):
    ocr.apply(ocrservice("web", replicas=2, networkPolicy={"enabled": True}))
    rng = random.Random(4)
    for _ in range(3):  # SIGKILL at random points of the first reconciles, then start again
        time.sleep(rng.uniform(0.05, 0.6))
        ocr_operator.kill()
        ocr_operator.start()
    obj = ocr.wait_ready("web", timeout=60)
    ocr.patch("ocrs", "web", {"spec": {"image": "registry.invalid/causalflow/ocr-server:1.1"}})
    time.sleep(rng.uniform(0.05, 0.4))
    ocr_operator.kill()
    ocr_operator.start()
    obj = ocr.wait_ready("web", timeout=60)

    assert len(owned(ocr, "deployments")) == 1
    assert len(owned(ocr, "services")) == 1
    assert sorted(c["metadata"]["name"] for c in owned(ocr, "configmaps")) == ["web-config", "web-revisions"]
    assert len(owned(ocr, "poddisruptionbudgets")) == 1 and len(owned(ocr, "networkpolicies")) == 1
    rev = obj["status"]["currentRevision"]
    wait_for(lambda: len([p for p in ocr.list("pods", "app.kubernetes.io/instance=web")
                          if not p["metadata"].get("deletionTimestamp")]) == 2, timeout=30, message="exactly 2 pods")
    pods = [p for p in ocr.list("pods", "app.kubernetes.io/instance=web") if not p["metadata"].get("deletionTimestamp")]
    assert {p["metadata"]["labels"]["ocr.causalflow.dev/revision"] for p in pods} == {rev}
    assert ocr_operator.starts == 5 and ocr_operator.alive()


def test_the_operator_survives_an_api_server_restart(private_cluster, tmp_path):
    """On a cluster of its own: the session's is shared with other workers' tests."""
    cluster = private_cluster
    require_local(cluster)
    with private_operator(cluster, "restart", tmp_path / "operator.log") as (ocr, operator):
        ocr.apply(ocrservice("web", replicas=1))
        ocr.wait_ready("web")
        cluster.restart_apiserver()
        time.sleep(2)
        assert operator.alive(), operator.log_tail()
        # Watches reconnected: a deleted child is still repaired, a spec change still rolls out.
        old = ocr.get("service", "web")["metadata"]["uid"]
        ocr.delete("service", "web")
        wait_for(lambda: (ocr.get("service", "web") or {"metadata": {"uid": old}})["metadata"]["uid"] != old,
                 timeout=60, message="service recreated after the API server restart")
        ocr.patch("ocrs", "web", {"spec": {"replicas": 2}})
        assert ocr.wait_ready("web", timeout=60)["status"]["readyReplicas"] == 2
        assert operator.alive()


def test_a_conflicting_field_manager_loses_to_the_operator(cluster, ocr, ocr_operator):
    ocr.apply(ocrservice("web", replicas=1))
    ocr.wait_ready("web")
    intruder = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"template": {"spec": {"containers": [{"name": "server", "image": "intruder/ocr:evil"}]}}}}
    # Without force the API server answers 409 Conflict: the operator owns the image.
    proc = cluster.kubectl("apply", "--server-side", "--field-manager=intruder", "-n", ocr.ns, "-f", "-",
                           input=yaml.safe_dump(intruder), check=False)
    assert proc.returncode != 0 and "conflict" in proc.stderr.lower(), proc.stderr
    # Forced, the intruder takes the field; the operator takes it back (its own apply forces).
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=intruder", "-n", ocr.ns,
                    "-f", "-", input=yaml.safe_dump(intruder))
    wait_for(lambda: ocr.get("deployment", "web")["spec"]["template"]["spec"]["containers"][0]["image"]
             == "registry.invalid/causalflow/ocr-server:1.0", timeout=15, message="image taken back")
    dep = ocr.get("deployment", "web")
    image_owners = [m["manager"] for m in dep["metadata"]["managedFields"]
                    if "f:image" in json.dumps(m.get("fieldsV1"))]
    assert FIELD_MANAGER in image_owners
    ocr.wait_ready("web")
    assert ocr_operator.alive()
    assert "Traceback" not in ocr_operator.log_text()


def test_an_image_that_cannot_be_pulled_is_reported_not_a_crash(cluster, ocr, ocr_operator):
    require_local(cluster)
    ocr.apply(ocrservice("web", replicas=1, podLabels={"causalflow.dev/simulate": "image-pull-error"}))
    obj = wait_for(lambda: (lambda o: o if ocr.condition(o, "Degraded").get("status") == "True" else None)(
        ocr.get("ocrs", "web")), timeout=60, message="Degraded=True")
    st = obj["status"]
    assert st["failedReason"] in ("ImagePullBackOff", "ErrImagePull"), st
    assert "pod web-" in st["failedMessage"]
    assert ocr.condition(obj, "Ready")["status"] == "False"
    # Events are posted by the operator's recorder task, after the status write that said Degraded
    # (as client-go's recorder does): the Warning follows, it need not be there already.
    wait_for(lambda: [e for e in ocr.events("web") if e["type"] == "Warning" and "ImagePull" in e["message"]],
             timeout=30, message="a Warning event naming the image pull")
    assert ocr_operator.alive()
    assert "Traceback" not in ocr_operator.log_text()
    # The failed revision is not retried in a loop: the status stays put while nothing changes.
    # (The pod counts may follow the Degraded write once, within the operator's 2 s status
    # coalescing window: OCR_OPERATOR_STATUS_COALESCE_SECONDS.)
    time.sleep(3)
    rv = ocr.get("ocrs", "web")["metadata"]["resourceVersion"]
    time.sleep(4)
    assert ocr.get("ocrs", "web")["metadata"]["resourceVersion"] == rv

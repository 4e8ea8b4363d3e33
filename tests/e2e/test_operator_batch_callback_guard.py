"""The callback's egress guard on the kwok cluster (the operator as a local process, allowed to send
to 127.0.0.1 only, as the chart's callbacks.allowCidrs would allow it): of two cancelled batches,
the one whose callback names another loopback address (127.0.0.2, a receiver listening there) is
refused, with nothing sent, status.callback GaveUp and the Callback condition CallbackRefused
naming why, while the allowlisted receiver gets its signed batch.cancelled (after a 500, retried).
"""

from __future__ import annotations

import json

import pytest

from localcluster.operator_process import OperatorProcess
from localcluster.waiting import wait_for
from ocr_operator.ocrbatch import callback, egress
from tests.e2e.callback_receiver import Receiver
from tests.e2e.operator_fixtures import ocrservice, operator_kubeconfig, print_operator_log
from tests.e2e.test_operator_batch import claim, manifest

pytestmark = pytest.mark.e2e

KEY = b"callback-guard-hmac-key-of-32-bytes!"


def status(ocr, name: str) -> dict:
    return (ocr.get("ocrbatch", name) or {}).get("status") or {}


def test_a_loopback_callback_is_refused_with_a_condition_while_the_allowlisted_receiver_gets_it(
        cluster, namespace, ocr, ocr_crd, tmp_path):
    cluster.kubectl("create", "secret", "generic", "hook", "-n", namespace, f"--from-literal=secret={KEY.decode()}")
    allowed, refused = Receiver(), Receiver(host="127.0.0.2")
    op = OperatorProcess(operator_kubeconfig(cluster), [namespace], tmp_path / "operator.log", extra_env={
        "OCR_OPERATOR_BATCH_IMAGE": "registry.invalid/causalflow/ocr-operator:1.0",
        "OCR_OPERATOR_BATCH_PREFLIGHT_SECONDS": "1", egress.ALLOW_ENV: "127.0.0.1/32"}).start()
    try:
        ocr.apply(ocrservice("reader"))
        claim(cluster, namespace)
        for name, receiver in (("allowed", allowed), ("refused", refused)):
            ocr.apply(manifest(name, callback={"url": receiver.url, "secretRef": {"name": "hook"}}))
        for name in ("allowed", "refused"):
            wait_for(lambda: ocr.get("job", name), timeout=30, message=f"the Job of {name}")
            ocr.patch("ocrbatch", name, {"spec": {"cancel": True}})
        done = {name: wait_for(lambda: status(ocr, name).get("callback") and status(ocr, name), timeout=60,
                               message=f"status.callback of {name}") for name in ("allowed", "refused")}

        st = done["refused"]
        assert st["callback"]["state"] == "GaveUp" and "loopback" in st["callback"]["error"], st["callback"]
        cond = next(c for c in st["conditions"] if c["type"] == "Callback")
        assert (cond["status"], cond["reason"]) == ("False", "CallbackRefused")
        assert "127.0.0.2 is a loopback address" in cond["message"] and "callbacks.allowCidrs" in cond["message"]
        assert refused.requests == []

        st = done["allowed"]
        assert (st["callback"]["state"], st["callback"]["attempts"]) == ("Delivered", 2)
        cond = next(c for c in st["conditions"] if c["type"] == "Callback")
        assert (cond["status"], cond["reason"]) == ("True", "Delivered")
        headers, body = allowed.requests[-1]
        assert callback.verify(KEY, headers[callback.SIGNATURE_HEADER], body)
        assert json.loads(body)["type"] == "batch.cancelled"
    except BaseException:  # in the body the session has not counted this failure yet: print it here
        print_operator_log(op)
        raise
    finally:
        op.stop()
        allowed.close()
        refused.close()

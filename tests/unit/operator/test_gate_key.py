"""The quality gate's key with spec.auth (ocrservice/gatekey.py, its render and the gate's use of it)."""

from __future__ import annotations

import base64

from ocr_operator.ocrservice import gatekey, gaterun, naming
from ocr_operator.ocrservice.render import configmap, render_all

from .helpers import owner, parsed

SEED, UID, DAY = b"seed-of-the-test", "11111111-2222-3333-4444-555555555555", 86400
GATE = {"qualityGate": {"goldenPages": {"configMapName": "golden"}}}
SHADOW = {"qualityGate": {"goldenPages": {"configMapName": "golden"}, "shadow": {}}}


def _server(body: dict) -> dict:
    return render_all(body, parsed(body)).objects["Deployment"]["spec"]["template"]["spec"]


def test_the_secret_holds_the_previous_current_and_next_periods_keys_and_the_gate_sends_the_current():
    k = gatekey.keys(SEED, UID, 10 * DAY + 5, DAY)
    assert k.file.split() == [gatekey.key_for(SEED, UID, p) for p in (9, 10, 11)]
    assert k.send == gatekey.key_for(SEED, UID, 10)


def test_the_key_sent_after_a_rotation_was_in_the_secret_a_whole_period_before():
    assert gatekey.keys(SEED, UID, 11 * DAY, DAY).send in gatekey.keys(SEED, UID, 10 * DAY, DAY).file.split()


def test_a_key_leaves_the_secret_two_periods_after_it_was_sent():
    sent = gatekey.keys(SEED, UID, 10 * DAY, DAY).send
    assert sent in gatekey.keys(SEED, UID, 11 * DAY, DAY).file.split()
    assert sent not in gatekey.keys(SEED, UID, 12 * DAY, DAY).file.split()


def test_each_ocrservice_gets_its_own_keys():
    assert gatekey.key_for(SEED, UID, 10) != gatekey.key_for(SEED, "another-uid", 10)


def test_the_secret_is_owned_by_the_ocrservice_and_holds_the_entry_the_pods_mount():
    secret = gatekey.render(owner(None, uid=UID), "k1\nk2\n")
    assert secret["metadata"]["name"] == naming.gate_key_name("ocr")
    assert [r["uid"] for r in secret["metadata"]["ownerReferences"]] == [UID]
    assert base64.b64decode(secret["data"][configmap.GATE_KEY_ENTRY]) == b"k1\nk2\n"


def test_the_write_tests_the_secret_s_owner_before_it_changes_anything():
    ops = gatekey.patch_ops(UID, gatekey.render(owner(None, uid=UID), "k\n"))
    assert ops[0] == {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": UID}
    assert [o["op"] for o in ops[1:]] == ["add"]


def test_a_gated_service_with_api_keys_mounts_its_gate_key_secret_whole():
    spec = _server(owner({"auth": {"secretName": "keys"}, "rollout": GATE}))
    (vol,) = [v for v in spec["volumes"] if v["name"] == "gate-key"]
    assert vol["secret"]["secretName"] == naming.gate_key_name("ocr")
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "gate-key"]
    assert "subPath" not in mount and mount["readOnly"]  # kubelet updates a whole Secret volume in place


def test_a_gated_service_with_api_keys_tells_the_server_its_gate_key_file_and_pod_ip():
    env = {e["name"]: e for e in _server(owner({"auth": {"secretName": "keys"}, "rollout": GATE}))["containers"][0]["env"]}
    assert env["GATE_KEY_FILE"]["value"] == configmap.GATE_KEY_FILE
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_a_gated_service_without_api_keys_has_no_gate_key():
    spec = _server(owner({"rollout": GATE}))
    assert not [v for v in spec["volumes"] if v["name"] == "gate-key"]
    assert "GATE_KEY_FILE" not in {e["name"] for e in spec["containers"][0]["env"]}


def test_the_gate_sends_the_key_it_is_given():
    target = gaterun.Target.of(parsed(owner({"auth": {"secretName": "keys"}, "rollout": GATE})), "gk-1")
    assert target is not None and target.key == "gk-1"


def test_with_a_gate_key_a_401_is_asked_again_within_the_deadline():
    assert gaterun.retried(401, keyed=True)


def test_without_a_gate_key_a_401_fails_the_page():
    assert not gaterun.retried(401, keyed=False)


def test_shadow_pages_without_api_keys_give_the_pods_the_gate_key_file_and_pod_ip():
    spec = _server(owner({"rollout": SHADOW}))  # the gate arms the serving pods with its key
    (vol,) = [v for v in spec["volumes"] if v["name"] == "gate-key"]
    assert vol["secret"]["secretName"] == naming.gate_key_name("ocr")
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["GATE_KEY_FILE"]["value"] == configmap.GATE_KEY_FILE
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_the_gate_with_shadow_pages_and_no_api_keys_sends_its_key():
    assert configmap.gate_key(parsed(owner({"rollout": SHADOW})))


def test_a_deleted_ocrservice_leaves_no_gate_key_write_remembered():
    from ocr_operator import wiring
    from ocr_operator.ocrservice.controller import controller
    from ocr_operator.runtime.controller import Runtime

    c = controller(Runtime(None, wiring.store()), workers=1)
    gatekey._written[("team-a", naming.gate_key_name("gone"))] = ("uid-1", "gk-a\n", 1)
    gatekey._written[("team-a", naming.gate_key_name("kept"))] = ("uid-2", "gk-b\n", 1)
    c.reconciler.forgotten(("team-a", "gone"), owner(name="gone"), c.jobs)
    assert ("team-a", naming.gate_key_name("gone")) not in gatekey._written
    assert ("team-a", naming.gate_key_name("kept")) in gatekey._written
    gatekey._written.clear()

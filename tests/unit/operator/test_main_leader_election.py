"""`python -m ocr_operator --leader-elect`: where the Lease is, who we are, and the standby's /healthz."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from ocr_operator.__main__ import identity, own_namespace, parse_args
from ocr_operator.runtime.election import StandbyHealth
from localcluster.ports import free_port


def test_a_local_process_runs_without_leader_election_by_default(monkeypatch):
    monkeypatch.delenv("OCR_OPERATOR_LEADER_ELECT", raising=False)
    assert parse_args([]).election is None


def test_leader_election_puts_the_lease_in_the_pods_namespace_with_client_gos_timings(monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "ocr-system")
    monkeypatch.setenv("POD_NAME", "ocr-7d9f-abcde")
    cfg = parse_args(["--leader-elect", "--leader-elect-resource-name", "ocr-causalflow-ocr"]).election
    assert (cfg.namespace, cfg.name) == ("ocr-system", "ocr-causalflow-ocr")
    assert (cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == (15, 10.0, 2.0)
    assert cfg.identity.startswith("ocr-7d9f-abcde_")


def test_each_process_is_a_new_candidate_even_with_the_same_pod_name():
    env = {"POD_NAME": "ocr-0"}
    assert identity(env) != identity(env)


def test_leader_election_can_be_switched_on_and_set_from_the_environment(monkeypatch):
    monkeypatch.setenv("OCR_OPERATOR_LEADER_ELECT", "true")
    monkeypatch.setenv("OCR_OPERATOR_LEADER_ELECT_NAMESPACE", "team-a")
    monkeypatch.setenv("OCR_OPERATOR_LEADER_ELECT_LEASE_DURATION", "6")
    monkeypatch.setenv("OCR_OPERATOR_LEADER_ELECT_RENEW_DEADLINE", "4")
    monkeypatch.setenv("OCR_OPERATOR_LEADER_ELECT_RETRY_PERIOD", "0.5")
    cfg = parse_args([]).election
    assert (cfg.namespace, cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == ("team-a", 6, 4.0, 0.5)
    assert parse_args(["--no-leader-elect"]).election is None


@pytest.mark.parametrize("name,value", [("OCR_OPERATOR_LEADER_ELECT", "maybe"),
                                        ("OCR_OPERATOR_LEADER_ELECT_LEASE_DURATION", "15s")])
def test_a_bad_environment_value_is_refused_naming_the_variable(monkeypatch, capsys, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exc:
        parse_args([])
    assert name in str(exc.value.code)


def test_outside_a_pod_leader_election_needs_a_namespace(monkeypatch, capsys):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.delenv("OCR_OPERATOR_LEADER_ELECT_NAMESPACE", raising=False)
    monkeypatch.setattr("ocr_operator.__main__.SERVICE_ACCOUNT_NAMESPACE", __import__("pathlib").Path("/nonexistent"))
    with pytest.raises(SystemExit):
        parse_args(["--leader-elect"])
    assert "--leader-elect-resource-namespace" in capsys.readouterr().err


def test_inconsistent_timings_are_refused_naming_the_flag(monkeypatch, capsys):
    monkeypatch.setenv("POD_NAMESPACE", "ocr-system")
    with pytest.raises(SystemExit):
        parse_args(["--leader-elect", "--leader-elect-lease-duration", "10", "--leader-elect-renew-deadline", "10"])
    assert "--leader-elect-renew-deadline" in capsys.readouterr().err


def test_the_namespace_falls_back_to_the_service_accounts(tmp_path):
    sa = tmp_path / "namespace"
    sa.write_text("ocr-system\n")
    assert own_namespace({}, sa) == "ocr-system"
    assert own_namespace({"POD_NAMESPACE": "other"}, sa) == "other"
    assert own_namespace({}, tmp_path / "missing") == ""


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_a_standby_answers_healthz_with_its_election_state_and_frees_the_port_for_kopf():
    state = {"ok": True}
    port = free_port()
    health = StandbyHealth("127.0.0.1", port, lambda: (state["ok"], {"leader": False, "holder": "op-b_1"})).start()
    try:
        status, body = _get(port, "/healthz")
        assert status == 200 and json.loads(body) == {"leader": False, "holder": "op-b_1"}
        assert _get(port, "/other")[0] == 404
        state["ok"] = False  # the elector stopped taking part: the kubelet restarts the pod
        assert _get(port, "/healthz")[0] == 503
    finally:
        health.stop()
    with socket.socket() as s:  # kopf's liveness endpoint binds the same port next
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))

"""Leader election's decisions (runtime/leader.py): who may take the Lease when, and what is written."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from ocr_operator.runtime.kinds import LEASE
from ocr_operator.runtime.leader import (Action, ElectionConfig, LeaseRecord, Observed, config_errors, decide,
                                 lease_body, lost, micro_time, observe, release_body, retry_wait)

CFG = ElectionConfig(namespace="ocr-system", name="ocr-causalflow-ocr", identity="op-a_1234abcd")
NOW = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)


def lease(holder: str, *, duration: int = 15, renew: str = "2025-01-02T03:04:00.000000Z",
          acquire: str = "2025-01-02T03:00:00.000000Z", transitions: int = 3, rv: str = "42") -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": CFG.name, "namespace": CFG.namespace, "resourceVersion": rv,
                         "labels": {"team": "ocr"}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renew,
                     "acquireTime": acquire, "leaseTransitions": transitions}}


def seen(body: dict, at: float) -> Observed:
    return Observed(LeaseRecord.of(body), at)


def test_without_a_lease_the_candidate_creates_it():
    assert decide(None, CFG.identity, now=100.0) is Action.CREATE


def test_the_holder_renews_its_own_lease():
    assert decide(seen(lease(CFG.identity), at=0.0), CFG.identity, now=1000.0) is Action.RENEW


def test_a_lease_held_by_another_is_left_alone_until_its_duration_passed_on_our_clock():
    observed = seen(lease("op-b_ffff0000", duration=15), at=100.0)
    assert decide(observed, CFG.identity, now=114.9) is Action.WAIT
    assert decide(observed, CFG.identity, now=115.0) is Action.ACQUIRE


def test_expiry_counts_from_when_we_first_saw_the_record_not_from_its_renew_time():
    # A renewTime long past (another machine's clock runs behind) does not make the lease free:
    # only the record staying unchanged for the duration, as we measure it, does.
    ancient = lease("op-b_ffff0000", renew="2000-01-01T00:00:00.000000Z")
    observed = observe(None, LeaseRecord.of(ancient), now=500.0)
    assert decide(observed, CFG.identity, now=501.0) is Action.WAIT


def test_a_holder_that_keeps_renewing_is_never_taken_over():
    observed = observe(None, LeaseRecord.of(lease("op-b_ffff0000", renew="2025-01-02T03:04:00.000000Z")), now=0.0)
    for step in range(1, 20):  # it renews every 2 s; we look every 2 s for 38 s, past the 15 s duration
        renewed = lease("op-b_ffff0000", renew=f"2025-01-02T03:04:{step * 2:02d}.000000Z")
        observed = observe(observed, LeaseRecord.of(renewed), now=step * 2.0)
        assert decide(observed, CFG.identity, now=step * 2.0) is Action.WAIT


def test_an_unchanged_record_keeps_the_time_it_was_first_seen():
    record = LeaseRecord.of(lease("op-b_ffff0000"))
    first = observe(None, record, now=10.0)
    assert observe(first, record, now=20.0) == first
    assert observe(first, dataclasses.replace(record, renew_time="later"), now=20.0).at == 20.0


def test_a_released_lease_is_taken_at_once():
    released = lease("", duration=1)
    assert decide(observe(None, LeaseRecord.of(released), now=50.0), CFG.identity, now=50.0) is Action.ACQUIRE


def test_the_leader_has_lost_only_after_the_renew_deadline_without_a_renewal():
    assert not lost(last_renewed=100.0, now=110.0, renew_deadline=10.0)
    assert lost(last_renewed=100.0, now=110.1, renew_deadline=10.0)


def test_a_created_lease_names_us_with_the_duration_and_no_transition_yet():
    body = lease_body(Action.CREATE, None, CFG, NOW)
    assert body["metadata"] == {"name": CFG.name, "namespace": CFG.namespace}
    assert body["spec"] == {"holderIdentity": CFG.identity, "leaseDurationSeconds": 15,
                            "acquireTime": "2025-01-02T03:04:05.678901Z", "renewTime": "2025-01-02T03:04:05.678901Z",
                            "leaseTransitions": 0}
    assert (body["apiVersion"], body["kind"]) == ("coordination.k8s.io/v1", "Lease")


def test_a_takeover_carries_the_resource_version_read_and_counts_one_more_transition():
    body = lease_body(Action.ACQUIRE, lease("op-b_ffff0000", transitions=3, rv="42"), CFG, NOW)
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["metadata"]["labels"] == {"team": "ocr"}  # a replace keeps what others put there
    assert body["spec"]["holderIdentity"] == CFG.identity
    assert body["spec"]["leaseTransitions"] == 4
    assert body["spec"]["acquireTime"] == body["spec"]["renewTime"] == "2025-01-02T03:04:05.678901Z"


def test_a_renewal_moves_only_the_renew_time():
    current = lease(CFG.identity, transitions=3, acquire="2025-01-02T03:00:00.000000Z", rv="77")
    body = lease_body(Action.RENEW, current, CFG, NOW)
    assert body["metadata"]["resourceVersion"] == "77"
    assert body["spec"] == {**current["spec"], "renewTime": "2025-01-02T03:04:05.678901Z"}


def test_nothing_is_written_while_waiting():
    with pytest.raises(ValueError):
        lease_body(Action.WAIT, lease("op-b_ffff0000"), CFG, NOW)


def test_release_empties_the_holder_and_shortens_the_duration_so_a_standby_takes_over_at_once():
    body = release_body(lease(CFG.identity, transitions=5, rv="9"), CFG, NOW)
    assert body["metadata"]["resourceVersion"] == "9"
    assert body["spec"]["holderIdentity"] == "" and body["spec"]["leaseDurationSeconds"] == 1
    assert body["spec"]["leaseTransitions"] == 5
    assert decide(observe(None, LeaseRecord.of(body), now=0.0), "op-b_ffff0000", now=0.0) is Action.ACQUIRE


def test_release_never_touches_a_lease_someone_else_holds_now():
    assert release_body(lease("op-b_ffff0000"), CFG, NOW) is None


def test_a_candidate_retries_with_jitter_and_the_leader_on_the_period():
    assert retry_wait(CFG, leading=True, jitter=0.9) == 2.0
    assert retry_wait(CFG, leading=False, jitter=0.0) == 2.0
    assert retry_wait(CFG, leading=False, jitter=1.0) == pytest.approx(4.4)


def test_micro_time_is_utc_with_microseconds():
    assert micro_time(NOW) == "2025-01-02T03:04:05.678901Z"


def test_client_gos_defaults_are_valid():
    assert (CFG.lease_duration, CFG.renew_deadline, CFG.retry_period) == (15, 10.0, 2.0)
    assert config_errors(CFG) == []


@pytest.mark.parametrize("change,flag", [
    ({"renew_deadline": 15.0}, "--leader-elect-renew-deadline"),   # must give up before a standby may take over
    ({"retry_period": 9.0}, "--leader-elect-renew-deadline"),      # more than one attempt before giving up
    ({"retry_period": 0.01, "renew_deadline": 5.0}, "--leader-elect-retry-period"),
    ({"lease_duration": 0, "renew_deadline": 0.5, "retry_period": 0.1}, "--leader-elect-lease-duration"),
    ({"lease_duration": 3600}, "--leader-elect-lease-duration"),
    ({"namespace": ""}, "--leader-elect-resource-namespace"),
    ({"namespace": "Not_A_Namespace"}, "--leader-elect-resource-namespace"),
    ({"name": "x" * 300}, "--leader-elect-resource-name"),
    ({"identity": "x" * 200}, "identity"),
])
def test_each_bad_setting_is_refused_naming_its_flag(change, flag):
    errors = config_errors(dataclasses.replace(CFG, **change))
    assert errors and any(e.startswith(flag) for e in errors), errors


def test_the_lease_has_a_rest_path():
    assert LEASE.path("ocr-system", "x") == "/apis/coordination.k8s.io/v1/namespaces/ocr-system/leases/x"

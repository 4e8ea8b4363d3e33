"""Status building: conditions, transitions, events, and the diff that avoids idle writes."""

from __future__ import annotations

import datetime as dt

from ocr_operator.ocrservice import rollout
from ocr_operator.ocrservice import status as St
from ocr_operator.runtime import conditions as C

from .helpers import owner, parsed

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)
LATER = NOW + dt.timedelta(minutes=5)


def deployment(rev="abc", ready=2, replicas=2, updated=2, desired=2, generation=3, observed=3):
    return {"metadata": {"generation": generation, "annotations": {"ocr.causalflow.dev/revision": rev}},
            "spec": {"replicas": desired},
            "status": {"observedGeneration": observed, "replicas": replicas, "readyReplicas": ready,
                       "updatedReplicas": updated}}


def decision(rev="abc", phase="Healthy"):
    st = rollout.RolloutStatus(current_revision=rev, last_good_revision=rev, phase=phase)
    return rollout.Decision(rev, st, (), None,
                            rollout.ConditionSpec("Progressing", "False", "RolloutComplete", "done"),
                            rollout.ConditionSpec("Degraded", "False", "AsExpected", "fine"))


def hpa(current="45", scaling=("True", "ValidMetricFound", "ok")):
    return {"status": {"currentMetrics": [{"type": "Pods", "pods": {"metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                                                                   "current": {"averageValue": current}}}],
                       "conditions": [{"type": "ScalingActive", "status": scaling[0], "reason": scaling[1],
                                       "message": scaling[2]}]}}


def build(body, now=NOW, **kw):
    kw.setdefault("deployment", deployment())
    kw.setdefault("decision", decision())
    kw.setdefault("hpa", hpa())
    return St.build(body, St.Report(parsed(body), "abc", **kw), now=now)


def cond(st, type_):
    return C.get(st["conditions"], type_)


def test_all_pods_ready_on_the_desired_revision_is_ready_and_available():
    st, _ = build(owner({"autoscaling": {}}, generation=3))
    assert cond(st, "Ready")["status"] == "True"
    assert cond(st, "Available")["status"] == "True"
    assert st["observedGeneration"] == 3
    assert all(c["observedGeneration"] == 3 for c in st["conditions"])
    assert st["replicaSummary"] == "2/2"
    assert st["selector"] == "app.kubernetes.io/name=causalflow-ocr,app.kubernetes.io/instance=ocr"
    assert st["url"] == "http://ocr.team-a.svc:8080"
    assert st["gpuUtilization"] == "45/80"


def test_pods_still_rolling_are_not_ready_but_the_old_ones_keep_it_available():
    st, _ = build(owner(), deployment=deployment(updated=1, ready=2, replicas=3))
    assert (cond(st, "Ready")["status"], cond(st, "Ready")["reason"]) == ("False", "RolloutInProgress")
    assert cond(st, "Available")["status"] == "True"


def test_inside_a_rollout_ready_turns_true_with_the_settle_clock_not_before_it():
    started = rollout.RolloutStatus(current_revision="abc", phase=rollout.PROGRESSING)
    waiting = rollout.Decision("abc", started, (), None,
                               rollout.ConditionSpec("Progressing", "True", "RolloutInProgress", "rolling"),
                               rollout.ConditionSpec("Degraded", "False", "AsExpected", "fine"))
    st, _ = build(owner(), decision=waiting)  # the Deployment counts 2/2 Ready, the pods' reports not yet
    assert (cond(st, "Ready")["status"], cond(st, "Ready")["reason"]) == ("False", "ReplicasNotReady")
    settling = rollout.Decision("abc", rollout.RolloutStatus(current_revision="abc", phase=rollout.PROGRESSING,
                                                             ready_since="2026-11-29T12:00:00.000000Z"),
                                (), 5.0, waiting.progressing, waiting.degraded)
    st, _ = build(owner(), decision=settling)
    assert cond(st, "Ready")["status"] == "True"


def test_a_rolled_back_service_is_available_but_not_ready_and_degraded():
    d = decision(phase="RolledBack")
    d = rollout.Decision("abc", d.status, (), None, d.progressing,
                         rollout.ConditionSpec("Degraded", "True", "RolledBack", "revision def failed"))
    st, _ = build(owner(), decision=d)
    assert (cond(st, "Ready")["status"], cond(st, "Ready")["reason"]) == ("False", "RolledBack")
    assert (cond(st, "Degraded")["status"], cond(st, "Degraded")["reason"]) == ("True", "RolledBack")
    assert cond(st, "Available")["status"] == "True"


def test_scaling_active_copies_the_hpa_reason_when_the_metric_is_missing():
    st, _ = build(owner({"autoscaling": {}}), hpa=hpa(scaling=("False", "FailedGetPodsMetric", "unable to get metric DCGM_FI_DEV_GPU_UTIL")))
    c = cond(st, "ScalingActive")
    assert (c["status"], c["reason"]) == ("False", "FailedGetPodsMetric")
    assert "DCGM_FI_DEV_GPU_UTIL" in c["message"]


def test_fixed_replicas_report_no_scaling_condition():
    st, _ = build(owner({"replicas": 2}))
    assert cond(st, "ScalingActive") is None and "gpuUtilization" not in st


def test_an_unchanged_status_keeps_its_transition_times_and_needs_no_patch():
    body = owner({"autoscaling": {}})
    first, changed = build(body)
    assert {c.type for c, _ in changed} == {"Ready", "Available", "Progressing", "Degraded", "ScalingActive"}
    body["status"] = first
    second, changed = build(body, now=LATER)
    assert changed == []
    assert second == first
    assert C.diff(first, second) is None


def test_a_transition_gets_a_new_time_and_only_its_condition_changes():
    body = owner()
    body["status"], _ = build(body)
    second, changed = build(body, now=LATER, deployment=deployment(ready=1))
    assert [(c.type, prev) for c, prev in changed] == [("Ready", "True")]
    assert cond(second, "Ready")["lastTransitionTime"] == "2026-11-29T12:05:00Z"
    assert cond(second, "Available")["lastTransitionTime"] == "2026-11-29T12:00:00Z"


def test_the_diff_deletes_fields_that_are_gone_including_nested_ones():
    old = {"failedRevision": "x", "rollout": {"phase": "RolledBack", "failedRevision": "x"}, "replicas": 1}
    new = {"rollout": {"phase": "Healthy"}, "replicas": 1}
    assert C.diff(old, new) == {"failedRevision": None, "rollout": {"failedRevision": None, "phase": "Healthy"}}


def test_events_are_told_for_ready_transitions_and_missing_metrics_only():
    ready = C.Condition("Ready", "True", "AllReplicasReady", "2/2")
    lost = C.Condition("Ready", "False", "ReplicasNotReady", "1/2")
    metric = C.Condition("ScalingActive", "False", "FailedGetPodsMetric", "no metric")
    prog = C.Condition("Progressing", "True", "RolloutInProgress", "rolling")
    events = St.transition_events([(ready, None), (prog, "False"), (metric, "True")])
    assert [e[:2] for e in events] == [("Normal", "Ready"), ("Warning", "FailedGetPodsMetric")]
    assert St.transition_events([(lost, "True")])[0][0] == "Warning"


def test_a_new_hpa_that_has_not_read_its_metric_yet_is_no_warning():
    metric = C.Condition("ScalingActive", "False", "FailedGetPodsMetric", "no metric")
    assert St.transition_events([(metric, "Unknown")]) == []
    assert St.transition_events([(metric, None)]) == []


def test_an_upgrade_starting_is_a_normal_event_not_a_warning():
    upgrading = C.Condition("Ready", "False", "RolloutInProgress", "revision b: 0/2 pods updated, 2 Ready")
    assert St.transition_events([(upgrading, "True")]) == [("Normal", "RolloutInProgress", upgrading.message)]


def test_an_invalid_spec_is_reported_without_losing_the_revisions():
    body = owner(status={"currentRevision": "abc", "lastGoodRevision": "abc"})
    st, _ = St.build(body, St.InvalidSpec("spec.inference.batchSize must be an integer", deployment()), now=NOW)
    assert (cond(st, "Ready")["reason"], cond(st, "Degraded")["status"]) == ("InvalidSpec", "True")
    assert st["currentRevision"] == "abc" and st["lastGoodRevision"] == "abc"


def test_a_zero_window_says_which_window_scaled_to_zero_without_warnings():
    body = owner({"autoscaling": {"minReplicas": 1, "maxReplicas": 3}}, generation=3)
    before, _ = build(body)
    body["status"] = before
    st, changed = build(body, now=LATER, deployment=deployment(ready=0, replicas=0, updated=0, desired=0),
                        hpa=None, scaled_to_zero_by="nights")
    for type_ in ("Ready", "Available", "ScalingActive"):
        assert "nights" in cond(st, type_)["message"], cond(st, type_)
        assert cond(st, type_)["reason"] == "ScaledToZero"
    assert cond(st, "Ready")["status"] == "True"
    assert all(t != "Warning" for t, _, _ in St.transition_events(changed)), St.transition_events(changed)


def test_a_status_change_of_counts_and_messages_only_is_not_urgent():
    body = owner({"replicas": 2})
    old, _ = build(body, deployment=deployment(ready=0, replicas=2, updated=1))  # RolloutInProgress
    new, _ = build({**body, "status": old}, deployment=deployment(ready=0, replicas=2, updated=2))  # still so
    patch = C.diff(old, new)
    assert patch is not None and set(patch) <= St.COUNTS | {"conditions"}
    assert St.urgent(old, patch) is False


def test_a_condition_reason_change_with_the_same_status_is_not_urgent():
    body = owner({"replicas": 2})
    old, _ = build(body, deployment=deployment(ready=0, updated=1))
    new, _ = build({**body, "status": old}, deployment=deployment(ready=0, updated=2))
    assert C.get(old["conditions"], "Ready")["reason"] == "RolloutInProgress"
    assert C.get(new["conditions"], "Ready")["reason"] == "ReplicasNotReady"
    assert St.urgent(old, C.diff(old, new)) is False


def test_a_condition_status_change_is_urgent():
    body = owner({"replicas": 2})
    old, _ = build(body, deployment=deployment(ready=1))
    new, _ = build({**body, "status": old}, deployment=deployment(ready=2))  # Ready False -> True
    assert St.urgent(old, C.diff(old, new)) is True


def test_a_change_of_the_rollout_record_or_the_revisions_is_urgent():
    body = owner({"replicas": 2})
    old, _ = build(body)
    new, _ = build({**body, "status": old}, decision=decision(phase="Progressing"))
    assert St.urgent(old, C.diff(old, new)) is True
    assert St.urgent(old, {"lastGoodRevision": "def"}) is True
    assert St.urgent(old, {"observedGeneration": 4}) is True


def starting(rev="abc"):
    """The decision of a first rollout that has just begun: Progressing, nothing wrong yet."""
    st = rollout.RolloutStatus(current_revision=rev, phase="Progressing", rollout_started="2026-11-29T12:00:00.000000Z")
    return rollout.Decision(rev, st, (), None,
                            rollout.ConditionSpec("Progressing", "True", "RolloutInProgress", f"rolling out {rev}"),
                            rollout.ConditionSpec("Degraded", "False", "AsExpected", "fine"))


def test_a_new_objects_first_report_of_its_first_rollout_may_wait():
    new, _ = build(owner({"replicas": 2}), deployment=deployment(ready=0, replicas=0, updated=0), decision=starting(),
                   hpa=None)
    patch = C.diff(None, new)
    assert patch["observedGeneration"] and patch["rollout"]["phase"] == "Progressing"
    assert (cond(new, "Ready")["status"], cond(new, "Ready")["reason"]) == ("False", "RolloutInProgress")
    assert St.first_report(None, patch) is True and St.urgent(None, patch) is False


def test_a_first_report_of_pods_already_ready_or_of_a_problem_is_urgent():
    body = owner({"replicas": 2})
    ready, _ = build(body, deployment=deployment(ready=2), decision=starting(), hpa=None)
    assert St.first_report(None, C.diff(None, ready)) is False and St.urgent(None, C.diff(None, ready)) is True
    failing = rollout.Decision("abc", starting().status, (), None, starting().progressing,
                               rollout.ConditionSpec("Degraded", "True", "CrashLoop", "the pod crashes"))
    degraded, _ = build(body, deployment=deployment(ready=0, replicas=0, updated=0), decision=failing, hpa=None)
    assert St.first_report(None, C.diff(None, degraded)) is False and St.urgent(None, C.diff(None, degraded)) is True


def test_only_the_first_report_may_wait_a_later_one_of_the_same_kind_is_urgent():
    body = owner({"replicas": 2})
    first, _ = build(body, deployment=deployment(ready=0, replicas=0, updated=0), decision=starting("abc"), hpa=None)
    upgrade, _ = build({**body, "status": first}, deployment=deployment(ready=0, replicas=0, updated=0),
                       decision=starting("def"), hpa=None)
    patch = C.diff(first, upgrade)
    assert St.first_report(first, patch) is False and St.urgent(first, patch) is True


def test_ready_transitions_inside_a_rollout_are_left_to_the_rollouts_own_events():
    ready = C.Condition("Ready", "True", "AllReplicasReady", "2/2")
    upgrading = C.Condition("Ready", "False", "RolloutInProgress", "revision b: 0/2 pods updated, 2 Ready")
    lost = C.Condition("Ready", "False", "ReplicasNotReady", "1/2")
    assert St.transition_events([(ready, "False")], rollout_tells=True) == []
    assert St.transition_events([(upgrading, "True")], rollout_tells=True) == []
    assert St.transition_events([(lost, "True")], rollout_tells=True)[0][:2] == ("Warning", "NotReadyReplicasNotReady")
    assert St.transition_events([(ready, "False")])[0][:2] == ("Normal", "Ready")  # pods back outside a rollout


def test_the_hpa_s_scaling_condition_is_mirrored_without_urgency():
    body = owner({"autoscaling": {"minReplicas": 1, "maxReplicas": 3}})
    old, _ = build(body, hpa=hpa(scaling=("True", "ValidMetricFound", "ok")))
    new, _ = build({**body, "status": old}, hpa=hpa(scaling=("False", "FailedGetPodsMetric", "no metric")))
    assert C.get(new["conditions"], "ScalingActive")["status"] == "False"
    assert St.urgent(old, C.diff(old, new)) is False

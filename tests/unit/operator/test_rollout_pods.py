"""The rollout's reading of Kubernetes objects (pod_view, summarize), the Deployment side of its contract, an already-good revision's pods, and the quality gate's part."""

from __future__ import annotations

import dataclasses

import pytest

from ocr_operator.ocrservice import rollout
from ocr_operator.ocrservice.rollout import pod_view, summarize
from ocr_operator.ocrservice.rollout import machine, model
from tests.unit.operator.rollout_fixtures import (NEW, OLD, POLICY, PROGRESSING_NEW, at, decide, old_pods, pod, reasons,
                                                  rolled_back, seen, step)


# --------------------------------------------------------------------------- reading Kubernetes objects


def k8s_pod(**status) -> dict:
    return {
        "metadata": {
            "name": "svc-7d9-x",
            "creationTimestamp": "2026-03-01T12:00:01Z",
            "labels": {"ocr.causalflow.dev/revision": NEW},
        },
        "status": status,
    }


def test_pod_view_reads_readiness_the_revision_label_and_the_start_time():
    view = pod_view(
        k8s_pod(
            phase="Running",
            conditions=[{"type": "Ready", "status": "True", "lastTransitionTime": "2026-03-01T12:00:09Z"}],
            containerStatuses=[{"name": "server", "restartCount": 0, "state": {"running": {"startedAt": "2026-03-01T12:00:02Z"}}}],
        )
    )
    assert view.revision == NEW and view.ready and view.phase == "Running"
    assert view.created == at(1) and view.started == at(2) and view.ready_transition == at(9)
    assert not view.deleting and not view.unschedulable


def test_pod_view_reads_waiting_reasons_restarts_and_the_last_termination():
    view = pod_view(
        k8s_pod(
            phase="Running",
            containerStatuses=[
                {
                    "name": "server",
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                }
            ],
        )
    )
    assert view.waiting_reason == "CrashLoopBackOff" and view.message == "back-off 40s"
    assert view.restarts == 4 and view.last_terminated_reason == "OOMKilled"


def test_pod_view_reads_unschedulable_from_the_pod_scheduled_condition():
    view = pod_view(
        k8s_pod(
            phase="Pending",
            conditions=[
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}
            ],
        )
    )
    assert view.unschedulable and "Insufficient nvidia.com/gpu" in view.message and not view.ready


def test_pod_view_takes_the_pod_start_time_when_no_container_runs():
    view = pod_view(k8s_pod(phase="Running", startTime="2026-03-01T12:00:02Z",
                            containerStatuses=[{"name": "server", "ready": False, "state": {}}]))
    assert view.started == at(2)


def test_a_pod_whose_ready_condition_turned_false_after_it_started_counts_as_having_lost_readiness():
    view = pod_view(
        k8s_pod(
            phase="Running",
            startTime="2026-03-01T12:00:01Z",
            conditions=[{"type": "Ready", "status": "False", "lastTransitionTime": "2026-03-01T12:00:06Z"}],
            containerStatuses=[{"name": "server", "ready": False, "started": True, "state": {}}],
        )
    )
    d = step(PROGRESSING_NEW, seen(*old_pods(), view), 8)
    assert d.status.failed_reason == "ReadinessLost" and d.target_revision == OLD


def test_a_pod_that_was_never_ready_is_judged_on_its_startup_budget_not_as_lost():
    view = pod_view(
        k8s_pod(
            phase="Running",
            startTime="2026-03-01T12:00:01Z",
            conditions=[{"type": "Ready", "status": "False", "lastTransitionTime": "2026-03-01T12:00:01Z"}],
            containerStatuses=[{"name": "server", "ready": False, "started": True,
                                "state": {"running": {"startedAt": "2026-03-01T12:00:01Z"}}}],
        )
    )
    assert step(PROGRESSING_NEW, seen(*old_pods(), view), 10).status.phase == rollout.PROGRESSING
    assert step(PROGRESSING_NEW, seen(*old_pods(), view), 17).status.failed_reason == "ReadinessTimeout"


def test_pod_view_ignores_the_normal_container_creating_wait():
    view = pod_view(k8s_pod(phase="Pending", containerStatuses=[{"name": "s", "state": {"waiting": {"reason": "ContainerCreating"}}}]))
    assert view.waiting_reason is None


def test_summarize_reads_the_revision_annotation_replicas_and_the_progress_deadline():
    deployment = {
        "metadata": {"annotations": {"ocr.causalflow.dev/revision": NEW}},
        "spec": {"replicas": 3},
        "status": {"conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]},
    }
    observed = summarize(deployment, [k8s_pod(phase="Pending")])
    assert observed.deployment_revision == NEW and observed.desired_replicas == 3
    assert observed.progress_deadline_exceeded
    assert len(observed.pods) == 1 and observed.pods[0].name == "svc-7d9-x"
    fine = dict(deployment, status={"conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]})
    assert not summarize(fine, []).progress_deadline_exceeded


QUOTA = ('pods "svc-7d9-x" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, '
         'used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=3')


def test_summarize_reads_the_deployments_refusal_to_create_pods_and_since_when():
    failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": QUOTA,
               "lastTransitionTime": "2026-03-01T12:00:04Z"}
    deployment = {"metadata": {"annotations": {"ocr.causalflow.dev/revision": NEW}}, "spec": {"replicas": 2},
                  "status": {"conditions": [failure]}}
    assert summarize(deployment, []).create_failure == (QUOTA, at(4))
    for cleared in (dict(failure, status="False"), dict(failure, reason="FailedDelete")):
        assert summarize(dict(deployment, status={"conditions": [cleared]}), []).create_failure is None


# --------------------------------------------------------------------------- the Deployment side of the contract


def test_the_rendered_deployment_keeps_old_pods_until_new_ones_stayed_ready_for_the_settle_period():
    from ocr_operator.ocrservice.render import deployment
    from tests.unit.operator.helpers import owner, parsed

    body = owner({"rollout": {"settleSeconds": 45}})
    spec = parsed(body)
    dep = deployment.render(body, spec, deployment.render_pod_template(body, spec, config_hash="x"),
                            replicas=1)
    assert dep["spec"]["minReadySeconds"] == 45
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_the_settle_period_in_the_deployment_stays_below_the_progress_deadline_as_the_api_requires():
    from ocr_operator.ocrservice.render import deployment
    from tests.unit.operator.helpers import owner, parsed

    body = owner({"rollout": {"settleSeconds": 600, "modelLoadTimeoutSeconds": 60, "progressDeadlineSeconds": 120}})
    spec = parsed(body)
    dep = deployment.render(body, spec, deployment.render_pod_template(body, spec, config_hash="x"),
                            replicas=1)
    assert dep["spec"]["minReadySeconds"] == 119


def test_a_refused_rollback_keeps_the_failed_revision_as_no_good_revision_and_says_why():
    oom = pod("new-0", created=1, phase="Running", restarts=1, last_terminated_reason="OOMKilled")
    rolled = step(PROGRESSING_NEW, seen(oom, *old_pods()), 3)
    assert rolled.target_revision == OLD and rolled.status.phase == rollout.ROLLED_BACK
    refused = machine.refuse_rollback(rolled, NEW, "its stored pod template does not match its revision hash",
                                      seen(oom, *old_pods()))
    assert refused.target_revision == NEW and refused.status.current_revision == NEW
    assert refused.status.phase == rollout.NO_GOOD_REVISION and refused.status.failed_revision == NEW
    assert f"rollback to revision {OLD} refused" in refused.status.failed_message
    assert [(e.type, e.reason) for e in refused.events] == [("Warning", "RollbackRefused")]
    assert refused.degraded.status == "True" and "refused" in refused.degraded.message
    # The next reconcile does not try the rollback again: the failed revision stays.
    assert step(refused.status, seen(oom, *old_pods()), 10).target_revision == NEW


# --------------------------------------------------------------------------- an already-good revision's pods

# The spec goes back to the last good revision (OLD) while NEW is still rolling out, or after it
# was rolled back: OLD's pods that served all along are judged again in the new attempt. What
# their running life brought (liveness restarts of a wedged engine, an OOM kill under load, a
# restart in progress) is the kubelet's to handle, never a failure of the revision that proved good.
LIVENESS_RESTARTED = [
    ("restarts past maxRestarts", pod("old-0", OLD, ready=True, created=-3600, phase="Running", restarts=5,
                                      last_terminated_reason="Error")),
    ("CrashLoopBackOff", pod("old-0", OLD, created=-3600, phase="Running", restarts=2,
                             waiting_reason="CrashLoopBackOff", last_terminated_reason="Error")),
    ("OOMKilled", pod("old-0", OLD, ready=True, created=-3600, phase="Running", restarts=1,
                      last_terminated_reason="OOMKilled")),
    ("restarting, past the startup budget since creation", pod(
        "old-0", OLD, created=-3600, phase="Running", restarts=1, last_terminated_reason="Error",
        started=at(-2), ready_transition=at(-4))),
]


@pytest.mark.parametrize("why,old_pod", LIVENESS_RESTARTED, ids=[c[0] for c in LIVENESS_RESTARTED])
def test_going_back_to_the_last_good_revision_does_not_fail_it_for_its_pods_runtime_restarts(why, old_pod):
    d = step(PROGRESSING_NEW, seen(old_pod, pod("old-1", OLD, ready=True, created=-3600), pod("new-0", created=1),
                                   revision=OLD), 4, desired=OLD)
    assert d.target_revision == OLD
    assert d.status.phase == rollout.PROGRESSING and d.status.failed_revision is None, d.status
    assert d.degraded.status == "False"
    assert reasons(d) == ["RolloutStarted"]


def test_the_last_good_revision_settles_healthy_again_once_its_restarted_pod_is_back():
    restarted = pod("old-0", OLD, ready=True, created=-3600, phase="Running", restarts=5, last_terminated_reason="Error")
    both = seen(restarted, pod("old-1", OLD, ready=True, created=-3600), revision=OLD)
    d1 = step(rolled_back(), both, 30, desired=OLD)
    d2 = step(d1.status, both, 31, desired=OLD)
    d3 = step(d2.status, both, 36, desired=OLD)
    assert d3.status.phase == rollout.HEALTHY and d3.status.last_good_revision == OLD
    assert d3.degraded.status == "False" and reasons(d3) == ["RolloutSucceeded"]


def test_a_new_revisions_pods_are_still_judged_on_restarts():
    restarted = pod("new-0", created=1, phase="Running", restarts=5, last_terminated_reason="Error")
    d = step(PROGRESSING_NEW, seen(*old_pods(), restarted), 5)
    assert d.status.phase == rollout.ROLLED_BACK and d.status.failed_reason == "TooManyRestarts"


# --------------------------------------------------------------------------- the quality gate's part


def test_a_quality_gate_failure_rolls_back_like_a_health_failure_with_one_warning():
    failure = rollout.Failure("QualityRegression", "page a.png: distance 0.9000 > maxPageDistance 0.1")
    awaiting = pod("new-0", created=1, phase="Running", awaiting_gate=True, ip="10.0.0.5")
    d = decide(NEW, PROGRESSING_NEW, seen(*old_pods(), awaiting), POLICY, at(8), gate_failure=failure)
    assert d.target_revision == OLD and d.status.phase == rollout.ROLLED_BACK
    assert d.status.failed_reason == "QualityRegression" and "page a.png" in d.status.failed_message
    assert reasons(d) == ["RolledBack"] and d.degraded.status == "True"


def test_a_gated_pod_gets_the_gate_time_on_top_of_its_startup_budget():
    gated = dataclasses.replace(POLICY, gate_seconds=30)
    awaiting = pod("new-0", created=0, phase="Running", awaiting_gate=True)
    assert step(PROGRESSING_NEW, seen(*old_pods(), awaiting), 20, policy=gated).status.phase == rollout.PROGRESSING
    late = step(PROGRESSING_NEW, seen(*old_pods(), awaiting), 47, policy=gated)
    assert late.status.failed_reason == model.REASON_READINESS_TIMEOUT and "30s quality gate" in late.status.failed_message


def test_pod_view_reads_a_pod_held_back_only_by_the_quality_gate_and_its_ip():
    raw = {"metadata": {"name": "p", "creationTimestamp": "2026-03-01T12:00:00Z"},
           "status": {"phase": "Running", "podIP": "10.1.2.3", "conditions": [
               {"type": "ContainersReady", "status": "True"},
               {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"}]}}
    view = pod_view(raw)
    assert view.awaiting_gate and view.ip == "10.1.2.3" and not view.ready
    raw["status"]["conditions"].append({"type": "ocr.causalflow.dev/quality-gate", "status": "True"})
    assert not pod_view(raw).awaiting_gate

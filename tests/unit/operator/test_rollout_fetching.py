"""spec.model.source.s3's model-fetch init container as the rollout reads it (rollout/fetching.py,
pods.py): a failed fetch is a named failure rolled back like a crash; the ModelFetching condition
comes from the fetcher's last progress line."""

from __future__ import annotations

import dataclasses
import json

from ocr_operator.ocrservice import rollout
from ocr_operator.ocrservice.rollout import pod_view
from ocr_operator.ocrservice.rollout.fetching import condition, fetching_pod, parse_progress
from tests.unit.operator.rollout_fixtures import (NEW, OLD, POLICY, PROGRESSING_NEW, HEALTHY_OLD, old_pods, pod,
                                                  seen, step)

MISMATCH = ("ChecksumMismatch: model-00001.safetensors from s3://models/ocr/model-00001.safetensors has sha256 "
            "ab12, spec.model.checksums expects cd34")


def k8s_pod(*init_statuses: dict) -> dict:
    return {"metadata": {"name": "svc-7d9-x", "creationTimestamp": "2026-03-01T12:00:01Z",
                         "labels": {"ocr.causalflow.dev/revision": NEW}},
            "status": {"phase": "Pending", "initContainerStatuses": list(init_statuses),
                       "containerStatuses": [{"name": "server", "state": {"waiting": {"reason": "PodInitializing"}}}]}}


def test_a_fetch_that_ended_in_checksum_mismatch_is_read_with_the_file_it_names():
    view = pod_view(k8s_pod({"name": "model-fetch", "restartCount": 0,
                             "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": MISMATCH}}}))
    assert view.fetch_failure == ("ChecksumMismatch", MISMATCH.split(": ", 1)[1]) and not view.fetching


def test_a_failed_fetch_restarting_is_read_from_its_last_termination():
    view = pod_view(k8s_pod({"name": "model-fetch", "restartCount": 1,
                             "state": {"running": {"startedAt": "2026-03-01T12:00:20Z"}},
                             "lastState": {"terminated": {"exitCode": 1, "message": "ModelFetchFailed: the download "
                                                          "from s3://m/ocr/ stalled: no byte for 120s"}}}))
    assert view.fetch_failure == ("ModelFetchFailed", "the download from s3://m/ocr/ stalled: no byte for 120s")


def test_the_fetch_container_in_crash_loop_for_another_cause_is_a_model_fetch_failure():
    view = pod_view(k8s_pod({"name": "model-fetch", "restartCount": 3,
                             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                             "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}))
    assert view.fetch_failure[0] == "ModelFetchFailed" and "CrashLoopBackOff (restarts: 3)" in view.fetch_failure[1]


def test_a_running_fetch_is_fetching_and_not_a_failure():
    view = pod_view(k8s_pod({"name": "model-fetch", "state": {"running": {"startedAt": "2026-03-01T12:00:02Z"}}}))
    assert view.fetching and view.fetch_failure is None


def test_a_failed_fetch_of_a_new_pod_rolls_back_to_the_last_good_revision_naming_the_file():
    failing = pod("new-0", created=1, fetch_failure=("ChecksumMismatch", "model-00001.safetensors from s3://m/x has "
                                                     "sha256 ab12, spec.model.checksums expects cd34"))
    d = step(PROGRESSING_NEW, seen(*old_pods(), failing), 3)
    assert d.target_revision == OLD and d.status.phase == rollout.ROLLED_BACK
    assert d.status.failed_reason == "ChecksumMismatch"
    assert "new-0 could not fetch its model" in d.status.failed_message
    assert "model-00001.safetensors" in d.status.failed_message


def test_the_last_good_revisions_failed_fetch_is_not_judged_as_a_failure_of_that_revision():
    failing = pod("old-new", OLD, created=1, fetch_failure=("ModelFetchFailed", "no answer from http://s3"))
    d = step(HEALTHY_OLD, seen(*old_pods(), failing, revision=OLD), 3, desired=OLD)
    assert d.status.failed_revision is None and d.status.phase == rollout.HEALTHY


def test_the_fetch_bound_adds_to_a_new_pods_startup_budget():
    fetching = pod("new-0", created=1, fetching=True)
    budget = POLICY.startup_budget_seconds
    with_fetch = dataclasses.replace(POLICY, fetch_seconds=600)
    assert step(PROGRESSING_NEW, seen(*old_pods(), fetching), budget + 2).status.failed_reason == "ReadinessTimeout"
    d = step(PROGRESSING_NEW, seen(*old_pods(), fetching), budget + 2, policy=with_fetch)
    assert d.status.failed_reason is None and d.status.phase == rollout.PROGRESSING


def test_progress_is_the_last_json_progress_line_of_the_log_tail():
    line = {"event": "progress", "percent": 42.5, "bytes": 2_900_000_000, "total_bytes": 6_800_000_000, "files": 3,
            "total_files": 7, "mb_per_s": 180.4}
    progress = parse_progress("not json\n" + json.dumps(line) + "\n")
    assert progress is not None and progress.percent == 42.5 and progress.files == 3 and progress.total_files == 7
    assert parse_progress("Traceback (most recent call last):") is None


def test_the_condition_shows_the_fetching_pods_percentage_then_fetched_or_the_failure():
    progress = parse_progress(json.dumps({"event": "progress", "percent": 42.5, "bytes": 2_900_000_000,
                                          "total_bytes": 6_800_000_000, "files": 3, "total_files": 7, "mb_per_s": 180}))
    assert condition("svc-1", progress, None) == (
        "True", "Fetching", "pod svc-1: 42.5% (2.90/6.80 GB, 3/7 files, 180 MB/s)")
    assert condition(None, None, None)[:2] == ("False", "Fetched")
    assert condition(None, None, ("ChecksumMismatch", "a.bin differs")) == (
        "False", "FetchFailed", "ChecksumMismatch: a.bin differs")


def test_the_log_read_is_of_the_first_fetching_pod_of_the_revision_only():
    pods = [pod("b", fetching=True), pod("a", fetching=True), pod("c", OLD, fetching=True), pod("d")]
    assert fetching_pod(pods, NEW) == "a" and fetching_pod(pods, "other") is None


def test_a_fetcher_waiting_for_another_pods_fetch_shows_no_percentage():
    waiting = json.dumps({"event": "waiting", "message": "another pod of this node is fetching the same weights"})
    assert parse_progress(waiting) is None
    assert condition("svc-1", None, None) == ("True", "Fetching", "pod svc-1 is fetching the model")


def test_the_condition_shows_that_the_fetcher_waits_for_s3_why_and_the_budget_left():
    line = {"event": "progress", "percent": 16.7, "bytes": 4194304, "total_bytes": 25165824, "files": 1,
            "total_files": 6, "mb_per_s": 1.1, "seconds": 3.8,
            "waiting": "waiting for S3: no answer from http://10.0.0.5:7070 (EndpointConnectionError); retry 3, "
                       "2s waited, 298s of the 300s outage budget left",
            "outage": {"reason": "no answer from http://10.0.0.5:7070 (EndpointConnectionError)", "retries": 3,
                       "waited_seconds": 2.4, "budget_left_seconds": 297.6, "budget_seconds": 300}}
    assert condition("svc-1", parse_progress(json.dumps(line)), None) == ("True", "Fetching", (
        "pod svc-1: waiting for S3: no answer from http://10.0.0.5:7070 (EndpointConnectionError); retry 3, 2s "
        "waited, 298s of the 300s outage budget left; 16.7% (0.00/0.03 GB, 1/6 files, 1 MB/s)"))

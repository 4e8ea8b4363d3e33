"""Why a batch's workers are not all there (ocr_operator.ocrbatch.waiting): the Job's refusals to
create pods, read from its Events, and workers no node takes."""

from ocr_operator.ocrbatch import decide, waiting

QUOTA = ('Error creating: pods "archive-0-x7k2p" is forbidden: exceeded quota: batch-pods, requested: pods=1, '
         'used: pods=0, limited: pods=0')


def event(reason: str, at: str, message: str = "", **extra) -> dict:
    return {"reason": reason, "lastTimestamp": at, "message": message, **extra}


def job(parallelism: int = 2, completions: int | None = None, **status) -> dict:
    spec = {"parallelism": parallelism, **({"completions": completions} if completions is not None else {})}
    return {"spec": spec, "status": status}


def test_a_job_with_fewer_pods_than_its_parallelism_is_short_of_workers():
    assert waiting.short_of_workers(job(2))
    assert waiting.short_of_workers(job(2, active=1))
    assert not waiting.short_of_workers(job(2, active=2))


def test_a_job_near_its_end_needs_only_the_completions_left():
    assert not waiting.short_of_workers(job(4, completions=4, active=1, succeeded=3))
    assert waiting.short_of_workers(job(4, completions=4, active=0, succeeded=3))


def test_a_finished_job_is_never_short_of_workers():
    done = job(2, conditions=[{"type": "Complete", "status": "True"}])
    failed = job(2, conditions=[{"type": "Failed", "status": "True"}])
    assert not waiting.short_of_workers(done) and not waiting.short_of_workers(failed)


def test_the_last_failed_create_is_the_refusal():
    events = [event("FailedCreate", "2026-12-07T10:00:00Z", "Error creating: old"),
              event("FailedCreate", "2026-12-07T10:00:09Z", QUOTA)]
    assert waiting.refusal(events) == QUOTA


def test_a_pod_created_after_the_refusal_ends_it():
    events = [event("FailedCreate", "2026-12-07T10:00:00Z", QUOTA), event("SuccessfulCreate", "2026-12-07T10:00:30Z")]
    assert waiting.refusal(events) is None


def test_a_refusal_in_the_same_second_as_a_creation_still_counts():
    """One sync of the Job controller created some pods and was refused the rest."""
    events = [event("SuccessfulCreate", "2026-12-07T10:00:00Z"), event("FailedCreate", "2026-12-07T10:00:00Z", QUOTA)]
    assert waiting.refusal(events) == QUOTA


def test_an_events_series_counts_at_its_last_observation():
    repeated = event("FailedCreate", "2026-12-07T10:00:00Z", QUOTA,
                     series={"count": 9, "lastObservedTime": "2026-12-07T10:05:00.000000Z"})
    assert waiting.refusal([repeated, event("SuccessfulCreate", "2026-12-07T10:01:00Z")]) == QUOTA


def test_other_events_and_no_events_are_no_refusal():
    assert waiting.refusal([]) is None
    assert waiting.refusal([event("SuccessfulCreate", "2026-12-07T10:00:00Z"),
                            event("Completed", "2026-12-07T10:09:00Z")]) is None


def test_a_long_refusal_is_cut_for_the_condition():
    said = waiting.refusal([event("FailedCreate", "2026-12-07T10:00:00Z", "admission webhook denied: " + "x" * 5000)])
    assert said is not None and len(said) == waiting.MESSAGE_CHARS


def pod(name: str, scheduled: dict | None) -> dict:
    conditions = [{"type": "PodScheduled", **scheduled}] if scheduled else []
    return {"metadata": {"name": name}, "status": {"phase": "Pending", "conditions": conditions}}


def test_an_unschedulable_worker_is_named_with_the_schedulers_words():
    pods = [pod("archive-1-b", {"status": "True"}),
            pod("archive-0-a", {"status": "False", "reason": "Unschedulable",
                                "message": "0/3 nodes are available: 3 Insufficient cpu."})]
    assert waiting.unschedulable(pods) == "pod archive-0-a: 0/3 nodes are available: 3 Insufficient cpu."
    assert waiting.unschedulable([pod("archive-0-a", {"status": "False", "reason": "SchedulingGated"})]) is None


def test_a_refusal_comes_before_an_unschedulable_pod():
    pods = [pod("archive-0-a", {"status": "False", "reason": "Unschedulable", "message": "no fit"})]
    assert waiting.waiting(QUOTA, pods) == waiting.Waiting(
        waiting.NOT_CREATED, f"the Job cannot create the workers' pods: {QUOTA}")
    assert waiting.waiting(None, pods) == waiting.Waiting(
        waiting.UNSCHEDULABLE, "no node can take a worker: pod archive-0-a: no fit")
    assert waiting.waiting(None, []) is None


def test_a_batch_whose_workers_cannot_be_created_is_pending_and_not_ready():
    missing = waiting.waiting(QUOTA, [])
    ph = decide.phase_of({"status": {}}, None, missing)
    assert (ph.phase, ph.reason, ph.ready) == (decide.PENDING, waiting.NOT_CREATED, False)
    assert QUOTA in ph.message


def test_a_batch_whose_created_workers_are_all_unschedulable_is_still_pending():
    missing = waiting.Waiting(waiting.UNSCHEDULABLE, "no node can take a worker: pod a: no fit")
    ph = decide.phase_of({"status": {"active": 2}}, None, missing)
    assert (ph.phase, ph.reason, ph.ready) == (decide.PENDING, waiting.UNSCHEDULABLE, False)


def test_a_running_batch_short_of_workers_says_why_beside_its_counts():
    missing = waiting.waiting(QUOTA, [])
    ph = decide.phase_of({"status": {"active": 1, "ready": 1}}, None, missing)
    assert (ph.phase, ph.reason, ph.ready) == (decide.RUNNING, "Running", True)
    assert ph.message == f"1 worker(s) running; the Job cannot create the workers' pods: {QUOTA}"

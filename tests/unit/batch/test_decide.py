"""The OcrBatch controller's decisions (ocr_operator.ocrbatch.decide): preflight, phase, progress, callback."""

import json

from ocr_operator.ocrbatch import decide
from ocr_batch_worker.progress import Progress, summarize

SERVICE = {"metadata": {"name": "invoices"}, "spec": {}}
ENDPOINT = {"spec": {"clusterIP": "10.96.0.7", "ports": [{"port": 8080}]}}


def spec(**over) -> dict:
    base = {"service": "invoices", "input": {"pvc": {"claimName": "docs", "path": "/in"}},
            "output": {"pvc": {"claimName": "results", "path": "/"}}}
    return {**base, **over}


def found(**over) -> decide.Found:
    base = dict(service=SERVICE, service_endpoint=ENDPOINT, claims={"docs": True, "results": True}, secrets={})
    return decide.Found(**{**base, **over})


def test_a_batch_with_everything_in_place_may_start():
    assert decide.preflight(spec(), found()) is None


def test_a_missing_ocrservice_is_named_with_its_field():
    missing = decide.preflight(spec(), found(service=None, service_endpoint=None))
    assert missing == decide.Missing("ServiceNotFound", "spec.service: OcrService invoices does not exist in this namespace")


def test_a_missing_claim_names_the_field_and_the_claim():
    missing = decide.preflight(spec(), found(claims={"docs": True, "results": False}))
    assert (missing.reason, missing.message) == (
        "ClaimNotFound", "spec.output.pvc.claimName: PersistentVolumeClaim results does not exist in this namespace")


def test_a_missing_secret_or_key_names_the_field_and_the_secret():
    s3 = spec(input={"s3": {"url": "s3://docs/in/", "credentialsSecret": "s3-creds"}},
              callback={"url": "https://hooks.example/ocr", "secretRef": {"name": "hook", "key": "hmac"}})
    creds = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
    key = "a2V5LW9mLTMyLWJ5dGVzLWF0LWxlYXN0LWZvci1obWFjLXNoYTI1Ng=="  # 40 bytes, base64
    assert decide.preflight(s3, found(secrets={"hook": {"hmac": key}})).message == \
        ("spec.input.s3.credentialsSecret: Secret s3-creds does not exist in this namespace or lacks a key this "
         "field needs (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
    assert decide.preflight(s3, found(secrets={"s3-creds": creds, "hook": {"secret": key}})).message == \
        "spec.callback.secretRef: Secret hook does not exist in this namespace or lacks a key this field needs (hmac)"
    assert decide.preflight(s3, found(secrets={"s3-creds": creds, "hook": {"hmac": key}})) is None


def test_an_ocrservice_with_auth_needs_its_keys_secret_and_key():
    with_auth = {"spec": {"auth": {"secretName": "keys"}}}
    assert decide.service_auth(with_auth) == ("keys", "api-keys")
    assert decide.service_auth({"spec": {"auth": {"secretName": "k", "key": "list"}}}) == ("k", "list")
    assert decide.service_auth(SERVICE) is None
    assert decide.preflight(spec(), found(service=with_auth)).message == (
        "spec.service (OcrService invoices, its spec.auth): Secret keys does not exist in this namespace or lacks a "
        "key this field needs (api-keys)")
    missing = decide.preflight(spec(), found(service=with_auth, secrets={"keys": {"other": "x"}}))
    assert (missing.reason, missing.message) == (
        "SecretNotFound", "spec.service (OcrService invoices, its spec.auth): Secret keys does not exist in this "
                          "namespace or lacks a key this field needs (api-keys)")
    assert decide.preflight(spec(), found(service=with_auth, secrets={"keys": {"api-keys": "x"}})) is None


def test_an_ocrservice_serving_https_needs_its_certificate_secret_and_the_workers_trust_its_ca():
    with_tls = {"spec": {"tls": {"secretName": "cert"}}}
    assert decide.service_tls(with_tls) == "cert" and decide.service_tls(SERVICE) is None
    assert decide.preflight(spec(), found(service=with_tls)).message == (
        "spec.service (OcrService invoices, its spec.tls): Secret cert does not exist in this namespace or lacks a "
        "key this field needs (tls.crt)")
    missing = decide.preflight(spec(), found(service=with_tls, secrets={"cert": {"tls.key": "k"}}))
    assert (missing.reason, missing.message) == (
        "SecretNotFound", "spec.service (OcrService invoices, its spec.tls): Secret cert does not exist in this "
                          "namespace or lacks a key this field needs (tls.crt)")
    assert decide.preflight(spec(), found(service=with_tls, secrets={"cert": {"tls.crt": "c", "tls.key": "k"}})) is None
    assert decide.trust_key({"tls.crt": "c", "ca.crt": "a"}) == "ca.crt"  # cert-manager's issuing CA
    assert decide.trust_key({"tls.crt": "c", "tls.key": "k"}) == "tls.crt"  # self-signed: its own CA
    assert decide.server_name("invoices", "ocr") == "invoices.ocr.svc"
    assert decide.service_url(ENDPOINT, https=True) == "https://10.96.0.7:8080"


def test_the_service_url_is_the_cluster_ip_and_port():
    assert decide.service_url(ENDPOINT) == "http://10.96.0.7:8080"
    assert decide.service_url({"spec": {"clusterIP": "fd00::7", "ports": [{"port": 80}]}}) == "http://[fd00::7]:80"


def summary(**counts):
    return summarize([json.loads(Progress(index=0, shards=1, **counts).to_json())], 1)


def job(conditions=(), **status) -> dict:
    return {"status": {"conditions": [{"type": t, "status": "True", "reason": r, "message": m}
                                      for t, r, m in conditions], **status}}


def test_the_phase_follows_the_jobs_conditions():
    s = summary(documents_total=3, documents_done=3, pages_total=7, pages_done=6, pages_failed=1)
    assert decide.phase_of(None, None).phase == decide.PENDING
    assert decide.phase_of(job(), None).phase == decide.PENDING
    assert decide.phase_of(job(active=2), s).phase == decide.RUNNING
    done = decide.phase_of(job([("Complete", "", "")]), s)
    assert (done.phase, done.message) == (decide.SUCCEEDED, "6 pages done, 1 failed, of 7 found in 3/3 documents")
    late = decide.phase_of(job([("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")]), s)
    assert (late.phase, late.reason) == (decide.FAILED, "DeadlineExceeded")


def test_a_failed_batch_says_the_workers_fatal_error():
    s = summary(fatal="input.pvc.path: /batch/input/in does not exist")
    ph = decide.phase_of(job([("Failed", "FailedIndexes", "Job has failed indexes")]), s)
    assert ph.message == "Job has failed indexes: input.pvc.path: /batch/input/in does not exist"



def test_a_suspended_batch_is_suspended_not_ready_while_its_workers_stop_and_after():
    s = summary(documents_total=3, documents_done=1, pages_total=4, pages_done=2)
    stopping = decide.phase_of(job(active=1, terminating=1), s, suspended=True)
    assert (stopping.phase, stopping.reason, stopping.ready) == (decide.SUSPENDED, "Suspended", False)
    assert stopping.message == "spec.suspend: 2 worker(s) stopping; 2 pages done, 0 failed, of 4 found in 1/3 documents"
    assert decide.phase_of(job(), None, suspended=True).message == "spec.suspend: no worker running"
    assert decide.SUSPENDED not in decide.TERMINAL


def test_a_batch_that_finished_as_it_was_suspended_has_finished():
    s = summary(documents_total=1, documents_done=1, pages_total=1, pages_done=1)
    assert decide.phase_of(job([("Complete", "", "")]), s, suspended=True).phase == decide.SUCCEEDED
    assert decide.phase_of(job([("Failed", "DeadlineExceeded", "late")]), s, suspended=True).phase == decide.FAILED



def test_a_suspended_batch_shows_no_rate_and_no_eta_from_its_stopped_workers_last_reports():
    report = json.loads(Progress(index=0, shards=1, documents_total=4, documents_done=2, pages_total=2,
                                 pages_done=2).to_json())
    s = summarize([{**report, "pages_per_second": 1.5}], 1)
    assert (decide.progress_status(s)["pagesPerSecond"], decide.progress_status(s)["eta"]) == ("1.50", "1s")
    stopped = decide.progress_status(s, moving=False)
    assert (stopped["pagesPerSecond"], stopped["eta"], stopped["pageSummary"]) == ("0.00", "", s.page_summary)

def test_the_jobs_suspend_follows_the_batchs_both_ways():
    assert decide.suspend_change(True, {"spec": {}}) is True
    assert decide.suspend_change(True, {"spec": {"suspend": True}}) is None
    assert decide.suspend_change(False, {"spec": {"suspend": True}}) is False  # resumed, or suspended by hand
    assert decide.suspend_change(False, {"spec": {"suspend": False}}) is None
    assert decide.suspend_change(False, {"spec": {}}) is None

def test_the_last_progress_line_of_a_log_is_the_report():
    text = ('{"progress": {"index": 0, "pages_done": 1}}\n2026 INFO something\n'
            '{"progress": {"index": 0, "pages_done": 5}}\n{"progress": {"index": 0, "pag')  # cut mid-line
    assert decide.report_from_log(text) == {"index": 0, "pages_done": 5}
    assert decide.report_from_log("nothing yet\n") is None


def test_a_termination_message_is_a_report_only_when_it_is_one():
    assert decide.report_from_message('{"index": 1, "pages_done": 3}') == {"index": 1, "pages_done": 3}
    assert decide.report_from_message("Error: out of memory") is None
    assert decide.report_from_message(None) is None


def pod(name, index, created, state):
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "labels": {"batch.kubernetes.io/job-completion-index": str(index)}},
            "status": {"containerStatuses": [{"state": state}]}}


def test_the_newest_pod_of_each_index_is_the_one_read():
    old = pod("b-0-x", 0, "2026-12-02T10:00:00Z", {"terminated": {"exitCode": 143}})
    new = pod("b-0-y", 0, "2026-12-02T10:05:00Z", {"running": {}})
    other = pod("b-1-z", 1, "2026-12-02T10:00:00Z", {"running": {}})
    latest = decide.latest_per_index([new, old, other])
    assert {i: p["metadata"]["name"] for i, p in latest.items()} == {0: "b-0-y", 1: "b-1-z"}
    assert decide.running(new) and not decide.running(old) and decide.terminated(old) == {"exitCode": 143}


def test_the_callback_is_due_once_per_end_and_only_with_a_callback():
    batch = {"spec": {"callback": {"url": "https://h"}}, "status": {}}
    assert decide.callback_due(batch, decide.RUNNING) is None
    assert decide.callback_due(batch, decide.SUCCEEDED) == "batch.completed"
    assert decide.callback_due(batch, decide.CANCELLED) == "batch.cancelled"
    sent = {**batch, "status": {"callback": {"event": "batch.completed", "state": "Delivered"}}}
    assert decide.callback_due(sent, decide.SUCCEEDED) is None
    gave_up = {**batch, "status": {"callback": {"event": "batch.failed", "state": "GaveUp"}}}
    assert decide.callback_due(gave_up, decide.FAILED) is None
    assert decide.callback_due({"spec": {}, "status": {}}, decide.FAILED) is None


def test_the_progress_status_has_the_printer_columns_fields():
    s = summary(documents_total=4, documents_done=1, pages_total=10, pages_done=4, started_at=0, updated_at=2)
    st = decide.progress_status(s)
    assert st["pageSummary"] == "4/10" and st["pages"] == {"total": 10, "done": 4, "failed": 0}
    assert st["pagesPerSecond"] == "2.00" and st["documents"]["total"] == 4


def test_only_a_job_owned_by_this_batch_is_taken_for_its_job():
    batch = {"metadata": {"name": "archive", "uid": "u-2"}}
    mine = {"metadata": {"ownerReferences": [{"kind": "OcrBatch", "uid": "u-2", "controller": True}]}}
    earlier = {"metadata": {"ownerReferences": [{"kind": "OcrBatch", "uid": "u-1", "controller": True}]}}  # deleted
    assert decide.owned(mine, batch)
    assert not decide.owned(earlier, batch) and not decide.owned({"metadata": {}}, batch)
    assert decide.job_conflict("archive").reason == "JobConflict"


def _deleted(status: dict, callback: bool = True) -> dict:
    spec = {"service": "reader", **({"callback": {"url": "https://hooks.example/ocr"}} if callback else {})}
    return {"metadata": {"name": "b", "namespace": "ns", "uid": "u1"}, "spec": spec, "status": status}


def test_a_batch_deleted_while_running_sends_batch_cancelled_saying_it_was_deleted():
    event, status = decide.callback_on_delete(_deleted({"phase": "Running", "pages": {"done": 3}}))
    assert event == "batch.cancelled" and status["phase"] == "Cancelled" and status["pages"] == {"done": 3}
    assert [c["reason"] for c in status["conditions"] if c["type"] == "Cancelled"] == ["Deleted"]


def test_a_deleted_batch_without_a_callback_or_whose_end_was_delivered_sends_nothing():
    assert decide.callback_on_delete(_deleted({"phase": "Running"}, callback=False)) is None
    delivered = {"phase": "Succeeded", "callback": {"event": "batch.completed", "state": "Delivered"}}
    assert decide.callback_on_delete(_deleted(delivered)) is None


def test_a_batch_deleted_after_it_ended_sends_its_own_event_if_it_was_not_delivered_yet():
    event, status = decide.callback_on_delete(_deleted({"phase": "Succeeded"}))
    assert (event, status["phase"]) == ("batch.completed", "Succeeded")

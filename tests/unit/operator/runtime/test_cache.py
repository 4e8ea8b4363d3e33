"""The watch-fed cache: watch events, the operator's own writes, misses, someone else's objects;
resourceVersion opaque."""

from __future__ import annotations

from ocr_operator.runtime.cache import OWN_WRITE_SECONDS, Store

from .kit import IDENTITY, KINDS, MANAGED, OWNER_LABEL


def Store_(**kw) -> Store:  # noqa: N802  (the Store as the runtime builds it)
    return Store(IDENTITY, KINDS, (OWNER_LABEL,), **kw)


def svc(rv: str, port: int = 8000, name: str = "web", applied: str = "h1") -> dict:
    return {"kind": "Service", "metadata": {"name": name, "namespace": "a", "resourceVersion": rv,
                                            "labels": {OWNER_LABEL: name, **MANAGED},
                                            "annotations": {IDENTITY.applied_hash_key: applied}},
            "spec": {"ports": [{"port": port}]}}


def pod(name: str, rv: str, instance: str = "web") -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "a", "resourceVersion": rv,
                                        "labels": {OWNER_LABEL: instance, **MANAGED}}}


KEY = ("Service", "a", "web")


def test_a_watch_event_is_news_once_and_its_repeat_is_not():
    s = Store_()
    assert s.apply_event("ADDED", svc("1")) is True
    assert s.apply_event("MODIFIED", svc("1")) is False
    assert s.apply_event("MODIFIED", svc("2", 9000)) is True
    assert s.get(KEY)["spec"]["ports"][0]["port"] == 9000


def test_our_own_write_is_stored_at_once_and_its_echo_is_no_news():
    now = [0.0]
    s = Store_(clock=lambda: now[0])
    s.apply_event("ADDED", svc("1", applied="old"))
    s.wrote("Service", "a", "web", svc("opaque-7", applied="new"))
    # sent before our write (older hash), whatever its opaque version: skipped
    assert s.apply_event("MODIFIED", svc("zz-older", applied="old")) is False
    assert s.get(KEY)["metadata"]["resourceVersion"] == "opaque-7"
    assert s.apply_event("MODIFIED", svc("opaque-7", applied="new")) is False    # the echo
    assert s.apply_event("MODIFIED", svc("after", 1, applied="new")) is True     # someone else, after us


def test_when_the_echo_is_coalesced_away_the_next_event_with_our_hash_is_taken():
    now = [0.0]
    s = Store_(clock=lambda: now[0])
    s.wrote("Service", "a", "web", svc("7", applied="new"))
    assert s.apply_event("MODIFIED", svc("9", 1, applied="new")) is True  # the write's own event never came
    assert s.apply_event("MODIFIED", svc("10", 2, applied="old-by-someone")) is True  # skipping has ended


def test_an_expired_own_write_marker_no_longer_hides_events():
    now = [0.0]
    s = Store_(clock=lambda: now[0])
    s.wrote("Service", "a", "web", svc("5", applied="new"))
    now[0] += OWN_WRITE_SECONDS + 1
    assert s.apply_event("MODIFIED", svc("6", 1, applied="old")) is True


def test_a_miss_is_unknown_until_listed_or_fetched_and_absence_is_remembered():
    s = Store_()
    assert not s.known(KEY)
    s.fetched(KEY, None)
    assert s.known(KEY) and s.get(KEY) is None
    other = ("Service", "b", "x")
    s.mark_listed("Service", "b", [])
    assert s.known(other) and s.get(other) is None
    s.mark_listed("Service", None, [])
    assert s.known(("Service", "zzz", "y"))


def test_a_fetch_never_overwrites_what_a_watch_event_brought_first():
    s = Store_()
    s.apply_event("ADDED", svc("3"))
    s.fetched(KEY, None)
    assert s.get(KEY)["metadata"]["resourceVersion"] == "3"


def test_a_deletion_is_news_and_leaves_the_child_known_absent():
    s = Store_()
    s.apply_event("ADDED", svc("1"))
    assert s.apply_event("DELETED", svc("2")) is True
    assert s.known(KEY) and s.get(KEY) is None


def test_pods_are_grouped_by_owner_instance():
    s = Store_()
    assert s.apply_event("ADDED", pod("web-1", "1")) is True
    s.apply_event("ADDED", pod("web-2", "1"))
    s.apply_event("ADDED", pod("api-1", "1", instance="api"))
    assert sorted(p["metadata"]["name"] for p in s.pods_of("a", OWNER_LABEL, "web")) == ["web-1", "web-2"]
    assert s.apply_event("MODIFIED", pod("web-1", "1")) is False
    assert s.apply_event("DELETED", pod("web-1", "2")) is True
    assert [p["metadata"]["name"] for p in s.pods_of("a", OWNER_LABEL, "web")] == ["web-2"]
    assert not s.pods_known("a", OWNER_LABEL, "web")
    s.pods_listed("a", OWNER_LABEL, "web", [pod("web-2", "0"), pod("web-3", "1")])
    assert s.pods_known("a", OWNER_LABEL, "web")
    names = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in s.pods_of("a", OWNER_LABEL, "web")}
    assert names == {"web-2": "1", "web-3": "1"}  # the watch's newer web-2 is kept


def test_forgetting_an_owner_drops_its_children_and_pods():
    s = Store_()
    s.apply_event("ADDED", svc("1"))
    s.apply_event("ADDED", pod("web-1", "1"))
    s.forget("a", [("Service", "web")], (OWNER_LABEL, "web"))
    assert not s.known(KEY) and s.pods_of("a", OWNER_LABEL, "web") == []


def test_a_kind_dropped_when_its_api_goes_is_unknown_again_and_other_kinds_stay():
    s = Store_()
    s.mark_listed("Service", "a", [svc("1")])
    s.mark_listed("Service", None, [])
    s.wrote("Service", "a", "other", svc("2", name="other"))
    s.mark_listed("ConfigMap", "a", [])
    s.drop_kind("Service")
    assert not s.known(KEY) and not s.known(("Service", "a", "other"))
    # the echo of the dropped write is news again: nothing of it is held
    assert s.apply_event("MODIFIED", svc("2", name="other")) is True
    assert s.known(("ConfigMap", "a", "x"))


def test_a_slow_write_response_never_replaces_the_newer_events_that_came_before_it():
    s = Store_()
    # the Deployment controller's status update (after our write) arrived before our response
    s.apply_event("MODIFIED", {**svc("12", applied="new"), "status": {"ready": 1}})
    s.wrote("Service", "a", "web", svc("10", applied="new"))
    assert s.get(KEY)["status"] == {"ready": 1}
    # an event from before the write (old hash) is replaced by the response
    s2 = Store_()
    s2.apply_event("MODIFIED", svc("8", applied="older"))
    s2.wrote("Service", "a", "web", svc("10", applied="new"))
    assert s2.get(KEY)["metadata"]["resourceVersion"] == "10"


def managed(*managers: str) -> list[dict]:
    return [{"manager": m, "operation": "Apply" if m == IDENTITY.field_manager else "Update",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}} for m in managers]


def test_cached_children_keep_no_managed_fields():
    s = Store_()
    dep = {"kind": "Deployment", "metadata": {"name": "web", "namespace": "a", "resourceVersion": "1", "labels": MANAGED,
                                              "managedFields": managed("kube-controller-manager",
                                                                       IDENTITY.field_manager)},
           "spec": {"replicas": 2}}
    s.apply_event("ADDED", dep)
    kept = s.get(("Deployment", "a", "web"))
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["resourceVersion"] == "1"
    assert kept["spec"] == {"replicas": 2}
    assert len(dep["metadata"]["managedFields"]) == 2  # the event's own body is not changed


def test_cached_pods_keep_metadata_and_status_but_not_their_spec():
    s = Store_()
    body = {**pod("p1", "1"), "spec": {"containers": [{"name": "server", "image": "x"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "server", "restartCount": 2}]}}
    body["metadata"]["managedFields"] = managed("kubelet")
    s.apply_event("ADDED", body)
    [cached] = s.pods_of("a", OWNER_LABEL, "web")
    assert "spec" not in cached and "managedFields" not in cached["metadata"]
    assert cached["status"] == body["status"]
    assert cached["metadata"]["labels"] == {OWNER_LABEL: "web", **MANAGED}


def pdb(rv: str, healthy: int, labels: dict | None = None) -> dict:
    return {"kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "a", "resourceVersion": rv,
                         "labels": {**MANAGED, **(labels or {OWNER_LABEL: "web"})}},
            "spec": {"maxUnavailable": 1}, "status": {"currentHealthy": healthy}}


def test_a_status_only_change_of_a_kind_whose_status_is_never_read_is_stored_but_no_news():
    s = Store_()
    assert s.apply_event("ADDED", pdb("1", 0)) is True
    assert s.apply_event("MODIFIED", pdb("2", 1)) is False  # the disruption controller counting pods
    assert s.get(("PodDisruptionBudget", "a", "web"))["status"]["currentHealthy"] == 1
    assert s.apply_event("MODIFIED", pdb("3", 1, labels={OWNER_LABEL: "web", "x": "y"})) is True


def test_a_status_only_change_of_a_deployment_is_news():
    def dep(rv: str, ready: int) -> dict:
        return {"kind": "Deployment", "metadata": {"name": "web", "namespace": "a", "resourceVersion": rv,
                                                   "labels": MANAGED},
                "spec": {"replicas": 1}, "status": {"readyReplicas": ready}}
    s = Store_()
    s.apply_event("ADDED", dep("1", 0))
    assert s.apply_event("MODIFIED", dep("2", 1)) is True


def foreign(rv: str = "1", **md) -> dict:
    """Someone else's object with a child's name: no managed-by label."""
    return {"kind": "Service", "metadata": {"name": "web", "namespace": "a", "resourceVersion": rv, "uid": "theirs",
                                            "labels": {"app": "legacy"}, **md},
            "spec": {"selector": {"app": "legacy"}}, "data": {"secret": "x"}}


def test_someone_elses_object_of_an_owned_kind_is_kept_as_its_metadata_only():
    s = Store_()
    assert s.apply_event("ADDED", foreign()) is False  # no news: nothing of ours changed
    kept = s.get(KEY)
    assert kept["metadata"]["uid"] == "theirs" and kept["kind"] == "Service"
    assert "spec" not in kept and "data" not in kept


def test_someone_elses_object_that_goes_away_leaves_the_name_free():
    s = Store_()
    s.mark_listed("Service", "a", [foreign()])
    assert s.get(KEY) is not None
    assert s.apply_event("DELETED", foreign("2")) is False
    assert s.known(KEY) and s.get(KEY) is None


def test_an_object_of_ours_that_loses_the_managed_label_is_news_and_kept_as_a_stub():
    s = Store_()
    s.apply_event("ADDED", svc("1"))
    unlabelled = svc("2")
    unlabelled["metadata"]["labels"] = {OWNER_LABEL: "web"}
    assert s.apply_event("MODIFIED", unlabelled) is True
    assert "spec" not in s.get(KEY) and s.get(KEY)["metadata"]["labels"] == {OWNER_LABEL: "web"}


def test_someone_elses_object_fetched_by_name_is_remembered_for_an_owned_kind_only():
    s = Store_()
    s.fetched(KEY, foreign())  # an owned kind is watched unfiltered: its change or removal will be told
    assert s.known(KEY) and "spec" not in s.get(KEY)
    job = ("Job", "a", "web")
    s.fetched(job, {**foreign(), "kind": "Job"})  # Jobs are watched by label: no event would tell
    assert not s.known(job)

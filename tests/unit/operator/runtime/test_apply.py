"""The one apply: ownership checked on the cache's view (no request), the plan run, the cache told."""

from __future__ import annotations

import asyncio

from ocr_operator.runtime import plan as P
from ocr_operator.runtime.apply import Applier
from ocr_operator.runtime.cache import Store

from .kit import IDENTITY, KINDS, MANAGED, OWNER_LABEL, FakeApi

OWNER = P.Owner("Widget", "web", "owner-uid")
REF = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "web", "uid": "owner-uid", "controller": True}


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def listed(api: FakeApi) -> Store:
    """The cache after its start-up list of the namespace: owned kinds unfiltered, Jobs by label."""
    store = Store(IDENTITY, KINDS, (OWNER_LABEL,))
    for kind in KINDS:
        items = [o for (k, _), o in api.objects.items() if k == kind.kind and (kind.owned or IDENTITY.manages(o))]
        store.mark_listed(kind.kind, "a", items)
    return store


def configmap(data: str = "1", owned: bool = True) -> dict:
    md = {"name": "web-config", "namespace": "a", "labels": {**MANAGED, OWNER_LABEL: "web"}}
    if owned:
        md["ownerReferences"] = [REF]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": {"x": data}}


def users_service() -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "a", "uid": "users", "resourceVersion": "7",
                         "labels": {"app": "legacy"}}, "spec": {"selector": {"app": "legacy"}}}


def service() -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "a", "labels": MANAGED, "ownerReferences": [REF]},
            "spec": {"selector": {"app": "web"}}}


def plan_of(store: Store, desired: dict[str, dict | None], names: dict[str, str], **kw) -> list[P.Action]:
    kinds = {"cm": "ConfigMap", "svc": "Service", "job": "Job"}
    return [P.plan_one(key, desired[key], store.get((kinds[key], "a", names[key])), OWNER, names[key],
                       IDENTITY.applied_hash_key, create_only=key == "job") for key in desired]


def replan(store, desired, names):
    return lambda action, found: P.plan_one(action.key, desired[action.key], found, OWNER, action.name,
                                            IDENTITY.applied_hash_key, create_only=action.key == "job")


def test_someone_elses_object_in_the_cache_is_a_conflict_and_costs_no_request():
    api = FakeApi({("Service", "web"): users_service()})
    store = listed(api)
    desired, names = {"svc": service(), "cm": configmap()}, {"svc": "web", "cm": "web-config"}
    actions = plan_of(store, desired, names)
    out = run(Applier(api, store).execute(actions, namespace="a", replan=replan(store, desired, names)))
    assert api.calls == [("apply", "ConfigMap", "web-config")]  # no GET: the cache knew the name is taken
    assert out.conflicted == {"svc"} and out.live["svc"] is None
    assert out.conflicts == [f"Service web {P.conflict_reason(OWNER)}"]
    assert api.objects[("Service", "web")] == users_service()


def test_a_write_is_in_the_cache_at_once_and_a_repeat_plan_makes_no_request():
    api = FakeApi()
    store = listed(api)
    desired, names = {"cm": configmap()}, {"cm": "web-config"}
    run(Applier(api, store).execute(plan_of(store, desired, names), namespace="a", replan=replan(store, desired, names)))
    assert store.get(("ConfigMap", "a", "web-config"))["data"] == {"x": "1"}
    api.calls.clear()
    again = plan_of(store, desired, names)
    out = run(Applier(api, store).execute(again, namespace="a", replan=replan(store, desired, names)))
    assert [a.verb for a in again] == [P.SKIP] and api.calls == [] and out.writes == 0


def test_a_create_only_child_whose_name_is_taken_is_read_once_and_left_as_a_conflict():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "web", "namespace": "a", "labels": MANAGED,
                                                                  "ownerReferences": [REF]}, "spec": {}}
    theirs = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "web", "namespace": "a", "uid": "t"}}
    api = FakeApi({("Job", "web"): theirs})
    store = listed(api)  # Jobs are listed by label: someone else's Job is not in the cache
    desired, names = {"job": job}, {"job": "web"}
    actions = plan_of(store, desired, names)
    assert [a.verb for a in actions] == [P.CREATE]
    out = run(Applier(api, store).execute(actions, namespace="a", replan=replan(store, desired, names)))
    assert api.calls == [("create", "Job", "web"), ("get", "Job", "web")]
    assert out.conflicted == {"job"} and out.writes == 0 and api.objects[("Job", "web")] == theirs


def test_an_existing_create_only_child_of_ours_is_never_updated():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "web", "namespace": "a", "labels": MANAGED,
                                                                  "ownerReferences": [REF]}, "spec": {"x": 1}}
    api = FakeApi({("Job", "web"): {**job, "spec": {"x": 2}}})
    store = listed(api)
    [action] = plan_of(store, {"job": job}, {"job": "web"})
    assert action.verb == P.SKIP


def test_a_child_no_longer_wanted_is_deleted_with_its_uid_and_the_cache_knows_it_gone():
    api = FakeApi({("ConfigMap", "web-config"): {**configmap(), "metadata": {**configmap()["metadata"], "uid": "u"}}})
    store = listed(api)
    desired, names = {"cm": None}, {"cm": "web-config"}
    out = run(Applier(api, store).execute(plan_of(store, desired, names), namespace="a",
                                          replan=replan(store, desired, names)))
    assert api.calls == [("delete", "ConfigMap", "web-config")] and out.written == {"cm"}
    assert store.known(("ConfigMap", "a", "web-config")) and store.get(("ConfigMap", "a", "web-config")) is None

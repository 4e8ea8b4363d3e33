"""Discovery of optional APIs, and the uses of kopf's internals: asking kopf to rescan a group,
and a watch whose API is gone ending quietly.

kopf is pinned to a minor version; these tests fail when the internals `discovery.rescan` and
`discovery.survive_lost_apis` use move or change shape, before an upgrade could silently stop the
operator from watching an API that appeared after it started, or let a deleted CRD stop it."""

from __future__ import annotations

import asyncio
import inspect

import kopf

import pytest

from ocr_operator.runtime.discovery import Discovery, new_insights, rescan, survive_lost_apis
from ocr_operator.runtime.kinds import ApiKind
from ocr_operator.runtime.kube import ApiError

MONITOR = ApiKind("ServiceMonitor", "monitoring.coreos.com", "v1", "servicemonitors", optional=True, owned=True)


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_the_kopf_internals_the_rescan_calls_are_where_and_as_it_expects():
    from kopf._cogs.clients import scanning
    from kopf._cogs.structs.references import Insights
    from kopf._core.reactor import observation

    assert {"groups", "settings", "logger"} <= set(inspect.signature(scanning.scan_resources).parameters)
    assert {"resources", "insights", "registry", "group"} <= set(inspect.signature(observation.revise_resources).parameters)
    insights = new_insights()
    assert isinstance(insights, Insights)
    assert isinstance(insights.revised, asyncio.Condition) and callable(insights.backbone.fill)


def test_a_rescan_makes_kopf_watch_a_served_resource_that_a_handler_wants(monkeypatch):
    """kopf's own resource revision and backbone, for real; only the API server's discovery
    answer is given (the e2e tests ask a real one)."""
    from kopf._cogs.clients import scanning
    from kopf._cogs.structs.references import Resource

    registry = kopf.OperatorRegistry()
    kopf.on.event(MONITOR.group, MONITOR.version, MONITOR.plural, registry=registry)(lambda **_: None)
    served = Resource(group=MONITOR.group, version=MONITOR.version, plural=MONITOR.plural, kind=MONITOR.kind,
                      namespaced=True, preferred=True, verbs=["list", "watch", "get"])
    asked: list = []

    async def scan_resources(*, groups, settings, logger):
        asked.append(set(groups))
        return {served}

    monkeypatch.setattr(scanning, "scan_resources", scan_resources)

    async def go():
        insights = new_insights()
        found = await rescan(insights, kopf.OperatorSettings(), MONITOR.group, registry)
        return found, insights.watched_resources

    found, watched = run(go())
    assert asked == [{MONITOR.group}] and found == 1 and served in watched


class Served:
    """An API server's discovery, answered from a set that tests change."""

    def __init__(self):
        self.kinds: set[str] = set()
        self.asked = 0

    async def has_resource(self, kind):
        self.asked += 1
        return kind in self.kinds


def test_an_api_that_appears_is_rescanned_and_told_once():
    async def go():
        api, rescanned, told = Served(), [], []

        async def ask_kopf(group):
            rescanned.append(group)
        d = Discovery(api, {MONITOR.kind: MONITOR}, on_change=told.append, rescan=ask_kopf, seconds=0)
        before = await d.check()
        api.kinds.add("ServiceMonitor")
        after = await d.check()
        again = await d.check()
        return before, after, again, rescanned, told
    before, after, again, rescanned, told = run(go())
    assert before == frozenset() and after == again == frozenset({"ServiceMonitor"})
    assert rescanned == ["monitoring.coreos.com"] and told == [frozenset({"ServiceMonitor"})]


class Refusing(Served):
    """Discovery as Served; listing a kind answers 403 while it is in `refused`."""

    def __init__(self):
        super().__init__()
        self.refused: set[str] = set()

    async def list(self, kind, namespace, selector):
        if kind in self.refused:
            raise ApiError(403, "Forbidden", f"{kind} is forbidden")
        return []


def test_a_refused_kind_is_listed_again_at_each_look_and_once_allowed_is_handed_to_kopf():
    async def go():
        api, rescanned, told = Refusing(), [], []

        async def ask_kopf(group):
            rescanned.append(group)
        api.kinds.add("ServiceMonitor")
        api.refused.add("ServiceMonitor")
        d = Discovery(api, {MONITOR.kind: MONITOR}, on_change=told.append, rescan=ask_kopf, seconds=0)
        d.permitted("servicemonitors.monitoring.coreos.com", "team-a", False)  # the cache's first listing
        refused = await d.check()
        api.refused.clear()  # the Role granted
        allowed = await d.check()
        return refused, allowed, rescanned, told
    refused, allowed, rescanned, told = run(go())
    assert refused == frozenset() and allowed == frozenset({"ServiceMonitor"})
    assert rescanned == ["monitoring.coreos.com"] and told == [frozenset({"ServiceMonitor"})]


def test_discovery_asks_the_api_server_at_most_once_per_period():
    async def go():
        api = Served()
        d = Discovery(api, {MONITOR.kind: MONITOR}, on_change=lambda kinds: None, seconds=3600)
        for _ in range(5):
            await d.check()
        return api.asked
    assert run(go()) == 1


def crd(uid, deleting=False):
    md = {"name": "servicemonitors.monitoring.coreos.com", "uid": uid}
    return {"metadata": {**md, "deletionTimestamp": "2026-12-06T00:00:00Z"} if deleting else md}


def test_a_crd_being_deleted_names_its_kind_once_and_it_is_not_served_until_its_crd_is_back():
    async def go():
        api = Served()
        api.kinds.add("ServiceMonitor")
        d = Discovery(api, {MONITOR.kind: MONITOR}, on_change=lambda kinds: None, seconds=3600)
        await d.check()
        told = [d.crd_event(None, crd("u1")),           # the first listing: no news
                d.crd_event("MODIFIED", crd("u1")),     # same CRD
                d.crd_event("MODIFIED", crd("u1", deleting=True)),
                d.crd_event("DELETED", crd("u1"))]      # already told at its deletion
        # Discovery still lists it (it lags the deletion): not served all the same.
        gone = d.available, await d.check()
        told += [d.crd_event("ADDED", crd("u2")),       # back: the next look tells it, as a first appearance
                 d.crd_event("MODIFIED", crd("u2"))]
        back = await d.check()
        return told, gone, back, api.asked
    told, gone, back, asked = run(go())
    assert told == [None, None, "ServiceMonitor", None, None, None]
    assert gone == (frozenset(), frozenset()) and back == frozenset({"ServiceMonitor"})
    assert asked == 2  # the look while its CRD is gone asks nothing of it


def test_other_crds_and_a_first_appearance_are_no_news():
    d = Discovery(Served(), {MONITOR.kind: MONITOR}, on_change=lambda kinds: None)
    assert d.crd_event("ADDED", {"metadata": {"name": "widgets.example.com", "uid": "w"}}) is None
    assert d.crd_event("ADDED", crd("u1")) is None  # not served yet: the poll tells its appearance
    assert d.crd_event("DELETED", crd("u1")) == "ServiceMonitor"


def test_a_crd_replaced_unseen_by_the_poll_names_its_kind():
    """Deleted and installed again while this operator saw neither event (its watch reconnecting):
    a new uid for a kind served, whose objects went with the old CRD."""
    async def go():
        api = Served()
        api.kinds.add("ServiceMonitor")
        d = Discovery(api, {MONITOR.kind: MONITOR}, on_change=lambda kinds: None, seconds=3600)
        await d.check()
        first = d.crd_event(None, crd("u1"))
        return first, d.crd_event("MODIFIED", crd("u2")), await d.check(), api.asked
    assert run(go()) == (None, "ServiceMonitor", frozenset({"ServiceMonitor"}), 2)


def test_the_kopf_internals_the_lost_api_guard_wraps_are_where_and_as_it_expects():
    from kopf._cogs.clients import errors, watching

    assert {"settings", "resource", "namespace"} <= set(inspect.signature(watching.continuous_watch).parameters)
    assert inspect.isasyncgenfunction(watching.continuous_watch)
    # infinite_watch looks it up in its module at each reconnect: the wrapper is what it calls.
    assert "continuous_watch" in watching.infinite_watch.__code__.co_names
    assert issubclass(errors.APINotFoundError, errors.APIError) and issubclass(errors.APIForbiddenError, errors.APIError)
    assert "reconnect_backoff" in vars(kopf.OperatorSettings().watching)


def served_monitor():
    from kopf._cogs.structs.references import Resource

    return Resource(group=MONITOR.group, version=MONITOR.version, plural=MONITOR.plural, kind=MONITOR.kind,
                    namespaced=True, preferred=True, verbs=["list", "watch", "get"])


ANSWERS = {404: ("APINotFoundError", "the server could not find the requested resource"),
           403: ("APIForbiddenError", 'servicemonitors.monitoring.coreos.com is forbidden: User "system:serviceaccount:'
                                      'ocr-system:ocr" cannot list resource "servicemonitors"')}


def lost_api(monkeypatch, resource, answers, status=404, known_refused=None, tries=None, iterations=None):
    """kopf's own infinite_watch over a watch whose LIST is answered `status` `answers` times, then
    one event; discovery already without the resource. What came out, the groups rescanned, what
    kopf still watches, and what `on_permission` was told; `tries` gets each LIST kopf made."""
    from kopf._cogs.clients import errors, scanning, watching

    tries = [] if tries is None else tries
    error, message = ANSWERS[status]

    async def continuous_watch(*, settings, resource, namespace, operator_pause_waiter):
        tries.append(resource)
        if len(tries) <= answers:
            raise getattr(errors, error)({"message": message, "code": status}, status=status, headers={})
        yield {"type": "ADDED", "object": {"metadata": {"name": "web"}}}

    asked = []

    async def scan_resources(*, groups, settings, logger):
        asked.append(set(groups))
        return set()

    monkeypatch.setattr(watching, "continuous_watch", continuous_watch)
    monkeypatch.setattr(scanning, "scan_resources", scan_resources)
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0.0

    told = []

    async def go():
        insights = new_insights()
        insights.watched_resources.add(resource)  # kopf's rescan at the deletion still found it
        survive_lost_apis(insights, {MONITOR.group}, lambda *args: told.append(args), known_refused)
        events = [e async for e in watching.infinite_watch(settings=settings, resource=resource, namespace=None,
                                                            _iterations=iterations or answers + 1)]
        return events, insights.watched_resources
    events, watched = run(go())
    return events, asked, watched, told


def test_a_watch_answered_404_for_an_optional_api_ends_quietly_and_kopf_rescans_its_group(monkeypatch):
    resource = served_monitor()
    events, asked, watched, _ = lost_api(monkeypatch, resource, answers=2)
    assert events == [{"type": "ADDED", "object": {"metadata": {"name": "web"}}}]  # tried again, went on
    assert asked == [{MONITOR.group}, {MONITOR.group}]
    assert resource not in watched  # kopf's orchestrator then stops the watch


def test_a_watch_answered_404_for_any_other_api_still_stops_kopf(monkeypatch):
    from kopf._cogs.clients import errors
    from kopf._cogs.structs.references import Resource

    ours = Resource(group="ocr.causalflow.dev", version="v1alpha1", plural="ocrservices", namespaced=True)
    with pytest.raises(errors.APINotFoundError):
        lost_api(monkeypatch, ours, answers=1)


def test_a_watch_answered_403_for_an_optional_api_ends_kopfs_watch_of_it_and_discovery_is_told(monkeypatch):
    """An operator whose RBAC leaves out prometheus-operator's group, on a cluster with its CRD:
    kopf goes on but stops watching the resource (no rescan: the API is served), and the permission
    is reported refused at each 403 and allowed at the first listing after them."""
    resource = served_monitor()
    events, asked, watched, told = lost_api(monkeypatch, resource, answers=2, status=403)
    assert events == [{"type": "ADDED", "object": {"metadata": {"name": "web"}}}]
    assert asked == [] and resource not in watched  # kopf's orchestrator then ends the stream
    plural = "servicemonitors.monitoring.coreos.com"
    assert told == [(plural, None, False), (plural, None, False), (plural, None, True)]


def test_a_watch_of_a_resource_known_refused_ends_without_kopfs_listing_until_it_is_allowed(monkeypatch):
    """The cache's first listing, before kopf's watches start, was answered 403: kopf's watch of it
    ends at once instead of kopf's listing retrying the 403 nine times over a minute (an ERROR line
    each); once discovery finds it allowed, the watch lists as usual."""
    resource = served_monitor()
    plural, looks, tries = "servicemonitors.monitoring.coreos.com", [], []

    def known_refused(name, namespace):
        looks.append((name, namespace))
        return len(looks) <= 2  # refused at the first two watches, allowed at the third

    events, asked, watched, told = lost_api(monkeypatch, resource, answers=0, status=403,
                                            known_refused=known_refused, tries=tries, iterations=3)
    assert looks == [(plural, None)] * 3
    assert len(tries) == 1  # kopf listed once: after the kind was allowed
    assert events == [{"type": "ADDED", "object": {"metadata": {"name": "web"}}}]
    assert asked == [] and resource not in watched
    assert told == [(plural, None, False), (plural, None, False), (plural, None, True)]


def test_a_resource_is_known_refused_only_in_the_namespace_whose_listing_was_answered_403():
    discovery = Discovery(kube=None, kinds={"ServiceMonitor": MONITOR}, on_change=lambda _: None)
    plural = "servicemonitors.monitoring.coreos.com"
    discovery.permitted(plural, "team-a", False)
    assert discovery.is_refused(plural, "team-a")
    assert not discovery.is_refused(plural, "team-b") and not discovery.is_refused(plural, None)
    assert not discovery.is_refused("ocrservices.ocr.causalflow.dev", "team-a")
    discovery.permitted(plural, "team-a", True)
    assert not discovery.is_refused(plural, "team-a")


def test_a_kind_the_operator_may_not_list_in_one_namespace_is_not_available_until_it_may():
    changes = []
    discovery = Discovery(kube=None, kinds={"ServiceMonitor": MONITOR}, on_change=changes.append)
    discovery.served["ServiceMonitor"] = True
    plural = "servicemonitors.monitoring.coreos.com"
    discovery.permitted(plural, "team-a", False)
    discovery.permitted(plural, "team-b", False)
    assert discovery.available == frozenset() and changes == [frozenset({"ServiceMonitor"})]
    discovery.permitted(plural, "team-a", True)
    assert discovery.available == frozenset()  # still refused in team-b
    discovery.permitted(plural, "team-b", True)
    discovery.permitted("ocrservices.ocr.causalflow.dev", None, False)  # not an optional kind: ignored
    assert discovery.available == {"ServiceMonitor"} and changes == [frozenset({"ServiceMonitor"})] * 2


def test_a_watch_answered_403_for_any_other_api_still_stops_kopf(monkeypatch):
    """Without its own kinds the operator can do nothing: it exits, and its pod says why."""
    from kopf._cogs.clients import errors
    from kopf._cogs.structs.references import Resource

    ours = Resource(group="ocr.causalflow.dev", version="v1alpha1", plural="ocrservices", namespaced=True)
    with pytest.raises(errors.APIForbiddenError):
        lost_api(monkeypatch, ours, answers=1, status=403)

"""The runtime's controller core: wake-ups coalesce, own writes do not wake, resourceVersion is
opaque, failures back off, a reconcile's Events go to the recorder."""

from __future__ import annotations

import asyncio

from ocr_operator.runtime.cache import Store
from ocr_operator.runtime.controller import Context, Controller as _Controller, Result, Runtime
from ocr_operator.runtime.timers import backoff_delay

from .kit import IDENTITY, KINDS, MANAGED, OWNER_LABEL, WIDGET


class NoKube:
    requests = 0
    identity = IDENTITY

    async def close(self):
        pass


class Widgets:
    """A reconciler of test owners: records what it is asked, answers with `answer` (or raises it)."""

    kind = WIDGET

    def __init__(self, answer=None):
        self.answer = answer if answer is not None else Result()
        self.reconciled: list = []
        self.forgot: list = []

    async def reconcile(self, owner, ctx: Context) -> Result:
        self.reconciled.append((owner["metadata"]["name"], ctx.status_hold))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def owner_of(self, obj):
        md = obj.get("metadata") or {}
        owner = (md.get("labels") or {}).get(OWNER_LABEL)
        return (md.get("namespace"), owner) if owner else None

    def forgotten(self, key, last, jobs):
        self.forgot.append(key)


def Controller(kube, reconciler=None, **kw) -> _Controller:  # noqa: N802
    return _Controller(Runtime(kube, Store(IDENTITY, KINDS, (OWNER_LABEL,))), reconciler or Widgets(), **kw)


def body(name="web", ns="a", rv="10", uid="u1", generation=1):
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "uid": uid, "generation": generation}}


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_many_events_of_one_object_queue_one_reconcile_with_the_newest_body():
    async def go():
        c = Controller(NoKube())
        for rv in ("10", "11", "12"):
            c.owner_event("MODIFIED", body(rv=rv))
        return len(c.queue), c.cache[("a", "web")]["metadata"]["resourceVersion"]
    assert run(go()) == (1, "12")


def test_resource_versions_are_opaque_strings_never_compared_as_numbers():
    async def go():
        c = Controller(NoKube())
        c.owner_event("MODIFIED", body(rv="b-20"))
        c.owner_event("MODIFIED", body(rv="a-9", generation=2))  # not a number, "smaller": still the newer event
        return c.cache[("a", "web")]["metadata"]["resourceVersion"]
    assert run(go()) == "a-9"


def test_after_our_own_status_patch_older_events_are_skipped_and_its_echo_wakes_nothing():
    async def go():
        import time
        c = Controller(NoKube())
        key = ("a", "web")
        c.owner_event(None, body(rv="x1"))
        c.queue.pop()
        c.queue.done(key)
        # what a reconcile does after its status patch
        ours = {**body(rv="x3"), "status": {"phase": "new"}}
        c.cache[key] = ours
        c.own[key] = (ours, time.monotonic())
        c.owner_event("MODIFIED", {**body(rv="x2"), "status": {"phase": "old"}})   # sent before our patch
        older_kept = c.cache[key]["metadata"]["resourceVersion"]
        c.owner_event("MODIFIED", {**body(rv="x3"), "status": {"phase": "new"}})   # the echo of our patch
        queued_after_echo = len(c.queue)
        c.owner_event("MODIFIED", {**body(rv="x4", generation=2), "status": {"phase": "new"}})  # spec changed
        return older_kept, queued_after_echo, c.cache[key]["metadata"]["resourceVersion"], dict(c.queue.waiting)
    older, queued, newest, waiting = run(go())
    assert older == "x3" and queued == 0 and newest == "x4"
    assert waiting == {("a", "web"): "urgent"}


def test_a_spec_change_right_after_our_patch_is_not_lost_when_the_echo_was_coalesced():
    async def go():
        import time
        c = Controller(NoKube())
        key = ("a", "web")
        c.owner_event(None, body(rv="x1"))
        c.queue.pop()
        c.queue.done(key)
        ours = {**body(rv="x3"), "status": {"phase": "new"}}
        c.cache[key] = ours
        c.own[key] = (ours, time.monotonic())
        c.owner_event("MODIFIED", {**body(rv="x5", generation=2), "status": {"phase": "new"}})
        return c.cache[key]["metadata"]["generation"], len(c.queue)
    assert run(go()) == (2, 1)


def test_a_wake_up_during_a_reconcile_runs_it_once_more_afterwards():
    async def go():
        c = Controller(NoKube())
        key = ("a", "web")
        c.owner_event(None, body())
        assert await c.queue.get() == key
        c.enqueue(key)
        c.enqueue(key)
        assert len(c.queue) == 0 and key in c.queue.dirty
        c.queue.done(key)
        return len(c.queue)
    assert run(go()) == 1


def test_a_child_event_wakes_only_a_known_owner_and_only_with_news():
    async def go():
        c = Controller(NoKube())
        c.owner_event(None, body())
        c.queue.pop()
        c.queue.done(("a", "web"))

        def svc(ns, instance, rv):
            return {"kind": "Service", "metadata": {"name": instance, "namespace": ns, "resourceVersion": rv,
                                                    "labels": {OWNER_LABEL: instance, **MANAGED}}}
        c.runtime.child_event("Service", "ADDED", svc("a", "other", "1"))
        c.runtime.child_event("Service", "ADDED", svc("b", "web", "1"))
        assert len(c.queue) == 0
        c.runtime.child_event("Service", "ADDED", svc("a", "web", "5"))
        assert len(c.queue) == 1
        c.queue.pop()
        c.queue.done(("a", "web"))
        c.runtime.child_event("Service", "MODIFIED", svc("a", "web", "5"))  # same version again: no news
        return len(c.queue)
    assert run(go()) == 0


def test_an_optional_api_that_goes_or_comes_is_forgotten_by_the_cache_and_wakes_every_owner():
    async def go():
        c = Controller(NoKube())
        for name in ("web", "api"):
            c.owner_event(None, body(name=name))
            c.queue.pop()
            c.queue.done(("a", name))
        sm = {"kind": "Service", "metadata": {"name": "web", "namespace": "a", "resourceVersion": "1",
                                              "labels": {OWNER_LABEL: "web", **MANAGED}}}
        c.runtime.child_event("Service", "ADDED", sm)
        c.queue.pop()
        c.queue.done(("a", "web"))
        c.runtime.optional_changed(frozenset({"Service"}))
        return c.store.known(("Service", "a", "web")), len(c.queue)
    assert run(go()) == (False, 2)


def test_the_earliest_delayed_wake_up_wins_and_deletion_cancels_it():
    async def go():
        c = Controller(NoKube())
        key = ("a", "web")
        c.owner_event(None, body())
        c.enqueue_after(key, 300)
        c.enqueue_after(key, 0.01)
        c.enqueue_after(key, 200)
        when = c.timers.pending[key][0] - asyncio.get_running_loop().time()
        c.owner_event("DELETED", body())
        return when, key in c.timers.pending, key in c.cache, len(c.queue)
    when, timer_left, cached, queued = run(go())
    assert when < 1 and not timer_left and not cached and queued == 0


def test_a_spec_change_delivered_before_our_slow_status_response_is_kept_and_reconciled():
    async def go():
        c = Controller(NoKube())
        key = ("a", "web")
        c.owner_event(None, body(rv="x1"))
        c.queue.pop()  # reconciling generation 1 ...
        c.owner_event("MODIFIED", body(rv="x3", generation=2))  # ... the user changes the spec meanwhile
        c._store_own_status(key, body(rv="x1"), {**body(rv="x2"), "status": {"phase": "p"}})
        c.queue.done(key)
        return c.cache[key]["metadata"]["generation"], dict(c.queue.waiting)
    generation, waiting = run(go())
    assert generation == 2 and waiting == {("a", "web"): "urgent"}


def test_a_deleted_owner_is_told_to_its_reconciler_once_with_its_last_known_body():
    async def go():
        widgets = Widgets()
        c = Controller(NoKube(), widgets)
        c.owner_event(None, body())
        c.owner_event("DELETED", body(rv="11"))
        c.owner_event("DELETED", body(rv="11"))  # a repeat of an owner we no longer know: nothing to forget
        return widgets.forgot
    assert run(go()) == [("a", "web")]


def test_a_failed_reconcile_is_retried_after_the_one_backoff_and_then_after_twice_that():
    async def go():
        c = Controller(NoKube(), Widgets(answer=RuntimeError("boom")))
        key = ("a", "web")
        c.owner_event(None, body())
        loop = asyncio.get_running_loop()
        delays = []
        for _ in range(3):
            await c._run(key)
            delays.append(round(c.timers.pending[key][0] - loop.time(), 1))
            c.timers.pending.pop(key)[1].cancel()  # fired at once instead
        return delays, c.timers.failures[key]
    delays, failures = run(go())
    assert delays == [backoff_delay(1), backoff_delay(2), backoff_delay(3)] == [0.5, 1.0, 2.0]
    assert failures == 3


def test_a_success_resets_the_backoff_and_wakes_at_the_time_it_asked_for():
    async def go():
        widgets = Widgets(answer=RuntimeError("boom"))
        c = Controller(NoKube(), widgets)
        key = ("a", "web")
        c.owner_event(None, body())
        await c._run(key)
        widgets.answer = Result(requeue_after=30.0)
        c.timers.pending.pop(key)[1].cancel()
        await c._run(key)
        return key in c.timers.failures, round(c.timers.pending[key][0] - asyncio.get_running_loop().time())
    reset, wake = run(go())
    assert not reset and wake == 30


def test_a_reconciles_events_go_to_the_recorder_about_the_owner():
    async def go():
        c = Controller(NoKube(), Widgets(answer=Result(events=[("Normal", "Done", "all set")])))
        c.owner_event(None, body())
        await c._run(("a", "web"))
        item = c.recorder.queue.get_nowait()
        return item.owner["metadata"]["name"], item.type, item.reason, item.message
    assert run(go()) == ("web", "Normal", "Done", "all set")


def test_a_patch_that_may_wait_is_held_the_whole_period_before_any_write_and_the_rest_of_it_after_one():
    async def go():
        widgets = Widgets(answer=Result(status={**body(rv="12"), "status": {"phase": "x"}}))
        c = Controller(NoKube(), widgets, status_coalesce=2.0)
        key = ("a", "web")
        c.owner_event(None, body())
        await c._run(key)
        await c._run(key)
        return [hold for _, hold in widgets.reconciled]
    first, second = run(go())
    assert first == 2.0 and 1.5 < second <= 2.0  # nothing written yet (a new object): the whole period

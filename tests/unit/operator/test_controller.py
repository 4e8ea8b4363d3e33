"""The controller: wake-ups coalesce, own writes do not wake, resourceVersion is opaque."""

from __future__ import annotations

import asyncio

from ocr_operator.controller import Controller


class NoKube:
    requests = 0

    async def close(self):
        pass


def body(name="web", ns="a", rv="10", uid="u1", generation=1):
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "uid": uid, "generation": generation}}


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_many_events_of_one_object_queue_one_reconcile_with_the_newest_body():
    async def go():
        c = Controller(NoKube())
        for rv in ("10", "11", "12"):
            c.ocrservice_event("MODIFIED", body(rv=rv))
        return len(c.queue), c.cache[("a", "web")]["metadata"]["resourceVersion"]
    assert run(go()) == (1, "12")


def test_resource_versions_are_opaque_strings_never_compared_as_numbers():
    async def go():
        c = Controller(NoKube())
        c.ocrservice_event("MODIFIED", body(rv="b-20"))
        c.ocrservice_event("MODIFIED", body(rv="a-9", generation=2))  # not a number, "smaller": still the newer event
        return c.cache[("a", "web")]["metadata"]["resourceVersion"]
    assert run(go()) == "a-9"


def test_after_our_own_status_patch_older_events_are_skipped_and_its_echo_wakes_nothing():
    async def go():
        import time
        c = Controller(NoKube())
        key = ("a", "web")
        c.ocrservice_event(None, body(rv="x1"))
        c.queue.pop()
        c.queue.done(key)
        # what a reconcile does after its status patch
        ours = {**body(rv="x3"), "status": {"phase": "new"}}
        c.cache[key] = ours
        c.own[key] = (ours, time.monotonic())
        c.ocrservice_event("MODIFIED", {**body(rv="x2"), "status": {"phase": "old"}})   # sent before our patch
        older_kept = c.cache[key]["metadata"]["resourceVersion"]
        c.ocrservice_event("MODIFIED", {**body(rv="x3"), "status": {"phase": "new"}})   # the echo of our patch
        queued_after_echo = len(c.queue)
        c.ocrservice_event("MODIFIED", {**body(rv="x4", generation=2), "status": {"phase": "new"}})  # spec changed
        return older_kept, queued_after_echo, c.cache[key]["metadata"]["resourceVersion"], dict(c.queue.waiting)
    older, queued, newest, waiting = run(go())
    assert older == "x3" and queued == 0 and newest == "x4"
    assert waiting == {("a", "web"): "urgent"}


def test_a_spec_change_right_after_our_patch_is_not_lost_when_the_echo_was_coalesced():
    async def go():
        import time
        c = Controller(NoKube())
        key = ("a", "web")
        c.ocrservice_event(None, body(rv="x1"))
        c.queue.pop()
        c.queue.done(key)
        ours = {**body(rv="x3"), "status": {"phase": "new"}}
        c.cache[key] = ours
        c.own[key] = (ours, time.monotonic())
        c.ocrservice_event("MODIFIED", {**body(rv="x5", generation=2), "status": {"phase": "new"}})
        return c.cache[key]["metadata"]["generation"], len(c.queue)
    assert run(go()) == (2, 1)


def test_a_wake_up_during_a_reconcile_runs_it_once_more_afterwards():
    async def go():
        c = Controller(NoKube())
        key = ("a", "web")
        c.ocrservice_event(None, body())
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
        c.ocrservice_event(None, body())
        c.queue.pop()
        c.queue.done(("a", "web"))

        def svc(ns, instance, rv):
            return {"kind": "Service", "metadata": {"name": instance, "namespace": ns, "resourceVersion": rv,
                                                    "labels": {"app.kubernetes.io/instance": instance}}}
        c.child_event("Service", "ADDED", svc("a", "other", "1"))
        c.child_event("Service", "ADDED", svc("b", "web", "1"))
        assert len(c.queue) == 0
        c.child_event("Service", "ADDED", svc("a", "web", "5"))
        assert len(c.queue) == 1
        c.queue.pop()
        c.queue.done(("a", "web"))
        c.child_event("Service", "MODIFIED", svc("a", "web", "5"))  # same version again: no news
        return len(c.queue)
    assert run(go()) == 0


def test_the_earliest_delayed_wake_up_wins_and_deletion_cancels_it():
    async def go():
        c = Controller(NoKube())
        key = ("a", "web")
        c.ocrservice_event(None, body())
        c.enqueue_after(key, 300)
        c.enqueue_after(key, 0.01)
        c.enqueue_after(key, 200)
        when = c.timers[key][0] - asyncio.get_running_loop().time()
        c.ocrservice_event("DELETED", body())
        return when, key in c.timers, key in c.cache, len(c.queue)
    when, timer_left, cached, queued = run(go())
    assert when < 1 and not timer_left and not cached and queued == 0


def test_a_spec_change_delivered_before_our_slow_status_response_is_kept_and_reconciled():
    async def go():
        c = Controller(NoKube())
        key = ("a", "web")
        c.ocrservice_event(None, body(rv="x1"))
        c.queue.pop()  # reconciling generation 1 ...
        c.ocrservice_event("MODIFIED", body(rv="x3", generation=2))  # ... the user changes the spec meanwhile
        c._store_own_status(key, body(rv="x1"), {**body(rv="x2"), "status": {"phase": "p"}})
        c.queue.done(key)
        return c.cache[key]["metadata"]["generation"], dict(c.queue.waiting)
    generation, waiting = run(go())
    assert generation == 2 and waiting == {("a", "web"): "urgent"}

"""The work queue: wake-ups coalesce, one reconcile per object at a time, stale bodies ignored."""

from __future__ import annotations

import asyncio

from ocr_operator.controller import Controller


class NoKube:
    async def close(self):
        pass


def body(name="web", ns="a", rv="10", uid="u1"):
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "uid": uid}}


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_many_events_of_one_object_queue_one_reconcile():
    async def go():
        c = Controller(NoKube())
        for rv in ("10", "11", "12"):
            c.observe("MODIFIED", body(rv=rv))
        return c.queue.qsize(), c.cache[("a", "web")]["metadata"]["resourceVersion"]
    assert run(go()) == (1, "12")


def test_an_older_body_never_replaces_a_newer_one():
    async def go():
        c = Controller(NoKube())
        c.observe("MODIFIED", body(rv="20"))
        c.observe("MODIFIED", body(rv="19"))
        return c.cache[("a", "web")]["metadata"]["resourceVersion"]
    assert run(go()) == "20"


def test_a_wake_up_during_a_reconcile_runs_it_once_more_afterwards():
    async def go():
        c = Controller(NoKube())
        key = ("a", "web")
        c.observe(None, body())
        await c.queue.get()
        c.queued.discard(key)
        c.active.add(key)
        c.enqueue(key)
        c.enqueue(key)
        assert c.queue.qsize() == 0 and key in c.dirty
        return True
    assert run(go())


def test_a_child_event_wakes_only_a_known_owner():
    async def go():
        c = Controller(NoKube())
        c.observe(None, body())
        await c.queue.get()
        c.queued.clear()
        c.wake_owner({"metadata": {"namespace": "a", "labels": {"app.kubernetes.io/instance": "other"}}})
        c.wake_owner({"metadata": {"namespace": "b", "labels": {"app.kubernetes.io/instance": "web"}}})
        assert c.queue.qsize() == 0
        c.wake_owner({"metadata": {"namespace": "a", "labels": {"app.kubernetes.io/instance": "web"}}})
        return c.queue.qsize()
    assert run(go()) == 1


def test_the_earliest_delayed_wake_up_wins_and_deletion_cancels_it():
    async def go():
        c = Controller(NoKube())
        key = ("a", "web")
        c.observe(None, body())
        c.enqueue_after(key, 300)
        c.enqueue_after(key, 0.01)
        c.enqueue_after(key, 200)
        when = c.timers[key][0] - asyncio.get_running_loop().time()
        c.observe("DELETED", body())
        return when, key in c.timers, key in c.cache
    when, timer_left, cached = run(go())
    assert when < 1 and not timer_left and not cached

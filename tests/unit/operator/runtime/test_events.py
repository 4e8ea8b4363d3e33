"""Events off the reconcile path: aggregated repeats, a per-object rate limit, never failing."""

from __future__ import annotations

import asyncio
import datetime as dt

from ocr_operator.runtime import events
from ocr_operator.runtime.events import Recorder

NOW = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)


def owner(uid="u1", name="web"):
    return {"metadata": {"name": name, "namespace": "a", "uid": uid}}


class Api:
    def __init__(self):
        self.posted, self.bumped = [], []

    async def post(self, item):
        self.posted.append((item.reason, item.message))
        return {"metadata": {"name": f"web.{len(self.posted)}"}}

    async def bump(self, namespace, name, count, now):
        self.bumped.append((name, count))


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_the_same_event_again_bumps_the_count_of_the_posted_one():
    async def go():
        api, clock = Api(), [0.0]
        r = Recorder(api.post, api.bump, clock=lambda: clock[0])
        for _ in range(3):
            r.emit(owner(), "Warning", "RolledBack", "revision x failed", NOW)
        r.emit(owner(), "Normal", "RolloutStarted", "rolling out y", NOW)
        while not r.queue.empty():
            await r.handle(r.queue.get_nowait())
        return api
    api = run(go())
    assert api.posted == [("RolledBack", "revision x failed"), ("RolloutStarted", "rolling out y")]
    assert api.bumped == [("web.1", 2), ("web.1", 3)]


def test_an_object_gets_a_burst_of_events_then_they_are_dropped_and_others_are_unaffected():
    async def go():
        api, clock = Api(), [0.0]
        r = Recorder(api.post, api.bump, clock=lambda: clock[0])
        for i in range(events.BURST + 5):
            r.emit(owner(), "Normal", "X", f"m{i}", NOW)
        r.emit(owner("u2", "api"), "Normal", "X", "other object", NOW)
        while not r.queue.empty():
            await r.handle(r.queue.get_nowait())
        return api, r
    api, r = run(go())
    assert len(api.posted) == events.BURST + 1 and r.dropped == 5
    assert api.posted[-1] == ("X", "other object")


def test_a_failing_post_never_stops_the_poster():
    async def go():
        posted = []

        async def post(item):
            if item.reason == "Bad":
                raise RuntimeError("API down")
            posted.append(item.reason)
            return {"metadata": {"name": "e"}}

        async def bump(*_):
            pass
        r = Recorder(post, bump)
        r.start()
        r.emit(owner(), "Normal", "Bad", "x", NOW)
        r.emit(owner(), "Normal", "Good", "y", NOW)
        await r.stop()
        return posted
    assert run(go()) == ["Good"]

"""The work queue: de-duplicated, one worker per key, fair lanes (timers after events, within a bound), rate-limited."""

from __future__ import annotations

import asyncio
import random

import pytest

from ocr_operator.runtime.workqueue import LATER_MAX_WAIT_SECONDS, URGENT_BURST, TokenBucket, WorkQueue
from tests.unit.clock import ManualClock


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def drain(q: WorkQueue) -> list:
    out = []
    while (k := q.pop()) is not None:
        out.append(k)
        q.done(k)
    return out


def test_a_key_added_many_times_is_queued_once():
    async def go():
        q = WorkQueue()
        for _ in range(5):
            q.add("a")
        q.add("b")
        return drain(q)
    assert run(go()) == ["a", "b"]


def test_a_key_being_processed_is_not_handed_out_again_until_done():
    async def go():
        q = WorkQueue()
        q.add("a")
        assert q.pop() == "a"
        q.add("a")
        q.add("a")
        assert q.pop() is None
        q.done("a")
        return q.pop(), q.pop()
    assert run(go()) == ("a", None)


def test_new_specs_go_first_but_a_waiting_wake_up_is_served_after_a_burst():
    async def go():
        q = WorkQueue()
        q.add("old")                       # a child event of an existing object
        for i in range(10):
            q.add(f"new{i}", urgent=True)  # ten new OcrServices
        return drain(q)
    order = run(go())
    assert order[:URGENT_BURST] == [f"new{i}" for i in range(URGENT_BURST)]
    assert order[URGENT_BURST] == "old"
    assert sorted(order) == sorted(["old"] + [f"new{i}" for i in range(10)])


def test_a_waiting_key_moves_to_the_urgent_lane_when_its_spec_changes():
    async def go():
        q = WorkQueue()
        q.add("a")
        q.add("b")
        q.add("b", urgent=True)
        return drain(q), q.waiting
    order, waiting = run(go())
    assert order == ["b", "a"] and waiting == {}


def test_shuffled_adds_keep_each_key_once_and_lose_none():
    async def go():
        rng = random.Random(7)
        keys = [f"k{i}" for i in range(50)] * 4
        rng.shuffle(keys)
        q = WorkQueue()
        for k in keys:
            lane = rng.random()
            q.add(k, urgent=lane < 0.3, later=lane > 0.7)
        return drain(q)
    out = run(go())
    assert sorted(out) == sorted({f"k{i}" for i in range(50)})


def test_the_token_bucket_allows_a_burst_then_the_rate():
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: now[0])
    assert [bucket.delay() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert abs(bucket.delay() - 0.1) < 1e-9
    now[0] += 0.1
    assert bucket.delay() == 0.0


def test_get_waits_for_a_key():
    async def go():
        q = WorkQueue()
        task = asyncio.create_task(q.get())
        await asyncio.sleep(0.01)
        assert not task.done()
        q.add("a")
        return await asyncio.wait_for(task, 1)
    assert run(go()) == "a"



def test_a_serving_worker_handles_a_key_added_again_while_it_was_handled_once_more_after_it():
    async def go():
        q: WorkQueue[str] = WorkQueue()
        handled: list[str] = []

        async def handle(key: str) -> None:
            handled.append(key)
            if len(handled) == 1:
                q.add(key)  # news while it is processed: marked dirty, queued again when done
            await asyncio.sleep(0)

        worker = asyncio.create_task(q.serve(handle))
        q.add("a")
        for _ in range(200):
            if len(handled) == 2 and "a" not in q.processing:
                break
            await asyncio.sleep(0.01)
        worker.cancel()
        return handled, len(q)

    assert run(go()) == (["a", "a"], 0)


def test_a_timers_wake_up_is_served_after_child_events_and_new_specs():
    async def go():
        q = WorkQueue()
        q.add("settled", later=True)   # a settle period over
        q.add("ready")                 # its Deployment became ready
        q.add("new", urgent=True)      # a new OcrService
        return drain(q)
    assert run(go()) == ["new", "ready", "settled"]


@pytest.mark.parametrize("waited,order", [
    (LATER_MAX_WAIT_SECONDS, ["event-1", "timer", "event-2"]),         # aged: joins the normal lane, behind event-1
    (LATER_MAX_WAIT_SECONDS - 0.1, ["event-1", "event-2", "timer"]),   # not yet: waits for every newer event
], ids=["aged", "not-yet-aged"])
def test_a_later_key_joins_the_normal_lane_once_it_waited_the_max_wait(waited, order):
    async def go():
        clock = ManualClock()
        q = WorkQueue(clock=clock)
        q.add("timer", later=True)
        q.add("event-1")
        clock.now = waited
        first = q.pop()
        q.done(first)
        q.add("event-2")
        return [first] + drain(q)
    assert run(go()) == order


def test_an_aged_later_key_is_served_between_urgent_bursts_like_a_normal_one():
    async def go():
        clock = ManualClock()
        q = WorkQueue(clock=clock)
        q.add("timer", later=True)
        clock.now = LATER_MAX_WAIT_SECONDS
        for i in range(10):
            q.add(f"new{i}", urgent=True)
        return drain(q)
    order = run(go())
    assert order[URGENT_BURST] == "timer" and len(order) == 11


def test_a_later_key_moves_up_when_added_to_a_more_urgent_lane_and_never_down():
    async def go():
        q = WorkQueue()
        q.add("a", later=True)
        q.add("b", later=True)
        q.add("b")                 # a child event for b: normal now
        q.add("c")
        q.add("c", later=True)     # a timer for c, already waiting for a child event: stays normal
        return drain(q), q.waiting, q.later_since
    order, waiting, later_since = run(go())
    assert order == ["b", "c", "a"] and waiting == {} and later_since == {}


def test_a_key_added_later_then_normal_while_processed_is_queued_normal_when_done():
    async def go():
        q = WorkQueue()
        q.add("a")
        assert q.pop() == "a"
        q.add("a", later=True)
        q.add("a")
        q.add("a", later=True)
        q.add("z", later=True)
        q.done("a")
        return drain(q)
    assert run(go()) == ["a", "z"]


def test_a_forgotten_later_key_leaves_no_trace():
    async def go():
        q = WorkQueue()
        q.add("a", later=True)
        q.forget("a")
        return q.pop(), q.waiting, q.later_since, list(q.lanes["later"])
    assert run(go()) == (None, {}, {}, [])

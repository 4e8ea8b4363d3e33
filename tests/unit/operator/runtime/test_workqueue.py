"""The work queue: de-duplicated, one worker per key, fair lanes, rate-limited."""

from __future__ import annotations

import asyncio
import random

from ocr_operator.runtime.workqueue import URGENT_BURST, TokenBucket, WorkQueue


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
            q.add(k, urgent=rng.random() < 0.3)
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

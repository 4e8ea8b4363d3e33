"""Delayed wake-ups and backoff: the earliest wake-up of a key is kept, one backoff formula."""

from __future__ import annotations

import asyncio

from ocr_operator.runtime.timers import BASE_SECONDS, Timers, backoff_delay


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_the_earliest_wake_up_is_kept_whatever_the_order_asked_in():
    async def go():
        t = Timers(lambda key: None)
        loop = asyncio.get_running_loop()
        t.after("k", 300)
        t.after("k", 5)
        t.after("k", 200)  # later than the pending one: ignored
        when = t.pending["k"][0] - loop.time()
        t.cancel_all()
        return when
    assert 4.9 < run(go()) <= 5.0


def test_a_due_wake_up_fires_once_and_is_gone():
    async def go():
        fired = []
        t = Timers(fired.append)
        t.after("k", 0.01)
        t.after("k", 0.01)
        await asyncio.sleep(0.05)
        return fired, t.pending
    assert run(go()) == (["k"], {})


def test_backoff_doubles_from_half_a_second_up_to_its_cap():
    assert [backoff_delay(n) for n in (1, 2, 3, 4)] == [BASE_SECONDS, 1.0, 2.0, 4.0]
    assert backoff_delay(30) == 60.0 and backoff_delay(30, max_backoff=5.0) == 5.0


def test_a_failure_backs_off_from_the_count_and_a_success_starts_over():
    async def go():
        t = Timers(lambda key: None)
        delays = [t.failed("k") for _ in range(3)]
        t.succeeded("k")
        again = t.failed("k")
        t.cancel_all()
        return delays, again
    assert run(go()) == ([0.5, 1.0, 2.0], 0.5)


def test_forgetting_a_key_cancels_its_wake_up_and_its_failures():
    async def go():
        fired = []
        t = Timers(fired.append)
        t.failed("k")
        t.forget("k")
        await asyncio.sleep(0.6)
        return fired, t.failures
    assert run(go()) == ([], {})

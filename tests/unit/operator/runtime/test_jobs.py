"""Background jobs per key: one at a time, the result kept until the reconcile persisted it."""

from __future__ import annotations

import asyncio

from ocr_operator.runtime.jobs import Jobs


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_a_finished_job_wakes_its_key_and_its_result_waits_until_forgotten():
    async def go():
        woken = []
        jobs = Jobs(woken.append)

        async def work():
            return "result-1"
        jobs.ensure("k", "job-1", work)
        await asyncio.sleep(0.01)
        first = jobs.result("k")
        jobs.ensure("k", "job-1", work)  # the same job again: its result waits, nothing runs
        running = dict(jobs.running)
        jobs.forget("k", first)
        return woken, first, running, jobs.result("k")
    assert run(go()) == (["k"], "result-1", {}, None)


def test_another_job_of_the_same_key_cancels_the_running_one():
    async def go():
        jobs, cancelled = Jobs(lambda key: None), []

        async def slow():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append("job-1")
                raise

        async def quick():
            return "job-2 done"
        jobs.ensure("k", "job-1", slow)
        await asyncio.sleep(0)
        jobs.ensure("k", "job-2", quick)
        await asyncio.sleep(0.01)
        return cancelled, jobs.result("k")
    assert run(go()) == (["job-1"], "job-2 done")


def test_a_job_that_raises_gives_the_result_its_error_makes():
    async def go():
        jobs = Jobs(lambda key: None)

        async def broken():
            raise ValueError("no")
        jobs.ensure("k", "j", broken, on_error=lambda exc: f"failed: {exc}")
        await asyncio.sleep(0.01)
        return jobs.result("k"), jobs.running
    assert run(go()) == ("failed: no", {})


def test_stopping_cancels_keyed_and_detached_jobs():
    async def go():
        jobs, cancelled = Jobs(lambda key: None), []

        async def forever(name):
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append(name)
                raise
        jobs.ensure("k", "j", lambda: forever("keyed"))
        jobs.spawn(forever("detached"), name="detached")
        await asyncio.sleep(0)
        await jobs.stop()
        return sorted(cancelled)
    assert run(go()) == ["detached", "keyed"]

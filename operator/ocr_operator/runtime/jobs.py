"""Background jobs per key: work too slow for a reconcile (the quality gate's pages, a batch's
completion callback) runs as a task beside the reconciles, and its result waits for one.

At most one job runs per key. When it ends its result is kept and the key is woken; the
reconcile reads the result, persists what it decided (status, a ConfigMap) and only then forgets
it, so an operator that stops in between loses a result nobody acted on, and the next one runs
the job again. A job of another identity (`job_key`: the spec moved on) cancels the running one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Generic, Hashable, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


class Jobs(Generic[K, R]):
    """`wake(key)` is called when a job of `key` ended."""

    def __init__(self, wake: Callable[[K], None], name: str = "job") -> None:
        self.wake = wake
        self.name = name
        self.running: dict[K, tuple[Hashable, asyncio.Task]] = {}
        self.results: dict[K, tuple[Hashable, R]] = {}
        self.detached: set[asyncio.Task] = set()

    def result(self, key: K) -> R | None:
        found = self.results.get(key)
        return None if found is None else found[1]

    def forget(self, key: K, result: R) -> None:
        """The reconcile persisted what `result` decided."""
        found = self.results.get(key)
        if found is not None and found[1] is result:
            del self.results[key]

    def ensure(self, key: K, job_key: Hashable | None, run: Callable[[], Awaitable[R]] | None = None,
               on_error: Callable[[BaseException], R] | None = None) -> None:
        """Run the job `job_key` for `key` (`run()`) unless it runs already or its result waits;
        any other job of `key` is cancelled. `job_key` None: cancel whatever runs. `on_error`
        turns an exception of `run` into a result, so a bug never leaves a key waiting forever."""
        current = self.running.get(key)
        if current is not None and current[0] != job_key:
            current[1].cancel()
            del self.running[key]
            current = None
        waiting = self.results.get(key)
        if job_key is None or run is None or current is not None or (waiting is not None and waiting[0] == job_key):
            return
        task = asyncio.get_running_loop().create_task(self._run(key, job_key, run, on_error),
                                                      name=f"{self.name}-{key}")
        self.running[key] = (job_key, task)

    async def _run(self, key: K, job_key: Hashable, run: Callable[[], Awaitable[R]],
                   on_error: Callable[[BaseException], R] | None) -> None:
        try:
            result = await run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("%s of %s failed", self.name, key)
            if on_error is None:
                self.running.pop(key, None)
                return
            result = on_error(exc)
        if self.running.get(key, (None,))[0] == job_key:
            del self.running[key]
        self.results[key] = (job_key, result)
        self.wake(key)

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        """A job no key waits for (one about an object that is gone): only kept until it ends or
        the runtime stops."""
        task = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
        self.detached.add(task)
        task.add_done_callback(self.detached.discard)

    def drop(self, key: K) -> None:
        """The key's object is gone."""
        current = self.running.pop(key, None)
        if current is not None:
            current[1].cancel()
        self.results.pop(key, None)

    async def stop(self) -> None:
        tasks = [task for _, task in self.running.values()] + list(self.detached)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.running.clear()
        self.detached.clear()

"""Pages prepared in worker processes (PREPROCESS_MODE=processes).

Why: a page's crops are cut, resized and turned into arrays by Python and PIL code that holds the
interpreter lock for much of its 70 ms. In threads of the engine's own process that slows the
engine thread, which launches the GPU's kernels one by one from Python: on the 2-core machine one
small operator's dispatch took 2.6 us alone, 3.3 us beside one preparing thread (both cores free)
and 20 us beside eight, 6.6 us beside eight preparing processes (bench/preprocess_contention.py).
In processes, preparation runs beside the engine, not in its turns.

Each worker builds its own tokenizer and image processor once (`Engine.load_preprocessing`); a page
goes as a PIL image and comes back as arrays (no tensor crosses: no shared-memory handles to leak),
which `run`, in the calling thread (one of the service's PREPROCESS_WORKERS threads), makes into
tensors again. A worker that dies breaks the pool: it is replaced, and that page is prepared in the
calling thread. A worker ends with the server, however the server ends: a SIGKILLed server runs no
shutdown, and its spawned workers were left running, orphaned (after the suite, four of them).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

if TYPE_CHECKING:
    from PIL import Image

    from ...runtime.config import ServerConfig
    from .engine import Engine

log = logging.getLogger("ocr_server.prepare_pool")

Arrays = tuple[list[int], np.ndarray, "np.ndarray | None", Any]  # prompt ids, global view, crops, CropPlan
Prepared = tuple[list[int], torch.Tensor, "torch.Tensor | None", Any]  # the same as tensors (Engine.prepare_arrays)

_worker: Engine | None = None  # in a worker process: its own engine, without weights


def preprocess_in_processes(mode: str) -> bool:
    """PREPROCESS_MODE: `threads` (the default) or `processes`. Processes take the preparing off the
    engine's interpreter lock but pay a pickled image out and its arrays back (59 ms a page in a
    thread, 93 ms through a process on the 2-core machine), and each worker imports torch and
    transformers again; which is faster beside a GPU's engine thread is the GPU check's to measure
    (bench/preprocess_contention.py in its profile phase)."""
    return mode == "processes"


def _exit_with_parent() -> None:
    """In a worker: end it when the server process ends (multiprocessing gives a spawned child its
    parent's sentinel, which becomes ready when the parent is gone)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-server", daemon=True).start()


def _start_worker(cfg: ServerConfig, uint8_pixels: bool) -> None:
    from .engine import Engine

    _exit_with_parent()
    global _worker
    _worker = Engine(cfg)
    _worker.load_preprocessing()
    _worker.uint8_pixels = uint8_pixels


def _prepare_in_worker(image: Image.Image, kwargs: dict[str, Any]) -> Arrays:
    assert _worker is not None, "the pool's initializer did not run"
    ids, pixels, local, plan = _worker.prepare_arrays(image, **kwargs)
    return ids, pixels.numpy(), None if local is None else local.numpy(), plan


def _warm() -> int:
    return 0 if _worker is None else 1


class PreparePool:
    """PREPROCESS_WORKERS processes that run `Engine.prepare_arrays`; `run` is called from threads."""

    def __init__(self, cfg: ServerConfig, workers: int, uint8_pixels: bool) -> None:
        self.cfg, self.workers, self.uint8_pixels = cfg, workers, uint8_pixels
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        # spawn: the engine's process holds CUDA and threads, which a forked child must not inherit.
        return ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_worker, initargs=(self.cfg, self.uint8_pixels))

    def start(self) -> None:
        """Every worker started and loaded, so that the first requests do not pay for it."""
        assert all(f.result() == 1 for f in [self._pool.submit(_warm) for _ in range(self.workers * 2)])

    def run(self, image: Image.Image, fallback: Callable[[], Prepared], **kwargs: Any) -> Prepared:
        """`Engine.prepare_arrays(image, **kwargs)` in a worker; `fallback()` (this thread) if the pool broke."""
        pool = self._pool
        try:
            ids, pixels, local, plan = pool.submit(_prepare_in_worker, image, kwargs).result()
            return ids, torch.from_numpy(pixels), None if local is None else torch.from_numpy(local), plan
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    log.error("a preprocessing worker died; the pool is replaced and this page prepared in its thread")
                    self._pool = self._new_pool()
            return fallback()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

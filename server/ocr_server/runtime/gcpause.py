"""Python's cyclic garbage collector, paused while the server starts.

Importing torch and transformers and building the model allocate millions of objects and little
cyclic garbage, yet every burst of allocations sets off collections that walk what is already
there. With the tiny model (2026-12-05, 2 cores) `python -m ocr_server` took 4.25-4.43 CPU seconds
to ready, and 3.74 paused, the one collection at the end included. Pods start with every rollout
and every scale-up, so that is start-up time a user waits for.

`pause()` stops the collector (the process's first step); `resume()`, once the model is loaded
and warmed up (or its load failed), runs one full collection, which frees the start-up's garbage
(a warm-up's cycles may hold tensors) and moves what survives into the oldest generation, where
later collections rarely walk it (0.3 s with the tiny model), and starts the collector again.
Each acts once: `resume()` does nothing in a process that did not pause (an app built in a test
process).
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    global _paused
    if _paused:
        _paused = False
        gc.collect()
        gc.enable()


def paused() -> bool:
    return _paused

"""Python's cyclic garbage collector, paused while the server starts.

Importing torch and transformers and building the model allocate millions of objects and almost
no cyclic garbage, yet every burst of allocations sets off collections that walk what is already
there: on the tiny model about 0.6-1 of the 4 CPU seconds from `python -m ocr_server` to ready (the
model load 2.65-3.1 s with the collector on, 2.0-2.1 s paused; 2026-12-05, 2 cores). Pods start
with every rollout and every scale-up, so that is start-up time a user waits for.

`pause()` stops the collector (the process's first step); `resume()` freezes what start-up made
(`gc.freeze`: later collections skip it, as a pre-forking server does before it forks) and starts
it again, once the model is loaded and warmed up or its load failed. Each acts once: `resume()`
does nothing in a process that did not pause (an app built in a test process).
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
        gc.freeze()
        gc.enable()


def paused() -> bool:
    return _paused

"""Python's cyclic garbage collector, paused while the server starts.

Importing torch and transformers and building the model allocate millions of objects and little
cyclic garbage, yet every burst of allocations sets off collections that walk what is already
there. With the tiny model (2026-12-05, 2 cores) `python -m ocr_server` took 4.25-4.43 CPU seconds
to ready, and 3.74 paused, the one collection at the end included. Pods start with every rollout
and every scale-up, so that is start-up time a user waits for.

`pause()` stops the collector (the process's first step). `resume()`, once the model is loaded (or
its load failed), before the warm-up, moves every object the start made into the collector's
permanent generation (`gc.freeze`) and starts the collector again: no collection walks them again,
neither now nor while serving. A full collection there instead walked the 432k objects a start
leaves (0.33 s with the tiny model, 0.40 s with the full-size vision tower, 2026-12-05), and every
later full collection while serving walked them again (0.31 s each). What it would have freed stays:
12.7k objects of the imports (10.7 MiB, no tensor; the same with the official layout's checkpoint
and with the full-size vision tower). CPU s to ready, mean of 4 starts: 4.27 -> 3.83 with WARMUP=0;
of 3: 4.77 -> 4.42 with the warm-up. The warm-up runs with the collector on, so the cycles its
graphs and exceptions leave, which may hold tensors, are collected as usual. Each acts once:
`resume()` does nothing in a process that did not pause (an app built in a test process).
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

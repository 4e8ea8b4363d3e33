"""The collector paused for the server's start (ocr_server/runtime/gcpause.py)."""

from __future__ import annotations

import gc
import weakref

import pytest

from ocr_server.runtime import gcpause


class Node:
    pass


def cycle() -> weakref.ref:
    """A reference cycle nothing else holds (as a warm-up's exception or graph leaves), by weak reference."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def collector():
    yield
    gc.enable()


def test_the_collector_is_off_while_paused_and_on_after_resume(collector):
    gcpause.pause()
    assert not gc.isenabled() and gcpause.paused()
    gcpause.resume()
    assert gc.isenabled() and not gcpause.paused()


def test_garbage_made_while_paused_stays_until_resume_then_is_freed(collector):
    gcpause.pause()
    garbage = cycle()
    for _ in range(3):
        [[] for _ in range(10_000)]  # allocations that would set off collections
    assert garbage() is not None
    gcpause.resume()
    assert garbage() is None


def test_resume_without_a_pause_changes_nothing(collector):
    gc.disable()
    garbage = cycle()
    gcpause.resume()
    assert not gc.isenabled() and garbage() is not None
    gc.collect()

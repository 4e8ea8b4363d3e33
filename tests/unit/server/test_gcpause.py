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
    gc.unfreeze()  # the test process's objects back where the collector walks them
    gc.enable()


def test_the_collector_is_off_while_paused_and_on_after_resume_once(collector):
    gcpause.pause()
    assert not gc.isenabled()
    gcpause.resume()
    assert gc.isenabled()
    gc.disable()
    gcpause.resume()  # the pause was resumed already: a second call leaves the collector alone
    assert not gc.isenabled()


def test_what_the_start_made_is_frozen_at_resume_so_no_collection_walks_it_again(collector):
    gcpause.pause()
    made_at_start = cycle()
    for _ in range(3):
        [[] for _ in range(10_000)]  # allocations that would set off collections
    assert made_at_start() is not None
    gcpause.resume()
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert made_at_start() is not None  # frozen: the full collection did not walk it


def test_cycles_made_after_resume_are_collected_as_usual(collector):
    """The warm-up runs after `resume()`: the cycles it leaves, which may hold tensors, are freed."""
    gcpause.pause()
    gcpause.resume()
    made_later = cycle()
    gc.collect()
    assert made_later() is None


def test_resume_without_a_pause_changes_nothing(collector):
    gc.disable()
    garbage = cycle()
    gcpause.resume()
    assert not gc.isenabled() and garbage() is not None
    gc.collect()

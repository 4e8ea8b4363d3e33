"""The collector paused for the server's start (ocr_server/runtime/gcpause.py)."""

from __future__ import annotations

import gc

import pytest

from ocr_server.runtime import gcpause


@pytest.fixture
def collector():
    """The test process's collector as it was, afterwards (resume() freezes what exists)."""
    yield
    gc.unfreeze()
    gc.enable()


def test_a_paused_start_resumes_with_the_collector_on_and_what_it_made_frozen(collector):
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    gcpause.pause()
    assert not gc.isenabled() and gcpause.paused()
    made = [[] for _ in range(10_000)]  # tracked containers, as imports and a model build make
    gcpause.resume()
    assert gc.isenabled() and not gcpause.paused()
    assert gc.get_freeze_count() >= frozen + len(made)


def test_resume_without_a_pause_changes_nothing(collector):
    frozen = gc.get_freeze_count()
    gcpause.resume()
    assert gc.isenabled() and not gcpause.paused()
    assert gc.get_freeze_count() == frozen


def test_a_process_whose_collector_is_off_is_left_off(collector):
    gc.disable()
    gcpause.pause()
    gcpause.resume()
    assert not gc.isenabled()

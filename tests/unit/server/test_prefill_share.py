"""The slots runner gives prefills PREFILL_SHARE of the engine's time while rows decode, by time and
not by turns: chunks shorter than a step (on an H200 a chunk of 8 pages is about 2 ms, a step of 64
rows 4.6 ms) still get their share, and a row beside a prefill keeps getting steps."""

from __future__ import annotations

import threading
import time
import types

import pytest

from ocr_server.engines.scheduling import ClassQueue
from ocr_server.engines.transformers import slot_runner
from ocr_server.engines.transformers.slot_runner import SlotRunner, _Pending, decode_owed
from ocr_server.runtime.metrics import Metrics
from tests.unit.clock import ManualClock

CHUNK_S, STEP_S, CHUNKS = 0.002, 0.0046, 200


class FakeSlots:
    """A decoder whose prefill chunks and steps take simulated time: one row decodes throughout,
    and one page joins with CHUNKS chunks."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock, self.plan = clock, types.SimpleNamespace(slots=4, prefill_pages=8)
        self.rows = {0: "long row"}
        self.log: list[str] = []
        self.prefill_done = False

    def free_slots(self) -> int:
        return 3

    def prefill(self, items):
        for _ in range(CHUNKS):
            self.clock.now += CHUNK_S
            self.log.append("chunk")
            yield
        self.prefill_done = True

    def step(self):
        self.clock.now += STEP_S
        self.log.append("step")
        if self.prefill_done:
            self.rows.clear()  # the rows end once the page has joined: the run is over
        return []

    def idle(self) -> bool:
        return not self.rows


def run(share: float, monkeypatch) -> FakeSlots:
    clock = ManualClock()
    monkeypatch.setattr(slot_runner.time, "perf_counter", clock)
    slots = FakeSlots(clock)
    engine = types.SimpleNamespace(slots=slots, cfg=types.SimpleNamespace(runtime=types.SimpleNamespace(prefill_share=share)))
    runner = SlotRunner(engine, metrics=Metrics(), on_fatal=lambda exc: None)
    item = types.SimpleNamespace(request_class="interactive", deadline=time.monotonic() + 60, cancelled=threading.Event())
    future = types.SimpleNamespace(done=lambda: False)
    runner.inbox = ClassQueue()
    runner.inbox.append(_Pending(item, future), "interactive")
    runner._drive()
    return slots


@pytest.mark.parametrize("share", [0.5, 0.75, 0.9])
def test_prefills_get_their_share_of_the_engines_time_while_a_row_decodes(share, monkeypatch):
    log = run(share, monkeypatch).log
    last = len(log) - 1 - log[::-1].index("chunk")
    chunks, steps = log[:last + 1].count("chunk"), log[:last + 1].count("step")
    got = chunks * CHUNK_S / (chunks * CHUNK_S + steps * STEP_S)
    assert chunks == CHUNKS and got == pytest.approx(share, abs=0.02), (chunks, steps)


def test_a_row_beside_a_prefill_keeps_getting_steps(monkeypatch):
    log = run(0.9, monkeypatch).log
    last = len(log) - 1 - log[::-1].index("chunk")
    gaps = "".join("c" if e == "chunk" else "s" for e in log[:last + 1]).split("s")
    assert log[:last].count("step") >= 8 and max(len(g) for g in gaps) * CHUNK_S <= 10 * STEP_S


def test_with_a_share_of_1_prefills_go_first():
    assert decode_owed(0.002, 1.0) == 0.0
    assert decode_owed(0.002, 0.5) == pytest.approx(0.002)
    assert decode_owed(0.009, 0.9) == pytest.approx(0.001)

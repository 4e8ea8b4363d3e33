"""Request classes (priority.py): interactive requests are started first, batch requests shed first."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ocr_limits import SERVER_SETTINGS, default_batch_max_running
from ocr_operator.api.ocrservice import FIELD_FOR_ENV
from ocr_server.serving.admission import Admission
from ocr_server.engines.batcher import Batcher
from ocr_server.runtime.config import ConfigError, load_config
from ocr_server.runtime.errors import BadInput, QueueFull
from ocr_server.runtime.metrics import Metrics
from ocr_limits.request_classes import BATCH, INTERACTIVE
from ocr_server.engines.scheduling import ClassQueue
from ocr_server.serving.admission import Decision, admit
from ocr_server.http.request_class import parse_request_class


def test_the_header_names_a_class_and_absent_is_interactive():
    assert parse_request_class(None) == INTERACTIVE
    assert parse_request_class(" Batch ") == BATCH and parse_request_class("interactive") == INTERACTIVE


def test_an_unknown_class_is_a_400_naming_the_header_with_the_value_cut_short():
    with pytest.raises(BadInput, match="X-Request-Class: 'urgent' is not a request class") as err:
        parse_request_class("urgent")
    assert err.value.param == "X-Request-Class" and err.value.status == 400
    with pytest.raises(BadInput) as long:
        parse_request_class("x" * 5000)
    assert len(long.value.message) < 200


def test_batch_stops_queueing_at_its_threshold_and_interactive_at_the_queue_size():
    limits = {"queue_size": 4, "batch_threshold": 2}
    assert admit(BATCH, free=1, waiting=0, **limits) is Decision.RUN
    assert admit(BATCH, free=0, waiting=1, **limits) is Decision.WAIT
    assert admit(BATCH, free=0, waiting=2, **limits) is Decision.SHED
    assert admit(INTERACTIVE, free=0, waiting=3, **limits) is Decision.WAIT
    assert admit(INTERACTIVE, free=0, waiting=4, **limits) is Decision.SHED


def test_batch_waits_at_its_running_cap_even_with_a_free_slot_and_interactive_does_not():
    limits = {"queue_size": 4, "batch_threshold": 2, "batch_max_running": 3}
    assert admit(BATCH, free=2, waiting=0, batch_running=2, **limits) is Decision.RUN
    assert admit(BATCH, free=1, waiting=0, batch_running=3, **limits) is Decision.WAIT
    assert admit(BATCH, free=1, waiting=2, batch_running=3, **limits) is Decision.SHED
    assert admit(INTERACTIVE, free=1, waiting=2, batch_running=3, **limits) is Decision.RUN


def test_batch_keeps_a_quarter_of_the_slots_free_for_interactive_by_default():
    assert [default_batch_max_running(n) for n in (1, 2, 4, 8, 64)] == [1, 1, 3, 6, 48]
    assert load_config(env={"BATCH_MAX_RUNNING": "5"}).runtime.batch_max_running == 5
    assert load_config(env={}).runtime.batch_max_running is None  # filled in from the runner's size
    with pytest.raises(ConfigError, match="BATCH_MAX_RUNNING=0 is not allowed: 1..4096"):
        load_config(env={"BATCH_MAX_RUNNING": "0"})


def test_a_slot_kept_from_batch_goes_to_an_interactive_request_and_a_finished_batch_one_to_the_next_batch():
    async def scenario() -> tuple[list[str], Admission]:
        admission = Admission(3, queue_size=8, metrics=Metrics(), batch_max_running=2)
        order: list[str] = []
        gates = {name: asyncio.Event() for name in ("b1", "b2", "b3", "i1")}

        async def request(name: str, cls: str) -> None:
            async with admission.slot(float("inf"), cls):
                order.append(name)
                await gates[name].wait()

        tasks = [asyncio.create_task(request(n, BATCH)) for n in ("b1", "b2", "b3")]
        await asyncio.sleep(0.01)
        assert (order, admission.free, admission.waiting) == (["b1", "b2"], 1, 1)  # b3 waits beside a free slot
        tasks.append(asyncio.create_task(request("i1", INTERACTIVE)))
        await asyncio.sleep(0.01)
        assert order[-1] == "i1" and admission.interactive_inside()
        gates["b1"].set()  # a batch slot frees: the waiting batch request takes it
        await asyncio.sleep(0.01)
        assert order[-1] == "b3" and admission.running == {INTERACTIVE: 1, BATCH: 2}
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*tasks)
        return order, admission

    order, admission = asyncio.run(scenario())
    assert order == ["b1", "b2", "i1", "b3"]
    assert (admission.free, admission.running, admission.interactive_inside()) == (3, {INTERACTIVE: 0, BATCH: 0}, False)


def test_the_class_queue_serves_interactive_first_and_in_order_within_a_class():
    q: ClassQueue[str] = ClassQueue()
    for entry, cls in (("b1", BATCH), ("i1", INTERACTIVE), ("b2", BATCH), ("i2", INTERACTIVE)):
        q.append(entry, cls)
    assert q.remove("b2", BATCH) and not q.remove("b2", BATCH)
    assert list(q) == ["i1", "i2", "b1"] and len(q) == 3 and q.first() == "i1"
    assert [q.popleft() for _ in range(3)] == ["i1", "i2", "b1"]


def test_a_freed_slot_goes_to_the_waiting_interactive_request_before_earlier_batch_ones():
    async def scenario() -> tuple[list[str], str]:
        admission = Admission(1, queue_size=4, metrics=Metrics(), batch_threshold=2)
        order: list[str] = []
        gate = asyncio.Event()

        async def request(name: str, cls: str) -> None:
            async with admission.slot(float("inf"), cls):
                order.append(name)
                await gate.wait()

        tasks = [asyncio.create_task(request("first", BATCH))]
        for name, cls in (("b1", BATCH), ("b2", BATCH), ("i1", INTERACTIVE)):
            await asyncio.sleep(0)
            tasks.append(asyncio.create_task(request(name, cls)))
        await asyncio.sleep(0.01)
        with pytest.raises(QueueFull) as shed:  # 3 wait: batch is over its threshold (2), interactive is not (4)
            async with admission.slot(float("inf"), BATCH):
                pass
        gate.set()
        await asyncio.gather(*tasks)
        return order, shed.value.message

    order, message = asyncio.run(scenario())
    assert order == ["first", "i1", "b1", "b2"]
    assert "BATCH_QUEUE_THRESHOLD=2" in message


def test_a_waiter_that_gives_up_passes_its_slot_on():
    async def scenario() -> list[str]:
        admission = Admission(1, queue_size=4, metrics=Metrics())
        order: list[str] = []
        gate = asyncio.Event()

        async def request(name: str) -> None:
            async with admission.slot(float("inf"), INTERACTIVE):
                order.append(name)
                await gate.wait()

        first = asyncio.create_task(request("first"))
        await asyncio.sleep(0)
        gone, last = asyncio.create_task(request("gone")), asyncio.create_task(request("last"))
        await asyncio.sleep(0.01)
        gone.cancel()
        gate.set()
        await asyncio.gather(first, last)
        return order

    assert asyncio.run(scenario()) == ["first", "last"]


def test_the_generate_batcher_takes_waiting_interactive_pages_before_batch_ones():
    ran: list[str] = []
    started = threading.Event()
    release = threading.Event()

    def run_batch(items):
        started.set()
        release.wait(10)
        ran.extend(i.name for i in items)
        return [i.name for i in items]

    class Item:
        def __init__(self, name: str, request_class: str) -> None:
            self.name, self.request_class = name, request_class
            self.deadline, self.cancelled = float("inf"), threading.Event()

    async def scenario() -> None:
        batcher = Batcher(run_batch, batch_size=1, wait_s=0, metrics=Metrics(), on_fatal=lambda exc: None)
        batcher.start()
        jobs = [asyncio.ensure_future(batcher.submit(Item("busy", BATCH)))]
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        for name, cls in (("b1", BATCH), ("b2", BATCH), ("i1", INTERACTIVE)):
            jobs.append(asyncio.ensure_future(batcher.submit(Item(name, cls))))
        await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(*jobs)
        await batcher.stop()

    asyncio.run(scenario())
    assert ran == ["busy", "i1", "b1", "b2"]


def test_the_batch_threshold_defaults_to_half_the_queue_and_is_bounded_by_it():
    assert load_config(env={"QUEUE_SIZE": "10"}).runtime.batch_queue_threshold == 5
    assert load_config(env={"BATCH_QUEUE_THRESHOLD": "0"}).runtime.batch_queue_threshold == 0
    with pytest.raises(ConfigError, match=r"BATCH_QUEUE_THRESHOLD=11 is not allowed: 0..QUEUE_SIZE \(10\)"):
        load_config(env={"QUEUE_SIZE": "10", "BATCH_QUEUE_THRESHOLD": "11"})
    with pytest.raises(ConfigError, match="QUEUE_SIZE=5000 is not allowed: 1..4096"):
        load_config(env={"QUEUE_SIZE": "5000"})


def test_the_queue_and_connection_settings_are_left_to_spec_env():
    assert {s.env for s in SERVER_SETTINGS} == {"QUEUE_SIZE", "BATCH_QUEUE_THRESHOLD", "BATCH_MAX_RUNNING",
                                                "MAX_INFLIGHT_BODY_BYTES", "TLS_HANDSHAKE_TIMEOUT_SEC"}
    assert not {s.env for s in SERVER_SETTINGS} & set(FIELD_FOR_ENV)

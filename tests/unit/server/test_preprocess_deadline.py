"""Reading a document runs within the request's deadline and gives the admission slot back at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from ocr_server.serving import documents
from ocr_server.serving import service as service_module
from ocr_server.runtime.config import load_config
from ocr_server.runtime.errors import DeadlineExceeded
from ocr_server.runtime.metrics import Metrics
from ocr_server.serving.schema import OcrOptions
from ocr_server.serving.service import OcrServing
from ocr_server_testing.stand_in import StandInEngine
from tests.server import samples


def _serving(**env: str) -> OcrServing:
    cfg = load_config(env={"CONCURRENCY": "1", "QUEUE_SIZE": "4", "BATCH_WAIT_MS": "0", "WARMUP": "0", **env})
    engine = StandInEngine(cfg, generate_sec=0.01)
    engine.load()
    serving = OcrServing(cfg, engine, Metrics())
    serving.start(on_fatal=lambda exc: None)
    serving.mark_ready()
    return serving


@pytest.fixture
def slow_reading(monkeypatch):
    """Documents named by their first bytes 'slow' take 2 s to read, checking nothing meanwhile."""
    real = documents.load_document

    def load(data: bytes, **kw):
        if data == SLOW:
            time.sleep(2.0)
            data = GOOD
        return real(data, **kw)

    monkeypatch.setattr(service_module, "load_document", load)


GOOD = samples.png(64, 64)
SLOW = samples.png(64, 64, seed=7)


def test_a_request_whose_reading_outlasts_its_deadline_gets_504_at_the_deadline(slow_reading):
    async def scenario() -> float:
        serving = _serving()
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="document was being read"):
            await serving.ocr(SLOW, OcrOptions(timeout_sec=0.3))
        elapsed = time.monotonic() - t0
        assert serving.admission.inside == 0  # the slot is back
        await serving.stop()
        return elapsed

    assert asyncio.run(scenario()) < 1.0


def test_a_normal_request_waiting_behind_a_slow_reading_one_is_served(slow_reading):
    """CONCURRENCY=1: the slow request holds the only slot until its deadline, not until its reading ends."""
    async def scenario() -> tuple[object, object, float]:
        serving = _serving()
        slow = asyncio.ensure_future(serving.ocr(SLOW, OcrOptions(timeout_sec=0.3)))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        normal = await serving.ocr(GOOD, OcrOptions())
        elapsed = time.monotonic() - t0
        slow_result = await asyncio.gather(slow, return_exceptions=True)
        await serving.stop()
        return normal, slow_result[0], elapsed

    normal, slow, elapsed = asyncio.run(scenario())
    assert normal.raw == "stand-in output" and isinstance(slow, DeadlineExceeded)
    assert elapsed < 1.5


def test_the_pages_option_is_refused_before_a_slot_is_taken():
    async def scenario() -> None:
        serving = _serving()
        with pytest.raises(Exception) as err:
            await serving.ocr(GOOD, OcrOptions(pages="1-10001," * 200 + "1"))
        assert getattr(err.value, "param", None) == "pages" and serving.admission.inside == 0
        assert serving.metrics.cache_misses._value.get() == 0  # refused before the cache was even asked
        await serving.stop()

    asyncio.run(scenario())

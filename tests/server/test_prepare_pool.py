"""PREPROCESS_MODE=processes: pages prepared in worker processes are the pages a thread prepares, and
a worker that dies costs no request: its page is prepared in the calling thread and the pool is
replaced."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from localcluster.machine import pid_alive
from ocr_server.engines.transformers.engine import Engine
from ocr_server.engines.transformers.prepare_pool import PreparePool
from ocr_server.runtime.config import ConfigError, load_config

from . import samples
from .conftest import MAIN_ENV, start_server
from .samples import page as png_image

KWARGS = {"prompt_mode": "markdown", "max_visual_tokens": None, "max_new_tokens": 8}


@pytest.fixture(scope="module")
def engines(tiny_native):
    cfg = load_config(env={"MODEL_PATH": str(tiny_native), "DEVICE": "cpu", "PREPROCESS_WORKERS": "1"})
    local = Engine(cfg)
    local.load_preprocessing()
    remote = Engine(replace(cfg, runtime=replace(cfg.runtime, preprocess_mode="processes")))
    remote.load_preprocessing()
    remote.prepare_pool = PreparePool(remote.cfg, 1, uint8_pixels=False)
    remote.prepare_pool.start()
    yield local, remote
    remote.prepare_pool.close()


def same(a, b) -> bool:
    return (a.input_ids == b.input_ids and a.plan == b.plan and torch.equal(a.pixel_values, b.pixel_values)
            and (a.pixel_values_local is None) == (b.pixel_values_local is None)
            and (a.pixel_values_local is None or torch.equal(a.pixel_values_local, b.pixel_values_local)))


@pytest.mark.parametrize("size", [(640, 640), (1400, 900), (300, 2000)])
def test_a_page_prepared_in_a_worker_process_is_the_page_a_thread_prepares(engines, size):
    local, remote = engines
    image = png_image(*size, seed=sum(size))
    assert same(remote.prepare(image, **KWARGS), local.prepare(image, **KWARGS))


def test_a_worker_that_dies_costs_no_page_and_is_replaced(engines):
    local, remote = engines
    image = png_image(800, 600, seed=5)
    pool = remote.prepare_pool
    for pid in list(pool._pool._processes):
        os.kill(pid, signal.SIGKILL)
    assert same(remote.prepare(image, **KWARGS), local.prepare(image, **KWARGS))  # in this thread
    again = remote.prepare(image, **KWARGS)  # through the new pool's worker
    assert same(again, local.prepare(image, **KWARGS)) and pool._pool._processes


def test_an_unknown_preprocess_mode_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match="PREPROCESS_MODE"):
        load_config(env={"PREPROCESS_MODE": "fibers"})


def test_a_server_preparing_in_processes_answers_what_the_threaded_server_answers(server, tiny_native, tmp_path):
    """The whole path: the engine's load starts the pool, every page of the request goes through it."""
    env = {**MAIN_ENV, "MODEL_PATH": str(tiny_native), "LOAD_DELAY_SEC": "0", "PREPROCESS_MODE": "processes",
           "PREPROCESS_WORKERS": "1"}
    other = start_server(tmp_path, env)
    try:
        page = samples.png(900, 700, seed=3)
        answers = []
        for running in (other, server):
            with running.client() as c:
                r = c.post("/v1/ocr", files={"file": ("p.png", page, "image/png")})
            assert r.status_code == 200, r.text
            answers.append((r.json()["raw"], r.json()["usage"]))
        assert answers[0] == answers[1]
        assert "prepared in 1 worker processes" in other.log()
    finally:
        other.stop()


def children(pid: int) -> set[int]:
    return {int(c) for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()}


def test_the_workers_of_a_killed_server_end_with_it(tiny_native, tmp_path):
    """A SIGKILLed server runs no shutdown: its workers see their parent gone and end, not orphaned."""
    env = {**MAIN_ENV, "MODEL_PATH": str(tiny_native), "LOAD_DELAY_SEC": "0", "PREPROCESS_MODE": "processes",
           "PREPROCESS_WORKERS": "1"}
    server = start_server(tmp_path, env)
    try:
        # the pool's worker and multiprocessing's resource tracker
        helpers = {pid for pid in children(server.proc.pid)
                   if "multiprocessing" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")}
        assert len(helpers) == 2, helpers
    finally:
        server.proc.kill()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(map(pid_alive, helpers)):
        time.sleep(0.2)
    assert not [pid for pid in helpers if pid_alive(pid)], "left running after their server was killed"

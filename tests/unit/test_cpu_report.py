"""`--cpu-report FILE` (tests/cpu_report.py): each test's own and its reaped children's CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cpu_report import by_module

ROOT = Path(__file__).resolve().parents[2]
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
SAMPLE = f'''
import subprocess, sys, time

def test_burns_in_process():
{textwrap.indent(BURN, "    ")}
def test_burns_in_a_child():
    subprocess.run([sys.executable, "-c", {BURN!r}], check=True)

def test_sleeps():
    time.sleep(0.3)
'''


def test_modules_are_summed_and_ordered_by_cpu():
    rows = [("a.py::x", 1.0, 0.0, 2.0), ("b.py::y", 0.5, 2.0, 3.0), ("a.py::z", 0.5, 0.5, 1.0)]
    assert by_module(rows) == [("b.py", 0.5, 2.0, 3.0), ("a.py", 1.5, 0.5, 3.0)]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in process", "xdist workers"])
def test_each_test_gets_its_own_and_its_childrens_cpu(tmp_path, workers):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    report = tmp_path / "cpu.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.cpu_report",
                          *workers, "--cpu-report", str(report), "test_sample.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "CPU by module (3 tests" in run.stdout
    rows = {nodeid.split("::")[1]: (own, children, wall) for nodeid, own, children, wall in json.loads(report.read_text())["tests"]}
    assert rows["test_burns_in_process"][0] >= 0.25 and rows["test_burns_in_process"][1] < 0.1
    assert rows["test_burns_in_a_child"][1] >= 0.25 and rows["test_burns_in_a_child"][0] < 0.2
    own, children, wall = rows["test_sleeps"]
    assert own < 0.1 and children < 0.1 and wall >= 0.3

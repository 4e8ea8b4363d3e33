"""make test's disk pre-flight (hack/preflight.py): a clear stop below the run's floor, a warning
before a first set-up that may not fit, silence otherwise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hack.preflight import COLD_GB, RUN_FLOOR_GB, verdict

ROOT = Path(__file__).resolve().parents[2]


def test_a_disk_below_the_runs_floor_stops_the_run_naming_the_place_and_the_space_it_needs():
    ok, lines = verdict({"the cache /c": RUN_FLOOR_GB - 0.5, "the temporary directory /t": 50.0}, cold=False)
    assert not ok
    assert len(lines) == 1 and lines[0].startswith(f"preflight: {RUN_FLOOR_GB - 0.5:.1f} GB free on the disk of the cache /c")
    assert f"at least {RUN_FLOOR_GB} GB" in lines[0]


def test_a_first_set_up_on_a_small_disk_is_warned_of_and_goes_on():
    ok, lines = verdict({"the cache /c": COLD_GB - 1}, cold=True)
    assert ok and len(lines) == 1 and "no cache yet" in lines[0]


def test_enough_space_says_nothing():
    assert verdict({"the cache /c": COLD_GB - 1}, cold=False) == (True, [])
    assert verdict({"the cache /c": COLD_GB + 1}, cold=True) == (True, [])


def test_the_script_stops_make_with_its_exit_status_when_the_disk_is_short(tmp_path):
    """Run as make runs it, with the floor raised past any disk: exit 1 and the reason on stderr."""
    code = "import sys, hack.preflight as p; p.RUN_FLOOR_GB = 10**9; sys.exit(p.main())"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "CAUSALFLOW_CACHE": str(tmp_path)})
    assert r.returncode == 1 and "preflight:" in r.stderr and "Free some space" in r.stderr

"""The GPU check, run end to end in a replica of the GPU machine's Python (bench/gpu_replica.py), short.

The replica is a venv of that machine's shape (Python 3.12 where this machine has it, torch 2.11,
transformers 5.17, no web stack), built once by `make setup` and cached; the run has no package
index and, where the kernel allows, no network but loopback. Every phase of bench/gpu_check.sh runs
on the CPU with the tiny model, so the script cannot rot between the GPU machine's rare visits.
"""

from __future__ import annotations

import json
import time

import pytest

from bench import gpu_replica, gpu_run

pytestmark = [pytest.mark.slow, pytest.mark.server]
LEVELS = [1, 4, 2]  # SHORT_ARGS' --clients, in their order


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    replica = gpu_replica.build()  # cached: seconds once `make setup` built it
    out, scratch, tmp = (tmp_path_factory.mktemp(name) for name in ("out", "scratch", "tmp"))
    t = time.monotonic()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TMPDIR", str(tmp))  # the run's temporary files, to see what it leaves there
        rc = gpu_replica.run(replica, out, short=True, scratch=scratch)
    print(f"short replica run: {time.monotonic() - t:.0f} s")
    phases = json.loads((out / "phases.json").read_text())
    return {"rc": rc, "out": out, "scratch": scratch, "phases": phases, "replica": replica, "tmp": tmp}


def figures(run, name: str) -> dict:
    return json.loads((run["out"] / name).read_text())


def test_every_phase_of_the_check_ends_ok_and_the_script_exits_0(run):
    assert {p["name"]: p["status"] for p in run["phases"]["phases"]} == dict.fromkeys(gpu_run.PHASES, "ok"), \
        (run["out"] / "gpu_check.log").read_text()[-6000:]
    assert run["rc"] == 0


def test_the_replica_is_a_venvs_interpreter_that_lacks_the_servers_web_stack(run):
    python = str(run["replica"].python)
    versions = run["phases"]["versions"]
    assert versions["executable"] == python and versions["in_venv"] is True
    assert versions["python"].startswith("3.12.") or not gpu_replica.find_python312()
    frozen = (run["replica"].python.parent.parent / ".built").read_text().lower()
    assert "torch==2.11.0" in frozen and "transformers==5.17.0" in frozen
    assert not any(f"\n{name}==" in f"\n{frozen}" for name in gpu_replica.NOT_ON_IMAGE)


def test_the_install_phase_keeps_the_machines_torch_and_brings_the_rest_from_the_wheels(run):
    versions = run["phases"]["versions"]
    assert versions["torch"] == {"version": "2.11.0+cu130", "from": "image"}
    for name in ("transformers", "fastapi", "uvicorn", "pydantic", "python_multipart", "pypdfium2"):
        assert versions[name]["from"] == "target", name
    assert versions["transformers"]["version"] != "5.17.0"  # the server's pin, not the machine's
    assert (run["scratch"] / "site").is_dir() and not (run["out"] / "site").exists()


def test_the_identity_check_finds_every_page_identical(run):
    identity = figures(run, "identity.json")
    assert identity["complete"] is True and identity["device"] == "cpu"
    assert len(identity["pages"]) == 2 and identity["identical_pages"] == 2
    compiled = identity["compiled"]  # the same pages with the step compiled (aot_eager on a CPU)
    assert compiled["complete"] and compiled["compiled"] and compiled["backend"] == "aot_eager"
    assert len(compiled["pages"]) == 2 and compiled["identical_pages"] == 2


def test_the_raw_engine_figures_are_all_there_and_well_formed(run):
    t = figures(run, "bench.json")["engines"]["transformers"]
    for path in ("slots", "sequential", "generate"):
        f = t[path]
        assert f["tokens_per_s"] > 0 and f["pages_per_s"] > 0 and 0 < f["p50_s"] <= f["p95_s"] <= f["wall_s"] + 1e-6, path
    assert set(t["prefill_ms_per_page"]) == {"1", "4"}  # 1 and min(8, the slots) pages together
    assert all(0 < f["p50"] <= f["max"] for f in t["prefill_ms_per_page"].values())
    # the compiled step's regions traced by the machine's torch (aot_eager on a CPU) and measured
    assert set(t["step_ms"]) == {"grouped_mm", "batched_mm", "grouped_mm+compiled"}
    # timed with every row open: a step with no row left returns in microseconds
    assert all(set(rows) == {"1", "4"} and all(ms > 0.1 for ms in rows.values()) for rows in t["step_ms"].values())
    assert t["compiled_step"]["backend"] == "aot_eager" and t["compiled_step"]["compiled"] is True
    assert t["compiled_step"]["attention"] == "bucket"  # a CPU: flex only where it runs compiled on a GPU
    assert t["compiled_step"]["compile_s"]["all"] >= t["compiled_step"]["compile_s"]["dynamo"] > 0  # where its compile went
    assert t["slot_count"] == 4 and t["kv_mib_per_slot"] > 0


def test_the_prefill_profile_gives_ms_per_page_at_each_k_and_the_heaviest_operators(run):
    got = figures(run, "profile.json")
    assert list(got["k"]) == ["1", "2"] and all(f["ms_per_page"] > 0 and f["chunks"] > 1 for f in got["k"].values())
    assert list(got["profile"]) == ["1", "2"]
    assert got["sam_fold"]["ok"] and set(got["sam_fold"]["layers"]) == {"global", "window 14"}
    contention = got["preprocess_contention"]
    assert contention["alone_us"] > 0 and set(contention["threads"]) == set(contention["processes"]) == {"1"}
    assert contention["processes"]["1"]["pages"] > 0 and contention["processes"]["1"]["ms_per_page"] > 0
    assert all(p["aten_ops"] > 0 and p["top_ops_host"] and p["wall_ms"] > 0 for p in got["profile"].values())


def test_the_server_is_measured_at_every_client_level_in_the_order_given(run):
    server = figures(run, "bench.json")["engines"]["transformers"]["server"]
    assert [k for k in server if k.startswith("clients_")] == [f"clients_{n}" for n in LEVELS]
    assert server["health"]["device"] == "cpu" and server["health"]["decoder"]["decoder"] == "slots"
    for n in LEVELS:
        f = server[f"clients_{n}"]
        assert f["tokens_per_s"] > 0 and 0 < f["p50_s"] <= f["p95_s"] and 0 <= f["preprocess_share"] < 1, n


def test_each_server_level_says_what_its_engine_did_beside_the_raw_engines_pages_a_prefill(run):
    """From the server's /metrics before and after the level: every page prefilled, the engine
    busy for part of the level's time at most, each step with at least one row."""
    t = figures(run, "bench.json")["engines"]["transformers"]
    for n in LEVELS:
        f = t["server"][f"clients_{n}"]
        engine = f["engine"]
        assert 1 <= engine["prefills"] <= f["pages"] and 1 <= engine["pages_per_prefill"] <= n, (n, engine)
        assert engine["prefills"] * engine["pages_per_prefill"] == pytest.approx(f["pages"]), (n, engine)
        assert 0 < engine["busy_share"] <= 1 and engine["rows_per_step"] >= 1, (n, engine)
        assert engine["prefill_busy_ms_per_page"] > 0 and engine["decode_busy_ms_per_step"] > 0, (n, engine)
    assert t["slots"]["pages_per_prefill"] >= 1
    summary = (run["out"] / "gpu_check.log").read_text().split("== summary")[1]
    assert f"server clients_{max(LEVELS)}:" in summary and "pages a prefill" in summary.split(f"server clients_{max(LEVELS)}:")[1]


def test_each_server_variant_is_measured_at_the_largest_level(run):
    """The server again with some settings changed (gpu_run's --server-variants): here its pages
    prepared in a worker process."""
    variants = figures(run, "bench.json")["engines"]["transformers"]["server"]["variants"]
    assert list(variants) == ["DECODE_COMPILE=true", "PREPROCESS_MODE=processes;PREPROCESS_WORKERS=1"]
    got = variants["PREPROCESS_MODE=processes;PREPROCESS_WORKERS=1"]
    assert [k for k in got if k.startswith("clients_")] == [f"clients_{max(LEVELS)}"]
    assert got[f"clients_{max(LEVELS)}"]["tokens_per_s"] > 0 and got["health"]["decoder"]["decoder"] == "slots"
    assert got["health"]["decoder"]["decode_step"] == "eager"  # a CPU: no graphs, nothing compiled
    summary = (run["out"] / "gpu_check.log").read_text().split("== summary")[1]
    assert "with PREPROCESS_MODE=processes;PREPROCESS_WORKERS=1:" in summary and "; step eager, bucket attention" in summary


def test_a_variant_whose_server_does_not_start_is_recorded_and_the_next_one_still_measured(run):
    """DECODE_COMPILE=true, the GPU machine's first variant, is refused on a CPU at start."""
    got = figures(run, "bench.json")["engines"]["transformers"]["server"]["variants"]["DECODE_COMPILE=true"]
    assert "DECODE_COMPILE=true compiles the decode step" in got["error"]
    assert not [k for k in got if k.startswith("clients_")]
    assert "server with DECODE_COMPILE=true FAILED" in (run["out"] / "gpu_check.log").read_text().split("== summary")[1]


def test_only_the_small_result_files_come_back_and_the_log_ends_with_the_summary(run):
    files = {f.name: f.stat().st_size for f in run["out"].iterdir()}
    assert set(files) == {"gpu_check.log", "phases.json", "identity.json", "bench.json", "profile.json"}
    assert all(size < 16 * 2**20 for size in files.values())
    log = (run["out"] / "gpu_check.log").read_text()
    assert log.index("== install") < log.index("== raw") < log.index("== server") < log.index("== summary")
    assert "server clients_1:" in log.split("== summary")[1]


def test_the_run_leaves_no_server_log_in_the_temporary_directory(run):
    """The bench's server logs are scratch: each server measured used to leave one in /tmp."""
    assert not list(run["tmp"].rglob("*.log")), sorted(run["tmp"].rglob("*"))[:20]


def test_a_second_build_waits_for_the_first_instead_of_installing_into_the_same_venv(tmp_path):
    """`make setup` and a test may both build the replica; the second must not race the first."""
    import subprocess
    import sys

    lock = tmp_path / ".lock"
    probe = ("import fcntl, sys; f = open(sys.argv[1], 'a')\n"
             "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(3)\n")
    with gpu_replica.exclusive(lock):
        held = subprocess.run([sys.executable, "-c", probe, str(lock)]).returncode
    free = subprocess.run([sys.executable, "-c", probe, str(lock)]).returncode
    assert (held, free) == (3, 0)

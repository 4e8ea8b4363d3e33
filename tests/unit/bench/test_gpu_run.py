"""bench/gpu_run.py and bench/gpu_wheels.py: the GPU check's plan, its deadlines, a phase cut at its
deadline, and what --prepare packs and asks the GPU machine's pip to resolve."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import gpu_run, gpu_wheels


def test_the_gpu_plan_fits_in_eight_minutes_and_budgets_every_phase():
    plan = gpu_run.parse_plan(",".join(f"{k}={v}" for k, v in gpu_run.GPU_PLAN.items()))
    assert list(plan) == list(gpu_run.PHASES) and sum(plan.values()) <= 480


def test_a_plan_without_a_budget_for_some_phase_is_refused_naming_it():
    with pytest.raises(ValueError, match="no budget for raw, server, profile"):
        gpu_run.parse_plan("install=30,model=60,identity=90")


def test_some_phases_run_in_the_runs_own_order_with_budgets_for_those_alone():
    phases = gpu_run.parse_phases("profile,install,model")
    assert phases == ("install", "model", "profile")
    assert gpu_run.deadlines(gpu_run.parse_plan("install=30,model=60,profile=45", phases), start=0, phases=phases) == \
        {"install": 30, "model": 90, "profile": 135}
    with pytest.raises(ValueError, match="unknown warp"):
        gpu_run.parse_phases("install,warp")


def test_each_deadline_adds_the_earlier_budgets_so_time_a_phase_leaves_carries_on():
    ends = gpu_run.deadlines({"install": 30, "model": 60, "identity": 90, "raw": 135, "server": 165, "profile": 45}, start=1000)
    assert ends == {"install": 1030, "model": 1090, "identity": 1180, "raw": 1315, "server": 1480, "profile": 1525}


def test_the_model_users_are_skipped_when_the_model_phase_did_not_finish():
    assert gpu_run.should_skip("raw", {"install": "ok", "model": "cut"}).startswith("no model")
    assert gpu_run.should_skip("profile", {"model": "failed"}).startswith("no model")
    assert gpu_run.should_skip("server", {"install": "failed", "model": "ok"}) == ""
    assert gpu_run.should_skip("model", {"install": "failed"}) == ""


def test_a_phase_past_its_deadline_is_stopped_with_the_processes_it_started_and_reported_cut(tmp_path):
    log = gpu_run.Log(tmp_path / "gpu_check.log")
    child = tmp_path / "child.pid"
    script = f"echo started; sleep 60 & echo $! > {child}; wait"
    t = time.monotonic()
    rc, cut = gpu_run.run_phase(["sh", "-c", script], dict(os.environ), time.monotonic() + 1.5, log)
    assert cut and gpu_run.status_of(rc, cut) == "cut" and time.monotonic() - t < 10
    pid = int(child.read_text())
    with pytest.raises(ProcessLookupError):  # the phase's own child (a server, say) went with it
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
    assert "started" in (tmp_path / "gpu_check.log").read_text()


def test_a_phase_that_ends_in_time_reports_its_exit_code():
    log = gpu_run.Log(Path(os.devnull))
    rc, cut = gpu_run.run_phase([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), time.monotonic() + 60, log)
    assert (rc, cut, gpu_run.status_of(rc, cut)) == (3, False, "failed")


def test_the_log_keeps_its_cap_and_says_where_the_rest_went(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_run, "LOG_CAP", 100)
    log = gpu_run.Log(tmp_path / "gpu_check.log")
    for i in range(20):
        log.line(f"line {i:02d} of the phase output")
    text = (tmp_path / "gpu_check.log").read_text()
    assert "line 00" in text and "line 19" not in text and "went to stdout only" in text
    assert "line 19" in capsys.readouterr().out


def test_a_result_file_over_the_cap_keeps_its_tail(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_run, "FILE_CAP", 4096)
    (tmp_path / "gpu_check.log").write_bytes(b"x" * 10_000 + b"the end\n")
    gpu_run.cap_files(tmp_path)
    data = (tmp_path / "gpu_check.log").read_bytes()
    assert len(data) <= 4096 and data.endswith(b"the end\n")


def test_the_summary_reads_partial_figures_and_names_what_is_missing(tmp_path):
    (tmp_path / "identity.json").write_text(json.dumps({"identical_pages": 2, "pages": [{}, {}], "complete": False}))
    report = gpu_run.Report(plan=dict(gpu_run.GPU_PLAN), args={},
                            phases=[gpu_run.PhaseResult("identity", 90, status="cut", wall_s=90.0)])
    lines = gpu_run.summary(tmp_path, report)
    assert lines[0].startswith("identity  cut") and "2/2 pages identical (partial)" in lines[1] and lines[-1] == "bench: no figures"
    assert "prefill: no figures" in lines
    (tmp_path / "profile.json").write_text(json.dumps({"k": {"1": {"ms_per_page": 77.1}, "8": {"ms_per_page": 21.04}},
                                                       "sam_fold": {"ok": False, "layers": {"global": {"folded": 0.5, "original": 0.003}}}}))
    lines = gpu_run.summary(tmp_path, report)
    assert "prefill: k=1 77.1 ms/page, k=8 21.0 ms/page" in lines and "SAM fold NOT OK: global 5.0e-01 (original 3.0e-03)" in lines
    level = {"tokens_per_s": 4476.0, "pages_per_s": 8.7, "p50_s": 7.1, "p95_s": 7.2}
    (tmp_path / "bench.json").write_text(json.dumps({"engines": {"transformers": {"server": {
        "health": {"status": "ok"}, "clients_64": level,
        "variants": {"PREPROCESS_MODE=processes": {"health": {"status": "ok"}, "clients_64": {**level, "tokens_per_s": 5000.0}}}}}}}))
    lines = gpu_run.summary(tmp_path, report)
    assert "server clients_64 with PREPROCESS_MODE=processes: 5000.0 tokens/s, p95 7.20 s" in lines


def test_the_summary_says_which_goals_the_figures_meet():
    """One page alone p95 <= 2.0 s, >= 8,000 tokens/s at 64 clients, the server within 5 % of the
    raw engine at its largest level (the figures of the H200's run 3, 2026-12-04)."""
    level = lambda tps, p95: {"tokens_per_s": tps, "p95_s": p95}  # noqa: E731
    t = {"slots": level(6229.8, 5.3), "server": {"clients_1": level(322.0, 1.58), "clients_64": level(4476.0, 7.2),
                                                  "clients_8": level(1738.2, 2.4)}}
    assert gpu_run.goals(t) == ["GOAL one page alone p95 <= 2.0 s: 1.58 s, met",
                                "GOAL >= 8000 tokens/s at 64 clients: 4476.0, NOT met",
                                "GOAL server within 5 % of the raw engine at 64 clients: -28.2%, NOT met"]
    t["server"]["clients_64"] = level(8100.0, 4.0)
    t["slots"] = level(8400.0, 3.9)
    assert gpu_run.goals(t)[1:] == ["GOAL >= 8000 tokens/s at 64 clients: 8100.0, met",
                                    "GOAL server within 5 % of the raw engine at 64 clients: -3.6%, met"]
    assert gpu_run.goals({"server": {"health": {}}}) == []  # nothing measured, nothing claimed


def test_the_identity_goal_is_met_by_identical_pages_and_explained_divergences_only():
    tie = "... (0.4 units of torch.bfloat16 rounding at this magnitude): a near-tie, broken differently by different kernels"
    bug = "... (90.0 units of torch.bfloat16 rounding at this magnitude): NOT a near-tie: look for a bug"
    pages = [{"page": 0, "identical": True}, {"page": 1, "identical": False, "cause": tie},
             {"page": 2, "identical": False, "cause": "the n-gram guard bans [5] after the common prefix"}]
    assert gpu_run.identity_goal({"pages": pages}) == \
        "GOAL tokens identical to generate() or each divergence explained: 1/3 identical, 2 explained, met"
    pages += [{"page": 3, "identical": False, "cause": bug}, {"page": 4, "identical": False}]  # page 4: cut before its cause
    assert gpu_run.identity_goal({"pages": pages}).endswith("1/5 identical, pages [3, 4] NOT explained")
    assert gpu_run.identity_goal({}) == ""


def test_the_summary_names_the_step_times_and_a_compiled_step_that_fell_back(tmp_path):
    report = gpu_run.Report(plan=dict(gpu_run.GPU_PLAN), args={}, phases=[])
    (tmp_path / "bench.json").write_text(json.dumps({"engines": {"transformers": {
        "step_ms": {"grouped_mm": {"1": 2.51, "64": 4.57}, "grouped_mm+compiled": {"1": 1.2}},
        "compiled_step": {"backend": "inductor", "compiled": False, "attention": "bucket", "capture_s": 61.25,
                          "compile_s": {"all": 50.0, "dynamo": 4.0, "kernel_builds": 30.5}}}}}))
    lines = gpu_run.summary(tmp_path, report)
    assert "ms per decode step (grouped_mm): 1 rows 2.51, 64 rows 4.57" in lines
    assert "ms per decode step (grouped_mm+compiled): 1 rows 1.20" in lines
    assert ("compiled step (inductor): FELL BACK to the eager step, bucket attention, compiled and captured in 61.2 s; "
            "torch.compile all 50.0 s, dynamo 4.0 s, kernel_builds 30.5 s") in lines
    (tmp_path / "bench.json").write_text(json.dumps({"engines": {"transformers": {
        "compiled_step": {"backend": "inductor", "started_unix": 1.0}}}}))  # the raw phase cut while it compiled
    assert "compiled step (inductor): still compiling when the phase ended" in gpu_run.summary(tmp_path, report)


def test_the_identity_and_raw_phases_compile_the_step_with_inductor_on_a_gpu_and_aot_eager_on_a_cpu(tmp_path):
    for device, backend in (("cuda", "inductor"), ("cpu", "aot_eager")):
        args = gpu_run.argparse.Namespace(
            model="tiny", device=device, size=320, new_tokens=4, images=8, reference_pages=1, clients="1,4",
            out=tmp_path, server_variants="", wheels=tmp_path, identity_pages=1, identity_new_tokens=4,
            identity_slots=1, profile_ks="1", contention="1", experts_compare=False)
        phases = gpu_run.commands(args, tmp_path / "site", tmp_path / "model")
        raw, identity = phases["raw"], phases["identity"]
        assert raw[raw.index("--compile-compare") + 1] == backend and identity[identity.index("--compile") + 1] == backend
        assert "--experts-compare" not in raw  # batched_mm's steps were measured on the H200 on 2026-12-04


SERVER_PYPROJECT = """
[project]
name = "ocr-server"
dependencies = ["torch>=2.4", "transformers>=5.23,<6", "fastapi>=0.115", "uvicorn[standard]>=0.30", "boto3>=1.34,<2"]
"""


def test_the_machine_resolves_the_servers_requirements_with_transformers_pinned_to_the_packed_one():
    roots = gpu_wheels.check_roots(SERVER_PYPROJECT)
    pins = gpu_wheels.constraints("Transformers==5.25.0\n-e git+https://x#egg=y\nocr-server @ file:///src\nfastapi==0.165.0\n")
    assert pins == ["Transformers==5.25.0", "fastapi==0.165.0"]
    assert gpu_wheels.pinned_roots(roots, gpu_wheels.versions_of(pins)) == [
        "transformers==5.25.0", "fastapi>=0.115", "uvicorn[standard]>=0.30", "httpx"]


def test_wheels_are_downloaded_for_the_named_python_on_manylinux_x86_64_only():
    cmd = gpu_wheels.download_command("py", "3.12", Path("/w"), ["fastapi>=0.115"], Path("/w/c.txt"))
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and "--only-binary=:all:" in cmd
    platforms = {cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"}
    assert {"manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64"} <= platforms
    assert all(p.endswith("x86_64") for p in platforms)
    assert gpu_wheels.wheel_name("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl") == "pydantic-core"


def test_a_server_variant_is_settings_as_key_value_pairs():
    from bench.server_bench import variant_env

    assert variant_env("PREPROCESS_MODE=processes;PREFILL_SHARE=1") == {"PREPROCESS_MODE": "processes", "PREFILL_SHARE": "1"}
    for bad in ("", "PREPROCESS_MODE", "=1"):
        with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
            variant_env(bad)


def scripted_runs(failures: int):
    """A stand-in for subprocess.run whose first `failures` calls exit 1, and a record of pauses."""
    calls, pauses = [], []

    def run(command, check):
        calls.append(command)
        if len(calls) <= failures:
            raise subprocess.CalledProcessError(1, command)
    return run, pauses.append, calls, pauses


def test_a_download_that_fails_is_tried_again_after_each_pause_and_succeeds():
    run, sleep, calls, pauses = scripted_runs(failures=2)
    gpu_wheels.download(["pip", "download"], pauses=(30.0, 90.0), run=run, sleep=sleep)
    assert len(calls) == 3 and pauses == [30.0, 90.0]


def test_a_download_that_keeps_failing_raises_its_last_failure_after_the_pauses():
    run, sleep, calls, pauses = scripted_runs(failures=5)
    with pytest.raises(subprocess.CalledProcessError):
        gpu_wheels.download(["pip", "download"], pauses=(30.0, 90.0), run=run, sleep=sleep)
    assert len(calls) == 3 and pauses == [30.0, 90.0]

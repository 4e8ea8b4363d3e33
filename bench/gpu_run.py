"""The GPU check's phases, each within its budget, in one run that returns everything (bench/gpu_check.sh).

Runs under the machine's own python3, from the repository root, with the standard library alone.
Each phase is a process group of its own, stopped at the phase's deadline (SIGTERM, then SIGKILL);
the deadline of phase k is the start plus the budgets of phases 1..k, so time one phase leaves, the
next may use, and the whole run ends within the plan. Every figure is written as soon as it is
measured, so a phase cut at its deadline leaves its partial figures. Scratch (the --target folder,
the model) goes under --scratch; --out gets only small files, each kept under 16 MiB:

    gpu_check.log   everything the phases printed
    phases.json     each phase's status (ok, failed, cut, skipped), wall time and budget; the versions
    identity.json   bench/slots_check.py: generate() against the slots decoder, page by page
    bench.json      bench/server_bench.py: the raw engine's figures, then the server's at each client level
    profile.json    bench/prefill_profile.py: prefill ms per page at k pages together, the profiler's kernels

Phases: install (pip, with no index, takes from the wheel folder what this python3 lacks, into a
--target folder on PYTHONPATH), model (random weights), identity, raw, server, profile. --phases runs
some of them (install and model are needed by the others, on a fresh machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("install", "model", "identity", "raw", "server", "profile")
# The plan on an H200 (8 minutes): pip from local wheels; 3.4B random bf16 weights written to /tmp;
# 8 pages x 256 tokens alone and together (then together with the step compiled); the raw engine on
# 64 pages x 512 tokens (sequential and generate() on the first page, about 40 s less than on 4 as on
# 2026-12-04, and no batched_mm steps: both measured then; then ms per step with the step compiled,
# last, as its compile time on that host is not known yet); the server at 1, 64, 32 and 8 clients,
# then at 64 with each server variant (DECODE_COMPILE=true, then PREPROCESS_MODE=processes: about
# 45 s); the prefill's profile. Seen on the H200 runs of 2026-12-04: install 11-19 s, model 19-30 s,
# raw 112-130 s, server 80-82 s, profile 45 s. A phase cut at its deadline keeps what it wrote, so
# the new figures come last in each.
GPU_PLAN = {"install": 25, "model": 40, "identity": 85, "raw": 120, "server": 160, "profile": 50}
LOG_CAP = 8 * 2**20  # bytes of gpu_check.log; what is past it goes to stdout only
FILE_CAP = 16 * 2**20  # what comes back from the GPU machine, per file
GRACE_S = 10  # between SIGTERM and SIGKILL at a deadline


@dataclass
class PhaseResult:
    name: str
    budget_s: float
    status: str = "pending"  # running, ok, failed, cut, skipped
    rc: int | None = None
    wall_s: float = 0.0
    note: str = ""


@dataclass
class Report:
    plan: dict[str, float]
    args: dict
    phases: list[PhaseResult] = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    wall_s: float = 0.0


def parse_phases(text: str) -> tuple[str, ...]:
    """'install,model,profile': the phases to run, in the run's own order."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if unknown := [n for n in names if n not in PHASES]:
        raise ValueError(f"--phases {text!r}: unknown {', '.join(unknown)} (phases: {', '.join(PHASES)})")
    return tuple(p for p in PHASES if p in names)


def parse_plan(text: str, phases: tuple[str, ...] = PHASES) -> dict[str, float]:
    """'install=30,model=60,...': a budget in seconds for each phase, every one of `phases` named."""
    plan = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, seconds = part.partition("=")
        if name not in PHASES or not seconds:
            raise ValueError(f"--plan {text!r}: each entry is PHASE=SECONDS, PHASE one of {', '.join(PHASES)}")
        plan[name] = float(seconds)
    if missing := [p for p in phases if p not in plan]:
        raise ValueError(f"--plan {text!r}: no budget for {', '.join(missing)}")
    return plan


def deadlines(plan: dict[str, float], start: float, phases: tuple[str, ...] = PHASES) -> dict[str, float]:
    """Each phase's deadline: the start plus its budget and every earlier phase's (of those run)."""
    out, at = {}, start
    for name in phases:
        at += plan[name]
        out[name] = at
    return out


def status_of(rc: int, cut: bool) -> str:
    return "cut" if cut else ("ok" if rc == 0 else "failed")


def should_skip(name: str, done: dict[str, str]) -> str:
    """Why a phase cannot run given the earlier phases' statuses ('' when it can): all need the model."""
    if name in ("identity", "raw", "server", "profile") and done.get("model") != "ok":
        return "no model (the model phase did not finish)"
    return ""


def python_path(site: Path) -> str:
    """The --target folder first, then the repository's packages from the tree."""
    return os.pathsep.join([str(site), *(str(ROOT / p) for p in ("limits", "server", "server_testing")), str(ROOT)])


def commands(args, site: Path, model: Path) -> dict[str, list[str]]:
    """Each phase's command line (run with PYTHONPATH = python_path(site))."""
    py = sys.executable
    full = args.model == "full"
    # the compiled step (DECODE_COMPILE): inductor on a GPU; on a CPU its regions traced by aot_eager, which
    # proves it compiles in this torch without inductor's minutes of C++ code generation
    step_compile = "inductor" if args.device == "cuda" else "aot_eager"
    bench = ["--engines", "transformers", "--model-path", str(model), "--device", args.device, "--size", str(args.size),
             "--new-tokens", str(args.new_tokens), "--images", str(args.images), "--reference-pages", str(args.reference_pages),
             "--batch-size", "8", "--clients", args.clients, "--json", str(args.out / "bench.json"),
             *(["--experts-compare"] if args.experts_compare else []), "--compile-compare", step_compile,
             *(a for v in args.server_variants.split(",") if v.strip() for a in ("--variant", v.strip()))]
    return {
        "install": [py, __file__, "install", "--wheels", str(args.wheels), "--site", str(site)],
        # transformers' native layout: each of the three phases that load it skips the official layout's translation
        "model": [py, "-c", "import sys; from pathlib import Path; from bench.server_bench import write_model; "
                  f"write_model(Path(sys.argv[1]), {full}, 'native'); (Path(sys.argv[1]) / '.complete').touch()", str(model)],
        "identity": [py, str(ROOT / "bench" / "slots_check.py"), "--device", args.device, "--model-path", str(model),
                     "--pages", str(args.identity_pages), "--new-tokens", str(args.identity_new_tokens),
                     "--slots", str(args.identity_slots), "--experts", "batched_mm", "--json", str(args.out / "identity.json"),
                     "--compile", step_compile],
        "raw": [py, str(ROOT / "bench" / "server_bench.py"), "--paths", "raw", *bench],
        "server": [py, str(ROOT / "bench" / "server_bench.py"), "--paths", "server", *bench],
        "profile": [py, str(ROOT / "bench" / "prefill_profile.py"), "--model-path", str(model), "--device", args.device,
                    "--size", str(args.size), "--ks", args.profile_ks, "--contention", args.contention,
                    "--json", str(args.out / "profile.json")],
    }


class Log:
    """Lines to stdout and to gpu_check.log, the file capped at LOG_CAP bytes."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("ab")
        self.size = path.stat().st_size
        self.lock = threading.Lock()

    def line(self, text: str | bytes) -> None:
        data = text if isinstance(text, bytes) else (text + "\n").encode()
        with self.lock:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            if self.size + len(data) <= LOG_CAP:
                self.file.write(data)
                self.file.flush()
                self.size += len(data)
            elif self.size < LOG_CAP:
                note = b"[gpu_check.log is full: the rest went to stdout only]\n"
                self.file.write(note)
                self.file.flush()
                self.size = LOG_CAP


def run_phase(argv: list[str], env: dict[str, str], deadline: float, log: Log) -> tuple[int, bool]:
    """Run one phase until it ends or its deadline; (exit code, whether it was cut)."""
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    pump = threading.Thread(target=lambda: [log.line(b) for b in iter(proc.stdout.readline, b"")], daemon=True)
    pump.start()
    try:
        rc = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        cut = False
    except subprocess.TimeoutExpired:
        cut = True
        stop_group(proc)
        rc = proc.wait()
    pump.join(5)
    return rc, cut


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the phase's whole process group (a server it started too), SIGKILL after GRACE_S."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def cap_files(out: Path) -> None:
    """Every file under out within FILE_CAP (its tail kept): what comes back from the GPU machine."""
    for f in out.iterdir():
        if f.is_file() and f.stat().st_size > FILE_CAP:
            data = f.read_bytes()[-(FILE_CAP - 1024):]
            f.write_bytes(b"[truncated to its last part]\n" + data)


def summary(out: Path, report: Report) -> list[str]:
    """The closing table: each phase, then the figures the check is for, where they were written."""
    lines = [f"{p.name:<9} {p.status:<8} {p.wall_s:6.1f} s of {p.budget_s:.0f}  {p.note}".rstrip() for p in report.phases]
    try:
        ident = json.loads((out / "identity.json").read_text())
        lines.append(f"identity: {ident.get('identical_pages')}/{len(ident.get('pages', []))} pages identical"
                     + ("" if ident.get("complete") else " (partial)"))
        if line := identity_goal(ident):
            lines.append(line)
        if c := ident.get("compiled"):
            lines.append(f"identity, step compiled ({c['backend']}): {c['identical_pages']}/{len(c['pages'])} pages identical"
                         + ("" if c.get("complete") else " (partial)"))
    except (OSError, ValueError):
        lines.append("identity: no figures")
    try:
        profile = json.loads((out / "profile.json").read_text())
        lines.append("prefill: " + ", ".join(f"k={k} {f['ms_per_page']:.1f} ms/page" for k, f in profile["k"].items()))
        if fold := profile.get("sam_fold"):
            lines.append(f"SAM fold {'ok' if fold['ok'] else 'NOT OK'}: " + ", ".join(
                f"{name} {e['folded']:.1e} (original {e['original']:.1e})" for name, e in fold["layers"].items()))
    except (OSError, ValueError, KeyError):
        lines.append("prefill: no figures")
    try:
        t = json.loads((out / "bench.json").read_text())["engines"]["transformers"]
    except (OSError, ValueError, KeyError):
        return lines + ["bench: no figures"]
    if "slots" in t:
        lines.append(f"raw slots: {t['slots']['tokens_per_s']:.1f} tokens/s, p95 {t['slots']['p95_s']:.2f} s"
                     + (f", {t['slots']['pages_per_prefill']:.1f} pages a prefill" if "pages_per_prefill" in t["slots"] else ""))
    for impl, times in t.get("step_ms", {}).items():
        lines.append(f"ms per decode step ({impl}): " + ", ".join(f"{b} rows {ms:.2f}" for b, ms in times.items()))
    if (c := t.get("compiled_step")) and "compiled" not in c:
        lines.append(f"compiled step ({c['backend']}): still compiling when the phase ended")
    elif c:
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in c.get("compile_s", {}).items())
        lines.append(f"compiled step ({c['backend']}): {'kept' if c['compiled'] else 'FELL BACK to the eager step'}, "
                     f"{c['attention']} attention, compiled and captured in {c['capture_s']:.1f} s"
                     + (f"; torch.compile {phases}" if phases else ""))
    for level, f in t.get("server", {}).items():
        if level.startswith("clients_"):
            lines.append(f"server {level}: {f['tokens_per_s']:.1f} tokens/s, p50 {f['p50_s']:.2f} s, p95 {f['p95_s']:.2f} s"
                         + _engine(f))
    lines += goals(t)
    for variant, levels in t.get("server", {}).get("variants", {}).items():
        if "error" in levels:
            lines.append(f"server with {variant} FAILED: {levels['error'][-300:]}")
        decoder = levels.get("health", {}).get("decoder", {})
        step = (f"; step {decoder['decode_step']}, {decoder['attention']} attention, graphs in "
                f"{decoder['graph_capture_seconds']:.1f} s" if decoder.get("decode_step") else "")
        for level, f in levels.items():
            if level.startswith("clients_"):  # beside the variant server's health
                lines.append(f"server {level} with {variant}: {f['tokens_per_s']:.1f} tokens/s, p95 {f['p95_s']:.2f} s{step}"
                             + _engine(f))
    return lines


def identity_goal(ident: dict) -> str:
    """Tokens identical to generate()'s, or each first divergence explained (pure): a near-tie of
    the two tokens' logits, the n-gram guard, or one decoder stopping (bench/slots_check.py's causes)."""
    pages = ident.get("pages", [])
    if not pages:
        return ""
    unexplained = [p.get("page") for p in pages if not p.get("identical")
                   and ("NOT a near-tie" in p.get("cause", "NOT") or not p.get("cause"))]
    same = sum(1 for p in pages if p.get("identical"))
    return (f"GOAL tokens identical to generate() or each divergence explained: {same}/{len(pages)} identical, "
            + (f"pages {unexplained} NOT explained" if unexplained else f"{len(pages) - same} explained, met"))


def goals(t: dict) -> list[str]:
    """The transformers engine's bench figures against the goals the check is for (pure): one page
    alone p95 <= 2.0 s, >= 8,000 tokens/s at 64 clients, the server within 5 % of the raw engine at
    its largest level (the raw engine decodes as many pages at once as that level has clients)."""
    server, out = t.get("server", {}), []
    if one := server.get("clients_1"):
        out.append(f"GOAL one page alone p95 <= 2.0 s: {one['p95_s']:.2f} s, {'met' if one['p95_s'] <= 2.0 else 'NOT met'}")
    if full := server.get("clients_64"):
        tps = full["tokens_per_s"]
        out.append(f"GOAL >= 8000 tokens/s at 64 clients: {tps:.1f}, {'met' if tps >= 8000 else 'NOT met'}")
    levels = sorted(int(k.split("_")[1]) for k in server if k.startswith("clients_"))
    if levels and "slots" in t:
        ratio = server[f"clients_{levels[-1]}"]["tokens_per_s"] / t["slots"]["tokens_per_s"]
        out.append(f"GOAL server within 5 % of the raw engine at {levels[-1]} clients: {ratio - 1:+.1%}, "
                   f"{'met' if ratio >= 0.95 else 'NOT met'}")
    return out


def _engine(level: dict) -> str:
    """A server level's engine figures (bench/engine_metrics.py) in brief: busy share, pages a prefill."""
    e = level.get("engine")
    if not e:
        return ""
    return f"; engine busy {e['busy_share']:.0%}" + (f", {e['pages_per_prefill']:.1f} pages a prefill" if "pages_per_prefill" in e else "")


def run_all(args) -> int:
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    site, model = args.scratch / "site", args.scratch / "model"
    args.scratch.mkdir(parents=True, exist_ok=True)
    for stale in ("identity.json", "bench.json", "profile.json", "phases.json", "gpu_check.log"):  # an earlier run's
        (args.out / stale).unlink(missing_ok=True)
    log = Log(args.out / "gpu_check.log")
    phases = parse_phases(args.phases)
    plan = parse_plan(args.plan, phases)
    report = Report(plan=plan, args={k: str(v) for k, v in vars(args).items() if k != "action"})
    ends = deadlines(plan, start, phases)
    env = {**os.environ, "PYTHONPATH": python_path(site), "PYTHONUNBUFFERED": "1", "PIP_NO_INDEX": "1"}
    cmds = commands(args, site, model)
    done: dict[str, str] = {}
    for name in phases:
        result = PhaseResult(name, budget_s=round(ends[name] - time.monotonic(), 1))
        report.phases.append(result)
        if reason := should_skip(name, done):
            result.status, result.note = "skipped", reason
        elif name == "model" and (model / ".complete").is_file():
            result.status, result.note = "ok", f"kept from an earlier run: {model}"
        else:
            result.status = "running"
            write_json(args.out / "phases.json", asdict(report))
            log.line(f"== {name}: budget {result.budget_s:.0f} s ({time.monotonic() - start:.0f} s into the run)")
            t = time.monotonic()
            result.rc, cut = run_phase(cmds[name], env, ends[name], log)
            result.wall_s = round(time.monotonic() - t, 1)
            result.status = status_of(result.rc, cut)
            if cut:
                result.note = "cut at its deadline: its figures so far are in the files"
        if name == "install" and (site / "versions.json").is_file():
            report.versions = json.loads((site / "versions.json").read_text())
        done[name] = result.status
        report.wall_s = round(time.monotonic() - start, 1)
        write_json(args.out / "phases.json", asdict(report))
    for text in ["== summary", *summary(args.out, report), f"== done in {report.wall_s:.0f} s; files in {args.out}"]:
        log.line(text)
    log.file.close()
    cap_files(args.out)
    return 0 if all(p.status == "ok" for p in report.phases) else 1


PROBE = """
import importlib, json, sys
site = sys.argv[1]
info = {"python": sys.version.split()[0], "executable": sys.executable, "in_venv": sys.prefix != sys.base_prefix}
for name in ("torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "numpy", "PIL", "yaml", "regex",
             "httpx", "prometheus_client", "fastapi", "starlette", "uvicorn", "pydantic", "python_multipart", "pypdfium2"):
    try:
        mod = importlib.import_module(name)
        info[name] = {"version": getattr(mod, "__version__", "?"), "from": "target" if (mod.__file__ or "").startswith(site) else "image"}
    except Exception as exc:  # every missing piece is reported; the phase fails below
        info[name] = {"error": f"{type(exc).__name__}: {exc}"}
import torch
info["cuda"] = torch.version.cuda
info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
print(json.dumps(info, indent=1))
open(site + "/versions.json", "w").write(json.dumps(info))
sys.exit(1 if any("error" in v for v in info.values() if isinstance(v, dict)) else 0)
"""


def install(wheels: Path, site: Path) -> int:
    """pip resolves the server's requirements against this python3's packages and the wheel folder alone
    (no index); what it would install goes into `site`, a --target folder put first on PYTHONPATH."""
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip"]
    report = site.parent / "pip-report.json"
    subprocess.run([*pip, "install", "--dry-run", "--quiet", "--no-index", "--find-links", str(wheels), "--report", str(report),
                    "-r", str(wheels / "requirements.txt")], check=True)
    files = [unquote(urlparse(item["download_info"]["url"]).path) for item in json.loads(report.read_text())["install"]]
    print(f"install: pip takes {len(files)} packages from {wheels}: "
          + ", ".join(sorted(Path(f).name.split("-")[0] for f in files)), flush=True)
    if files:
        subprocess.run([*pip, "install", "--quiet", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
                        "--target", str(site), *files], check=True)
    env = {**os.environ, "PYTHONPATH": python_path(site)}
    return subprocess.run([sys.executable, "-c", PROBE, str(site)], env=env).returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action")
    inst = sub.add_parser("install", help="the install phase (run by the phase runner)")
    inst.add_argument("--wheels", type=Path, required=True)
    inst.add_argument("--site", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "/tmp/gpu-check-out"))
    p.add_argument("--scratch", type=Path, default=Path("/tmp/gpu-check"), help="the --target folder and the model")
    p.add_argument("--wheels", type=Path, default=ROOT / "bench" / ".wheels")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--model", choices=["full", "tiny"], default="full", help="full: the real architecture, random bf16 (GPU)")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--new-tokens", type=int, default=512)
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--reference-pages", type=int, default=1,
                   help="sequential and generate() on this many pages (their H200 figures of 2026-12-04 were on 4)")
    p.add_argument("--experts-compare", action="store_true",
                   help="also ms per decode step with batched_mm experts (measured on the H200 on 2026-12-04)")
    p.add_argument("--clients", default="1,64,32,8", help="the server's client levels, in this order")
    p.add_argument("--identity-pages", type=int, default=8)
    p.add_argument("--identity-new-tokens", type=int, default=256)
    p.add_argument("--identity-slots", type=int, default=4)
    p.add_argument("--profile-ks", default="1,2,4,8,16", help="the profile phase: pages prefilled together")
    p.add_argument("--contention", default="2,8", help="the profile phase: preprocessing workers beside the engine thread")
    p.add_argument("--server-variants", default="DECODE_COMPILE=true,PREPROCESS_MODE=processes",
                   help="the server phase: also these servers (comma-separated, each KEY=VALUE[;KEY=VALUE]) at the largest level")
    p.add_argument("--phases", default=",".join(PHASES), help="the phases to run (in their own order)")
    p.add_argument("--plan", default=",".join(f"{k}={v}" for k, v in GPU_PLAN.items()), help="PHASE=SECONDS,...")
    args = p.parse_args()
    if args.action == "install":
        return install(args.wheels.resolve(), args.site.resolve())
    if not (args.wheels / "requirements.txt").is_file():
        p.error(f"no {args.wheels}/requirements.txt: run `bench/gpu_check.sh --prepare` where the package index is reachable")
    try:
        parse_plan(args.plan, parse_phases(args.phases))
    except ValueError as exc:
        p.error(str(exc))
    args.out, args.scratch, args.wheels = args.out.resolve(), args.scratch.resolve(), args.wheels.resolve()
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())

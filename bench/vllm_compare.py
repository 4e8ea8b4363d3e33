"""Either engine of this server against vLLM's own OpenAI server, both measured by vLLM's own bench
client (`vllm bench serve --backend openai-chat --dataset-name random-mm`, unpatched), in one run
that alternates the two (A/B/A/B...) so that a busy machine's noise falls on both.

    .venv/bin/python bench/vllm_compare.py --json out.json                # ENGINE=vllm (in .venv-vllm)
    .venv/bin/python bench/vllm_compare.py --engine transformers --dtype bfloat16 --rounds 1 \
        --num-prompts 32 --concurrency 8 --output-len 64                 # ENGINE=transformers DECODER=slots (.venv)
    .venv/bin/python bench/vllm_compare.py --rounds 3 --num-prompts 8 --concurrency 4 --output-len 16

--engine vllm runs this server in .venv-vllm with ENGINE=vllm; --engine transformers runs it in this
repository's .venv with ENGINE=transformers DECODER=slots and DECODE_SLOTS = --max-num-seqs (the
rows it decodes at once, as vLLM's max_num_seqs).

Both servers load the same weights (the `--for-vllm` tiny model: the real vision tower, a tiny
language model; --model-path for another official-layout checkpoint) with the same engine settings:
--dtype (float32 by default, this server's DTYPE=auto on a CPU; bfloat16 is what vLLM's own
`--dtype auto` picks on a CPU with AVX512-BF16: with --vllm-dtype auto alone the two would run
different models), max_num_seqs = BATCH_SIZE, the same max_model_len, no prefix or multimodal-input
cache (DeepSeek's own serving recipe; this server's result cache is off too), eager mode, the n-gram logits processor
loaded. Every request asks for the same work on both: one random page (--size px square), random
prompt text of --input-len tokens, greedy, exactly --output-len tokens (`--ignore-eos`), and the
recipe's n-gram guard in `vllm_xargs`.

Both the client and vLLM's server are started as a user starts them, with .venv-vllm's `vllm`
console script (`vllm bench serve ...`, `vllm serve MODEL ...`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from localcluster.ports import free_port  # noqa: E402 (the repository is put on the path just above)

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
OURS_PYTHON = ROOT / ".venv" / "bin" / "python"  # ENGINE=transformers: the server's own environment
VLLM_CLI = ROOT / ".venv-vllm" / "bin" / "vllm"
NGRAM_PROCESSOR = "vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor"
RECIPE_XARGS = {"vllm_xargs": {"ngram_size": 20, "window_size": 90, "whitelist_token_ids": [128821, 128822]}}
PROMPT_TEXT_TOKENS, IMAGE_TOKENS = 1024, 1121  # the server's prompt bound (prompts.py) and a 6-crop page


def model_dir(given: str | None) -> Path:
    """--model-path, else the --for-vllm tiny model from the cache of tiny models (written there
    first if it is not: a minute)."""
    if given:
        return Path(given)
    from ocr_server_testing import tiny_cache

    return tiny_cache.cached(for_vllm=True)


def max_model_len(max_new: int) -> int:
    return min(8192, IMAGE_TOKENS + PROMPT_TEXT_TOKENS + 2 + max_new)


def common_env(args) -> dict[str, str]:
    """Both servers' environment: the server's CPU defaults for vLLM, and vLLM's step and start
    timeouts raised (a model step took more than vLLM's 300 s on 2 cores at a load average of 38)."""
    return {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "PYTHONUNBUFFERED": "1",
            "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "3600", "VLLM_ENGINE_READY_TIMEOUT_S": "3600"}


def ours(model: Path, port: int, args) -> tuple[list[str], dict[str, str]]:
    env = {**common_env(args), "ENGINE": args.engine, "MODEL_PATH": str(model), "DEVICE": "cpu", "HOST": "127.0.0.1",
           "PORT": str(port), "CACHE_ENTRIES": "0", "WARMUP": "0", "TIMEOUT_SEC": "3600",
           "BATCH_SIZE": str(args.max_num_seqs), "CONCURRENCY": str(args.server_concurrency),
           "MAX_NEW_TOKENS": str(args.max_new_tokens), "DTYPE": args.dtype}
    env.pop("API_KEYS", None)
    if args.engine == "transformers":
        env.update({"DECODER": "slots", "DECODE_SLOTS": str(args.max_num_seqs)})
        return [str(OURS_PYTHON), "-m", "ocr_server"], env
    return [str(VLLM_PYTHON), "-m", "ocr_server"], env


def theirs(model: Path, port: int, args) -> tuple[list[str], dict[str, str]]:
    cmd = [str(VLLM_CLI), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
           "--dtype", args.vllm_dtype or args.dtype, "--seed", "0", "--max-num-seqs", str(args.max_num_seqs),
           "--max-model-len", str(max_model_len(args.max_new_tokens)), "--limit-mm-per-prompt", '{"image": 1}',
           "--logits-processors", NGRAM_PROCESSOR, "--no-enable-prefix-caching", "--mm-processor-cache-gb", "0",
           "--enforce-eager", "--skip-mm-profiling", "--disable-log-stats"]
    return cmd, common_env(args)


def start(name: str, cmd: list[str], env: dict[str, str], logs: Path) -> subprocess.Popen:
    log = (logs / f"{name}.log").open("wb")
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(proc: subprocess.Popen, url: str, log: Path, timeout: float) -> str:
    """The served model's id, once /health answers 200 and /v1/models lists it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return httpx.get(url + "/v1/models", timeout=5).json()["data"][0]["id"]
        except (httpx.TransportError, KeyError, IndexError, ValueError):
            pass
        time.sleep(1)
    raise SystemExit(f"{url} not ready after {timeout:.0f}s:\n{log.read_text(errors='replace')[-3000:]}")


def cpu_seconds(root: int) -> float:
    """User+system CPU seconds of a process and its descendants (Linux /proc): the work a server did,
    which a busy machine's contention does not inflate the way it inflates wall time."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo, tick = 0.0, [root], os.sysconf("SC_CLK_TCK")
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's own process group (vLLM's engine core included), then SIGKILL."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def client_args(url: str, model_id: str, model: Path, out: Path, args) -> list[str]:
    return ["--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions",
            "--model", model_id, "--tokenizer", str(model), "--dataset-name", "random-mm",
            "--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.concurrency),
            "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
            "--random-range-ratio", "0", "--random-mm-base-items-per-request", "1",
            "--random-mm-num-mm-items-range-ratio", "0", "--random-mm-limit-mm-per-prompt", '{"image": 1, "video": 0}',
            "--random-mm-bucket-config", f"{{({args.size}, {args.size}, 1): 1.0}}",
            "--ignore-eos", "--temperature", "0", "--extra-body", json.dumps(RECIPE_XARGS), "--seed", str(args.seed),
            "--disable-tqdm", "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name]


def run_client(name: str, proc: subprocess.Popen, url: str, model_id: str, model: Path, logs: Path, k: int, args) -> dict:
    out = logs / f"{name}-{k}.json"
    cmd = [str(VLLM_CLI), "bench", "serve", *client_args(url, model_id, model, out, args)]
    t0, cpu0 = time.monotonic(), cpu_seconds(proc.pid)
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    wall, cpu = time.monotonic() - t0, cpu_seconds(proc.pid) - cpu0
    (logs / f"{name}-{k}.client.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not out.is_file():
        raise SystemExit(f"the bench client failed against {name} (rc {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    r = json.loads(out.read_text())
    return {"server": name, "round": k, "completed": r["completed"], "failed": r.get("failed", 0),
            "duration_s": round(r["duration"], 2), "request_throughput": round(r["request_throughput"], 4),
            "output_throughput": round(r["output_throughput"], 3), "mean_ttft_ms": round(r["mean_ttft_ms"], 1),
            "median_ttft_ms": round(r["median_ttft_ms"], 1), "mean_tpot_ms": round(r["mean_tpot_ms"], 1),
            "total_output_tokens": r["total_output_tokens"], "client_wall_s": round(wall, 1),
            # the server's CPU seconds per request, the initial test request included
            "server_cpu_s_per_request": round(cpu / (r["completed"] + 1), 2)}


def summarise(runs: list[dict], min_ratio: float, max_tpot_ratio: float | None = None) -> dict:
    """Ours against vLLM's server from both servers' runs (pure): output tokens/s overall and per
    round, CPU seconds per request, median TTFT, mean time per output token, and the verdict: at
    least min_ratio of vLLM's throughput, no failed request, a TTFT that means the first token (at
    least half of vLLM's: a first chunk sent before any token exists would read near zero) and,
    with max_tpot_ratio, a time per output token at most that many times vLLM's."""
    by = {name: [r for r in runs if r["server"] == name] for name in ("ours", "vllm")}
    total = {name: sum(r["total_output_tokens"] for r in rs) / sum(r["duration_s"] for r in rs) for name, rs in by.items()}
    pairs = [a["output_throughput"] / b["output_throughput"] for a, b in zip(by["ours"], by["vllm"])]
    cpu = {name: statistics.mean(r["server_cpu_s_per_request"] for r in rs) for name, rs in by.items()}
    ttft = {name: statistics.median(r["median_ttft_ms"] for r in rs) for name, rs in by.items()}
    tpot = {name: statistics.median(r["mean_tpot_ms"] for r in rs) for name, rs in by.items()}
    overall = total["ours"] / total["vllm"]
    why = []
    if overall < min_ratio:
        why.append(f"output tokens/s {overall:.3f}x vLLM's server's (< {min_ratio})")
    why += [f"{r['server']} round {r['round']}: {r['failed']} failed requests" for r in runs if r["failed"]]
    if ttft["ours"] < ttft["vllm"] / 2:
        why.append(f"median TTFT {ttft['ours']:.0f} ms against vLLM's {ttft['vllm']:.0f} ms: not the first token")
    if max_tpot_ratio is not None and tpot["ours"] > max_tpot_ratio * tpot["vllm"]:
        why.append(f"time per output token {tpot['ours']:.0f} ms against vLLM's {tpot['vllm']:.0f} ms "
                   f"(> {max_tpot_ratio}x)")
    return {"overall": round(overall, 3), "per_round": [round(x, 3) for x in pairs],
            "cpu_per_request": round(cpu["vllm"] / cpu["ours"], 3), "median_ttft_ms": ttft, "mean_tpot_ms": tpot,
            "passed": not why, "why_failed": why}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", help="an official-layout checkpoint (default: the --for-vllm tiny model)")
    p.add_argument("--engine", choices=("vllm", "transformers"), default="vllm",
                   help="this server's ENGINE (transformers: DECODER=slots, in .venv)")
    p.add_argument("--rounds", type=int, default=2, help="A/B pairs, alternating which server goes first")
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=4, help="the client's --max-concurrency")
    p.add_argument("--size", type=int, default=640, help="random pages of size x size px")
    p.add_argument("--input-len", type=int, default=32, help="random prompt text tokens beside the page")
    p.add_argument("--output-len", type=int, default=16, help="generated tokens per request (--ignore-eos)")
    p.add_argument("--max-num-seqs", type=int, default=8, help="both engines' max_num_seqs (this server's BATCH_SIZE)")
    p.add_argument("--server-concurrency", type=int, default=8, help="this server's CONCURRENCY")
    p.add_argument("--max-new-tokens", type=int, default=64, help="this server's MAX_NEW_TOKENS (sets max_model_len)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800, help="seconds for one client run")
    p.add_argument("--start-timeout", type=float, default=1800, help="seconds for a server to become ready")
    p.add_argument("--only", choices=("ours", "vllm"), help="measure one server (profiling)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="both servers' precision (this server's DTYPE, vLLM's --dtype)")
    p.add_argument("--vllm-dtype", help="vLLM's server's --dtype alone, e.g. `auto`, its default (bfloat16 on a CPU "
                                        "with AVX512-BF16: then the two servers run different models)")
    p.add_argument("--min-ratio", type=float, default=0.95, help="exit 1 below this share of vLLM's output tokens/s")
    p.add_argument("--max-tpot-ratio", type=float, default=1.5,
                   help="exit 1 when the mean time per output token is above this many times vLLM's (0: not checked)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    if not VLLM_CLI.is_file():
        p.error(f"{VLLM_CLI} is missing: `make venv-vllm`")
    model = model_dir(args.model_path)
    logs = Path(tempfile.mkdtemp(prefix="vllm-compare-"))
    servers = {"ours": ours, "vllm": theirs}
    if args.only:
        servers = {args.only: servers[args.only]}
    procs, urls, ids = {}, {}, {}
    try:
        for name, build in servers.items():  # one at a time: two starts at once on 2 cores take longer than both
            port = free_port()
            cmd, env = build(model, port, args)
            procs[name] = start(name, cmd, env, logs)
            urls[name] = f"http://127.0.0.1:{port}"
            ids[name] = wait_ready(procs[name], urls[name], logs / f"{name}.log", args.start_timeout)
            print(f"{name}: ready at {urls[name]} serving {ids[name]}", flush=True)
        runs = []
        for k in range(args.rounds):
            order = list(servers) if k % 2 == 0 else list(reversed(servers))
            for name in order:
                run = run_client(name, procs[name], urls[name], ids[name], model, logs, k, args)
                runs.append(run)
                print(json.dumps(run), flush=True)
    finally:
        for proc in procs.values():
            stop(proc)
    figures = {"model": str(model), "logs": str(logs), "load": {k: getattr(args, k) for k in (
        "engine", "num_prompts", "concurrency", "size", "input_len", "output_len", "max_num_seqs", "server_concurrency",
        "dtype", "vllm_dtype")},
        "client": "vllm bench serve --backend openai-chat --dataset-name random-mm",
        "runs": runs}
    passed = True
    if len(servers) == 2:
        figures["ratio"] = summarise(runs, args.min_ratio, args.max_tpot_ratio or None)
        passed = figures["ratio"]["passed"]
        print(f"ours (ENGINE={args.engine}) / vLLM's server, output tokens/s: overall {figures['ratio']['overall']}x, "
              f"per round {figures['ratio']['per_round']}; vLLM's server's CPU seconds per request over ours: "
              f"{figures['ratio']['cpu_per_request']}x; median TTFT ms {figures['ratio']['median_ttft_ms']}; "
              f"mean TPOT ms {figures['ratio']['mean_tpot_ms']}")
        print("passed" if passed else "FAILED: " + "; ".join(figures["ratio"]["why_failed"]))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())

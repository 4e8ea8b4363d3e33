"""The slots decoder's per-step figures for bench/server_bench.py: ms per decode step at 1 to 64
rows, with each experts implementation and with the compiled step (DECODE_COMPILE)."""

from __future__ import annotations

import time


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def drain(slots) -> None:
    """Every open row leaves; the pending readbacks are read."""
    slots.cancel_all()
    while not slots.idle():
        slots.step()


def step_times(slots, pages: list, prep, args, steps: int = 16, warm: int = 3) -> dict[int, float]:
    """ms per decode step with b rows (each a page mid-answer); the first `warm` steps of each size
    (a compiled step's compile on a CPU) are not timed, and no timed step runs past the pages' budget
    (the prefill gives each page its first token), so every timed step has all b rows open."""
    timed = min(steps, args.new_tokens - 1 - warm)
    if timed < 1:
        raise ValueError(f"--new-tokens {args.new_tokens} leaves no decode step to time after {warm} warm-up steps")
    times = {}
    for b in sorted({b for b in (1, 8, 32, 64) if b <= slots.plan.slots} | {slots.plan.slots}):
        for at in range(0, b, slots.plan.prefill_pages):  # as the server takes them: up to prefill_pages together
            slots.admit([prep(pages[i % len(pages)]) for i in range(at, min(b, at + slots.plan.prefill_pages))])
        for _ in range(warm):
            slots.step()
        sync(args.device)
        t = time.perf_counter()
        for _ in range(timed):
            slots.step()
        sync(args.device)
        times[b] = (time.perf_counter() - t) / timed * 1000
        drain(slots)
    return times


def use_experts(slots, impl: str) -> None:
    """Another experts implementation (experts.py) for the decode steps; on a GPU, graphs captured again."""
    from ocr_server.engines.transformers.experts import experts_function

    slots.experts = {b: experts_function(impl) for b in slots.plan.slot_buckets}
    slots.graphs = {}
    slots.capture()


def use_compiled(slots, backend: str) -> dict:
    """The decode step through torch.compile with `backend` (step.compiled_step, as DECODE_COMPILE
    makes it); on a GPU every shape compiled and captured again, which falls back (bucket attention,
    then the eager step) when the compile or the capture fails. Whether the compiled step stayed, its
    attention, and the seconds the compile and capture took (on a CPU each shape compiles at its first step instead)."""
    slots.use_step(backend)
    t = time.perf_counter()
    slots.capture()
    return {"backend": backend, "compiled": slots.compiled, "attention": slots.attention, "capture_s": time.perf_counter() - t}


# torch.compile's phases (torch._dynamo.utils.compile_times), as the GPU check reports them
COMPILE_PHASES = {"all": "_compile.compile_inner", "dynamo": "bytecode_tracing",
                  "aot_and_inductor": "create_aot_dispatcher_function", "inductor_codegen": "GraphLowering.codegen",
                  "kernel_builds": "async_compile.wait"}


def compile_seconds() -> dict[str, float]:
    """Seconds this process has spent in torch.compile so far, by phase: all of it, Dynamo's tracing,
    AOT autograd with the backend's compile inside it, inductor's code generation, and waiting for
    its kernels to build (C++ or Triton); the phases a torch version does not time are left out."""
    from torch._dynamo.utils import compile_times

    names, values = compile_times(repr="csv", aggregate=True)
    got = dict(zip(names, values))
    return {key: float(got[name]) for key, name in COMPILE_PHASES.items() if name in got}


def seconds_since(before: dict[str, float]) -> dict[str, float]:
    """compile_seconds() minus an earlier reading."""
    return {key: round(s - before.get(key, 0.0), 3) for key, s in compile_seconds().items()}

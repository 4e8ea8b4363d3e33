"""What a piece of torch code would make the host wait for on a GPU, and how many operators it runs,
counted on any device (tests/server/test_slot_syncs.py, bench/server_bench.py).

`HostSyncs` counts the points where a GPU run waits for the device, while the code runs on a CPU as
well as on a GPU. Below torch's dispatcher a CPU run shows no copies between host and device, so
the counter tracks which tensors a GPU run would hold on the host:
- host tensors are made by torch's factories without a device (torch.arange(n), torch.tensor(data),
  torch.zeros(n), ...), by `.cpu()`, and by any operator whose tensor inputs are all host tensors;
  every other tensor (weights, decoder state, operator outputs) is on the device;
- a tensor moved with `.to(device)` is on the device from then on: from pinned memory with
  non_blocking=True that is no wait, otherwise a blocking copy (counted);
- counted as waits: a scalar read of a device tensor (`.item()`, `int()`, `bool()`: the dispatcher's
  _local_scalar_dense), `.tolist()`, `.cpu()`, `.numpy()` of a device tensor; operators whose output
  size depends on device data (nonzero, masked_select, unique, boolean-mask indexing,
  repeat_interleave without output_size); a copy from a device tensor into a host tensor (a
  readback: the host waits for it before reading); and an operator mixing a host tensor of more
  than one element with device tensors (torch copies the host one up from pageable memory: SAM's
  relative-position lookup indexing device tensors with CPU indices did).
What a CPU run cannot show: `.to("cpu")` of a device tensor when the device is the CPU (the code
under test reads back with copy_ into a host buffer or `.cpu()`, which are counted).

`Operators` counts the operators (aten calls, views and other metadata-only ones left out) that a
piece of code dispatches: on a GPU, the kernels it launches.

Run as a script, it measures the slots decoder with them and writes the figures as JSON: operators
per decode step at 1 and 64 rows (with and without the n-gram guard), host waits per admitted page
and per decode step, and prefill milliseconds per page with k pages prefilled together:

    .venv/bin/python bench/dispatch_count.py --json counts.json                         # tiny model, CPU
    .venv/bin/python bench/dispatch_count.py --model for-vllm --dtype bfloat16 --figures prefill --json p.json

With PYTHONPATH naming another checkout's server/ (e.g. an older commit's, unpacked with git
archive), the same script counts that code's steps (`--figures operators`): the "before" figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import weakref
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

FACTORIES = ("arange", "tensor", "zeros", "ones", "full", "empty", "as_tensor", "from_numpy", "linspace", "eye")
DATA_DEPENDENT = {"nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim", "bincount"}
READS = ("tolist", "cpu", "numpy")
METADATA = {"detach", "alias", "lift_fresh", "_unsafe_view", "expand", "view", "reshape", "t", "transpose",
            "permute", "unsqueeze", "squeeze", "slice", "select", "as_strided", "split", "split_with_sizes",
            "unbind", "chunk", "narrow", "_reshape_alias", "view_as", "expand_as", "flatten", "unflatten"}


def _name(func: Any) -> str:
    return func.overloadpacket.__name__


def _tensors(args: Any, kwargs: Any) -> list[torch.Tensor]:
    flat, _ = tree_flatten((args, kwargs))
    return [a for a in flat if isinstance(a, torch.Tensor)]


class HostSyncs(TorchDispatchMode):
    """Counts the host waits a GPU run of the code inside would have (see the module's docstring);
    `counts` by cause, `total` in all."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.device_type = torch.device(device).type  # the device the code under test runs on
        self.counts: Counter[str] = Counter()
        self._host: dict[int, weakref.ref] = {}
        self._saved: dict[tuple[Any, str], Any] = {}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    # ---------- which tensors are on the host ----------
    def _mark(self, tensor: Any) -> Any:
        if isinstance(tensor, torch.Tensor):
            key = id(tensor)
            self._host[key] = weakref.ref(tensor, lambda _, key=key: self._host.pop(key, None))
        return tensor

    def is_host(self, tensor: torch.Tensor) -> bool:
        ref = self._host.get(id(tensor))
        return ref is not None and ref() is tensor

    def _unmark(self, tensor: torch.Tensor) -> None:
        self._host.pop(id(tensor), None)

    # ---------- the operators ----------
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = _name(func)
        inputs = _tensors(args, kwargs)
        host = [t for t in inputs if self.is_host(t)]
        device = [t for t in inputs if not self.is_host(t)]
        if name == "_local_scalar_dense" and device:
            self.counts["scalar read (item, int, bool)"] += 1
        elif name in DATA_DEPENDENT and device:
            self.counts[f"{name} (output size from device data)"] += 1
        elif name == "repeat_interleave" and device and kwargs.get("output_size") is None:
            self.counts["repeat_interleave without output_size"] += 1
        elif name in ("index", "index_put", "index_put_") and device and any(
                t.dtype == torch.bool for t in inputs[1:] if not self.is_host(t)):
            self.counts[f"{name} with a boolean mask"] += 1
        elif name in ("copy_", "copy") and inputs and self.is_host(inputs[0]) and len(inputs) > 1 and not self.is_host(inputs[1]):
            self.counts["readback (copy into host memory)"] += 1
        elif host and device and any(t.numel() > 1 for t in host):
            self.counts[f"{name} mixing host and device tensors"] += 1
        out = func(*args, **kwargs)
        if name in ("copy_", "copy") and inputs and self.is_host(inputs[0]):
            return out
        if inputs and not device:
            for t in _tensors(out, {}):
                self._mark(t)
        return out

    # ---------- Python-level entry points that a CPU run does not dispatch ----------
    def __enter__(self) -> HostSyncs:
        mode = self
        for fname in FACTORIES:
            original = getattr(torch, fname)
            self._saved[(torch, fname)] = original

            def factory(*args: Any, __original: Callable = original, __fname: str = fname, **kwargs: Any) -> Any:
                out = __original(*args, **kwargs)
                device = kwargs.get("device")
                on_host = device is None or torch.device(device).type == "cpu" and (
                    kwargs.get("pin_memory") or mode.device_type != "cpu")
                if __fname == "from_numpy" or on_host:
                    mode._mark(out)
                elif __fname in ("tensor", "as_tensor"):  # data from the host, copied up and waited for
                    mode.counts["torch.tensor(..., device=...) (a blocking upload)"] += 1
                return out

            setattr(torch, fname, factory)
        for fname in READS:
            original = getattr(torch.Tensor, fname)
            self._saved[(torch.Tensor, fname)] = original

            def read(tensor: torch.Tensor, *args: Any, __original: Callable = original, __fname: str = fname, **kwargs: Any) -> Any:
                if not mode.is_host(tensor):
                    mode.counts[f".{__fname}() of a device tensor"] += 1
                out = __original(tensor, *args, **kwargs)
                return mode._mark(out) if __fname == "cpu" else out

            setattr(torch.Tensor, fname, read)
        original_to = torch.Tensor.to
        self._saved[(torch.Tensor, "to")] = original_to

        def to(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            out = original_to(tensor, *args, **kwargs)
            target = kwargs.get("device", next((a for a in args if isinstance(a, (str, torch.device))), None))
            if mode.is_host(tensor) and target is not None:
                if not (kwargs.get("non_blocking") or (len(args) > 1 and args[1] is True)):
                    mode.counts["blocking upload (.to(device) without non_blocking)"] += 1
                if out is tensor:  # same device on a CPU run: the result stands for the device copy
                    out = out.view_as(out)
                mode._unmark(out)
            return out

        torch.Tensor.to = to  # type: ignore[method-assign]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            for (owner, fname), original in self._saved.items():
                setattr(owner, fname, original)
            self._saved.clear()


class Operators(TorchDispatchMode):
    """Counts the operators dispatched inside (metadata-only ones left out): `total` and `by_name`."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.by_name.values())

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = _name(func)
        if name not in METADATA and not func.is_view:
            self.by_name[name] += 1
        return func(*args, **(kwargs or {}))


# ---------- the slots decoder measured with them (the script) ----------

def _page(size: int, seed: int) -> Any:
    """A white page with dark bars of random lengths (the same seed, the same page)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    arr = np.full((size, size, 3), 255, dtype=np.uint8)
    for y in range(16, size - 16, 28):
        arr[y:y + 10, 16:int(rng.integers(size // 3, size - 16))] = 20
    return Image.fromarray(arr)


def load_engine(model_dir: Path, device: str, dtype: str, slots: int, new_tokens: int) -> Any:
    """The transformers engine with DECODER=slots and `slots` rows."""
    from ocr_server.engines.transformers.engine import Engine
    from ocr_server.runtime.config import load_config

    engine = Engine(load_config(env={"MODEL_PATH": str(model_dir), "DEVICE": device, "DTYPE": dtype,
                                     "MAX_NEW_TOKENS": str(new_tokens), "DECODER": "slots", "DECODE_SLOTS": str(slots),
                                     "CACHE_ENTRIES": "0"}))
    engine.load()
    return engine


def pages_for(engine: Any, n: int, size: int, new_tokens: int, guard: bool = True) -> list[Any]:
    """n prepared pages of exactly new_tokens tokens (EOS held back); guard False: the n-gram guard off."""
    from ocr_server.engines.api import NGramSettings

    out = []
    for i in range(n):
        item = engine.prepare(_page(size, i), prompt_mode="free", max_visual_tokens=None, max_new_tokens=new_tokens)
        item.min_new_tokens = new_tokens
        if not guard:
            item.ngram = NGramSettings(size=0)
        out.append(item)
    return out


def _drain(slots: Any) -> None:
    slots.cancel_all()
    while not slots.idle():
        slots.step()


def step_operators(engine: Any, rows: int, size: int, guard: bool = True) -> int:
    """Operators of one decode step with `rows` rows open (the second step after they joined).
    Pages join one admit call each, which both this decoder and older ones take."""
    slots = engine.slots
    for item in pages_for(engine, rows, size, 8, guard):
        slots.admit(item)
    slots.step()
    with Operators() as ops:
        slots.step()
    _drain(slots)
    return ops.total


def admit_and_decode(syncs: HostSyncs, slots: Any, pages: list[Any]) -> tuple[Counter, list[int]]:
    """The host syncs of admitting `pages` together (by cause) and of each decode step after it,
    until every row has finished: what the sync budget (2 per page, 1 per step) is checked on."""
    before = Counter(syncs.counts)
    slots.admit(pages)
    joining = syncs.counts - before
    per_step = []
    while not slots.idle():
        total = syncs.total
        slots.step()
        per_step.append(syncs.total - total)
    return joining, per_step


def host_waits(engine: Any, pages: int, size: int) -> dict[str, Any]:
    """Host waits of admitting `pages` pages in one prefill and of each decode step until they end, on a
    decoder made inside the counter (its host buffers are known as host memory)."""
    from dataclasses import replace

    from ocr_server.engines.transformers.slots import SlotDecoder

    items = pages_for(engine, pages + 1, size, 8)
    device = engine.model.device
    with HostSyncs(device) as syncs:
        slots = SlotDecoder(engine.model, replace(engine.slots.plan), eos=engine.tokenizer.eos_token_id,
                            pad=engine.tokenizer.pad_token_id, pixels=engine._on_device, ngram_for=engine.ngram_settings)
        slots.run(items[:1])  # SAM's position indices are made once per size
        joining, per_step = admit_and_decode(syncs, slots, items[1:])
    return {"per_admitted_page": sum(joining.values()) / pages, "pages_admitted_together": pages,
            "admit_causes": dict(joining), "per_step_max": max(per_step), "steps": len(per_step)}


def prefill_ms_per_page(engine: Any, k: int, size: int, repeats: int) -> dict[str, float]:
    """Milliseconds per page of admitting k pages in one prefill (vision, language model, slot writes)."""
    import torch

    slots = engine.slots
    slots.run(pages_for(engine, 1, size, 2))  # warm-up
    times = []
    for r in range(repeats):
        items = pages_for(engine, k, size, 2)
        for item in items:  # other pages each time: nothing cached
            item.input_ids = list(item.input_ids)
        if engine.model.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        slots.admit(items if k > 1 else items[0])  # one page: also the per-page admit of older decoders
        if engine.model.device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000 / k)
        _drain(slots)
    return {"median": round(statistics.median(times), 1), "min": round(min(times), 1), "runs": len(times)}


def model_path(name: str) -> Path:
    """tiny (the tests' tiny model), for-vllm (the real vision tower, a tiny language model), or a
    directory. The tiny ones come from the cache of tiny models (a for-vllm model is 900 MB: written
    to a folder of its own, it was left behind by every run)."""
    from ocr_server_testing import tiny_cache

    if name not in ("tiny", "for-vllm"):
        return Path(name)
    return tiny_cache.cached(for_vllm=name == "for-vllm")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny", help="tiny, for-vllm or a model directory")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--size", type=int, default=640, help="pages of size x size px")
    p.add_argument("--rows", default="1,64", help="decode-step rows to count operators at")
    p.add_argument("--prefill-k", default="1,8", help="pages per prefill to time")
    p.add_argument("--repeats", type=int, default=3, help="timed prefills per k")
    p.add_argument("--figures", default="operators,syncs,prefill")
    p.add_argument("--vision-views", type=int, help="views per vision forward (default: the engine's, 2 on a CPU)")
    p.add_argument("--json", help="write the figures here (rewritten after each one)")
    args = p.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    ks = [int(k) for k in args.prefill_k.split(",")]
    wanted = set(args.figures.split(","))
    import ocr_server

    engine = load_engine(model_path(args.model), args.device, args.dtype, max(rows + ks), 8)
    if args.vision_views:
        from dataclasses import replace

        engine.slots.plan = replace(engine.slots.plan, vision_views=args.vision_views)
    out: dict[str, Any] = {"code": str(Path(ocr_server.__file__).parent), "model": args.model, "device": args.device,
                           "dtype": str(engine.model.dtype).replace("torch.", ""),
                           "vision_views": getattr(engine.slots.plan, "vision_views", None)}

    def save() -> None:
        print(json.dumps(out), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))

    if "operators" in wanted:
        out["operators_per_step"] = {"guard": {r: step_operators(engine, r, args.size) for r in rows}}
        save()
        out["operators_per_step"]["no_guard"] = {r: step_operators(engine, r, args.size, guard=False) for r in rows}
        save()
    if "syncs" in wanted:
        out["host_waits"] = host_waits(engine, min(8, max(rows)), args.size)
        save()
    if "prefill" in wanted:
        out["prefill_ms_per_page"] = {k: prefill_ms_per_page(engine, k, args.size, args.repeats if k == 1 else 1)
                                      for k in ks}
        save()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())

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
"""

from __future__ import annotations

import weakref
from collections import Counter
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

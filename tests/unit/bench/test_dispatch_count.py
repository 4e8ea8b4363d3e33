"""The host-wait counter (bench/dispatch_count.py) sees, on a CPU, the waits a GPU run would have:
scalar reads, .tolist(), .cpu(), data-dependent output sizes, blocking uploads, readbacks and host
indices into device tensors; and none for device work or for non-blocking uploads. The operator
counter counts operators, not views."""

from __future__ import annotations

import pytest
import torch

from bench.dispatch_count import HostSyncs, Operators


@pytest.fixture
def on_device() -> torch.Tensor:
    """A tensor the counter takes as device memory (made outside it, like the model's weights)."""
    return torch.arange(12, dtype=torch.float32).reshape(3, 4)


@pytest.mark.parametrize("read,cause", [
    (lambda x: x.sum().item(), "scalar read (item, int, bool)"),
    (lambda x: int(x[0, 0]), "scalar read (item, int, bool)"),
    (lambda x: bool((x > 3).any()), "scalar read (item, int, bool)"),
    (lambda x: x.tolist(), ".tolist() of a device tensor"),
    (lambda x: x.cpu(), ".cpu() of a device tensor"),
    (lambda x: x.nonzero(), "nonzero (output size from device data)"),
    (lambda x: x[x > 3], "index with a boolean mask"),
    (lambda x: x.repeat_interleave(torch.tensor([1, 2, 0]).to("cpu", non_blocking=True), dim=0),
     "repeat_interleave without output_size"),
])
def test_each_kind_of_read_back_is_one_wait_named_by_its_cause(on_device, read, cause):
    with HostSyncs() as syncs:
        read(on_device)
    assert syncs.counts[cause] == 1, dict(syncs.counts)


def test_a_copy_into_host_memory_is_a_readback_and_its_later_read_is_not_another(on_device):
    with HostSyncs() as syncs:
        host = torch.zeros(4, dtype=torch.float32)
        host.copy_(on_device[0])
        host.tolist()
    assert dict(syncs.counts) == {"readback (copy into host memory)": 1}


def test_uploads_wait_unless_non_blocking_and_host_indices_into_device_tensors_wait(on_device):
    with HostSyncs() as syncs:
        on_device + torch.ones(4).to("cpu", non_blocking=True)  # pinned + non_blocking on a GPU: no wait
    assert syncs.total == 0, dict(syncs.counts)
    with HostSyncs() as syncs:
        on_device + torch.ones(4).to("cpu")
    assert dict(syncs.counts) == {"blocking upload (.to(device) without non_blocking)": 1}
    with HostSyncs() as syncs:
        on_device[torch.arange(2)]  # SAM's lookup before sam_positions.py: a CPU index, copied up and waited for
    assert dict(syncs.counts) == {"index mixing host and device tensors": 1}


def test_device_work_and_host_work_alone_wait_for_nothing(on_device):
    with HostSyncs() as syncs:
        y = (on_device @ on_device.T).softmax(-1).max(-1).indices
        y.index_fill_(0, torch.zeros(1, dtype=torch.long, device="cpu"), 0)  # an index made on the device
        torch.arange(5).sum().item()  # host arithmetic
        torch.tensor([1, 2]).tolist()
    assert syncs.total == 0, dict(syncs.counts)


def test_operators_are_counted_and_views_are_not(on_device):
    with Operators() as ops:
        on_device.view(4, 3).transpose(0, 1).unsqueeze(0)
    assert ops.total == 0, dict(ops.by_name)
    with Operators() as ops:
        (on_device * 2 + 1).sum()
    assert dict(ops.by_name) == {"mul": 1, "add": 1, "sum": 1}

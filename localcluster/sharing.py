"""One LocalCluster used by several processes at once: the pytest-xdist workers that run real-node tests.

The machine has one real node, so every test that needs it needs the same cluster. A `ClusterShare`
is a directory the processes agree on (the test run's controller names it); in it:
- `cluster/`: the cluster's work dir. The first process to `open` the share starts the cluster and
  owns it (its components are that process's children); the others attach to it from its
  state.json (`LocalCluster.attach`).
- `life.lock`: each process holds it shared from `open` to `close`. The owner's `close` takes it
  exclusively, so it stops the cluster only when no other process is using it.
- `gate.lock` and `use.lock`: a process holds `use.lock` for a stretch of work (`turn`), shared
  for work that lives beside the others' (its own namespace) and exclusively for work that stops
  or restarts a part of the cluster (the node, containerd). An exclusive taker holds `gate.lock`
  while it waits, so new shared takers queue behind it instead of starving it. A shared turn can
  become exclusive for the rest of its stretch (`Turn.take_alone`): a module whose last tests
  restart the node runs its other tests beside the other worker's.

What a process changes in the cluster's components (a restarted containerd has a new PID, a child
of that process) it records in state.json (`LocalCluster.save_state`), and an exclusive turn starts
by reading it back (`refresh`): whoever stops or restarts a part next acts on the PIDs that run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from localcluster.component import Component

C = TypeVar("C")
READY = "ready"  # written by the owner once the cluster serves; removed before it stops


@contextlib.contextmanager
def file_lock(path: Path, shared: bool = False) -> Iterator[None]:
    """flock on `path` (created), exclusive unless `shared`, for the `with` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield


class ClusterShare:
    """See the module docstring. `open` once per process, `close` at its end."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.workdir = self.root / "cluster"
        self.owner = False
        self._life = None

    def open(self, start: Callable[[Path], C], attach: Callable[[Path], C]) -> C:
        """The shared cluster: started here (`start(workdir)`, this process then owns it) when no
        running one is recorded, else `attach(workdir)`."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._life = (self.root / "life.lock").open("a")
        # Shared before anything else: an owner that is stopping holds it exclusively, so a late
        # process waits for the stop to end and then starts a cluster of its own.
        fcntl.flock(self._life, fcntl.LOCK_SH)
        with file_lock(self.root / "start.lock"):
            if (self.root / READY).exists():
                return attach(self.workdir)
            cluster = start(self.workdir)
            self.owner = True
            (self.root / READY).write_text(str(os.getpid()))
            return cluster

    def close(self, stop: Callable[[], None]) -> None:
        """Leave the share; the owner first waits until every other process has left, then `stop()`s."""
        if self._life is None:
            return
        try:
            if self.owner:
                fcntl.flock(self._life, fcntl.LOCK_EX)  # converts: waits for the other holders
                with file_lock(self.root / "start.lock"):
                    (self.root / READY).unlink(missing_ok=True)
                stop()
        finally:
            self._life.close()
            self._life = None

    @contextlib.contextmanager
    def turn(self, exclusive: bool = False) -> Iterator[Turn]:
        """Hold the cluster for a stretch of work: shared beside the other processes' work, or alone."""
        use = (self.root / "use.lock").open("a")
        turn = Turn(self.root, use)
        try:
            if exclusive:
                turn.take_alone()
            else:
                with file_lock(self.root / "gate.lock"):  # waits behind a queued exclusive turn
                    pass
                fcntl.flock(use, fcntl.LOCK_SH)
            yield turn
        finally:
            use.close()


class Turn:
    """One process's hold on the cluster (`ClusterShare.turn`)."""

    def __init__(self, root: Path, use) -> None:
        self.root, self._use = root, use
        self.exclusive = False

    def take_alone(self) -> None:
        """Hold the cluster alone from now to the turn's end. A shared hold is let go first, so two
        processes that both ask never wait on each other's shared hold; meanwhile `gate.lock` makes
        new shared turns queue behind this one."""
        if self.exclusive:
            return
        fcntl.flock(self._use, fcntl.LOCK_UN)
        with file_lock(self.root / "gate.lock"):
            fcntl.flock(self._use, fcntl.LOCK_EX)
        self.exclusive = True


def refresh(cluster) -> None:
    """Read the cluster's components and its real node's state back from the work dir, as another
    process that shares the cluster last recorded them (a LocalCluster's own view goes stale when
    that process restarts a part). A component whose PID is unchanged keeps its process handle."""
    state = json.loads((cluster.workdir / "state.json").read_text())
    components = {}
    for name, pid in state["pids"].items():
        mine = cluster.components.get(name)
        components[name] = mine if mine is not None and mine.pid == pid else Component(
            name, state["argv"][name], cluster.workdir / "logs" / f"{name}.log", pid=pid)
    cluster.components = components
    cluster.metric_chain = state.get("metric_chain", True)
    if cluster.real_node is not None and cluster.real_node.state_file.exists():
        cluster.real_node.state = json.loads(cluster.real_node.state_file.read_text())

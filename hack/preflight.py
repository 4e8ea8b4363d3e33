"""`make test`'s first step: enough free disk for the run, or a clear stop before it starts.

Disk is what a run here runs out of first, and then it fails far from the cause: a pod Unschedulable
behind the node's disk-pressure taint, an image build's "no space left on device" in a log tail. So
the set-up looks once, before it writes anything, at the disk that holds the harness's cache
(~/.cache/causalflow-ocr: binaries, images, the node's image store) and the temporary directory
(pytest's folders, the clusters, the pods):

- below RUN_FLOOR_GB it stops: a warm run took 1.9 to 2.3 GB of it (a sampler every 2 s beside
  `make test`; 4.6 GB when passing tests still kept their folders), more when tests fail and keep
  theirs, and the node's kubelet evicts pods when 256 MiB are left;
- below COLD_GB with no cache yet it warns: a cold set-up writes about 50 GB (Go's caches, the
  venvs' wheels, the images, the node's store), more at a build's peak.

`python3 hack/preflight.py` (the standard library and localcluster.versions, which needs no more:
it runs before the venv exists).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localcluster.versions import cache_root  # noqa: E402

RUN_FLOOR_GB = 4
COLD_GB = 70


def verdict(free_gb: dict[str, float], cold: bool) -> tuple[bool, list[str]]:
    """(whether to go on, what to tell) for the free space of each place the run writes to."""
    lines, ok = [], True
    for place, gb in sorted(free_gb.items()):
        if gb < RUN_FLOOR_GB:
            ok = False
            lines.append(f"preflight: {gb:.1f} GB free on the disk of {place}: a make test run needs at least "
                         f"{RUN_FLOOR_GB} GB there (its clusters, pods and temporary folders took 1.9-2.3 GB, more on failures). "
                         f"Free some space and run it again.")
        elif cold and gb < COLD_GB:
            lines.append(f"preflight: {gb:.1f} GB free on the disk of {place}, and no cache yet: a first set-up "
                         f"writes about 50 GB and needs about {COLD_GB} GB at its peak; it may run out.")
    return ok, lines


def main() -> int:
    cache = cache_root()
    places = {f"the cache {cache}": cache if cache.exists() else Path.home(),
              f"the temporary directory {tempfile.gettempdir()}": Path(tempfile.gettempdir())}
    by_disk: dict[int, tuple[str, Path]] = {}
    for name, path in places.items():
        by_disk.setdefault(path.stat().st_dev, (name, path))  # one disk: told once, by its first name
    free = {name: shutil.disk_usage(path).free / 1e9 for name, path in by_disk.values()}
    ok, lines = verdict(free, cold=not cache.exists())
    for line in lines:
        print(line, file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

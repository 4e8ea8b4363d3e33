"""The OcrBatch worker's errors for many failed documents in one shard: time and bytes written.

    .venv/bin/python bench/batch_errors_bench.py [--documents 100000] [--dir /dev/shm] [--json FILE]

--documents unsupported files (a few bytes of text each) go into a folder under --dir, and one
worker (ocr_batch_worker.worker.Worker, in this process, as program.serve runs it: patient
FileStores, one index of one) reads them all. Each fails on its first bytes, so no request is
sent: the run measures what the worker writes for failures. The output store counts every put.

Reported: the wall and CPU seconds of the run, the bytes and objects written (in all, and under
errors/), per failure, and what the single errors file of the earlier worker, rewritten whole
for every failure, would have written for the same entries (the sum over k of k entries): the
quadratic figure that this layout (one errors object per failed document) replaces. The folders
are removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.figures import write_figures  # noqa: E402 (the repository is put on the path just above)
from ocr_batch_worker import config  # noqa: E402
from ocr_batch_worker.client import OcrClient  # noqa: E402
from ocr_batch_worker.patience import Outage, PatientStore  # noqa: E402
from ocr_batch_worker.storage import FileStore  # noqa: E402
from ocr_batch_worker.worker import Worker  # noqa: E402


class CountingStore(FileStore):
    """The output folder, counting the bytes and objects written (in all and under errors/)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.bytes = self.puts = self.error_bytes = self.error_puts = 0

    def put(self, key: str, data: bytes) -> None:
        self.bytes += len(data)
        self.puts += 1
        if key.startswith("errors/"):
            self.error_bytes += len(data)
            self.error_puts += 1
        super().put(key, data)


def make_input(folder: Path, n: int) -> None:
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"doc-{i:07d}.txt").write_bytes(b"an unsupported file")


async def run_worker(tmp: Path, sink: CountingStore, concurrency: int) -> dict:
    cfg = config.parse({"serviceUrl": "http://127.0.0.1:9", "input": {"pvc": {"path": str(tmp / "in")}},
                        "output": {"pvc": {"path": str(tmp / "out")}}, "concurrencyPerWorker": concurrency,
                        "limits": {"maxDocuments": 1_000_000}}, 0)
    client = OcrClient(cfg.service_url, concurrency=cfg.concurrency, timeout=5)
    outage = Outage(cfg.storage_retry_seconds)
    try:
        worker = Worker(cfg, PatientStore(FileStore(tmp / "in"), outage), PatientStore(sink, outage), client.send,
                        emit=lambda report: None)
        progress = await worker.run()
    finally:
        await client.close()
    return {"documents_failed": progress.documents_failed, "finished": progress.finished}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--documents", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--dir", default=None, help="where the input and output folders go (default: the temp dir)")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="batch-errors-", dir=args.dir))
    try:
        start = time.monotonic()
        make_input(tmp / "in", args.documents)
        prepared = time.monotonic() - start
        sink = CountingStore(tmp / "out")
        wall, cpu = time.monotonic(), time.process_time()
        outcome = asyncio.run(run_worker(tmp, sink, args.concurrency))
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        n = args.documents
        entry = sink.error_bytes / max(sink.error_puts, 1)
        figures = {
            "documents": n, "failed": outcome["documents_failed"], "finished": outcome["finished"],
            "input_seconds": round(prepared, 2), "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
            "bytes_written": sink.bytes, "objects_written": sink.puts,
            "errors_bytes": sink.error_bytes, "errors_objects": sink.error_puts,
            "bytes_per_failure": round(sink.bytes / n, 1), "ms_per_failure": round(1000 * wall / n, 3),
            "rewritten_file_bytes_estimate": int(entry * n * (n + 1) / 2),
        }
        print(json.dumps(figures, indent=2))
        write_figures(args.json, figures)
        return 0 if outcome["finished"] and outcome["documents_failed"] == n else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

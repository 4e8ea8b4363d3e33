"""The errors of a batch are written append-only (ocr_batch_worker.worker, results.errors_key):
one small object per failed document, never a rewrite of the others', so the bytes written grow
linearly with the failures. The old single errors file, rewritten whole for every failure, wrote
quadratically: 100k failures in one shard were about 1 TB. bench/batch_errors_bench.py measures
the time and bytes of 100k."""

from __future__ import annotations

from pathlib import Path

from ocr_batch_worker.storage import FileStore

from .workerrun import run, worker_config


class Counting(FileStore):
    """A real output folder that counts the bytes written to it."""

    def __init__(self, root) -> None:
        super().__init__(root)
        self.written = 0
        self.puts = 0

    def put(self, key: str, data: bytes) -> None:
        self.written += len(data)
        self.puts += 1
        super().put(key, data)


def failures(tmp: Path, n: int) -> Counting:
    (tmp / "in").mkdir(parents=True)
    for i in range(n):
        (tmp / "in" / f"doc-{i:06d}.txt").write_text("an unsupported file")
    sink = Counting(tmp / "out")
    progress = run(worker_config(tmp, "http://127.0.0.1:9", concurrencyPerWorker=8), sink=sink)
    assert progress.documents_failed == n and progress.finished
    return sink


def test_the_bytes_written_for_failed_documents_grow_linearly_with_their_number(tmp_path):
    small, large = failures(tmp_path / "a", 200), failures(tmp_path / "b", 800)
    # Linear: 4x the failures, about 4x the bytes (file names differ by nothing but their digits).
    # A rewritten errors file would write about 16x.
    assert large.written / small.written < 4.4, (small.written, large.written)
    assert large.puts / small.puts < 4.4
    assert len(list((tmp_path / "b" / "out" / "errors").iterdir())) == 800


def test_the_errors_bench_reports_time_and_bytes_linear_in_the_failures(tmp_path):
    import json

    from bench import batch_errors_bench

    out = tmp_path / "figures.json"
    assert batch_errors_bench.main(["--documents", "40", "--dir", str(tmp_path), "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert (figures["failed"], figures["errors_objects"]) == (40, 40)
    assert figures["bytes_written"] * 5 < figures["rewritten_file_bytes_estimate"]  # 40 failures: linear vs 20x
    assert figures["wall_seconds"] > 0 and figures["bytes_per_failure"] > 0

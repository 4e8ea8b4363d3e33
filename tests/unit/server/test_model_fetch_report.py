"""The fetch program's last line is its verdict: transfer threads still running when a failure is
reported (the program does not wait for them) write no progress line after it."""

from __future__ import annotations

import io
import json
import threading

from ocr_server.fetch.report import Reporter


def events(out: io.StringIO) -> list[str]:
    return [json.loads(line)["event"] for line in out.getvalue().splitlines()]


def test_no_progress_line_follows_the_failure_line(tmp_path):
    out = io.StringIO()
    reporter = Reporter(out=out, every=0.0, termination_log=tmp_path / "termination-log")
    reporter.start(total_bytes=100, total_files=2, done_bytes=0, done_files=0)
    stop = threading.Event()

    def transfer() -> None:  # a part still downloading while the main thread reports the failure
        while not stop.is_set():
            reporter.add_bytes(1)

    thread = threading.Thread(target=transfer)
    thread.start()
    reporter.failed("ChecksumMismatch", "sub/tokenizer.json: tampered")
    for _ in range(100):
        reporter.add_bytes(1)
    reporter.file_done("model.safetensors")
    stop.set()
    thread.join()
    got = events(out)
    assert got[-1] == "failed" and got.count("failed") == 1 and "progress" in got[:-1]
    assert (tmp_path / "termination-log").read_text().startswith("ChecksumMismatch: ")


def test_the_done_line_is_the_last_too():
    out = io.StringIO()
    reporter = Reporter(out=out, every=0.0, termination_log=None)
    reporter.start(total_bytes=1, total_files=1, done_bytes=0, done_files=0)
    reporter.done(cache="miss")
    reporter.add_bytes(1)
    assert events(out) == ["progress", "done"]

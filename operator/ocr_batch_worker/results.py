"""What a batch writes for a document: names, result lines, Markdown and errors entries (pure).

A result is named by its input's key and the first 16 hex digits of its content's sha256:
results/<key>.<digest>.jsonl and .md. The JSONL file is written last and atomically, so it is
the mark that the document is done: a restarted worker that finds it skips the document, and a
changed document (another digest) is done again. It has one line per page in page order: the
page's text, layout blocks, token counts and the model and its revision, or the page's error.
For an OpenAI batch file the lines are the OpenAI batch output format instead (one per request,
with its custom_id), and there is no Markdown.

The errors of a failed document are one object of their own, written once, never rewritten:
errors/index-<n>.<h>.jsonl, where n is the Job index that owns the document and h a hash of the
document's key and content hash. It lists each failed page of the document (or the document as
a whole, page null) with the reason. Writing a batch's errors so costs time and bytes linear in
the failures (a single errors file rewritten per failure was quadratic), a document done again
after a crash replaces its own object instead of adding a copy, and `cat errors/*.jsonl` reads
them all.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

RESULTS = "results"
ERRORS = "errors"
PROGRESS = "progress"
ATTEMPTS = "attempts"
DIGEST_CHARS = 16


def digest(data: bytes) -> str:
    """The content hash that names a document's results."""
    return hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]


def result_key(key: str, sha: str) -> str:
    """The JSONL result: the document's "done" mark."""
    return f"{RESULTS}/{key}.{sha}.jsonl"


def markdown_key(key: str, sha: str) -> str:
    return f"{RESULTS}/{key}.{sha}.md"


def errors_key(index: int, key: str, sha: str | None) -> str:
    """The errors object of one document (sha None: a document that was never read); a fixed-length
    name, so any document's errors can be written whatever its key's length."""
    h = hashlib.sha256(f"{key}\0{sha or ''}".encode()).hexdigest()[:32]
    return f"{ERRORS}/index-{index:05d}.{h}.jsonl"


def attempt_key(index: int, key: str) -> str:
    """The attempt marker of a document (attempts.py), fixed-length like errors_key's."""
    return f"{ATTEMPTS}/index-{index:05d}.{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def progress_key(index: int, pod: str = "") -> str:
    """The progress object of one pod attempt of an index: two workers on one shard (a stale one
    and its replacement) each write their own, so the last report of one never replaces the
    other's. Without a pod name (a worker run outside a pod), one object per index."""
    name = "".join(c for c in pod.lower() if c.isascii() and (c.isalnum() or c in "-."))[:253].strip(".")
    return f"{PROGRESS}/index-{index:05d}.{name}.json" if name else f"{PROGRESS}/index-{index:05d}.json"


def page_record(key: str, sha: str, page: int, answer: dict[str, Any]) -> dict[str, Any]:
    """One page's result line from the server's /v1/ocr answer for that page alone (its only
    entry of `pages`, numbered as the request saw it, is renumbered as the document's page)."""
    pages = answer.get("pages") or []
    if len(pages) != 1:
        raise ValueError(f"the answer for page {page} of {key} has {len(pages)} pages, not 1")
    out = pages[0]
    blocks = [{**b, "page": page} for b in out.get("blocks", [])]
    return {"document": key, "sha256": sha, "page": page, "text": out["text"], "blocks": blocks,
            "layout": out.get("layout"), "usage": out.get("usage"), "finished": out.get("finished"),
            "model": answer.get("model")}


def error_record(key: str, sha: str | None, page: int | None, reason: str, status: int | None = None) -> dict[str, Any]:
    """An errors-file entry, and the result line of a failed page: page None is the whole document."""
    return {"document": key, "sha256": sha, "page": page, "error": reason, "status": status}


def chat_record(custom_id: str, line: int, sha: str, status: int | None, body: Any, error: str | None) -> dict[str, Any]:
    """One line of an OpenAI batch output file (as vLLM's run-batch and OpenAI write them)."""
    rid = f"batch_req_{sha}_{line}"
    response = None if status is None else {"status_code": status, "request_id": rid, "body": body}
    err = None if error is None else {"code": str(status) if status is not None else "request_failed", "message": error}
    return {"id": rid, "custom_id": custom_id, "response": response, "error": err}


def jsonl(records: Iterable[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records).encode()


def markdown(key: str, records: list[dict[str, Any]]) -> bytes:
    """The document's text, page after page, each page headed by an HTML comment naming it (a
    failed page's comment gives the reason), so the pages stay findable in rendered Markdown."""
    out = []
    for r in records:
        if "error" in r:
            reason = " ".join(str(r["error"]).split()).replace("--", "- -")
            out.append(f"<!-- {key} page {r['page']}: failed: {reason} -->\n")
        else:
            out.append(f"<!-- {key} page {r['page']} -->\n\n{r['text'].rstrip()}\n")
    return "\n".join(out).encode()


def parse_jsonl(data: bytes) -> list[dict[str, Any]]:
    """The objects of a JSONL file written by jsonl(); a torn or foreign line is skipped."""
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and "document" in item:
            out.append(item)
    return out


def count_result(data: bytes) -> tuple[int, int, bool]:
    """(pages done, pages failed, whether the whole document failed) of a result file: a line
    whose `error` is set failed; an error of page null is the document's, and a document none of
    whose pages was read failed too."""
    done = failed = 0
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        if item.get("error") is None:
            done += 1
        elif "page" in item and item["page"] is None:
            return 0, 0, True
        else:
            failed += 1
    return done, failed, done == 0

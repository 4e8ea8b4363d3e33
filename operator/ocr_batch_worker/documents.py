"""What a document is and the requests it becomes: its kind by content, and one part per page.

Every page goes to the OcrService as a request of its own, so a failed page is retried or
reported alone and the server's per-request page limit never applies to a long document: a PDF
is cut into one-page PDFs (pypdfium2 copies the page and what it uses, so the server renders the
same pixels), each only when its request is sent (pages sharing a large font or image would
otherwise hold a copy of it each, all at once), a multi-page TIFF is sent with the `pages` option, an image is one page, and each
line of an OpenAI batch file (*.jsonl) is one /v1/chat/completions request. A document that
cannot become parts (empty, corrupt, unsupported, too many pages) raises DocumentError with the
reason the errors file gives; a bad line of a batch file is an error of that line only.
"""

from __future__ import annotations

import io
import json
import threading
from dataclasses import dataclass, field

from ocr_limits import files

OCR = "/v1/ocr"
CHAT = "/v1/chat/completions"
# The documents' kinds are the server's (ocr_limits.files: one signature table), plus batch files.
KINDS = (*files.NAMES, "jsonl")
CONTENT_TYPES = {**files.CONTENT_TYPES, "jsonl": "application/json"}
MAX_CUSTOM_ID_CHARS = 512
# pdfium is not thread-safe (its last-error code is global too), and the worker cuts pages on
# threads: one pdfium call at a time.
_PDFIUM = threading.Lock()


class DocumentError(Exception):
    """The document as a whole cannot be read; str() is the reason."""


@dataclass(frozen=True)
class Part:
    """One request: a page of a document, or a line of a batch file."""

    page: int  # 1-based page, or line number of a batch file
    body: bytes | None  # None: a PDF page, cut out by Split.body() when it is sent
    content_type: str
    endpoint: str = OCR
    pages: str | None = None  # the server's `pages` option (a page of a multi-page TIFF)
    custom_id: str | None = None  # a batch file line's custom_id


@dataclass(frozen=True)
class Split:
    kind: str
    parts: list[Part]
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line, reason): bad lines of a batch file
    pdf: PdfPages | None = None  # the open PDF the parts' bodies are cut from

    @property
    def pages(self) -> int:
        return len(self.parts) + len(self.errors)

    def body(self, part: Part) -> bytes:
        """The request body of a part (a PDF page is cut out now; call it on a worker thread)."""
        if part.body is not None:
            return part.body
        assert self.pdf is not None
        return self.pdf.page(part.page)

    def close(self) -> None:
        if self.pdf is not None:
            self.pdf.close()


def kind_of(key: str, data: bytes) -> str:
    """The document's kind: by content for documents, by the .jsonl suffix for batch files."""
    if not data:
        raise DocumentError("the file is empty")
    if key.lower().endswith(".jsonl"):
        return "jsonl"
    kind = files.sniff(data)
    if kind is not None:
        return kind
    raise DocumentError(f"unsupported type: not one of {files.SUPPORTED}, nor a *.jsonl batch file "
                        f"(it starts with {data[:8]!r})")


def _too_many(n: int, max_pages: int, what: str) -> DocumentError:
    return DocumentError(f"the {what} has {n} pages; the limit is {max_pages} (spec.limits.maxPagesPerDocument)")


class PdfPages:
    """An open PDF (its pages counted, at most max_pages) that cuts out one page at a time as a
    PDF of its own."""

    def __init__(self, data: bytes, max_pages: int) -> None:
        import pypdfium2 as pdfium

        self._pdfium = pdfium
        with _PDFIUM:
            try:
                self._pdf = pdfium.PdfDocument(data)
            except pdfium.PdfiumError:
                # Not pdfium's reason: its last-error code is only set by some failures and stays from
                # an earlier one (a PDF without pages fails to load and sets none).
                raise DocumentError("the PDF could not be opened: it is damaged, encrypted or has no pages") from None
            self.count = len(self._pdf)
        if self.count == 0 or self.count > max_pages:
            self.close()
            if self.count == 0:
                raise DocumentError("the PDF has no pages")
            raise _too_many(self.count, max_pages, "PDF")

    def page(self, number: int) -> bytes:
        """Page `number` (1-based) as a one-page PDF."""
        pdfium = self._pdfium
        with _PDFIUM:
            one = pdfium.PdfDocument.new()
            try:
                one.import_pages(self._pdf, [number - 1])
                buf = io.BytesIO()
                one.save(buf)
            except pdfium.PdfiumError as exc:
                raise DocumentError(f"page {number} of the PDF could not be read: {exc}") from None
            finally:
                one.close()
        return buf.getvalue()

    def close(self) -> None:
        with _PDFIUM:
            self._pdf.close()


def split_pdf(data: bytes, max_pages: int) -> Split:
    pdf = PdfPages(data, max_pages)
    return Split("pdf", [Part(n, None, CONTENT_TYPES["pdf"]) for n in range(1, pdf.count + 1)], pdf=pdf)


def tiff_pages(data: bytes, max_pages: int) -> int:
    """Pages of a TIFF, counted without decoding them, and no further than max_pages + 1."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            n = 1
            while n <= max_pages:
                try:
                    img.seek(n)
                except EOFError:
                    break
                n += 1
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DocumentError(f"the TIFF could not be opened: {exc}") from None
    return n


def split_tiff(data: bytes, max_pages: int) -> list[Part]:
    n = tiff_pages(data, max_pages)
    if n > max_pages:
        raise DocumentError(f"the TIFF has more than {max_pages} pages; the limit is {max_pages} "
                            "(spec.limits.maxPagesPerDocument)")
    if n == 1:
        return [Part(1, data, CONTENT_TYPES["tiff"])]
    return [Part(p, data, CONTENT_TYPES["tiff"], pages=str(p)) for p in range(1, n + 1)]


def split_jsonl(data: bytes, max_lines: int) -> Split:
    """An OpenAI batch file: one POST /v1/chat/completions request per non-blank line, each
    {"custom_id", "method": "POST", "url": "/v1/chat/completions", "body": {...}}."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"the batch file is not UTF-8: {exc}") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise DocumentError("the batch file has no requests")
    if len(lines) > max_lines:
        raise DocumentError(f"the batch file has {len(lines)} requests; the limit is {max_lines} "
                            "(spec.limits.maxPagesPerDocument)")
    parts, errors, seen = [], [], set()
    for n, line in lines:
        try:
            parts.append(_chat_line(n, line, seen))
        except DocumentError as exc:
            errors.append((n, str(exc)))
    return Split("jsonl", parts, errors)


def _chat_line(n: int, line: str, seen: set[str]) -> Part:
    try:
        item = json.loads(line)
    except ValueError as exc:
        raise DocumentError(f"line {n} is not JSON: {exc}") from None
    if not isinstance(item, dict):
        raise DocumentError(f"line {n} is not a JSON object")
    custom_id, method, url, body = (item.get(k) for k in ("custom_id", "method", "url", "body"))
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID_CHARS:
        raise DocumentError(f"line {n}: custom_id must be a string of 1..{MAX_CUSTOM_ID_CHARS} characters")
    if custom_id in seen:
        raise DocumentError(f"line {n}: custom_id {custom_id!r} is not unique in the file")
    seen.add(custom_id)
    if method != "POST" or url != CHAT:
        raise DocumentError(f"line {n}: only POST {CHAT} is served (method {method!r}, url {url!r})")
    if not isinstance(body, dict):
        raise DocumentError(f"line {n}: body must be a JSON object (the chat completion request)")
    if body.get("stream"):
        raise DocumentError(f"line {n}: body.stream is not supported in a batch")
    return Part(n, json.dumps(body).encode(), CONTENT_TYPES["jsonl"], endpoint=CHAT, custom_id=custom_id)


def split(key: str, data: bytes, max_pages: int) -> Split:
    """The requests of one document (DocumentError when it has none to send); close() it when done."""
    kind = kind_of(key, data)
    if kind == "jsonl":
        return split_jsonl(data, max_pages)
    if kind == "pdf":
        return split_pdf(data, max_pages)
    if kind == "tiff":
        return Split(kind, split_tiff(data, max_pages))
    return Split(kind, [Part(1, data, CONTENT_TYPES[kind])])

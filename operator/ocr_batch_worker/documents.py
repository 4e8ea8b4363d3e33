"""What a document is and the requests it becomes: its kind by content, and one part per page.

Every page goes to the OcrService as a request of its own, so a failed page is retried or
reported alone and the server's per-request page limit never applies to a long document: a PDF
is cut into one-page PDFs (pypdfium2 copies the page and what it uses, so the server renders the
same pixels) and a multi-page TIFF into one-page TIFFs (tiff.py), each only when its request is
sent (pages sharing a large font or image would otherwise hold a copy of it each, all at once);
an image is one page, and each line of an OpenAI batch file (*.jsonl) is one
/v1/chat/completions request. A document that cannot become parts (empty, corrupt, unsupported,
too many pages, a header declaring a decompression bomb) raises DocumentError with the reason
the errors file gives; a bad line of a batch file is an error of that line only, and keeps its
custom_id when one can be read from it.
"""

from __future__ import annotations

import io
import json
import re
import threading
import warnings
from dataclasses import dataclass, field

from ocr_limits import files

from .failures import DocumentError
from .jsontext import JsonTextError, json_object
from .tiff import TiffPages, check_size

OCR = "/v1/ocr"
CHAT = "/v1/chat/completions"
# The documents' kinds are the server's (ocr_limits.files: one signature table), plus batch files.
KINDS = (*files.NAMES, "jsonl")
CONTENT_TYPES = {**files.CONTENT_TYPES, "jsonl": "application/json"}
MAX_CUSTOM_ID_CHARS = 512
# pdfium is not thread-safe (its last-error code is global too), and the worker cuts pages on
# threads: one pdfium call at a time.
_PDFIUM = threading.Lock()


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
    pdf: PdfPages | TiffPages | None = None  # the open PDF or TIFF the parts' bodies are cut from
    error_ids: dict[int, str] = field(default_factory=dict)  # a bad line's custom_id, when it has one

    @property
    def pages(self) -> int:
        return len(self.parts) + len(self.errors)

    def body(self, part: Part) -> bytes:
        """The request body of a part (a PDF or TIFF page is cut out now; call it on a worker thread)."""
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


def split_tiff(data: bytes, max_pages: int) -> Split:
    """A one-page TIFF is sent as it is; each page of a longer one is cut out as a TIFF of its own."""
    pages = TiffPages(data, max_pages)
    if pages.count == 1:
        size = pages.first_size()
        pages.close()
        check_size(1, size)
        return Split("tiff", [Part(1, data, CONTENT_TYPES["tiff"])])
    return Split("tiff", [Part(n, None, CONTENT_TYPES["tiff"]) for n in range(1, pages.count + 1)], pdf=pages)


def check_image(kind: str, data: bytes) -> None:
    """An image whose header declares more pixels than Pillow lets open (a decompression bomb) is
    refused here, from its header, before it is sent: the server would refuse it after reading it."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as img:
                w, h = img.size
    except Image.DecompressionBombError as exc:
        raise DocumentError(f"the {kind.upper()} declares a decompression bomb: {exc}") from None
    except Exception:  # noqa: BLE001 - anything else the server judges (and explains) itself
        return
    if w * h > files.MAX_PAGE_PIXELS:
        raise DocumentError(f"the {kind.upper()} is {w}x{h} = {w * h} pixels; the OcrService reads at most "
                            f"{files.MAX_PAGE_PIXELS} pixels per page")


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
    parts, errors, ids, seen = [], [], {}, set()
    for n, line in lines:
        read: dict[int, str] = {}  # the line's custom_id, once it was read
        try:
            parts.append(_chat_line(n, line, seen, read))
        except DocumentError as exc:
            errors.append((n, str(exc)))
            if (found := read.get(n) or custom_id_of(line)) is not None:
                ids[n] = found
    return Split("jsonl", parts, errors, error_ids=ids)


_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"((?:[^"\\]|\\.){1,%d})"' % MAX_CUSTOM_ID_CHARS)


def custom_id_of(line: str) -> str | None:
    """The custom_id of a line that is not a readable request (not JSON, nested too deep), read
    from its text: the output line of a bad request still names the request, as OpenAI's does."""
    match = _CUSTOM_ID.search(line)
    if match is None:
        return None
    try:
        value = json.loads(f'"{match.group(1)}"')
    except ValueError:
        return None
    return value if isinstance(value, str) and value else None


def _chat_line(n: int, line: str, seen: set[str], ids: dict[int, str]) -> Part:
    try:
        item = json_object(line)
    except JsonTextError as exc:
        raise DocumentError(f"line {n} {exc}") from None
    custom_id, method, url, body = (item.get(k) for k in ("custom_id", "method", "url", "body"))
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID_CHARS:
        raise DocumentError(f"line {n}: custom_id must be a string of 1..{MAX_CUSTOM_ID_CHARS} characters")
    ids[n] = custom_id
    if custom_id in seen:
        raise DocumentError(f"line {n}: custom_id {custom_id!r} is not unique in the file")
    seen.add(custom_id)
    if method != "POST" or url != CHAT:
        raise DocumentError(f"line {n}: only POST {CHAT} is served (method {method!r}, url {url!r})")
    if not isinstance(body, dict):
        raise DocumentError(f"line {n}: body must be a JSON object (the chat completion request)")
    if body.get("stream"):
        raise DocumentError(f"line {n}: body.stream is not supported in a batch")
    try:
        encoded = json.dumps(body).encode()
    except (RecursionError, ValueError) as exc:
        raise DocumentError(f"line {n}: body cannot be sent: {exc}") from None
    return Part(n, encoded, CONTENT_TYPES["jsonl"], endpoint=CHAT, custom_id=custom_id)


def split(key: str, data: bytes, max_pages: int) -> Split:
    """The requests of one document (DocumentError when it has none to send); close() it when done."""
    kind = kind_of(key, data)
    if kind == "jsonl":
        return split_jsonl(data, max_pages)
    if kind == "pdf":
        return split_pdf(data, max_pages)
    if kind == "tiff":
        return split_tiff(data, max_pages)
    check_image(kind, data)
    return Split(kind, [Part(1, data, CONTENT_TYPES[kind])])


def body_refusal(part: Part, size: int, max_body_bytes: int) -> str | None:
    """Why the server would refuse this request's body for its size (None: it fits), decided
    before sending it: a page over the OcrService's body limit fails with this reason, alone."""
    # The server takes a JSON body up to 4/3 of its limit (base64 images grow by 4/3), plus 64 KiB.
    limit = max_body_bytes if part.endpoint == OCR else max_body_bytes * 4 // 3 + 64 * 1024
    if size <= limit:
        return None
    what = f"line {part.page}" if part.endpoint == CHAT else f"page {part.page}"
    return f"{what} is {size} bytes; the OcrService takes at most {limit} bytes per request (its body limit)"

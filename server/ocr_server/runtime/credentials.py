"""API keys and the TLS certificate, re-read from their mounted Secret files while serving.

Kubelet updates the files of a mounted Secret volume in place (an atomic swap of its `..data`
symlink; never for a subPath mount), while environment variables never change. So the keys come
from a file (API_KEYS_FILE) and, like the certificate pair (TLS_CERT_FILE, TLS_KEY_FILE), are
re-read when the files change: a poll every POLL_SECONDS stats the resolved paths (cheap) and,
when that changed, hashes the content. New content is validated before it replaces the old: a
bad, empty or half-written key file keeps the old keys (never everyone locked out, never auth
off), a certificate whose key does not match keeps the old pair. A rejected content is logged
once and retried when the files change again.

The certificate is applied by loading it into the live SSLContext uvicorn listens with: a
handshake takes the context's certificate when it starts, so new connections get the new one
and open ones keep theirs.

Pure parts: `parse_keys`, `fingerprint`, `decide`; I/O: `KeyStore`, `Watch`, `watch`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Callable, Sequence

from ocr_limits import split_keys

log = logging.getLogger("ocr_server.reload")

POLL_SECONDS = 2.0
MIN_KEY_CHARS = 8
MAX_KEYS = 1000
MAX_FILE_BYTES = 256 * 1024  # a key file or a certificate chain beyond this is refused, never read whole


class ReloadError(ValueError):
    """New file content that is not applied; the message says why (and never holds a key)."""


# ---------- pure ----------
def parse_keys(text: str, source: str = "API_KEYS") -> tuple[str, ...]:
    """Keys separated by commas or new lines (blank lines and `#` comment lines skipped), each at
    least MIN_KEY_CHARS long, at least one. Raises ReloadError naming `source`."""
    keys = split_keys(text)
    if not keys:
        raise ReloadError(f"{source} holds no key")
    if len(keys) > MAX_KEYS:
        raise ReloadError(f"{source} holds {len(keys)} keys; the limit is {MAX_KEYS}")
    short = sum(len(k) < MIN_KEY_CHARS for k in keys)
    if short:
        raise ReloadError(f"{source}: {short} key(s) shorter than {MIN_KEY_CHARS} characters")
    return tuple(dict.fromkeys(keys))


Fingerprint = tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True)
class Seen:
    """What a watch last saw: the files' stat fingerprint and their content's digest."""

    stat: Fingerprint | None = None
    digest: str | None = None


def fingerprint(stats: Sequence[os.stat_result]) -> Fingerprint:
    """Device, inode, size and mtime of each resolved file: kubelet's swap changes the inode."""
    return tuple((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)


def digest(contents: Sequence[bytes]) -> str:
    h = hashlib.sha256()
    for c in contents:
        h.update(len(c).to_bytes(8, "big") + c)
    return h.hexdigest()


def decide(last: Seen, stat: Fingerprint, read: Callable[[], Sequence[bytes]]) -> tuple[Seen, Sequence[bytes] | None]:
    """(what is seen now, the content to apply or None). Reads only when the stat changed; applies
    only when the content changed. The stat is taken before the read, so a swap during the read
    shows as a changed stat at the next poll."""
    if stat == last.stat:
        return last, None
    contents = read()
    d = digest(contents)
    if d == last.digest:
        return Seen(stat, d), None
    return Seen(stat, d), contents


# ---------- I/O ----------
def read_bounded(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ReloadError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    return data


def load_keys(path: str) -> tuple[str, ...]:
    """The keys of API_KEYS_FILE now; ReloadError when it cannot be read or holds no valid key."""
    try:
        data = read_bounded(path)
        return parse_keys(data.decode("utf-8"), f"API_KEYS_FILE={path}")
    except UnicodeDecodeError:
        raise ReloadError(f"API_KEYS_FILE={path} is not UTF-8 text") from None
    except OSError as exc:
        raise ReloadError(f"API_KEYS_FILE={path} cannot be read: {exc.strerror or exc}") from None


class KeyStore:
    """The API keys requests are checked against; replaced whole, so a reader sees one set."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys

    def replace(self, contents: Sequence[bytes], source: str) -> None:
        try:
            text = contents[0].decode("utf-8")
        except UnicodeDecodeError:
            raise ReloadError(f"{source} is not UTF-8 text") from None
        self.keys = parse_keys(text, source)


def apply_certificate(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Load the pair into the live context only after a scratch context accepted it: a failed
    load_cert_chain may leave a context with the new certificate and no matching key. The bytes
    checked are the bytes applied (private temporary files), not the paths read again."""
    with tempfile.TemporaryDirectory(prefix="ocr-tls-") as tmp:  # mode 0700
        cert_path, key_path = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, OSError) as exc:
            raise ReloadError(f"the new certificate and key are not a valid pair: {exc}") from None
        context.load_cert_chain(cert_path, key_path)


@dataclass
class Watch:
    """Files watched together (the certificate with its key) and what applies their new content."""

    name: str  # the metric label: api_keys or tls
    paths: tuple[str, ...]
    apply: Callable[[Sequence[bytes]], None]  # raises ReloadError to keep the old content
    seen: Seen = Seen()

    def prime(self) -> None:
        """Record the files as loaded at start, so the first poll applies nothing."""
        self.seen, _ = decide(Seen(), self._stat(), self._read)

    def _stat(self) -> Fingerprint:
        return fingerprint([os.stat(p) for p in self.paths])

    def _read(self) -> list[bytes]:
        return [read_bounded(p) for p in self.paths]

    def poll(self) -> str | None:
        """'ok' or 'failed' when new content was tried, None when nothing changed."""
        try:
            self.seen, contents = decide(self.seen, self._stat(), self._read)
        except (OSError, ReloadError) as exc:  # a file missing for a moment during a swap: next poll
            log.warning("%s: %s unreadable, keeping the loaded one: %s", self.name, ", ".join(self.paths), exc)
            return None
        if contents is None:
            return None
        try:
            self.apply(contents)
        except Exception as exc:  # noqa: BLE001 - whatever fails, the loaded content stays and serving goes on
            log.error("%s: the new %s is refused, the loaded one stays in use: %s", self.name, ", ".join(self.paths), exc)
            return "failed"
        log.info("%s: reloaded %s", self.name, ", ".join(self.paths))
        return "ok"


def watches(key_file: str | None, keys: KeyStore | None, cert_file: str | None, key_path: str | None,
            context: ssl.SSLContext | None) -> list[Watch]:
    """The watches a server needs: its key file, its certificate pair (when served over TLS)."""
    out = []
    if key_file and keys is not None:
        out.append(Watch("api_keys", (key_file,), lambda c: keys.replace(c, f"API_KEYS_FILE={key_file}")))
    if cert_file and key_path and context is not None:
        out.append(Watch("tls", (cert_file, key_path), lambda c: apply_certificate(context, c[0], c[1])))
    return out


async def watch(items: list[Watch], on_result: Callable[[str, str], None], interval: float = POLL_SECONDS) -> None:
    """Poll forever on the event loop (the SSLContext is used by the loop's thread only)."""
    for w in items:
        try:
            w.prime()
        except (OSError, ReloadError) as exc:
            log.warning("%s: cannot fingerprint %s yet: %s", w.name, ", ".join(w.paths), exc)
    while True:
        await asyncio.sleep(interval)
        for w in items:
            result = w.poll()
            if result is not None:
                on_result(w.name, result)

"""Durable file primitives: atomic write, durable rename, and a bounded tail buffer.

A state change in octopoid is a rename, and a rename only survives a power cut once the
directories on both sides are fsynced; these helpers make that the only way files move.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.exceptions import StorageError
from .lazy import lazy_import

if TYPE_CHECKING:
    from .redaction import Redactor

redaction = lazy_import("orchestrator.base.redaction")  # loaded by whoever hands a TailBuffer one
TEMP_PREFIX = "."
TEMP_SUFFIX = ".tmp"


def fsync_dir(path: Path) -> None:
    """Flush a directory entry table so renames and creations in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path_for(target: Path) -> Path:
    """A unique hidden temp name beside ``target``; queue listings ignore dot-files. The
    random part is ``secrets.token_hex``'s own (``os.urandom``), without importing
    ``secrets`` (hmac, OpenSSL: ~4 ms of every command that writes a file)."""
    return target.with_name(f"{TEMP_PREFIX}{target.name}.{os.urandom(4).hex()}{TEMP_SUFFIX}")


def write_temp(target: Path, data: bytes, mode: int | None = None, sync: bool = True) -> Path:
    """Write ``data`` to a fsynced temp file beside ``target`` and return its path."""
    return write_synced(temp_path_for(target), data, mode, exclusive=True, sync=sync)


def write_synced(
    path: Path, data: bytes, mode: int | None = None, exclusive: bool = False, sync: bool = True
) -> Path:
    """Write ``data`` to ``path`` (created or truncated; ``exclusive``: must be new), fsynced
    unless ``sync`` is False (``durability: relaxed``)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, 0o644 if mode is None else mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return path


def atomic_write(
    target: Path, data: bytes | str, keep_mode: bool = True, sync: bool = True
) -> None:
    """Replace ``target`` with ``data`` so a reader or a crash sees the old or the new file
    (and, unless ``sync`` is False, so the new file survives a power cut)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    mode = None
    if keep_mode:
        with contextlib.suppress(FileNotFoundError):
            mode = target.stat().st_mode & 0o7777
    tmp = write_temp(target, data, mode, sync)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_dir(target.parent)


@contextlib.contextmanager
def writing(folder: Path, what: str = "the queue") -> Iterator[None]:
    """An OS error while writing ``what`` becomes one clear ``StorageError`` (no traceback).

    ``FileNotFoundError`` passes through: in a queue it means another process moved first.
    """
    try:
        yield
    except FileNotFoundError:
        raise
    except OSError as exc:
        where = exc.filename or folder
        raise StorageError(
            f"cannot write {what} at {where}: {exc.strerror or exc} "
            "(check the folder's permissions and free space)"
        ) from None


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object written with ``atomic_write``; ``{}`` if missing, unreadable or not one
    (state files octopoid can rebuild or do without)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def durable_rename(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` and fsync both directories.

    Raises ``FileNotFoundError`` when ``src`` is gone: in a queue that means another
    process won the race.
    """
    os.rename(src, dst)
    fsync_dir(dst.parent)
    if src.parent != dst.parent:
        fsync_dir(src.parent)


def remove_tree(path: Path) -> None:
    """Remove ``path`` and all under it, whoever made it: links are unlinked, never
    followed, and a folder made unwritable is opened up first. Missing is not an error,
    nor is a part of it vanishing meanwhile (another process removing the same tree)."""

    def open_up(func: object, name: str, exc_info: tuple) -> None:
        if isinstance(exc_info[1], FileNotFoundError):
            return
        for folder in (os.path.dirname(name), name):
            if os.path.isdir(folder) and not os.path.islink(folder):
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(folder, 0o700)
        if os.path.isdir(name) and not os.path.islink(name):
            shutil.rmtree(name, onerror=_gone_is_fine)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    if os.path.islink(path) or os.path.isfile(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    elif os.path.isdir(path):
        import shutil  # with bz2 and lzma, ~2 ms of every command that only writes a file

        shutil.rmtree(path, onerror=open_up)


def _gone_is_fine(func: object, name: str, exc_info: tuple) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def is_temp_name(name: str) -> bool:
    """True for the hidden temp files ``write_temp`` makes (crash debris if left over)."""
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)


class TailBuffer:
    """Keep the last ``limit`` characters of a byte stream in bounded memory.

    With ``redact``, the bytes are cleaned (``redaction.CleaningStream``: terminal escapes
    and control characters out) and pass through a stream of it, so neither a secret nor an
    escape reaches the tail or the log, even one split across chunks anywhere; that stream
    holds back an
    unfinished line (4 KiB, a private key block 16 KiB, at most) until it can tell, and
    ``close`` lets it go. Bytes are decoded incrementally, so a multi-byte character split
    across two chunks is never cut in half; NUL bytes become U+FFFD. When ``log_path`` is
    given, the (redacted) bytes are also written there, held to about ``log_cap_bytes`` by
    keeping its tail.
    """

    NUL_REPLACEMENT = "\ufffd".encode()  # text tools stop reading a notes file at a NUL

    def __init__(
        self,
        limit: int,
        log_path: Path | None = None,
        log_cap_bytes: int | None = None,
        redact: Redactor | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.dropped_chars = 0
        self.total_bytes = 0
        self.redactor = redact  # for text a caller shortens before feeding it (a clip must
        # not cut a secret down to a prefix the stream no longer recognises)
        self._stream = redact.stream() if redact else None
        self._clean = redaction.CleaningStream() if redact else None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._closed = False
        self._chunks: list[str] = []
        self._held = 0
        self._log = _CappedLog(log_path, log_cap_bytes) if log_path else None

    def feed(self, data: bytes) -> None:
        """Add a chunk of raw output."""
        if not data:
            return
        if self._closed:
            raise ValueError("feed() after close()")
        self.total_bytes += len(data)
        if b"\x00" in data:
            data = data.replace(b"\x00", self.NUL_REPLACEMENT)
        if self._clean:
            data = self._clean.push(data)
        self._emit(self._stream.push(data) if self._stream else data)

    def say(self, line: str) -> None:
        """Add one line of text (a backend's readable rendering of its agent's events)."""
        self.feed((line.rstrip("\n") + "\n").encode("utf-8", errors="replace"))

    def close(self) -> None:
        """Flush what redaction held back and a trailing partial character; close the log."""
        if self._closed:
            return
        self._closed = True
        rest = self._clean.close() if self._clean else b""
        if self._stream:
            rest = self._stream.push(rest) + self._stream.close()
        self._emit(rest, final=True)
        if self._log:
            self._log.close()

    def text(self) -> str:
        """The kept tail (at most ``limit`` characters), not counting what is held back."""
        self._compact()
        return "".join(self._chunks)

    @property
    def log_dropped_bytes(self) -> int:
        return self._log.dropped if self._log else 0

    def _emit(self, data: bytes, final: bool = False) -> None:
        if self._log and data:
            self._log.write(data)
        self._keep(self._decoder.decode(data, final))

    def _keep(self, text: str) -> None:
        if len(text) >= self.limit:  # a big chunk alone fills the tail: no join needed
            self.dropped_chars += self._held + len(text) - self.limit
            self._chunks, self._held = [text[-self.limit :]], self.limit
            return
        self._chunks.append(text)
        self._held += len(text)
        if self._held > 2 * self.limit:
            self._compact()

    def _compact(self) -> None:
        if self._held <= self.limit:
            return
        joined = "".join(self._chunks)
        cut = len(joined) - self.limit
        self.dropped_chars += cut
        self._chunks = [joined[cut:]]
        self._held = self.limit


class _CappedLog:
    """An append-only log held near ``cap`` bytes by rewriting it as its newest half."""

    def __init__(self, path: Path, cap: int | None) -> None:
        self.path = path
        self.cap = cap
        self.dropped = 0
        self._marker_len = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "wb")  # noqa: SIM115 - held open across feeds
        self._size = 0

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()  # readers follow it live (`octopoid web`'s log tail)
        self._size += len(data)
        if self.cap is not None and self._size > self.cap:
            self._keep_tail()

    def _keep_tail(self) -> None:
        """Rewrite the log as a marker plus its newest half, streaming (bounded memory)."""
        self._file.flush()
        start = self._size - max(self.cap // 2, 1)
        tmp = temp_path_for(self.path)
        with open(self.path, "rb") as old, open(tmp, "wb") as new:
            old.seek(start)
            head = old.read(4096)
            skip = head.find(b"\n") + 1  # start on a whole line when one is near
            while skip < len(head) and (head[skip] & 0xC0) == 0x80:
                skip += 1  # never start on a UTF-8 continuation byte
            kept = self._size - start - skip
            self.dropped += self._size - self._marker_len - kept
            marker = f"[...octopoid dropped the first {self.dropped} bytes of this output...]\n"
            new.write(marker.encode())
            new.write(head[skip:])
            while chunk := old.read(1 << 20):
                new.write(chunk)
            new.flush()
            os.fsync(new.fileno())
        self._file.close()
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self._file = open(self.path, "ab")  # noqa: SIM115 - held open across feeds
        self._marker_len = len(marker.encode())
        self._size = self._marker_len + kept

    def close(self) -> None:
        self._file.close()


def read_since(path: Path, after: int | None, limit: int) -> tuple[str, int]:
    """A growing text file (an attempt's live log) after byte ``after`` (None, or past its
    end as a file cut back to its tail: its last ``limit`` bytes), at most ``limit`` bytes
    of it, and the offset to read from next; ("", 0) while there is no file. A character
    cut at the end waits for the next read: followers append, never re-read."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - limit) if after is None or after > size else after
            f.seek(start)
            data = f.read(limit)
    except (FileNotFoundError, IsADirectoryError):
        return "", 0
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data)
    return text, start + len(data) - len(decoder.getstate()[0])

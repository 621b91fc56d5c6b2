"""Wake the scheduler the moment a task file lands in a folder (inotify), not at its next poll.

The folder store needs no help from its writers: the kernel reports every name created or
moved into ``incoming/``. Linux only; elsewhere (or without inotify) nothing is watched
and the scheduler's poll of the folders' mtimes is all there is.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("octopoid.scheduler")

IN_CREATE = 0x100
IN_MOVED_TO = 0x80
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
READ_BYTES = 64 * 1024


def watch_folder(folder: Path, on_new: Callable[[str], None]) -> Callable[[], None] | None:
    """Call ``on_new(name)`` (from a thread of its own) for each visible name created in or
    moved into ``folder`` (dot-files are temp files: no task yet); returns a function that
    stops watching, or None where inotify is not to be had."""
    fd = _inotify_fd(folder)
    if fd is None:
        return None
    stop_read, stop_write = os.pipe()
    thread = threading.Thread(
        target=_relay, args=(fd, stop_read, on_new), name="octopoid-wakeup", daemon=True
    )
    thread.start()

    def stop() -> None:
        os.write(stop_write, b"x")
        thread.join()
        for end in (fd, stop_read, stop_write):
            os.close(end)

    return stop


def _inotify_fd(folder: Path) -> int | None:
    if not sys.platform.startswith("linux") or not folder.is_dir():
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        log.warning("no inotify (%s): new tasks wait for the poll", os.strerror(ctypes.get_errno()))
        return None
    if libc.inotify_add_watch(fd, os.fsencode(folder), IN_CREATE | IN_MOVED_TO) < 0:
        log.warning("cannot watch %s: %s", folder, os.strerror(ctypes.get_errno()))
        os.close(fd)
        return None
    return fd


def _relay(fd: int, stop_read: int, on_new: Callable[[str], None]) -> None:
    while True:
        ready, _, _ = select.select([fd, stop_read], [], [])
        if stop_read in ready:
            return
        with contextlib.suppress(BlockingIOError):
            for name in _names(os.read(fd, READ_BYTES)):
                if not name.startswith("."):
                    on_new(name)


def _names(events: bytes) -> list[str]:
    """The names in a buffer of inotify events."""
    out, at = [], 0
    while at < len(events):
        _wd, _mask, _cookie, length = EVENT.unpack_from(events, at)
        at += EVENT.size
        out.append(os.fsdecode(events[at : at + length].rstrip(b"\0")))
        at += length
    return out

"""Cross-process file locks that a process may take again while it holds them.

A ``FileMutex`` is an ``flock`` on a file. Taking it again in the same thread only counts
up (so a quarantine inside a move, or a reject inside an accept, never deadlocks against
its own caller), other threads wait on an in-process lock first, and other processes wait
on the kernel lock, which the kernel drops when a holder dies. After locking, the holder
checks the path still names the file it locked, so a lock file may be deleted while held
(``remove``) without two processes ending up holding different files of the same name.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

_registry_guard = threading.Lock()
_registry: dict[str, _Held] = {}


class _Held:
    """One lock path's state in this process: its thread lock, depth and open file."""

    def __init__(self) -> None:
        self.thread_lock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None


def _held(path: str) -> _Held:
    with _registry_guard:
        held = _registry.get(path)
        if held is None:
            held = _registry[path] = _Held()
        return held


def _lock_fd(path: str, blocking: bool) -> int | None:
    """Open and flock ``path``; None when ``blocking`` is False and someone else holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder before us removed the file: lock the new one


class FileMutex:
    """An exclusive lock on ``path``, reentrant per thread, across processes."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; with ``blocking`` False, return False at once if it is taken."""
        held = _held(self.path)
        if not held.thread_lock.acquire(blocking):
            return False
        if held.depth == 0:
            try:
                fd = _lock_fd(self.path, blocking)
            except BaseException:
                held.thread_lock.release()
                raise
            if fd is None:
                held.thread_lock.release()
                return False
            held.fd = fd
        held.depth += 1
        return True

    def release(self, remove: bool = False) -> None:
        """Let go once; the last release unlocks (and, with ``remove``, deletes the file)."""
        held = _held(self.path)
        held.depth -= 1
        if held.depth == 0:
            fd, held.fd = held.fd, None
            if remove:
                with suppress(FileNotFoundError):
                    os.unlink(self.path)
            os.close(fd)  # closing the last descriptor drops the flock
        held.thread_lock.release()

    @property
    def depth(self) -> int:
        """How many times this process holds the lock now (0: not at all)."""
        return _held(self.path).depth

    def note(self, text: str) -> None:
        """Say what the holder is doing, for anyone who finds the lock taken."""
        fd = _held(self.path).fd
        if fd is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, text.encode("utf-8"), 0)

    def read_note(self) -> str:
        try:
            return Path(self.path).read_text(encoding="utf-8", errors="replace").strip()
        except FileNotFoundError:
            return ""

    def __enter__(self) -> FileMutex:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextmanager
def holding(path: Path | str, remove: bool = False) -> Iterator[FileMutex]:
    """``with holding(path):`` — the lock for the block; ``remove`` deletes the file after."""
    mutex = FileMutex(path)
    mutex.acquire()
    try:
        yield mutex
    finally:
        mutex.release(remove=remove)

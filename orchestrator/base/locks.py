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
from collections import OrderedDict
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
        self.fd: int | None = None  # open while held; kept open after (``idle_fd``) to reuse
        self.idle_fd: int | None = None
        self.pid = os.getpid()


def _held(path: str) -> _Held:
    with _registry_guard:
        held = _registry.get(path)
        if held is None or held.pid != os.getpid():  # a forked child starts afresh
            held = _registry[path] = _Held()
        return held


def _lock_fd(path: str, blocking: bool, reuse: int | None = None) -> int | None:
    """Open (or ``reuse`` an open descriptor of) ``path`` and flock it; None when
    ``blocking`` is False and someone else holds it. Opening costs more than locking
    (creating an inode ~0.5 ms on some disks), so a lock kept for reuse is opened once."""
    while True:
        if reuse is None:
            reuse = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fd, reuse = reuse, None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        with suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)  # the holder before us removed the file: lock the new one


def try_flock(path: str | Path) -> int | None:
    """An ``flock`` on ``path`` (made if missing) held on a descriptor of its own until it
    is closed (or the process dies), or None when another holds it: a lock that marks a
    live process (the scheduler, a port range)."""
    return _lock_fd(str(path), blocking=False)


MAX_IDLE = 128  # unlocked descriptors kept open for reuse, per process (the rest are closed)
_idle: OrderedDict[str, None] = OrderedDict()


def _keep_idle(path: str, held: _Held, fd: int) -> None:
    """Keep ``fd`` open for the next acquire of ``path``, closing the least recently used
    beyond ``MAX_IDLE`` (task locks are many; a long-running scheduler must not leak fds)."""
    held.idle_fd = fd
    with _registry_guard:
        _idle[path] = None
        _idle.move_to_end(path)
        while len(_idle) > MAX_IDLE:
            old, _ = _idle.popitem(last=False)
            other = _registry.get(old)
            if other is not None and other.idle_fd is not None:
                os.close(other.idle_fd)
                other.idle_fd = None


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
            with _registry_guard:  # _keep_idle may close idle descriptors from other threads
                idle, held.idle_fd = held.idle_fd, None
                _idle.pop(self.path, None)
            try:
                fd = _lock_fd(self.path, blocking, idle)
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
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                _keep_idle(self.path, held, fd)
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

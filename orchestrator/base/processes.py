"""Which exact process holds a claim, and how to end everything an attempt started.

A PID alone names a process only until it is reused (or the machine reboots), so a claim
records the PID with the process's start time (``/proc/<pid>/stat``) and the boot id.
A runner carries its claim's ``OCTOPOID_CLAIM_TOKEN`` in its environment, and everything
its attempt starts carries ``OCTOPOID_TASK_ID`` and ``OCTOPOID_CLAIM_MARK`` (a digest of
the token: the agent never sees the token itself), so the processes of a claim can be
found and killed even after their runner died and they were re-parented, or left their
process group. Linux only; elsewhere a PID check is all there is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import NamedTuple

TOKEN_ENV = "OCTOPOID_CLAIM_TOKEN"
MARK_ENV = "OCTOPOID_CLAIM_MARK"
TASK_ENV = "OCTOPOID_TASK_ID"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PROC = "/proc"


@cache
def boot_id() -> str:
    """This boot of this machine (a reboot makes every recorded PID meaningless)."""
    try:
        with open(f"{PROC}/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


HOST_ENV = "OCTOPOID_HOST"


@cache
def hostname() -> str:
    """This machine's name in claims; ``OCTOPOID_HOST`` overrides it where two machines
    could share one (containers from one image, or two "machines" on one box in tests)."""
    import socket  # ~3 ms for this name alone: only judging or making a claim asks it

    return os.environ.get(HOST_ENV) or socket.gethostname()


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot; None if there is no such process."""
    try:
        fields = _stat_fields(pid)
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return 0 if _pid_exists(pid) else None  # no /proc here: a PID check is all we have
    if fields[0] in (b"Z", b"X"):
        return None  # exited, only waiting to be reaped
    return int(fields[19])  # field 22 of stat; fields[0] is field 3 (state)


def _stat_fields(pid: int | str) -> list[bytes]:
    """``/proc/<pid>/stat`` from field 3 (the state) on: after the name's last ``)``, since
    a name may hold one."""
    with open(f"{PROC}/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProcessId(NamedTuple):
    """A process named so that a reused PID or a reboot cannot pass for it."""

    host: str
    boot: str
    pid: int
    start: int

    @classmethod
    def of(cls, pid: int | None = None) -> ProcessId:
        pid = os.getpid() if pid is None else pid
        return cls(hostname(), boot_id(), pid, start_ticks(pid) or 0)

    def alive(self) -> bool:
        """True while this very process runs (on this host; elsewhere: unknowable, False)."""
        local = self.host == hostname() and self.boot == boot_id()
        return local and start_ticks(self.pid) == self.start

    def headers(self) -> dict[str, object]:
        return {"HOST": self.host, "BOOT_ID": self.boot, "PID": self.pid, "PID_START": self.start}

    @classmethod
    def from_headers(cls, h: dict[str, str]) -> ProcessId | None:
        pid = h.get("PID", "")
        if not pid.isdigit():
            return None
        start = h.get("PID_START", "")
        return cls(h.get("HOST", ""), h.get("BOOT_ID", ""), int(pid), int(start or 0))


def owner_tag() -> str:
    """This process as part of a name (``<pid>.<start>``): a folder named with it is known
    as this process's from the instant it exists, with no owner file to write after."""
    return f"{os.getpid()}.{start_ticks(os.getpid()) or 0}"


def leftovers(folder: Path, prefix: str) -> list[Path]:
    """What processes now gone made in ``folder``, named ``prefix`` + ``owner_tag()`` + ``-``."""
    found = []
    for path in folder.glob(f"{prefix}*"):
        pid, _, start = path.name.removeprefix(prefix).split("-", 1)[0].partition(".")
        if not (pid.isdigit() and start.isdigit() and start_ticks(int(pid)) == int(start)):
            found.append(path)
    return found


def in_new_session_dying_with_parent() -> Callable[[], None]:
    """A ``preexec_fn``: a session (and process group) of its own, killed if we die.
    ``ctypes`` is loaded here, in the parent, so a command that starts no process never
    pays for it, and the child after the fork only calls what is loaded."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def preexec() -> None:
        os.setsid()
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return preexec


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux), so none escapes by double-forking."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir(PROC) if os.path.isdir(PROC) else ():
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if int(_stat_fields(name)[1]) == pid:
                out.append(int(name))
    return out


def kill_descendants() -> int:
    """SIGKILL every descendant of this process; how many were found."""
    root = os.getpid()
    killed = 0
    for _ in range(50):  # a fork storm can add children while we look: look again
        found, todo = [], _children_of(root)
        while todo:
            child = todo.pop()
            found.append(child)
            todo.extend(_children_of(child))
        if not found:
            break
        killed += _sigkill(found)
        _reap_children()
    return killed


def _sigkill(pids: list[int]) -> int:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def _reap_children() -> None:
    """Collect exited children (ours, or orphans we adopted as subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def claim_mark(token: str) -> str:
    """What marks an attempt's processes: a digest of its claim token, not the token."""
    import hashlib  # OpenSSL's start: paid by the commands that mark or find processes

    return hashlib.sha256(token.encode()).hexdigest()[:32]


def forked_dir() -> Path:
    """Where a runner forked by a fork server (not exec'd: its /proc environ is the
    server's) writes the marks its environment holds, so the scans below still find it."""
    return Path(f"/tmp/octopoid-forked-{os.getuid()}")


def note_forked(env: dict[str, str]) -> Path:
    """In a forked runner, before anything else: its marks (every ``OCTOPOID_`` variable)
    and its start time, so a later process with the same pid is not taken for it; the
    note's path, for the runner to remove as it exits."""
    folder = forked_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    if not is_private(folder):
        raise OSError(f"{folder} is not this user's own private folder")
    marks = [f"{k}={v}" for k, v in env.items() if k.startswith("OCTOPOID_")]
    staged, note = folder / f".{os.getpid()}.new", folder / str(os.getpid())
    staged.write_bytes("\0".join([str(start_ticks(os.getpid())), *marks]).encode())
    staged.replace(note)
    return note


def is_private(folder: Path) -> bool:
    """A real folder (not a link) of this user that nobody else may enter: notes (or port
    locks) in a folder another user made could name our processes (hold our ports)."""
    try:
        found = os.lstat(folder)
    except OSError:
        return False
    private = found.st_uid == os.getuid() and found.st_mode & 0o077 == 0
    return stat.S_ISDIR(found.st_mode) and private


def _forked_marks() -> dict[str, list[bytes]]:
    """The marks of live forked runners, by pid (stale notes, of runners gone, removed)."""
    found: dict[str, list[bytes]] = {}
    if not is_private(forked_dir()):
        return found
    names = os.listdir(forked_dir())
    for name in names:
        if not name.isdigit():
            continue
        note = forked_dir() / name
        with contextlib.suppress(OSError, ValueError):
            started, *marks = note.read_bytes().split(b"\0")
            if str(start_ticks(int(name))) == started.decode():
                found[name] = marks
                continue
        with contextlib.suppress(OSError):
            note.unlink()
    return found


def marked_processes(*alternatives: dict[str, str], **marks: str) -> list[int]:
    """PIDs (not ours) whose environment holds every ``KEY=value`` of ``marks`` (or of any
    one of ``alternatives``): an attempt's processes, forked runners included."""
    choices = [[f"{k}={v}".encode() for k, v in m.items()] for m in (*alternatives, marks) if m]
    choices = [needles for needles in choices if all(n.split(b"=", 1)[1] for n in needles)]
    forked = _forked_marks() if choices else {}
    out = []
    for name in os.listdir(PROC) if choices else ():
        if not name.isdigit() or int(name) == os.getpid():
            continue
        env = environment_of(name, forked)
        if any(all(needle in env for needle in needles) for needles in choices):
            out.append(int(name))
    return out


def environment_of(pid: int | str, forked: dict[str, list[bytes]] | None = None) -> list[bytes]:
    """A process's ``KEY=value`` entries as the scans see them: its /proc environ, and for
    a forked runner the marks it noted (``forked``: notes already read)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return []
    notes = _forked_marks() if forked is None else forked
    return env + notes.get(str(pid), [])


def kill_marked(*alternatives: dict[str, str], rounds: int = 20, **marks: str) -> int:
    """SIGKILL every process carrying ``marks`` (or any of ``alternatives``) until none is
    left; how many there were."""
    killed = 0
    for _ in range(rounds):
        pids = marked_processes(*alternatives, **marks)
        if not pids:
            break
        killed += _sigkill(pids)
        time.sleep(0.02)
    return killed


def kill_claim_processes(token: str) -> int:
    """SIGKILL every process of the attempt that holds claim ``token``: its runner's
    helpers (the token) and its agent's (the mark)."""
    return kill_marked({TOKEN_ENV: token}, {MARK_ENV: claim_mark(token)})


def adopted_children(runners: set[int]) -> tuple[list[int], list[int]]:
    """(orphans, exited) among this process's children that are not ``runners``.

    This process is a subreaper: what a dead runner's attempt left is re-parented here.
    Orphans are live children it did not start, outside every runner's session (a runner's
    own helpers, a git command, finish their work); exited ones wait to be reaped."""
    orphans, exited = [], []
    for pid in _children_of(os.getpid()):
        if pid in runners:
            continue
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        if fields[0] in (b"Z", b"X"):
            exited.append(pid)
        elif int(fields[3]) not in runners:  # field 6: the session id
            orphans.append(pid)
    return orphans, exited


def reap(pids: list[int]) -> None:
    """Collect these exited children (never any other: a runner's exit is its Popen's)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def wait_gone(owner: ProcessId, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``owner`` to exit; True once it has."""
    deadline = time.monotonic() + seconds
    while owner.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True

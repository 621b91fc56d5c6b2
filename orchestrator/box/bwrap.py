"""The bubblewrap command line around an attempt's processes, and whether bwrap works here.

What a box sees, hides and may write: docs/security.md, "``sandbox: bwrap``: walls".
``command_line`` is a pure function of a ``Mounts``; ``probe()`` runs a real box (cached).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

#: Where to find bwrap when it is not on PATH as ``bwrap`` (or to point at another one).
BWRAP_ENV = "OCTOPOID_BWRAP"
#: Always replaced by an empty tmpfs: people's files, temp folders, and /run (sockets of
#: the user's database, docker, ssh-agent) that a read-only view would still let it reach.
#: /dev/shm is hidden anyway (the box's /dev is new); named here, a program or an exposed
#: path under it is bound into the box as one under /tmp is, instead of missing there.
HIDDEN = (
    Path("/home"), Path("/root"), Path("/tmp"), Path("/var/tmp"), Path("/run"), Path("/dev/shm")
)  # fmt: skip
#: Inside every box: the channel folder, the user's git objects (the clone's alternates).
CHANNEL_INSIDE = Path("/run/octopoid")
OBJECTS_INSIDE = Path("/run/octopoid-objects")
PROBE_TTL_SECONDS = 60.0  # a bwrap installed (or a sysctl changed) is noticed this soon
PROBE_TIMEOUT_SECONDS = 10.0


class Mounts(NamedTuple):
    """What one box is made of (host paths, absolute and resolved)."""

    workspace: Path  # the task's files: the only writable host folder
    inside: Path  # where the workspace appears in the box (the project's own path)
    hide: tuple[Path, ...] = ()  # beyond HIDDEN: $HOME, the project checkout
    read_only: tuple[tuple[Path, Path], ...] = ()  # (host, inside): tools, objects, channel
    network: bool = True  # share the host's network (False: loopback of its own only)
    writable: bool = True  # False: the workspace too is read-only (reading a clone back)
    binds: tuple[tuple[Path, Path], ...] = ()  # (host, inside) writable: a set-up's caches


def _asked_for() -> str:
    return os.environ.get(BWRAP_ENV) or "bwrap"


def find_bwrap() -> str | None:
    return shutil.which(_asked_for())


def command_line(bwrap: str, mounts: Mounts, userns: bool = True) -> list[str]:
    """The bwrap argv (to which the command is appended) for ``mounts``.

    Mount operations are ordered by the depth of where they land, so a bind inside a
    hidden folder (a toolchain under ``/root``, the workspace under ``/tmp``) comes after
    the tmpfs that hides its parent, and the workspace after anything above it.
    """
    argv = [bwrap, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "octopoid"]
    if userns:  # no capability to undo a mount, and no namespace in which to get one back
        argv += ["--unshare-user", "--disable-userns"]
    if not mounts.network:
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    ops: list[tuple[int, int, list[str]]] = []
    for path in dict.fromkeys((*HIDDEN, *mounts.hide)):
        ops.append((len(path.parts), 0, ["--tmpfs", str(path)]))
    for host, inside in mounts.read_only:
        ops.append((len(inside.parts), 1, ["--ro-bind", str(host), str(inside)]))
    for host, inside in mounts.binds:
        ops.append((len(inside.parts), 1, ["--bind", str(host), str(inside)]))
    bind = "--bind" if mounts.writable else "--ro-bind"
    ops.append((len(mounts.inside.parts), 1, [bind, str(mounts.workspace), str(mounts.inside)]))
    for _, _, op in sorted(ops, key=lambda o: (o[0], o[1])):
        argv += op
    return [*argv, "--chdir", str(mounts.inside), "--"]


def is_hidden(path: Path, hidden: tuple[Path, ...]) -> bool:
    return any(path == h or h in path.parents for h in hidden)


#: (the name asked for, where it was found) -> (when, why not, userns)
_probes: dict[tuple[str, str | None], tuple[float, str | None, bool]] = {}
_probing = threading.Lock()  # one probe at a time: a caller waits for one under way


def probe_ahead() -> None:
    """Start ``probe`` in a thread and return: its box starts while the caller does other
    work (`octopoid doctor` reads the queue meanwhile), and the caller's own ``probe``
    then waits for that answer instead of running a second box. Never a stale answer: it
    is this process's own probe, made now. For a command's process: one that forks (the
    fork server) would copy the lock held."""
    threading.Thread(target=probe, name="bwrap-probe", daemon=True).start()


def probe(now: float | None = None, margin: float = 0.0) -> tuple[str | None, bool]:
    """(why bwrap cannot run a box here or None, whether user namespaces work), cached
    for ``PROBE_TTL_SECONDS`` per bwrap binary. Tried with a user namespace first: as root
    without one, bwrap still drops every capability (``--cap-drop ALL``). ``margin``:
    probe again already when the answer has less than that left (the fork server keeps
    one fresh for the runners it forks)."""
    with _probing:
        now = time.monotonic() if now is None else now
        bwrap = find_bwrap()
        key = (_asked_for(), bwrap)
        seen = _probes.get(key)
        if seen is not None and now - seen[0] < PROBE_TTL_SECONDS - margin:
            return seen[1], seen[2]
        problem, userns = _run_probe(bwrap)
        _probes[key] = (now, problem, userns)
        return problem, userns


def _run_probe(bwrap: str | None) -> tuple[str | None, bool]:
    if bwrap is None:
        return f"{_asked_for()} is not installed (Debian/Ubuntu: apt-get install bubblewrap)", False
    mounts = Mounts(Path("/"), Path("/run/octopoid-probe"), writable=False)
    error = ""
    for userns in (True, False):
        argv = [*command_line(bwrap, mounts, userns), "true"]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{bwrap} could not be run: {exc}", False
        if done.returncode == 0:
            return None, userns
        error = " ".join(done.stderr.decode(errors="replace").split())[:300]
    return f"{bwrap} cannot make a sandbox here: {error or 'it failed'}", False

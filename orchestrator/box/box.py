"""A box: where an attempt's processes run, what they see of the host, and their environment.

With ``sandbox: bwrap`` a box is a bwrap command line (``bwrap.py``) around every process
octopoid starts for the attempt; with ``sandbox: none`` it is the bare folder. Either way
the processes get the same environment: the host's without octopoid's own variables or the
store's credentials, the agent's ``env`` from agents.yaml, the attempt's ``OCTOPOID_*``
values, and ``octopoid`` on PATH as the channel's client (``channel.py``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..base import forge_token
from ..base.processes import MARK_ENV, TASK_ENV, claim_mark
from ..model.tasks import Task, task_label
from .bwrap import CHANNEL_INSIDE, Mounts, command_line, is_hidden

if TYPE_CHECKING:  # the proxy is the runner's, made by walled.py where a box needs it
    from .proxy import NetworkProxy

#: Host variables a box never inherits: octopoid's own (its root, the database URL and
#: its wait, the web token) and libpq's (a password, a password file, a service file); nor
#: the forge's token (``forge_token.token_vars``).
SCRUBBED_PREFIXES = ("OCTOPOID_", "PG")
#: Inherited with ``sandbox: none`` only: they point at host sockets a box cannot reach.
HOST_SOCKET_VARS = ("SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")
TEMP_VARS = ("TMPDIR", "TMP", "TEMP")
COMMITTER_VARS = ("GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")
CLIENT_NAME = "octopoid"
CLIENT_SCRIPT = Path(__file__).with_name("client.py")
CHANNEL_ENV = "OCTOPOID_CHANNEL"
SOCKET_NAME = "channel.sock"
#: The committer of every commit an agent makes: provenance in `git log`, and how the
#: ``sandbox: none`` containment tells the agent's commits from the user's.
COMMITTER_NAME = "octopoid agent"


def committer_email(task_id: str) -> str:
    return f"{task_label(task_id)}@agents.octopoid.invalid"


@dataclass
class Box:
    """Where processes of one attempt run: ``wrap`` an argv, start it from ``cwd`` (a host
    folder) with ``env``; it works in ``workspace`` (the path as it sees it)."""

    workspace: Path
    cwd: Path
    env: dict[str, str]
    prefix: list[str] = field(default_factory=list)  # bwrap ... --, or nothing
    channel: Path | None = None  # the channel folder (as the box sees it)
    channel_host: Path | None = None  # the same folder on the host
    proxy: NetworkProxy | None = None  # its way out, with ``network: allow``
    services: list[str] = field(default_factory=list)  # their launcher (setup.py), or none

    @property
    def sandboxed(self) -> bool:
        return bool(self.prefix)

    def refusals(self) -> list[str]:
        """The destinations its network refused so far, a line each (``proxy.py``)."""
        return self.proxy.refusals() if self.proxy is not None else []

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` in the box, after the workspace's services have started."""
        return [*self.prefix, *self.services, *argv]

    def carry(self, file: Path) -> Path:
        """Make ``file`` (one of octopoid's scripts) readable in the box; where it is there."""
        assert self.channel_host is not None and self.channel is not None
        lib = self.channel_host / "lib"
        lib.mkdir(exist_ok=True)
        shutil.copyfile(file, lib / file.name)
        return self.channel / "lib" / file.name


def environment(
    host: dict[str, str],
    agent_env: dict[str, str],
    task: Task,
    token: str,
    values: dict[str, str],
    sandboxed: bool,
    author: tuple[str, str] | None = None,
) -> dict[str, str]:
    """The environment of every process of an attempt (see the module docstring).

    Its commits' committer is the attempt (``committer_email``: a committer set in the host's
    environment does not hide it, only the agent's own ``env`` may); their author is yours
    as the host's environment or ``author`` (your repository's identity: a box's private
    home has no git config) says."""
    drop = (*HOST_SOCKET_VARS, *TEMP_VARS, *COMMITTER_VARS) if sandboxed else COMMITTER_VARS
    drop = (*drop, *forge_token.token_vars())
    env = {k: v for k, v in host.items() if not k.startswith(SCRUBBED_PREFIXES) and k not in drop}
    env.update(GIT_COMMITTER_NAME=COMMITTER_NAME, GIT_COMMITTER_EMAIL=committer_email(task.id))
    env.update(agent_env)
    env.update(
        {TASK_ENV: task.label, MARK_ENV: claim_mark(token)},
        OCTOPOID_NOTES_ID=task.label,
        OCTOPOID_ATTEMPT=str(task.attempts),
        OCTOPOID_SANDBOX="bwrap" if sandboxed else "none",
        **values,
    )
    if author is not None:
        env.setdefault("GIT_AUTHOR_NAME", author[0])
        env.setdefault("GIT_AUTHOR_EMAIL", author[1])
    if sandboxed:
        env["TMPDIR"] = "/tmp"
    return env


def with_code(env: dict[str, str], clone: Path, inside: Path) -> dict[str, str]:
    """The task's code first on Python's path: a ``src/`` layout's ``src`` (seen at
    ``inside``) before anything the environment names, so a check imports the clone's
    package, not one installed from elsewhere. A flat layout needs nothing: its top is
    the working directory."""
    if not (clone / "src").is_dir() or (clone / "src").is_symlink():
        return env
    found = env.get("PYTHONPATH")
    path = str(inside / "src") + (f"{os.pathsep}{found}" if found else "")
    return {**env, "PYTHONPATH": path}


def with_client(env: dict[str, str], channel: Path) -> dict[str, str]:
    """``octopoid`` on PATH is the channel's client; ``OCTOPOID_CHANNEL`` its socket."""
    path = f"{channel / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    return {**env, "PATH": path, CHANNEL_ENV: str(channel / SOCKET_NAME)}


def write_client(channel_host: Path) -> None:
    """``bin/octopoid`` in the channel folder: the client (``client.py``, copied beside it)
    run by this Python, isolated (``-I -S``: no site-packages, no PYTHON* variables) so it
    works in any box, wherever the box shows the folder."""
    (channel_host / "bin").mkdir(exist_ok=True)
    (channel_host / "lib").mkdir(exist_ok=True)
    shutil.copyfile(CLIENT_SCRIPT, channel_host / "lib" / CLIENT_SCRIPT.name)
    script = channel_host / "bin" / CLIENT_NAME
    script.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -I -S "${{0%/bin/*}}/lib/{CLIENT_SCRIPT.name}" "$@"\n'
    )
    script.chmod(0o755)


def exposures(
    needs: Iterable[str],
    extra: Iterable[str],
    hidden: tuple[Path, ...],
    forbidden: tuple[Path, ...] = (),
) -> list[Path]:
    """Host paths a box must see read-only although they lie where it sees nothing: this
    Python (the client and tool scripts run on it), what the backend ``needs`` (a
    program's folder and, for a script, its interpreter's installation; a file the program
    reads, itself), what ``sandbox.expose`` names, and where ``/etc/resolv.conf`` points
    (systemd-resolved keeps it under /run). Never one of ``forbidden`` or anything in it
    (octopoid's runtime, the user's .git): a folder above them is shown with the workspace
    bound over the checkout."""
    python = Path(os.path.realpath(sys.executable)).parent.parent
    wanted = [Path(sys.prefix), Path(sys.base_prefix), python]
    for need in needs:
        wanted += _needed_paths(need)
    wanted += [Path(p).expanduser() for p in extra]
    wanted.append(Path("/etc/resolv.conf").resolve())
    out: list[Path] = []
    for path in wanted:
        for p in (path.absolute(), Path(os.path.realpath(path))):
            inside = any(p == f or f in p.parents for f in forbidden)
            if p.exists() and is_hidden(p, hidden) and not inside and p not in out:
                out.append(p)
    return out


def _needed_paths(need: str) -> list[Path]:
    """What a box must see for ``need``: a file that is not a program, itself; a program
    (a name on PATH, or an executable), its folder (as named and resolved) and, when it
    starts with ``#!``, its interpreter's installation (``#!/usr/bin/env node``: node's)."""
    found = need if "/" in need else shutil.which(need)
    if found is None or not os.path.isfile(found):
        return []
    path = Path(found).absolute()
    real = Path(os.path.realpath(path))
    if not os.access(real, os.X_OK):
        return [path, real]
    paths = [path.parent, real.parent]
    interpreter = interpreter_of(real)
    located = shutil.which(interpreter) if interpreter else None
    if located:
        paths.append(Path(os.path.realpath(located)).parent.parent)
    return paths


def interpreter_of(program: Path) -> str | None:
    """The interpreter a script's ``#!`` line names (``#!/usr/bin/env node``: ``node``),
    or None for a binary (or a file that cannot be read)."""
    try:
        with open(program, "rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    if not words:
        return None
    return words[1] if words[0] == "/usr/bin/env" and len(words) > 1 else words[0]


def program_problem(
    program: str, cwd: Path, path: str | None, unseen: tuple[Path, ...] = ()
) -> str | None:
    """Why ``program`` cannot start from ``cwd`` with ``path`` (to follow "it": "is not on
    PATH", "does not exist", ...), or None: found, an executable file, its ``#!``
    interpreter found too, and not inside one of ``unseen`` (where its box sees nothing)."""
    if "/" in program:
        found: str | None = str(cwd / program)  # an absolute program stays itself
        if not os.path.exists(found):
            return "does not exist"
    elif (found := shutil.which(program, path=path)) is None:
        return "is not on PATH"
    if not os.path.isfile(found) or not os.access(found, os.X_OK):
        return "is not an executable file"
    real = Path(os.path.realpath(found))
    hidden = next((p for p in unseen if p == real or p in real.parents), None)
    if hidden is not None:
        return f"is inside {hidden}, which no box is shown"
    interpreter = interpreter_of(real)
    if interpreter and not shutil.which(interpreter, path=path):
        return f"needs {interpreter!r} (its #! line), which is not found"
    return None


def bwrap_box(
    bwrap: str,
    userns: bool,
    workspace: Path,
    inside: Path,
    hide: tuple[Path, ...],
    read_only: tuple[tuple[Path, Path], ...],
    env: dict[str, str],
    channel_host: Path | None,
    *,
    network: str,
    proxy: NetworkProxy | None = None,
    binds: tuple[tuple[Path, Path], ...] = (),
    folder: Path | None = None,
) -> Box:
    """A box behind bwrap whose workspace appears at ``inside`` and the channel folder (if
    any, else the proxy's, else ``folder``) at /run/octopoid. ``network`` is its mode
    (``netpolicy.py``): ``open`` shares the host's; otherwise it has its own, and with
    ``proxy`` its bridge runs first and its program reaches out only through the runner.
    ``binds`` are writable beside the workspace (a set-up's caches)."""
    folder = channel_host or (proxy.folder if proxy is not None else None) or folder
    if folder is not None:
        read_only = (*read_only, (folder, CHANNEL_INSIDE))
    if channel_host is not None:
        env = with_client(env, CHANNEL_INSIDE)
    mounts = Mounts(workspace, inside, hide, read_only, network == "open", binds=binds)
    argv = command_line(bwrap, mounts, userns)
    if proxy is not None:
        argv += proxy.bridge(CHANNEL_INSIDE)
    channel = CHANNEL_INSIDE if channel_host is not None else None
    return Box(inside, workspace, env, argv, channel, channel_host, proxy)


def bare_box(workspace: Path, env: dict[str, str], channel_host: Path) -> Box:
    """``sandbox: none``: the folder itself; the channel at its host path."""
    env = with_client(env, channel_host)
    return Box(workspace, workspace, env, [], channel_host, channel_host)

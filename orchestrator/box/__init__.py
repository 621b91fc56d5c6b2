"""Where an attempt runs: walls around the agent and around every check that runs its code.

``sandbox: bwrap`` (the default, config.yaml): each attempt works in its own clone behind
bubblewrap and reaches octopoid only through its channel (``walled.py``). ``sandbox:
none``: the old worktree with best-effort containment, for machines where bubblewrap
cannot run; agents are then trusted with the user's account (``trusted.py``). Where
``bwrap`` is configured but cannot run, no agent starts (``problem``).

Roles ask for a workspace (``prepare``) and never build a box themselves.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import config
from ..base import netmodes
from ..base.fsutil import remove_tree
from ..base.lazy import lazy_import
from ..base.processes import leftovers
from ..model.exceptions import ConfigError
from . import bwrap

if TYPE_CHECKING:
    from ..model.tasks import Task
    from .box import Box
    from .channel import Tools
    from .workspace import Workspace

# What makes and checks workspaces is imported when an attempt needs it: `octopoid status`
# asks only whether there are walls.
containment = lazy_import("orchestrator.box.containment")
trusted = lazy_import("orchestrator.box.trusted")
walled = lazy_import("orchestrator.box.walled")
workspace = lazy_import("orchestrator.box.workspace")


def mode() -> str:
    return config.load_config()["sandbox"]["mode"]


def problem() -> str | None:
    """Why no agent may start because of the sandbox (bwrap configured but unusable)."""
    if mode() == "none":
        return None
    why, _ = bwrap.probe()
    if why is None:
        return None
    return (
        f"sandbox unavailable: {why}. No agent starts until bubblewrap works here, or "
        "config.yaml says `sandbox: none` (agents then run unsandboxed, trusted with your account)"
    )


def probe_ahead() -> None:
    """With walls configured, bwrap's probe started now in a thread (``bwrap.probe_ahead``)
    for a face that asks ``problem`` or ``describe`` after other work (`octopoid doctor`)."""
    if config.problem() is None and mode() != "none":
        bwrap.probe_ahead()


def describe() -> dict[str, Any]:
    """What every face says about the walls: mode, whether agents can start, whose
    network is open, one line."""
    current = mode()
    why = problem()
    opened = open_networks() if current == "bwrap" else []
    if why is not None:
        line = why
    elif current == "bwrap":
        line = (
            "sandbox: bwrap; each attempt works in its own clone behind bubblewrap and "
            "reaches octopoid only through its channel"
        )
        if opened:
            line += (
                f"; network OPEN for {', '.join(opened)}: they reach this machine's own "
                "services, the network behind it, a cloud's metadata service and the whole "
                "internet, and can send there whatever they read"
            )
    else:
        import getpass  # ~1 ms, for `sandbox: none` only

        line = (
            f"sandbox: none; agents are NOT sandboxed: they run as {getpass.getuser()} and "
            "are trusted with that whole account (the queue, your checkout, your files)"
        )
    return {"mode": current, "usable": why is None, "summary": line, "open": opened}


def open_networks() -> list[str]:
    """The agents (and "the checks") whose box shares this machine's network; none named
    while agents.yaml cannot be read (every face says that first)."""
    cfg = config.load_config()
    try:
        agents = config.load_agents()["agents"]
    except ConfigError:
        agents = []
    names = [agent["name"] for agent in agents if netmodes.agent_mode(agent, cfg) == "open"]
    return names + (["the checks"] if netmodes.checks_mode(cfg) == "open" else [])


def prepare(
    task: Task,
    agent: dict,
    cfg: dict,
    token: str,
    needs: list[str],
    tools: Tools | None = None,
) -> Workspace:
    """The workspace for one attempt of ``task`` by ``agent``, its box and channel ready.

    ``needs`` are what the backend must see in its box (``Backend.needs``);
    ``token`` the claim's (its digest marks the attempt's processes); ``tools`` are what
    the channel serves (the runner's, made before the box and handed down: the box never
    acts on the queue itself).
    """
    if cfg["sandbox"]["mode"] == "none":
        return trusted.TrustedWorkspace(task, agent, cfg, token, needs, tools)
    return walled.WalledWorkspace(task, agent, cfg, token, needs, tools)


def checks_box(task: Task) -> contextlib.AbstractContextManager[Box]:
    """A box to run ``task``'s checks on its branch now (`octopoid checks`): walled, a fresh
    clone (``walled.review_box``) with the checks' own network (``checks.network``: none
    unless it says) and ports of its own, the host's environment without the agent's ``env``
    (its keys are not the checks'), no channel."""
    import secrets  # ~4 ms: `status` and `agents` describe the sandbox and need none

    token = secrets.token_hex(16)  # no claim: a mark of its own for the check's processes
    if mode() == "none":
        return trusted.checks_box(task, token)
    bwrap.probe_ahead()  # its box starts while the branch is cloned
    return walled.review_box(task, token, walled.CHECKS_PREFIX)


def preview_box(task: Task, folder: Path, token: str) -> contextlib.AbstractContextManager[Box]:
    """A box to serve ``task``'s branch for its reviewer (``preview/daemon.py``), with
    ``folder`` (its relay's) at /run/octopoid: a fresh clone, its set-up, the preview's
    own network (``preview.network``: none unless it says) and ports. With ``sandbox:
    none``, the task's worktree as it is."""
    if mode() == "none":
        return trusted.checks_box(task, token)
    return walled.review_box(task, token, walled.PREVIEW_PREFIX, folder=folder)


def sweep(is_running: Callable[[str], bool]) -> list[str]:
    """What attempts left when their runner died: ``sandbox: none`` snapshots are checked
    (what the agent changed is put back and written into its notes), clones of tasks not
    running, checks clones and channel folders of dead processes removed. One line each."""
    lines = []
    for task_id, attempt, breaches in containment.settle_orphans():
        if breaches:
            lines.append(f"TASK-{task_id} attempt {attempt}: {'; '.join(breaches)}")
    folder = config.get_worktrees_dir()
    clones = [
        path
        for path in sorted(folder.glob("TASK-*"))
        if not _is_worktree(path) and not is_running(path.name.removeprefix("TASK-"))
    ]
    root = config.find_project_root()
    stale = [
        *leftovers(folder, walled.CHECKS_PREFIX),
        *leftovers(folder, walled.PREVIEW_PREFIX),
        *workspace.stale_channel_folders(root),
    ]
    for path in [*clones, *stale]:
        try:
            remove_tree(path)
        except OSError as exc:
            lines.append(f"could not remove {path}: {exc}")
    gone = [path for path in clones if not os.path.lexists(path)]
    lines += [f"removed the clone of {path.name} (its runner is gone)" for path in gone]
    return lines


def _is_worktree(path: Path) -> bool:
    """A ``sandbox: none`` worktree (kept between attempts), not a clone (whatever an agent
    made of its ``.git``)."""
    try:
        return stat.S_ISREG(os.lstat(path / ".git").st_mode)
    except OSError:
        return False


__all__ = [
    "checks_box",
    "describe",
    "mode",
    "open_networks",
    "prepare",
    "preview_box",
    "probe_ahead",
    "problem",
    "sweep",
]

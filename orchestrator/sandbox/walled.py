"""``sandbox: bwrap``: the attempt works in a clone of its own, behind bubblewrap.

The clone (``clone.py``) appears in the box at the project's own path, so what the agent
and the checks run finds its code where it expects it: an editable install of the project
imports the clone, not the user's checkout (which the box cannot see). The agent's
processes die with the box; the work comes back as data (``clone.read_back``); the clone
is removed when the attempt ends. The checks run in a fresh clone of what came back, so
they judge exactly what review will see, not files the agent left uncommitted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config, defaults, git_utils, netpolicy
from ..exceptions import OctopoidError, SandboxError
from ..fsutil import remove_tree
from ..processes import owner_tag
from ..tasks import Task
from . import clone
from .bounds import Bounds, ReadBackRefused, clone_growth, disk_use
from .box import COMMITTER_NAME, Box, bwrap_box, environment, exposures
from .bwrap import HIDDEN, Mounts, command_line, find_bwrap, probe
from .proxy import NetworkProxy
from .workspace import BroughtBack, Workspace, base_for, private_folder

if TYPE_CHECKING:
    import git

CHECKS_PREFIX = ".checks-"
#: This machine's paths every box sees read-only (``os.pathsep``-separated), beside the
#: project's ``sandbox.expose``: config.yaml is shared by every machine, a toolchain's
#: place is not.
EXPOSE_ENV = "OCTOPOID_SANDBOX_EXPOSE"


def _walls() -> tuple[str, bool]:
    """bwrap's path and whether it makes user namespaces; ``SandboxError`` if it cannot run."""
    problem, userns = probe()
    bwrap = find_bwrap()
    if problem is not None or bwrap is None:
        raise SandboxError(f"the sandbox cannot be made: {problem}")
    return bwrap, userns


def _hidden() -> tuple[Path, ...]:
    """What a box must not see besides ``HIDDEN``: the user's home and the checkout."""
    home = Path(os.path.expanduser("~")).resolve()
    return (home, config.find_project_root())


def _author(repo: git.Repo) -> tuple[str, str]:
    """Who authors the agent's commits: the user, as their repository says (a box's home
    has no git config); an anonymous agent when the user has no identity either."""
    return git_utils.user_identity(repo) or (COMMITTER_NAME, "agent@octopoid.invalid")


def _read_only(needs: list[str], expose: list[str], repo: git.Repo) -> tuple:
    """What a box sees read-only beyond the host's visible parts: the tools it runs, what
    ``sandbox.expose`` and this machine's ``OCTOPOID_SANDBOX_EXPOSE`` name, and the user's
    objects; never octopoid's runtime, the user's .git or the checkout as a whole."""
    hidden = (*HIDDEN, *_hidden())
    root = config.find_project_root()
    forbidden = (config.get_orchestrator_dir(), Path(repo.common_dir).resolve())
    here = [p for p in os.environ.get(EXPOSE_ENV, "").split(os.pathsep) if p]
    shown = [(p, p) for p in exposures(needs, [*expose, *here], hidden, forbidden) if p != root]
    return (*shown, *clone.object_mounts(repo))


class WalledWorkspace(Workspace):
    @property
    def clone_path(self) -> Path:
        return git_utils.worktree_for(self.task.id)

    def _make(self, agent: dict, cfg: dict, needs: list[str]) -> None:
        self.bwrap, self.userns = _walls()
        repo = git_utils.open_repo()
        self.base, self.remote, self.remote_problem, self.lease = base_for(self.task)
        base = self.base
        if (self.clone_path / ".git").is_file():  # sandbox: none's worktree, from before
            git_utils.remove_worktree(repo, self.task.id, delete_branch=False)
        with git_utils.repo_admin_lock():
            self.start = git_utils.ensure_branch(repo, self.task.id, base)
        base_sha = git_utils.branch_tip(repo, base)
        clone.make(repo, self.task.id, self.task.branch, base_sha, self.clone_path)
        self.bounds = Bounds.of(cfg)
        self.clone_size = disk_use(self.clone_path, sys.maxsize)
        self.measured = time.monotonic()
        own = agent.get("sandbox") or {}
        expose = [*cfg["sandbox"]["expose"], *(own.get("expose") or [])]
        root = config.find_project_root()
        env = environment(
            dict(os.environ), agent.get("env") or {}, self.task, self.token,
            {"OCTOPOID_WORKTREE": str(root)}, True, _author(repo),
        )  # fmt: skip
        mode, allow = netpolicy.agent_network(agent, cfg, env)
        self.proxy = _proxy(self.channel_host, mode, allow)
        self.box = bwrap_box(
            self.bwrap, self.userns, self.clone_path, root, _hidden(),
            _read_only(needs, expose, repo), env, self.channel_host,
            network=mode, proxy=self.proxy,
        )  # fmt: skip
        self.banner = (
            f"[octopoid] sandbox: bwrap; the agent works in its own clone (seen at {root}), "
            f"network {netpolicy.describe(mode, allow)}; octopoid only through its channel"
        )

    def over_bounds(self) -> str | None:
        """The clone's growth on disk, measured every ``CLONE_CHECK_SECONDS``."""
        if time.monotonic() - self.measured < defaults.CLONE_CHECK_SECONDS:
            return None
        self.measured = time.monotonic()
        return self._grown()

    def _grown(self) -> str | None:
        limit = self.clone_size + self.bounds.clone_bytes
        return clone_growth(disk_use(self.clone_path, limit), self.clone_size, self.bounds)

    def bring_back(self) -> BroughtBack:
        """Read the clone's branch back as data and move the task's branch to it. Never
        raises: what went wrong is a remark, what is beyond a bound is refused (the notes
        are saved after this)."""
        branch = git_utils.branch_for(self.task.id)
        if (grown := self._grown()) is not None:
            return BroughtBack(0, refused=[f"nothing was read back: {grown}"])
        remarks = []
        head = clone.head_of(self.clone_path)
        if head != f"refs/heads/{branch}":
            remarks.append(
                f"the clone's HEAD was on {head or 'something unreadable'}, not {branch}: "
                f"only {branch} is brought back"
            )
        try:
            repo = git_utils.open_repo()
            readback = Mounts(
                workspace=self.clone_path,
                inside=self.clone_path,
                hide=_hidden(),
                read_only=clone.object_mounts(repo),
                network=False,
                writable=False,
            )
            box = command_line(self.bwrap, readback, self.userns)
            sha = clone.read_back(repo, self.task.id, self.clone_path, box, self.bounds)
            remarks += _move_branch(repo, branch, sha)
            commits = git_utils.commits_on_branch(repo, self.task.id, self.start, self.base)
        except ReadBackRefused as exc:
            return BroughtBack(0, remarks=remarks, refused=[f"nothing was read back: {exc}"])
        except (OctopoidError, OSError) as exc:
            remarks.append(f"nothing came back from the clone: {exc}")
            commits = 0
        refused = len(self.proxy.refused) if self.proxy is not None else 0
        return BroughtBack(commits, [], [*remarks, *self.network_lines()], unreached=refused)

    def check_box(self) -> contextlib.AbstractContextManager[Box]:
        return checks_box(self.task, config.load_config(), self.token)

    def close(self) -> None:
        super().close()
        self._remove(self.clone_path)


def _move_branch(repo: git.Repo, branch: str, sha: str) -> list[str]:
    """Point the task's branch at what the attempt left; a tip it does not contain (the
    agent rewrote its branch) is kept as ``refs/octopoid/replaced/<branch>``."""
    with git_utils.repo_admin_lock(), git_utils.git_errors(f"moving {branch} to {sha[:12]}"):
        tip = git_utils.branch_tip(repo, branch)
        if tip == sha:
            return []
        remarks = []
        if not repo.is_ancestor(tip, sha):
            repo.git.update_ref(f"refs/octopoid/replaced/{branch}", tip)
            remarks.append(
                f"the attempt rewrote {branch}; its earlier tip {tip[:12]} is kept as "
                f"refs/octopoid/replaced/{branch}"
            )
        repo.git.update_ref(f"refs/heads/{branch}", sha, tip)
    return remarks


@contextlib.contextmanager
def checks_box(task: Task, cfg: dict, token: str) -> Iterator[Box]:
    """A fresh clone of the task's branch in a box for its checks: their own network
    (``checks.network``: none unless it says), the project's ``sandbox.expose``, the
    host's environment without the agent's ``env`` (its keys are not the checks'), no
    channel. Removed afterwards, with the network's proxy if they had one."""
    bwrap, userns = _walls()
    repo = git_utils.open_repo()
    branch = git_utils.branch_for(task.id)
    if not git_utils.branch_exists(repo, branch):
        raise SandboxError(f"{task.label} has no branch {branch} to check (no attempt yet?)")
    name = f"{CHECKS_PREFIX}{owner_tag()}-{secrets.token_hex(3)}-{task.label}"
    path = config.get_worktrees_dir() / name
    mode, allow = netpolicy.checks_network(cfg)
    folder = private_folder() if mode == "allow" else None
    proxy = None
    try:
        clone.make(repo, task.id, task.branch, git_utils.branch_tip(repo, task.branch), path)
        root = config.find_project_root()
        read_only = _read_only([], cfg["sandbox"]["expose"], repo)
        values = {"OCTOPOID_WORKTREE": str(root)}
        env = environment(dict(os.environ), {}, task, token, values, True, _author(repo))
        proxy = _proxy(folder, mode, allow)
        yield bwrap_box(
            bwrap, userns, path, root, _hidden(), read_only, env, None, network=mode, proxy=proxy
        )
    finally:
        if proxy is not None:
            proxy.close()
        for leftover in (path, folder):
            if leftover is not None:
                remove_tree(leftover)


def _proxy(folder: Path | None, mode: str, allow: list[str]) -> NetworkProxy | None:
    """The runner's proxy for a box with ``network: allow``, serving from ``folder``."""
    if mode != "allow" or folder is None:
        return None
    return NetworkProxy(folder, netpolicy.Policy.of(allow)).start()

"""``sandbox: bwrap``: the attempt works in a clone of its own, behind bubblewrap.

The clone (``clone.py``) appears in the box at the project's own path, and is removed when
the attempt ends; the checks run in a fresh clone of what came back (docs/security.md,
"``sandbox: bwrap``: walls").
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config
from ..base import netpolicy, ports
from ..base.fsutil import TailBuffer, remove_tree
from ..base.processes import owner_tag
from ..base.redaction import Redactor, every_agent_env
from ..git import branches, core, history
from ..model import defaults
from ..model.exceptions import OctopoidError, SandboxError, SetupFailed
from ..model.tasks import Task
from . import clone
from .bounds import Bounds, ReadBackRefused, clone_growth, disk_use
from .box import COMMITTER_NAME, Box, bwrap_box, environment, exposures, with_code
from .bwrap import CHANNEL_INSIDE, HIDDEN, Mounts, command_line, find_bwrap, probe
from .proxy import NetworkProxy
from .setup import World, run_commands
from .workspace import BroughtBack, Workspace, base_for, private_folder, setup_commands

if TYPE_CHECKING:
    import git

#: What a review box is for, naming its clone: the checks, or a preview (preview/daemon.py).
CHECKS_PREFIX = ".checks-"
PREVIEW_PREFIX = ".preview-"
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
    return core.user_identity(repo) or (COMMITTER_NAME, "agent@octopoid.invalid")


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
        return branches.worktree_for(self.task.id)

    def _make(self, agent: dict, cfg: dict, needs: list[str]) -> None:
        self.bwrap, self.userns = _walls()
        repo = core.open_repo()
        self.remote, self.started = base_for(self.task)
        self.base = self.started.base
        if (self.clone_path / ".git").is_file():  # sandbox: none's worktree, from before
            branches.remove_worktree(repo, self.task.id, delete_branch=False)
        with core.repo_admin_lock():
            self.start = branches.ensure_branch(repo, self.task.id, self.base)
        base_sha = branches.branch_tip(repo, self.base)
        clone.make(repo, self.task.id, self.task.branch, base_sha, self.clone_path)
        self.bounds = Bounds.of(cfg)
        self.clone_size = disk_use(self.clone_path, sys.maxsize)
        self.measured = time.monotonic()
        own = agent.get("sandbox") or {}
        self.expose = [*cfg["sandbox"]["expose"], *(own.get("expose") or [])]
        root = config.find_project_root()
        self.author = _author(repo)
        host = {**os.environ, **(agent.get("env") or {})}
        self.at_base = self.start == base_sha  # a new branch: no git call to judge it
        reviewed = self.at_base or repo.is_ancestor(self.start, base_sha)  # no agent's work
        self.world = World(
            cfg, setup_commands(agent, cfg), root, self.clone_path, sandboxed=True,
            trusted=reviewed, home=host.get("HOME") or os.path.expanduser("~"),
        )  # fmt: skip
        env = environment(
            dict(os.environ), agent.get("env") or {}, self.task, self.token, self.world.env(),
            True, self.author,
        )  # fmt: skip
        mode, allow = netpolicy.agent_network(agent, cfg, env)
        self.proxy = _proxy(self.channel_host, mode, allow)
        shown = (*_read_only(needs, self.expose, repo), *self.world.read_only(root))
        self.box = bwrap_box(
            self.bwrap, self.userns, self.clone_path, root, _hidden(), shown,
            with_code(env, self.clone_path, root), self.channel_host, network=mode,
            proxy=self.proxy,
        )  # fmt: skip
        self.services_at = (self.channel_host, CHANNEL_INSIDE)
        self.box.services = self.world.service_argv(*self.services_at)
        self.banner = (
            f"[octopoid] sandbox: bwrap; the agent works in its own clone (seen at {root}), "
            f"network {netpolicy.describe(mode, allow)}; octopoid only through its channel"
        )

    def setup_box(self) -> contextlib.AbstractContextManager[Box]:
        assert self.world is not None
        shown = _read_only([], self.expose, core.open_repo())
        return _setup_box(self.task, self.token, self.author, self.clone_path, self.world, shown)

    def over_bounds(self) -> str | None:
        """The clone's growth on disk, measured every ``CLONE_CHECK_SECONDS``."""
        if time.monotonic() - self.measured < defaults.CLONE_CHECK_SECONDS:
            return None
        self.measured = time.monotonic()
        return clone_growth(self.clone_path, self.clone_size, self.bounds)

    def bring_back(self) -> BroughtBack:
        """Read the clone's branch back as data and move the task's branch to it. Never
        raises: what went wrong is a remark, what is beyond a bound is refused (the notes
        are saved after this)."""
        branch = branches.branch_for(self.task.id)
        if (grown := clone_growth(self.clone_path, self.clone_size, self.bounds)) is not None:
            return BroughtBack(0, refused=[f"nothing was read back: {grown}"])
        remarks = []
        head = clone.head_of(self.clone_path)
        if head != f"refs/heads/{branch}":
            remarks.append(
                f"the clone's HEAD was on {head or 'something unreadable'}, not {branch}: "
                f"only {branch} is brought back"
            )
        try:
            repo = core.open_repo()
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
            commits = history.commits_on_branch(repo, self.task.id, self.start, self.base)
        except ReadBackRefused as exc:
            return BroughtBack(0, remarks=remarks, refused=[f"nothing was read back: {exc}"])
        except (OctopoidError, OSError) as exc:
            remarks.append(f"nothing came back from the clone: {exc}")
            commits = 0
        said, refused = (self.proxy.lines(), len(self.proxy.refused)) if self.proxy else ([], 0)
        return BroughtBack(commits, [], [*remarks, *said], unreached=refused)

    def check_box(self) -> contextlib.AbstractContextManager[Box]:
        held = self.world.ports if self.world is not None else None
        return review_box(self.task, self.token, CHECKS_PREFIX, held, tick=self.tick)

    def close(self) -> None:
        super().close()
        self._remove(self.clone_path)


def _move_branch(repo: git.Repo, branch: str, sha: str) -> list[str]:
    """Point the task's branch at what the attempt left; a tip it does not contain (the
    agent rewrote its branch) is kept as ``refs/octopoid/replaced/<branch>``."""
    with core.repo_admin_lock(), core.git_errors(f"moving {branch} to {sha[:12]}"):
        tip = branches.branch_tip(repo, branch)
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
def review_box(
    task: Task, token: str, prefix: str, held: ports.PortRange | None = None,
    folder: Path | None = None, tick: Callable[[], None] = lambda: None,
) -> Iterator[Box]:  # fmt: skip
    """A fresh clone of the task's branch (``prefix`` names it in the worktrees folder), its
    set-up run (caches read-only: the branch holds an agent's work), in a box with the
    network of what it is for (``checks.network``, ``preview.network``: none unless they
    say) and ``folder`` (else one of its own, if it needs one) at /run/octopoid.
    Removed afterwards, with the network's proxy if it had one. A failed set-up raises
    ``SetupFailed`` with the set-up's output; ``tick`` is called while it runs (a claim's
    renewal)."""
    repo = core.open_repo()
    branch = branches.branch_for(task.id)
    if not branches.branch_exists(repo, branch):
        raise SandboxError(f"{task.label} has no branch {branch} to check (no attempt yet?)")
    path = config.get_worktrees_dir() / f"{prefix}{owner_tag()}-{secrets.token_hex(3)}-{task.label}"
    cfg = config.load_config()
    checks = prefix == CHECKS_PREFIX
    mode, allow = netpolicy.checks_network(cfg) if checks else netpolicy.preview_network(cfg)
    own = private_folder() if folder is None else None
    with contextlib.ExitStack() as later:  # undone in reverse: proxy, world, clone, folder
        if own is not None:
            later.callback(remove_tree, own)
        later.callback(remove_tree, path)
        clone.make(repo, task.id, task.branch, branches.branch_tip(repo, task.branch), path)
        bwrap, userns = _walls()  # after the clone: a probe started ahead ran meanwhile
        root, author = config.find_project_root(), _author(repo)
        world = World(
            cfg, setup_commands(None, cfg), root, path, sandboxed=True, trusted=False,
            home=os.environ.get("HOME") or os.path.expanduser("~"), held=held,
        )  # fmt: skip
        later.callback(world.close)
        read_only = _read_only([], cfg["sandbox"]["expose"], repo)
        _set_up_before(task, token, author, path, world, read_only, cfg, tick)
        env = environment(dict(os.environ), {}, task, token, world.env(), True, author)
        proxy = _proxy(own or folder, mode, allow)
        if proxy is not None:
            later.callback(proxy.close)
        box = bwrap_box(
            bwrap, userns, path, root, _hidden(), (*read_only, *world.read_only(root)),
            with_code(env, path, root), None, network=mode, proxy=proxy, folder=own or folder,
        )  # fmt: skip
        box.services = world.service_argv(own or folder, CHANNEL_INSIDE)  # type: ignore[arg-type]
        yield box


def _set_up_before(
    task: Task, token: str, author: tuple[str, str], path: Path, world: World,
    read_only: tuple, cfg: dict, tick: Callable[[], None],
) -> None:  # fmt: skip
    """A review box's set-up, its output kept for ``SetupFailed`` (the checks' notes)."""
    if not world.builds:
        return
    output = TailBuffer(cfg["notes"]["stdout_limit"], redact=Redactor({}, every_agent_env()))
    with _setup_box(task, token, author, path, world, read_only) as box:
        try:
            run_commands(world, box, output, tick)
        except SetupFailed as exc:
            output.close()
            raise SetupFailed(str(exc), output.text()) from None


@contextlib.contextmanager
def _setup_box(
    task: Task, token: str, author: tuple[str, str], path: Path, world: World,
    read_only: tuple,
) -> Iterator[Box]:  # fmt: skip
    """The box a set-up runs in: ``path`` (a clone) writable, the caches writable when the
    set-up is trusted (``World.setup_mounts``), the set-up's own network
    (``workspace.network``: allow unless it says), the host's environment (never an
    agent's ``env``)."""
    cfg = config.load_config()
    bwrap, userns = _walls()
    root = config.find_project_root()
    mode, allow = netpolicy.setup_network(cfg)
    folder = private_folder() if mode == "allow" else None
    proxy = _proxy(folder, mode, allow)
    shown, writable = world.setup_mounts(root)
    env = environment(dict(os.environ), {}, task, token, world.env(setup=True), True, author)
    try:
        yield bwrap_box(
            bwrap, userns, path, root, _hidden(), (*read_only, *shown),
            with_code(env, path, root), None, network=mode, proxy=proxy, binds=writable,
        )  # fmt: skip
    finally:
        if proxy is not None:
            proxy.close()
        if folder is not None:
            remove_tree(folder)


def _proxy(folder: Path | None, mode: str, allow: list[str]) -> NetworkProxy | None:
    """The runner's proxy for a box with ``network: allow``, serving from ``folder``."""
    if mode != "allow" or folder is None:
        return None
    return NetworkProxy(folder, netpolicy.Policy.of(allow)).start()

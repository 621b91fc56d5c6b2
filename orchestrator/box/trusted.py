"""``sandbox: none``: the attempt works in a git worktree of the user's repository, as the
user, with the repository's protected state snapshotted around it (``containment.py``).

This is the fallback where bubblewrap cannot run. It keeps honest agents from colliding
and catches a confused one; it does not stop a hostile one, which can do anything the
user's account can (docs/security.md).
"""

from __future__ import annotations

import contextlib
import getpass
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config
from ..git import branches, core, history
from ..model.exceptions import OctopoidError
from ..model.tasks import Task
from . import containment
from .box import Box, bare_box, environment, with_code
from .setup import World
from .workspace import BroughtBack, Workspace, base_for, setup_commands

if TYPE_CHECKING:
    import git


class TrustedWorkspace(Workspace):
    def _make(self, agent: dict, cfg: dict, needs: list[str]) -> None:
        """The worktree, snapshotted; ``needs`` and the network settings mean nothing
        without walls."""
        repo = core.open_repo()
        self.remote, self.started = base_for(self.task)
        self.base = self.started.base
        self.worktree = branches.ensure_worktree(repo, self.task.id, self.base)
        containment.settle_orphans()  # an earlier attempt's runner may have died unchecked
        self.world = _world(cfg, setup_commands(agent, cfg), self.worktree)
        env = environment(
            dict(os.environ), agent.get("env") or {}, self.task, self.token, self.world.env(),
            sandboxed=False,
        )  # fmt: skip
        self.committer = env["GIT_COMMITTER_EMAIL"]
        with core.repo_admin_lock():
            self.start = branches.branch_tip(repo, branches.branch_for(self.task.id))
            self.snapshot = self._snapshot(repo)
        self.box = bare_box(self.worktree, with_code(env, self.worktree, self.worktree),
                            self.channel_host)  # fmt: skip
        self.services_at = (self.channel_host, self.channel_host)
        self.box.services = self.world.service_argv(*self.services_at)
        self.banner = (
            f"[octopoid] sandbox: none; this agent runs as {getpass.getuser()} with that "
            "account's whole reach (it is trusted); containment of the repository is best effort"
        )

    @contextlib.contextmanager
    def setup_box(self) -> Iterator[Box]:
        """The worktree itself, as the user, with the host's environment (never the
        agent's ``env``) and network."""
        env = environment(dict(os.environ), {}, self.task, self.token, self.world.env(), False)
        yield Box(self.worktree, self.worktree, with_code(env, self.worktree, self.worktree))

    def _snapshot(self, repo: git.Repo) -> containment.Snapshot:
        return containment.take(repo, self.task.id, self.task.attempts, self.start, self.committer)

    def bring_back(self) -> BroughtBack:
        """The worktree back on its branch and the repository as it was; commits counted."""
        branch = branches.branch_for(self.task.id)
        breaches = []
        try:
            head = branches.worktree_branch(self.task.id)
            if head != f"refs/heads/{branch}":
                where = head.removeprefix("refs/heads/") if head else "a detached HEAD"
                breaches.append(f"work was committed to {where}, not {branch}")
                branches.back_to_task_branch(self.task.id)
            breaches += self.recheck()
            repo = core.open_repo()
            return BroughtBack(
                history.commits_on_branch(repo, self.task.id, self.start, self.base), breaches
            )
        except (OctopoidError, OSError) as exc:  # the attempt then fails: nothing is trusted
            return BroughtBack(0, [*breaches, f"the repository could not be checked: {exc}"])

    def recheck(self) -> list[str]:
        try:
            with core.repo_admin_lock():
                return containment.check_and_restore(core.open_repo(), self.snapshot)
        except (OctopoidError, OSError) as exc:
            return [f"the repository could not be checked: {exc}"]

    @contextlib.contextmanager
    def check_box(self) -> Iterator[Box]:
        """The worktree itself, without the agent's ``env`` (its keys are not the checks');
        the repository is snapshotted again for ``recheck``."""
        with core.repo_admin_lock():
            self.snapshot = self._snapshot(core.open_repo())
        with checks_box(self.task, self.token, self.world) as box:
            yield box


@contextlib.contextmanager
def checks_box(task: Task, token: str, world: World | None = None) -> Iterator[Box]:
    """`octopoid checks` with ``sandbox: none``: the task's worktree, as it is (its set-up
    ran there), with the attempt's ports and caches (``world``) or its own."""
    worktree = branches.worktree_for(task.id)
    if not (worktree / ".git").is_file():
        raise OctopoidError(f"{task.label} has no worktree (no attempt yet, or pruned)")
    own = world is None
    world = world or _world(config.load_config(), [], worktree)
    try:
        env = environment(dict(os.environ), {}, task, token, world.env(), sandboxed=False)
        box = Box(worktree, worktree, with_code(env, worktree, worktree))
        box.services = world.service_argv(None, None)
        yield box
    finally:
        if own:
            world.close()


def _world(cfg: dict, commands: list[str], worktree: Path) -> World:
    """Without walls: the caches are the project's folders, pointed at by their tools'
    variables; set-up's work stays in the worktree, which is kept between attempts."""
    home = os.environ.get("HOME") or os.path.expanduser("~")
    root = config.find_project_root()
    return World(cfg, commands, root, worktree, sandboxed=False, trusted=True, home=home)

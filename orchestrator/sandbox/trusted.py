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
from typing import TYPE_CHECKING

from .. import git_utils
from ..exceptions import OctopoidError
from ..tasks import Task
from . import containment
from .box import Box, bare_box, environment
from .workspace import BroughtBack, Workspace, base_for

if TYPE_CHECKING:
    import git


class TrustedWorkspace(Workspace):
    def _make(self, agent: dict, cfg: dict, needs: list[str]) -> None:
        """The worktree, snapshotted; ``needs`` and the network settings mean nothing
        without walls."""
        repo = git_utils.open_repo()
        self.remote, self.started = base_for(self.task)
        self.base = self.started.base
        base = self.base
        self.worktree = git_utils.ensure_worktree(repo, self.task.id, base)
        containment.settle_orphans()  # an earlier attempt's runner may have died unchecked
        env = environment(
            dict(os.environ), agent.get("env") or {}, self.task, self.token,
            {"OCTOPOID_WORKTREE": str(self.worktree)}, sandboxed=False,
        )  # fmt: skip
        self.committer = env["GIT_COMMITTER_EMAIL"]
        with git_utils.repo_admin_lock():
            self.start = git_utils.branch_tip(repo, git_utils.branch_for(self.task.id))
            self.snapshot = self._snapshot(repo)
        self.box = bare_box(self.worktree, env, self.channel_host)
        self.banner = (
            f"[octopoid] sandbox: none; this agent runs as {getpass.getuser()} with that "
            "account's whole reach (it is trusted); containment of the repository is best effort"
        )

    def _snapshot(self, repo: git.Repo) -> containment.Snapshot:
        return containment.take(repo, self.task.id, self.task.attempts, self.start, self.committer)

    def bring_back(self) -> BroughtBack:
        """The worktree back on its branch and the repository as it was; commits counted."""
        branch = git_utils.branch_for(self.task.id)
        breaches = []
        try:
            head = git_utils.worktree_branch(self.task.id)
            if head != f"refs/heads/{branch}":
                where = head.removeprefix("refs/heads/") if head else "a detached HEAD"
                breaches.append(f"work was committed to {where}, not {branch}")
                git_utils.back_to_task_branch(self.task.id)
            breaches += self.recheck()
            repo = git_utils.open_repo()
            return BroughtBack(
                git_utils.commits_on_branch(repo, self.task.id, self.start, self.base), breaches
            )
        except (OctopoidError, OSError) as exc:  # the attempt then fails: nothing is trusted
            return BroughtBack(0, [*breaches, f"the repository could not be checked: {exc}"])

    def recheck(self) -> list[str]:
        try:
            with git_utils.repo_admin_lock():
                return containment.check_and_restore(git_utils.open_repo(), self.snapshot)
        except (OctopoidError, OSError) as exc:
            return [f"the repository could not be checked: {exc}"]

    @contextlib.contextmanager
    def check_box(self) -> Iterator[Box]:
        """The worktree itself, without the agent's ``env`` (its keys are not the checks');
        the repository is snapshotted again for ``recheck``."""
        with git_utils.repo_admin_lock():
            self.snapshot = self._snapshot(git_utils.open_repo())
        with checks_box(self.task, self.token) as box:
            yield box


@contextlib.contextmanager
def checks_box(task: Task, token: str) -> Iterator[Box]:
    """`octopoid checks` with ``sandbox: none``: the task's worktree, as it is."""
    worktree = git_utils.worktree_for(task.id)
    if not (worktree / ".git").is_file():
        raise OctopoidError(f"{task.label} has no worktree (no attempt yet, or pruned)")
    env = environment(
        dict(os.environ), {}, task, token, {"OCTOPOID_WORKTREE": str(worktree)}, sandboxed=False
    )
    yield Box(worktree, worktree, env)

"""The task's worktree around one attempt: made or reused, fenced in, inspected afterwards.

Before the agent runs, the repository's protected state is snapshotted (``containment``).
After it (once every process of the attempt is dead): the worktree must still be on the
task's own branch, anything the agent changed outside it is put back, and only then are
the attempt's commits counted, on the task's branch itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import containment, git_utils
from ..exceptions import OctopoidError
from ..tasks import Task


@dataclass
class Workspace:
    task_id: str
    worktree: Path
    start: str  # the task branch's tip before the agent ran
    snapshot: containment.Snapshot


def prepare(task: Task) -> Workspace:
    """The task's worktree on its branch, and the repository's state to hold the agent to."""
    repo = git_utils.open_repo()
    worktree = git_utils.ensure_worktree(repo, task.id, task.branch)
    with git_utils.repo_admin_lock():
        snapshot = containment.take(repo, task.id)
    start = git_utils.branch_tip(repo, git_utils.branch_for(task.id))
    return Workspace(task.id, worktree, start, snapshot)


def inspect(space: Workspace, attempt: int) -> tuple[int, list[str]]:
    """(commits on the task's branch, breaches put right) after the agent is gone."""
    branch = git_utils.branch_for(space.task_id)
    breaches = []
    try:
        head = git_utils.worktree_branch(space.task_id)
        if head != f"refs/heads/{branch}":
            where = head.removeprefix("refs/heads/") if head else "a detached HEAD"
            breaches.append(f"work was committed to {where}, not {branch}")
            git_utils.back_to_task_branch(space.task_id)
        repo = git_utils.open_repo()
        with git_utils.repo_admin_lock():
            breaches += containment.check_and_restore(repo, space.task_id, attempt, space.snapshot)
        return git_utils.commits_on_branch(repo, space.task_id, space.start), breaches
    except (OctopoidError, OSError) as exc:  # the attempt then fails: nothing is trusted
        return 0, [*breaches, f"the repository could not be checked: {exc}"]


def recheck(space: Workspace, attempt: int) -> list[str]:
    """After the checks ran the agent's code: anything it changed outside the branch."""
    try:
        with git_utils.repo_admin_lock():
            repo = git_utils.open_repo()
            return containment.check_and_restore(repo, space.task_id, attempt, space.snapshot)
    except (OctopoidError, OSError) as exc:
        return [f"the repository could not be checked after the checks: {exc}"]

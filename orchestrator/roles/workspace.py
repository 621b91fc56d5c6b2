"""The task's worktree around one attempt: made or reused, fenced in, inspected afterwards.

Before the agent runs, the repository's protected state is snapshotted (``containment``).
After it (once every process of the attempt is dead): the worktree must still be on the
task's own branch, anything the agent changed outside it is put back, and only then are
the attempt's commits counted, on the task's branch itself.

With ``git.remote`` set, the branch is first brought up to the remote's copy (an attempt on
another machine pushed it) and is pushed after the attempt (``publish``). An unreachable
remote does not stop the attempt: it works from the local branch and the notes say so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from .. import containment, defaults, git_utils
from ..exceptions import GitError, OctopoidError
from ..tasks import Task


@dataclass
class Workspace:
    task_id: str
    worktree: Path
    start: str  # the task branch's tip before the agent ran
    snapshot: containment.Snapshot
    remote: str | None = None  # git.remote: where the branch is published
    remote_problem: str | None = None  # why the remote's copy could not be fetched


def prepare(task: Task) -> Workspace:
    """The task's worktree on its branch, and the repository's state to hold the agent to."""
    repo = git_utils.open_repo()
    remote, problem, base = git_utils.remote_name(), None, task.branch
    if remote is not None:
        try:
            base = git_utils.sync_task_branch(repo, remote, task.id, task.branch)
        except GitError as exc:
            problem = f"could not fetch from {remote}; this attempt starts from here: {exc}"
    worktree = git_utils.ensure_worktree(repo, task.id, base)
    with git_utils.repo_admin_lock():
        snapshot = containment.take(repo, task.id)
    start = git_utils.branch_tip(repo, git_utils.branch_for(task.id))
    return Workspace(task.id, worktree, start, snapshot, remote, problem)


def publish(space: Workspace) -> str | None:
    """Push the task's branch to ``git.remote``, retrying with backoff; None when pushed
    (or there is no remote), else why not, for the notes. The work stays on the local
    branch either way, and the next push (or an accept here) carries it."""
    if space.remote is None:
        return None
    error = ""
    for delay in (*defaults.PUSH_BACKOFF_SECONDS, None):
        try:
            git_utils.push_task_branch(git_utils.open_repo(), space.remote, space.task_id)
            return None
        except GitError as exc:
            error = str(exc)
        if delay is not None:
            time.sleep(delay)
    return f"the branch was not pushed to {space.remote}: {error}"


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

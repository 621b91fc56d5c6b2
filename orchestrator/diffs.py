"""`octopoid diff`: a task's changes, or a plain answer to why it has none.

A task has a branch from its first attempt until accept merges and removes it, so "no
branch" means different things by state; git alone cannot tell them apart.
"""

from __future__ import annotations

from . import git_utils, queue_utils
from .exceptions import NothingToShow
from .tasks import TaskState, normalize_task_id


def task_diff(task_id: str) -> str:
    """What the task's branch changes against its base; ``NothingToShow`` if it has no branch."""
    task = queue_utils.get_task(normalize_task_id(task_id))
    branch = git_utils.branch_for(task.id)
    repo = git_utils.open_repo()
    if git_utils.branch_exists(repo, branch):
        return git_utils.diff(repo, task.branch, task.id)
    if task.state is TaskState.DONE:
        raise NothingToShow(f"{task.label} is done; its branch was merged and removed")
    if task.attempts == 0 or task.state is TaskState.CLAIMED:
        raise NothingToShow(
            f"{task.label} has no branch yet (it is in {task.state.value}); "
            "its first attempt makes one"
        )
    raise NothingToShow(f"{task.label} has no branch {branch} (deleted by hand?)")

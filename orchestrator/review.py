"""The human side of the loop: accept (merge, done, clean up) and reject.

These workflows span git and the queue, so they live here and not in ``queue_utils``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from . import config, git_utils, queue_utils
from .exceptions import GitError, IllegalTransition
from .memory import lifecycle
from .memory.distill import distill
from .memory.notes import NotesManager
from .tasks import Task, TaskState, normalize_task_id

log = logging.getLogger("octopoid.review")


@dataclass
class Accepted:
    task: Task
    strategy: str
    merged_sha: str | None
    cleanup_error: str | None = None
    promoted: int = 0
    distilled: dict = field(default_factory=dict)


def accept(task_id: str, accepted_by: str = "human") -> Accepted:
    """Merge the task's branch into its base, move it to done, then remove worktree and branch.

    A refused merge (conflict, dirty checkout) changes nothing: the task stays in
    provisional. The merge comes before the move, so a crash in between is healed by
    running accept again (the merge is then already done). Cleanup comes last and a failure
    there is reported, not fatal: `octopoid worktrees --prune` finishes it.
    """
    task = queue_utils.get_task(normalize_task_id(task_id))
    if task.state is not TaskState.PROVISIONAL:
        raise IllegalTransition(f"{task.label} is in {task.state.value}, not provisional")
    strategy = config.load_config()["merge"]["strategy"]
    merged = None
    if strategy != "none":
        repo = git_utils.open_repo()
        merged = git_utils.merge_task_branch(repo, task.id, task.branch, strategy, task.title)
    done = queue_utils.accept_completion(task, accepted_by)
    result = Accepted(done, strategy, merged)
    working = NotesManager(notes_id=task.label)
    items = working.get_all_items() if working.notes_file.exists() else []
    result.promoted = lifecycle.promote_task_notes(task.id, accepted_by)
    result.distilled = distill(done, items, config.load_config()["memory"])
    working.cleanup()
    if strategy != "none":
        try:
            git_utils.remove_worktree(git_utils.open_repo(), task.id)
        except GitError as exc:
            result.cleanup_error = str(exc)
            log.error("accepted %s but could not clean up: %s", task.label, exc)
    return result


def reject(task_id: str, reason: str, rejected_by: str = "human") -> Task:
    """Back to incoming with the reason in the notes; the branch and worktree stay for the retry."""
    return queue_utils.reject_completion(normalize_task_id(task_id), reason, rejected_by)


def task_diff(task_id: str) -> str:
    task = queue_utils.get_task(normalize_task_id(task_id))
    return git_utils.diff(git_utils.open_repo(), task.branch, task.id)


def prune_worktrees() -> list[str]:
    """Remove worktrees (and branches) of tasks that are done or no longer exist."""
    finished = [name for name, state in list_worktrees() if state in ("done", "gone")]
    if finished:
        repo = git_utils.open_repo()
        for name in finished:
            git_utils.remove_worktree(repo, name.removeprefix("TASK-"))
    return finished


def list_worktrees() -> list[tuple[str, str]]:
    """(TASK-id, state or 'gone') for every task worktree."""
    folder = config.get_worktrees_dir()
    store = queue_utils.get_store()
    out = []
    for path in sorted(folder.glob("TASK-*")) if folder.is_dir() else []:
        state = store.locate(path.name.removeprefix("TASK-"))
        out.append((path.name, state.value if state else "gone"))
    return out

"""What follows a task's arrival in done/, journaled so a crash cannot lose it.

An accept (or a close) moves the task to done and then has work left: the task's learnings
promoted into long-term memory, its working notes removed, its worktree and branch removed
with the tips octopoid set aside for it that the base holds (a close keeps the branch),
its pull request closed, the branch deleted on the remote (a closed task's only where its
branch here holds it). A kill between the move and that work would lose the learnings
(``memory gc`` later deletes the notes of done tasks) and leave the rest behind. So before
the move, the steps are written to ``runtime/finishing/TASK-<id>.json``; each step is
taken off the journal once done, and the journal is removed after the last. The same
accept again, the scheduler's housekeeping and ``octopoid doctor`` finish what a dead one
left (``finish_interrupted``). Every step is safe to repeat: memory deduplicates, and the
removals treat what is already gone as done.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from . import config, queue_utils
from .exceptions import InvalidTaskId, TaskBusy
from .fsutil import atomic_write, read_json_object
from .tasks import TaskState, normalize_task_id, task_label

log = logging.getLogger("octopoid.finishing")

PROMOTE, NOTES, WORKTREE, BRANCH = "promote", "notes", "worktree", "branch"
REMOTE_BRANCH, PULL_REQUEST = "remote-branch", "pull-request"
#: the order they run: a pull request is closed (saying why) before its branch goes, since
#: a forge closes a pull request whose branch is deleted without a word
STEPS = (PROMOTE, NOTES, WORKTREE, BRANCH, PULL_REQUEST, REMOTE_BRANCH)


def journal_dir() -> Path:
    return config.get_orchestrator_dir() / "finishing"


def _journal(task_id: str) -> Path:
    return journal_dir() / f"{task_label(task_id)}.json"


def begin(task_id: str, steps: list[str], actor: str) -> None:
    """Write the journal (under the task's hold, before the move to done)."""
    journal_dir().mkdir(parents=True, exist_ok=True)
    atomic_write(_journal(task_id), json.dumps({"steps": steps, "by": actor}))


def abandon(task_id: str) -> None:
    """The move to done did not happen: there is nothing to finish."""
    _journal(task_id).unlink(missing_ok=True)


def pending(task_id: str) -> list[str]:
    """The steps still to do for ``task_id`` (empty: none, or no journal)."""
    return read_json_object(_journal(task_id)).get("steps", [])


def is_over(task_id: str) -> bool:
    """The task is gone, or done with nothing left to finish: its working notes may go."""
    return queue_utils.get_store().locate(task_id) in (None, TaskState.DONE) and not pending(
        task_id
    )


def finish(task_id: str) -> dict[str, Any]:
    """Do the journaled steps of a task in done/, in order; return what they did.

    ``{"promoted": n, "distilled": {...}, "errors": [...]}``. A step that fails (git, the
    memory store, a model) is reported and stays in the journal for the next finisher; the
    others go on.
    """
    path = _journal(task_id)
    journal = read_json_object(path)
    steps, actor = list(journal.get("steps", [])), str(journal.get("by", "octopoid"))
    done: dict[str, Any] = {"promoted": 0, "distilled": {}, "errors": []}
    for step in [s for s in STEPS if s in steps]:
        if step == REMOTE_BRANCH and PULL_REQUEST in steps:
            continue  # the pull request is not closed yet: its branch waits
        try:
            _run(step, task_id, actor, done)
        except Exception as exc:  # git, the memory store, a model: the step stays journaled
            done["errors"].append(f"{step}: {exc}")
            log.error("%s: could not finish %s: %s", task_label(task_id), step, exc)
            continue
        steps.remove(step)
        if steps:
            atomic_write(path, json.dumps({"steps": steps, "by": actor}))
    if not steps:
        path.unlink(missing_ok=True)
    return done


def _run(step: str, task_id: str, actor: str, done: dict[str, Any]) -> None:
    # Here, not at the top: `octopoid doctor` asks for journals every time and rarely has one.
    from . import drafts, git_utils, questions, task_tips
    from .memory import lifecycle
    from .memory.distill import distill
    from .memory.notes import NotesManager

    working = NotesManager(notes_id=task_label(task_id))
    if step == PROMOTE:  # only what the accepted attempt recorded, as its reviewer left it
        task = queue_utils.get_task(task_id)
        kept = lifecycle.kept_learnings(task)
        done["promoted"] = lifecycle.promote_task_notes(task, actor)
        items = [{"section": item.section, "item": item.text} for item in kept]
        done["distilled"] = distill(task, items, config.load_config()["memory"])
    elif step == NOTES:
        working.cleanup()
        drafts.clear_task(task_id)  # reviewers' unsent drafts: the task left review for good
        questions.forget(task_id)  # a question nobody answered: nobody needs to now
    elif step == WORKTREE and git_utils.worktree_for(task_id).exists():
        git_utils.remove_worktree(git_utils.open_repo(), task_id, delete_branch=False)
    elif step == BRANCH:
        repo = git_utils.open_repo()
        git_utils.remove_worktree(repo, task_id)
        base = task_tips.accept_base(repo, queue_utils.get_task(task_id).branch)
        git_utils.drop_replaced(repo, task_id, base)
    elif step == REMOTE_BRANCH and (remote := git_utils.remote_name()) is not None:
        _remote_branch(task_id, remote)
    elif step == PULL_REQUEST:  # a closed task's open pull request (docs/forge.md)
        from .forge import pulls

        pulls.close_for(task_id, actor)


def _remote_branch(task_id: str, remote: str) -> None:
    """Delete the task's refs on the remote that what it left holds all of: the tip its
    attempt submitted, merged; for a task closed without a merge, its branch here, which
    keeps the work (none here: the remote keeps it)."""
    from . import git_utils, task_tips

    task, repo = queue_utils.get_task(task_id), git_utils.open_repo()
    kept = task_tips.recorded(task)
    if task.headers.get("CLOSED") and "MERGED" not in task.headers:
        kept = git_utils.ref_tip(repo, git_utils.branch_for(task_id))
        if kept is None:
            return
    git_utils.delete_remote_branch(repo, remote, task_id, kept)


def finish_interrupted() -> list[str]:
    """Finish every journal a dead accept or close left; one line per task finished.

    A task held by a live accept is its own; a journal whose task never reached done (the
    accept died before its move) has nothing to finish and is removed.
    """
    folder = journal_dir()
    if not folder.is_dir():
        return []
    store, lines = queue_utils.get_store(), []
    for path in sorted(folder.glob("TASK-*.json")):
        try:
            task_id = normalize_task_id(path.stem)
        except InvalidTaskId:
            continue  # not a name octopoid writes
        with contextlib.suppress(TaskBusy), store.hold(task_id, "finished"):
            if store.locate(task_id) is not TaskState.DONE:
                path.unlink(missing_ok=True)
                continue
            steps = ", ".join(pending(task_id))
            errors = finish(task_id)["errors"]
            lines.append(
                f"{task_label(task_id)}: finished what its accept left ({steps})"
                + (f"; still to do: {'; '.join(errors)}" if errors else "")
            )
    return lines

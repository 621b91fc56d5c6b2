"""Accept and close as journals of the store, and the sweep that finishes every journal a
dead process left.

An accept is several steps: the merge, the move to done, then the task's learnings
promoted into long-term memory, its working notes removed, its worktree and branch
removed with the tips octopoid set aside for it that the base holds, the branch deleted
on the remote (a close: the move, then the same without the merge; it keeps the branch,
closes an open pull request before its branch goes, and deletes the remote's refs only
where its branch here holds them). Before the first step the
steps are written as the task's ``accept`` (or ``close``) journal, with what they need
(who, the base's tip before the merge); each is marked done as it ends, and the journal
is finished after the last. On PostgreSQL every machine sees it: whoever comes next, on
any machine, finishes it (the next accept, any scheduler's sweep, `octopoid doctor
--repair`). Every step is safe to repeat: a merge is asked of git first (``MERGED`` on the
task says it landed), a task in done is not moved again, memory deduplicates, and the
removals treat what is already gone as done. Only the merge waits for a person's accept:
the sweep does not merge.

``finish_interrupted`` is the sweep over every kind of journal: accept and close here, a
breakdown's split (``roles.breakdown``) and a plan's approval (``plans``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import config
from ..base.lazy import lazy_import
from ..model.exceptions import IllegalTransition, JournalBusy, OctopoidError, TaskBusy
from ..model.tasks import Task, TaskState, from_label, task_label
from ..queue import adopt
from ..queue import machine as queue_utils
from ..queue.store.records import Journal, Journals

# the other journals' owners, and what only a step needs: `doctor` rarely finds any
breakdown = lazy_import("orchestrator.roles.breakdown")
plans = lazy_import("orchestrator.roles.plans")
log = logging.getLogger("octopoid.finishing")

ACCEPT, CLOSE = "accept", "close"  # the journals' kinds
MERGE, MOVE = "merge", "move"
PROMOTE, NOTES, WORKTREE, BRANCH = "promote", "notes", "worktree", "branch"
REMOTE_BRANCH, PULL_REQUEST = "remote-branch", "pull-request"
#: every step, in the order they run: a pull request is closed (saying why) before its
#: branch goes, since a forge closes a pull request whose branch is deleted without a word
STEPS = (MERGE, MOVE, PROMOTE, NOTES, WORKTREE, BRANCH, PULL_REQUEST, REMOTE_BRANCH)


@dataclass
class Finished:
    """What running a journal did: the task after, learnings promoted, a model's
    distillation, and the steps that failed (left in the journal for the next finisher)."""

    task: Task
    promoted: int = 0
    distilled: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _journals() -> Journals:
    return adopt.store().journals


@contextmanager
def taken(task_id: str) -> Iterator[Journal | None]:
    """Hold the task's accept and close journals (under the task's hold); yield the open
    one, or None. ``JournalBusy`` while another process runs one."""
    journals, key = _journals(), task_label(task_id)
    with journals.take(ACCEPT, key) as accepting, journals.take(CLOSE, key) as closing:
        yield accepting or closing


def begin(kind: str, task_id: str, steps: list[str], data: dict[str, Any]) -> Journal:
    """Write the journal of an accept or close before its first step (held by ``taken``)."""
    ordered = [step for step in STEPS if step in steps]
    return _journals().begin(kind, task_label(task_id), ordered, data)


def abandon(journal: Journal) -> None:
    """Nothing the journal began needs finishing (a merge git refused, a move refused)."""
    _journals().finish(journal)


def open_journal(task_id: str) -> Journal | None:
    """The task's open accept or close journal, if any (read without holding it)."""
    journals, key = _journals(), task_label(task_id)
    return journals.get(ACCEPT, key) or journals.get(CLOSE, key)


def pending(task_id: str) -> list[str]:
    """The steps still to do for ``task_id`` (empty: none, or no journal)."""
    journal = open_journal(task_id)
    return [] if journal is None else list(journal.left)


def is_over(task_id: str) -> bool:
    """The task is gone, or done with nothing left to finish: its working notes may go."""
    where = queue_utils.get_store().locate(task_id)
    return where in (None, TaskState.DONE) and open_journal(task_id) is None


def run(journal: Journal, merge: Callable[[], None] | None = None) -> Finished:
    """Run what is left of a held accept or close journal, in order; finish it when
    nothing is left. ``merge`` is the accept's (the sweep has none: a merge not recorded
    on the task waits for the next accept). The merge and the move stop the run when they
    fail; a later step that fails (git, the memory store, a model) is reported and stays
    for the next finisher while the others go on."""
    journals, task_id = _journals(), from_label(journal.key)
    actor = str(journal.data.get("by") or "octopoid")
    done = Finished(queue_utils.get_task(task_id))
    for step in journal.left:
        if step == MERGE:
            (merge or (lambda: _merge_recorded(task_id)))()
        elif step == MOVE:
            _move(journal, task_id, actor)
        elif step == REMOTE_BRANCH and PULL_REQUEST in journal.left:
            continue  # the pull request is not closed yet: its branch waits
        else:
            try:
                _run(step, task_id, actor, done)
            except Exception as exc:  # git, the memory store, a model: the step stays journaled
                done.errors.append(f"{step}: {exc}")
                log.error("%s: could not finish %s: %s", task_label(task_id), step, exc)
                continue
        journal = journals.mark_done(journal, step)
    if not journal.left:
        journals.finish(journal)
    done.task = queue_utils.get_task(task_id)
    return done


def _merge_recorded(task_id: str) -> None:
    if not queue_utils.get_task(task_id).headers.get("MERGED"):
        raise IllegalTransition(
            f"{task_label(task_id)}: its accept stopped before its merge was recorded; "
            f"`octopoid accept {task_label(task_id)}` finishes it (it never merges twice)"
        )


def _move(journal: Journal, task_id: str, actor: str) -> None:
    """The move to done, unless the task is there already (moved before a kill)."""
    if queue_utils.get_store().locate(task_id) is TaskState.DONE:
        return
    data = journal.data
    if journal.kind == CLOSE:
        queue_utils.close_task(task_id, data["kind"], data["reason"], actor)
    else:
        queue_utils.accept_completion(task_id, actor, reason=data.get("reason", "accepted"))


def _run(step: str, task_id: str, actor: str, done: Finished) -> None:
    # Here, not at the top: `octopoid doctor` asks for journals every time and rarely has one.
    from ..git import branches, core, task_tips
    from ..git import remote as git_remote
    from ..memory import lifecycle
    from ..memory.distill import distill
    from ..memory.notes import NotesManager
    from ..queue import questions, steering
    from . import drafts

    working = NotesManager(notes_id=task_label(task_id))
    if step == PROMOTE:  # only what the accepted attempt recorded, as its reviewer left it
        task = queue_utils.get_task(task_id)
        kept = lifecycle.kept_learnings(task)
        done.promoted = lifecycle.promote_task_notes(task, actor)
        items = [{"section": item.section, "item": item.text} for item in kept]
        done.distilled = distill(task, items, config.load_config()["memory"])
    elif step == NOTES:
        working.cleanup()
        drafts.clear_task(task_id)  # reviewers' unsent drafts: the task left review for good
        questions.forget(task_id)  # a question nobody answered: nobody needs to now
        steering.forget(task_id)  # messages no attempt read: the notes keep them
    elif step == WORKTREE and branches.worktree_for(task_id).exists():
        branches.remove_worktree(core.open_repo(), task_id, delete_branch=False)
    elif step == BRANCH:
        repo = core.open_repo()
        branches.remove_worktree(repo, task_id)
        base = task_tips.accept_base(repo, queue_utils.get_task(task_id).branch)
        branches.drop_replaced(repo, task_id, base)
    elif step == REMOTE_BRANCH and (remote := git_remote.remote_name()) is not None:
        _remote_branch(task_id, remote)
    elif step == PULL_REQUEST:  # a closed task's open pull request (docs/forge.md)
        from ..forge import pulls

        pulls.close_for(task_id, actor)


def _remote_branch(task_id: str, remote: str) -> None:
    """Delete the task's refs on the remote that what it left holds all of: the tip its
    attempt submitted, merged; for a task closed without a merge, its branch here, which
    keeps the work (none here: the remote keeps it)."""
    from ..git import branches, core, task_tips
    from ..git import remote as git_remote

    task, repo = queue_utils.get_task(task_id), core.open_repo()
    kept = task_tips.recorded(task)
    if task.headers.get("CLOSED") and "MERGED" not in task.headers:
        kept = branches.ref_tip(repo, branches.branch_for(task_id))
        if kept is None:
            return
    git_remote.delete_remote_branch(repo, remote, task_id, kept)


def finish_interrupted() -> list[str]:
    """Finish every journal a dead process left (accept, close, split, plan approval),
    on this machine or another; one line per journal finished or dropped. A journal held
    by a live process is its own; an accept whose merge is not recorded waits for the
    next accept (`octopoid doctor` names it)."""
    left = _journals().pending()
    if not left:
        return []
    resumers: dict[str, Callable[[Journal], str | None]] = {
        ACCEPT: _resume, CLOSE: _resume, breakdown.SPLIT: breakdown.resume,
        plans.APPROVAL: plans.resume,
    }  # fmt: skip
    lines = []
    for journal in left:
        resume = resumers.get(journal.kind)
        if resume is None:
            continue
        try:
            line = resume(journal)
        except (JournalBusy, TaskBusy):
            continue  # its process is alive and running it
        except OctopoidError as exc:
            line = f"{journal.key}: could not finish its {journal.kind}: {exc}"
        if line:
            lines.append(line)
    return lines


def awaits_accept(journal: Journal) -> bool:
    """An accept killed before its merge was recorded: it may or may not have landed, and
    only an accept asks git (the sweep does not merge)."""
    if journal.kind != ACCEPT or MERGE not in journal.left:
        return False
    try:
        return not queue_utils.get_task(from_label(journal.key)).headers.get("MERGED")
    except OctopoidError:
        return False  # the task is gone: nothing waits for an accept


def _resume(journal: Journal) -> str | None:
    """Finish a dead accept's or close's journal; what was done, or None (nothing to do)."""
    task_id, store = from_label(journal.key), queue_utils.get_store()
    with store.hold(task_id, "finished"), taken(task_id) as current:
        if current is None:
            return None
        label, kind, steps = task_label(task_id), current.kind, ", ".join(current.left)
        if store.locate(task_id) is None:
            abandon(current)
            return f"{label}: the task is gone; its {kind} journal is dropped"
        if awaits_accept(current):
            return None
        try:
            errors = run(current).errors
        except IllegalTransition as exc:  # the move was refused: the task left review
            abandon(current)
            return f"{label}: its {kind} could not move it ({exc}); the journal is dropped"
    return f"{label}: finished what its {kind} left ({steps})" + (
        f"; still to do: {'; '.join(errors)}" if errors else ""
    )

"""Accept and close as journals of the store, and the sweep that finishes every journal a
dead process left (docs/architecture.md, "Records and journals": the steps, who finishes
them, and how each knows a step already done).

Both kinds are tables of steps (``ACCEPT_KIND``, ``CLOSE_KIND``: the functions below) run by
the store's one journal runner; every step is safe to repeat, and only the merge waits for a
person's accept: the sweep does not merge. ``finish_interrupted`` is the sweep over every
kind: these two, a breakdown's split and a plan's approval.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import config
from ..base.lazy import lazy_import
from ..model.exceptions import IllegalTransition, OctopoidError
from ..model.ids import TaskId, from_label
from ..model.tasks import Task, TaskState, task_label
from ..queue import adopt
from ..queue import machine as queue_utils
from ..queue.store.records import LATER, Journal, JournalKind, Step

# the other journals' owners, and what only a step needs: `doctor` rarely finds any
breakdown = lazy_import("orchestrator.roles.breakdown")
plans = lazy_import("orchestrator.roles.plans")

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


@contextmanager
def taken(task_id: str) -> Iterator[Journal | None]:
    """Hold the task's accept and close journals (under the task's hold); yield the open
    one, or None. ``JournalBusy`` while another process runs one."""
    journals, key = adopt.store().journals, task_label(task_id)
    with journals.take(ACCEPT, key) as accepting, journals.take(CLOSE, key) as closing:
        yield accepting or closing


def begin(kind: str, task_id: str, steps: list[str], data: dict[str, Any]) -> Journal:
    """Write the journal of an accept or close before its first step (held by ``taken``)."""
    ordered = [step for step in STEPS if step in steps]
    return adopt.store().journals.begin(kind, task_label(task_id), ordered, data)


def abandon(journal: Journal) -> None:
    """Nothing the journal began needs finishing (a merge git refused, a move refused)."""
    adopt.store().journals.finish(journal)


def open_journal(task_id: str) -> Journal | None:
    """The task's open accept or close journal, if any (read without holding it)."""
    journals, key = adopt.store().journals, task_label(task_id)
    return journals.get(ACCEPT, key) or journals.get(CLOSE, key)


def pending(task_id: str) -> list[str]:
    """The steps still to do for ``task_id`` (empty: none, or no journal)."""
    journal = open_journal(task_id)
    return [] if journal is None else list(journal.left)


def is_over(task_id: str) -> bool:
    """The task is gone, or done with nothing left to finish: its working notes may go."""
    where = queue_utils.get_store().locate(task_id)
    return where in (None, TaskState.DONE) and open_journal(task_id) is None


def run(journal: Journal, merge: Step | None = None) -> Finished:
    """Run what is left of a held accept or close journal (the store's runner); finish it
    when nothing is left. ``merge`` is the accept's (the sweep has none: a merge not
    recorded on the task waits for the next accept). The merge and the move stop the run
    when they fail; a later step that fails (git, the memory store, a model) is reported
    and stays for the next finisher while the others go on."""
    kind = KINDS[journal.kind]
    ran = adopt.store().journals.run(journal, kind if merge is None else kind.but({MERGE: merge}))
    promoted, distilled = ran.results.get(PROMOTE) or (0, {})
    return Finished(queue_utils.get_task(_task(journal)), promoted, distilled, ran.errors)


def _task(journal: Journal) -> TaskId:
    return from_label(journal.key)


def _actor(journal: Journal) -> str:
    return str(journal.data.get("by") or "octopoid")


def _merge_recorded(journal: Journal, step: str) -> None:
    """The sweep's merge step: it never merges; a merge recorded on the task is done."""
    task_id = _task(journal)
    if not queue_utils.get_task(task_id).headers.get("MERGED"):
        raise IllegalTransition(
            f"{task_label(task_id)}: its accept stopped before its merge was recorded; "
            f"`octopoid accept {task_label(task_id)}` finishes it (it never merges twice)"
        )


def _move(journal: Journal, step: str) -> None:
    """The move to done, unless the task is there already (moved before a kill)."""
    task_id, data = _task(journal), journal.data
    if queue_utils.get_store().locate(task_id) is TaskState.DONE:
        return
    if journal.kind == CLOSE:
        queue_utils.close_task(task_id, data["kind"], data["reason"], _actor(journal))
    else:
        reason = data.get("reason", "accepted")
        queue_utils.accept_completion(task_id, _actor(journal), reason=reason)


# What follows imports its parts when it runs: `octopoid doctor` asks for journals every
# time and rarely has one.
def _promote(journal: Journal, step: str) -> tuple[int, dict[str, Any]]:
    """Only what the accepted attempt recorded, as its reviewer left it: how many were
    promoted, and a model's distillation."""
    from ..memory import lifecycle
    from ..memory.distill import distill

    task = queue_utils.get_task(_task(journal))
    kept = lifecycle.kept_learnings(task)
    promoted = lifecycle.promote_task_notes(task, _actor(journal))
    items = [{"section": item.section, "item": item.text} for item in kept]
    return promoted, distill(task, items, config.load_config()["memory"])


def _notes(journal: Journal, step: str) -> None:
    """The task's working notes, and what waited on it in review, gone for good."""
    from ..memory.notes import NotesManager
    from ..queue import adopt, questions, steering
    from . import drafts

    task_id = _task(journal)
    NotesManager(notes_id=task_label(task_id)).cleanup()
    drafts.clear_task(task_id)  # reviewers' unsent drafts: the task left review for good
    # a question nobody answered (nobody needs to now), messages no attempt read (in its notes)
    adopt.forget(task_id, questions.FAMILY, steering.FAMILY)


def _worktree(journal: Journal, step: str) -> None:
    from ..git import branches, core

    if branches.worktree_for(_task(journal)).exists():
        branches.remove_worktree(core.open_repo(), _task(journal), delete_branch=False)


def _branch(journal: Journal, step: str) -> None:
    """The branch, and the tips octopoid set aside for it that the base holds."""
    from ..git import branches, core, task_tips

    task_id, repo = _task(journal), core.open_repo()
    branches.remove_worktree(repo, task_id)
    base = task_tips.accept_base(repo, queue_utils.get_task(task_id).branch)
    branches.drop_replaced(repo, task_id, base)


def _pull_request(journal: Journal, step: str) -> None:
    """A closed task's open pull request, closed saying why (docs/forge.md)."""
    from ..forge import pulls

    pulls.close_for(_task(journal), _actor(journal))


def _remote_branch(journal: Journal, step: str) -> str | None:
    """Delete the task's refs on the remote that what it left holds all of: the tip its
    attempt submitted, merged; for a task closed without a merge, its branch here, which
    keeps the work (none here: the remote keeps it). Not before its pull request is closed."""
    from ..git import branches, core, task_tips
    from ..git import remote as git_remote

    if PULL_REQUEST in journal.left:
        return LATER
    if (remote := git_remote.remote_name()) is None:
        return None
    task_id = _task(journal)
    task, repo = queue_utils.get_task(task_id), core.open_repo()
    kept = task_tips.recorded(task)
    if task.headers.get("CLOSED") and "MERGED" not in task.headers:
        kept = branches.ref_tip(repo, branches.branch_for(task_id))
        if kept is None:
            return None
    git_remote.delete_remote_branch(repo, remote, task_id, kept)
    return None


def awaits_accept(journal: Journal) -> bool:
    """An accept killed before its merge was recorded: it may or may not have landed, and
    only an accept asks git (the sweep does not merge)."""
    if journal.kind != ACCEPT or MERGE not in journal.left:
        return False
    try:
        return not queue_utils.get_task(_task(journal)).headers.get("MERGED")
    except OctopoidError:
        return False  # the task is gone: nothing waits for an accept


def _held(key: str) -> AbstractContextManager[object]:
    """The sweep holds the task as a person's accept does."""
    return queue_utils.get_store().hold(from_label(key), "finished")


def _gone(journal: Journal) -> str | None:
    return "the task is gone" if queue_utils.get_store().locate(_task(journal)) is None else None


#: the steps of an accept and of a close, by name (a test may wrap one to kill its run)
STEP_FUNCTIONS: dict[str, Step] = {
    MERGE: _merge_recorded, MOVE: _move, PROMOTE: _promote, NOTES: _notes,
    WORKTREE: _worktree, BRANCH: _branch, PULL_REQUEST: _pull_request,
    REMOTE_BRANCH: _remote_branch,
}  # fmt: skip
_FINISHING = {
    "tolerant": frozenset(STEPS) - {MERGE, MOVE}, "hold": _held, "gone": _gone,
    "waits": awaits_accept, "dropped_on": (IllegalTransition,),
}  # fmt: skip
ACCEPT_KIND = JournalKind(ACCEPT, STEP_FUNCTIONS, **_FINISHING)
CLOSE_KIND = JournalKind(CLOSE, STEP_FUNCTIONS, **_FINISHING)
KINDS = {ACCEPT: ACCEPT_KIND, CLOSE: CLOSE_KIND}


def finish_interrupted() -> list[str]:
    """Finish every journal a dead process left (accept, close, split, plan approval),
    on this machine or another; one line per journal finished or dropped. A journal held
    by a live process is its own; an accept whose merge is not recorded waits for the
    next accept (`octopoid doctor` names it)."""
    journals = adopt.store().journals
    if not journals.pending():  # the usual answer: the other kinds' owners stay unloaded
        return []
    return journals.sweep([ACCEPT_KIND, CLOSE_KIND, breakdown.SPLIT_KIND, plans.APPROVAL_KIND])

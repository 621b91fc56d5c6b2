"""`octopoid list`: the queues a page at a time, never parsing a queue to print one page.

Waiting tasks come from the claim index (title, priority, role, attempts, blockers: no
file is read), done ones newest first from the ledger, and of any other queue only the
tasks on the page are read, in id order. ``stream`` is `--all`: every task, one line as
soon as it is known, in constant memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..base.lazy import lazy_import
from ..model.tasks import Task, TaskState, one_line, task_label
from ..queue import store as queue_store
from ..queue.dependencies import Blockage, blocked_report
from ..queue.store.queries import Waiting

mergeable = lazy_import("orchestrator.review.mergeable")  # provisional/'s lines only

S = TaskState
PAGE = 50  # lines of a queue shown unless --all or --limit


@dataclass
class Line:
    """One task as `list` prints it (and as `list --json` gives it)."""

    id: str
    state: str
    priority: str | None  # None: not known (a quarantined file is no readable task)
    role: str | None
    attempts: int | None
    title: str
    created: str | None = None
    claimed_by: str | None = None
    blockage: Blockage | None = None
    conflicts: list[str] | None = None
    refused: list[str] | None = None  # paths accept refuses to write (merge_guard)
    pull_request: str | None = None  # its number on the forge (docs/forge.md)
    error: str | None = None  # why a quarantined file could not be read

    @classmethod
    def of_task(cls, task: Task, blockage: Blockage | None = None) -> Line:
        return cls(
            task.label,
            task.state.value if task.state else "?",
            task.priority,
            task.role,
            task.attempts,
            task.title,
            task.headers.get("CREATED"),
            task.headers.get("CLAIMED_BY"),
            blockage,
            pull_request=task.headers.get("PR_NUMBER"),
        )

    @classmethod
    def of_waiting(cls, row: Waiting, blockage: Blockage | None) -> Line:
        return cls(
            task_label(row.id),
            S.INCOMING.value,
            row.priority,
            row.role,
            row.attempts,
            row.title,
            row.created,
            None,
            blockage,
        )

    @classmethod
    def of_quarantined(cls, name: str, reason: str) -> Line:
        """A quarantined file, named as `doctor` names it (it may be no task's): its file name."""
        return cls(
            one_line(name, 80),
            S.QUARANTINE.value,
            None,
            None,
            None,
            "",
            error=one_line(reason, 300),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "state": self.state,
            "role": self.role,
            "priority": self.priority,
            "attempts": self.attempts,
            "created": self.created,
            "claimed_by": self.claimed_by,
            "blocked_by": [label for label, _ in self.blockage.waiting_on] if self.blockage else [],
            "stuck": self.blockage.stuck if self.blockage else None,
            "conflicts": self.conflicts,
            "refused": self.refused or [],
            "pull_request": self.pull_request,
            "error": self.error,
        }


@dataclass
class Section:
    """One queue's page: its lines, how many tasks it holds in all (after the role
    filter), and which page this is."""

    state: TaskState
    lines: list[Line]
    total: int
    page: int
    size: int

    @property
    def more(self) -> int:
        return max(0, self.total - (self.page - 1) * self.size - len(self.lines))


def queues(named: str | None) -> list[TaskState]:
    """What `octopoid list [QUEUE]` (and the MCP tool) shows: the queue named, else every
    queue but done."""
    return [S(named)] if named else [s for s in S if s is not S.DONE]


def page(
    states: Sequence[TaskState], role: str | None, size: int = PAGE, number: int = 1
) -> list[Section]:
    """Page ``number`` (from 1) of each queue of ``states``, ``size`` lines at most."""
    store = queue_store.get_store()
    start = (number - 1) * size
    sections = []
    for state in states:
        if state is S.INCOMING:  # the page's rows, and the blocked ones for their report
            digest = store.waiting_digest()
            blocked = blocked_report(digest.with_blockers)
            rows = store.waiting(role, start, size)
            lines = [Line.of_waiting(w, blocked.get(w.id)) for w in rows]
            total = sum(n for r, n in digest.roles.items() if role in (None, r))
            sections.append(Section(state, lines, total, number, size))
            continue
        if state is S.QUARANTINE:
            found = _quarantined(role)
            sections.append(Section(state, found[start : start + size], len(found), number, size))
            continue
        ids = _ids(state)
        if role is None:
            tasks = queue_store.readable_tasks(ids[start : start + size])
            total = len(ids)
        else:  # a role is only known from a task's file: this queue is read whole
            every = [t for t in queue_store.readable_tasks(ids) if t.role == role]
            tasks, total = every[start : start + size], len(every)
        lines = [Line.of_task(t) for t in tasks]
        if state is S.PROVISIONAL and tasks:  # none: no git machinery to load
            unmergeable = mergeable.unmergeable(tasks)
            for line in lines:
                if (why := unmergeable.get(line.id)) is not None:
                    line.conflicts, line.refused = why.conflicts, why.refused
        sections.append(Section(state, lines, total, number, size))
    return sections


def stream(states: Sequence[TaskState], role: str | None) -> Iterator[Line]:
    """Every task of ``states``, a line at a time (`--all`): a queue is never held whole."""
    store = queue_store.get_store()
    for state in states:
        if state is S.INCOMING:
            blocked = blocked_report(store.waiting_digest().with_blockers)
            yield from (Line.of_waiting(w, blocked.get(w.id)) for w in store.waiting(role))
            continue
        if state is S.QUARANTINE:
            yield from _quarantined(role)
            continue
        for task_id in _ids(state):
            for task in queue_store.readable_tasks([task_id]):
                if role in (None, task.role):
                    yield Line.of_task(task)


def _quarantined(role: str | None) -> list[Line]:
    """Quarantine's entries and why each is there: no task to read, so no role to match."""
    entries = queue_store.get_store().list_quarantine() if role is None else []
    return [Line.of_quarantined(name, reason) for name, reason in entries]


def _ids(state: TaskState) -> list[str]:
    """The queue's ids in the order `list` shows them: done newest first, others by id."""
    store = queue_store.get_store()
    if state is S.DONE:
        return store.recent(S.DONE, store.count(S.DONE))
    return store.ids(state)

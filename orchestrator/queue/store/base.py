"""The queue store interface: everything the state machine needs from storage.

``queue_utils`` holds the rules (which move is legal, what a move writes); a store only
keeps tasks and moves them atomically. A second store (PostgreSQL) implements the same
methods and runs the same contract tests. Besides tasks a store keeps ``records`` and
``journals`` (``records.py``: the state every other part of octopoid remembers).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path

from ...model.exceptions import TaskBusy
from ...model.tasks import Task, TaskId, TaskState, task_label
from .queries import Waiting, WaitingDigest
from .records import Journals, Records

#: How long a refused hold waits for the holder's words: it writes them just after taking
#: the hold, so a refusal in between would otherwise have to guess what it is doing.
HOLDER_WORDS_SECONDS = 5.0
#: ``NOT_BEFORE`` of a task waiting for an answer: no claim reaches it; the answer lifts it
NEVER = "9999-12-31T00:00:00Z"

Change = Callable[[Task], None]
Guard = Callable[[Task], bool]


class QueueStore(ABC):
    #: Whether a move to done also deletes the task's retry notes, in the move itself (a
    #: store that keeps the notes beside the tasks: PostgreSQL, in the move's transaction).
    drops_notes_when_done = False

    @property
    @abstractmethod
    def records(self) -> Records:
        """The store's records: keyed documents written by compare-and-swap (pauses, the
        agents' days, ...), shared wherever the store is (``store/records.py``)."""

    @property
    @abstractmethod
    def journals(self) -> Journals:
        """The store's journals: workflows of several steps, written before they run and
        finished by whoever comes next, on any machine (``store/records.py``)."""

    @abstractmethod
    def initialize(self) -> None:
        """Create whatever the store needs (folders, tables); safe to call again."""

    @abstractmethod
    def allocate_id(self) -> TaskId:
        """A new sequential id that no task in any state has."""

    @abstractmethod
    def add(self, task: Task, state: TaskState) -> Task:
        """Store a new task in ``state``; refuse an id that already exists anywhere."""

    @abstractmethod
    def locate(self, task_id: TaskId) -> TaskState | None:
        """The state holding ``task_id``, or None. Cheap: no parsing."""

    def released(self, task_id: TaskId) -> bool:
        """Whether ``task_id`` is done through one of octopoid's moves, so its dependants may
        start. A file put into done/ by hand (no History line says how it got there) is
        not; a store whose tasks only octopoid moves needs only ask where it is."""
        return self.locate(task_id) is TaskState.DONE

    @abstractmethod
    def get(self, task_id: TaskId) -> Task:
        """The task with this id, wherever it is; ``TaskNotFound`` if nowhere."""

    @abstractmethod
    def list(self, state: TaskState) -> list[Task]:
        """Every readable task in ``state``; unreadable ones are quarantined, not returned."""

    @abstractmethod
    def list_quarantine(self) -> list[tuple[str, str]]:
        """(name, reason) for every quarantined file."""

    @abstractmethod
    def count(self, state: TaskState) -> int:
        """How many tasks ``state`` holds (without parsing them); of quarantine, how many
        entries ``list_quarantine`` names (status, the board and doctor say one number)."""

    @abstractmethod
    def ids(self, state: TaskState) -> list[TaskId]:
        """The ids ``state`` holds, by number (without parsing them): a page of a big queue
        reads only the tasks it shows."""

    @abstractmethod
    def move(
        self,
        task_id: TaskId,
        src: TaskState,
        dst: TaskState,
        change: Change,
        guard: Guard | None = None,
    ) -> Task | None:
        """Atomically move a task from ``src`` to ``dst``, applying ``change`` to it.

        ``guard`` and ``change`` run under the task's lock on the task as it is now.
        Returns None (and changes nothing) when ``guard`` refuses the task; an exception
        from ``change`` also changes nothing. Raises ``LostRace`` when the task is no
        longer in ``src``.
        """

    def update(self, task_id: TaskId, state: TaskState, change: Change) -> Task:
        """Rewrite a task in place (same state); ``LostRace`` if it has left ``state``.

        ``change`` runs under the task's lock on the task as it is now; raising there (e.g.
        ``LostClaim`` when a claim token no longer matches) changes nothing.
        """
        return self.move(task_id, state, state, change)

    @abstractmethod
    def hold(self, task_id: TaskId, purpose: str) -> AbstractContextManager[None]:
        """Hold a task for a workflow of several steps (an accept: merge, move, clean up).

        While held, another process's ``hold`` of the same task fails at once with
        ``TaskBusy`` naming ``purpose``; the holding process may hold it again. A crash
        releases the hold.
        """

    @abstractmethod
    def recover(self, task_id: TaskId | None = None) -> list[str]:
        """Finish or undo writes a crash interrupted (one task, or all); say what was done."""

    @abstractmethod
    def claim(self, role: str | None, change: Change, now: datetime) -> Task | None:
        """Move the first eligible incoming task to claimed, or return None.

        Eligible: matching ``role`` (any when None), every ``BLOCKED_BY`` task done, no
        ``NOT_BEFORE`` later than ``now``. Order: priority, then creation time, then id.
        Two callers never get the same task.
        """

    @abstractmethod
    def waiting_digest(self) -> WaitingDigest:
        """The waiting tasks as `status` needs them (``WaitingDigest``), in a few queries."""

    @abstractmethod
    def waiting(
        self, role: str | None = None, skip: int = 0, limit: int = -1, *, titled: bool = True
    ) -> list[Waiting]:
        """The incoming tasks (of ``role``) as ``Waiting`` rows, in claim order, read from
        the store's index rather than the task files: all of them, or ``limit`` (>= 0) after
        the first ``skip``. Without ``titled`` a row's title and attempts may be left empty
        (the board and the blocked report need only ids and edges: PostgreSQL would read
        every body for them)."""

    @abstractmethod
    def usage(self, top: int = 10) -> tuple[int, float, list[tuple[str, str, int, float]]]:
        """(turns, USD) over all tasks, and the ``top`` tasks by cost as (id, state, turns,
        USD), from a ledger kept at every write: its cost does not grow with done tasks."""

    @abstractmethod
    def recent(self, state: TaskState, limit: int = 10) -> list[str]:
        """Ids of the ``limit`` tasks that moved into ``state`` last, newest first (cheap:
        the board shows recently done tasks with 50k in done)."""

    @abstractmethod
    def rebuild(self) -> int:
        """Rebuild whatever the store keeps beside the tasks (index, ledger) from the tasks
        themselves; return how many tasks were read. For `octopoid doctor --rebuild`."""

    @abstractmethod
    def quarantine(self, path: Path, reason: str) -> Path:
        """Move an unreadable file aside with the reason beside it; return its new path."""

    @abstractmethod
    def sweep(self, now: datetime | None = None) -> int:
        """``recover`` everything, remove old debris; return how many leftovers were handled."""

    def watch(self, on_change: Callable[[str], None]) -> Callable[[], None]:
        """Call ``on_change`` (from another thread) with the state a task was added or moved
        to, when that may make work claimable (incoming, breakdown, done; ``record`` for a
        record written, a pause or a resume; "" when changes may have been missed), for a
        store whose changes the scheduler cannot see in the file system; returns a function
        that stops watching. The folder store needs none: the scheduler watches incoming/
        with inotify (``wakeup``), and its mtime where inotify is missing."""
        return lambda: None


def id_order(task_id: TaskId) -> tuple[int, str]:
    """Ids by number (TASK-9 before TASK-10); an id that is not a number after them."""
    return (int(task_id), "") if task_id.isdigit() else (1 << 62, task_id)


def busy(task_id: TaskId, holder_words: Callable[[], str]) -> TaskBusy:
    """The refusal of a hold another process has: it names what that one is doing, as it
    says (waiting a moment for the words), never a guess."""
    deadline = time.monotonic() + HOLDER_WORDS_SECONDS
    while not (doing := holder_words()) and time.monotonic() < deadline:
        time.sleep(0.01)
    doing = doing or "being reviewed"
    return TaskBusy(f"{task_label(task_id)} is {doing}; try again when it has finished")

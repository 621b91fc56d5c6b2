"""The folder store: one folder per state, one file per task, a rename per transition.

Postfix's discipline: each folder has one meaning and a move between folders is the only
state change. Every writer holds the task's lock (striped, reentrant ``FileMutex``es), and
every write first takes the current file away by rename, so the rename decides every race,
even against a person moving files by hand, and a lost race can never resurrect a file.
The steps of a write and its crash story are docs/architecture.md's "How a move is made
durable"; the staged names are fixed because only the lock holder writes them, so
finding a crash's leftovers costs a few ``stat`` calls.

Its size: the folder half of the store contract (moves, claims, holds, crash roll-forward).
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from functools import cached_property
from pathlib import Path

from ...base.fsutil import (
    atomic_write,
    durable_rename,
    fsync_dir,
    is_temp_name,
    write_synced,
    write_temp,
    writing,
)
from ...base.locks import FileMutex
from ...model import defaults
from ...model.exceptions import IllegalTransition, LostRace, TaskNotFound, TaskParseError
from ...model.tasks import (
    FILE_RE,
    Task,
    TaskId,
    TaskState,
    claim_order,
    read_task_file,
    render_task,
    task_filename,
    task_label,
)
from .base import Change, Guard, QueueStore, busy, id_order
from .claim_index import ClaimIndex
from .folder_records import FolderJournals, FolderRecords
from .queries import Waiting, WaitingDigest

LOCK_STRIPES = 64  # bounded lock files; two tasks sharing a stripe only wait a moment
NEW, OLD = ".new", ".old"  # a write's staged text, and the file it takes away


class FolderStore(QueueStore):
    def __init__(self, queue_dir: Path, durable: bool = True) -> None:
        self.root = queue_dir
        self.durable = durable  # False (durability: relaxed): no fsync; renames stay atomic
        self.index = ClaimIndex(queue_dir / ".claim-index.sqlite", self.dir(TaskState.INCOMING))

    @cached_property
    def records(self) -> FolderRecords:
        """Beside the queue: ``runtime/records/``."""
        return FolderRecords(self.root.parent / "records", self.durable)

    @cached_property
    def journals(self) -> FolderJournals:
        """Beside the queue: ``runtime/journals/``."""
        return FolderJournals(self.root.parent / "journals", self.durable)

    def dir(self, state: TaskState) -> Path:
        return self.root / state.value

    def path(self, task_id: TaskId, state: TaskState) -> Path:
        return self.dir(state) / task_filename(task_id)

    def _lock(self, task_id: TaskId) -> FileMutex:
        """The task's lock: every write to a task holds it (reentrant, so nesting is safe)."""
        stripe = zlib.crc32(task_id.encode()) % LOCK_STRIPES
        return FileMutex(self.root / ".locks" / f"{stripe:02d}.lock")

    @contextmanager
    def hold(self, task_id: TaskId, purpose: str) -> Iterator[None]:
        holder = FileMutex(self.root / ".locks" / f"hold-{task_filename(task_id)}.lock")
        if not holder.acquire(blocking=False):
            raise busy(task_id, holder.read_note)
        try:
            if holder.depth == 1:
                holder.note(f"being {purpose} (pid {os.getpid()})")
            yield
        finally:
            holder.release(remove=True)

    def initialize(self) -> None:
        for state in TaskState:
            self.dir(state).mkdir(parents=True, exist_ok=True)
        (self.root / ".locks").mkdir(exist_ok=True)
        if not self.index.ledger_built() and not any(map(self.count, TaskState)):
            self.index.rebuild_ledger([])  # a new queue: the ledger starts complete

    def allocate_id(self) -> TaskId:
        """The next sequential id (``.last_id``, under its lock), never one a folder holds;
        with the counter lost or unreadable, the folders' highest number is the last."""
        self.root.mkdir(parents=True, exist_ok=True)
        counter = self.root / ".last_id"
        with writing(self.root), FileMutex(self.root / ".id.lock"):
            try:
                last = int(counter.read_text().strip())
            except (FileNotFoundError, ValueError):
                held = [i for s in TaskState if self.dir(s).is_dir() for i in self.ids(s)]
                last = max((int(i) for i in held if i.isdigit()), default=0)
            candidate = TaskId(str(last + 1))
            while any(self.path(candidate, s).exists() for s in TaskState):
                candidate = TaskId(str(int(candidate) + 1))
            atomic_write(counter, f"{candidate}\n", sync=self.durable)
        return candidate

    def add(self, task: Task, state: TaskState) -> Task:
        target = self.path(task.id, state)
        with writing(target.parent), self._lock(task.id):
            found = self._scan_for(task.id)
            if found is not None:
                raise IllegalTransition(f"{task.label} already exists (in {found.value})")
            with self._gated(state):
                tmp = write_temp(target, render_task(task).encode(), sync=self.durable)
                try:
                    if state is TaskState.INCOMING:
                        self.index.upsert(task, tmp.stat().st_ino)
                    os.link(tmp, target)  # fails, rather than overwrites, if the name exists
                except FileExistsError:
                    raise IllegalTransition(
                        f"{task.label} already exists (in {state.value})"
                    ) from None
                finally:
                    tmp.unlink(missing_ok=True)
                if state is TaskState.INCOMING:  # at once: a claim checking now must know it
                    self.index.note_own_write()
            self._sync_dir(target.parent)
            self.index.record_usage(task, state.value)
        task.state, task.path = state, target
        return task

    def _gated(self, *states: TaskState) -> AbstractContextManager[None]:
        """The claim index's writer gate, held while a write changes incoming/."""
        return self.index.writes.shared() if TaskState.INCOMING in states else nullcontext()

    def locate(self, task_id: TaskId) -> TaskState | None:
        found = self._scan_for(task_id)
        if found is None:  # mid-move, or a crash left it between folders: wait, or heal
            with self._lock(task_id):
                self.recover(task_id)
                found = self._scan_for(task_id)
        return found

    def where(self, task_id: TaskId) -> list[TaskState]:
        """Every folder holding the task, seen under its lock (a consistency check: one)."""
        with self._lock(task_id):
            self.recover(task_id)
            return [s for s in TaskState if os.path.lexists(self.path(task_id, s))]

    def _scan_for(self, task_id: TaskId) -> TaskState | None:
        for state in TaskState:
            if os.path.lexists(self.path(task_id, state)):
                return state
        return None

    def get(self, task_id: TaskId) -> Task:
        for _ in range(3):
            state = self.locate(task_id)
            if state is None:
                break
            path = self.path(task_id, state)
            try:
                return read_task_file(path, state)
            except FileNotFoundError:
                continue  # moved on between locate and read: look again
            except TaskParseError as exc:
                if state is not TaskState.QUARANTINE:
                    self.quarantine(path, str(exc))
                raise TaskParseError(f"{task_label(task_id)} is quarantined: {exc}") from None
        raise TaskNotFound(f"no task {task_label(task_id)} in any queue")

    def list(self, state: TaskState) -> list[Task]:
        folder = self.dir(state)
        paths = (folder / name for name in os.listdir(folder) if not name.startswith("."))
        tasks = [t for t in map(self._read_or_quarantine, paths) if t is not None]
        return sorted(tasks, key=claim_order)

    def count(self, state: TaskState) -> int:
        """Task files in the folder, from its listing alone, and only when the folder changed
        since the last count (status must not scale with done/); of quarantine, every entry
        ``list_quarantine`` names, whatever its file name."""
        folder = self.dir(state)
        if state is TaskState.QUARANTINE:
            return self.index.counted(folder, lambda: len(self._quarantined(folder)))
        return self.index.counted(
            folder, lambda: sum(1 for name in os.listdir(folder) if FILE_RE.fullmatch(name))
        )

    def ids(self, state: TaskState) -> list[TaskId]:
        found = (FILE_RE.fullmatch(name) for name in os.listdir(self.dir(state)))
        return sorted((TaskId.matched(m) for m in found if m), key=id_order)

    def list_quarantine(self) -> list[tuple[str, str]]:
        """(file name, reason) for every quarantined file."""
        folder = self.dir(TaskState.QUARANTINE)
        out = []
        for name in self._quarantined(folder):
            error = folder / f"{name}.error"
            reason = error.read_text(errors="replace").strip() if error.exists() else "unknown"
            out.append((name, reason))
        return out

    @staticmethod
    def _quarantined(folder: Path) -> list[str]:
        """The quarantined entries' names: anything but the ``.error`` beside each (and our
        hidden temporary files)."""
        names = os.listdir(folder)
        return sorted(n for n in names if not n.endswith(".error") and not n.startswith("."))

    def _read_or_quarantine(self, path: Path) -> Task | None:
        state = TaskState(path.parent.name)
        try:
            return read_task_file(path, state)
        except FileNotFoundError:
            return None
        except TaskParseError as exc:
            if state is not TaskState.QUARANTINE:
                self.quarantine(path, str(exc))
            return None

    def move(
        self,
        task_id: TaskId,
        src: TaskState,
        dst: TaskState,
        change: Change,
        guard: Guard | None = None,
    ) -> Task | None:
        dst_path = self.path(task_id, dst)
        with writing(dst_path.parent), self._lock(task_id):
            task = self._read_for_change(task_id, src)
            if guard is not None and not guard(task):
                return None
            change(task)
            if dst is not src and os.path.lexists(dst_path):
                raise IllegalTransition(f"{task.label} is already in {dst.value}")
            self._write(task, dst)
        return task

    def _write(self, task: Task, state: TaskState) -> None:
        """Replace ``task.path`` by the task's new text at its place in ``state``.

        The current file is first renamed aside: if it is gone, another process (or a
        person) moved it and this write is refused with ``LostRace`` before it changes
        anything. Runs under the task's lock; docs/architecture.md has the crash story.
        """
        old, target = task.path, self.path(task.id, state)
        staged, aside = self._debris(target)
        with self._gated(task.state, state):
            write_synced(staged, render_task(task).encode(), sync=self.durable)
            try:
                if state is TaskState.INCOMING:
                    self.index.upsert(task, staged.stat().st_ino)
                os.rename(old, aside)  # the decision: whoever takes the file away first wins
            except FileNotFoundError:
                staged.unlink(missing_ok=True)
                raise LostRace(
                    f"{task.label} left {old.parent.name} before it was written"
                ) from None
            except BaseException:
                staged.unlink(missing_ok=True)
                raise
            os.rename(staged, target)
            os.unlink(aside)
            with self.index.transaction():  # at once: a claim checking now must know
                if task.state is TaskState.INCOMING and state is not TaskState.INCOMING:
                    self.index.remove(task.id)
                if TaskState.INCOMING in (task.state, state):
                    self.index.note_own_write()
                self.index.record_usage(task, state.value)
        self._sync_dir(target.parent)
        if old.parent != target.parent:
            self._sync_dir(old.parent)
        task.state, task.path = state, target

    def _sync_dir(self, folder: Path) -> None:
        if self.durable:
            fsync_dir(folder)

    @staticmethod
    def _debris(target: Path) -> tuple[Path, Path]:
        """The fixed hidden names a write to ``target`` stages and sets aside."""
        return target.with_name(f".{target.name}{NEW}"), target.with_name(f".{target.name}{OLD}")

    def recover(self, task_id: TaskId | None = None) -> list[str]:
        """Finish writes a crash interrupted; return what was done, one line each.

        A ``.old`` with its ``.new``: the write had decided, so the new text becomes the
        task (roll forward). A ``.old`` alone: the task goes back in place. Without an id,
        every folder is listed (the reaper's sweep); with one, it costs a few ``stat``s.
        """
        done = []
        for state in TaskState:
            if task_id is not None:
                ids = [task_id] if self._debris(self.path(task_id, state))[1].exists() else []
            else:
                ids = [
                    name[len(".TASK-") : -len(".md" + OLD)]
                    for name in os.listdir(self.dir(state))
                    if name.startswith(".TASK-") and name.endswith(".md" + OLD)
                ]
            for found in ids:
                with self._lock(found):
                    done += self._roll_forward(state, found)
        return done

    def _roll_forward(self, state: TaskState, task_id: TaskId) -> list[str]:
        target = self.path(task_id, state)
        staged, aside = self._debris(target)
        if not aside.exists():
            return []  # finished by someone else meanwhile
        if os.path.lexists(target):
            os.unlink(aside)
            outcome = "a stale copy removed"
        elif staged.exists():
            os.rename(staged, target)
            os.unlink(aside)
            outcome = "its interrupted write finished"
        else:
            os.rename(aside, target)
            outcome = "put back as it was"
        fsync_dir(target.parent)
        if state is TaskState.INCOMING:
            self.index.mark_stale()
        return [f"{task_label(task_id)} in {state.value}: {outcome}"]

    def _read_for_change(self, task_id: TaskId, state: TaskState) -> Task:
        path = self.path(task_id, state)
        try:
            return read_task_file(path, state)
        except FileNotFoundError:
            raise LostRace(f"{task_label(task_id)} is not in {state.value}") from None
        except TaskParseError as exc:
            self.quarantine(path, str(exc))
            raise TaskParseError(f"{task_label(task_id)} was quarantined: {exc}") from None

    def claim(self, role: str | None, change: Change, now: datetime) -> Task | None:
        after = None
        while batch := self._fresh().candidates(role, after, now.timestamp()):
            for *key, blockers in batch:
                after = tuple(key)
                task_id = key[3]
                if not all(self.released(b) for b in blockers):
                    continue
                try:
                    task = self.move(
                        task_id,
                        TaskState.INCOMING,
                        TaskState.CLAIMED,
                        change,
                        guard=lambda t: self._still_eligible(t, role, now),
                    )
                except (LostRace, TaskParseError):
                    self.index.remove(task_id)
                    continue
                if task is not None:
                    return task
        return None

    def released(self, task_id: TaskId) -> bool:
        """Done, and the ledger (written at every move of ours) says a move put it there."""
        done = TaskState.DONE
        return self.locate(task_id) is done and self._ledger().state_of(task_id) == done.value

    def _still_eligible(self, task: Task, role: str | None, now: datetime) -> bool:
        """Re-check a candidate against its file (a person may have edited it)."""
        ok = (
            (role is None or task.role == role)
            and (task.not_before is None or task.not_before <= now)
            and all(self.released(b) for b in task.blocked_by)
        )
        if not ok:
            self.index.upsert(task, task.path.stat().st_ino)
        return ok

    def _fresh(self) -> ClaimIndex:
        """The claim index, rescanned first if anyone but octopoid changed incoming/."""
        if self.index.is_stale():
            self.index.reconcile(self._read_or_quarantine)
        return self.index

    def waiting(
        self, role: str | None = None, skip: int = 0, limit: int = -1, *, titled: bool = True
    ) -> list[Waiting]:
        return self._fresh().waiting(role, skip, limit)  # titles cost nothing here

    def waiting_digest(self) -> WaitingDigest:
        return self._fresh().waiting_digest()

    def usage(self, top: int = 10) -> tuple[int, float, list[tuple[str, str, int, float]]]:
        return self._ledger().usage(top)

    def recent(self, state: TaskState, limit: int = 10) -> list[str]:
        return self._ledger().recent(state, limit)

    def _ledger(self) -> ClaimIndex:
        """The index with its ledger built (read from the folders once; then kept by writes)."""
        if not self.index.ledger_built():
            self._rebuild_ledger()
        return self.index

    def rebuild(self) -> int:
        self.index.forget_incoming()
        self.index.reconcile(self._read_or_quarantine)
        return self._rebuild_ledger()

    def _rebuild_ledger(self) -> int:
        """Read every task once (the ledger was never built here, or doctor asked)."""
        return self.index.rebuild_ledger(t for state in TaskState for t in self.list(state))

    def quarantine(self, path: Path, reason: str) -> Path:
        folder = self.dir(TaskState.QUARANTINE)
        match = FILE_RE.fullmatch(path.name)
        with writing(folder), self._lock(match.group(1) if match else path.name):
            target, n = folder / path.name, 0
            while os.path.lexists(target):
                n += 1
                target = folder / f"{path.name}.{n}"
            error = target.with_name(target.name + ".error")
            atomic_write(error, f"{reason}\n(from {path.parent.name}/{path.name})\n")
            try:
                durable_rename(path, target)
            except FileNotFoundError:
                error.unlink(missing_ok=True)
                return target
        if match and path.parent == self.dir(TaskState.INCOMING):
            self.index.remove(match.group(1))
        return target

    def sweep(self, now: datetime | None = None) -> int:
        if self.index.due_for_reconcile(now.timestamp() if now else None):
            self.index.reconcile(self._read_or_quarantine)  # a drop hidden behind our writes
        removed = len(self.recover())
        cutoff = (now.timestamp() if now else time.time()) - defaults.STALE_TEMP_SECONDS
        for state in TaskState:
            for name in os.listdir(self.dir(state)):
                path = self.dir(state) / name
                stale_kind = is_temp_name(name) or name.endswith(".md" + NEW)
                try:
                    if stale_kind and path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed

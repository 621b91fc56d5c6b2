"""The folder store: one folder per state, one file per task, a rename per transition.

Postfix's discipline: each folder has one meaning and a move between folders is the only
state change. Every mover holds the task's lock (striped ``filelock`` locks), so an
in-place rewrite can never resurrect a file another process just moved; the rename itself
still decides every race, even against a person moving files by hand.
"""

from __future__ import annotations

import os
import time
import zlib
from datetime import datetime
from pathlib import Path

from filelock import FileLock

from .. import defaults
from ..exceptions import IllegalTransition, LostRace, TaskNotFound, TaskParseError
from ..fsutil import atomic_write, durable_rename, fsync_dir, is_temp_name, write_temp
from ..tasks import (
    FILE_RE,
    Task,
    TaskState,
    allocate_id,
    claim_order,
    read_task_file,
    render_task,
    task_filename,
    task_label,
)
from .base import Change, Guard, QueueStore
from .claim_index import ClaimIndex

LOCK_STRIPES = 64  # bounded lock files; two tasks sharing a stripe only wait a moment


class FolderStore(QueueStore):
    def __init__(self, queue_dir: Path) -> None:
        self.root = queue_dir
        self.index = ClaimIndex(queue_dir / ".claim-index.sqlite", self.dir(TaskState.INCOMING))

    def dir(self, state: TaskState) -> Path:
        return self.root / state.value

    def path(self, task_id: str, state: TaskState) -> Path:
        return self.dir(state) / task_filename(task_id)

    def _lock(self, key: str) -> FileLock:
        stripe = zlib.crc32(key.encode()) % LOCK_STRIPES
        return FileLock(self.root / ".locks" / f"{stripe:02d}.lock")

    def initialize(self) -> None:
        for state in TaskState:
            self.dir(state).mkdir(parents=True, exist_ok=True)
        (self.root / ".locks").mkdir(exist_ok=True)

    def allocate_id(self) -> str:
        return allocate_id(self.root)

    def add(self, task: Task, state: TaskState) -> Task:
        target = self.path(task.id, state)
        with self._lock(task.id):
            found = self.locate(task.id)
            if found is not None:
                raise IllegalTransition(f"{task.label} already exists (in {found.value})")
            tmp, before = self._stage(task, target, state)
            try:
                os.link(tmp, target)  # fails, rather than overwrites, if the name exists
            except FileExistsError:
                raise IllegalTransition(f"{task.label} already exists (in {state.value})") from None
            finally:
                tmp.unlink(missing_ok=True)
            fsync_dir(target.parent)
            if state is TaskState.INCOMING:
                self.index.advance_synced(before)
        task.state, task.path = state, target
        return task

    def locate(self, task_id: str) -> TaskState | None:
        for _ in range(3):  # a task moving backwards mid-scan can be missed once
            for state in TaskState:
                if self.path(task_id, state).exists():
                    return state
        return None

    def get(self, task_id: str) -> Task:
        for _ in range(3):
            for state in TaskState:
                path = self.path(task_id, state)
                try:
                    return read_task_file(path, state)
                except FileNotFoundError:
                    continue
                except TaskParseError as exc:
                    if state is not TaskState.QUARANTINE:
                        self.quarantine(path, str(exc))
                    raise TaskParseError(f"{task_label(task_id)} is quarantined: {exc}") from None
        raise TaskNotFound(f"no task {task_label(task_id)} in any queue")

    def list(self, state: TaskState) -> list[Task]:
        tasks = [t for t in map(self._read_or_quarantine, self._files(state)) if t is not None]
        return sorted(tasks, key=claim_order)

    def count(self, state: TaskState) -> int:
        return sum(1 for path in self._files(state) if FILE_RE.fullmatch(path.name))

    def list_quarantine(self) -> list[tuple[str, str]]:
        """(file name, reason) for every quarantined file."""
        folder = self.dir(TaskState.QUARANTINE)
        out = []
        for path in sorted(folder.iterdir()):
            if path.name.endswith(".error") or path.name.startswith("."):
                continue
            error = path.with_name(path.name + ".error")
            reason = error.read_text(errors="replace").strip() if error.exists() else "unknown"
            out.append((path.name, reason))
        return out

    def _files(self, state: TaskState) -> list[Path]:
        folder = self.dir(state)
        return [folder / name for name in os.listdir(folder) if not name.startswith(".")]

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
        task_id: str,
        src: TaskState,
        dst: TaskState,
        change: Change,
        guard: Guard | None = None,
    ) -> Task | None:
        src_path, dst_path = self.path(task_id, src), self.path(task_id, dst)
        with self._lock(task_id):
            task = self._read_for_change(task_id, src)
            if guard is not None and not guard(task):
                return None
            change(task)
            if dst_path.exists():
                raise IllegalTransition(f"{task.label} is already in {dst.value}")
            tmp, before = self._stage(task, dst_path, dst)
            try:
                os.rename(src_path, dst_path)  # the state change; it decides every race
            except FileNotFoundError:
                tmp.unlink(missing_ok=True)
                raise LostRace(f"{task.label} left {src.value} before it could be moved") from None
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            os.replace(tmp, dst_path)
            fsync_dir(dst_path.parent)
            fsync_dir(src_path.parent)
            if src is TaskState.INCOMING:
                self.index.remove(task_id)
            if TaskState.INCOMING in (src, dst):
                self.index.advance_synced(before)
        task.state, task.path = dst, dst_path
        return task

    def _stage(self, task: Task, target: Path, state: TaskState) -> tuple[Path, int]:
        """Write the task's new text to a fsynced temp file beside ``target``.

        Returns it with incoming/'s mtime before the move. A task bound for incoming gets its
        index row now, before the rename, so the index never misses it.
        """
        tmp = write_temp(target, render_task(task).encode())
        before = self.index.folder_mtime()
        if state is TaskState.INCOMING:
            try:
                self.index.upsert(task, tmp.stat().st_mtime_ns)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        return tmp, before

    def update(self, task_id: str, state: TaskState, change: Change) -> Task:
        with self._lock(task_id):
            task = self._read_for_change(task_id, state)
            change(task)
            atomic_write(task.path, render_task(task))
            if state is TaskState.INCOMING:
                self.index.upsert(task, task.path.stat().st_mtime_ns)
        return task

    def _read_for_change(self, task_id: str, state: TaskState) -> Task:
        path = self.path(task_id, state)
        try:
            return read_task_file(path, state)
        except FileNotFoundError:
            raise LostRace(f"{task_label(task_id)} is not in {state.value}") from None
        except TaskParseError as exc:
            self.quarantine(path, str(exc))
            raise TaskParseError(f"{task_label(task_id)} was quarantined: {exc}") from None

    def claim(self, role: str | None, change: Change, now: datetime) -> Task | None:
        if self.index.is_stale():
            self.index.reconcile(self._read_or_quarantine)
        after = None
        while batch := self.index.candidates(role, after, now.timestamp()):
            for *key, blockers in batch:
                after = tuple(key)
                task_id = key[3]
                if not all(self.locate(b) is TaskState.DONE for b in blockers):
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

    def _still_eligible(self, task: Task, role: str | None, now: datetime) -> bool:
        """Re-check a candidate against its file (a person may have edited it)."""
        ok = (
            (role is None or task.role == role)
            and (task.not_before is None or task.not_before <= now)
            and all(self.locate(b) is TaskState.DONE for b in task.blocked_by)
        )
        if not ok:
            self.index.upsert(task, task.path.stat().st_mtime_ns)
        return ok

    def quarantine(self, path: Path, reason: str) -> Path:
        folder = self.dir(TaskState.QUARANTINE)
        with self._lock(path.name):
            target, n = folder / path.name, 0
            while target.exists():
                n += 1
                target = folder / f"{path.name}.{n}"
            error = target.with_name(target.name + ".error")
            atomic_write(error, f"{reason}\n(from {path.parent.name}/{path.name})\n")
            try:
                durable_rename(path, target)
            except FileNotFoundError:
                error.unlink(missing_ok=True)
                return target
        match = FILE_RE.fullmatch(path.name)
        if match and path.parent == self.dir(TaskState.INCOMING):
            self.index.remove(match.group(1))
        return target

    def sweep(self, now: datetime | None = None) -> int:
        cutoff = (now.timestamp() if now else time.time()) - defaults.STALE_TEMP_SECONDS
        removed = 0
        for state in TaskState:
            for name in os.listdir(self.dir(state)):
                path = self.dir(state) / name
                try:
                    if is_temp_name(name) and path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed

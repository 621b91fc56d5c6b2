"""Copy a queue between stores: ``octopoid export DIR`` writes the folder layout from the
current store (PostgreSQL or folders), ``octopoid import DIR`` loads such a layout into it.

Each task travels as its octopoid Markdown text, and its retry notes as ``notes/TASK-<id>.md``
(the notes are passed in as two functions: they live beside the store, not in it), so
export -> import -> export gives the same files byte for byte. Quarantined entries stay
behind (they are not tasks); an unreadable file in an imported folder is named in the
report and skipped, never half-loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...base.fsutil import atomic_write
from ...model.exceptions import IllegalTransition, InvalidInput, TaskParseError
from ...model.tasks import (
    FILE_RE,
    TaskState,
    read_regular,
    read_task_file,
    render_task,
    task_filename,
    task_label,
)
from .base import QueueStore

STATES = [s for s in TaskState if s is not TaskState.QUARANTINE]


@dataclass
class TransferReport:
    counts: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # one line each: which file, and why

    def lines(self, verb: str) -> list[str]:
        total = sum(self.counts.values())
        per = ", ".join(f"{n} {state}" for state, n in self.counts.items() if n)
        return [f"{verb} {total} task(s)" + (f": {per}" if per else ""), *self.skipped]


def export_queue(
    store: QueueStore, dest: Path, read_notes: Callable[[str], str | None]
) -> TransferReport:
    """Write every task (all states but quarantine) as ``dest/<state>/TASK-<id>.md`` and
    its notes, if any, as ``dest/notes/TASK-<id>.md``."""
    if dest.exists() and any(dest.iterdir()):
        raise InvalidInput(f"{dest} is not empty: export writes into a new or empty folder")
    report = TransferReport()
    for state in STATES:
        folder = dest / state.value
        folder.mkdir(parents=True, exist_ok=True)
        tasks = store.list(state)
        for task in tasks:
            atomic_write(folder / task_filename(task.id), render_task(task))
            notes = read_notes(task.id)
            if notes is not None:
                (dest / "notes").mkdir(exist_ok=True)
                atomic_write(dest / "notes" / task_filename(task.id), notes)
        report.counts[state.value] = len(tasks)
    return report


def import_queue(
    store: QueueStore, source: Path, put_notes: Callable[[str, str], bool]
) -> TransferReport:
    """Add every ``source/<state>/TASK-<id>.md`` to ``store`` in that state, ids kept, and
    give each imported task its ``source/notes/TASK-<id>.md`` (notes already here win)."""
    if not source.is_dir() or not any((source / s.value).is_dir() for s in STATES):
        raise InvalidInput(f"{source} has no queue folders (incoming/, claimed/, done/, ...)")
    report = TransferReport()
    for state in STATES:
        folder = source / state.value
        names = sorted(os.listdir(folder)) if folder.is_dir() else []
        report.counts[state.value] = 0
        for name in names:
            if not FILE_RE.fullmatch(name):
                continue
            try:
                task = read_task_file(folder / name, state)
                store.add(task, state)
            except (TaskParseError, IllegalTransition) as exc:
                report.skipped.append(f"skipped {state.value}/{name}: {exc}")
                continue
            report.counts[state.value] += 1
            _import_notes(source / "notes" / name, task.id, put_notes, report)
    return report


def _import_notes(
    path: Path, task_id: str, put_notes: Callable[[str, str], bool], report: TransferReport
) -> None:
    try:
        text = read_regular(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return
    except TaskParseError as exc:
        report.skipped.append(f"notes of {task_label(task_id)} not imported: {exc}")
        return
    if not put_notes(task_id, text):
        report.skipped.append(f"notes of {task_label(task_id)}: kept the notes already here")

"""Memory across a task's life: seeded at claim, written by the agent, promoted at accept.

The implementer seeds ``notes.TASK-<id>.md`` with the task (kept across retries, like the
retry notes); the agent adds to it with ``octopoid memory add``; the accept workflow
promotes its items into long-term memory (project scope, tagged with the task id,
provenance kept) and removes the file. ``queue_utils`` knows nothing of any of this.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import config
from ..locks import FileMutex
from ..redaction import redact
from ..tasks import Task, task_label
from .notes import NotesManager, get_notes_manager
from .store import open_memory, project_scope

if TYPE_CHECKING:
    from .store import Memory

EPHEMERAL_RE = re.compile(r"notes\.TASK-([A-Za-z0-9][A-Za-z0-9_-]{0,63})\.(md|lock)")


def seed_task_notes(task: Task) -> NotesManager:
    """The task's ephemeral notes, created with its title and context the first time."""
    context = f"{task.label}: {task.title}\n\n{task.context}".strip()
    return NotesManager.create_ephemeral(task.label, context)


def promote_task_notes(
    task_id: str, promoted_by: str = "octopoid", store: Memory | None = None
) -> int:
    """Copy a task's ephemeral items into long-term memory; return how many were new."""
    manager = NotesManager(notes_id=task_label(task_id))
    if not manager.notes_file.exists():
        return 0
    store = store or open_memory()
    before = store.count()
    for entry in manager.get_all_items():  # an agent may have edited the file directly
        store.write_note(
            redact(entry["item"]),
            section=entry["section"],
            tags=[task_label(task_id)],
            scope=project_scope(),
            task_id=task_label(task_id),
            metadata={"source": manager.notes_file.name, "promoted_by": promoted_by},
        )
    return store.count() - before


def index_main_notes(store: Memory) -> int:
    """Make the store hold every item of ``notes.md`` (hand edits included); return new ones."""
    manager = NotesManager()
    if not manager.notes_file.exists():
        return 0
    before = store.count()
    scope = project_scope()
    for entry in manager.get_all_items():
        if store.find_note(entry["item"], scope) is None:
            store.write_note(
                entry["item"],
                section=entry["section"],
                scope=scope,
                metadata={"source": "notes.md"},
            )
    return store.count() - before


def add_learning(section: str, text: str, tags: list[str], topic: str | None) -> dict[str, Any]:
    """`octopoid memory add`: into the task's notes when OCTOPOID_NOTES_ID is set, else into
    the main notes and long-term memory. Secrets are redacted first: memory reaches prompts."""
    text = redact(text)
    manager = get_notes_manager()
    added = manager.add_item(section, text)
    note_id = None
    if not manager.is_ephemeral:
        store = open_memory()
        note_id = store.write_note(
            text,
            section=section,
            topic=topic,
            tags=tags,
            scope=project_scope(),
            metadata={"source": "notes.md"},
        )
        store.close()
    return {"file": manager.notes_file.name, "added": added, "note_id": note_id}


def search(query: str, tags: list[str], limit: int) -> list[dict[str, Any]]:
    """`octopoid memory search`: long-term memory, with notes.md's items indexed first."""
    store = open_memory()
    try:
        index_main_notes(store)
        return store.search_notes(query, tags=tags or None, limit=limit)
    finally:
        store.close()


def forget(target: str) -> int:
    """`octopoid memory remove`: a note id, or an item's text (from notes.md and the store)."""
    store = open_memory()
    try:
        if target.isdigit():
            note = store.get_note(int(target))
            if note is None:
                return 0
            if note["metadata"].get("source") == "notes.md":
                NotesManager().remove_exact_item(note["content"])
            return int(store.delete_note(int(target)))
        removed = int(NotesManager().remove_exact_item(target))
        note_id = store.find_note(target, project_scope())
        return removed + (int(store.delete_note(note_id)) if note_id is not None else 0)
    finally:
        store.close()


def gc_ephemeral(is_over: Callable[[str], bool]) -> list[str]:
    """Remove ephemeral notes of tasks that are over (``is_over``: gone, or done with nothing
    left to promote), then their idle lock files."""
    folder = config.get_memory_dir()
    if not folder.is_dir():
        return []
    finished = []
    for path in folder.iterdir():
        match = EPHEMERAL_RE.fullmatch(path.name)
        if match and is_over(match.group(1)):
            finished.append((match.group(2), match.group(1), path))
    removed = []
    for kind, task_id, path in sorted(finished, key=lambda f: f[0] != "md"):  # notes first
        if kind == "md":
            NotesManager(notes_id=f"TASK-{task_id}").cleanup()
            removed.append(path.name)
            continue
        lock = FileMutex(path)
        if lock.acquire(blocking=False):  # never remove a lock someone holds
            lock.release(remove=True)
    return removed

"""Memory across a task's life: seeded at claim, written by the agent, promoted at accept.

The implementer seeds ``notes.TASK-<id>.md`` with the task (kept across retries, like the
retry notes); the agent adds to it with ``octopoid memory add`` (the channel stamps each
item with its task, attempt and agent); the accept workflow promotes the items of the
attempt it accepts, as the reviewer left them, into long-term memory (project scope,
tagged with the task id, provenance kept, an instruction-shaped one flagged) and removes
the file. Items of other attempts
(failed, rejected) are never promoted. ``queue_utils`` knows nothing of any of this.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from .. import config
from ..base.lazy import lazy_import
from ..base.locks import FileMutex
from ..base.patterns import LazyPattern
from ..base.text import ascii_int, clean_text
from ..model.exceptions import InvalidInput
from ..model.tasks import Task, format_time, plural, utcnow
from .instructions import instruction_shape
from .notes import Item, NotesManager, get_notes_manager
from .provenance import TASK_LABEL, Origin, clean_name, note_metadata

if TYPE_CHECKING:
    from .store import NoteStore

redaction = lazy_import("orchestrator.base.redaction")  # `show` lists learnings, redacts nothing
# and reads no store: the index, SQLite and hashlib load when a learning is promoted
memory_open = lazy_import("orchestrator.memory.open")
memory_store = lazy_import("orchestrator.memory.store")
MAX_LEARNING_CHARS = 4000  # as one item an agent may remember
EPHEMERAL_RE = LazyPattern(r"notes\.TASK-([A-Za-z0-9][A-Za-z0-9_-]{0,63})\.(md|lock)")


def seed_task_notes(task: Task) -> NotesManager:
    """The task's ephemeral notes, created with its title and context the first time."""
    context = f"{task.label}: {task.title}\n\n{task.context}".strip()
    return NotesManager.create_ephemeral(task.label, context)


def pending_learnings(task: Task) -> list[Item]:
    """What an accept of ``task`` would keep, numbered from 1 in this order (``show``,
    ``accept --forget N``): the items its submitted attempt recorded and those a person
    added, struck ones included (marked), so the numbers never shift. Items of other
    attempts (failed, rejected, superseded) and unstamped lines are not among them."""
    manager = NotesManager(notes_id=task.label)
    if not manager.notes_file.exists():
        return []
    # the attempt a runner submitted (``SUBMITTED_CLAIM``; no claim since), if any
    attempt = task.attempts if "SUBMITTED_CLAIM" in task.headers else None
    return [
        item
        for item in manager.items()
        if item.origin is not None
        and item.origin.task == task.label
        and item.origin.attempt in (None, attempt)
    ]


def kept_learnings(task: Task) -> list[Item]:
    """The pending learnings a reviewer did not strike: what promotion writes."""
    return [item for item in pending_learnings(task) if not item.origin.struck_by]


def review_learnings(
    task: Task,
    forget: Collection[int],
    edits: Mapping[int, str],
    by: str,
    keep: Collection[int] = (),
) -> list[Item]:
    """A reviewer strikes (``forget``), rewrites (``edits``) and keeps (``keep``: an
    instruction-shaped learning may then reach prompts) pending learnings by their numbers
    before an accept; each change is stamped with ``by``. Numbers are checked before
    anything changes (``InvalidInput``); the learnings as they are now come back."""
    pending = pending_learnings(task)
    wrong = sorted(n for n in {*forget, *edits, *keep} if not 1 <= n <= len(pending))
    if wrong:
        raise InvalidInput(
            f"{task.label} has {plural(len(pending), 'pending learning')}: no "
            f"{', '.join(f'#{n}' for n in wrong)} (`octopoid show {task.label}` numbers them)"
        )
    for n, text in edits.items():
        if not text.strip() or len(text) > MAX_LEARNING_CHARS:
            raise InvalidInput(
                f"learning #{n}: an edit is 1 to {MAX_LEARNING_CHARS} characters "
                "(`--forget` strikes a learning)"
            )
    manager = NotesManager(notes_id=task.label)
    for n, item in enumerate(pending, 1):
        origin, text = item.origin, item.text
        if n in edits and " ".join(edits[n].split()) != text:
            origin, text = origin.edited(by), edits[n]
        if n in keep and not origin.kept_by:
            origin = origin.kept(by)
        if n in forget and not origin.struck_by:
            origin = origin.struck(by)
        if (origin, text) != (item.origin, item.text):
            manager.replace_item(item, Item(item.section, text, origin))
    return pending_learnings(task)


def learning_rows(items: list[Item]) -> list[dict[str, Any]]:
    """Pending learnings as `show --json`, `accept --json` and the page give them."""
    return [
        {
            "number": n,
            "section": item.section,
            "text": item.text,
            "from": item.origin.said() if item.origin else "",
            "struck": bool(item.origin and item.origin.struck_by),
            "instruction": instruction_shape(item.text),
            "kept": bool(item.origin and item.origin.kept_by),
        }
        for n, item in enumerate(items, 1)
    ]


def note_fields(
    item: Item, task_label: str, promoted_by: str, when: str, source: str
) -> dict[str, Any]:
    """What promotion writes of a learning (``write_note``'s arguments but the scope): its
    text redacted, its provenance, and why it reads as an instruction, if it does."""
    text = redaction.redact(item.text)
    metadata = note_metadata(item.origin, source, clean_name(promoted_by), when)
    if shape := instruction_shape(text):
        metadata["instruction"] = shape
    return {
        "content": text,
        "section": item.section,
        "tags": [task_label],
        "agent": clean_name(item.origin.agent),
        "task_id": task_label,
        "metadata": metadata,
    }


def promote_task_notes(task: Task, promoted_by: str = "octopoid") -> int:
    """Copy the learnings an accept of ``task`` keeps into long-term memory, each with its
    provenance; return how many were new."""
    learnings = kept_learnings(task)
    if not learnings:
        return 0
    memory = memory_open.open_memory()
    before = memory.count()
    when = task.headers.get("COMPLETED_AT") or format_time(utcnow())
    source = NotesManager(notes_id=task.label).notes_file.name
    try:
        for item in learnings:
            fields = note_fields(item, task.label, promoted_by, when, source)
            memory.write_note(**fields, scope=memory_store.project_scope())
        return memory.count() - before
    finally:
        memory.close()


def index_main_notes(store: NoteStore) -> int:
    """Make the store hold every item of ``notes.md`` (hand edits included); return new ones."""
    manager = NotesManager()
    if not manager.notes_file.exists():
        return 0
    before = store.count()
    scope = memory_store.project_scope()
    for entry in manager.get_all_items():
        if store.find_note(entry["item"], scope) is None:
            store.write_note(
                entry["item"],
                section=entry["section"],
                scope=scope,
                metadata={"source": "notes.md"},
            )
    return store.count() - before


def add_learning(
    section: str, text: str, tags: Collection[str], topic: str | None
) -> dict[str, Any]:
    """`octopoid memory add` (and the MCP tool): into the task's notes when OCTOPOID_NOTES_ID
    is set, else into the main notes and long-term memory. The text is checked as it came
    (named as the CLI names it), then redacted: memory reaches prompts."""
    text = redaction.redact(clean_text(text, "TEXT"))
    tag_list = [clean_text(tag, "--tag") for tag in tags]
    topic = None if topic is None else clean_text(topic, "--topic")
    manager = get_notes_manager()
    added = manager.add_item(section, text, _persons_origin(manager.notes_id))
    note_id = None
    if not manager.is_ephemeral:
        store = memory_open.open_memory()
        note_id = store.write_note(
            text,
            section=section,
            topic=topic,
            tags=tag_list,
            scope=memory_store.project_scope(),
            metadata={"source": "notes.md"},
        )
        store.close()
    return {"file": manager.notes_file.name, "added": added, "note_id": note_id}


def _persons_origin(notes_id: str | None) -> Origin | None:
    """A person's item in a task's notes (``OCTOPOID_NOTES_ID`` set outside an attempt: an
    attempt's ``octopoid`` is the channel's client) is theirs, kept by the task's accept."""
    if notes_id is None or not re.fullmatch(TASK_LABEL, notes_id):
        return None
    return Origin(notes_id, None, "human")


def search(query: str, tags: list[str], limit: int) -> list[dict[str, Any]]:
    """`octopoid memory search`: long-term memory, with notes.md's items indexed first."""
    store = memory_open.open_memory()
    try:
        index_main_notes(store)
        return store.search_notes(query, tags=tags or None, limit=limit)
    finally:
        store.close()


def forget(target: str) -> int:
    """`octopoid memory remove`: a note id, or an item's text (from notes.md and the store)."""
    store = memory_open.open_memory()
    try:
        if (note_id := ascii_int(target)) is not None:
            note = store.get_note(note_id)
            if note is None:
                return 0
            if note["metadata"].get("source") == "notes.md":
                NotesManager().remove_exact_item(note["content"])
            return int(store.delete_note(int(target)))
        removed = int(NotesManager().remove_exact_item(target))
        note_id = store.find_note(target, memory_store.project_scope())
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

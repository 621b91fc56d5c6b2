"""QQ-style working notes: a Markdown file of sections and ``- item`` lines.

``notes.md`` is the project's main notes; ``notes.<id>.md`` is an ephemeral file per task
(``OCTOPOID_NOTES_ID`` picks it). The file is edited line by line: an add inserts one line,
a removal deletes one, and only the ``Last updated:`` line is ever rewritten, so anything a
person wrote in between survives. Every change holds ``notes[.<id>].lock`` and replaces the
file atomically (fsync of file and folder, mode kept), so ``apply_diff`` is all or nothing.

The file's structure comes from octopoid's writes only: an ephemeral file's Task Context is
quoted (``> `` before each line), so a ``## Important Facts`` heading in a task's text is not
a section and its ``- ...`` lines are not items; an item an attempt records is one line,
stamped with its origin (``provenance.py``) before its text.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from .. import config
from ..base.fsutil import atomic_write
from ..base.locks import FileMutex
from ..base.patterns import LazyPattern
from ..model.exceptions import InvalidMemoryInput, InvalidNotesId
from ..model.tasks import format_time, utcnow
from .provenance import Origin, parse_item, render_item

NOTES_ENV = "OCTOPOID_NOTES_ID"
SECTIONS = (
    "Key Topics",
    "Important Facts",
    "People & Entities",
    "Ongoing Threads",
    "File Knowledge",
)
TASK_CONTEXT = "Task Context"
NOTES_ID_RE = LazyPattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
UPDATED_PREFIX = "Last updated: "
QUOTE = "> "  # before every line of an ephemeral file's Task Context
ItemMatch = Callable[[str, str], bool]  # (section, item) -> remove it?


class Item(NamedTuple):
    """One ``- ...`` line of a section: its text, and who recorded it (None: unstamped)."""

    section: str
    text: str
    origin: Origin | None = None


def validate_notes_id(notes_id: str) -> str:
    if not isinstance(notes_id, str) or not NOTES_ID_RE.fullmatch(notes_id) or ".." in notes_id:
        shown = repr(notes_id)[:80]
        raise InvalidNotesId(
            f"invalid notes id {shown}: use 1-128 letters, digits, '.', '-' or '_' "
            "(no '/', '..' or NUL), starting with a letter or digit"
        )
    return notes_id


def normalize_item(item: str) -> str:
    """How items are compared: whitespace collapsed, case folded."""
    return " ".join(item.split()).casefold()


def _clean(item: str) -> str:
    text = " ".join(str(item).split())
    if not text:
        raise InvalidMemoryInput("an empty item cannot be added")
    return text


class NotesManager:
    def __init__(self, memory_dir: Path | str | None = None, notes_id: str | None = None):
        self.memory_dir = Path(memory_dir) if memory_dir else config.get_memory_dir()
        self.notes_id = validate_notes_id(notes_id) if notes_id is not None else None
        self._text: str | None = None

    # --- identity ---------------------------------------------------------------------

    @property
    def is_ephemeral(self) -> bool:
        return self.notes_id is not None

    def _path(self, suffix: str) -> Path:
        stem = f"notes.{self.notes_id}" if self.notes_id else "notes"
        return self.memory_dir / f"{stem}.{suffix}"

    @property
    def notes_file(self) -> Path:
        return self._path("md")

    @property
    def lock_file(self) -> Path:
        return self._path("lock")

    @classmethod
    def create_ephemeral(
        cls, notes_id: str, initial_context: str, memory_dir: Path | str | None = None
    ) -> NotesManager:
        """Start ``notes.<id>.md`` with the task context (quoted: never parsed as sections or
        items) and every section; a file that exists is kept as it is."""
        manager = cls(memory_dir, notes_id)
        with manager._locked():
            if not manager.notes_file.exists():
                atomic_write(manager.notes_file, manager._template(initial_context))
        return manager

    def _template(self, context: str | None = None) -> str:
        title = f"# Agent Notes ({self.notes_id})" if self.notes_id else "# Agent Notes"
        parts = [f"{title}\n\n{UPDATED_PREFIX}{format_time(utcnow())}\n\n"]
        if self.is_ephemeral:
            parts.append(f"## {TASK_CONTEXT}\n{_quoted((context or '').strip())}\n\n")
        parts += [f"## {section}\n\n" for section in SECTIONS]
        return "".join(parts)

    # --- reading ----------------------------------------------------------------------

    def load_notes(self) -> str:
        """Read the file from disk (the template when there is none yet)."""
        try:
            self._text = self.notes_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            self._text = self._template()
        return self._text

    def get_notes(self) -> str:
        return self._text if self._text is not None else self.load_notes()

    def items(self) -> list[Item]:
        """Every item of every section, with its origin, in file order."""
        return [item for _, item in _lines_of_items(self.load_notes().splitlines())]

    def get_all_items(self) -> list[dict[str, str]]:
        return [{"section": i.section, "item": i.text} for i in self.items()]

    def get_section_items(self, section: str) -> list[str]:
        section = _known(section)
        return [i.text for i in self.items() if i.section == section]

    def count_items(self) -> int:
        return len(self.get_all_items())

    def task_context(self) -> str:
        lines = self.load_notes().splitlines()
        span = _span(lines, TASK_CONTEXT)
        quoted = lines[span[0] + 1 : span[1]] if span else []
        return "\n".join(ln.removeprefix(QUOTE.rstrip()).removeprefix(" ") for ln in quoted).strip()

    # --- writing ----------------------------------------------------------------------

    def add_item(self, section: str, item: str, origin: Origin | None = None) -> bool:
        """Add ``item`` to ``section``, stamped with ``origin`` when given; False when the
        section already holds it from the same origin (task and attempt)."""
        new = Item(_known(section), _clean(item), origin)
        added = []
        self._edit(lambda lines: added.append(_add(lines, new)))
        return added[0]

    def replace_item(self, old: Item, new: Item) -> bool:
        """Rewrite the line of ``old`` (same section, text and origin) as ``new`` (in the
        same section); False when the file holds no such item."""
        replaced = []

        def change(lines: list[str]) -> None:
            for at, item in _lines_of_items(lines):
                if item == old:
                    lines[at] = f"- {render_item(_clean(new.text), new.origin)}"
                    replaced.append(at)
                    return

        self._edit(change)
        return bool(replaced)

    def remove_item(self, section: str, item_pattern: str) -> bool:
        """Remove the first item *of that section* containing ``item_pattern``."""
        section, pattern = _known(section), item_pattern.casefold()
        return self._remove_where(lambda s, i: s == section and pattern in i.casefold())

    def remove_exact_item(self, item: str) -> bool:
        """Remove the first item, in any section, equal to ``item`` (normalised)."""
        wanted = normalize_item(item)
        return self._remove_where(lambda s, i: normalize_item(i) == wanted)

    def update_section(self, section: str, items: Iterable[str]) -> None:
        """Replace a section's items."""
        section, new = _known(section), [_clean(i) for i in items]

        def change(lines: list[str]) -> None:
            _drop_items(lines, lambda s, i: s == section)
            for item in new:
                _add(lines, Item(section, item))

        self._edit(change)

    def apply_diff(self, additions: Iterable[dict], removals: Iterable[str]) -> None:
        """Add and remove items in one locked, atomic write: all of it lands, or none."""
        adds = [(_known(a["section"]), _clean(a["item"])) for a in additions]
        drops = {normalize_item(r) for r in removals}

        def change(lines: list[str]) -> None:
            _drop_items(lines, lambda s, i: normalize_item(i) in drops)
            for section, item in adds:
                _add(lines, Item(section, item))

        self._edit(change)

    def rebuild_with_items(self, items: Iterable[dict]) -> None:
        """Rewrite every section from ``items`` (an ``origin`` of one is kept); the header
        and Task Context are kept."""
        wanted = [Item(_known(i["section"]), _clean(i["item"]), i.get("origin")) for i in items]
        context = self.task_context() if self.is_ephemeral else None

        def change(lines: list[str]) -> None:
            lines[:] = self._template(context).splitlines()
            for item in wanted:
                _add(lines, item)

        self._edit(change)

    def cleanup(self) -> bool:
        """Delete an ephemeral notes file (under its lock; the lock file is left alone)."""
        if not self.is_ephemeral:
            return False
        with self._locked():
            try:
                self.notes_file.unlink()
            except FileNotFoundError:
                return False
        self._text = None
        return True

    def _locked(self) -> FileMutex:
        self.memory_dir.mkdir(parents=True, exist_ok=True)
        return FileMutex(self.lock_file)

    def _edit(self, change: Callable[[list[str]], None]) -> None:
        with self._locked():
            lines = self.load_notes().splitlines()
            before = list(lines)
            change(lines)
            if lines == before:
                return
            _touch(lines)
            self._text = "\n".join(lines) + "\n"
            atomic_write(self.notes_file, self._text)

    def _remove_where(self, match: ItemMatch) -> bool:
        removed = []
        self._edit(lambda lines: removed.append(_drop_items(lines, match, first=True)))
        return bool(removed[0])


def get_notes_manager(memory_dir: Path | str | None = None) -> NotesManager:
    """The manager ``OCTOPOID_NOTES_ID`` selects: ephemeral when set, the main notes when not."""
    return NotesManager(memory_dir, os.environ.get(NOTES_ENV) or None)


# --- line-level helpers (the file is a list of lines) ---------------------------------------


def _known(section: str) -> str:
    for name in (*SECTIONS, TASK_CONTEXT):
        if section.strip().casefold() == name.casefold():
            if name == TASK_CONTEXT:
                raise InvalidMemoryInput("Task Context is set when the notes are created")
            return name
    raise InvalidMemoryInput(f"unknown section {section!r}; sections are: {', '.join(SECTIONS)}")


def _span(lines: list[str], section: str) -> tuple[int, int] | None:
    """(heading index, index after the section's last line), or None."""
    start = next((n for n, ln in enumerate(lines) if ln.strip() == f"## {section}"), None)
    if start is None:
        return None
    end = next((n for n in range(start + 1, len(lines)) if lines[n].startswith("## ")), len(lines))
    return start, end


def _quoted(text: str) -> str:
    return "\n".join(f"{QUOTE}{line}".rstrip() for line in text.splitlines())


def _lines_of_items(lines: list[str]) -> Iterable[tuple[int, Item]]:
    """(line index, item) of every item line: ``- ...`` under a known section's heading."""
    section = None
    for n, line in enumerate(lines):
        if line.startswith("## "):
            section = line[3:].strip()
        elif section in SECTIONS and line.startswith("- "):
            origin, text = parse_item(line[2:].strip())
            yield n, Item(section, text, origin)


def _same(item: Item) -> tuple[str, str, str | None, int | None]:
    """What makes two items one: section, text (normalised), task and attempt."""
    origin = item.origin
    task, attempt = (origin.task, origin.attempt) if origin else (None, None)
    return item.section, normalize_item(item.text), task, attempt


def _add(lines: list[str], item: Item) -> bool:
    span = _span(lines, item.section)
    if span is None:
        lines.extend([f"## {item.section}", ""])
        span = (len(lines) - 2, len(lines))
    start, end = span
    if any(_same(old) == _same(item) for _, old in _lines_of_items(lines)):
        return False
    at = end
    while at > start + 1 and not lines[at - 1].strip():
        at -= 1
    lines.insert(at, f"- {render_item(item.text, item.origin)}")
    return True


def _drop_items(lines: list[str], match: ItemMatch, first: bool = False) -> int:
    doomed = [n for n, item in _lines_of_items(lines) if match(item.section, item.text)]
    for n in reversed(doomed[:1] if first else doomed):
        del lines[n]
    return len(doomed[:1] if first else doomed)


def _touch(lines: list[str]) -> None:
    stamp = f"{UPDATED_PREFIX}{format_time(utcnow())}"
    for n, line in enumerate(lines):
        if line.startswith(UPDATED_PREFIX):
            lines[n] = stamp
            return
    lines[1:1] = ["", stamp]

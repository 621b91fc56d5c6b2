"""Per-task retry notes: what each attempt left behind, for the next attempt to read.

The file is ``shared/notes/TASK-<id>.md``: a title, then one section per attempt (and per
review rejection). Agent output sits inside a code fence longer than any backtick run in
it, so a ``## Attempt`` line printed by an agent can never pose as a section. Saves take
``TASK-<id>.md.lock`` and replace the file atomically: a crash leaves the old notes whole.

Only ``config.get_notes_dir()`` is needed, as in octopoid: with no project found (or a
config.yaml that does not load), the documented defaults (``defaults.py``) apply, so notes
are saved whatever else is wrong. When the queue lives in PostgreSQL the notes do too
(``notes_book``): the same text, as rows, so a retry on another machine reads them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import config
from ..base.fsutil import atomic_write
from ..base.lazy import lazy_import
from ..base.locks import FileMutex, holding
from ..base.patterns import LazyPattern
from ..model import defaults
from ..model.exceptions import ConfigError
from ..model.tasks import TaskId, format_time, one_line, task_label, utcnow
from .call_forms import TaskRef, task_id_of

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from .line_comments import LineComment

redaction = lazy_import("orchestrator.base.redaction")  # at first use: readers never redact
BACKTICK_RUN_RE = LazyPattern(r"`+")
ATTEMPT_RE = LazyPattern(r"Attempt (\d+) — ")
REVIEW_COMMENTS = "Review Comments"  # heading of a rejection's line comments (kind "review")


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run inside ``text`` (at least three)."""
    longest = max((len(m) for m in BACKTICK_RUN_RE.findall(text)), default=0)
    return "`" * max(3, longest + 1)


def fenced(text: str, info: str = "text") -> str:
    fence = fence_for(text)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{info}\n{body}{fence}\n"


class NotesSection:
    """One ``## `` section of a notes file; ``kind`` is ``attempt``, ``review`` or ``other``.
    A plain class: built as a dataclass at import it cost `show` and `enqueue` ~2 M
    instructions, for two attributes no caller compares."""

    __slots__ = ("body", "heading")

    def __init__(self, heading: str, body: str) -> None:
        self.heading = heading
        self.body = body

    @property
    def kind(self) -> str:
        if ATTEMPT_RE.match(self.heading):
            return "attempt"
        for kind in ("review", "checks"):
            if self.heading.lower().startswith(kind):
                return kind
        return "other"

    @property
    def is_review_comments(self) -> bool:
        return self.heading.startswith(REVIEW_COMMENTS + " ")

    @property
    def attempt(self) -> int | None:
        match = ATTEMPT_RE.match(self.heading)
        return int(match.group(1)) if match else None

    def render(self) -> str:
        return f"## {self.heading}\n{self.body}"


def split_notes(text: str) -> tuple[str, list[NotesSection]]:
    """(text before the first section, sections), ignoring ``## `` lines inside fences."""
    head: list[str] = []
    sections: list[NotesSection] = []
    fence = 0
    for line in text.splitlines(keepends=True):
        run = len(line) - len(line.lstrip("`"))
        if fence and run >= fence and not line.strip().strip("`"):
            fence = 0
        elif not fence and run >= 3:
            fence = run
        elif not fence and line.startswith("## "):
            sections.append(NotesSection(line[3:].rstrip("\n"), ""))
            continue
        if sections:
            sections[-1].body += line
        else:
            head.append(line)
    return "".join(head), sections


def notes_dir() -> Path:
    """``config.get_notes_dir()``, created if missing (a caller may point it at a new folder)."""
    folder = config.get_notes_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def notes_path(task_id: str) -> Path:
    return notes_dir() / f"{task_label(TaskId(task_id))}.md"


def stdout_log_path(task_id: str) -> Path:
    return notes_dir() / f"{task_label(TaskId(task_id))}.stdout.log"


def stdout_limit() -> int:
    """Characters of output kept per attempt: config.yaml's ``notes.stdout_limit``, or
    ``defaults.NOTES_STDOUT_LIMIT`` when there is no project config to read."""
    try:
        return int(config.load_config()["notes"]["stdout_limit"])
    except ConfigError:
        return defaults.NOTES_STDOUT_LIMIT


def _lock(path: Path, remove: bool = False) -> AbstractContextManager[FileMutex]:
    """The notes file's lock (``TASK-<id>.md.lock``) for the block."""
    return holding(path.with_name(path.name + ".lock"), remove)


class NotesFiles:
    """Retry notes as files in ``shared/notes`` (the folder store's book)."""

    def read(self, task_id: str) -> str | None:
        return read_notes_file(notes_path(task_id))

    def append(self, task_id: str, title: str, make_sections: Callable[[str], str]) -> None:
        path = notes_path(task_id)
        with _lock(path):
            current = read_notes_file(path) or title
            atomic_write(path, current + make_sections(current))

    def take_back(self, task_id: str, added: str, title: str) -> None:
        path = notes_path(task_id)
        with _lock(path):
            current = read_notes_file(path)
            at = -1 if current is None else current.rfind(added)
            if at < 0:
                return
            rest = current[:at] + current[at + len(added) :]
            if rest == title:
                path.unlink()
            else:
                atomic_write(path, rest)

    def put(self, task_id: str, text: str) -> bool:
        path = notes_path(task_id)
        with _lock(path):
            current = read_notes_file(path)
            if current is None:
                atomic_write(path, text)
        return current in (None, text)

    def remove(self, task_id: str) -> bool:
        path = notes_path(task_id)
        # removing the lock is safe: a waiter re-checks it holds the file it locked
        with _lock(path, remove=True):
            existed = path.exists()
            path.unlink(missing_ok=True)
        return existed

    def task_ids(self) -> list[str]:
        return sorted(p.name[len("TASK-") : -len(".md")] for p in notes_dir().glob("TASK-*.md"))


def notes_book() -> Any:
    """Where retry notes live: PostgreSQL when the queue does (so an attempt on any machine
    reads what the others left), else the notes folder. Both keep the same text."""
    backend, dsn = config.store_choice()
    if backend == "postgres" and dsn:
        from ..pg.schema import shared
        from .store.postgres import PostgresNotes

        return PostgresNotes(shared(dsn))
    return NotesFiles()


def notes_location(task_id: str) -> str:
    """Where a task's notes are kept, for ``octopoid notes --path``."""
    task_id = TaskId(task_id)
    if isinstance(notes_book(), NotesFiles):
        return str(notes_path(task_id))
    return f"PostgreSQL: octopoid.notes rows with task_id '{task_id}'"


def get_task_notes(task_id: TaskRef) -> str | None:
    """The task's retry notes, or None when it has none (seed API)."""
    return notes_book().read(task_id_of(task_id))


def put_notes(task_id: str, text: str) -> bool:
    """Give a task these notes if it has none (an import); False if other notes were kept."""
    return notes_book().put(TaskId(task_id), text)


def noted_task_ids() -> list[str]:
    """The ids of every task that has notes."""
    return notes_book().task_ids()


def tail_with_marker(text: str, limit: int, already_dropped: int = 0) -> str:
    """The last ``limit`` characters, opened by ``[...truncated K chars...]`` when cut."""
    dropped = already_dropped + max(0, len(text) - limit)
    tail = text[-limit:] if len(text) > limit else text
    return f"[...truncated {dropped} chars...]\n{tail}" if dropped else tail


def append_attempt(
    task_id: str,
    agent_name: str,
    stdout: str,
    commits: int | None,
    turns: int,
    *,
    attempt: int | None = None,
    dropped_chars: int = 0,
    cost_usd: float | None = None,
    now: datetime | None = None,
) -> None:
    """Append one ``## Attempt N`` section holding the tail of an attempt's output.

    ``attempt`` should come from the task's ``ATTEMPTS`` header (``queue_utils`` passes
    it); without it the number is one past the highest attempt section already saved.
    ``dropped_chars`` counts output a streaming tail buffer already let go, so the
    truncation marker tells the whole story.
    """
    task_id = TaskId(task_id)
    limit = stdout_limit()
    meta = f"Turns: {turns} | Commits: {'unknown' if commits is None else commits}"
    if cost_usd is not None:
        meta += f" | Cost: ${cost_usd:.2f}"
    output = tail_with_marker(redaction.redact(stdout), limit, dropped_chars) or "(no output)"
    who = one_line(agent_name, 80) or "agent"
    stamp = format_time(now or utcnow())

    def section(current: str) -> str:
        number = attempt or max((s.attempt or 0 for s in split_notes(current)[1]), default=0) + 1
        heading = f"Attempt {number} — {who} ({stamp})"
        return NotesSection(heading, f"{meta}\n\n{fenced(output)}\n").render()

    _append(task_id, section)


def salvage_output_log(
    task_id: str, agent_name: str, attempt: int, why: str, archive: Path
) -> bool:
    """Save notes for an attempt whose runner died, from the output it streamed to disk.

    The tail of ``TASK-<id>.stdout.log`` becomes the attempt's section, then the log moves
    to ``archive`` (so the next attempt starts a fresh one). False if there was no log.
    """
    log = stdout_log_path(task_id)
    limit = stdout_limit()
    with _lock(notes_path(task_id)):  # two salvagers of one log: the second finds none
        try:
            with open(log, "rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - 4 * limit))
                tail = f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return False
        dropped = max(0, size - 4 * limit)
        append_attempt(
            task_id,
            agent_name,
            f"[octopoid] {why}; its output so far:\n{tail}",
            None,
            0,
            attempt=attempt,
            dropped_chars=dropped,
        )
        archive.parent.mkdir(parents=True, exist_ok=True)
        os.replace(log, archive)
    return True


def add_review_notes(
    task_id: str,
    reason: str,
    rejected_by: str,
    now: datetime | None = None,
    comments: Sequence[LineComment] = (),
) -> str:
    """Append the reviewer's reject reason, and a ``Review Comments`` section for line
    comments, so the next attempt reads them. Every text (path, code line, comment) is
    redacted and fenced: none of it can pose as a section.

    Returns the text appended, so a rejection whose move fails can take exactly it back
    (``take_back_notes``) without touching anything written since.
    """
    who = one_line(rejected_by, 80) or "reviewer"
    stamp = format_time(now or utcnow())
    sections = [
        NotesSection(
            f"Review — rejected by {who} ({stamp})", f"\n{fenced(redaction.redact(reason))}\n"
        )
    ]
    if comments:
        body = "".join(
            f"\n### {redaction.redact(c.path)}, {c.where}\n"
            f"{fenced(redaction.redact(c.code), 'text')}"
            f"{fenced(redaction.redact(c.text), 'comment')}"
            for c in comments
        )
        sections.append(NotesSection(f"{REVIEW_COMMENTS} — {who} ({stamp})", body + "\n"))
    added = "".join(section.render() for section in sections)
    _append(TaskId(task_id), lambda _: added)
    return added


def take_back_notes(task_id: str, added: str) -> None:
    """Remove what ``add_review_notes`` appended (the move it explained failed); sections
    saved since stay. Notes left with nothing but their title are deleted."""
    task_id = TaskId(task_id)
    notes_book().take_back(task_id, added, _new_notes(task_id))


def add_notes_section(task_id: str, heading: str, body: str) -> None:
    """Append a section octopoid wrote about an attempt (what the checks said, why a
    breakdown answer was refused), fenced like agent output."""
    text = f"\n{fenced(redaction.redact(body))}\n"
    _append(TaskId(task_id), lambda _: NotesSection(heading, text).render())


def _append(task_id: str, make_sections: Callable[[str], str]) -> None:
    """Add sections under the task's notes lock; ``make_sections`` sees the current text."""
    notes_book().append(task_id, _new_notes(task_id), make_sections)


def read_notes_file(path: Path) -> str | None:
    """A notes file's text (octopoid's too, for the importer); None if there is none."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return None


def _new_notes(task_id: str) -> str:
    return f"# Agent Notes: {task_label(task_id)}\n\n"


def notes_summary(task_id: str) -> dict[str, int]:
    """How many attempts and rejections a task's notes hold (a rejection's line comments
    are part of it, not one more)."""
    _, sections = split_notes(get_task_notes(task_id) or "")
    return {
        "attempts": sum(1 for s in sections if s.kind == "attempt"),
        "reviews": sum(1 for s in sections if s.kind == "review" and not s.is_review_comments),
    }


def cleanup_task_notes(task_id: TaskRef) -> bool:
    """Delete the task's retry notes and output log; True if the notes existed (seed API)."""
    task_id = task_id_of(task_id)
    existed = notes_book().remove(task_id)
    stdout_log_path(task_id).unlink(missing_ok=True)
    return existed

"""The task: its states, its id, and its file format (``docs/task-format.md``).

A task file is a title line, a block of ``KEY: value`` header lines, then ``## `` sections.
``parse_task`` and ``render_task`` are exact inverses on files octopoid writes. Everything a
header holds is checked at parse time, so a task that parses can be scheduled.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock

from . import defaults
from .exceptions import InvalidTask, InvalidTaskId, TaskParseError
from .fsutil import atomic_write
from .redaction import redact


class TaskState(str, enum.Enum):
    """A queue folder; the folder a task file is in is its state."""

    INCOMING = "incoming"
    CLAIMED = "claimed"
    PROVISIONAL = "provisional"
    DONE = "done"
    FAILED = "failed"
    REJECTED = "rejected"
    BREAKDOWN = "breakdown"
    QUARANTINE = "quarantine"


PRIORITIES = ("P0", "P1", "P2", "P3")
DEFAULT_PRIORITY = "P1"
DEFAULT_ROLE = "implement"
DEFAULT_BRANCH = "main"

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
FILE_RE = re.compile(r"TASK-([A-Za-z0-9][A-Za-z0-9_-]{0,63})\.md")
TITLE_RE = re.compile(r"# \[TASK-([^\]\n]*)\] ?(.*)")
HEADER_RE = re.compile(r"([A-Z][A-Z0-9_]*): ?(.*)")
FENCE_RE = re.compile(r"(`{3,}|~{3,})")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def normalize_task_id(raw: str) -> str:
    """Turn ``TASK-12``, ``task-12`` or ``12`` into the bare id ``12``; refuse anything else.

    This is the only way a user's id reaches a path.
    """
    if not isinstance(raw, str):
        raise InvalidTaskId(f"task id must be text, got {type(raw).__name__}")
    text = raw.strip()
    if "\x00" in text:
        raise InvalidTaskId("task id contains a NUL byte")
    if text[:5].upper() == "TASK-":
        text = text[5:]
    if not ID_RE.fullmatch(text):
        shown = raw if len(raw) <= 70 else raw[:67] + "..."
        raise InvalidTaskId(
            f"invalid task id {shown!r}: use TASK-<id> or <id>, where <id> is 1-64 letters, "
            "digits, '-' or '_' starting with a letter or digit"
        )
    return text


def task_label(task_id: str) -> str:
    """``12`` -> ``TASK-12``: how ids are shown and how files are named."""
    return f"TASK-{task_id}"


def task_filename(task_id: str) -> str:
    return f"{task_label(task_id)}.md"


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("naive datetime: octopoid times are timezone-aware UTC")
    return moment.astimezone(UTC).strftime(TIME_FORMAT)


def parse_time(text: str) -> datetime:
    """ISO-8601 to an aware UTC datetime; a time without a zone is taken as UTC."""
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def one_line(text: str, limit: int) -> str:
    """Collapse whitespace so a value fits one header or history line, and cap its length."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass
class Task:
    """One task file in memory. ``state`` and ``path`` say where it was read from."""

    id: str
    title: str
    headers: dict[str, str] = field(default_factory=dict)
    preamble: str = ""
    sections: list[tuple[str, str]] = field(default_factory=list)
    state: TaskState | None = None
    path: Path | None = None

    @property
    def label(self) -> str:
        return task_label(self.id)

    @property
    def role(self) -> str:
        return self.headers.get("ROLE") or DEFAULT_ROLE

    @property
    def priority(self) -> str:
        return self.headers.get("PRIORITY") or DEFAULT_PRIORITY

    @property
    def branch(self) -> str:
        return self.headers.get("BRANCH") or DEFAULT_BRANCH

    @property
    def created(self) -> datetime | None:
        value = self.headers.get("CREATED")
        return parse_time(value) if value else None

    @property
    def blocked_by(self) -> list[str]:
        value = self.headers.get("BLOCKED_BY", "")
        return [normalize_task_id(part) for part in re.split(r"[,\s]+", value) if part]

    @property
    def attempts(self) -> int:
        return int(self.headers.get("ATTEMPTS") or 0)

    @property
    def not_before(self) -> datetime | None:
        """When a backed-off task (rate limit) may be claimed again."""
        value = self.headers.get("NOT_BEFORE")
        return parse_time(value) if value else None

    @property
    def lease_expires(self) -> datetime | None:
        value = self.headers.get("LEASE_EXPIRES")
        return parse_time(value) if value else None

    def section(self, name: str) -> str | None:
        for heading, content in self.sections:
            if heading == name:
                return content
        return None

    @property
    def context(self) -> str:
        return (self.section("Context") or "").strip()

    @property
    def criteria(self) -> list[str]:
        lines = (self.section("Acceptance Criteria") or "").splitlines()
        return [re.sub(r"^- \[[ xX]\] ", "", ln).strip() for ln in lines if ln.strip()]

    @property
    def history(self) -> list[str]:
        lines = (self.section("History") or "").splitlines()
        return [ln[2:] for ln in lines if ln.startswith("- ")]

    def set_header(self, key: str, value: object) -> None:
        self.headers[key] = one_line(str(value), 1000)

    def drop_header(self, *keys: str) -> None:
        for key in keys:
            self.headers.pop(key, None)

    def add_history(
        self, moment: datetime, src: str, dst: str, actor: str, reason: str = ""
    ) -> None:
        """Append one ``## History`` line: UTC time, from -> to, who, why."""
        who = one_line(actor, 100) or "unknown"
        why = one_line(redact(reason), defaults.MAX_HISTORY_REASON_CHARS)
        line = f"- {format_time(moment)}  {src} → {dst}  ({who}{': ' + why if why else ''})\n"
        for i, (heading, content) in enumerate(self.sections):
            if heading == "History":
                if content and not content.endswith("\n"):
                    content += "\n"
                self.sections[i] = (heading, content + line)
                return
        self.sections.append(("History", line))


def new_task(
    task_id: str,
    title: str,
    *,
    role: str = DEFAULT_ROLE,
    priority: str = DEFAULT_PRIORITY,
    branch: str = DEFAULT_BRANCH,
    context: str = "",
    criteria: Iterable[str] = (),
    blocked_by: Iterable[str] = (),
    created_by: str = "human",
    now: datetime | None = None,
) -> Task:
    """A new task as it enters incoming; bad input is ``InvalidTask``."""
    title = one_line(title, 200)
    if not title:
        raise InvalidTask("a task needs a title")
    if priority not in PRIORITIES:
        raise InvalidTask(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
    if not ID_RE.fullmatch(role):
        raise InvalidTask(f"role must be a word of letters, digits, '-' or '_', got {role!r}")
    now = now or utcnow()
    blockers = [task_label(normalize_task_id(b)) for b in blocked_by]
    task = Task(id=task_id, title=title)
    for key, value in (
        ("ROLE", role),
        ("PRIORITY", priority),
        ("BRANCH", branch),
        ("CREATED", format_time(now)),
        ("CREATED_BY", created_by),
        ("BLOCKED_BY", ", ".join(blockers)),
        ("ATTEMPTS", 0),
    ):
        if value != "":
            task.set_header(key, value)
    body = context.strip()
    task.sections.append(("Context", f"{body}\n\n" if body else "\n"))
    items = "".join(f"- [ ] {one_line(c, 500)}\n" for c in criteria if c.strip())
    task.sections.append(("Acceptance Criteria", f"{items}\n" if items else "\n"))
    task.add_history(now, "new", TaskState.INCOMING.value, created_by)
    return task


def claim_order(task: Task) -> tuple[int, str, int, str]:
    """Priority, then creation time, then numeric id: the order claims take tasks in."""
    seq = int(task.id) if task.id.isdigit() else 0
    return (PRIORITIES.index(task.priority), task.headers.get("CREATED", ""), seq, task.id)


def render_task(task: Task) -> str:
    """The file text of a task; ``parse_task(render_task(t))`` gives ``t`` back."""
    parts = [f"# [{task.label}] {task.title}\n\n"]
    parts.extend(f"{key}: {value}\n" for key, value in task.headers.items())
    if task.preamble or task.sections:
        parts.append("\n")
    parts.append(task.preamble)
    for heading, content in task.sections:
        parts.append(f"## {heading}\n{content}")
    return "".join(parts)


def parse_task(text: str, expected_id: str | None = None) -> Task:
    """Read a task file's text; raise ``TaskParseError`` saying what is wrong and where."""
    text = text.replace("\r\n", "\n")
    lines = text.splitlines(keepends=True)
    if not lines:
        raise TaskParseError("the file is empty")
    task = _parse_title(lines[0].rstrip("\n"), expected_id)
    i = 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    while i < len(lines) and not lines[i].startswith("## "):
        line = lines[i].rstrip("\n")
        if not line.strip():
            break
        match = HEADER_RE.fullmatch(line)
        if not match:
            raise TaskParseError(f"line {i + 1}: expected 'KEY: value' header, got {line[:60]!r}")
        key, value = match.groups()
        if key in task.headers:
            raise TaskParseError(f"line {i + 1}: header {key} appears twice")
        task.headers[key] = value
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    _parse_body(task, lines[i:])
    _check_headers(task)
    return task


def _parse_title(line: str, expected_id: str | None) -> Task:
    match = TITLE_RE.fullmatch(line)
    if not match:
        raise TaskParseError(f"line 1 must be '# [TASK-<id>] Title', got {line[:60]!r}")
    try:
        task_id = normalize_task_id(match.group(1))
    except InvalidTaskId as exc:
        raise TaskParseError(f"line 1: {exc}") from None
    if expected_id is not None and task_id != expected_id:
        raise TaskParseError(
            f"line 1 names TASK-{task_id} but the file is {task_filename(expected_id)}"
        )
    if not match.group(2).strip():
        raise TaskParseError("line 1: the task has no title")
    return Task(id=task_id, title=match.group(2))


def _parse_body(task: Task, lines: list[str]) -> None:
    """Split the body into a preamble and ``## `` sections, ignoring headings in code fences."""
    current: list[str] = []
    heading: str | None = None
    fence: str | None = None
    for line in lines:
        fence_match = FENCE_RE.match(line)
        if fence_match:
            marker = fence_match.group(1)
            if fence is None:
                fence = marker
            elif marker.startswith(fence):
                fence = None
        if fence is None and line.startswith("## "):
            _close_section(task, heading, current)
            heading, current = line[3:].rstrip("\n"), []
        else:
            current.append(line)
    _close_section(task, heading, current)


def _close_section(task: Task, heading: str | None, lines: list[str]) -> None:
    if heading is None:
        task.preamble = "".join(lines)
    else:
        task.sections.append((heading, "".join(lines)))


def _check_headers(task: Task) -> None:
    """Refuse header values the scheduler could not act on."""
    h = task.headers
    try:
        if "PRIORITY" in h and h["PRIORITY"] not in PRIORITIES:
            raise ValueError(f"PRIORITY must be one of {', '.join(PRIORITIES)}")
        if "ROLE" in h and not ID_RE.fullmatch(h["ROLE"]):
            raise ValueError("ROLE must be a word of letters, digits, '-' or '_'")
        if "ATTEMPTS" in h and not h["ATTEMPTS"].isdigit():
            raise ValueError("ATTEMPTS must be a whole number")
        for key in ("CREATED", "LEASE_EXPIRES", "NOT_BEFORE"):
            if h.get(key):
                parse_time(h[key])
        task.blocked_by  # noqa: B018 - validates every id listed
    except (ValueError, InvalidTaskId) as exc:
        raise TaskParseError(f"bad header: {exc}") from None


def read_task_file(path: Path, state: TaskState | None = None) -> Task:
    """Parse the task at ``path``; size, encoding and name problems are ``TaskParseError``."""
    match = FILE_RE.fullmatch(path.name)
    if not match:
        raise TaskParseError(f"file name {path.name!r} is not TASK-<id>.md")
    size = path.stat().st_size
    if size > defaults.MAX_TASK_FILE_BYTES:
        raise TaskParseError(
            f"file is {size} bytes; task files are limited to {defaults.MAX_TASK_FILE_BYTES}"
        )
    data = path.read_bytes()
    if b"\x00" in data:
        raise TaskParseError("file contains NUL bytes (binary data, not a task)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskParseError(f"file is not valid UTF-8 (byte {exc.start})") from None
    task = parse_task(text, expected_id=match.group(1))
    task.state, task.path = state, path
    return task


def allocate_id(queue_dir: Path) -> str:
    """The next sequential id, under a lock, never one that a queue folder already holds."""
    queue_dir.mkdir(parents=True, exist_ok=True)
    counter = queue_dir / ".last_id"
    with FileLock(queue_dir / ".id.lock"):
        try:
            last = int(counter.read_text().strip())
        except (FileNotFoundError, ValueError):
            last = _highest_numeric_id(queue_dir)
        candidate = last + 1
        while any(
            (queue_dir / s.value / task_filename(str(candidate))).exists() for s in TaskState
        ):
            candidate += 1
        atomic_write(counter, f"{candidate}\n")
    return str(candidate)


def _highest_numeric_id(queue_dir: Path) -> int:
    highest = 0
    for state in TaskState:
        folder = queue_dir / state.value
        if folder.is_dir():
            for name in os.listdir(folder):
                match = FILE_RE.fullmatch(name)
                if match and match.group(1).isdigit():
                    highest = max(highest, int(match.group(1)))
    return highest

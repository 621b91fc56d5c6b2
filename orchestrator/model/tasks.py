"""The task: its states, its id, and its file format (``docs/task-format.md``).

A task file is a title line, a block of ``KEY: value`` header lines, then ``## `` sections.
``parse_task`` and ``render_task`` are exact inverses on files octopoid writes. Everything a
header holds is checked at parse time, so a task that parses can be scheduled. A user's
context can never start a section: its ``## `` lines are stored escaped (``\\## ``).

Its size: the Task model with its parse and render. The id rules are ``ids.py`` (re-exported
here); next out: the text helpers.
"""

from __future__ import annotations

import enum
import errno
import json
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..base.lazy import lazy_import
from ..base.patterns import LazyPattern
from . import defaults
from .exceptions import IllegalTransition, InvalidTask, InvalidTaskId, TaskParseError
from .ids import (  # noqa: F401  (re-exported: the model's words in one place)
    FILE_RE,
    ID_RE,
    LABEL_RE,
    TaskId,
    from_label,
    normalize_task_id,
    split_ids,
    task_filename,
    task_label,
)

# Every command imports this module for its states and ids; only writers redact.
redaction = lazy_import("orchestrator.base.redaction")


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
#: The role of the task that carries an `octopoid plan` run: no agent has it, only that
#: command runs it, so nothing may send it back to incoming (retry, requeue).
PLANNING_ROLE = "planning"
DEFAULT_BRANCH = "main"
TIP_HEADER = "BRANCH_TIP"  # the tip an attempt left on its branch (task_tips.py)

TITLE_RE = LazyPattern(r"# \[TASK-([^\]\n]*)\] ?(.*)")
HEADER_RE = LazyPattern(r"([A-Z][A-Z0-9_]*): ?(.*)")
FENCE_RE = LazyPattern(r"(`{3,}|~{3,})")
HEADING_RE = LazyPattern(r"\\*## ")  # a section heading, or one escaped any number of times
LINE_RE = LazyPattern(r"[^\n]*\n|[^\n]+\Z")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

MAX_HEADER_CHARS = 1000  # a header is one line; longer values belong in a section
MAX_TITLE_CHARS = 200  # one line in `octopoid list`; details belong in the context
MAX_CRITERION_CHARS = 500
#: A new task leaves this much of the task file limit for the headers and History lines
#: its moves add (about 200 moves), so it is never quarantined for growing.
NEW_TASK_ROOM_BYTES = 64 * 1024
MAX_COUNT = 1_000_000  # attempts, turns, commits: far beyond any real task, far below overflow
#: Headers that must be whole numbers, with their range (PID: Linux's PID_MAX_LIMIT).
WHOLE_NUMBER_HEADERS = {
    "ATTEMPTS": (0, MAX_COUNT),
    "ATTEMPTS_AT_RETRY": (0, MAX_COUNT),
    "INTERRUPTED": (0, MAX_COUNT),
    "BURNED_OUT": (0, MAX_COUNT),
    "TURNS_TOTAL": (0, MAX_COUNT),
    "TOKENS_TOTAL": (0, 2**53),
    "TURNS": (0, MAX_COUNT),
    "COMMITS": (0, MAX_COUNT),
    "PID": (1, 2**22 - 1),
    "PID_START": (0, 2**63 - 1),  # clock ticks since boot
}
TIME_HEADERS = (
    "CREATED",
    "LEASE_EXPIRES",
    "NOT_BEFORE",
    "CLAIMED_AT",
    "STARTED_AT",
    "SUBMITTED_AT",
    "COMPLETED_AT",
    "DEADLINE",
)
TIME_YEARS = range(1970, 10_000)  # not before octopoid's clocks; within what datetime holds
DECIMAL_RE = LazyPattern(r"[0-9]{1,15}(\.[0-9]{1,12})?")
#: git's branch name rules (git check-ref-format), less the rare ones git enforces itself.
BRANCH_RE = LazyPattern(
    r"(?!-)(?!\.)(?!.*\.\.)(?!.*@\{)(?!.*//)(?!.*/\.)[^\x00-\x20\x7f~^:?*\[\\]+(?<![/.])(?<!\.lock)"
)


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


def shown(value: str) -> str:
    """A user's value quoted for a message: escapes visible, at most about 40 characters."""
    return repr(value if len(value) <= 40 else value[:37] + "...")


def plural(count: int, word: str) -> str:
    """``1 attempt``, ``2 attempts``: counts in messages read as English."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def _outside_fences(lines: list[str]) -> tuple[list[bool], str | None]:
    """For each line, whether it is outside a code fence; and the fence left open at the end.

    The one fence rule of the format: parsing, escaping and unescaping all go through here.
    """
    flags: list[bool] = []
    fence: str | None = None
    for line in lines:
        match = FENCE_RE.match(line)
        if match and fence is None:
            fence = match.group(1)
        elif match and fence is not None and match.group(1).startswith(fence):
            fence = None
        flags.append(fence is None)
    return flags, fence


def escape_text(text: str) -> str:
    """User text as stored in a section: a line outside fences that starts with ``## ``
    (or with backslashes and ``## ``) gets one more backslash, so it cannot start a section."""
    return _edit_headings(text, lambda line: "\\" + line)


def unescape_text(text: str) -> str:
    """``escape_text`` undone: one backslash off each escaped heading line outside fences."""
    return _edit_headings(text, lambda line: line.removeprefix("\\"))


def _edit_headings(text: str, edit: Callable[[str], str]) -> str:
    lines = text.split("\n")
    outside, _ = _outside_fences(lines)
    return "\n".join(
        edit(line) if out and HEADING_RE.match(line) else line
        for line, out in zip(lines, outside, strict=True)
    )


def valid_branch_name(name: str) -> bool:
    return BRANCH_RE.fullmatch(name) is not None


@dataclass
class Task:
    """One task file in memory. ``state`` and ``path`` say where it was read from."""

    id: TaskId
    title: str
    headers: dict[str, str] = field(default_factory=dict)
    preamble: str = ""
    sections: list[tuple[str, str]] = field(default_factory=list)
    state: TaskState | None = None
    path: Path | None = None

    def __post_init__(self) -> None:
        self.id = TaskId(self.id)  # free when it is one already: every Task carries a TaskId

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
    def blocked_by(self) -> list[TaskId]:
        return [TaskId(part) for part in split_ids(self.headers.get("BLOCKED_BY", ""))]

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
        """The Context section as the user gave it (escapes undone, outer whitespace off)."""
        return unescape_text(self.section("Context") or "").strip()

    @property
    def criteria(self) -> list[str]:
        lines = (self.section("Acceptance Criteria") or "").splitlines()
        return [re.sub(r"^- \[[ xX]\] ", "", ln).strip() for ln in lines if ln.strip()]

    @property
    def history(self) -> list[str]:
        lines = (self.section("History") or "").splitlines()
        return [ln[2:] for ln in lines if ln.startswith("- ")]

    def moves(self) -> list[tuple[str, str]]:
        """(from, to) of every move its History records, oldest first."""
        return [(src, dst) for _, src, dst in self.timed_moves()]

    def timed_moves(self) -> list[tuple[str, str, str]]:
        """(time, from, to) of every move its History records, oldest first; not the lines
        of events in place (``in claimed``; or ``claimed → claimed``, as older versions
        wrote a check's result)."""
        out = []
        for line in self.history:
            parts = line.split("  ")
            if len(parts) > 2 and " → " in parts[1]:
                src, _, dst = parts[1].partition(" → ")
                if src != dst:
                    out.append((parts[0], src, dst))
        return out

    def set_header(self, key: str, value: object) -> None:
        self.headers[key] = one_line(str(value), MAX_HEADER_CHARS)

    def drop_header(self, *keys: str) -> None:
        for key in keys:
            self.headers.pop(key, None)

    def add_history(
        self, moment: datetime, src: str, dst: str, actor: str, reason: str = ""
    ) -> None:
        """Append one ``## History`` line for a move: UTC time, from -> to, who, why."""
        self._add_history_line(moment, f"{src} → {dst}", actor, reason)

    def add_event(self, moment: datetime, state: str, actor: str, reason: str = "") -> None:
        """Append a ``## History`` line for what happened to the task where it is (a
        check's result): ``in <state>``, so it never reads as a move."""
        self._add_history_line(moment, f"in {state}", actor, reason)

    def _add_history_line(self, moment: datetime, what: str, actor: str, reason: str) -> None:
        who = one_line(actor, 100) or "unknown"
        why = one_line(redaction.redact(reason), defaults.MAX_HISTORY_REASON_CHARS)
        line = f"- {format_time(moment)}  {what}  ({who}{': ' + why if why else ''})\n"
        self.append_history(line)

    def append_history(self, line: str) -> None:
        """``line`` as it is at the end of ``## History`` (made if missing)."""
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
    checks: Iterable[str] = (),
) -> Task:
    """A new task as it enters incoming; bad input is ``InvalidTask`` saying what to change.

    Nothing is cut short silently: a title, criterion or context over its limit is refused.
    """
    title = _within(title, MAX_TITLE_CHARS, "the title", "put the details in the context")
    if not title:
        raise InvalidTask("a task needs a title")
    if priority not in PRIORITIES:
        raise InvalidTask(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
    if not ID_RE.fullmatch(role):
        raise InvalidTask(f"role must be a word of letters, digits, '-' or '_', got {role!r}")
    if not valid_branch_name(branch):
        raise InvalidTask(f"{shown(branch)} is not a valid git branch name")
    now = now or utcnow()
    blockers = [task_label(TaskId(b)) for b in blocked_by]
    task = Task(id=task_id, title=title)
    for key, value in (
        ("ROLE", role),
        ("PRIORITY", priority),
        ("BRANCH", branch),
        ("CREATED", format_time(now)),
        ("CREATED_BY", created_by),
        ("BLOCKED_BY", ", ".join(blockers)),
        ("CHECKS", _checks_header(checks)),
        ("ATTEMPTS", 0),
    ):
        if value != "":
            task.set_header(key, value)
    task.sections.append(("Context", _context_section(context)))
    items = "".join(
        f"- [ ] {_within(c, MAX_CRITERION_CHARS, 'a criterion', 'split it in two')}\n"
        for c in criteria
        if c.strip()
    )
    task.sections.append(("Acceptance Criteria", f"{items}\n" if items else "\n"))
    task.add_history(now, "new", TaskState.INCOMING.value, created_by)
    _check_new_size(task)
    return task


def _checks_header(checks: Iterable[str]) -> str:
    """The task's own checks as a JSON list (one header line), or "" for none."""
    commands = [c.strip() for c in checks if c.strip()]
    text = json.dumps(commands) if commands else ""
    if len(text) > MAX_HEADER_CHARS:
        raise InvalidTask(
            f"the --check commands take {len(text)} characters together; the limit is "
            f"{MAX_HEADER_CHARS} (put long checks in a script in the repository)"
        )
    return text


def _within(text: str, limit: int, what: str, fix: str) -> str:
    """``text`` on one line (whitespace collapsed); refused when longer than ``limit``."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        raise InvalidTask(f"{what} is {len(flat)} characters long; the limit is {limit} ({fix})")
    return flat


def unclosed_fence(text: str) -> str | None:
    """The code fence ``text`` opens and never closes (it would swallow what follows), or None."""
    return _outside_fences(text.split("\n"))[1]


def _context_section(context: str) -> str:
    """The Context section's text: line ends made LF, headings escaped; an open fence is refused."""
    body = re.sub(r"\r\n?", "\n", context).strip()
    if open_fence := unclosed_fence(body):
        raise InvalidTask(
            f"the context opens a code fence {open_fence} that it never closes "
            f"(add a line {open_fence} where the code ends)"
        )
    return f"{escape_text(body)}\n\n" if body else "\n"


def _check_new_size(task: Task) -> None:
    """Refuse a task too big to stay under the task file limit as its history grows."""
    size = len(render_task(task).encode())
    limit = defaults.MAX_TASK_FILE_BYTES - NEW_TASK_ROOM_BYTES
    if size > limit:
        raise InvalidTask(
            f"the task would be {size} bytes; a new task may be at most {limit} bytes "
            f"(task files are limited to {defaults.MAX_TASK_FILE_BYTES}, with room kept for "
            "their history): shorten the context, or put it in a file in the repository "
            "and name that file"
        )


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
    """Read a task file's text; raise ``TaskParseError`` saying what is wrong and where.
    A title naming ``expected_id`` (a ``TaskId``: the file's or row's name) is not checked
    again."""
    text = text.replace("\r\n", "\n")
    lines = LINE_RE.findall(text)  # only \n ends a line: U+2028 and friends are plain text
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
        named = match.group(1)
        task_id = expected_id if named == expected_id else TaskId(named)
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
    outside, _ = _outside_fences(lines)
    for line, out in zip(lines, outside, strict=True):
        if out and line.startswith("## "):
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
    """Refuse header values the scheduler could not act on (the file goes to quarantine)."""
    h = task.headers
    try:
        if "PRIORITY" in h and h["PRIORITY"] not in PRIORITIES:
            raise ValueError(f"PRIORITY must be one of {', '.join(PRIORITIES)}")
        if "ROLE" in h and not ID_RE.fullmatch(h["ROLE"]):
            raise ValueError("ROLE must be a word of letters, digits, '-' or '_'")
        if h.get("BRANCH") and not valid_branch_name(h["BRANCH"]):
            raise ValueError(f"BRANCH must be a git branch name, got {shown(h['BRANCH'])}")
        for key, value in h.items():
            if value:  # an empty value counts as absent, as every reader treats it
                _check_value(key, value)
        task.blocked_by  # noqa: B018 - validates every id listed
    except (ValueError, InvalidTaskId) as exc:
        raise TaskParseError(f"bad header: {exc}") from None


def _check_value(key: str, value: str) -> None:
    """A count, time or cost header holds what its readers can use, or ``ValueError``."""
    if key in WHOLE_NUMBER_HEADERS:
        low, high = WHOLE_NUMBER_HEADERS[key]
        if not (value.isascii() and value.isdigit()):
            raise ValueError(f"{key} must be a whole number, got {shown(value)}")
        if len(value) > len(str(high)) or not low <= int(value) <= high:
            raise ValueError(f"{key} must be from {low} to {high}, got {shown(value)}")
    elif key in TIME_HEADERS and _year(value) not in TIME_YEARS:
        raise ValueError(
            f"{key} must be an ISO-8601 time between the years {TIME_YEARS.start} and "
            f"{TIME_YEARS.stop - 1} such as 2026-01-31T12:00:00Z, got {shown(value)}"
        )
    elif key == "COST_USD_TOTAL" and not DECIMAL_RE.fullmatch(value):
        raise ValueError(f"{key} must be a decimal number such as 1.25, got {shown(value)}")


def _year(value: str) -> int | None:
    try:
        return parse_time(value).year
    except (ValueError, OverflowError):  # not ISO-8601, or out of range once made UTC
        return None


def read_task_file(path: Path, state: TaskState | None = None) -> Task:
    """Parse the task at ``path``; name, type, size and encoding problems are ``TaskParseError``.

    Only a regular file is read: a symlink is never followed (its target's contents never
    reach an error message), and a directory, FIFO, socket or device is refused without
    blocking on it. ``FileNotFoundError`` means the task moved on.
    """
    match = FILE_RE.fullmatch(path.name)
    if not match:
        raise TaskParseError(f"file name {path.name!r} is not TASK-<id>.md")
    data = read_regular(path)
    if b"\x00" in data:
        raise TaskParseError("file contains NUL bytes (binary data, not a task)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskParseError(f"file is not valid UTF-8 (byte {exc.start})") from None
    task = parse_task(text, expected_id=TaskId.matched(match))
    task.state, task.path = state, path
    return task


def read_regular(path: Path) -> bytes:
    """A regular file's bytes, read without following a symlink or blocking on a FIFO and
    at most ``MAX_TASK_FILE_BYTES``; anything else is ``TaskParseError`` saying what it is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TaskParseError("it is a symlink; task files must be regular files") from None
        if isinstance(exc, FileNotFoundError):
            raise
        raise TaskParseError(f"cannot open it: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO, socket or device"
            raise TaskParseError(f"it is {kind}, not a regular file")
        size = os.fstat(fd).st_size
        if size > defaults.MAX_TASK_FILE_BYTES:
            raise TaskParseError(
                f"file is {size} bytes; task files are limited to {defaults.MAX_TASK_FILE_BYTES}"
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(defaults.MAX_TASK_FILE_BYTES + 1)
    finally:
        os.close(fd)


def refuse_planning(task: Task, what: str) -> None:
    """A planner's carrying task is not work to retry or requeue: it would wait in incoming
    for an agent of a role none has."""
    if task.role == PLANNING_ROLE:
        raise IllegalTransition(
            f"{task.label} carried an `octopoid plan` run: it cannot be {what}; run "
            "`octopoid plan` again (its answer is in `octopoid notes "
            f"{task.label}`)"
        )

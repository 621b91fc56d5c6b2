"""`octopoid import-octopoid PATH`: bring an octopoid checkout's queue into this project.

docs/architecture.md ("Importing an octopoid queue") has the whole mapping: where each
state lands (``STATE_MAP``), what state.db decides, how headers, History and notes are
converted. The source is only read; a task already here is left alone, so a second run
changes nothing.

Its size: one mapping of octopoid's queue, notes and state.db, read in one pass.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..base.redaction import redact
from ..base.text import ascii_int
from ..model import defaults
from ..model.exceptions import InvalidInput, InvalidTaskId, OctopoidError, TaskParseError
from ..model.tasks import (
    FILE_RE,
    HEADER_RE,
    ID_RE,
    PRIORITIES,
    TIME_HEADERS,
    WHOLE_NUMBER_HEADERS,
    Task,
    TaskId,
    TaskState,
    format_time,
    one_line,
    parse_task,
    render_task,
    task_label,
    utcnow,
    valid_branch_name,
)
from ..queue import dependencies, task_notes
from ..queue import machine as queue_utils
from ..queue.leases import LEASE_HEADERS
from ..queue.task_notes import NotesSection, fenced

S = TaskState
#: octopoid's queue folders (and state.db queues) and where their tasks land here. Absent
#: (``recycled``: its work went to a new breakdown task) means not imported, and reported.
STATE_MAP = {
    "incoming": S.INCOMING,
    "claimed": S.INCOMING,  # its claim ended with octopoid; the attempt is counted
    "needs_continuation": S.INCOMING,
    "provisional": S.PROVISIONAL,
    "done": S.DONE,
    "failed": S.FAILED,
    "rejected": S.REJECTED,
    "escalated": S.BREAKDOWN,
    "breakdown": S.BREAKDOWN,
}
#: octopoid's header names that this project spells differently. Its CHECKS are names of
#: gatekeeper checks, not commands, so they must not reach this project's CHECKS.
RENAMED = {
    "ATTEMPT_COUNT": "ATTEMPTS",
    "COMMITS_COUNT": "COMMITS",
    "TURNS_USED": "TURNS",
    "CHECKS": "OCTOPOID_CHECKS",
}
#: Lines octopoid appended below a task as it moved: (time key -> event, who key).
EVENTS = {
    "CLAIMED_AT": ("claimed", "CLAIMED_BY"),
    "SUBMITTED_AT": ("submitted", None),
    "ACCEPTED_AT": ("accepted", "ACCEPTED_BY"),
    "REJECTED_AT": ("rejected", "REJECTED_BY"),
    "FAILED_AT": ("failed", None),
    "COMPLETED_AT": ("completed", None),
    "RETRIED_AT": ("retried", None),
    "ESCALATED_AT": ("escalated", None),
}
EVENT_KEYS = {*EVENTS, "CLAIMED_BY", "ACCEPTED_BY", "REJECTED_BY", "REJECTION_REASON"}
EVENT_KEYS |= {"ATTEMPT_COUNT", "COMMITS_COUNT", "TURNS_USED", "PLAN_ID"}
NOTES_ATTEMPT_RE = re.compile(r"## Attempt (\d+) — .*")
NOTES_META_RE = re.compile(r"Turns: .* \| Commits: .*")
ACTOR = "import-octopoid"


@dataclass
class ImportReport:
    """What an import did: one line per task imported, ids already here, what was not mapped."""

    imported: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class Found:
    """One octopoid task: its file, its octopoid state, and its state.db row if any."""

    task_id: str
    path: Path
    state: str
    row: dict[str, Any] | None = None


def import_octopoid(source: Path, now: datetime | None = None) -> ImportReport:
    """Import every task, its notes and its state.db record from an octopoid checkout."""
    orch, now, report = orchestrator_dir(source), now or utcnow(), ImportReport()
    rows, history = read_state_db(orch / "state.db", report)
    for found in collect(orch, rows, report):
        _import_one(orch, found, history.get(found.task_id, []), now, report)
    _report_stuck(report)
    return report


def orchestrator_dir(source: Path) -> Path:
    """``source/.orchestrator`` (or ``source`` itself) when it holds octopoid's queue."""
    for candidate in (source / ".orchestrator", source):
        if (candidate / "shared" / "queue").is_dir():
            return candidate
    raise InvalidInput(f"{source} holds no octopoid queue (.orchestrator/shared/queue/)")


def read_state_db(path: Path, report: ImportReport) -> tuple[dict, dict]:
    """state.db's tasks by id and their history rows, read-only; empty when there is none."""
    if not path.is_file():
        return {}, {}
    history: dict[str, list[dict[str, Any]]] = {}
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            db.row_factory = sqlite3.Row
            rows = {str(r["id"]): dict(r) for r in db.execute("SELECT * FROM tasks")}
            with suppress(sqlite3.OperationalError):  # early state.db: no history, files' lines
                for r in db.execute("SELECT * FROM task_history ORDER BY timestamp, id"):
                    history.setdefault(str(r["task_id"]), []).append(dict(r))
    except sqlite3.Error as exc:
        report.problems.append(f"state.db could not be read ({exc}); imported from files alone")
        return {}, {}
    return rows, history


def collect(orch: Path, rows: dict[str, dict], report: ImportReport) -> list[Found]:
    """Every task file under ``shared/queue/``, placed by state.db when it knows the task."""
    files: dict[str, list[tuple[str, Path]]] = {}
    for folder in sorted(p for p in (orch / "shared" / "queue").iterdir() if p.is_dir()):
        for path in sorted(folder.iterdir()):
            match = FILE_RE.fullmatch(path.name)
            if match and path.is_file() and not path.is_symlink():
                files.setdefault(match.group(1), []).append((folder.name, path))
            elif not path.name.startswith("."):
                report.problems.append(f"queue/{folder.name}/{path.name}: not a task file")
    found = []
    for task_id in sorted(files.keys() | rows.keys()):
        one = _place(task_id, files.get(task_id, []), rows.get(task_id), orch, report)
        if one is not None:
            found.append(one)
    return found


def _place(
    task_id: str, files: list[tuple[str, Path]], row: dict | None, orch: Path, report: ImportReport
) -> Found | None:
    label = task_label(task_id)
    if row is None:
        if len(files) > 1:
            where = ", ".join(state for state, _ in files)
            report.problems.append(f"{label}: in several queues ({where}); not imported")
            return None
        return Found(task_id, files[0][1], files[0][0])
    stored = Path(str(row.get("file_path") or ""))
    candidates = [path for _, path in files]
    if stored.name == f"{label}.md":  # state.db may name a file elsewhere, never another name
        candidates += [stored, orch.parent / stored, orch / stored]
    files_only = [p for p in candidates if p.is_file() and not p.is_symlink()]
    path = next((p for p in files_only if p.parent.name == row["queue"]), None)
    path = path or next(iter(files_only), None)
    if path is None:
        report.problems.append(f"{label}: in state.db ({row['queue']}) but has no task file")
        return None
    return Found(task_id, path, str(row["queue"]), row)


def _import_one(
    orch: Path, found: Found, history: list[dict], now: datetime, report: ImportReport
) -> None:
    label = task_label(found.task_id)
    target = STATE_MAP.get(found.state)
    if target is None:
        report.problems.append(f"{label}: octopoid state '{found.state}' has no counterpart")
        return
    try:
        task_id = TaskId(found.task_id)
        with open(found.path, "rb") as f:
            data = f.read(defaults.MAX_TASK_FILE_BYTES + 1)
        if len(data) > defaults.MAX_TASK_FILE_BYTES:
            raise TaskParseError("the file is too big for a task")
        text = data.decode("utf-8")
    except (InvalidTaskId, UnicodeDecodeError, TaskParseError, OSError) as exc:
        report.problems.append(f"{label}: could not be read ({exc}); not imported")
        return
    if queue_utils.get_store().locate(task_id) is not None:
        if _imported_before(task_id):
            report.already.append(label)
        else:
            report.problems.append(f"{label}: a task with this id is already here; left alone")
        return
    notes = task_notes.read_notes_file(orch / "shared" / "notes" / f"{label}.md")
    try:
        task, reviews = convert(found, task_id, text, notes, history, target, now, report.problems)
    except TaskParseError as exc:
        report.problems.append(f"{label}: could not be mapped ({exc}); not imported")
        return
    _write_notes(task, target, notes, reviews, report)  # first: a rerun after a crash redoes it
    queue_utils.add_task(task, target)
    report.imported.append(f"{label}: {found.state} -> {target.value}")


def _imported_before(task_id: str) -> bool:
    try:
        return "IMPORTED_FROM" in queue_utils.get_task(task_id).headers
    except OctopoidError:  # quarantined here: not ours to touch
        return False


def convert(
    found: Found,
    task_id: str,
    text: str,
    notes: str | None,
    history: list[dict],
    target: TaskState,
    now: datetime,
    problems: list[str],
) -> tuple[Task, list[NotesSection]]:
    """The task as this project writes it, and the review sections its notes should get."""
    label = task_label(task_id)
    title, headers, body = _split_file(text, label, problems)
    body, events = _take_events(body)
    merged = {key: value for one in (headers, *events) for key, value in one.items()}
    fixed = _fixed_headers(merged, found.row, label, problems)
    attempts = max(
        int(fixed.get("ATTEMPTS", 0)),
        int((found.row or {}).get("attempt_count") or 0),
        sum("CLAIMED_AT" in e for e in events),  # its claims
        _highest_attempt(notes),
    )
    fixed.update(_state_headers(target, merged, body, attempts))
    if "REJECT_REASON" in fixed:
        fixed.pop("REJECTION_REASON", None)  # renamed: the agent's refusal, in our words
    fixed["IMPORTED_FROM"] = f"octopoid {found.state}"
    block = "".join(f"{key}: {value}\n" for key, value in fixed.items())
    body = body.strip("\n") + "\n\n" if body.strip() else ""
    task = parse_task(f"# [{label}] {title}\n\n{block}\n{body}", task_id)
    for line in _history_lines(headers, events, history):
        task.append_history(line)
    who = merged.get("CLAIMED_BY") or (found.row or {}).get("claimed_by") or "an agent"
    why = f"the claim by {who} ended" if found.state == "claimed" else ""
    task.add_history(now, f"octopoid {found.state}", target.value, ACTOR, why)
    parse_task(render_task(task), task_id)  # what the store writes must read back
    reviews = [_review(e) for e in events if "REJECTION_REASON" in e and "ATTEMPT_COUNT" in e]
    return task, reviews


def _split_file(text: str, label: str, problems: list[str]) -> tuple[str, dict[str, str], str]:
    """(title, the header block under it, the rest) of an octopoid task file."""
    lines = text.replace("\r\n", "\n").split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    head = lines[first] if first < len(lines) else ""
    match = re.fullmatch(r"#\s*\[TASK-([^\]]*)\]\s*(.*)", head.strip())
    plain = re.fullmatch(r"#\s+(?:TASK-[\w-]+[:\s]*)?(.*)", head.strip())
    if match and match.group(1) != label[5:]:
        problems.append(f"{label}: its title line names TASK-{match.group(1)}; kept {label}")
    title = match.group(2) if match else plain.group(1) if plain else ""
    i = first + 1 if match or plain else first
    while i < len(lines) and not lines[i].strip():
        i += 1
    headers: dict[str, str] = {}
    while i < len(lines) and (found := HEADER_RE.fullmatch(lines[i])):
        headers[found.group(1)] = found.group(2)
        i += 1
    return one_line(title, 1000) or label, headers, "\n".join(lines[i:])


def _take_events(body: str) -> tuple[str, list[dict[str, str]]]:
    """Pull out the ``KEY: value`` paragraphs octopoid appended as the task moved."""
    kept: list[str] = []
    events: list[dict[str, str]] = []
    paragraph: list[str] = []
    fence = False

    def close() -> None:
        pairs = [HEADER_RE.fullmatch(line) for line in paragraph]
        if paragraph and all(pairs) and any(p.group(1) in EVENT_KEYS for p in pairs if p):
            events.append({p.group(1): p.group(2).strip() for p in pairs if p})
            while kept and not kept[-1].strip():
                kept.pop()
        else:
            kept.extend(paragraph)
        paragraph.clear()

    for line in body.split("\n"):
        if line.startswith(("```", "~~~")):
            fence = not fence
        if fence or line.startswith(("```", "~~~", "## ")) or not line.strip():
            close()
            kept.append(line)
        else:
            paragraph.append(line)
    close()
    return "\n".join(kept), events


def _fixed_headers(
    merged: dict[str, str], row: dict | None, label: str, problems: list[str]
) -> dict[str, str]:
    """octopoid's headers, renamed and checked; state.db fills gaps and owns BLOCKED_BY."""
    if row is not None:
        merged["BLOCKED_BY"] = str(row.get("blocked_by") or "")
        for key in ("PRIORITY", "ROLE", "BRANCH", "COMMITS_COUNT", "TURNS_USED"):
            merged.setdefault(key, str(row.get(key.lower()) or ""))  # "": left out below
        merged.setdefault("PROJECT", str(row.get("project_id") or ""))
        if row.get("created_at") and "CREATED" not in merged:
            merged["CREATED"] = _utc_text(str(row["created_at"]), local=False) or ""
    out: dict[str, str] = {}
    for key, value in merged.items():
        key, value = RENAMED.get(key, key), " ".join(value.split())
        if key in LEASE_HEADERS or value in ("", "None"):
            continue
        usable = _blockers(value, label, problems) if key == "BLOCKED_BY" else _usable(key, value)
        if usable is None:
            problems.append(f"{label}: header {key}: {value[:60]!r} is not usable here; dropped")
        elif usable:
            out[key] = usable
    return out


def _usable(key: str, value: str) -> str | None:
    """``value`` as this project's header ``key`` must hold it, or None."""
    if key == "PRIORITY":
        return value.upper() if value.upper() in PRIORITIES else None
    if key == "ROLE":
        return value if ID_RE.fullmatch(value) else None
    if key == "BRANCH":
        return value if valid_branch_name(value) else None
    if key in WHOLE_NUMBER_HEADERS:
        low, high = WHOLE_NUMBER_HEADERS[key]
        number = ascii_int(value)
        return value if number is not None and low <= number <= high else None
    if key in TIME_HEADERS or key.endswith("_AT"):
        moment = _utc_text(value, local=True)
        return moment or (None if key in TIME_HEADERS else value)
    return value


def _blockers(value: str, label: str, problems: list[str]) -> str:
    ids = []
    for part in (p for p in re.split(r"[,\s]+", value) if p and p != "None"):
        try:
            ids.append(task_label(TaskId(part)))
        except InvalidTaskId:
            problems.append(f"{label}: blocker {part[:60]!r} is not a task id; dropped")
    return ", ".join(ids)


def _utc_text(value: str, local: bool) -> str | None:
    """An octopoid time as ``format_time`` writes it. octopoid's files hold local times
    without a zone (``datetime.now()``); state.db's defaults are SQLite's UTC."""
    try:
        moment = datetime.fromisoformat(value.strip())
        if moment.tzinfo is None:
            moment = moment.astimezone() if local else moment.replace(tzinfo=UTC)
        return format_time(moment) if 1970 <= moment.astimezone(UTC).year < 10_000 else None
    except (ValueError, OverflowError, OSError):
        return None


def _state_headers(
    target: TaskState, merged: dict[str, str], body: str, attempts: int
) -> dict[str, str]:
    """Headers this project's state needs: attempts (a fresh budget), error, reject reason."""
    out = {"ATTEMPTS": str(attempts), "ATTEMPTS_AT_RETRY": str(attempts)} if attempts else {}
    if target is S.FAILED:
        error = _section(body, "Error").replace("```", " ") or "failed in octopoid"
        out["ERROR"] = one_line(redact(error), defaults.MAX_ERROR_CHARS)
    if target is S.REJECTED:
        said = merged.get("REJECTION_REASON", "other")
        code = queue_utils.OCTOPOID_REJECT_REASONS.get(said, said)
        code = code if code in queue_utils.REJECT_REASONS else "other"
        details = redact(_section(body, "Rejection Details"))
        details = f"{said}: {details}" if code != said and said != "invalid_task" else details
        out["REJECT_REASON"] = code
        if details.strip(": "):
            out["REJECT_DETAILS"] = one_line(details, 500)
    return out


def _section(body: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", body, re.M | re.S)
    return match.group(1).strip() if match else ""


def _history_lines(
    headers: dict[str, str], events: list[dict[str, str]], rows: list[dict]
) -> list[str]:
    """What octopoid recorded, one History line each: state.db's history if it has any,
    else the creation and the lines it appended to the file."""
    if rows:
        return [
            _line(_utc_text(str(r["timestamp"]), False), r["event"], r["agent"], r["details"])
            for r in rows
        ]
    created = _utc_text(headers.get("CREATED", ""), True)
    lines = [_line(created, "created", headers.get("CREATED_BY"), None)] if created else []
    for event in events:
        for key, (name, who_key) in EVENTS.items():
            if key in event:
                detail = event.get("REJECTION_REASON") or event.get("PLAN_ID")
                if name == "submitted":
                    detail = f"{event.get('COMMITS_COUNT', '?')} commits"
                lines.append(
                    _line(_utc_text(event[key], True), name, event.get(who_key or ""), detail)
                )
    return lines


def _line(moment: str | None, event: str, who: object, details: object) -> str:
    why = f": {one_line(redact(str(details)), 200)}" if details else ""
    return f"- {moment or 'unknown time'}  octopoid: {event}  ({who or 'octopoid'}{why})\n"


def _review(event: dict[str, str]) -> NotesSection:
    """A reviewer's rejection in octopoid, as this project's notes keep one."""
    who = one_line(event.get("REJECTED_BY") or "reviewer", 80)
    when = _utc_text(event.get("REJECTED_AT", ""), True) or "unknown time"
    body = f"\n{fenced(redact(event['REJECTION_REASON']))}\n"
    return NotesSection(f"Review — rejected by {who} ({when})", body)


def _highest_attempt(notes: str | None) -> int:
    found = (NOTES_ATTEMPT_RE.fullmatch(line) for line in (notes or "").split("\n"))
    return max((int(m.group(1)) for m in found if m), default=0)


def convert_notes(text: str, label: str) -> list[NotesSection]:
    """octopoid's notes (unfenced output under ``## Attempt N`` headings) as sections."""
    groups: list[list[str]] = [[]]
    for line in text.replace("\r\n", "\n").split("\n"):
        if NOTES_ATTEMPT_RE.fullmatch(line):
            groups.append([])
        groups[-1].append(line)
    head = "\n".join(ln for ln in groups[0] if ln.strip() != f"# Agent Notes: {label}").strip()
    sections = [_attempt(group) for group in groups[1:]]
    if head:
        sections.insert(0, NotesSection("Notes from octopoid", f"\n{fenced(redact(head))}\n"))
    return sections


def _attempt(lines: list[str]) -> NotesSection:
    """One octopoid attempt section, its output fenced as ``task_notes.append_attempt`` does."""
    rest = lines[1:]
    while rest and not rest[0].strip():
        rest.pop(0)
    meta = rest.pop(0) if rest and NOTES_META_RE.fullmatch(rest[0]) else ""
    output = redact("\n".join(rest).strip()) or "(no output)"
    return NotesSection(lines[0][3:], f"{meta}\n\n{fenced(output)}\n")


def _write_notes(
    task: Task,
    target: TaskState,
    text: str | None,
    reviews: list[NotesSection],
    report: ImportReport,
) -> None:
    """octopoid's notes (and reviewers' reasons) as this project's notes for the task."""
    if target is S.DONE or (text is None and not reviews):
        if text is not None:
            report.problems.append(f"{task.label}: notes not imported (done tasks keep none)")
        return
    sections = convert_notes(text or "", task.label) + reviews
    notes = f"# Agent Notes: {task.label}\n\n" + "".join(s.render() for s in sections)
    if not task_notes.put_notes(task.id, notes):
        report.problems.append(f"{task.label}: kept the notes already here; octopoid's not added")


def _report_stuck(report: ImportReport) -> None:
    """Name imported tasks that can never run as things stand (e.g. a recycled blocker)."""
    imported = {line.split(":")[0] for line in report.imported}
    for task_id, blockage in dependencies.blocked_report().items():
        if task_label(task_id) in imported and blockage.stuck:
            report.problems.append(f"{task_label(task_id)}: stuck: {blockage.stuck}")

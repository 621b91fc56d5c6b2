"""What a task's page shows, gathered from the functions the CLI uses (read-only)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ... import config
from ...base.fsutil import read_since
from ...memory import lifecycle
from ...model.exceptions import NothingToShow, OctopoidError, TaskNotFound
from ...model.tasks import Task, TaskState, parse_time, utcnow
from ...queue import machine as queue_utils
from ...queue import questions, task_notes
from ...review import diffs, drafts, mergeable
from ...review.mergeable import BranchFacts
from ...roles import breakdown
from .. import reports
from .diffview import DiffView, task_diff_view

S = TaskState
TEXT_LIMIT = 256 * 1024  # characters of a prompt, notes or log shown; the tail is kept


# --- one task ----------------------------------------------------------------------------


@dataclass
class Attempt:
    number: int
    prompt: str | None
    log: str | None
    live: bool = False


def _tail(path: Path) -> str | None:
    """The last ``TEXT_LIMIT`` characters of a text file (None when it does not exist)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TEXT_LIMIT * 4))
            text = f.read().decode("utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return None
    return text[-TEXT_LIMIT:]


def attempts(task: Task) -> list[Attempt]:
    """Each attempt's prompt and log, and the live log of the one running now."""
    folder = config.get_logs_dir() / task.label
    found = []
    for number in range(1, task.attempts + 1):
        prompt = _tail(folder / f"attempt-{number}.prompt.md")
        live = task.state is S.CLAIMED and number == task.attempts
        log = live_since(task.id, None)[0] if live else _tail(folder / f"attempt-{number}.log")
        if prompt is not None or log is not None or live:
            found.append(Attempt(number, prompt, log, live))
    return found


LIVE_CHUNK = 64 * 1024  # bytes of a running attempt's log sent at once


def live_since(task_id: str, after: int | None) -> tuple[str, int]:
    """The running attempt's output after byte ``after`` (None: its last 64 KiB), at most
    64 KiB of it, and the offset to ask from next: the page appends, never re-sends."""
    return read_since(task_notes.stdout_log_path(task_id), after, LIVE_CHUNK)


def _duration(task: Task, now: datetime) -> str:
    """How long the latest attempt ran: from its claim to the next move in History (or to
    now while it runs); the lines its checks add are events, not moves."""
    moves = []
    for stamp, _, dst in task.timed_moves():
        try:
            moves.append((parse_time(stamp), dst))
        except ValueError:
            continue
    claims = [i for i, (_, dst) in enumerate(moves) if dst == S.CLAIMED.value]
    if not claims:
        return "-"
    start = moves[claims[-1]][0]
    end = moves[claims[-1] + 1][0] if claims[-1] + 1 < len(moves) else now
    seconds = max(0, int((end - start).total_seconds()))
    return f"{seconds // 60}m {seconds % 60}s" if seconds >= 60 else f"{seconds}s"


def _confirm_accept(task: Task, git: BranchFacts) -> str | None:
    """What Accept asks first when the branch holds more than its last attempt's work or
    would conflict (None: nothing to ask)."""
    last = int(task.headers.get("COMMITS") or 0)
    parts = []
    if git.exists and git.ahead > last:
        parts.append(f"{git.ahead} commits, {git.ahead - last} of them from earlier attempts")
    if git.conflicts:
        parts.append(f"conflicts with {task.branch} in {', '.join(git.conflicts[:5])}")
    if git.refused:
        return f"Accept will be refused: {git.refusal}. Try anyway?"
    return f"This branch holds {' and '.join(parts)}. Accept it?" if parts else None


def _proposal(task: Task) -> list[breakdown.Subtask] | None:
    """The subtasks a held breakdown proposes (None: it proposes none, or they can't be read)."""
    if task.state is not S.PROVISIONAL or "PROPOSED_SPLIT" not in task.headers:
        return None
    try:
        return breakdown.proposed(task)
    except OctopoidError:
        return []


def _diff(task: Task, git: BranchFacts) -> tuple[DiffView | None, str]:
    """The diff the page draws of the head it names, or why there is none."""
    try:
        if not git.exists:
            diffs.with_branch(task.id)  # raises why there is no branch
            return None, "its branch appeared while this page was drawn: reload"
        return task_diff_view(config.find_project_root(), git.base_tip, git.head), ""
    except (NothingToShow, TaskNotFound) as exc:
        return None, str(exc)
    except OctopoidError as exc:
        return None, f"no diff: {exc}"


def _check_lines(task: Task) -> list[str]:
    """What the task's checks said, attempt by attempt, from its History."""
    return [line for line in task.history if "  (checks: " in line]


def _placed(
    diff: DiffView | None, comments: list[dict[str, Any]]
) -> tuple[dict[tuple[str, str, int], list[dict[str, Any]]], list[dict[str, Any]]]:
    """The draft's comments by the row they are drawn under (path, side, last line), and
    those that fall on no row drawn (a file cut from the page, a line of an older head)."""
    rows = set()
    for file in diff.files if diff else []:
        for row in file.rows:
            if row.kind == "del":
                rows.add((file.path, "old", row.old))
            elif row.kind != "hunk":
                rows.add((file.path, "new", row.new))
    placed: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    unplaced = []
    for comment in comments:
        key = (comment["path"], comment["side"], comment["end"] or comment["line"])
        if key in rows:
            placed.setdefault(key, []).append(comment)
        else:
            unplaced.append(comment)
    return placed, unplaced


def task_page(
    task_id: str,
    reviewer: str = "web",
    typed: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Everything the task page shows; ``TaskNotFound``/``InvalidTaskId`` for a bad id.

    ``reviewer``'s draft review fills the forms, unless ``typed`` holds what a refused
    action sent (reason and comments), which is shown again as it was typed."""
    now = now or utcnow()
    task = queue_utils.get_task(task_id)
    draft = drafts.load(task.id, reviewer).as_json()
    if typed is not None:
        draft.update(typed)
    turns, cost = reports.task_usage(task)
    facts = {
        "state": task.state.value if task.state else "?",
        "attempt": task.attempts,  # the forms' guard: the page was drawn for this attempt
        "attempt_text": reports.attempt_of(task),
        "turns": turns,
        "tokens": int(task.headers.get("TOKENS_TOTAL") or 0),
        "cost": cost,
        "duration": _duration(task, now),
        "commits": f"{task.headers['COMMITS']} in attempt {task.attempts}"
        if "COMMITS" in task.headers
        else "-",
        "branch": task.branch,
    }
    git = mergeable.branch_facts(task)
    diff, diff_note = _diff(task, git)
    placed, unplaced = _placed(diff, draft["comments"])
    asked = questions.read(task.id)  # shown while nobody has answered it
    return {
        "task": task,
        "context": task.context,
        "criteria": task.criteria,
        "checks": _check_lines(task),
        "draft": draft,
        "placed": placed,
        "unplaced": unplaced,
        "facts": facts,
        "git": git,
        "confirm_accept": _confirm_accept(task, git),
        "diff": diff,
        "diff_note": diff_note,
        "notes": task_notes.get_task_notes(task.id) or "",
        "attempts": attempts(task),
        "history": task.history,
        "needs_review": task.state is S.PROVISIONAL,
        "proposal": _proposal(task),
        "live": live_since(task.id, None) if task.state is S.CLAIMED else ("", 0),
        "pull_request": reports.pull_request_link(task),
        "question": asked if asked.get("question") and "answer" not in asked else None,
        "learnings": lifecycle.learning_rows(lifecycle.pending_learnings(task)),
    }

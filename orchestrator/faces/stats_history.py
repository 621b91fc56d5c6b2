"""What one task's History says for `octopoid stats` (docs/stats.md): pure, text in, cells out.

Every fenced move writes one History line (``TIME  from → to  (who: why)``), and a check's
result one event (``TIME  in claimed  (checks: check `cmd` passed (1.0s))``). This module
walks those lines once and adds what they show to *cells*: one per ISO week, agent and
role, each a few counts, sums and lists of durations that add up across tasks, so a
summary of done tasks (which never change) can be kept and extended (``stats.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..model.tasks import Task, TaskState, parse_time

S = TaskState
NO_AGENT = "-"  # a task closed before any attempt
#: A check failure as the implementer's requeue (or fail) reason says it:
#: ``checks: 1 passed, 2 failed (pytest -q after 3.2s, ruff after 0.1s)``.
FAILED_CHECKS_RE = re.compile(r"checks: \d+ passed, \d+ failed \((.*)")
FAILED_ONE_RE = re.compile(r"(.+?) after [0-9.]+s(, |\))")
SUBMIT_COST_RE = re.compile(r"^[0-9]+ commits?, [0-9]+ turns, \$([0-9.]+)")
PASSED_CHECK_RE = re.compile(r"check `(.*)` passed \(")
#: What a retry may follow: nothing (a first attempt), a failed check, a rejection.
AFTER = ("first", "after_check", "after_reject")

Cell = dict[str, dict[str, Any]]  # {"n": {count: int}, "s": {sum: float}, "v": {list: [int]}}
Cells = dict[str, Cell]  # by cell key: "week|agent|role"


@dataclass(frozen=True)
class Line:
    """One History line, split."""

    time: datetime
    src: str  # "" for an event in place
    dst: str  # the state it moved to, or the state it happened in
    actor: str
    reason: str


def parse_line(text: str) -> Line | None:
    """A History line, or None for one octopoid did not write (an imported line)."""
    parts = text.split("  ", 2)
    if len(parts) < 3 or not (parts[2].startswith("(") and parts[2].endswith(")")):
        return None
    try:
        moment = parse_time(parts[0])
    except ValueError:
        return None
    who, _, why = parts[2][1:-1].partition(": ")
    what = parts[1]
    if what.startswith("in "):
        return Line(moment, "", what[3:], who, why)
    src, arrow, dst = what.partition(" → ")
    if not arrow:
        return None
    # ``claimed → claimed``: a check's result as older versions wrote it, an event
    return Line(moment, "" if src == dst else src, dst, who, why)


def week_of(moment: datetime) -> str:
    """The ISO week a moment falls in: ``2026-W48``."""
    year, week, _ = moment.isocalendar()
    return f"{year}-W{week:02d}"


def merge(into: Cells, more: Cells) -> None:
    """Add ``more``'s cells to ``into``'s (counts and sums add, lists join)."""
    for key, cell in more.items():
        mine = into.setdefault(key, {"n": {}, "s": {}, "v": {}})
        for kind in ("n", "s"):
            for name, value in cell[kind].items():
                mine[kind][name] = mine[kind].get(name, 0) + value
        for name, values in cell["v"].items():
            mine["v"].setdefault(name, []).extend(values)


@dataclass
class _Attempt:
    agent: str
    after: str
    passed: set[str] = field(default_factory=set)
    cost: float | None = None  # what its submit says it cost (``..., $0.42``)


@dataclass
class _Walk:
    """Where the walk through one task's History is."""

    task: Task
    cells: Cells = field(default_factory=dict)
    attempts: int = 0
    attempt: _Attempt | None = None  # the last attempt, running or ended
    last_end: str = "first"  # how the attempt before the next one ended (AFTER)
    failed_checks: list[str] = field(default_factory=list)
    since: datetime | None = None  # when it entered the state it is in
    created: datetime | None = None
    reviewed: bool = False
    accepted_at: datetime | None = None

    def put(self, moment: datetime, kind: str, name: str, value: float = 1) -> None:
        """Count (``n``), sum (``s``) or list (``v``) ``value`` under ``name`` in the cell of
        ``moment``'s week, the attempt's agent and the task's role."""
        agent = (self.attempt.agent if self.attempt else "") or NO_AGENT
        key = f"{week_of(moment)}|{agent}|{self.task.role}"
        cell = self.cells.setdefault(key, {"n": {}, "s": {}, "v": {}})
        if kind == "v":
            cell["v"].setdefault(name, []).append(value)
        else:
            cell[kind][name] = cell[kind].get(name, 0) + value


def task_cells(task: Task) -> Cells:
    """Everything ``task``'s History and totals add to the figures, by cell."""
    walk = _Walk(task)
    lines = [line for text in task.history if (line := parse_line(text)) is not None]
    for line in lines:
        _step(walk, line)
    if lines:
        _totals(walk, lines[-1].time)
    return walk.cells


def _step(walk: _Walk, line: Line) -> None:
    if walk.created is None:
        walk.created = line.time
    if not line.src:
        found = PASSED_CHECK_RE.match(line.reason) if line.actor == "checks" else None
        if found and walk.attempt is not None:
            walk.attempt.passed.add(found.group(1))
        return
    seconds = int((line.time - walk.since).total_seconds()) if walk.since else None
    walk.since = line.time
    if line.dst == S.CLAIMED.value:
        _claimed(walk, line)
    elif line.src == S.CLAIMED.value:
        if seconds is not None:
            walk.put(line.time, "v", "claimed_seconds", max(seconds, 0))
        _left_claimed(walk, line)
    elif line.src == S.PROVISIONAL.value:
        if seconds is not None:
            walk.put(line.time, "v", "review_wait_seconds", max(seconds, 0))
        _reviewed(walk, line)
    elif line.dst == S.DONE.value:
        _closed(walk, line)


def _claimed(walk: _Walk, line: Line) -> None:
    walk.attempts += 1
    walk.attempt = _Attempt(line.actor, walk.last_end)
    walk.put(line.time, "n", "attempts")
    walk.put(line.time, "n", walk.last_end)


def _left_claimed(walk: _Walk, line: Line) -> None:
    attempt, reason = walk.attempt, line.reason
    walk.last_end = "other"
    if line.dst == S.PROVISIONAL.value:
        if not walk.reviewed and walk.created is not None:
            wait = int((line.time - walk.created).total_seconds())
            walk.put(line.time, "v", "first_review_seconds", max(wait, 0))
        walk.reviewed = True
        if attempt is not None and (spent := SUBMIT_COST_RE.search(reason)):
            attempt.cost = float(spent.group(1))
        if attempt and attempt.after == "after_check" and set(walk.failed_checks) <= attempt.passed:
            walk.put(line.time, "n", "after_check_fixed")
        return
    if found := FAILED_CHECKS_RE.search(reason):
        walk.last_end = "after_check"
        walk.failed_checks = failed_commands(found.group(1))
    _stall(walk, line)
    if line.dst == S.REJECTED.value:
        walk.put(line.time, "n", "agent_rejected")
    elif line.dst == S.FAILED.value:
        walk.put(line.time, "n", "failed")
    elif line.dst == S.DONE.value:
        walk.put(line.time, "n", "completed")


def failed_commands(text: str) -> list[str]:
    """The commands of ``cmd after 3.2s, cmd2 after 0.1s)``: up to the closing bracket."""
    found, pos = [], 0
    while (one := FAILED_ONE_RE.match(text, pos)) is not None:
        found.append(one.group(1))
        pos = one.end()
        if one.group(2) == ")":
            break
    return found


def _stall(walk: _Walk, line: Line) -> None:
    """An attempt that ended for no fault of the task: reaped (its runner died or its
    lease ran out), given back (a cause no task can fix), or stopped by a usage limit."""
    if line.actor == "reaper":
        walk.put(line.time, "n", "reaped")
    elif "usage limit reached" in line.reason:
        walk.put(line.time, "n", "usage_limit")
    elif line.reason.startswith("not counted"):
        walk.put(line.time, "n", "given_back")


def _reviewed(walk: _Walk, line: Line) -> None:
    reason, attempt = line.reason, walk.attempt
    if line.dst == S.DONE.value and not reason.startswith("closed as "):
        walk.put(line.time, "n", "accepted")
        walk.put(line.time, "n", "accepted_attempts", walk.attempts)
        walk.accepted_at = line.time
        if attempt is not None:
            walk.put(line.time, "n", f"{attempt.after}_accepted")
        if reason.startswith("forge: merged"):
            walk.put(line.time, "n", "pr_merged")
    elif line.dst == S.INCOMING.value:
        walk.put(line.time, "n", "rejected")
        walk.last_end = "after_reject"
        if attempt is not None and attempt.cost is not None:
            walk.put(line.time, "n", "rejected_with_cost")
            walk.put(line.time, "s", "rejected_cost", attempt.cost)
        if reason.startswith("forge: "):
            for name, said in (("ci_sent_back", "CI failed"), ("reviews_sent_back", "changes")):
                if said in reason:
                    walk.put(line.time, "n", name)
    elif line.dst == S.FAILED.value:
        walk.put(line.time, "n", "failed")
        if reason.startswith("forge: pull request") and "closed by" in reason:
            walk.put(line.time, "n", "pr_closed")
    else:
        _closed(walk, line)


def _closed(walk: _Walk, line: Line) -> None:
    if line.reason.startswith("closed as wont-do"):
        walk.put(line.time, "n", "wont_do")
    elif line.reason.startswith("closed as"):
        walk.put(line.time, "n", "closed")


def _totals(walk: _Walk, last: datetime) -> None:
    """Cost and tokens: a task's totals (every attempt's), on its accept, or on its end
    without its work taken (won't do, failed, rejected by its agent)."""
    task = walk.task
    if walk.accepted_at is not None:
        _spent(walk, walk.accepted_at, "accepted")
        return
    if task.headers.get("CLOSED") == "wont-do" or task.state in (S.FAILED, S.REJECTED):
        _spent(walk, last, "unaccepted")


def _spent(walk: _Walk, moment: datetime, what: str) -> None:
    walk.put(moment, "n", f"{what}_tasks")
    for header, name in (("COST_USD_TOTAL", "cost"), ("TOKENS_TOTAL", "tokens")):
        value = walk.task.headers.get(header)
        if value:
            walk.put(moment, "n", f"{what}_with_{name}")
            walk.put(moment, "s", f"{what}_{name}", float(value))

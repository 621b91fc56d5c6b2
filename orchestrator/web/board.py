"""The board: the counts `octopoid status` prints and the tasks grouped by what they need
from the user.

The counts are ``reports.status_summary``'s own; its lists read only the small folders
(claimed, provisional, failed, rejected, breakdown), the claim index for waiting tasks and
the ledger for recently done ones, so it stays quick at 50k done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .. import queue_utils, reports, stalls
from ..exceptions import OctopoidError
from ..tasks import Task, TaskState, parse_time, task_label, utcnow

S = TaskState
SHOWN = 50  # tasks per board group; the rest are counted
RECENT_DONE = 10


@dataclass
class Card:
    id: str
    title: str
    state: str
    facts: list[str] = field(default_factory=list)


@dataclass
class Group:
    key: str
    title: str
    hint: str
    cards: list[Card]
    total: int

    @property
    def more(self) -> int:
        return self.total - len(self.cards)


def _ago(moment: str | None, now: datetime) -> str:
    if not moment:
        return "?"
    try:
        seconds = int((now - parse_time(moment)).total_seconds())
    except ValueError:
        return "?"
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def _usage_facts(task: Task) -> list[str]:
    turns, cost = reports.task_usage(task)
    facts = [f"attempt {task.attempts}"]
    if turns:
        facts.append(f"{turns} turns")
    if cost:
        facts.append(f"${cost:.2f}")
    return facts


def _card(task: Task, *facts: str) -> Card:
    return Card(task.label, task.title, task.state.value if task.state else "?", list(facts))


def _read_some(ids: list[str]) -> list[Task]:
    """The tasks of ``ids`` that can still be read (one may move while the page is drawn)."""
    found = []
    for task_id in ids:
        try:
            found.append(queue_utils.get_task(task_id))
        except OctopoidError:
            continue
    return found


def board(query: Mapping[str, str] | None = None, now: datetime | None = None) -> dict[str, Any]:
    """The board: counts as `octopoid status` prints them, and tasks grouped by what they
    need from the user."""
    now = now or utcnow()
    store = queue_utils.get_store()
    waiting = store.waiting()
    summary = reports.status_summary(now, waiting)
    review, proposals = [], []
    for task in store.list(S.PROVISIONAL):
        chosen = proposals if "PROPOSED_SPLIT" in task.headers else review
        chosen.append(task)
    review_cards = [
        _card(
            t,
            *_usage_facts(t),
            f"submitted {_ago(t.headers.get('SUBMITTED_AT'), now)} ago",
            *([f"no change needed: {t.headers['NO_CHANGE']}"] if "NO_CHANGE" in t.headers else []),
        )
        for t in review
    ]
    attention = [_card(t, *_usage_facts(t), "proposed split: approve or reject") for t in proposals]
    for state in (S.FAILED, S.REJECTED, S.BREAKDOWN):
        attention += [_card(t, *_usage_facts(t)) for t in store.list(state)]
    running = [
        _card(
            t,
            t.headers.get("CLAIMED_BY", "?"),
            *_usage_facts(t),
            f"claimed {_ago(t.headers.get('CLAIMED_AT'), now)} ago",
        )
        for t in store.list(S.CLAIMED)
    ]
    blocked_ids = set(summary["blocked"]["waiting"])
    stuck = {s["id"]: s["why"] for s in summary["blocked"]["stuck"]}
    ready = [w for w in waiting if task_label(w.id) not in blocked_ids]
    blocked = [w for w in waiting if task_label(w.id) in blocked_ids]
    blockers = {w.id: w.blocked_by for w in blocked}
    ready_cards = [_card(t, t.priority) for t in _read_some([w.id for w in ready[:SHOWN]])]
    blocked_cards = [
        _card(t, stuck.get(t.label) or "blocked by " + ", ".join(map(task_label, blockers[t.id])))
        for t in _read_some([w.id for w in blocked[:SHOWN]])
    ]
    done_cards = [_card(t, *_usage_facts(t)) for t in _read_some(store.recent(S.DONE, RECENT_DONE))]
    groups = [
        Group("review", "Needs review", "accept or reject", review_cards[:SHOWN], len(review)),
        Group(
            "attention",
            "Failed / Rejected / Breakdown",
            "retry, or read the notes",
            attention[:SHOWN],
            len(attention),
        ),
        Group("running", "Running", "agents at work", running[:SHOWN], len(running)),
        Group("waiting", "Waiting", "in claim order", ready_cards, len(ready)),
        Group("blocked", "Blocked", "waiting on other tasks", blocked_cards, len(blocked)),
        Group("done", "Recently done", "", done_cards, summary["counts"][S.DONE.value]),
    ]
    walls = summary["sandbox"]
    return {
        "counts": summary["counts"],
        "groups": groups,
        "problem": summary["config_problem"],
        "stalls": [] if summary["config_problem"] else stalls.lines(summary["stalls"]),
        "sandbox": walls,
    }

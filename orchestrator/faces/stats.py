"""`octopoid stats`: what works, in numbers, from the tasks' History (docs/stats.md).

``stats_history`` turns one task into cells (week, agent, role). A done task never changes,
so the cells of every done task are kept as one store record, ``stats/done`` (a cache:
shared on PostgreSQL, rebuilt from the tasks whenever it does not match them), extended by
the tasks that reached done since it was written; the few tasks in other states are read
every time. ``figures`` sums the cells a question selects into the numbers people read.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

from .. import config
from ..model.exceptions import (
    ConfigError,
    InvalidInput,
    RecordChanged,
    TaskNotFound,
    TaskParseError,
)
from ..model.tasks import Task, TaskState, parse_time
from ..queue import agent_records
from ..queue.machine import get_store
from ..queue.store import QueueStore
from .stats_history import AFTER, NO_AGENT, Cells, merge, task_cells, week_of

CACHE_KEY = "stats/done"
CACHE_FORMAT = 2  # bumped when what a cell holds changes: an older cache is rebuilt
WEEK_RE = re.compile(r"([0-9]{4})-W([0-9]{2})")
#: Not in a cell: the live states, read at every question.
LIVE = [s for s in TaskState if s not in (TaskState.DONE, TaskState.QUARANTINE)]
TIMES = ("first_review_seconds", "review_wait_seconds", "claimed_seconds")
STALLS = ("reaped", "given_back", "usage_limit")
FORGE = ("pr_merged", "ci_sent_back", "reviews_sent_back", "pr_closed")


def all_cells() -> Cells:
    """Every task's cells: done tasks' from the cache (extended, or rebuilt), the rest read now."""
    store = get_store()
    cells = _done_cells(store)
    for state in LIVE:
        for task in _tried(store) if state is TaskState.INCOMING else store.list(state):
            merge(cells, task_cells(task))
    return cells


def _tried(store: QueueStore) -> Iterable[Task]:
    """The waiting tasks that had an attempt (the index says which): one never tried has
    nothing to count, and a big queue is not read task by task."""
    tried = [row.id for row in store.waiting() if row.attempts]
    return [t for t in _readable(store, tried) if t.state is TaskState.INCOMING]  # else: moved


def _readable(store: QueueStore, task_ids: Iterable[str]) -> Iterable[Task]:
    """The tasks that can be read (one gone since it was listed, or quarantined as
    unreadable, counts for nothing)."""
    for task_id in task_ids:
        with contextlib.suppress(TaskNotFound, TaskParseError):
            yield store.get(task_id)


def _done_cells(store: QueueStore) -> Cells:
    """The done tasks' cells, the summary brought up to date first: as kept while done holds
    as many tasks and the same newest one; extended by the tasks done since it was written;
    rebuilt from every done task when neither holds (one was pruned, or moved by hand)."""
    records = store.records
    found = records.read(CACHE_KEY)
    value = found.value if found is not None else {}
    count = store.count(TaskState.DONE)
    kept = value.get("count", 0) if value.get("format") == CACHE_FORMAT else -1
    newest = store.recent(TaskState.DONE, max(count - kept, 0) + 1)
    if kept == count and (newest[:1] or [None]) == [value.get("newest")]:
        return value.get("cells", {})
    if 0 <= kept < count and newest[-1:] == [value.get("newest")]:
        cells, fresh = value["cells"], newest[:-1]
    else:
        cells, fresh = {}, store.ids(TaskState.DONE)
    for task in _readable(store, fresh):
        merge(cells, task_cells(task))
    for cell in cells.values():
        for values in cell["v"].values():
            values.sort()  # sorted runs: summing cells then sorts in near-linear time
    value = {
        "format": CACHE_FORMAT,
        "count": count,
        "newest": (newest or [None])[0],
        "cells": cells,
    }
    with contextlib.suppress(RecordChanged):  # another process did it now: ours is as good
        records.write(CACHE_KEY, value, None if found is None else found.version)
    return cells


def parse_week(text: str) -> str:
    """An ISO week as given (``2026-W48``), checked; ``InvalidInput`` otherwise."""
    found = WEEK_RE.fullmatch(text.strip())
    if found is None or not 1 <= int(found.group(2)) <= 53:
        raise InvalidInput(f"--week takes an ISO week such as 2026-W48, not {text!r}")
    try:
        date.fromisocalendar(int(found.group(1)), int(found.group(2)), 1)
    except ValueError:
        raise InvalidInput(f"{text} is not a week of its year") from None
    return text.strip()


def parse_since(text: str) -> str:
    """A date (``2026-11-01``) as the first ISO week it counts from."""
    try:
        day = date.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(f"--since takes a date such as 2026-11-01, not {text!r}") from None
    return week_of(datetime(day.year, day.month, day.day))


def _chosen(at: str, by: str, agent: str | None, since: str | None, week: str | None) -> bool:
    """Whether what week ``at`` and agent ``by`` counted is what the options select."""
    return agent in (None, by) and (since is None or at >= since) and week in (None, at)


def figures(cells: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The numbers of a set of cells (docs/stats.md defines each)."""
    total: Cells = {}
    for cell in cells:
        merge(total, {"": cell})
    n, s, v = (total.get("", {}).get(kind, {}) for kind in ("n", "s", "v"))
    count = {name: int(n.get(name, 0)) for name in _COUNTS}
    reviewed = count["accepted"] + count["rejected"]
    return {
        **{name: count[name] for name in _COUNTS[:8]},
        "accept_rate": _ratio(count["accepted"], reviewed),
        "attempts_per_accepted": _ratio(n.get("accepted_attempts", 0), count["accepted"]),
        "retry_effect": _retry_effect(n),
        "cost": _cost(n, s),
        "times": {name.removesuffix("_seconds"): _spread(v.get(name, [])) for name in TIMES},
        "stalls": {name: count[name] for name in STALLS},
        "forge": {name: count[name] for name in FORGE},
    }


_COUNTS = (
    "attempts",
    "accepted",
    "rejected",
    "closed",
    "wont_do",
    "failed",
    "agent_rejected",
    "completed",
    *STALLS,
    *FORGE,
)


def _retry_effect(n: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Attempts by what came before them, and how many of them were accepted."""
    out = {}
    for after in AFTER:
        tried, won = int(n.get(after, 0)), int(n.get(f"{after}_accepted", 0))
        out[after] = {"attempts": tried, "accepted": won, "rate": _ratio(won, tried)}
    fixed = int(n.get("after_check_fixed", 0))
    out["after_check"].update(fixed=fixed, fixed_rate=_ratio(fixed, out["after_check"]["attempts"]))
    return out


def _cost(n: dict[str, float], s: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cost_per_rejection": _ratio(s.get("rejected_cost", 0), n.get("rejected_with_cost", 0))
    }
    for what in ("accepted", "unaccepted"):
        out[f"{what}_tasks"] = int(n.get(f"{what}_tasks", 0))
        for name in ("cost", "tokens"):
            per = _ratio(s.get(f"{what}_{name}", 0), n.get(f"{what}_with_{name}", 0))
            out[f"{name}_per_{what}"] = per
    return out


def _ratio(part: float, whole: float) -> float | None:
    return None if not whole else round(part / whole, 4)


def percentile(ordered: list[int], q: float) -> int | None:
    """Nearest rank over sorted values: the smallest with at least ``q`` of them at or below it."""
    if not ordered:
        return None
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def _spread(values: list[int]) -> dict[str, int | None]:
    ordered = sorted(values)
    return {"n": len(ordered), "p50": percentile(ordered, 0.5), "p90": percentile(ordered, 0.9)}


def report(
    agent: str | None = None, since: str | None = None, week: str | None = None
) -> dict[str, Any]:
    """The whole answer of `octopoid stats`: the project's figures, then by agent, role and
    week, for the cells the options select; and the breaker's pauses."""
    since_week = parse_since(since) if since else None
    one_week = parse_week(week) if week else None
    every = all_cells()
    if agent is not None:
        _check_agent(agent, every)
    cells = {
        key: cell
        for key, cell in every.items()
        if _chosen(*key.split("|", 2)[:2], agent, since_week, one_week)
    }
    groups: dict[str, dict[str, list]] = {"agent": {}, "role": {}, "week": {}}
    for key, cell in cells.items():
        cell_week, cell_agent, role = key.split("|", 2)
        for name, value in (("week", cell_week), ("agent", cell_agent), ("role", role)):
            groups[name].setdefault(value, []).append(cell)
    pauses = breaker_pauses(agent, since_week, one_week)
    return {
        "filters": {"agent": agent, "since": since, "week": one_week},
        "project": figures(cells.values()),
        "by_agent": {k: figures(v) for k, v in sorted(groups["agent"].items()) if k != NO_AGENT},
        "by_role": {k: figures(v) for k, v in sorted(groups["role"].items())},
        "by_week": {k: figures(v) for k, v in sorted(groups["week"].items())},
        "breaker_pauses": pauses,
    }


def _check_agent(agent: str, cells: Cells) -> None:
    """Refuse an agent that neither agents.yaml nor any History names (a typo)."""
    known = {key.split("|", 2)[1] for key in cells} - {NO_AGENT}
    with contextlib.suppress(ConfigError):
        known |= {a["name"] for a in config.load_agents()["agents"]}
    if agent not in known:
        names = ", ".join(sorted(known)) or "none yet"
        raise InvalidInput(f"no agent {agent!r} in agents.yaml or in any History (agents: {names})")


def breaker_pauses(
    agent: str | None = None, since: str | None = None, week: str | None = None
) -> list[dict[str, str]]:
    """The circuit breaker's pauses, as the agents' records keep them (``agent_status``)."""
    found = [
        {**one, "week": week_of(parse_time(one["since"]))} for one in agent_records.pause_history()
    ]
    return [one for one in found if _chosen(one["week"], one["agent"], agent, since, week)]

"""Budgets: what a task, an agent in a day and the project in a day may spend, in dollars,
tokens, turns and wall time (config.yaml's ``budgets:``; a task's own ``BUDGET`` header
overrides the task budget). At ``alert_at`` (80 %) an alert; at 100 % no attempt starts,
and a running one is given only what is left, so it stops cleanly with its notes saved.

Spending comes from what octopoid records anyway: a task's ``*_TOTAL`` headers, and each
agent's day in its record in the store (``agent_records``: shared by every machine on
PostgreSQL, so a project's day is spent once). Days are UTC days.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from ..base.text import clean_text
from ..model.exceptions import InvalidInput
from ..model.tasks import Task

DIMENSIONS = ("usd", "tokens", "turns", "seconds")
UNLIMITED = math.inf


class Spend(NamedTuple):
    """What was spent, per dimension; ``+`` adds."""

    usd: float = 0.0
    tokens: float = 0
    turns: float = 0
    seconds: float = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(*(getattr(self, d) + getattr(other, d) for d in DIMENSIONS))


def show(dimension: str, amount: float) -> str:
    if dimension == "usd":
        return f"${amount:.2f}"
    if dimension == "seconds":
        return f"{amount:.0f}s"
    return f"{amount:.0f} {dimension}"


def parse(text: str, what: str = "BUDGET") -> dict[str, float]:
    """``usd=5 turns=100`` (or comma-separated) as limits; ``InvalidInput`` otherwise."""
    limits: dict[str, float] = {}
    for part in text.replace(",", " ").split():
        name, eq, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not eq or name not in DIMENSIONS or not math.isfinite(number) or number < 0:
            raise InvalidInput(
                f"{what}: {part!r} is not a limit; write e.g. usd=5 tokens=200000 turns=100 "
                f"seconds=3600 ({', '.join(DIMENSIONS)}, each a number >= 0)"
            )
        limits[name] = number
    return limits


def given(text: str) -> dict[str, float] | None:
    """A ``--budget`` as a person gives it (enqueue, retry; CLI or MCP), checked; ``None``
    when empty: none set here (config.yaml's applies, or the task's own stays)."""
    return parse(clean_text(text, "--budget"), "--budget") if text else None


def render(limits: dict[str, float]) -> str:
    """Limits as a ``BUDGET`` header value (``parse``'s inverse)."""
    return " ".join(f"{d}={limits[d]:g}" for d in DIMENSIONS if d in limits)


def _spend(found: Mapping[str, Any], usd: str, tokens: str, turns: str, seconds: str) -> Spend:
    """A ``Spend`` from the four fields that hold it (a task's headers, an agent's day)."""
    return Spend(
        float(found.get(usd) or 0),
        int(found.get(tokens) or 0),
        int(found.get(turns) or 0),
        float(found.get(seconds) or 0),
    )


def day_spend(record: dict[str, Any], now: datetime) -> Spend:
    """An agent's record (agent_records) as today's spend; nothing if it is of another day."""
    if record.get("day") != now.date().isoformat():
        return Spend()
    return _spend(record, "cost_today_usd", "tokens_today", "turns_today", "seconds_today")


def limits_of(cfg: dict[str, Any], scope: str, task: Task | None = None) -> dict[str, float]:
    """The configured limits of ``scope``; for the task scope, the task's ``BUDGET`` wins."""
    found = {d: v for d, v in cfg["budgets"][scope].items() if v is not None}
    if scope == "task" and task is not None and task.headers.get("BUDGET"):
        found |= parse(task.headers["BUDGET"], f"{task.label}'s BUDGET header")
    return found


class Verdict(NamedTuple):
    """One scope's budget against its spend."""

    scope: str  # task, agent_daily, project_daily
    who: str  # TASK-3, agent impl-1, the project
    spend: Spend
    limits: dict[str, float]

    def left(self, dimension: str) -> float:
        return self.limits.get(dimension, UNLIMITED) - getattr(self.spend, dimension)

    def share(self, dimension: str) -> float:
        limit = self.limits.get(dimension)
        if limit is None:
            return 0.0
        return 1.0 if limit == 0 else getattr(self.spend, dimension) / limit

    def spent(self) -> list[str]:
        """The dimensions used up, as ``$5.02 of $5.00``."""
        return [
            f"{show(d, getattr(self.spend, d))} of {show(d, self.limits[d])}"
            for d in DIMENSIONS
            if d in self.limits and self.share(d) >= 1.0
        ]

    def named(self) -> str:
        """``TASK-3's task budget (seconds=2)``."""
        return f"{self.who}'s {self.scope.replace('_', ' ')} budget ({render(self.limits)})"

    def why(self) -> str:
        day = "" if self.scope == "task" else " today (it resets at 00:00 UTC)"
        return f"{self.who} spent its budget{day}: {', '.join(self.spent())}"


def of_task(task: Task, cfg: dict[str, Any]) -> Verdict | None:
    """The task's own budget (its BUDGET header, else budgets.task), or None if unlimited;
    ``InvalidInput`` for a BUDGET header that is not one."""
    spend = _spend(task.headers, "COST_USD_TOTAL", "TOKENS_TOTAL", "TURNS_TOTAL", "SECONDS_TOTAL")
    return _verdict("task", task.label, spend, limits_of(cfg, "task", task))


def of_agent(
    name: str, records: dict[str, dict[str, Any]], cfg: dict[str, Any], now: datetime
) -> Verdict | None:
    """The agent's budget for today; ``records`` are every agent's day, by name."""
    spend = day_spend(records.get(name, {}), now)
    return _verdict("agent_daily", f"agent {name}", spend, limits_of(cfg, "agent_daily"))


def of_project(
    records: dict[str, dict[str, Any]], cfg: dict[str, Any], now: datetime
) -> Verdict | None:
    """The project's budget for today: every agent's day together."""
    total = sum((day_spend(r, now) for r in records.values()), Spend())
    return _verdict("project_daily", "the project", total, limits_of(cfg, "project_daily"))


def _verdict(scope: str, who: str, spend: Spend, limits: dict[str, float]) -> Verdict | None:
    return Verdict(scope, who, spend, limits) if limits else None


def verdicts(
    task: Task, agent: str, records: dict[str, dict[str, Any]], cfg: dict[str, Any], now: datetime
) -> list[Verdict]:
    """Every budget that bears on an attempt of ``task`` by ``agent``."""
    found = [of_task(task, cfg), of_agent(agent, records, cfg, now), of_project(records, cfg, now)]
    return [v for v in found if v is not None]


class Allowance(NamedTuple):
    """What one attempt may spend: the least left of every budget, and whose it is."""

    usd: float
    tokens: float
    turns: float
    seconds: float
    binding: dict[str, Verdict]  # dimension -> the budget that limits it

    def exhausted(self) -> Verdict | None:
        """The budget already spent, if any: then no attempt starts."""
        for dimension in DIMENSIONS:
            if getattr(self, dimension) <= 0 and dimension in self.binding:
                return self.binding[dimension]
        return None


def allowance(found: list[Verdict]) -> Allowance:
    left: dict[str, float] = {d: UNLIMITED for d in DIMENSIONS}
    binding: dict[str, Verdict] = {}
    for verdict in found:
        for dimension in DIMENSIONS:
            if verdict.left(dimension) < left[dimension]:
                left[dimension], binding[dimension] = verdict.left(dimension), verdict
    return Allowance(**left, binding=binding)


def watched(
    tasks: list[Task], records: dict[str, dict[str, Any]], cfg: dict[str, Any], now: datetime
) -> list[tuple[str, str]]:
    """The alerts due now for the running ``tasks``, every agent's day and the project's;
    a daily budget's key carries the day, so it is alerted again tomorrow."""
    daily = [of_project(records, cfg, now), *(of_agent(n, records, cfg, now) for n in records)]
    found = [v for v in daily if v is not None]
    for task in tasks:
        try:
            verdict = of_task(task, cfg)
        except InvalidInput:
            continue  # its runner fails it, saying why
        found += [verdict] if verdict is not None else []
    day = now.date().isoformat()
    return [
        (key if key.startswith("task:") else f"{key}:{day}", message)
        for key, message in alerts(found, cfg["budgets"]["alert_at"])
    ]


def alerts(found: list[Verdict], alert_at: float) -> list[tuple[str, str]]:
    """(key, message) for each budget at or past ``alert_at`` of a limit; the key names the
    budget, the level (alert or spent) and, for daily ones, the day: each is sent once."""
    out = []
    for verdict in found:
        for dimension in DIMENSIONS:
            share = verdict.share(dimension)
            if share < alert_at or dimension not in verdict.limits:
                continue
            level = "spent" if share >= 1 else "alert"
            key = f"{verdict.scope}:{verdict.who}:{dimension}:{level}"
            used = show(dimension, getattr(verdict.spend, dimension))
            limit = show(dimension, verdict.limits[dimension])
            scope = verdict.scope.replace("_", " ")
            out.append(
                (key, f"{verdict.who} has used {used} of its {limit} {scope} budget ({share:.0%})")
            )
    return out

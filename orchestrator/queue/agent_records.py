"""Agents' records: their pauses and what they did today, below every part that reads them.

Each agent's state is one record of the store, ``agents/<name>``: what it did and spent
today (the daily budgets read it), the circuit breaker's count, octopoid's own pause of
it (``hold``: a usage limit's, the breaker's) and a person's ``octopoid pause --agent``
(``paused``). The whole system's pause is the record ``agents``. On PostgreSQL every
machine shares them; a pass reads them all at once (``day_records``). Whether an agent
is running comes from the claimed tasks (the truth). `octopoid agents`, `pause` and
`resume` read and write these; whether an agent can run at all is the role's question
(``roles.agent_status``). The change functions handed to ``Records.update`` live here,
beside the store, so the store never calls up into a role.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple
from urllib.parse import unquote

from .. import config
from ..model import defaults
from ..model.exceptions import InvalidInput
from ..model.tasks import format_time, parse_time, utcnow
from . import adopt
from .store.records import Records, key_part

#: What holds a pause: a flag (`octopoid resume` lifts it) or ``paused: true`` in agents.yaml.
PAUSED_BY_FLAG, PAUSED_IN_CONFIG = "octopoid pause", "agents.yaml"
#: octopoid's own pauses of an agent (``Hold.kind``): until a usage limit resets, and the
#: circuit breaker's after attempts in a row failed for a cause no task can fix.
USAGE_LIMIT, BREAKER = "usage-limit", "breaker"
#: Causes that pass by themselves: the breaker's pause for them ends after
#: ``defaults.BREAKER_RETRY_SECONDS``; the others wait for a person.
PASSING_CAUSES = ("overloaded", "unreachable")
#: The system's record (its pause); each agent's is beneath it.
SYSTEM = "agents"
_DAY = {
    "attempts_today": 0,
    "turns_today": 0,
    "cost_today_usd": 0.0,
    "tokens_today": 0,
    "refused_today": 0,
}


class Hold(NamedTuple):
    """octopoid's own pause of an agent: why, since when and until when (None: until
    `octopoid resume --agent`), and whether the scheduler has alerted it."""

    kind: str
    why: str
    until: datetime | None
    since: str
    alerted: bool = False

    def as_record(self) -> dict[str, Any]:
        until = None if self.until is None else format_time(self.until)
        return {"kind": self.kind, "why": self.why, "since": self.since, "until": until,
                "alerted": self.alerted}  # fmt: skip


class Failure(NamedTuple):
    """Why an attempt failed when no task could have helped: its ``cause`` (one of
    ``backends.base.CAUSES``) and ``why``, in the role's words (``roles.agent_status``)."""

    cause: str
    why: str


class AgentRecords(dict[str, dict[str, Any]]):
    """Every configured agent's record by name (``{}`` if none), and the system's record
    (``system``): one read of the store, made once a pass."""

    def __init__(self, agents: dict[str, dict[str, Any]], system: dict[str, Any]) -> None:
        super().__init__(agents)
        self.system = system


def _records() -> Records:
    return adopt.store().records


def _key(agent: str) -> str:
    return f"{SYSTEM}/{key_part(agent)}"


def day_records(agents_cfg: dict[str, Any]) -> AgentRecords:
    """Every configured agent's record (its day, pauses, the breaker's count) and the
    system's, in one read: what the scheduler's pass, status and the budgets look at."""
    found = {key: record.value for key, record in _records().list(SYSTEM).items()}
    agents = {a["name"]: found.get(_key(a["name"]), {}) for a in agents_cfg["agents"]}
    return AgentRecords(agents, found.get(SYSTEM, {}))


def record_attempt(
    agent: str,
    task_label: str,
    outcome: str,
    turns: int,
    cost_usd: float | None,
    now: datetime | None = None,
    *,
    tokens: int = 0,
    seconds: float = 0.0,
    failure: Failure | None = None,
    refused: int = 0,
) -> Hold | None:
    """Add one finished attempt to the agent's record (today's totals reset each UTC day;
    the daily budgets read them; ``refused``: destinations its network refused). A
    ``failure`` no task could have helped: a run of them for one cause trips the breaker,
    whose pause is returned."""
    now = now or utcnow()
    tripped: list[Hold | None] = [None]

    def count(data: dict[str, Any] | None) -> dict[str, Any]:
        data = data or {}
        day = now.date().isoformat()
        if data.get("day") != day:
            data.update(_DAY, day=day, seconds_today=0.0)
        data["attempts_today"] = data.get("attempts_today", 0) + 1
        data["turns_today"] = data.get("turns_today", 0) + turns
        data["tokens_today"] = data.get("tokens_today", 0) + tokens
        data["seconds_today"] = round(data.get("seconds_today", 0.0) + seconds, 3)
        data["cost_today_usd"] = round(data.get("cost_today_usd", 0.0) + (cost_usd or 0.0), 6)
        data["refused_today"] = data.get("refused_today", 0) + refused
        data.update(last_task=task_label, last_outcome=outcome, last_finished=format_time(now))
        if outcome != "interrupted":  # a stop or a shutdown says nothing of the agent
            tripped[0] = _count_systemic(data, task_label, failure, now)
        return data

    _records().update(_key(agent), count)
    return tripped[0]


def _count_systemic(
    data: dict, task_label: str, failure: Failure | None, now: datetime
) -> Hold | None:
    """The circuit breaker: ``defaults.BREAKER_THRESHOLD`` attempts in a row failing for
    one cause pause the agent (an attempt that ran, or failed otherwise, starts over)."""
    streak = data.pop("systemic", None) or {}
    if failure is None:
        return None
    cause = failure.cause
    tasks = streak.get("tasks", []) if streak.get("cause") == cause else []
    tasks = [*tasks, task_label][-defaults.BREAKER_THRESHOLD :]
    if len(tasks) < defaults.BREAKER_THRESHOLD:
        data["systemic"] = {"cause": cause, "tasks": tasks}
        return None
    why = f"{len(tasks)} attempts in a row ({', '.join(tasks)}) failed because {failure.why}"
    retry = timedelta(seconds=defaults.BREAKER_RETRY_SECONDS)
    hold = Hold(BREAKER, why, now + retry if cause in PASSING_CAUSES else None, format_time(now))
    data["hold"] = hold.as_record()
    kept = [*data.get("pauses", []), {"since": hold.since, "cause": cause}]
    data["pauses"] = kept[-defaults.BREAKER_PAUSES_KEPT :]  # over time, for `octopoid stats`
    return hold


def pause_history() -> list[dict[str, str]]:
    """Every breaker pause the agents' records keep (agent, since, cause), oldest first."""
    found = []
    for key, record in _records().list(SYSTEM).items():
        agent = unquote(key.partition("/")[2])
        found += [{"agent": agent, **one} for one in record.value.get("pauses", []) if agent]
    return sorted(found, key=lambda one: one["since"])


def pause_until(
    agent: str,
    until: datetime | None,
    why: str,
    now: datetime | None = None,
) -> Hold:
    """Pause ``agent`` until ``until`` (a usage limit's reset; None: until a person says):
    it lifts by itself then, or at `octopoid resume --agent`. A usage limit never
    replaces the breaker's pause, which needs a person more."""
    now = now or utcnow()
    made: list[Hold] = []

    def pause(data: dict[str, Any] | None) -> dict[str, Any]:
        data = data or {}
        current = _hold_in(data, now)
        if current is not None and current.kind == BREAKER:
            made[:] = [current]
        else:
            made[:] = [Hold(USAGE_LIMIT, why, until, format_time(now))]
            data["hold"] = made[0].as_record()
        return data

    _records().update(_key(agent), pause)
    return made[0]


def _hold_in(record: dict[str, Any], now: datetime) -> Hold | None:
    """The pause an agent's record holds, while it lasts."""
    data = record.get("hold") or {}
    kind = str(data.get("kind") or USAGE_LIMIT)
    try:
        until = None if data.get("until") is None else parse_time(str(data["until"]))
    except ValueError:
        return None
    if (until is None and kind != BREAKER) or (until is not None and until <= now):
        return None
    why, since = str(data.get("why", "")), str(data.get("since", ""))
    return Hold(kind, why, until, since, data.get("alerted") is True)


def held(
    agent: str, now: datetime | None = None, records: AgentRecords | None = None
) -> Hold | None:
    """octopoid's own pause of ``agent`` while it lasts, else None (from ``records``, a
    pass's read, when given)."""
    if records is None:
        found = _records().read(_key(agent))
        record = {} if found is None else found.value
    else:
        record = records.get(agent, {})
    return _hold_in(record, now or utcnow())


def mark_alerted(agent: str, since: str) -> bool:
    """Remember that the pause made at ``since`` was alerted; False if it is gone or
    another replaced it (a person resumed the agent meanwhile)."""
    said = [False]

    def mark(data: dict[str, Any] | None) -> dict[str, Any] | None:
        hold = (data or {}).get("hold") or {}
        said[0] = hold.get("since") == since and hold.get("alerted") is not True
        if said[0]:
            hold["alerted"] = True
        return data

    _records().update(_key(agent), mark)
    return said[0]


def set_paused(paused: bool, agent: str | None = None) -> dict[str, Any]:
    """Pause or resume the whole system, or one agent (its record's ``paused``; every
    scheduler sharing the store sees it at its next pass).

    Returns ``pause_state()`` afterwards, so a resume can say what is still paused.
    """
    if agent is not None:
        names = [a["name"] for a in config.load_agents()["agents"]]
        if agent not in names:
            raise InvalidInput(
                f"no agent named {agent!r} in agents.yaml (agents: {', '.join(names) or 'none'})"
            )

    def flag(data: dict[str, Any] | None) -> dict[str, Any] | None:
        data = data or {}
        if paused:
            data.setdefault("paused", format_time(utcnow()))
        else:  # a resume of an agent also lifts octopoid's own pauses, and starts over
            for field in ("paused", "hold", "systemic") if agent else ("paused",):
                data.pop(field, None)
        return data or None

    _records().update(SYSTEM if agent is None else _key(agent), flag)
    return pause_state()


def pause_state() -> dict[str, Any]:
    """What is paused and what holds it: ``{"system": by, "agents": {name: by}}``.

    ``by`` is None, ``PAUSED_BY_FLAG`` or ``PAUSED_IN_CONFIG`` (which wins when both hold,
    since only an edit of agents.yaml lifts it); unpaused agents are left out.
    """
    agents_cfg = config.load_agents()
    records = day_records(agents_cfg)
    agents = {
        a["name"]: by for a in agents_cfg["agents"] if (by := paused_by(agents_cfg, records, a))
    }
    return {"system": paused_by(agents_cfg, records), "agents": agents}


def paused_by(agents_cfg: dict, records: AgentRecords, agent: dict | None = None) -> str | None:
    """What holds the system's (or ``agent``'s) pause, or None when it is not paused."""
    in_config = (agent or agents_cfg)["paused"]
    record = records.system if agent is None else records.get(agent["name"], {})
    if in_config:
        return PAUSED_IN_CONFIG
    return PAUSED_BY_FLAG if record.get("paused") else None


def how_to_resume(by: str, agent: str = "") -> str:
    """How a person lifts a pause held by ``by``."""
    if by == PAUSED_IN_CONFIG:
        return "paused: true in agents.yaml"
    return f"`octopoid resume{' --agent ' + agent if agent else ''}`"


def refused_today(now: datetime | None = None) -> int:
    """Destinations the agents' networks refused today, all attempts together."""
    today = (now or utcnow()).date().isoformat()
    records = day_records(config.load_agents()).values()
    return sum(r.get("refused_today", 0) for r in records if r.get("day") == today)

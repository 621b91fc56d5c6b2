"""Agents' state: pauses, whether they can run at all, and what they did today.

Runners record each finished attempt in ``runtime/agents/<name>.json``; whether an agent is
running comes from the claimed folder (the truth); pausing is a flag file the scheduler
watches, and octopoid's own pauses of an agent (a usage limit, the circuit breaker) are
its ``.limited`` record. `octopoid agents`, `pause` and `resume` read and write these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from . import config, defaults, queue_utils
from .exceptions import ConfigError, InvalidInput
from .fsutil import atomic_write, read_json_object
from .lazy import lazy_import
from .locks import FileMutex
from .tasks import TaskState, format_time, parse_time, utcnow

stalls = lazy_import("orchestrator.stalls")  # it asks this module; imported when used
# Needed only to say whether an agent can run: `status` does not pay for them.
claude_code = lazy_import("orchestrator.backends.claude_code")
process = lazy_import("orchestrator.backends.process")
backends_base = lazy_import("orchestrator.backends.base")  # CAUSES, for a runner's record

#: Backends that cannot report what an attempt cost (their cost is unknown, not zero).
COSTLESS_BACKENDS = ("command",)
#: What holds a pause: a flag (`octopoid resume` lifts it) or ``paused: true`` in agents.yaml.
PAUSED_BY_FLAG, PAUSED_IN_CONFIG = "octopoid pause", "agents.yaml"
#: octopoid's own pauses of an agent (``Hold.kind``): until a usage limit resets, and the
#: circuit breaker's after attempts in a row failed for a cause no task can fix.
USAGE_LIMIT, BREAKER = "usage-limit", "breaker"
#: Causes that pass by themselves: the breaker's pause for them ends after
#: ``defaults.BREAKER_RETRY_SECONDS``; the others wait for a person.
PASSING_CAUSES = ("overloaded", "unreachable")


@dataclass(frozen=True)
class Hold:
    """octopoid's own pause of an agent: why, since when and until when (None: until
    `octopoid resume --agent`), and whether the scheduler has alerted it."""

    kind: str
    why: str
    until: datetime | None
    since: str
    alerted: bool = False


def _state_file(agent: str) -> Path:
    return config.get_orchestrator_dir() / "agents" / f"{agent}.json"


def _record_lock(agent: str) -> FileMutex:
    """The agent's lock: its day record and its holds change under it (reentrant)."""
    return FileMutex(str(_state_file(agent)) + ".lock")


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
    cause: str | None = None,
    summary: str = "",
) -> Hold | None:
    """Add one finished attempt to the agent's record (today's totals reset each UTC day;
    the daily budgets read them). ``cause``: why it failed when no task could have helped
    (``backends.base.CAUSES``); a run of them trips the breaker, whose pause is returned."""
    now = now or utcnow()
    path = _state_file(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _record_lock(agent):
        data = read_json_object(path)
        day = now.date().isoformat()
        if data.get("day") != day:
            data.update(day=day, attempts_today=0, turns_today=0, cost_today_usd=0.0)
            data.update(tokens_today=0, seconds_today=0.0)
        data["attempts_today"] += 1
        data["turns_today"] += turns
        data["tokens_today"] = data.get("tokens_today", 0) + tokens
        data["seconds_today"] = round(data.get("seconds_today", 0.0) + seconds, 3)
        data["cost_today_usd"] = round(data["cost_today_usd"] + (cost_usd or 0.0), 6)
        data.update(last_task=task_label, last_outcome=outcome, last_finished=format_time(now))
        tripped = _count_systemic(agent, data, task_label, cause, summary, now)
        atomic_write(path, json.dumps(data, indent=2, sort_keys=True))
    return tripped


def _count_systemic(
    agent: str, data: dict, task_label: str, cause: str | None, summary: str, now: datetime
) -> Hold | None:
    """The circuit breaker: ``defaults.BREAKER_THRESHOLD`` attempts in a row failing for
    one cause pause the agent (an attempt that ran, or failed otherwise, starts over)."""
    streak = data.pop("systemic", None) or {}
    if cause is None:
        return None
    tasks = streak.get("tasks", []) if streak.get("cause") == cause else []
    tasks = [*tasks, task_label][-defaults.BREAKER_THRESHOLD :]
    if len(tasks) < defaults.BREAKER_THRESHOLD:
        data["systemic"] = {"cause": cause, "tasks": tasks}
        return None
    why = (
        f"{len(tasks)} attempts in a row ({', '.join(tasks)}) failed because "
        f"{backends_base.CAUSES[cause]}: {summary[:300]}"
    )
    retry = timedelta(seconds=defaults.BREAKER_RETRY_SECONDS)
    return pause_until(agent, now + retry if cause in PASSING_CAUSES else None, why, BREAKER, now)


def day_records(agents_cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every configured agent's record (what it did, and spent, on its last day)."""
    return {a["name"]: read_json_object(_state_file(a["name"])) for a in agents_cfg["agents"]}


def pause_until(
    agent: str,
    until: datetime | None,
    why: str,
    kind: str = USAGE_LIMIT,
    now: datetime | None = None,
) -> Hold:
    """Pause ``agent`` until ``until`` (a usage limit's reset; None: until a person says):
    it lifts by itself then, or at `octopoid resume --agent`. A usage limit never
    replaces the breaker's pause, which needs a person more."""
    now = now or utcnow()
    flag = _limit_flag(agent)
    flag.parent.mkdir(parents=True, exist_ok=True)
    with _record_lock(agent):
        current = held(agent, now)
        if kind == USAGE_LIMIT and current is not None and current.kind == BREAKER:
            return current
        hold = Hold(kind, why, until, format_time(now))
        record = {"kind": kind, "why": why, "since": hold.since, "alerted": False}
        atomic_write(flag, json.dumps({**record, "until": until and format_time(until)}))
    return hold


def held(agent: str, now: datetime | None = None) -> Hold | None:
    """octopoid's own pause of ``agent`` while it lasts, else None."""
    data = read_json_object(_limit_flag(agent))
    kind = str(data.get("kind") or USAGE_LIMIT)
    try:
        until = None if data.get("until") is None else parse_time(str(data["until"]))
    except ValueError:
        return None
    if (until is None and kind != BREAKER) or (until is not None and until <= (now or utcnow())):
        return None
    why, since = str(data.get("why", "")), str(data.get("since", ""))
    return Hold(kind, why, until, since, data.get("alerted") is True)


def limited_until(agent: str, now: datetime | None = None) -> tuple[datetime, str] | None:
    """(until when, why) while ``agent`` waits for a usage limit to reset; else None."""
    hold = held(agent, now)
    if hold is None or hold.kind != USAGE_LIMIT or hold.until is None:
        return None
    return hold.until, hold.why


def mark_alerted(agent: str, since: str) -> bool:
    """Remember that the pause made at ``since`` was alerted; False if it is gone or
    another replaced it (a person resumed the agent meanwhile)."""
    flag = _limit_flag(agent)
    with _record_lock(agent):
        data = read_json_object(flag)
        if not data or data.get("since") != since or data.get("alerted") is True:
            return False
        atomic_write(flag, json.dumps({**data, "alerted": True}))
    return True


def _limit_flag(agent: str) -> Path:
    return config.get_orchestrator_dir() / "agents" / f"{agent}.limited"


def _pause_flag(agent: str | None) -> Path:
    runtime = config.get_orchestrator_dir()
    return runtime / "agents" / f"{agent}.paused" if agent else runtime / "paused"


def set_paused(paused: bool, agent: str | None = None) -> dict[str, Any]:
    """Pause or resume the whole system, or one agent (a flag file the scheduler watches).

    Returns ``pause_state()`` afterwards, so a resume can say what is still paused.
    """
    if agent is not None:
        names = [a["name"] for a in config.load_agents()["agents"]]
        if agent not in names:
            raise InvalidInput(
                f"no agent named {agent!r} in agents.yaml (agents: {', '.join(names) or 'none'})"
            )
    flag = _pause_flag(agent)
    flag.parent.mkdir(parents=True, exist_ok=True)
    if paused:
        atomic_write(flag, f"paused at {utcnow().isoformat()}\n")
    else:
        flag.unlink(missing_ok=True)
        if agent is not None:  # a resume also lifts octopoid's own pauses, and starts over
            _lift_holds(agent)
    return pause_state()


def _lift_holds(agent: str) -> None:
    """End a usage-limit wait or the breaker's pause, and forget the failures counted."""
    with _record_lock(agent):
        _limit_flag(agent).unlink(missing_ok=True)
        record = read_json_object(_state_file(agent))
        if record.pop("systemic", None) is not None:
            atomic_write(_state_file(agent), json.dumps(record, indent=2, sort_keys=True))


def pause_state() -> dict[str, Any]:
    """What is paused and what holds it: ``{"system": by, "agents": {name: by}}``.

    ``by`` is None, ``PAUSED_BY_FLAG`` or ``PAUSED_IN_CONFIG`` (which wins when both hold,
    since only an edit of agents.yaml lifts it); unpaused agents are left out.
    """
    agents_cfg = config.load_agents()
    agents = {
        a["name"]: by
        for a in agents_cfg["agents"]
        if (by := _paused_by(a["paused"], _pause_flag(a["name"])))
    }
    return {"system": _paused_by(agents_cfg["paused"], _pause_flag(None)), "agents": agents}


def _paused_by(in_config: bool, flag: Path) -> str | None:
    if in_config:
        return PAUSED_IN_CONFIG
    return PAUSED_BY_FLAG if flag.exists() else None


def paused_by(agents_cfg: dict, agent: dict | None = None) -> str | None:
    """What holds the system's (or ``agent``'s) pause, or None when it is not paused."""
    if agent is None:
        return _paused_by(agents_cfg["paused"], _pause_flag(None))
    return _paused_by(agent["paused"], _pause_flag(agent["name"]))


def is_paused(agents_cfg: dict, agent: dict | None = None) -> bool:
    return paused_by(agents_cfg, agent) is not None


def how_to_resume(by: str, agent: str = "") -> str:
    """How a person lifts a pause held by ``by``."""
    if by == PAUSED_IN_CONFIG:
        return "paused: true in agents.yaml"
    return f"`octopoid resume{' --agent ' + agent if agent else ''}`"


def readiness_problem(agent: dict[str, Any]) -> str | None:
    """Why this agent cannot run at all (so the scheduler skips it, and every face says
    so), or None. Every backend is asked the same: is its program (``command``'s argv[0],
    ``claude``) found and executable as its box will see it, is its API key set?"""
    env = config.agent_env(agent)
    if agent["backend"] == "anthropic":
        if not env.get("ANTHROPIC_API_KEY"):
            return "ANTHROPIC_API_KEY is not set (in the environment or the agent's env)"
        return None
    root = config.find_project_root()
    if agent["backend"] == "claude-code":  # found on octopoid's own PATH, then run by path
        program, path = agent.get("claude_path") or "claude", None
    else:  # run from the clone (seen at the project's path), on the box's PATH
        program, path = agent["argv"][0].replace("{worktree}", str(root)), env.get("PATH")
        if "{" in program:
            return None  # {task_id}, {prompt_file}: known only at the attempt
    why = process.program_problem(program, root, path, _unseen(root))
    if why is None:
        return None
    hint = f"; {claude_code.INSTALL_HINT}" if agent["backend"] == "claude-code" else ""
    return f"{program!r} {why}{hint}"


def _unseen(root: Path) -> tuple[Path, ...]:
    """Where a box never looks, whatever it needs: octopoid's runtime, the repository's
    .git (``sandbox.walled``); nowhere without a sandbox."""
    if config.load_config()["sandbox"]["mode"] == "none":
        return ()
    return (config.get_orchestrator_dir().resolve(), (root / ".git").resolve())


def agents_overview(
    now: datetime | None = None, found: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Each agent with its state (idle, running TASK-x, paused), last outcome, today's use,
    and why it claims nothing now (``not_claiming``: the system's reasons, then its own,
    from ``found``, a ``stalls.report()`` the caller made, or a new one)."""
    today = (now or utcnow()).date().isoformat()
    problem = config.problem()
    if problem:
        raise ConfigError(problem)
    agents_cfg, cfg = config.load_agents(), config.load_config()
    claimed = queue_utils.list_tasks(TaskState.CLAIMED)
    found = found or stalls.report()
    system = [s["text"] for s in found["system"]]
    rows = []
    for agent in agents_cfg["agents"]:
        running = [t.label for t in claimed if t.headers.get("CLAIMED_BY") == agent["name"]]
        record = read_json_object(_state_file(agent["name"]))
        fresh = record.get("day") == today
        hold = held(agent["name"])
        breaker = hold if hold is not None and hold.kind == BREAKER else None
        if running:
            state = "running " + ", ".join(running)
        else:
            paused = is_paused(agents_cfg, agent) or is_paused(agents_cfg) or breaker
            state = "paused" if paused else "idle"
        rows.append(
            {
                "name": agent["name"],
                "role": agent["role"],
                "backend": agent["backend"],
                "sandbox": cfg["sandbox"]["mode"],
                "network": network_of(agent, cfg),
                "state": state,
                "problem": readiness_problem(agent),
                "breaker": None if breaker is None else _shown(breaker),
                "not_claiming": system
                + [s["text"] for s in found["agents"].get(agent["name"], [])],
                "last_task": record.get("last_task"),
                "last_outcome": record.get("last_outcome"),
                "attempts_today": record.get("attempts_today", 0) if fresh else 0,
                "turns_today": record.get("turns_today", 0) if fresh else 0,
                "cost_today_usd": _cost_today(agent, record if fresh else {}),
            }
        )
    return rows


def _shown(hold: Hold) -> dict[str, str | None]:
    until = None if hold.until is None else format_time(hold.until)
    return {"why": hold.why, "since": hold.since, "until": until}


def network_of(agent: dict[str, Any], cfg: dict[str, Any]) -> str:
    """What network the agent's box has: host, none, or host because nothing walls it in."""
    if cfg["sandbox"]["mode"] == "none":
        return "host (no sandbox)"
    return (agent.get("sandbox") or {}).get("network") or cfg["sandbox"]["network"]


def _cost_today(agent: dict[str, Any], record: dict[str, Any]) -> float | None:
    """Today's cost in USD; None (unknown) for a backend that cannot report one."""
    cost = record.get("cost_today_usd", 0.0)
    return None if not cost and agent["backend"] in COSTLESS_BACKENDS else cost

"""Agents' state: pause flags, whether they can run at all, and what they did today.

Runners record each finished attempt in ``runtime/agents/<name>.json``; whether an agent is
running comes from the claimed folder (the truth); pausing is a flag file the scheduler
watches. `octopoid agents`, `pause` and `resume` read and write these.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from . import config, netpolicy, queue_utils
from .exceptions import ConfigError, InvalidInput
from .fsutil import atomic_write, read_json_object
from .lazy import lazy_import
from .locks import FileMutex
from .tasks import TaskState, format_time, parse_time, utcnow

stalls = lazy_import("orchestrator.stalls")  # it asks this module; imported when used
# Needed only to say whether an agent can run: `status` does not pay for them.
claude_code = lazy_import("orchestrator.backends.claude_code")
roles_base = lazy_import("orchestrator.roles.base")

#: Backends that cannot report what an attempt cost (their cost is unknown, not zero).
COSTLESS_BACKENDS = ("command",)
#: What holds a pause: a flag (`octopoid resume` lifts it) or ``paused: true`` in agents.yaml.
PAUSED_BY_FLAG, PAUSED_IN_CONFIG = "octopoid pause", "agents.yaml"


def _state_file(agent: str) -> Path:
    return config.get_orchestrator_dir() / "agents" / f"{agent}.json"


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
    refused: int = 0,
) -> None:
    """Add one finished attempt to the agent's record (today's totals reset each UTC day;
    the daily budgets read them; ``refused``: destinations its network refused)."""
    now = now or utcnow()
    path = _state_file(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileMutex(str(path) + ".lock"):
        data = read_json_object(path)
        day = now.date().isoformat()
        if data.get("day") != day:
            data.update(day=day, attempts_today=0, turns_today=0, cost_today_usd=0.0)
            data.update(tokens_today=0, seconds_today=0.0, refused_today=0)
        data["attempts_today"] += 1
        data["turns_today"] += turns
        data["tokens_today"] = data.get("tokens_today", 0) + tokens
        data["seconds_today"] = round(data.get("seconds_today", 0.0) + seconds, 3)
        data["refused_today"] = data.get("refused_today", 0) + refused
        data["cost_today_usd"] = round(data["cost_today_usd"] + (cost_usd or 0.0), 6)
        data.update(last_task=task_label, last_outcome=outcome, last_finished=format_time(now))
        atomic_write(path, json.dumps(data, indent=2, sort_keys=True))


def day_records(agents_cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every configured agent's record (what it did, and spent, on its last day)."""
    return {a["name"]: read_json_object(_state_file(a["name"])) for a in agents_cfg["agents"]}


def pause_until(agent: str, until: datetime, why: str) -> None:
    """Pause ``agent`` until ``until`` (a usage limit's reset): it lifts by itself then,
    or at `octopoid resume --agent`."""
    flag = _limit_flag(agent)
    flag.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(flag, json.dumps({"until": format_time(until), "why": why}))


def limited_until(agent: str, now: datetime | None = None) -> tuple[datetime, str] | None:
    """(until when, why) while ``agent`` waits for a usage limit to reset; else None."""
    data = read_json_object(_limit_flag(agent))
    try:
        until = parse_time(str(data["until"]))
    except (KeyError, ValueError):
        return None
    return (until, str(data.get("why", ""))) if until > (now or utcnow()) else None


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
        if agent is not None:  # a resume also lifts a usage-limit wait
            _limit_flag(agent).unlink(missing_ok=True)
    return pause_state()


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
    """Why this agent cannot run at all (so the scheduler skips it), or None."""
    if agent["backend"] == "claude-code" and claude_code.find_claude(agent) is None:
        return (
            f"'{agent.get('claude_path') or 'claude'}' is not on PATH; {claude_code.INSTALL_HINT}"
        )
    if agent["backend"] == "anthropic" and not roles_base.agent_env(agent).get("ANTHROPIC_API_KEY"):
        return "ANTHROPIC_API_KEY is not set (in the environment or the agent's env)"
    return None


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
        if running:
            state = "running " + ", ".join(running)
        else:
            state = "paused" if is_paused(agents_cfg, agent) or is_paused(agents_cfg) else "idle"
        rows.append(
            {
                "name": agent["name"],
                "role": agent["role"],
                "backend": agent["backend"],
                "sandbox": cfg["sandbox"]["mode"],
                "network": network_of(agent, cfg),
                "refused_today": record.get("refused_today", 0) if fresh else 0,
                "state": state,
                "problem": readiness_problem(agent),
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


def network_of(agent: dict[str, Any], cfg: dict[str, Any]) -> str:
    """What network the agent's box has (netpolicy.py): allow, none, open, or open because
    nothing walls it in."""
    if cfg["sandbox"]["mode"] == "none":
        return "open (no sandbox)"
    return netpolicy.agent_mode(agent, cfg)


def refused_today(now: datetime | None = None) -> int:
    """Destinations the agents' networks refused today, all attempts together."""
    today = (now or utcnow()).date().isoformat()
    records = day_records(config.load_agents()).values()
    return sum(r.get("refused_today", 0) for r in records if r.get("day") == today)


def _cost_today(agent: dict[str, Any], record: dict[str, Any]) -> float | None:
    """Today's cost in USD; None (unknown) for a backend that cannot report one."""
    cost = record.get("cost_today_usd", 0.0)
    return None if not cost and agent["backend"] in COSTLESS_BACKENDS else cost

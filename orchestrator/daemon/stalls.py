"""Why nothing is claimed: one answer for the scheduler and for every face.

The scheduler asks ``system`` before it claims and ``for_agent`` for each agent; `status`,
`agents`, `doctor` and the board show ``report()``, the same answer, so a stall is never
silent. ``unserved`` names tasks that wait where no configured agent will ever take them
(a role no agent has; breakdown/ without a breakdown agent), with the way out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from .. import box as sandbox
from .. import config
from ..model.tasks import TaskState, format_time, plural, utcnow
from ..queue import agent_records, budgets
from ..queue.store import QueueStore, get_store
from ..roles import agent_status

BREAKDOWN_ROLE = "breakdown"  # agents with this role split burned-out tasks


class Stall(NamedTuple):
    """One reason for not claiming: ``code`` for scripts, ``text`` (with the way out) for people."""

    code: str  # config-invalid, paused, sandbox, backpressure, budget, no-agent, cannot-run,
    # usage-limit, breaker, unserved
    text: str


Records = agent_records.AgentRecords  # every agent's record, the system's (day_records)


def system(agents_cfg: dict[str, Any], records: Records, store: QueueStore) -> list[Stall]:
    """Why no agent claims anything now (the configuration is valid: ``config.problem``)."""
    found = []
    if by := agent_records.paused_by(agents_cfg, records):
        found.append(Stall("paused", f"paused ({agent_records.how_to_resume(by)})"))
    walls = sandbox.problem()
    if walls:
        found.append(Stall("sandbox", walls))
    waiting = store.count(TaskState.PROVISIONAL)
    if waiting >= agents_cfg["max_provisional"]:
        found.append(
            Stall(
                "backpressure",
                f"backpressure: {plural(waiting, 'task')} wait for review and max_provisional "
                f"is {agents_cfg['max_provisional']}; accept, reject or close some, or raise "
                "max_provisional in agents.yaml",
            )
        )
    if not agents_cfg["agents"]:
        found.append(Stall("no-agent", "agents.yaml has no agents"))
    spent = budgets.of_project(records, config.load_config(), utcnow())
    if spent is not None and spent.spent():
        found.append(Stall("budget", f"{spent.why()}; raise budgets.project_daily to go on"))
    return found


def for_agent(agent: dict[str, Any], agents_cfg: dict[str, Any], records: Records) -> list[Stall]:
    """Why this one agent claims nothing, whatever the rest of the system does."""
    found = []
    if by := agent_records.paused_by(agents_cfg, records, agent):
        found.append(Stall("paused", f"paused ({agent_records.how_to_resume(by, agent['name'])})"))
    problem = agent_status.readiness_problem(agent)
    if problem:
        found.append(Stall("cannot-run", f"cannot run: {problem}"))
    hold = agent_records.held(agent["name"], records=records)
    if hold is not None:
        found.append(_held(agent["name"], hold))
    spent = budgets.of_agent(agent["name"], records, config.load_config(), utcnow())
    if spent is not None and spent.spent():
        found.append(Stall("budget", f"{spent.why()}; raise budgets.agent_daily to go on"))
    return found


def _held(name: str, hold: agent_records.Hold) -> Stall:
    """octopoid's own pause of an agent, with when it ends and how to end it now."""
    resume = f"`octopoid resume --agent {name}`"
    if hold.kind == agent_records.BREAKER:
        if hold.until is None:
            then = f"fix that, then {resume}"
        else:
            then = f"it tries again at {format_time(hold.until)}, or at {resume}"
        return Stall("breaker", f"paused by the circuit breaker: {hold.why}; {then}")
    until = format_time(hold.until) if hold.until else "?"
    return Stall(
        "usage-limit",
        f"waits for its usage limit to reset at {until} ({hold.why}); {resume} tries again now",
    )


def unserved(
    agents_cfg: dict[str, Any], store: QueueStore, waiting: Mapping[str, int] | None = None
) -> list[Stall]:
    """Tasks waiting where no configured agent takes them, each group with its way out
    (``waiting``: how many wait per role, when the caller has counted them already)."""
    roles = {a["role"] for a in agents_cfg["agents"]}
    found = []
    per_role = store.waiting_digest().roles if waiting is None else waiting
    by_role = {role: n for role, n in per_role.items() if role not in roles}
    for role, count in sorted(by_role.items()):
        found.append(
            Stall(
                "unserved",
                f"{plural(count, 'task')} in incoming wait for role {role!r}, which no agent in "
                f"agents.yaml has; add one, or `octopoid close` them",
            )
        )
    stranded = store.count(TaskState.BREAKDOWN)
    if stranded and BREAKDOWN_ROLE not in roles:
        found.append(
            Stall(
                "unserved",
                f"{plural(stranded, 'task')} in breakdown/ and no agent has role: breakdown; "
                "`octopoid retry` tries them whole again, `octopoid close` ends them, or add "
                "a breakdown agent",
            )
        )
    return found


def report(waiting: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Every face's answer: ``claiming`` (whether any agent may claim now: no system
    reason, and one agent free of its own), the system's reasons, each agent's, and
    unserved tasks; each reason a ``Stall`` dict. ``waiting`` as for ``unserved``."""
    problem = config.problem()
    if problem:
        why = Stall("config-invalid", f"{problem}; nothing is claimed until it is fixed")
        return {"claiming": False, "system": [why._asdict()], "agents": {}, "unserved": []}
    agents_cfg, store = config.load_agents(), get_store()
    records = agent_records.day_records(agents_cfg)
    reasons = system(agents_cfg, records, store)
    agents = {
        a["name"]: [s._asdict() for s in stalls]
        for a in agents_cfg["agents"]
        if (stalls := for_agent(a, agents_cfg, records))
    }
    return {
        "claiming": not reasons and len(agents) < len(agents_cfg["agents"]),
        "system": [s._asdict() for s in reasons],
        "agents": agents,
        "unserved": [s._asdict() for s in unserved(agents_cfg, store, waiting)],
    }


def lines(found: dict[str, Any]) -> list[str]:
    """``report()`` as sentences for the terminal and doctor (empty: nothing stalls)."""
    out = [f"not claiming: {s['text']}" for s in found["system"]]
    for name, stalls in found["agents"].items():
        out += [f"agent {name}: {s['text']}" for s in stalls]
    out += [s["text"] for s in found["unserved"]]
    return out

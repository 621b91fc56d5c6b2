"""A pass's claims: for each agent that may run, tasks claimed up to its room and started.

Why nothing is claimed (the system's stalls, an agent's, an invalid configuration) is
logged when it starts, changes or ends, never every pass (``daemon/stalls.py`` says what
they are; every face shows the same).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from ..model.tasks import Task, TaskState
from ..queue import machine as queue_utils
from . import stalls

log = logging.getLogger("octopoid.scheduler")

#: Starts a claimed task's runner for an agent; False when it could not (claim given back).
Start = Callable[[Task, dict], bool]


class Dispatch:
    """What one scheduler claims, and the stalls it last said."""

    def __init__(self) -> None:
        self._warned: dict[str, str] = {}  # the stall last logged, by whom it stalls
        self._config_problem: str | None = None

    def note_config(self, problem: str | None) -> None:
        """An invalid configuration stops claims: said once, and once when it is fixed."""
        if problem != self._config_problem:
            if problem:
                log.error("%s; claiming nothing until it is fixed", problem)
            else:
                log.info("configuration is valid again; claiming resumes")
        self._config_problem = problem

    def blocked_reason(self, agents_cfg: dict, records: stalls.Records) -> str:
        """Why nothing is claimed this pass (``stalls.system``), logged when it changes."""
        store = queue_utils.get_store()
        return self._say_once("not claiming", stalls.system(agents_cfg, records, store))

    def claim(
        self, agents_cfg: dict, records: stalls.Records, start: Start, now: datetime | None
    ) -> list[tuple[str, str]]:
        """Claim and ``start`` work for every agent with room; (task, agent) of each start."""
        started = []
        claimed = queue_utils.get_store().list(TaskState.CLAIMED)
        room = agents_cfg["max_claimed"] - len(claimed)
        for agent in agents_cfg["agents"]:
            if self._cannot_claim(agent, agents_cfg, records):
                continue
            busy = sum(1 for t in claimed if t.headers.get("CLAIMED_BY") == agent["name"])
            while room > 0 and busy < agent["max_concurrent"]:
                task = _claim_for(agent, agents_cfg["lease_seconds"], now)
                if task is None:
                    break
                if start(task, agent):
                    started.append((task.label, agent["name"]))
                room, busy = room - 1, busy + 1
        return started

    def _cannot_claim(self, agent: dict, agents_cfg: dict, records: stalls.Records) -> bool:
        """An agent paused or unable to run (no claude binary, no API key) is skipped; its
        reasons are logged when they change (``stalls.for_agent``)."""
        found = stalls.for_agent(agent, agents_cfg, records)
        return bool(self._say_once(f"agent {agent['name']}", found))

    def _say_once(self, who: str, found: list[stalls.Stall]) -> str:
        """The stalls in one line, logged when they start or change, and once when they end:
        never every pass."""
        problem = "; ".join(stall.text for stall in found)
        if problem != self._warned.get(who, ""):
            if problem:
                log.warning("%s: %s", who, problem)
            else:
                log.info("%s: no longer; claiming resumes", who)
        self._warned[who] = problem
        return problem


def _claim_for(agent: dict, lease_seconds: int, now: datetime | None) -> Task | None:
    """Breakdown agents take burned-out tasks from breakdown/; others, their role's."""
    breakdown = agent["role"] == stalls.BREAKDOWN_ROLE
    return queue_utils.claim_task(
        None if breakdown else agent["role"],
        agent["name"],
        source=TaskState.BREAKDOWN if breakdown else TaskState.INCOMING,
        lease_seconds=lease_seconds,
        now=now,
    )

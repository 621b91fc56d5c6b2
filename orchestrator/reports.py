"""Read-only reports over the queue: counts, running claims, usage (for `octopoid status`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import agent_status, config
from .dependencies import blocked_summary
from .queue_utils import get_store
from .tasks import Task, TaskState, utcnow

S = TaskState


def task_usage(task: Task) -> tuple[int, float]:
    """(turns, USD) a task has used across all its attempts."""
    return int(task.headers.get("TURNS_TOTAL") or 0), float(task.headers.get("COST_USD_TOTAL") or 0)


def status_summary(now: datetime | None = None) -> dict[str, Any]:
    """Counts per queue, claimed tasks with agent and lease, the oldest task that can run,
    blocked and stuck tasks, what is paused, and whether the configuration is usable."""
    now = now or utcnow()
    store = get_store()
    tasks = {state: store.list(state) for state in TaskState if state is not S.QUARANTINE}
    blocked = blocked_summary(tasks[S.INCOMING])
    problem = config.problem()
    claimed = []
    for task in tasks[S.CLAIMED]:
        lease = task.lease_expires
        claimed.append(
            {
                "id": task.label,
                "agent": task.headers.get("CLAIMED_BY", "?"),
                "claimed_at": task.headers.get("CLAIMED_AT"),
                "lease_seconds_left": int((lease - now).total_seconds()) if lease else None,
            }
        )
    ready = [t for t in tasks[S.INCOMING] if t.label not in blocked["waiting"]]
    oldest = min(ready, key=lambda t: t.created or now, default=None)
    usage = [(t, *task_usage(t)) for listed in tasks.values() for t in listed]
    spent = [u for u in usage if u[1] or u[2]]
    return {
        "config_problem": problem,
        "paused": None if problem else agent_status.pause_state(),
        "blocked": blocked,
        "usage": {
            "turns": sum(turns for _, turns, _ in spent),
            "cost_usd": round(sum(cost for _, _, cost in spent), 4),
            "tasks": [
                {"id": t.label, "state": t.state.value, "turns": turns, "cost_usd": cost}
                for t, turns, cost in sorted(spent, key=lambda u: -u[2])[:10]
            ],
        },
        "counts": {state.value: store.count(state) for state in TaskState},
        "claimed": claimed,
        "oldest_incoming": None
        if oldest is None
        else {
            "id": oldest.label,
            "created": oldest.headers.get("CREATED"),
            "age_seconds": int((now - (oldest.created or now)).total_seconds()),
        },
    }

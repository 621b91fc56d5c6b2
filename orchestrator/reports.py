"""Read-only reports over the queue: counts, running claims, usage (for `octopoid status`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import agent_status, config, sandbox, stalls
from .dependencies import blocked_summary
from .queue_utils import get_store
from .store.claim_index import Waiting
from .tasks import Task, TaskState, parse_time, task_label, utcnow

S = TaskState


def task_usage(task: Task) -> tuple[int, float]:
    """(turns, USD) a task has used across all its attempts."""
    return int(task.headers.get("TURNS_TOTAL") or 0), float(task.headers.get("COST_USD_TOTAL") or 0)


def status_summary(
    now: datetime | None = None, waiting: list[Waiting] | None = None
) -> dict[str, Any]:
    """Counts per queue, claimed tasks with agent and lease, the oldest task that can run,
    blocked and stuck tasks, what is paused, whether the configuration is usable, the
    sandbox (whether agents can start, and whether they are trusted), and why nothing is
    claimed (``stalls.report``).

    Only claimed tasks are parsed: waiting tasks come from the claim index, usage from the
    ledger, counts from the folders' listings, so the cost does not grow with done/.
    ``waiting``: the claim index's rows when the caller has read them already.
    """
    now = now or utcnow()
    store = get_store()
    waiting = store.waiting() if waiting is None else waiting
    blocked = blocked_summary(waiting)
    problem = config.problem()
    claimed = []
    for task in store.list(S.CLAIMED):
        lease = task.lease_expires
        claimed.append(
            {
                "id": task.label,
                "agent": task.headers.get("CLAIMED_BY", "?"),
                "claimed_at": task.headers.get("CLAIMED_AT"),
                "lease_seconds_left": int((lease - now).total_seconds()) if lease else None,
            }
        )
    ready = [w for w in waiting if task_label(w.id) not in blocked["waiting"] and w.created]
    oldest = min(ready, key=lambda w: w.created, default=None)
    turns, cost, most = store.usage()
    return {
        "config_problem": problem,
        "stalls": stalls.report(),
        "sandbox": None if problem else sandbox.describe(),
        "paused": None if problem else agent_status.pause_state(),
        "blocked": blocked,
        "usage": {
            "turns": turns,
            "cost_usd": round(cost, 4),
            "tasks": [
                {"id": task_label(tid), "state": state, "turns": t, "cost_usd": c}
                for tid, state, t, c in most
            ],
        },
        "counts": {state.value: store.count(state) for state in TaskState},
        "claimed": claimed,
        "oldest_incoming": None
        if oldest is None
        else {
            "id": task_label(oldest.id),
            "created": oldest.created,
            "age_seconds": int((now - parse_time(oldest.created)).total_seconds()),
        },
    }

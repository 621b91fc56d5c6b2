"""Reports over the queue: counts, running claims, usage (for `octopoid status`), and which
reviews no longer merge. They move nothing; the merge checks are cached in the store."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from .. import config
from ..base import netmodes
from ..base.lazy import lazy_import
from ..model.exceptions import ConfigError, OctopoidError
from ..model.tasks import Task, TaskId, TaskState, format_time, parse_time, task_label, utcnow
from ..queue import bounces
from ..queue.dependencies import blockage_of, blocked_summary
from ..queue.leases import attempt_text
from ..queue.store import get_store, known_task_id, list_tasks
from ..queue.store.queries import Waiting, WaitingDigest

# `status` uses these; `list` and `show`, which use this module too, need none of them.
agent_records = lazy_import("orchestrator.queue.agent_records")
agent_status = lazy_import("orchestrator.roles.agent_status")
mergeable = lazy_import("orchestrator.review.mergeable")
questions = lazy_import("orchestrator.queue.questions")
sandbox = lazy_import("orchestrator.box")
stalls = lazy_import("orchestrator.daemon.stalls")
# Only `task_details` (show) and `notes_details` use these.
diffs = lazy_import("orchestrator.review.diffs")
task_notes = lazy_import("orchestrator.queue.task_notes")

S = TaskState


def task_usage(task: Task) -> tuple[int, float]:
    """(turns, USD) a task has used across all its attempts."""
    return int(task.headers.get("TURNS_TOTAL") or 0), float(task.headers.get("COST_USD_TOTAL") or 0)


def attempt_of(task: Task) -> str:
    """The task's attempt against the budget, as `show` and the task page say it
    (``leases.attempt_text``); only the number while the configuration cannot be read."""
    try:
        max_attempts = int(config.load_agents()["max_attempts"])
    except ConfigError:
        max_attempts = None
    return attempt_text(task, max_attempts)


def notes_details(task_id: str) -> dict[str, Any]:
    """`notes --json` (and the MCP server's ``notes``): the task's retry notes (None when it
    has none yet) and where they are kept; ``TaskNotFound`` when it has none and no queue
    holds it, as `notes` says."""
    task_id = TaskId(task_id)
    text = task_notes.get_task_notes(task_id)
    if text is None:
        known_task_id(task_id)
    return {"id": task_label(task_id), "notes": text, "path": task_notes.notes_location(task_id)}


def task_details(task: Task) -> dict[str, Any]:
    """`show --json`: the task's row, its branch head (None without a repository), headers,
    how many attempts and reviews its notes hold, its usage and its History. One function
    for every face that shows a task, so they cannot drift apart."""
    head = None
    with contextlib.suppress(OctopoidError):  # no repository: no branch to name
        head = diffs.head_of(task)
    summary = task_notes.notes_summary(task.id)
    turns, cost = task_usage(task)
    blockage = blockage_of(task)
    return {
        "id": task.label,
        "title": task.title,
        "state": task.state.value if task.state else None,
        "role": task.role,
        "priority": task.priority,
        "attempts": task.attempts,
        "created": task.headers.get("CREATED"),
        "claimed_by": task.headers.get("CLAIMED_BY"),
        "blocked_by": [label for label, _ in blockage.waiting_on] if blockage else [],
        "stuck": blockage.stuck if blockage else None,
        "pull_request": task.headers.get("PR_URL"),
        "issue": task.headers.get("ISSUE_URL"),
        "head": head,
        "headers": dict(task.headers),
        "notes": {"attempts": summary["attempts"], "reviews": summary["reviews"]},
        "usage": {"turns": turns, "cost_usd": round(cost, 4)},
        "history": task.history,
    }


def pull_request_link(task: Task) -> tuple[str, str] | None:
    """(number, URL) of the task's pull request, when its URL is one a page may link to: a
    forge's answer is not trusted to be http(s) (a ``javascript:`` URL would run)."""
    number, url = task.headers.get("PR_NUMBER", ""), task.headers.get("PR_URL", "")
    return (number, url) if number and url.startswith(("https://", "http://")) else None


def status_summary(
    now: datetime | None = None, waiting: list[Waiting] | None = None
) -> dict[str, Any]:
    """Counts per queue, claimed tasks with agent and lease, the oldest task that can run,
    blocked and stuck tasks, what is paused, whether the configuration is usable, the
    sandbox (whether agents can start, and whether they are trusted), why nothing is
    claimed (``stalls.report``), reviews whose branch no longer merges, and tasks in
    flight that keep coming back with the same refusal (``bounces``).

    Only tasks in flight are parsed (claimed, and those in review for their merge check):
    waiting tasks come from the claim index, usage from the ledger, counts from the
    folders' listings, so the cost does not grow with done/.
    ``waiting``: the claim index's rows when the caller has read them already.
    """
    now = now or utcnow()
    store = get_store()
    digest = store.waiting_digest() if waiting is None else WaitingDigest.of(waiting)
    blocked = blocked_summary(digest.with_blockers)
    problem = config.problem()
    claimed, running = [], store.list(S.CLAIMED)
    for task in running:
        lease = task.lease_expires
        claimed.append(
            {
                "id": task.label,
                "agent": task.headers.get("CLAIMED_BY", "?"),
                "host": task.headers.get("HOST"),
                "claimed_at": task.headers.get("CLAIMED_AT"),
                "lease_seconds_left": int((lease - now).total_seconds()) if lease else None,
            }
        )
    freed = [w for w in digest.with_blockers if task_label(w.id) not in blocked["waiting"]]
    ready = [w for w in [digest.oldest_free, *freed] if w is not None and w.created]
    oldest = min(ready, key=lambda w: w.created, default=None)
    turns, cost, most = store.usage()
    in_review = store.list(S.PROVISIONAL)
    looping = [bounces.bouncing(t) for t in [*in_review, *running]]
    unmergeable = mergeable.unmergeable(in_review) if in_review else {}  # none: no git loaded
    return {
        "bouncing": [found for found in looping if found is not None],
        "unmergeable": [why.as_json(id) for id, why in unmergeable.items()],
        "pull_requests": [
            {"id": t.label, "number": t.headers["PR_NUMBER"], "url": t.headers.get("PR_URL")}
            for t in in_review
            if "PR_NUMBER" in t.headers
        ],
        "questions": questions.open_questions(),
        "config_problem": problem,
        "stalls": stalls.report(digest.roles),
        "sandbox": None if problem else sandbox.describe(),
        "paused": None if problem else agent_records.pause_state(),
        "refused_today": 0 if problem else agent_records.refused_today(now),
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
    claimed = list_tasks(TaskState.CLAIMED)
    found = found or stalls.report()
    system = [s["text"] for s in found["system"]]
    records = agent_records.day_records(agents_cfg)
    rows = []
    for agent in agents_cfg["agents"]:
        running = [t.label for t in claimed if t.headers.get("CLAIMED_BY") == agent["name"]]
        record = records[agent["name"]]
        fresh = record.get("day") == today
        hold = agent_records.held(agent["name"], records=records)
        breaker = hold if hold is not None and hold.kind == agent_records.BREAKER else None
        pauses = (agent_records.paused_by(agents_cfg, records, one) for one in (agent, None))
        paused = breaker is not None or any(p is not None for p in pauses)
        state = "running " + ", ".join(running) if running else "paused" if paused else "idle"
        rows.append(
            {
                "name": agent["name"],
                "role": agent["role"],
                "backend": agent["backend"],
                "sandbox": cfg["sandbox"]["mode"],
                "network": "open (no sandbox)"
                if cfg["sandbox"]["mode"] == "none"
                else netmodes.agent_mode(agent, cfg),
                "refused_today": record.get("refused_today", 0) if fresh else 0,
                "state": state,
                "problem": agent_status.readiness_problem(agent),
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


def _shown(hold: agent_records.Hold) -> dict[str, str | None]:
    until = None if hold.until is None else format_time(hold.until)
    return {"why": hold.why, "since": hold.since, "until": until}


def _cost_today(agent: dict[str, Any], record: dict[str, Any]) -> float | None:
    """Today's cost in USD; None (unknown) for a backend that cannot report one."""
    cost = record.get("cost_today_usd", 0.0)
    return None if not cost and agent["backend"] in agent_status.COSTLESS_BACKENDS else cost

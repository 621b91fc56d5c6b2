"""The task state machine over the queue store (octopoid's seed API names live here).

Each public function is one legal transition: it checks the task is where the move may
start, rewrites the header, appends a History line and moves the file with one durable
rename. Illegal moves raise ``IllegalTransition``. This module knows nothing of git,
agents or memory; it only keeps retry notes in step, as the notes plan says.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import config, defaults
from .exceptions import IllegalTransition, LostRace, TaskNotFound
from .leases import LEASE_HEADERS, attempts_left, dead_since, ever_started, lease_headers
from .redaction import redact
from .store import FolderStore, QueueStore
from .task_notes import (
    add_review_notes,
    append_attempt,
    cleanup_task_notes,
    get_task_notes,
    salvage_output_log,
)
from .tasks import (
    ID_RE,
    Task,
    TaskState,
    format_time,
    new_task,
    normalize_task_id,
    one_line,
    task_label,
    utcnow,
)

S = TaskState
REJECT_REASONS = ("invalid", "duplicate", "already_implemented", "out_of_scope", "other")

__all__ = [
    "accept_completion",
    "attempts_left",
    "claim_task",
    "cleanup_task_notes",
    "complete_task",
    "create_task",
    "fail_task",
    "get_task",
    "get_task_notes",
    "list_tasks",
    "quarantine_file",
    "reap_expired_claims",
    "recycle_to_breakdown",
    "reject_completion",
    "reject_task",
    "renew_lease",
    "requeue_task",
    "retry_task",
    "save_task_notes",
    "submit_completion",
]


@lru_cache(maxsize=8)
def _store_for(queue_dir: str) -> FolderStore:
    store = FolderStore(Path(queue_dir))
    store.initialize()
    return store


def get_store() -> QueueStore:
    """The store for the current project (looked up at call time, cached per folder)."""
    return _store_for(str(config.get_queue_dir()))


def _id(task: Task | str) -> str:
    return task.id if isinstance(task, Task) else normalize_task_id(task)


def _transition(
    task: Task | str,
    allowed: Iterable[TaskState],
    dst: TaskState,
    actor: str | None,
    reason: str = "",
    now: datetime | None = None,
    set_headers: dict[str, Any] | None = None,
    drop_headers: Iterable[str] = (),
    edit: Callable[[Task], None] | None = None,
) -> Task:
    """Move a task from one of ``allowed`` states to ``dst``; the one path every move takes.

    ``actor`` None means the agent holding the claim. ``edit`` sees the task as read under
    the lock, for changes that depend on its current headers.
    """
    task_id, now = _id(task), now or utcnow()
    store = get_store()
    src = store.locate(task_id)
    if src is None:
        raise TaskNotFound(f"no task {task_label(task_id)} in any queue")
    allowed = tuple(allowed)
    if src not in allowed:
        wanted = " or ".join(s.value for s in allowed)
        raise IllegalTransition(
            f"{task_label(task_id)} is in {src.value}, not {wanted}; cannot move it to {dst.value}"
        )

    def change(t: Task) -> None:
        who = actor or t.headers.get("CLAIMED_BY") or "agent"
        if edit is not None:
            edit(t)
        t.drop_header(*drop_headers)
        for key, value in (set_headers or {}).items():
            t.set_header(key, value)
        t.add_history(now, src.value, dst.value, who, reason)

    try:
        moved = store.move(task_id, src, dst, change)
    except LostRace:
        raise IllegalTransition(f"{task_label(task_id)} was moved by another process") from None
    assert moved is not None  # no guard given
    return moved


def create_task(title: str, **fields: Any) -> Task:
    """Enqueue a new task in incoming with the next sequential id.

    ``fields`` are those of ``tasks.new_task``: role, priority, branch, context, criteria,
    blocked_by, created_by, now.
    """
    store = get_store()
    return store.add(new_task(store.allocate_id(), title, **fields), S.INCOMING)


def list_tasks(queue: TaskState | str) -> list[Task]:
    """Every readable task in ``queue``, in claim order."""
    try:
        state = TaskState(queue)
    except ValueError:
        names = ", ".join(s.value for s in TaskState)
        raise IllegalTransition(f"unknown queue {queue!r}; queues are: {names}") from None
    return get_store().list(state)


def get_task(task_id: str) -> Task:
    return get_store().get(normalize_task_id(task_id))


def claim_task(
    role_filter: str | None = None,
    agent_name: str = "agent",
    *,
    lease_seconds: int | None = None,
    pid: int | None = None,
    now: datetime | None = None,
) -> Task | None:
    """Claim the next eligible incoming task for ``agent_name``, with a lease; None if none."""
    now = now or utcnow()
    seconds = lease_seconds or config.load_agents()["lease_seconds"]

    def change(t: Task) -> None:
        t.set_header("ATTEMPTS", t.attempts + 1)
        for key, value in lease_headers(agent_name, pid or os.getpid(), now, seconds).items():
            t.set_header(key, value)
        t.drop_header("NOT_BEFORE")
        t.add_history(now, S.INCOMING.value, S.CLAIMED.value, agent_name, f"attempt {t.attempts}")

    return get_store().claim(role_filter, change, now)


def renew_lease(
    task: Task | str,
    lease_seconds: int | None = None,
    now: datetime | None = None,
    pid: int | None = None,
) -> Task:
    """Push a claimed task's lease forward; ``IllegalTransition`` if it is no longer claimed.

    ``pid`` hands the lease to another process (the runner taking over from the scheduler)
    and records when the attempt really started.
    """
    now = now or utcnow()
    seconds = lease_seconds or config.load_agents()["lease_seconds"]
    expires = format_time(now + timedelta(seconds=seconds))

    def change(t: Task) -> None:
        t.set_header("LEASE_EXPIRES", expires)
        if pid is not None:
            t.set_header("PID", pid)
            t.set_header("STARTED_AT", format_time(now))

    try:
        return get_store().update(_id(task), S.CLAIMED, change)
    except LostRace:
        raise IllegalTransition(f"{task_label(_id(task))} is no longer claimed") from None


def record_usage(task: Task | str, turns: int, cost_usd: float | None) -> Task:
    """Add an attempt's turns and cost to the claimed task's running totals."""

    def add(t: Task) -> None:
        t.set_header("TURNS_TOTAL", int(t.headers.get("TURNS_TOTAL") or 0) + turns)
        if cost_usd is not None:
            total = float(t.headers.get("COST_USD_TOTAL") or 0) + cost_usd
            t.set_header("COST_USD_TOTAL", f"{total:.4f}")

    try:
        return get_store().update(_id(task), S.CLAIMED, add)
    except LostRace:
        raise IllegalTransition(f"{task_label(_id(task))} is no longer claimed") from None


def submit_completion(
    task: Task | str,
    commits: int,
    turns: int,
    now: datetime | None = None,
    cost_usd: float | None = None,
) -> Task:
    """claimed -> provisional: the attempt produced work for review."""
    now = now or utcnow()
    cost = f", ${cost_usd:.2f}" if cost_usd is not None else ""
    return _transition(
        task,
        [S.CLAIMED],
        S.PROVISIONAL,
        None,
        f"{commits} commits, {turns} turns{cost}",
        now,
        {"COMMITS": commits, "TURNS": turns, "SUBMITTED_AT": format_time(now)},
        LEASE_HEADERS,
    )


def accept_completion(
    task: Task | str, accepted_by: str = "human", now: datetime | None = None
) -> Task:
    """provisional -> done; the retry notes are deleted."""
    return _finish(task, S.PROVISIONAL, accepted_by, "accepted", now, {"ACCEPTED_BY": accepted_by})


def _finish(
    task: Task | str,
    src: TaskState,
    actor: str | None,
    reason: str,
    now: datetime | None,
    headers: dict[str, Any] | None = None,
) -> Task:
    """Move to done and delete the retry notes: every path to done goes through here."""
    now = now or utcnow()
    headers = {**(headers or {}), "COMPLETED_AT": format_time(now)}
    done = _transition(task, [src], S.DONE, actor, reason, now, headers, LEASE_HEADERS)
    cleanup_task_notes(done.id)
    return done


def reject_completion(
    task: Task | str, reason: str, rejected_by: str = "human", now: datetime | None = None
) -> Task:
    """provisional -> incoming; the reason goes into the retry notes for the next attempt."""
    if not reason.strip():
        raise IllegalTransition("a rejection needs a reason: the next attempt reads it")
    now = now or utcnow()
    moved = _transition(
        task, [S.PROVISIONAL], S.INCOMING, rejected_by, reason, now, drop_headers=("SUBMITTED_AT",)
    )
    add_review_notes(moved.id, reason, rejected_by, now)
    return moved


def complete_task(task: Task | str, result: str = "", now: datetime | None = None) -> Task:
    """claimed -> done directly (no review); the retry notes are deleted."""
    return _finish(task, S.CLAIMED, None, result or "completed", now)


def fail_task(task: Task | str, error: str, now: datetime | None = None) -> Task:
    """-> failed, with the error kept (one line, capped) in the ERROR header."""
    error = one_line(redact(error), defaults.MAX_ERROR_CHARS) or "unknown error"
    return _transition(
        task,
        [S.INCOMING, S.CLAIMED, S.PROVISIONAL],
        S.FAILED,
        None,
        error,
        now,
        {"ERROR": error},
        LEASE_HEADERS,
    )


def reject_task(
    task: Task | str, reason: str, details: str = "", now: datetime | None = None
) -> Task:
    """claimed -> rejected: the agent says the task is invalid, a duplicate, already done..."""
    if reason not in REJECT_REASONS:
        raise IllegalTransition(f"reject reason must be one of {', '.join(REJECT_REASONS)}")
    details = redact(details)
    why = f"{reason}: {details}" if details else reason
    return _transition(
        task,
        [S.CLAIMED],
        S.REJECTED,
        None,
        why,
        now,
        {"REJECT_REASON": reason, "REJECT_DETAILS": one_line(details, 500)},
        LEASE_HEADERS,
    )


def retry_task(task: Task | str, actor: str = "human", now: datetime | None = None) -> Task:
    """failed/rejected -> incoming with a fresh set of attempts; notes are kept."""
    return _transition(
        task,
        [S.FAILED, S.REJECTED],
        S.INCOMING,
        actor,
        "retry",
        now,
        drop_headers=("ERROR", "REJECT_REASON", "REJECT_DETAILS", "INTERRUPTED"),
        edit=lambda t: t.set_header("ATTEMPTS_AT_RETRY", t.attempts),
    )


def requeue_task(
    task: Task | str,
    reason: str = "requeued",
    actor: str = "human",
    now: datetime | None = None,
    *,
    counted: bool = True,
    set_headers: dict[str, Any] | None = None,
) -> Task:
    """claimed -> incoming after a lost attempt; notes are kept.

    ``counted=False`` (shutdown, rate limit) gives the attempt back: it is recorded in
    ``INTERRUPTED`` and does not count against ``max_attempts``.
    """

    def give_back(t: Task) -> None:
        if not counted:
            t.set_header("INTERRUPTED", int(t.headers.get("INTERRUPTED") or 0) + 1)

    return _transition(
        task, [S.CLAIMED], S.INCOMING, actor, reason, now, set_headers, LEASE_HEADERS, give_back
    )


def recycle_to_breakdown(task: Task | str, reason: str, now: datetime | None = None) -> Task:
    """claimed -> breakdown: burned out, to be split by a breakdown role; notes are kept."""
    return _transition(
        task, [S.CLAIMED], S.BREAKDOWN, None, reason, now, drop_headers=LEASE_HEADERS
    )


def reap_expired_claims(
    now: datetime | None = None, max_attempts: int | None = None
) -> list[tuple[Task, TaskState]]:
    """Return claims whose lease expired and whose process is gone to incoming (or failed)."""
    now = now or utcnow()
    lease_seconds = config.load_agents()["lease_seconds"]
    reaped = []
    for task in get_store().list(S.CLAIMED):
        expires = dead_since(task, now, lease_seconds)
        if expires is None:
            continue
        who = task.headers.get("CLAIMED_BY", "?")
        recovered = recover_dead_claim(
            task, f"lease expired at {format_time(expires)} ({who} gone)", max_attempts, now
        )
        if recovered is not None:
            reaped.append((recovered, recovered.state))
    get_store().sweep(now)
    _clean_notes_of_finished_tasks()
    return reaped


def _clean_notes_of_finished_tasks() -> None:
    """Retry notes of done tasks: left only if a crash came between the move and the cleanup."""
    store = get_store()
    for path in config.get_notes_dir().glob("TASK-*.md"):
        task_id = path.name[len("TASK-") : -len(".md")]
        if ID_RE.fullmatch(task_id) and store.locate(task_id) is S.DONE:
            cleanup_task_notes(task_id)


def recover_dead_claim(
    task: Task, why: str, max_attempts: int | None = None, now: datetime | None = None
) -> Task | None:
    """A claim whose runner died: save what it printed as notes, then requeue or fail it.

    A claim no runner ever took over (the scheduler died between claiming and starting
    one) ran nothing: it goes back with its attempt uncounted. Returns None when the task
    finished or moved meanwhile.
    """
    if not ever_started(task):
        try:
            return requeue_task(
                task,
                f"{why}; no runner ever started, the attempt is undone",
                "reaper",
                now,
                set_headers={"ATTEMPTS": max(0, task.attempts - 1)},
            )
        except (IllegalTransition, TaskNotFound):
            return None
    max_attempts = max_attempts or config.load_agents()["max_attempts"]
    archive = config.get_logs_dir() / task.label / f"attempt-{task.attempts}.log"
    salvage_output_log(
        task.id,
        task.headers.get("CLAIMED_BY", "agent"),
        task.attempts,
        f"the runner died: {why}",
        archive,
    )
    try:
        if attempts_left(task, max_attempts) > 0:
            return requeue_task(task, why, "reaper", now)
        return fail_task(task, f"attempts exhausted; {why}", now)
    except (IllegalTransition, TaskNotFound):
        return None


def quarantine_file(path: Path, reason: str) -> Path:
    """Move an unreadable file to quarantine/ with ``<name>.error`` beside it."""
    return get_store().quarantine(path, reason)


def save_task_notes(
    task_id: str,
    agent_name: str,
    stdout: str,
    commits: int,
    turns: int,
    **extra: Any,
) -> None:
    """Append an attempt to the task's retry notes, numbered by its ``ATTEMPTS`` header."""
    if "attempt" not in extra:
        try:
            extra["attempt"] = get_task(task_id).attempts or None
        except TaskNotFound:
            extra["attempt"] = None
    append_attempt(task_id, agent_name, stdout, commits, turns, **extra)

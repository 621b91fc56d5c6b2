"""A person steering a running attempt: messages to it (``octopoid say``) and a stop.

What is said to a task is the store's record ``steering/TASK-<id>``, so the runner that
reads it may be on another machine (PostgreSQL) and a later attempt finds what the last
one never took. The record holds the messages not yet delivered (``waiting``), the number
the next one gets, and a stop asked of one attempt::

    {"next": 3, "waiting": [{"n": 2, "by": "human", "at": "...", "text": "..."}],
     "stop": {"attempt": 4, "by": "human", "at": "...", "reason": "..."}}

How a message is delivered, and what a stop does, is docs/steering.md.
"""

from __future__ import annotations

import time
from typing import Any

from ..base.redaction import scrub
from ..model.exceptions import IllegalTransition, InvalidInput
from ..model.tasks import Task, TaskState, format_time, one_line, refuse_planning, utcnow
from . import adopt, task_notes
from . import machine as queue_utils

FAMILY = "steering"
MAX_MESSAGE_CHARS = 4000  # as one review comment: a message reaches a prompt
MAX_WAITING = 50  # messages no attempt took yet: every one reaches the next prompt
MAX_REASON_CHARS = 1000


def read(task_id: str) -> dict[str, Any]:
    """The task's steering record ({} for none)."""
    return adopt.task_record(FAMILY, task_id)


def _text(text: str, what: str, limit: int) -> str:
    """``text`` as octopoid keeps it (control characters out, secrets redacted), not blank
    and at most ``limit`` characters, else ``InvalidInput``."""
    if not isinstance(text, str) or len(text) > 4 * limit:
        raise InvalidInput(f"{what} is at most {limit} characters")
    text = scrub(text).strip()
    if not text:
        raise InvalidInput(f"{what} needs words")
    if len(text) > limit:
        raise InvalidInput(f"{what} is at most {limit} characters (it has {len(text)})")
    return text


def say(task_id: str, text: str, by: str = "human") -> dict[str, Any]:
    """Leave a message for the task's running attempt (or its next one); into the notes.
    What the message is, and ``running``: whether an attempt runs now. ``TaskNotFound``
    (exit 3) for an unknown task, ``IllegalTransition`` for a finished one."""
    task = queue_utils.get_task(task_id)
    if task.state is TaskState.DONE:
        raise IllegalTransition(f"{task.label} is done: no attempt will read a message")
    text = _text(text, "a message", MAX_MESSAGE_CHARS)
    by = one_line(scrub(by, False), 80) or "human"
    message = {"by": by, "at": format_time(utcnow()), "text": text}

    def add(found: dict[str, Any] | None) -> dict[str, Any]:
        found = found or {}
        waiting = found.get("waiting") or []
        if len(waiting) >= MAX_WAITING:
            raise InvalidInput(
                f"{task.label} has {len(waiting)} messages no attempt has read yet; "
                "wait for its next attempt"
            )
        message["n"] = int(found.get("next") or 1)
        return {**found, "next": message["n"] + 1, "waiting": [*waiting, message]}

    adopt.store().records.update(adopt.task_key(FAMILY, task.id), add)
    task_notes.add_notes_section(task.id, f"Message — {by} ({message['at']})", text)
    return {**message, "task": task.label, "running": task.state is TaskState.CLAIMED}


def take(task_id: str) -> list[dict[str, Any]]:
    """The messages no attempt has taken yet, oldest first, now delivered to the caller's
    (the running attempt's backend, or the next prompt); one read when there are none."""
    taken: list[dict[str, Any]] = []

    def empty(found: dict[str, Any] | None) -> dict[str, Any] | None:
        taken[:] = (found or {}).get("waiting") or []
        return {**found, "waiting": []} if taken and found else found

    adopt.store().records.update(adopt.task_key(FAMILY, task_id), empty)
    return taken


def as_turn(messages: list[dict[str, Any]]) -> str:
    """Messages as the agent reads them in its session (a user turn, an inbox)."""
    return "\n\n".join(
        f"Message from {m['by']} ({m['at']}), steering this attempt:\n{m['text']}" for m in messages
    )


def ask_stop(task_id: str, reason: str, by: str = "human") -> dict[str, Any]:
    """Ask the runner of the task's running attempt to end it (on whichever machine):
    the stop, as kept. ``IllegalTransition`` when no attempt runs."""
    task = queue_utils.get_task(task_id)
    if task.state is not TaskState.CLAIMED:
        raise IllegalTransition(f"{task.label} is in {task.state.value}: no attempt is running")
    refuse_planning(task, "stopped")  # a planner runs in `octopoid plan`'s own terminal
    stop = {
        "attempt": task.attempts,
        "by": one_line(scrub(by, False), 80) or "human",
        "at": format_time(utcnow()),
        "reason": _text(reason, "a stop's reason", MAX_REASON_CHARS),
    }
    adopt.store().records.update(
        adopt.task_key(FAMILY, task.id), lambda found: {**(found or {}), "stop": stop}
    )
    return {**stop, "task": task.label}


def stop_asked(task_id: str, attempt: int) -> dict[str, Any] | None:
    """The stop asked of this attempt, or None (a stop of an earlier attempt is not)."""
    stop = read(task_id).get("stop")
    return stop if isinstance(stop, dict) and stop.get("attempt") == attempt else None


def wait_stopped(task_id: str, attempt: int, seconds: float) -> Task | None:
    """The task once the runner of ``attempt`` gave it back (or it moved on otherwise)
    within ``seconds``; None if that attempt still runs."""
    deadline = time.monotonic() + seconds
    while True:
        task = queue_utils.get_task(task_id)
        if task.state is not TaskState.CLAIMED or task.attempts != attempt:
            return task
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)

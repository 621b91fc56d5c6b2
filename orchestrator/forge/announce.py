"""What a reviewer on the forge hears from octopoid, where they look: the pull request (an
attempt that reached review or failed, work that could not go on a person's push,
approvals of an earlier head: docs/forge.md, "What a reviewer sees on the forge").

Each comment carries a marker (``text.marker``) and is posted only if the pull request
holds none with it; what was said is recorded in ``FORGE_SEEN`` (``seen``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..git import branches, core
from ..memory import lifecycle
from ..model.exceptions import ForgeError, ForgeUnavailable, GitError
from ..model.tasks import TIP_HEADER, Task, TaskState, utcnow
from ..queue import machine as queue_utils
from . import Forge, Review, text
from .seen import Seen

log = logging.getLogger("octopoid.forge")
MAX_SUBJECTS = 10  # of an attempt's commits, in its comment


def description(task: Task, web_url: str | None) -> str:
    """The pull request's description as it should read now: the attempt in review, and
    the learnings its merge would keep."""
    learnings = lifecycle.learning_rows(lifecycle.pending_learnings(task))
    return text.pull_request_body(task, web_url, learnings)


def attempt(forge: Forge, task: Task, number: int, web_url: str | None) -> str | None:
    """Tell pull request ``number`` of the task's attempt (in review, or failed) if it has
    not heard of it; what was done, or None."""
    seen, state = Seen.of(task), task.state
    assert state is not None
    if seen.told is not None and task.attempts <= seen.told:
        return None
    told = seen.told is not None  # None: opened before octopoid told attempts; it starts now
    if told:
        _refused_is_said(task, forge.describe, number, description(task, web_url))
        reached = state is TaskState.PROVISIONAL
        if reached:
            skipped = max(task.attempts - seen.told - 1, 0)
            said = text.attempt_comment(task, _changed(task), skipped, seen.asked)
        else:
            said = text.ended_comment(task, task.headers.get("ERROR", ""))
        _say_once(forge, task, number, said, f"attempt-{task.attempts}")
        if reached and seen.asked:
            _refused_is_said(task, forge.request_review, number, seen.asked)
    seen.told, seen.asked = task.attempts, []
    queue_utils.record_from_forge(task, state, seen.write)
    return f"told #{number} of attempt {task.attempts}" if told else None


def conflict(forge: Forge, task: Task, number: int, why: str) -> None:
    """Say on the pull request that the attempt's work is not on it, and why."""
    said = text.ended_comment(task, f"its commits are not on this pull request: {why}")
    _say_once(forge, task, number, said, f"attempt-{task.attempts}")


def stale(forge: Forge, task: Task, number: int, approvals: list[Review], head: str) -> str:
    """Approved, but of earlier heads: say it on the pull request and in History, once
    for this head (``FORGE_SEEN``)."""
    seen = Seen.of(task)
    if seen.stale == head[:12]:
        return ""
    pairs = [(text.one_line(r.author, 80), r.commit) for r in approvals]
    _say_once(forge, task, number, text.stale_comment(task, pairs, head), f"stale-{head[:12]}")
    who = ", ".join(f"{login} ({sha[:12]})" for login, sha in pairs)
    why = f"forge: approved by {who}, of an earlier head than {head[:12]}: not merged"
    log.info("%s: %s", task.label, why)
    seen.stale = head[:12]

    def change(t: Task) -> None:
        seen.write(t)
        t.add_event(utcnow(), TaskState.PROVISIONAL.value, "octopoid", why)

    queue_utils.record_from_forge(task, TaskState.PROVISIONAL, change)
    return f"approvals of an earlier head, said on #{number}"


def _say_once(forge: Forge, task: Task, number: int, body: str, event: str) -> None:
    mark = text.marker(task, event)
    if not any(mark in said for said in forge.pull_comments(number)):
        _refused_is_said(task, forge.comment_on_pull, number, body)


def _refused_is_said(task: Task, ask: Callable[[int, Any], None], number: int, what: Any) -> None:
    """What the forge refuses to take from octopoid (a reviewer no longer a collaborator,
    a description it will not have) is logged: it never holds up a verdict. A forge that
    cannot answer ends the poll as always (``ForgeUnavailable``)."""
    try:
        ask(number, what)
    except ForgeUnavailable:
        raise
    except ForgeError as exc:
        log.warning("%s: the forge refused %s on #%d: %s", task.label, ask.__name__, number, exc)


def _changed(task: Task) -> list[str]:
    """The subjects of the commits the attempt made (``COMMITS`` of them at its tip)."""
    count = min(int(task.headers.get("COMMITS") or 0), MAX_SUBJECTS)
    tip = task.headers.get(TIP_HEADER) or f"refs/heads/{branches.branch_for(task.id)}"
    if count <= 0:
        return []
    repo = core.open_repo()
    try:
        with core.git_errors(f"git log {tip[:12]}"):
            return repo.git.log("--no-merges", f"-n{count}", "--format=%s", tip).splitlines()
    except GitError:  # the attempt ran on a machine whose commits are not here
        return []

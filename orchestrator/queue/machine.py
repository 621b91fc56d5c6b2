"""The task state machine over the queue store (octopoid's seed API names live here).

The legal moves are one table of ``Move``s (where each may start, where it ends, what it
drops and refuses); each public function makes one of them through ``_transition``, which
checks the task is where the move may start, rewrites the header, appends a History line
and moves the file with one durable rename. Illegal moves raise ``IllegalTransition``.
This module knows nothing of git, agents or memory; it only keeps retry notes in step,
as the notes plan says.

Claims are fenced: a claim carries a ``CLAIM_TOKEN``, and every write made with a token (or
with a claimed ``Task`` read earlier, which carries its token) checks it under the task's
lock and raises ``LostClaim`` when the claim has since been requeued, reaped or claimed
again. Any move out of provisional holds the task (``QueueStore.hold``), so it cannot
interleave with an accept in progress. Recovery of dead claims lives in ``recovery.py``.

Its size: one short function per legal move, kept together because every move goes through
``_transition``'s rules and the seed API names them in one place (octopoid's call forms are
``call_forms.py``). Next out: the split-proposal workflow.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import config
from ..base.lazy import lazy_import
from ..base.processes import ProcessId, claim_mark
from ..model import defaults
from ..model.exceptions import (
    ConfigError,
    IllegalTransition,
    InvalidInput,
    InvalidTask,
    LostClaim,
    LostRace,
    TaskNotFound,
    TaskParseError,
)
from ..model.tasks import (
    DEFAULT_BRANCH,
    DEFAULT_PRIORITY,
    DEFAULT_ROLE,
    TIP_HEADER,
    Task,
    TaskId,
    TaskState,
    format_time,
    new_task,
    one_line,
    shown,
    split_ids,
    task_label,
    utcnow,
)
from . import task_notes
from .call_forms import TaskRef, file_path, octopoid_form, recycled_answer, task_id_of
from .leases import LEASE_HEADERS, claim_token, fence_holds, lease_headers, new_token
from .leases import attempts_left as attempts_left  # re-exported: callers ask the machine
from .store import get_store, get_task
from .store import known_task_id as known_task_id
from .store import list_tasks as list_tasks
from .store import locate as _locate
from .store import readable_tasks as readable_tasks
from .store.base import NEVER
from .task_notes import (
    add_review_notes,
    append_attempt,
    cleanup_task_notes,
    fenced,
    take_back_notes,
)
from .task_notes import get_task_notes as get_task_notes

if TYPE_CHECKING:
    from .line_comments import LineComment

# a task with a budget of its own: every other move reads no limits (~4 M instructions)
budgets = lazy_import("orchestrator.queue.budgets")
redaction = lazy_import("orchestrator.base.redaction")  # at first use: readers never redact
S = TaskState
REJECT_REASONS = ("invalid", "duplicate", "already_implemented", "out_of_scope", "other")


def _id(task: Task | str) -> TaskId:
    return task.id if isinstance(task, Task) else TaskId(task)


def _token(task: Task | str, token: str | None) -> str | None:
    """The claim token a write must match: given, or carried by a claimed ``Task`` read earlier."""
    if token is not None:
        return token
    if isinstance(task, Task) and task.state is S.CLAIMED:
        return claim_token(task) or None
    return None


def check_token(task: Task, token: str | None) -> None:
    """Refuse a write by someone whose claim has since been revoked or given to another."""
    if token is not None and (task.state is not S.CLAIMED or not fence_holds(task, token)):
        raise LostClaim(
            f"{task.label}'s claim is no longer yours (it was requeued, reaped or claimed again)"
        )


_PURPOSE = {S.DONE: "accepted", S.INCOMING: "rejected", S.FAILED: "failed"}


class Move(NamedTuple):
    """A legal move: the states it may start from, where it ends, the headers it drops
    and what it refuses (a check of the task as read under its lock)."""

    srcs: tuple[TaskState, ...]
    dst: TaskState
    drop: tuple[str, ...] = LEASE_HEADERS
    refuse: Callable[[Task], None] | None = None


def _transition(
    task: Task | str,
    move: Move,
    actor: str | None,
    reason: str = "",
    now: datetime | None = None,
    set_headers: dict[str, Any] | None = None,
    edit: Callable[[Task], None] | None = None,
    *,
    drop: Iterable[str] = (),
    token: str | None = None,
) -> Task:
    """Make ``move`` (dropping ``drop`` too); the one path every move takes. A move to
    done stamps ``COMPLETED_AT`` and deletes the task's retry notes.

    ``actor`` None means the agent holding the claim. ``edit`` sees the task as read under
    the lock, for changes that depend on its current headers. ``token`` fences the move
    (see the module docstring); a claimed ``Task`` argument brings its own.
    """
    task_id, now, token = _id(task), now or utcnow(), _token(task, token)
    store = get_store()
    allowed, dst = move.srcs, move.dst
    # one source: the move itself finds out (no lookup first: a round trip on PostgreSQL)
    src = allowed[0] if len(allowed) == 1 else _located_in(task_id, allowed, dst)

    def change(t: Task) -> None:
        check_token(t, token)
        who = actor or t.headers.get("CLAIMED_BY") or "agent"
        for check in (move.refuse, edit):
            if check is not None:
                check(t)
        t.drop_header(*move.drop, *drop)
        for key, value in (set_headers or {}).items():
            t.set_header(key, value)
        if dst is S.DONE:
            t.set_header("COMPLETED_AT", format_time(now))
        t.add_history(now, src.value, dst.value, who, reason)

    try:
        if src is S.PROVISIONAL:
            with store.hold(task_id, _PURPOSE.get(dst, f"moved to {dst.value}")):
                moved = store.move(task_id, src, dst, change)
        else:
            moved = store.move(task_id, src, dst, change)
    except LostRace:
        _located_in(task_id, allowed, dst)  # not there (any more): says where it is
        if token is not None:
            raise LostClaim(f"{task_label(task_id)} left claimed: the claim is not yours") from None
        raise IllegalTransition(f"{task_label(task_id)} was moved by another process") from None
    assert moved is not None  # no guard given
    if dst is S.DONE:  # every path to done: its retry notes go
        _drop_notes(moved.id)
    return moved


def _refuse_if_merged(task: Task) -> None:
    if task.headers.get("MERGED"):
        raise IllegalTransition(
            f"{task.label} was already merged by an accept that did not finish "
            f"(commit {task.headers['MERGED'][:12]}); "
            f"run `octopoid accept {task.label}` to finish it"
        )


def _refuse_unsubmitted(task: Task) -> None:
    """Only a task whose attempt reached review before it failed has work to review."""
    if S.PROVISIONAL.value not in (dst for _, dst in task.moves()):
        raise IllegalTransition(f"{task.label} never reached review: there is nothing to review")


def _refuse_if_accepting(task: Task) -> None:
    """An accept stopped half-way (``MERGING``, ``MERGED``): it is finished or rejected,
    never closed over (git may hold its merge)."""
    if "MERGING" in task.headers or "MERGED" in task.headers:
        raise IllegalTransition(
            f"{task.label}: an accept stopped half-way; `octopoid accept {task.label}` "
            f"finishes it, or `octopoid reject {task.label} --reason ...`"
        )


CLOSE_KINDS = ("done", "wont-do")
#: Where a person may close a task from: every state but claimed (an attempt is running:
#: `octopoid requeue` first), done, and quarantine (not a readable task).
CLOSABLE = (S.INCOMING, S.PROVISIONAL, S.FAILED, S.REJECTED, S.BREAKDOWN)


#: The legal moves, each made by ``_transition`` (what a move's function adds: its
#: headers, History's reason, its own edit under the lock).
FAIL = Move((S.INCOMING, S.CLAIMED, S.PROVISIONAL), S.FAILED, refuse=_refuse_if_merged)
REVIEW_AGAIN = Move((S.FAILED,), S.PROVISIONAL, ("ERROR",), _refuse_unsubmitted)
REJECT = Move((S.CLAIMED,), S.REJECTED)
RETRY = Move(
    (S.FAILED, S.REJECTED, S.BREAKDOWN),
    S.INCOMING,
    ("ERROR", "REJECT_REASON", "REJECT_DETAILS", "INTERRUPTED", "PHASE"),
)
CLOSE = Move(CLOSABLE, S.DONE, (*LEASE_HEADERS, "PHASE", "PROPOSED_SPLIT"), _refuse_if_accepting)
REQUEUE = Move((S.CLAIMED,), S.INCOMING)
RECYCLE = Move((S.CLAIMED,), S.BREAKDOWN, (*LEASE_HEADERS, "PHASE"))
PROPOSE = Move((S.CLAIMED,), S.PROVISIONAL, (*LEASE_HEADERS, "PHASE"))
SUBMIT = Move((S.CLAIMED,), S.PROVISIONAL)
COMPLETE = Move((S.CLAIMED,), S.DONE)
ACCEPT = Move((S.PROVISIONAL,), S.DONE)
SPLIT_DONE = Move((S.CLAIMED, S.PROVISIONAL, S.BREAKDOWN), S.DONE)
REJECT_REVIEW = Move(
    (S.PROVISIONAL,),
    S.INCOMING,
    ("SUBMITTED_AT", "SUBMITTED_CLAIM", "NO_CHANGE"),
    _refuse_if_merged,
)
REJECT_PROPOSAL = Move((S.PROVISIONAL,), S.BREAKDOWN, ("PROPOSED_SPLIT", "SUBMITTED_AT"))


def _located_in(task_id: str, allowed: tuple[TaskState, ...], dst: TaskState) -> TaskState:
    """Where the task is, if that is one of ``allowed``; ``TaskNotFound`` or
    ``IllegalTransition`` (saying where it is) if not."""
    src = _locate(task_id)
    if src not in allowed:
        wanted = " or ".join(s.value for s in allowed)
        raise IllegalTransition(
            f"{task_label(task_id)} is in {src.value}, not {wanted}; cannot move it to {dst.value}"
        )
    return src


def _update_in(
    task: Task | str, state: TaskState, change: Callable[[Task], None], token: str | None = None
) -> Task:
    """Rewrite a task in ``state`` in place (fenced by ``token`` where it is claimed);
    ``IllegalTransition`` if it is not there any more."""
    token = _token(task, token)

    def fenced(t: Task) -> None:
        check_token(t, token)
        change(t)

    try:
        return get_store().update(_id(task), state, fenced)
    except LostRace:
        if token is not None:
            raise LostClaim(
                f"{task_label(_id(task))} left claimed: the claim is not yours"
            ) from None
        raise IllegalTransition(f"{task_label(_id(task))} is no longer {state.value}") from None


#: Characters of agent output kept per attempt in the retry notes (octopoid's name for
#: ``defaults.NOTES_STDOUT_LIMIT``; a project's config.yaml ``notes.stdout_limit`` overrides).
NOTES_STDOUT_LIMIT = defaults.NOTES_STDOUT_LIMIT

#: octopoid's reject_task reason codes that this project spells differently.
OCTOPOID_REJECT_REASONS = {"invalid_task": "invalid", "blocked": "other"}


def create_task(
    title: str,
    role: str = DEFAULT_ROLE,
    context: str = "",
    acceptance_criteria: Iterable[str] | str | None = None,
    priority: str = DEFAULT_PRIORITY,
    branch: str = DEFAULT_BRANCH,
    created_by: str = "human",
    blocked_by: Iterable[str] | str | None = None,
    project_id: str | None = None,
    queue: TaskState | str = S.INCOMING,
    **fields: Any,
) -> Task | Path:
    """Enqueue a new task with the next sequential id, in incoming (or breakdown).

    octopoid's signature, positional or by name. Called octopoid's way, with
    ``acceptance_criteria`` (a list, or one string of lines), it returns the task file's
    ``Path``, as octopoid did; called this project's way, with ``criteria=`` or none, the
    ``Task``. ``blocked_by`` may be octopoid's comma-separated string; ``project_id`` is kept
    as a ``PROJECT`` header, and octopoid's ``checks`` (names of its gatekeeper checks, not
    commands) as ``OCTOPOID_CHECKS``. ``fields`` are the rest of ``tasks.new_task``'s:
    criteria, checks (commands), now; ``budget`` (limits, ``budgets.parse``), kept as the
    task's ``BUDGET`` header; and ``task_id``, an id ``QueueStore.allocate_id`` gave before
    (a journal's steps create their tasks under ids it wrote down first).
    """
    budget = fields.pop("budget", None)
    given_id = fields.pop("task_id", None)  # allocated before (a journal's), or the next
    octopoid_checks: list[str] = []
    if acceptance_criteria is not None:
        if "criteria" in fields:
            raise TypeError("create_task() got both acceptance_criteria= and criteria=")
        fields["criteria"] = _criteria_lines(acceptance_criteria)
        octopoid_checks = list(fields.pop("checks", None) or [])
    state = _new_task_state(queue)
    task = new_task(  # refused input must not spend an id
        "0",
        title,
        role=role,
        context=context,
        priority=priority,
        branch=branch,
        created_by=created_by,
        blocked_by=_blocker_list(blocked_by),
        **fields,
    )
    if project_id:
        task.set_header("PROJECT", project_id)
    if octopoid_checks:
        task.set_header("OCTOPOID_CHECKS", ",".join(octopoid_checks))
    if budget:
        task.set_header("BUDGET", budgets.render(budget))
    if state is not S.INCOMING:
        task.sections = [(h, c) for h, c in task.sections if h != "History"]
        task.add_history(task.created or utcnow(), "new", state.value, created_by)
    store = get_store()
    task.id = TaskId(given_id) if given_id else store.allocate_id()
    added = store.add(task, state)
    return added if acceptance_criteria is None else file_path(added)


def _new_task_state(queue: TaskState | str) -> TaskState:
    """Where a new task may start: incoming, or (octopoid's ``queue="breakdown"``) breakdown."""
    if queue in (S.INCOMING.value, S.BREAKDOWN.value):
        return TaskState(queue)
    raise InvalidTask(f"a new task goes to incoming or breakdown, not {shown(str(queue))}")


def _blocker_list(blocked_by: Iterable[str] | str | None) -> list[str]:
    """Blockers as a list; octopoid gave them as one comma-separated string, or "None"."""
    if blocked_by is None or blocked_by == "None":
        return []
    if isinstance(blocked_by, str):
        return split_ids(blocked_by)
    return list(blocked_by)


def _criteria_lines(criteria: Iterable[str] | str) -> list[str]:
    """octopoid's acceptance criteria without the ``- [ ]`` boxes it let callers include."""
    lines = criteria.splitlines() if isinstance(criteria, str) else list(criteria)
    return [re.sub(r"^\s*- \[[ xX]\]\s*", "", line) for line in lines if line.strip()]


def claim_task(
    role_filter: str | None = None,
    agent_name: str = "agent",
    *,
    source: TaskState = S.INCOMING,
    task: Task | str | None = None,
    reason: str | None = None,
    lease_seconds: int | None = None,
    pid: int | None = None,
    now: datetime | None = None,
) -> Task | None:
    """The one claim, with a lease, a fresh ``CLAIM_TOKEN`` and this process (or ``pid``) as
    its owner; None if nothing is there to claim.

    - the next eligible task waiting in incoming for ``role_filter`` (an implementer's);
    - with ``source`` breakdown, the oldest task there (a breakdown agent's:
      ``PHASE: breakdown``);
    - with ``task``, that task from ``source`` (a planner's carrying task, whose role no
      scheduler claims): ``IllegalTransition`` if it is not there.
    """
    now = now or utcnow()
    breakdown = source is S.BREAKDOWN
    headers: dict[str, object] = {}  # made once a task is found: an empty claim is cheap

    def change(t: Task) -> None:
        if not headers:
            seconds = lease_seconds or config.load_agents()["lease_seconds"]
            headers.update(lease_headers(agent_name, ProcessId.of(pid), now, seconds, new_token()))
        t.set_header("ATTEMPTS", t.attempts + 1)
        for key, value in headers.items():
            t.set_header(key, value)
        t.drop_header("STARTED_AT", "DEADLINE", *(() if breakdown else ("NOT_BEFORE", "PHASE")))
        if breakdown:
            t.set_header("BREAKDOWN_ATTEMPTS", int(t.headers.get("BREAKDOWN_ATTEMPTS") or 0) + 1)
            t.set_header("PHASE", "breakdown")
        why = reason or ("to break down" if breakdown else f"attempt {t.attempts}")
        t.add_history(now, source.value, S.CLAIMED.value, agent_name, why)

    store = get_store()
    if task is not None:
        try:
            return store.move(_id(task), source, S.CLAIMED, change)
        except LostRace:
            raise IllegalTransition(
                f"{task_label(_id(task))} is no longer in {source.value}: not claimed"
            ) from None
    if not breakdown:
        return store.claim(role_filter, change, now)
    for candidate in store.list(S.BREAKDOWN):
        try:
            return store.move(candidate.id, S.BREAKDOWN, S.CLAIMED, change)
        except (LostRace, TaskParseError):
            continue  # another breakdown agent took it, or it was unreadable (quarantined)
    return None


def renew_lease(
    task: Task | str,
    lease_seconds: int | None = None,
    now: datetime | None = None,
    pid: int | None = None,
    *,
    token: str | None = None,
    deadline_seconds: float | None = None,
) -> Task:
    """Push a claimed task's lease forward; ``LostClaim`` if the claim is not ``token``'s.

    ``pid`` hands the claim to another process (the runner taking over from the scheduler),
    records when the attempt really started, and sets its hard ``DEADLINE``.
    """
    now = now or utcnow()
    seconds = lease_seconds or config.load_agents()["lease_seconds"]
    expires = format_time(now + timedelta(seconds=seconds))

    def change(t: Task) -> None:
        t.set_header("LEASE_EXPIRES", expires)
        if pid is not None:
            for key, value in ProcessId.of(pid).headers().items():
                t.set_header(key, value)
            t.set_header("STARTED_AT", format_time(now))
        if deadline_seconds is not None:
            t.set_header("DEADLINE", format_time(now + timedelta(seconds=deadline_seconds)))

    return _update_in(task, S.CLAIMED, change, token)


def record_usage(
    task: Task | str,
    turns: int,
    cost_usd: float | None,
    *,
    tokens: int = 0,
    seconds: float = 0.0,
    token: str | None = None,
) -> Task:
    """Add an attempt's turns, tokens (in + out), wall time and cost to the claimed task's
    totals (its budget reads them)."""

    def add(t: Task) -> None:
        t.set_header("TURNS_TOTAL", int(t.headers.get("TURNS_TOTAL") or 0) + turns)
        if seconds:
            total_seconds = float(t.headers.get("SECONDS_TOTAL") or 0) + seconds
            t.set_header("SECONDS_TOTAL", f"{total_seconds:.1f}")
        if tokens:
            t.set_header("TOKENS_TOTAL", int(t.headers.get("TOKENS_TOTAL") or 0) + tokens)
        if cost_usd is not None:
            total = float(t.headers.get("COST_USD_TOTAL") or 0) + cost_usd
            t.set_header("COST_USD_TOTAL", f"{total:.4f}")

    return _update_in(task, S.CLAIMED, add, token)


def report_progress(task: Task | str, text: str, *, token: str | None = None) -> Task:
    """What the running agent says it is doing (one line, from its channel): ``PROGRESS``."""
    return _update_in(task, S.CLAIMED, lambda t: t.set_header("PROGRESS", text), token)


@octopoid_form(commits_count="commits", turns_used="turns")
def submit_completion(
    task: TaskRef,
    commits: int = 0,
    turns: int | None = 0,
    now: datetime | None = None,
    cost_usd: float | None = None,
    *,
    token: str | None = None,
    checks: Iterable[str] = (),
    no_change: str | None = None,
    tip: str | None = None,
    remark: str = "",
) -> Task:
    """claimed -> provisional: the attempt produced work for review.

    ``checks`` are one-line results of the checks it passed; each gets a History line
    (``in claimed``: an event, not a move).
    ``tip``: the commit the attempt left on its branch (``BRANCH_TIP``), what accept merges.
    ``no_change``: the agent found nothing to change, and why (``NO_CHANGE``): accepting
    it closes the task without a merge.
    ``turns`` None (octopoid's "not known") counts as 0. A submit fenced by the claim's
    token (the runner's) is marked ``SUBMITTED_CLAIM``: accept takes nothing else.
    ``remark``: what octopoid did to the work on its way (History says it).
    """
    now, turns = now or utcnow(), turns or 0
    token = _token(task, token)
    headers: dict[str, Any] = {"COMMITS": commits, "TURNS": turns, "SUBMITTED_AT": format_time(now)}
    if token:
        headers["SUBMITTED_CLAIM"] = claim_mark(token)[:16]
    if tip:
        headers[TIP_HEADER] = tip
    cost = f", ${cost_usd:.2f}" if cost_usd is not None else ""
    if no_change:
        headers["NO_CHANGE"] = one_line(redaction.redact(no_change), 500)
    stale = () if no_change else ("NO_CHANGE",)  # a mark of an earlier attempt's
    checks = list(checks)
    passed = f"; checks: {len(checks)} passed" if checks else ""

    def note_checks(t: Task) -> None:
        for line in checks:
            t.add_event(now, S.CLAIMED.value, "checks", line)

    why = (
        f"{commits} commit{'s' * (commits != 1)}, {turns} turns{cost}{passed}"
        + (f"; no change needed: {headers['NO_CHANGE']}" if no_change else "")
        + (f"; {one_line(redaction.redact(remark), defaults.MAX_ERROR_CHARS)}" if remark else "")
    )
    return _transition(task, SUBMIT, None, why, now, headers, note_checks, drop=stale, token=token)


def unfenced_submit(task: Task) -> str | None:
    """Why ``task`` (in provisional) did not come from a runner's fenced submit, or None.
    A return from failed (``return_to_review``) brings back what was submitted before."""
    if "SUBMITTED_CLAIM" not in task.headers:
        return "it was not submitted with its claim's token (moved there by hand, or by a script)"
    arrivals = [
        src for src, dst in task.moves() if dst == S.PROVISIONAL.value and src != S.FAILED.value
    ]
    if arrivals[-1:] != [S.CLAIMED.value]:
        return "its History has no move from claimed by the runner that submitted it"
    return None


@octopoid_form(validator="accepted_by")
def accept_completion(
    task: TaskRef,
    accepted_by: str | None = "human",
    now: datetime | None = None,
    *,
    reason: str = "accepted",
) -> Task:
    """provisional -> done; the retry notes are deleted. ``accepted_by`` None is "human";
    ``reason`` is History's (a forge's merge says who merged it)."""
    accepted_by = accepted_by or "human"
    return _transition(task, ACCEPT, accepted_by, reason, now, {"ACCEPTED_BY": accepted_by})


def _drop_notes(task_id: TaskId) -> None:
    """A done task's retry notes and output log go; the notes went with the move already
    where the store keeps them (no round trip more on PostgreSQL)."""
    if get_store().drops_notes_when_done:
        task_notes.stdout_log_path(task_id).unlink(missing_ok=True)
    else:
        cleanup_task_notes(task_id)


def rejection_reason(reason: str) -> str:
    """The reason of a rejection, checked alike for every way in (CLI, page, API): text
    the next attempt reads, so not blank."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput("a rejection needs a reason: the next attempt reads it")
    return reason


@octopoid_form(validator="rejected_by", accepted_by="rejected_by")
def reject_completion(
    task: TaskRef,
    reason: str,
    rejected_by: str | None = "human",
    now: datetime | None = None,
    *,
    comments: Sequence[LineComment] = (),
    summary: str = "",
    mark: dict[str, str] | None = None,
) -> Task:
    """provisional -> incoming; the reason (and ``comments`` on lines of the branch) go into
    the retry notes for the next attempt.

    Refused for a task an interrupted accept already merged (``MERGED``): finish that accept.
    ``rejected_by`` None (octopoid's default) is "human". ``summary`` is History's line when
    the reason is long (a CI log); ``mark`` are headers set in the same move (what a forge's
    verdict was, so it is never acted on twice).
    """
    rejection_reason(reason)
    who = rejected_by or "human"
    return _reject_to(task, REJECT_REVIEW, reason, who, now, comments, summary=summary, mark=mark)


def _reject_to(
    task: TaskRef,
    move: Move,
    reason: str,
    rejected_by: str,
    now: datetime | None,
    comments: Sequence[LineComment] = (),
    edit: Callable[[Task], None] | None = None,
    summary: str = "",
    mark: dict[str, str] | None = None,
) -> Task:
    """A rejection: its notes are written before the move, so a kill between the two
    cannot lose the reason (the task stays in provisional; at worst a repeated reject
    writes it twice). If the move is refused, exactly those notes are taken back; if it
    fails after the task reached ``dst`` (the rename decided, a later step raised), they stay.
    """
    now, task_id = now or utcnow(), _id(task)
    added = add_review_notes(task_id, reason, rejected_by, now, comments)
    read_in_provisional = False

    def edit_and_mark(t: Task) -> None:
        nonlocal read_in_provisional
        if edit is not None:
            edit(t)
        read_in_provisional = True

    try:
        return _transition(task, move, rejected_by, summary or reason, now, mark, edit_and_mark)
    except BaseException:
        if not read_in_provisional or get_store().locate(task_id) is not move.dst:
            take_back_notes(task_id, added)
        raise


def record_merge(task: Task | str, sha: str, actor: str, onto: str) -> Task:
    """An accept's merge landed (``sha`` on ``onto``): ``MERGED`` on the task in review,
    and a History line. From now on it can be finished, never rejected."""

    def merged(t: Task) -> None:
        t.drop_header("MERGING")  # an older octopoid's mark before its merge
        t.set_header("MERGED", sha)
        t.add_event(utcnow(), S.PROVISIONAL.value, actor, f"merged into {onto} as {sha[:12]}")

    return _update_in(task, S.PROVISIONAL, merged)


def add_task(task: Task, state: TaskState = S.INCOMING) -> Task:
    """A task made elsewhere under its own id (an imported issue, an older octopoid's
    file) added in ``state``; ``IllegalTransition`` if the id is taken meanwhile."""
    return get_store().add(task, state)


def rewrite_waiting(task: Task | str, change: Callable[[Task], None]) -> Task:
    """Rewrite a task still waiting in incoming (its issue was edited before work began);
    ``IllegalTransition`` if it was claimed meanwhile."""
    return _update_in(task, S.INCOMING, change)


def record_from_forge(task: Task | str, state: TaskState, change: Callable[[Task], None]) -> Task:
    """What the forge learned of a task in ``state`` written on it (its pull request, what
    was said there, the branch's new tip); ``IllegalTransition`` if it left ``state``."""
    return _update_in(task, state, change)


def repair_store(rebuild: bool = False) -> tuple[list[str], int | None]:
    """The store's own repairs (half-done moves of dead processes), and with ``rebuild`` its
    indexes made again from the tasks: what was repaired, how many tasks were read."""
    store = get_store()
    return store.recover(), (store.rebuild() if rebuild else None)


def sweep_store(now: datetime) -> int:
    """The store's housekeeping (expired holds and leftovers of dead processes)."""
    return get_store().sweep(now)


@octopoid_form()
def complete_task(
    task: TaskRef,
    result: str | None = "",
    now: datetime | None = None,
    *,
    token: str | None = None,
    headers: dict[str, Any] | None = None,
) -> Task:
    """claimed -> done directly (no review); the retry notes are deleted."""
    return _transition(task, COMPLETE, None, result or "completed", now, headers, token=token)


@octopoid_form()
def fail_task(
    task: TaskRef,
    error: str,
    now: datetime | None = None,
    *,
    token: str | None = None,
    actor: str | None = None,
    drop: tuple[str, ...] = (),
    headers: dict[str, Any] | None = None,
) -> Task:
    """-> failed, with the error kept (one line, capped) in the ERROR header. ``actor``
    None is the agent holding the claim; ``drop`` are headers the move removes, ``headers``
    others it sets."""
    error = one_line(redaction.redact(error), defaults.MAX_ERROR_CHARS) or "unknown error"
    headers = {**(headers or {}), "ERROR": error}
    return _transition(task, FAIL, actor, error, now, headers, drop=drop, token=token)


def return_to_review(
    task: TaskRef,
    reason: str,
    actor: str,
    now: datetime | None = None,
    *,
    headers: dict[str, Any] | None = None,
    drop: tuple[str, ...] = (),
) -> Task:
    """failed -> provisional: a failure undone from outside, the work it had submitted in
    review again (a forge's pull request, closed unmerged, was reopened or merged)."""
    return _transition(task, REVIEW_AGAIN, actor, reason, now, headers, drop=drop)


@octopoid_form()
def reject_task(
    task: TaskRef,
    reason: str,
    details: str | None = "",
    rejected_by: str | None = None,
    now: datetime | None = None,
    *,
    token: str | None = None,
) -> Task:
    """claimed -> rejected: the agent says the task is invalid, a duplicate, already done...

    ``rejected_by`` None means the agent holding the claim. octopoid's codes are read as
    ours (``OCTOPOID_REJECT_REASONS``); one read as ``other`` keeps its name in the details.
    """
    code = OCTOPOID_REJECT_REASONS.get(reason, reason)
    if code not in REJECT_REASONS:
        raise IllegalTransition(f"reject reason must be one of {', '.join(REJECT_REASONS)}")
    details = redaction.redact(details or "")
    if code != reason and code == "other":
        details = f"{reason}: {details}" if details else reason
    why = f"{code}: {details}" if details else code
    headers = {"REJECT_REASON": code, "REJECT_DETAILS": one_line(details, 500)}
    return _transition(task, REJECT, rejected_by, why, now, headers, token=token)


@octopoid_form()
def retry_task(
    task: TaskRef,
    actor: str = "human",
    now: datetime | None = None,
    *,
    reason: str = "retry",
    budget: dict[str, float] | None = None,
    prepare: Callable[[Task], None] | None = None,
) -> Task:
    """failed/rejected/breakdown -> incoming with a fresh set of attempts; notes are kept.

    From breakdown, the task is tried whole again instead of split (no breakdown agent,
    or a person thinks another attempt will do). ``budget`` replaces its own budget;
    ``prepare`` runs under the task's lock before the move (a claim cannot slip in).
    """

    def restart(t: Task) -> None:
        if prepare is not None:
            prepare(t)
        t.set_header("ATTEMPTS_AT_RETRY", t.attempts)

    headers = {"BUDGET": budgets.render(budget)} if budget else None
    return _transition(task, RETRY, actor, reason, now, headers, restart)


def close_task(
    task: TaskRef, kind: str, reason: str, actor: str = "human", now: datetime | None = None
) -> Task:
    """-> done without a merge: nothing needed changing, or it was done elsewhere
    (``done``), or it will not be done (``wont-do``). ``CLOSED`` and ``CLOSE_REASON`` say
    which and why; the retry notes are deleted like any task's in done. A task an
    interrupted accept already merged is refused: that accept is finished instead.
    """
    if kind not in CLOSE_KINDS:
        raise InvalidInput(f"a task is closed as one of {', '.join(CLOSE_KINDS)}, not {kind!r}")
    if not reason.strip():
        raise InvalidInput("closing a task needs a reason (--reason): it stays in its History")
    headers = {"CLOSED": kind, "CLOSE_REASON": one_line(redaction.redact(reason), 500)}
    state = get_store().locate(_id(task))
    if state is S.CLAIMED:
        raise IllegalTransition(
            f"{task_label(_id(task))} is claimed: an attempt is running; "
            f"`octopoid requeue {task_label(_id(task))}` takes it back first"
        )
    why = f"closed as {kind}: {headers['CLOSE_REASON']}"
    return _transition(task, CLOSE, actor, why, now, headers)


@octopoid_form()
def requeue_task(
    task: TaskRef,
    reason: str = "requeued",
    actor: str = "human",
    now: datetime | None = None,
    *,
    counted: bool = True,
    set_headers: dict[str, Any] | None = None,
    token: str | None = None,
) -> Task:
    """claimed -> incoming after a lost attempt; notes are kept.

    ``counted=False`` (shutdown, rate limit, a runner that never started) gives the attempt
    back: it is recorded in ``INTERRUPTED`` and does not count against ``max_attempts``.
    ``ATTEMPTS`` itself never goes down: it numbers the notes. A running attempt is stopped
    by ``recovery.requeue_running``, which calls this.
    """

    def give_back(t: Task) -> None:
        if not counted:
            t.set_header("INTERRUPTED", int(t.headers.get("INTERRUPTED") or 0) + 1)

    return _transition(task, REQUEUE, actor, reason, now, set_headers, give_back, token=token)


@octopoid_form(recycled_answer)
def recycle_to_breakdown(
    task: TaskRef,
    reason: str = "too_large",
    now: datetime | None = None,
    *,
    token: str | None = None,
) -> Task:
    """claimed -> breakdown: burned out (or a breakdown attempt failed), to be split by a
    breakdown role; notes are kept."""
    return _transition(task, RECYCLE, None, reason, now, token=token)


def release_claim(
    task: Task,
    reason: str,
    actor: str = "octopoid",
    now: datetime | None = None,
    *,
    counted: bool = True,
    token: str | None = None,
) -> Task:
    """Give a claim back where it came from: breakdown/ for a breakdown claim (``PHASE``),
    else incoming (see ``requeue_task`` for ``counted``)."""
    if task.headers.get("PHASE") == "breakdown":
        return recycle_to_breakdown(task, reason, now, token=token)
    return requeue_task(task, reason, actor, now, counted=counted, token=token)


def propose_split(task: Task | str, proposal: str, now: datetime | None = None) -> Task:
    """claimed -> provisional: a breakdown agent's subtasks, held for a person to approve
    (``breakdown.approve: true``); they are kept in a ``## Proposed Subtasks`` section."""
    count = proposal.count('"title"')

    def hold(t: Task) -> None:
        t.sections = [(h, c) for h, c in t.sections if h != "Proposed Subtasks"]
        t.sections.append(("Proposed Subtasks", f"{fenced(proposal, 'subtasks')}\n"))

    why = f"proposes {count} subtasks; `octopoid approve` creates them"
    headers = {"PROPOSED_SPLIT": count, "SUBMITTED_AT": format_time(now or utcnow())}
    return _transition(task, PROPOSE, None, why, now, headers, hold)


def finish_split(
    task: Task | str,
    split_into: str,
    actor: str | None = None,
    *,
    approved: bool = False,
    token: str | None = None,
) -> Task:
    """-> done once a split's subtasks exist (the last step of its journal): from claimed
    (the breakdown attempt's own, fenced by its ``token``), provisional (a person
    ``approved`` the proposal) or breakdown (the attempt died half-way and its claim was
    taken back: whoever finishes the journal moves it). ``actor`` None: the claim's holder."""
    headers = {"SPLIT_INTO": split_into, **({"ACCEPTED_BY": actor} if approved else {})}
    why = f"split into {split_into}"
    return _transition(task, SPLIT_DONE, actor, why, None, headers, token=token)


def rewire_blocker(task: Task | str, old_id: str, new_id: str, actor: str) -> Task:
    """A waiting task that waited for ``old_id`` (split) waits for ``new_id`` instead;
    History says so. ``IllegalTransition`` if it left incoming meanwhile."""
    old_id, new_id = TaskId(old_id), TaskId(new_id)  # free for a TaskId: the seed API's own
    old, new = task_label(old_id), task_label(new_id)

    def rewire(t: Task) -> None:
        if old_id in t.blocked_by:
            ids = [new_id if b == old_id else b for b in t.blocked_by]
            t.set_header("BLOCKED_BY", ", ".join(task_label(b) for b in dict.fromkeys(ids)))
            t.add_event(utcnow(), S.INCOMING.value, actor, f"waits for {new} instead of {old}")

    return _update_in(task, S.INCOMING, rewire)


QUESTION_HOLD = ("QUESTION", "NOT_BEFORE")


def hold_for_question(
    task: Task | str,
    question: str,
    reason: str,
    answered: Callable[[], bool],
) -> Task:
    """claimed -> incoming, the attempt given back (not counted), held (``QUESTION``, a
    ``NOT_BEFORE`` no claim reaches) until a person answers; unless ``answered()`` says
    the answer came meanwhile. It is asked under the task's lock, and the answer is
    written before ``release_question`` takes that lock, so a task is never held with its
    answer given. The claimed ``task`` brings its token, which fences the move."""

    def hold(t: Task) -> None:
        t.set_header("INTERRUPTED", int(t.headers.get("INTERRUPTED") or 0) + 1)
        if not answered():
            t.set_header("QUESTION", one_line(question, 300))
            t.set_header("NOT_BEFORE", NEVER)

    why = f"needs input: {one_line(question, 120)}; {reason}"
    return _transition(task, REQUEUE, "octopoid", why, None, None, hold)


def release_question(task: Task | str, answered_by: str) -> Task | None:
    """A task held in incoming for its question may be claimed again (the answer is in its
    notes); None if it is not held there (still asking: its attempt takes the answer)."""

    def release(t: Task) -> None:
        if "QUESTION" in t.headers:  # not a rate limit's NOT_BEFORE: only the hold's
            t.drop_header(*QUESTION_HOLD)
            t.add_event(utcnow(), S.INCOMING.value, answered_by, "answered: it may be claimed")

    try:
        return _update_in(task, S.INCOMING, release)
    except (IllegalTransition, TaskNotFound):
        return None


def reject_proposal(task: Task | str, reason: str, rejected_by: str = "human") -> Task:
    """provisional -> breakdown: a person refused the proposed split; the reason goes into
    the notes for the next breakdown attempt."""

    def drop(t: Task) -> None:
        t.sections = [(h, c) for h, c in t.sections if h != "Proposed Subtasks"]

    return _reject_to(task, REJECT_PROPOSAL, reason, rejected_by, None, edit=drop)


def quarantine_file(path: Path, reason: str) -> Path:
    """Move an unreadable file to quarantine/ with ``<name>.error`` beside it."""
    return get_store().quarantine(path, reason)


def save_task_notes(
    task_id: TaskRef,
    agent_name: str,
    stdout: str,
    commits: int = 0,
    turns: int = 0,
    **extra: Any,
) -> None:
    """Append an attempt to the task's retry notes, numbered by its ``ATTEMPTS`` header.

    Needs only ``config.get_notes_dir()``: with no queue to ask (no project found), the
    attempt is numbered from the notes themselves.
    """
    task_id = task_id_of(task_id)
    if "attempt" not in extra:
        try:
            extra["attempt"] = get_task(task_id).attempts or None
        except (TaskNotFound, ConfigError):
            extra["attempt"] = None
    append_attempt(task_id, agent_name, stdout, commits, turns, **extra)

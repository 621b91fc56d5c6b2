"""How an attempt ends: the task's next move from what the attempt left (``Ended``), each
move fenced by the claim the task carries. A role's ``settle`` makes its own; the
implementer's is this module's: the checks on its work, then submit, requeue (given back
uncounted when the task was not why it failed), breakdown or fail. Whatever stops the
move itself (a lost claim, a person's stop, a store that cannot be written) is settled
here too (``decide``); and what the work brought back counts as (``contained``,
``publish``: a reach outside the branch fails it, a conflict with the pull request keeps
it from review)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..backends import AgentResult
from ..backends.base import CAUSES
from ..base.fsutil import TailBuffer
from ..base.processes import kill_claim_processes
from ..base.redaction import redact
from ..box.workspace import BroughtBack, Workspace
from ..git import branches, core, history
from ..model.exceptions import LostClaim, OctopoidError, SetupFailed, StorageError
from ..model.tasks import TIP_HEADER, Task, TaskState, format_time, utcnow
from ..queue import agent_records, budgets, questions
from ..queue import machine as queue_utils
from ..queue.leases import attempts_left
from ..queue.task_notes import add_notes_section
from . import breakdown, checks
from .base import Claim, Ended, Role, Stopped

BURN_OUT_SHARE = 0.8  # of max_turns, with no commits: the attempt is burning out
BURN_OUT_ATTEMPTS = 2  # burned-out attempts before the task goes to breakdown


@dataclass
class AttemptReport:
    task_id: str
    attempt: int
    outcome: str
    commits: int
    turns: int
    next_state: str
    reason: str
    peak_rss_kib: int = 0
    peak_children_rss_kib: int = 0  # of what it waited for: the agent, checks, git


def report(task: Task, result: AgentResult, commits: int, state: str, reason: str) -> AttemptReport:
    return AttemptReport(
        task.label, task.attempts, result.outcome, commits, result.turns, state, reason
    )


def out_of_budget(task: Task, spent: budgets.Verdict, why: str) -> AttemptReport:
    """A budget is spent: a task's own waits in failed/ for a person to give it more; an
    agent's or the project's day gives the attempt back, and the scheduler claims nothing
    under it until the day turns (``stalls``)."""
    result = AgentResult(None, "budget", summary=why)
    if spent.scope == "task":
        more = f"`octopoid retry {task.label} --budget usd=...` gives it more"
        queue_utils.fail_task(task, f"{why}; {more}")
        return report(task, result, 0, TaskState.FAILED.value, why)
    queue_utils.requeue_task(task, why, "octopoid", counted=False)
    return report(task, result, 0, TaskState.INCOMING.value, why)


def decide(role: Role, ended: Ended, agent: dict, claim: Claim) -> AttemptReport:
    """The task's next move (``next_move``), or what is left to do when it cannot be made:
    a lost claim touches nothing, a person's stop gives the task back, a store that cannot
    be written gives the claim back."""
    task, result, commits = ended.task, ended.result, ended.commits
    try:
        return next_move(role, ended, agent, claim)
    except LostClaim as exc:
        result.details["stop"] = "LostClaim"
        return report(task, result, commits, "(not ours any more)", str(exc))
    except Stopped as exc:  # a person's stop while the checks ran: given back all the same
        add_notes_section(task.id, f"Stopped — attempt {task.attempts}", str(exc))
        queue_utils.requeue_task(task, str(exc), exc.by, counted=False)
        return report(task, result, commits, TaskState.INCOMING.value, str(exc))
    except StorageError as exc:
        return _release(task, result, commits, exc)


def next_move(role: Role, ended: Ended, agent: dict, claim: Claim) -> AttemptReport:
    """Record the usage, then the role's move; the implementer's runs the checks when
    there is work to check, then moves the task."""
    task, result, commits, space = ended.task, ended.result, ended.commits, ended.space
    tokens = result.tokens_in + result.tokens_out
    seconds = result.details.get("seconds", 0.0)
    queue_utils.record_usage(task, result.turns, result.cost_usd, tokens=tokens, seconds=seconds)
    if (spent := result.details.get("budget")) is not None and commits == 0:
        return out_of_budget(task, spent, f"the attempt stopped at {spent.named()}")
    if role.settle is not None:
        state, why = role.settle(ended)
        return report(task, result, commits, state, why)
    if result.details.get("stop") is None and space is not None:
        asked = _asked(task, result, commits, space)
        if asked is not None:
            return asked
    verdict = None
    why = result.details.get("no_change")
    if why and space is not None:
        held = history.commits_ahead(core.open_repo(), task.id, space.base)
        if held:  # earlier attempts made the change: their work is what goes to review
            result.details.pop("no_change")
            add_notes_section(task.id, f"No further change — attempt {task.attempts}", why)
            commits = held
    tip = space.tip() if space is not None else None
    diverged = "diverged" in result.details  # not on the pull request: nothing to check
    if result.outcome == "success" and commits > 0 and space is not None and not diverged:
        verdict = _verify(task, ended.cfg, claim, space, tip)
    return settle(task, agent, ended.agents_cfg, result, commits, verdict, tip)


def _verify(
    task: Task, cfg: dict, claim: Claim, space: Workspace, tip: str | None
) -> checks.Verdict:
    """Checks and the merge pre-check on the attempt's work (its branch at ``tip``); what
    failed goes in the notes.

    The checks run the agent's code: in a box of their own with ``sandbox: bwrap``, and
    followed by another containment check with ``sandbox: none``.
    """
    ran = False
    try:
        if checks.commands_for(task, cfg):
            ran = True
            with space.check_box() as box:
                verdict = checks.verify(task, box, cfg, claim.tick, tip)
        else:  # nothing runs the agent's code: the merge pre-check needs no box
            verdict = checks.Verdict([], *checks.merge_precheck(task, tip))
    except Stopped:
        raise  # a person's stop is no check's failure
    except OctopoidError as exc:  # a bad CHECKS header, git, or their set-up failing
        said = exc.output if isinstance(exc, SetupFailed) else ""
        failed = checks.CheckResult("(the checks)", None, 0.0, said, str(exc))
        verdict = checks.Verdict([failed], None)
    kill_claim_processes(claim.token)  # nothing a check started outlives it either
    breaches = space.recheck() if ran else []
    if breaches:
        why = "; ".join(breaches)
        verdict.results.append(checks.CheckResult("(containment)", None, 0.0, "", why))
    if not verdict.passed:
        add_notes_section(task.id, f"Checks — attempt {task.attempts}", checks.notes_text(verdict))
    if verdict.unreached:  # the next attempt and the reviewer see what they could not reach
        section = f"Checks' network — attempt {task.attempts}"
        add_notes_section(task.id, section, "\n".join(verdict.unreached))
    return verdict


def _asked(task: Task, result: AgentResult, commits: int, space: Workspace) -> AttemptReport | None:
    """What the agent asked for through its channel, if anything: a split held for a
    person's approval, or "needs input" until a person answers its question."""
    reason = f"{result.outcome}: {result.summary}; {commits} commit{'s' * (commits != 1)}"
    if space.channel.toolbox.proposed is not None:
        subtasks = space.channel.toolbox.proposed
        queue_utils.propose_split(task, breakdown.proposal_text(subtasks))
        why = f"{len(subtasks)} subtasks proposed; waiting for `octopoid approve`"
        return report(task, result, commits, TaskState.PROVISIONAL.value, why)
    if (question := questions.unanswered(task)) is not None:
        questions.hold_for_answer(task, question, reason)
        return report(task, result, commits, TaskState.INCOMING.value, f"needs input: {question}")
    return None


def settle(
    task: Task,
    agent: dict,
    agents_cfg: dict,
    result: AgentResult,
    commits: int,
    verdict: checks.Verdict | None = None,
    tip: str | None = None,
) -> AttemptReport:
    """Decide and make the task's next move (each move fenced by the claim ``task`` carries);
    the moves that end the attempt record ``tip``, what it left on the branch."""
    stop = result.details.get("stop")
    mark = {TIP_HEADER: tip} if tip else {}
    reason = f"{result.outcome}: {result.summary}; {commits} commit{'s' * (commits != 1)}"
    burned = commits == 0 and result.turns >= BURN_OUT_SHARE * agent["max_turns"]

    def moved(state: TaskState | str) -> AttemptReport:
        value = state.value if isinstance(state, TaskState) else state
        return report(task, result, commits, value, reason)

    if stop == "LostClaim":
        return moved("(not ours any more)")
    if stop in ("Terminated", "Stopped"):  # given back: neither counts against the task
        by = result.details.get("by", "octopoid")
        queue_utils.requeue_task(task, reason, by, counted=False, set_headers=mark)
        return moved(TaskState.INCOMING)
    if (given_back := _give_back(task, agent, agents_cfg, result, reason, mark)) is not None:
        reason = given_back
        return moved(TaskState.INCOMING)
    if result.outcome == "success" and commits == 0 and result.details.get("no_change"):
        why = result.details["no_change"]
        queue_utils.submit_completion(
            task, 0, result.turns, cost_usd=result.cost_usd, no_change=why, tip=tip
        )
        reason = f"no change needed: {why}"
        return moved(TaskState.PROVISIONAL)
    diverged = result.details.get("diverged")
    passed = verdict is None or verdict.passed
    if result.outcome == "success" and commits > 0 and not diverged and passed:
        queue_utils.submit_completion(
            task,
            commits,
            result.turns,
            cost_usd=result.cost_usd,
            checks=[r.line() for r in verdict.results] if verdict else [],
            tip=tip,
            remark=result.details.get("caught_up", ""),
        )
        return moved(TaskState.PROVISIONAL)
    reason = _why_not(result, commits, verdict) or reason
    state = _retry_or_fail(task, agent, agents_cfg, reason, burned, mark)
    return report(task, result, commits, state.value, reason)


def _why_not(result: AgentResult, commits: int, verdict: checks.Verdict | None) -> str | None:
    """Why work that went well enough to be settled here goes no further (None: the
    attempt's own outcome says it)."""
    if diverged := result.details.get("diverged"):
        return f"its commits are not on the pull request: {diverged}"
    if verdict is not None:
        return f"{verdict.summary()}; {commits} commit{'s' * (commits != 1)} kept on the branch"
    if result.outcome == "success":
        return f"the agent finished without committing anything ({result.summary})"
    return None


def _retry_or_fail(
    task: Task, agent: dict, agents_cfg: dict, reason: str, burned: bool, mark: dict
) -> TaskState:
    """An attempt that counts: twice burned out goes to breakdown, then another attempt
    while any are left, then failed."""
    burned_total = int(task.headers.get("BURNED_OUT") or 0) + burned
    if burned and burned_total >= BURN_OUT_ATTEMPTS:
        queue_utils.recycle_to_breakdown(task, f"burned out twice; {reason}")
        return TaskState.BREAKDOWN
    if attempts_left(task, agents_cfg["max_attempts"]) > 0:
        queue_utils.requeue_task(
            task, reason, agent["name"], set_headers={"BURNED_OUT": burned_total, **mark}
        )
        return TaskState.INCOMING
    queue_utils.fail_task(task, f"attempts exhausted; {reason}", headers=mark)
    return TaskState.FAILED


def _give_back(
    task: Task, agent: dict, agents_cfg: dict, result: AgentResult, reason: str, mark: dict
) -> str | None:
    """Requeue the task without spending the attempt when the task was not why it failed,
    and say why (None: it was). A usage limit pauses the agent until its reset; a rate
    limit, or a cause no task can fix (``CAUSES``), holds the task back a while, so the
    next claim takes another task (and the breaker counts across tasks)."""
    if result.outcome == "rate_limited" and result.details.get("reset_at"):
        soonest = utcnow() + timedelta(seconds=agents_cfg["rate_limit_backoff_seconds"])
        until = max(datetime.fromisoformat(result.details["reset_at"]), soonest)  # not past
        why = f"usage limit reached; it resets at {format_time(until)}"
        agent_records.pause_until(agent["name"], until, why)
        reason = f"{agent['name']}'s {why}; the attempt is given back"
        queue_utils.requeue_task(task, reason, "octopoid", counted=False, set_headers=mark)
        return reason
    if result.outcome != "rate_limited" and result.cause is None:
        return None
    if result.cause is not None:
        reason = f"not counted, {CAUSES[result.cause]}: {result.summary}"
    wait = timedelta(seconds=agents_cfg["rate_limit_backoff_seconds"])
    queue_utils.requeue_task(
        task,
        f"{reason}; backing off {wait}",
        "octopoid",
        counted=False,
        set_headers={"NOT_BEFORE": format_time(utcnow() + wait), **mark},
    )
    return reason


def _release(task: Task, result: AgentResult, commits: int, exc: StorageError) -> AttemptReport:
    """The next move could not be written: give the claim back rather than hold it until
    its lease expires (its work stays on the branch). If even that fails, the reaper will."""
    print(redact(f"octopoid runner: {exc}"), file=sys.stderr)
    try:
        queue_utils.release_claim(task, f"could not move the task: {exc}", counted=False)
    except OctopoidError as again:
        print(redact(f"octopoid runner: could not give the claim back: {again}"), file=sys.stderr)
        return report(task, result, commits, "(still claimed)", str(exc))
    return report(task, result, commits, TaskState.INCOMING.value, str(exc))


def contained(result: AgentResult, back: BroughtBack, output: TailBuffer) -> AgentResult:
    """What octopoid found bringing the work back goes into the output (and so the notes);
    an attempt that reached outside its branch, or left what a ``sandbox`` bound refuses,
    fails, whatever the agent said."""
    for line in (*back.remarks, *back.breaches, *back.refused):
        output.feed(f"[octopoid] {line}\n".encode())
    if back.refused:
        summary = f"octopoid refused the attempt's work: {'; '.join(back.refused)}"
        return dataclasses.replace(result, outcome="error", summary=summary)
    if not back.breaches:
        return result
    summary = f"the agent reached outside its branch: {'; '.join(back.breaches)}"
    return dataclasses.replace(result, outcome="error", summary=summary, cause=None)


def publish(task: Task, space: Workspace, commits: int, result: AgentResult) -> None:
    """Push the branch when the attempt added to it; what went wrong with the remote goes in
    the notes (the next attempt, on any machine, reads why it starts where it does). Work
    put on top of a person's push to the pull request's branch is said in History too
    (``caught_up``); work that conflicts with it does not go to review (``diverged``)."""
    problems = [p for p in (space.started.remark, space.publish(commits)) if p]
    caught = space.caught_up
    if caught is not None and caught.count:
        said = caught.said(branches.branch_for(task.id))
        result.details["caught_up" if caught.tip else "diverged"] = said
        problems.append(said)
    if problems:
        add_notes_section(task.id, f"Branch — attempt {task.attempts}", "\n".join(problems))

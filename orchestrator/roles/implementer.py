"""One attempt of one task, whatever its role (an implementer's, a breakdown agent's, a
planner's): workspace, prompt, agent, notes, then the task's next state. A role's
differences are handed in as a ``Role`` (``base.Role``: ``IMPLEMENT`` here,
``breakdown.ROLE``, ``planner.ROLE``), picked once by ``role_for``.

The workspace and its walls come from ``sandbox`` (``prepare``); this module only decides.
Runs as its own process (``python -m orchestrator.roles.implementer TASK AGENT``, with the
claim's token in ``OCTOPOID_CLAIM_TOKEN``) so that a scheduler restart does not stop the
work, and the lease names this exact process. Every write to the task is fenced by the
token: a runner whose claim was taken back stops its agent, saves its notes as a lost
attempt and touches nothing else. Retry notes are saved on every path out: success,
failure, timeout, error, SIGTERM and a lost claim. The runner adopts orphans (subreaper)
and kills every process the attempt started before it exits.

Its size: the one attempt runner for every role, read top to bottom (claim, workspace,
prompt, agent, checks, ``_settle``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import resource
import sys
import time
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

from .. import box as sandbox
from .. import config
from ..backends import AgentRequest, AgentResult, get_backend
from ..backends.base import CAUSES, no_change_reason
from ..base import bytecode
from ..base.fsutil import TailBuffer, atomic_write
from ..base.processes import (
    TASK_ENV,
    TOKEN_ENV,
    become_subreaper,
    kill_claim_processes,
    kill_descendants,
    kill_marked,
    marked_processes,
)
from ..base.redaction import Redactor, every_agent_env, hide_also, redact, scrub
from ..box.bounds import ReadBackRefused
from ..box.workspace import BroughtBack, Workspace
from ..git import branches, core, history
from ..memory import lifecycle
from ..memory.open import open_memory
from ..memory.retrieval import relevant_notes
from ..memory.store import project_scope
from ..model.exceptions import (
    InvalidInput,
    LostClaim,
    OctopoidError,
    SandboxError,
    SetupFailed,
    StorageError,
)
from ..model.tasks import (
    PLANNING_ROLE,
    TIP_HEADER,
    Task,
    TaskId,
    TaskState,
    format_time,
    task_label,
    utcnow,
)
from ..queue import budgets, questions, recovery, steering
from ..queue import machine as queue_utils
from ..queue.leases import attempts_left
from ..queue.task_notes import add_notes_section, stdout_log_path
from . import agent_status, breakdown, checks, planner
from .base import (
    Claim,
    Ended,
    Role,
    Stopped,
    Terminated,
    ahead,
    deadline_seconds,
    find_agent,
    raise_on_stop_signals,
)
from .prompts import (
    MEMORY_HOWTO,
    NO_CHANGE_HOWTO,
    build_prompt,
    render_branch,
    render_memory,
    render_messages,
    render_previous_notes,
)
from .tools import AttemptTools

BURN_OUT_SHARE = 0.8  # of max_turns, with no commits: the attempt is burning out
BURN_OUT_ATTEMPTS = 2  # burned-out attempts before the task goes to breakdown
PROGRESS_EVERY_SECONDS = 5.0  # a chatty agent's progress costs a task write this often


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


def attempt_log_dir(task_id: str) -> Path:
    path = config.get_logs_dir() / task_label(task_id)
    path.mkdir(parents=True, exist_ok=True)
    return path


#: the implementer's role: its answer is its commits; the runner's own checks and moves
IMPLEMENT = Role(f"{MEMORY_HOWTO}\n\n{NO_CHANGE_HOWTO}")


def role_for(task: Task) -> Role:
    """The role an attempt of ``task`` runs as: a burned-out task's breakdown, a plan's
    carrying task's planner, otherwise the implementer."""
    if task.headers.get("PHASE") == "breakdown":
        return breakdown.ROLE
    return planner.ROLE if task.role == PLANNING_ROLE else IMPLEMENT


def instructions_for(role: str) -> str:
    path = config.get_prompts_dir() / f"{role}.md"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def run_attempt(task_id: str, agent_name: str, token: str) -> AttemptReport:
    """Run one attempt of a task the scheduler claimed for ``agent_name`` with ``token``."""
    task_id = TaskId(task_id)
    agents_cfg, cfg = config.load_agents(), config.load_config()
    agent = find_agent(agents_cfg, agent_name)
    hide_also(agent.get("env") or {})  # History, ERROR and runner.log hide them too
    claim = Claim(task_id, token, agents_cfg["lease_seconds"])
    task = claim.take_over(deadline_seconds(agent, queue_utils.get_task(task_id), cfg))
    role = role_for(task)
    records = agent_status.day_records(agents_cfg)
    try:
        grant = budgets.allowance(budgets.verdicts(task, agent_name, records, cfg, utcnow()))
    except InvalidInput as exc:  # a BUDGET header edited into nonsense: this task waits
        why = f"{exc}; `octopoid retry {task.label} --budget ...` sets a valid one"
        queue_utils.fail_task(task, why)
        return _report(task, AgentResult(None, "error", summary=why), 0, "failed", why)
    if (spent := grant.exhausted()) is not None:
        return _out_of_budget(task, spent, f"no attempt started: {spent.why()}")
    own, agent = agent, _within(agent, grant)
    _wait_for_earlier_attempts(task, agents_cfg["shutdown_grace_seconds"])
    read = ahead(lambda: _read_for_prompt(task, cfg))  # after the salvage: it is in the notes
    log_dir = attempt_log_dir(task_id)
    output = TailBuffer(
        cfg["notes"]["stdout_limit"],
        stdout_log_path(task_id),
        cfg["notes"]["log_cap_bytes"],
        Redactor(agent_env=every_agent_env()),  # its own env (hide_also) included
    )
    result, commits = AgentResult(None, "error", summary="the attempt did not start"), 0
    space, started, refused = None, time.monotonic(), 0
    try:
        backend = get_backend(agent["backend"])
        tools = partial(AttemptTools, task.id, task.attempts, agent=str(agent.get("name")))
        space = sandbox.prepare(task, agent, cfg, token, backend.needs(agent), tools)
        output.feed(f"{space.banner}\n".encode())
        space.set_up(output, claim.tick)  # workspace.setup: its words are the attempt's
        result = _work(task, role, agent, read, claim, log_dir, output, space)
        if (stopped := _stopped_by_budget(result, own, grant)) is not None:
            result.details["budget"] = stopped
    except Terminated as exc:  # not the attempt's failure: recorded as what it is
        result = AgentResult(None, "interrupted", summary=str(exc), details={"stop": "Terminated"})
    except LostClaim as exc:
        result = AgentResult(None, "error", summary=str(exc), details={"stop": "LostClaim"})
    except Stopped as exc:  # a person's stop: not the agent's failure
        details = {"stop": "Stopped", "by": exc.by}
        result = AgentResult(None, "interrupted", summary=str(exc), details=details)
    except OctopoidError as exc:  # a box, or a set-up, that fails is no task's fault
        cause = "box" if isinstance(exc, SandboxError) else None
        cause = "setup" if isinstance(exc, SetupFailed) else cause
        result = AgentResult(None, "error", summary=str(exc), cause=cause)
    finally:
        futures.wait([read])  # nothing of the prompt's reading outlives the attempt
        kill_claim_processes(token)  # whatever the agent left running dies with the attempt
        if space is not None:
            back = space.bring_back()
            commits, result = back.commits, _contained(result, back, output)
            refused = back.unreached
        result.details["seconds"] = time.monotonic() - started  # the task's wall time
        if result.outcome == "success" and commits == 0:
            why = no_change_reason(result.summary) or no_change_reason(output.text())
            if why:
                result.details["no_change"] = why
        _save_notes(task, agent_name, result, commits, output, log_dir)
        if space is not None and role.keeps_branch:
            _publish(task, space, commits, result)
    try:
        log = log_dir / f"attempt-{task.attempts}.log"
        ended = Ended(task, token, result, commits, space, log, agents_cfg, cfg)
        report = _next_move(role, ended, agent, claim)
    except LostClaim as exc:
        result.details["stop"] = "LostClaim"
        report = _report(task, result, commits, "(not ours any more)", str(exc))
    except Stopped as exc:  # a person's stop while the checks ran: given back all the same
        add_notes_section(task.id, f"Stopped — attempt {task.attempts}", str(exc))
        queue_utils.requeue_task(task, str(exc), exc.by, counted=False)
        report = _report(task, result, commits, TaskState.INCOMING.value, str(exc))
    except StorageError as exc:
        report = _release(task, result, commits, exc)
    finally:
        if space is not None:
            space.close()
        if not role.keeps_branch:  # nothing of its workspace is kept, nor its branch
            with contextlib.suppress(OctopoidError):
                branches.remove_worktree(core.open_repo(), task.id)
    agent_status.record_attempt(
        agent_name, task.label, result.outcome, result.turns, result.cost_usd,
        tokens=result.tokens_in + result.tokens_out, seconds=time.monotonic() - started,
        cause=result.cause, summary=result.summary, refused=refused,
    )  # fmt: skip
    return report


def _within(agent: dict, grant: budgets.Allowance) -> dict:
    """The agent's limits for this attempt: its own, or what a budget has left if less."""
    out = dict(agent)
    if grant.turns < out["max_turns"]:
        out["max_turns"] = max(1, math.floor(grant.turns))
    if grant.seconds < out["timeout_seconds"]:
        out["timeout_seconds"] = max(1, math.floor(grant.seconds))
    own_usd = out.get("max_budget_usd")
    if grant.usd < (math.inf if own_usd is None else own_usd):
        out["max_budget_usd"] = grant.usd
    if grant.tokens < math.inf:
        out["max_tokens_total"] = math.floor(grant.tokens)
    return out


#: Which of an agent's stops may be a budget's: the dimensions each outcome stands for.
STOPS = {"budget": ("usd", "tokens"), "max_turns": ("turns",), "timeout": ("seconds",)}


def _stopped_by_budget(
    result: AgentResult, own: dict, grant: budgets.Allowance
) -> budgets.Verdict | None:
    """The budget that stopped the attempt: its limit (not the agent's own) was the tighter
    one, and the attempt really used it up (a "budget" stop is dollars or tokens: only the
    one it reached counts)."""
    mine = {
        "usd": own.get("max_budget_usd") or math.inf,
        "tokens": math.inf,
        "turns": own["max_turns"],
        "seconds": own["timeout_seconds"],
    }
    used = {
        "usd": result.cost_usd or 0.0,
        "tokens": result.tokens_in + result.tokens_out,
        "turns": result.turns,
        "seconds": result.details.get("seconds", math.inf),  # a timeout used its time
    }
    for dimension in STOPS.get(result.outcome, ()):
        left = getattr(grant, dimension)
        reached = result.outcome != "budget" or used[dimension] >= left * 0.999
        if dimension in grant.binding and left < mine[dimension] and reached:
            return grant.binding[dimension]
    return None


def _out_of_budget(task: Task, spent: budgets.Verdict, why: str) -> AttemptReport:
    """A budget is spent: a task's own waits in failed/ for a person to give it more; an
    agent's or the project's day gives the attempt back, and the scheduler claims nothing
    under it until the day turns (``stalls``)."""
    result = AgentResult(None, "budget", summary=why)
    if spent.scope == "task":
        more = f"`octopoid retry {task.label} --budget usd=...` gives it more"
        queue_utils.fail_task(task, f"{why}; {more}")
        return _report(task, result, 0, TaskState.FAILED.value, why)
    queue_utils.requeue_task(task, why, "octopoid", counted=False)
    return _report(task, result, 0, TaskState.INCOMING.value, why)


def _next_move(role: Role, ended: Ended, agent: dict, claim: Claim) -> AttemptReport:
    """Record the usage, then the role's move; the implementer's runs the checks when
    there is work to check, then moves the task."""
    task, result, commits, space = ended.task, ended.result, ended.commits, ended.space
    tokens = result.tokens_in + result.tokens_out
    seconds = result.details.get("seconds", 0.0)
    queue_utils.record_usage(task, result.turns, result.cost_usd, tokens=tokens, seconds=seconds)
    if (spent := result.details.get("budget")) is not None and commits == 0:
        return _out_of_budget(task, spent, f"the attempt stopped at {spent.named()}")
    if role.settle is not None:
        state, why = role.settle(ended)
        return _report(task, result, commits, state, why)
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
    return _settle(task, agent, ended.agents_cfg, result, commits, verdict, tip)


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


def _publish(task: Task, space: Workspace, commits: int, result: AgentResult) -> None:
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


def _contained(result: AgentResult, back: BroughtBack, output: TailBuffer) -> AgentResult:
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


def _release(task: Task, result: AgentResult, commits: int, exc: StorageError) -> AttemptReport:
    """The next move could not be written: give the claim back rather than hold it until
    its lease expires (its work stays on the branch). If even that fails, the reaper will."""
    print(redact(f"octopoid runner: {exc}"), file=sys.stderr)
    try:
        queue_utils.release_claim(task, f"could not move the task: {exc}", counted=False)
    except OctopoidError as again:
        print(redact(f"octopoid runner: could not give the claim back: {again}"), file=sys.stderr)
        return _report(task, result, commits, "(still claimed)", str(exc))
    return _report(task, result, commits, TaskState.INCOMING.value, str(exc))


def _wait_for_earlier_attempts(task: Task, grace: float) -> None:
    """Start only once every process of an earlier attempt of this task is gone.

    A requeued or reaped attempt is told to stop; this is the guarantee that two agents
    never share the workspace, whoever moved the task and however its runner died. What an
    earlier runner streamed but never saved becomes that attempt's notes.
    """
    deadline = time.monotonic() + grace
    marks = {TASK_ENV: task.label, config.ROOT_ENV: str(config.find_project_root())}
    while marked_processes(**marks) and time.monotonic() < deadline:
        time.sleep(0.1)  # this runner has started nothing yet: all of these are earlier
    kill_marked(**marks)
    if task.attempts > 1:
        recovery.salvage_lost_output(
            task, task.attempts - 1, "an earlier runner stopped before saving its notes"
        )


def _save_notes(
    task: Task,
    agent_name: str,
    result: AgentResult,
    commits: int,
    output: TailBuffer,
    log_dir: Path,
) -> None:
    given_back = f"; not counted: {CAUSES[result.cause]}" if result.cause else ""
    output.feed(
        f"\n[octopoid] attempt {task.attempts}: {result.outcome}: {result.summary}; "
        f"{commits} commit{'s' * (commits != 1)}{given_back}\n".encode()
    )
    output.close()
    queue_utils.save_task_notes(
        task.id,
        agent_name,
        output.text(),
        commits,
        result.turns,
        attempt=task.attempts,
        dropped_chars=output.dropped_chars,
        cost_usd=result.cost_usd,
    )
    with contextlib.suppress(FileNotFoundError):  # a salvager may have archived it already
        os.replace(stdout_log_path(task.id), log_dir / f"attempt-{task.attempts}.log")


def _branch_block(task: Task, space: Workspace) -> str:
    """What the task's branch already holds from earlier attempts, for the prompt (two
    git calls, saved where the branch is its base's tip: a first attempt's)."""
    held: list[str] = []
    behind = 0
    if not space.at_base:
        held, behind = history.branch_history(core.open_repo(), task.id, space.base)
    branch = branches.branch_for(task.id)
    return render_branch(branch, space.base, [scrub(line, False) for line in held], behind)


def _asked(task: Task, result: AgentResult, commits: int, space: Workspace) -> AttemptReport | None:
    """What the agent asked for through its channel, if anything: a split held for a
    person's approval, or "needs input" until a person answers its question."""
    reason = f"{result.outcome}: {result.summary}; {commits} commit{'s' * (commits != 1)}"
    if space.channel.toolbox.proposed is not None:
        subtasks = space.channel.toolbox.proposed
        queue_utils.propose_split(task, breakdown.proposal_text(subtasks))
        why = f"{len(subtasks)} subtasks proposed; waiting for `octopoid approve`"
        return _report(task, result, commits, TaskState.PROVISIONAL.value, why)
    if (question := questions.unanswered(task)) is not None:
        questions.hold_for_answer(task, question, reason)
        return _report(task, result, commits, TaskState.INCOMING.value, f"needs input: {question}")
    return None


def _work(
    task: Task,
    role: Role,
    agent: dict,
    read: Future[tuple[str, str]],
    claim: Claim,
    log_dir: Path,
    output: TailBuffer,
    space: Workspace,
) -> AgentResult:
    role.prepare(task, space)
    branch = _branch_block(task, space)
    notes, memory = read.result()
    said = render_messages(steering.take(task.id))
    instructions = instructions_for(role.instructions or task.role)
    prompt = build_prompt(instructions, task, notes, memory, role.howto, branch, said)
    # a copy for people to read, as the attempt's log: not worth two fsyncs before the agent
    atomic_write(log_dir / f"attempt-{task.attempts}.prompt.md", prompt, sync=False)
    prompt_file = space.write_prompt(prompt)
    space.box.env["OCTOPOID_PROMPT_FILE"] = str(prompt_file)

    shown = [0.0]  # when the last progress line was written

    def tick() -> None:
        claim.tick()
        if (too_big := space.over_bounds()) is not None:
            raise ReadBackRefused(too_big)  # the attempt stops; bring_back says why
        if time.monotonic() - shown[0] >= PROGRESS_EVERY_SECONDS:
            progress = space.take_progress()
            if progress is not None:
                queue_utils.report_progress(task, progress, token=claim.token)
                shown[0] = time.monotonic()

    request = AgentRequest(
        task_id=task.label,
        prompt=prompt,
        prompt_file=prompt_file,
        box=space.box,
        options=agent,
        timeout_seconds=agent["timeout_seconds"],
        max_turns=agent["max_turns"],
        max_budget_usd=agent.get("max_budget_usd"),
        max_tokens_total=agent.get("max_tokens_total"),
        on_tick=tick,
        channel=space.channel,
        inbox=lambda: steering.as_turn(steering.take(task.id)),
    )
    return get_backend(agent["backend"]).run(request, output)


def _read_for_prompt(task: Task, cfg: dict) -> tuple[str, str]:
    """The earlier attempts' notes and the memory block for the prompt (its working notes
    seeded on the way): all the prompt needs that is not the workspace's, so it is read
    while the workspace is made (``ahead``)."""
    notes = render_previous_notes(
        queue_utils.get_task_notes(task.id), cfg["notes"]["prompt_budget"]
    )
    lifecycle.seed_task_notes(task)
    return notes, _memory_block(task, cfg)


def _memory_block(task: Task, cfg: dict) -> str:
    store = open_memory()
    try:
        lifecycle.index_main_notes(store)
        chosen = relevant_notes(task, store, scope=project_scope(), budget=cfg["memory"]["budget"])
    finally:
        store.close()
    return render_memory(chosen)


def _report(
    task: Task, result: AgentResult, commits: int, state: str, reason: str
) -> AttemptReport:
    return AttemptReport(
        task.label, task.attempts, result.outcome, commits, result.turns, state, reason
    )


def _settle(
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
    burned_total = int(task.headers.get("BURNED_OUT") or 0) + burned

    def report(state: TaskState | str) -> AttemptReport:
        value = state.value if isinstance(state, TaskState) else state
        return _report(task, result, commits, value, reason)

    if stop == "LostClaim":
        return report("(not ours any more)")
    if stop in ("Terminated", "Stopped"):  # given back: neither counts against the task
        by = result.details.get("by", "octopoid")
        queue_utils.requeue_task(task, reason, by, counted=False, set_headers=mark)
        return report(TaskState.INCOMING)
    if (given_back := _give_back(task, agent, agents_cfg, result, reason, mark)) is not None:
        reason = given_back
        return report(TaskState.INCOMING)
    if result.outcome == "success" and commits == 0 and result.details.get("no_change"):
        why = result.details["no_change"]
        queue_utils.submit_completion(
            task, 0, result.turns, cost_usd=result.cost_usd, no_change=why, tip=tip
        )
        reason = f"no change needed: {why}"
        return report(TaskState.PROVISIONAL)
    diverged = result.details.get("diverged")
    if result.outcome == "success" and commits > 0 and not diverged and _passed(verdict):
        queue_utils.submit_completion(
            task,
            commits,
            result.turns,
            cost_usd=result.cost_usd,
            checks=[r.line() for r in verdict.results] if verdict else [],
            tip=tip,
            remark=result.details.get("caught_up", ""),
        )
        return report(TaskState.PROVISIONAL)
    if diverged:
        reason = f"its commits are not on the pull request: {diverged}"
    elif verdict is not None:
        reason = f"{verdict.summary()}; {commits} commit{'s' * (commits != 1)} kept on the branch"
    elif result.outcome == "success":
        reason = f"the agent finished without committing anything ({result.summary})"
    if burned and burned_total >= BURN_OUT_ATTEMPTS:
        queue_utils.recycle_to_breakdown(task, f"burned out twice; {reason}")
        return report(TaskState.BREAKDOWN)
    if attempts_left(task, agents_cfg["max_attempts"]) > 0:
        queue_utils.requeue_task(
            task, reason, agent["name"], set_headers={"BURNED_OUT": burned_total, **mark}
        )
        return report(TaskState.INCOMING)
    queue_utils.fail_task(task, f"attempts exhausted; {reason}", headers=mark)
    return report(TaskState.FAILED)


def _passed(verdict: checks.Verdict | None) -> bool:
    return verdict is None or verdict.passed


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
        agent_status.pause_until(agent["name"], until, why)
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


def main(argv: list[str] | None = None) -> int:
    """Runner entry point: one attempt, a JSON report on stdout."""
    bytecode.user_env(os.environ)  # the agent and the checks get the user's own settings
    args = argv if argv is not None else sys.argv[1:]
    token = os.environ.get(TOKEN_ENV, "")
    if len(args) != 2 or not token:
        print(
            f"usage: {TOKEN_ENV}=<claim token> python -m orchestrator.roles.implementer "
            "TASK-ID AGENT-NAME",
            file=sys.stderr,
        )
        return 2
    raise_on_stop_signals()
    become_subreaper()
    try:
        report = run_attempt(args[0], args[1], token)
    except OctopoidError as exc:
        print(redact(f"octopoid runner: {exc}"), file=sys.stderr)
        return exc.exit_code
    finally:
        kill_descendants()  # orphans the attempt left, adopted by us as subreaper
    report.peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report.peak_children_rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(redact(json.dumps(report.__dict__)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One attempt of one task, whatever its role (an implementer's, a breakdown agent's, a
planner's): workspace, prompt, agent, notes, then the task's next move (``outcome``). The
role's differences come in as a ``Role`` (``base.Role``), chosen by the runner's entry
(``implementer.role_for``) from the task it hands down: this module knows no role by name.

The workspace and its walls come from ``box`` (``prepare``); this module only decides.
Runs as its own process (``python -m orchestrator.roles.implementer TASK AGENT``, with the
claim's token in ``OCTOPOID_CLAIM_TOKEN``) so that a scheduler restart does not stop the
work, and the lease names this exact process. Every write to the task is fenced by the
token: a runner whose claim was taken back stops its agent, saves its notes as a lost
attempt and touches nothing else. Retry notes are saved on every path out: success,
failure, timeout, error, SIGTERM and a lost claim. The runner adopts orphans (subreaper)
and kills every process the attempt started before it exits.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from functools import partial
from pathlib import Path

from .. import box as sandbox
from .. import config
from ..backends import AgentRequest, AgentResult, get_backend
from ..backends.base import CAUSES, no_change_reason
from ..base.fsutil import TailBuffer, atomic_write
from ..base.processes import (
    TASK_ENV,
    kill_claim_processes,
    kill_marked,
    marked_processes,
)
from ..base.redaction import Redactor, every_agent_env, hide_also, scrub
from ..box.bounds import ReadBackRefused
from ..box.workspace import Workspace
from ..git import branches, core, history
from ..git import remote as git_remote
from ..memory import lifecycle
from ..memory.open import open_memory
from ..memory.retrieval import relevant_notes
from ..memory.staleness import FILE_CHARS
from ..memory.store import project_scope
from ..model.exceptions import InvalidInput, LostClaim, OctopoidError, SandboxError, SetupFailed
from ..model.tasks import Task, task_label, utcnow
from ..queue import agent_records, budgets, recovery, steering
from ..queue import machine as queue_utils
from ..queue.task_notes import stdout_log_path
from . import agent_status, outcome
from .base import (
    Claim,
    Ended,
    Role,
    Stopped,
    Terminated,
    ahead,
    deadline_seconds,
    find_agent,
)
from .prompts import (
    build_prompt,
    render_branch,
    render_memory,
    render_messages,
    render_previous_notes,
)
from .tools import AttemptTools

PROGRESS_EVERY_SECONDS = 5.0  # a chatty agent's progress costs a task write this often


def attempt_log_dir(task_id: str) -> Path:
    path = config.get_logs_dir() / task_label(task_id)
    path.mkdir(parents=True, exist_ok=True)
    return path


def run(task: Task, agent_name: str, token: str, role: Role) -> outcome.AttemptReport:
    """Run one attempt, as ``role``, of ``task``, which the scheduler claimed for
    ``agent_name`` with ``token``."""
    agents_cfg, cfg = config.load_agents(), config.load_config()
    agent = find_agent(agents_cfg, agent_name)
    hide_also(agent.get("env") or {})  # History, ERROR and runner.log hide them too
    claim = Claim(task.id, token, agents_cfg["lease_seconds"])
    task = claim.take_over(deadline_seconds(agent, task, cfg))
    records = agent_records.day_records(agents_cfg)
    try:
        grant = budgets.allowance(budgets.verdicts(task, agent_name, records, cfg, utcnow()))
    except InvalidInput as exc:  # a BUDGET header edited into nonsense: this task waits
        why = f"{exc}; `octopoid retry {task.label} --budget ...` sets a valid one"
        queue_utils.fail_task(task, why)
        return outcome.report(task, AgentResult(None, "error", summary=why), 0, "failed", why)
    if (spent := grant.exhausted()) is not None:
        return outcome.out_of_budget(task, spent, f"no attempt started: {spent.why()}")
    own, agent = agent, _within(agent, grant)
    _wait_for_earlier_attempts(task, agents_cfg["shutdown_grace_seconds"])
    started = time.monotonic()
    by_budget = partial(_stopped_by_budget, own=own, grant=grant)
    result, commits, space, refused = _attempt(task, role, agent, claim, cfg, by_budget)
    try:
        log = attempt_log_dir(task.id) / f"attempt-{task.attempts}.log"
        ended = Ended(task, token, result, commits, space, log, agents_cfg, cfg)
        report = outcome.decide(role, ended, agent, claim)
    finally:
        if space is not None:
            space.close()
        if not role.keeps_branch:  # nothing of its workspace is kept, nor its branch
            with contextlib.suppress(OctopoidError):
                branches.remove_worktree(core.open_repo(), task.id)
    agent_records.record_attempt(
        agent_name, task.label, result.outcome, result.turns, result.cost_usd,
        tokens=result.tokens_in + result.tokens_out, seconds=time.monotonic() - started,
        failure=agent_status.failure(result.cause, result.summary), refused=refused,
    )  # fmt: skip
    return report


def _attempt(
    task: Task,
    role: Role,
    agent: dict,
    claim: Claim,
    cfg: dict,
    by_budget: Callable[[AgentResult], budgets.Verdict | None],
) -> tuple[AgentResult, int, Workspace | None, int]:
    """The agent's run in its workspace, and what it left: its result, the commits brought
    back, the workspace (None: never made) and how many destinations its network refused.
    Whatever stops it becomes its result (``by_budget``: the budget that stopped it); its
    notes are saved on every way out."""
    read = ahead(lambda: _read_for_prompt(task, cfg))  # after the salvage: it is in the notes
    log_dir = attempt_log_dir(task.id)
    output = TailBuffer(
        cfg["notes"]["stdout_limit"],
        stdout_log_path(task.id),
        cfg["notes"]["log_cap_bytes"],
        Redactor(agent_env=every_agent_env()),  # its own env (hide_also) included
    )
    result, commits = AgentResult(None, "error", summary="the attempt did not start"), 0
    space, started, refused = None, time.monotonic(), 0
    try:
        backend = get_backend(agent["backend"])
        toolbox = AttemptTools(task.id, task.attempts, agent=str(agent.get("name")))
        space = sandbox.prepare(task, agent, cfg, claim.token, backend.needs(agent), toolbox)
        output.feed(f"{space.banner}\n".encode())
        space.set_up(output, claim.tick)  # workspace.setup: its words are the attempt's
        result = _work(task, role, agent, read, claim, log_dir, output, space)
        if (stopped := by_budget(result)) is not None:
            result.details["budget"] = stopped
    except OctopoidError as exc:
        result = _stopped(exc)
    finally:
        futures.wait([read])  # nothing of the prompt's reading outlives the attempt
        kill_claim_processes(claim.token)  # whatever the agent left running dies with it
        if space is not None:
            back = space.bring_back()
            commits, result = back.commits, outcome.contained(result, back, output)
            refused = back.unreached
        result.details["seconds"] = time.monotonic() - started  # the task's wall time
        if result.outcome == "success" and commits == 0:
            why = no_change_reason(result.summary) or no_change_reason(output.text())
            if why:
                result.details["no_change"] = why
        _save_notes(task, agent["name"], result, commits, output, log_dir)
        if space is not None and role.keeps_branch:
            outcome.publish(task, space, commits, result)
    return result, commits, space, refused


def _stopped(exc: OctopoidError) -> AgentResult:
    """What stopped the attempt, as its result: a shutdown, a lost claim and a person's
    stop are recorded as what they are, not as the attempt's failure; a box, or a set-up,
    that fails is no task's fault."""
    if isinstance(exc, Terminated):
        return AgentResult(None, "interrupted", summary=str(exc), details={"stop": "Terminated"})
    if isinstance(exc, LostClaim):
        return AgentResult(None, "error", summary=str(exc), details={"stop": "LostClaim"})
    if isinstance(exc, Stopped):
        details = {"stop": "Stopped", "by": exc.by}
        return AgentResult(None, "interrupted", summary=str(exc), details=details)
    cause = "box" if isinstance(exc, SandboxError) else None
    cause = "setup" if isinstance(exc, SetupFailed) else cause
    return AgentResult(None, "error", summary=str(exc), cause=cause)


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
    if space.at_base:  # nothing held: no block
        return ""
    held, behind = history.branch_history(core.open_repo(), task.id, space.base)
    branch = branches.branch_for(task.id)
    return render_branch(branch, space.base, [scrub(line, False) for line in held], behind)


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
    path = config.get_prompts_dir() / f"{role.instructions or task.role}.md"
    instructions = path.read_text(encoding="utf-8") if path.exists() else ""
    prompt = build_prompt(instructions, task, notes, memory, role.howto, branch, said)
    # a copy for people to read, as the attempt's log: not worth two fsyncs before the agent
    atomic_write(log_dir / f"attempt-{task.attempts}.prompt.md", prompt, sync=False)
    prompt_file = space.write_prompt(prompt)
    space.box.env["OCTOPOID_PROMPT_FILE"] = str(prompt_file)

    shown = [0.0]  # when the last progress line was written
    toolbox = space.channel.toolbox
    assert isinstance(toolbox, AttemptTools)  # the one ``_attempt`` handed to the box

    def tick() -> None:
        claim.tick()
        if (too_big := space.over_bounds()) is not None:
            raise ReadBackRefused(too_big)  # the attempt stops; bring_back says why
        if time.monotonic() - shown[0] >= PROGRESS_EVERY_SECONDS:
            progress = toolbox.take_progress()
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
        repo, remote = core.open_repo(), git_remote.remote_name()
        # the attempt starts from the remote's base, or this machine's where the remote
        # lacks it (``task_tips.start``): without its ref every file would read as missing
        tracking = git_remote.remote_ref(remote, task.branch) if remote else None
        base = tracking if tracking and branches.ref_tip(repo, tracking) else task.branch
        at_base = partial(history.file_text, repo, base, limit=FILE_CHARS)
        budget = cfg["memory"]["budget"]
        chosen = relevant_notes(task, store, scope=project_scope(), budget=budget, source=at_base)
    finally:
        store.close()
    return render_memory(chosen)

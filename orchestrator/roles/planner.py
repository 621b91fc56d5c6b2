"""The planner role: a goal drafted into a plan of dependent tasks by an agent.

``octopoid plan "goal"`` runs an agent with ``role: plan`` (any backend) once, the way an
attempt runs: a task carries the run (title ``Plan: ...``, the goal as its context) so the
claim, its lease, the sandbox's workspace and channel, the notes and the log are the
queue's own. That task's role is ``planning``, which no agent has: the scheduler never
claims it; this process claims it by id. The agent drafts with the channel's MCP tools
``draft_task`` and ``draft_dependency`` (each checked as it comes), or answers with one
```plan block (the breakdown's format, with priority, role and blockers named by
position); ``plans`` checks it and stores it as a draft for a person to review. The
carrying task ends in done with ``PLAN: PLAN-<n>``, or in failed with why the plan was
refused (the answer is in its notes).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from .. import agent_status, config, git_utils, plans, queue_utils, sandbox
from ..backends import AgentRequest, AgentResult, get_backend
from ..exceptions import ConfigError, InvalidTask, OctopoidError, SandboxError
from ..fsutil import TailBuffer, atomic_write
from ..leases import claim_token
from ..processes import kill_claim_processes
from ..prompts import build_prompt
from ..redaction import Redactor, every_agent_env, hide_also
from ..tasks import DEFAULT_BRANCH, PLANNING_ROLE, Task, one_line
from . import breakdown
from .base import Claim, deadline_seconds
from .implementer import attempt_log_dir, instructions_for

PLAN_ROLE = "plan"  # agents.yaml: an agent with this role drafts plans
TITLE_CHARS = 120  # of the goal, in the carrying task's title

ANSWER_FORMAT = f"""## How to answer

Do not implement anything. Plan the goal above as 2 to {plans.MAX_PLAN_TASKS} tasks, each small
enough for one agent's attempt, and say which task must be done before which. Read the
repository as much as you need. Draft each task with the `draft_task` tool and each
"must be done before" with `draft_dependency`, if you have them; otherwise print the plan
as ONE fenced block of JSON, exactly:

```plan
[
  {{"title": "short imperative title", "context": "what to do and what to know",
   "criteria": ["a checkable criterion"], "priority": "P1", "depends_on": []}},
  {{"title": "...", "context": "...", "criteria": ["..."], "depends_on": [1]}}
]
```

`depends_on` lists the tasks (by position, 1 is the first) that must be done before this
one; tasks that do not depend on each other may run at the same time. `priority` is P0
(most urgent) to P3; `role` (optional) names the kind of agent, `implement` by default.
A person reviews the plan before any task is created.
"""


def plan_agent(agents_cfg: dict, name: str | None = None) -> dict:
    """The agent that plans: ``name``, or the first with ``role: plan``."""
    for agent in agents_cfg["agents"]:
        if agent["role"] == PLAN_ROLE and name in (None, agent["name"]):
            return agent
    if name is not None:
        raise ConfigError(f"no agent named {name!r} with role: {PLAN_ROLE} in agents.yaml")
    raise ConfigError(
        f"no agent has role: {PLAN_ROLE}; add one to .octopoid/agents.yaml (any backend), "
        f"e.g. `- {{name: planner, role: {PLAN_ROLE}, backend: claude-code}}`"
    )


def plan_goal(goal: str, agent_name: str | None = None, branch: str = DEFAULT_BRANCH) -> plans.Plan:
    """Run the planner on ``goal`` and store its answer as a draft plan; ``InvalidTask``
    (the plan refused, with why) or another ``OctopoidError`` if there is none."""
    agents_cfg, cfg = config.load_agents(), config.load_config()
    agent = plan_agent(agents_cfg, agent_name)
    hide_also(agent.get("env") or {})  # History, ERROR and the log hide them, as an attempt's
    if (why := sandbox.problem()) is not None:
        raise SandboxError(why)
    task = _carrying_task(goal, agent["name"], agents_cfg["lease_seconds"], branch)
    claim = Claim(task.id, claim_token(task), agents_cfg["lease_seconds"])
    task = claim.take_over(deadline_seconds(agent, task, cfg))
    log = attempt_log_dir(task.id) / f"attempt-{task.attempts}.log"
    drafted = plans.draft(goal, branch, planned_by=f"{agent['name']} ({task.label})")
    started = time.monotonic()
    try:
        result = _run(task, agent, cfg, claim, log, drafted)
    except BaseException:  # Ctrl-C: the carrying task must not wait for a reaper
        with contextlib.suppress(OctopoidError):
            queue_utils.fail_task(task, "the planning was interrupted", token=claim.token)
        raise
    agent_status.record_attempt(  # the planner's spend counts in its agent's day, as any
        agent["name"], task.label, result.outcome, result.turns, result.cost_usd,
        tokens=result.tokens_in + result.tokens_out, seconds=time.monotonic() - started,
    )  # fmt: skip
    return _settle(task, drafted, result, log)


def _carrying_task(goal: str, agent_name: str, lease_seconds: int, branch: str) -> Task:
    """The task that carries this run, claimed at once by this process (by id)."""
    title = f"Plan: {one_line(goal, TITLE_CHARS)}"
    criteria = ["a ```plan block a person can review"]
    task = queue_utils.create_task(
        title, role=PLANNING_ROLE, context=goal, criteria=criteria, branch=branch
    )
    claimed = queue_utils.claim_task(
        None, agent_name, task=task, reason="plan", lease_seconds=lease_seconds
    )
    assert claimed is not None  # made a moment ago by this process: only it knows the id
    return claimed


def _run(
    task: Task, agent: dict, cfg: dict, claim: Claim, log: Path, drafted: plans.Plan
) -> AgentResult:
    """The agent's run in its workspace; its output (redacted) in ``log``; what it drafts
    with the channel's draft_task and draft_dependency tools goes into ``drafted``. What
    it committed is not kept: a plan is its answer, not a branch."""
    output = TailBuffer(
        cfg["notes"]["stdout_limit"],
        log,
        cfg["notes"]["log_cap_bytes"],
        Redactor(agent_env=every_agent_env()),
    )
    backend, space = get_backend(agent["backend"]), None
    result = AgentResult(None, "error", summary="the planner did not start")
    try:
        space = sandbox.prepare(task, agent, cfg, claim.token, backend.needs(agent))
        space.channel.plan = drafted  # the drafting tools, for this attempt only
        output.feed(f"{space.banner}\n".encode())
        prompt = build_prompt(instructions_for(PLAN_ROLE), task, howto=ANSWER_FORMAT)
        atomic_write(log.with_suffix(".prompt.md"), prompt)
        request = AgentRequest(
            task_id=task.label,
            prompt=prompt,
            prompt_file=space.write_prompt(prompt),
            box=space.box,
            options=agent,
            timeout_seconds=agent["timeout_seconds"],
            max_turns=agent["max_turns"],
            max_budget_usd=agent.get("max_budget_usd"),
            on_tick=claim.tick,
            channel=space.channel,
        )
        space.box.env["OCTOPOID_PROMPT_FILE"] = str(request.prompt_file)
        result = backend.run(request, output)
    except OctopoidError as exc:
        result = AgentResult(None, "error", summary=str(exc))
    finally:
        kill_claim_processes(claim.token)  # nothing the planner started outlives it
        if space is not None:
            space.bring_back()
            for line in space.network_lines():  # what its network refused, in its notes
                output.feed(f"[octopoid] {line}\n".encode())
            space.close()
            with contextlib.suppress(OctopoidError):
                git_utils.remove_worktree(git_utils.open_repo(), task.id)
        output.close()
    queue_utils.save_task_notes(
        task.id, agent["name"], output.text(), 0, result.turns, attempt=task.attempts
    )
    return result


def _settle(task: Task, drafted: plans.Plan, result: AgentResult, log: Path) -> plans.Plan:
    """The drafted tasks (by the tools, or else the answer's ```plan block) as a stored
    draft plan and the carrying task done; or failed, and why."""
    token = claim_token(task)
    try:
        if result.outcome != "success":
            raise InvalidTask(f"the planner did not finish: {result.outcome}: {result.summary}")
        if drafted.tasks:
            plans.validate(drafted)
        else:
            drafted = plans.from_answer(drafted, breakdown.answer_text(log))
        plan = plans.add(drafted)
    except InvalidTask as exc:
        why = f"the plan was refused: {exc}"
        queue_utils.fail_task(task, why, token=token)
        raise InvalidTask(f"{why} (the planner's answer: `octopoid notes {task.label}`)") from None
    queue_utils.complete_task(task, f"drafted {plan.id}", token=token, headers={"PLAN": plan.id})
    return plan

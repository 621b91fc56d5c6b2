"""The planner role: a goal drafted into a plan of dependent tasks by an agent.

``octopoid plan "goal"`` runs an agent with ``role: plan`` (any backend) once, as every
attempt runs: a task carries the run (title ``Plan: ...``, the goal as its context), this
process claims it by id, and the one attempt runner (``attempt``, in a process of its
own) takes the claim over, so its lease, budget, sandbox, channel, memory, notes and log
are the queue's own. That task's role is ``planning``, which no agent has: the scheduler
never claims it. The agent drafts with the channel's MCP tools ``draft_task`` and
``draft_dependency`` (each checked as it comes), or answers with one ```plan block (the
breakdown's format, with priority, role and blockers named by position); ``settle`` checks
it and stores it as a draft for a person to review. The carrying task ends in done with
``PLAN: PLAN-<n>``, or in failed with why the plan was refused (the answer is in its notes).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

from .. import box as sandbox
from .. import config
from ..model.exceptions import ConfigError, InvalidTask, OctopoidError, SandboxError
from ..model.tasks import DEFAULT_BRANCH, PLANNING_ROLE, Task, TaskState, one_line
from ..queue import machine as queue_utils
from ..queue.leases import claim_token
from . import breakdown, plans
from .base import RUNNER, Ended, Role, runner_env

if TYPE_CHECKING:
    from ..box.workspace import Workspace

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
    agents_cfg = config.load_agents()
    agent = plan_agent(agents_cfg, agent_name)
    if (why := sandbox.problem()) is not None:
        raise SandboxError(why)
    task = _carrying_task(goal, agent["name"], agents_cfg["lease_seconds"], branch)
    said = _run_attempt(task, agent["name"])
    task = queue_utils.get_task(task.id)
    if plan_id := task.headers.get("PLAN"):
        return plans.load(plan_id)
    if task.state is TaskState.INCOMING:  # given back (a budget's day spent): no one claims it
        queue_utils.fail_task(task, said or "the planner's attempt was given back")
        task = queue_utils.get_task(task.id)
    why = task.headers.get("ERROR") or said or "the planner did not finish"
    raise InvalidTask(f"{why} (the planner's answer: `octopoid notes {task.label}`)")


def _run_attempt(task: Task, agent_name: str) -> str:
    """The attempt, run by the runner every attempt runs in, in a session of its own (a
    Ctrl-C here stops it as a scheduler's shutdown does: its notes are kept); what it said
    of its end."""
    root = config.find_project_root()
    argv = [sys.executable, *RUNNER, task.id, agent_name]
    env = runner_env(root, task, claim_token(task))
    with subprocess.Popen(
        argv, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    ) as runner:  # fmt: skip
        try:
            out, err = runner.communicate()
        except KeyboardInterrupt:
            runner.send_signal(signal.SIGTERM)
            runner.communicate()
            raise
    if runner.returncode != 0:
        raise OctopoidError(err.strip().splitlines()[-1] if err.strip() else "the runner failed")
    try:
        return str(json.loads(out.strip().splitlines()[-1])["reason"])
    except (ValueError, IndexError, KeyError, TypeError):
        return ""


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


def draft_for(task: Task) -> plans.Plan:
    """The empty plan a planner's attempt drafts into: its carrying task's goal."""
    by = f"{task.headers.get('CLAIMED_BY', 'planner')} ({task.label})"
    return plans.draft(task.context, task.branch, planned_by=by)


def settle(ended: Ended) -> tuple[str, str]:
    """The drafted tasks (by the tools, or else the answer's ```plan block) as a stored
    draft plan and the carrying task done; or failed, and why: (its state, why)."""
    task, result = ended.task, ended.result
    if result.details.get("stop") == "LostClaim":
        return "(not ours any more)", result.summary
    drafted = ended.space.channel.toolbox.plan if ended.space is not None else None
    drafted = drafted or draft_for(task)
    try:
        if result.outcome != "success":
            raise InvalidTask(f"the planner did not finish: {result.outcome}: {result.summary}")
        if drafted.tasks:
            plans.validate(drafted)
        else:
            drafted = plans.from_answer(drafted, breakdown.answer_text(ended.log))
        plan = plans.add(drafted)
    except InvalidTask as exc:
        why = f"the plan was refused: {exc}"
        queue_utils.fail_task(task, why, token=ended.token)
        return TaskState.FAILED.value, why
    done = {"PLAN": plan.id}
    queue_utils.complete_task(task, f"drafted {plan.id}", token=ended.token, headers=done)
    return TaskState.DONE.value, f"drafted {plan.id}"


def _prepare(task: Task, space: Workspace) -> None:
    """Its drafting tools fill the plan, for this attempt."""
    space.channel.toolbox.plan = draft_for(task)


#: the planner role, as the attempt runner is handed it: a plan is its answer, not a branch
ROLE = Role(ANSWER_FORMAT, PLAN_ROLE, settle=settle, prepare=_prepare, keeps_branch=False)

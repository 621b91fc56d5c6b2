"""One attempt of one task: worktree, prompt, agent, notes, then the task's next state.

Runs as its own process (``python -m orchestrator.roles.implementer TASK AGENT``) so that a
scheduler restart does not stop the work, and the lease carries this process's PID. Retry
notes are saved on every path out: success, failure, timeout, error and SIGTERM.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from .. import agent_status, config, git_utils, queue_utils
from ..backends import AgentRequest, AgentResult, get_backend
from ..exceptions import OctopoidError
from ..fsutil import TailBuffer, atomic_write
from ..leases import attempts_left
from ..memory import lifecycle
from ..memory.retrieval import relevant_notes
from ..memory.store import MemoryStore, project_scope
from ..prompts import MEMORY_HOWTO, build_prompt, render_memory, render_previous_notes
from ..redaction import Redactor
from ..task_notes import stdout_log_path
from ..tasks import Task, TaskState, format_time, normalize_task_id, task_label, utcnow
from .base import (
    LeaseKeeper,
    LeaseLost,
    Terminated,
    agent_env,
    attempt_env,
    find_agent,
    raise_on_sigterm,
)

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


def attempt_log_dir(task_id: str) -> Path:
    path = config.get_logs_dir() / task_label(task_id)
    path.mkdir(parents=True, exist_ok=True)
    return path


def instructions_for(role: str) -> str:
    path = config.get_prompts_dir() / f"{role}.md"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def run_attempt(task_id: str, agent_name: str) -> AttemptReport:
    """Run one attempt of a task this process's scheduler claimed for ``agent_name``."""
    task_id = normalize_task_id(task_id)
    agents_cfg, cfg = config.load_agents(), config.load_config()
    agent = find_agent(agents_cfg, agent_name)
    lease = LeaseKeeper(task_id, agents_cfg["lease_seconds"])
    task = lease.take_over()
    log_dir = attempt_log_dir(task_id)
    output = TailBuffer(
        cfg["notes"]["stdout_limit"],
        stdout_log_path(task_id),
        cfg["notes"]["log_cap_bytes"],
        Redactor(agent_env(agent)),  # the agent's own env may hold secrets too
    )
    result, commits = AgentResult(None, "error", summary="the attempt did not start"), 0
    try:
        result, commits = _work(task, agent, cfg, lease, log_dir, output)
    except (Terminated, LeaseLost) as exc:
        result = AgentResult(None, "error", summary=str(exc), details={"stop": type(exc).__name__})
    except OctopoidError as exc:
        result = AgentResult(None, "error", summary=str(exc))
    finally:
        output.feed(
            f"\n[octopoid] attempt {task.attempts}: {result.outcome}: {result.summary}; "
            f"{commits} commits\n".encode()
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
        os.replace(stdout_log_path(task_id), log_dir / f"attempt-{task.attempts}.log")
    queue_utils.record_usage(task, result.turns, result.cost_usd)
    report = _settle(task, agent, agents_cfg, result, commits)
    agent_status.record_attempt(
        agent_name, task.label, result.outcome, result.turns, result.cost_usd
    )
    return report


def _work(
    task: Task, agent: dict, cfg: dict, lease: LeaseKeeper, log_dir: Path, output: TailBuffer
) -> tuple[AgentResult, int]:
    repo = git_utils.open_repo()
    worktree = git_utils.ensure_worktree(repo, task.id, task.branch)
    before = git_utils.head_sha(worktree)
    notes = render_previous_notes(
        queue_utils.get_task_notes(task.id), cfg["notes"]["prompt_budget"]
    )
    lifecycle.seed_task_notes(task)
    prompt = build_prompt(
        instructions_for(task.role), task, notes, _memory_block(task, cfg), MEMORY_HOWTO
    )
    prompt_file = log_dir / f"attempt-{task.attempts}.prompt.md"
    atomic_write(prompt_file, prompt)
    request = AgentRequest(
        task_id=task.label,
        prompt=prompt,
        prompt_file=prompt_file,
        worktree=worktree,
        options=agent,
        env=attempt_env(agent, task, worktree, prompt_file),
        timeout_seconds=agent["timeout_seconds"],
        max_turns=agent["max_turns"],
        max_budget_usd=agent.get("max_budget_usd"),
        on_tick=lease.tick,
    )
    result = get_backend(agent["backend"]).run(request, output)
    return result, git_utils.commits_since(worktree, before)


def _memory_block(task: Task, cfg: dict) -> str:
    store = MemoryStore()
    try:
        lifecycle.index_main_notes(store)
        chosen = relevant_notes(task, store, scope=project_scope(), budget=cfg["memory"]["budget"])
    finally:
        store.close()
    return render_memory(chosen)


def _settle(
    task: Task, agent: dict, agents_cfg: dict, result: AgentResult, commits: int
) -> AttemptReport:
    """Decide and make the task's next move."""
    stop = result.details.get("stop")
    reason = f"{result.outcome}: {result.summary}; {commits} commits"
    burned = commits == 0 and result.turns >= BURN_OUT_SHARE * agent["max_turns"]
    burned_total = int(task.headers.get("BURNED_OUT") or 0) + burned

    def report(state: TaskState | str) -> AttemptReport:
        value = state.value if isinstance(state, TaskState) else state
        return AttemptReport(
            task.label, task.attempts, result.outcome, commits, result.turns, value, reason
        )

    if stop == "LeaseLost":
        return report("(not ours any more)")
    if stop == "Terminated":
        queue_utils.requeue_task(task, reason, "octopoid", counted=False)
        return report(TaskState.INCOMING)
    if result.outcome == "rate_limited":
        wait = timedelta(seconds=agents_cfg["rate_limit_backoff_seconds"])
        queue_utils.requeue_task(
            task,
            f"{reason}; backing off {wait}",
            "octopoid",
            counted=False,
            set_headers={"NOT_BEFORE": format_time(utcnow() + wait)},
        )
        return report(TaskState.INCOMING)
    if result.outcome == "success" and commits > 0:
        queue_utils.submit_completion(task, commits, result.turns, cost_usd=result.cost_usd)
        return report(TaskState.PROVISIONAL)
    if result.outcome == "success":
        reason = f"the agent finished without committing anything ({result.summary})"
    if burned and burned_total >= BURN_OUT_ATTEMPTS:
        queue_utils.recycle_to_breakdown(task, f"burned out twice; {reason}")
        return report(TaskState.BREAKDOWN)
    if attempts_left(task, agents_cfg["max_attempts"]) > 0:
        queue_utils.requeue_task(
            task, reason, agent["name"], set_headers={"BURNED_OUT": burned_total}
        )
        return report(TaskState.INCOMING)
    queue_utils.fail_task(task, f"attempts exhausted; {reason}")
    return report(TaskState.FAILED)


def main(argv: list[str] | None = None) -> int:
    """Runner entry point: one attempt, a JSON report on stdout."""
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        print("usage: python -m orchestrator.roles.implementer TASK-ID AGENT-NAME", file=sys.stderr)
        return 2
    raise_on_sigterm()
    try:
        report = run_attempt(args[0], args[1])
    except OctopoidError as exc:
        print(f"octopoid runner: {exc}", file=sys.stderr)
        return exc.exit_code
    report.peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(report.__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

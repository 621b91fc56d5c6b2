"""The implement role, and the runner's entry: ``python -m orchestrator.roles.implementer
TASK AGENT`` (the scheduler's and the fork server's spawn, ``base.RUNNER``) reads the task
once, picks the role its attempt runs as (``role_for``) and hands both down to the one
attempt runner (``attempt.run``)."""

from __future__ import annotations

import sys

from ..model.tasks import PLANNING_ROLE, Task, TaskId
from ..queue import machine as queue_utils
from . import attempt, breakdown, planner
from .base import Role
from .outcome import AttemptReport
from .prompts import MEMORY_HOWTO, NO_CHANGE_HOWTO

#: the implementer's role: its answer is its commits; the runner's own checks and moves
IMPLEMENT = Role(f"{MEMORY_HOWTO}\n\n{NO_CHANGE_HOWTO}")


def role_for(task: Task) -> Role:
    """The role an attempt of ``task`` runs as: a burned-out task's breakdown, a plan's
    carrying task's planner, otherwise the implementer."""
    if task.headers.get("PHASE") == "breakdown":
        return breakdown.ROLE
    return planner.ROLE if task.role == PLANNING_ROLE else IMPLEMENT


def run_attempt(task_id: str, agent_name: str, token: str) -> AttemptReport:
    """Run one attempt of a task the scheduler claimed for ``agent_name`` with ``token``."""
    task = queue_utils.get_task(TaskId(task_id))
    return attempt.run(task, agent_name, token, role_for(task))


def main(argv: list[str] | None = None) -> int:
    """Runner entry point: one attempt, a JSON report on stdout."""
    return attempt.main(argv, run_attempt)


if __name__ == "__main__":
    sys.exit(main())

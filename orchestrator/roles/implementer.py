"""The implement role, and the runner's entry: ``python -m orchestrator.roles.implementer
TASK AGENT`` (the scheduler's and the fork server's spawn, ``base.RUNNER``) reads the task
once, picks the role its attempt runs as (``role_for``) and hands both down to the one
attempt runner (``attempt.run``)."""

from __future__ import annotations

import json
import os
import resource
import sys

from ..base import bytecode
from ..base.processes import TOKEN_ENV, become_subreaper, kill_descendants
from ..base.redaction import redact
from ..model.exceptions import OctopoidError
from ..model.tasks import PLANNING_ROLE, Task, TaskId
from ..queue import machine as queue_utils
from . import attempt, breakdown, planner
from .base import Role, raise_on_stop_signals
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
    """The runner process: one attempt, a JSON report on stdout."""
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

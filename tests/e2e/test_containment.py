"""The real daemon: one agent per task at any instant, and nothing of an attempt survives it."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from ..support import OCTOPOID, child_env, set_config, wait_for, write_agents
from ..support.daemon import AgentCounter, agents_per_task, alive, runner_owned, state_of

pytestmark = pytest.mark.slow


def test_requeue_of_a_running_task_never_runs_two_agents(loop, git_project: Path) -> None:
    # The stopped runner saves its own notes within the grace, however loaded the machine
    # (with the fixture's 1 s, the next runner once killed it first and salvaged them).
    write_agents(
        git_project, max_concurrent=3, max_claimed=6, lease_seconds=3, shutdown_grace_seconds=60
    )
    loop(OCTO_TEST_SLEEP="4")
    counter = AgentCounter()
    counter.start()
    tid = q.create_task("slow work").id
    wait_for("the runner to start the agent", lambda: runner_owned(tid))
    wait_for("the agent to run", lambda: agents_per_task()[f"TASK-{tid}"] == 1)
    done = subprocess.run(
        [OCTOPOID, "requeue", tid, "--reason", "try again"],
        cwd=git_project,
        env=child_env(git_project),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "stopped and saved its notes" in done.stdout, done.stdout
    wait_for("attempt 2 to finish", lambda: state_of(tid) == "provisional", 60)
    assert counter.stop()[f"TASK-{tid}"] == 1  # never two agents at once
    task = q.get_task(tid)
    assert task.attempts == 2 and task.headers["COMMITS"] == "1"
    notes = q.get_task_notes(tid)
    assert "## Attempt 1" in notes and "claim was taken back" in notes
    assert "## Attempt 2" in notes
    logs = git_project / ".octopoid/runtime/logs" / f"TASK-{tid}" / "runner.log"
    assert "Traceback" not in logs.read_text()


def test_a_killed_runner_takes_its_agents_children_with_it(
    loop, git_project: Path, tmp_path: Path
) -> None:
    """``sandbox: none`` (a box's processes end with its PID namespace: test_hostile_agents)."""
    set_config(git_project, sandbox="none")
    pids = tmp_path / "pids"
    loop(OCTO_TEST_SLEEP="30", OCTO_TEST_PIDS=str(pids))
    tid = q.create_task("escape, then slow").id
    wait_for("the agent's grandchild", lambda: pids.exists() and pids.read_text().strip())
    escaped = int(pids.read_text().split()[0])
    os.kill(int(runner_owned(tid).headers["PID"]), signal.SIGKILL)
    wait_for("the grandchild to die", lambda: not alive(escaped), 15)
    wait_for(
        "the task back in incoming",
        lambda: state_of(tid) != "claimed" or q.get_task(tid).attempts > 1,
        15,
    )


def test_an_orphan_with_no_marks_dies_with_its_runner(
    loop, git_project: Path, tmp_path: Path
) -> None:
    """``sandbox: none``: only the runner as subreaper can find it."""
    set_config(git_project, sandbox="none")
    pids = tmp_path / "pids"
    loop(OCTO_TEST_PIDS=str(pids))
    tid = q.create_task("escape-bare").id
    wait_for("provisional", lambda: state_of(tid) == "provisional", 30)
    (escaped,) = [int(p) for p in pids.read_text().split()]
    wait_for("the bare orphan to die", lambda: not alive(escaped), 15)
    assert q.get_task(tid).state is TaskState.PROVISIONAL

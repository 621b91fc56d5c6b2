"""Nothing an attempt starts outlives it; a runner that cannot start or hangs frees its claim."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.backends.worktree_tools import ToolError, WorktreeTools
from orchestrator.base.processes import TOKEN_ENV, marked_processes
from orchestrator.daemon import scheduler
from orchestrator.model import defaults
from orchestrator.model.tasks import TaskState
from orchestrator.queue import agent_records
from orchestrator.queue import machine as q
from orchestrator.queue.leases import attempts_left

from .support import run_claimed, set_config, settle, wait_for, write_agents
from .support.daemon import alive


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_a_grandchild_in_its_own_session_dies_with_the_attempt(git_project, tmp_path, monkeypatch):
    """Without a sandbox (with one, the box's PID namespace ends everything it held)."""
    pids = tmp_path / "pids"
    monkeypatch.setenv("OCTO_TEST_PIDS", str(pids))
    set_config(git_project, sandbox="none")
    write_agents(git_project)
    q.create_task("escape the group")
    report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert report.next_state == "provisional"
    (escaped,) = pids_in(pids)
    wait_for("the escaped process to die", lambda: not alive(escaped), 5)


PARENT = """
import subprocess, sys
from orchestrator.base.processes import in_new_session_dying_with_parent
child = subprocess.Popen(["sleep", "300"], preexec_fn=in_new_session_dying_with_parent())
print(child.pid, flush=True)
sys.stdin.read()
"""


def test_a_process_started_to_die_with_its_parent_dies_when_the_parent_is_killed_9():
    """What a backend starts is in a session of its own (so a group kill takes all of it)
    and gets SIGKILL when the process that started it dies, even by SIGKILL."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    try:
        assert os.getsid(child) == child  # a session of its own
        assert alive(child)
        parent.kill()
        parent.wait()
        wait_for("the child to die with its parent", lambda: not alive(child), 10)
    finally:
        if alive(child):
            os.kill(child, 9)


def test_a_timed_out_shell_command_loses_its_whole_group(tmp_path):
    tools = WorktreeTools(tmp_path, 1, dict(os.environ))
    started = time.monotonic()
    with pytest.raises(ToolError, match="timed out"):
        tools.run_command("sleep 30 & echo $! > bg.pid; sleep 30")
    assert time.monotonic() - started < 10
    background = int((tmp_path / "bg.pid").read_text())
    time.sleep(0.2)
    assert not alive(background)


def test_background_jobs_of_a_finished_shell_command_are_stopped(tmp_path):
    tools = WorktreeTools(tmp_path, 10, dict(os.environ))
    out = tools.run_command("(sleep 30 > /dev/null 2>&1 & echo $! > bg.pid); echo done")
    assert "exit status 0" in out and "done" in out
    background = int((tmp_path / "bg.pid").read_text())
    time.sleep(0.2)
    assert not alive(background)


@pytest.fixture
def sched(git_project: Path):
    write_agents(git_project, timeout_seconds=60, shutdown_grace_seconds=1)
    daemon = scheduler.Scheduler()
    daemon.initialize()
    yield daemon
    daemon.shutdown(grace=1)


def test_a_runner_that_cannot_start_gives_its_claim_back_at_once(sched, monkeypatch):
    tid = q.create_task("t").id
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    report = sched.loop_once()
    assert report.started == [] and sched.runners == {}
    task = q.get_task(tid)
    assert task.state is TaskState.INCOMING
    assert attempts_left(task, 3) == 3 and "could not start" in task.history[-1]


def test_a_hung_runner_is_killed_at_its_deadline(sched, monkeypatch, tmp_path):
    monkeypatch.setenv("OCTO_TEST_SLEEP", "120")
    monkeypatch.setattr(defaults, "RUNNER_DEADLINE_GRACE_SECONDS", -58)  # deadline: 2 s
    tid = q.create_task("slow").id
    sched.loop_once()
    agent_records.set_paused(True)  # one attempt is all this test watches
    (runner,) = sched.runners.values()
    token = runner.token
    wait_for("the runner and its agent up", lambda: marked_processes(**{TOKEN_ENV: token}))
    settle(sched, 30)
    assert marked_processes(**{TOKEN_ENV: token}) == []
    task = q.get_task(tid)
    assert task.state is TaskState.INCOMING and task.attempts == 1
    assert "runner exited with status -9" in task.history[-1]

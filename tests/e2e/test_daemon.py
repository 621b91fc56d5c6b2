"""The real daemon as a subprocess on a temporary git repo, with a scripted command agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import git
import pytest

from orchestrator import config
from orchestrator.git import branches
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.queue.leases import attempts_left
from orchestrator.queue.task_notes import stdout_log_path

from ..support import OCTOPOID, child_env, wait_for
from ..support.daemon import runner_owned, state_of

pytestmark = pytest.mark.slow


def test_enqueue_to_provisional_then_accept_merges(loop, git_project: Path) -> None:
    daemon = loop()
    start = time.monotonic()
    plain = q.create_task("plain work").id
    wait_for("plain -> provisional", lambda: state_of(plain) == "provisional")
    assert time.monotonic() - start < 10
    flaky = q.create_task("fail-once task").id
    wait_for("flaky -> provisional", lambda: state_of(flaky) == "provisional")
    prompt2 = (config.get_logs_dir() / f"TASK-{flaky}" / "attempt-2.prompt.md").read_text()
    assert "## Previous Agent Notes" in prompt2 and "CLUE: the config lives in" in prompt2
    out = subprocess.run(
        [OCTOPOID, "accept", plain, flaky],
        cwd=git_project,
        env=child_env(git_project),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    repo = git.Repo(git_project)
    subjects = [c.summary for c in repo.iter_commits("main", max_count=10)]
    assert f"Merge TASK-{plain}: plain work" in subjects
    assert f"Merge TASK-{flaky}: fail-once task" in subjects
    for tid in (plain, flaky):
        assert not branches.worktree_for(tid).exists()
        assert not branches.branch_exists(repo, f"agent/TASK-{tid}")
        assert q.get_task_notes(tid) is None
    assert daemon.stop() == 0
    assert "scheduler" in (config.get_logs_dir() / "scheduler.log").read_text()


def test_reject_feedback_reaches_the_next_prompt(loop) -> None:
    loop()
    tid = q.create_task("plain").id
    wait_for("provisional", lambda: state_of(tid) == "provisional")
    q.reject_completion(tid, "please also update CHANGELOG.md", "reviewer")
    wait_for(
        "provisional again",
        lambda: q.get_task(tid).attempts == 2 and state_of(tid) == "provisional",
    )
    prompt = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-2.prompt.md").read_text()
    assert "please also update CHANGELOG.md" in prompt


def test_max_attempts_ends_in_failed(loop) -> None:
    loop()
    tid = q.create_task("always-fail").id
    wait_for("failed", lambda: state_of(tid) == "failed")
    assert loop.runs()[f"TASK-{tid}"] == 3
    assert q.get_task_notes(tid).count("I cannot do this") == 3


def test_a_killed_runner_is_recovered_and_retried(loop) -> None:
    loop(OCTO_TEST_SLEEP="2")
    tid = q.create_task("slow, then killed").id
    task = wait_for("the runner to own the lease", lambda: runner_owned(tid))
    output = stdout_log_path(tid)  # killed once the agent has said something to salvage
    wait_for(
        "the agent's first words", lambda: output.exists() and "working on" in output.read_text()
    )
    os.kill(int(task.headers["PID"]), signal.SIGKILL)
    wait_for("retried to provisional", lambda: state_of(tid) == "provisional", timeout=40)
    assert q.get_task(tid).attempts == 2
    notes = q.get_task_notes(tid)
    assert "the runner died" in notes and "working on" in notes  # attempt 1 salvaged


def test_a_dead_claim_with_no_scheduler_watching_is_reaped_by_lease(loop) -> None:
    daemon = loop(OCTO_TEST_SLEEP="3")
    tid = q.create_task("slow").id
    task = wait_for("the runner to own the lease", lambda: runner_owned(tid))
    daemon.stop(signal.SIGKILL)  # nobody watches the runner now
    os.kill(int(task.headers["PID"]), signal.SIGKILL)
    loop(OCTO_TEST_SLEEP="0")  # a new scheduler finds the claim, waits out the lease
    wait_for("reaped and retried", lambda: state_of(tid) == "provisional", timeout=40)
    history = q.get_task(tid).history
    assert any("lease expired" in line for line in history)


def test_scheduler_kill_9_and_restart_loses_and_doubles_nothing(loop) -> None:
    daemon = loop(OCTO_TEST_SLEEP="2")
    ids = [q.create_task(f"slow {i}").id for i in range(5)]
    wait_for("work under way", lambda: q.get_store().count(TaskState.CLAIMED) >= 3)
    daemon.stop(signal.SIGKILL)
    loop(OCTO_TEST_SLEEP="2")
    wait_for("all provisional", lambda: all(state_of(t) == "provisional" for t in ids), 60)
    runs = loop.runs()
    assert all(runs[f"TASK-{t}"] == 1 for t in ids), runs  # nothing ran twice
    # a claim whose runner never started is given back: it is not counted against the task
    assert all(attempts_left(q.get_task(t), 3) == 2 for t in ids)


def test_sigterm_requeues_running_work_with_notes(loop) -> None:
    daemon = loop(OCTO_TEST_SLEEP="60")
    tid = q.create_task("slow").id
    wait_for("the runner to own the lease", lambda: runner_owned(tid))
    time.sleep(0.5)
    assert daemon.stop(signal.SIGTERM, timeout=30) == 0
    task = q.get_task(tid)
    assert task.state is TaskState.INCOMING and task.headers["INTERRUPTED"] == "1"
    assert "shutting down" in q.get_task_notes(tid) and "working on" in q.get_task_notes(tid)
    assert q.attempts_left(task, 3) == 3  # a shutdown does not burn an attempt
    said = "interrupted: the scheduler is shutting down; the attempt is given back; 0 commits"
    assert task.history[-1].endswith(f"claimed → incoming  (octopoid: {said})")  # no "error"
    assert f"attempt 1: {said}" in q.get_task_notes(tid)


def test_an_agent_printing_200_mb_finishes_with_flat_memory(loop) -> None:
    loop(OCTO_TEST_FLOOD_MB="200")
    tid = q.create_task("flood").id
    wait_for("provisional", lambda: state_of(tid) == "provisional", timeout=120)
    runner_log = config.get_logs_dir() / f"TASK-{tid}" / "runner.log"
    wait_for("the runner's report", lambda: runner_log.read_text().strip())  # printed last
    report = json.loads(runner_log.read_text().strip().splitlines()[-1])
    assert report["peak_rss_kib"] < 120 * 1024, report
    attempt_log = config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log"
    assert attempt_log.stat().st_size < 11 * 1024 * 1024
    assert "[...truncated" in q.get_task_notes(tid)


def test_bad_agents_and_tasks_do_not_stop_the_daemon(loop, git_project: Path) -> None:
    loop()
    bad_branch = q.create_task("needs a missing base", branch="no-such-branch").id
    nobody = q.create_task("nobody serves this role", role="design").id
    good = q.create_task("plain").id
    wait_for("good -> provisional", lambda: state_of(good) == "provisional")
    wait_for("bad branch failed", lambda: state_of(bad_branch) == "failed")
    assert "base branch 'no-such-branch' does not exist" in q.get_task_notes(bad_branch)
    assert state_of(nobody) == "incoming"

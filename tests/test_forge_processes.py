"""The forge loop run by real processes: the scheduler daemon doing all of it on its own
(issue in, attempt, pull request, approval, merge, done), and polls killed with SIGKILL at
any moment losing nothing and moving nothing twice."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from orchestrator import config
from orchestrator.model.exceptions import TaskNotFound
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review

from .forge_driver import Driver, attempt
from .forge_fakes.fixtures import ALICE, BOB
from .support import OCTOPOID, child_env, set_config, wait_for


def test_the_scheduler_runs_the_loop_on_its_own_from_issue_to_merge(
    forge: Driver,
    forged: Path,
) -> None:
    cfg = config.load_config()["forge"]
    set_config(forged, forge={**cfg, "poll_seconds": 1, "open_on": "provisional"})
    number = forge.server.create_issue(ALICE, "Add it", "- [ ] it is there\n", ["octopoid"])
    task_id = f"{forge.prefix}-{number}"
    daemon = subprocess.Popen(
        [OCTOPOID, "scheduler", "run"],
        cwd=forged,
        env=child_env(forged),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for("the pull request", lambda: "PR_NUMBER" in _headers(task_id), timeout=300)
        pr = int(_headers(task_id)["PR_NUMBER"])
        head = forge.head(f"agent/TASK-{task_id}")
        forge.ci(head, "build", passed=True)
        forge.review(pr, BOB, "approve")
        wait_for("the merge", lambda: q.get_task(task_id).state is TaskState.DONE, timeout=300)
        wait_for("the issue told", lambda: len(forge.comments(number)) == 2, timeout=300)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    assert "forge: merged by octopoid-bot" in q.get_task(task_id).history[-1]
    said = [c.rsplit("<!-- octopoid:", 1)[1] for c in forge.comments(number)]
    assert said == [f"TASK-{task_id}:{e} -->" for e in ("started", f"pull-request-{pr}")]
    assert forge.issue_closed(number)  # by the merge ("Closes #N"): no "done" from octopoid
    log = (config.get_logs_dir() / "scheduler.log").read_text()
    assert "polling the forge" in log and "tok-bot" not in log


def _headers(task_id: str) -> dict[str, str]:
    try:
        return q.get_task(task_id).headers
    except TaskNotFound:  # not imported yet
        return {}


def test_polls_killed_at_any_moment_move_the_task_once_and_lose_nothing(
    forge: Driver,
    forged: Path,
) -> None:
    task = q.create_task("killed polls")
    assert attempt(task.id) == "provisional"
    review.accept(task.id, "alice")
    pr = int(q.get_task(task.id).headers["PR_NUMBER"])
    head = forge.head(f"agent/{task.label}")
    forge.ci(head, "build", passed=False, log="the one failure\n")
    forge.review(pr, BOB, "changes", "and the one review")
    killed = 0
    for delay in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2):  # points along one poll's way
        if q.get_task(task.id).state is not TaskState.PROVISIONAL:
            break
        poll = subprocess.Popen(
            [OCTOPOID, "forge", "poll"],
            cwd=forged,
            env=child_env(forged),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        os.kill(poll.pid, signal.SIGKILL)
        poll.wait()
        killed += 1
    done = subprocess.run(
        [OCTOPOID, "forge", "poll"], cwd=forged, env=child_env(forged), capture_output=True
    )
    assert done.returncode == 0, done.stderr
    moved = q.get_task(task.id)
    assert moved.state is TaskState.INCOMING and killed >= 1
    assert sum("forge:" in line for line in moved.history) == 1
    assert q.get_store().where(task.id) == [TaskState.INCOMING]
    notes = q.get_task_notes(task.id) or ""
    assert "the one failure" in notes and "and the one review" in notes  # nothing lost
    assert "FORGE_SEEN" in moved.headers
    assert (
        subprocess.run(
            [OCTOPOID, "forge", "poll"],
            cwd=forged,
            env=child_env(forged),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        == "nothing to do"
    )

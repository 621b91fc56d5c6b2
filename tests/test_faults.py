"""One bad input never stops the queue: broken config, odd files, read-only folders, a vanished
runtime. Each is met through the installed CLI or the real daemon, as a user meets it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.base.processes import TASK_ENV, marked_processes
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from .support import OCTOPOID, child_env, octopoid, run_claimed, wait_for, write_agents


def one_line_error(done: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("file", "text", "needle"),
    [
        ("config.yaml", "merge: [\n", "invalid YAML"),
        ("config.yaml", "surprise: 1\n", "unknown key 'surprise'"),
        ("agents.yaml", "max_attempts: many\n", "'max_attempts' should be a whole number"),
    ],
)
def test_status_and_agents_say_the_config_is_invalid(git_project, file, text, needle):
    q.create_task("still listed")
    (git_project / ".octopoid" / file).write_text(text)
    status = octopoid(git_project, "status")
    one_line_error(status, 2, "octopoid: config invalid: ", file, needle)
    assert "incoming     1" in status.stdout  # the rest of the status is still shown
    one_line_error(octopoid(git_project, "agents"), 2, "config invalid: ", file)


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_an_odd_file_in_a_queue_folder_is_quarantined_never_followed(git_project, kind):
    good = q.create_task("good").id
    incoming = git_project / ".octopoid/runtime/queue/incoming"
    odd = incoming / "TASK-99.md"
    secret = git_project.parent / "secret.txt"
    secret.write_text("# [TASK-99] TOPSECRET-VALUE\n")
    {"directory": odd.mkdir, "fifo": lambda: os.mkfifo(odd)}.get(
        kind, lambda: odd.symlink_to(secret)
    )()
    listed = octopoid(git_project, "list", timeout=20)  # a FIFO must not block the listing
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert f"TASK-{good}" in listed.stdout
    assert octopoid(git_project, "status").returncode == 0
    one_line_error(octopoid(git_project, "show", "99"), 2, "TASK-99 is quarantined: it is a")
    quarantined = git_project / ".octopoid/runtime/queue/quarantine"
    error = (quarantined / "TASK-99.md.error").read_text()
    assert "not a regular file" in error or "symlink" in error
    assert "TOPSECRET" not in error
    assert os.path.lexists(quarantined / "TASK-99.md") and not os.path.lexists(odd)
    assert secret.read_text().startswith("# [TASK-99]")  # the target was never touched
    assert q.claim_task(None, "x").id == good


@contextmanager
def immutable(folder: Path):
    """The folder cannot be written, even by root (tests here run as root)."""
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available on this filesystem")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_a_read_only_queue_folder_is_a_clear_error_at_enqueue(git_project):
    with immutable(git_project / ".octopoid/runtime/queue/incoming"):
        done = octopoid(git_project, "enqueue", "cannot land")
    one_line_error(done, 1, "cannot write the queue at ", "incoming", "permissions")


def test_a_runner_that_cannot_submit_releases_its_claim(git_project):
    write_agents(git_project)
    tid = q.create_task("plain work").id
    claim = q.claim_task(None, "impl-1")
    with immutable(git_project / ".octopoid/runtime/queue/provisional"):
        report = run_claimed(claim, "impl-1")
    assert report.next_state == "incoming" and report.commits == 1
    task = q.get_task(tid)
    assert task.state is TaskState.INCOMING and task.headers["INTERRUPTED"] == "1"
    assert "could not move the task" in task.history[-1]


@pytest.mark.slow
def test_removing_the_runtime_stops_the_scheduler_and_its_runners(git_project, tmp_path):
    write_agents(git_project)
    out = tmp_path / "daemon.out"
    with open(out, "wb") as log:
        daemon = subprocess.Popen(
            [OCTOPOID, "scheduler", "run"],
            cwd=git_project,
            env=child_env(git_project) | {"OCTO_TEST_SLEEP": "60"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        tid = q.create_task("slow").id
        wait_for("the runner to start", lambda: q.get_task(tid).headers.get("STARTED_AT"))
        runtime = config.get_orchestrator_dir()
        for _ in range(50):  # the daemon may write a file while it goes, as with `rm -rf`
            shutil.rmtree(runtime, ignore_errors=True)
        assert daemon.wait(15) == 0
        assert "vanished or was replaced" in out.read_text()
        attempt = {TASK_ENV: f"TASK-{tid}"}
        wait_for("the runner and agent to be gone", lambda: not marked_processes(**attempt), 10)
        assert "not running" in octopoid(git_project, "scheduler", "status").stdout
    finally:
        if daemon.poll() is None:
            daemon.kill()


@pytest.mark.slow
def test_a_config_broken_for_five_seconds_costs_no_attempt(git_project, tmp_path):
    write_agents(git_project, max_concurrent=2)
    daemon = subprocess.Popen(
        [OCTOPOID, "scheduler", "run"],
        cwd=git_project,
        env=child_env(git_project),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        first = q.create_task("before").id
        wait_for("the first task", lambda: q.get_task(first).state is TaskState.PROVISIONAL)
        good = (git_project / ".octopoid/config.yaml").read_text()
        (git_project / ".octopoid/config.yaml").write_text("merge: {strategy: sometimes}\n")
        # A pass that read the config before it broke may still claim; the tasks come after
        # the daemon has seen it broken (a full pass runs at least every 5 s).
        scheduler_log = config.get_logs_dir() / "scheduler.log"
        wait_for("the broken config seen", lambda: "config invalid" in scheduler_log.read_text())
        waiting = [q.create_task(f"during {i}").id for i in range(3)]
        time.sleep(5)
        for tid in waiting:
            task = q.get_task(tid)
            assert task.state is TaskState.INCOMING and task.attempts == 0
            assert len(task.history) == 1  # only "new -> incoming"
        (git_project / ".octopoid/config.yaml").write_text(good)
        for tid in waiting:
            wait_for(f"TASK-{tid}", lambda t=tid: q.get_task(t).state is TaskState.PROVISIONAL)
            assert q.get_task(tid).attempts == 1
        log = scheduler_log.read_text()
        assert log.count("config invalid") == 1 and "valid again" in log
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)

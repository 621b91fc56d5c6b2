"""Runners forked by the daemon's fork server: they behave as spawned ones, nothing outlives
the daemon but the runners it always let finish, and a dead server means spawning again."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
from pathlib import Path

import psutil
import pytest

from orchestrator import config
from orchestrator.base.processes import marked_processes
from orchestrator.queue import machine as q

from .support import wait_for
from .support.daemon import runner_owned, state_of

pytestmark = pytest.mark.slow


def fork_server(daemon) -> psutil.Process:
    """The daemon's fork server, once it runs."""

    def find() -> psutil.Process | None:
        for child in psutil.Process(daemon.proc.pid).children():
            if "orchestrator.daemon.forkserver" in child.cmdline():
                return child
        return None

    return wait_for("the fork server", find)


def scheduler_log() -> str:
    return (config.get_logs_dir() / "scheduler.log").read_text()


def test_runners_are_forked_and_finish_as_before(loop) -> None:
    daemon = loop()
    server = fork_server(daemon)
    tids = [q.create_task(f"plain work {i}").id for i in range(3)]
    for tid in tids:
        wait_for("provisional", lambda tid=tid: state_of(tid) == "provisional")
    for tid in tids:
        assert f"claimed TASK-{tid} for impl-1 (attempt 1); runner" in scheduler_log()
    assert scheduler_log().count(" forked (woken by ") == 3
    assert "spawned" not in scheduler_log()
    assert daemon.stop() == 0
    wait_for("the fork server to exit with the daemon", lambda: not server.is_running())


def test_forked_runners_use_the_servers_bwrap_probe_instead_of_running_their_own(
    loop,
    tmp_path: Path,
    bwrap_ok,
) -> None:
    """The server keeps bwrap's probe fresh, so a forked runner starts its agent's box
    without first running a probe box of its own (one more box start per attempt)."""
    calls = tmp_path / "bwrap-calls"
    wrapper = tmp_path / "bwrap"
    wrapper.write_text(
        f'#!/bin/sh\necho "$PPID $*" >> {calls}\nexec {shutil.which("bwrap")} "$@"\n'
    )
    wrapper.chmod(0o755)
    loop(OCTOPOID_BWRAP=str(wrapper))
    for tid in [q.create_task(f"plain work {i}").id for i in range(2)]:
        wait_for("provisional", lambda tid=tid: state_of(tid) == "provisional")
    runners = {int(pid) for pid in re.findall(r"runner (\d+) forked", scheduler_log())}
    probes = [line for line in calls.read_text().splitlines() if "octopoid-probe" in line]
    assert len(runners) == 2 and probes
    assert not {int(line.split()[0]) for line in probes} & runners


def test_kill_9_of_the_daemon_leaves_no_fork_server(loop, git_project: Path) -> None:
    daemon = loop(OCTO_TEST_SLEEP="1")
    server = fork_server(daemon)
    tid = q.create_task("slow").id
    wait_for("the runner to own the lease", lambda: runner_owned(tid))
    daemon.stop(signal.SIGKILL)
    wait_for("the fork server to die with the daemon", lambda: not _alive(server))
    wait_for("the runner to finish its attempt", lambda: state_of(tid) == "provisional")
    wait_for("nothing of the project left", lambda: not _left_behind(git_project))


def test_a_dead_fork_server_means_spawning(loop) -> None:
    daemon = loop()
    server = fork_server(daemon)
    wait_for(
        "the server ready (the daemon watches after)", lambda: "an enqueue wakes" in scheduler_log()
    )
    os.kill(server.pid, signal.SIGKILL)
    tid = q.create_task("plain work").id
    wait_for("provisional", lambda: state_of(tid) == "provisional")
    # The daemon logs the claim once the spawn returns: a quick runner may have ended first.
    claimed = f"claimed TASK-{tid} for impl-1 (attempt 1); runner"
    wait_for("the claim logged", lambda: claimed in scheduler_log())
    log = scheduler_log()
    assert "the fork server failed" in log
    assert " spawned (woken by " in log
    assert daemon.stop() == 0


def _left_behind(root: Path) -> list[int]:
    """The project's processes but this test's own (GitPython's helpers); one that ends
    while it is looked at is not left behind."""
    found = []
    for pid in marked_processes(OCTOPOID_ROOT=str(root)):
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).ppid() != os.getpid():
                found.append(pid)
    return found


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_fork_server_too_slow_to_answer_never_leaves_two_runners(git_project: Path) -> None:
    """Asked before it has even loaded (an answer due at once), the server may still fork
    that runner later: the claim is given back instead of spawning a second runner with the
    same token, so a late runner finds it gone and runs no agent."""
    from orchestrator.daemon import scheduler
    from orchestrator.daemon.forkserver import ForkServer

    from .support import write_agents

    write_agents(git_project)
    task = q.create_task("plain work")
    claimed = q.claim_task(None, "impl-1")
    sched = scheduler.Scheduler()
    sched.pool.forkserver = ForkServer()
    server = psutil.Process(sched.pool.forkserver.proc.pid)
    sched.pool.forkserver._sock.settimeout(1e-6)
    agent = config.load_agents()["agents"][0]
    assert sched.pool.start(claimed, agent, "a test") is False
    assert sched.pool.forkserver is None and not server.is_running()
    assert state_of(task.id) == "incoming"
    log = config.get_logs_dir() / f"TASK-{task.id}" / "runner.log"
    wait_for("any late runner to be done", lambda: not _left_behind(git_project))
    assert q.get_task(task.id).state.value == "incoming"
    said = log.read_text() if log.exists() else ""
    assert '"outcome": "success"' not in said and '"commits": 1' not in said  # no agent's work
    assert not q.get_task_notes(task.id)  # no attempt ran to its notes


def test_a_forked_runner_is_found_by_its_marks_and_dies_with_its_claim(loop) -> None:
    """A forked runner's /proc environ is the fork server's; the marks it notes let every
    scan find it as a spawned one is found (wait for earlier attempts, requeue's kill)."""
    from orchestrator.base.processes import TASK_ENV, TOKEN_ENV, kill_claim_processes
    from orchestrator.queue.leases import claim_token

    loop(OCTO_TEST_SLEEP="30")
    tid = q.create_task("slow").id
    task = wait_for("the runner to own the lease", lambda: runner_owned(tid))
    runner = int(task.headers["PID"])
    assert b"orchestrator.daemon.forkserver" in Path(f"/proc/{runner}/cmdline").read_bytes()
    token = claim_token(task)
    assert runner in marked_processes(**{TOKEN_ENV: token})
    assert runner in marked_processes(**{TASK_ENV: task.label})
    kill_claim_processes(token)
    wait_for("the runner gone", lambda: not _alive(psutil.Process(runner)))

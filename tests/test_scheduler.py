"""Scheduler passes driven one at a time, pausing, backpressure, and the single-instance lock."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.daemon import scheduler, scheduler_control
from orchestrator.model.exceptions import OctopoidError, SchedulerError
from orchestrator.model.tasks import TaskState
from orchestrator.queue import agent_records
from orchestrator.queue import machine as q

from .support import child_env, octopoid, settle, wait_for, write_agents


@pytest.fixture
def daemon(git_project: Path):
    write_agents(git_project, max_concurrent=2, max_claimed=3)
    sched = scheduler.Scheduler()
    sched.initialize()
    yield sched
    sched.shutdown(grace=10)


def test_a_pass_claims_up_to_the_agents_slots(daemon) -> None:
    ids = [q.create_task(f"t{i}").id for i in range(3)]
    report = daemon.loop_once()
    assert [label for label, _ in report.started] == ["TASK-1", "TASK-2"]  # max_concurrent 2
    settle(daemon)
    settle(daemon)
    assert all(q.get_task(t).state is TaskState.PROVISIONAL for t in ids)


def test_pause_and_resume(daemon) -> None:
    agent_records.set_paused(True)
    q.create_task("t")
    assert daemon.loop_once().skipped == "paused (`octopoid resume`)"
    agent_records.set_paused(False)
    agent_records.set_paused(True, agent="impl-1")
    assert daemon.loop_once().started == []
    agent_records.set_paused(False, agent="impl-1")
    assert len(daemon.loop_once().started) == 1
    settle(daemon)


def test_pausing_an_unknown_agent_is_an_error(daemon) -> None:
    with pytest.raises(OctopoidError, match="no agent named 'ghost'"):
        agent_records.set_paused(True, agent="ghost")


def test_backpressure_stops_claiming_while_reviews_pile_up(git_project: Path) -> None:
    write_agents(git_project, max_provisional=1)
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        first = q.create_task("a").id
        sched.loop_once()
        settle(sched)
        assert q.get_task(first).state is TaskState.PROVISIONAL
        second = q.create_task("b").id  # only now: a pass of settle's could have claimed it
        report = sched.loop_once()
        assert report.skipped.startswith("backpressure") and report.started == []
        assert q.get_task(second).state is TaskState.INCOMING
    finally:
        sched.shutdown(grace=10)


def test_a_second_scheduler_on_the_same_root_refuses(daemon) -> None:
    with pytest.raises(SchedulerError, match="already running"):
        scheduler.Scheduler().initialize()
    assert scheduler_control.scheduler_status() == {
        "running": True,
        "pid": os.getpid(),
        "stale_pid_file": False,
    }


def test_a_stale_pid_file_is_detected(git_project: Path) -> None:
    scheduler_control.pid_file().parent.mkdir(parents=True, exist_ok=True)
    scheduler_control.pid_file().write_text("999999\n")
    status = scheduler_control.scheduler_status()
    assert status == {"running": False, "pid": 999999, "stale_pid_file": True}
    with pytest.raises(SchedulerError, match="stale pid file"):
        scheduler_control.stop_background()
    assert not scheduler_control.pid_file().exists()


@pytest.mark.parametrize(
    ("file", "text"),
    [
        ("agents.yaml", "agents: [\n"),
        ("config.yaml", "merge:\n  strategy: sometimes\n"),
        ("config.yaml", "surprise: 1\n"),
    ],
)
def test_a_broken_config_claims_nothing_and_is_logged_once(daemon, git_project, file, text):
    tid = q.create_task("t").id
    good = (git_project / ".octopoid" / file).read_text()
    (git_project / ".octopoid" / file).write_text(text)
    for _ in range(5):
        report = daemon.loop_once()  # must not raise
        assert report.started == [] and report.skipped.startswith("config invalid: ")
    log = (config.get_logs_dir() / "scheduler.log").read_text()
    assert log.count("config invalid") == 1 and file in log
    assert q.get_task(tid).state is TaskState.INCOMING and q.get_task(tid).attempts == 0
    (git_project / ".octopoid" / file).write_text(good)
    assert len(daemon.loop_once().started) == 1
    assert "configuration is valid again" in (config.get_logs_dir() / "scheduler.log").read_text()
    settle(daemon)


@pytest.mark.slow
def test_start_status_stop_in_the_background(git_project: Path) -> None:
    write_agents(git_project, shutdown_grace_seconds=1)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return octopoid(git_project, "scheduler", *args)

    assert cli("status").stdout.strip() == "not running"
    started = cli("start")
    assert started.returncode == 0 and "scheduler started" in started.stdout
    assert cli("status").stdout.startswith("running (pid")
    again = cli("start")
    assert again.returncode == 1 and "already running" in again.stderr
    tid = q.create_task("plain").id
    wait_for("the task in review", lambda: q.get_task(tid).state is TaskState.PROVISIONAL)
    assert cli("stop").returncode == 0
    assert cli("status").stdout.strip() == "not running"
    assert cli("stop").returncode == 1


@pytest.mark.slow
def test_run_once_starts_work_and_exits(git_project: Path) -> None:
    write_agents(git_project)
    tid = q.create_task("plain").id
    proc = octopoid(git_project, "scheduler", "run", "--once")
    assert proc.returncode == 0, proc.stderr
    assert "claimed TASK-1" in proc.stderr
    # the attempt finishes in its own process
    wait_for("the task in review", lambda: q.get_task(tid).state is TaskState.PROVISIONAL)
    assert scheduler_control.scheduler_status()["running"] is False


def test_an_agent_that_cannot_run_is_skipped_and_logged_once(git_project: Path) -> None:
    (git_project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - {name: c, role: implement, backend: claude-code,"
        " claude_path: no-such-claude}\n"
    )
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        tid = q.create_task("t").id
        for _ in range(3):
            assert sched.loop_once().started == []
        assert q.get_task(tid).state is TaskState.INCOMING and q.get_task(tid).attempts == 0
        log = (config.get_logs_dir() / "scheduler.log").read_text()
        assert log.count("agent c: cannot run: 'no-such-claude' is not on PATH") == 1
    finally:
        sched.shutdown(grace=0)


def test_a_task_claimed_again_before_its_old_runner_exits_keeps_both_runners(
    git_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runners are known by claim: the second claim of a task does not hide the first
    runner, so each is collected (and logged, and its processes killed by its token)."""
    monkeypatch.setenv("OCTO_TEST_SLEEP", "2")
    write_agents(git_project, max_concurrent=2, max_claimed=2)
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        task = q.create_task("slow")
        assert len(sched.loop_once().started) == 1
        (old,) = sched.runners.values()
        os.kill(old.proc.pid, signal.SIGSTOP)  # it cannot exit before the next claim, however slow
        try:
            first = q.get_task(task.id)
            q.requeue_task(first, "taken back by hand", counted=False)
            assert len(sched.loop_once().started) == 1  # the same task, a new claim
            assert len(sched.runners) == 2
            assert {r.token for r in sched.runners.values()} == set(sched.runners)
        finally:
            os.kill(old.proc.pid, signal.SIGCONT)
        finished = []

        def ended() -> bool:
            finished.extend(sched.loop_once().finished)
            return not sched.runners

        if sched.runners:
            wait_for("the runners to finish", ended, 60)
        assert [label for label, _ in finished] == [task.label, task.label]
    finally:
        sched.shutdown(grace=10)


def test_a_daemon_s_runner_keeps_bytecode_and_its_agent_gets_the_user_s_setting(
    git_project: Path,
) -> None:
    """With PYTHONDONTWRITEBYTECODE set for the user, the scheduler's runner writes octopoid's
    bytecode into the user's cache folder, outside the work tree where no merge writes
    (so the next one reads it), and the agent it starts sees the user's own setting again."""
    import subprocess

    from orchestrator.queue import machine as q

    from .support import write_agents

    write_agents(git_project, argv=["sh", "-c", "echo AGENT-SEES-DWB=$PYTHONDONTWRITEBYTECODE"])
    task = q.create_task("print the setting")
    caches = git_project.parent / "caches"
    env = {**child_env(git_project), "PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(caches)}
    subprocess.run(
        ["octopoid", "scheduler", "run", "--once"],
        cwd=git_project,
        env=env,
        check=True,
        timeout=120,
    )

    log = git_project / ".octopoid/runtime/logs" / task.label / "attempt-1.log"
    wait_for(
        "the attempt's log", lambda: "AGENT-SEES-DWB" in (log.read_text() if log.exists() else "")
    )
    assert "AGENT-SEES-DWB=1" in log.read_text()
    (cache,) = (caches / "octopoid").glob("pycache-*")  # this install's (beside parsed/)
    assert any(cache.rglob("implementer*.pyc")), "the runner wrote no bytecode to the cache"
    assert not (git_project / ".octopoid/runtime/pycache").exists()  # where a merge reaches


def test_housekeeping_leaves_the_clone_of_a_runner_not_yet_collected(
    git_project: Path, bwrap_ok: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner moves its task out of claimed before it removes its own clone: a sweep in
    between must not take it for a dead runner's (a false WARNING, its clone pulled away)."""

    monkeypatch.setenv("OCTO_TEST_SLEEP", "30")
    write_agents(git_project)
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        tid = q.create_task("slow").id
        assert len(sched.loop_once().started) == 1
        (runner,) = sched.runners.values()
        prompt = config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.prompt.md"
        wait_for("the attempt in its clone", prompt.exists)  # written once the clone is made
        os.kill(runner.proc.pid, signal.SIGSTOP)  # held between its move and its clean-up
        try:
            q.submit_completion(tid, 1, 1)  # the move it makes before removing the clone
            agent_records.set_paused(True)  # this pass sweeps and claims nothing
            sched._next_sweep = 0
            sched.loop_once()
            assert (config.get_worktrees_dir() / f"TASK-{tid}").is_dir()
        finally:
            os.kill(runner.proc.pid, signal.SIGCONT)
    finally:
        sched.shutdown(grace=0)
    log = (git_project / ".octopoid/runtime/logs/scheduler.log").read_text()
    assert "after a dead runner" not in log

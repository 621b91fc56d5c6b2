"""The daemon, its runners and agents as real processes: start them, and read what they do
(a task's state, who holds its lease, how many agents run for it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import yaml

from orchestrator import config
from orchestrator.base.processes import TOKEN_ENV, ProcessId
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.queue.task_notes import stdout_log_path

from . import HELPERS, OCTOPOID, child_env, wait_for


def state_of(task_id: str) -> str:
    """The folder the task is in now (its state's name), or "gone"."""
    where = q.get_store().locate(task_id)
    return where.value if where else "gone"


class Daemon:
    """``octopoid scheduler run`` in a subprocess, with its output kept for failures."""

    def __init__(self, root: Path, runs_file: Path, extra_env: dict[str, str] | None = None):
        self.root = root
        env = child_env(root) | {"OCTO_TEST_RUNS": str(runs_file)} | (extra_env or {})
        self.log = open(root.parent / "daemon.out", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [OCTOPOID, "scheduler", "run"],
            cwd=root,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for(
            "the scheduler to start",
            lambda: (
                config.get_orchestrator_dir().joinpath("scheduler.pid").exists()
                or self.proc.poll() is not None
            ),
        )
        assert self.proc.poll() is None, self.output()

    def output(self) -> str:
        return (self.root.parent / "daemon.out").read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self.log.close()
        return code


def agent_runs() -> Counter:
    """How many times the scripted agent started, per task: the attempt logs in which it
    said it was working (an agent in a box writes nowhere else the test can read)."""
    found: Counter = Counter()
    for log in config.get_logs_dir().glob("TASK-*/attempt-*.log"):
        if "\nworking on TASK-" in log.read_text(errors="replace"):
            found[log.parent.name] += 1
    return found


def runner_owned(tid: str):
    """The task, once a runner (not the scheduler itself) holds its claim; else None."""
    task = q.get_task(tid)
    pid = task.headers.get("PID")
    if task.state is TaskState.CLAIMED and pid and int(pid) != _scheduler_pid():
        return task
    return None


def _scheduler_pid() -> int:
    try:
        return int((config.get_orchestrator_dir() / "scheduler.pid").read_text())
    except (FileNotFoundError, ValueError):
        return -1


def start_scheduler(root: Path, env: dict[str, str]) -> subprocess.Popen:
    """`octopoid scheduler run` in ``root``, in a session of its own (as a daemon runs)."""
    return subprocess.Popen(
        [OCTOPOID, "scheduler", "run"], env=env, cwd=root, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


QUIET = {
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}


def run_daemon_until(root: Path, env: dict[str, str], done, timeout: float = 90) -> None:
    log = open(root.parent / "daemon.out", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [OCTOPOID, "scheduler", "run"],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            assert proc.poll() is None, (root.parent / "daemon.out").read_text()
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()


def write_agent(root: Path, **agent: object) -> None:
    doc = {
        "lease_seconds": 30,
        "shutdown_grace_seconds": 1,
        "agents": [{"name": "agent-1", "role": "implement", "max_turns": 5, **agent}],
    }
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))


@contextlib.contextmanager
def running(root: Path, task, **env: str) -> Iterator[subprocess.Popen]:
    """The runner of a task just claimed for impl-1, as its own process (as the scheduler
    starts it); killed if the test leaves it running."""
    env = child_env(root) | {TOKEN_ENV: task.headers["CLAIM_TOKEN"], **env}
    argv = [sys.executable, "-m", "orchestrator.roles.implementer", task.id, "impl-1"]
    runner = subprocess.Popen(
        argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield runner
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()


def ended(runner: subprocess.Popen) -> None:
    """Wait for the runner to exit (a bound for a hung one, not a measure), successfully."""
    _, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err


def said_in_log(task_id: str, text: str) -> bool:
    path = stdout_log_path(task_id)
    return path.exists() and text in path.read_text(errors="replace")


def alive(pid: int) -> bool:
    """Whether the process ``pid`` still runs (not a zombie, not a pid taken by another)."""
    return ProcessId.of(pid).start != 0 and ProcessId.of(pid).alive()


AGENT = str(HELPERS / "agent.py")


def agents_per_task() -> Counter:
    """How many scripted-agent processes run now, per task (from their environment).

    A process forked by an agent (before it execs git) looks like an agent for a moment:
    only processes whose parent is not an agent count. Only agents working inside this
    test's project (``OCTOPOID_ROOT``) count: another test run on the machine may be
    running its own TASK-1.
    """
    root = os.path.realpath(os.environ["OCTOPOID_ROOT"]) + os.sep
    found: dict[int, tuple[int, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if AGENT.encode() not in f.read():
                    continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            if not os.path.realpath(f"/proc/{name}/cwd").startswith(root):
                continue
        except OSError:
            continue
        task = env.get(b"OCTOPOID_TASK_ID")
        if task:
            ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
            found[int(name)] = (ppid, task.decode())
    return Counter(task for ppid, task in found.values() if ppid not in found)


class AgentCounter(threading.Thread):
    """Samples agent processes every 10 ms; ``most`` is the largest count seen for a task."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.most: Counter = Counter()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for task, n in agents_per_task().items():
                self.most[task] = max(self.most[task], n)
            time.sleep(0.01)

    def stop(self) -> Counter:
        self.done.set()
        self.join(5)
        return self.most

"""Running the scheduler in the background: its lock and pid file, start/stop/status (its
log: ``logs.py``).

One scheduler per project: it holds ``runtime/scheduler.lock`` (an ``flock`` on a
descriptor of its own, which the kernel drops when it dies); ``scheduler.pid`` beside it is
informational, and a pid file without the lock held is stale.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .. import config
from ..base.locks import try_flock
from ..model.exceptions import SchedulerError

RUNNER_STOP_SECONDS = 15.0  # after SIGTERM, a runner's time to save notes and requeue


def pid_file() -> Path:
    return config.get_orchestrator_dir() / "scheduler.pid"


def lock_file() -> Path:
    return config.get_orchestrator_dir() / "scheduler.lock"


def read_pid() -> int | None:
    try:
        return int(pid_file().read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def scheduler_status() -> dict:
    """Whether a scheduler holds this root's lock (a probe: taken and let go at once); a pid
    file without one is stale."""
    fd = try_lock()
    if fd is None:
        return {"running": True, "pid": read_pid(), "stale_pid_file": False}
    os.close(fd)
    stale = pid_file().exists()
    return {"running": False, "pid": read_pid() if stale else None, "stale_pid_file": stale}


def try_lock() -> int | None:
    """The scheduler lock on a descriptor of its own (the kernel drops it if we die), or None
    when a process (this one included) holds it already."""
    lock_file().parent.mkdir(parents=True, exist_ok=True)
    return try_flock(lock_file())


def start_background(wait_seconds: float = 10.0) -> int:
    """Start ``octopoid scheduler run`` detached; return its pid once it holds the lock."""
    status = scheduler_status()
    if status["running"]:
        raise SchedulerError(f"a scheduler is already running (pid {status['pid']})")
    root = config.find_project_root()
    logs = config.get_logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "scheduler.out", "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.faces.cli.main", "scheduler", "run"],
            cwd=root,
            env=dict(os.environ, OCTOPOID_ROOT=str(root)),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SchedulerError(
                f"the scheduler exited at once (status {proc.returncode}); "
                f"see {logs / 'scheduler.out'}"
            )
        if scheduler_status()["running"] and read_pid() == proc.pid:
            return proc.pid
        time.sleep(0.1)
    raise SchedulerError(f"the scheduler did not start within {wait_seconds:g}s")


def stop_background() -> int:
    """SIGTERM the running scheduler and wait for it to finish its graceful shutdown."""
    wait_seconds = config.load_agents()["shutdown_grace_seconds"] + RUNNER_STOP_SECONDS + 5
    status = scheduler_status()
    if not status["running"] or not status["pid"]:
        if status["stale_pid_file"]:
            pid_file().unlink(missing_ok=True)
        raise SchedulerError(
            "no scheduler is running"
            + (" (removed a stale pid file)" if status["stale_pid_file"] else "")
        )
    pid = status["pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if not scheduler_status()["running"]:
            return pid
        time.sleep(0.2)
    raise SchedulerError(f"scheduler {pid} is still shutting down after {wait_seconds:g}s")

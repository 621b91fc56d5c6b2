"""A preview for the reviewer (config.yaml ``preview:``, docs/workspace.md): the branch
under review, served by the project's own command in a box of its own, reached only
through the review page after its sign-in.

One preview per task runs as a daemon of its own (``daemon.py``), started on demand by the
task page or ``octopoid preview TASK-12``, and stopped by either, when its task leaves
review (accept, reject, close), or after ``preview.idle_seconds`` without a request. It
owns a folder in the temp folder named for the project, the task and itself
(``owner_tag``): its sockets (``preview.sock``, where the review page connects;
``relay.sock``, where its box's relay connects out) and the relay script. Nothing of it is
in the store: it is this machine's process, like a clone (docs/scale-out.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ... import config
from ...base.processes import start_ticks
from ...base.redaction import scrub
from ...model.exceptions import InvalidInput, PreviewFailed
from ...model.tasks import TaskId, TaskState, task_label

PUBLIC_SOCKET = "preview.sock"  # the review page's way in
RELAY_SOCKET = "relay.sock"  # the box's relay's way out to the daemon
LOG_NAME = "preview.log"  # in logs/TASK-<id>/: the daemon's and its server's words
LOG_TAIL = 3000


@dataclass(frozen=True)
class Running:
    """A preview's daemon, as its folder names it."""

    folder: Path
    pid: int
    ready: bool  # its server answered; the review page may connect

    @property
    def socket(self) -> Path:
        return self.folder / PUBLIC_SOCKET


def prefix(task_id: str) -> str:
    """The names of ``task_id``'s preview folders in the temp folder (a socket's path is
    limited to 108 bytes: short, and no sweep of channel folders takes them)."""
    root = config.find_project_root()
    key = hashlib.sha256(str(root).encode()).hexdigest()[:8]
    return f"octopoid-preview-{key}-{task_label(TaskId(task_id))}-"


def running(task_id: str) -> Running | None:
    """The task's live preview, if any; folders of daemons gone are removed."""
    from ...base.fsutil import remove_tree

    found = None
    for folder in Path(tempfile.gettempdir()).glob(f"{prefix(task_id)}*"):
        pid, _, start = folder.name.removeprefix(prefix(task_id)).partition(".")
        live = pid.isdigit() and start.isdigit() and start_ticks(int(pid)) == int(start)
        if live and found is None and folder.is_dir() and not folder.is_symlink():
            found = Running(folder, int(pid), (folder / PUBLIC_SOCKET).exists())
        elif not live:
            remove_tree(folder)
    return found


def log_path(task_id: str) -> Path:
    folder = config.get_logs_dir() / task_label(TaskId(task_id))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / LOG_NAME


def start(task_id: str) -> Running:
    """Start the task's preview unless it runs; wait up to ``preview.start_seconds`` for its
    server to answer. ``InvalidInput`` when
    there is nothing to preview, ``PreviewFailed`` (with the end of its log) when it
    stops before it answers; still starting after the wait: returned not ``ready``."""
    from ...queue import machine as queue_utils

    task = queue_utils.get_task(task_id)  # an unknown task is that first (exit 3)
    cfg = config.load_config()
    if not cfg["preview"]["command"]:
        raise InvalidInput("config.yaml has no preview.command: nothing serves a preview")
    if task.state is not TaskState.PROVISIONAL:
        raise InvalidInput(
            f"{task.label} is not in review ({task.state.value}): a preview serves the "
            "branch under review"
        )
    with _starting(task.id):
        found = running(task.id)
        if found is None:
            found = _spawn(task.id)
    return _wait_ready(task.id, found, cfg["preview"]["start_seconds"])


def stop(task_id: str) -> bool:
    """Stop the task's preview; False when none ran."""
    found = running(task_id)
    if found is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(found.pid, signal.SIGTERM)
    return True


@contextlib.contextmanager
def _starting(task_id: str):
    """One start of a task's preview at a time (the check and the spawn)."""
    path = Path(tempfile.gettempdir()) / f"{prefix(task_id).rstrip('-')}.lock"  # no folder's
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


#: Daemons this process started: waited for once they end (no zombie in a long-lived web).
_started: list[subprocess.Popen] = []


def _spawn(task_id: str) -> Running:
    """The daemon, in a session of its own (it outlives `octopoid preview`); its folder."""
    for proc in list(_started):
        if proc.poll() is not None:
            _started.remove(proc)
    with open(log_path(task_id), "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.faces.preview.daemon", task_label(task_id)],
            cwd=config.find_project_root(),
            env={**os.environ, config.ROOT_ENV: str(config.find_project_root())},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _started.append(proc)
    folder = Path(tempfile.gettempdir()) / f"{prefix(task_id)}{proc.pid}.{start_ticks(proc.pid)}"
    return Running(folder, proc.pid, False)


def _wait_ready(task_id: str, found: Running, seconds: float) -> Running:
    deadline = time.monotonic() + seconds
    while not found.ready and time.monotonic() < deadline:
        if start_ticks(found.pid) is None:
            for proc in _started:
                proc.poll()  # reap it
            raise PreviewFailed(f"the preview stopped before it answered: {log_tail(task_id)}")
        time.sleep(0.1)
        found = Running(found.folder, found.pid, (found.folder / PUBLIC_SOCKET).exists())
    return found


def log_tail(task_id: str) -> str:
    """The end of the preview's log, cleaned and redacted (its server is the agent's code)."""
    try:
        data = log_path(task_id).read_bytes()[-LOG_TAIL:]
    except OSError:
        return "(no log)"
    return scrub(data.decode(errors="replace")).strip() or "(it said nothing)"

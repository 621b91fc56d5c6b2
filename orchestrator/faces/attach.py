"""`octopoid attach TASK-12`: follow a running attempt's output in the terminal, and talk
to it: each line typed is sent as ``octopoid say`` (``steering``). Detaching (end of
input, Ctrl-D; or Ctrl-C) leaves the attempt running.

What it shows is the attempt's live log (``task_notes.stdout_log_path``): the lines its
backend wrote as they came (Claude Code's and the API loop's tool calls and results, a
command's own output, the checks), already redacted and cleaned of terminal escapes. The
log is this machine's: on PostgreSQL an attempt another machine runs is attached to there
(a message sent with `say` reaches it from anywhere).
"""

from __future__ import annotations

import select
import signal
import time
from collections.abc import Callable
from typing import IO

from .. import config
from ..base.fsutil import read_since
from ..model.exceptions import IllegalTransition
from ..model.tasks import Task, TaskState
from ..queue import machine as queue_utils
from ..queue import steering
from ..queue.task_notes import stdout_log_path

POLL_SECONDS = 0.2  # how soon a line of output or of input is passed on
CHECK_SECONDS = 1.0  # how often the task is read to see whether its attempt ended
BACKLOG_BYTES = 4096  # of the output so far, shown when attaching
CHUNK_BYTES = 64 * 1024  # of output read at once


class _Log:
    """The attempt's log, read on from where the last read ended (``fsutil.read_since``);
    at the end of the attempt the runner archives it, and the rest is read there."""

    def __init__(self, task: Task) -> None:
        self.live = stdout_log_path(task.id)
        self.archived = config.get_logs_dir() / task.label / f"attempt-{task.attempts}.log"
        size = self.live.stat().st_size if self.live.exists() else 0
        self.offset = max(0, size - BACKLOG_BYTES)

    def read(self) -> str:
        """What was written since the last read: from the live log, or once the runner
        archived it (its notes saved, its checks to come), from the archive."""
        path = self.live if self.live.exists() else self.archived
        text, offset = read_since(path, self.offset, CHUNK_BYTES)
        if text or offset:  # ("", 0): gone between the look and the read; look again
            self.offset = offset
        return text

    def rest(self) -> str:
        """Everything after the last read (the attempt is over)."""
        parts = []
        while part := self.read():
            parts.append(part)
        return "".join(parts)


def _typed(stdin: IO[str], seconds: float) -> str | None:
    """A line typed within ``seconds`` ("" at the end of input), or None."""
    poller = select.poll()
    poller.register(stdin.fileno(), select.POLLIN | select.POLLHUP)
    return stdin.readline() if poller.poll(seconds * 1000) else None


def attach(task_id: str, stdin: IO[str], show: Callable[[str], None], by: str = "human") -> str:
    """Follow the task's running attempt, sending each line typed, until the input ends,
    Ctrl-C, or the attempt ends; what happened, in words. ``IllegalTransition`` when no
    attempt runs, ``TaskNotFound`` for an unknown task."""
    task = queue_utils.get_task(task_id)
    if task.state is not TaskState.CLAIMED:
        raise IllegalTransition(f"{task.label} is in {task.state.value}: no attempt is running")
    show(f"[attached to {task.label}, attempt {task.attempts}: a line typed is sent to it; "
         "Ctrl-D or Ctrl-C detaches]\n")  # fmt: skip
    log, checked = _Log(task), time.monotonic()
    interrupted: list[int] = []  # Ctrl-C: noted, and acted on between reads, never inside one
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: interrupted.append(signum))
    try:
        while not interrupted:
            if output := log.read():
                show(output)
            line = _typed(stdin, POLL_SECONDS)
            if line == "":
                return f"detached from {task.label}; its attempt goes on"
            if line and line.strip():
                said = steering.say(task.id, line.strip(), by)
                show(f"[message {said['n']} sent]\n")
            if time.monotonic() - checked >= CHECK_SECONDS:
                checked, now = time.monotonic(), queue_utils.get_task(task.id)
                if now.state is not TaskState.CLAIMED or now.attempts != task.attempts:
                    show(log.rest())
                    return f"attempt {task.attempts} ended; {task.label} is in {now.state.value}"
        return f"detached from {task.label}; its attempt goes on"
    finally:
        signal.signal(signal.SIGINT, previous)

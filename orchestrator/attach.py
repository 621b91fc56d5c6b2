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

import codecs
import os
import select
import time
from collections.abc import Callable
from typing import IO

from . import queue_utils, steering
from .exceptions import IllegalTransition
from .task_notes import stdout_log_path
from .tasks import TaskState, normalize_task_id

POLL_SECONDS = 0.2  # how soon a line of output or of input is passed on
CHECK_SECONDS = 1.0  # how often the task is read to see whether its attempt ended
BACKLOG_BYTES = 4096  # of the output so far, shown when attaching


class _Log:
    """The attempt's log, read as it grows; opened again if it is replaced (its cap keeps
    its tail in a new file). The runner archives it at the end by a rename: the open file
    reads on to its end."""

    def __init__(self, task_id: str) -> None:
        self.path = stdout_log_path(task_id)
        self.file: IO[bytes] | None = None
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a split character

    def read(self) -> str:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None and (self.file is None or self._replaced(st)):
            self.close()
            self.file = open(self.path, "rb")  # noqa: SIM115 (kept open while following)
            self.file.seek(max(0, st.st_size - BACKLOG_BYTES))
        return self.decoder.decode(self.file.read()) if self.file is not None else ""

    def _replaced(self, st: os.stat_result) -> bool:
        own = os.fstat(self.file.fileno())
        return (own.st_ino, own.st_dev) != (st.st_ino, st.st_dev) or st.st_size < self.file.tell()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _typed(stdin: IO[str], seconds: float) -> str | None:
    """A line typed within ``seconds`` ("" at the end of input), or None."""
    poller = select.poll()
    poller.register(stdin.fileno(), select.POLLIN | select.POLLHUP)
    return stdin.readline() if poller.poll(seconds * 1000) else None


def attach(task_id: str, stdin: IO[str], show: Callable[[str], None], by: str = "human") -> str:
    """Follow the task's running attempt, sending each line typed, until the input ends,
    Ctrl-C, or the attempt ends; what happened, in words. ``IllegalTransition`` when no
    attempt runs, ``TaskNotFound`` for an unknown task."""
    task = queue_utils.get_task(normalize_task_id(task_id))
    if task.state is not TaskState.CLAIMED:
        raise IllegalTransition(f"{task.label} is in {task.state.value}: no attempt is running")
    show(f"[attached to {task.label}, attempt {task.attempts}: a line typed is sent to it; "
         "Ctrl-D or Ctrl-C detaches]\n")  # fmt: skip
    log, checked = _Log(task.id), time.monotonic()
    try:
        while True:
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
                    show(log.read())
                    return f"attempt {task.attempts} ended; {task.label} is in {now.state.value}"
    except KeyboardInterrupt:
        return f"detached from {task.label}; its attempt goes on"
    finally:
        log.close()

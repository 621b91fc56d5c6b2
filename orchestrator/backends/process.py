"""Run an agent as a child process: stream its output, enforce the timeout, never leak it.

The child gets its own session and process group (so a timeout or shutdown kills
everything it started) and, on Linux, dies with its parent. What escapes the group (a
``setsid`` grandchild) is caught by the runner as subreaper, or by the claim token in its
environment (``processes.py``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..base.fsutil import TailBuffer
from ..base.processes import in_new_session_dying_with_parent, signal_group
from ..box.box import program_problem
from ..box.netbridge import CANNOT_RUN_SAYS, CANNOT_RUN_STATUS
from .base import AgentRequest

KILL_GRACE_SECONDS = 5.0
TICK_SECONDS = 1.0
EXIT_DRAIN_SECONDS = 0.5  # after the agent exits, output still arriving within this is kept
HEAD_BYTES = 1024  # output kept aside: a box's own complaint is all a box that never ran says
BWRAP_SAYS = "bwrap: "  # how bubblewrap starts what it says when it cannot go on


@dataclass
class ProcessOutcome:
    exit_code: int | None
    timed_out: bool
    start_error: str | None = None  # it never ran, and why
    cause: str | None = None  # why it never ran, in ``base.CAUSES``' words
    head: bytes = b""  # the first ``HEAD_BYTES`` + 1 bytes of its output


def run_agent_process(
    argv: list[str],
    request: AgentRequest,
    output: TailBuffer,
    on_chunk: Callable[[bytes], None] | None = None,
    stdin: bytes | None = None,
    more: Callable[[], bytes | None] | None = None,
) -> ProcessOutcome:
    """Run ``argv`` for ``request`` in its box, prompt on stdin, until exit or timeout.

    Raw output goes to ``on_chunk`` (a parser) or straight into ``output``. ``stdin``
    replaces the prompt as what the program reads first; with ``more`` its stdin stays
    open (``live_stdin``). A program that cannot start is said so plainly (the box would
    only say that it could not exec it), and so is a box that could not be made; both
    carry their ``cause``.
    """
    why = program_problem(argv[0], request.box.cwd, request.box.env.get("PATH"))
    if why:
        return ProcessOutcome(None, False, f"cannot run {argv[0]!r}: it {why}", "cannot-start")
    done = run_process(
        request.box.wrap(argv),
        request.box.cwd,
        request.box.env,
        output,
        request.timeout_seconds,
        request.prompt.encode() if stdin is None else stdin,
        request.on_tick,
        on_chunk,
        more,
    )
    if done.start_error:  # bwrap itself, when there is a box
        done.cause = "box" if request.box.sandboxed else "cannot-start"
    elif request.box.sandboxed:
        return _box_refused(done, argv[0])
    return done


def _box_refused(done: ProcessOutcome, program: str) -> ProcessOutcome:
    """bwrap's own complaint (status 1, one line of its own and nothing else), or a launcher's
    in the box (the network's bridge, the services') with status 127, means the box never ran the
    program: it could not exec it, or the box could not be made."""
    said = done.head.decode(errors="replace").strip()
    if len(done.head) > HEAD_BYTES or "\n" in said:
        return done
    launcher = done.exit_code == CANNOT_RUN_STATUS and said.startswith(CANNOT_RUN_SAYS)
    if launcher or (done.exit_code == 1 and said.startswith(f"{BWRAP_SAYS}execvp ")):
        why = f"cannot run {program!r} in its box: {said}"
        return ProcessOutcome(done.exit_code, False, why, "cannot-start")
    if done.exit_code == 1 and said.startswith(BWRAP_SAYS):
        return ProcessOutcome(1, False, f"the box could not start: {said}", "box")
    return done


def run_process(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    output: TailBuffer,
    timeout_seconds: float,
    stdin_data: bytes | None = None,
    on_tick: Callable[[], None] = lambda: None,
    on_chunk: Callable[[bytes], None] | None = None,
    more: Callable[[], bytes | None] | None = None,
) -> ProcessOutcome:
    """Run ``argv`` until it exits or times out; raw output goes to ``on_chunk`` or ``output``;
    with ``more``, stdin stays open for what it gives at each tick (``live_stdin``)."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=in_new_session_dying_with_parent(),
        )
    except OSError as exc:
        return ProcessOutcome(None, False, f"cannot run {argv[0]!r}: {exc.strerror or exc}")
    head = bytearray()
    close_stdin: Callable[[], None] | None = None

    def sink(chunk: bytes) -> None:
        if len(head) <= HEAD_BYTES:
            head.extend(chunk[: HEAD_BYTES + 1 - len(head)])
        (on_chunk or output.feed)(chunk)

    try:
        if stdin_data is not None:
            on_tick, close_stdin = live_stdin(proc, stdin_data, more, on_tick)
        deadline, code = time.monotonic() + timeout_seconds, None
        if not _pump(proc, sink, deadline, on_tick):  # output closed; it may still be finishing
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(max(0.0, deadline - time.monotonic()))
        return ProcessOutcome(code, code is None, head=bytes(head))  # no code: timed out
    finally:
        _kill_group(proc)
        if close_stdin is not None:
            close_stdin()


def live_stdin(
    proc: subprocess.Popen,
    first: bytes,
    more: Callable[[], bytes | None] | None,
    on_tick: Callable[[], None],
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Write ``first`` to the agent's stdin, then close it; with ``more``, keep it open:
    the tick returned runs ``on_tick``, then writes what ``more()`` gives, until it gives
    None: then stdin is closed (as by the close returned, once the agent is gone). One
    writer thread, in order, so a full pipe never stalls reading the output."""
    pending: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def write() -> None:
        with contextlib.suppress(OSError):  # the agent may have exited (a broken pipe)
            while (data := pending.get()) is not None:
                proc.stdin.write(data)
                proc.stdin.flush()
        with contextlib.suppress(OSError):
            proc.stdin.close()

    threading.Thread(target=write, name="agent-stdin", daemon=True).start()
    pending.put(first)
    if more is None:
        pending.put(None)
        return on_tick, lambda: None
    is_open = [True]

    def tick() -> None:
        on_tick()
        if is_open[0]:
            data = more()
            if data is None:
                pending.put(None)
                is_open[0] = False
            elif data:
                pending.put(data)

    return tick, lambda: pending.put(None)


def _pump(
    proc: subprocess.Popen,
    sink: Callable[[bytes], None],
    deadline: float,
    on_tick: Callable[[], None],
) -> bool:
    """Copy output until EOF, or until the agent itself exited and its output went quiet
    (a background process it left may hold the pipe open forever); True on timeout."""
    fd = proc.stdout.fileno()
    next_tick = time.monotonic() + TICK_SECONDS
    quiet_since: float | None = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            return True
        if now >= next_tick:
            on_tick()
            next_tick = now + TICK_SECONDS
        if quiet_since is None and proc.poll() is not None:
            quiet_since = now
        if quiet_since is not None and now - quiet_since >= EXIT_DRAIN_SECONDS:
            return False
        wait = min(TICK_SECONDS, deadline - now, EXIT_DRAIN_SECONDS)
        if readable(fd, wait):
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return False
            sink(chunk)
            if quiet_since is not None:
                quiet_since = time.monotonic()


def readable(fd: int, seconds: float) -> bool:
    """Whether ``fd`` has data (or EOF) within ``seconds``: poll(2), which unlike select(2)
    takes any descriptor number (a process with over 1024 open files is no exception)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(max(0.0, seconds) * 1000))


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop the agent and everything it started: TERM, a grace period, then KILL."""
    if proc.poll() is None:
        signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(KILL_GRACE_SECONDS)
    signal_group(proc.pid, signal.SIGKILL)  # stragglers in the group, even if the leader exited
    proc.wait()
    if proc.stdout:
        proc.stdout.close()

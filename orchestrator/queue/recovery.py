"""Recovering claims whose owner is gone, hung or told to stop, and crash leftovers.

Every move here is fenced by the claim token read before it, so a claim that was renewed,
requeued or claimed again in the meantime is left alone (``LostClaim``). Before a claim is
given back, its processes are stopped: no attempt's agent outlives the attempt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from datetime import datetime

from .. import config
from ..base.processes import kill_claim_processes, signal_group, wait_gone
from ..model.exceptions import IllegalTransition, TaskNotFound
from ..model.tasks import ID_RE, Task, TaskState, format_time, refuse_planning, utcnow
from . import machine as queue_utils
from .leases import (
    attempts_left,
    claim_token,
    dead_since,
    ever_started,
    overdue,
    owner,
    reaper_fence,
)
from .task_notes import cleanup_task_notes, noted_task_ids, salvage_output_log

log = logging.getLogger("octopoid.recovery")
S = TaskState

#: The signal that tells a runner its claim was taken away (it stops, saves notes, exits).
STOP_SIGNAL = signal.SIGUSR1


def reap_expired_claims(
    now: datetime | None = None, max_attempts: int | None = None
) -> list[tuple[Task, TaskState]]:
    """Give back claims whose lease expired and whose owner is gone, or that overran their
    hard deadline (their processes are killed first); then repair crash leftovers."""
    now = now or utcnow()
    lease_seconds = config.load_agents()["lease_seconds"]
    reaped = []
    for task in queue_utils.get_store().list(S.CLAIMED):
        expires = dead_since(task, now, lease_seconds)
        if expires is not None:
            who = task.headers.get("CLAIMED_BY", "?")
            why = f"lease expired at {format_time(expires)} ({who} gone)"
        elif overdue(task, now):
            why = f"past its deadline {task.headers['DEADLINE']}; its processes were killed"
            stop_claim_processes(task, grace=0)
        else:
            continue
        recovered = recover_dead_claim(task, why, max_attempts, now)
        if recovered is not None:
            reaped.append((recovered, recovered.state))
    queue_utils.sweep_store(now)
    _clean_notes_of_finished_tasks()
    return reaped


def recover_dead_claim(
    task: Task, why: str, max_attempts: int | None = None, now: datetime | None = None
) -> Task | None:
    """A claim whose runner is gone: save what it printed as notes, then requeue or fail it.

    A claim no runner ever took over ran nothing: it goes back with its attempt given back.
    Returns None when the claim moved on meanwhile (another token, or a renewed lease).
    """
    if claim_token(task):
        kill_claim_processes(claim_token(task))  # a dead runner's orphans die first
    token = reaper_fence(task)  # a claim renewed since it was read is not ours to move
    try:
        if not ever_started(task):
            return queue_utils.release_claim(
                task,
                f"{why}; no runner started, the attempt is given back",
                "reaper",
                now,
                counted=False,
                token=token,
            )
        max_attempts = max_attempts or config.load_agents()["max_attempts"]
        if task.headers.get("PHASE") == "breakdown" or attempts_left(task, max_attempts) > 0:
            moved = queue_utils.release_claim(task, why, "reaper", now, token=token)
        else:
            moved = queue_utils.fail_task(task, f"attempts exhausted; {why}", now, token=token)
    except (IllegalTransition, TaskNotFound):
        return None
    salvage_lost_output(moved, task.attempts, f"the runner died: {why}")
    return moved


def salvage_lost_output(task: Task, attempt: int, why: str) -> bool:
    """Notes from the output log an attempt streamed but did not save (its runner died)."""
    archive = config.get_logs_dir() / task.label / f"attempt-{attempt}.log"
    agent = task.headers.get("CLAIMED_BY") or "agent"
    return salvage_output_log(task.id, agent, attempt, why, archive)


def stop_claim_processes(task: Task, grace: float) -> bool:
    """Ask the claim's runner to stop, wait up to ``grace`` s, then kill what is left.

    Only a runner (``STARTED_AT``: it took the claim over and listens for the stop signal)
    is signalled; a claim not yet taken over is only revoked, and its runner, if one is
    starting, finds the claim gone. True if the runner stopped by itself (and saved notes).
    """
    runner = owner(task)
    stopped = True
    if ever_started(task) and runner is not None and runner.alive() and runner.pid != os.getpid():
        _signal(runner.pid, STOP_SIGNAL)
        stopped = wait_gone(runner, grace)
        if not stopped and runner.alive():
            _signal(runner.pid, signal.SIGKILL)
            signal_group(runner.pid, signal.SIGKILL)  # a runner leads its own session
    kill_claim_processes(claim_token(task))
    return stopped


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def requeue_running(task_id: str, reason: str, actor: str = "human") -> tuple[Task, str]:
    """``octopoid requeue``: take a claim back, stop its attempt, and say what happened.

    The claim is revoked first (a fenced move to incoming), so the old runner can no longer
    write anything; then it is told to stop and given the shutdown grace to save its notes;
    whatever is left of it is killed. A new attempt's runner also waits for every process
    of an older attempt of the task to be gone before it starts the agent.
    """
    task = queue_utils.get_task(task_id)
    if task.state is not S.CLAIMED:
        raise IllegalTransition(f"{task.label} is in {task.state.value}, not claimed")
    refuse_planning(task, "requeued")
    moved = queue_utils.release_claim(task, reason, actor)
    runner = owner(task)
    if not ever_started(task) or runner is None or not runner.alive():
        salvage_lost_output(moved, task.attempts, f"requeued by {actor} after its runner was gone")
        kill_claim_processes(claim_token(task))
        return moved, "its runner was already gone"
    grace = config.load_agents()["shutdown_grace_seconds"]
    if stop_claim_processes(task, grace):
        return moved, f"its runner (pid {runner.pid}) stopped and saved its notes"
    salvage_lost_output(moved, task.attempts, f"requeued by {actor}; its runner did not stop")
    return moved, f"its runner (pid {runner.pid}) did not stop within {grace}s and was killed"


def _clean_notes_of_finished_tasks() -> None:
    """Retry notes of done tasks: left only if a crash came between the move and the cleanup."""
    store = queue_utils.get_store()
    for task_id in noted_task_ids():
        if ID_RE.fullmatch(task_id) and store.locate(task_id) is S.DONE:
            cleanup_task_notes(task_id)

"""The scheduler's runners: started (forked by the fork server, or spawned), collected,
killed past their deadline, stopped at shutdown, and what a dead one's attempt left.

Each attempt runs in its own runner process (``roles/implementer.py``), in a session of
its own, so a scheduler restart (or crash) does not stop work in progress. Runners are
known by their claim tokens (a task claimed again before its old runner exited has two,
each with its own entry); a runner that cannot start gives its claim back at once, and
one that dies has its claim recovered now, not at lease expiry. As a subreaper the
daemon also kills what a dead runner's attempt left re-parented to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import config
from ..base.processes import adopted_children, kill_claim_processes, reap, signal_group
from ..model import defaults
from ..model.exceptions import IllegalTransition, OctopoidError
from ..model.tasks import Task, TaskState
from ..queue import machine as queue_utils
from ..queue import recovery
from ..queue.leases import claim_token
from ..roles.base import RUNNER, deadline_seconds, runner_env
from .forkserver import ForkedRunner, ForkServer
from .scheduler_control import RUNNER_STOP_SECONDS

log = logging.getLogger("octopoid.scheduler")

RUNNER_PIDS_KEPT = 10_000  # runners remembered, so their helpers are not taken for orphans


@dataclass
class Runner:
    task_id: str
    agent: str
    proc: subprocess.Popen | ForkedRunner
    token: str
    deadline: float  # monotonic; past it the runner is hung and killed
    started: float = field(default_factory=time.monotonic)

    def kill(self) -> None:
        """The runner, its session, and every process its attempt started."""
        signal_group(self.proc.pid, signal.SIGKILL)
        kill_claim_processes(self.token)


class Runners:
    """The runners one scheduler started, by claim token (``running``), never by task id."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.running: dict[str, Runner] = {}
        self.forkserver: ForkServer | None = None  # runners forked, not spawned
        self.subreaper = False  # orphans of dead runners come to this process, and die
        self._pids: dict[int, None] = {}  # every runner started (their helpers live)

    def start(self, task: Task, agent: dict, woken_by: str) -> bool:
        """Start the attempt's runner; if it cannot start, give the claim back at once."""
        log_dir = config.get_logs_dir() / task.label
        token = claim_token(task)
        env = runner_env(self.root, task, token)
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            proc, how = self._spawn([task.id, agent["name"]], env, log_dir / "runner.log")
        except OSError as exc:
            log.error("cannot start a runner for %s: %s; giving the claim back", task.label, exc)
            with contextlib.suppress(IllegalTransition):
                queue_utils.release_claim(
                    task, f"the runner could not start: {exc}", "octopoid", counted=False
                )
            # Then a runner a late fork server forked is killed: one that noted its marks
            # before this scan dies; one that notes them after takes over a claim already
            # given back (LostClaim). Killed first, a runner marked just after the scan
            # could take the claim over before the release and run its agent.
            kill_claim_processes(token)
            return False
        try:
            limit = deadline_seconds(agent, task, config.load_config())
        except OctopoidError:  # a bad CHECKS header: the runner will say so; no checks run
            limit = agent["timeout_seconds"] + defaults.RUNNER_DEADLINE_GRACE_SECONDS
        self.running[token] = Runner(
            task.label, agent["name"], proc, token, time.monotonic() + limit
        )
        self._pids[proc.pid] = None
        while len(self._pids) > RUNNER_PIDS_KEPT:
            del self._pids[next(iter(self._pids))]
        log.info(
            "claimed %s for %s (attempt %d); runner %d %s (woken by %s)",
            task.label,
            agent["name"],
            task.attempts,
            proc.pid,
            how,
            woken_by,
        )
        return True

    def _spawn(
        self, args: list[str], env: dict[str, str], log_path: Path
    ) -> tuple[subprocess.Popen | ForkedRunner, str]:
        """A runner in a session of its own, and how it was started: forked by the fork
        server, or (without one, or once it failed) spawned."""
        if self.forkserver is not None:
            try:
                return self.forkserver.spawn(args, env, str(self.root), str(log_path)), "forked"
            except TimeoutError as exc:  # it may fork that runner yet: never start a second
                log.error("the fork server did not answer in time; runners are spawned from now on")
                self.close_forkserver()
                raise OSError(
                    "the fork server did not answer in time (a runner it starts late finds "
                    "its claim given back)"
                ) from exc
            except (OSError, ValueError) as exc:
                log.error("the fork server failed (%s); runners are spawned from now on", exc)
                self.close_forkserver()
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, *RUNNER, *args],
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return proc, "spawned"

    def open_forkserver(self) -> None:
        """Only a subreaper can fork runners this way: they are re-parented to it."""
        if not self.subreaper:
            return
        try:
            self.forkserver = ForkServer()
        except OSError as exc:
            log.error("cannot start the fork server (%s); runners are spawned", exc)

    def close_forkserver(self) -> None:
        if self.forkserver is not None:
            self.forkserver.close()
            self.forkserver = None

    def any_finished(self) -> bool:
        return any(r.proc.poll() is not None for r in self.running.values())

    def collect(self, recover: bool = True) -> list[tuple[str, int]]:
        """Forget runners that exited, each as (task, exit code); recover the claims of
        those that died (``recover``: without a valid configuration, the lease reaper does
        it once there is one again). Only then can something have been re-parented here,
        so only then is it looked for."""
        finished = []
        for token, runner in list(self.running.items()):
            code = runner.proc.poll()
            if code is None and time.monotonic() > runner.deadline:
                log.error(
                    "runner %d for %s is past its deadline; killing it",
                    runner.proc.pid,
                    runner.task_id,
                )
                runner.kill()
                code = runner.proc.wait()
            if code is None:
                continue
            del self.running[token]
            seconds = time.monotonic() - runner.started
            level = logging.INFO if code == 0 else logging.ERROR
            log.log(level, "runner for %s exited %d after %.1fs", runner.task_id, code, seconds)
            finished.append((runner.task_id, code))
            kill_claim_processes(runner.token)  # nothing of an attempt outlives its runner
            if code != 0 and recover:
                _recover(runner, code)
        if finished:
            self.kill_orphans()
        return finished

    def kill_orphans(self) -> None:
        """Processes a dead runner's attempt left (``setsid env -i`` included: no mark, no
        group) were re-parented to this scheduler, a subreaper: they die here."""
        if not self.subreaper:
            return
        ours = set(self._pids)
        if self.forkserver is not None:
            ours.add(self.forkserver.proc.pid)
        orphans, exited = adopted_children(ours)
        for pid in orphans:
            log.warning("killing process %d: left by an attempt whose runner died", pid)
            signal_group(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reap([*orphans, *exited])

    def stop(self, grace: float, every: float) -> None:
        """Give running attempts ``grace`` seconds (looking ``every`` seconds whether they
        finished), then stop them (each saves its notes and requeues); one that ignores
        SIGTERM is killed."""
        deadline = time.monotonic() + grace
        while self.running and time.monotonic() < deadline:
            self.collect()
            time.sleep(every)
        for runner in self.running.values():
            log.info(
                "stopping %s (runner %d): it saves notes and requeues",
                runner.task_id,
                runner.proc.pid,
            )
            runner.proc.send_signal(signal.SIGTERM)
        for runner in list(self.running.values()):
            try:
                runner.proc.wait(RUNNER_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                log.error(
                    "runner %d for %s ignored SIGTERM; killing it (the lease reaper "
                    "will requeue the task)",
                    runner.proc.pid,
                    runner.task_id,
                )
                runner.kill()
                runner.proc.wait()
            kill_claim_processes(runner.token)  # nothing of an attempt outlives it
        self.running.clear()

    def kill_all(self) -> None:
        """Kill every runner at once (their claims are gone with the runtime)."""
        for runner in self.running.values():
            runner.kill()
            runner.proc.wait()
        self.running.clear()


def _recover(runner: Runner, code: int) -> None:
    """A runner that died left its task claimed: recover it now, not at lease expiry.

    Only if the claim is still the one this runner held (its token): a claim requeued
    by hand, or claimed again since, is somebody else's.
    """
    try:
        task = queue_utils.get_task(runner.task_id)
    except OctopoidError:
        return
    if task.state is TaskState.CLAIMED and claim_token(task) == runner.token:
        moved = recovery.recover_dead_claim(task, f"runner exited with status {code}")
        if moved is not None:
            log.warning("recovered %s from a dead runner -> %s", task.label, moved.state.value)

"""The scheduler daemon: reap expired claims, claim work for idle agents, start runners.

``initialize()``, one pass ``loop_once(now)``, ``shutdown()``: tests drive single passes;
``run()`` repeats passes until asked to stop. Each attempt runs in its own runner process
(``roles/implementer.py``), started in its own session, so a scheduler restart (or crash)
does not stop work in progress, and the reaper can tell a live runner from a dead one.
The daemon wakes the moment a task lands in ``incoming/`` (``wakeup``: inotify) or the
store notifies it (PostgreSQL), and forks runners from a server that imported the runner
once (``forkserver``), spawning them as before if it cannot.
The scheduler knows its runners by their claim tokens (a task claimed again before its
old runner exited has two, each with its own entry), gives a claim back at once when a
runner cannot start, and kills a runner (and everything its attempt started) that outlives
its hard deadline.

Its size: one Scheduler class doing dispatch, runner spawning, the fork server, the forge
thread and orphan reaping; issue 38 asks for it to be split by those.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .. import box as sandbox
from .. import config
from ..base.fsutil import atomic_write
from ..base.processes import (
    adopted_children,
    become_subreaper,
    kill_claim_processes,
    reap,
    signal_group,
)
from ..model import defaults
from ..model.exceptions import ConfigError, IllegalTransition, OctopoidError, SchedulerError
from ..model.tasks import Task, TaskState, task_label, utcnow
from ..queue import agent_records, budgets, recovery
from ..queue import machine as queue_utils
from ..queue.leases import claim_token
from ..review import finishing
from ..roles.base import RUNNER, deadline_seconds, runner_env
from . import stalls, wakeup
from .forkserver import ForkedRunner, ForkServer
from .notify import Alerts
from .scheduler_control import (
    RUNNER_STOP_SECONDS,
    lock_file,
    pid_file,
    read_pid,
    setup_logging,
    try_lock,
)

log = logging.getLogger("octopoid.scheduler")

WATCH_SECONDS = 0.25  # how often the idle loop looks for new work (a stat or two)
HOUSEKEEPING_SECONDS = 5.0  # a full pass at least this often (lease reaping)
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


@dataclass
class PassReport:
    reaped: list[str] = field(default_factory=list)
    started: list[tuple[str, str]] = field(default_factory=list)
    finished: list[tuple[str, int]] = field(default_factory=list)
    skipped: str = ""


class Scheduler:
    def __init__(self, own_process: bool = False) -> None:
        """``own_process``: this process is the daemon and nothing else (`scheduler run`), so
        it becomes a subreaper and kills what dead runners' attempts leave re-parented to it;
        a scheduler run by other code (tests, the demo) leaves that process's children be."""
        self.own_process = own_process
        self.root = config.find_project_root()
        self.runners: dict[str, Runner] = {}  # by claim token, never by task id
        self._lock_fd: int | None = None  # an flock of its own fd: one scheduler per root
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and by the store's watch (NOTIFY)
        self._stopping = False
        self._warned: dict[str, str] = {}  # the stall last logged, by whom it stalls
        self._config_problem: str | None = None
        self._lock_inode = 0
        self._alerts: Alerts | None = None  # from initialize(): tasks present then are old news
        self._subreaper = False  # run(): orphans of dead runners come to us, and die
        self._runner_pids: dict[int, None] = {}  # every runner started (their helpers live)
        self._next_sweep = 0.0
        self._forkserver: ForkServer | None = None  # run(): runners forked, not spawned
        self._woken_by = ""  # what set _wake last
        self.wakeups: Counter[str] = Counter()  # by what: logged when the daemon stops
        self._inotify = False  # incoming/ is watched by the kernel, not by its mtime
        self._pass_reason = "a pass"  # why the current pass runs: said when it claims

    # --- lifecycle ----------------------------------------------------------------------

    def initialize(self) -> None:
        """Take the one-scheduler-per-root lock, write the pid file, start logging."""
        lock_file().parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = try_lock()
        if self._lock_fd is None:
            raise SchedulerError(
                f"a scheduler is already running for {self.root} (pid {read_pid() or '?'}); "
                "`octopoid scheduler stop` stops it"
            )
        atomic_write(pid_file(), f"{os.getpid()}\n")
        self._lock_inode = os.stat(lock_file()).st_ino
        setup_logging()
        self._alerts = Alerts()
        log.info("scheduler %d started for %s", os.getpid(), self.root)

    def shutdown(self, grace: float | None = None) -> None:
        """Stop claiming; give running attempts ``grace`` seconds, then stop and requeue them."""
        self._stopping = True
        if grace is None:
            try:
                grace = config.load_agents()["shutdown_grace_seconds"]
            except ConfigError as exc:
                log.error("%s; using the default shutdown grace", exc)
                grace = defaults.SHUTDOWN_GRACE_SECONDS
        deadline = time.monotonic() + grace
        while self.runners and time.monotonic() < deadline:
            self._collect_finished(PassReport())
            time.sleep(WATCH_SECONDS)
        for runner in self.runners.values():
            log.info(
                "stopping %s (runner %d): it saves notes and requeues",
                runner.task_id,
                runner.proc.pid,
            )
            runner.proc.send_signal(signal.SIGTERM)
        for runner in list(self.runners.values()):
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
        self.runners.clear()
        self._release("it was asked to stop (attempts still running were requeued)")

    def _release(self, why: str | None = None) -> None:
        """Give up the pid file and lock; ``why`` (a real stop, not `run --once`) is alerted."""
        pid_file().unlink(missing_ok=True)
        log.info("scheduler %d stopped", os.getpid())
        if self._alerts is not None and why:
            self._alerts.stopped(why)
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    def stop(self) -> None:
        """Ask ``run()`` to finish (safe from a signal handler)."""
        self._stop.set()
        self.wake("stop")

    def wake(self, reason: str, detail: str = "") -> None:
        """Run a pass now, not at the next poll (from any thread)."""
        self.wakeups[reason] += 1
        self._woken_by = f"{reason} ({detail})" if detail else reason
        self._wake.set()

    # --- the pass -----------------------------------------------------------------------

    def loop_once(self, now: datetime | None = None) -> PassReport:
        """Reap, collect finished runners, then claim and start work for idle agents.

        While the configuration is invalid, nothing is claimed or reaped (both need it):
        one log line says so, and one more when it is fixed.
        """
        report = PassReport()
        problem = config.problem()
        self._note_config(problem)
        if problem:
            self._collect_finished(report, recover=False)
            report.skipped = problem
            return report
        for task, state in recovery.reap_expired_claims(now):
            log.warning("reaped %s: lease expired, owner gone -> %s", task.label, state.value)
            report.reaped.append(task.label)
        self._collect_finished(report)
        agents_cfg = config.load_agents()
        records = agent_records.day_records(agents_cfg)  # once a pass: pauses, days, breakers
        if self._alerts is not None:
            self._alerts.tripped(records)
        if self._stopping:
            report.skipped = "stopping"
            return report
        report.skipped = self._blocked_reason(agents_cfg, records)
        if not report.skipped:
            self._dispatch(agents_cfg, records, report, now)
        if self._alerts is not None:  # after the claims: it reads the questions' records
            self._alerts.look()
        self._sweep(records, now)
        return report

    def _note_config(self, problem: str | None) -> None:
        if problem != self._config_problem:
            if problem:
                log.error("%s; claiming nothing until it is fixed", problem)
            else:
                log.info("configuration is valid again; claiming resumes")
        self._config_problem = problem

    def _sweep(self, records: stalls.Records, now: datetime | None = None) -> None:
        """What dead runners' attempts left (containment settled, clones removed), what
        dead accepts left (``finishing``), and budget alerts: at most every
        ``HOUSEKEEPING_SECONDS``, after the claims, as it is nobody's wait."""
        if time.monotonic() < self._next_sweep:
            return
        self._next_sweep = time.monotonic() + HOUSEKEEPING_SECONDS
        self._kill_orphans()  # and what the orphans killed last time left in their turn
        store = queue_utils.get_store()
        # A runner not collected yet may have moved its task and still be removing its own
        # clone: only one that is gone (collected, or never ours) left what is swept.
        ours = {runner.task_id for runner in self.runners.values()}

        def running(task_id: str) -> bool:
            return task_label(task_id) in ours or store.locate(task_id) is TaskState.CLAIMED

        for line in sandbox.sweep(running):
            log.warning("after a dead runner: %s", line)
        for line in finishing.finish_interrupted():
            log.warning("%s", line)
        if self._alerts is not None:  # budgets at 80 % or spent: no claim waits for this
            cfg = config.load_config()
            claimed = store.list(TaskState.CLAIMED)
            self._alerts.budgets(budgets.watched(claimed, records, cfg, now or utcnow()))

    def _blocked_reason(self, agents_cfg: dict, records: stalls.Records) -> str:
        """Why nothing is claimed this pass (``stalls.system``), logged when it changes."""
        store = queue_utils.get_store()
        found = "; ".join(stall.text for stall in stalls.system(agents_cfg, records, store))
        self._say_once("not claiming", found)
        return found

    def _say_once(self, who: str, problem: str) -> None:
        """Log a stall when it starts or changes, and once when it ends: never every pass."""
        if problem != self._warned.get(who, ""):
            if problem:
                log.warning("%s: %s", who, problem)
            else:
                log.info("%s: no longer; claiming resumes", who)
        self._warned[who] = problem

    def _dispatch(
        self, agents_cfg: dict, records: stalls.Records, report: PassReport, now: datetime | None
    ) -> None:
        claimed = queue_utils.get_store().list(TaskState.CLAIMED)
        room = agents_cfg["max_claimed"] - len(claimed)
        for agent in agents_cfg["agents"]:
            if self._cannot_claim(agent, agents_cfg, records):
                continue
            busy = sum(1 for t in claimed if t.headers.get("CLAIMED_BY") == agent["name"])
            while room > 0 and busy < agent["max_concurrent"]:
                task = self._claim_for(agent, agents_cfg["lease_seconds"], now)
                if task is None:
                    break
                if self._start_runner(task, agent):
                    report.started.append((task.label, agent["name"]))
                room, busy = room - 1, busy + 1

    @staticmethod
    def _claim_for(agent: dict, lease_seconds: int, now: datetime | None) -> Task | None:
        """Breakdown agents take burned-out tasks from breakdown/; others, their role's."""
        breakdown = agent["role"] == stalls.BREAKDOWN_ROLE
        return queue_utils.claim_task(
            None if breakdown else agent["role"],
            agent["name"],
            source=TaskState.BREAKDOWN if breakdown else TaskState.INCOMING,
            lease_seconds=lease_seconds,
            now=now,
        )

    def _cannot_claim(self, agent: dict, agents_cfg: dict, records: stalls.Records) -> bool:
        """An agent paused or unable to run (no claude binary, no API key) is skipped; its
        reasons are logged when they change (``stalls.for_agent``)."""
        found = "; ".join(stall.text for stall in stalls.for_agent(agent, agents_cfg, records))
        self._say_once(f"agent {agent['name']}", found)
        return bool(found)

    def _start_runner(self, task: Task, agent: dict) -> bool:
        """Start the attempt's runner; if it cannot start, give the claim back at once."""
        log_dir = config.get_logs_dir() / task.label
        token = claim_token(task)
        env = runner_env(self.root, task, token)
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            proc, how = self._spawn([task.id, agent["name"]], env, log_dir / "runner.log")
        except OSError as exc:
            log.error("cannot start a runner for %s: %s; giving the claim back", task.label, exc)
            kill_claim_processes(token)  # a fork server that answered late may have forked one
            with contextlib.suppress(IllegalTransition):
                queue_utils.release_claim(
                    task, f"the runner could not start: {exc}", "octopoid", counted=False
                )
            return False
        try:
            limit = deadline_seconds(agent, task, config.load_config())
        except OctopoidError:  # a bad CHECKS header: the runner will say so; no checks run
            limit = agent["timeout_seconds"] + defaults.RUNNER_DEADLINE_GRACE_SECONDS
        self.runners[token] = Runner(
            task.label, agent["name"], proc, token, time.monotonic() + limit
        )
        self._runner_pids[proc.pid] = None
        while len(self._runner_pids) > RUNNER_PIDS_KEPT:
            del self._runner_pids[next(iter(self._runner_pids))]
        log.info(
            "claimed %s for %s (attempt %d); runner %d %s (woken by %s)",
            task.label,
            agent["name"],
            task.attempts,
            proc.pid,
            how,
            self._pass_reason,
        )
        return True

    def _spawn(
        self, args: list[str], env: dict[str, str], log_path: Path
    ) -> tuple[subprocess.Popen | ForkedRunner, str]:
        """A runner in a session of its own, and how it was started: forked by the fork
        server, or (without one, or once it failed) spawned."""
        if self._forkserver is not None:
            try:
                return self._forkserver.spawn(args, env, str(self.root), str(log_path)), "forked"
            except TimeoutError as exc:  # it may fork that runner yet: never start a second
                log.error("the fork server did not answer in time; runners are spawned from now on")
                self._close_forkserver()
                raise OSError(
                    "the fork server did not answer in time (a runner it starts late finds "
                    "its claim given back)"
                ) from exc
            except (OSError, ValueError) as exc:
                log.error("the fork server failed (%s); runners are spawned from now on", exc)
                self._close_forkserver()
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

    def _start_forkserver(self) -> None:
        """Only a subreaper can fork runners this way: they are re-parented to it."""
        if not self._subreaper:
            return
        try:
            self._forkserver = ForkServer()
        except OSError as exc:
            log.error("cannot start the fork server (%s); runners are spawned", exc)

    def _close_forkserver(self) -> None:
        if self._forkserver is not None:
            self._forkserver.close()
            self._forkserver = None

    def _collect_finished(self, report: PassReport, recover: bool = True) -> None:
        """Forget runners that exited; recover the claims of those that died (``recover``:
        without a valid configuration, the lease reaper does it once there is one again).
        Only then can something have been re-parented here, so only then is it looked for."""
        finished = False
        for token, runner in list(self.runners.items()):
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
            del self.runners[token]
            finished = True
            seconds = time.monotonic() - runner.started
            level = logging.INFO if code == 0 else logging.ERROR
            log.log(level, "runner for %s exited %d after %.1fs", runner.task_id, code, seconds)
            report.finished.append((runner.task_id, code))
            kill_claim_processes(runner.token)  # nothing of an attempt outlives its runner
            if code != 0 and recover:
                self._recover(runner, code)
        if finished:
            self._kill_orphans()

    def _kill_orphans(self) -> None:
        """Processes a dead runner's attempt left (``setsid env -i`` included: no mark, no
        group) were re-parented to this scheduler, a subreaper: they die here."""
        if not self._subreaper:
            return
        ours = set(self._runner_pids)
        if self._forkserver is not None:
            ours.add(self._forkserver.proc.pid)
        orphans, exited = adopted_children(ours)
        for pid in orphans:
            log.warning("killing process %d: left by an attempt whose runner died", pid)
            signal_group(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reap([*orphans, *exited])

    def _recover(self, runner: Runner, code: int) -> None:
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

    # --- the daemon loop ----------------------------------------------------------------

    def run(self, once: bool = False) -> None:
        """Passes until ``stop()`` (SIGINT/SIGTERM).

        ``once`` does a single pass and exits, leaving the attempts it started to run to
        their end in their own processes (for cron).
        """
        self.initialize()
        if once:
            try:
                self._guarded_pass()
            finally:
                self._release()
            return
        lost = None
        self._subreaper = self.own_process and become_subreaper()
        self._start_forkserver()
        stop_watching = self._watch_store()
        self._start_forge()
        try:
            watched = self._watch_state()
            next_pass = 0.0
            while not self._stop.is_set() and not (lost := self._runtime_lost()):
                state = self._watch_state()
                reason = self._woken_by if self._wake.is_set() else ""
                if state != watched:
                    reason = reason or "a poll (a folder or file changed)"
                elif self._any_finished():
                    reason = reason or "a runner's exit"
                elif time.monotonic() >= next_pass:
                    reason = reason or "housekeeping"
                if reason:
                    self._wake.clear()  # a change during the pass wakes the next one
                    watched, self._pass_reason = state, reason
                    self._guarded_pass()
                    next_pass = time.monotonic() + HOUSEKEEPING_SECONDS
                self._wake.wait(WATCH_SECONDS)
        finally:
            stop_watching()
            self._close_forkserver()
            woken = ", ".join(f"{why} {n}" for why, n in sorted(self.wakeups.items()))
            log.info("woken without a poll: %s", woken or "never")
            if lost:
                log.error("%s: this scheduler stops and kills its runners", lost)
                self._abandon(lost)
            else:
                self.shutdown()

    def _start_forge(self) -> None:
        """Poll GitHub or GitLab in a thread when config.yaml names one (``forge``); the
        thread ends with ``stop()``. Its client libraries are imported only then."""
        try:
            if config.load_config()["forge"]["kind"] == "none":
                return
        except ConfigError:  # said by the passes; the poller reads the config itself
            return
        from ..forge.poller import ForgePoller

        ForgePoller(self._stop).start()
        log.info("polling the forge for pull requests and issues")

    def _watch_store(self) -> Callable[[], None]:
        """Be woken when a task is enqueued: by the store when tasks are added or moved
        elsewhere (PostgreSQL's LISTEN/NOTIFY: another machine's enqueue starts an agent
        here at once), by the kernel when a file lands in ``incoming/`` (the folder store)."""
        incoming = config.get_queue_dir() / TaskState.INCOMING.value
        if config.store_choice()[0] != "postgres":
            incoming.mkdir(parents=True, exist_ok=True)  # made at the first enqueue otherwise
        stop_inotify = wakeup.watch_folder(incoming, lambda name: self.wake("inotify", name))
        self._inotify = stop_inotify is not None
        if self._inotify:
            log.info("watching %s: an enqueue wakes this scheduler (inotify)", incoming)
        stops = [stop_inotify] if stop_inotify else []
        try:
            notice = queue_utils.get_store().watch(lambda state: self.wake("the store", state))
            stops.append(notice)
        except OctopoidError as exc:  # the database is down: housekeeping passes still run
            log.error("cannot watch the queue for changes: %s", exc)

        def stop_all() -> None:
            for stop in stops:
                stop()

        return stop_all

    def _runtime_lost(self) -> str | None:
        """Why this scheduler no longer owns its runtime directory, or None.

        After ``rm -rf .octopoid/runtime`` (or a lock file replaced), another scheduler can
        start: running on unseen would mean two.
        """
        try:
            if os.stat(lock_file()).st_ino == self._lock_inode:
                return None
        except FileNotFoundError:
            pass
        return f"the runtime directory {config.get_orchestrator_dir()} vanished or was replaced"

    def _abandon(self, lost: str) -> None:
        """Stop at once with nothing left behind: kill every runner (its claim is gone too)."""
        for runner in self.runners.values():
            runner.kill()
            runner.proc.wait()
        self.runners.clear()
        if self._alerts is not None:
            self._alerts.stopped(f"{lost}; its runners were killed")
        self._unlock()

    def _guarded_pass(self) -> None:
        """One pass; an error is logged with its traceback and the daemon goes on."""
        try:
            report = self.loop_once()
            if report.skipped:
                log.debug("not claiming: %s", report.skipped)
        except OctopoidError as exc:
            log.error("pass failed: %s", exc)
        except Exception:
            log.exception("pass failed with an unexpected error")

    def _watch_state(self) -> tuple[int, ...]:
        """Cheap fingerprints of what should wake the scheduler: new tasks, pauses (the
        folder store's records of agents: PostgreSQL's NOTIFY them), config."""
        runtime = config.get_orchestrator_dir()
        paths = [
            *([] if self._inotify else [runtime / "queue" / "incoming"]),
            runtime / "records",
            runtime / "records" / agent_records.SYSTEM,
            config.get_octopoid_dir() / "agents.yaml",
        ]
        out = []
        for path in paths:
            try:
                out.append(path.stat().st_mtime_ns)
            except FileNotFoundError:
                out.append(0)
        return tuple(out)

    def _any_finished(self) -> bool:
        return any(r.proc.poll() is not None for r in self.runners.values())

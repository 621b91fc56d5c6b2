"""The scheduler daemon: reap expired claims, claim work for idle agents, start runners.

``initialize()``, one pass ``loop_once(now)``, ``shutdown()``: tests drive single passes;
``run()`` repeats passes until asked to stop. The scheduler is the composition of its
parts: ``dispatch`` claims for idle agents, ``runners`` starts each attempt's runner
(forked by ``forkserver``, or spawned), collects it, kills it past its deadline and what
a dead one left; the forge's thread (``forge/poller.py``) polls when config.yaml names
one. The daemon wakes the moment a task lands in ``incoming/`` (``wakeup``: inotify) or
the store notifies it (PostgreSQL); between wake-ups it watches a few mtimes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from .. import box as sandbox
from .. import config
from ..base.fsutil import atomic_write
from ..base.processes import become_subreaper
from ..model import defaults
from ..model.exceptions import ConfigError, OctopoidError, SchedulerError
from ..model.tasks import TaskState, task_label, utcnow
from ..queue import agent_records, budgets, recovery
from ..queue import machine as queue_utils
from ..review import finishing
from . import stalls, wakeup
from .dispatch import Dispatch
from .logs import setup_logging
from .notify import Alerts
from .runners import Runner, Runners
from .scheduler_control import lock_file, pid_file, read_pid, try_lock

log = logging.getLogger("octopoid.scheduler")

WATCH_SECONDS = 0.25  # how often the idle loop looks for new work (a stat or two)
HOUSEKEEPING_SECONDS = 5.0  # a full pass at least this often (lease reaping)


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
        self.pool = Runners(self.root)
        self.dispatch = Dispatch()
        self._lock_fd: int | None = None  # an flock of its own fd: one scheduler per root
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and by the store's watch (NOTIFY)
        self._lock_inode = 0
        self._alerts: Alerts | None = None  # from initialize(): tasks present then are old news
        self._next_sweep = 0.0
        self._woken_by = ""  # what set _wake last
        self.wakeups: Counter[str] = Counter()  # by what: logged when the daemon stops
        self._inotify = False  # incoming/ is watched by the kernel, not by its mtime
        self._pass_reason = "a pass"  # why the current pass runs: said when it claims

    @property
    def runners(self) -> dict[str, Runner]:
        """The runners started and not yet collected, by claim token (never by task id)."""
        return self.pool.running

    # --- lifecycle ----------------------------------------------------------------------

    def initialize(self) -> None:
        """Take the one-scheduler-per-root lock, write the pid file, start logging."""
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
        """After the last pass: running attempts get ``grace`` seconds, then are stopped and
        requeued."""
        if grace is None:
            try:
                grace = config.load_agents()["shutdown_grace_seconds"]
            except ConfigError as exc:
                log.error("%s; using the default shutdown grace", exc)
                grace = defaults.SHUTDOWN_GRACE_SECONDS
        self.pool.stop(grace, WATCH_SECONDS)
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
        self.dispatch.note_config(problem)
        if problem:
            report.finished += self.pool.collect(recover=False)
            report.skipped = problem
            return report
        for task, state in recovery.reap_expired_claims(now):
            log.warning("reaped %s: lease expired, owner gone -> %s", task.label, state.value)
            report.reaped.append(task.label)
        report.finished += self.pool.collect()
        agents_cfg = config.load_agents()
        records = agent_records.day_records(agents_cfg)  # once a pass: pauses, days, breakers
        if self._alerts is not None:
            self._alerts.tripped(records)
        report.skipped = self.dispatch.blocked_reason(agents_cfg, records)
        if not report.skipped:
            report.started += self.dispatch.claim(
                agents_cfg, records, lambda t, a: self.pool.start(t, a, self._pass_reason), now
            )
        if self._alerts is not None:  # after the claims: it reads the questions' records
            self._alerts.look()
        self._sweep(records, now)
        return report

    def _sweep(self, records: stalls.Records, now: datetime | None = None) -> None:
        """What dead runners' attempts left (containment settled, clones removed), what
        dead accepts left (``finishing``), and budget alerts: at most every
        ``HOUSEKEEPING_SECONDS``, after the claims, as it is nobody's wait."""
        if time.monotonic() < self._next_sweep:
            return
        self._next_sweep = time.monotonic() + HOUSEKEEPING_SECONDS
        self.pool.kill_orphans()  # and what the orphans killed last time left in their turn
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
        self.pool.subreaper = self.own_process and become_subreaper()
        self.pool.open_forkserver()
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
                elif self.pool.any_finished():
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
            self.pool.close_forkserver()
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
        with contextlib.suppress(FileNotFoundError):
            if os.stat(lock_file()).st_ino == self._lock_inode:
                return None
        return f"the runtime directory {config.get_orchestrator_dir()} vanished or was replaced"

    def _abandon(self, lost: str) -> None:
        """Stop at once with nothing left behind: kill every runner (its claim is gone too)."""
        self.pool.kill_all()
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

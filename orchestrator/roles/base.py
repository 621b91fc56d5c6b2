"""What every role's attempt shares: the claim it owns, stop signals, the agent's
environment, and ``Role``: what one role's attempt does differently, described as data
and functions that the one attempt runner (``attempt.run``) is handed."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TypeVar

from .. import config
from ..base import bytecode
from ..base.forge_token import without_token
from ..base.processes import TASK_ENV, TOKEN_ENV
from ..model import defaults
from ..model.exceptions import LostClaim, OctopoidError, StorageError
from ..model.tasks import Task
from ..queue import machine as queue_utils
from ..queue import steering
from ..queue.recovery import STOP_SIGNAL
from . import checks

if TYPE_CHECKING:
    from ..backends import AgentResult
    from ..box.workspace import Workspace

#: How every attempt runs: one runner process per attempt, whatever its role (the entry
#: picks the role, ``implementer.role_for``, and hands it to ``attempt.run``)
RUNNER = ("-m", "orchestrator.roles.implementer")

T = TypeVar("T")


@dataclass(frozen=True)
class Ended:
    """How an attempt ended, for its role to make the task's next move."""

    task: Task
    token: str
    result: AgentResult
    commits: int
    space: Workspace | None
    log: Path  # the attempt's whole output
    agents_cfg: dict
    cfg: dict


@dataclass(frozen=True)
class Role:
    """What one role's attempt does differently, handed to the one runner: the prompt's
    ``instructions`` (``prompts/<name>.md``; None: the task's role) and ``howto`` (how to
    answer), what it ``prepare``s in the workspace before the agent starts, and ``settle``:
    the task's next move from how the attempt ended, as (state, why); None: the
    implementer's (``outcome``: checks, then submit, requeue, breakdown or fail). A role
    that does not ``keep_branch`` answers in words: nothing of its branch is kept."""

    howto: str
    instructions: str | None = None
    settle: Callable[[Ended], tuple[str, str]] | None = None
    prepare: Callable[[Task, Workspace], None] = lambda task, space: None
    keeps_branch: bool = True


def ahead(make: Callable[[], T]) -> Future[T]:
    """``make()`` run in a thread from now on, its result (or its exception) taken later:
    what an attempt reads for its prompt is read while its workspace is cloned, a git
    process's wait, instead of after it, on the way to the agent's start."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="octopoid-ahead")
    try:
        return pool.submit(make)
    finally:
        pool.shutdown(wait=False)  # the one job runs on; its thread ends with it


class Terminated(OctopoidError):
    """The runner was asked to stop (SIGTERM from the scheduler's shutdown)."""


def raise_on_stop_signals() -> None:
    """SIGTERM becomes ``Terminated`` (shutdown: the attempt is given back); the stop signal
    of ``octopoid requeue`` becomes ``LostClaim``. Later signals are ignored while we clean up.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(STOP_SIGNAL, signal.SIG_IGN)
        if signum == STOP_SIGNAL:
            raise LostClaim("stopped: the claim was taken back (octopoid requeue)")
        raise Terminated("the scheduler is shutting down; the attempt is given back")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(STOP_SIGNAL, handler)


class Stopped(OctopoidError):
    """A person stopped the attempt (``octopoid stop``, read from the store by ``tick``):
    the attempt is given back, not counted, with their reason in the notes."""

    def __init__(self, by: str, reason: str) -> None:
        super().__init__(f"stopped by {by}: {reason}")
        self.by = by


class Claim:
    """The claim this runner owns: its token fences every write; renewed every third of a lease.

    Between renewals, ``tick`` notices within a second (a ``stat``) when the task file was
    rewritten by someone else, and checks the token is still ours; and asks the store
    every ``defaults.STOP_CHECK_SECONDS`` whether a person stopped this attempt (a record,
    so a stop reaches a runner on any machine).
    """

    def __init__(self, task_id: str, token: str, lease_seconds: int) -> None:
        self.task_id = task_id
        self.token = token
        self.lease_seconds = lease_seconds
        self._last = 0.0
        self._seen: tuple[int, int] | None = None
        self._asked = 0.0  # when the store was last asked for a stop
        self.task: Task | None = None

    def take_over(self, deadline_seconds: float) -> Task:
        """Put this process on the lease (the scheduler claimed it for us) with a deadline."""
        return self._renew(pid=os.getpid(), deadline_seconds=deadline_seconds)

    def tick(self) -> None:
        """Renew when due, and raise ``Stopped`` once a person stopped the attempt. A store
        that cannot be reached (the database restarting) is retried at the next tick while
        the lease lasts; past it the claim is lost."""
        self._stop_check()
        if time.monotonic() - self._last >= self.lease_seconds / 3 or self._rewritten():
            try:
                self._renew()
            except StorageError as exc:
                if time.monotonic() - self._last >= self.lease_seconds:
                    why = f"the lease ran out while the queue was unreachable: {exc}"
                    raise LostClaim(why) from None

    def _stop_check(self) -> None:
        if self.task is None or time.monotonic() - self._asked < defaults.STOP_CHECK_SECONDS:
            return
        self._asked = time.monotonic()
        with contextlib.suppress(StorageError):  # asked again at the next tick
            stop = steering.stop_asked(self.task_id, self.task.attempts)
            if stop is not None:
                raise Stopped(stop["by"], stop["reason"])

    def _rewritten(self) -> bool:
        """Has someone rewritten the task file since our renewal (renew now to find out)?
        A store without files (PostgreSQL) renews on the timer alone."""
        if self.task.path is None:
            return False
        try:
            st = os.stat(self.task.path)
        except FileNotFoundError:
            return True
        return (st.st_ino, st.st_mtime_ns) != self._seen

    def _renew(self, **kwargs: object) -> Task:
        task = queue_utils.renew_lease(self.task_id, self.lease_seconds, token=self.token, **kwargs)
        if task.path is not None:
            st = os.stat(task.path)
            self._seen = (st.st_ino, st.st_mtime_ns)
        self.task, self._last = task, time.monotonic()
        return task


def deadline_seconds(agent: dict, task: Task, cfg: dict) -> float:
    """How long a runner may take in all before it counts as hung: the agent's timeout, its
    checks, its set-up (twice when there are checks: theirs runs in their own clone), and a
    grace for the rest (workspace, notes, waiting for an earlier attempt)."""
    from_checks = checks.budget_seconds(task, cfg)
    own = (agent.get("workspace") or {}).get("setup")
    setup = bool(own if own is not None else cfg["workspace"]["setup"])
    setups = setup * (1 + bool(from_checks)) * cfg["workspace"]["timeout_seconds"]
    return agent["timeout_seconds"] + from_checks + setups + defaults.RUNNER_DEADLINE_GRACE_SECONDS


def runner_env(root: Path, task: Task, token: str) -> dict[str, str]:
    """The environment a runner starts with: this one without the forge's token (the
    poller's alone), the project, the claim it takes over, and bytecode where runners
    keep it."""
    env = dict(
        without_token(os.environ),
        OCTOPOID_ROOT=str(root),
        **{TOKEN_ENV: token, TASK_ENV: task.label},
        **{config.DATABASE_WAIT_ENV: str(defaults.RUNNER_DATABASE_WAIT_SECONDS)},
    )
    return bytecode.runner_env(env, bytecode.cache_dir())


def find_agent(agents_cfg: dict, name: str) -> dict:
    for agent in agents_cfg["agents"]:
        if agent["name"] == name:
            return agent
    raise OctopoidError(f"no agent named '{name}' in agents.yaml")

"""What every role's attempt shares: lease keeping, shutdown signals, the agent's environment."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import FrameType

from .. import config, queue_utils
from ..exceptions import IllegalTransition, OctopoidError
from ..tasks import Task, task_label


class Terminated(OctopoidError):
    """The runner was asked to stop (SIGTERM from the scheduler's shutdown)."""


class LeaseLost(OctopoidError):
    """The task left claimed while the agent worked (reaped, or requeued by hand)."""


def raise_on_sigterm() -> None:
    """Turn the first SIGTERM into ``Terminated``; later ones are ignored while we clean up."""

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated("stopped: the scheduler is shutting down")

    signal.signal(signal.SIGTERM, handler)


class LeaseKeeper:
    """Renews a claim's lease every third of its length; raises ``LeaseLost`` if it is gone."""

    def __init__(self, task_id: str, lease_seconds: int) -> None:
        self.task_id = task_id
        self.lease_seconds = lease_seconds
        self._last = 0.0

    def take_over(self) -> Task:
        """Put this process's PID on the lease (the scheduler claimed it for us)."""
        task = self._renew(pid=os.getpid())
        return task

    def tick(self) -> None:
        if time.monotonic() - self._last >= self.lease_seconds / 3:
            self._renew()

    def _renew(self, pid: int | None = None) -> Task:
        try:
            task = queue_utils.renew_lease(self.task_id, self.lease_seconds, pid=pid)
        except IllegalTransition as exc:
            raise LeaseLost(f"lease lost: {exc}") from None
        self._last = time.monotonic()
        return task


def agent_env(agent: dict) -> dict[str, str]:
    """Ours plus the agent's own ``env`` from agents.yaml (also what redaction must hide)."""
    return {**os.environ, **(agent.get("env") or {})}


def attempt_env(agent: dict, task: Task, worktree: Path, prompt_file: Path) -> dict[str, str]:
    """The agent's environment, plus where it is and which task it works on."""
    env = agent_env(agent)
    env.update(
        OCTOPOID_TASK_ID=task.label,
        OCTOPOID_NOTES_ID=task_label(task.id),
        OCTOPOID_WORKTREE=str(worktree),
        OCTOPOID_ROOT=str(config.find_project_root()),
        OCTOPOID_PROMPT_FILE=str(prompt_file),
        OCTOPOID_ATTEMPT=str(task.attempts),
    )
    return env


def find_agent(agents_cfg: dict, name: str) -> dict:
    for agent in agents_cfg["agents"]:
        if agent["name"] == name:
            return agent
    raise OctopoidError(f"no agent named '{name}' in agents.yaml")

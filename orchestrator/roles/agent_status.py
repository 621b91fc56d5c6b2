"""What only a role knows of an agent: whether it can run at all, and why an attempt
failed said in the backends' words before its record counts it.

The record itself (pauses, today's use, the circuit breaker) is ``queue.agent_records``,
below the roles, so the store never calls up into one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import config
from ..base.lazy import lazy_import
from ..queue import agent_records

# Needed only to say whether an agent can run: `status` does not pay for them.
backends_base = lazy_import("orchestrator.backends.base")  # CAUSES, when an attempt failed
# Is the agent's program there, as its box sees it: not the process runner (selectors, queue).
box = lazy_import("orchestrator.box.box")

#: Backends that cannot report what an attempt cost (their cost is unknown, not zero).
COSTLESS_BACKENDS = ("command",)


def failure(cause: str | None, summary: str) -> agent_records.Failure | None:
    """An attempt's ``cause`` (why no task could have helped, or None) for its record, said
    in the backends' words (``CAUSES``) and the agent's ``summary``: the circuit breaker's
    reason if a run of them trips it."""
    if cause is None:
        return None
    return agent_records.Failure(cause, f"{backends_base.CAUSES[cause]}: {summary[:300]}")


def readiness_problem(agent: dict[str, Any]) -> str | None:
    """Why this agent cannot run at all (so the scheduler skips it, and every face says
    so), or None. Every backend is asked the same: is its program (``command``'s argv[0],
    ``claude``) found and executable as its box will see it, is its API key set?"""
    env = config.agent_env(agent)
    if agent["backend"] == "anthropic":
        if not env.get("ANTHROPIC_API_KEY"):
            return "ANTHROPIC_API_KEY is not set (in the environment or the agent's env)"
        return None
    root = config.find_project_root()
    if agent["backend"] == "claude-code":  # found on octopoid's own PATH, then run by path
        program, path = agent.get("claude_path") or "claude", None
    else:  # run from the clone (seen at the project's path), on the box's PATH
        program, path = agent["argv"][0].replace("{worktree}", str(root)), env.get("PATH")
        if "{" in program:
            return None  # {task_id}, {prompt_file}: known only at the attempt
    why = box.program_problem(program, root, path, _unseen(root))
    if why is None:
        return None
    hint = f"; {config.CLAUDE_INSTALL_HINT}" if agent["backend"] == "claude-code" else ""
    return f"{program!r} {why}{hint}"


def _unseen(root: Path) -> tuple[Path, ...]:
    """Where a box never looks, whatever it needs: octopoid's runtime, the repository's
    .git (``sandbox.walled``); nowhere without a sandbox."""
    if config.load_config()["sandbox"]["mode"] == "none":
        return ()
    return (config.get_orchestrator_dir().resolve(), (root / ".git").resolve())

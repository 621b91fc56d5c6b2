"""What every agent backend takes and returns.

A backend runs one agent on one prompt in one box (``sandbox.Box``: its workspace, its
environment, and the wrapper every process it starts goes through) and reports what
happened. It never moves tasks: the implementer decides what the result means for the queue.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..base.fsutil import TailBuffer

if TYPE_CHECKING:  # only a type here: `status` imports backends to ask if agents can run
    from ..box.box import Box

#: ``interrupted``: the runner was told to stop (the scheduler's graceful shutdown); no
#: backend returns it, the runner records it and gives the attempt back.
OUTCOMES = ("success", "max_turns", "timeout", "error", "budget", "rate_limited", "interrupted")
#: Why an attempt failed when no task could have made it work: the agent's own setup or its
#: API, the same for every task. Such an attempt is given back, and a run of them pauses
#: the agent (the circuit breaker, ``queue.agent_records.record_attempt``). What each means:
CAUSES = {
    "cannot-start": "the agent's program cannot start",
    "box": "the sandbox cannot start",
    "auth": "the agent's API credentials are missing or refused",
    "overloaded": "the API is overloaded",
    "unreachable": "the API cannot be reached",
    "setup": "the workspace's set-up failed",
}
#: How an agent says the task needs no change: a line of its output (a command's) or of
#: its final message (an LLM's) starting with this, then why. Such an attempt, without
#: commits, goes to review with the reason instead of counting as a failure.
NO_CHANGE_MARK = "NO CHANGE NEEDED:"
# A line starting with NO_CHANGE_MARK (Markdown emphasis around it allowed), then why.
_NO_CHANGE = re.compile(
    rf"^[ \t>*_`]*{re.escape(NO_CHANGE_MARK)}[*_`]*[ \t]*(.+?)[ \t`*_]*$", re.I | re.M
)


@dataclass
class AgentRequest:
    """Everything a backend needs for one attempt."""

    task_id: str
    prompt: str
    prompt_file: Path  # where the box sees it
    box: Box
    options: dict  # the agent's entry in agents.yaml, validated
    timeout_seconds: float
    max_turns: int
    max_budget_usd: float | None = None
    max_tokens_total: int | None = None  # a budget's tokens left (backends that can count)
    on_tick: Callable[[], None] = lambda: None  # called every second or so (lease renewal)
    channel: Any = None  # the attempt's ChannelServer: its tools, for a loop run here
    #: a person's messages not yet delivered (``steering.take``), as one user turn ("": none)
    inbox: Callable[[], str] = lambda: ""


@dataclass
class AgentResult:
    """What an attempt produced, in the same shape for every backend."""

    exit_code: int | None
    outcome: str
    turns: int = 0
    cost_usd: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    session_id: str | None = None
    summary: str = ""
    details: dict = field(default_factory=dict)
    cause: str | None = None  # one of CAUSES when no task could have made it work

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")
        if self.cause is not None and self.cause not in CAUSES:
            raise ValueError(f"unknown cause {self.cause!r}")


def clipped(text: str, limit: int, output: TailBuffer | None = None) -> str:
    """``text`` scrubbed (``redaction.scrub``: control characters out, redacted), then cut
    to ``limit`` characters. Cut first, the head of a secret straddling the cut would no
    longer be recognised, and would leak. Redacted as ``output`` redacts (the agent's own
    secrets too), else with every secret octopoid knows."""
    from ..base.redaction import scrub  # here: `status` imports backends and redacts nothing

    redactor = output.redactor if output is not None and output.redactor else None
    return scrub(text, redactor=redactor)[:limit]


def no_change_reason(text: str) -> str | None:
    """The reason of the last ``NO CHANGE NEEDED: why`` line in ``text``, or None."""
    found = [" ".join(why.split()) for why in _NO_CHANGE.findall(text)]
    return found[-1][:500] if found and found[-1] else None


def count_of(value: object) -> int:
    """A token or turn count from an agent's report: a non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def unreadable(output: TailBuffer, what: str, raw: str, exc: Exception) -> None:
    """Note an event a parser could not read, and go on: one odd line never loses an attempt.
    (``raw`` is shortened only after redaction; its first 4 KiB are more than is shown.)"""
    line = f"[octopoid: skipped {what} it could not read ({type(exc).__name__}): {raw[:4096]}"
    output.feed((clipped(line, 500, output) + "]\n").encode("utf-8", errors="replace"))


class Backend(Protocol):
    def needs(self, options: dict) -> list[str]:
        """What an agent with ``options`` needs to see in its box although it may lie where
        a box sees nothing: the programs it starts (their folders are shown) and files they
        read (shown themselves, read-only)."""
        ...

    def run(self, request: AgentRequest, output: TailBuffer) -> AgentResult:
        """Run the agent to the end (or its limits), streaming its output into ``output``."""
        ...

"""What every agent backend takes and returns.

A backend runs one agent on one prompt in one box (``sandbox.Box``: its workspace, its
environment, and the wrapper every process it starts goes through) and reports what
happened. It never moves tasks: the implementer decides what the result means for the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..fsutil import TailBuffer
from ..sandbox.box import Box

OUTCOMES = ("success", "max_turns", "timeout", "error", "budget", "rate_limited")


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
    on_tick: Callable[[], None] = lambda: None  # called every second or so (lease renewal)


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

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")


class Backend(Protocol):
    def needs(self, options: dict) -> list[str]:
        """What an agent with ``options`` needs to see in its box although it may lie where
        a box sees nothing: the programs it starts (their folders are shown) and files they
        read (shown themselves, read-only)."""
        ...

    def run(self, request: AgentRequest, output: TailBuffer) -> AgentResult:
        """Run the agent to the end (or its limits), streaming its output into ``output``."""
        ...

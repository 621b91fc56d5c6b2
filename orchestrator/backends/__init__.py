"""How an agent is run: one module per backend, all returning an ``AgentResult``."""

from __future__ import annotations

from ..exceptions import ConfigError
from .anthropic_api import AnthropicBackend
from .base import AgentRequest, AgentResult, Backend
from .claude_code import ClaudeCodeBackend
from .command import CommandBackend

BACKENDS: dict[str, type] = {
    "command": CommandBackend,
    "claude-code": ClaudeCodeBackend,
    "anthropic": AnthropicBackend,
}


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]()
    except KeyError:
        raise ConfigError(
            f"backend '{name}' is not available (known: {', '.join(BACKENDS)})"
        ) from None


__all__ = ["AgentRequest", "AgentResult", "Backend", "get_backend"]

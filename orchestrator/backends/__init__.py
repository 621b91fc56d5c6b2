"""How an agent is run: one module per backend, all returning an ``AgentResult``.

Backends are imported when first used: the ``anthropic`` SDK alone takes about a second to
import, which every ``octopoid`` command and every runner would otherwise pay.
"""

from __future__ import annotations

from importlib import import_module

from ..model.exceptions import ConfigError
from .base import AgentRequest, AgentResult, Backend

BACKENDS: dict[str, str] = {
    "command": "orchestrator.backends.command:CommandBackend",
    "claude-code": "orchestrator.backends.claude_code:ClaudeCodeBackend",
    "anthropic": "orchestrator.backends.anthropic_api:AnthropicBackend",
}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        known = ", ".join(BACKENDS)
        raise ConfigError(f"backend '{name}' is not available (known: {known})")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(import_module(module), cls)()


__all__ = ["AgentRequest", "AgentResult", "Backend", "get_backend"]

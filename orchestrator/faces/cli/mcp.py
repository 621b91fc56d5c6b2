"""`octopoid mcp`: serve the queue's tools to a person's Claude Code over MCP on stdio."""

from __future__ import annotations

import click

from ...base.lazy import lazy_import
from ...model.exceptions import ConfigError

config = lazy_import("orchestrator.config")


@click.command("mcp")
def mcp_command() -> None:
    """Serve octopoid's tools on stdin/stdout (Model Context Protocol), for a session:
    `claude mcp add octopoid -- octopoid mcp` in the project.

    Enqueue, list, show, notes, diff_summary, accept, reject, requeue, retry, close,
    memory_search, memory_add and status, as the commands of the same names do them;
    tasks are resources too (docs/mcp.md). Needs the mcp extra: pip install 'octopoid[mcp]'.
    """
    config.get_queue_dir()  # no project here: one clear line, before the protocol starts
    try:
        from .. import mcp_server
    except ModuleNotFoundError as exc:
        if (exc.name or "orchestrator").startswith("orchestrator"):
            raise
        raise ConfigError(
            f"octopoid mcp needs the mcp extra: pip install 'octopoid[mcp]' (missing: {exc.name})"
        ) from None
    mcp_server.serve()

"""`octopoid web` and `octopoid mcp`: the faces served from here. Each imports its server
when it runs, as its extra (optional dependencies) may be missing: then one line says so."""

from __future__ import annotations

from pathlib import Path

import click

from ... import config
from ...model.exceptions import ConfigError


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0: any free one).")  # fmt: skip
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the access token from this file (refused if other users may read it).",
)
@click.option(
    "--token",
    help="Access token. Every local user sees it in `ps`: prefer --token-file or "
    "OCTOPOID_WEB_TOKEN.",
)
def web(host: str, port: int, token_file: Path | None, token: str | None) -> None:
    """Serve the review page: board, diffs with line comments, accept and reject.

    Prints a sign-in link that works once, within minutes; after that, the form at /login
    takes the access token: --token-file, OCTOPOID_WEB_TOKEN or --token (required for a
    --host that is not loopback), else a new one in .octopoid/runtime/web-token. Sessions
    end after 8 idle hours, 7 days, Sign out, or a restart. Ctrl-C stops it. Needs the web
    extra: pip install 'octopoid[web]'.
    """
    config.get_queue_dir()  # no project here: one clear line, before anything starts
    try:
        from ..web import server
    except ModuleNotFoundError as exc:
        raise needs_extra("web", exc) from None
    chosen = server.chosen_token(token, token_file)
    server.serve(host, port, chosen, lambda line: click.echo(f"octopoid web: {line}"))


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
        raise needs_extra("mcp", exc) from None
    mcp_server.serve()


def needs_extra(name: str, exc: ModuleNotFoundError) -> Exception:
    """What to raise when ``octopoid NAME``'s server cannot be imported: one line naming its
    extra when a library is missing, octopoid's own error when the fault is ours."""
    if (exc.name or "orchestrator").startswith("orchestrator"):
        return exc
    return ConfigError(
        f"octopoid {name} needs the {name} extra: pip install 'octopoid[{name}]' "
        f"(missing: {exc.name})"
    )

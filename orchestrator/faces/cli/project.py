"""`octopoid init` and `octopoid db upgrade`: a project set up, on folders or PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import click

from ... import box
from ...queue import checkout
from ...queue import store as queue_store
from .. import scaffold


@click.command()
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    help="Keep the queue in PostgreSQL (postgresql://user@host/db) instead of folders: "
    "creates its schema and names it in config.yaml (never the password).",
)
def init(store_url: str | None) -> None:
    """Create .octopoid/ (config, agents, prompts) and the runtime folders here.

    Run it at the top of a git work tree: every task is worked on a branch of it.
    """
    root = Path.cwd()
    branch = checkout.work_tree_branch(root)  # refused unless the top of a git work tree
    created = scaffold.init_project(root)
    for path in created:
        click.echo(f"created {path.relative_to(root)}")
    if not created and not store_url:
        click.echo("octopoid is already set up here; nothing changed.")
    if store_url:
        for line in scaffold.use_postgres(root, store_url):
            click.echo(line)
    shown = branch or "none: HEAD is detached"
    click.echo(f"new tasks start from the branch checked out here ({shown}) unless given --branch")
    click.echo(box.describe()["summary"])


@click.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the octopoid schema in the configured database (idempotent)."""
    click.echo(queue_store.upgrade_store())

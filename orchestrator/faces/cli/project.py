"""Setting a project up and keeping it whole: `init`, `doctor`, `export`, `import` and
`db upgrade`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ... import box, config
from ...model.exceptions import ConfigError
from ...queue import intake, machine, task_notes
from ...queue import store as queue_store
from ...queue.store.transfer import export_queue, import_queue
from .. import doctor as doctor_checks
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
    created = scaffold.init_project(root, require_git=True)
    for path in created:
        click.echo(f"created {path.relative_to(root)}")
    if not created and not store_url:
        click.echo("octopoid is already set up here; nothing changed.")
    if store_url:
        for line in scaffold.use_postgres(root, store_url):
            click.echo(line)
    branch = intake.current_branch(root) or "none: HEAD is detached"
    click.echo(f"new tasks start from the branch checked out here ({branch}) unless given --branch")
    click.echo(box.describe()["summary"])


@click.command()
@click.option(
    "--rebuild", is_flag=True, help="Also rebuild the claim index and usage ledger from the files."
)
@click.option(
    "--repair",
    is_flag=True,
    help="Also finish what dead accepts, closes, splits and plan approvals left (their journals).",
)
def doctor(rebuild: bool, repair: bool) -> None:
    """Repair what a crash left (interrupted writes) and list what needs you, with the fix.

    Exits 2 while the configuration is invalid (it says why), as `status` does.
    """
    lines = doctor_checks.examine(rebuild, repair=repair)
    click.echo("\n".join(lines) if lines else "all is well: nothing to repair")
    for line in doctor_checks.network():
        click.echo(line)
    if config.problem():
        sys.exit(ConfigError.exit_code)


@click.command("export")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
def export_cmd(dest: Path) -> None:
    """Write the whole queue (any store) to DEST as <state>/TASK-<id>.md files, and each
    task's retry notes as notes/TASK-<id>.md.

    DEST must be new or empty. With `octopoid import` it moves a queue between the folder
    store and PostgreSQL; quarantined entries stay behind.
    """
    report = export_queue(machine.get_store(), dest, task_notes.get_task_notes)
    click.echo("\n".join(report.lines("exported")))


@click.command("import")
@click.argument("source", type=click.Path(exists=True, file_okay=False, path_type=Path))
def import_cmd(source: Path) -> None:
    """Load a folder queue (SOURCE/<state>/TASK-<id>.md, notes/TASK-<id>.md) into this
    project's store.

    Ids and states are kept; a task whose id already exists here, or a file that does not
    parse, is named and skipped.
    """
    report = import_queue(machine.get_store(), source, task_notes.put_notes)
    click.echo("\n".join(report.lines("imported")))


@click.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the octopoid schema in the configured database (idempotent)."""
    click.echo(queue_store.upgrade_store())

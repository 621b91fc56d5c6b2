"""`octopoid export` and `octopoid import`: a whole queue to and from folders, whichever
store holds it."""

from __future__ import annotations

from pathlib import Path

import click

from ...queue import machine, task_notes
from ...queue.store.transfer import export_queue, import_queue


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

"""`octopoid memory show`: a task's working notes (or the main notes.md), read without the
store unless there are none (is it a task at all?), as `octopoid notes` reads retry notes."""

from __future__ import annotations

import click

from ...memory import notes as working_notes
from ...model.ids import TaskId
from .params import TASK_ID, known_task


@click.command("show")
@click.argument("task_id", required=False, type=TASK_ID)
@click.option("--notes-id", help="Any ephemeral notes id (a task's is TASK-<id>).")
def memory_show(task_id: TaskId | None, notes_id: str | None) -> None:
    """Print working notes: the main notes.md, or the task TASK_ID's own notes."""
    if task_id is not None and notes_id is not None:
        raise click.UsageError("give TASK_ID or --notes-id, not both")
    if task_id is not None:
        notes_id = task_id.label
    manager = working_notes.NotesManager(notes_id=notes_id)
    if not manager.notes_file.exists():
        if task_id is not None:  # none: is it a task at all (exit 3)? Found notes need no store
            known_task(task_id)
        click.echo(f"no {manager.notes_file.name} yet")
        return
    click.echo(manager.load_notes(), nl=False)

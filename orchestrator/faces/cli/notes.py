"""`octopoid notes` and `octopoid memory show`: what a task left, read without the store.

Found notes need no store; only when there are none is the store asked whether the task
exists at all (exit 3 if not), so these two start fastest of the commands about a task.
"""

from __future__ import annotations

import click

from ...memory import notes as working_notes
from ...model.ids import TaskId
from ...queue import task_notes
from . import render
from .params import TASK_ID


@click.command()
@click.argument("task_id", type=TASK_ID)
@click.option("--path", "show_path", is_flag=True, help="Print where the notes live instead.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable: id, notes, path.")
def notes(task_id: TaskId, show_path: bool, as_json: bool) -> None:
    """Print a task's retry notes (what earlier attempts left for the next one)."""
    if as_json:
        from .. import reports  # the store, which notes found need not ask

        render.emit_json(reports.notes_details(task_id))
        return
    text = task_notes.get_task_notes(task_id)
    if text is None:  # none: is it a task at all (exit 3)? Found notes need no store
        known_task(task_id)
    if show_path:
        click.echo(task_notes.notes_location(task_id))
        return
    if text is None:
        click.echo(f"TASK-{task_id} has no retry notes")
        return
    click.echo(text, nl=False)


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


def known_task(task_id: TaskId) -> None:
    """``TaskNotFound`` (exit 3) unless some queue holds the task. The store is imported
    here, when no notes were found: notes that exist need none."""
    from ...queue import store

    store.known_task_id(task_id)

"""`octopoid notes`: the retry notes a task's attempts left, read without the store.

Found notes need no store; only when there are none is the store asked whether the task
exists at all (exit 3 if not), so this and `memory show` (``working.py``) start fastest
of the commands about a task.
"""

from __future__ import annotations

import click

from ...model.ids import TaskId
from ...queue import task_notes
from . import render
from .params import TASK_ID, known_task


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

"""`octopoid show`: one task, where it is, what it left and what it holds."""

from __future__ import annotations

import contextlib

import click

from ...memory import lifecycle
from ...model.exceptions import OctopoidError
from ...model.ids import TaskId
from ...model.tasks import plural, render_task
from ...queue import dependencies, task_notes
from ...queue.store import get_task
from ...review import diffs
from .. import reports
from . import render
from .params import TASK_ID


@click.command()
@click.argument("task_id", type=TASK_ID)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(task_id: TaskId, as_json: bool) -> None:
    """Print a task: where it is, its branch head, its notes, usage, and its file."""
    task = get_task(task_id)
    learnings = lifecycle.learning_rows(lifecycle.pending_learnings(task))
    if as_json:
        render.emit_json(reports.task_details(task) | {"learnings": learnings})
        return
    summary = task_notes.notes_summary(task.id)
    blockage = dependencies.blockage_of(task)
    head = None
    with contextlib.suppress(OctopoidError):  # no repository: no branch to name
        head = diffs.head_of(task)
    turns, cost = reports.task_usage(task)
    where = task.path or "a row in PostgreSQL"
    click.echo(f"{task.label} is in {task.state.value} ({where})")
    if blockage:
        click.echo(blockage.describe())
    if head:
        click.echo(f"branch: agent/{task.label} at {head} (`accept --expect {head[:12]}`)")
    if "PR_NUMBER" in task.headers:
        click.echo(f"pull request: #{task.headers['PR_NUMBER']} {task.headers.get('PR_URL', '')}")
    if "ISSUE_NUMBER" in task.headers:
        click.echo(f"issue: #{task.headers['ISSUE_NUMBER']} {task.headers.get('ISSUE_URL', '')}")
    if task.attempts:
        click.echo(f"attempt: {reports.attempt_of(task)}")
    if summary["attempts"] or summary["reviews"]:
        click.echo(
            f"retry notes: {plural(summary['attempts'], 'attempt')}, "
            f"{plural(summary['reviews'], 'review')} - `octopoid notes {task.label}`"
        )
    else:
        click.echo("retry notes: none")
    for line in render.learning_lines(learnings):
        click.echo(line)
    if turns or cost:
        click.echo(
            f"usage: {plural(turns, 'turn')}, ${cost:.2f} across {plural(task.attempts, 'attempt')}"
        )
    click.echo()
    click.echo(render_task(task), nl=False)

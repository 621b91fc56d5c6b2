"""`octopoid preview TASK-12`: start (or ``--stop``) the preview of a task in review
(config.yaml ``preview:``, docs/workspace.md). Parse, call ``preview``, print."""

from __future__ import annotations

import click

from ...config import load_config
from ...model.ids import TaskId
from ...queue import machine
from .. import preview
from .params import TASK_ID


@click.command("preview")
@click.argument("task_id", type=TASK_ID)
@click.option("--stop", is_flag=True, help="Stop the task's preview.")
def preview_command(task_id: TaskId, stop: bool) -> None:
    """Serve TASK_ID's branch for its reviewer, in a box of its own; it is opened from the
    task's review page (`octopoid web`), behind its sign-in."""
    bare = machine.known_task_id(task_id)  # an unknown task is that (exit 3), even to --stop
    label = task_id.label
    if stop:
        stopped = preview.stop(bare)
        click.echo(f"{label}'s preview stopped" if stopped else f"{label} has no preview running")
        return
    found = preview.start(bare)
    if not found.ready:
        click.echo(f"{label}'s preview is still starting; its log: {preview.log_path(bare)}")
        return
    click.echo(
        f"{label}'s preview is running (pid {found.pid}): open it from the task's review "
        "page (`octopoid web`), beside the diff; it stops when the task leaves review, "
        f"after {_idle()} without a request, or with `octopoid preview {label} --stop`"
    )


def _idle() -> str:
    seconds = load_config()["preview"]["idle_seconds"]
    return f"{seconds // 60} min" if seconds >= 60 else f"{seconds}s"

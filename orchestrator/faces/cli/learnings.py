"""`octopoid memory promote|gc`: a task's working notes once it is reviewed, into long-term
memory or gone."""

from __future__ import annotations

import click

from ...memory import lifecycle
from ...model.ids import TaskId
from ...model.tasks import plural
from ...queue import machine
from ...review import finishing
from .params import TASK_ID


@click.command("promote")
@click.argument("task_id", type=TASK_ID)
def memory_promote(task_id: TaskId) -> None:
    """Copy what an accept of TASK_ID would keep into long-term memory now (accept does it
    too): the learnings of its submitted attempt (and a person's), not those struck."""
    count = lifecycle.promote_task_notes(machine.get_task(task_id), "human")
    click.echo(f"{plural(count, 'new note')} in long-term memory")


@click.command("gc")
def memory_gc() -> None:
    """Remove working notes of tasks that are done or no longer exist.

    An accept that was interrupted before promoting the task's learnings is finished first.
    """
    for line in finishing.finish_interrupted():
        click.echo(line)
    removed = lifecycle.gc_ephemeral(finishing.is_over)
    click.echo("\n".join(f"removed {name}" for name in removed) or "nothing to remove")

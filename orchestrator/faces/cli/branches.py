"""`octopoid checks`: a task's branch checked (moves no task)."""

from __future__ import annotations

import sys

import click

from ...model.ids import TaskId
from ...review import verdicts
from ...review.mergeable import refusal
from .params import TASK_ID


@click.command("checks")
@click.argument("task_id", type=TASK_ID)
def checks_cmd(task_id: TaskId) -> None:
    """Run a task's checks and merge pre-check on its branch now (moves nothing)."""
    verdict = verdicts.recheck(task_id)
    for result in verdict.results:
        click.echo(result.line())
        if not result.passed and result.output.strip():
            click.echo(result.output.rstrip())
    for line in verdict.unreached:
        click.echo(line)
    if verdict.conflicts is not None:
        click.echo(f"merge pre-check: conflicts in {', '.join(verdict.conflicts) or '?'}")
    if verdict.refused:
        click.echo(f"merge pre-check: refused: {refusal(verdict.refused)}")
    if verdict.conflicts is None and not verdict.refused:
        click.echo("merge pre-check: merges cleanly into its base")
    sys.exit(0 if verdict.passed else 1)

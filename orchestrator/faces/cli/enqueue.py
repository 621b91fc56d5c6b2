"""`octopoid enqueue`: a task into incoming, its blockers and budget checked first."""

from __future__ import annotations

from pathlib import Path

import click

from ...model.ids import TaskId
from ...model.tasks import DEFAULT_ROLE, PRIORITIES
from ...queue import intake
from .params import TASK_IDS_IN_ONE


@click.command()
@click.argument("title")
@click.option("--role", default=DEFAULT_ROLE, show_default=True, help="Which agents may claim it.")
@click.option("--priority", type=click.Choice(PRIORITIES), default="P1", show_default=True)
@click.option("--branch", help="Base branch for the work.  [default: the one checked out]")
@click.option(
    "--blocked-by",
    multiple=True,
    type=TASK_IDS_IN_ONE,
    help="A task that must be done first (repeatable; or several at once: TASK-1,TASK-2).",
)
@click.option("--context", help="What the agent needs to know.")
@click.option(
    "--context-file",
    type=click.Path(allow_dash=True, path_type=Path),
    help="Read the context from a text file (- for stdin).",
)
@click.option("--criterion", multiple=True, help="An acceptance criterion (repeatable).")
@click.option(
    "--check",
    multiple=True,
    help="A command that must pass on the work before review, besides config.yaml's checks "
    "(repeatable; runs with sh -c in the task's worktree).",
)
@click.option(
    "--budget",
    default="",
    help="This task's own budget across its attempts, e.g. 'usd=5 turns=100' (usd, tokens, "
    "turns, seconds), in place of budgets.task in config.yaml.",
)
def enqueue(
    title: str,
    role: str,
    priority: str,
    branch: str | None,
    blocked_by: tuple[tuple[TaskId, ...], ...],
    context: str | None,
    context_file: Path | None,
    criterion: tuple[str, ...],
    check: tuple[str, ...],
    budget: str,
) -> None:
    """Add a task to incoming and print its id."""
    if context is not None and context_file is not None:
        raise click.UsageError("give --context or --context-file, not both")
    task = intake.enqueue(
        title,
        role=role,
        priority=priority,
        branch=branch,
        blocked_by=[blocker for ids in blocked_by for blocker in ids],
        context=context or "",
        context_file=context_file,
        criteria=criterion,
        checks=check,
        budget=budget,
    )
    click.echo(task.label)

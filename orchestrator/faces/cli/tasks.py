"""`octopoid enqueue` and `octopoid list`: tasks in, and what waits where."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click

from ...model.ids import TaskId
from ...model.tasks import DEFAULT_ROLE, PRIORITIES, TaskState, plural
from ...queue import intake, machine
from .. import listing
from . import render
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


@click.command("list")
@click.argument("queue", required=False, type=click.Choice([s.value for s in TaskState]))
@click.option("--role", help="Only tasks of this role.")
@click.option(
    "--limit", type=click.IntRange(1, 100_000), help="Tasks shown per queue.  [default: 50]"
)
@click.option(
    "--page", "page_no", default=1, type=click.IntRange(1), help="Which page of each queue."
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Every task of the queues listed, printed as it is read (done is listed only when "
    "named: `octopoid list done --all`).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Machine-readable: one JSON array, an object per task (with --all too).",
)
def list_cmd(
    queue: str | None,
    role: str | None,
    limit: int | None,
    page_no: int,
    show_all: bool,
    as_json: bool,
) -> None:
    """List tasks in QUEUE (default: every queue but done), a page of each at a time.

    Waiting tasks come from the claim index and done ones from the ledger, so a page costs
    the same at 50 tasks or 50,000; --all prints every task as it is read. Quarantined
    files are listed with why they could not be read.
    """
    states = [TaskState(queue)] if queue else listing.default_states()
    if show_all:
        if as_json:
            render.emit_json_array(line.as_json() for line in listing.stream(states, role))
            return
        _print_lines(listing.stream(states, role))
        if queue is None and (done := machine.get_store().count(TaskState.DONE)):
            click.echo(f"(done is left out: {plural(done, 'task')}; `octopoid list done --all`)")
        return
    sections = listing.page(states, role, limit or listing.PAGE, page_no)
    found = [line for section in sections for line in section.lines]
    if as_json:
        render.emit_json_array(line.as_json() for line in found)
        return
    _print_lines(iter(found), aligned=True)
    for section in sections:
        if section.more:
            nxt = f"octopoid list {section.state.value} --page {page_no + 1}"
            click.echo(f"... and {section.more:,} more in {section.state.value} ({nxt}, or --all)")
    for line in found:
        if line.blockage and line.blockage.stuck:
            click.echo(f"{line.id} is stuck: {line.blockage.stuck}")
        if line.conflicts is not None:
            click.echo(render.no_longer_merges(line.id, line.conflicts))
        if line.refused:
            click.echo(render.refused(line.id, line.refused))


LIST_HEADER = ["ID", "STATE", "PRI", "ROLE", "ATT", "BLOCKED", "TITLE"]


def _print_lines(lines: Iterator[listing.Line], aligned: bool = False) -> None:
    """Lines as a table (aligned: a page, held whole) or as they come (--all: fixed widths)."""
    rows = (
        [
            line.id,
            line.state
            + (" (refused)" if line.refused else "")
            + (" (conflicts)" if line.conflicts is not None else ""),
            line.priority or "-",
            line.role or "-",
            "-" if line.attempts is None else str(line.attempts),
            render.blocked_cell(line.blockage),
            _title_cell(line),
        ]
        for line in lines
    )
    if aligned:
        found = list(rows)
        click.echo(render.table([LIST_HEADER, *found]) if found else "no tasks")
        return
    widths = [10, 12, 3, 10, 3, 14]
    shown = 0
    for row in ([*LIST_HEADER], *rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        click.echo("  ".join([*cells, row[-1]]))
        shown += 1
    if shown == 1:
        click.echo("no tasks")


def _title_cell(line: listing.Line) -> str:
    if line.error is not None:
        return f"unreadable: {line.error}"
    return f"{line.title} (PR #{line.pull_request})" if line.pull_request else line.title

"""`octopoid list`: what waits where, a page of each queue at a time."""

from __future__ import annotations

from collections.abc import Iterator

import click

from ...model.tasks import TaskState, plural
from ...queue.store import get_store
from .. import listing
from . import render


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
    states = listing.queues(queue)
    if show_all:
        if as_json:
            render.emit_json_array(line.as_json() for line in listing.stream(states, role))
            return
        _print_lines(listing.stream(states, role))
        if queue is None and (done := get_store().count(TaskState.DONE)):
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

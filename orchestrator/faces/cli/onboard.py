"""First steps: `octopoid demo` (the whole loop on a scratch repo) and `octopoid
import-octopoid` (an octopoid checkout's queue brought over)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from ...model.tasks import plural
from .. import demo as demo_run
from .. import importer


@click.command()
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to make the demo project (default: a new temp directory).",
)
def demo(workdir: Path | None) -> None:
    """Watch the whole loop on a scratch repo: queue, agent, retry notes, review, merge.

    Needs no API key: the agent is a scripted command shipped with octopoid. Exits 0
    only if every step really happened.
    """
    root, problems = demo_run.run_demo(workdir, click.echo)
    for problem in problems:
        click.echo(f"octopoid demo: {problem}", err=True)
    if not problems:
        click.echo("\nThe loop worked: every task is done, and the retry started from the notes.")
    click.echo(
        f"\nThe demo project stays in {root}; remove it with: rm -rf {shlex.quote(str(root))}"
    )
    sys.exit(1 if problems else 0)


@click.command("import-octopoid")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
def import_octopoid(path: Path) -> None:
    """Import the queue of an octopoid checkout at PATH (.orchestrator/shared/queue).

    Ids, headers, History and retry notes are kept; claimed tasks wait in incoming again
    and escalated ones go to breakdown. PATH is only read; running it again changes nothing.
    """
    report = importer.import_octopoid(path)
    for line in report.imported:
        click.echo(f"imported {line}")
    imported = plural(len(report.imported), "task")
    click.echo(f"{imported} imported, {len(report.already)} already here")
    if report.problems:
        click.echo(f"could not map {plural(len(report.problems), 'thing')}:")
        click.echo("\n".join(f"  {problem}" for problem in report.problems))

"""`octopoid diff`: what a task's branch changes against its base, as git prints it."""

from __future__ import annotations

import sys
from typing import Any

import click

from ...model.ids import TaskId
from ...model.tasks import plural
from ...review import diffs
from . import render
from .params import TASK_ID


@click.command()
@click.argument("task_id", type=TASK_ID)
@click.option("--stat", is_flag=True, help="Lines added and removed per file instead.")
@click.option("--json", "as_json", is_flag=True, help="With --stat: machine-readable output.")
def diff(task_id: TaskId, stat: bool, as_json: bool) -> None:
    """Show what a task's branch changes against its base branch."""
    if as_json and not stat:
        raise click.UsageError("--json goes with --stat (the diff itself is text)")
    if not stat:  # git's bytes as they are, whatever the locale says: `git diff` prints them so
        diffs.write_diff(task_id, sys.stdout.buffer)
        return
    summary = diffs.stat_summary(task_id)
    if as_json:
        render.emit_json(summary)
        return
    files, totals = summary["files"], summary["totals"]
    if not files:
        click.echo("no changes against its base")
        return
    click.echo(_stat_table(files))
    click.echo(f"{plural(len(files), 'file')} changed, +{totals['added']} -{totals['removed']}")


def _stat_table(files: list[dict[str, Any]]) -> str:
    """As ``git diff --numstat`` reads, with a header: ``-`` counts for a binary file."""
    rows = [["ADDED", "REMOVED", "FILE"]]
    for f in files:
        counts = ["-", "-"] if f["binary"] else [str(f["added"]), str(f["removed"])]
        rows.append([*counts, f"{f['old_path']} -> {f['path']}" if f["old_path"] else f["path"]])
    return render.table(rows)

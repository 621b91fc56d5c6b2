"""`octopoid worktrees`: the task worktrees listed or pruned (moves no task)."""

from __future__ import annotations

import click

from ...review import worktrees as task_worktrees
from . import render


@click.command()
@click.option("--prune", is_flag=True, help="Remove worktrees of tasks that are done or gone.")
def worktrees(prune: bool) -> None:
    """List task worktrees (or prune those of done or gone tasks).

    Pruning deletes a task's branch only when its base has all of it; a branch left for a
    pull request is kept, and the output says so.
    """
    if prune:  # the git machinery: only a prune needs it
        from ...review import verdicts

        click.echo("\n".join(verdicts.prune_worktrees()) or "nothing to prune")
        return
    rows = task_worktrees.list_worktrees()
    click.echo(
        render.table([["WORKTREE", "TASK STATE"], *map(list, rows)]) if rows else "no worktrees"
    )

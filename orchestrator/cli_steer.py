"""`octopoid say`, `octopoid stop` and `octopoid attach`: a person steering a running
attempt (docs/steering.md). Parse, call ``steering``, print."""

from __future__ import annotations

import click

from .lazy import lazy_import

steering = lazy_import("orchestrator.steering")


@click.command("say")
@click.argument("task_id")
@click.argument("text")
@click.option("--by", "actor", default="human", show_default=True, help="Who says it.")
def say_command(task_id: str, text: str, actor: str) -> None:
    """Send TEXT to TASK_ID's running attempt (or, with none running, to its next one).

    Claude Code and the Anthropic backend read it as a user turn before their next model
    call; a `command` agent reads it with `octopoid inbox`. It goes into the retry notes
    at once, so a retry and the reviewer see it too."""
    said = steering.say(task_id, text, actor)
    where = "its running attempt" if said["running"] else "its next attempt's prompt"
    click.echo(f"message {said['n']} to {said['task']}: for {where}; in its notes")

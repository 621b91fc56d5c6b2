"""`octopoid say`, `octopoid stop` and `octopoid attach`: a person steering a running
attempt (docs/steering.md). Parse, call ``steering``, print."""

from __future__ import annotations

import sys

import click

from ...model.defaults import STOP_WAIT_SECONDS
from ...model.exceptions import OctopoidError
from ...model.ids import TaskId
from ...queue import steering
from .. import attach as attaching
from .params import TASK_ID


@click.command("say")
@click.argument("task_id", type=TASK_ID)
@click.argument("text")
@click.option("--by", "actor", default="human", show_default=True, help="Who says it.")
def say_command(task_id: TaskId, text: str, actor: str) -> None:
    """Send TEXT to TASK_ID's running attempt (or, with none running, to its next one).

    Claude Code and the Anthropic backend read it as a user turn before their next model
    call; a `command` agent reads it with `octopoid inbox`. It goes into the retry notes
    at once, so a retry and the reviewer see it too."""
    said = steering.say(task_id, text, actor)
    where = "its running attempt" if said["running"] else "its next attempt's prompt"
    click.echo(f"message {said['n']} to {said['task']}: for {where}; in its notes")


@click.command("stop")
@click.argument("task_id", type=TASK_ID)
@click.option("--reason", required=True, help="Why; the next attempt reads it in the notes.")
@click.option("--by", "actor", default="human", show_default=True, help="Who stops it.")
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=STOP_WAIT_SECONDS,
    show_default=True,
    help="Seconds to wait for the runner to end it (0: don't wait).",
)
def stop_command(task_id: TaskId, reason: str, actor: str, wait: float) -> None:
    """End TASK_ID's running attempt on purpose: its processes are stopped, the reason
    goes into its notes, and the task goes back to incoming without counting the attempt
    (against its attempts or its agent's circuit breaker). The runner reads the stop from
    the store, so it works whichever machine runs the attempt."""
    stop = steering.ask_stop(task_id, reason, actor)
    label = stop["task"]
    moved = steering.wait_stopped(label, stop["attempt"], wait)
    if moved is None:
        if wait == 0:
            click.echo(f"{label}: stop asked of attempt {stop['attempt']}; its runner ends it")
            return
        raise OctopoidError(
            f"{label}: attempt {stop['attempt']} has not stopped yet; the stop stays asked "
            "and its runner ends it at its next check (`octopoid requeue` takes the claim back)"
        )
    click.echo(f"{label}: attempt {stop['attempt']} stopped; the task is in {moved.state.value}")


@click.command("attach")
@click.argument("task_id", type=TASK_ID)
@click.option("--by", "actor", default="human", show_default=True, help="Who is typing.")
def attach_command(task_id: TaskId, actor: str) -> None:
    """Follow TASK_ID's running attempt live (its tool calls, output and checks, as
    readable lines); each line you type is sent to it as `octopoid say`. Ctrl-D or Ctrl-C
    detaches and leaves the attempt running."""
    ended = attaching.attach(task_id, sys.stdin, lambda text: click.echo(text, nl=False), actor)
    click.echo(ended)

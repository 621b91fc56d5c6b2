"""`octopoid pause` and `octopoid resume`: whether agents claim new tasks."""

from __future__ import annotations

from typing import Any

import click

from ...queue import agent_records


@click.command()
@click.option("--agent", help="Pause one agent instead of the whole system.")
def pause(agent: str | None) -> None:
    """Stop claiming new tasks (running attempts finish)."""
    agent_records.set_paused(True, agent)
    click.echo(f"paused {agent or 'all agents'}")


@click.command()
@click.option("--agent", help="Resume one agent instead of the whole system.")
def resume(agent: str | None) -> None:
    """Claim tasks again after `octopoid pause` (with --agent: after a usage limit or the
    circuit breaker too), and say what is still paused, if anything."""
    hold = agent_records.held(agent) if agent else None
    still = _paused_list(agent_records.set_paused(False, agent))
    resumed = f"resumed {agent or 'the system'}"
    if hold is not None and hold.kind == agent_records.BREAKER:
        resumed += " (its circuit breaker is reset)"
    click.echo(f"{resumed}, but still paused: {', '.join(still)}" if still else resumed)


def _paused_list(state: dict[str, Any]) -> list[str]:
    """What is paused, each with how to lift it."""
    how = agent_records.how_to_resume
    paused = [f"the whole system ({how(state['system'])})"] if state["system"] else []
    return paused + [f"{name} ({how(by, name)})" for name, by in state["agents"].items()]

"""`octopoid scheduler start|stop|status`: the background daemon, from outside it.
(`scheduler run`, the daemon itself, is daemon.py's.)"""

from __future__ import annotations

import click

from ...daemon import scheduler_control


@click.command("start")
def scheduler_start() -> None:
    """Start the scheduler in the background (logs: .octopoid/runtime/logs/)."""
    click.echo(f"scheduler started (pid {scheduler_control.start_background()})")


@click.command("stop")
def scheduler_stop() -> None:
    """Stop the background scheduler gracefully, requeueing unfinished attempts."""
    click.echo(f"scheduler {scheduler_control.stop_background()} stopped")


@click.command("status")
def scheduler_status() -> None:
    """Is a scheduler running for this project?"""
    status = scheduler_control.scheduler_status()
    if status["running"]:
        click.echo(f"running (pid {status['pid']})")
    elif status["stale_pid_file"]:
        click.echo(f"not running (stale pid file for pid {status['pid']})")
    else:
        click.echo("not running")

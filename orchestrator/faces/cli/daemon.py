"""`octopoid scheduler run`: the daemon in the foreground, in this process."""

from __future__ import annotations

import signal

import click

from ...daemon import logs, scheduler


@click.command("run")
@click.option("--once", is_flag=True, help="One pass (reap, claim, start attempts), then exit.")
def scheduler_run(once: bool) -> None:
    """Run in the foreground until Ctrl-C or SIGTERM (graceful: attempts get to finish)."""
    daemon = scheduler.Scheduler(own_process=True)
    logs.setup_logging(console=True)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: daemon.stop())
    daemon.run(once=once)

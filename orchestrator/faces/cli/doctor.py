"""`octopoid doctor`: repair what a crash left and list what needs a person."""

from __future__ import annotations

import sys

import click

from ... import config
from ...model.exceptions import ConfigError
from .. import doctor as doctor_checks


@click.command()
@click.option(
    "--rebuild", is_flag=True, help="Also rebuild the claim index and usage ledger from the files."
)
@click.option(
    "--repair",
    is_flag=True,
    help="Also finish what dead accepts, closes, splits and plan approvals left (their journals).",
)
def doctor(rebuild: bool, repair: bool) -> None:
    """Repair what a crash left (interrupted writes) and list what needs you, with the fix.

    Exits 2 while the configuration is invalid (it says why), as `status` does.
    """
    lines = doctor_checks.examine(rebuild, repair=repair)
    click.echo("\n".join(lines) if lines else "all is well: nothing to repair")
    for line in doctor_checks.network():
        click.echo(line)
    if config.problem():
        sys.exit(ConfigError.exit_code)

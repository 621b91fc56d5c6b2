"""The ``octopoid`` command: the top-level group over the registry, and the console
script's entry point. Each command lives in the module the registry names for it."""

from __future__ import annotations

import gc

import click

from ... import __version__
from .registry import LazyGroup


@click.group(cls=LazyGroup)
@click.version_option(version=__version__, package_name="octopoid")
def cli() -> None:
    """octopoid: a task queue for AI coding agents, with per-task retry notes.

    Tasks are TASK-<id>.md files in .octopoid/runtime/queue/<state>/. Commands take a
    task id as TASK-12, task-12 or 12.
    """


def main() -> None:
    """Console-script entry point."""
    # What lives now (the interpreter's start, click, this module) lives as long as the
    # process: frozen, the collector's passes over a command's imports no longer walk it
    # again and again (about 6% of most commands: scripts/bench_startup.py). What is made
    # from here on is collected as ever, so a long command (scheduler, web) is unchanged.
    # While the command's modules load (until registry.load) the collector stays off:
    # imports make next to no garbage, and its passes over their new objects cost ~5%.
    gc.freeze()
    gc.disable()
    cli(prog_name="octopoid")


__all__ = ["cli", "main"]


if __name__ == "__main__":
    main()

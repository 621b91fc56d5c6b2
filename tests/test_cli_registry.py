"""The CLI's registry: every command is in the table with its own short help, a command's
module is imported only when it runs, and every task id is parsed where it enters."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
from collections.abc import Iterator

import click
import pytest

from orchestrator.faces.cli import registry
from orchestrator.faces.cli.main import cli
from orchestrator.faces.cli.params import TASK_ID, TaskIdType
from orchestrator.model.exceptions import InvalidTaskId
from orchestrator.model.ids import TaskId

from .support import invoke


def _walk(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield f"{prefix}{name}", command
        if isinstance(command, click.Group):
            yield from _walk(command, f"{prefix}{name} ")


def test_the_table_holds_each_commands_own_short_help() -> None:
    """`octopoid --help` lists the table's words: they are the commands' docstrings'."""
    found = dict(_walk(cli))
    listed = {key: found[key] for key in registry.COMMANDS}
    assert {key: c.get_short_help_str(10_000) for key, c in listed.items()} == {
        key: entry.help for key, entry in registry.COMMANDS.items()
    }


def test_every_command_a_module_defines_is_in_the_table() -> None:
    """A group defined in its module (plan, forge) lists its own subcommands; every other
    command is the table's."""
    found = set(dict(_walk(cli)))
    eager = {key for key in found if key.split()[0] in ("plan", "forge") and " " in key}
    assert found - eager == set(registry.COMMANDS)


def test_help_lists_every_command_from_the_table() -> None:
    out = invoke("--help", code=0).output
    commands = out.split("\nCommands:\n", 1)[1]
    names = [line.split()[0] for line in commands.splitlines() if line.startswith("  ")]
    assert names == sorted(key for key in registry.COMMANDS if " " not in key)
    assert "  db               The PostgreSQL queue's schema (store.backend: postgres).\n" in out


def test_every_single_task_id_is_parsed_by_the_cli_s_type() -> None:
    """A command taking one task id gets a TaskId from click; several ids (task_ids) are
    parsed one by one as each is acted on, so one bad id does not stop the others."""
    takes_one = {
        key: param
        for key, command in _walk(cli)
        for param in command.params
        if param.name == "task_id"
    }
    assert len(takes_one) >= 12
    assert {key for key, p in takes_one.items() if not isinstance(p.type, TaskIdType)} == set()


@pytest.mark.parametrize("raw", ["TASK-12", "task-12", "12", " 12 "])
def test_the_type_makes_a_task_id(raw: str) -> None:
    parsed = TASK_ID.convert(raw, None, None)
    assert type(parsed) is TaskId and parsed == "12"


def test_a_bad_id_is_one_line_and_exit_2_before_anything_runs() -> None:
    with pytest.raises(InvalidTaskId, match=re.escape("invalid task id '../x'")):
        TASK_ID.convert("../x", None, None)
    result = invoke("say", "../x", "hello")  # no project here: the id is refused first
    assert result.exit_code == 2
    assert result.output.startswith("octopoid: invalid task id '../x': use TASK-<id>")


#: main() as the console script runs it, then whether the collector is on and what it froze.
GC_PROBE = """
import gc, sys
from orchestrator.faces.cli.main import main
sys.argv = ["octopoid", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(gc.isenabled(), gc.get_freeze_count() > 0)
"""


def test_the_collector_runs_again_once_the_command_is_loaded(tmp_path) -> None:
    """main() keeps the collector off while a command's modules load (start-up), never
    for the command's own work: `scheduler run` and `web` live for days."""
    done = subprocess.run(
        [sys.executable, "-c", GC_PROBE, "scheduler", "status"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["True", "True"]


def test_a_library_caller_s_collector_is_left_alone() -> None:
    """Invoking the CLI in-process (click's runner, a test) freezes nothing of the caller's."""
    frozen = gc.get_freeze_count()
    registry.load(registry.COMMANDS["pause"], "pause")
    assert gc.isenabled() and gc.get_freeze_count() == frozen

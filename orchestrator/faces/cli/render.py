"""How every ``octopoid`` command prints: tables, JSON, the lines a task's state earns and
errors as one line on stderr. Commands share these; none prints its own kind."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import click

from ...model.exceptions import OctopoidError

if TYPE_CHECKING:
    from ...queue.dependencies import Blockage


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Octopoid's errors and click's usage errors as one line and their exit code."""
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise  # a bare group (`octopoid memory`) prints its help, as click does
    except click.ClickException as exc:
        click.echo(f"octopoid: {click_error_line(exc)}", err=True)
        sys.exit(exc.exit_code)
    except OctopoidError as exc:
        sys.exit(error(exc))


def error(exc: OctopoidError) -> int:
    """Say ``exc`` on stderr, in one line; its exit code."""
    click.echo(f"octopoid: {exc}", err=True)
    return exc.exit_code


def click_error_line(exc: click.ClickException) -> str:
    """Click's message, after the subcommand it is about and before where help is, in
    place of click's four lines (usage, hint, blank, message)."""
    message = " ".join(line.strip() for line in exc.format_message().splitlines() if line.strip())
    ctx = exc.ctx if isinstance(exc, click.UsageError) else None
    if ctx is None:
        return message
    where = ctx.command_path.partition(" ")[2]
    line = f"{where}: {message.rstrip('.')}" if where else message.rstrip(".")
    if ctx.command.get_help_option(ctx) is None:
        return line
    return f"{line} (`{ctx.command_path} --help`)"


def emit_json(data: Any, sort_keys: bool = True) -> None:
    """``data`` as indented JSON (keys sorted unless their order is the reading order)."""
    click.echo(json.dumps(data, indent=2, sort_keys=sort_keys))


def emit_json_array(rows: Iterable[dict[str, Any]]) -> None:
    """One JSON array written as it is read, an object a line: a page and --all alike."""
    separator = "["
    for row in rows:
        click.echo(f"{separator}\n{json.dumps(row, sort_keys=True)}", nl=False)
        separator = ","
    click.echo("[\n]" if separator == "[" else "\n]")


def table(rows: list[list[str]], right: bool = False) -> str:
    """Rows in aligned columns, the first column to the left (``right``: the others to the
    right, as figures read)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            c.rjust(w) if right and i else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    )


def blocked_cell(blockage: Blockage | None) -> str:
    """What a task waits on, for a table's BLOCKED column."""
    if blockage is None:
        return "-"
    labels = ",".join(label for label, _ in blockage.waiting_on)
    return f"{labels} (stuck)" if blockage.stuck else labels


def no_longer_merges(label: str, files: list[str]) -> str:
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return (
        f"{label} no longer merges into its base (conflicts in {shown or '?'}): "
        f"`octopoid reject {label} --reason ...` sends it back to rebase"
    )


def refused(label: str, paths: list[str]) -> str:
    # Only a refused branch pays for review's merge wording (and the git modules under it).
    from ...review.mergeable import refusal

    return (
        f"{label} is refused: {refusal(paths)}: "
        f"`octopoid reject {label} --reason ...` sends it back without them"
    )


SHOW_HEADING = (
    "learnings an accept keeps (`accept --forget N` strikes one, `--edit N TEXT`, `--keep N` "
    "lets one that reads as an instruction reach prompts)"
)


def learning_lines(rows: list[dict], heading: str = "") -> list[str]:
    """Learnings numbered as `accept --forget N` takes them, under ``heading`` (`show`'s
    by default); none: no lines."""
    if not rows:
        return []
    lines = [f"{heading or SHOW_HEADING}:"]
    for row in rows:
        struck = " - struck: not kept" if row["struck"] else ""
        lines.append(f"  {row['number']}. [{row['section']}] {row['text']} ({row['from']}){struck}")
        if row.get("instruction") and not row["struck"]:
            lines.append(f"     reads as an instruction ({row['instruction']}): " + (
                "kept by a person, prompts carry it" if row.get("kept") else
                f"no prompt carries it unless kept (`--keep {row['number']}`)"))  # fmt: skip
    return lines

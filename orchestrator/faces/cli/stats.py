"""`octopoid stats`: parse the options, call ``stats.report``, print a table or the JSON."""

from __future__ import annotations

from typing import Any

import click

from .. import stats
from . import render

#: The table's columns: heading, and how a group's figures give the cell.
COLUMNS: list[tuple[str, Any]] = [
    ("attempts", lambda f: f["attempts"]),
    ("accepted", lambda f: f["accepted"]),
    ("rejected", lambda f: f["rejected"]),
    ("closed", lambda f: f["closed"]),
    ("won't do", lambda f: f["wont_do"]),
    ("accept %", lambda f: _pct(f["accept_rate"])),
    ("tries/acc", lambda f: _num(f["attempts_per_accepted"])),
    ("1st ok %", lambda f: _pct(f["retry_effect"]["first"]["rate"])),
    ("after check ok %", lambda f: _pct(f["retry_effect"]["after_check"]["rate"])),
    ("fixed %", lambda f: _pct(f["retry_effect"]["after_check"]["fixed_rate"])),
    ("after reject ok %", lambda f: _pct(f["retry_effect"]["after_reject"]["rate"])),
    ("$/acc", lambda f: _num(f["cost"]["cost_per_accepted"], "$")),
    ("review p50/p90", lambda f: _spread(f["times"]["review_wait"])),
]


@click.command("stats")
@click.option("--agent", help="Only this agent's attempts and what came of them.")
@click.option("--since", metavar="DATE", help="Only weeks from the one holding DATE (2026-11-01).")
@click.option("--week", metavar="WEEK", help="Only this ISO week (2026-W48).")
@click.option("--json", "as_json", is_flag=True, help="Every figure, exact, as JSON.")
def stats_command(agent: str | None, since: str | None, week: str | None, as_json: bool) -> None:
    """What works, in numbers, from the tasks' History: attempts, accepts and rejects, the
    retry effect (retries after a failed check or a rejection against first attempts),
    cost per accepted task, time to review, stalls, the breaker's pauses and the forge's
    verdicts; for the project and per agent, role and week. docs/stats.md defines each."""
    data = stats.report(agent, since, week)
    if as_json:
        render.emit_json(data)
        return
    click.echo(table(data))


def table(data: dict[str, Any]) -> str:
    """The figures as one table: the project, then each agent, role and week."""
    rows = [["", *(heading for heading, _ in COLUMNS)], _row("project", data["project"])]
    for group in ("agent", "role", "week"):
        rows += [_row(f"{group} {name}", f) for name, f in data[f"by_{group}"].items()]
    lines = render.table(rows, right=True).splitlines()
    project = data["project"]
    stalls = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in project["stalls"].items())
    forge = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in project["forge"].items())
    lines += [
        "",
        f"stalls: {stalls}; breaker pauses {len(data['breaker_pauses'])}",
        f"forge: {forge}",
        "times in review are hours (p50/p90); `octopoid stats --json` has every figure exact",
    ]
    return "\n".join(lines)


def _row(name: str, figures: dict[str, Any]) -> list[str]:
    return [name, *(str(cell(figures)) for _, cell in COLUMNS)]


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.0f}"


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{unit}{value:.2f}"


def _spread(spread: dict[str, int | None]) -> str:
    if not spread["n"]:
        return "-"
    return f"{spread['p50'] / 3600:.1f}/{spread['p90'] / 3600:.1f}"

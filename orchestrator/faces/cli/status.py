"""`octopoid status` and `octopoid agents`: the queue and the agents at a glance."""

from __future__ import annotations

import sys

import click

from ... import box
from ...daemon import scheduler_control, stalls
from ...model.exceptions import ConfigError
from ...model.tasks import plural
from ...queue import bounces
from .. import reports
from . import render


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Tasks per queue, running claims with their lease, and the oldest waiting task."""
    summary = reports.status_summary() | {"scheduler": scheduler_control.scheduler_status()}
    if as_json:
        render.emit_json(summary)
        return
    daemon = summary["scheduler"]
    click.echo(
        f"scheduler: running (pid {daemon['pid']})"
        if daemon["running"]
        else "scheduler: not running (`octopoid scheduler start`)"
    )
    if summary["sandbox"]:
        click.echo(summary["sandbox"]["summary"])
    if summary["refused_today"]:
        click.echo(
            f"network: {plural(summary['refused_today'], 'destination')} refused today "
            "(`octopoid agents` says whose; each attempt's notes say which)"
        )
    click.echo(render.table([[k, str(v)] for k, v in summary["counts"].items()]))
    for c in summary["claimed"]:
        left = c["lease_seconds_left"]
        lease = "no lease" if left is None else f"lease {left}s left"
        host = f" on {c['host']}" if c["host"] else ""
        click.echo(f"claimed {c['id']} by {c['agent']}{host} since {c['claimed_at']} ({lease})")
    oldest = summary["oldest_incoming"]
    if oldest:
        click.echo(f"oldest waiting: {oldest['id']}, {oldest['age_seconds']}s old")
    blocked = summary["blocked"]
    if blocked["count"]:
        stuck = len(blocked["stuck"])
        click.echo(f"blocked: {blocked['count']} waiting on other tasks, {stuck} stuck")
        for t in blocked["stuck"]:
            click.echo(f"  {t['id']} is stuck: {t['why']}")
    for t in summary["unmergeable"]:
        if t["conflicts"] is not None:
            click.echo(render.no_longer_merges(t["id"], t["conflicts"]))
        if t["refused"]:
            click.echo(render.refused(t["id"], t["refused"]))
    for t in summary["bouncing"]:
        click.echo(bounces.line(t))
    for asked in summary["questions"]:
        click.echo(f"{asked['task']} asks: {asked['question'][:200]} (`octopoid answer`)")
    for t in summary["pull_requests"]:
        click.echo(f"in review on the forge: {t['id']}, pull request #{t['number']} {t['url']}")
    if not summary["config_problem"]:  # that one is said last, on stderr
        for line in stalls.lines(summary["stalls"]):
            click.echo(line)
    usage = summary["usage"]
    if usage["tasks"]:
        click.echo(f"usage: {usage['turns']} turns, ${usage['cost_usd']:.2f} in total; most:")
        for t in usage["tasks"]:
            click.echo(
                f"  {t['id']:<10} {t['state']:<12} {t['turns']:>5} turns  ${t['cost_usd']:.2f}"
            )
    if summary["config_problem"]:
        click.echo(f"octopoid: {summary['config_problem']}", err=True)
        sys.exit(ConfigError.exit_code)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def agents(as_json: bool) -> None:
    """List agents: state (idle, running TASK-x, paused), last outcome, turns and cost today."""
    found = stalls.report()
    rows = reports.agents_overview(found=found)
    if as_json:
        render.emit_json(rows)
        return
    if not rows:
        click.echo("no agents in .octopoid/agents.yaml")
        return
    table = [["NAME", "ROLE", "BACKEND", "NETWORK", "STATE", "LAST", "TURNS", "COST TODAY"]]
    for r in rows:
        last = f"{r['last_task']} {r['last_outcome']}" if r["last_task"] else "-"
        refused = f", {r['refused_today']} refused" if r["refused_today"] else ""
        table.append(
            [
                r["name"],
                r["role"],
                r["backend"],
                r["network"] + refused,
                r["state"],
                last,
                str(r["turns_today"]),
                "-" if r["cost_today_usd"] is None else f"${r['cost_today_usd']:.2f}",
            ]
        )
    click.echo(render.table(table))
    click.echo(box.describe()["summary"])
    for line in stalls.lines(found):
        click.echo(line)

"""`octopoid plan`: a goal drafted into dependent tasks by a planner agent, reviewed and
edited here, and enqueued on approval. Parse, call ``plans`` or the planner, print."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from ...base.text import clean_text
from ...model.exceptions import InvalidInput
from ...model.tasks import PRIORITIES
from ...roles import planner, plans
from . import render

STATES_SHOWN = (plans.DRAFT, plans.APPROVING)  # what `plan list` shows without --all


class PlanGroup(click.Group):
    """``octopoid plan "goal"`` and ``octopoid plan --from PRD.md`` mean ``plan new``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["new", *args]
        return super().parse_args(ctx, args)


@click.group("plan", cls=PlanGroup)
def plan_group() -> None:
    """Plan a goal into dependent tasks a person reviews (`octopoid plan "goal"`)."""


@plan_group.command("new")
@click.argument("goal", required=False)
@click.option("--from", "source", type=click.Path(dir_okay=False, path_type=Path),
              help="Plan the goal a file states (a PRD).")  # fmt: skip
@click.option("--agent", help="The planner to run (default: the first with role: plan).")
@click.option("--branch", default="main", show_default=True, help="The tasks' base branch.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def new(
    goal: str | None, source: Path | None, agent: str | None, branch: str, as_json: bool
) -> None:
    """Run the planner on GOAL (or --from FILE); the draft waits for `plan approve`."""
    if (goal is None) == (source is None):
        raise click.UsageError('give a goal ("...") or --from FILE, not both')
    if source is not None:
        try:
            goal = source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read {source}: {exc}") from None
    goal = clean_text(goal, "the goal")
    if not goal.strip():
        raise click.UsageError("the goal is empty")
    _print(planner.plan_goal(goal, agent, branch), as_json)


@plan_group.command("list")
@click.option("--all", "everything", is_flag=True, help="Approved and discarded plans too.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_plans(everything: bool, as_json: bool) -> None:
    """The plans waiting for review (drafts), one line each."""
    found = [p for p in plans.all_plans() if everything or p.state in STATES_SHOWN]
    if as_json:
        render.emit_json([dataclasses.asdict(p) for p in found], sort_keys=False)
        return
    for p in found:
        click.echo(f"{p.id}  {p.state:<9} {len(p.tasks):>2} tasks  {_first_line(p.goal)}")
    if not found:
        click.echo("no plans waiting for review")


@plan_group.command("show")
@click.argument("plan_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(plan_id: str, as_json: bool) -> None:
    """A plan's tasks, their blockers and what approving it does."""
    _print(plans.load(plan_id), as_json)


@plan_group.command("edit")
@click.argument("plan_id")
@click.argument("key")
@click.option("--title")
@click.option("--context")
@click.option("--criterion", "criteria", multiple=True, help="Replaces the criteria (repeat).")
@click.option("--priority", type=click.Choice(PRIORITIES))
@click.option("--role")
@click.option("--blocked-by", help='Replaces the blockers: keys, comma-separated ("" for none).')
def edit(plan_id: str, key: str, blocked_by: str | None, **fields: Any) -> None:
    """Change one drafted task (KEY, e.g. T3); the plan is checked again before it is kept."""
    changes = {k: _clean(v, k) for k, v in fields.items() if v not in (None, ())}
    if blocked_by is not None:
        changes["blocked_by"] = [b.strip().upper() for b in blocked_by.split(",") if b.strip()]
    if not changes:
        raise click.UsageError("nothing to change: give --title, --context, --criterion, ...")
    _print(plans.edit(plan_id, lambda p: plans.edit_task(p, key.upper(), **changes)), False)


@plan_group.command("drop-task")
@click.argument("plan_id")
@click.argument("key")
def drop_task(plan_id: str, key: str) -> None:
    """Remove one drafted task and every edge to it."""
    _print(plans.edit(plan_id, lambda p: plans.drop_task(p, key.upper())), False)


@plan_group.command("approve")
@click.argument("plan_id")
def approve(plan_id: str) -> None:
    """Enqueue the plan's tasks, each blocked by the tasks it waits for (once)."""
    created = plans.approve(plan_id, "human")
    click.echo(f"{plans.normalize_plan_id(plan_id)} approved: enqueued {', '.join(created)}")


@plan_group.command("discard")
@click.argument("plan_id")
def discard(plan_id: str) -> None:
    """Drop a draft: nothing is enqueued."""
    click.echo(f"{plans.discard(plan_id).id} discarded; nothing was enqueued")


def _print(plan: Any, as_json: bool) -> None:
    if as_json:
        render.emit_json(dataclasses.asdict(plan), sort_keys=False)
        return
    click.echo(f"{plan.id} ({plan.state}): {_first_line(plan.goal)}")
    if plan.planned_by:
        click.echo(f"  planned by {plan.planned_by} at {plan.created}; base branch {plan.branch}")
    for t in plan.tasks:
        made = plan.created_ids.get(t.key)
        click.echo(f"  {t.key} [{t.priority}] {t.title}" + (f"  -> TASK-{made}" if made else ""))
        if t.role != "implement":
            click.echo(f"       role: {t.role}")
        if t.blocked_by:
            click.echo(f"       blocked by {', '.join(t.blocked_by)}")
    if plan.state == "draft":
        click.echo(f"approve: octopoid plan approve {plan.id}; or discard, edit, drop-task")


def _clean(value: Any, what: str) -> Any:
    if isinstance(value, tuple):
        return [clean_text(v, what) for v in value]
    return clean_text(value, what)


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= 100 else line[:99] + "…"

"""The board's Plans group over real HTTP: drafted plans with their tasks and edges, and
approve and discard buttons that do what `octopoid plan approve|discard` do (CSRF checked,
hostile goals escaped)."""

from __future__ import annotations

import html
import re

from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.roles import plans

from .support.web import board

S = TaskState


def drafted(goal: str = "ship the export") -> plans.Plan:
    plan = plans.draft(goal)
    plans.add_task(plan, "add the schema")
    plans.add_task(plan, "add the api", priority="P0")
    plans.add_edge(plan, "T1", "T2")
    return plans.add(plan)


def plan_form(page: str, plan_id: str, action: str) -> dict[str, str]:
    """The hidden fields of the plan's ``action`` button, as a browser sends them."""
    form = re.search(rf'<form method="post" action="/plans/{plan_id}/{action}"(.*?)</form>', page)
    assert form, f"no {action} button for {plan_id}"
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form[1])
    return {name: html.unescape(value) for name, value in fields}


def test_a_draft_plan_is_on_the_board_and_approving_it_queues_its_tasks(git_project, client):
    plan = drafted()
    page = board(client)
    section = re.search(r'<section class="plans" id="plans">.*?</section>', page, re.S)[0]
    assert f"{plan.id} <span" in section and "ship the export" in section
    assert re.search(r"<b>T2</b> \[P0\] add the api <span class=\"facts\">after T1</span>", section)
    status, _, _ = client.request(f"/plans/{plan.id}/approve", {"csrf": "0" * 64})
    assert status == 403 and q.get_store().count(S.INCOMING) == 0  # a forged post does nothing
    status, headers, _ = client.request(
        f"/plans/{plan.id}/approve", plan_form(page, plan.id, "approve")
    )
    assert status == 303 and headers["location"] == "/?done=plan-approved"
    first, second = (q.get_task(plans.load(plan.id).created_ids[k]) for k in ("T1", "T2"))
    assert second.blocked_by == [first.id] and second.priority == "P0"
    assert 'id="plans"' not in board(client)  # approved: nothing left to review
    status, _, again = client.request(
        f"/plans/{plan.id}/approve", plan_form(page, plan.id, "approve")
    )
    assert status == 409 and "was approved already" in again
    assert q.get_store().count(S.INCOMING) == 2


def test_discarding_from_the_board_queues_nothing_and_a_hostile_goal_is_escaped(
    git_project, client
):
    plan = drafted("<script>alert(1)</script> export")
    page = board(client)
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert "data-confirm=" in re.search(rf'action="/plans/{plan.id}/discard"[^>]*>', page)[0]
    status, headers, _ = client.request(
        f"/plans/{plan.id}/discard", plan_form(page, plan.id, "discard")
    )
    assert status == 303 and headers["location"] == "/?done=plan-discarded"
    assert plans.load(plan.id).state == "discarded" and q.get_store().count(S.INCOMING) == 0
    form = plan_form(page, plan.id, "approve")
    status, _, refused = client.request("/plans/PLAN-1%22..%00/approve", form)
    assert status == 400 and "is not a plan id" in refused
    assert client.request(f"/plans/{plan.id}/explode", form)[0] == 404


def test_a_task_whose_blocker_failed_shows_as_held_on_the_board(git_project, client):
    blocker = q.create_task("the api")
    waiting = q.create_task("the docs", blocked_by=[blocker.id])
    q.fail_task(q.claim_task(None, "impl-1"), "exploded")
    card = re.search(rf'id="card-{waiting.label}">(.*?)</li>', board(client), re.S)[1]
    assert f"held by {blocker.label}, which failed: `octopoid retry {blocker.label}`" in (
        html.unescape(card)
    )
    q.retry_task(blocker.id)
    card = re.search(rf'id="card-{waiting.label}">(.*?)</li>', board(client), re.S)[1]
    assert "held" not in card and f"blocked by {blocker.label}" in card

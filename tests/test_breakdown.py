"""The breakdown role: a burned-out task is split into subtasks that run in order; a bad
answer fails cleanly with the reason in the notes."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.daemon import scheduler
from orchestrator.model.exceptions import IllegalTransition
from orchestrator.model.tasks import TaskState, utcnow
from orchestrator.queue import machine as q
from orchestrator.queue import recovery
from orchestrator.review import finishing
from orchestrator.review import verdicts as review
from orchestrator.roles import breakdown

from .helpers.fake_messages_api import FakeMessagesAPI, text, tool_use
from .support import HELPERS, exited_pid, run_claimed, write_agents
from .support.journals import burned_out, killed_split, split_once

S = TaskState


@pytest.fixture
def breakdown_agent(git_project: Path, monkeypatch):
    write_agents(git_project, argv=[sys.executable, str(HELPERS / "breakdown_agent.py")])
    agents = (git_project / ".octopoid/agents.yaml").read_text()
    (git_project / ".octopoid/agents.yaml").write_text(
        agents.replace("name: impl-1", "name: bd-1").replace("role: implement", "role: breakdown")
    )

    def run(answer: str = "three"):
        monkeypatch.setenv("OCTO_TEST_ANSWER", answer)
        return run_claimed(
            q.claim_task(None, source=TaskState.BREAKDOWN, agent_name="bd-1"), "bd-1"
        )

    return run


def test_a_burned_out_task_is_split_and_its_subtasks_run_in_order(breakdown_agent):
    tid, dependant = burned_out()
    report = breakdown_agent()
    assert report.next_state == "done"
    original = q.get_task(tid)
    subtasks = original.headers["SPLIT_INTO"].split(", ")
    assert original.state is S.DONE and len(subtasks) == 3
    first, second, last = (q.get_task(label) for label in subtasks)
    assert (first.priority, first.branch, first.role) == ("P0", "main", "implement")
    assert second.blocked_by == [first.id] and last.blocked_by == [first.id, second.id]
    assert q.get_task(dependant).blocked_by == [last.id]  # re-pointed to the last subtask
    order = []
    while (claim := q.claim_task(None, "impl")) is not None:
        order.append(claim.id)
        q.complete_task(claim)
    assert order == [first.id, second.id, last.id, dependant]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("no-block", "no ```subtasks block"),
        ("not-json", "is not JSON"),
        ("cycle", "only earlier subtasks may be named (no cycles)"),
        ("zero", "must be a non-empty JSON list"),
        ("many", "500 subtasks; at most 20"),
    ],
)
def test_a_malformed_answer_fails_cleanly_with_the_reason_in_the_notes(
    breakdown_agent, answer, why
):
    tid, dependant = burned_out()
    report = breakdown_agent(answer)
    assert report.next_state == "breakdown"
    task = q.get_task(tid)
    assert task.state is S.BREAKDOWN and "PHASE" not in task.headers
    assert why in q.get_task_notes(tid) and "## Breakdown — attempt" in q.get_task_notes(tid)
    assert q.get_store().count(S.INCOMING) == 1  # only the dependant: nothing was created
    assert q.get_task(dependant).blocked_by == [tid]


def test_breakdown_attempts_run_out_into_failed(breakdown_agent, git_project):
    tid, _ = burned_out()
    for _ in range(3):
        breakdown_agent("zero")
    assert q.get_task(tid).state is S.FAILED
    assert "breakdown attempts exhausted" in q.get_task(tid).headers["ERROR"]


def test_the_scheduler_gives_breakdown_agents_burned_out_tasks(breakdown_agent, git_project):
    tid, _ = burned_out()
    daemon = scheduler.Scheduler()
    daemon.initialize()
    try:
        report = daemon.loop_once()
        assert report.started == [(f"TASK-{tid}", "bd-1")]
        assert q.get_task(tid).headers["PHASE"] == "breakdown"
    finally:
        daemon.shutdown(grace=30)
    assert q.get_task(tid).state is S.DONE


def test_an_anthropic_agent_can_break_a_task_down(git_project, monkeypatch):
    tid, _ = burned_out()
    answer = (
        "Here is the split.\n```subtasks\n"
        '[{"title": "first half"}, {"title": "second half", "criteria": ["works"]}]\n```'
    )
    script = [
        tool_use("read_file", {"path": "README.md"}),
        text(answer, stop="end_turn"),
    ]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key")
    with FakeMessagesAPI(script) as api:
        (git_project / ".octopoid/agents.yaml").write_text(
            "agents:\n  - name: bd-api\n    role: breakdown\n    backend: anthropic\n"
            f"    model: claude-sonnet-4-6\n    base_url: {api.base_url}\n"
        )
        report = run_claimed(
            q.claim_task(None, source=TaskState.BREAKDOWN, agent_name="bd-api"), "bd-api"
        )
        prompt = api.requests[0]["messages"][0]["content"]
    assert "BURNED-OUT-CLUE" in str(prompt) and "```subtasks" in str(prompt)
    assert report.next_state == "done"
    assert len(q.get_task(tid).headers["SPLIT_INTO"].split(", ")) == 2


def test_a_held_proposal_waits_for_approve_and_reject_sends_it_back(breakdown_agent, git_project):
    (git_project / ".octopoid/config.yaml").write_text("breakdown:\n  approve: true\n")
    tid, dependant = burned_out()
    assert breakdown_agent().next_state == "provisional"
    held = q.get_task(tid)
    assert held.headers["PROPOSED_SPLIT"] == "3" and "add the parser" in held.section(
        "Proposed Subtasks"
    )
    assert q.get_store().count(S.INCOMING) == 1  # nothing created before approval
    with pytest.raises(IllegalTransition, match="octopoid approve"):
        review.accept(tid)
    review.reject(tid, "make the printer part of the parser task")
    back = q.get_task(tid)
    assert back.state is S.BREAKDOWN and back.section("Proposed Subtasks") is None
    assert "make the printer part of the parser task" in q.get_task_notes(tid)
    breakdown_agent()
    created = review.approve(tid, "alice")
    assert [t.title for t in created] == ["add the parser", "add the printer", "wire them up"]
    assert q.get_task(tid).state is S.DONE
    assert q.get_task(dependant).blocked_by == [created[-1].id]


def test_a_breakdown_claim_given_back_returns_to_breakdown(breakdown_agent):
    tid, _ = burned_out()
    q.claim_task(
        None, source=TaskState.BREAKDOWN, agent_name="bd-1", pid=exited_pid(), lease_seconds=10
    )
    reaped = recovery.reap_expired_claims(now=utcnow() + timedelta(seconds=11))
    assert [(t.id, s) for t, s in reaped] == [(tid, S.BREAKDOWN)]
    assert "PHASE" not in q.get_task(tid).headers


@pytest.mark.parametrize("who", ["sweep", "split again"])
def test_a_split_killed_half_way_is_finished_once(breakdown_agent, git_project, who) -> None:
    """Folder store: the sweep (what a scheduler's housekeeping runs) finishes the split; a
    split of the same task again continues the journal instead of making its own."""
    tid, dependant = burned_out()
    other = q.create_task("after both", blocked_by=[tid, dependant]).id
    claimed = q.claim_task(None, source=TaskState.BREAKDOWN, agent_name="bd-1")
    killed_split(git_project, tid)
    assert q.get_store().journals.get(breakdown.SPLIT, f"TASK-{tid}") is not None
    if who == "sweep":
        (line,) = finishing.finish_interrupted()
        assert (
            line == f"TASK-{tid}: finished what its split left (create-2, create-3, rewire, finish)"
        )
    else:
        again = [breakdown.Subtask("another answer", criteria=["done"])]
        assert [t.title for t in breakdown.split(claimed, again)] == [
            f"part {n}" for n in (1, 2, 3)
        ]
    split_once(tid, [dependant, other])
    assert finishing.finish_interrupted() == []

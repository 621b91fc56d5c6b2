"""A stall is never silent: every reason the scheduler claims nothing shows in `status`,
`agents`, `doctor` and the board, in words and in --json, the same answer the scheduler acts on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.daemon import scheduler, stalls
from orchestrator.model.tasks import TaskState
from orchestrator.queue import agent_records
from orchestrator.queue import machine as q

from .support import invoke, provisional_with_commit, write_agents


def faces() -> dict[str, str]:
    """What each face prints, as text (the JSON ones parsed back by the callers); run in
    this process: what is proven is the words, not the installed command."""
    return {
        "status": invoke("status").stdout,
        "status_json": invoke("status", "--json").stdout,
        "agents": invoke("agents").stdout,
        "agents_json": invoke("agents", "--json").stdout,
        "doctor": invoke("doctor").stdout,
    }


def said_everywhere(code: str, words: str, agent: str = "") -> None:
    """``words`` in every face's text (after ``agent NAME:`` for one agent's reason), and
    ``code`` in `status --json`; a reason that stops claiming also in `agents --json`."""
    said = faces()
    for face in ("status", "agents", "doctor"):
        assert (f"agent {agent}: {words}" if agent else words) in said[face], (face, said)
    summary = json.loads(said["status_json"])["stalls"]
    codes = [s["code"] for s in summary["system"] + summary["unserved"]]
    codes += [s["code"] for reasons in summary["agents"].values() for s in reasons]
    assert code in codes
    if code != "unserved":
        rows = json.loads(said["agents_json"])
        assert any(words in line for row in rows for line in row["not_claiming"])


def test_backpressure_is_said_everywhere_and_is_what_the_scheduler_obeys(git_project: Path):
    write_agents(git_project, max_provisional=1)
    provisional_with_commit(git_project)
    waiting = q.create_task("waits").id
    said_everywhere("backpressure", "backpressure: 1 task wait for review")
    assert not stalls.report()["claiming"]
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        report = sched.loop_once()
        assert report.started == [] and report.skipped.startswith("backpressure: 1 task")
    finally:
        sched.shutdown(grace=0)
    assert q.get_task(waiting).state is TaskState.INCOMING
    log = (git_project / ".octopoid/runtime/logs/scheduler.log").read_text()
    assert "not claiming: backpressure: 1 task wait for review" in log


@pytest.mark.parametrize("how", ["pause", "in-config"])
def test_a_pause_is_said_with_how_to_lift_it(git_project: Path, how: str):
    write_agents(git_project, **({"paused": True} if how == "in-config" else {}))
    if how == "pause":
        agent_records.set_paused(True)
    lift = "`octopoid resume`" if how == "pause" else "paused: true in agents.yaml"
    said_everywhere("paused", f"paused ({lift})")


def test_an_agent_that_cannot_run_is_said_for_that_agent(git_project: Path):
    (git_project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - {name: c, role: implement, backend: claude-code,"
        " claude_path: no-such-claude}\n"
    )
    said_everywhere("cannot-run", "cannot run: 'no-such-claude'", agent="c")
    assert not stalls.report()["claiming"]


def test_tasks_no_agent_serves_are_reported_with_the_way_out(git_project: Path):
    write_agents(git_project)  # one agent, role implement
    q.create_task("for reviewers", role="review")
    tid = q.create_task("burned").id
    q.recycle_to_breakdown(q.claim_task("implement", "impl-1"), "burned out twice")
    assert q.get_task(tid).state is TaskState.BREAKDOWN
    said_everywhere("unserved", "1 task in breakdown/ and no agent has role: breakdown")
    said_everywhere("unserved", "wait for role 'review', which no agent")
    assert stalls.report()["claiming"]  # the implementer can still claim


def test_the_board_shows_why_nothing_is_claimed(git_project: Path):
    from orchestrator.faces.web import board

    write_agents(git_project, max_provisional=1)
    provisional_with_commit(git_project)
    assert any("backpressure" in line for line in board.board()["stalls"])

"""Agents' state is the store's: on one PostgreSQL, two machines (two clones, each its own
project folder) pause, resume, spend and trip breakers as one machines. Scheduler passes run
in this process: what is proved is what a pass reads, not the daemon."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from orchestrator.daemon import scheduler, stalls
from orchestrator.model.tasks import format_time, utcnow
from orchestrator.queue import agent_records
from orchestrator.queue import machine as q
from orchestrator.roles import agent_status

from .support import Machines, set_config, settle, write_agents


def one_pass_here() -> scheduler.PassReport:
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        return sched.loop_once()
    finally:
        sched.shutdown(grace=0)


def one_pass(machines: Machines, name: str) -> scheduler.PassReport:
    """A pass of a scheduler on machine ``name`` (a fresh one, as after a restart)."""
    machines.on(name)
    return one_pass_here()


def codes(machines: Machines, name: str, agent: str = "impl-1") -> list[str]:
    """Why ``agent`` claims nothing, as the faces of machine ``name`` say it."""
    machines.on(name)
    return [stall["code"] for stall in stalls.report()["agents"].get(agent, [])]


def test_a_pause_on_one_machine_stops_the_other_and_a_resume_there_restarts_it(
    machines: Machines,
) -> None:
    machines.on("a")
    task = q.create_task("feature")
    agent_records.set_paused(True)  # `octopoid pause` on a
    report = one_pass(machines, "b")
    assert report.skipped == "paused (`octopoid resume`)" and report.started == []
    agent_records.set_paused(False)  # `octopoid resume` on b
    agent_records.set_paused(True, agent="impl-1")  # `octopoid pause --agent impl-1` on b
    assert one_pass(machines, "a").started == []
    assert agent_records.pause_state() == {"system": None, "agents": {"impl-1": "octopoid pause"}}
    agent_records.set_paused(False, agent="impl-1")  # on a
    machines.on("b")
    assert agent_records.pause_state() == {"system": None, "agents": {}}
    machines.on("a")
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        assert sched.loop_once().started == [(task.label, "impl-1")]
        settle(sched)
    finally:
        sched.shutdown(grace=10)


def test_a_project_s_daily_budget_is_spent_once_across_machines(machines: Machines) -> None:
    for root in machines.roots.values():
        set_config(root, git={"remote": "origin"}, budgets={"project_daily": {"usd": 1.0}})
    machines.on("a")
    agent_records.record_attempt("impl-1", "TASK-8", "success", 3, 0.6)  # a runner on a
    assert one_pass(machines, "b").skipped == ""  # $0.60 of $1.00: b may claim
    agent_records.record_attempt("impl-1", "TASK-9", "success", 3, 0.6)  # a runner on b
    for name in ("a", "b"):
        skipped = one_pass(machines, name).skipped
        assert (
            skipped.startswith("the project spent its budget today") and "$1.20 of $1.00" in skipped
        )


def test_a_usage_limit_or_breaker_found_on_one_machine_stops_the_agent_on_the_other(
    machines: Machines,
) -> None:
    machines.on("a")
    q.create_task("waits")
    until = utcnow() + timedelta(hours=1)
    agent_records.pause_until("impl-1", until, f"usage limit reached; it resets at {until}")
    assert codes(machines, "b") == ["usage-limit"]
    assert one_pass(machines, "b").started == []
    agent_records.set_paused(False, agent="impl-1")  # `octopoid resume --agent` on b
    assert codes(machines, "a") == []
    for n in range(3):  # three attempts in a row on a, each for a cause no task can fix
        failure = agent_status.failure("unreachable", "refused")
        tripped = agent_records.record_attempt(
            "impl-1", f"TASK-{n}", "error", 0, None, failure=failure
        )
    assert tripped is not None and tripped.kind == agent_records.BREAKER
    assert codes(machines, "b") == ["breaker"]
    assert one_pass(machines, "b").started == []


def test_a_pass_reads_every_agent_s_state_in_one_read(
    git_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_agents(git_project)
    path = git_project / ".octopoid/agents.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["agents"] += [{**doc["agents"][0], "name": f"impl-{n}"} for n in (2, 3)]
    path.write_text(yaml.safe_dump(doc))
    for n in (1, 2, 3):
        agent_records.record_attempt(f"impl-{n}", "TASK-1", "success", 1, 0.1)
    records, calls = q.get_store().records, []

    def counting(method: str):
        real = getattr(records, method)

        def counted(*args):
            calls.append((method, *args))
            return real(*args)

        return counted

    for method in ("read", "list"):
        monkeypatch.setattr(records, method, counting(method))
    assert one_pass_here().skipped == ""
    agents = [call for call in calls if call[0] == "read" or call[1].startswith("agents")]
    assert agents == [("list", "agents")]  # the alerts list the questions: another family


def test_agents_state_files_from_before_move_into_the_store(git_project: Path) -> None:
    write_agents(git_project)
    runtime = git_project / ".octopoid/runtime"
    (runtime / "agents").mkdir(exist_ok=True)
    (runtime / "paused").write_text("paused at some time\n")
    (runtime / "agents/impl-1.paused").write_text("paused\n")
    today = utcnow().date().isoformat()
    (runtime / "agents/impl-1.json").write_text(
        json.dumps({"day": today, "attempts_today": 2, "cost_today_usd": 0.5, "turns_today": 4})
    )
    hold = {"kind": "usage-limit", "why": "limited", "since": format_time(utcnow())}
    until = format_time(utcnow() + timedelta(hours=1))
    (runtime / "agents/impl-1.limited").write_text(json.dumps({**hold, "until": until}))
    (runtime / "agents/impl-1.json.lock").write_text("")
    agent_records.record_attempt("impl-1", "TASK-3", "success", 1, 0.25)
    assert not (runtime / "agents").exists() and not (runtime / "paused").exists()
    assert agent_records.pause_state() == {
        "system": "octopoid pause",
        "agents": {"impl-1": "octopoid pause"},
    }
    record = agent_records.day_records(agent_records.config.load_agents())["impl-1"]
    assert (record["attempts_today"], record["cost_today_usd"]) == (3, 0.75)
    assert agent_records.held("impl-1").kind == agent_records.USAGE_LIMIT

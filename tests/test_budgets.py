"""Budgets per task, per agent a day and per project a day: an alert at 80 %, a clean stop
at 100 % with the notes saved, and the task waiting with the reason."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.daemon import notify, stalls
from orchestrator.model.exceptions import InvalidInput
from orchestrator.model.tasks import TaskState, new_task
from orchestrator.queue import budgets
from orchestrator.queue import machine as q

from .support import OCTOPOID, child_env, run_claimed, set_config, write_agents

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
CFG = {
    "budgets": {
        "alert_at": 0.8,
        "task": {"usd": 5.0},
        "agent_daily": {"turns": 100.0},
        "project_daily": {"usd": 20.0},
    }
}


def record(usd: float = 0, turns: int = 0) -> dict:
    return {"day": NOW.date().isoformat(), "cost_today_usd": usd, "turns_today": turns}


def test_limits_parse_and_render_and_bad_ones_are_named() -> None:
    assert budgets.parse("usd=5, turns=100") == {"usd": 5.0, "turns": 100.0}
    assert budgets.render({"turns": 100.0, "usd": 5.0}) == "usd=5 turns=100"
    for bad in ("usd", "dollars=5", "usd=-1", "usd=lots", "usd=inf"):
        with pytest.raises(InvalidInput, match="is not a limit"):
            budgets.parse(bad)


def test_an_attempt_gets_the_least_left_of_every_budget_that_bears_on_it() -> None:
    task = new_task("3", "t")
    task.set_header("COST_USD_TOTAL", "4.0")
    records = {"impl-1": record(usd=15, turns=90), "impl-2": record(usd=2)}
    grant = budgets.allowance(budgets.verdicts(task, "impl-1", records, CFG, NOW))
    assert grant.usd == 1.0 and grant.binding["usd"].who == "TASK-3"  # task: 5 - 4 < 20 - 17
    assert grant.turns == 10 and grant.binding["turns"].who == "agent impl-1"
    assert grant.exhausted() is None
    task.set_header("BUDGET", "usd=3")  # the task's own budget wins over config's
    spent = budgets.allowance(budgets.verdicts(task, "impl-1", records, CFG, NOW)).exhausted()
    assert spent is not None and spent.why() == "TASK-3 spent its budget: $4.00 of $3.00"


def test_alerts_come_at_80_percent_and_at_100_once_each() -> None:
    records = {"impl-1": record(usd=16.5, turns=100)}
    running = new_task("4", "t")
    running.set_header("COST_USD_TOTAL", "4.5")
    alerts = dict(budgets.watched([running], records, CFG, NOW))
    assert "the project has used $16.50 of its $20.00 project daily budget (82%)" in alerts.values()
    assert "TASK-4 has used $4.50 of its $5.00 task budget (90%)" in alerts.values()
    day = NOW.date().isoformat()
    assert f"agent_daily:agent impl-1:turns:spent:{day}" in alerts  # again tomorrow
    assert "task:TASK-4:usd:alert" in alerts  # a task's, once for good
    sender = notify.Alerts()
    assert len(sender.budgets(list(alerts.items()))) == 3
    assert sender.budgets(list(alerts.items())) == []  # said once


def test_a_task_out_of_budget_stops_cleanly_and_waits_in_failed_with_the_reason(git_project):
    """A wall-time budget on a slow agent: the attempt is cut at what is left, its notes are
    saved, and the task waits for a person; retry --budget gives it more."""
    write_agents(git_project)
    tid = q.create_task("slow", budget={"seconds": 2}).id
    assert q.get_task(tid).headers["BUDGET"] == "seconds=2"
    report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert report.outcome == "budget" and report.next_state == "failed"
    task = q.get_task(tid)
    assert "stopped at TASK-" in task.headers["ERROR"] and "--budget" in task.headers["ERROR"]
    assert float(task.headers["SECONDS_TOTAL"]) >= 2
    assert "## Attempt 1" in (q.get_task_notes(tid) or "")  # the notes were saved
    done = subprocess.run(
        [OCTOPOID, "retry", tid, "--budget", "seconds=600"], cwd=git_project,
        env=child_env(git_project), capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert q.get_task(tid).headers["BUDGET"] == "seconds=600"


def test_an_agent_out_of_its_day_s_budget_claims_nothing_and_says_why(
    git_project: Path, monkeypatch: pytest.MonkeyPatch
):
    """The day's wall time runs out during an attempt: it stops cleanly, gives the attempt
    back, and the agent claims nothing more today; status says so."""
    monkeypatch.setenv("OCTO_TEST_SLEEP", "30")
    write_agents(git_project)
    set_config(git_project, budgets={"agent_daily": {"seconds": 1}})
    tid = q.create_task("slow").id
    report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert report.next_state == "incoming" and "agent impl-1's agent daily budget" in report.reason
    task = q.get_task(tid)
    assert task.state is TaskState.INCOMING and task.headers["INTERRUPTED"] == "1"
    found = stalls.report()
    (why,) = found["agents"]["impl-1"]
    assert why["code"] == "budget" and "agent impl-1 spent its budget today" in why["text"]
    assert not found["claiming"]
    report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")  # claimed by hand anyway
    assert report.next_state == "incoming" and "no attempt started" in report.reason
    assert q.get_task(tid).headers["INTERRUPTED"] == "2"
    status = subprocess.run(
        [OCTOPOID, "status", "--json"], cwd=git_project, env=child_env(git_project),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "budget" in [s["code"] for s in json.loads(status.stdout)["stalls"]["agents"]["impl-1"]]


def test_a_day_s_tokens_and_seconds_start_again_with_the_day(project: Path) -> None:
    from datetime import timedelta

    from orchestrator.queue import agent_records

    agent_records.record_attempt("a", "TASK-1", "success", 3, 0.5, NOW, tokens=1000, seconds=60)
    later = NOW + timedelta(days=1)
    agent_records.record_attempt("a", "TASK-2", "success", 1, 0.1, later, tokens=10, seconds=2)
    (record,) = agent_records.day_records({"agents": [{"name": "a"}]}).values()
    assert budgets.day_spend(record, later) == budgets.Spend(0.1, 10, 1, 2.0)


def test_the_scheduler_alerts_a_budget_at_80_percent_once(git_project: Path) -> None:
    from orchestrator.daemon import scheduler
    from orchestrator.queue import agent_records

    write_agents(git_project)
    set_config(git_project, budgets={"project_daily": {"usd": 1.0}})
    agent_records.record_attempt("impl-1", "TASK-9", "success", 3, 0.9)
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        for _ in range(2):
            sched._next_sweep = 0  # a housekeeping pass each time
            sched.loop_once()
    finally:
        sched.shutdown(grace=0)
    log = (git_project / ".octopoid/runtime/logs/scheduler.log").read_text()
    assert log.count("budget: the project has used $0.90 of its $1.00 project daily") == 1


def test_a_budget_header_broken_by_hand_fails_that_task_alone(git_project: Path) -> None:
    """A queue file edited into nonsense: its runner fails it saying why and how to fix it;
    the scheduler's budget watch skips it and goes on with the others."""
    from orchestrator.daemon import scheduler

    write_agents(git_project)
    set_config(git_project, budgets={"task": {"usd": 5}})
    tid = q.create_task("plain").id
    q.get_store().update(tid, TaskState.INCOMING, lambda t: t.set_header("BUDGET", "lots"))
    claimed = q.claim_task(None, "impl-1")
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        sched._next_sweep = 0
        sched.loop_once()  # its budget watch reads the claimed task: no crash
    finally:
        sched.shutdown(grace=0)
    report = run_claimed(claimed, "impl-1")
    task = q.get_task(tid)
    assert report.next_state == "failed" and task.state is TaskState.FAILED
    assert "'lots' is not a limit" in task.headers["ERROR"] and "--budget" in task.headers["ERROR"]
    log = (git_project / ".octopoid/runtime/logs/scheduler.log").read_text()
    assert "pass failed" not in log

"""`octopoid stats`: a scripted history, made with the state machine's own moves, gives
exactly the figures docs/stats.md defines, on both stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.faces import stats
from orchestrator.faces.stats_history import failed_commands, task_cells
from orchestrator.model.tasks import new_task
from orchestrator.queue import machine as q

from .support import cli_output
from .support.history import at, attempt, scripted_history, submit


def run(*args: str, code: int = 0) -> str:
    return cli_output("stats", *args, code=code)


PROJECT = {
    "attempts": 8,
    "accepted": 3,
    "rejected": 1,
    "closed": 1,
    "wont_do": 1,
    "failed": 0,
    "agent_rejected": 0,
    "completed": 0,
    "accept_rate": 0.75,
    "attempts_per_accepted": 1.6667,
    "retry_effect": {
        "first": {"attempts": 5, "accepted": 1, "rate": 0.2},
        "after_check": {"attempts": 2, "accepted": 1, "rate": 0.5, "fixed": 1, "fixed_rate": 0.5},
        "after_reject": {"attempts": 1, "accepted": 1, "rate": 1.0},
    },
    "cost": {
        "cost_per_rejection": 0.1,
        "accepted_tasks": 3,
        "cost_per_accepted": 0.8333,
        "tokens_per_accepted": 1733.3333,
        "unaccepted_tasks": 1,
        "cost_per_unaccepted": 0.4,
        "tokens_per_unaccepted": 800.0,
    },
    "times": {
        "first_review": {"n": 3, "p50": 7200, "p90": 10800},
        "review_wait": {"n": 4, "p50": 3600, "p90": 10800},
        "claimed": {"n": 8, "p50": 3600, "p90": 3600},
    },
    "stalls": {"reaped": 0, "given_back": 1, "usage_limit": 0},
    "forge": {"pr_merged": 1, "ci_sent_back": 1, "reviews_sent_back": 0, "pr_closed": 0},
}


def test_stats_json_gives_the_scripted_history_s_exact_figures(project: Path, store_kind: str):
    scripted_history()
    data = json.loads(run("--json"))
    assert data["project"] == PROJECT
    assert set(data["by_agent"]) == {"impl-1", "impl-2"}
    assert data["by_agent"]["impl-1"]["accepted"] == 2
    assert data["by_agent"]["impl-2"]["retry_effect"]["after_reject"]["accepted"] == 1
    assert list(data["by_week"]) == ["2026-W47", "2026-W48"]
    assert [p["agent"] for p in data["breaker_pauses"]] == ["impl-2"]
    assert data["breaker_pauses"][0]["cause"] == "overloaded"


def test_stats_options_select_an_agent_and_a_week(project: Path, store_kind: str):
    scripted_history()
    late = json.loads(run("--json", "--week", "2026-W48"))["project"]
    assert (late["attempts"], late["closed"], late["wont_do"], late["accepted"]) == (0, 1, 1, 0)
    assert late["cost"]["cost_per_unaccepted"] == 0.4
    mine = json.loads(run("--json", "--agent", "impl-2", "--since", "2026-11-16"))
    assert mine["project"]["attempts"] == 4
    assert mine["project"]["accepted"] == 1
    assert list(mine["by_agent"]) == ["impl-2"]
    table = run()
    assert "project" in table and "agent impl-1" in table and "week 2026-W48" in table


def test_done_tasks_are_summed_once_and_the_cache_follows_new_ones(project: Path, store_kind: str):
    scripted_history()
    assert stats.report()["project"] == PROJECT
    kept = q.get_store().records.read(stats.CACHE_KEY)
    assert kept is not None and (kept.value["count"], kept.value["newest"]) == (5, "5")
    assert stats.report()["project"] == PROJECT  # from the kept summary now: the same
    g = q.create_task("G", priority="P0", now=at(10))  # claimed before F, waiting
    submit(attempt("impl-1", 10, 0.0, 0), 11)
    q.accept_completion(g.id, "human", at(12))
    again = stats.report()["project"]
    assert (again["accepted"], again["attempts"]) == (4, 9)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--week", "2026-48"], "--week takes an ISO week such as 2026-W48"),
        (["--week", "2026-W54"], "--week takes an ISO week"),
        (["--since", "last tuesday"], "--since takes a date such as 2026-11-01"),
        (["--agent", "imp-1"], "no agent 'imp-1' in agents.yaml or in any History"),
    ],
)
def test_bad_options_say_what_is_wanted_without_a_traceback(project: Path, args, said):
    out = run(*args, code=2)
    assert said in out


def test_stats_page_draws_the_figures_and_refuses_a_bad_week(client) -> None:
    scripted_history()
    status, _, page = client.request("/stats")
    assert status == 200
    assert page.count("<svg") == 5 and '<a href="/?group=done"><rect' in page
    assert "accepted of reviewed (3 of 4)" in page
    status, _, page = client.request("/stats?agent=impl-2&week=2026-W47")
    assert status == 200 and "accepted of reviewed (1 of 2)" in page
    status, _, page = client.request("/stats?week=W48")
    assert status == 400 and "--week takes an ISO week" in page


def test_an_older_check_line_is_an_event_and_failed_commands_are_read_whole() -> None:
    task = new_task("9", "old history", now=at(0))
    task.add_history(at(1), "incoming", "claimed", "impl-1", "attempt 1")
    failed = "checks: 0 passed, 2 failed (make test, lint after 1.0s, pytest -q after 2.0s)"
    task.add_history(at(2), "claimed", "incoming", "impl-1", failed)
    task.add_history(at(3), "incoming", "claimed", "impl-1", "attempt 2")
    for cmd in ("make test, lint", "pytest -q"):  # as older versions wrote a check's result
        task.add_history(at(4), "claimed", "claimed", "checks", f"check `{cmd}` passed (1.0s)")
    task.add_history(at(5), "claimed", "provisional", "impl-1", "1 commit, 3 turns")
    found = stats.figures(task_cells(task).values())
    assert found["attempts"] == 2
    assert found["retry_effect"]["after_check"] == {
        "attempts": 1, "accepted": 0, "rate": 0.0, "fixed": 1, "fixed_rate": 1.0
    }  # fmt: skip
    assert failed_commands("a, b after 1.0s, c after 2.5s), more") == ["a, b", "c"]

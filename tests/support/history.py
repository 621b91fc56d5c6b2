"""A queue's history written with the state machine's own moves at fixed times (no clock
read), whose figures docs/stats.md defines: for `octopoid stats` and its page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.queue import agent_records
from orchestrator.queue import machine as q
from orchestrator.roles import agent_status

T0 = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)  # a Monday: ISO week 2026-W47
CHECK_FAILED = "checks: 1 passed, 1 failed ({} after 2.0s); 1 commit kept on the branch"


def at(hours: float) -> datetime:
    """``hours`` after T0."""
    return T0 + timedelta(hours=hours)


def attempt(agent: str, hours: float, cost: float, tokens: int):
    """The next task claimed by ``agent`` at ``hours``, with what its attempt cost."""
    claimed = q.claim_task(None, agent, lease_seconds=600, now=at(hours))
    assert claimed is not None
    return q.record_usage(claimed, 3, cost, tokens=tokens)


def submit(task, hours: float, passed: tuple[str, ...] = ()) -> None:
    """The attempt sent for review at ``hours``, its checks ``passed``."""
    checks = [f"check `{cmd}` passed (1.0s)" for cmd in passed]
    q.submit_completion(task, 1, 3, now=at(hours), cost_usd=0.1, checks=checks)


def scripted_history() -> None:
    """A: first attempt accepted (merged on the forge). B: checks fail, the next attempt
    fixes them and is accepted. C: rejected by CI on the forge, the next attempt accepted.
    D: checks fail twice, then won't do (a week later). E: closed as done untried. F: an
    attempt given back (the API overloaded), still waiting."""
    a = q.create_task("A", now=at(0))
    submit(attempt("impl-1", 1, 0.5, 1000), 2)
    q.accept_completion(a.id, "github:alice", at(4), reason="forge: merged by alice (approved)")

    b = q.create_task("B", now=at(0))
    q.requeue_task(
        attempt("impl-1", 1, 0.2, 500), CHECK_FAILED.format("pytest -q"), "impl-1", at(1.5)
    )
    submit(attempt("impl-1", 2, 0.3, 700), 3, passed=("ruff", "pytest -q"))
    q.accept_completion(b.id, "human", at(3.5))

    c = q.create_task("C", now=at(0))
    submit(attempt("impl-2", 1, 1.0, 2000), 2)
    q.reject_completion(
        c.id, "test failed: log", "github", at(5), summary="forge: CI failed (test)"
    )
    submit(attempt("impl-2", 6, 0.5, 1000), 7)
    q.accept_completion(c.id, "human", at(8))

    d = q.create_task("D", now=at(0))
    q.requeue_task(attempt("impl-2", 1, 0.4, 800), CHECK_FAILED.format("ruff"), "impl-2", at(2))
    q.requeue_task(attempt("impl-2", 3, 0.0, 0), CHECK_FAILED.format("ruff"), "impl-2", at(4))
    q.close_task(d.id, "wont-do", "not worth it", now=at(7 * 24))

    e = q.create_task("E", now=at(0))
    q.close_task(e.id, "done", "fixed elsewhere", now=at(7 * 24 + 1))

    q.create_task("F", now=at(0))
    given_back = "not counted, the API is overloaded: 529; backing off 0:05:00"
    claimed = q.claim_task(None, "impl-1", lease_seconds=600, now=at(1))
    q.requeue_task(claimed, given_back, "octopoid", at(1.25), counted=False)
    for n in range(3):  # the breaker trips on the third in a row
        failure = agent_status.failure("overloaded", "")
        agent_records.record_attempt(
            "impl-2", f"TASK-{n}", "error", 0, None, at(9), failure=failure
        )

"""The state machine: every legal transition, the illegal ones, ordering, leases, reaping."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.faces import reports
from orchestrator.model.exceptions import IllegalTransition, InvalidInput, TaskNotFound
from orchestrator.model.tasks import TaskState, parse_time, read_task_file, utcnow
from orchestrator.queue import machine as q
from orchestrator.queue import recovery
from orchestrator.queue import store as queue_store
from orchestrator.queue.leases import attempt_text, attempts_left

from .support import exited_pid

S = TaskState


def where(project: Path, task_id: str) -> list[str]:
    queue = project / ".octopoid/runtime/queue"
    return [s.value for s in S if (queue / s.value / f"TASK-{task_id}.md").exists()]


def claimed(project: Path, title: str = "t", **kw) -> str:
    task = q.create_task(title, **kw)
    got = q.claim_task("implement", "agent-1")
    assert got is not None and got.id == task.id
    return task.id


def test_create_puts_a_parsable_task_in_incoming(project: Path) -> None:
    task = q.create_task("Add a thing", context="ctx", criteria=["a", "b"], priority="P2")
    assert where(project, task.id) == ["incoming"]
    again = read_task_file(task.path)
    assert again.title == "Add a thing" and again.context == "ctx" and again.criteria == ["a", "b"]
    assert again.history[-1].endswith("new → incoming  (human)")


def test_claim_sets_a_lease_and_counts_the_attempt(project: Path) -> None:
    q.create_task("t")
    now = utcnow().replace(microsecond=0)  # header times have whole seconds
    task = q.claim_task("implement", "agent-7", lease_seconds=60, now=now)
    assert task.state is S.CLAIMED and task.attempts == 1
    h = task.headers
    assert h["CLAIMED_BY"] == "agent-7" and int(h["PID"]) == os.getpid() and h["HOST"]
    assert parse_time(h["LEASE_EXPIRES"]) - now == timedelta(seconds=60)
    later = q.renew_lease(task, lease_seconds=60, now=now + timedelta(seconds=30))
    assert later.lease_expires - now == timedelta(seconds=90)


def test_claim_takes_priority_then_fifo(project: Path) -> None:
    base = utcnow()
    ids = {}
    for i, (title, prio) in enumerate([("a", "P2"), ("b", "P1"), ("c", "P0"), ("d", "P1")]):
        ids[title] = q.create_task(title, priority=prio, now=base + timedelta(seconds=i)).id
    order = [q.claim_task(None, "x").title for _ in range(4)]
    assert order == ["c", "b", "d", "a"]
    assert q.claim_task(None, "x") is None


def test_claim_filters_by_role(project: Path) -> None:
    q.create_task("review me", role="review")
    assert q.claim_task("implement", "x") is None
    assert q.claim_task("review", "x").title == "review me"


def test_blocked_tasks_wait_for_every_blocker_to_be_done(project: Path) -> None:
    first = q.create_task("first", priority="P3")
    second = q.create_task("second", priority="P3")
    blocked = q.create_task("blocked", priority="P0", blocked_by=[f"TASK-{first.id}", second.id])
    assert q.claim_task(None, "x").id == first.id
    q.complete_task(first.id)
    assert q.claim_task(None, "x").id == second.id  # blocked still waits for second
    assert q.claim_task(None, "x") is None
    q.submit_completion(second.id, 1, 1)
    q.accept_completion(second.id)
    assert q.claim_task(None, "x").id == blocked.id


def test_full_review_cycle(project: Path) -> None:
    tid = claimed(project)
    q.submit_completion(tid, commits=2, turns=9)
    assert where(project, tid) == ["provisional"]
    task = q.get_task(tid)
    assert task.headers["COMMITS"] == "2" and "LEASE_EXPIRES" not in task.headers
    q.reject_completion(tid, "tests fail", "alice")
    assert where(project, tid) == ["incoming"]
    assert q.claim_task(None, "agent-2").attempts == 2
    q.submit_completion(tid, 1, 3)
    done = q.accept_completion(tid, "bob")
    assert where(project, tid) == ["done"] and done.headers["ACCEPTED_BY"] == "bob"
    moves = [line.split("  ")[1] for line in done.history]
    assert moves == [
        "new → incoming",
        "incoming → claimed",
        "claimed → provisional",
        "provisional → incoming",
        "incoming → claimed",
        "claimed → provisional",
        "provisional → done",
    ]


def test_fail_keeps_a_capped_one_line_error_and_retry_gives_fresh_attempts(project: Path) -> None:
    tid = claimed(project)
    failed = q.fail_task(tid, "boom\n" + "x" * 5000)
    assert where(project, tid) == ["failed"]
    assert failed.headers["ERROR"].startswith("boom x") and len(failed.headers["ERROR"]) <= 500
    back = q.retry_task(tid)
    assert where(project, tid) == ["incoming"] and "ERROR" not in back.headers
    assert q.attempts_left(back, max_attempts=3) == 3


def test_the_attempt_is_said_against_what_counts(project: Path) -> None:
    """ATTEMPTS numbers every attempt; the budget counts those since a retry, less those
    given back: when they differ, both are said."""
    tid = claimed(project)
    assert attempt_text(q.get_task(tid), 3) == "1 of 3"
    q.requeue_task(tid, "shutdown", counted=False)
    assert attempt_text(q.claim_task(None, "a"), 3) == "2 (1 of 3; 1 given back)"
    q.fail_task(tid, "boom")
    assert attempt_text(q.retry_task(tid), 2) == "2 (0 of 2 since the retry)"
    assert attempt_text(q.get_task(tid), None) == "2"  # no budget known: the number alone


def test_agent_rejects_an_invalid_task(project: Path) -> None:
    tid = claimed(project)
    task = q.reject_task(tid, "duplicate", "same as TASK-3")
    assert where(project, tid) == ["rejected"] and task.headers["REJECT_REASON"] == "duplicate"
    with pytest.raises(IllegalTransition, match="reject reason"):
        q.reject_task(claimed(project), "because")


def test_requeue_and_breakdown_leave_claimed(project: Path) -> None:
    tid = claimed(project)
    assert "CLAIMED_BY" not in q.requeue_task(tid, "agent lost").headers
    assert where(project, tid) == ["incoming"]
    q.claim_task(None, "x")
    q.recycle_to_breakdown(tid, "burned out")
    assert where(project, tid) == ["breakdown"]


@pytest.mark.parametrize(
    ("setup", "action"),
    [
        ("incoming", lambda t: q.accept_completion(t)),
        ("incoming", lambda t: q.submit_completion(t, 1, 1)),
        ("incoming", lambda t: q.reject_completion(t, "no")),
        ("incoming", lambda t: q.requeue_task(t)),
        ("incoming", lambda t: q.retry_task(t)),
        ("incoming", lambda t: q.complete_task(t)),
        ("claimed", lambda t: q.accept_completion(t)),
        ("claimed", lambda t: q.retry_task(t)),
        ("provisional", lambda t: q.submit_completion(t, 1, 1)),
        ("provisional", lambda t: q.requeue_task(t)),
        ("done", lambda t: q.fail_task(t, "x")),
        ("done", lambda t: q.reject_completion(t, "no")),
    ],
)
def test_illegal_transitions_raise_and_change_nothing(project: Path, setup, action) -> None:
    tid = q.create_task("t").id
    if setup != "incoming":
        q.claim_task(None, "x")
    if setup in ("provisional", "done"):
        q.submit_completion(tid, 1, 1)
    if setup == "done":
        q.accept_completion(tid)
    before = q.get_task(tid)
    with pytest.raises(IllegalTransition, match=f"is in {setup}"):
        action(tid)
    assert where(project, tid) == [setup]
    assert q.get_task(tid).headers == before.headers


def test_unknown_task_is_not_found(project: Path) -> None:
    with pytest.raises(TaskNotFound, match="TASK-99"):
        q.accept_completion("99")
    with pytest.raises(TaskNotFound):
        q.get_task("TASK-99")


def test_reject_needs_a_reason(project: Path) -> None:
    tid = claimed(project)
    q.submit_completion(tid, 1, 1)
    with pytest.raises(InvalidInput, match="reason"):
        q.reject_completion(tid, "   ")


def test_reaper_returns_a_dead_agents_task_and_fails_it_when_attempts_are_spent(project: Path):
    dead_pid = exited_pid()
    now = utcnow()
    tid = q.create_task("t").id
    for attempt in (1, 2):
        q.claim_task(None, "x", lease_seconds=60, now=now)
        q.renew_lease(tid, lease_seconds=60, now=now, pid=dead_pid)  # a runner took over
        assert recovery.reap_expired_claims(now=now + timedelta(seconds=30), max_attempts=2) == []
        reaped = recovery.reap_expired_claims(now=now + timedelta(seconds=61), max_attempts=2)
        assert [(t.id, s) for t, s in reaped] == [(tid, S.INCOMING if attempt == 1 else S.FAILED)]
    assert where(project, tid) == ["failed"]
    assert "attempts exhausted" in q.get_task(tid).headers["ERROR"]


def test_a_claim_no_runner_took_over_is_requeued_with_its_attempt_given_back(project: Path):
    now = utcnow()
    tid = q.create_task("t").id
    q.claim_task(None, "x", lease_seconds=60, pid=exited_pid(), now=now)
    ((task, state),) = recovery.reap_expired_claims(now=now + timedelta(seconds=61), max_attempts=1)
    assert state is S.INCOMING
    assert task.attempts == 1 and task.headers["INTERRUPTED"] == "1"  # ATTEMPTS never goes down
    assert attempts_left(task, 1) == 1
    assert "no runner started" in task.history[-1]
    assert q.get_task_notes(tid) is None  # nothing ran, so nothing to note


def test_reaper_leaves_a_live_owner_alone(project: Path) -> None:
    now = utcnow()
    q.create_task("t")
    q.claim_task(None, "x", lease_seconds=60, now=now)  # owned by this (live) process
    assert recovery.reap_expired_claims(now=now + timedelta(hours=1)) == []


def test_a_claim_without_lease_headers_is_reaped_by_file_age(project: Path) -> None:
    """A crash between the claim's rename and its header rewrite leaves no lease."""
    tid = q.create_task("t").id
    queue = project / ".octopoid/runtime/queue"
    os.rename(queue / "incoming" / f"TASK-{tid}.md", queue / "claimed" / f"TASK-{tid}.md")
    assert recovery.reap_expired_claims(now=utcnow()) == []
    reaped = recovery.reap_expired_claims(now=utcnow() + timedelta(hours=1))
    assert [t.id for t, _ in reaped] == [tid] and where(project, tid) == ["incoming"]


def test_status_counts_queues_and_reports_claims(project: Path) -> None:
    q.create_task("a")
    q.create_task("b")
    q.claim_task(None, "agent-9", lease_seconds=100)
    summary = reports.status_summary()
    assert summary["counts"]["incoming"] == 1 and summary["counts"]["claimed"] == 1
    (c,) = summary["claimed"]
    assert c["agent"] == "agent-9" and 90 <= c["lease_seconds_left"] <= 100
    assert summary["oldest_incoming"]["id"] == "TASK-2"


def test_list_refuses_an_unknown_queue(project: Path) -> None:
    with pytest.raises(IllegalTransition, match="unknown queue"):
        q.list_tasks("nowhere")


def test_a_task_dropped_in_by_hand_is_claimed(project: Path) -> None:
    q.create_task("first")
    assert q.claim_task(None, "x").title == "first"  # the index is now in use
    incoming = project / ".octopoid/runtime/queue/incoming"
    (incoming / "TASK-hand1.md").write_text("# [TASK-hand1] Written by hand\n\nPRIORITY: P0\n")
    task = q.claim_task(None, "x")
    assert task is not None and task.id == "hand1" and task.attempts == 1


def test_a_deleted_claim_index_is_rebuilt_from_the_folders(project: Path) -> None:
    ids = [q.create_task(f"t{i}").id for i in range(3)]
    queue = project / ".octopoid/runtime/queue"
    queue_store._store_for.cache_clear()
    for name in os.listdir(queue):
        if name.startswith(".claim-index"):
            os.remove(queue / name)
    assert [q.claim_task(None, "x").id for _ in range(3)] == ids


def test_hand_edited_role_is_respected_at_claim(project: Path) -> None:
    task = q.create_task("t")
    q.claim_task("nobody", "x")  # builds the index
    text = task.path.read_text().replace("ROLE: implement", "ROLE: review")
    task.path.write_text(text)
    assert q.claim_task("implement", "x") is None
    assert q.claim_task("review", "x").id == task.id


def test_errors_and_reasons_never_carry_secrets(project: Path, monkeypatch) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", "tok-0123456789")
    tid = claimed(project)
    failed = q.fail_task(tid, "push failed with tok-0123456789")
    q.retry_task(tid)
    q.claim_task(None, "x")
    rejected = q.reject_task(tid, "invalid", "needs tok-0123456789")
    text = rejected.path.read_text()
    assert "tok-0123456789" not in text and "[REDACTED:DEPLOY_TOKEN]" in text
    assert "tok-0123456789" not in failed.headers["ERROR"]

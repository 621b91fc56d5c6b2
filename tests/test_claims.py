"""Claims are owned: fenced writes, moves that cannot resurrect, exact liveness, safe locks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zlib
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.base.processes import TOKEN_ENV, ProcessId, marked_processes
from orchestrator.model.exceptions import LostClaim, LostRace
from orchestrator.model.tasks import TaskState, format_time, read_task_file, utcnow
from orchestrator.queue import machine as q
from orchestrator.queue import recovery
from orchestrator.queue.store import files

from .support import exited_pid

S = TaskState


def where(root: Path, task_id: str) -> list[str]:
    """Every folder holding the task (the invariant: exactly one)."""
    queue = root / ".octopoid/runtime/queue"
    return [s.value for s in S if (queue / s.value / f"TASK-{task_id}.md").exists()]


def test_a_stale_owner_can_no_longer_renew_record_or_move_a_claim_given_to_another(project):
    tid = q.create_task("t").id
    first = q.claim_task(None, "runner-a")
    q.requeue_task(tid, "taken back by hand")
    second = q.claim_task(None, "runner-b")
    old = first.headers["CLAIM_TOKEN"]
    assert old != second.headers["CLAIM_TOKEN"]
    with pytest.raises(LostClaim):
        q.renew_lease(tid, 60, token=old)
    with pytest.raises(LostClaim):
        q.record_usage(tid, 5, 0.5, token=old)
    for move in (
        lambda: q.submit_completion(first, 1, 1),  # a claimed Task brings its own token
        lambda: q.requeue_task(first, "old runner gives up"),
        lambda: q.fail_task(tid, "old runner failed", token=old),
        lambda: q.recycle_to_breakdown(first, "burned out"),
        lambda: q.complete_task(first),
    ):
        with pytest.raises(LostClaim):
            move()
    now = q.get_task(tid)
    assert now.state is S.CLAIMED and now.headers == second.headers  # untouched
    assert where(project, tid) == ["claimed"]


def test_the_owner_with_the_right_token_renews_and_moves(project):
    q.create_task("t")
    claim = q.claim_task(None, "runner")
    token = claim.headers["CLAIM_TOKEN"]
    renewed = q.renew_lease(claim.id, 60, token=token, pid=os.getpid(), deadline_seconds=90)
    assert renewed.headers["STARTED_AT"] and renewed.headers["DEADLINE"]
    assert renewed.headers["PID_START"] == str(ProcessId.of().start)
    assert q.submit_completion(claim.id, 1, 1, token=token).state is S.PROVISIONAL


def test_an_in_place_rewrite_racing_a_hand_move_leaves_one_copy(project):
    """A person moves the file in the instant between our read and our write."""
    tid = q.create_task("t").id
    q.claim_task(None, "runner")
    queue = project / ".octopoid/runtime/queue"

    def hand_move_then_change(task):
        os.rename(queue / "claimed" / f"TASK-{tid}.md", queue / "incoming" / f"TASK-{tid}.md")
        task.set_header("LEASE_EXPIRES", format_time(utcnow() + timedelta(hours=1)))

    with pytest.raises(LostRace):
        q.get_store().update(tid, S.CLAIMED, hand_move_then_change)
    assert where(project, tid) == ["incoming"]  # not resurrected in claimed
    assert not [n for n in os.listdir(queue / "claimed") if tid in n]  # no debris either


def test_a_lease_renewal_after_a_hand_move_is_refused(project):
    tid = q.create_task("t").id
    claim = q.claim_task(None, "runner")
    queue = project / ".octopoid/runtime/queue"
    os.rename(queue / "claimed" / f"TASK-{tid}.md", queue / "incoming" / f"TASK-{tid}.md")
    with pytest.raises(LostClaim):
        q.renew_lease(claim, 60)
    assert where(project, tid) == ["incoming"]


def test_the_reaper_never_requeues_a_claim_made_after_it_looked(project):
    tid = q.create_task("t").id
    now = utcnow()
    q.claim_task(None, "a", lease_seconds=10, pid=exited_pid(), now=now)
    (stale,) = q.list_tasks(S.CLAIMED)  # what a reaper read, unlocked
    q.requeue_task(tid, "requeued meanwhile")
    fresh = q.claim_task(None, "b", lease_seconds=600)  # claimed again by a live process
    assert recovery.recover_dead_claim(stale, "lease expired") is None
    now_task = q.get_task(tid)
    assert now_task.state is S.CLAIMED
    assert now_task.headers["CLAIM_TOKEN"] == fresh.headers["CLAIM_TOKEN"]


@pytest.mark.parametrize("store", ["folder", "postgres"])
def test_the_reaper_never_requeues_a_claim_renewed_after_it_looked(
    project, store, request, monkeypatch
):
    """Its runner was away past the lease (a database outage, a suspended machine) and
    renewed between the reaper's look and its move: the claim stays with the runner."""
    if store == "postgres":
        monkeypatch.setenv("OCTOPOID_DATABASE_URL", request.getfixturevalue("pg_dsn"))
    tid = q.create_task("t").id
    past = utcnow() - timedelta(seconds=60)
    claimed = q.claim_task(None, "a", lease_seconds=10, pid=exited_pid(), now=past)
    (stale,) = q.list_tasks(S.CLAIMED)  # what a reaper read: the lease ran out 50 s ago
    token = claimed.headers["CLAIM_TOKEN"]
    q.renew_lease(tid, 600, token=token)  # the runner is back
    assert recovery.recover_dead_claim(stale, "lease expired") is None
    now_task = q.get_task(tid)
    assert now_task.state is S.CLAIMED and now_task.headers["CLAIM_TOKEN"] == token


class Crash(BaseException):
    """Stands for kill -9 at one exact instant: nothing after it runs."""


def crash_claim_at_rename(nth: int) -> None:
    """Claim the next task, dying at the ``nth`` rename of the store's write."""
    real, calls = os.rename, []

    def rename(src, dst):
        calls.append(1)
        if len(calls) == nth:
            raise Crash
        real(src, dst)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files.os, "rename", rename)
        with pytest.raises(Crash):
            q.claim_task(None, "runner")


def test_a_crash_between_the_two_renames_is_rolled_forward(project):
    tid = q.create_task("t").id
    crash_claim_at_rename(2)  # after the decision (aside), before the new text lands
    queue = project / ".octopoid/runtime/queue"
    assert where(project, tid) == []  # between folders, as a kill -9 leaves it
    assert sorted(n for n in os.listdir(queue / "claimed") if n.startswith(".")) == [
        f".TASK-{tid}.md.new",
        f".TASK-{tid}.md.old",
    ]
    task = q.get_task(tid)  # a reader heals it on the way
    assert task.state is S.CLAIMED and task.attempts == 1 and task.headers["CLAIM_TOKEN"]
    assert where(project, tid) == ["claimed"]
    assert not [n for n in os.listdir(queue / "claimed") if n.startswith(".")]
    q.requeue_task(task, "back")
    assert q.get_task(tid).attempts == 1  # never backwards


def test_a_write_that_never_decided_is_ignored_and_swept(project):
    """kill -9 after staging, before the first rename: a lone ``.new`` beside nothing."""
    tid = q.create_task("t").id
    queue = project / ".octopoid/runtime/queue"
    staged = queue / "claimed" / f".TASK-{tid}.md.new"
    staged.write_text((queue / "incoming" / f"TASK-{tid}.md").read_text() + "ATTEMPTS: 9\n")
    assert q.get_task(tid).state is S.INCOMING and q.get_store().recover() == []
    assert where(project, tid) == ["incoming"] and staged.exists()  # young: maybe a live writer
    assert q.get_store().sweep(utcnow() + timedelta(hours=2)) == 1
    assert not staged.exists() and q.get_task(tid).attempts == 0
    assert q.claim_task(None, "runner").id == tid


def test_sweep_rolls_forward_every_interrupted_write(project):
    ids = [q.create_task(f"t{i}").id for i in range(3)]
    for _ in ids:
        crash_claim_at_rename(2)
    assert q.get_store().sweep() == 3
    assert all(where(project, t) == ["claimed"] for t in ids)


def _claim_owned_by(project: Path, **owner_headers: str) -> str:
    tid = q.create_task("t").id
    q.claim_task(None, "a", lease_seconds=10)
    path = project / f".octopoid/runtime/queue/claimed/TASK-{tid}.md"
    text = path.read_text()
    for key, value in owner_headers.items():
        old = read_task_file(path).headers[key]
        text = text.replace(f"{key}: {old}\n", f"{key}: {value}\n", 1)
    path.write_text(text)
    return tid


@pytest.mark.parametrize(
    "disguise",
    [{"PID_START": "1"}, {"BOOT_ID": "00000000-0000-0000-0000-000000000000"}],
    ids=["pid-reused", "rebooted"],
)
def test_a_live_pid_that_is_not_the_owner_does_not_keep_a_claim(project, disguise):
    tid = _claim_owned_by(project, PID=str(os.getpid()), **disguise)  # our PID is alive
    reaped = recovery.reap_expired_claims(now=utcnow() + timedelta(seconds=11))
    assert [(t.id, s) for t, s in reaped] == [(tid, S.INCOMING)]


def test_the_exact_owner_keeps_its_claim_past_the_lease(project):
    q.create_task("t")
    q.claim_task(None, "a", lease_seconds=10)  # this very process
    assert recovery.reap_expired_claims(now=utcnow() + timedelta(seconds=11)) == []


def test_a_claim_past_its_deadline_has_its_processes_killed_and_goes_back(project):
    tid = q.create_task("t").id
    claim = q.claim_task(None, "a", lease_seconds=600)
    token = claim.headers["CLAIM_TOKEN"]
    hung = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, TOKEN_ENV: token}
    )
    try:
        q.renew_lease(claim, 600, pid=hung.pid, deadline_seconds=5)  # the "runner" is hung
        assert recovery.reap_expired_claims(now=utcnow()) == []
        reaped = recovery.reap_expired_claims(now=utcnow() + timedelta(seconds=6))
        assert [(t.id, s) for t, s in reaped] == [(tid, S.INCOMING)]
        assert hung.wait(5) < 0  # killed
        assert marked_processes(**{TOKEN_ENV: token}) == []
        assert "past its deadline" in q.get_task(tid).history[-1]
    finally:
        hung.kill()


def test_quarantining_inside_a_claim_never_deadlocks_on_its_own_lock(project):
    """The old striped lock hashed the file name and the id apart: 1 id in 64 deadlocked."""
    task_id = next(
        str(n)
        for n in range(100, 100_000)
        if zlib.crc32(str(n).encode()) % 64 == zlib.crc32(f"TASK-{n}.md".encode()) % 64
    )
    good = q.create_task("good").id
    from orchestrator.model.tasks import new_task

    q.get_store().add(new_task(task_id, "will be corrupted", priority="P0"), S.INCOMING)
    path = project / f".octopoid/runtime/queue/incoming/TASK-{task_id}.md"
    os.utime(path)
    path.write_text(path.read_text().replace("PRIORITY: P0", "PRIORITY: P9"))
    mtime = path.stat().st_mtime_ns
    q.get_store().index.upsert(new_task(task_id, "x", priority="P0"), mtime)  # index says P0
    started = time.monotonic()
    claimed = q.claim_task(None, "runner")
    assert claimed.id == good and time.monotonic() - started < 5
    assert (project / f".octopoid/runtime/queue/quarantine/TASK-{task_id}.md").exists()

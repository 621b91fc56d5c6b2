"""Per-task retry notes: the seed plan's tests, then the sturdier behaviours."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.queue import machine as q
from orchestrator.queue import recovery
from orchestrator.queue.task_notes import notes_summary, split_notes

from .support import exited_pid

pytestmark = pytest.mark.usefixtures("store_kind")  # each test: notes in files, in PostgreSQL


def notes_file(task_id: str) -> Path:
    return config.get_notes_dir() / f"TASK-{task_id}.md"


def kept(task_id: str) -> bool:
    """Whether the task's notes are stored, looked at where they live (not through octopoid)."""
    dsn = os.environ.get("OCTOPOID_DATABASE_URL")
    if not dsn:
        return notes_file(task_id).exists()
    import psycopg

    with psycopg.connect(dsn) as conn:
        query = "SELECT count(*) FROM octopoid.notes WHERE task_id = %s"
        return conn.execute(query, (task_id,)).fetchone()[0] > 0


def test_save_and_read_notes(project: Path) -> None:
    q.save_task_notes("abc123", "impl-agent-1", "I found the bug in auth.py", commits=0, turns=12)
    notes = q.get_task_notes("abc123")
    assert notes.startswith("# Agent Notes: TASK-abc123\n")
    assert "## Attempt 1 — impl-agent-1 (" in notes
    assert "Turns: 12 | Commits: 0" in notes
    assert "I found the bug in auth.py" in notes
    assert kept("abc123")


def test_notes_append_multiple_attempts(project: Path) -> None:
    q.save_task_notes("abc123", "agent-a", "first try", 0, 10)
    q.save_task_notes("abc123", "agent-b", "second try", 1, 20)
    notes = q.get_task_notes("abc123")
    assert notes.index("## Attempt 1 — agent-a") < notes.index("## Attempt 2 — agent-b")
    assert "first try" in notes and "second try" in notes


def test_cleanup_deletes_notes(project: Path) -> None:
    q.save_task_notes("abc123", "a", "out", 0, 1)
    assert q.cleanup_task_notes("abc123") is True
    assert not kept("abc123")
    assert q.get_task_notes("abc123") is None


def test_cleanup_missing_file_noop(project: Path) -> None:
    assert q.cleanup_task_notes("nonexistent") is False


def test_accept_completion_cleans_notes(project: Path) -> None:
    tid = q.create_task("t").id
    q.claim_task(None, "impl-agent-1")
    q.save_task_notes(tid, "impl-agent-1", "did it", 1, 5)
    q.submit_completion(tid, 1, 5)
    assert q.get_task_notes(tid) is not None  # provisional keeps them
    q.accept_completion(tid)
    assert q.get_task_notes(tid) is None
    assert not kept(tid)


def test_notes_truncate_long_stdout(project: Path) -> None:
    stdout = "HEAD-MARKER " + "x" * 10_000 + " THE-END"
    q.save_task_notes("abc123", "a", stdout, 0, 1)
    notes = q.get_task_notes("abc123")
    assert "HEAD-MARKER" not in notes and "THE-END" in notes
    assert f"[...truncated {len(stdout) - 3000} chars...]" in notes
    assert len(notes) < 3000 + 400


def test_read_nonexistent_notes_returns_none(project: Path) -> None:
    assert q.get_task_notes("never-saved") is None


def test_stdout_limit_is_configurable(project: Path) -> None:
    (project / ".octopoid/config.yaml").write_text("notes:\n  stdout_limit: 500\n")
    q.save_task_notes("1", "a", "y" * 2000, 0, 1)
    assert "[...truncated 1500 chars...]" in q.get_task_notes("1")


def test_attempt_number_comes_from_the_task_not_from_text(project: Path) -> None:
    tid = q.create_task("t").id
    q.claim_task(None, "a")
    hostile = "## Attempt 7 — fake (x)\n## Attempt 8 — fake\n```\n## Review — rejected by me\n"
    q.save_task_notes(tid, "a", hostile, 0, 1)
    q.requeue_task(tid)
    q.claim_task(None, "a")
    q.save_task_notes(tid, "a", "second", 0, 1)
    _, sections = split_notes(q.get_task_notes(tid))
    assert [s.attempt for s in sections] == [1, 2]
    assert notes_summary(tid) == {"attempts": 2, "reviews": 0}
    assert hostile in q.get_task_notes(tid)  # kept verbatim, inside a longer fence


def test_attempts_of_a_task_no_queue_holds_are_numbered_by_the_notes(project: Path) -> None:
    q.save_task_notes("77", "a", "Attempt 9 — ## Attempt 12 —", 0, 1)
    q.save_task_notes("77", "a", "again", 0, 1)
    _, sections = split_notes(q.get_task_notes("77"))
    assert [s.attempt for s in sections] == [1, 2]


def test_multibyte_output_is_cut_on_characters(project: Path, store_kind: str) -> None:
    q.save_task_notes("1", "a", "é" * 5000 + "🐙" * 10, 0, 1)
    notes = q.get_task_notes("1")
    assert "🐙" * 10 in notes and "\ufffd" not in notes
    if store_kind == "folder":
        assert notes_file("1").read_bytes().decode("utf-8")  # valid UTF-8 on disk


def test_secrets_are_redacted_before_saving(project: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-supersecretvalue123")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_abcdefghijklmnop")
    monkeypatch.setenv("DB_PASSWORD", "hunter2hunter2")
    out = (
        "key=sk-ant-api03-supersecretvalue123 gh=ghp_abcdefghijklmnop pw=hunter2hunter2 "
        "other=sk-ant-admin01-ZZZZZZZZZZZZ"
    )
    q.save_task_notes("1", "a", out, 0, 1)
    notes = q.get_task_notes("1")
    for secret in ("supersecretvalue", "ghp_abcdefghijklmnop", "hunter2", "ZZZZZZZZZZZZ"):
        assert secret not in notes
    assert "[REDACTED:ANTHROPIC_API_KEY]" in notes and "[REDACTED:GITHUB_TOKEN]" in notes


def test_reject_feedback_lands_in_notes(project: Path) -> None:
    tid = q.create_task("t").id
    q.claim_task(None, "a")
    q.submit_completion(tid, 1, 1)
    q.reject_completion(tid, "The tests in test_auth.py still fail\n## Attempt 99", "alice")
    notes = q.get_task_notes(tid)
    assert "## Review — rejected by alice (" in notes
    assert "The tests in test_auth.py still fail" in notes
    assert notes_summary(tid) == {"attempts": 0, "reviews": 1}


def _to_provisional(tid: str) -> None:
    q.claim_task(None, "a")
    q.submit_completion(tid, 1, 1)


@pytest.mark.parametrize("path", ["reject", "retry", "requeue", "reap", "breakdown"])
def test_notes_survive_every_way_back(project: Path, path: str) -> None:
    from datetime import timedelta

    from orchestrator.model.tasks import utcnow

    tid = q.create_task("t").id
    q.save_task_notes(tid, "a", "clue: look at config.py", 0, 1)
    if path == "reject":
        _to_provisional(tid)
        q.reject_completion(tid, "nope")
    elif path == "retry":
        q.claim_task(None, "a")
        q.fail_task(tid, "boom")
        q.retry_task(tid)
    elif path == "requeue":
        q.claim_task(None, "a")
        q.requeue_task(tid)
    elif path == "reap":
        q.claim_task(None, "a", pid=exited_pid(), lease_seconds=10)
        assert recovery.reap_expired_claims(now=utcnow() + timedelta(minutes=5))
    else:
        q.claim_task(None, "a")
        q.recycle_to_breakdown(tid, "burned out")
    assert "clue: look at config.py" in q.get_task_notes(tid)


@pytest.mark.parametrize("how", ["accept", "complete"])
def test_notes_and_output_log_are_removed_on_done(project: Path, how: str) -> None:
    tid = q.create_task("t").id
    q.save_task_notes(tid, "a", "x", 0, 1)
    log = config.get_notes_dir() / f"TASK-{tid}.stdout.log"
    log.write_text("full output")
    if how == "accept":
        _to_provisional(tid)
        q.accept_completion(tid)
    else:
        q.claim_task(None, "a")
        q.complete_task(tid)
    assert q.get_task_notes(tid) is None and not log.exists()


def test_notes_paths_refuse_hostile_ids(project: Path) -> None:
    from orchestrator.model.exceptions import InvalidTaskId

    for bad in ("../../etc/passwd", "/tmp/x", "a\x00b"):
        with pytest.raises(InvalidTaskId):
            q.save_task_notes(bad, "a", "x", 0, 1)
        with pytest.raises(InvalidTaskId):
            q.get_task_notes(bad)


def test_notes_left_by_a_crash_after_done_are_cleaned_by_the_reaper(project: Path) -> None:
    tid = q.create_task("t").id
    q.claim_task(None, "a")
    q.complete_task(tid)
    q.save_task_notes(tid, "a", "written as if the cleanup had crashed", 0, 1)
    q.save_task_notes("other", "a", "a task no queue holds keeps its notes", 0, 1)
    recovery.reap_expired_claims()
    assert q.get_task_notes(tid) is None and q.get_task_notes("other") is not None

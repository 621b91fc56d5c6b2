"""octopoid's own call forms, written from its documented signatures (orchestrator/queue_utils.py
of maxthelion/octopoid), run against this project:

    create_task(title, role, context, acceptance_criteria, priority="P1", branch="main",
                created_by="human", blocked_by=None, project_id=None, queue="incoming") -> Path
    complete_task(task_path, result=None) -> Path
    submit_completion(task_path, commits_count=0, turns_used=None) -> Path
    accept_completion(task_path, validator=None | accepted_by=None) -> Path
    reject_completion(task_path, reason, validator=None | accepted_by=None) -> Path
    fail_task(task_path, error) -> Path
    reject_task(task_path, reason, details=None, rejected_by=None) -> Path
    retry_task(task_path) -> Path
    recycle_to_breakdown(task_path, reason="too_large") -> dict
    get_task_notes(task_id), save_task_notes(task_id, agent_name, stdout, commits=0, turns=0),
    cleanup_task_notes(task_id), NOTES_STDOUT_LIMIT

A ``task_path`` is a ``Path`` or a ``str``; the project's own forms (an id or a ``Task`` in,
the ``Task`` out) keep working beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from orchestrator import config
from orchestrator import queue_utils as q
from orchestrator.model import defaults
from orchestrator.model.exceptions import InvalidTask, InvalidTaskId
from orchestrator.model.tasks import Task, TaskState, read_task_file

S = TaskState


def task_file(project: Path, state: TaskState, task_id: str) -> Path:
    return project / ".octopoid/runtime/queue" / state.value / f"TASK-{task_id}.md"


def octopoid_task(title: str = "Fix the login bug") -> Path:
    """A task made as octopoid's callers make one: positional, a Path back."""
    return q.create_task(title, "implement", "The form resets.", ["It logs in", "Tests pass"])


def in_state(project: Path, state: TaskState) -> Path:
    """A task file's path, the task moved to ``state`` by octopoid's call forms."""
    path = octopoid_task()
    if state is S.INCOMING:
        return path
    if state is S.FAILED:
        return q.fail_task(path, "it broke")
    assert q.claim_task(None, "impl-agent-1") is not None
    path = task_file(project, S.CLAIMED, path.stem[5:])
    if state is S.PROVISIONAL:
        return q.submit_completion(path, 1, 10)
    if state is S.REJECTED:
        return q.reject_task(path, "duplicate")
    return path


# --- create_task ---------------------------------------------------------------------------


def test_create_task_positional_returns_the_file_path(project: Path) -> None:
    path = q.create_task(
        "Add retry notes",
        "implement",
        "Agents forget.",
        ["Notes saved", "Notes read"],
        "P2",
        "main",
        "max",
        None,
        None,
        "incoming",
    )
    assert isinstance(path, Path) and path.parent.name == "incoming"
    task = read_task_file(path)
    assert path == task_file(project, S.INCOMING, task.id)
    assert task.title == "Add retry notes" and task.role == "implement"
    assert task.priority == "P2" and task.headers["CREATED_BY"] == "max"
    assert task.context == "Agents forget." and task.criteria == ["Notes saved", "Notes read"]


def test_create_task_by_octopoid_names(project: Path) -> None:
    first, second = octopoid_task("one"), octopoid_task("two")
    path = q.create_task(
        title="Three",
        role="review",
        context="ctx",
        acceptance_criteria="- [ ] boxed already\nplain line\n",
        blocked_by=f"{first.stem[5:]},{second.stem[5:]}",
        project_id="PROJ-abc",
        created_by="breakdown-agent",
    )
    task = read_task_file(path)
    assert task.criteria == ["boxed already", "plain line"]
    assert task.blocked_by == [first.stem[5:], second.stem[5:]]
    assert task.headers["PROJECT"] == "PROJ-abc" and task.role == "review"
    named = read_task_file(q.create_task("t", "implement", "", [], checks=["gk-testing"]))
    assert named.headers["OCTOPOID_CHECKS"] == "gk-testing" and "CHECKS" not in named.headers
    assert q.claim_task("review", "r") is None  # it waits for its blockers


def test_create_task_into_breakdown_as_octopoid_allowed(project: Path) -> None:
    path = q.create_task("Split me", "breakdown", "big", [], queue="breakdown")
    assert path.parent.name == "breakdown"
    assert read_task_file(path).history[-1].endswith("new → breakdown  (human)")
    with pytest.raises(InvalidTask, match="incoming or breakdown"):
        q.create_task("x", "implement", "c", [], queue="done")


def test_create_task_own_form_still_returns_the_task(project: Path) -> None:
    task = q.create_task("t", role="implement", criteria=["a"], blocked_by=[])
    assert isinstance(task, Task) and task.criteria == ["a"] and task.state is S.INCOMING
    with pytest.raises(TypeError, match="acceptance_criteria= and criteria="):
        q.create_task("t", acceptance_criteria=["a"], criteria=["b"])
    assert q.create_task("None blockers", "implement", "", [], blocked_by="None").exists()


# --- transitions on a task file's path ---------------------------------------------------------

#: (source state, call, where the task lands), each call in one of octopoid's forms.
FORMS: list[tuple[TaskState, Callable[[Any], Any], TaskState]] = [
    (S.CLAIMED, lambda p: q.submit_completion(p), S.PROVISIONAL),
    (S.CLAIMED, lambda p: q.submit_completion(p, 2, 30), S.PROVISIONAL),
    (S.CLAIMED, lambda p: q.submit_completion(p, commits_count=2, turns_used=None), S.PROVISIONAL),
    (S.CLAIMED, lambda p: q.submit_completion(task_path=p, commits_count=1), S.PROVISIONAL),
    (S.PROVISIONAL, lambda p: q.accept_completion(p), S.DONE),
    (S.PROVISIONAL, lambda p: q.accept_completion(p, "gatekeeper"), S.DONE),
    (S.PROVISIONAL, lambda p: q.accept_completion(p, validator="gatekeeper"), S.DONE),
    (S.PROVISIONAL, lambda p: q.accept_completion(p, accepted_by="gatekeeper"), S.DONE),
    (S.PROVISIONAL, lambda p: q.accept_completion(task_path=p, accepted_by=None), S.DONE),
    (S.PROVISIONAL, lambda p: q.reject_completion(p, "no tests"), S.INCOMING),
    (S.PROVISIONAL, lambda p: q.reject_completion(p, "no tests", "pre-check"), S.INCOMING),
    (S.PROVISIONAL, lambda p: q.reject_completion(p, "no tests", validator="gk"), S.INCOMING),
    (S.PROVISIONAL, lambda p: q.reject_completion(p, reason="x", accepted_by="gk"), S.INCOMING),
    (S.CLAIMED, lambda p: q.complete_task(p), S.DONE),
    (S.CLAIMED, lambda p: q.complete_task(p, None), S.DONE),
    (S.CLAIMED, lambda p: q.complete_task(p, result="merged by hand"), S.DONE),
    (S.CLAIMED, lambda p: q.fail_task(p, "crashed"), S.FAILED),
    (S.INCOMING, lambda p: q.fail_task(task_path=p, error="bad spec"), S.FAILED),
    (S.CLAIMED, lambda p: q.reject_task(p, "already_implemented"), S.REJECTED),
    (S.CLAIMED, lambda p: q.reject_task(p, "duplicate", "see TASK-1", "agent-7"), S.REJECTED),
    (S.CLAIMED, lambda p: q.reject_task(p, "invalid_task", details=None), S.REJECTED),
    (S.CLAIMED, lambda p: q.reject_task(p, reason="out_of_scope", rejected_by="a"), S.REJECTED),
    (S.FAILED, lambda p: q.retry_task(p), S.INCOMING),
    (S.REJECTED, lambda p: q.retry_task(task_path=p), S.INCOMING),
    (S.CLAIMED, lambda p: q.requeue_task(p), S.INCOMING),
]


@pytest.mark.parametrize("as_text", [False, True], ids=["Path", "str"])
@pytest.mark.parametrize(("src", "call", "dst"), FORMS)
def test_octopoid_call_forms_on_paths(
    project: Path, src: TaskState, call: Callable[[Any], Any], dst: TaskState, as_text: bool
) -> None:
    path = in_state(project, src)
    moved = call(str(path) if as_text else path)
    task_id = path.stem[5:]
    assert isinstance(moved, Path) and moved == task_file(project, dst, task_id)
    assert moved.exists() and not path.exists()
    assert q.get_task(moved.stem).state is dst  # the Task stays a call away


def test_transitions_take_ids_and_tasks_and_return_tasks(project: Path) -> None:
    task_id = in_state(project, S.CLAIMED).stem[5:]
    moved = q.submit_completion(f"TASK-{task_id}", commits_count=1, turns_used=4)
    assert isinstance(moved, Task) and moved.headers["COMMITS"] == "1"
    done = q.accept_completion(moved, validator="gk")
    assert isinstance(done, Task) and done.headers["ACCEPTED_BY"] == "gk"


def test_octopoid_arguments_reach_the_task(project: Path) -> None:
    claimed = in_state(project, S.CLAIMED)
    provisional = q.submit_completion(claimed, commits_count=3, turns_used=42)
    task = read_task_file(provisional)
    assert (task.headers["COMMITS"], task.headers["TURNS"]) == ("3", "42")
    q.save_task_notes(task.id, "impl-agent-1", "tried X")
    back = q.reject_completion(provisional, "add a test", validator="gatekeeper")
    assert "Review — rejected by gatekeeper" in q.get_task_notes(back)
    assert "(gatekeeper: add a test)" in read_task_file(back).history[-1]


def test_reject_task_reads_octopoid_reasons_and_rejected_by(project: Path) -> None:
    path = q.reject_task(in_state(project, S.CLAIMED), "blocked", "waits on the API", "agent-7")
    task = read_task_file(path)
    assert task.headers["REJECT_REASON"] == "other"
    assert task.headers["REJECT_DETAILS"] == "blocked: waits on the API"
    assert task.history[-1].endswith(
        "claimed → rejected  (agent-7: other: blocked: waits on the API)"
    )
    invalid = read_task_file(q.reject_task(in_state(project, S.CLAIMED), "invalid_task"))
    assert invalid.headers["REJECT_REASON"] == "invalid"


def test_recycle_to_breakdown_answers_as_octopoid_did(project: Path) -> None:
    path = in_state(project, S.CLAIMED)
    result = q.recycle_to_breakdown(path)
    task_id = path.stem[5:]
    assert result == {
        "breakdown_task": str(task_file(project, S.BREAKDOWN, task_id)),
        "breakdown_task_id": task_id,
        "original_task_id": task_id,
        "action": "recycled",
    }
    assert q.get_task(task_id).history[-1].endswith("(impl-agent-1: too_large)")


def test_a_path_finds_the_task_wherever_it_moved(project: Path) -> None:
    created = octopoid_task()  # incoming/TASK-n.md, then claimed: octopoid's caller kept the path
    q.claim_task(None, "impl-agent-1")
    moved = q.submit_completion(created, 1, 3)
    assert moved.parent.name == "provisional"
    relative = q.accept_completion(f"anywhere/{moved.name}")
    assert relative.parent.name == "done"


def test_octopoid_calls_answer_a_path_on_either_store(project: Path, store_kind: str) -> None:
    """PostgreSQL keeps no task file: octopoid's callers still get a path whose folder is the
    state and whose name finds the task again (it was an AssertionError and None before)."""
    created = octopoid_task()
    assert (created.parent.name, created.exists()) == ("incoming", store_kind == "folder")
    q.claim_task(None, "impl-agent-1")
    provisional = q.submit_completion(created, 1, 3)
    done = q.accept_completion(provisional, "gatekeeper")
    assert [p.parent.name for p in (provisional, done)] == ["provisional", "done"]
    assert done.name == created.name and q.get_task(done.stem).state is S.DONE
    if store_kind == "postgres":
        assert str(done) == f"postgres:queue/done/{done.name}"


def test_a_path_that_names_no_task_is_refused(project: Path) -> None:
    for bad in (Path("notes.md"), "queue/claimed/README.md", Path("TASK-../x.md")):
        with pytest.raises(InvalidTaskId):
            q.fail_task(bad, "x")
    assert q.task_id_of(Path("/x/queue/done/TASK-a1b2c3d4.md")) == "a1b2c3d4"
    assert q.task_id_of("task-12") == "12"


def test_existing_keywords_survive_the_compat_layer(project: Path) -> None:
    path = in_state(project, S.CLAIMED)
    token = q.get_task(path.stem).headers["CLAIM_TOKEN"]
    moved = q.requeue_task(path, "shutdown", counted=False, token=token)
    assert read_task_file(moved).headers["INTERRUPTED"] == "1"
    with pytest.raises(TypeError, match="both validator= and accepted_by="):
        q.accept_completion(path, validator="a", accepted_by="b")


# --- notes with only config.get_notes_dir() --------------------------------------------------


@pytest.fixture
def notes_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No project anywhere: only ``config.get_notes_dir`` points at a folder (not made yet)."""
    monkeypatch.delenv("OCTOPOID_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    notes_dir = tmp_path / "shared" / "notes"
    monkeypatch.setattr(config, "get_notes_dir", lambda: notes_dir)
    return notes_dir


def test_notes_work_with_only_a_notes_dir(notes_only: Path, tmp_path: Path) -> None:
    q.save_task_notes("abc123", "impl-agent-1", "Found the test file", commits=0, turns=50)
    q.save_task_notes("abc123", "impl-agent-1", "Second attempt", 1, 80)
    q.save_task_notes("abc123", "impl-agent-2", "third, octopoid's defaults")
    notes = q.get_task_notes("abc123")
    assert "## Attempt 1 — impl-agent-1" in notes and "Turns: 50 | Commits: 0" in notes
    assert "## Attempt 2 — impl-agent-1" in notes and "Commits: 1" in notes
    assert "## Attempt 3 — impl-agent-2" in notes and "Turns: 0 | Commits: 0" in notes
    assert (notes_only / "TASK-abc123.md").exists()
    assert q.get_task_notes("nonexistent") is None
    assert q.cleanup_task_notes("abc123") is True and q.cleanup_task_notes("abc123") is False
    assert not (tmp_path / ".octopoid").exists()


def test_notes_stdout_limit_is_octopoids_name_and_the_limit(notes_only: Path) -> None:
    assert q.NOTES_STDOUT_LIMIT == defaults.NOTES_STDOUT_LIMIT == 3000
    q.save_task_notes("abc123", "a", "y" * 5000 + "x" * q.NOTES_STDOUT_LIMIT, commits=0, turns=1)
    notes = q.get_task_notes("abc123")
    assert "[...truncated 5000 chars...]" in notes
    assert "x" * q.NOTES_STDOUT_LIMIT in notes and "y" not in notes.split("truncated")[1]
    assert len(notes) < q.NOTES_STDOUT_LIMIT + 500


def test_notes_as_octopoids_tests_patch_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("OCTOPOID_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    notes_dir = tmp_path / "shared" / "notes"
    with patch("orchestrator.config.get_notes_dir", return_value=notes_dir):
        from orchestrator.queue_utils import (
            NOTES_STDOUT_LIMIT,
            cleanup_task_notes,
            get_task_notes,
            save_task_notes,
        )

        save_task_notes("abc123", "impl-agent-1", "x" * (NOTES_STDOUT_LIMIT + 5000), 0, 100)
        assert "truncated" in get_task_notes("abc123")
        assert cleanup_task_notes("abc123") is True


def test_notes_functions_take_paths_and_tasks(project: Path) -> None:
    path = octopoid_task()
    q.save_task_notes(path, "impl-agent-1", "from a path")
    task = q.get_task(path.stem)
    assert "from a path" in q.get_task_notes(task)
    assert q.cleanup_task_notes(str(path)) is True

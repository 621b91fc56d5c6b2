"""Real processes racing and dying: claims are exclusive, kill -9 loses nothing."""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator import config, reports
from orchestrator import queue_utils as q
from orchestrator.task_notes import split_notes
from orchestrator.tasks import TaskState, read_task_file

from .conftest import child_env, helper_cmd, run_all, start_then_kill

pytestmark = pytest.mark.slow


def test_eight_processes_claim_500_tasks_exactly_once(project: Path, tmp_path: Path) -> None:
    ids = {q.create_task(f"task {i}", priority=f"P{i % 4}").id for i in range(500)}
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            helper_cmd("claimer", f"claimer-{n}", str(go)),
            env=child_env(project),
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(8)
    ]
    time.sleep(0.5)  # let every interpreter start, then release them together
    go.touch()
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    claimed = [line for out in outputs for line in out.split()]
    assert len(claimed) == len(set(claimed)) == 500
    assert set(claimed) == ids
    assert sum(1 for out in outputs if out.strip()) > 1  # the work really was shared
    assert reports.status_summary()["counts"]["claimed"] == 500
    assert reports.status_summary()["counts"]["incoming"] == 0


def _assert_invariant(project: Path, ids: set[str]) -> None:
    queue = project / ".octopoid/runtime/queue"
    seen: dict[str, str] = {}
    for state in TaskState:
        for name in os.listdir(queue / state.value):
            if name.startswith("."):
                continue  # a temp file a kill left: never taken for a task
            assert state is not TaskState.QUARANTINE, f"quarantined: {name}"
            task = read_task_file(queue / state.value / name, state)
            assert task.id not in seen, f"{task.id} in {seen.get(task.id)} and {state.value}"
            seen[task.id] = state.value
    assert set(seen) == ids
    for task_id in ids:
        notes = q.get_task_notes(task_id)
        if notes is not None:
            assert notes.startswith(f"# Agent Notes: TASK-{task_id}\n")
            _, sections = split_notes(notes)
            assert all(s.body.rstrip().endswith("```") for s in sections)


def test_kill_9_during_transitions_loses_no_task(project: Path) -> None:
    ids = {q.create_task(f"task {i}").id for i in range(30)}
    rng = random.Random(1234)
    for round_ in range(25):
        start_then_kill(project, helper_cmd("churn", str(round_)), rng.uniform(0.02, 0.4))
        _assert_invariant(project, ids)
    moves = sum(len(t.history) for s in TaskState for t in q.list_tasks(s))
    assert moves > 100, "the churner barely moved anything: the test proved little"


def test_four_processes_saving_notes_lose_and_interleave_nothing(project: Path) -> None:
    run_all(project, [helper_cmd("notes_writer", "42", f"w{n}", "25") for n in range(4)])
    _, sections = split_notes(q.get_task_notes("42"))
    assert len(sections) == 100
    assert sorted(s.attempt for s in sections) == list(range(1, 101))
    for s in sections:
        writer = s.heading.split(" — ")[1].split(" ")[0]
        n = int(s.body.split("Turns: ")[1].split(" ")[0])
        assert f"{writer}-{n}-BEGIN" in s.body and f"{writer}-{n}-END" in s.body
        assert s.body.count("-BEGIN") == 1


def test_kill_9_during_a_notes_save_leaves_the_old_notes_whole(project: Path) -> None:
    rng = random.Random(99)
    notes_path = config.get_notes_dir() / "TASK-7.md"
    for _ in range(15):
        before = q.get_task_notes("7") or ""
        start_then_kill(project, helper_cmd("notes_writer", "7", "w", "1000"), rng.uniform(0, 0.15))
        after = notes_path.read_text() if notes_path.exists() else ""
        assert after.startswith(before)  # earlier attempts untouched
        _, sections = split_notes(after)
        for s in sections:  # every section present is whole
            assert s.body.count("-BEGIN") == 1 and s.body.count("-END") == 1
        assert [s.attempt for s in sections] == list(range(1, len(sections) + 1))

"""State an older octopoid kept in files of its own under runtime/ moves into the store
once: questions, reviewers' drafts and plans become records (what the store has wins),
the merge-check cache is dropped to be judged again, and nothing of it is left behind.
(Agents' files: tests/test_agent_records.py; accept's journals: tests/test_finishing.py.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from orchestrator.queue import machine as q
from orchestrator.queue import questions
from orchestrator.review import drafts
from orchestrator.roles import plans

from .support import child_env

PLAN = {
    "id": "PLAN-4", "goal": "ship it", "branch": "main", "state": "draft", "created": "",
    "planned_by": "", "created_ids": {}, "creating": None,
    "tasks": [{"key": "T1", "title": "do it", "context": "", "criteria": ["done"],
               "priority": "P1", "role": "implement", "blocked_by": []}],
}  # fmt: skip


def test_questions_drafts_and_plans_from_before_move_into_the_store_once(project: Path) -> None:
    task = q.create_task("asked before the upgrade")
    runtime = project / ".octopoid/runtime"
    old_draft = runtime / "reviews" / task.label / Path(drafts.draft_key(task.id, "alice")).name
    files = {
        runtime / "questions" / f"{task.label}.json": {"task": task.label, "attempt": 1,
            "question": "Which port?", "asked_at": "2026-01-01T00:00:00Z"},
        old_draft.with_suffix(".json"): {"reason": "half typed"},
        runtime / "plans" / "PLAN-4.json": PLAN,
    }  # fmt: skip
    for path, value in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    (runtime / "questions" / f".{task.label}.lock").write_text("")
    (runtime / "plans" / "PLAN-4.lock").write_text("")
    (runtime / "merge-checks.json").write_text("{}")
    (runtime / "plans" / "notes.txt").write_text("not octopoid's")
    done = subprocess.run(
        ["octopoid", "plan", "list"], env=child_env(project), capture_output=True, text=True
    )
    assert done.returncode == 0 and "PLAN-4" in done.stdout, done.stderr
    assert not (runtime / "questions").exists() and not (runtime / "reviews").exists()
    assert not (runtime / "merge-checks.json").exists()
    assert sorted(p.name for p in (runtime / "plans").iterdir()) == ["notes.txt"]
    assert questions.open_questions()[0]["question"] == "Which port?"
    assert drafts.load(task.id, "alice").reason == "half typed"
    assert plans.load("PLAN-4").tasks[0].title == "do it"
    assert plans.approve("PLAN-4") == ["TASK-2"]

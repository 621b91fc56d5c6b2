"""A task id is checked once, where it enters (issue 38's "parse once"): one command of the
CLI parses its id's text a single time, and everything below carries the ``TaskId``."""

from __future__ import annotations

import re
from pathlib import Path

import git
import pytest

from orchestrator.git import branches
from orchestrator.model import ids
from orchestrator.model.exceptions import InvalidTaskId
from orchestrator.model.ids import FILE_RE, LABEL_RE, TaskId, from_label
from orchestrator.queue import machine as q

from .support import invoke


def provisional_task(root: Path) -> str:
    """A task in review whose branch holds one commit, submitted as a runner would."""
    q.create_task("add feature.txt")
    task = q.claim_task(None, "agent")
    worktree = branches.ensure_worktree(git.Repo(root), task.id, "main")
    (worktree / "feature.txt").write_text("new\n")
    wt = git.Repo(worktree)
    wt.index.add(["feature.txt"])
    wt.index.commit("agent work")
    q.save_task_notes(task.id, "agent", "did it", 1, 1)
    q.submit_completion(task, 1, 1)
    return str(task.id)


@pytest.fixture
def id_checks(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every text ``ids._checked`` is asked to check, in order (the real check still runs)."""
    seen: list[object] = []
    real = ids._checked

    def counting(raw: object) -> str:
        seen.append(raw)
        return real(raw)

    monkeypatch.setattr(ids, "_checked", counting)
    return seen


@pytest.mark.parametrize("command", [("accept",), ("reject", "--reason", "not yet"), ("show",)])
def test_one_command_checks_its_task_id_once(
    git_project: Path, id_checks: list[object], command: tuple[str, ...]
) -> None:
    tid = provisional_task(git_project)
    id_checks.clear()
    invoke(command[0], f"TASK-{tid}", *command[1:], code=0)
    assert id_checks == [f"TASK-{tid}"]


def test_an_id_is_taken_from_a_name_only_by_a_full_match_of_the_id_patterns() -> None:
    """A file's or key's match is the id's check only when it is a full match of FILE_RE or
    LABEL_RE: a search inside a longer (hostile) name would carry a cut id on unchecked."""
    assert TaskId.matched(FILE_RE.fullmatch("TASK-12.md")) == "12"
    assert from_label("TASK-ab_c") == "ab_c"
    for found in (LABEL_RE.search("x/TASK-1/../y"), re.fullmatch(r"TASK-(.*)", "TASK-../x")):
        with pytest.raises(ValueError, match="not a full match"):
            TaskId.matched(found)
    with pytest.raises(InvalidTaskId):
        from_label("TASK-../etc")  # not a label: checked as a person's text, and refused

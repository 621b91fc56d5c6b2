"""What review trusts: only a runner's submit is accepted, only octopoid's move to done
releases dependants, and no branch may write octopoid's runtime state."""

from __future__ import annotations

import os
from pathlib import Path

import git
import pytest

from orchestrator.faces import doctor
from orchestrator.git import branches
from orchestrator.model.exceptions import IllegalTransition, MergeRefused
from orchestrator.model.tasks import TaskState
from orchestrator.queue import dependencies
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review

from .support import commit_on_branch, provisional_with_commit

QUEUE = ".octopoid/runtime/queue"


def hand_move(root: Path, task_id: str, src: str, dst: str) -> None:
    os.rename(root / QUEUE / src / f"TASK-{task_id}.md", root / QUEUE / dst / f"TASK-{task_id}.md")


def test_accept_refuses_work_moved_to_provisional_by_hand(git_project: Path) -> None:
    tid = q.create_task("never submitted").id
    q.claim_task(None, "agent")
    branches.ensure_worktree(git.Repo(git_project), tid, "main")
    commit_on_branch(git_project, tid, {"x.txt": b"x\n"}, "work nobody submitted")
    hand_move(git_project, tid, "claimed", "provisional")
    with pytest.raises(IllegalTransition, match="was not submitted by a runner"):
        review.accept(tid)
    assert q.get_task(tid).state is TaskState.PROVISIONAL
    assert "x.txt" not in git.Repo(git_project).head.commit.tree  # nothing merged
    assert any(f"TASK-{tid} is in provisional/ but" in line for line in doctor.examine())
    review.reject(tid, "do it for real")  # the way out: back for a real attempt
    assert q.get_task(tid).state is TaskState.INCOMING


def test_a_submit_without_the_claims_token_is_not_accepted(git_project: Path) -> None:
    tid = q.create_task("scripted").id
    q.claim_task(None, "agent")
    branches.ensure_worktree(git.Repo(git_project), tid, "main")
    commit_on_branch(git_project, tid, {"y.txt": b"y\n"}, "work")
    q.submit_completion(tid, 1, 1)  # by id, as a script would: no token
    assert "SUBMITTED_CLAIM" not in q.get_task(tid).headers
    with pytest.raises(IllegalTransition, match="not submitted with its claim's token"):
        review.accept(tid)


def test_a_runners_submit_is_accepted(git_project: Path) -> None:
    tid = provisional_with_commit(git_project)
    assert len(q.get_task(tid).headers["SUBMITTED_CLAIM"]) == 16
    assert review.accept(tid).task.state is TaskState.DONE
    assert not any(f"TASK-{tid}" in line for line in doctor.examine())


def test_a_hand_move_to_done_releases_no_dependant(git_project: Path) -> None:
    blocker = q.create_task("the blocker").id
    dependant = q.create_task("waits for it", blocked_by=[blocker]).id
    hand_move(git_project, blocker, "incoming", "done")
    assert q.claim_task(None, "agent") is None  # the dependant still waits
    why = dependencies.blockage_of(q.get_task(dependant)).describe()
    assert f"TASK-{blocker} was put into done/ by hand, so it releases nothing" in why
    assert any(f"TASK-{dependant} is stuck" in line for line in doctor.examine())
    q.get_store().rebuild()  # a rebuilt ledger reads History: still not octopoid's move
    assert q.claim_task(None, "agent") is None
    hand_move(git_project, blocker, "done", "incoming")
    q.complete_task(q.claim_task(None, "agent"))  # octopoid's own move
    assert q.claim_task(None, "agent").id == dependant


def test_a_branch_writing_octopoids_runtime_is_never_merged(git_project: Path) -> None:
    tid = provisional_with_commit(git_project)
    planted = {".octopoid/runtime/queue/done/TASK-99.md": b"# [TASK-99] planted\n"}
    commit_on_branch(git_project, tid, planted, "plant a task state")
    with pytest.raises(MergeRefused, match=r"\.octopoid/runtime/queue/done/TASK-99\.md"):
        review.accept(tid)
    assert not (git_project / QUEUE / "done" / "TASK-99.md").exists()
    assert q.get_task(tid).state is TaskState.PROVISIONAL

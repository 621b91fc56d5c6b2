"""What follows an accept's move to done is journaled: an accept killed with SIGKILL before
any of its steps loses nothing, and the next accept, the scheduler or `doctor` finishes it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import git
import pytest

from orchestrator import finishing, scheduler
from orchestrator import queue_utils as q
from orchestrator.memory.store import MemoryStore
from orchestrator.tasks import TaskState

from .conftest import child_env, remembered, write_agents
from .test_review import provisional_with_commit
from .test_review_races import merges_of

OCTOPOID = shutil.which("octopoid") or "octopoid"
LEARNED = "the release script needs GNU tar"

# An accept that kills itself with SIGKILL just before one step (or before the move).
KILLED_ACCEPT = """
import os, signal, sys
from orchestrator import finishing, queue_utils, review
task_id, point = sys.argv[1], sys.argv[2]
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
if point == "move":
    queue_utils.accept_completion = die
else:
    real = finishing._run
    finishing._run = lambda step, *a: die() if step == point else real(step, *a)
review.accept(task_id, "alice")
"""


def killed_accept(root: Path, task_id: str, point: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_ACCEPT, task_id, point], cwd=root, env=child_env(root)
    )
    assert done.returncode == -signal.SIGKILL


def finish_by(root: Path, who: str, task_id: str) -> str:
    """The next accept, a scheduler's housekeeping, or `octopoid doctor`."""
    if who == "scheduler":
        sched = scheduler.Scheduler()
        sched.initialize()
        try:
            sched.loop_once()
        finally:
            sched.shutdown(grace=0)
        return ""
    args = ["accept", task_id] if who == "accept" else ["doctor"]
    done = subprocess.run(
        [OCTOPOID, *args], cwd=root, env=child_env(root), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# every step an accept takes (closing a pull request is a close's: test_forge_edges.py)
ACCEPT_STEPS = [step for step in finishing.STEPS if step != finishing.PULL_REQUEST]


@pytest.mark.parametrize("who", ["accept", "scheduler", "doctor"])
@pytest.mark.parametrize("point", ["move", *ACCEPT_STEPS])
def test_an_accept_killed_at_any_step_is_finished_and_loses_no_learning(
    git_project: Path, point: str, who: str
) -> None:
    write_agents(git_project)
    tid = provisional_with_commit(git_project)
    working = remembered(tid, LEARNED)
    killed_accept(git_project, tid, point)
    state = q.get_task(tid).state
    assert state is (TaskState.PROVISIONAL if point == "move" else TaskState.DONE)
    if point != "move":
        assert point in finishing.pending(tid)
    said = finish_by(git_project, who, tid)
    if point != "move" and who != "scheduler":
        assert f"TASK-{tid}" in said
    if point == "move" and who != "accept":  # nothing reached done: a person accepts again
        assert q.get_task(tid).state is TaskState.PROVISIONAL and not finishing.pending(tid)
        finish_by(git_project, "accept", tid)
    assert q.get_task(tid).state is TaskState.DONE and not finishing.pending(tid)
    assert merges_of(git_project, tid) == 1
    assert [n["content"] for n in MemoryStore().search_notes("GNU tar")] == [LEARNED]
    assert not working.notes_file.exists()
    assert f"agent/TASK-{tid}" not in [h.name for h in git.Repo(git_project).heads]
    assert not (git_project / ".octopoid/runtime/worktrees" / f"TASK-{tid}").exists()


def test_what_is_planted_in_the_journal_folder_is_ignored_or_dropped(git_project: Path) -> None:
    """Names octopoid never writes are left alone; a journal of a task that is not in done
    is dropped; an unreadable journal of a done task finishes nothing and is removed."""
    from orchestrator import review

    tid = provisional_with_commit(git_project)
    review.accept(tid)
    folder = finishing.journal_dir()
    (folder / "TASK-..%2fetc.json").write_text('{"steps": ["branch"]}')
    (folder / "notes.txt").write_text("not a journal")
    (folder / f"TASK-{tid}.json").write_text("{not json")  # done: nothing readable to do
    other = q.create_task("waiting").id
    (folder / f"TASK-{other}.json").write_text('{"steps": ["branch"]}')  # never reached done
    assert finishing.finish_interrupted() == [f"TASK-{tid}: finished what its accept left ()"]
    assert sorted(p.name for p in folder.iterdir()) == ["TASK-..%2fetc.json", "notes.txt"]
    assert q.get_task(other).state is TaskState.INCOMING

"""An accept is a journal of the store: killed with SIGKILL at any point it loses nothing
and merges once. What is past its merge is finished by whoever comes next (the next
accept, a scheduler's sweep, `octopoid doctor --repair`); a merge not recorded waits for
the next accept, which asks git whether it landed."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import git
import pytest

from orchestrator.daemon import scheduler
from orchestrator.memory.store import MemoryStore
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import finishing
from orchestrator.review import verdicts as review

from .support import (
    child_env,
    cli_output,
    octopoid_output,
    provisional_with_commit,
    remembered,
    write_agents,
)
from .support.journals import KILLED_ACCEPT, merges_of

LEARNED = "the release script needs GNU tar"


def killed_accept(root: Path, task_id: str, point: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_ACCEPT, task_id, point], cwd=root, env=child_env(root)
    )
    assert done.returncode == -signal.SIGKILL


def finish_by(who: str, task_id: str) -> str:
    """The next accept, a scheduler's housekeeping, or `octopoid doctor --repair` (through
    click in this process: what is left of the journal, not a process's start, is proved;
    the killed accept is a process of its own)."""
    if who == "scheduler":
        sched = scheduler.Scheduler()
        sched.initialize()
        try:
            sched.loop_once()
        finally:
            sched.shutdown(grace=0)
        return ""
    args = ["accept", task_id] if who == "accept" else ["doctor", "--repair"]
    return cli_output(*args)


UNMERGED = ["merge", "merged"]  # killed before its merge was recorded: only an accept merges
# every step an accept takes after its merge (closing a pull request is a close's)
AFTER_MERGE = [s for s in finishing.STEPS if s not in (finishing.MERGE, finishing.PULL_REQUEST)]


@pytest.mark.parametrize("who", ["accept", "scheduler", "doctor"])
@pytest.mark.parametrize("point", [*UNMERGED, *AFTER_MERGE])
def test_an_accept_killed_at_any_point_is_finished_once_and_loses_no_learning(
    git_project: Path, point: str, who: str
) -> None:
    write_agents(git_project)
    tid = provisional_with_commit(git_project)
    working = remembered(tid, LEARNED)
    killed_accept(git_project, tid, point)
    in_review = point in (*UNMERGED, finishing.MOVE)
    assert q.get_task(tid).state is (TaskState.PROVISIONAL if in_review else TaskState.DONE)
    left = finishing.pending(tid)
    assert left[0] == (finishing.MERGE if point in UNMERGED else point)
    if point in UNMERGED:
        said = finish_by("doctor", tid)  # --repair: the sweep does not merge
        assert f"`octopoid accept TASK-{tid}` finishes it" in said
        assert finishing.pending(tid) == left
    said = finish_by(who, tid)
    if point in UNMERGED and who != "accept":
        assert q.get_task(tid).state is TaskState.PROVISIONAL and finishing.pending(tid) == left
        finish_by("accept", tid)
    elif who != "scheduler":
        assert f"TASK-{tid}" in said
    assert q.get_task(tid).state is TaskState.DONE and not finishing.pending(tid)
    assert merges_of(git_project, tid) == 1
    assert [n["content"] for n in MemoryStore().search_notes("GNU tar")] == [LEARNED]
    assert not working.notes_file.exists()
    assert f"agent/TASK-{tid}" not in [h.name for h in git.Repo(git_project).heads]
    assert not (git_project / ".octopoid/runtime/worktrees" / f"TASK-{tid}").exists()


def test_a_merged_accept_is_recorded_in_history_and_cannot_be_rejected_or_closed(
    git_project: Path,
) -> None:
    tid = provisional_with_commit(git_project)
    killed_accept(git_project, tid, "move")
    task = q.get_task(tid)
    assert task.headers["MERGED"] and "merged into main as" in task.section("History")
    for refused in (
        lambda: review.reject(tid, "changed my mind"),
        lambda: review.close(tid, "done", "done elsewhere"),
    ):
        with pytest.raises(q.IllegalTransition, match="accept"):
            refused()
    assert q.get_task(tid).state is TaskState.PROVISIONAL and finishing.pending(tid)


def test_finishing_files_from_before_become_journals_of_the_store(git_project: Path) -> None:
    """An older octopoid's ``runtime/finishing/`` files: a done task's is finished from the
    store's journal; one whose task never reached done is dropped; names octopoid never
    wrote are left alone."""
    tid = provisional_with_commit(git_project)
    review.accept(tid)
    folder = git_project / ".octopoid/runtime/finishing"
    folder.mkdir()
    (folder / f"TASK-{tid}.json").write_text('{"steps": ["branch"], "by": "alice"}')
    other = q.create_task("waiting").id
    (folder / f"TASK-{other}.json").write_text('{"steps": ["branch"]}')
    (folder / "notes.txt").write_text("not a journal")
    said = octopoid_output(git_project, "doctor", "--repair")  # a process: it reads them at start
    assert f"repaired TASK-{tid}: finished what its accept left (branch)" in said
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    assert q.get_task(other).state is TaskState.INCOMING and not finishing.pending(other)

"""Journaled work (a breakdown's split, an accept) killed with SIGKILL half-way, and what it
must leave behind: every step done once, nothing lost."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import git

from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from . import child_env

S = TaskState


def burned_out(title: str = "a task too big for one attempt") -> tuple[str, str]:
    """A task in breakdown/ with notes saying why, and a task that waits for it."""
    tid = q.create_task(title, priority="P0").id
    q.save_task_notes(tid, "impl", "BURNED-OUT-CLUE: it touches three modules at once", 0, 40)
    q.recycle_to_breakdown(q.claim_task(None, "impl"), "burned out twice")
    dependant = q.create_task("after the big one", blocked_by=[tid]).id
    return tid, dependant


# A split that kills itself with SIGKILL once two of its three subtasks exist (the second
# made, not yet marked done in its journal).
KILLED_SPLIT = """
import os, signal, sys
from orchestrator.queue import machine as queue_utils
from orchestrator.roles import breakdown
create, made = queue_utils.create_task, []
def create_then_die(*args, **kwargs):
    made.append(create(*args, **kwargs))
    if len(made) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return made[-1]
queue_utils.create_task = create_then_die
after = {1: [], 2: [1], 3: [2]}
parts = [breakdown.Subtask(f"part {n}", criteria=["done"], depends_on=after[n]) for n in after]
breakdown.split(queue_utils.get_task(sys.argv[1]), parts)
"""


def killed_split(root: Path, task_id: str) -> None:
    """A breakdown attempt's split of the claimed ``task_id``, SIGKILLed half-way."""
    argv = [sys.executable, "-c", KILLED_SPLIT, task_id]
    assert subprocess.run(argv, cwd=root, env=child_env(root)).returncode == -signal.SIGKILL


def split_once(task_id: str, dependants: list[str]) -> None:
    """The original is done, split into exactly its three subtasks (each made once, in
    order), and every dependant waits for the last of them."""
    made = [
        t
        for state in (S.INCOMING, S.CLAIMED, S.DONE)
        for t in q.list_tasks(state)
        if t.headers.get("CREATED_BY") == f"breakdown of TASK-{task_id}"
    ]
    first, second, last = sorted(made, key=lambda t: int(t.id))
    assert [t.title for t in (first, second, last)] == ["part 1", "part 2", "part 3"]
    assert second.blocked_by == [first.id] and last.blocked_by == [second.id]
    original = q.get_task(task_id)
    assert original.state is S.DONE
    assert original.headers["SPLIT_INTO"] == ", ".join(t.label for t in (first, second, last))
    for dependant in dependants:
        assert (
            last.id in q.get_task(dependant).blocked_by
            and task_id not in q.get_task(dependant).blocked_by
        )
        assert f"waits for {last.label} instead of TASK-{task_id}" in q.get_task(dependant).section(
            "History"
        )
    assert not q.get_store().journals.pending()


# An accept that kills itself with SIGKILL at a point: before its merge, after the merge
# landed (not recorded yet), before its move, or before a step that follows the move.
KILLED_ACCEPT = """
import os, signal, sys
from orchestrator.review import finishing, verdicts as review
from orchestrator.git import merges
from orchestrator.queue import machine as queue_utils
task_id, point = sys.argv[1], sys.argv[2]
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
merge = merges.merge_task_branch
if point == "merge":
    merges.merge_task_branch = die
elif point == "merged":
    merges.merge_task_branch = lambda *a, **k: die(merge(*a, **k))
elif point == "move":
    queue_utils.accept_completion = die
else:
    finishing.STEP_FUNCTIONS[point] = die
review.accept(task_id, "alice")
"""


def merges_of(root: Path, task_id: str) -> int:
    """How many times the task's branch was merged into main (exactly once, if all is well)."""
    subjects = git.Repo(root).git.log("--format=%s", "main").splitlines()
    return sum(1 for s in subjects if s.startswith(f"Merge TASK-{task_id}: "))

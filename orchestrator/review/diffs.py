"""`octopoid diff`: a task's changes, or a plain answer to why it has none.

A task has a branch from its first attempt until accept merges and removes it, so "no
branch" means different things by state; git alone cannot tell them apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from .. import config
from ..git import branches, core
from ..git import diffs as git_diffs
from ..model import defaults
from ..model.exceptions import GitError, NothingToShow
from ..model.tasks import Task, TaskId, TaskState
from ..queue.store import get_task


@dataclass(frozen=True)
class FileStat:
    """One file of a task's diff, counted as ``git diff --numstat`` counts it."""

    path: str  #: as the branch names it now; never quoted, whatever its characters
    added: int
    removed: int
    binary: bool = False  #: git counts no lines in it (added and removed are 0)
    old_path: str | None = None  #: a renamed file's name on the base
    size: int | None = None  #: a binary file's bytes on the branch (None: removed there)

    @property
    def too_big_to_diff(self) -> bool:
        """Counted as binary because it is over ``DIFF_TEXT_BYTES``, text or not: git
        never loads it, so its lines are not known (the page gives its size instead)."""
        return self.binary and (self.size or 0) > defaults.DIFF_TEXT_BYTES


def write_diff(task_id: str, out: BinaryIO) -> None:
    """Write what the task's branch changes against its base to ``out`` as git prints it,
    a chunk at a time (a diff of any size costs no more memory than a small one);
    ``NothingToShow`` if it has no branch. One ``git diff`` process (hooks off), no
    GitPython: importing it costs more than the diff of a task's branch does."""
    task = with_branch(task_id)
    root, branch = config.find_project_root(), branches.branch_for(task.id)
    git_diffs.copy_diff(root, task.branch, branch, out)


def stat_summary(task_id: str) -> dict[str, Any]:
    """`diff --stat --json`'s answer (and the MCP tool's): each file the task's branch
    changes against its base with its counts, in git's order, and the totals;
    ``NothingToShow`` if it has no branch."""
    task = with_branch(TaskId(task_id))
    files = file_stats(config.find_project_root(), task.branch, branches.branch_for(task.id))
    totals = {
        "files": len(files),
        "added": sum(f.added for f in files),
        "removed": sum(f.removed for f in files),
    }
    return {"id": task.label, "files": [asdict(f) for f in files], "totals": totals}


def file_stats(root: Path, base: str, head: str, timeout: float | None = None) -> list[FileStat]:
    """Each file ``git diff base...head`` changes, with its line counts: the names as they
    are (``-z`` never quotes them), renames with both names, binary files marked.
    ``GitError`` when git takes over ``timeout`` seconds to count them."""
    done = core.git_command(
        root, *git_diffs.DIFF_ARGS, "--numstat", "-z", f"{base}...{head}", "--", timeout=timeout
    )
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()
        raise GitError(f"git diff --numstat {base}...{head}: {why[0] if why else done.returncode}")
    return _with_sizes(root, head, _parse_numstat(done.stdout))


@dataclass(frozen=True)
class DiffRead:
    """A diff read within a budget, as the task page draws it."""

    text: str  #: at most the budget's bytes of ``git diff``, decoded
    cut: bool  #: git had more than the budget
    stats: list[FileStat]  #: every file of the whole diff, counted
    left_out: list[FileStat]  #: files too big to draw: named, never read


def read_within(
    root: Path, base: str, head: str, max_bytes: int, max_file_lines: int, max_left_out: int
) -> DiffRead:
    """``git diff base...head`` within the budgets: its files counted first (numstat), the
    ones over ``max_file_lines`` or too big to diff left out by name (at most
    ``max_left_out``), the rest read until ``max_bytes`` (then git is stopped)."""
    stats = file_stats(root, base, head, timeout=defaults.DIFF_STAT_SECONDS)
    big = [f for f in stats if f.added + f.removed > max_file_lines or f.too_big_to_diff]
    big = big[:max_left_out]
    data, more = git_diffs.read_diff(root, base, head, max_bytes, [f.path for f in big])
    return DiffRead(data.decode("utf-8", errors="replace"), more, stats, big)


def _with_sizes(root: Path, head: str, stats: list[FileStat]) -> list[FileStat]:
    """Each binary file with its size on ``head``, asked of one ``git cat-file`` (no blob
    is read)."""
    asked = [s for s in stats if s.binary and "\n" not in s.path]
    if not asked:
        return stats
    lines = "".join(f"{head}:{s.path}\n" for s in asked)
    done = core.git_command(root, "cat-file", "--batch-check=%(objectsize)", stdin=lines)
    answers = done.stdout.splitlines() if done.returncode == 0 else []
    sizes = {id(s): int(a) for s, a in zip(asked, answers, strict=False) if a.isdigit()}
    return [replace(s, size=sizes[id(s)]) if id(s) in sizes else s for s in stats]


def _parse_numstat(out: str) -> list[FileStat]:
    """``git diff --numstat -z`` output as ``FileStat``s. Each record is ``ADDED\\tREMOVED\\t``
    then the path and a NUL; a rename leaves the path empty and adds two NUL-ended fields,
    the old name and the new; a binary file counts ``-`` and ``-``."""
    fields, stats = iter(out.split("\0")), []
    for record in fields:
        if not record:
            continue  # what follows the last NUL
        added, removed, path = record.split("\t", 2)
        old_path = None
        if not path:
            old_path, path = next(fields), next(fields)
        binary = added == "-"
        counts = (0, 0) if binary else (int(added), int(removed))
        stats.append(FileStat(path, *counts, binary, old_path))
    return stats


def head_of(task: Task) -> str | None:
    """The commit the task's branch points at (what a reviewer judges), or None. Through
    the git command: `show` prints it and must not pay for importing GitPython (nor the
    review's verdicts and their git machinery)."""
    return branches.branch_head(config.find_project_root(), branches.branch_for(task.id))


def with_branch(task_id: str) -> Task:
    """The task, if its branch exists; otherwise ``NothingToShow`` saying why it does not."""
    task = get_task(task_id)
    if head_of(task) is not None:
        return task
    if task.state is TaskState.DONE:
        raise NothingToShow(f"{task.label} is done; its branch was merged and removed")
    if task.attempts == 0 or task.state is TaskState.CLAIMED:
        raise NothingToShow(
            f"{task.label} has no branch yet (it is in {task.state.value}); "
            "its first attempt makes one"
        )
    raise NothingToShow(
        f"{task.label} has no branch {branches.branch_for(task.id)} (deleted by hand?)"
    )

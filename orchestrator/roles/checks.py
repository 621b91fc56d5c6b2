"""Checks before review: the project's commands run on an attempt's work, and a merge pre-check.

An attempt that made commits reaches provisional only if every configured check passes on
its work (in a box: ``sandbox.Workspace.check_box``) and its branch still merges cleanly
into its base. Otherwise the attempt counts, the task goes back to incoming, and its retry
notes get a ``## Checks`` section with each failing command, its exit code and the tail of
its output (or the conflicting files, or the paths a merge would refuse to write), so the
next attempt starts from exactly what failed.

Checks come from config.yaml ``checks.commands`` plus the task's own ``CHECKS`` header (a
JSON list, set by ``enqueue --check``). Each runs with ``sh -c`` in its own process group,
with a timeout, its output held in a bounded tail buffer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import config
from ..base.fsutil import TailBuffer
from ..base.lazy import lazy_import
from ..git import branches, core, merge_guard, merges, task_tips
from ..model.exceptions import GitError, InvalidTask, NothingToShow
from ..model.tasks import Task, TaskId
from ..queue.store import get_store

if TYPE_CHECKING:
    from ..box.box import Box

# What runs a command in a box: `octopoid checks` on a project with no check runs only git.
process = lazy_import("orchestrator.backends.process")
redaction = lazy_import("orchestrator.base.redaction")
sandbox = lazy_import("orchestrator.box")


@dataclass
class CheckResult:
    command: str
    exit_code: int | None  # None: it timed out, or could not start
    seconds: float
    output: str  # the tail, redacted
    problem: str = ""  # why it failed, when the exit code does not say

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.problem

    def line(self) -> str:
        """One line for History and `octopoid show`."""
        if self.passed:
            return f"check `{self.command}` passed ({self.seconds:.1f}s)"
        why = self.problem or f"exit status {self.exit_code}"
        return f"check `{self.command}` failed: {why} ({self.seconds:.1f}s)"


@dataclass
class Verdict:
    """What the checks and the merge pre-check said about one attempt's work."""

    results: list[CheckResult]
    conflicts: list[str] | None  # None: the branch merges cleanly
    refused: list[str] = field(default_factory=list)  # paths accept would refuse to write
    unreached: list[str] = field(default_factory=list)  # what their network refused, a line each

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    @property
    def passed(self) -> bool:
        return not self.failed and self.conflicts is None and not self.refused

    @property
    def refusal(self) -> str:
        """Why accept refuses the branch, in one line ("" when it does not)."""
        return merge_guard.reason(self.refused) if self.refused else ""

    def summary(self) -> str:
        """One line for the task's History."""
        parts = [f"checks: {len(self.results) - len(self.failed)} passed"]
        if self.failed:
            each = ", ".join(f"{r.command} after {r.seconds:.1f}s" for r in self.failed)
            parts.append(f"{len(self.failed)} failed ({each})")
        if self.conflicts is not None:
            parts.append(f"conflicts with its base in {', '.join(self.conflicts) or '?'}")
        if self.refused:
            parts.append(f"refused: {self.refusal}")
        return ", ".join(parts)


def verify(
    task: Task, box: Box, cfg: dict, on_tick: Callable[[], None], tip: str | None = None
) -> Verdict:
    """Run the task's checks in ``box`` (the attempt's work), then the merge pre-check
    (of ``tip``, the attempt's, when given)."""
    limit = cfg["notes"]["stdout_limit"]
    timeout = cfg["checks"]["timeout_seconds"]
    results = [
        _run_one(command, box, limit, timeout, on_tick) for command in commands_for(task, cfg)
    ]
    return Verdict(results, *merge_precheck(task, tip), box.refusals())


def budget_seconds(task: Task, cfg: dict) -> int:
    """The longest the checks of ``task`` may take (for the runner's hard deadline)."""
    return len(commands_for(task, cfg)) * cfg["checks"]["timeout_seconds"]


def commands_for(task: Task, cfg: dict) -> list[str]:
    """The project's checks, then the task's own (``CHECKS`` header, a JSON list)."""
    raw = task.headers.get("CHECKS")
    try:
        own = json.loads(raw) if raw else []
    except ValueError:
        own = None
    if not isinstance(own, list) or not all(isinstance(c, str) and c.strip() for c in own):
        raise InvalidTask(f"{task.label}: CHECKS must be a JSON list of commands")
    return [*cfg["checks"]["commands"], *own]


def _run_one(
    command: str, box: Box, limit: int, timeout: float, on_tick: Callable[[], None]
) -> CheckResult:
    output = TailBuffer(limit, redact=redaction.Redactor(box.env, redaction.every_agent_env()))
    started = time.monotonic()
    argv = box.wrap(["sh", "-c", command])
    done = process.run_process(argv, box.cwd, box.env, output, timeout, on_tick=on_tick)
    output.close()
    seconds = time.monotonic() - started
    problem = done.start_error or (f"timed out after {timeout:g}s" if done.timed_out else "")
    return CheckResult(command, done.exit_code, seconds, output.text(), problem)


def merge_precheck(task: Task, tip: str | None = None) -> tuple[list[str] | None, list[str]]:
    """Would the branch merge now: the files that would conflict (None: clean) merging
    ``tip`` (the attempt's; else the tip its attempt recorded, where this repository has it;
    else its local branch) onto the base accept merges onto (with ``git.remote`` the remote's,
    fetched), and the paths accept would refuse to write (``merge_guard``: what the
    person's checkout holds untracked or ignored, octopoid's runtime).

    ``git merge-tree --write-tree`` computes the merge without touching any worktree or
    ref. git runs as plain processes: without a remote, GitPython is never imported.
    """
    root = config.find_project_root()
    mine = task_tips.recorded(task)
    if tip is None and mine is not None:
        held = core.git_command(root, "cat-file", "-e", f"{mine}^{{commit}}").returncode == 0
        tip = mine if held else None
    base = task_tips.accept_base(None, task.branch)
    checkouts = merge_guard.Checkouts(root)
    branch = tip or f"refs/heads/{branches.branch_for(task.id)}"
    conflicts = merges.merge_conflicts(root, task.id, base, tip)
    return conflicts, checkouts.refused(core.full_ref(task.branch), branch)


def recheck(task_id: TaskId) -> Verdict:
    """`octopoid checks`: the task's checks and merge pre-check on its branch now, by
    hand, as an attempt's run (``outcome``): the checks in a box of their own
    (``sandbox.checks_box``: a clone, bwrap), and with no check to run no box at all."""
    task = get_store().get(task_id)
    cfg = config.load_config()
    if not commands_for(task, cfg):  # nothing runs the branch's code: no clone, no box
        return _precheck_alone(task)
    with sandbox.checks_box(task) as box:
        return verify(task, box, cfg, lambda: None)


def notes_text(verdict: Verdict) -> str:
    """The body of a ``## Checks — attempt N`` notes section (fenced by the notes writer)."""
    parts = []
    conflicts = verdict.conflicts
    for result in verdict.failed:
        why = result.problem or f"exit status {result.exit_code} after {result.seconds:.1f}s"
        parts.append(f"$ {result.command}\n[{why}]\n{result.output.rstrip()}\n")
    if conflicts is not None:
        files = "\n".join(f"  {name}" for name in conflicts) or "  (git named no file)"
        parts.append(
            "The branch no longer merges cleanly into its base. Conflicting files:\n"
            f"{files}\nRebase onto the base branch (git rebase) and resolve them.\n"
        )
    if verdict.refused:
        paths = "\n".join(f"  {name}" for name in verdict.refused)
        parts.append(
            "The branch writes paths that the person's checkout holds untracked or ignored "
            "(their files, or octopoid's runtime), which a merge would delete or replace; "
            f"accept refuses it:\n{paths}\nTake these paths out of the branch (git rm "
            "--cached, then commit): they are not the task's to change.\n"
        )
    return "\n".join(parts)


def _precheck_alone(task: Task) -> Verdict:
    """The merge pre-check with no check to run; a task without a branch is said so (git's
    merge-tree would only say it cannot merge it). git is asked why only when it failed."""
    try:
        return Verdict([], *merge_precheck(task))
    except GitError:
        branch = branches.branch_for(task.id)
        if branches.branch_head(config.find_project_root(), branch) is not None:
            raise
    raise NothingToShow(f"{task.label} has no branch {branch} (no attempt yet?)")

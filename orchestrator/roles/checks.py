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
from ..backends.process import run_process
from ..base.fsutil import TailBuffer
from ..base.redaction import Redactor, every_agent_env
from ..box.box import Box
from ..git import branches, core, merge_guard, merges, task_tips
from ..model.exceptions import InvalidTask
from ..model.tasks import Task

if TYPE_CHECKING:
    from git import Repo


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

    def summary(self) -> str:
        """One line for the task's History."""
        parts = [f"checks: {len(self.results) - len(self.failed)} passed"]
        if self.failed:
            each = ", ".join(f"{r.command} after {r.seconds:.1f}s" for r in self.failed)
            parts.append(f"{len(self.failed)} failed ({each})")
        if self.conflicts is not None:
            parts.append(f"conflicts with its base in {', '.join(self.conflicts) or '?'}")
        if self.refused:
            parts.append(f"refused: {merge_guard.reason(self.refused)}")
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
    return [*cfg["checks"]["commands"], *task_checks(task)]


def task_checks(task: Task) -> list[str]:
    raw = task.headers.get("CHECKS")
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        raise InvalidTask(f"{task.label}: CHECKS must be a JSON list of commands") from None
    if not isinstance(value, list) or not all(isinstance(c, str) and c.strip() for c in value):
        raise InvalidTask(f"{task.label}: CHECKS must be a JSON list of commands")
    return value


def _run_one(
    command: str, box: Box, limit: int, timeout: float, on_tick: Callable[[], None]
) -> CheckResult:
    output = TailBuffer(limit, redact=Redactor(box.env, every_agent_env()))
    started = time.monotonic()
    argv = box.wrap(["sh", "-c", command])
    done = run_process(argv, box.cwd, box.env, output, timeout, on_tick=on_tick)
    output.close()
    seconds = time.monotonic() - started
    problem = done.start_error or (f"timed out after {timeout:g}s" if done.timed_out else "")
    return CheckResult(command, done.exit_code, seconds, output.text(), problem)


def judged_tip(repo: Repo, task: Task, tip: str | None = None) -> str | None:
    """The tip a pre-check judges: ``tip`` (the attempt's), else the tip its attempt
    recorded when this machine has it; None: its local branch."""
    mine = task_tips.recorded(task)
    if tip is None and mine is not None and branches.has_commit(repo, mine):
        return mine
    return tip


def merge_conflicts(task: Task, tip: str | None = None) -> list[str] | None:
    """Files that would conflict if accept merged the task now (None: clean): its
    ``judged_tip`` onto the base accept merges onto (with ``git.remote`` the remote's,
    fetched).

    ``git merge-tree --write-tree`` computes the merge without touching any worktree or ref.
    """
    repo = core.open_repo()
    base = task_tips.accept_base(repo, task.branch)
    return merges.merge_conflicts(repo, task.id, base, judged_tip(repo, task, tip))


def merge_precheck(task: Task, tip: str | None = None) -> tuple[list[str] | None, list[str]]:
    """Would the branch merge into its base now: the files that would conflict (None:
    clean), and the paths accept would refuse to write (``merge_guard``: what the person's
    checkout holds untracked or ignored, octopoid's runtime), both of its ``judged_tip``."""
    tip = judged_tip(core.open_repo(), task, tip)
    checkouts = merge_guard.Checkouts(config.find_project_root())
    branch = tip or f"refs/heads/{branches.branch_for(task.id)}"
    return merge_conflicts(task, tip), checkouts.refused(core.full_ref(task.branch), branch)


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

"""Whether a task's branch would merge now, read-only, for the faces (status, list, the
task page): conflicts with its base, and what accept's merge guard refuses.

The judgments for `status` and `list` are cached in the store's record ``merge-checks``
(shared on PostgreSQL), so git runs only for a pair of tips no machine judged before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import config
from ..base.lazy import lazy_import
from ..git import branches, core, history, merge_guard, merges
from ..model.exceptions import OctopoidError
from ..model.tasks import Task, TaskState
from ..queue import adopt
from ..queue.machine import get_store

# Only the task page's branch facts scrub an agent's commit messages; `list` needs none.
redaction = lazy_import("orchestrator.base.redaction")
S = TaskState
COMMITS_SHOWN = 50  # of a branch on its task's page, newest first


@dataclass
class MergeCheck:
    """Why a task waiting for review would not merge now."""

    conflicts: list[str] | None  # the files that conflict with its base (None: none)
    refused: list[str]  # paths accept refuses to write (merge_guard)

    def as_json(self, label: str) -> dict[str, Any]:
        return {"id": label, "conflicts": self.conflicts, "refused": self.refused}


#: The store's record of merge checks: per task in review, its last few judgments.
MERGE_CHECKS = "merge-checks"
JUDGED_KEPT = 8  # per task: a few bases' tips (machines fetch at their own pace), checkouts


def unmergeable(tasks: list[Task]) -> dict[str, MergeCheck]:
    """Tasks (waiting for review) whose branch no longer merges cleanly into its base, or
    that accept would refuse (``merge_guard``): label -> why. git runs only for what no
    machine judged before (the store's record ``merge-checks``, shared on PostgreSQL):
    conflicts for a pair of tips (a fact about two commits, whoever asks), a refusal for a
    pair of tips and what this checkout holds untracked (its fingerprint: each machine's
    own), so `status` stays quick as reviews wait. Empty when git cannot tell (no
    repository): `octopoid checks TASK-N` says why."""
    if not tasks:
        return {}
    root = config.find_project_root()
    try:
        tips = branches.branch_tips(root)
    except OctopoidError:
        return {}
    records = adopt.store().records
    stored = records.read(MERGE_CHECKS)
    known = {label: dict(pairs) for label, pairs in (stored.value if stored else {}).items()}
    fresh: dict[str, dict[str, Any]] = {}
    checkouts = merge_guard.Checkouts(root)
    found = {}
    for task in tasks:
        branch, base = branches.branch_for(task.id), task.branch
        if branch not in tips or base not in tips:
            continue
        key, mine = f"{tips[base]}:{tips[branch]}", known.get(task.label, {})
        guard = f"refused:{key}:{checkouts.fingerprint(base)}"
        try:
            if key not in mine:
                fresh.setdefault(task.label, {})[key] = merges.merge_conflicts(root, task.id, base)
            if guard not in mine:
                refused = checkouts.refused(f"refs/heads/{base}", f"refs/heads/{branch}")
                fresh.setdefault(task.label, {})[guard] = refused
        except OctopoidError:
            continue
        judged = {**mine, **fresh.get(task.label, {})}
        if judged[key] is not None or judged[guard]:
            found[task.label] = MergeCheck(judged[key], judged[guard] or [])
    if fresh:
        waiting = {t.label for t in tasks}
        records.update(MERGE_CHECKS, lambda value: _kept(value or {}, fresh, waiting))
    return found


def _kept(value: dict[str, Any], fresh: dict[str, dict[str, Any]], waiting: set[str]) -> dict:
    """The cache with ``fresh`` judgments added (newest last, ``JUDGED_KEPT`` a task), for
    tasks still in review only."""
    store, kept = get_store(), {}
    for label, pairs in value.items():
        if label in waiting or store.locate(label.removeprefix("TASK-")) is S.PROVISIONAL:
            kept[label] = pairs
    for label, judged in fresh.items():
        pairs = [p for p in kept.get(label, []) if p[0] not in judged]
        kept[label] = [*pairs, *map(list, judged.items())][-JUDGED_KEPT:]
    return kept


@dataclass
class BranchFacts:
    """What the task page says of a task's branch (``exists`` False: none, or ``problem``)."""

    exists: bool
    ahead: int = 0
    behind: int = 0
    conflicts: list[str] | None = None
    problem: str = ""
    commits: list[str] = field(default_factory=list)  # "abc1234 subject", newest first
    head: str = ""  # the branch's tip: every review from the page names it
    base_tip: str = ""  # its base's, which the diff is drawn against
    refused: list[str] = field(default_factory=list)  # paths accept refuses (merge_guard)

    @property
    def refusal(self) -> str:
        """Why accept refuses the branch, in one line ("" when it does not)."""
        return refusal(self.refused)


def refusal(paths: list[str]) -> str:
    """Why accept refuses a branch that would write ``paths``, in one line ("" for none):
    the faces' words for it, which they may not ask git for."""
    return merge_guard.reason(paths) if paths else ""


def branch_facts(task: Task) -> BranchFacts:
    """How far the branch is ahead of and behind its base, and whether it would merge."""
    try:
        repo = core.open_repo()
        branch = branches.branch_for(task.id)
        if not branches.branch_exists(repo, branch):
            return BranchFacts(False)
        ahead = history.commits_ahead(repo, task.id, task.branch)
        log, behind = history.branch_history(repo, task.id, task.branch, COMMITS_SHOWN)
        conflicts = merges.merge_conflicts(config.find_project_root(), task.id, task.branch)
        commits = redaction.scrub("\n".join(log)).splitlines()  # an agent's words: secrets, escapes
        head = branches.branch_tip(repo, branch)
        base_tip = branches.branch_tip(repo, task.branch)
        refused = merge_guard.Checkouts(config.find_project_root()).refused(
            core.full_ref(task.branch), f"refs/heads/{branch}"
        )
        return BranchFacts(True, ahead, behind, conflicts, "", commits, head, base_tip, refused)
    except Exception as exc:  # a git failure must not take the page down: say it instead
        return BranchFacts(False, problem=str(exc).splitlines()[0] if str(exc) else repr(exc))

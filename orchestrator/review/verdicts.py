"""The human side of the loop: accept (merge, done, clean up) and reject.

These workflows span git and the queue, so they live here and not in ``queue_utils``.

Its size: accept, reject, close, retry and approve share the task's hold, the journal and
their refusals.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeGuard

from .. import config
from ..base.lazy import lazy_import
from ..git import branches as git_branches
from ..git import core, history, merges, task_tips
from ..git import remote as git_remote
from ..model import defaults
from ..model.exceptions import (
    BranchMoved,
    IllegalTransition,
    InvalidInput,
    MergeRefused,
    OctopoidError,
    TaskBusy,
)
from ..model.tasks import (
    TIP_HEADER,
    Task,
    TaskId,
    TaskState,
    refuse_planning,
    task_label,
)
from ..queue import machine as queue_utils
from ..queue.line_comments import LineComment
from ..queue.store.records import Journal, Step
from . import finishing
from .diffs import head_of
from .worktrees import list_worktrees

if TYPE_CHECKING:
    from git import Repo

# Only `approve` and accept run them: `worktrees` and the others do not pay for them.
breakdown = lazy_import("orchestrator.roles.breakdown")
lifecycle = lazy_import("orchestrator.memory.lifecycle")
log = logging.getLogger("octopoid.review")
MAX_CODE_CHARS = 500  # of the commented lines quoted in the notes (a minified file is one line)
#: what a forge's poll says while it holds a task (forge/pulls.py), which ``held`` waits for
FORGE_HOLD = "judged by the forge"


@dataclass
class Accepted:
    task: Task
    strategy: str
    merged_sha: str | None
    cleanup_error: str | None = None
    promoted: int = 0
    distilled: dict = field(default_factory=dict)
    learnings: list[dict[str, Any]] = field(default_factory=list)  # as the reviewer left them


def accepted_row(done: Accepted) -> dict[str, Any]:
    """An accept as `accept --json` (and the MCP server) gives it. ``strategy`` is
    merge.strategy as applied (``no-change``: nothing to merge, ``finished``: an earlier
    accept had merged); ``merged``: the commit on the base; ``pull_request``: the link of
    the pull request it waits on (``pull-request``)."""
    return {
        "id": done.task.label,
        "state": done.task.state.value if done.task.state else None,
        "strategy": done.strategy,
        "merged": done.merged_sha,
        "pull_request": done.task.headers.get("PR_URL"),
        "cleanup_error": done.cleanup_error,
        "learnings": done.learnings,
        "promoted": done.promoted,
    }


def check_expected(task: Task, expect: str | None, seen_attempt: int | None = None) -> None:
    """Refuse a review of a head that is not the branch's now (``BranchMoved``): the reviewer
    judged other work. ``expect`` is a full or abbreviated (7+) commit id."""
    if expect is None:  # a page that saw no branch still saw an attempt
        if seen_attempt is not None and task.attempts > seen_attempt:
            raise BranchMoved(
                f"the task moved since you loaded this page: attempt {task.attempts} arrived; "
                "reload it to see what you would judge"
            )
        return
    expect = expect.strip().lower()
    if len(expect) < 7 or any(c not in "0123456789abcdef" for c in expect):
        raise InvalidInput(f"--expect takes a commit id of 7 to 40 hex digits, not {expect!r}")
    head = head_of(task) or ""
    if head.startswith(expect):
        return
    if seen_attempt is not None and task.attempts > seen_attempt:
        raise BranchMoved(
            f"the branch moved since you loaded this page: attempt {task.attempts} arrived; "
            "reload it to see what you would accept"
        )
    raise BranchMoved(
        f"{task.label}'s branch moved: {git_branches.branch_for(task.id)} is at "
        f"{head[:12] or 'nothing'}, not {expect[:12]}; look again (`octopoid show {task.label}`)"
    )


def accept(
    task_id: str,
    accepted_by: str = "human",
    expect: str | None = None,
    seen_attempt: int | None = None,
    forget: Collection[int] = (),
    edits: Mapping[int, str] | None = None,
    keep: Collection[int] = (),
) -> Accepted:
    """Merge the task's branch into its base, move it to done, then finish it: one journal
    (``finishing``), written before the merge.

    The learnings its submitted attempt recorded are kept in project memory, but for those
    the reviewer strikes (``forget``, by the numbers ``show`` gives) and as they rewrite
    them (``edits``); one that reads as an instruction reaches prompts only if they keep
    it (``keep``). The decisions are written first, so a refused merge keeps them.

    The task is held for the whole workflow (``QueueStore.hold``): a reject, requeue or
    second accept meanwhile fails at once saying the task is being accepted. A refused
    merge (conflict, dirty checkout) changes nothing and drops the journal. One killed
    is finished by whoever comes next (``_Merging``, ``finishing``); a failed step after
    the move is reported, not fatal.
    """
    task_id = TaskId(task_id)
    with held(task_id, "accepted"), finishing.taken(task_id) as journal:
        task = queue_utils.get_task(task_id)
        if _decided(journal, task):
            return _finished(journal, journal.data.get("strategy", "finished"))
        if task.state is not TaskState.PROVISIONAL:
            raise IllegalTransition(f"{task.label} is in {task.state.value}, not provisional")
        check_expected(task, expect, seen_attempt)
        _refuse_unfenced(task)
        learnings = _reviewed_learnings(task, forget, edits or {}, accepted_by, keep)
        strategy = config.load_config()["merge"]["strategy"]
        if "NO_CHANGE" in task.headers and not _holds_work(task):  # nothing to merge: why said
            strategy = "no-change"
        elif journal is None and (strategy == "pull-request" or "PR_NUMBER" in task.headers):
            from ..forge import pulls  # its client libraries load only with a forge

            opened = pulls.open_for(task, accepted_by)
            return Accepted(opened, "pull-request", None, learnings=learnings)
        if journal is not None:  # a dead accept's: merged (if at all) as it began
            strategy = journal.data.get("strategy", strategy)
        merging = _Merging(task, strategy, accepted_by)
        journal = journal or merging.begin()
        try:
            done = _finished(journal, strategy, merging.merge)
        except MergeRefused:  # nothing was merged: the task stays as it was
            finishing.abandon(journal)
            raise
        except IllegalTransition:
            if finishing.MERGE not in journal.steps:  # the move refused: nothing to finish
                finishing.abandon(journal)
            raise
        done.learnings = learnings
        return done


def _decided(journal: Journal | None, task: Task) -> TypeGuard[Journal]:
    """Whether an open journal is one to finish as it is: a close's (the person decided),
    or an accept's past its move."""
    return journal is not None and (journal.kind == finishing.CLOSE or task.state is TaskState.DONE)


def _refuse_unfenced(task: Task) -> None:
    """Accept takes only a runner's fenced submit (and never a proposed split)."""
    if "PROPOSED_SPLIT" in task.headers:
        raise IllegalTransition(
            f"{task.label} holds a proposed breakdown, not work to merge: "
            f"`octopoid approve {task.label}` creates its subtasks, `octopoid reject` "
            "sends it back to breakdown"
        )
    unfenced = queue_utils.unfenced_submit(task)
    if unfenced and "MERGED" not in task.headers:
        raise IllegalTransition(
            f"{task.label} was not submitted by a runner: {unfenced}. Accept takes only "
            f"work an attempt brought back; `octopoid reject {task.label} --reason ...` "
            "sends it back for one"
        )


@dataclass
class _Merging:
    """An accept's merge: its journal begun (with the base's tip before the merge), and
    the merge step itself. A merge that landed is recorded on the task (``MERGED``), so an
    accept killed after it is finished by whoever comes next (the next accept, any
    scheduler's sweep, `octopoid doctor --repair`) without merging again, and cannot be
    rejected; one killed during the merge is finished by the next accept, which asks git
    whether it landed. With ``git.remote`` the base is the remote's: the tip the
    attempt submitted is taken (fetched from the remote if need be:
    ``task_tips.take_for_accept``), merged onto the remote's base and pushed
    (``merges.merge_onto_remote``). The remote is fetched once per accept."""

    task: Task
    strategy: str
    by: str
    _base: tuple[Repo, str | None, str] | None = None

    def base(self) -> tuple[Repo, str | None, str]:
        if self._base is None:
            repo, remote = core.open_repo(), git_remote.remote_name()
            base = self.task.branch
            if remote is not None:
                task_tips.take_for_accept(repo, remote, self.task)
                base = git_remote.remote_ref(remote, self.task.branch)
            self._base = (repo, remote, base)
        return self._base

    def begin(self) -> Journal:
        """The accept's journal: the merge (unless nothing is merged, or an older
        octopoid's accept merged already), the move, and what follows."""
        steps = [finishing.MOVE, finishing.PROMOTE, finishing.NOTES]
        data: dict[str, Any] = {"by": self.by, "strategy": self.strategy}
        if self.strategy != "none":  # "none" leaves the branch (and worktree) for a pull request
            steps += [finishing.WORKTREE, finishing.BRANCH, finishing.REMOTE_BRANCH]
        if self.strategy not in ("none", "no-change") and "MERGED" not in self.task.headers:
            repo, _, base = self.base()
            data["before"] = self.task.headers.get("MERGING")  # an older octopoid's mark
            if not data["before"]:
                _refuse_empty(repo, self.task, base)
                data["before"] = git_branches.branch_tip(repo, base)
            steps.append(finishing.MERGE)
        return finishing.begin(finishing.ACCEPT, self.task.id, steps, data)

    def merge(self, journal: Journal, step: str) -> None:
        """The journal's merge step, once: if git shows the merge landed since the base's
        tip the journal kept (``before``: an accept killed after its merge), only record it."""
        before = journal.data.get("before")
        repo, remote, base = self.base()
        if before and history.already_merged(repo, self.task.id, base, before):
            merged = git_branches.branch_tip(repo, base)
        else:
            merged = _merge(repo, remote, self.task, self.strategy)
        queue_utils.record_merge(self.task.id, merged, self.by, self.task.branch)


def _reviewed_learnings(
    task: Task, forget: Collection[int], edits: Mapping[int, str], by: str, keep: Collection[int]
) -> list[dict[str, Any]]:
    """The reviewer's strikes, edits and keeps applied; the pending learnings as rows."""
    if forget or edits or keep:
        changed = lifecycle.review_learnings(task, forget, edits, by, keep)
        return lifecycle.learning_rows(changed)
    return lifecycle.learning_rows(lifecycle.pending_learnings(task))


@contextmanager
def held(task_id: str, purpose: str) -> Iterator[None]:
    """The task's hold for a person's workflow (``QueueStore.hold``). A forge's poll that
    holds it (a verdict takes a few requests) is waited for, up to
    ``FORGE_HOLD_WAIT_SECONDS``, rather than sending the person away; any other holder
    (another person's accept) refuses at once."""
    store = queue_utils.get_store()
    deadline = time.monotonic() + defaults.FORGE_HOLD_WAIT_SECONDS
    waiting = False
    while True:
        with ExitStack() as stack:
            try:
                stack.enter_context(store.hold(task_id, purpose))
            except TaskBusy as exc:
                if FORGE_HOLD not in str(exc) or time.monotonic() > deadline:
                    raise
                if not waiting:
                    log.info("%s: waiting for the forge's poll to let it go", task_label(task_id))
                    waiting = True
                time.sleep(0.1)
                continue
            yield
            return


def accept_merged(
    task_id: str, merged_by: str, merged_sha: str, reason: str, head: str = ""
) -> Accepted:
    """A task whose pull request a forge merged: done, and finished as an accept is (its
    learnings promoted, notes and worktree removed), with nothing merged here. Its branch
    goes too when what was merged has all of it: the pull request's merged ``head`` is
    the branch's tip (a squash or a rebase holds its changes, not its commits), or the
    merge commit holds that tip. Otherwise (an attempt that came after the merge)
    ``agent/TASK-<id>`` stays, and History says so."""
    store = queue_utils.get_store()
    with store.hold(task_id, "accepted"), finishing.taken(task_id) as journal:
        task = queue_utils.get_task(task_id)
        if _decided(journal, task):
            return _finished(journal, "finished")
        if task.state is not TaskState.PROVISIONAL:
            raise IllegalTransition(f"{task.label} is in {task.state.value}, not provisional")
        steps = [finishing.MOVE, finishing.PROMOTE, finishing.NOTES, finishing.WORKTREE]
        if merged_sha and "MERGED" not in task.headers:
            queue_utils.record_merge(task.id, merged_sha, merged_by, task.branch)
        if merged_sha and _merge_holds_branch(task, merged_sha, head):
            steps += [finishing.BRANCH, finishing.REMOTE_BRANCH]
        else:
            reason += f"; the merge lacks the tip of agent/{task.label}, which is kept"
        data = {"by": merged_by, "reason": reason, "strategy": "pull-request"}
        journal = journal or finishing.begin(finishing.ACCEPT, task.id, steps, data)
        return _finished(journal, "pull-request")


def _merge_holds_branch(task: Task, merged_sha: str, head: str = "") -> bool:
    """Whether a forge's merge has all of the task's branch: the head it merged is the
    branch's tip, or its merge commit holds that tip (fetched from the remote)."""
    repo, remote = core.open_repo(), git_remote.remote_name()
    branch = git_branches.branch_for(task.id)
    if not git_branches.branch_exists(repo, branch):
        return True  # nothing here to keep
    if head and git_branches.branch_tip(repo, branch) == head:
        return True
    try:
        if remote is not None:
            with core.repo_admin_lock():
                git_remote.fetch_branches(repo, remote, [task.branch])
        return repo.is_ancestor(git_branches.branch_tip(repo, branch), merged_sha)
    except Exception:  # the merge commit is not here (a fetch that failed): keep the branch
        return False


def close(task_id: str, kind: str, reason: str, closed_by: str = "human") -> Accepted:
    """Move a task to done without merging (``queue_utils.close_task``), then finish it:
    closed as ``done``, its learnings are promoted like an accepted task's; as ``wont-do``,
    they are dropped. Its worktree goes; its branch stays (`octopoid worktrees --prune`
    deletes it once its base has all of it); its open pull request is closed, saying why.
    One journal (``close``), written before the move and dropped if the move is refused."""
    task_id = TaskId(task_id)
    with held(task_id, "closed"), finishing.taken(task_id) as journal:
        if journal is not None and journal.kind == finishing.ACCEPT:
            label = task_label(task_id)
            raise IllegalTransition(
                f"{label}: an accept stopped half-way; `octopoid accept {label}` "
                f"finishes it" + ("" if _decided(journal, queue_utils.get_task(task_id))
                else f", or `octopoid reject {label} --reason ...`")
            )  # fmt: skip
        if journal is None:
            if queue_utils.get_store().locate(task_id) is TaskState.DONE:
                # The journal's move step passes a task already in done (moved before a
                # kill): only a journal begun here may take that for its own move.
                raise IllegalTransition(f"{task_label(task_id)} is in done already")
            steps = [finishing.MOVE, finishing.NOTES, finishing.WORKTREE]
            if kind == "done":
                steps.append(finishing.PROMOTE)
            if "PR_NUMBER" in queue_utils.get_task(task_id).headers:
                steps.append(finishing.PULL_REQUEST)  # closed on the forge too
            if git_remote.remote_name() is not None:
                steps.append(finishing.REMOTE_BRANCH)  # what the branch here holds
            data = {"by": closed_by, "kind": kind, "reason": reason}
            journal = finishing.begin(finishing.CLOSE, task_id, steps, data)
        try:
            return _finished(journal, "closed")
        except OctopoidError:
            if queue_utils.get_store().locate(task_id) is not TaskState.DONE:
                finishing.abandon(journal)  # the move was refused: nothing to finish
            raise


def retry(
    task_id: str,
    fresh: bool = False,
    actor: str = "human",
    budget: dict[str, float] | None = None,
) -> Task:
    """A failed, rejected or breakdown task back to incoming with fresh attempts; its retry
    notes are kept. ``fresh``: the next attempt starts again from the base, not from the
    commits earlier attempts left (the old tip is kept under ``refs/octopoid/replaced/``,
    and with ``git.remote`` the remote's copy of the branch is deleted too). ``budget``
    replaces the task's own budget (one a budget stopped needs more to go on)."""
    task = queue_utils.get_task(task_id)
    refuse_planning(task, "retried")
    if not fresh:
        return queue_utils.retry_task(task_id, actor, budget=budget)
    repo, remote = core.open_repo(), git_remote.remote_name()

    def start_over(task: Task) -> None:  # under the task's lock: nobody claims it meanwhile
        git_branches.set_branch_aside(repo, task.id)
        task.drop_header(TIP_HEADER)  # no tip to come back to
        if remote is not None:
            git_remote.delete_remote_branch(repo, remote, task.id)

    reason = f"retry from {task.branch}; earlier commits kept under refs/octopoid/replaced/"
    return queue_utils.retry_task(task.id, actor, reason=reason, budget=budget, prepare=start_over)


def _holds_work(task: Task) -> bool:
    """Whether the task's branch has commits its base lacks (then it is merged, whatever
    an attempt said)."""
    repo = core.open_repo()
    if not git_branches.branch_exists(repo, git_branches.branch_for(task.id)):
        return False
    return history.commits_ahead(repo, task.id, task.branch) > 0


def _finished(journal: Journal, strategy: str, merge: Step | None = None) -> Accepted:
    """Run what is left of a held accept or close journal; the accept it makes."""
    done = finishing.run(journal, merge)
    merged = done.task.headers.get("MERGED") or None
    result = Accepted(done.task, strategy, merged, promoted=done.promoted)
    result.distilled, result.cleanup_error = done.distilled, "; ".join(done.errors) or None
    return result


def _merge(repo: Repo, remote: str | None, task: Task, strategy: str) -> str:
    """Merge the task's branch onto its base (the remote's, pushed, with ``git.remote``)."""
    run_hooks = config.load_config()["merge"]["run_hooks"]
    if remote is not None:
        return merges.merge_onto_remote(
            repo, remote, task.id, task.branch, strategy, task.title, run_hooks
        )
    return merges.merge_task_branch(repo, task.id, task.branch, strategy, task.title, run_hooks)


def _refuse_empty(repo: Repo, task: Task, base: str) -> None:
    """Accepting a branch with nothing beyond its base would mark the task done without work.
    (One that writes octopoid's runtime, or replaces what git does not track, is refused by
    the merge itself: ``merge_guard``.)"""
    if not git_branches.branch_exists(repo, git_branches.branch_for(task.id)):
        return
    if not history.commits_ahead(repo, task.id, base):
        raise IllegalTransition(
            f"{task.label}'s branch has no commits beyond {task.branch}: there is nothing to "
            f"accept; reject it with what is missing (`octopoid reject {task.label} --reason ...`)"
        )


def reject(
    task_id: str,
    reason: str,
    rejected_by: str = "human",
    comments: Sequence[LineComment] = (),
    expect: str | None = None,
    seen_attempt: int | None = None,
) -> Task:
    """Back to incoming with the reason (and line comments) in the notes; the branch and
    worktree stay for the retry.

    Holds the task like accept does. Every comment must name a line of a file on the task's
    branch (its text goes into the notes with it); otherwise nothing is done. A task whose
    accept was interrupted is refused if git shows its branch was already merged (finish it
    with accept); otherwise the unfinished accept's journal is dropped and the reject goes on.
    """
    task_id = TaskId(task_id)
    with held(task_id, "rejected"):
        task = queue_utils.get_task(task_id)
        if task.state is TaskState.PROVISIONAL:
            check_expected(task, expect, seen_attempt)
        if task.state is TaskState.PROVISIONAL and "PROPOSED_SPLIT" in task.headers:
            if comments:
                raise InvalidInput(f"{task.label} proposes a split: it has no lines to comment")
            return queue_utils.reject_proposal(task_id, reason, rejected_by)
        located = with_code(task, comments)
        with finishing.taken(task_id) as journal:
            if journal is not None and task.state is TaskState.PROVISIONAL:
                _settle_unfinished(task, journal, rejected_by)
        return queue_utils.reject_completion(task_id, reason, rejected_by, comments=located)


def _settle_unfinished(task: Task, journal: Journal, by: str) -> None:
    """A reject of a task whose accept or close stopped before its move: an accept whose
    merge git shows landed is recorded (and the reject then refused: finish it with
    accept); otherwise the journal is dropped and the reject goes on."""
    before = journal.data.get("before")
    if journal.kind == finishing.ACCEPT and finishing.MERGE in journal.left and before:
        repo = core.open_repo()
        if history.already_merged(repo, task.id, task.branch, before):
            tip = git_branches.branch_tip(repo, task.branch)
            queue_utils.record_merge(task.id, tip, by, task.branch)
            return
    if "MERGED" not in queue_utils.get_task(task.id).headers:
        finishing.abandon(journal)


def with_code(
    task: Task, comments: Sequence[LineComment], strict: bool = True
) -> list[LineComment]:
    """The comments with the lines of code each is about: from the task's branch, or for a
    removed line from where the branch left its base. Not ``strict`` (a forge's reviewer
    commented on a line octopoid's copy lacks), such a comment is kept without its code."""
    if not comments:
        return []
    repo = core.open_repo()
    branch = git_branches.branch_for(task.id)
    if not git_branches.branch_exists(repo, branch):
        if not strict:
            return list(comments)
        raise InvalidInput(f"{task.label} has no branch {branch} to comment on")
    refs = {"new": f"refs/heads/{branch}"}
    if any(c.side == "old" for c in comments):
        refs["old"] = history.merge_base(repo, task.branch, branch)
    located = []
    for comment in comments:
        where = branch if comment.side == "new" else f"the base of {branch}"
        text = history.file_text(repo, refs[comment.side], comment.path)
        lines = _git_lines(text or "")
        last = max(comment.line, comment.end)
        if (text is None or last > len(lines)) and not strict:
            located.append(comment)
            continue
        if text is None:
            raise InvalidInput(f"{comment.path} is not a file on {where}")
        if last > len(lines):
            raise InvalidInput(
                f"{comment.path} has {len(lines)} lines on {where}; line {last} is past its end"
            )
        code = "\n".join(lines[comment.line - 1 : last])
        if len(code) > MAX_CODE_CHARS:
            code = f"{code[:MAX_CODE_CHARS]} [...{len(code) - MAX_CODE_CHARS} more chars]"
        located.append(replace(comment, code=code))
    return located


def _git_lines(text: str) -> list[str]:
    """A file's lines as git and its diffs number them: split at line feeds only (not at
    form feeds or U+2028 as ``str.splitlines`` does), a carriage return before one dropped."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def approve(task_id: str, approved_by: str = "human") -> list[Task]:
    """Create the subtasks a held breakdown proposes, re-point its dependants, finish it."""
    task_id = TaskId(task_id)
    with queue_utils.get_store().hold(task_id, "approved"):
        task = queue_utils.get_task(task_id)
        if task.state is not TaskState.PROVISIONAL or "PROPOSED_SPLIT" not in task.headers:
            raise IllegalTransition(f"{task.label} holds no proposed breakdown to approve")

        return breakdown.split(task, breakdown.proposed(task), approved_by=approved_by)


def prune_worktrees() -> list[str]:
    """Remove worktrees of tasks that are done or gone, and the branches of done tasks
    whose work was merged; one line per worktree, and per branch deleted.

    A branch is deleted only when what was merged has all of it: its base holds its tip
    (the local base, and with ``git.remote`` the remote's, which moves on a machine that
    does not do the accepts), or its tip is the one an accept merged (``task_tips``). A
    branch left for a pull request (``merge.strategy: none``), or one whose task is gone
    (its base unknown), is kept; a worktree's line says why.
    """
    store = queue_utils.get_store()
    ended = ("done", "gone")
    finished = [name.removeprefix("TASK-") for name, state in list_worktrees() if state in ended]
    root = config.find_project_root()
    branches = [
        tid
        for tid in git_branches.task_branch_ids(root)
        if tid not in finished and store.locate(tid) is TaskState.DONE
    ]
    if not finished and not branches:
        return []
    repo = core.open_repo()
    judged: dict[str, list[str]] = {}  # a base -> what says merged into it (fetched once)
    lines = []
    for task_id in [*finished, *branches]:
        task = store.get(task_id) if store.locate(task_id) else None
        if task_id in finished:
            git_branches.remove_worktree(repo, task_id, delete_branch=False)
        bases = []
        if task is not None:
            bases = judged.setdefault(
                task.branch, [task.branch, task_tips.accept_base(repo, task.branch)]
            )
        merged = git_branches.delete_branch_if_merged(
            repo, task_id, bases, task_tips.merged_tip(task) if task else None
        )
        if task_id in finished:
            lines.append(_pruned(task_id, task, merged))
        elif merged:
            lines.append(f"deleted {git_branches.branch_for(task_id)}: merged")
    return lines


def _pruned(task_id: str, task: Task | None, merged: bool) -> str:
    """What became of a finished task's worktree and branch, in one line."""
    name, branch = task_label(task_id), git_branches.branch_for(task_id)
    if merged:
        return f"removed {name} and its branch"
    if task is None:
        return f"removed {name}; kept {branch}: the task is gone, its base unknown"
    return f"removed {name}; kept {branch}: not merged into {task.branch} (for review or a PR)"

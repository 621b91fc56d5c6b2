"""One truth per task branch: the tip its last attempt left, recorded on the task
(``BRANCH_TIP``) in the fenced move that ends the attempt, so both stores share it. Before
an attempt and before an accept, on any machine, the branch is set to that tip (fetched by
its id from ``git.remote`` when this machine lacks it). docs/scale-out.md says how it
travels, is pushed with a lease, and follows a person's push to a pull request's branch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model.exceptions import GitError
from ..model.tasks import TIP_HEADER, Task, TaskState
from . import branches, core
from . import remote as git_remote

if TYPE_CHECKING:
    import git

SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass
class Start:
    """Where an attempt starts, as ``start`` found it."""

    base: str  # where a new branch starts: the remote's base when it has one
    lease: str | None  # the remote's tip to push over ("" none); None: a plain push
    remark: str | None = None  # why it does not start from the recorded tip, for the notes
    carried: str | None = None  # what the remote held of the branch then (None: nothing)


def recorded(task: Task) -> str | None:
    """The tip the task's last attempt left on its branch (a full commit id), if any."""
    tip = task.headers.get(TIP_HEADER, "").strip().lower()
    return tip if SHA_RE.fullmatch(tip) else None


def on_forge(task: Task) -> bool:
    """Whether the task's branch is up for review on a forge (its pull request is open):
    then it travels as the branch the pull request shows, which later attempts update."""
    return "PR_NUMBER" in task.headers


def _pushed_before(repo: git.Repo, remote: str, branch: str) -> str | None:
    """The remote's ``agent/TASK-<id>`` branch an octopoid from before task branches
    travelled under ``refs/octopoid/tasks/`` pushed, fetched (None: none there)."""
    return git_remote.fetch_branches(repo, remote, [branch], review=True).get(branch)


def take(repo: git.Repo, remote: str, task_id: str, sha: str) -> bool:
    """Point the task's branch at ``sha`` exactly, fetching it by its id from ``remote``
    when it is not here; False when it cannot be had. A local tip it replaces is kept
    under ``refs/octopoid/replaced/``. Callers hold ``repo_admin_lock``."""
    if not git_remote.fetch_commit(repo, remote, sha):
        return False
    return git_remote.adopt(repo, branches.branch_for(task_id), sha, replace=True, exact=True)


def start(repo: git.Repo, remote: str, task: Task) -> Start:
    """Before an attempt: the task's branch at its recorded tip, or at the remote's copy
    when that only adds to it (a person's push on top), or when a person rewrote the pull
    request's branch after it held that tip (as last seen here: their force-push is what
    they want reviewed); a task recorded before octopoid kept tips takes the remote's copy.
    Returns the base and the lease its push will use."""
    branch, review = branches.branch_for(task.id), on_forge(task)
    mine, remark = recorded(task), None
    with core.repo_admin_lock():
        seen = branches.ref_tip(repo, git_remote.remote_ref(remote, branch, review))
        found = git_remote.fetch_branches(repo, remote, [task.branch, branch], review)
        pushed = carried = found.get(branch)
        if pushed is None and mine is None and not review and task.attempts > 1:
            pushed = _pushed_before(repo, remote, branch)
        follow = pushed is not None and (mine is None or branches.contains(repo, pushed, mine))
        if review and not follow and pushed is not None and branches.contains(repo, seen, mine):
            follow = True  # a person rewrote the pull request's branch after it had ours
            remark = (
                f"a person rewrote {branch} on the forge after it held {str(mine)[:12]}: "
                f"this attempt starts from theirs ({pushed[:12]}); the earlier tip is kept as "
                f"{branches.REPLACED}{branch}"
            )
        if not follow and mine is not None and not take(repo, remote, task.id, mine):
            remark = (
                f"the tip its last attempt left, {mine[:12]}, is neither here nor on "
                f"{remote} (that attempt could not push it); this attempt starts from "
                + ("the remote's copy" if pushed else "what this machine has")
            )
            follow = pushed is not None
        if follow:
            git_remote.adopt(repo, branch, pushed, replace=True)
        tip = branches.ref_tip(repo, branch)
    lease = "" if carried is None else carried if branches.contains(repo, tip, carried) else None
    base = git_remote.remote_ref(remote, task.branch) if task.branch in found else task.branch
    return Start(base, lease, remark, carried)


def take_for_accept(repo: git.Repo, remote: str, task: Task) -> None:
    """Before accept merges: the task's branch at the tip its attempt submitted, from the
    remote if need be (a task recorded before octopoid kept tips: the remote's copy)."""
    branch, review = branches.branch_for(task.id), on_forge(task)
    mine = recorded(task)
    with core.repo_admin_lock():
        found = git_remote.fetch_branches(repo, remote, [task.branch, branch], review)
        pushed = found.get(branch)
        if mine is None and pushed is None and not review:
            pushed = _pushed_before(repo, remote, branch)
        if mine is None and pushed is not None:
            git_remote.adopt(repo, branch, pushed, replace=True)
        elif mine is not None and not take(repo, remote, task.id, mine):
            raise GitError(
                f"{task.label}'s submitted tip {mine[:12]} is neither here nor on {remote}: "
                "its attempt ran on a machine that could not push it; accept it there"
            )


def accept_base(repo: git.Repo | None, base: str) -> str:
    """The base accept merges onto: with ``git.remote`` the remote's, fetched now (or as
    last fetched, when the remote cannot be reached); else the local one, and no git runs
    (``repo`` None: the project's, opened only to fetch)."""
    remote = git_remote.remote_name()
    if remote is None:
        return base
    repo = repo or core.open_repo()
    tracking = git_remote.remote_ref(remote, base)
    try:
        found = git_remote.fetch_branches(repo, remote, [base])
    except GitError:
        return tracking if branches.ref_tip(repo, tracking) else base
    return tracking if base in found else base


def merged_tip(task: Task) -> str | None:
    """The tip an accept merged (its attempt's recorded tip, once ``MERGED``): a branch
    still there is merged, squashed or not."""
    merged = task.state is TaskState.DONE and task.headers.get("MERGED")
    return recorded(task) if merged else None

"""Branches through ``git.remote``, between machines: fetched, adopted, pushed with a lease,
deleted. A task's branch travels as ``refs/octopoid/tasks/TASK-<id>``, which no forge runs
CI on, and becomes a branch there only when put up for review on a forge (``on_remote``);
docs/scale-out.md says the whole walk.
"""

from __future__ import annotations

from contextlib import suppress

from .. import config
from ..model.exceptions import GitError, PushRefused, RemoteMoved
from . import merge_guard
from .branches import (
    TASK_BRANCHES,
    branch_exists,
    branch_for,
    branch_tip,
    checkout_of,
    contains,
    has_commit,
)
from .core import git, git_errors, git_message, open_repo, repo_admin_lock

#: Where a task's branch travels on ``git.remote``: refs no forge takes for a branch.
TASK_REFS = "refs/octopoid/tasks/"


def remote_name() -> str | None:
    """config.yaml's ``git.remote`` (checked to be a name): where branches travel, or None."""
    return config.load_config()["git"]["remote"]


def on_remote(branch: str, review: bool = False) -> str:
    """The ref ``branch`` has on ``git.remote``: the one place that names it. A base is a
    branch there. A task's branch travels as ``refs/octopoid/tasks/TASK-<id>``, a ref no
    forge takes for a branch, so no workflow or pipeline runs an attempt nobody reviewed;
    only once put up for review on a forge (``review``) is it the branch itself."""
    name = branch.removeprefix(TASK_BRANCHES)
    if review or name == branch or not name.startswith("TASK-"):
        return f"refs/heads/{branch}"
    return f"{TASK_REFS}{name}"


def remote_ref(remote: str, branch: str, review: bool = False) -> str:
    """Where this repository keeps what it fetched of the remote's ``branch``
    (``refs/remotes/<remote>/octopoid/tasks/TASK-<id>`` for a task's carried branch)."""
    there = on_remote(branch, review)
    return f"refs/remotes/{remote}/" + there.removeprefix("refs/heads/").removeprefix("refs/")


def _ls_remote(repo: git.Repo, remote: str, refs: list[str]) -> dict[str, str]:
    """{ref: commit} for those of the full ``refs`` the remote has."""
    with git_errors(f"git ls-remote {remote}"):
        listing = repo.git.ls_remote(remote, *refs)
    pairs = (line.split("\t", 1) for line in listing.splitlines() if "\t" in line)
    return {ref: sha for sha, ref in pairs if ref in refs}


def fetch_branches(
    repo: git.Repo, remote: str, branches: list[str], review: bool = False
) -> dict[str, str]:
    """Fetch those of ``branches`` the remote has (``git ls-remote``; a task's branch as
    ``on_remote`` names it, ``review``: its forge branch) into ``refs/remotes/<remote>/``;
    return {branch: commit} for them (a branch not pushed yet is simply absent).

    Under ``repo_admin_lock``: a fetch reads every worktree's HEAD, and one that
    ``git worktree add`` is making at that moment holds a placeholder (a "bad object").
    """
    wanted = {on_remote(b, review): b for b in branches}
    found = {wanted[ref]: sha for ref, sha in _ls_remote(repo, remote, list(wanted)).items()}
    if found:
        specs = [f"+{on_remote(b, review)}:{remote_ref(remote, b, review)}" for b in found]
        with repo_admin_lock(), git_errors(f"git fetch {remote}"):
            repo.git.fetch("--no-tags", remote, *specs)
    return found


def adopt(
    repo: git.Repo, branch: str, sha: str, replace: bool = False, exact: bool = False
) -> bool:
    """Move the local ``branch`` to ``sha`` (another machine's work); True if it has it.

    Without ``replace`` only a fast-forward is made, and a branch checked out with changes
    is left alone (the user's base). With ``replace`` (a task's branch: the remote's copy is
    what the last attempt pushed) a diverged local tip is kept as
    ``refs/octopoid/replaced/<branch>`` and the task's worktree is reset to ``sha``; a local
    tip ahead of ``sha`` stays, unless ``exact`` (the tip an attempt recorded, and no other).
    Callers hold ``repo_admin_lock``.
    """
    ref = f"refs/heads/{branch}"
    tip = branch_tip(repo, branch) if branch_exists(repo, branch) else None
    if tip == sha:
        return True
    with git_errors(f"moving {branch} to {sha[:12]}"):
        if tip is not None and not exact and repo.is_ancestor(sha, tip):
            return True  # ahead of it already (work not pushed yet): nothing to take
        forward = tip is None or repo.is_ancestor(tip, sha)
        if not forward and not replace:
            return False
        if not forward:
            repo.git.update_ref(f"refs/octopoid/replaced/{branch}", tip)
        checkout = checkout_of(repo, branch) if tip else None
        if checkout is not None:
            where = open_repo(checkout)
            if replace:
                where.git.reset("--hard", sha)
            elif where.is_dirty(untracked_files=False) or merge_guard.replaced_in(
                checkout, tip, sha
            ):
                return False
            else:
                where.git.merge("--ff-only", sha)
        else:
            repo.git.update_ref(ref, sha, tip or "")
    return True


def fetch_commit(repo: git.Repo, remote: str, sha: str) -> bool:
    """Fetch commit ``sha`` by its id from ``remote`` unless it is here; whether it is."""
    if not has_commit(repo, sha):
        with repo_admin_lock(), suppress(git.GitCommandError):
            repo.git.fetch("--no-tags", "--no-write-fetch-head", remote, sha)
    return has_commit(repo, sha)


def push_task_branch(
    repo: git.Repo, remote: str, task_id: str, lease: str | None = None, review: bool = False
) -> None:
    """Publish the task's branch where ``on_remote`` says (``review``: as the branch a
    forge's pull request shows). With ``lease`` (the remote's tip the attempt started
    from, "" for none) it may replace what the remote has only if that is still there
    (``--force-with-lease``): an attempt's rebase reaches the remote, anyone else's push
    meanwhile refuses it. Without, a plain push: a stale copy cannot overwrite newer work.
    ``PushRefused`` when the remote said no."""
    branch = branch_for(task_id)
    there = on_remote(branch, review)
    guard = [] if lease is None else [f"--force-with-lease={there}:{lease}"]
    tip = branch_tip(repo, branch)
    try:
        repo.git.push("--porcelain", *guard, remote, f"{tip}:{there}")
    except git.GitCommandError as exc:
        said = getattr(exc, "stdout", "") or ""
        if "[remote rejected]" in said:
            raise PushRefused(_refused(remote, there, said)) from None
        if "[rejected]" in said:
            why = "stale info" if "stale info" in said else "non-fast-forward"
            raise RemoteMoved(
                f"{remote}'s {branch} holds commits this push would overwrite ({why}: "
                "someone else pushed to it); it was left as it is"
            ) from None
        raise GitError(f"git push {remote} {branch} failed: {git_message(exc)}") from None
    # what this machine knows the remote holds, whatever its fetch refspecs say: a poll
    # tells a push that was lost from one a person overwrote by it (forge/pulls.py)
    with git_errors(f"git update-ref {remote_ref(remote, branch, review)}"):
        repo.git.update_ref(remote_ref(remote, branch, review), tip)


def _refused(remote: str, ref: str, said: str) -> str:
    """What a remote that refused ``ref`` itself said, and what to do about it."""
    why = said.split("[remote rejected]", 1)[1].splitlines()[0].strip(" ()")[:200]
    text = f"{remote} refused to update {ref} ({why or 'no reason given'})"
    if ref.startswith(TASK_REFS):
        text += (
            f": octopoid carries task branches under {TASK_REFS}, where no forge runs CI "
            "on them; let that remote take pushes there (docs/scale-out.md)"
        )
    return text


def delete_remote_branch(
    repo: git.Repo, remote: str, task_id: str, only: str | None = None
) -> None:
    """Remove the task's refs from the remote (its carried branch, and the branch a
    forge's pull request showed or an older octopoid pushed), those there. With ``only``
    (what was merged), only those it holds all of: a push since then stays. Each is
    deleted only while it is what was read (a lease), never a push made meanwhile."""
    branch = branch_for(task_id)
    there = _ls_remote(repo, remote, [on_remote(branch), on_remote(branch, review=True)])
    gone = {r: sha for r, sha in there.items() if only in (None, sha) or contains(repo, only, sha)}
    if gone:
        leases = [f"--force-with-lease={ref}:{sha}" for ref, sha in gone.items()]
        with git_errors(f"git push {remote} --delete {branch}"):
            repo.git.push(*leases, remote, "--delete", *gone)

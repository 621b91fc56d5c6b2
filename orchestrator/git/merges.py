"""A task's branch merged into its base: in the person's checkout, in a scratch worktree,
or onto the remote's base and pushed; and whether it would conflict.

Nothing is ever half-merged: a conflict or failure is undone and named. Every merge where
the person works first asks ``merge_guard`` what it would replace.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from .. import config
from ..model.exceptions import GitError, MergeRefused
from ..model.tasks import task_label
from . import merge_guard
from .branches import branch_exists, branch_for, checkout_of, clear_worktree
from .core import (
    full_ref,
    git,
    git_command,
    git_errors,
    git_message,
    open_repo,
    repo_admin_lock,
)
from .remote import adopt, fetch_branches, remote_ref

PUSH_TRIES = 10  # a push refused because the remote's base moved: fetch, merge again


def merge_conflicts(
    root: Path, task_id: str, base: str, tip: str | None = None
) -> list[str] | None:
    """Files that would conflict merging the task's branch (or its commit ``tip``) into
    ``base`` in the repository at ``root`` (None: it merges cleanly). ``git merge-tree
    --write-tree`` touches no worktree, index or ref; one git process, no GitPython (`octopoid
    checks` and `status` ask it)."""
    done = git_command(
        root, "merge-tree", "--write-tree", "--name-only", "--no-messages",
        full_ref(base), tip or f"refs/heads/{branch_for(task_id)}",
    )  # fmt: skip
    if done.returncode == 0:
        return None
    if done.returncode != 1 or not done.stdout.strip():  # a conflict prints its tree first;
        why = " ".join(done.stderr.split()) or done.returncode  # a missing branch exits 1 too
        raise GitError(f"git merge-tree failed: {why}")
    return [line for line in done.stdout.splitlines()[1:] if line.strip()]


def merge_task_branch(
    repo: git.Repo, task_id: str, base: str, strategy: str, title: str, run_hooks: bool = False
) -> str:
    """Merge ``agent/TASK-<id>`` into ``base``; return the new tip of ``base``.

    Where ``base`` is checked out, the merge happens there and needs it clean; otherwise in a
    temporary worktree, and ``base`` moves only if nobody moved it meanwhile. A conflict is
    aborted: nothing is half-merged. The user's hooks run only with ``run_hooks``.
    """
    branch = branch_for(task_id)
    if not branch_exists(repo, branch):
        raise GitError(f"{task_label(task_id)} has no branch {branch} to merge")
    if not branch_exists(repo, base):
        raise GitError(f"base branch '{base}' does not exist")
    message = f"Merge {task_label(task_id)}: {title}"
    with repo_admin_lock():
        merge_guard.refuse_replacing(Path(repo.working_dir), full_ref(base), full_ref(branch))
        checkout = checkout_of(repo, base)
        if checkout is None:

            def update(old: str, new: str) -> None:
                with git_errors(f"git update-ref refs/heads/{base}"):
                    repo.git.update_ref(f"refs/heads/{base}", new, old)

            return _merge_detached(repo, branch, base, strategy, message, run_hooks, update)
        where = open_repo(checkout, hooks=run_hooks)
        _refuse_local_changes_in_the_way(where, checkout, base, branch)
        _merge_in(where, branch, strategy, message)
        return where.head.commit.hexsha


def _names(where: git.Repo, *args: str) -> list[str]:
    """``git diff --name-only -z`` as a list (names unquoted, whatever they hold)."""
    with git_errors("git diff --name-only"):
        return [n for n in where.git.diff("--name-only", "-z", *args).split("\0") if n]


def _refuse_local_changes_in_the_way(
    where: git.Repo, checkout: Path, base: str, branch: str
) -> None:
    """A merge in the user's checkout goes ahead beside their uncommitted edits (an edited
    agents.yaml), and is refused only when it would change a file they edited, or commit
    what they staged; the refusal names the files."""
    if staged := _names(where, "--cached"):
        raise _refused(
            f"{checkout} has staged changes on {base}, which the merge commit would take in",
            staged[:20],
            "commit or unstage them (git restore --staged), then accept again",
        )
    changed = _names(where, "--no-renames", f"{base}...{branch}")  # a rename: both names
    if clash := sorted(set(_names(where)) & set(changed)):
        raise _refused(
            f"{checkout} has uncommitted changes on {base} to files the merge changes",
            clash[:20],
            "commit or stash them, then accept again",
        )


def _refused(what: str, names: list[str], then: str) -> MergeRefused:
    """A refused merge names its files, one a line, and what to do about them."""
    return MergeRefused(f"{what}:\n" + "".join(f"  {name}\n" for name in names) + then)


def _merge_detached(
    repo: git.Repo,
    branch: str,
    start: str,
    strategy: str,
    message: str,
    run_hooks: bool,
    land: Callable[[str, str], None],
) -> str:
    """Merge ``branch`` onto ``start`` in a scratch worktree; ``land(old, new)`` moves the
    base (a ref update guarded by its old value, or a push)."""
    old = repo.commit(start).hexsha
    with scratch_worktree(repo, f"merge-{branch}", old, run_hooks) as where:
        _merge_in(where, branch, strategy, message)
        new = where.head.commit.hexsha
        land(old, new)
        return new


@contextmanager
def scratch_worktree(
    repo: git.Repo, name: str, start: str, hooks: bool = False
) -> Iterator[git.Repo]:
    """A worktree of its own, detached at ``start``, for a merge or rebase that must not
    touch anyone's checkout; removed after (one a killed process left is removed first).
    Callers hold ``repo_admin_lock``."""
    scratch = config.get_worktrees_dir() / f".{name.replace('/', '-')}"
    clear_worktree(repo, scratch)  # one a killed process left
    with git_errors("git worktree add --detach"):
        repo.git.worktree("add", "--detach", str(scratch), start)
    try:
        yield open_repo(scratch, hooks=hooks)
    finally:
        with suppress(git.GitCommandError):  # else the next one removes it (above)
            repo.git.worktree("remove", "--force", str(scratch))


def conflicted(where: git.Repo) -> list[str]:
    """The files a merge or rebase stopped on in the worktree ``where``."""
    with suppress(GitError):
        return _names(where, "--diff-filter=U")
    return []


def merge_onto_remote(
    repo: git.Repo,
    remote: str,
    task_id: str,
    base: str,
    strategy: str,
    title: str,
    run_hooks: bool = False,
) -> str:
    """Merge the task's branch onto the remote's ``base`` and push it; the new tip.

    The push is a compare-and-swap: if another machine landed something meanwhile the
    remote refuses it, and the merge is made again on the new base (``PUSH_TRIES`` times).
    The local ``base`` follows when it can (``adopt``).
    """
    branch = branch_for(task_id)
    message = f"Merge {task_label(task_id)}: {title}"
    if not branch_exists(repo, branch):
        raise GitError(
            f"{task_label(task_id)} has no branch {branch} here or on {remote}: its attempt "
            "ran on a machine that could not push it; accept it there"
        )

    def push(old: str, new: str) -> None:
        with git_errors(f"git push {remote} {base}"):
            repo.git.push("--porcelain", remote, f"{new}:refs/heads/{base}")

    for tries in range(1, PUSH_TRIES + 1):
        with repo_admin_lock():
            old = fetch_branches(repo, remote, [base]).get(base)
            if old is None:
                raise GitError(f"the remote {remote} has no branch '{base}' to merge into")
            merge_guard.refuse_replacing(
                Path(repo.working_dir), remote_ref(remote, base), full_ref(branch)
            )
            try:
                new = _merge_detached(
                    repo, branch, remote_ref(remote, base), strategy, message, run_hooks, push
                )
                with suppress(GitError):
                    adopt(repo, base, new)
                return new
            except GitError:
                moved = fetch_branches(repo, remote, [base]).get(base) != old
                if not moved or tries == PUSH_TRIES:
                    raise
        # another machine landed first: after a jittered pause (two accepters must not
        # keep colliding), merge again onto its base
        time.sleep(random.uniform(0, 0.05 * tries))
    raise AssertionError("the loop returns or raises")


def _merge_in(where: git.Repo, branch: str, strategy: str, message: str) -> None:
    args = {
        "merge": ["--no-ff", "-m", message, branch],
        "squash": ["--squash", branch],
        "ff-only": ["--ff-only", branch],
    }[strategy]
    try:
        where.git.merge(*args)
        if strategy == "squash" and _names(where, "--cached"):
            where.git.commit("-m", message)
    except git.GitCommandError as exc:
        stopped = conflicted(where)
        detail = git_message(exc)
        with suppress(git.GitCommandError):
            where.git.reset("--merge")  # undoes a conflicted merge or squash; no-op otherwise
        if stopped:
            raise _refused(
                f"merging {branch} conflicts in",
                stopped,
                "nothing was merged. Rebase the branch onto its base and resolve them, or "
                "reject the task with the conflict as the reason (the next attempt rebases)",
            ) from None
        raise MergeRefused(
            f"merging {branch} failed and was undone: {detail}. Resolve it on the branch "
            "(or reject the task with the conflict as the reason), then accept again"
        ) from None

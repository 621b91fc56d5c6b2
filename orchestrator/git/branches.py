"""A task's branch (``agent/TASK-<id>``) and worktree: made, read, set aside, removed.

A retry keeps the branch (earlier attempts' commits); starting a task over keeps its old
tip under ``refs/octopoid/replaced/``, and a branch is deleted only when what was merged
holds all of it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from .. import config
from ..base.fsutil import remove_tree
from ..model.exceptions import GitError
from ..model.tasks import ID_RE, task_label
from .core import full_ref, git, git_answer, git_command, git_errors, open_repo, repo_admin_lock

TASK_BRANCHES = "agent/"  # a task's branch is agent/TASK-<id>
#: Where a task branch's tip octopoid moved away from is kept (``adopt``, a fresh retry).
REPLACED = "refs/octopoid/replaced/"


def branch_for(task_id: str) -> str:
    return f"{TASK_BRANCHES}{task_label(task_id)}"


def worktree_for(task_id: str) -> Path:
    return config.get_worktrees_dir() / task_label(task_id)


def branch_exists(repo: git.Repo, name: str) -> bool:
    return f"refs/heads/{name}" in {ref.path for ref in repo.references}


def ensure_branch(repo: git.Repo, task_id: str, base: str) -> str:
    """Make ``agent/TASK-<id>`` from ``base`` unless it exists (a retry keeps earlier
    attempts' commits); its tip. Callers hold ``repo_admin_lock``."""
    branch = branch_for(task_id)
    tip = ref_tip(repo, branch)  # one git call where the branch is there (a retry)
    if tip is not None:
        return tip
    start = git_answer(repo, "rev-parse", "-q", "--verify", f"{base}^{{commit}}")
    if start is None:
        raise GitError(f"base branch '{base}' does not exist in {repo.working_dir}")
    with git_errors(f"git branch {branch} {base}"):
        # --no-track: a branch started from the remote's base must not write an
        # upstream into .git/config (a change another attempt's check would flag)
        repo.git.branch("--no-track", branch, start.strip())
    return start.strip()


def ensure_worktree(repo: git.Repo, task_id: str, base: str) -> Path:
    """The task's worktree on ``agent/TASK-<id>`` (``sandbox: none``); the branch is made
    from ``base`` the first time, so a retry keeps earlier attempts' commits."""
    path = worktree_for(task_id)
    with repo_admin_lock():
        if (path / ".git").is_file():
            return path
        clear_worktree(repo, path)  # a half-made one from a crash, or a sandboxed attempt's clone
        ensure_branch(repo, task_id, base)
        with git_errors(f"git worktree add {path} {branch_for(task_id)}"):
            repo.git.worktree("add", str(path), branch_for(task_id))
    return path


def clear_worktree(repo: git.Repo, path: Path) -> None:
    """Remove what stands at ``path`` and git's record of any worktree that was there."""
    remove_tree(path)
    with git_errors("git worktree prune"):
        repo.git.worktree("prune")


def branch_tip(repo: git.Repo, name: str) -> str:
    """The commit ``name`` points at: a local branch, or a full ref (``refs/remotes/...``)."""
    with git_errors(f"git rev-parse {name}"):
        return repo.git.rev_parse("--verify", f"{full_ref(name)}^{{commit}}")


def ref_tip(repo: git.Repo, name: str) -> str | None:
    """The commit ``name`` (a branch or full ref) points at, or None where there is none."""
    out = git_answer(repo, "rev-parse", "-q", "--verify", f"{full_ref(name)}^{{commit}}")
    return out.strip() if out is not None else None


def has_commit(repo: git.Repo, sha: str) -> bool:
    """Whether this repository holds commit ``sha``."""
    return git_answer(repo, "cat-file", "-e", f"{sha}^{{commit}}") is not None


def contains(repo: git.Repo, tip: str | None, sha: str | None) -> bool:
    """Whether commit ``tip`` has ``sha`` in its history (both held here)."""
    if not tip or not sha or not has_commit(repo, tip) or not has_commit(repo, sha):
        return False
    with git_errors(f"git merge-base --is-ancestor {sha[:12]} {tip[:12]}"):
        return repo.is_ancestor(sha, tip)


def worktree_branch(task_id: str) -> str | None:
    """The branch the task's worktree has checked out (``refs/heads/...``), None if detached."""
    return git_answer(open_repo(worktree_for(task_id)), "symbolic-ref", "-q", "HEAD")


def back_to_task_branch(task_id: str) -> None:
    """Check the task's own branch out again in its worktree (an agent switched away)."""
    wt = open_repo(worktree_for(task_id))
    with git_errors(f"git checkout {branch_for(task_id)}"):
        wt.git.checkout("-f", branch_for(task_id))


def remove_worktree(repo: git.Repo, task_id: str, delete_branch: bool = True) -> None:
    """Remove the task's worktree (and its branch); missing pieces are not an error."""
    path, branch = worktree_for(task_id), branch_for(task_id)
    with repo_admin_lock():
        if (path / ".git").is_file():
            with git_errors(f"git worktree remove {path}"):
                repo.git.worktree("remove", "--force", str(path))
        clear_worktree(repo, path)  # a sandboxed attempt's clone (or what a removal left)
        if delete_branch and branch_exists(repo, branch):
            with git_errors(f"git branch -D {branch}"):
                repo.git.branch("-D", branch)


def set_branch_aside(repo: git.Repo, task_id: str) -> str | None:
    """Start the task over: its branch (and worktree) removed, the old tip kept as
    ``refs/octopoid/replaced/<branch>-<sha12>`` (nothing is lost, however often a task is
    started over); that tip, or None without one."""
    branch = branch_for(task_id)
    with repo_admin_lock():
        if not branch_exists(repo, branch):
            return None
        tip = branch_tip(repo, branch)
        kept = f"refs/octopoid/replaced/{branch}-{tip[:12]}"  # one per tip: none overwritten
        with git_errors(f"git update-ref {kept}"):
            repo.git.update_ref(kept, tip)
    remove_worktree(repo, task_id)
    return tip


def drop_replaced(repo: git.Repo, task_id: str, base: str) -> None:
    """Delete the tips octopoid set aside for the task (``refs/octopoid/replaced/``) whose
    changes ``base`` holds all of, judged by content (merging one into it would change
    nothing: a squash or a rebase counts); one holding work nothing merged is kept for a
    person."""
    mine = re.compile(re.escape(f"{REPLACED}{branch_for(task_id)}") + r"(-[0-9a-f]{12})?")
    with git_errors(f"git for-each-ref {REPLACED}"):
        held = repo.git.rev_parse(f"{full_ref(base)}^{{tree}}")
        for ref in repo.git.for_each_ref("--format=%(refname)", REPLACED).splitlines():
            if not mine.fullmatch(ref):
                continue
            tree = git_answer(repo, "merge-tree", "--write-tree", full_ref(base), ref)
            if tree is not None and tree.strip() == held:
                repo.git.update_ref("-d", ref)


def delete_branch_if_merged(
    repo: git.Repo, task_id: str, bases: Sequence[str], merged_tip: str | None = None
) -> bool:
    """Delete the task's branch only when what was merged has all of it: one of ``bases``
    (a local base, the remote's) holds its tip, or its tip is ``merged_tip`` (the tip an
    accept merged, squashed or not)."""
    branch = branch_for(task_id)
    with repo_admin_lock():
        if not branch_exists(repo, branch):
            return True
        tip = branch_tip(repo, branch)
        if tip != merged_tip and not any(contains(repo, ref_tip(repo, b), tip) for b in bases):
            return False
        with git_errors(f"git branch -d {branch}"):
            repo.git.update_ref("-d", f"refs/heads/{branch}", tip)
    return True


def branch_head(root: Path, name: str) -> str | None:
    """The commit local branch ``name`` points at, or None (no such branch, no repository)."""
    found = git_command(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}^{{commit}}")
    head = found.stdout.strip()
    return head if found.returncode == 0 and head else None


def branch_tips(root: Path) -> dict[str, str]:
    """Every local branch's tip, by name, in one call of the git command."""
    done = git_command(
        root, "for-each-ref", "--format=%(objectname) %(refname:lstrip=2)", "refs/heads"
    )
    if done.returncode != 0:
        raise GitError(f"git for-each-ref failed: {' '.join(done.stderr.split())}")
    lines = done.stdout.splitlines()
    return {name: sha for sha, _, name in (line.partition(" ") for line in lines)}


def task_branch_ids(root: Path) -> list[str]:
    """The ids of the tasks that have a local branch (``agent/TASK-<id>``)."""
    prefix = branch_for("0").removesuffix("0")
    names = [name.removeprefix(prefix) for name in branch_tips(root) if name.startswith(prefix)]
    return sorted(name for name in names if ID_RE.fullmatch(name))


def checkout_of(repo: git.Repo, branch: str) -> Path | None:
    """The worktree that has ``branch`` checked out, if any."""
    current: Path | None = None
    for line in repo.git.worktree("list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree ") :])
        elif line == f"branch refs/heads/{branch}":
            return current
    return None

"""Git through GitPython: task worktrees and branches, commit counts, merges.

git's own error text is never swallowed: every failure becomes a ``GitError`` carrying it.
Operations that change the repository's administrative state (worktrees, branches, refs)
are serialised with a lock, since two runners may start at the same moment.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import git
from filelock import FileLock

from . import config
from .exceptions import GitError, MergeRefused
from .tasks import task_label

MERGE_STRATEGIES = ("merge", "squash", "ff-only", "none")


def branch_for(task_id: str) -> str:
    return f"agent/{task_label(task_id)}"


def worktree_for(task_id: str) -> Path:
    return config.get_worktrees_dir() / task_label(task_id)


def _git_message(exc: git.GitError) -> str:
    text = (getattr(exc, "stderr", "") or getattr(exc, "stdout", "") or str(exc)).strip()
    text = text.removeprefix("stderr: ").strip().strip("'").strip()
    return " ".join(text.split()) or str(exc)


@contextmanager
def _git_errors(action: str) -> Iterator[None]:
    try:
        yield
    except git.GitError as exc:  # also GitCommandNotFound: no git on PATH
        raise GitError(f"{action} failed: {_git_message(exc)}") from None


@contextmanager
def repo_admin_lock() -> Iterator[None]:
    """Serialise worktree/branch/ref changes across processes."""
    lock_dir = config.get_worktrees_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(lock_dir / ".git-admin.lock"):
        yield


def open_repo(path: Path | None = None) -> git.Repo:
    """The project's repository (default: the project root); ``GitError`` if there is none."""
    where = path or config.find_project_root()
    try:
        return git.Repo(where)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitError(f"{where} is not a git repository (run `git init` there first)") from None


def branch_exists(repo: git.Repo, name: str) -> bool:
    return f"refs/heads/{name}" in {ref.path for ref in repo.references}


def ensure_worktree(repo: git.Repo, task_id: str, base: str) -> Path:
    """The task's worktree on ``agent/TASK-<id>``; made from ``base`` the first time.

    A retry reuses the branch, so earlier attempts' commits are kept.
    """
    path, branch = worktree_for(task_id), branch_for(task_id)
    with repo_admin_lock():
        if (path / ".git").exists():
            return path
        if path.exists():
            shutil.rmtree(path)  # a half-made worktree from a crash
        with _git_errors("git worktree prune"):
            repo.git.worktree("prune")
        if branch_exists(repo, branch):
            with _git_errors(f"git worktree add {path} {branch}"):
                repo.git.worktree("add", str(path), branch)
            return path
        try:
            repo.commit(base)
        except (git.BadName, ValueError):
            raise GitError(f"base branch '{base}' does not exist in {repo.working_dir}") from None
        with _git_errors(f"git worktree add -b {branch} {path} {base}"):
            repo.git.worktree("add", "-b", branch, str(path), base)
    return path


def branch_tip(repo: git.Repo, name: str) -> str:
    with _git_errors(f"git rev-parse {name}"):
        return repo.git.rev_parse("--verify", f"refs/heads/{name}^{{commit}}")


def already_merged(repo: git.Repo, task_id: str, base: str, base_before: str) -> bool:
    """Did an accept merge the task into ``base`` since ``base_before``?

    True when the task branch's tip is in ``base`` (merge, fast-forward) or a commit on
    ``base`` since ``base_before`` carries the accept's message (squash).
    """
    branch = branch_for(task_id)
    with _git_errors(f"git log {base}"):
        if branch_exists(repo, branch) and repo.is_ancestor(branch, base):
            return True
        subjects = repo.git.log("--format=%s", f"{base_before}..refs/heads/{base}").splitlines()
    return any(s.startswith(f"Merge {task_label(task_id)}: ") for s in subjects)


def head_sha(path: Path) -> str:
    with _git_errors(f"git rev-parse HEAD in {path}"):
        return git.Repo(path).head.commit.hexsha


def commits_since(path: Path, since: str) -> int:
    """Commits on the worktree's HEAD that ``since`` does not have."""
    with _git_errors(f"git rev-list in {path}"):
        return int(git.Repo(path).git.rev_list("--count", f"{since}..HEAD"))


def remove_worktree(repo: git.Repo, task_id: str, delete_branch: bool = True) -> None:
    """Remove the task's worktree (and its branch); missing pieces are not an error."""
    path, branch = worktree_for(task_id), branch_for(task_id)
    with repo_admin_lock():
        if path.exists():
            with _git_errors(f"git worktree remove {path}"):
                repo.git.worktree("remove", "--force", str(path))
        with _git_errors("git worktree prune"):
            repo.git.worktree("prune")
        if delete_branch and branch_exists(repo, branch):
            with _git_errors(f"git branch -D {branch}"):
                repo.git.branch("-D", branch)


def diff(repo: git.Repo, base: str, task_id: str) -> str:
    """The task branch's changes since it left ``base`` (``git diff base...branch``)."""
    branch = branch_for(task_id)
    if not branch_exists(repo, branch):
        raise GitError(f"{task_label(task_id)} has no branch {branch} (nothing was attempted yet?)")
    with _git_errors(f"git diff {base}...{branch}"):
        return repo.git.diff(f"{base}...{branch}")


def _checkout_of(repo: git.Repo, branch: str) -> Path | None:
    """The worktree that has ``branch`` checked out, if any."""
    current: Path | None = None
    for line in repo.git.worktree("list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree ") :])
        elif line == f"branch refs/heads/{branch}":
            return current
    return None


def merge_task_branch(repo: git.Repo, task_id: str, base: str, strategy: str, title: str) -> str:
    """Merge ``agent/TASK-<id>`` into ``base``; return the new tip of ``base``.

    Where ``base`` is checked out, the merge happens there and needs it clean; otherwise in a
    temporary worktree, and ``base`` moves only if nobody moved it meanwhile. A conflict is
    aborted: nothing is half-merged.
    """
    branch = branch_for(task_id)
    if strategy not in MERGE_STRATEGIES or strategy == "none":
        raise ValueError(f"not a merge strategy: {strategy}")
    if not branch_exists(repo, branch):
        raise GitError(f"{task_label(task_id)} has no branch {branch} to merge")
    if not branch_exists(repo, base):
        raise GitError(f"base branch '{base}' does not exist")
    message = f"Merge {task_label(task_id)}: {title}"
    with repo_admin_lock():
        checkout = _checkout_of(repo, base)
        if checkout is not None:
            where = git.Repo(checkout)
            if where.is_dirty(untracked_files=False):
                raise MergeRefused(
                    f"{checkout} has uncommitted changes on {base}; commit or stash them, "
                    "then accept again"
                )
            _merge_in(where, branch, strategy, message)
            return where.head.commit.hexsha
        return _merge_detached(repo, branch, base, strategy, message)


def _merge_detached(repo: git.Repo, branch: str, base: str, strategy: str, message: str) -> str:
    scratch = config.get_worktrees_dir() / f".merge-{branch.replace('/', '-')}"
    if scratch.exists():
        shutil.rmtree(scratch)  # an accept killed mid-merge left it
    with _git_errors("git worktree prune"):
        repo.git.worktree("prune")
    old = repo.commit(base).hexsha
    with _git_errors("git worktree add --detach"):
        repo.git.worktree("add", "--detach", str(scratch), base)
    try:
        where = git.Repo(scratch)
        _merge_in(where, branch, strategy, message)
        new = where.head.commit.hexsha
        with _git_errors(f"git update-ref refs/heads/{base}"):
            repo.git.update_ref(f"refs/heads/{base}", new, old)
        return new
    finally:
        repo.git.worktree("remove", "--force", str(scratch))


def _merge_in(where: git.Repo, branch: str, strategy: str, message: str) -> None:
    args = {
        "merge": ["--no-ff", "-m", message, branch],
        "squash": ["--squash", branch],
        "ff-only": ["--ff-only", branch],
    }[strategy]
    try:
        where.git.merge(*args)
        if strategy == "squash" and where.is_dirty(untracked_files=False):
            where.git.commit("-m", message)
    except git.GitCommandError as exc:
        detail = _git_message(exc)
        with suppress(git.GitCommandError):
            where.git.reset("--merge")  # undoes a conflicted merge or squash; no-op otherwise
        raise MergeRefused(
            f"merging {branch} failed and was undone: {detail}. Resolve it on the branch "
            "(or reject the task with the conflict as the reason), then accept again"
        ) from None

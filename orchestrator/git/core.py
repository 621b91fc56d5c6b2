"""How octopoid runs git: the repository opened through GitPython, or git as a plain process,
with hooks and fsmonitor off; git's errors; the lock on the repository's administration.

git's own error text is never swallowed: every failure becomes a ``GitError`` carrying it.
Operations that change the repository's administrative state (worktrees, branches, refs)
are serialised with ``repo_admin_lock``, since two runners may start at the same moment.
Every git command octopoid runs has hooks and fsmonitor off (``HOOKS_OFF``): an agent may
have planted either, and only ``merge.run_hooks: true`` lets the user's own merge hooks run.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import config
from ..base.lazy import lazy_import
from ..base.locks import FileMutex
from ..model.exceptions import ConfigError, GitError

git = lazy_import("git")  # GitPython: only commands that use git pay for it
#: Config given to every git command octopoid runs (git >= 2.31 reads it from the env).
HOOKS_OFF = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": os.devnull,
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
}


def full_ref(name: str) -> str:
    """A branch name as its ref; a full ref (``refs/remotes/origin/main``) as it is."""
    return name if name.startswith("refs/") else f"refs/heads/{name}"


def git_message(exc: git.GitError) -> str:
    text = (getattr(exc, "stderr", "") or getattr(exc, "stdout", "") or str(exc)).strip()
    text = text.removeprefix("stderr: ").strip().strip("'").strip()
    return " ".join(text.split()) or str(exc)


@contextmanager
def git_errors(action: str) -> Iterator[None]:
    try:
        yield
    except git.GitError as exc:  # also GitCommandNotFound: no git on PATH
        raise GitError(f"{action} failed: {git_message(exc)}") from None


@contextmanager
def repo_admin_lock() -> Iterator[None]:
    """Serialise worktree/branch/ref changes across processes."""
    lock_dir = config.get_worktrees_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    with FileMutex(lock_dir / ".git-admin.lock"):
        yield


def open_repo(path: Path | None = None, hooks: bool = False) -> git.Repo:
    """The project's repository (default: the project root); ``GitError`` if there is none.

    Its git commands run with hooks off unless ``hooks``.
    """
    where = path or config.find_project_root()
    try:
        repo = git.Repo(where)
        if not hooks:
            repo.git.update_environment(**HOOKS_OFF)
        return repo
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitError(f"{where} is not a git repository (run `git init` there first)") from None


def init_repo(
    root: Path, branch: str, user: tuple[str, str], files: dict[str, str], message: str
) -> None:
    """A new repository at ``root`` on ``branch``, committed as ``user`` (name, email),
    with ``files`` (path -> text) as its first commit (a scratch project)."""
    with git_errors(f"git init {root}"):
        repo = git.Repo.init(root, initial_branch=branch)
        with repo.config_writer() as cfg:
            cfg.set_value("user", "name", user[0])
            cfg.set_value("user", "email", user[1])
        for path, text in files.items():
            (root / path).write_text(text)
        repo.index.add(list(files))
        repo.index.commit(message)


def git_answer(repo: git.Repo, *args: str) -> str | None:
    """``git ARGS``'s output in ``repo``, or None when git fails: a question whose "no" is an
    exit status, not an error."""
    status, out, _ = repo.git.execute(
        ["git", *args], with_extended_output=True, with_exceptions=False
    )
    return out if status == 0 else None


def user_identity(repo: git.Repo) -> tuple[str, str] | None:
    """The user's ``user.name`` and ``user.email`` as git resolves them here, if both set."""
    out = git_answer(repo, "config", "--get-regexp", r"^user\.(name|email)$") or ""
    found = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    name, email = found.get("user.name"), found.get("user.email")
    return (name, email) if name and email else None


def git_command(
    root: Path, *args: str, timeout: float | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``git -C root ARGS`` as a plain process: what the quick commands (status, list,
    show, enqueue) read through, since importing GitPython costs more than they do.
    ``stdin`` is its input. Past ``timeout`` seconds git is killed: ``GitError``."""
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            input=stdin,
            capture_output=True,
            text=True,
            encoding="utf-8",  # git's bytes (file names, messages), whatever the locale says
            errors="replace",
            check=False,
            timeout=timeout,
        )
    except FileNotFoundError:
        raise ConfigError("git is not installed (or not on PATH); octopoid needs it") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args[-3:])} took over {timeout:g}s") from None

"""The project's checkout, asked through the ``git`` command (not GitPython): is it the top
of a work tree, which branch is checked out, does a branch exist.

Apart from ``intake`` (which checks a new task's base branch with them) so `octopoid init`
asks them without importing the state machine that creates tasks.
"""

from __future__ import annotations

from pathlib import Path

from ..git import core
from ..model.exceptions import ConfigError

HEADS = "refs/heads/"


def check_work_tree(root: Path) -> None:
    """Refuse a project that is not the top of a git work tree: every attempt would fail."""
    found = core.git_command(root, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        said = " ".join(found.stderr.split()) or f"exit status {found.returncode}"
        raise ConfigError(
            f"{root} is not a git work tree (git says: {said}); octopoid runs each task on "
            "a git branch: run `git init` there first"
        )
    _refuse_below_top(root, found.stdout.strip())


def _refuse_below_top(root: Path, top_text: str) -> None:
    top = Path(top_text).resolve()
    if top != root.resolve():
        raise ConfigError(
            f"{root} is inside the git work tree {top}: run octopoid at the top of it"
        )


def work_tree_branch(root: Path) -> str | None:
    """``check_work_tree``, then ``current_branch`` (`octopoid init`): one git process where
    HEAD is a branch with a commit, or detached; two, as apart, for anything else (a branch
    before its first commit). A git process is ~3 ms of a command's start."""
    found = core.git_command(root, "rev-parse", "--show-toplevel", "--symbolic-full-name", "HEAD")
    top, _, ref = found.stdout.strip().partition("\n")
    if found.returncode == 0 and (ref == "HEAD" or ref.startswith(HEADS)):
        _refuse_below_top(root, top)
        return None if ref == "HEAD" else ref.removeprefix(HEADS)
    check_work_tree(root)
    return current_branch(root)


def head_branch(root: Path) -> str | None:
    """The branch checked out in ``root`` if it has a commit (so it exists), from one git
    process; None for anything else (detached, a branch before its first commit), which
    ``current_branch`` and ``branch_exists`` then tell apart (`octopoid enqueue`)."""
    found = core.git_command(root, "rev-parse", "--symbolic-full-name", "HEAD")
    ref = found.stdout.strip()
    return ref.removeprefix(HEADS) if found.returncode == 0 and ref.startswith(HEADS) else None


def current_branch(root: Path) -> str | None:
    """The branch checked out in ``root`` (even before its first commit); None if detached."""
    found = core.git_command(root, "symbolic-ref", "--quiet", "--short", "HEAD")
    name = found.stdout.strip()
    return name if found.returncode == 0 and name else None


def branch_exists(root: Path, name: str) -> bool:
    """Is there a local branch ``name`` (exactly that ref, not any revision that resolves)?"""
    found = core.git_command(root, "show-ref", "--verify", "--quiet", f"refs/heads/{name}")
    return found.returncode == 0

"""The project's checkout, asked through the ``git`` command (not GitPython): is it the top
of a work tree, which branch is checked out, does a branch exist.

Apart from ``intake`` (which checks a new task's base branch with them) so `octopoid init`
asks them without importing the state machine that creates tasks.
"""

from __future__ import annotations

from pathlib import Path

from ..git import core
from ..model.exceptions import ConfigError


def check_work_tree(root: Path) -> None:
    """Refuse a project that is not the top of a git work tree: every attempt would fail."""
    found = core.git_command(root, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        said = " ".join(found.stderr.split()) or f"exit status {found.returncode}"
        raise ConfigError(
            f"{root} is not a git work tree (git says: {said}); octopoid runs each task on "
            "a git branch: run `git init` there first"
        )
    top = Path(found.stdout.strip()).resolve()
    if top != root.resolve():
        raise ConfigError(
            f"{root} is inside the git work tree {top}: run octopoid at the top of it"
        )


def current_branch(root: Path) -> str | None:
    """The branch checked out in ``root`` (even before its first commit); None if detached."""
    found = core.git_command(root, "symbolic-ref", "--quiet", "--short", "HEAD")
    name = found.stdout.strip()
    return name if found.returncode == 0 and name else None


def branch_exists(root: Path, name: str) -> bool:
    """Is there a local branch ``name`` (exactly that ref, not any revision that resolves)?"""
    found = core.git_command(root, "show-ref", "--verify", "--quiet", f"refs/heads/{name}")
    return found.returncode == 0

"""A scratch project for `octopoid demo`: a new repository, and its base's history after
the accepts. The demo is a face, and faces run no git themselves."""

from __future__ import annotations

from pathlib import Path

from ..git import core
from ..model.exceptions import GitError

BRANCH = "main"
USER = ("octopoid demo", "demo@octopoid.invalid")


def make_project(root: Path, files: dict[str, str]) -> None:
    """A repository at ``root`` on ``main`` whose first commit holds ``files``."""
    core.init_repo(root, BRANCH, USER, files, "a small project")


def history(root: Path) -> str:
    """``main``'s history as a graph (``git log --oneline --graph``)."""
    done = core.git_command(root, "log", "--oneline", "--graph", BRANCH)
    if done.returncode != 0:
        raise GitError(f"git log {BRANCH} failed: {' '.join(done.stderr.split())}")
    return done.stdout.rstrip("\n")

"""An agent's walls from outside: run a script where an agent runs (a real box on a clone),
and find what of a secret got past them into what octopoid writes or shows."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import git

from orchestrator.box import bwrap as walls
from orchestrator.box import clone
from orchestrator.box.bwrap import Mounts, command_line


def in_box(repo: git.Repo, dest: Path, script: str) -> str:
    """Run ``script`` where an agent runs: a box on the clone (which only works there)."""
    mounts = Mounts(dest, dest, (Path(repo.working_dir),), clone.object_mounts(repo), False)
    argv = command_line(walls.find_bwrap(), mounts, walls.probe()[1])
    who = {f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER")
           for key, value in (("NAME", "a"), ("EMAIL", "a@x"))}  # fmt: skip
    env = {"PATH": os.environ["PATH"], "HOME": "/tmp", **who}
    done = subprocess.run([*argv, "sh", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def leaked(texts: dict[str, str], secrets: list[str]) -> list[tuple[str, str]]:
    """(where, the secret's head) for every 12 characters of a secret found anywhere."""
    return [
        (where, secret[:12])
        for where, text in texts.items()
        for secret in secrets
        for i in range(0, max(1, len(secret) - 11), 4)
        if secret[i : i + 12] in text
    ]

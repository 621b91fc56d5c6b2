"""What an attempt may bring back and leave on disk: config.yaml's ``sandbox`` limits.

A branch is data an agent made, and data can be a bomb. Each bound is checked where it can
be checked first (docs/security.md, "What a read-back may bring"), and what it refuses
fails the attempt with the reason (``ReadBackRefused``), never reaching review.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.exceptions import GitError, OctopoidError

if TYPE_CHECKING:
    import git

PACKLIMIT = Path(__file__).with_name("packlimit.py")
#: Blobs larger than this are streamed by git, not held in memory whole, on both sides of
#: a read-back (the box's pack-objects, the user's index-pack).
STREAM_ABOVE = "32m"
RELAY_SAID = re.compile(r"octopoid refused the read-back: (.*?\(sandbox\.\w+\))")


class ReadBackRefused(OctopoidError):
    """What the attempt left is beyond a ``sandbox`` bound: the attempt fails with why."""

    exit_code = 1


@dataclass(frozen=True)
class Bounds:
    pack_bytes: int
    objects: int
    branch_bytes: int
    clone_bytes: int

    @classmethod
    def of(cls, cfg: dict) -> Bounds:
        """Each bound from its ``sandbox.max_<name>``."""
        return cls(**{f.name: cfg["sandbox"][f"max_{f.name}"] for f in fields(cls)})


def upload_pack(box: list[str], bounds: Bounds) -> str:
    """The ``--upload-pack`` command of a read-back: the boxed upload-pack behind the
    relay that holds it to ``max_pack_bytes`` and ``max_objects``."""
    relay = [sys.executable, "-I", "-S", str(PACKLIMIT), str(bounds.pack_bytes)]
    git_in_box = ["git", "-c", f"core.bigFileThreshold={STREAM_ABOVE}", "upload-pack"]
    return shlex.join([*relay, str(bounds.objects), "--", *box, *git_in_box])


def refused_by_relay(message: str) -> str | None:
    """The relay's reason inside a failed fetch's message, if the relay stopped it."""
    found = RELAY_SAID.search(message)
    return found.group(1) if found else None


def unpacked_size(repo: git.Repo, tip: str, staging: str, bounds: Bounds) -> str | None:
    """Why the objects ``tip`` brings beyond what the repository had (every ref but the
    read-back's ``staging`` ref) weigh too much unpacked, or None."""
    new = repo.git.execute(
        ["git", "rev-list", "--objects", "--no-object-names", tip, "--not",
         f"--exclude={staging}", "--all"],
    )  # fmt: skip
    done = subprocess.run(
        ["git", "--git-dir", repo.git_dir, "cat-file", "--batch-check=%(objectsize)"],
        input=new.encode(),
        capture_output=True,
    )
    if done.returncode != 0:
        raise GitError(f"git cat-file failed: {' '.join(done.stderr.decode().split())}")
    total = sum(int(size) for size in done.stdout.split())
    if total > bounds.branch_bytes:
        return (
            f"the branch brings {total} bytes of new objects unpacked, over "
            f"{bounds.branch_bytes} (sandbox.max_branch_bytes)"
        )
    return None


def disk_use(path: Path, stop_above: int) -> int:
    """Bytes the files under ``path`` take on disk (links not followed), counted until the
    sum passes ``stop_above`` (a clone of millions of files is not walked whole for that)."""
    total, todo = 0, [str(path)]
    while todo and total <= stop_above:
        try:
            entries = os.scandir(todo.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    todo.append(entry.path)
    return total


def clone_growth(clone: Path, at_start: int, bounds: Bounds) -> str | None:
    """Why ``clone``, which took ``at_start`` bytes on disk, grew too much, or None."""
    limit = at_start + bounds.clone_bytes
    if disk_use(clone, limit) <= limit:
        return None
    grown = f"grew by over {bounds.clone_bytes} bytes on disk (sandbox.max_clone_bytes)"
    return f"the attempt's clone {grown}"

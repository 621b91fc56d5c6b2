"""The task's own clone: made from the user's repository, read back as data, removed.

It borrows the user's objects through git's alternates, pointing where a box binds them
read-only (``OBJECTS_INSIDE``). Octopoid runs git in it only while making it; afterwards
its hooks, config, refs and HEAD are the agent's, and the work comes back through a boxed
``git upload-pack`` (docs/security.md, "``sandbox: bwrap``: walls").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..base.fsutil import remove_tree
from ..base.lazy import lazy_import
from ..git import branches, core
from ..model.tasks import task_label
from .bounds import (
    STREAM_ABOVE,
    Bounds,
    ReadBackRefused,
    refused_by_relay,
    unpacked_size,
    upload_pack,
)
from .bwrap import OBJECTS_INSIDE

git = lazy_import("git")

HEAD_BYTES = 256  # a HEAD file holds one ref name or object id


def objects_dirs(repo: git.Repo) -> list[Path]:
    """The user's object folder and every alternate it borrows from (absolute, resolved)."""
    found: list[Path] = []
    todo = [Path(repo.common_dir, "objects").resolve()]
    while todo:
        folder = todo.pop()
        if folder in found or not folder.is_dir():
            continue
        found.append(folder)
        try:
            lines = (folder / "info" / "alternates").read_text().splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            continue
        todo += [(folder / line.strip()).resolve() for line in lines if line.strip()[:1] not in "#"]
    return found


def object_mounts(repo: git.Repo) -> tuple[tuple[Path, Path], ...]:
    """Read-only binds a box needs to read the clone's history: the user's objects where the
    clone's alternates point, and what those borrow from at their own paths."""
    first, *rest = objects_dirs(repo)
    return ((first, OBJECTS_INSIDE), *((p, p) for p in rest))


def make(repo: git.Repo, task_id: str, base: str, base_sha: str, dest: Path) -> None:
    """Clone the task's branch from the user's repository into ``dest`` (made anew), with
    ``base`` at ``base_sha`` as ``origin/<base>``."""
    branch = branches.branch_for(task_id)
    remove_tree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    flags = ["--quiet", "--shared", "--no-tags", "--single-branch", "--template="]
    with core.git_errors(f"git clone --shared {branch}"):
        repo.git.clone(*flags, "--branch", branch, repo.working_dir, str(dest))
    base_ref = dest / ".git" / "refs" / "remotes" / "origin" / base  # a new clone: plain data
    base_ref.parent.mkdir(parents=True, exist_ok=True)
    base_ref.write_text(f"{base_sha}\n")
    alternates = dest / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(f"{OBJECTS_INSIDE}\n")


def read_back(repo: git.Repo, task_id: str, clone: Path, box: list[str], bounds: Bounds) -> str:
    """Fetch the clone's ``agent/TASK-<id>`` into the user's repository as data; its commit.

    ``box`` is the bwrap command line of a read-only box without network that shows the
    clone at its own path. ``GitError`` when the clone has no such branch any more;
    ``ReadBackRefused`` when what it holds is beyond ``bounds`` (the relay stops the fetch
    at ``max_pack_bytes`` or ``max_objects``; ``max_branch_bytes`` is judged once fetched,
    before anything points at it).
    """
    branch = branches.branch_for(task_id)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
        "LANG": "C",
        **core.HOOKS_OFF,
    }
    staging = f"refs/octopoid/fetched/{task_label(task_id)}"
    with core.repo_admin_lock(), core.git_errors(f"reading {branch} back from its clone"):
        try:
            repo.git.execute(
                [
                    "git",
                    "-c", "fetch.fsckObjects=true",
                    "-c", "maintenance.auto=false",
                    "-c", "gc.auto=0",
                    "-c", "protocol.version=2",  # the relay reads the pack's header
                    "-c", f"core.bigFileThreshold={STREAM_ABOVE}",
                    "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                    "--upload-pack", upload_pack(box, bounds),
                    str(clone),
                    f"+refs/heads/{branch}:{staging}",
                ],
                env=env,
            )  # fmt: skip
        except git.GitCommandError as exc:
            why = refused_by_relay(str(exc.stderr))
            if why is not None:
                raise ReadBackRefused(why) from None
            raise
        sha = repo.git.rev_parse("--verify", f"{staging}^{{commit}}")
        try:
            too_big = unpacked_size(repo, sha, staging, bounds)
        finally:
            repo.git.update_ref("-d", staging)
    if too_big is not None:
        raise ReadBackRefused(too_big)
    return sha


def head_of(clone: Path) -> str | None:
    """What the clone's HEAD names, read as data (no link followed): ``refs/heads/x`` or an
    object id; None when it cannot be read."""
    try:
        git_dir = os.lstat(clone / ".git")
        if not stat.S_ISDIR(git_dir.st_mode):
            return None
        fd = os.open(clone / ".git" / "HEAD", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, HEAD_BYTES).decode("ascii", errors="replace").strip()
    finally:
        os.close(fd)
    return text.removeprefix("ref: ").strip() or None

"""What an agent may not change in the repository, checked around every attempt.

An agent's worktree shares the repository's hooks, config, ``info/`` and refs with the
user's checkout, so an agent could plant a hook that octopoid's merge would run, or move
``main`` past review. Before an attempt octopoid snapshots all of that; after it (once every
process of the attempt is dead) it compares, puts back whatever changed, keeps what it
displaced (files under ``runtime/containment/``, refs under ``refs/octopoid/displaced/``)
and fails the attempt with the reason in the notes.

Not every change is the agent's. Exempt: the agent's own branch; remote-tracking refs and
the stash; changes octopoid itself journalled (other tasks' branches made and removed, an
accept's merge); and a branch checked out in another worktree whose own HEAD log ends at
the branch's new tip, which is what a commit, merge or reset made *in* that worktree
leaves (the user committing in their checkout, another task's agent in its own). A ref
moved from elsewhere (``git update-ref``, ``git branch -f``) leaves no such entry.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import config
from .fsutil import atomic_write
from .tasks import task_label

if TYPE_CHECKING:
    import git

PROTECTED = ("config", "hooks", "info")  # in the common git dir: what can run code
EXEMPT_PREFIXES = ("refs/remotes/", "refs/octopoid/", "refs/stash")
JOURNAL = "own-ref-changes.log"
JOURNAL_TRIM_BYTES = 1 << 20


@dataclass
class Snapshot:
    """The protected state of a repository at the start of an attempt."""

    taken: float
    files: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # path -> (mode, data)
    refs: dict[str, str] = field(default_factory=dict)  # refname -> object id


def common_dir(repo: git.Repo) -> Path:
    return Path(repo.common_dir).resolve()


def own_ref(task_id: str) -> str:
    return f"refs/heads/agent/{task_label(task_id)}"


def take(repo: git.Repo, task_id: str) -> Snapshot:
    snap = Snapshot(time.time())
    base = common_dir(repo)
    for name in PROTECTED:
        snap.files.update(_read_tree(base, base / name))
    snap.refs = _refs(repo, task_id)
    return snap


def _read_tree(base: Path, top: Path) -> dict[str, tuple[int, bytes]]:
    """Every file (and symlink, as its target) at or under ``top``, keyed by path."""
    out: dict[str, tuple[int, bytes]] = {}
    paths = [top] if not top.is_dir() or top.is_symlink() else sorted(top.rglob("*"))
    for path in paths:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        rel = str(path.relative_to(base))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = (st.st_mode, os.readlink(path).encode())
        elif stat.S_ISREG(st.st_mode):
            out[rel] = (st.st_mode, path.read_bytes())
    return out


def _refs(repo: git.Repo, task_id: str) -> dict[str, str]:
    mine = own_ref(task_id)
    lines = repo.git.for_each_ref("--format=%(objectname) %(refname)").splitlines()
    refs = dict(reversed(line.split(" ", 1)) for line in lines if line)
    return {r: sha for r, sha in refs.items() if r != mine and not r.startswith(EXEMPT_PREFIXES)}


def check_and_restore(repo: git.Repo, task_id: str, attempt: int, snap: Snapshot) -> list[str]:
    """Put back what changed since ``snap``; one line per breach, for the notes."""
    keep = config.get_orchestrator_dir() / "containment" / task_label(task_id) / str(attempt)
    breaches = _restore_files(common_dir(repo), snap, keep)
    breaches += _restore_refs(repo, task_id, attempt, snap)
    return breaches


def _restore_files(base: Path, snap: Snapshot, keep: Path) -> list[str]:
    now: dict[str, tuple[int, bytes]] = {}
    for name in PROTECTED:
        now.update(_read_tree(base, base / name))
    breaches = []
    for rel in sorted(now.keys() | snap.files.keys()):
        if now.get(rel) == snap.files.get(rel):
            continue
        path = base / rel
        if rel in now:  # keep what is displaced: it may be someone's own edit
            kept = keep / rel
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(now[rel][1])
            path.unlink()
        if rel in snap.files:
            mode, data = snap.files[rel]
            path.parent.mkdir(parents=True, exist_ok=True)
            if stat.S_ISLNK(mode):
                os.symlink(data.decode(), path)
            else:
                atomic_write(path, data, keep_mode=False)
                os.chmod(path, stat.S_IMODE(mode))
        what = (
            "changed" if rel in now and rel in snap.files else "added" if rel in now else "removed"
        )
        breaches.append(f"the agent {what} .git/{rel}; octopoid put it back")
    return breaches


def _restore_refs(repo: git.Repo, task_id: str, attempt: int, snap: Snapshot) -> list[str]:
    now = _refs(repo, task_id)
    own = _journalled_since(snap.taken)
    breaches = []
    for ref in sorted(now.keys() | snap.refs.keys()):
        old, new = snap.refs.get(ref), now.get(ref)
        if old == new or own.get(ref, "") == (new or "-") or _made_in_its_worktree(repo, ref, new):
            continue
        if new is not None:
            keep = f"refs/octopoid/displaced/{task_label(task_id)}/{attempt}/{ref}"
            repo.git.update_ref(keep, new)
        if old is None:
            repo.git.update_ref("-d", ref, new)
            breaches.append(f"the agent created {ref}; octopoid removed it (kept as {keep})")
        else:
            repo.git.update_ref(ref, old)
            moved = "deleted" if new is None else "moved"
            kept = "" if new is None else f" (its new value is kept as {keep})"
            breaches.append(f"the agent {moved} {ref}; octopoid put it back{kept}")
    return breaches


def _made_in_its_worktree(repo: git.Repo, ref: str, new: str | None) -> bool:
    """Did a commit, merge or reset in a worktree that has ``ref`` checked out move it?"""
    if new is None or not ref.startswith("refs/heads/"):
        return False
    base = common_dir(repo)
    for line in repo.git.worktree("list", "--porcelain").split("\n\n"):
        fields = dict(f.split(" ", 1) for f in line.splitlines() if " " in f)
        if fields.get("branch") != ref:
            continue
        gitdir = _worktree_gitdir(base, Path(fields["worktree"]))
        if _last_log_entry(gitdir / "logs" / "HEAD") == new:
            return True
    return False


def _worktree_gitdir(base: Path, worktree: Path) -> Path:
    """The admin dir of a worktree: the common dir for the main one, else ``worktrees/<x>``."""
    dot_git = worktree / ".git"
    if dot_git.is_file():
        pointer = dot_git.read_text().strip().removeprefix("gitdir: ")
        return (worktree / pointer).resolve()
    return base


def _last_log_entry(log: Path) -> str | None:
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            last = f.read().splitlines()[-1:]
    except (FileNotFoundError, IndexError):
        return None
    return last[0].split(b" ")[1].decode() if last and b" " in last[0] else None


def journal_own_change(ref: str, new: str | None) -> None:
    """Record a ref octopoid itself just changed, so no attempt's check takes it for a breach.

    Callers hold the repository admin lock. Entries older than any attempt can last
    (``MAX_SECONDS``) are dropped when the journal grows past ``JOURNAL_TRIM_BYTES``.
    """
    path = config.get_orchestrator_dir() / "containment" / JOURNAL
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{time.time():.6f} {ref} {new or '-'}\n")
    if path.stat().st_size > JOURNAL_TRIM_BYTES:
        keep = _journal_lines(time.time() - config.MAX_SECONDS)
        atomic_write(path, "".join(f"{line}\n" for line in keep))


def _journal_lines(since: float) -> list[str]:
    path = config.get_orchestrator_dir() / "containment" / JOURNAL
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [line for line in lines if line.count(" ") == 2 and float(line.split()[0]) >= since]


def _journalled_since(since: float) -> dict[str, str]:
    """ref -> the value octopoid last gave it, for changes since ``since`` (a second's slack)."""
    return {ref: new for _, ref, new in (line.split(" ") for line in _journal_lines(since - 1))}

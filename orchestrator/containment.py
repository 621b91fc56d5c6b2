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
import shutil
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
    worktrees: set[str] = field(default_factory=set)  # paths of the worktrees there were


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
    snap.worktrees = set(_worktrees(repo))
    return snap


def _read_tree(base: Path, top: Path) -> dict[str, tuple[int, bytes]]:
    """Every file (and symlink, as its target) at or under ``top``, keyed by path.

    An unreadable file is recorded by its mode alone, so a change to it still shows.
    """
    out: dict[str, tuple[int, bytes]] = {}
    paths = [top] if not top.is_dir() or top.is_symlink() else sorted(top.rglob("*"))
    for path in paths:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        rel = str(path.relative_to(base))
        try:
            if stat.S_ISLNK(st.st_mode):
                out[rel] = (st.st_mode, os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                out[rel] = (st.st_mode, path.read_bytes())
        except OSError:
            out[rel] = (st.st_mode, b"\0unreadable")
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
    breaches += _restore_worktrees(repo, snap)
    return breaches


def _restore_files(base: Path, snap: Snapshot, keep: Path) -> list[str]:
    now: dict[str, tuple[int, bytes]] = {}
    for name in PROTECTED:
        now.update(_read_tree(base, base / name))
    breaches = []
    for rel in sorted(now.keys() | snap.files.keys()):
        if now.get(rel) == snap.files.get(rel):
            continue
        what = (
            "changed" if rel in now and rel in snap.files else "added" if rel in now else "removed"
        )
        try:
            _put_back(base / rel, now.get(rel), snap.files.get(rel), keep / rel)
        except OSError as exc:  # reported, and the rest is still put back
            breaches.append(f"the agent {what} .git/{rel}; octopoid could not put it back: {exc}")
            continue
        breaches.append(f"the agent {what} .git/{rel}; octopoid put it back")
    return breaches


def _put_back(
    path: Path, now: tuple[int, bytes] | None, then: tuple[int, bytes] | None, kept: Path
) -> None:
    """Keep what is at ``path`` under ``kept`` (it may be someone's own edit), then write
    back what was there (or nothing). Whatever stands in the way, a directory included, is
    moved aside first."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    if now is not None:
        kept.write_bytes(now[1])
    if os.path.lexists(path):
        aside = kept.with_name(kept.name + ".displaced")
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(path, aside)
        if not os.path.isdir(aside):
            os.unlink(aside)
    if then is not None:
        mode, data = then
        path.parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISLNK(mode):
            os.symlink(data.decode(), path)
        else:
            atomic_write(path, data, keep_mode=False)
            os.chmod(path, stat.S_IMODE(mode))


def _restore_refs(repo: git.Repo, task_id: str, attempt: int, snap: Snapshot) -> list[str]:
    now = _refs(repo, task_id)
    own = _journalled_since(snap.taken)
    breaches = []
    for ref in sorted(now.keys() | snap.refs.keys()):
        old, new = snap.refs.get(ref), now.get(ref)
        exempt = own.get(ref, "") == (new or "-") or _made_in_its_worktree(repo, ref, new, snap)
        if old == new or exempt:
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


def _worktrees(repo: git.Repo) -> dict[str, str | None]:
    """Every worktree's path and the branch it has checked out."""
    out = {}
    for block in repo.git.worktree("list", "--porcelain").split("\n\n"):
        fields = dict(f.split(" ", 1) for f in block.splitlines() if " " in f)
        if "worktree" in fields:
            out[fields["worktree"]] = fields.get("branch")
    return out


def _made_in_its_worktree(repo: git.Repo, ref: str, new: str | None, snap: Snapshot) -> bool:
    """Did a commit, merge or reset in a worktree that has ``ref`` checked out move it?

    Only worktrees that were there before the attempt (or octopoid's own task worktrees)
    count. A task worktree counts by its HEAD log; another (the user's checkout) also needs
    its index to hold the new tip's tree, which a real commit leaves and a ref moved from
    elsewhere (``update-ref``, ``reset --soft``, even run from inside it) does not.
    """
    if new is None or not ref.startswith("refs/heads/"):
        return False
    base, tasks = common_dir(repo), config.get_worktrees_dir().resolve()
    for path, branch in _worktrees(repo).items():
        ours = tasks in Path(path).resolve().parents
        if branch != ref or not (ours or path in snap.worktrees):
            continue
        if _last_log_entry(_worktree_gitdir(base, Path(path)) / "logs" / "HEAD") != new:
            continue
        if ours or _index_holds(repo, path, new):
            return True
    return False


def _index_holds(repo: git.Repo, worktree: str, commit: str) -> bool:
    status = repo.git.execute(
        ["git", "-C", worktree, "diff", "--cached", "--quiet", commit],
        with_exceptions=False,
        with_extended_output=True,
    )[0]
    return status == 0


def _restore_worktrees(repo: git.Repo, snap: Snapshot) -> list[str]:
    """A worktree the agent added outside octopoid's (a place to move branches from) goes."""
    tasks = config.get_worktrees_dir().resolve()
    breaches = []
    for path in _worktrees(repo).keys() - snap.worktrees:
        if tasks in Path(path).resolve().parents:
            continue  # another task started meanwhile
        repo.git.worktree("remove", "--force", path)
        breaches.append(f"the agent added the worktree {path}; octopoid removed it")
    return breaches


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

"""``sandbox: none``: what an agent may not change in the user's repository, best effort.

The worktree shares the repository's hooks, config, ``info/`` and refs with the user's
checkout: snapshotted to disk before the agent starts, compared and put back once every
process of the attempt is dead (or its runner is found dead), what was displaced kept
(docs/security.md, "``sandbox: none``"). Whose change it was is read from git's own
data, never from a file the agent can write:

- hooks, config and ``info/``: any change is the agent's (octopoid changes none of them);
- refs: the task's own branch, other tasks' ``agent/`` branches, remote-tracking refs,
  ``refs/octopoid/`` and the stash are free. Any other ref may move forward or be made
  (the user committing, an accept merging) unless what it gained is unreviewed agent
  work: one of this attempt's commits (committed as its ``GIT_COMMITTER_EMAIL``, or on
  its branch) or another attempt's whose task is not accepted (every attempt commits as
  ``TASK-<id>@agents.octopoid.invalid``). A ref deleted or rewound is put back, to its
  value at the snapshot less unreviewed commits at its tip, so attempts running at once
  cannot launder each other's work through their snapshots.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config
from ..base.fsutil import atomic_write
from ..base.processes import ProcessId
from ..git import branches, core
from ..model.tasks import TaskState, task_label
from ..queue.store import get_store
from ..queue.task_notes import add_notes_section

if TYPE_CHECKING:
    import git

PROTECTED = ("config", "hooks", "info")  # in the common git dir: what can run code
#: The committer every attempt's commits carry (``box.committer_email``).
AGENT_EMAIL_RE = re.compile(r"TASK-([A-Za-z0-9][A-Za-z0-9_-]{0,63})@agents\.octopoid\.invalid")
FREE_PREFIXES = ("refs/remotes/", "refs/octopoid/", "refs/stash", "refs/heads/agent/")


@dataclass
class Snapshot:
    """The protected state of the repository when an attempt started, and whose it is."""

    task_id: str  # the bare id
    attempt: int
    start: str  # the task branch's tip before the agent ran
    committer: str  # GIT_COMMITTER_EMAIL of the attempt's processes
    owner: dict[str, str]  # the runner (ProcessId headers): alive means not ours to check
    files: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # path -> (mode, data)
    refs: dict[str, str] = field(default_factory=dict)  # refname -> object id
    worktrees: list[str] = field(default_factory=list)  # paths of the worktrees there were

    @property
    def path(self) -> Path:
        return folder(self.task_id) / f"{self.attempt}.json"


def folder(task_id: str) -> Path:
    return config.get_orchestrator_dir() / "containment" / task_label(task_id)


def common_dir(repo: git.Repo) -> Path:
    return Path(repo.common_dir).resolve()


def take(repo: git.Repo, task_id: str, attempt: int, start: str, committer: str) -> Snapshot:
    """Snapshot the repository for an attempt and write it to disk (fsynced) before the
    agent starts, so a runner killed at any moment still leaves it to be checked."""
    owner = {k: str(v) for k, v in ProcessId.of().headers().items()}
    snap = Snapshot(task_id, attempt, start, committer, owner)
    base = common_dir(repo)
    snap.files = _protected(base)
    snap.refs = _refs(repo)
    snap.worktrees = sorted(_worktrees(repo))
    snap.path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(snap)
    data["files"] = {k: [m, base64.b64encode(b).decode()] for k, (m, b) in snap.files.items()}
    atomic_write(snap.path, json.dumps(data))
    return snap


def load(path: Path) -> Snapshot | None:
    """A snapshot written by ``take``; None when it is unreadable (it is then dropped)."""
    try:
        data = json.loads(path.read_text())
        data["files"] = {k: (m, base64.b64decode(b)) for k, (m, b) in data["files"].items()}
        return Snapshot(**data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def orphaned() -> list[Path]:
    """Snapshots whose runner is gone: an attempt that ended without checking its work."""
    found = []
    for path in sorted((config.get_orchestrator_dir() / "containment").glob("TASK-*/*.json")):
        snap = load(path)
        owner = None if snap is None else ProcessId.from_headers(snap.owner)
        if owner is None or not owner.alive():
            found.append(path)
    return found


def _protected(base: Path) -> dict[str, tuple[int, bytes]]:
    """Every file (and symlink, as its target) of ``PROTECTED`` in ``base``, keyed by path.

    An unreadable file is recorded by its mode alone, so a change to it still shows.
    """
    out: dict[str, tuple[int, bytes]] = {}
    paths: list[Path] = []
    for top in (base / name for name in PROTECTED):
        paths += [top] if not top.is_dir() or top.is_symlink() else sorted(top.rglob("*"))
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


def _refs(repo: git.Repo) -> dict[str, str]:
    lines = repo.git.for_each_ref("--format=%(objectname) %(refname)").splitlines()
    refs = dict(reversed(line.split(" ", 1)) for line in lines if line)
    return {r: sha for r, sha in refs.items() if not r.startswith(FREE_PREFIXES)}


def check_and_restore(repo: git.Repo, snap: Snapshot) -> list[str]:
    """Put back what the agent changed since ``snap``; one line per breach, for the notes.
    The snapshot file is removed once done. Callers hold ``repo_admin_lock``."""
    keep = folder(snap.task_id) / str(snap.attempt)
    breaches = _restore_files(common_dir(repo), snap, keep)
    breaches += _restore_refs(repo, snap)
    breaches += _restore_worktrees(repo, snap)
    snap.path.unlink(missing_ok=True)
    return breaches


def _restore_files(base: Path, snap: Snapshot, keep: Path) -> list[str]:
    now = _protected(base)
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


def _restore_refs(repo: git.Repo, snap: Snapshot) -> list[str]:
    """Put back every protected ref that gained unreviewed agent work or lost other work.

    A ref that only gained commits nobody's attempt made (the user's, an accept's) moved
    on; one that lost only unreviewed work was cleaned up by another check. Otherwise it
    goes back to its value at the snapshot, less any unreviewed commits at its tip (another
    attempt running at once may have left some there before this one started)."""
    now = _refs(repo)
    unreviewed = _Unreviewed(repo, snap)
    breaches = []
    for ref in sorted(now.keys() | snap.refs.keys()):
        old, new = snap.refs.get(ref), now.get(ref)
        if old == new:
            continue
        since = [old] if old else [*snap.refs.values(), snap.start]
        gained = [c for c in _commits(repo, new, since) if unreviewed.whose(*c)] if new else []
        lost = _commits(repo, old, [new]) if old and new else _commits(repo, old, [], 1)
        if not gained and all(unreviewed.whose(*c) for c in lost):
            continue
        who = unreviewed.whose(*gained[0]) if gained else "the agent"
        breaches.append(_put_ref_back(unreviewed, ref, old, new, who))
    return breaches


def _put_ref_back(
    unreviewed: _Unreviewed, ref: str, old: str | None, new: str | None, who: str
) -> str:
    """Move ``ref`` back (keeping its new value under refs/octopoid/displaced/); one line
    saying ``who`` held work there and what was done."""
    repo, snap = unreviewed.repo, unreviewed.snap
    keep = f"refs/octopoid/displaced/{task_label(snap.task_id)}/{snap.attempt}/{ref}"
    kept = ""
    if new is not None:
        repo.git.update_ref(keep, new)
        kept = f" (kept as {keep})" if old is None else f" (its new value is kept as {keep})"
    target = unreviewed.clean_tip(old) if old else None
    if target is None:
        repo.git.update_ref("-d", ref)
        return f"{who} created {ref} with unreviewed work; octopoid removed it{kept}"
    repo.git.update_ref(ref, target)
    moved = "deleted" if new is None else "moved"
    return f"{who} {moved} {ref}; octopoid put it back{kept}"


class _Unreviewed:
    """Whose unreviewed work a commit is: this attempt's (on its branch, or committed as
    it), or another attempt's whose task is not accepted (committed as its agent)."""

    def __init__(self, repo: git.Repo, snap: Snapshot) -> None:
        self.repo, self.snap = repo, snap
        # the commits the attempt made on its own branch (whatever else it did with them)
        made = f"{snap.start}..refs/heads/{branches.branch_for(snap.task_id)}"
        self.ours = set((core.git_answer(repo, "rev-list", made) or "").split())
        self._tasks: dict[str, bool] = {}

    def whose(self, sha: str, email: str) -> str | None:
        if sha in self.ours or email == self.snap.committer:
            return "the agent"
        match = AGENT_EMAIL_RE.fullmatch(email)
        if match and not self._reviewed(match.group(1)):
            return f"{task_label(match.group(1))}'s agent"
        return None

    def _reviewed(self, task_id: str) -> bool:
        """Accepted, or being accepted (its merge is journaled before the task is done)."""
        if task_id not in self._tasks:
            store = get_store()
            where = store.locate(task_id)
            task = store.get(task_id) if where is TaskState.PROVISIONAL else None
            # an accept's journal (finishing.ACCEPT) is written before its merge
            accepting = task is not None and store.journals.get("accept", task.label) is not None
            marked = task is not None and not {"MERGED", "MERGING"}.isdisjoint(task.headers)
            self._tasks[task_id] = where is TaskState.DONE or accepting or marked
        return self._tasks[task_id]

    def clean_tip(self, sha: str) -> str | None:
        """``sha``, or its first ancestor that is no one's unreviewed work."""
        out = self.repo.git.log("--first-parent", "--format=%H %ce", sha, "--")
        for line in out.splitlines():
            commit, _, email = line.partition(" ")
            if not self.whose(commit, email):
                return commit
        return None


def _commits(
    repo: git.Repo, tip: str | None, since: list[str], limit: int = 0
) -> list[tuple[str, str]]:
    """(sha, committer email) of the commits ``tip`` has and none of ``since`` has (the
    newest ``limit`` of them, when given: a deleted ref is judged by its tip)."""
    if tip is None:
        return []
    most = [f"--max-count={limit}"] if limit else []
    out = core.git_answer(
        repo, "log", *most, "--format=%H %ce", tip, *(f"^{s}" for s in since), "--"
    )
    return [tuple(line.split(" ", 1)) for line in (out or "").splitlines()]


def _worktrees(repo: git.Repo) -> list[str]:
    listing = repo.git.worktree("list", "--porcelain").splitlines()
    return [line.removeprefix("worktree ") for line in listing if line.startswith("worktree ")]


def _restore_worktrees(repo: git.Repo, snap: Snapshot) -> list[str]:
    """A worktree the agent added outside octopoid's (a place to move branches from) goes."""
    tasks = config.get_worktrees_dir().resolve()
    breaches = []
    for path in set(_worktrees(repo)) - set(snap.worktrees):
        if tasks in Path(path).resolve().parents:
            continue  # another task started meanwhile
        with contextlib.suppress(core.git.GitCommandError):
            repo.git.worktree("remove", "--force", path)
        breaches.append(f"the agent added the worktree {path}; octopoid removed it")
    return breaches


def settle_orphans() -> list[tuple[str, int, list[str]]]:
    """Check every snapshot whose runner is gone: (task id, attempt, breaches) each. What
    was put back goes into the task's notes, so its next attempt and its reviewer read it."""
    done = []
    for path in orphaned():
        snap = load(path)
        if snap is None:
            path.unlink(missing_ok=True)
            continue
        with core.repo_admin_lock():
            if not path.exists():
                continue  # another process settled it meanwhile
            breaches = check_and_restore(core.open_repo(), snap)
        if breaches:
            heading = f"Containment — attempt {snap.attempt} (its runner had died)"
            add_notes_section(snap.task_id, heading, "\n".join(breaches))
        done.append((snap.task_id, snap.attempt, breaches))
    return done

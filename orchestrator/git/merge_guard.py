"""What a merge would destroy in the person's checkout: files git does not track there.

git treats an ignored file as expendable and a directory as something it may replace, and
``git merge --no-overwrite-ignore`` does not stop it, so every merge octopoid runs where the
person works, and the pre-check before review, ask this module first. docs/security.md ("A
branch is data") says what is refused and why; it is judged from git's data (the paths the
branch writes against what the checkout holds untracked), not from a list of names.
"""

from __future__ import annotations

import bisect
import os
import stat
import subprocess
from pathlib import Path

from .. import config
from ..base.lazy import lazy_import
from ..model.exceptions import ConfigError, GitError, MergeRefused

SHOWN = 5  # paths named in a one-line reason
hashlib = lazy_import("hashlib")  # OpenSSL's, for ``fingerprint`` only: not `octopoid checks`


def _git(root: Path, *args: str) -> list[str]:
    """``git -C root ARGS`` as NUL-separated names, unquoted and decoded as the file system
    would (``os.fsdecode``). fsmonitor off: no program the repository names runs (git
    runs no hook for these commands)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "-c", "core.fsmonitor=false", *args],
            capture_output=True,
            check=False,
        )
    except FileNotFoundError:
        raise ConfigError("git is not installed (or not on PATH); octopoid needs it") from None
    if done.returncode != 0:
        why = " ".join(done.stderr.decode("utf-8", "replace").split())
        raise GitError(f"git {' '.join(args[:2])} failed: {why or done.returncode}")
    return [os.fsdecode(name) for name in done.stdout.split(b"\0") if name]


def written_paths(root: Path, base: str, branch: str) -> list[str]:
    """Files, links and submodules the branch adds or changes since it left ``base``: what
    merging it writes into a checkout (deletions write nothing)."""
    return _git(
        root, "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--name-only", "-z",
        "--diff-filter=d", f"{base}...{branch}", "--",
    )  # fmt: skip


def untracked(checkout: Path) -> list[str]:
    """What ``checkout`` holds that git does not track, ignored files too: a wholly
    untracked directory is one entry ending in ``/`` (git does not look inside it)."""
    return _git(checkout, "ls-files", "-z", "--others", "--directory")


def replaced(checkout: Path, written: list[str], entries: list[str]) -> list[str]:
    """The ``entries`` of ``checkout`` (``untracked``) that writing ``written`` would delete
    or replace, sorted; an entry ending in ``/`` is a directory."""
    files = {e for e in entries if not e.endswith("/")}
    dirs = {e for e in entries if e.endswith("/")}
    ordered = sorted(entries)
    hits: set[str] = set()
    for path in written:
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent in files:  # an untracked file or link must become a directory
                hits.add(parent)
                break
            if f"{parent}/" in dirs:  # inside an untracked directory: look at what is there
                hits.update(_inside(checkout, parts[:i], parts[i:]))
                break
        else:
            if path in files or f"{path}/" in dirs:
                hits.add(path if path in files else f"{path}/")
            start = bisect.bisect_left(ordered, f"{path}/")  # a file where entries lie beneath
            for entry in ordered[start:]:
                if not entry.startswith(f"{path}/"):
                    break
                hits.add(entry)
    return sorted(hits)


def _inside(checkout: Path, above: list[str], below: list[str]) -> list[str]:
    """Within an untracked directory git did not list: the first thing on the way to the
    written path that is in the way (a file or link where a directory must be, or the
    path itself), if any."""
    parts = list(above)
    for i, name in enumerate(below):
        parts.append(name)
        try:
            mode = os.lstat(checkout.joinpath(*parts)).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return []
        last = i == len(below) - 1
        if last or not stat.S_ISDIR(mode):
            return ["/".join(parts) + ("/" if stat.S_ISDIR(mode) else "")]
    return []


def runtime_writes(root: Path, written: list[str]) -> list[str]:
    """Paths of ``written`` at, inside or above octopoid's runtime folder (its state: a
    merge must neither plant files there nor turn it or a parent into something else)."""
    try:
        runtime = config.get_orchestrator_dir().relative_to(root).as_posix()
    except ValueError:  # the runtime lives outside this checkout
        return []
    inside = f"{runtime}/"
    return [p for p in written if f"{p}/".startswith(inside) or inside.startswith(f"{p}/")]


class Checkouts:
    """The person's checkouts that merging into a base writes (the project's, and the
    base's own where it is checked out elsewhere), each listed once however many
    branches are judged against it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._entries: dict[Path, list[str]] = {}
        self._where: dict[str, Path] | None = None

    def of(self, base: str) -> list[Path]:
        if self._where is None:
            self._where = _checked_out(self.root)
        name = base.removeprefix("refs/heads/")
        if name.startswith("refs/remotes/"):  # a remote's base: its local branch is checked out
            name = name.split("/", 3)[-1]
        other = self._where.get(name)
        return [self.root] + ([other] if other is not None and other != self.root else [])

    def entries(self, checkout: Path) -> list[str]:
        if checkout not in self._entries:
            self._entries[checkout] = untracked(checkout)
        return self._entries[checkout]

    def fingerprint(self, base: str) -> str:
        """Changes when what the checkouts hold untracked changes (a cache key's part)."""
        digest = hashlib.sha256()
        for checkout in self.of(base):
            digest.update(f"{checkout}\0{chr(0).join(self.entries(checkout))}\1".encode())
        return digest.hexdigest()[:16]

    def refused(self, base: str, branch: str) -> list[str]:
        """What merging ``branch`` into ``base`` would replace in a checkout, or write into
        octopoid's runtime; [] when nothing."""
        written = written_paths(self.root, base, branch)
        if not written:
            return []
        found = set(runtime_writes(self.root, written))
        for checkout in self.of(base):
            found.update(replaced(checkout, written, self.entries(checkout)))
        return sorted(p for p in found if f"{p}/" not in found)  # a directory named once


def replaced_in(checkout: Path, old: str, new: str) -> list[str]:
    """What moving ``checkout`` from ``old`` to ``new`` (a fast-forward) would replace."""
    return replaced(checkout, written_paths(checkout, old, new), untracked(checkout))


def _checked_out(root: Path) -> dict[str, Path]:
    """{branch: the worktree that has it checked out}, octopoid's own worktrees left out.
    A checkout with no linked worktree (git keeps one folder each in ``.git/worktrees``)
    has none to list: no git process then, only the checkout itself is written."""
    if (root / ".git").is_dir() and not any((root / ".git" / "worktrees").glob("*")):
        return {}
    mine = config.get_worktrees_dir()
    found, current = {}, None
    for field in _git(root, "worktree", "list", "--porcelain", "-z"):
        if field.startswith("worktree "):
            current = Path(field.removeprefix("worktree "))
        elif field.startswith("branch refs/") and current and mine not in current.parents:
            found[field.removeprefix("branch refs/heads/")] = current
    return found


def reason(paths: list[str]) -> str:
    """One line: why a branch is refused (status, list, the page, History)."""
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    named = ", ".join(paths[:SHOWN]) + more
    return f"merging it would replace or write what git does not track in the checkout: {named}"


def refuse_replacing(root: Path, base: str, branch: str) -> None:
    """``MergeRefused`` naming every path, before a merge, checkout or fast-forward of
    ``branch`` into ``base``; nothing is changed."""
    paths = Checkouts(root).refused(base, branch)
    if paths:
        raise MergeRefused(
            f"{branch} is refused: merging it would delete or replace files that git does not "
            "track in your checkout (ignored or untracked: yours, or octopoid's state), or "
            "write into octopoid's runtime:\n"
            + "".join(f"  {p}\n" for p in paths)
            + "nothing was merged. Reject the task saying the branch must not add these paths"
        )

"""Git through GitPython: task branches and worktrees, commit counts, merges.

git's own error text is never swallowed: every failure becomes a ``GitError`` carrying it.
Operations that change the repository's administrative state (worktrees, branches, refs)
are serialised with a lock, since two runners may start at the same moment.
Every git command octopoid runs has hooks and fsmonitor off (``HOOKS_OFF``): an agent may
have planted either, and only ``merge.run_hooks: true`` lets the user's own merge hooks run.

With ``git.remote`` set, branches travel between machines through that remote: an attempt
starts from its task's recorded tip (``task_tips``) or the remote's base, pushes its branch
after with a lease on the remote's tip it started from, and an accept merges onto the
remote's base and lands by a plain push, which the remote refuses if the base moved
meanwhile (a compare-and-swap: the accept fetches and merges again). A task's branch
travels as ``refs/octopoid/tasks/TASK-<id>``, which no forge runs CI on; it becomes a
branch there only when put up for review on a forge (``on_remote``).

Its size: 45 functions on five ideas (branches, merges, the remote, history, diffs), to be
split by idea; kept whole in the move so that tests patching its functions by module and
every caller move in one step.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from .. import config
from ..base.fsutil import remove_tree
from ..base.lazy import lazy_import
from ..base.locks import FileMutex
from ..model import defaults
from ..model.exceptions import ConfigError, GitError, MergeRefused, PushRefused, RemoteMoved
from ..model.tasks import ID_RE, task_label
from . import merge_guard

git = lazy_import("git")  # GitPython: only commands that use git pay for it

MERGE_STRATEGIES = ("merge", "squash", "ff-only", "none")
#: Config given to every git command octopoid runs (git >= 2.31 reads it from the env).
HOOKS_OFF = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": os.devnull,
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
}


PUSH_TRIES = 10  # a push refused because the remote's base moved: fetch, merge again
TASK_BRANCHES = "agent/"  # a task's branch is agent/TASK-<id>
#: Where a task's branch travels on ``git.remote``: refs no forge takes for a branch.
TASK_REFS = "refs/octopoid/tasks/"
#: Where a task branch's tip octopoid moved away from is kept (``adopt``, a fresh retry).
REPLACED = "refs/octopoid/replaced/"


def full_ref(name: str) -> str:
    """A branch name as its ref; a full ref (``refs/remotes/origin/main``) as it is."""
    return name if name.startswith("refs/") else f"refs/heads/{name}"


def branch_for(task_id: str) -> str:
    return f"{TASK_BRANCHES}{task_label(task_id)}"


def worktree_for(task_id: str) -> Path:
    return config.get_worktrees_dir() / task_label(task_id)


def git_message(exc: git.GitError) -> str:
    text = (getattr(exc, "stderr", "") or getattr(exc, "stdout", "") or str(exc)).strip()
    text = text.removeprefix("stderr: ").strip().strip("'").strip()
    return " ".join(text.split()) or str(exc)


@contextmanager
def git_errors(action: str) -> Iterator[None]:
    try:
        yield
    except git.GitError as exc:  # also GitCommandNotFound: no git on PATH
        raise GitError(f"{action} failed: {git_message(exc)}") from None


@contextmanager
def repo_admin_lock() -> Iterator[None]:
    """Serialise worktree/branch/ref changes across processes."""
    lock_dir = config.get_worktrees_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    with FileMutex(lock_dir / ".git-admin.lock"):
        yield


def open_repo(path: Path | None = None, hooks: bool = False) -> git.Repo:
    """The project's repository (default: the project root); ``GitError`` if there is none.

    Its git commands run with hooks off unless ``hooks``.
    """
    where = path or config.find_project_root()
    try:
        repo = git.Repo(where)
        if not hooks:
            repo.git.update_environment(**HOOKS_OFF)
        return repo
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitError(f"{where} is not a git repository (run `git init` there first)") from None


def init_repo(
    root: Path, branch: str, user: tuple[str, str], files: dict[str, str], message: str
) -> None:
    """A new repository at ``root`` on ``branch``, committed as ``user`` (name, email),
    with ``files`` (path -> text) as its first commit (a scratch project)."""
    with git_errors(f"git init {root}"):
        repo = git.Repo.init(root, initial_branch=branch)
        with repo.config_writer() as cfg:
            cfg.set_value("user", "name", user[0])
            cfg.set_value("user", "email", user[1])
        for path, text in files.items():
            (root / path).write_text(text)
        repo.index.add(list(files))
        repo.index.commit(message)


def branch_exists(repo: git.Repo, name: str) -> bool:
    return f"refs/heads/{name}" in {ref.path for ref in repo.references}


def ensure_branch(repo: git.Repo, task_id: str, base: str) -> str:
    """Make ``agent/TASK-<id>`` from ``base`` unless it exists (a retry keeps earlier
    attempts' commits); its tip. Callers hold ``repo_admin_lock``."""
    branch = branch_for(task_id)
    tip = ref_tip(repo, branch)  # one git call where the branch is there (a retry)
    if tip is not None:
        return tip
    status, start, _ = repo.git.execute(
        ["git", "rev-parse", "-q", "--verify", f"{base}^{{commit}}"],
        with_extended_output=True,
        with_exceptions=False,
    )
    if status != 0:
        raise GitError(f"base branch '{base}' does not exist in {repo.working_dir}")
    with git_errors(f"git branch {branch} {base}"):
        # --no-track: a branch started from the remote's base must not write an
        # upstream into .git/config (a change another attempt's check would flag)
        repo.git.branch("--no-track", branch, start.strip())
    return start.strip()


def ensure_worktree(repo: git.Repo, task_id: str, base: str) -> Path:
    """The task's worktree on ``agent/TASK-<id>`` (``sandbox: none``); the branch is made
    from ``base`` the first time, so a retry keeps earlier attempts' commits."""
    path = worktree_for(task_id)
    with repo_admin_lock():
        if (path / ".git").is_file():
            return path
        remove_tree(path)  # a half-made worktree from a crash, or a sandboxed attempt's clone
        with git_errors("git worktree prune"):
            repo.git.worktree("prune")
        ensure_branch(repo, task_id, base)
        with git_errors(f"git worktree add {path} {branch_for(task_id)}"):
            repo.git.worktree("add", str(path), branch_for(task_id))
    return path


def user_identity(repo: git.Repo) -> tuple[str, str] | None:
    """The user's ``user.name`` and ``user.email`` as git resolves them here, if both set."""
    status, out, _ = repo.git.execute(
        ["git", "config", "--get-regexp", r"^user\.(name|email)$"],
        with_extended_output=True,
        with_exceptions=False,
    )
    found = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    name, email = found.get("user.name"), found.get("user.email")
    return (name, email) if status == 0 and name and email else None


def branch_tip(repo: git.Repo, name: str) -> str:
    """The commit ``name`` points at: a local branch, or a full ref (``refs/remotes/...``)."""
    with git_errors(f"git rev-parse {name}"):
        return repo.git.rev_parse("--verify", f"{full_ref(name)}^{{commit}}")


def ref_tip(repo: git.Repo, name: str) -> str | None:
    """The commit ``name`` (a branch or full ref) points at, or None where there is none."""
    status, out, _ = repo.git.execute(
        ["git", "rev-parse", "-q", "--verify", f"{full_ref(name)}^{{commit}}"],
        with_extended_output=True,
        with_exceptions=False,
    )
    return out.strip() if status == 0 else None


# --- branches through a remote (git.remote) -------------------------------------------------


def remote_name() -> str | None:
    """config.yaml's ``git.remote`` (checked to be a name): where branches travel, or None."""
    return config.load_config()["git"]["remote"]


def on_remote(branch: str, review: bool = False) -> str:
    """The ref ``branch`` has on ``git.remote``: the one place that names it. A base is a
    branch there. A task's branch travels as ``refs/octopoid/tasks/TASK-<id>``, a ref no
    forge takes for a branch, so no workflow or pipeline runs an attempt nobody reviewed;
    only once put up for review on a forge (``review``) is it the branch itself."""
    name = branch.removeprefix(TASK_BRANCHES)
    if review or name == branch or not name.startswith("TASK-"):
        return f"refs/heads/{branch}"
    return f"{TASK_REFS}{name}"


def remote_ref(remote: str, branch: str, review: bool = False) -> str:
    """Where this repository keeps what it fetched of the remote's ``branch``
    (``refs/remotes/<remote>/octopoid/tasks/TASK-<id>`` for a task's carried branch)."""
    there = on_remote(branch, review)
    return f"refs/remotes/{remote}/" + there.removeprefix("refs/heads/").removeprefix("refs/")


def _ls_remote(repo: git.Repo, remote: str, refs: list[str]) -> dict[str, str]:
    """{ref: commit} for those of the full ``refs`` the remote has."""
    with git_errors(f"git ls-remote {remote}"):
        listing = repo.git.ls_remote(remote, *refs)
    pairs = (line.split("\t", 1) for line in listing.splitlines() if "\t" in line)
    return {ref: sha for sha, ref in pairs if ref in refs}


def remote_heads(
    repo: git.Repo, remote: str, branches: list[str], review: bool = False
) -> dict[str, str]:
    """{branch: commit} for those of ``branches`` the remote has (``git ls-remote``); a
    task's branch as ``on_remote`` names it (``review``: its forge branch)."""
    wanted = {on_remote(b, review): b for b in branches}
    return {wanted[ref]: sha for ref, sha in _ls_remote(repo, remote, list(wanted)).items()}


def fetch_branches(
    repo: git.Repo, remote: str, branches: list[str], review: bool = False
) -> dict[str, str]:
    """Fetch those of ``branches`` the remote has into ``refs/remotes/<remote>/``; return
    {branch: commit} for them (a branch not pushed yet is simply absent).

    Under ``repo_admin_lock``: a fetch reads every worktree's HEAD, and one that
    ``git worktree add`` is making at that moment holds a placeholder (a "bad object").
    """
    found = remote_heads(repo, remote, branches, review)
    if found:
        specs = [f"+{on_remote(b, review)}:{remote_ref(remote, b, review)}" for b in found]
        with repo_admin_lock(), git_errors(f"git fetch {remote}"):
            repo.git.fetch("--no-tags", remote, *specs)
    return found


def adopt(
    repo: git.Repo, branch: str, sha: str, replace: bool = False, exact: bool = False
) -> bool:
    """Move the local ``branch`` to ``sha`` (another machine's work); True if it has it.

    Without ``replace`` only a fast-forward is made, and a branch checked out with changes
    is left alone (the user's base). With ``replace`` (a task's branch: the remote's copy is
    what the last attempt pushed) a diverged local tip is kept as
    ``refs/octopoid/replaced/<branch>`` and the task's worktree is reset to ``sha``; a local
    tip ahead of ``sha`` stays, unless ``exact`` (the tip an attempt recorded, and no other).
    Callers hold ``repo_admin_lock``.
    """
    ref = f"refs/heads/{branch}"
    tip = branch_tip(repo, branch) if branch_exists(repo, branch) else None
    if tip == sha:
        return True
    with git_errors(f"moving {branch} to {sha[:12]}"):
        if tip is not None and not exact and repo.is_ancestor(sha, tip):
            return True  # ahead of it already (work not pushed yet): nothing to take
        forward = tip is None or repo.is_ancestor(tip, sha)
        if not forward and not replace:
            return False
        if not forward:
            repo.git.update_ref(f"refs/octopoid/replaced/{branch}", tip)
        checkout = _checkout_of(repo, branch) if tip else None
        if checkout is not None:
            where = open_repo(checkout)
            if replace:
                where.git.reset("--hard", sha)
            elif where.is_dirty(untracked_files=False) or merge_guard.replaced_in(
                checkout, tip, sha
            ):
                return False
            else:
                where.git.merge("--ff-only", sha)
        else:
            repo.git.update_ref(ref, sha, tip or "")
    return True


def has_commit(repo: git.Repo, sha: str) -> bool:
    """Whether this repository holds commit ``sha``."""
    status, _, _ = repo.git.execute(
        ["git", "cat-file", "-e", f"{sha}^{{commit}}"],
        with_extended_output=True,
        with_exceptions=False,
    )
    return status == 0


def contains(repo: git.Repo, tip: str | None, sha: str | None) -> bool:
    """Whether commit ``tip`` has ``sha`` in its history (both held here)."""
    if not tip or not sha or not has_commit(repo, tip) or not has_commit(repo, sha):
        return False
    with git_errors(f"git merge-base --is-ancestor {sha[:12]} {tip[:12]}"):
        return repo.is_ancestor(sha, tip)


def fetch_commit(repo: git.Repo, remote: str, sha: str) -> bool:
    """Fetch commit ``sha`` by its id from ``remote`` unless it is here; whether it is."""
    if not has_commit(repo, sha):
        with repo_admin_lock(), suppress(git.GitCommandError):
            repo.git.fetch("--no-tags", "--no-write-fetch-head", remote, sha)
    return has_commit(repo, sha)


def push_task_branch(
    repo: git.Repo, remote: str, task_id: str, lease: str | None = None, review: bool = False
) -> None:
    """Publish the task's branch where ``on_remote`` says (``review``: as the branch a
    forge's pull request shows). With ``lease`` (the remote's tip the attempt started
    from, "" for none) it may replace what the remote has only if that is still there
    (``--force-with-lease``): an attempt's rebase reaches the remote, anyone else's push
    meanwhile refuses it. Without, a plain push: a stale copy cannot overwrite newer work.
    ``PushRefused`` when the remote said no."""
    branch = branch_for(task_id)
    there = on_remote(branch, review)
    guard = [] if lease is None else [f"--force-with-lease={there}:{lease}"]
    tip = branch_tip(repo, branch)
    try:
        repo.git.push("--porcelain", *guard, remote, f"{tip}:{there}")
    except git.GitCommandError as exc:
        said = getattr(exc, "stdout", "") or ""
        if "[remote rejected]" in said:
            raise PushRefused(_refused(remote, there, said)) from None
        if "[rejected]" in said:
            why = "stale info" if "stale info" in said else "non-fast-forward"
            raise RemoteMoved(
                f"{remote}'s {branch} holds commits this push would overwrite ({why}: "
                "someone else pushed to it); it was left as it is"
            ) from None
        raise GitError(f"git push {remote} {branch} failed: {git_message(exc)}") from None
    # what this machine knows the remote holds, whatever its fetch refspecs say: a poll
    # tells a push that was lost from one a person overwrote by it (forge/heads.py)
    with git_errors(f"git update-ref {remote_ref(remote, branch, review)}"):
        repo.git.update_ref(remote_ref(remote, branch, review), tip)


def _refused(remote: str, ref: str, said: str) -> str:
    """What a remote that refused ``ref`` itself said, and what to do about it."""
    why = said.split("[remote rejected]", 1)[1].splitlines()[0].strip(" ()")[:200]
    text = f"{remote} refused to update {ref} ({why or 'no reason given'})"
    if ref.startswith(TASK_REFS):
        text += (
            f": octopoid carries task branches under {TASK_REFS}, where no forge runs CI "
            "on them; let that remote take pushes there (docs/scale-out.md)"
        )
    return text


def delete_remote_branch(
    repo: git.Repo, remote: str, task_id: str, only: str | None = None
) -> None:
    """Remove the task's refs from the remote (its carried branch, and the branch a
    forge's pull request showed or an older octopoid pushed), those there. With ``only``
    (what was merged), only those it holds all of: a push since then stays. Each is
    deleted only while it is what was read (a lease), never a push made meanwhile."""
    branch = branch_for(task_id)
    there = _ls_remote(repo, remote, [on_remote(branch), on_remote(branch, review=True)])
    gone = {r: sha for r, sha in there.items() if only in (None, sha) or contains(repo, only, sha)}
    if gone:
        leases = [f"--force-with-lease={ref}:{sha}" for ref, sha in gone.items()]
        with git_errors(f"git push {remote} --delete {branch}"):
            repo.git.push(*leases, remote, "--delete", *gone)


def already_merged(repo: git.Repo, task_id: str, base: str, base_before: str) -> bool:
    """Did an accept merge the task into ``base`` since ``base_before``?

    True when the task branch's tip is in ``base`` (merge, fast-forward) or a commit on
    ``base`` since ``base_before`` carries the accept's message (squash).
    """
    branch = branch_for(task_id)
    with git_errors(f"git log {base}"):
        if branch_exists(repo, branch) and repo.is_ancestor(branch, base):
            return True
        subjects = repo.git.log("--format=%s", f"{base_before}..{full_ref(base)}").splitlines()
    return any(s.startswith(f"Merge {task_label(task_id)}: ") for s in subjects)


def commits_on_branch(repo: git.Repo, task_id: str, since: str, base: str | None = None) -> int:
    """Commits on the task's branch that ``since`` does not have (wherever HEAD went), nor
    ``base``: a merge of the base into the branch brings the base's commits, not new work."""
    exclude = [f"^{since}"] + ([f"^{full_ref(base)}"] if base else [])
    with git_errors(f"git rev-list {since}..{branch_for(task_id)}"):
        return int(repo.git.rev_list("--count", f"refs/heads/{branch_for(task_id)}", *exclude))


def branch_history(
    repo: git.Repo, task_id: str, base: str, most: int = 20
) -> tuple[list[str], int]:
    """What the task's branch holds beyond ``base`` (``short-sha subject``, newest first, at
    most ``most``) and how many of ``base``'s commits it lacks; ([], 0) without a branch."""
    branch = f"refs/heads/{branch_for(task_id)}"
    if not branch_exists(repo, branch_for(task_id)):
        return [], 0
    with git_errors(f"git log {base}..{branch}"):
        held = repo.git.log(f"-n{most}", "--format=%h %s", f"{full_ref(base)}..{branch}")
        behind = int(repo.git.rev_list("--count", f"{branch}..{full_ref(base)}"))
    return held.splitlines(), behind


def commits_ahead(repo: git.Repo, task_id: str, base: str) -> int:
    """Commits on the task's branch that its base does not have."""
    return commits_on_branch(repo, task_id, full_ref(base))


def worktree_branch(task_id: str) -> str | None:
    """The branch the task's worktree has checked out (``refs/heads/...``), None if detached."""
    wt = open_repo(worktree_for(task_id))
    with git_errors("git symbolic-ref HEAD"):
        try:
            return wt.git.symbolic_ref("-q", "HEAD")
        except git.GitCommandError:
            return None


def back_to_task_branch(task_id: str) -> None:
    """Check the task's own branch out again in its worktree (an agent switched away)."""
    wt = open_repo(worktree_for(task_id))
    with git_errors(f"git checkout {branch_for(task_id)}"):
        wt.git.checkout("-f", branch_for(task_id))


def remove_worktree(repo: git.Repo, task_id: str, delete_branch: bool = True) -> None:
    """Remove the task's worktree (and its branch); missing pieces are not an error."""
    path, branch = worktree_for(task_id), branch_for(task_id)
    with repo_admin_lock():
        if (path / ".git").is_file():
            with git_errors(f"git worktree remove {path}"):
                repo.git.worktree("remove", "--force", str(path))
        remove_tree(path)  # a sandboxed attempt's clone (or what a removal left)
        with git_errors("git worktree prune"):
            repo.git.worktree("prune")
        if delete_branch and branch_exists(repo, branch):
            with git_errors(f"git branch -D {branch}"):
                repo.git.branch("-D", branch)


def set_branch_aside(repo: git.Repo, task_id: str) -> str | None:
    """Start the task over: its branch (and worktree) removed, the old tip kept as
    ``refs/octopoid/replaced/<branch>-<sha12>`` (nothing is lost, however often a task is
    started over); that tip, or None without one."""
    branch = branch_for(task_id)
    with repo_admin_lock():
        if not branch_exists(repo, branch):
            return None
        tip = branch_tip(repo, branch)
        kept = f"refs/octopoid/replaced/{branch}-{tip[:12]}"  # one per tip: none overwritten
        with git_errors(f"git update-ref {kept}"):
            repo.git.update_ref(kept, tip)
    remove_worktree(repo, task_id)
    return tip


def drop_replaced(repo: git.Repo, task_id: str, base: str) -> None:
    """Delete the tips octopoid set aside for the task (``refs/octopoid/replaced/``) whose
    changes ``base`` holds all of, judged by content (merging one into it would change
    nothing: a squash or a rebase counts); one holding work nothing merged is kept for a
    person."""
    mine = re.compile(re.escape(f"{REPLACED}{branch_for(task_id)}") + r"(-[0-9a-f]{12})?")
    with git_errors(f"git for-each-ref {REPLACED}"):
        held = repo.git.rev_parse(f"{full_ref(base)}^{{tree}}")
        for ref in repo.git.for_each_ref("--format=%(refname)", REPLACED).splitlines():
            if not mine.fullmatch(ref):
                continue
            status, tree, _ = repo.git.execute(
                ["git", "merge-tree", "--write-tree", full_ref(base), ref],
                with_extended_output=True,
                with_exceptions=False,
            )
            if status == 0 and tree.strip() == held:
                repo.git.update_ref("-d", ref)


def delete_branch_if_merged(
    repo: git.Repo, task_id: str, bases: Sequence[str], merged_tip: str | None = None
) -> bool:
    """Delete the task's branch only when what was merged has all of it: one of ``bases``
    (a local base, the remote's) holds its tip, or its tip is ``merged_tip`` (the tip an
    accept merged, squashed or not)."""
    branch = branch_for(task_id)
    with repo_admin_lock():
        if not branch_exists(repo, branch):
            return True
        tip = branch_tip(repo, branch)
        if tip != merged_tip and not any(contains(repo, ref_tip(repo, b), tip) for b in bases):
            return False
        with git_errors(f"git branch -d {branch}"):
            repo.git.update_ref("-d", f"refs/heads/{branch}", tip)
    return True


def diff(repo: git.Repo, base: str, task_id: str) -> str:
    """The task branch's changes since it left ``base`` (``git diff base...branch``)."""
    branch = branch_for(task_id)
    if not branch_exists(repo, branch):
        raise GitError(f"{task_label(task_id)} has no branch {branch} (nothing was attempted yet?)")
    with git_errors(f"git diff {base}...{branch}"):
        return repo.git.execute(["git", *DIFF_ARGS, f"{base}...{branch}", "--"])


#: How every diff octopoid reads is asked for: no program an agent could configure, no
#: colour, file names as they are (``café.py``, not git's quoted ``"caf\\303\\251.py"``),
#: and a file larger than ``DIFF_TEXT_BYTES`` counted as binary, never loaded.
DIFF_ARGS = (
    "-c",
    "core.quotePath=false",
    "-c",
    f"core.bigFileThreshold={defaults.DIFF_TEXT_BYTES}",
    "diff",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--src-prefix=a/",  # whatever diff.noprefix or diff.mnemonicPrefix say
    "--dst-prefix=b/",
)


def read_diff(
    root: Path, base: str, head: str, limit: int, leave_out: Sequence[str] = ()
) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``git diff base...head`` without the files ``leave_out``
    names, and whether there was more.

    git is stopped as soon as the budget is spent, so a 400,000-line commit costs a
    reader no more than a small one (a page never holds the whole diff)."""
    chunks: list[bytes] = []
    more = _stream_diff(root, base, head, limit, leave_out, chunks.append)
    return b"".join(chunks)[:limit], more


def copy_diff(root: Path, base: str, head: str, out: BinaryIO) -> None:
    """All of ``git diff base...head`` into ``out``, a chunk at a time (never held whole)."""
    _stream_diff(root, base, head, sys.maxsize, (), lambda chunk: (out.write(chunk), out.flush()))


def _stream_diff(
    root: Path,
    base: str,
    head: str,
    limit: int,
    leave_out: Sequence[str],
    sink: Callable[[bytes], object],
) -> bool:
    """Give ``sink`` git's diff as it comes, until ``limit`` bytes are past (then git is
    killed); whether there was more."""
    skip = [f":(exclude,literal){path}" for path in leave_out]
    argv = ["git", "-C", str(root), *DIFF_ARGS, f"{base}...{head}", "--", *skip]
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **HOOKS_OFF},
        )
    except FileNotFoundError:
        raise ConfigError("git is not installed (or not on PATH); octopoid needs it") from None
    size, read = 0, False
    try:
        while size <= limit and (chunk := proc.stdout.read1(1 << 16)):  # type: ignore[union-attr]
            sink(chunk)
            size += len(chunk)
        read = True
    finally:
        more = size > limit
        if more or not read:
            proc.kill()  # spent, or the reader went away (a closed pipe)
        _, err = proc.communicate()
    if proc.returncode != 0 and not more:
        why = err.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git diff {base}...{head}: {why[0] if why else proc.returncode}")
    return more


def merge_base(repo: git.Repo, base: str, branch: str) -> str:
    """Where ``branch`` left ``base``: the commit ``git diff base...branch`` compares with."""
    with git_errors(f"git merge-base {base} {branch}"):
        return repo.git.merge_base(full_ref(base), full_ref(branch))


def file_text(repo: git.Repo, ref: str, path: str) -> str | None:
    """``path``'s text at ``ref`` (None: no such file there, or not a file)."""
    status, out, _ = repo.git.execute(
        ["git", "cat-file", "blob", f"{ref}:{path}"],
        with_extended_output=True,
        with_exceptions=False,
        stdout_as_string=False,
        strip_newline_in_stdout=False,  # the file as it is: its last line may be empty
    )
    return out.decode("utf-8", errors="replace") if status == 0 else None


def merge_conflicts(
    repo: git.Repo, task_id: str, base: str, tip: str | None = None
) -> list[str] | None:
    """Files that would conflict merging the task's branch (or its commit ``tip``) into
    ``base`` (None: it merges cleanly). ``git merge-tree --write-tree`` touches no
    worktree, index or ref."""
    status, out, err = repo.git.execute(
        ["git", "merge-tree", "--write-tree", "--name-only", "--no-messages",
         full_ref(base), tip or f"refs/heads/{branch_for(task_id)}"],
        with_extended_output=True,
        with_exceptions=False,
    )  # fmt: skip
    if status == 0:
        return None
    if status != 1:
        raise GitError(f"git merge-tree failed: {' '.join(err.split()) or status}")
    return [line for line in out.splitlines()[1:] if line.strip()]


def git_command(
    root: Path, *args: str, timeout: float | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``git -C root ARGS`` as a plain process: what the quick commands (status, list,
    show, enqueue) read through, since importing GitPython costs more than they do.
    ``stdin`` is its input. Past ``timeout`` seconds git is killed: ``GitError``."""
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            input=stdin,
            capture_output=True,
            text=True,
            encoding="utf-8",  # git's bytes (file names, messages), whatever the locale says
            errors="replace",
            check=False,
            timeout=timeout,
        )
    except FileNotFoundError:
        raise ConfigError("git is not installed (or not on PATH); octopoid needs it") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args[-3:])} took over {timeout:g}s") from None


def branch_head(root: Path, name: str) -> str | None:
    """The commit local branch ``name`` points at, or None (no such branch, no repository)."""
    found = git_command(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}^{{commit}}")
    head = found.stdout.strip()
    return head if found.returncode == 0 and head else None


def branch_tips(root: Path) -> dict[str, str]:
    """Every local branch's tip, by name, in one call of the git command."""
    done = git_command(
        root, "for-each-ref", "--format=%(objectname) %(refname:lstrip=2)", "refs/heads"
    )
    if done.returncode != 0:
        raise GitError(f"git for-each-ref failed: {' '.join(done.stderr.split())}")
    lines = done.stdout.splitlines()
    return {name: sha for sha, _, name in (line.partition(" ") for line in lines)}


def task_branch_ids(root: Path) -> list[str]:
    """The ids of the tasks that have a local branch (``agent/TASK-<id>``)."""
    prefix = branch_for("0").removesuffix("0")
    names = [name.removeprefix(prefix) for name in branch_tips(root) if name.startswith(prefix)]
    return sorted(name for name in names if ID_RE.fullmatch(name))


def _checkout_of(repo: git.Repo, branch: str) -> Path | None:
    """The worktree that has ``branch`` checked out, if any."""
    current: Path | None = None
    for line in repo.git.worktree("list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree ") :])
        elif line == f"branch refs/heads/{branch}":
            return current
    return None


def merge_task_branch(
    repo: git.Repo, task_id: str, base: str, strategy: str, title: str, run_hooks: bool = False
) -> str:
    """Merge ``agent/TASK-<id>`` into ``base``; return the new tip of ``base``.

    Where ``base`` is checked out, the merge happens there and needs it clean; otherwise in a
    temporary worktree, and ``base`` moves only if nobody moved it meanwhile. A conflict is
    aborted: nothing is half-merged. The user's hooks run only with ``run_hooks``.
    """
    branch = branch_for(task_id)
    if strategy not in MERGE_STRATEGIES or strategy == "none":
        raise ValueError(f"not a merge strategy: {strategy}")
    if not branch_exists(repo, branch):
        raise GitError(f"{task_label(task_id)} has no branch {branch} to merge")
    if not branch_exists(repo, base):
        raise GitError(f"base branch '{base}' does not exist")
    message = f"Merge {task_label(task_id)}: {title}"
    with repo_admin_lock():
        merge_guard.refuse_replacing(Path(repo.working_dir), full_ref(base), full_ref(branch))
        checkout = _checkout_of(repo, base)
        if checkout is not None:
            where = open_repo(checkout, hooks=run_hooks)
            _refuse_local_changes_in_the_way(where, checkout, base, branch)
            _merge_in(where, branch, strategy, message)
            new = where.head.commit.hexsha
        else:

            def update(old: str, new: str) -> None:
                with git_errors(f"git update-ref refs/heads/{base}"):
                    repo.git.update_ref(f"refs/heads/{base}", new, old)

            new = _merge_detached(repo, branch, base, strategy, message, run_hooks, update)
        return new


def _names(where: git.Repo, *args: str) -> list[str]:
    """``git diff --name-only -z`` as a list (names unquoted, whatever they hold)."""
    with git_errors("git diff --name-only"):
        return [n for n in where.git.diff("--name-only", "-z", *args).split("\0") if n]


def _refuse_local_changes_in_the_way(
    where: git.Repo, checkout: Path, base: str, branch: str
) -> None:
    """A merge in the user's checkout goes ahead beside their uncommitted edits (an edited
    agents.yaml), and is refused only when it would change a file they edited, or commit
    what they staged; the refusal names the files."""
    staged = _names(where, "--cached")
    if staged:
        raise MergeRefused(
            f"{checkout} has staged changes on {base}, which the merge commit would take in:\n"
            + "".join(f"  {name}\n" for name in staged[:20])
            + "commit or unstage them (git restore --staged), then accept again"
        )
    edited = set(_names(where))
    changed = _names(where, "--no-renames", f"{base}...{branch}")  # a rename: both names
    clash = sorted(edited & set(changed)) if edited else []
    if clash:
        raise MergeRefused(
            f"{checkout} has uncommitted changes on {base} to files the merge changes:\n"
            + "".join(f"  {name}\n" for name in clash[:20])
            + "commit or stash them, then accept again"
        )


def _merge_detached(
    repo: git.Repo,
    branch: str,
    start: str,
    strategy: str,
    message: str,
    run_hooks: bool,
    land: Callable[[str, str], None],
) -> str:
    """Merge ``branch`` onto ``start`` in a scratch worktree; ``land(old, new)`` moves the
    base (a ref update guarded by its old value, or a push)."""
    old = repo.commit(start).hexsha
    with scratch_worktree(repo, f"merge-{branch}", old, run_hooks) as where:
        _merge_in(where, branch, strategy, message)
        new = where.head.commit.hexsha
        land(old, new)
        return new


@contextmanager
def scratch_worktree(
    repo: git.Repo, name: str, start: str, hooks: bool = False
) -> Iterator[git.Repo]:
    """A worktree of its own, detached at ``start``, for a merge or rebase that must not
    touch anyone's checkout; removed after (one a killed process left is removed first).
    Callers hold ``repo_admin_lock``."""
    scratch = config.get_worktrees_dir() / f".{name.replace('/', '-')}"
    if scratch.exists():
        shutil.rmtree(scratch)
    with git_errors("git worktree prune"):
        repo.git.worktree("prune")
    with git_errors("git worktree add --detach"):
        repo.git.worktree("add", "--detach", str(scratch), start)
    try:
        yield open_repo(scratch, hooks=hooks)
    finally:
        with suppress(git.GitCommandError):  # else the next one removes it (above)
            repo.git.worktree("remove", "--force", str(scratch))


def conflicted(where: git.Repo) -> list[str]:
    """The files a merge or rebase stopped on in the worktree ``where``."""
    with suppress(GitError):
        return _names(where, "--diff-filter=U")
    return []


def merge_onto_remote(
    repo: git.Repo,
    remote: str,
    task_id: str,
    base: str,
    strategy: str,
    title: str,
    run_hooks: bool = False,
) -> str:
    """Merge the task's branch onto the remote's ``base`` and push it; the new tip.

    The push is a compare-and-swap: if another machine landed something meanwhile the
    remote refuses it, and the merge is made again on the new base (``PUSH_TRIES`` times).
    The local ``base`` follows when it can (``adopt``).
    """
    branch = branch_for(task_id)
    message = f"Merge {task_label(task_id)}: {title}"
    if not branch_exists(repo, branch):
        raise GitError(
            f"{task_label(task_id)} has no branch {branch} here or on {remote}: its attempt "
            "ran on a machine that could not push it; accept it there"
        )

    def push(old: str, new: str) -> None:
        with git_errors(f"git push {remote} {base}"):
            repo.git.push("--porcelain", remote, f"{new}:refs/heads/{base}")

    for tries in range(1, PUSH_TRIES + 1):
        with repo_admin_lock():
            old = fetch_branches(repo, remote, [base]).get(base)
            if old is None:
                raise GitError(f"the remote {remote} has no branch '{base}' to merge into")
            merge_guard.refuse_replacing(
                Path(repo.working_dir), remote_ref(remote, base), full_ref(branch)
            )
            try:
                new = _merge_detached(
                    repo, branch, remote_ref(remote, base), strategy, message, run_hooks, push
                )
                with suppress(GitError):
                    adopt(repo, base, new)
                return new
            except GitError:
                moved = fetch_branches(repo, remote, [base]).get(base) != old
                if not moved or tries == PUSH_TRIES:
                    raise
        # another machine landed first: after a jittered pause (two accepters must not
        # keep colliding), merge again onto its base
        time.sleep(random.uniform(0, 0.05 * tries))
    raise AssertionError("the loop returns or raises")


def _merge_in(where: git.Repo, branch: str, strategy: str, message: str) -> None:
    args = {
        "merge": ["--no-ff", "-m", message, branch],
        "squash": ["--squash", branch],
        "ff-only": ["--ff-only", branch],
    }[strategy]
    try:
        where.git.merge(*args)
        if strategy == "squash" and _names(where, "--cached"):
            where.git.commit("-m", message)
    except git.GitCommandError as exc:
        stopped = conflicted(where)
        detail = git_message(exc)
        with suppress(git.GitCommandError):
            where.git.reset("--merge")  # undoes a conflicted merge or squash; no-op otherwise
        if stopped:
            raise MergeRefused(
                f"merging {branch} conflicts in:\n"
                + "".join(f"  {name}\n" for name in stopped)
                + "nothing was merged. Rebase the branch onto its base and resolve them, or "
                "reject the task with the conflict as the reason (the next attempt rebases)"
            ) from None
        raise MergeRefused(
            f"merging {branch} failed and was undone: {detail}. Resolve it on the branch "
            "(or reject the task with the conflict as the reason), then accept again"
        ) from None

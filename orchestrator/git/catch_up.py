"""Work that did not reach the remote, put on top of what someone pushed there meanwhile,
as a person would (``git pull --rebase``): the attempt's own commits rebased onto the
reviewer's tip in a scratch worktree (merged where a rebase would replay what is not the
attempt's), then pushed with a lease on that tip. A conflict changes nothing: the remote
keeps their push, the local branch the attempt's work (docs/forge.md says what follows).
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..base.lazy import lazy_import
from ..model.exceptions import GitError, RemoteMoved
from ..model.tasks import one_line
from . import branches, core, merges
from . import remote as git_remote

if TYPE_CHECKING:
    import git

gitpython = lazy_import("git")
TRIES = 3  # the remote moved again while the work was put on top: fetch, combine again
#: a rebase as a person runs it, whatever the user's config says about other branches
REBASE = ["git", "-c", "rebase.updateRefs=false", "-c", "rebase.autoSquash=false", "rebase"]


@dataclass(frozen=True)
class CaughtUp:
    """What was done about commits someone else pushed to the branch meanwhile."""

    theirs: str  # the remote's tip
    tip: str | None  # the work on top of it (pushed); None: it conflicts, nothing changed
    how: str = ""  # "rebased" or "merged" ("" when nothing needed combining)
    by: str = ""  # who made the commits the work lacked (git's author names)
    count: int = 0  # how many
    conflicts: tuple[str, ...] = ()

    def said(self, branch: str) -> str:
        """One paragraph for the notes, History and the pull request."""
        plural = "s" * (self.count != 1)
        pushed = f"{self.by or 'someone'} pushed {self.count} commit{plural} to {branch}"
        if self.tip is not None:
            return (
                f"{pushed} meanwhile (up to {self.theirs[:12]}); this attempt's commits were "
                f"{self.how} onto theirs and pushed ({self.tip[:12]})"
            )
        files = ", ".join(self.conflicts[:20])
        return (
            f"{pushed} meanwhile (up to {self.theirs[:12]}), and this attempt's commits "
            f"conflict with theirs in {files}; they were not pushed and are not on the pull "
            f"request. The branch here keeps them: the next attempt merges {self.theirs[:12]} "
            "into it (`git merge " + self.theirs[:12] + "`) and settles those files"
        )


def onto_remote(repo: git.Repo, remote: str, task_id: str, since: str | None) -> CaughtUp:
    """Put the task branch's commits beyond ``since`` (what the remote held when they were
    made; None: it held nothing) on top of the remote's branch (the one put up for review:
    only there can a person push meanwhile) and push them there with a lease on its tip.
    A conflict returns with ``tip`` None and changes nothing."""
    branch = branches.branch_for(task_id)
    for _ in range(TRIES):
        with core.repo_admin_lock():
            theirs = git_remote.fetch_branches(repo, remote, [branch], review=True).get(branch)
            if theirs is None:
                raise GitError(f"{remote} has no {branch} to put this work on any more")
            caught = _combine(repo, branch, theirs, since)
            if caught.tip is None:
                return caught
            git_remote.adopt(repo, branch, caught.tip, replace=True, exact=True)
        if caught.tip == theirs:
            return caught  # the remote holds the work already
        try:
            git_remote.push_task_branch(repo, remote, task_id, theirs, review=True)
            return caught
        except RemoteMoved:
            since = theirs  # pushed to again: the work is now what lies beyond theirs
    raise RemoteMoved(
        f"{remote}'s {branch} kept moving while this work was put on top of it "
        f"({TRIES} tries); it was left as it is"
    )


def _combine(repo: git.Repo, branch: str, theirs: str, since: str | None) -> CaughtUp:
    """The local branch's work on top of ``theirs``, made in a scratch worktree."""
    ours = branches.branch_tip(repo, branch)
    if branches.contains(repo, theirs, ours):
        return CaughtUp(theirs, theirs)
    if branches.contains(repo, ours, theirs):
        return CaughtUp(theirs, ours)
    with core.git_errors(f"git log {ours[:12]}..{theirs[:12]}"):
        authors = repo.git.log("--format=%an", f"{ours}..{theirs}").splitlines()
        linear = since is not None and branches.contains(repo, ours, since)
        linear = linear and not repo.git.rev_list("--merges", f"{since}..{ours}")
    by = one_line(", ".join(sorted(set(authors))), 200)
    how = "rebased" if linear else "merged"
    with merges.scratch_worktree(repo, f"catch-up-{branch}", ours) as where:
        try:
            if linear:
                where.git.execute([*REBASE, "--onto", theirs, str(since)])
            else:
                message = f"Merge {branch} as pushed meanwhile ({theirs[:12]})"
                where.git.merge("--no-ff", "-m", message, theirs)
        except gitpython.GitCommandError as exc:
            stopped = tuple(merges.conflicted(where))
            with suppress(gitpython.GitCommandError):
                where.git.execute(["git", "rebase" if linear else "merge", "--abort"])
            if not stopped:  # not a conflict (no identity to commit as, a broken repo)
                why = core.git_message(exc)
                raise GitError(f"putting {branch} on {theirs[:12]} failed: {why}") from None
            return CaughtUp(theirs, None, how, by, len(authors), stopped)
        return CaughtUp(theirs, where.head.commit.hexsha, how, by, len(authors))

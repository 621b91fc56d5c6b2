"""The task's branch and its pull request's head, kept together at every poll.

- The pull request lacks the task's tip (octopoid's push was lost: the remote was down):
  it is pushed again.
- A person pushed on top of the tip: their commits become the branch and the task's
  recorded tip (``task_tips``), which the next attempt builds on.
- A person rewrote the branch (a force-push) after octopoid's tip reached it: theirs is
  taken, octopoid's kept under ``refs/octopoid/replaced/``.
- The task's tip never reached the remote and a person pushed meanwhile: its commits go
  on top of theirs (``catch_up``) and are pushed; if they conflict, the task goes back
  with why (the caller's move), and nothing is lost.

Whether the tip reached the remote is what this machine saw there last
(``refs/remotes/<remote>/agent/TASK-<id>``, which every push and fetch moves).
"""

from __future__ import annotations

import logging

from ..git import branches, catch_up, core
from ..git import remote as git_remote
from ..model.tasks import TIP_HEADER, Task, TaskState, utcnow
from ..queue import machine as queue_utils
from . import PullRequest

log = logging.getLogger("octopoid.forge")


def follow(task: Task, pull: PullRequest) -> str | None:
    """Bring the task's branch and ``pull``'s head together; why they cannot be (the
    task's work conflicts with a person's push), or None."""
    repo = core.open_repo()
    branch = branches.branch_for(task.id)
    remote = git_remote.remote_name()
    if remote is None or not pull.head_sha or not branches.branch_exists(repo, branch):
        return None
    tip = branches.branch_tip(repo, branch)
    if tip == pull.head_sha:
        return None
    known = branches.ref_tip(repo, git_remote.remote_ref(remote, branch, review=True))
    with core.repo_admin_lock():
        found = git_remote.fetch_branches(repo, remote, [branch], review=True)
    if found.get(branch) != pull.head_sha:
        return None  # the forge is behind its own remote for a moment: the next poll looks again
    if branches.contains(repo, tip, pull.head_sha):
        git_remote.push_task_branch(repo, remote, task.id, review=True)
        log.info("%s: pushed %s, which the pull request lacked", task.label, tip[:12])
        return None
    if branches.contains(repo, pull.head_sha, tip) or branches.contains(repo, known, tip):
        with core.repo_admin_lock():  # on top of it, or a rewrite of what it had
            git_remote.adopt(repo, branch, pull.head_sha, replace=True)
        _record(task, pull.head_sha, "")
        log.info("%s: its branch moved on the forge to %s", task.label, pull.head_sha[:12])
        return None
    caught = catch_up.onto_remote(repo, remote, task.id, known)
    said = caught.said(branch)
    if caught.tip is None:
        return said
    _record(task, caught.tip, f"forge: {said}")
    log.info("%s: %s", task.label, said)
    return None


def _record(task: Task, tip: str, event: str) -> None:
    """The branch's new tip as the task's (in review), with a History line when octopoid
    changed the work's history to get there."""

    def change(t: Task) -> None:
        t.set_header(TIP_HEADER, tip)
        if event:
            t.add_event(utcnow(), TaskState.PROVISIONAL.value, "octopoid", event)

    queue_utils.record_from_forge(task, TaskState.PROVISIONAL, change)

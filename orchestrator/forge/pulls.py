"""A task's pull request: opened from review, and its verdicts turned into moves.

While its pull request is open a task waits in ``provisional/`` with ``PR_NUMBER`` and
``PR_URL`` headers. A poll reads the pull request and makes at most one move (merged:
done; closed: failed, its number kept as ``PR_CLOSED``; CI failed or changes asked: back
to incoming with the retry notes; docs/forge.md tells each event), through the same
functions a person's command uses, each writing History.

What was acted on is recorded in the move itself (``FORGE_SEEN``, ``seen``), so a poll that
dies anywhere never moves a task twice for one verdict. Each verdict is judged and made
under the task's hold, on the attempt it was read for: a person's reject or a second poll
meanwhile makes it stand down.
"""

from __future__ import annotations

import logging
from typing import Any

from ..base.text import ascii_int
from ..git import branches, catch_up, core, task_tips
from ..git import remote as git_remote
from ..model.exceptions import (
    ForgeError,
    ForgeUnavailable,
    GitError,
    IllegalTransition,
    InvalidInput,
    LostRace,
    TaskBusy,
)
from ..model.tasks import TIP_HEADER, Task, TaskState, utcnow
from ..queue import machine as queue_utils
from ..review import verdicts as review
from . import (
    FAILED,
    NONE,
    PASSED,
    Forge,
    PullRequest,
    announce,
    connect,
    reviews,
    settings,
    text,
)
from .seen import Seen

log = logging.getLogger("octopoid.forge")
OPEN_HEADERS = ("PR_NUMBER",)  # while its pull request is open
CLOSED_HEADER = "PR_CLOSED"  # a pull request closed unmerged: followed while the task failed


def pr_number(task: Task, header: str = "PR_NUMBER") -> int | None:
    """The task's pull request number, or None (a hand-edited value that is not one too)."""
    raw = task.headers.get(header, "")
    return ascii_int(raw) if len(raw) < 10 else None


def open_for(task: Task, actor: str, forge: Forge | None = None) -> Task:
    """Push the task's branch and open its pull request (or find the one open for it);
    the task stays in provisional with ``PR_NUMBER`` and ``PR_URL``. Safe to repeat.

    The only push of a branch a forge runs CI on (until then it travels under
    ``refs/octopoid/tasks/``): ``agent/TASK-<id>`` at the tip its attempt submitted,
    fetched from the remote if this machine lacks it (``task_tips.take_for_accept``)."""
    cfg = settings()
    if cfg is None:
        raise ForgeError("merge.strategy is pull-request but no forge is configured")
    forge = forge or connect(cfg)
    remote = git_remote.remote_name()
    if remote is None:
        raise ForgeError("a pull request needs git.remote: the remote its branch is pushed to")
    repo = core.open_repo()
    branch = branches.branch_for(task.id)
    task_tips.take_for_accept(repo, remote, task)
    if not branches.branch_exists(repo, branch):
        raise IllegalTransition(f"{task.label} has no branch {branch} to open a pull request for")
    git_remote.push_task_branch(repo, remote, task.id, review=True)
    pull = forge.find_pull_request(branch)
    if pull is None:
        title = text.pull_request_title(task)
        body = announce.description(task, cfg["web_url"])
        try:
            pull = forge.open_pull_request(branch, task.branch, title, body)
        except ForgeUnavailable:
            raise
        except ForgeError:  # opened by a poll meanwhile, or an answer lost on the way
            pull = forge.find_pull_request(branch)
            if pull is None:
                raise

    def record(t: Task) -> None:
        if t.headers.get("PR_NUMBER") != str(pull.number):  # a new one: nothing taken yet,
            Seen(told=t.attempts).write(t)  # and its description is of this attempt
        t.set_header("PR_NUMBER", pull.number)
        t.set_header("PR_URL", text.one_line(pull.url, 500))
        t.drop_header(CLOSED_HEADER)

    log.info("%s: pull request #%d (%s) by %s", task.label, pull.number, pull.url, actor)
    return queue_utils.record_from_forge(task, TaskState.PROVISIONAL, record)


def poll(forge: Forge) -> list[str]:
    """One look at every task in provisional (open the pull requests ``open_on:
    provisional`` asks for, act on the verdicts of open ones) and every failed task with
    a pull request (one reopened, a failure to tell). One line per thing done. One pull
    request the forge refuses something for (a merge, a bad answer) is logged and left;
    the others go on. An unreachable forge ends the poll (``ForgeUnavailable``)."""
    cfg = settings() or {}
    done = []
    for task in queue_utils.list_tasks(TaskState.PROVISIONAL):
        done += _each(task, lambda t: _provisional(forge, t, cfg))
    for task in queue_utils.list_tasks(TaskState.FAILED):
        if pr_number(task, CLOSED_HEADER) or pr_number(task):
            done += _each(task, lambda t: _failed(forge, t, cfg))
    return done


def _each(task: Task, act: Any) -> list[str]:
    """``act`` on one task; what the forge or a person did meanwhile is its own trouble."""
    try:
        line = act(task)
    except ForgeUnavailable:
        raise
    except (TaskBusy, IllegalTransition, InvalidInput, LostRace) as exc:  # a person is at it
        log.info("%s: left for now: %s", task.label, exc)
        return []
    except (ForgeError, GitError, ValueError, TypeError, KeyError) as exc:
        log.warning("%s: its pull request was left for now: %s", task.label, exc)
        return []
    return [f"{task.label}: {line}"] if line else []


def _provisional(forge: Forge, task: Task, cfg: dict) -> str | None:
    number = pr_number(task)
    if number is not None:
        return verdict(forge, task, number, cfg)
    if cfg.get("open_on") == "provisional" and _ready(task):
        pulled = open_for(task, "octopoid", forge)
        return f"opened {pulled.headers['PR_URL']}"
    return None


def _ready(task: Task) -> bool:
    """An attempt's work, not a proposed split, nor 'no change needed' without commits;
    one a runner submitted (as accept requires)."""
    if "PROPOSED_SPLIT" in task.headers or "NO_CHANGE" in task.headers:
        return False
    return queue_utils.unfenced_submit(task) is None


def _failed(forge: Forge, task: Task, cfg: dict) -> str | None:
    """A failed task's pull request: reopened, or merged all the same (the task is back
    in review, and a merge finishes it), or open and not told of the failure yet."""
    closed = pr_number(task, CLOSED_HEADER)
    number = closed or pr_number(task)
    assert number is not None
    pull = forge.pull_request(number)
    if closed and pull.state == "closed":
        return None
    with queue_utils.get_store().hold(task.id, review.FORGE_HOLD):
        now = queue_utils.get_task(task.id)
        if now.state is not TaskState.FAILED:
            return None
        if closed is None and pull.state != "merged":  # open (or closed): told it failed
            return announce.attempt(forge, now, number, cfg.get("web_url"))
        if (pr_number(now, CLOSED_HEADER) or pr_number(now)) != number:
            return None
        again = "reopened" if closed else pull.state
        seen = Seen.of(now)  # what its reviews gave is still taken; its attempt is told
        seen.told = now.attempts
        back = queue_utils.return_to_review(
            now.id,
            f"forge: pull request #{number} {again}",
            actor=forge.kind,
            headers={"PR_NUMBER": number, "PR_URL": pull.url, **seen.mark()},
            drop=(CLOSED_HEADER,),
        )
        line = verdict(forge, back, number, cfg) if pull.state == "merged" else None
    return f"pull request #{number} {again}" + (f"; {line}" if line else "")


def verdict(forge: Forge, task: Task, number: int, cfg: dict) -> str | None:
    """Read pull request ``number`` and make the move its verdict asks for; what was done.
    Judged and moved under the task's hold, and only for the attempt ``task`` was read as."""
    who = forge.kind
    pull = forge.pull_request(number)
    store = queue_utils.get_store()
    with store.hold(task.id, review.FORGE_HOLD):
        now = queue_utils.get_task(task.id)
        if now.state is not TaskState.PROVISIONAL or now.attempts != task.attempts:
            return None  # moved, or another attempt in review since it was read
        if pull.state == "merged":
            by = text.one_line(pull.merged_by, 80) or "someone"
            reason = f"forge: merged by {by}"
            review.accept_merged(now.id, f"{who}:{by}", pull.merge_sha, reason, pull.head_sha)
            return f"merged by {by}"
        if pull.state == "closed":
            by = text.one_line(pull.closed_by, 80) or "someone"
            why = f"forge: pull request #{number} closed by {by} without merging"
            queue_utils.fail_task(  # its link stays: the issue and `show` still name it
                now.id, why, actor=f"{who}:{by}", drop=OPEN_HEADERS, headers={CLOSED_HEADER: number}
            )
            return f"closed by {by}"
        conflict = _follow(now, pull)
        if conflict is not None:
            return _conflicts(forge, now, number, conflict, who)
        if branches.ref_tip(core.open_repo(), branches.branch_for(now.id)) != pull.head_sha:
            now = queue_utils.get_task(now.id)  # the head moved: judged at the next poll
            return announce.attempt(forge, now, number, cfg.get("web_url"))
        told = announce.attempt(forge, now, number, cfg.get("web_url"))
        line = _judge(forge, queue_utils.get_task(now.id), number, pull, cfg)
    return "; ".join(filter(None, [told, line])) or None


def _judge(forge: Forge, task: Task, number: int, pull: PullRequest, cfg: dict) -> str | None:
    """CI and reviews of the head: back for changes, merged when approved, or a word on
    the pull request about approvals of an earlier head."""
    seen = Seen.of(task)
    fresh_ci = seen.ci != pull.head_sha
    ci = forge.ci(number, pull.head_sha, cfg.get("log_tail_chars", 3000) if fresh_ci else 0)
    given = forge.reviews(number, seen.review)
    failed = ci.failed if ci.state == FAILED and fresh_ci else ()
    if failed or reviews.asking(given, seen):
        return reviews.send_back(task, pull, failed, given, seen, forge.kind)
    if not cfg.get("merge_when_approved") or ci.state not in (PASSED, NONE):
        return None
    if reviews.approved(given, pull.head_sha):
        return _merge(forge, task, number, pull, ci.state, forge.kind)
    if old := reviews.stale(given, pull.head_sha):
        return announce.stale(forge, task, number, old, pull.head_sha) or None
    return None


def _follow(task: Task, pull: PullRequest) -> str | None:
    """Bring the task's branch and ``pull``'s head together, at every poll; why they
    cannot be (the task's work conflicts with a person's push), or None.

    - The pull request lacks the task's tip (octopoid's push was lost: the remote was
      down): it is pushed again.
    - A person pushed on top of the tip: their commits become the branch and the task's
      recorded tip (``task_tips``), which the next attempt builds on.
    - A person rewrote the branch (a force-push) after octopoid's tip reached it: theirs
      is taken, octopoid's kept under ``refs/octopoid/replaced/``.
    - The task's tip never reached the remote and a person pushed meanwhile: its commits
      go on top of theirs (``catch_up``) and are pushed; if they conflict, the task goes
      back with why (the caller's move), and nothing is lost.

    Whether the tip reached the remote is what this machine saw there last
    (``refs/remotes/<remote>/agent/TASK-<id>``, which every push and fetch moves)."""
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
        _record_tip(task, pull.head_sha, "")
        log.info("%s: its branch moved on the forge to %s", task.label, pull.head_sha[:12])
        return None
    caught = catch_up.onto_remote(repo, remote, task.id, known)
    said = caught.said(branch)
    if caught.tip is None:
        return said
    _record_tip(task, caught.tip, f"forge: {said}")
    log.info("%s: %s", task.label, said)
    return None


def _record_tip(task: Task, tip: str, event: str) -> None:
    """The branch's new tip as the task's (in review), with a History line when octopoid
    changed the work's history to get there."""

    def change(t: Task) -> None:
        t.set_header(TIP_HEADER, tip)
        if event:
            t.add_event(utcnow(), TaskState.PROVISIONAL.value, "octopoid", event)

    queue_utils.record_from_forge(task, TaskState.PROVISIONAL, change)


def _conflicts(forge: Forge, task: Task, number: int, why: str, who: str) -> str:
    """The task's work (never pushed) conflicts with a person's push: back, saying so on
    the pull request, in History and in the notes."""
    announce.conflict(forge, task, number, why)
    seen = Seen.of(task)
    seen.told = task.attempts
    queue_utils.reject_completion(
        task.id,
        why,
        who,
        summary="forge: its work conflicts with a push to the pull request's branch",
        mark=seen.mark(),
    )
    return "its work conflicts with a push to its branch: back to incoming"


def _merge(forge: Forge, task: Task, number: int, pull: PullRequest, ci: str, who: str) -> str:
    forge.merge(number, pull.head_sha)  # the head judged: a newer push refuses it
    merged = forge.pull_request(number)
    if merged.state != "merged":
        return f"merge asked; the forge says {merged.state}"
    by = text.one_line(merged.merged_by, 80) or "octopoid"
    reason = f"forge: merged by {by} (approved, CI {ci})"
    review.accept_merged(task.id, f"{who}:{by}", merged.merge_sha, reason, merged.head_sha)
    return f"approved and merged by {by}"


def close_for(task_id: str, actor: str) -> str | None:
    """A task closed in octopoid takes its open pull request with it: closed on the forge,
    with why. A finishing step (``finishing``): a forge that cannot answer now leaves it
    journaled, and the scheduler tries again."""
    task = queue_utils.get_task(task_id)
    number, cfg = pr_number(task), settings()
    if number is None or cfg is None:
        return None
    forge = connect(cfg)
    if forge.pull_request(number).state != "open":
        return None
    why = task.headers.get("CLOSE_REASON", "") or "closed"
    kind = task.headers.get("CLOSED", "done")
    forge.close_pull_request(
        number,
        f"Closed in octopoid by {text.one_line(actor, 80)} ({kind}): {why}\n\n"
        + text.marker(task, "closed"),
    )
    return f"closed #{number}"

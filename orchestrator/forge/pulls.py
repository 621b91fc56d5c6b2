"""A task's pull request: opened from review, and its verdicts turned into moves.

While its pull request is open a task waits in ``provisional/`` (its attempt awaits review;
the reviewers are the forge's), with ``PR_NUMBER`` and ``PR_URL`` headers. A poll reads the
pull request and makes at most one move, through the same functions a person's command
uses, each writing History:

- merged: ``provisional → done`` (``forge: merged by <login>``), finished like an accept;
- closed unmerged: ``provisional → failed`` (``forge: closed by <login> without merging``);
- CI failed on its head, or a reviewer asked for changes: ``provisional → incoming`` with
  the failing jobs' log tails, the review's body and its line comments in the retry notes,
  as ``octopoid reject --comment`` writes them. The next attempt starts from the branch (a
  person's push to it included), pushes to it, and so updates the same pull request.

What was acted on is recorded in the move itself (the ``FORGE_SEEN`` header: the head
whose CI failed, the newest review taken), so a poll that dies anywhere never acts twice:
before the move nothing happened, after it the header says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .. import git_utils, queue_utils, review
from ..exceptions import ForgeError, IllegalTransition, InvalidInput, TaskBusy
from ..task_notes import LineComment
from ..tasks import Task, TaskState
from . import FAILED, NONE, PASSED, Forge, PullRequest, Review, connect, settings, text

log = logging.getLogger("octopoid.forge")


def pr_number(task: Task) -> int | None:
    """The task's pull request number, or None (a hand-edited value that is not one too)."""
    raw = task.headers.get("PR_NUMBER", "")
    return int(raw) if raw.isdigit() and 0 < len(raw) < 10 else None


def open_for(task: Task, actor: str, forge: Forge | None = None) -> Task:
    """Push the task's branch and open its pull request (or find the one open for it);
    the task stays in provisional with ``PR_NUMBER`` and ``PR_URL``. Safe to repeat."""
    cfg = settings()
    if cfg is None:
        raise ForgeError("merge.strategy is pull-request but no forge is configured")
    forge = forge or connect(cfg)
    remote = git_utils.remote_name()
    if remote is None:
        raise ForgeError("a pull request needs git.remote: the remote its branch is pushed to")
    repo = git_utils.open_repo()
    branch = git_utils.branch_for(task.id)
    if not git_utils.branch_exists(repo, branch):
        raise IllegalTransition(f"{task.label} has no branch {branch} to open a pull request for")
    git_utils.push_task_branch(repo, remote, task.id)
    pull = forge.find_pull_request(branch) or forge.open_pull_request(
        branch,
        task.branch,
        text.pull_request_title(task),
        text.pull_request_body(task, cfg["web_url"]),
    )

    def record(t: Task) -> None:
        t.set_header("PR_NUMBER", pull.number)
        t.set_header("PR_URL", pull.url)

    log.info("%s: pull request #%d (%s) by %s", task.label, pull.number, pull.url, actor)
    return queue_utils.get_store().update(task.id, TaskState.PROVISIONAL, record)


@dataclass
class Seen:
    """What of a pull request's verdicts a task's moves already took (``FORGE_SEEN``)."""

    ci: str = ""  # the head whose failed CI sent it back
    review: int = 0  # the newest review acted on

    @classmethod
    def of(cls, task: Task) -> Seen:
        seen = cls()
        for part in task.headers.get("FORGE_SEEN", "").split():
            key, _, value = part.partition(":")
            if key == "ci":
                seen.ci = value
            elif key == "review" and value.isdigit():
                seen.review = int(value)
        return seen

    def header(self) -> str:
        return f"ci:{self.ci or '-'} review:{self.review}"


def poll(forge: Forge) -> list[str]:
    """One look at every task in provisional: open the pull requests ``open_on:
    provisional`` asks for, act on the verdicts of open ones. One line per thing done."""
    cfg = settings() or {}
    done = []
    for task in queue_utils.list_tasks(TaskState.PROVISIONAL):
        number = pr_number(task)
        try:
            if number is None:
                if cfg.get("open_on") == "provisional" and _ready(task):
                    pulled = open_for(task, "octopoid", forge)
                    done.append(f"{task.label}: opened {pulled.headers['PR_URL']}")
                continue
            line = verdict(forge, task, number, cfg)
        except (TaskBusy, IllegalTransition, InvalidInput) as exc:  # a person is at it
            log.info("%s: left for now: %s", task.label, exc)
            continue
        if line:
            done.append(f"{task.label}: {line}")
    return done


def _ready(task: Task) -> bool:
    """An attempt's work, not a proposed split, nor 'no change needed' without commits."""
    return "PROPOSED_SPLIT" not in task.headers and "NO_CHANGE" not in task.headers


def verdict(forge: Forge, task: Task, number: int, cfg: dict) -> str | None:
    """Read pull request ``number`` and make the move its verdict asks for; what was done."""
    who = forge.kind
    pull = forge.pull_request(number)
    if pull.state == "merged":
        by = pull.merged_by or "someone"
        review.accept_merged(task.id, f"{who}:{by}", pull.merge_sha, f"forge: merged by {by}")
        return f"merged by {by}"
    if pull.state == "closed":
        by = pull.closed_by or "someone"
        why = f"forge: pull request #{number} closed by {by} without merging"
        queue_utils.fail_task(task.id, why, actor=f"{who}:{by}")
        return f"closed by {by}"
    _follow_head(task, pull)
    seen = Seen.of(task)
    ci = forge.ci(number, pull.head_sha, cfg.get("log_tail_chars", 3000))
    reviews = forge.reviews(number)
    asking = _asking_for_changes(reviews, seen.review)
    ci_failed = ci.state == FAILED and seen.ci != pull.head_sha
    if ci_failed or asking:
        return _send_back(task, pull, ci.failed if ci_failed else (), asking, seen, who)
    latest = _latest_by_author(reviews)  # one reviewer still asking for changes: no merge
    approved = bool(latest) and all(r.state == "approved" for r in latest)
    if cfg.get("merge_when_approved") and approved and ci.state in (PASSED, NONE):
        forge.merge(number, pull.head_sha)
        merged = forge.pull_request(number)
        if merged.state == "merged":
            by = merged.merged_by or "octopoid"
            reason = f"forge: merged by {by} (approved, CI {ci.state})"
            review.accept_merged(task.id, f"{who}:{by}", merged.merge_sha, reason)
            return f"approved and merged by {by}"
    return None


def _follow_head(task: Task, pull: PullRequest) -> None:
    """A person pushed to the pull request's branch: take their commits as the branch, the
    tip octopoid had kept under ``refs/octopoid/replaced/`` (``git_utils.adopt``)."""
    repo = git_utils.open_repo()
    branch = git_utils.branch_for(task.id)
    remote = git_utils.remote_name()
    if remote is None or not pull.head_sha:
        return
    if (
        git_utils.branch_exists(repo, branch)
        and git_utils.branch_tip(repo, branch) == pull.head_sha
    ):
        return
    with git_utils.repo_admin_lock():
        found = git_utils.fetch_branches(repo, remote, [branch])
        if found.get(branch) == pull.head_sha:
            git_utils.adopt(repo, branch, pull.head_sha, replace=True)
            log.info(
                "%s: its branch moved on the forge to %s: taken", task.label, pull.head_sha[:12]
            )


def _latest_by_author(reviews: list[Review]) -> list[Review]:
    """Each reviewer's last word (approved or changes; comments do not change a verdict)."""
    latest: dict[str, Review] = {}
    for one in sorted(reviews, key=lambda r: r.id):
        if one.state in ("approved", "changes"):
            latest[one.author] = one
    return list(latest.values())


def _asking_for_changes(reviews: list[Review], seen: int) -> list[Review]:
    return [r for r in _latest_by_author(reviews) if r.state == "changes" and r.id > seen]


def _send_back(
    task: Task,
    pull: PullRequest,
    failed_jobs: tuple,
    asking: list[Review],
    seen: Seen,
    who: str,
) -> str:
    """One rejection for everything the forge said: the CI's failed jobs with their log
    tails, then each review's body, its line comments as line comments."""
    parts, said = [], []
    if failed_jobs:
        names = ", ".join(job.name for job in failed_jobs)
        said.append(f"CI failed ({names})")
        parts.append(f"CI failed on {pull.head_sha[:12]} (pull request #{pull.number}): {names}")
        for job in failed_jobs:
            parts.append(
                f"--- {job.name}: the end of its log ---\n{job.log_tail.rstrip() or '(no log)'}"
            )
        seen.ci = pull.head_sha
    comments: list[LineComment] = []
    for one in asking:
        said.append(f"changes requested by {one.author}")
        parts.append(f"{one.author} asked for changes:\n{one.body.strip() or '(no summary)'}")
        comments += [
            LineComment(c.path, c.line, c.text, end=c.end, side=c.side) for c in one.comments
        ]
        seen.review = max(seen.review, one.id)
    summary = f"forge: {' and '.join(said)}"
    reviewers = [one.author for one in asking]
    by = f"{who}:{reviewers[0]}" if len(reviewers) == 1 and not failed_jobs else f"{who}"
    located = review.with_code(task, _valid(comments), strict=False)
    queue_utils.reject_completion(
        task.id,
        "\n\n".join(parts),
        by,
        comments=located,
        summary=summary,
        mark={"FORGE_SEEN": seen.header()},
    )
    return summary.removeprefix("forge: ")


def _valid(comments: list[LineComment]) -> list[LineComment]:
    """A forge's comments checked as a person's are (``review.line_comment``); one that is
    not (a hostile path, an absurd line) is dropped, not fatal."""
    kept = []
    for c in comments:
        said = text.clean(c.text)[: review.MAX_COMMENT_CHARS]
        try:
            kept.append(review.line_comment(c.path, str(c.line), said, str(c.end or ""), c.side))
        except InvalidInput as exc:
            log.warning("a forge's line comment left out: %s", exc)
    return kept

"""A task's pull request: opened from review, and its verdicts turned into moves.

While its pull request is open a task waits in ``provisional/`` (its attempt awaits review;
the reviewers are the forge's), with ``PR_NUMBER`` and ``PR_URL`` headers. A poll reads the
pull request and makes at most one move, through the same functions a person's command
uses, each writing History:

- merged: ``provisional → done`` (``forge: merged by <login>``), finished like an accept;
- closed unmerged: ``provisional → failed`` (``forge: closed by <login> without merging``),
  its pull request forgotten, so a retry opens a new one;
- CI failed on its head, or a reviewer asked for changes: ``provisional → incoming`` with
  the failing jobs' log tails, the review's body and its line comments in the retry notes,
  as ``octopoid reject --comment`` writes them. The next attempt starts from the branch (a
  person's push to it included), pushes to it, and so updates the same pull request.

What was acted on is recorded in the move itself (the ``FORGE_SEEN`` header: the head
whose CI failed, the newest review taken), so a poll that dies anywhere never moves a task
twice for one verdict. Each verdict is judged and made under the task's hold, on the
attempt it was read for: a person's reject or a second poll meanwhile makes it stand down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .. import git_utils, queue_utils, review, task_tips
from ..exceptions import (
    ForgeError,
    ForgeUnavailable,
    IllegalTransition,
    InvalidInput,
    TaskBusy,
)
from ..memory import lifecycle
from ..task_notes import LineComment
from ..tasks import TIP_HEADER, Task, TaskState
from . import FAILED, NONE, PASSED, Forge, Job, PullRequest, Review, connect, settings, text

log = logging.getLogger("octopoid.forge")
MAX_JOBS = 10  # failed jobs quoted in one rejection
MAX_COMMENTS = 50  # line comments taken from one poll's reviews
MAX_BODY = 8000  # characters of one review's body
PR_HEADERS = ("PR_NUMBER", "PR_URL", "FORGE_SEEN")


def pr_number(task: Task) -> int | None:
    """The task's pull request number, or None (a hand-edited value that is not one too)."""
    raw = task.headers.get("PR_NUMBER", "")
    return int(raw) if raw.isdigit() and 0 < len(raw) < 10 else None


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
    remote = git_utils.remote_name()
    if remote is None:
        raise ForgeError("a pull request needs git.remote: the remote its branch is pushed to")
    repo = git_utils.open_repo()
    branch = git_utils.branch_for(task.id)
    task_tips.take_for_accept(repo, remote, task)
    if not git_utils.branch_exists(repo, branch):
        raise IllegalTransition(f"{task.label} has no branch {branch} to open a pull request for")
    git_utils.push_task_branch(repo, remote, task.id, review=True)
    pull = forge.find_pull_request(branch)
    if pull is None:
        learnings = lifecycle.learning_rows(lifecycle.pending_learnings(task))
        title = text.pull_request_title(task)
        body = text.pull_request_body(task, cfg["web_url"], learnings)
        try:
            pull = forge.open_pull_request(branch, task.branch, title, body)
        except ForgeUnavailable:
            raise
        except ForgeError:  # opened by a poll meanwhile, or an answer lost on the way
            pull = forge.find_pull_request(branch)
            if pull is None:
                raise

    def record(t: Task) -> None:
        t.set_header("PR_NUMBER", pull.number)
        t.set_header("PR_URL", text.one_line(pull.url, 500))

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
        return f"ci:{self.ci} review:{self.review}"


def poll(forge: Forge) -> list[str]:
    """One look at every task in provisional: open the pull requests ``open_on:
    provisional`` asks for, act on the verdicts of open ones. One line per thing done.
    One pull request the forge refuses something for (a merge, a bad answer) is logged
    and left; the others go on. An unreachable forge ends the poll (``ForgeUnavailable``)."""
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
        except ForgeUnavailable:
            raise
        except (TaskBusy, IllegalTransition, InvalidInput) as exc:  # a person is at it
            log.info("%s: left for now: %s", task.label, exc)
            continue
        except (ForgeError, ValueError, TypeError, KeyError) as exc:
            log.warning("%s: pull request #%s left for now: %s", task.label, number, exc)
            continue
        if line:
            done.append(f"{task.label}: {line}")
    return done


def _ready(task: Task) -> bool:
    """An attempt's work, not a proposed split, nor 'no change needed' without commits;
    one a runner submitted (as accept requires)."""
    if "PROPOSED_SPLIT" in task.headers or "NO_CHANGE" in task.headers:
        return False
    return queue_utils.unfenced_submit(task) is None


def verdict(forge: Forge, task: Task, number: int, cfg: dict) -> str | None:
    """Read pull request ``number`` and make the move its verdict asks for; what was done.
    Judged and moved under the task's hold, and only for the attempt ``task`` was read as."""
    who = forge.kind
    pull = forge.pull_request(number)
    store = queue_utils.get_store()
    with store.hold(task.id, "judged by the forge"):
        now = queue_utils.get_task(task.id)
        if now.state is not TaskState.PROVISIONAL or now.attempts != task.attempts:
            return None  # moved, or another attempt in review since it was read
        if pull.state == "merged":
            by = text.one_line(pull.merged_by, 80) or "someone"
            reason = f"forge: merged by {by}"
            review.accept_merged(now.id, f"{who}:{by}", pull.merge_sha, reason)
            return f"merged by {by}"
        if pull.state == "closed":
            by = text.one_line(pull.closed_by, 80) or "someone"
            why = f"forge: pull request #{number} closed by {by} without merging"
            queue_utils.fail_task(now.id, why, actor=f"{who}:{by}", drop=PR_HEADERS)
            return f"closed by {by}"
        _follow_head(now, pull)
        seen = Seen.of(now)
        fresh_ci = seen.ci != pull.head_sha
        ci = forge.ci(number, pull.head_sha, cfg.get("log_tail_chars", 3000) if fresh_ci else 0)
        reviews = forge.reviews(number, seen.review)
        asking = [r for r in _latest_by_author(reviews) if r.state == "changes"]
        asking = [r for r in asking if r.id > seen.review]
        failed = ci.failed if ci.state == FAILED and fresh_ci else ()
        if failed or asking:
            return _send_back(now, pull, failed, asking, seen, who)
        ready = cfg.get("merge_when_approved") and ci.state in (PASSED, NONE)
        if ready and _approved(reviews, pull.head_sha):
            return _merge(forge, now, number, pull, ci.state, who)
    return None


def _merge(forge: Forge, task: Task, number: int, pull: PullRequest, ci: str, who: str) -> str:
    forge.merge(number, pull.head_sha)  # the head judged: a newer push refuses it
    merged = forge.pull_request(number)
    if merged.state != "merged":
        return f"merge asked; the forge says {merged.state}"
    by = text.one_line(merged.merged_by, 80) or "octopoid"
    reason = f"forge: merged by {by} (approved, CI {ci})"
    review.accept_merged(task.id, f"{who}:{by}", merged.merge_sha, reason)
    return f"approved and merged by {by}"


def _follow_head(task: Task, pull: PullRequest) -> None:
    """Keep the branch and the pull request's head together. A person pushed to it: take
    their commits as the branch (the tip octopoid had kept under ``refs/octopoid/replaced/``,
    ``git_utils.adopt``), and as the task's recorded tip, which the next attempt takes
    (``task_tips``). Octopoid's push was lost (the remote was down): push again."""
    repo = git_utils.open_repo()
    branch = git_utils.branch_for(task.id)
    remote = git_utils.remote_name()
    if remote is None or not pull.head_sha or not git_utils.branch_exists(repo, branch):
        return
    tip = git_utils.branch_tip(repo, branch)
    if tip == pull.head_sha:
        return
    with git_utils.repo_admin_lock():
        found = git_utils.fetch_branches(repo, remote, [branch], review=True)
    if found.get(branch) != pull.head_sha:
        return  # the forge is behind its own remote for a moment: the next poll looks again
    if repo.is_ancestor(pull.head_sha, tip):
        git_utils.push_task_branch(repo, remote, task.id, review=True)
        log.info("%s: pushed %s, which the pull request lacked", task.label, tip[:12])
        return
    with git_utils.repo_admin_lock():
        git_utils.adopt(repo, branch, pull.head_sha, replace=True)
    queue_utils.get_store().update(
        task.id, TaskState.PROVISIONAL, lambda t: t.set_header(TIP_HEADER, pull.head_sha)
    )
    log.info("%s: its branch moved on the forge to %s", task.label, pull.head_sha[:12])


def _latest_by_author(reviews: list[Review]) -> list[Review]:
    """Each reviewer's last word (approved or changes; comments do not change a verdict)."""
    latest: dict[str, Review] = {}
    for one in sorted(reviews, key=lambda r: r.id):
        if one.state in ("approved", "changes"):
            latest[one.author] = one
    return list(latest.values())


def _approved(reviews: list[Review], head: str) -> bool:
    """Every reviewer's last word is an approval, of this head where the forge says which
    (an approval of an earlier attempt does not merge the next one)."""
    latest = _latest_by_author(reviews)
    return bool(latest) and all(r.state == "approved" and r.commit in ("", head) for r in latest)


def _send_back(
    task: Task,
    pull: PullRequest,
    failed_jobs: tuple[Job, ...],
    asking: list[Review],
    seen: Seen,
    who: str,
) -> str:
    """One rejection for everything the forge said: the CI's failed jobs with their log
    tails, then each review's body, its line comments as line comments. Everything the
    forge sent is cleaned of control characters and bounded before it is written."""
    parts, said = [], []
    if failed_jobs:
        jobs = failed_jobs[:MAX_JOBS]
        names = ", ".join(text.one_line(job.name, 100) for job in jobs)
        said.append(f"CI failed ({names})")
        parts.append(f"CI failed on {pull.head_sha[:12]} (pull request #{pull.number}): {names}")
        for job in jobs:
            tail = text.clean(job.log_tail).rstrip() or "(no log)"
            parts.append(f"--- {text.one_line(job.name, 100)}: the end of its log ---\n{tail}")
        seen.ci = pull.head_sha
    comments: list[LineComment] = []
    for one in asking:
        author = text.one_line(one.author, 80) or "a reviewer"
        said.append(f"changes requested by {author}")
        body = text.clean(one.body).strip()[:MAX_BODY] or "(no summary)"
        parts.append(f"{author} asked for changes:\n{body}")
        comments += [
            LineComment(c.path, c.line, c.text, end=c.end, side=c.side) for c in one.comments
        ]
        seen.review = max(seen.review, one.id)
    summary = f"forge: {' and '.join(said)}"
    reviewers = [text.one_line(one.author, 80) for one in asking]
    by = f"{who}:{reviewers[0]}" if len(reviewers) == 1 and not failed_jobs else who
    located = review.with_code(task, _valid(comments[:MAX_COMMENTS]), strict=False)
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

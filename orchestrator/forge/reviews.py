"""What reviewers said on the forge, as octopoid acts on it.

A reviewer's verdict is their last word (an approval or a request for changes; a comment
changes no verdict). A task goes back for changes when some reviewer's last word asks for
them and came after what the task last took; then every review not taken yet goes into
the notes, in the order they were given: two requests for changes by one reviewer, and the
comments and line comments of reviews that only commented (marked as comments), not just
the newest verdict. An approval counts for the head it approved, where the forge says.
"""

from __future__ import annotations

import logging

from ..base.redaction import scrub
from ..model.exceptions import InvalidInput
from ..model.tasks import Task
from ..queue import machine as queue_utils
from ..queue.line_comments import LineComment
from ..review import verdicts as review
from ..review.comments import MAX_COMMENT_CHARS, line_comment
from . import Job, PullRequest, Review, text
from .seen import LOGIN_RE, Seen

log = logging.getLogger("octopoid.forge")
MAX_JOBS = 10  # failed jobs quoted in one rejection
MAX_COMMENTS = 50  # line comments taken from one poll's reviews
MAX_BODY = 8000  # characters of one review's body
SAID = {"changes": "asked for changes", "comment": "commented", "approved": "approved, saying"}


def latest_by_author(reviews: list[Review]) -> list[Review]:
    """Each reviewer's last word (approved or changes; comments do not change a verdict)."""
    latest: dict[str, Review] = {}
    for one in sorted(reviews, key=lambda r: r.id):
        if one.state in ("approved", "changes"):
            latest[one.author] = one
    return list(latest.values())


def asking(reviews: list[Review], seen: Seen) -> list[Review]:
    """The reviewers whose last word asks for changes the task has not taken yet."""
    return [r for r in latest_by_author(reviews) if r.state == "changes" and r.id > seen.review]


def untaken(reviews: list[Review], seen: Seen) -> list[Review]:
    """Every review with something to read that the task has not taken yet, oldest first."""
    fresh = [r for r in reviews if r.id > seen.review]
    return sorted((r for r in fresh if r.state == "changes" or r.body.strip() or r.comments),
                  key=lambda r: r.id)  # fmt: skip


def approved(reviews: list[Review], head: str) -> bool:
    """Every reviewer's last word is an approval, of this head where the forge says which
    (an approval of an earlier attempt does not merge the next one)."""
    latest = latest_by_author(reviews)
    return bool(latest) and all(r.state == "approved" and r.commit in ("", head) for r in latest)


def stale(reviews: list[Review], head: str) -> list[Review]:
    """Approvals that would merge the pull request but for being of an earlier head."""
    latest = latest_by_author(reviews)
    if not latest or any(r.state != "approved" for r in latest):
        return []
    return [r for r in latest if r.commit not in ("", head)]


def send_back(
    task: Task,
    pull: PullRequest,
    failed_jobs: tuple[Job, ...],
    reviews: list[Review],
    seen: Seen,
    who: str,
) -> str:
    """One rejection for everything the forge said: the CI's failed jobs with their log
    tails, then each review not taken yet, in order, its line comments as line comments.
    Everything the forge sent is cleaned of control characters and bounded before it is
    written. The reviewers who asked for changes are asked again once an attempt answers."""
    parts, said = [], []
    if failed_jobs:
        jobs = failed_jobs[:MAX_JOBS]
        names = ", ".join(text.one_line(job.name, 100) for job in jobs)
        said.append(f"CI failed ({names})")
        parts.append(f"CI failed on {pull.head_sha[:12]} (pull request #{pull.number}): {names}")
        for job in jobs:
            tail = scrub(job.log_tail).rstrip() or "(no log)"
            parts.append(f"--- {text.one_line(job.name, 100)}: the end of its log ---\n{tail}")
        seen.ci = pull.head_sha
    comments: list[LineComment] = []
    askers = []
    for one in untaken(reviews, seen):
        author = text.one_line(one.author, 80) or "a reviewer"
        body = scrub(one.body).strip()[:MAX_BODY]
        if body or not one.comments:
            parts.append(f"{author} {SAID.get(one.state, 'commented')}:\n{body or '(no summary)'}")
        if one.state == "changes" and author not in askers:
            askers.append(author)
        kind = "asks for changes" if one.state == "changes" else "a comment"
        comments += [
            LineComment(c.path, c.line, f"{author} ({kind}): {c.text}", end=c.end, side=c.side)
            for c in one.comments
        ]
        seen.review = max(seen.review, one.id)
    said += [f"changes requested by {author}" for author in askers]
    seen.asked = [a for a in dict.fromkeys([*seen.asked, *askers]) if LOGIN_RE.fullmatch(a)]
    summary = f"forge: {' and '.join(said)}"
    by = f"{who}:{askers[0]}" if len(askers) == 1 and not failed_jobs else who
    located = review.with_code(task, _valid(comments[:MAX_COMMENTS]), strict=False)
    queue_utils.reject_completion(
        task.id, "\n\n".join(parts), by, comments=located, summary=summary, mark=seen.mark()
    )
    return summary.removeprefix("forge: ")


def _valid(comments: list[LineComment]) -> list[LineComment]:
    """A forge's comments checked as a person's are (``review.comments.line_comment``); one that is
    not (a hostile path, an absurd line) is dropped, not fatal."""
    kept = []
    for c in comments:
        said = scrub(c.text)[:MAX_COMMENT_CHARS]
        try:
            kept.append(line_comment(c.path, str(c.line), said, str(c.end or ""), c.side))
        except InvalidInput as exc:
            log.warning("a forge's line comment left out: %s", exc)
    return kept

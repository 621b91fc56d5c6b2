"""What octopoid writes to a forge and reads from it, as pure functions.

Everything written is redacted (a task's context may quote a secret) and carries a hidden
marker, ``<!-- octopoid:TASK-7:pull-request -->``: a comment is posted only when the issue
holds none with its marker, so a poll that dies after posting never posts twice. Everything
read (an issue's title and body, a review, a CI log) is hostile until cleaned by
``redaction.scrub``: control characters go, secrets are redacted, lengths are bounded,
and it reaches the task file only through ``tasks.new_task``, which escapes any line that
could pose as a section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..base.redaction import PEM_HOLD_BYTES, redact, scrub
from ..model.tasks import DEFAULT_PRIORITY, Task, unclosed_fence

MAX_TITLE = 200  # tasks.py refuses longer: an imported title is cut, saying so
MAX_CRITERION = 500
MAX_CRITERIA = 50
MAX_BLOCKERS = 20  # "blocked by #N" an issue may name (BLOCKED_BY is one header line)
MAX_CONTEXT = 64 * 1024  # of an issue's body; the rest is a link away
MAX_BODY = 60_000  # of a pull request's description (GitHub's limit is 65,536)
TASK_ITEM_RE = re.compile(r"^\s{0,3}[-*+]\s+\[([ xX])\]\s+(.+?)\s*$")
BLOCKED_BY_RE = re.compile(r"(?i)\b(?:blocked\s+by|depends\s+on)\s+#(\d{1,9})\b")
PRIORITY_LABEL_RE = re.compile(r"(?i)^(?:priority\s*[:/=]{0,2}\s*)?p([0-3])$")


def marker(task: Task, event: str) -> str:
    return f"<!-- octopoid:{task.label}:{event} -->"


def pull_request_title(task: Task) -> str:
    return f"{redact(task.title)} ({task.label})"


def pull_request_body(
    task: Task, web_url: str | None = None, learnings: list[dict] | None = None
) -> str:
    """The description of a task's pull request, written for a reviewer on the forge and
    rewritten at each attempt: the task as the agent got it (its criteria as a plain list,
    not a task list the forge would count as open), which attempt this is and what the
    attempts cost, the checks the attempt passed, the ``learnings``
    (``lifecycle.learning_rows``) its merge keeps in project memory, and its page (with
    ``forge.web_url``)."""
    criteria = "\n".join(f"- {c}" for c in task.criteria) or "_none given_"
    facts = [f"**Attempt:** {task.attempts}"]
    if cost := task.headers.get("COST_USD_TOTAL"):
        facts.append(f"**Cost so far:** ${cost}")
    checks = [line for line in task.history if "(checks:" in line]
    page = f" ([its page]({web_url.rstrip('/')}/tasks/{task.label}))" if web_url else ""
    lines = [
        f"An agent's work on octopoid task **{task.label}**{page}. Review it here as any "
        "pull request: asking for changes sends it back to the agent with your comments; "
        "its next attempt pushes here and this description is brought up to date.",
        "",
        "## Context",
        "",
        task.context.strip() or "_none given_",
        "",
        "## Acceptance Criteria",
        "",
        criteria,
        "",
        " · ".join(facts),
    ]
    if checks:
        lines += ["", "## Checks", "", *(f"- {c}" for c in checks[-10:])]
    if kept := [row for row in learnings or () if not row["struck"]]:
        lines += ["", "## Learnings kept in project memory when this merges", ""]
        lines += [f"- [{row['section']}] {row['text']} ({row['from']})" for row in kept]
        lines += ["", "(A person can strike one on the task's page in octopoid before the merge.)"]
    if issue := task.headers.get("ISSUE_NUMBER"):
        lines += ["", f"Closes #{issue}"]
    body = redact("\n".join(lines))
    if len(body) > MAX_BODY:  # GitHub refuses a description past 65,536 characters
        body = f"{body[:MAX_BODY]}\n\n[... cut at {MAX_BODY} characters]"
    return f"{body}\n\n{marker(task, 'pull-request')}"


def attempt_comment(task: Task, changed: list[str], skipped: int, asked: list[str]) -> str:
    """What octopoid says on the pull request when an attempt reached review there: what
    it changed (its commits' subjects, not its log), the reviewers whose changes it
    answered (asked to review again), and attempts that ended before review meanwhile."""
    lines = [f"Attempt {task.attempts} of {task.label} is ready for review."]
    if asked:
        lines.append(f"It answers the review of {', '.join('@' + a for a in asked)}.")
    if changed:
        lines += ["", "What it changed:", *(f"- {one_line(c, 200)}" for c in changed)]
    if skipped:
        s = "s" * (skipped != 1)
        lines += ["", f"({skipped} attempt{s} before it ended without reaching review.)"]
    said = "\n".join(lines)
    return f"{redact(said)}\n\n{marker(task, f'attempt-{task.attempts}')}"


def ended_comment(task: Task, why: str) -> str:
    """What octopoid says on the pull request when an attempt of its task failed."""
    said = f"Attempt {task.attempts} of {task.label} failed: {one_line(why, 1000)}"
    return f"{redact(said)}\n\n{marker(task, f'attempt-{task.attempts}')}"


def stale_comment(task: Task, approvals: list[tuple[str, str]], head: str) -> str:
    """Why an approved pull request is not merged: the approvals are of earlier heads."""
    who = ", ".join(f"@{login} ({sha[:12]})" for login, sha in approvals)
    said = (
        f"Not merged: the approvals of {who} are of an earlier head, not of {head[:12]} "
        f"(attempt {task.attempts}). Approve {head[:12]} to merge it."
    )
    return f"{redact(said)}\n\n{marker(task, f'stale-{head[:12]}')}"


@dataclass(frozen=True)
class ImportedIssue:
    title: str
    context: str
    criteria: list[str]
    priority: str
    blockers: list[int]


def log_tail(log: bytes | str, limit: int) -> str:
    """The last ``limit`` characters of a CI log, cleaned before the cut: a cut first would
    leave the rest of a secret it went through (a key block's base64) unrecognised. The
    part cleaned reaches back as far as redaction holds a key block."""
    before = limit + PEM_HOLD_BYTES
    text = log[-4 * before :].decode("utf-8", "replace") if isinstance(log, bytes) else log
    return scrub(text[-before:])[-limit:]


def one_line(text: str, limit: int) -> str:
    text = scrub(text, multiline=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def from_issue(
    number: int, url: str, title: str, body: str, labels: tuple[str, ...]
) -> ImportedIssue:
    """An issue as a task: its task-list items are the acceptance criteria, the rest of its
    body the context, a ``P0``..``P3`` label (or ``priority: P1``) the priority, and
    "blocked by #N" / "depends on #N" its blockers."""
    body = scrub(body)
    criteria, context = [], []
    for line in body.split("\n"):
        item = TASK_ITEM_RE.match(line)
        if item and len(criteria) < MAX_CRITERIA:
            criteria.append(one_line(item.group(2), MAX_CRITERION))
        else:
            context.append(line)
    text = "\n".join(context).strip()
    if len(text) > MAX_CONTEXT:
        text = f"{text[:MAX_CONTEXT]}\n\n[... cut at {MAX_CONTEXT} characters: read the issue]"
    if fence := unclosed_fence(text):  # opened and never closed, or cut inside: tasks refuses
        text = f"{text}\n{fence}"
    context_text = f"Imported from issue #{number}: {scrub(url)}\n\n{text}".strip()
    found = (PRIORITY_LABEL_RE.match(label.strip()) for label in labels)
    priority = next((f"P{m.group(1)}" for m in found if m), DEFAULT_PRIORITY)
    blockers = sorted({int(n) for n in BLOCKED_BY_RE.findall(body)} - {number})[:MAX_BLOCKERS]
    return ImportedIssue(
        one_line(title, MAX_TITLE) or f"Issue #{number}", context_text, criteria, priority, blockers
    )


EVENTS = ("started", "pull-request", "done", "failed", "cancelled")


def issue_comment(task: Task, event: str, detail: str = "") -> str:
    """What octopoid says on an issue when its task starts, gets a pull request, is done,
    fails, or is cancelled because the issue was closed. ``event`` is one of ``EVENTS``,
    numbered where it can happen again (``pull-request-12``, ``failed-2``): the marker
    names it so, the words are the kind's."""
    kind = re.sub(r"-\d+$", "", event)
    said = {
        "started": f"Octopoid started work on this as {task.label}.",
        "pull-request": f"Octopoid opened a pull request for {task.label}: {detail}",
        "done": f"{task.label} is done{f': {detail}' if detail else '.'}",
        "failed": f"{task.label} failed: {detail or 'see `octopoid show ' + task.label + '`'}",
        "cancelled": f"The issue was closed before work started: {task.label} is cancelled.",
    }[kind]
    return f"{redact(said)}\n\n{marker(task, event)}"

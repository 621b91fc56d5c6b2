"""What octopoid writes to a forge and reads from it, as pure functions.

Everything written is redacted (a task's context may quote a secret) and carries a hidden
marker, ``<!-- octopoid:TASK-7:pull-request -->``: a comment is posted only when the issue
holds none with its marker, so a poll that dies after posting never posts twice. Everything
read (an issue's title and body, a review, a CI log) is hostile until cleaned by ``clean``
(``redaction.scrub``): control characters go, secrets are redacted, lengths are bounded,
and it reaches the task file only through ``tasks.new_task``, which escapes any line that
could pose as a section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..redaction import PEM_HOLD_BYTES, redact, scrub
from ..tasks import DEFAULT_PRIORITY, Task, unclosed_fence

MAX_TITLE = 200  # tasks.py refuses longer: an imported title is cut, saying so
MAX_CRITERION = 500
MAX_CRITERIA = 50
MAX_BLOCKERS = 20  # "blocked by #N" an issue may name (BLOCKED_BY is one header line)
MAX_CONTEXT = 64 * 1024  # of an issue's body; the rest is a link away
MAX_BODY = 60_000  # of a pull request's description (GitHub's limit is 65,536)
TASK_ITEM_RE = re.compile(r"^\s{0,3}[-*+]\s+\[([ xX])\]\s+(.+?)\s*$")
BLOCKED_BY_RE = re.compile(r"(?i)\b(?:blocked\s+by|depends\s+on)\s+#(\d{1,9})\b")
PRIORITY_LABEL_RE = re.compile(r"(?i)^(?:priority\s*[:/=]{0,2}\s*)?p([0-3])$")


def marker(task: Task | str, event: str) -> str:
    label = task.label if isinstance(task, Task) else task
    return f"<!-- octopoid:{label}:{event} -->"


def pull_request_title(task: Task) -> str:
    return f"{redact(task.title)} ({task.label})"


def pull_request_body(
    task: Task, web_url: str | None = None, learnings: list[dict] | None = None
) -> str:
    """The description of a task's pull request: the task as the agent got it, what its
    attempts cost, the ``learnings`` (``lifecycle.learning_rows``) its merge keeps in
    project memory, and how to find it in octopoid (its page, with ``forge.web_url``)."""
    criteria = "\n".join(f"- [ ] {c}" for c in task.criteria) or "_none given_"
    facts = [f"**Attempts:** {task.attempts}"]
    if cost := task.headers.get("COST_USD_TOTAL"):
        facts.append(f"**Cost:** ${cost}")
    checks = [line for line in task.history if "(checks:" in line]
    page = f"[its page]({web_url.rstrip('/')}/tasks/{task.label}), " if web_url else ""
    lines = [
        f"Octopoid task **{task.label}**: {page}`octopoid show {task.label}`, "
        f"`octopoid notes {task.label}`.",
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
        lines += ["", f"`octopoid accept {task.label} --forget N` before the merge strikes one."]
    if issue := task.headers.get("ISSUE_NUMBER"):
        lines += ["", f"Closes #{issue}"]
    body = redact("\n".join(lines))
    if len(body) > MAX_BODY:  # GitHub refuses a description past 65,536 characters
        body = f"{body[:MAX_BODY]}\n\n[... cut: `octopoid show {task.label}` has it all]"
    return f"{body}\n\n{marker(task, 'pull-request')}"


def _closed(text: str) -> str:
    """An issue's body may open a code fence it never closes (or be cut inside one), which
    ``tasks`` refuses: close it."""
    fence = unclosed_fence(text)
    return f"{text}\n{fence}" if fence else text


@dataclass(frozen=True)
class ImportedIssue:
    title: str
    context: str
    criteria: list[str]
    priority: str
    blockers: list[int]


def clean(text: str) -> str:
    """Text a forge sent, as octopoid keeps it (``redaction.scrub``): without NUL or other
    control characters (tab and newline stay), lines ending in LF, secrets redacted."""
    return scrub(text)


def log_tail(log: bytes | str, limit: int) -> str:
    """The last ``limit`` characters of a CI log, cleaned before the cut: a cut first would
    leave the rest of a secret it went through (a key block's base64) unrecognised. The
    part cleaned reaches back as far as redaction holds a key block."""
    before = limit + PEM_HOLD_BYTES
    text = log[-4 * before :].decode("utf-8", "replace") if isinstance(log, bytes) else log
    return clean(text[-before:])[-limit:]


def one_line(text: str, limit: int) -> str:
    text = scrub(text, multiline=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def from_issue(
    number: int, url: str, title: str, body: str, labels: tuple[str, ...]
) -> ImportedIssue:
    """An issue as a task: its task-list items are the acceptance criteria, the rest of its
    body the context, a ``P0``..``P3`` label (or ``priority: P1``) the priority, and
    "blocked by #N" / "depends on #N" its blockers."""
    body = clean(body)
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
    context_text = f"Imported from issue #{number}: {clean(url)}\n\n{_closed(text)}".strip()
    priority = DEFAULT_PRIORITY
    for label in labels:
        if found := PRIORITY_LABEL_RE.match(label.strip()):
            priority = f"P{found.group(1)}"
            break
    blockers = sorted({int(n) for n in BLOCKED_BY_RE.findall(body)} - {number})[:MAX_BLOCKERS]
    return ImportedIssue(
        one_line(title, MAX_TITLE) or f"Issue #{number}", context_text, criteria, priority, blockers
    )


EVENTS = ("started", "pull-request", "done", "failed", "cancelled")


def issue_comment(task: Task, event: str, detail: str = "") -> str:
    """What octopoid says on an issue when its task starts, gets a pull request, is done,
    fails, or is cancelled because the issue was closed."""
    said = {
        "started": f"Octopoid started work on this as {task.label}.",
        "pull-request": f"Octopoid opened a pull request for {task.label}: {detail}",
        "done": f"{task.label} is done{f': {detail}' if detail else '.'}",
        "failed": f"{task.label} failed: {detail or 'see `octopoid show ' + task.label + '`'}",
        "cancelled": f"The issue was closed before work started: {task.label} is cancelled.",
    }[event]
    return f"{redact(said)}\n\n{marker(task, event)}"

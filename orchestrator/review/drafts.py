"""A reviewer's draft review of a task, kept by the store so a reload, a closed tab, a
restart of `octopoid web` or another machine's page loses nothing: the line comments not
sent yet, the reason being typed, the acceptance criteria ticked, the files marked viewed,
and the learnings struck or rewritten (by their numbers, as `octopoid show` gives them).

One record per task and reviewer (``reviews/TASK-<id>/<reviewer>``), replaced whole; on
PostgreSQL every machine's page shows it. It is the page's memory, not the queue's:
nothing in it changes a task until its reviewer rejects or accepts, and that clears it. A
record that cannot be read as a draft is an empty draft, never an error page.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..base.text import ascii_int, clean_text
from ..model.exceptions import InvalidInput
from ..model.tasks import task_label
from ..queue import adopt
from ..queue.line_comments import LineComment
from ..queue.store.records import key_part
from .comments import line_comment

MAX_COMMENTS = 200
MAX_REASON_CHARS = 4000
MAX_VIEWED = 5000  # files marked viewed
MAX_CRITERIA = 200
MAX_LEARNINGS = 400  # numbers a draft may strike or rewrite (an attempt remembers 200 at most)
MAX_LEARNING_CHARS = 4000
SAFE_NAME_RE = re.compile(r"[^A-Za-z0-9_.-]")
FAMILY = "reviews"


@dataclass
class Draft:
    reason: str = ""
    comments: list[LineComment] = field(default_factory=list)
    ticked: list[int] = field(default_factory=list)  # acceptance criteria, counted from 0
    viewed: dict[str, str] = field(default_factory=dict)  # path: the blob the reviewer saw
    struck: list[int] = field(default_factory=list)  # learnings, counted from 1
    edited: dict[str, str] = field(default_factory=dict)  # a learning's number: its new text

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def draft_key(task_id: str, reviewer: str) -> str:
    """The record of ``reviewer``'s draft of the task: the name made safe for a key (and
    short), with a hash so two names that clean to the same text stay apart."""
    digest = hashlib.sha256(reviewer.encode()).hexdigest()[:12]
    name = SAFE_NAME_RE.sub("_", reviewer)[:40]
    return f"{_task_key(task_id)}/{key_part(f'{name}-{digest}')}"


def _task_key(task_id: str) -> str:
    return f"{FAMILY}/{task_label(task_id)}"


def load(task_id: str, reviewer: str) -> Draft:
    """The reviewer's draft (an empty one if there is none or it cannot be read)."""
    found = adopt.store().records.read(draft_key(task_id, reviewer))
    try:
        return Draft() if found is None else parse(found.value)
    except InvalidInput:
        return Draft()


def save(task_id: str, reviewer: str, data: Mapping[str, Any]) -> Draft:
    """Check ``data`` (the page's whole draft) and keep it; ``InvalidInput`` says what is
    wrong and keeps nothing. Two tabs saving at once: the last one wins, whole."""
    draft = parse(data)
    adopt.store().records.update(draft_key(task_id, reviewer), lambda _: draft.as_json())
    return draft


def clear(task_id: str, reviewer: str) -> None:
    """The reviewer sent their review: the draft is done with."""
    adopt.store().records.delete(draft_key(task_id, reviewer))


def clear_task(task_id: str) -> None:
    """Every reviewer's draft of a task that left review for good (done)."""
    records = adopt.store().records
    for key in records.list(_task_key(task_id)):
        records.delete(key)


def parse(data: Mapping[str, Any]) -> Draft:
    """A draft from JSON, each part checked as the review it would become is."""
    if not isinstance(data, Mapping):
        raise InvalidInput("a draft is a JSON object")
    reason = clean_text(_typed(data, "reason", str, ""), "the reason")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(f"the reason is over {MAX_REASON_CHARS} characters")
    comments = _typed(data, "comments", list, [])
    if len(comments) > MAX_COMMENTS:
        raise InvalidInput(f"a review holds at most {MAX_COMMENTS} line comments")
    ticked = _typed(data, "ticked", list, [])
    if len(ticked) > MAX_CRITERIA or not all(
        isinstance(i, int) and 0 <= i < MAX_CRITERIA for i in ticked
    ):
        raise InvalidInput("ticked criteria are numbers from 0")
    viewed = _typed(data, "viewed", dict, {})
    if len(viewed) > MAX_VIEWED or not all(
        isinstance(k, str) and isinstance(v, str) and len(k) <= 4096 and len(v) <= 64
        for k, v in viewed.items()
    ):
        raise InvalidInput("viewed files are path: blob id pairs")
    struck, edited = _learnings(data)
    return Draft(
        reason, [_comment(c) for c in comments], sorted(set(ticked)), dict(viewed), struck, edited
    )


def _learnings(data: Mapping[str, Any]) -> tuple[list[int], dict[str, str]]:
    """The learnings a draft strikes and rewrites, checked."""
    struck = _typed(data, "struck", list, [])
    if len(struck) > MAX_LEARNINGS or not all(
        isinstance(n, int) and 1 <= n <= MAX_LEARNINGS for n in struck
    ):
        raise InvalidInput("struck learnings are numbers from 1")
    edited = _typed(data, "edited", dict, {})
    if len(edited) > MAX_LEARNINGS or not all(
        isinstance(k, str)
        and ascii_int(k) is not None
        and isinstance(v, str)
        and len(v) <= MAX_LEARNING_CHARS
        for k, v in edited.items()
    ):
        raise InvalidInput(f"rewritten learnings are number: text of {MAX_LEARNING_CHARS} at most")
    texts = {k: clean_text(v, f"learning {k}") for k, v in edited.items()}
    return sorted(set(struck)), texts


def _comment(data: Any) -> LineComment:
    if not isinstance(data, Mapping):
        raise InvalidInput("a line comment is a JSON object")
    parts = {key: data.get(key) for key in ("path", "line", "text", "end", "side")}
    if not all(isinstance(parts[key], str | int) for key in ("path", "line", "text")):
        raise InvalidInput("a line comment needs path, line and text")
    end = parts["end"] if parts["end"] not in (None, 0, "") else None
    return line_comment(
        str(parts["path"]),
        str(parts["line"]),
        str(parts["text"]),
        None if end is None else str(end),
        str(parts["side"] or "new"),
    )


def _typed(data: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = data.get(key, default)
    if not isinstance(value, kind):
        raise InvalidInput(f"a draft's {key} must be a {kind.__name__}")
    return value

"""Pick the long-term memory worth putting in a task's prompt, within a character budget."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..tasks import Task

if TYPE_CHECKING:
    from .store import Memory

DEFAULT_BUDGET = 4000  # characters of memory one prompt may carry
RELATIVE_CUTOFF = 0.3  # keep notes scoring at least this share of the best match
CANDIDATES = 40
PATH_RE = re.compile(r"[\w./-]+\.\w{1,8}\b|[\w-]+/[\w./-]+")


def task_query(task: Task) -> str:
    """Title, context, acceptance criteria and the file paths the task mentions."""
    text = " ".join([task.title, task.context, *task.criteria])
    paths = PATH_RE.findall(text)
    return " ".join([text, *paths])


def relevant_notes(
    task: Task, store: Memory, *, scope: str | None = None, budget: int = DEFAULT_BUDGET
) -> list[dict[str, Any]]:
    """Pinned notes first, then the best matches above the cut-off, until the budget is spent.

    Only the notes returned (the ones a prompt will carry) get their access count raised.
    """
    chosen: list[dict[str, Any]] = []
    seen: set[int] = set()
    left = budget
    matches = store.search_notes(task_query(task), scope=scope, limit=CANDIDATES)
    best = max((m["score"] for m in matches), default=0.0)
    relevant = [m for m in matches if best > 0 and m["score"] >= RELATIVE_CUTOFF * best]
    for note in [*store.pinned_notes(scope), *relevant]:
        size = len(note["content"]) + 20
        if note["id"] in seen or size > left:
            continue
        chosen.append(note)
        seen.add(note["id"])
        left -= size
    store.record_access([n["id"] for n in chosen])
    return chosen

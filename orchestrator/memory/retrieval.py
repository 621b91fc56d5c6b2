"""Pick the long-term memory worth putting in a task's prompt, within a character budget.

Only what clears the bar (``ranking.over_bar``) goes in: a task that earlier work says
nothing about gets no memory at all, which is a good answer (a block of weak matches costs
tokens on every attempt, can mislead, and is the road a poisoned note travels). A note
shaped like an instruction goes in only when a person kept it (``instructions.injectable``),
and one about code the task's files no longer have not at all (``staleness``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model.tasks import Task
from . import ranking
from .instructions import injectable
from .staleness import Source, fresh

if TYPE_CHECKING:
    from .store import NoteStore

DEFAULT_BUDGET = 4000  # characters of memory one prompt may carry
CANDIDATES = 40  # the best matches looked at; the budget holds about ten of them
LABEL_CHARS = 20  # what a note's label costs in the block, roughly, beside its text


def task_query(task: Task) -> str:
    """Title, context and acceptance criteria: the paths and names in them are searched by
    first (``terms.query_terms``), and never dropped for words."""
    return " ".join([task.title, task.context, *task.criteria])


def relevant_notes(
    task: Task,
    store: NoteStore,
    *,
    scope: str | None = None,
    budget: int = DEFAULT_BUDGET,
    source: Source | None = None,
) -> list[dict[str, Any]]:
    """Pinned notes first, then the matches that clear the bar, best first, until the budget
    is spent; never an instruction-shaped note no person kept, nor, given the task's files
    at its base (``source``), one about code they no longer have (``staleness``).

    Only the notes returned (the ones a prompt will carry) get their access count raised.
    """
    chosen: list[dict[str, Any]] = []
    seen: set[int] = set()
    left = budget
    query = task_query(task)
    matches = store.search_notes(query, scope=scope, limit=CANDIDATES)
    if source is not None:
        matches = fresh(matches, query, source)
    relevant = ranking.over_bar(store, matches)
    for note in [*store.pinned_notes(scope), *relevant]:
        size = len(note["content"]) + LABEL_CHARS
        if note["id"] in seen or size > left or not injectable(note):
            continue
        chosen.append(note)
        seen.add(note["id"])
        left -= size
    store.record_access([n["id"] for n in chosen])
    return chosen

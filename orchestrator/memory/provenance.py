"""Where a learning came from: the stamp octopoid writes before each working-note item, and
the provenance a long-term note keeps (pure functions).

An item an attempt remembers is written as ``- [TASK-12 attempt 2 by impl-1] text``: the
stamp comes first, from octopoid, so no text an agent writes can pose as another attempt's.
A reviewer's edit, keep or strike is added to it (``; edited by alice``, ``; kept by
alice``, ``; struck by alice``): a keep is what lets an instruction-shaped learning reach
prompts (``instructions.py``). An accept keeps only the items of the attempt it accepts
(docs/memory.md).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..base.patterns import LazyPattern

MAX_NAME = 100
NAME = r"[^\[\];]{1,100}"
TASK_LABEL = r"TASK-[A-Za-z0-9_-]{1,64}"
STAMPED_RE = LazyPattern(
    rf"\[(?P<task>{TASK_LABEL}) (?:attempt (?P<attempt>\d{{1,9}}) )?"
    rf"by (?P<agent>{NAME})(?:; edited by (?P<edited>{NAME}))?"
    rf"(?:; kept by (?P<kept>{NAME}))?(?:; struck by (?P<struck>{NAME}))?\] (?P<text>.*)"
)
UNNAMEABLE_RE = LazyPattern(r"[\[\];\x00-\x1f\x7f-\x9f]")


def clean_name(who: object) -> str:
    """A name as a stamp holds it: no brackets, ``;`` or control characters, one line."""
    name = " ".join(UNNAMEABLE_RE.sub(" ", str(who)).split())[:MAX_NAME].strip()
    return name or "someone"


class Origin(NamedTuple):
    """Who recorded an item: the task, the attempt (None: a person, outside any attempt),
    the agent (or person), and a reviewer who edited, kept or struck it."""

    task: str
    attempt: int | None
    agent: str
    edited_by: str = ""
    struck_by: str = ""
    kept_by: str = ""

    def stamp(self) -> str:
        return f"[{'; '.join(self._parts())}]"

    def said(self) -> str:
        """In words: ``TASK-3 attempt 2 by impl-1, edited by bob``."""
        return ", ".join(self._parts())

    def _parts(self) -> list[str]:
        made = f" attempt {self.attempt}" if self.attempt is not None else ""
        marks = (("edited", self.edited_by), ("kept", self.kept_by), ("struck", self.struck_by))
        return [
            f"{self.task}{made} by {clean_name(self.agent)}",
            *(f"{what} by {clean_name(who)}" for what, who in marks if who),
        ]

    def edited(self, who: str) -> Origin:
        return self._replace(edited_by=clean_name(who))

    def struck(self, who: str) -> Origin:
        return self._replace(struck_by=clean_name(who))

    def kept(self, who: str) -> Origin:
        return self._replace(kept_by=clean_name(who))


def parse_item(line_text: str) -> tuple[Origin | None, str]:
    """(its origin, its text) of an item's text as the file holds it; None for an item
    without octopoid's stamp (written by hand, or before stamps)."""
    found = STAMPED_RE.fullmatch(line_text)
    if found is None:
        return None, line_text
    attempt = found["attempt"]
    origin = Origin(
        found["task"],
        None if attempt is None else int(attempt),
        found["agent"],
        found["edited"] or "",
        found["struck"] or "",
        found["kept"] or "",
    )
    return origin, found["text"].strip()


def render_item(text: str, origin: Origin | None) -> str:
    return f"{origin.stamp()} {text}" if origin is not None else text


def note_metadata(origin: Origin, source: str, accepted_by: str, accepted_at: str) -> dict:
    """What a long-term note keeps of where it came from (its ``metadata``)."""
    kept: dict[str, Any] = {"source": source, "task": origin.task, "agent": origin.agent}
    if origin.attempt is not None:
        kept["attempt"] = origin.attempt
    if origin.edited_by:
        kept["edited_by"] = origin.edited_by
    if origin.kept_by:
        kept["kept_by"] = origin.kept_by
    kept.update(accepted_by=accepted_by, accepted_at=accepted_at)
    return kept


def describe(note: dict[str, Any]) -> str:
    """A long-term note's provenance in words (`memory search`, the prompt): the task,
    attempt and agent that recorded it, who accepted it and when; "" when unknown."""
    meta = note.get("metadata") or {}
    if "accepted_by" not in meta:
        source = meta.get("source")
        return f"from {source}" if source else ""
    task = meta.get("task") or note.get("task_id") or "a task"
    attempt = f" attempt {meta['attempt']}" if "attempt" in meta else ""
    agent = meta.get("agent") or note.get("agent") or "someone"
    said = f"{task}{attempt} by {agent}, accepted by {meta['accepted_by']}"
    if meta.get("accepted_at"):
        said += f" at {meta['accepted_at']}"
    if meta.get("edited_by"):
        said += f", edited by {meta['edited_by']}"
    if meta.get("kept_by"):
        said += f", kept by {meta['kept_by']}"
    return said

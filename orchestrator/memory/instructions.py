"""Memory is reference, not instructions: the notes that read as orders, and which of them
a prompt may carry (pure functions).

A learning shaped like an instruction (an imperative to run a command, a URL piped to a
shell, an "always"/"never" rule) is what a poisoned note looks like: an agent that read
one in an earlier task's output can plant it for every later prompt. Such a note is
flagged when it is promoted (its ``metadata["instruction"]`` says why), shown to the
reviewer, and put in a prompt only when a person kept it: a reviewer's explicit keep
(``accept --keep N``), a person's own ``octopoid memory add`` (``notes.md``, or a task's
notes outside an attempt), or a pin (nothing in octopoid pins on its own).
"""

from __future__ import annotations

import re
from typing import Any

from ..base.patterns import LazyPattern

_START = r"(?:^|[.!?;:]\s+|\n)\s*(?:[-*]\s+)?"  # where a sentence (or a bullet) starts
_SHELL = r"(?:sudo\s+)?(?:ba|z|da|k|c|tc|fi)?sh|(?:sudo\s+)?(?:python3?|perl|ruby|node)"
SHAPES = (
    (
        "a URL piped to a shell",
        LazyPattern(rf"(?:\bcurl\b|\bwget\b|https?://)[^\n|]*\|\s*(?:{_SHELL})\b", re.I),
    ),
    (
        'an "always"/"never" rule',
        LazyPattern(
            rf"{_START}(?:you\s+(?:must|should)\s+)?(?:always|never)\b"
            r"|\b(?:must|should)\s+(?:always|never)\b|\bunder no circumstances\b",
            re.I,
        ),
    ),
    (
        "an imperative to run a command",
        LazyPattern(
            rf"{_START}(?:(?:please|first|you\s+must|you\s+should|make\s+sure\s+to|be\s+sure\s+to"
            r"|remember\s+to)\s+)?(?:run|execute|exec|install|download|curl|wget|sudo|bash|sh"
            r"|source|eval|pip3?|pipx|npm|npx|yarn|apt(?:-get)?|brew|chmod|export|disable|skip"
            r"|bypass|ignore)\b(?=\s*\S)",
            re.I,
        ),
    ),
)


def instruction_shape(text: str) -> str:
    """Why ``text`` reads as an instruction ("" when it does not)."""
    for reason, pattern in SHAPES:
        if pattern.search(text):
            return reason
    return ""


def kept_by_person(note: dict[str, Any]) -> bool:
    """Whether a person chose to keep this note (see the module's docstring)."""
    meta = note.get("metadata") or {}
    persons_item = "accepted_by" in meta and "attempt" not in meta and meta.get("agent") == "human"
    return bool(
        meta.get("kept_by")
        or meta.get("source") == "notes.md"
        or persons_item
        or note.get("pinned")
    )


def injectable(note: dict[str, Any]) -> bool:
    """Whether a prompt may carry ``note``: not instruction-shaped, or kept by a person."""
    meta = note.get("metadata") or {}
    shaped = meta.get("instruction") or instruction_shape(note.get("content") or "")
    return not shaped or kept_by_person(note)

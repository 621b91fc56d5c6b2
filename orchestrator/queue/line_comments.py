"""A reviewer's comment on lines of a task's branch: what a rejection carries into the
retry notes (``task_notes.add_review_notes``), a review draft keeps and a forge's review
becomes. A frozen dataclass (a draft's ``asdict`` turns it into a dict), in a module of its
own so that readers of notes do not build it at import."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LineComment:
    """A reviewer's comment on lines ``line``..``end`` of a file on the task's branch (or,
    ``side`` "old", lines the branch removed, numbered as in its base); ``code`` is their
    text."""

    path: str
    line: int
    text: str
    code: str = ""
    end: int = 0  # the last line of a range (0: just ``line``)
    side: str = "new"

    @property
    def where(self) -> str:
        """``line 3``, ``lines 3-5``, ``removed line 7``: which lines, in words."""
        lines = f"lines {self.line}-{self.end}" if self.end > self.line else f"line {self.line}"
        return f"removed {lines}" if self.side == "old" else lines

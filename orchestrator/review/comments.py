"""A reviewer's line comment, checked where it enters (the CLI's ``--comment``, the page's
fields, MCP, a forge's review) before anything is written: a relative path inside the
tree, a forward range, bounded text.

Its own module so the draft review (``drafts.py``) and the verdicts both use it without
importing each other.
"""

from __future__ import annotations

import re

from ..base.text import ascii_int, clean_text
from ..model.exceptions import InvalidInput
from ..model.tasks import MAX_COUNT, shown
from ..queue.line_comments import LineComment

MAX_PATH_CHARS = 4096  # a comment's file path; git allows longer, nobody needs it
MAX_COMMENT_CHARS = 4000  # one line comment; the notes' prompt budget is ~12k in all
MAX_RANGE_LINES = 200  # of one comment


#: ``PATH:LINE:TEXT`` or ``PATH:LINE-END:TEXT``; the path ends at the first ``:<number>:``,
#: so it may hold colons itself (``a:b.py:3:text``).
COMMENT_SPEC_RE = re.compile(r"(?s)(.*?):(\d+)(?:-(\d+))?:(.*)")


def parse_line_comment(spec: str) -> LineComment:
    """``PATH:LINE:TEXT`` or ``PATH:LINE-END:TEXT`` (``--comment``) as a ``LineComment``;
    ``InvalidInput`` for anything else."""
    spec = clean_text(spec, "--comment")
    found = COMMENT_SPEC_RE.fullmatch(spec)
    if not found:
        raise InvalidInput(f"--comment {shown(spec)} is not PATH:LINE:TEXT (or PATH:LINE-END:TEXT)")
    path, line, end, text = found.groups()
    return line_comment(path, line, text, end)


def line_comment(
    path: str, line: str, text: str, end: str | None = None, side: str = "new"
) -> LineComment:
    """A comment from its parts (the page sends them as fields, the CLI in one spec);
    ``InvalidInput`` says what is wrong. The path must be relative and stay in the tree."""
    path, text = clean_text(path, "a comment's path"), clean_text(text, "a comment")
    where = f"{shown(path)}:{shown(line)}"
    first, last = _line_number(line, where), _line_number(end or line, where)
    if last < first or last - first >= MAX_RANGE_LINES:
        raise InvalidInput(
            f"comment on {where}: a range runs forward, at most {MAX_RANGE_LINES} lines"
        )
    if side not in ("new", "old"):
        raise InvalidInput(f"comment on {where}: side must be new or old, not {shown(side)}")
    if not text.strip():
        raise InvalidInput(f"comment on {where} has no text")
    if len(text) > MAX_COMMENT_CHARS:
        raise InvalidInput(f"comment on {where} is over {MAX_COMMENT_CHARS} characters")
    parts = path.split("/")
    if not path or len(path) > MAX_PATH_CHARS or "\n" in path or "\r" in path:
        raise InvalidInput(f"comment on {where}: no usable file path")
    if path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise InvalidInput(
            f"comment on {where}: the path must be relative to the repository, "
            "without '.', '..' or empty parts"
        )
    return LineComment(path, first, text.strip(), end=last if last > first else 0, side=side)


def _line_number(value: str, where: str) -> int:
    number = ascii_int(value.strip())
    if number is None or not 0 < number <= MAX_COUNT:
        raise InvalidInput(f"comment on {where}: the line must be a number from 1")
    return number

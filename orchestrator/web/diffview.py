"""A task's diff as rows a template can draw: parsed by unidiff, each line highlighted by
Pygments into escaped HTML. Agent text never reaches the page unescaped: Pygments escapes
every token, and a line it cannot lex is escaped whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound
from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

MAX_LINES = 5000  # rows drawn in all; a bigger diff is cut, with `octopoid diff` named
_FORMATTER = HtmlFormatter(nowrap=True)


@dataclass
class Row:
    kind: str  # "add", "del", "ctx" or "hunk"
    old: int | None
    new: int | None
    html: Markup


@dataclass
class FileDiff:
    path: str
    added: int
    removed: int
    status: str  # "added", "removed", "modified", "renamed", "binary"
    rows: list[Row] = field(default_factory=list)


@dataclass
class DiffView:
    files: list[FileDiff]
    truncated: bool = False


@lru_cache(maxsize=256)
def _lexer(path: str) -> Lexer:
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _highlighted(line: str, lexer: Lexer) -> Markup:
    """One source line as escaped, highlighted HTML (Pygments escapes every token)."""
    try:
        return Markup(highlight(line, lexer, _FORMATTER).rstrip("\n"))
    except Exception:  # a lexer bug on odd input must not hide the line: show it plain
        return escape(line)


def _status(patched) -> str:
    if patched.is_binary_file:
        return "binary"
    if patched.is_added_file:
        return "added"
    if patched.is_removed_file:
        return "removed"
    if patched.is_rename:
        return "renamed"
    return "modified"


def render_diff(text: str, max_lines: int = MAX_LINES) -> DiffView:
    """The diff ``git diff base...branch`` printed, as files of highlighted rows."""
    try:
        patch = PatchSet(text)
    except UnidiffParseError:
        rows = [Row("ctx", None, None, escape(line)) for line in text.splitlines()[:max_lines]]
        return DiffView([FileDiff("(unparsed diff)", 0, 0, "modified", rows)])
    files, budget = [], max_lines
    for patched in patch:
        path = patched.path
        entry = FileDiff(path, patched.added, patched.removed, _status(patched))
        lexer = _lexer(path)
        for hunk in patched:
            header = f"@@ -{hunk.source_start},{hunk.source_length} "
            header += f"+{hunk.target_start},{hunk.target_length} @@ {hunk.section_header}"
            entry.rows.append(Row("hunk", None, None, escape(header.rstrip())))
            for line in hunk:
                if budget <= 0:
                    return DiffView([*files, entry], truncated=True)
                budget -= 1
                kind = {"+": "add", "-": "del"}.get(line.line_type, "ctx")
                html = _highlighted(line.value.rstrip("\r\n"), lexer)
                entry.rows.append(Row(kind, line.source_line_no, line.target_line_no, html))
        files.append(entry)
    return DiffView(files)


def pygments_css() -> str:
    """The stylesheet for the highlighted spans (served as a static-like route)."""
    return _FORMATTER.get_style_defs(".code")

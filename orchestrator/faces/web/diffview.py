"""A task's diff as rows a template can draw, read within a budget and cached by head.

An agent may commit a 400,000-line file: the page reads at most ``MAX_BYTES`` of the diff
(git is stopped there), draws at most ``MAX_ROWS`` rows, and says what it left out, from
``git diff --numstat``. A drawn diff is kept per (base tip, branch tip), so eight reviewers
loading one task make one read between them. The parser is git's unified format, read
line by line, so a diff cut anywhere still draws what came before the cut.

Agent text never reaches the page unescaped: Pygments escapes every token, and a line it
cannot lex is escaped whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import zip_longest
from pathlib import Path
from typing import TypeVar

from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from ...review import diffs

MAX_BYTES = 2 * 1024 * 1024  # of the diff read for a page
MAX_ROWS = 5000  # rows drawn in all
MAX_FILE_LINES = 3000  # changed lines of a file past which it is named, not drawn
MAX_SKIPPED = 200  # files left out by name (past it, the byte and row budgets cut)
MAX_LINE_CHARS = 2000  # of one line drawn; a minified file's line is cut
CACHED = 16  # drawn diffs kept (each within the budgets above)
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
    added: int = 0
    removed: int = 0
    status: str = "modified"  # "added", "removed", "modified", "renamed", "binary"
    rows: list[Row] = field(default_factory=list)
    old_path: str = ""  # a renamed file's name before
    blob: str = ""  # git's "index" line (old..new blob ids): a reviewer's "viewed" names it

    @property
    def pairs(self) -> list[tuple[Row | None, Row | None]]:
        """The rows side by side (the split view): each run of removed lines beside the run
        of added lines that follows it; context and hunk rows on both sides."""
        out: list[tuple[Row | None, Row | None]] = []
        removed: list[Row] = []
        added: list[Row] = []

        def flush() -> None:
            out.extend(zip_longest(removed, added))
            removed.clear()
            added.clear()

        for row in self.rows:
            if row.kind == "del":
                if added:
                    flush()
                removed.append(row)
            elif row.kind == "add":
                added.append(row)
            else:
                flush()
                out.append((row, row))
        flush()
        return out


@dataclass
class DiffView:
    files: list[FileDiff]
    truncated: bool = False
    total_files: int = 0  # in the whole diff (numstat), shown or not
    total_lines: int = 0  # added plus removed in the whole diff
    shown_lines: int = 0
    too_big: list[diffs.FileStat] = field(default_factory=list)  # not drawn: too many lines,
    # or too many bytes for git to diff (``FileStat.too_big_to_diff``: its size is said)

    @property
    def left_out(self) -> str:
        """What the page does not draw, in words ("" when it draws everything)."""
        if not self.truncated:
            return ""
        drawn = [f for f in self.files if f.rows or f.status == "binary"]
        return (
            f"Showing {len(drawn):,} of {self.total_files:,} files and "
            f"{self.shown_lines:,} of {self.total_lines:,} changed lines"
        )


@lru_cache(maxsize=256)
def _lexer(path: str) -> Lexer:
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _highlighted(lines: list[str], lexer: Lexer) -> list[Markup]:
    """Source lines as escaped, highlighted HTML, one per line (Pygments escapes every token
    and closes its spans at each line's end). Lexed together, which is quicker than line by
    line and sees a string that spans lines."""
    lines = [
        f"{line[:MAX_LINE_CHARS]} [... {len(line) - MAX_LINE_CHARS:,} more chars]"
        if len(line) > MAX_LINE_CHARS
        else line
        for line in lines
    ]
    try:
        drawn = highlight("\n".join(lines) + "\n", lexer, _FORMATTER).split("\n")[: len(lines)]
        if len(drawn) == len(lines):
            return [Markup(html) for html in drawn]
    except Exception:  # a lexer bug on odd input must not hide the lines: show them plain
        pass
    return [escape(line) for line in lines]


def unquote_path(name: str) -> str:
    """A file name as git prints it in a diff, back to itself: git quotes a name holding a
    quote, a backslash or a control character C-style (``"a\\tb"``, octal bytes), and
    adds a tab after one holding a space."""
    name = name.removesuffix("\t")
    if not (len(name) >= 2 and name[0] == name[-1] == '"'):
        return name
    out, body, i = bytearray(), name[1:-1], 0
    simple = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            following = body[i + 1]
            if following in "01234567" and body[i + 1 : i + 4].isdigit():
                out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
                i += 4
                continue
            out.append(simple.get(following, ord(following) & 0xFF))
            i += 2
            continue
        out += char.encode("utf-8")
        i += 1
    return out.decode("utf-8", errors="replace")


def _side(name: str, prefix: str) -> str | None:
    """The path of a ``---``/``+++`` line's name (None for /dev/null)."""
    name = unquote_path(name)
    return None if name == "/dev/null" else name.removeprefix(prefix)


def _header_path(rest: str) -> str:
    """The path of ``diff --git a/P b/P`` when no other line names it (both sides alike)."""
    if rest.startswith('"'):
        return _side(rest[: rest.index('" ', 1) + 1], "a/") or rest
    half = (len(rest) - 5) // 2  # "a/P b/P": two copies of P around " b/"
    return rest[2 : 2 + half] if half > 0 else rest


def _hunk_start(line: str) -> tuple[int, int] | None:
    """The old and new first line numbers of ``@@ -a,b +c,d @@``."""
    try:
        old, new = line.split(" ", 3)[1:3]
        return int(old[1:].split(",")[0]), int(new[1:].split(",")[0])
    except (ValueError, IndexError):
        return None


def render_diff(text: str, cut: bool = False) -> DiffView:
    """The diff ``git diff base...branch`` printed (``cut``: only its start), as files of
    highlighted rows; at most ``MAX_ROWS`` rows."""
    lines = text.split("\n")
    if cut or lines[-1] == "":
        lines.pop()  # a line cut by the byte budget is not drawn half
    files: list[FileDiff] = []
    entry: FileDiff | None = None
    old_no = new_no = 0
    in_hunk, budget, shown = False, MAX_ROWS, 0
    sources: dict[int, list[str]] = {}  # each file's code lines, highlighted at the end
    for line in lines:
        if line.startswith("diff --git "):
            entry = FileDiff(_header_path(line[len("diff --git ") :]))
            files.append(entry)
            in_hunk = False
            continue
        if entry is None:
            continue  # nothing before the first file header is a diff line
        if in_hunk and line[:1] in (" ", "+", "-", "\\"):
            if line[0] == "\\":
                continue  # "\ No newline at end of file"
            if budget <= 0:
                return _drawn_rows(DiffView(files, True, shown_lines=shown), sources)
            budget -= 1
            kind = {"+": "add", "-": "del"}.get(line[0], "ctx")
            old, new = old_no if kind != "add" else None, new_no if kind != "del" else None
            entry.rows.append(Row(kind, old, new, Markup()))
            sources.setdefault(id(entry), []).append(line[1:].removesuffix("\r"))
            old_no, new_no = old_no + (kind != "add"), new_no + (kind != "del")
            entry.added += kind == "add"
            entry.removed += kind == "del"
            shown += kind != "ctx"
        elif line.startswith("@@ ") and (start := _hunk_start(line)):
            old_no, new_no = start
            in_hunk = True
            entry.rows.append(Row("hunk", None, None, escape(line)))
        elif not in_hunk:
            _read_header(entry, line)
    return _drawn_rows(DiffView(files, cut, shown_lines=shown), sources)


def _drawn_rows(view: DiffView, sources: dict[int, list[str]]) -> DiffView:
    """Each file's code rows highlighted, in one pass per file."""
    for entry in view.files:
        code = [row for row in entry.rows if row.kind != "hunk"]
        for row, html in zip(
            code, _highlighted(sources.get(id(entry), []), _lexer(entry.path)), strict=True
        ):
            row.html = html
    return view


def _read_header(entry: FileDiff, line: str) -> None:
    """What one extended header line says about its file."""
    if line.startswith("new file mode"):
        entry.status = "added"
    elif line.startswith("deleted file mode"):
        entry.status = "removed"
    elif line.startswith("rename from "):
        entry.status, entry.old_path = "renamed", unquote_path(line[len("rename from ") :])
    elif line.startswith("rename to "):
        entry.path = unquote_path(line[len("rename to ") :])
    elif line.startswith("index "):
        entry.blob = line.split()[1]
    elif line.startswith("Binary files "):
        entry.status = "binary"
    elif line[:4] in ("--- ", "+++ ") and (
        path := _side(line[4:], "a/" if line[0] == "-" else "b/")
    ):
        entry.path = path  # the +++ line comes last: a renamed file is named as it is now


def task_diff_view(root: Path, base_tip: str, head: str) -> DiffView:
    """The diff of ``head`` against ``base_tip`` as the page draws it: within the budgets,
    with the whole diff's size from numstat; cached by the two commits."""
    return _drawn.get((str(root), base_tip, head), lambda: _draw(root, base_tip, head))


def _draw(root: Path, base_tip: str, head: str) -> DiffView:
    read = diffs.read_within(root, base_tip, head, MAX_BYTES, MAX_FILE_LINES, MAX_SKIPPED)
    view = render_diff(read.text, cut=read.cut)
    view.too_big = read.left_out
    view.total_files = len(read.stats)
    view.total_lines = sum(f.added + f.removed for f in read.stats)
    view.truncated = view.truncated or view.shown_lines < view.total_lines or bool(read.left_out)
    return view


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class OnceCache:
    """A small LRU map whose value for a key is made once, however many threads ask for it
    at the same instant: the others wait for the first and share its answer."""

    def __init__(self, size: int) -> None:
        self.size, self.found = size, OrderedDict()
        self.lock, self.making = threading.Lock(), {}

    def get(self, key: K, make: Callable[[], V]) -> V:
        with self.lock:
            if key in self.found:
                self.found.move_to_end(key)
                return self.found[key]
            making = self.making.setdefault(key, threading.Lock())
        with making:
            with self.lock:
                if key in self.found:
                    return self.found[key]
            try:
                value = make()
                with self.lock:
                    self.found[key] = value
                    while len(self.found) > self.size:
                        self.found.popitem(last=False)
            finally:
                with self.lock:
                    self.making.pop(key, None)
        return value


_drawn = OnceCache(CACHED)


def pygments_css() -> str:
    """The stylesheet for the highlighted spans (served as a static-like route)."""
    return _FORMATTER.get_style_defs(".code")

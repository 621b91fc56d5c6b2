"""Whether a note describes code its task's checkout no longer has: history, not reference.

A note on a task's file (``path_score``) says what it is about: files, and functions or
classes. When every file it names with a folder is gone from the task's base (moved or
deleted), or it names functions or classes and none of them is anywhere in the task's
files any more (renamed, deleted, moved out), it is about code that is not there, and it
stays out of the prompt. ``source`` gives a file's text at the task's base (None: no such
file); the prompt builder reads it from git (``roles/attempt``), the relevance benchmark
from each task's parent commit. Without it (``memory search``) nothing is judged stale.

A name counts as still there when it is a word anywhere in the task's files (a comment
or a call too), not only a ``def``: a file of any language, and the safe side. (httpx:
75.0 % -> 76.1 % of the block relevant, no relevant note lost; pytest 69.8 % -> 76.8 %,
relevant notes a task 1.10 -> 1.13 of 1.55 -> 1.45: the notes it left out were about
``_pytest/...`` before the move to ``src/``, which the benchmark's rule counts as another
file. Counting ``def`` and ``class`` names only: httpx the same, pytest 77.4 %. Either
half alone: the names 76.1 % and 70.2 %, the files 75.0 % and 76.8 %.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .ranking import FLOOR, URL_RE
from .terms import CHUNK_RE, SYMBOL, is_file, scan

#: A file's text at the task's base, or None when the base has no such file.
Source = Callable[[str], "str | None"]
IDENT_RE = re.compile(r"[A-Za-z_]\w*")
#: Characters of a task's file searched for names: a source file is far shorter, and a
#: task naming a data file of gigabytes should not cost its prompt seconds.
FILE_CHARS = 2_000_000


def fresh(notes: list[dict[str, Any]], query: str, source: Source) -> list[dict[str, Any]]:
    """``notes`` without those about code the task's files no longer have. Only a note on
    the task's files that could reach a prompt (``FLOOR``) is read against the checkout,
    and each file once."""
    read: dict[str, str | None] = {}

    def text(path: str) -> str | None:
        if path not in read:
            read[path] = source(path)
        return read[path]

    files = [t for t in map(text, files_named(query)) if t is not None]
    if not files:  # the task names no file its base has: nothing to judge by
        return notes
    idents = {w.lower() for t in files for w in IDENT_RE.findall(t, 0, FILE_CHARS)}
    return [n for n in notes if not _stale(n, idents, text)]


def _stale(note: dict[str, Any], idents: set[str], text: Source) -> bool:
    if not note["path_score"] or note["score"] < FLOOR:
        return False
    content = URL_RE.sub(" ", note["content"])
    paths = files_named(content)
    if paths and all(text(p) is None for p in paths):
        return True
    names = {t.text.rsplit(".", 1)[-1] for t in scan(content) if t.kind == SYMBOL}
    return bool(names) and not names & idents


def files_named(text: str) -> list[str]:
    """The files ``text`` names with a folder (``src/app/retry.py``), as written."""
    found = (m.group().rstrip("./-") for m in CHUNK_RE.finditer(text))
    return list(dict.fromkeys(c for c in found if "/" in c and is_file(c.rsplit("/", 1)[1])))

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

from collections.abc import Callable
from functools import cache, partial
from typing import Any

from .ranking import BAR, FLOOR, PER_TERM, SHORT, URL_RE
from .terms import CHUNK_RE, SYMBOL, is_file, scan

#: A file's text at the task's base, or None when the base has no such file.
Source = Callable[[str], "str | None"]
#: Characters of a task's file searched for names: a source file is far shorter, and a
#: task naming a data file of gigabytes should not cost its prompt seconds or its memory
#: (the prompt builder reads no more bytes than this from git).
FILE_CHARS = 2_000_000


def fresh(notes: list[dict[str, Any]], query: str, source: Source) -> list[dict[str, Any]]:
    """``notes`` without those about code the task's files no longer have. Only a note on
    the task's files that could clear the bar is read against the checkout, and each file
    once."""
    text = cache(source)
    files = [t for t in map(text, files_named(query)) if t is not None]
    if not files:  # the task names no file its base has: nothing to judge by
        return notes
    there = cache(partial(_mentions, "\n".join(t[:FILE_CHARS] for t in files).lower()))
    return [n for n in notes if not _stale(n, there, text)]


def _stale(note: dict[str, Any], there: Callable[[str], bool], text: Source) -> bool:
    if not note["path_score"] or not _reachable(note):
        return False
    content = URL_RE.sub(" ", note["content"])
    paths = files_named(content)
    if paths and all(text(p) is None for p in paths):
        return True
    names = {t.text.rsplit(".", 1)[-1] for t in scan(content) if t.kind == SYMBOL}
    return bool(names) and not any(map(there, names))


def _reachable(note: dict[str, Any]) -> bool:
    """Whether a note could clear the bar at all (``ranking.over_bar``): what cannot is
    not worth reading files for."""
    bar = BAR + PER_TERM * note.get("excess", 0.0)
    return note["score"] >= bar or (note["score"] >= FLOOR and (note["length"] or 0) <= SHORT)


def _mentions(code: str, name: str) -> bool:
    """Whether ``code`` has ``name`` as a word of its own (a search for each of a few
    names costs less than cutting a file of 100,000 characters into words)."""
    at = code.find(name)
    while at >= 0:
        end = at + len(name)
        if not _in_word(code, at - 1) and not _in_word(code, end):
            return True
        at = code.find(name, at + 1)
    return False


def _in_word(code: str, at: int) -> bool:
    return 0 <= at < len(code) and (code[at].isalnum() or code[at] == "_")


def files_named(text: str) -> list[str]:
    """The files ``text`` names with a folder (``src/app/retry.py``), as written."""
    found = (m.group().rstrip("./-") for m in CHUNK_RE.finditer(text))
    return list(dict.fromkeys(c for c in found if "/" in c and is_file(c.rsplit("/", 1)[1])))

"""A task's id, checked once where it enters octopoid and carried as a ``TaskId`` after.

Ids come in from a person (``TASK-12``, ``task-12``, ``12``), a file name, a forge's answer or
a channel request. Each entry makes one ``TaskId``; everything below takes that value and
never checks it again: constructing a ``TaskId`` from a ``TaskId`` returns it unchanged.
"""

from __future__ import annotations

import re

from ..base.patterns import LazyPattern
from .exceptions import InvalidTaskId

_ID = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
ID_RE = LazyPattern(_ID)
FILE_RE = LazyPattern(rf"TASK-({_ID})\.md")  # a task file's name
LABEL_RE = LazyPattern(rf"TASK-({_ID})")  # a record's or journal's key


class TaskId(str):
    """A bare task id (``12``) that passed the id rules: the only way an id reaches a path.

    A ``str`` so that headers, SQL parameters and f-strings take it as they are.
    """

    __slots__ = ()

    def __new__(cls, raw: object) -> TaskId:
        if type(raw) is cls:  # already checked where it entered
            return raw  # type: ignore[return-value]
        return str.__new__(cls, _checked(raw))

    @classmethod
    def matched(cls, match: re.Match[str]) -> TaskId:
        """The id a full match of ``FILE_RE`` or ``LABEL_RE`` found (a file's or a record's
        name): their group is ``ID_RE``, so the match was the check. Any other match (a
        search, another pattern) could carry a cut or unchecked id: a bug, refused."""
        whole = match.span() == (0, len(match.string))
        if match.re not in (FILE_RE.compiled, LABEL_RE.compiled) or not whole:
            raise ValueError(f"not a full match of FILE_RE or LABEL_RE: {match!r}")
        return str.__new__(cls, match.group(1))

    @property
    def label(self) -> str:
        """``TASK-12``: how ids are shown and how files are named."""
        return f"TASK-{self}"


def _checked(raw: object) -> str:
    """The bare id of ``TASK-12``, ``task-12`` or ``12``; InvalidTaskId for anything else."""
    if not isinstance(raw, str):
        raise InvalidTaskId(f"task id must be text, got {type(raw).__name__}")
    text = raw.strip()
    if "\x00" in text:
        raise InvalidTaskId("task id contains a NUL byte")
    if text[:5].upper() == "TASK-":
        text = text[5:]
    if not ID_RE.fullmatch(text):
        shown = raw if len(raw) <= 70 else raw[:67] + "..."
        raise InvalidTaskId(
            f"invalid task id {shown!r}: use TASK-<id> or <id>, where <id> is 1-64 letters, "
            "digits, '-' or '_' starting with a letter or digit"
        )
    return text


def normalize_task_id(raw: str) -> TaskId:
    """The seed's name for parsing an id: ``TaskId(raw)``."""
    return TaskId(raw)


def from_label(label: str) -> TaskId:
    """The id of a key written as ``TASK-12`` (a journal's, a record's): a full match of
    ``LABEL_RE`` is its check; anything else is checked as a person's text would be."""
    match = LABEL_RE.fullmatch(label)
    return TaskId.matched(match) if match else TaskId(label)


def split_ids(text: str) -> list[str]:
    """The ids of a list written as ``BLOCKED_BY`` holds them: separated by commas and/or
    spaces (``TASK-1, TASK-2``); each still to be checked by ``TaskId``."""
    return [part for part in re.split(r"[,\s]+", text) if part]


def task_label(task_id: str) -> str:
    """``12`` -> ``TASK-12``: how ids are shown and how files are named."""
    return f"TASK-{task_id}"


def task_filename(task_id: str) -> str:
    return f"{task_label(task_id)}.md"

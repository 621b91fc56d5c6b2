"""octopoid's call forms: a task named by its file's path, with that file's new path back.

octopoid's callers pass ``task_path`` (a task file's ``Path`` or ``str``) to every
transition and get the moved file's ``Path`` back; this project's callers pass an id or a
``Task`` and get the ``Task``. ``octopoid_form`` lets one function serve both
(docs/architecture.md, "Drop-in for octopoid").
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from ..model.exceptions import InvalidTaskId
from ..model.ids import task_filename
from ..model.tasks import FILE_RE, Task, TaskId, shown

#: A task as the API takes it: an id (``TASK-12``, ``12``), a ``Task``, or its file's path.
TaskRef = Task | str | os.PathLike[str]


def is_task_path(task: object) -> bool:
    """Whether ``task`` is a file path rather than an id: ids never hold ``/`` or ``.``."""
    if isinstance(task, os.PathLike):
        return True
    return isinstance(task, str) and ("/" in task or task.strip().endswith(".md"))


def task_id_of(task: TaskRef) -> TaskId:
    """The bare id of a task given as an id, a ``Task``, or its file's path (``Path`` or str).

    A path is read for its name only (``TASK-<id>.md``): the task is then found wherever it
    is now, as octopoid's callers expect after it has moved on.
    """
    if isinstance(task, Task):
        return task.id
    if not is_task_path(task):
        return TaskId(cast(str, task))  # not a path: an id, or junk it refuses
    name = Path(task).name
    match = FILE_RE.fullmatch(name)
    if match is None:
        raise InvalidTaskId(f"{shown(name)} is not a task file's name (TASK-<id>.md)")
    return TaskId.matched(match)


def file_path(task: Task) -> Path:
    """The task's file, octopoid's answer. The PostgreSQL store keeps no file: the answer
    is then a path of the same shape, ``postgres:queue/<state>/TASK-<id>.md`` (as its
    quarantine names a row), so ``path.parent.name`` is the state, ``path.name`` finds it."""
    if task.path is not None:
        return task.path
    return Path("postgres:queue", task.state.value, task_filename(task.id))


def recycled_answer(task: Task) -> dict[str, Any]:
    """octopoid's answer to recycle_to_breakdown; here the task itself waits in breakdown/."""
    return {
        "breakdown_task": str(file_path(task)),
        "breakdown_task_id": task.id,
        "original_task_id": task.id,
        "action": "recycled",
    }


def octopoid_form(
    result: Callable[[Task], Any] = file_path, **aliases: str
) -> Callable[[Callable[..., Task]], Callable[..., Any]]:
    """Let a transition take octopoid's call form as well as its own.

    The task may be passed as ``task_path=``, and as a task file's path: then it is found by
    the id in the file's name and the call returns ``result(moved)`` (the file's new
    ``Path``, as octopoid's did). An id or a ``Task`` gets the moved ``Task``, as before.
    ``aliases`` maps octopoid's argument names to this project's.
    """

    def wrap(func: Callable[..., Task]) -> Callable[..., Any]:
        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            for key in ("task_path", "task"):
                if key in kwargs:
                    args = (kwargs.pop(key), *args)
            for theirs, ours in aliases.items():
                if theirs in kwargs:
                    if ours in kwargs:
                        raise TypeError(f"{func.__name__}() got both {theirs}= and {ours}=")
                    kwargs[ours] = kwargs.pop(theirs)
            if not args or not is_task_path(args[0]):
                return func(*args, **kwargs)
            return result(func(task_id_of(args[0]), *args[1:], **kwargs))

        return call

    return wrap

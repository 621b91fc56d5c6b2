"""Task ids parsed where they enter the CLI: a click type that makes a ``TaskId``, and
whether a queue holds the task (for commands that need not read it)."""

from __future__ import annotations

from typing import Any

import click

from ...model.ids import TaskId, split_ids


class TaskIdType(click.ParamType):
    """``TASK-12``, ``task-12`` or ``12`` -> ``TaskId("12")``. A bad id fails as
    ``InvalidTaskId`` (one line, exit 2), the same words every other entry uses; with
    ``several``, a value may name several ids as ``BLOCKED_BY`` does (``TASK-1,TASK-2``)."""

    name = "task_id"

    def __init__(self, several: bool = False) -> None:
        self.several = several

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if self.several:
            return tuple(TaskId(raw) for raw in split_ids(value))
        return TaskId(value)


#: One task id.
TASK_ID = TaskIdType()
#: One or more ids in one value (``TASK-1,TASK-2``), as a tuple.
TASK_IDS_IN_ONE = TaskIdType(several=True)


def known_task(task_id: TaskId) -> None:
    """``TaskNotFound`` (exit 3) unless some queue holds the task. The store is imported
    here, when no notes were found: notes that exist need none."""
    from ...queue import store

    store.known_task_id(task_id)

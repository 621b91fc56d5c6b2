"""Where queue state lives, and which store this project uses (``get_store``).

``FolderStore`` is the embedded default; ``postgres.PostgresStore`` when config.yaml's
``store.backend`` or the environment says (imported only then).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from ... import config
from ...model.exceptions import (
    ConfigError,
    IllegalTransition,
    InvalidInput,
    OctopoidError,
    TaskNotFound,
)
from ...model.tasks import Task, TaskId, TaskState, task_label
from .base import QueueStore
from .files import FolderStore

__all__ = [
    "FolderStore",
    "QueueStore",
    "get_store",
    "get_task",
    "known_task_id",
    "list_tasks",
    "locate",
    "readable_tasks",
    "upgrade_store",
]


@lru_cache(maxsize=8)
def _store_for(where: str, durable: bool, backend: str = "folder") -> QueueStore:
    if backend == "postgres":
        from ...pg.schema import shared  # psycopg only for those who use it
        from .postgres import PostgresStore

        return PostgresStore(shared(where))
    store = FolderStore(Path(where), durable)
    store.initialize()
    return store


def get_store() -> QueueStore:
    """The store for the current project (looked up at call time, cached per folder or
    database): the folder queue, or PostgreSQL when config.yaml or the environment says."""
    backend, dsn = config.store_choice()
    if backend == "postgres" and dsn:
        return _store_for(dsn, True, "postgres")
    try:
        durable = config.load_config()["durability"] == "durable"
    except ConfigError:
        durable = True  # a broken config.yaml must not stop reading the queue
    return _store_for(str(config.get_queue_dir()), durable)


def get_task(task_id: str) -> Task:
    return get_store().get(TaskId(task_id))


def list_tasks(queue: TaskState | str) -> list[Task]:
    """Every readable task in ``queue``, in claim order."""
    try:
        state = TaskState(queue)
    except ValueError:
        names = ", ".join(s.value for s in TaskState)
        raise IllegalTransition(f"unknown queue {queue!r}; queues are: {names}") from None
    return get_store().list(state)


def locate(task_id: str) -> TaskState:
    """The queue that holds the task, else ``TaskNotFound`` (exit 3)."""
    state = get_store().locate(task_id)
    if state is None:
        raise TaskNotFound(f"no task {task_label(task_id)} in any queue")
    return state


def known_task_id(task_id: str) -> TaskId:
    """The bare id of a task some queue holds, else ``TaskNotFound`` (exit 3): for commands
    about what a task left (its notes, its working notes) that need not read the task."""
    bare = TaskId(task_id)
    locate(bare)
    return bare


def readable_tasks(task_ids: Iterable[str]) -> list[Task]:
    """The tasks of ``task_ids`` that can still be read: one may move or go while a list or
    a page is drawn, and is then left out, not an error.

    These reads live here, below the state machine, so a face that only reads (`list`,
    `notes`) need not import the moves (docs/performance.md, start-up)."""
    store, found = get_store(), []
    for task_id in task_ids:
        try:
            found.append(store.get(TaskId(task_id)))
        except OctopoidError:
            continue
    return found


def upgrade_store() -> str:
    """Create or migrate the configured PostgreSQL schema; say what was done."""
    backend, dsn = config.store_choice()
    if backend != "postgres" or not dsn:
        raise InvalidInput(
            "this project keeps its queue in folders (no store.backend: postgres in "
            f"config.yaml, no {config.DATABASE_URL_ENV}): there is no database to upgrade"
        )
    from ...pg.schema import upgrade_database

    return upgrade_database(dsn)

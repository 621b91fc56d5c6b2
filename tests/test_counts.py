"""Queue counts: a folder is listed again only when it changed (its mtime), so `status`
costs a stat for an unchanged done/ of 50,000 tasks, and never shows a stale count."""

from __future__ import annotations

import os
import time
from pathlib import Path

from orchestrator.model.tasks import TaskState, new_task, render_task
from orchestrator.queue.store import claim_index
from orchestrator.queue.store.files import FolderStore

S = TaskState


def drop(store: FolderStore, state: TaskState, task_id: str) -> None:
    """A task file put in a folder by hand, as a person or another tool might."""
    task = new_task(task_id, f"task {task_id}")
    (store.dir(state) / f"TASK-{task_id}.md").write_text(render_task(task))


def age(folder: Path, seconds: float) -> int:
    """Make the folder's mtime ``seconds`` old; the new mtime."""
    then = time.time_ns() - int(seconds * 1e9)
    os.utime(folder, ns=(then, then))
    return then


def test_a_count_follows_every_change_by_hand(tmp_path: Path) -> None:
    store = FolderStore(tmp_path / "queue")
    store.initialize()
    for n in range(1, 6):
        drop(store, S.DONE, str(n))
    age(store.dir(S.DONE), 60)
    assert store.count(S.DONE) == 5
    drop(store, S.DONE, "6")  # the folder's mtime moves: counted again
    assert store.count(S.DONE) == 6
    (store.dir(S.DONE) / "TASK-2.md").unlink()
    assert store.count(S.DONE) == 5


def test_an_old_unchanged_folder_is_not_listed_again(tmp_path: Path, monkeypatch) -> None:
    """The cache is used: a file slipped in with the folder's mtime put back is not seen
    (no real change can do that); a young mtime is never trusted, as two changes in one
    timestamp tick would share it."""
    monkeypatch.setattr(claim_index, "COUNT_KEPT_FROM", 1)  # kept from one task, here
    store = FolderStore(tmp_path / "queue")
    store.initialize()
    drop(store, S.DONE, "1")
    old = age(store.dir(S.DONE), 60)
    assert store.count(S.DONE) == 1
    drop(store, S.DONE, "2")
    os.utime(store.dir(S.DONE), ns=(old, old))
    assert store.count(S.DONE) == 1  # listed once: the count was kept for that mtime

    young = age(store.dir(S.DONE), -60)  # not yet old enough however slow this machine is
    assert store.count(S.DONE) == 2
    drop(store, S.DONE, "3")
    os.utime(store.dir(S.DONE), ns=(young, young))  # a second change in the same tick
    assert store.count(S.DONE) == 3  # the young mtime's count was not kept


def test_a_small_folder_is_listed_and_never_written_down(tmp_path: Path) -> None:
    """Under COUNT_KEPT_FROM tasks a count costs a listing and no write to the index the
    claims write to."""
    store = FolderStore(tmp_path / "queue")
    store.initialize()
    drop(store, S.PROVISIONAL, "1")
    old = age(store.dir(S.PROVISIONAL), 60)
    assert store.count(S.PROVISIONAL) == 1
    assert store.index._get("count:provisional") is None
    drop(store, S.PROVISIONAL, "2")
    os.utime(store.dir(S.PROVISIONAL), ns=(old, old))
    assert store.count(S.PROVISIONAL) == 2  # listed again: nothing was kept

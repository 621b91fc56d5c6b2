"""State that octopoid kept in files of its own before it moved into the store (issue 36):
read once, merged into the store's records and journals, and removed.

An upgraded project keeps its pauses (a person paused it for a reason), today's spend (the
budgets count it), the questions waiting for an answer, the reviewers' drafts, the plans,
and what a dead accept or close left to finish. The first process that asks for the store
through ``store()`` does this, under a lock, so two processes never merge the same file
twice; later processes pay a set lookup. The merge-check cache is dropped: it is judged
again. What the store has already wins over a file.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import config
from ..base.fsutil import read_json_object
from ..base.locks import holding
from ..model.exceptions import InvalidTaskId
from ..model.tasks import TaskId, TaskState, format_time, from_label, task_label
from .store import QueueStore, get_store
from .store.records import Records, check_key, key_part

_looked: set[Path] = set()  # runtime folders this process has adopted from already
_COUNTS = ("attempts_today", "turns_today", "tokens_today", "seconds_today", "cost_today_usd")
#: folders that held one record per JSON file: its family of records is named alike
FAMILIES = ("questions", "reviews", "plans")
_OLD = ("paused", "agents", *FAMILIES, "finishing", "merge-checks.json")
ACCEPT = "accept"  # finishing.ACCEPT: the journal an accept's leftover steps continue in


def store() -> QueueStore:
    """The project's store, with what an older octopoid left in files of its own moved
    into it first (once per runtime folder and process)."""
    found = get_store()
    runtime = config.get_orchestrator_dir()
    if runtime not in _looked:
        old_files(found, runtime)
    return found


def task_key(family: str, task_id: str) -> str:
    """The key of a task's record in ``family`` (``questions/TASK-12``)."""
    return f"{family}/{task_label(TaskId(task_id))}"


def task_record(family: str, task_id: str) -> dict[str, Any]:
    """A task's record in ``family`` ({} for none)."""
    found = store().records.read(task_key(family, task_id))
    return {} if found is None else found.value


def forget(task_id: str, *families: str) -> None:
    """The task finished: its records in ``families`` go."""
    for family in families:
        store().records.delete(task_key(family, task_id))


def old_files(store: QueueStore, runtime: Path) -> list[str]:
    """Move every state file of an older octopoid under ``runtime`` into ``store``; say
    what was moved."""
    if not any((runtime / name).exists() for name in _OLD):
        _looked.add(runtime)
        return []
    with holding(runtime / ".adopt.lock"):
        moved = _agent_files(store.records, runtime)
        for family in FAMILIES:
            moved += _record_files(store.records, runtime / family, family)
        moved += _finishing(store, runtime / "finishing")
        cache = runtime / "merge-checks.json"
        if cache.exists():  # a cache: judged again, into the store's record
            cache.unlink()
            moved.append(str(cache))
    _looked.add(runtime)  # not before: a store that failed meanwhile is tried again
    if moved:  # once per project: every reader of the store asks, few have anything
        import logging  # ~9 ms with traceback and string

        for path in moved:
            logging.getLogger("octopoid").info(
                "moved %s into the store (octopoid keeps its state there now)", path
            )
    return moved


def _agent_files(records: Records, runtime: Path) -> list[str]:
    """``runtime/paused`` and ``runtime/agents/<name>.{paused,limited,json}`` into the
    records ``agents`` and ``agents/<name>``."""
    folder, system = runtime / "agents", runtime / "paused"
    moved = []
    if system.exists():
        _merge(records, "agents", system, {"paused": _since(system)})
        moved.append(str(system))
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        found = _found(path) if path.is_file() else None
        if found is not None:
            _merge(records, f"agents/{key_part(found[0])}", path, found[1])
            moved.append(str(path))
        elif path.name.endswith(".lock"):
            path.unlink(missing_ok=True)
    _prune(folder)
    return moved


def _found(path: Path) -> tuple[str, dict[str, Any]] | None:
    """(agent, what the file says, as fields of its record), or None if it is no state file."""
    name, dot, kind = path.name.rpartition(".")
    if not dot or not name or name.startswith("."):
        return None
    if kind == "paused":
        return name, {"paused": _since(path)}
    if kind == "limited":
        return name, {"hold": read_json_object(path)}
    if kind == "json":
        return name, read_json_object(path)
    return None


def _since(path: Path) -> str:
    """When a pause file was written: when the pause began."""
    return format_time(datetime.fromtimestamp(path.stat().st_mtime, UTC))


def _merge(records: Records, key: str, path: Path, old: dict[str, Any]) -> None:
    """Merge a file's fields into the record, then remove the file: what the store has
    wins, but a day in both adds up (each machine counted its own attempts)."""

    def merged(data: dict[str, Any] | None) -> dict[str, Any]:
        data = data or {}
        if old.get("day") and old.get("day") == data.get("day"):
            for field in _COUNTS:
                data[field] = data.get(field, 0) + old.get(field, 0)
        elif old.get("day") and old["day"] > data.get("day", ""):
            data.update({k: v for k, v in old.items() if k in _COUNTS or k == "day"})
        rest = {k: v for k, v in old.items() if k not in _COUNTS and k != "day" and v}
        return {**rest, **data}

    records.update(key, merged)
    path.unlink(missing_ok=True)


def _record_files(records: Records, folder: Path, family: str) -> list[str]:
    """``folder/<a>/<b>.json`` (a question, a reviewer's draft, a plan) as the record
    ``family/<a>/<b>``, unless the store has one; lock files go. A name octopoid never
    wrote is left where it is."""
    moved = []
    for where, _, names in os.walk(folder) if folder.is_dir() else ():
        for name in sorted(names):
            path = Path(where, name)
            if name.endswith(".lock"):
                path.unlink(missing_ok=True)
                continue
            parts = [family, *map(key_part, path.relative_to(folder).with_suffix("").parts)]
            try:
                key = check_key("/".join(parts))
            except ValueError:
                continue
            if name.endswith(".json") and (old := read_json_object(path)):
                records.update(key, lambda found, old=old: old if found is None else found)
            if name.endswith(".json"):
                path.unlink()
                moved.append(str(path))
    _prune(folder)
    return moved


def _finishing(store: QueueStore, folder: Path) -> list[str]:
    """``finishing/TASK-<id>.json`` (what an accept or close left after its move to done)
    as the task's open accept journal; one whose task never reached done is dropped."""
    moved = []
    for path in sorted(folder.glob("TASK-*.json")) if folder.is_dir() else []:
        try:
            task_id = from_label(path.stem)
        except InvalidTaskId:
            continue  # not a name octopoid writes
        old = read_json_object(path)
        steps = [s for s in old.get("steps", []) if isinstance(s, str) and s]
        if steps and store.locate(task_id) is TaskState.DONE:
            by = {"by": str(old.get("by") or "octopoid")}
            store.journals.begin(ACCEPT, task_label(task_id), list(dict.fromkeys(steps)), by)
        path.unlink()
        moved.append(str(path))
    _prune(folder)
    return moved


def _prune(folder: Path) -> None:
    """Remove ``folder`` and the folders under it that are left empty."""
    for where, _, _ in os.walk(folder, topdown=False):
        try:
            os.rmdir(where)
        except OSError:
            continue  # not empty, or gone

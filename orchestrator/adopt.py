"""State that octopoid kept in files of its own before it moved into the store (issue 36):
read once, merged into the store's records, and removed.

An upgraded project keeps its pauses (a person paused it for a reason) and today's spend
(the budgets count it). The first process that reads agents' state does this, under a
lock, so two processes never merge the same file twice; later processes find nothing to
do at the cost of two ``stat`` calls.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .fsutil import read_json_object
from .locks import holding
from .store.records import Records, key_part
from .tasks import format_time

log = logging.getLogger("octopoid")

_looked: set[Path] = set()  # runtime folders this process has adopted from already
_COUNTS = ("attempts_today", "turns_today", "tokens_today", "seconds_today", "cost_today_usd")


def agent_files(records: Records, runtime: Path) -> list[str]:
    """Move ``runtime/paused`` and ``runtime/agents/<name>.{paused,limited,json}`` into
    ``records`` (``agents``, ``agents/<name>``), once per process; say what was moved."""
    if runtime in _looked:
        return []
    folder, system = runtime / "agents", runtime / "paused"
    if not folder.is_dir() and not system.exists():
        _looked.add(runtime)
        return []
    moved = []
    with holding(runtime / ".adopt.lock"):
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
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    _looked.add(runtime)  # not before: a store that failed meanwhile is tried again
    for path in moved:
        log.info("moved %s into the store's records (octopoid keeps agents' state there now)", path)
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

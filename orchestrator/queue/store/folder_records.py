"""Records and journals of the folder store: one JSON file each, under ``runtime/records/``
and ``runtime/journals/``.

A record ``agents/impl-1`` is ``records/agents/impl-1.json`` holding its value and version.
Writes hold the key's lock (``.impl-1.json.lock`` beside it) across the version check and
the atomic replace (temp file, fsync, rename, fsync of the folder, as every write of the
queue); reads take no lock, since a replace is seen whole or not at all. A journal is
``journals/<kind>/<key>.json``; running its steps holds ``.<key>.json.take``, an ``flock``
that the kernel drops when its holder dies, so the next sweep can take it at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...base.fsutil import atomic_write, fsync_dir, writing
from ...base.locks import FileMutex, holding
from ...model.exceptions import LostRace, StorageError
from ...model.tasks import format_time, utcnow
from .records import (
    Journal,
    Journals,
    Record,
    Records,
    Value,
    changed,
    check_journal,
    check_key,
    check_kind,
    check_step,
    encode,
    next_version,
    not_held,
    taken,
)

SUFFIX = ".json"


def _beside(path: Path, what: str) -> Path:
    """A hidden file beside ``path`` (its lock): listings skip names with a leading dot."""
    return path.with_name(f".{path.name}.{what}")


def _load(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None if there is no file; ``StorageError`` naming
    the file if it is not one octopoid wrote (edited by hand: fix or remove it)."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot read {path}: {exc}; fix or remove it") from None
    if not isinstance(data, dict):
        raise StorageError(f"cannot read {path}: not a JSON object; fix or remove it")
    return data


def _walk(folder: Path) -> Iterator[Path]:
    """Every stored file under ``folder`` (none if it is missing), skipping hidden ones."""
    for where, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.endswith(SUFFIX) and not name.startswith("."):
                yield Path(where, name)


class _Files:
    """What records and journals do alike with their files."""

    def __init__(self, root: Path, durable: bool = True) -> None:
        self.root = root
        self.durable = durable  # False (durability: relaxed): no fsync; replaces stay atomic

    def _remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        if self.durable:
            fsync_dir(path.parent)


class FolderRecords(_Files, Records):
    def _path(self, key: str) -> Path:
        return self.root / f"{check_key(key)}{SUFFIX}"

    def _record(self, path: Path) -> Record | None:
        data = _load(path)
        if data is None:
            return None
        value, version = data.get("value"), data.get("version")
        if not isinstance(value, dict) or not isinstance(version, int):
            raise StorageError(f"cannot read {path}: not a record; fix or remove it")
        return Record(value, version)

    def read(self, key: str) -> Record | None:
        return self._record(self._path(key))

    def write(self, key: str, value: Value, expected_version: int | None) -> int:
        path, text = self._path(key), encode(value)
        with writing(self.root, "a record"):
            path.parent.mkdir(parents=True, exist_ok=True)
            with holding(_beside(path, "lock")):
                found = self._record(path)
                version = None if found is None else found.version
                if version != expected_version:
                    raise changed(key, expected_version, version)
                new = next_version(version)
                document = f'{{"version": {new}, "value": {text}}}\n'
                atomic_write(path, document, keep_mode=False, sync=self.durable)
        return new

    def delete(self, key: str, expected_version: int | None = None) -> bool:
        path = self._path(key)
        if not path.exists() and expected_version is None:
            return False
        with writing(self.root, "a record"), holding(_beside(path, "lock"), remove=True):
            found = self._record(path)
            if expected_version is not None and (
                found is None or found.version != expected_version
            ):
                raise changed(key, expected_version, None if found is None else found.version)
            if found is None:
                return False
            self._remove(path)
        return True

    def list(self, prefix: str = "") -> dict[str, Record]:
        paths = list(_walk(self.root / check_key(prefix) if prefix else self.root))
        if prefix:
            paths.insert(0, self._path(prefix))
        found = {}
        for path in paths:
            record = self._record(path)
            if record is not None:  # removed meanwhile
                found[path.relative_to(self.root).as_posix()[: -len(SUFFIX)]] = record
        return dict(sorted(found.items()))


class FolderJournals(_Files, Journals):
    def _path(self, kind: str, key: str) -> Path:
        check_journal(kind, key)
        return self.root / kind / f"{key}{SUFFIX}"

    def _journal(self, path: Path) -> Journal | None:
        data = _load(path)
        if data is None:
            return None
        try:
            return Journal(
                data["kind"], data["key"], tuple(data["steps"]), tuple(data["done"]),
                dict(data["data"]), data["begun"],
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            raise StorageError(f"cannot read {path}: not a journal; fix or remove it") from None

    def _save(self, path: Path, journal: Journal) -> None:
        document = encode(journal._asdict())  # its tuples as JSON lists
        atomic_write(path, document + "\n", keep_mode=False, sync=self.durable)

    def begin(
        self, kind: str, key: str, steps: Iterable[str], data: Value | None = None
    ) -> Journal:
        steps = check_journal(kind, key, steps)
        encode(data or {})
        path = self._path(kind, key)
        with writing(self.root, "a journal"):
            path.parent.mkdir(parents=True, exist_ok=True)
            with holding(_beside(path, "lock")):
                found = self._journal(path)
                if found is not None:
                    return found
                journal = Journal(kind, key, steps, (), dict(data or {}), format_time(utcnow()))
                self._save(path, journal)
        return journal

    def get(self, kind: str, key: str) -> Journal | None:
        return self._journal(self._path(kind, key))

    @contextmanager
    def take(self, kind: str, key: str) -> Iterator[Journal | None]:
        path = self._path(kind, key)
        with writing(self.root, "a journal"):
            path.parent.mkdir(parents=True, exist_ok=True)
        holder = FileMutex(_beside(path, "take"))
        if not holder.acquire(blocking=False):
            raise taken(kind, key)
        try:
            yield self._journal(path)
        finally:
            holder.release(remove=not path.exists())

    def _held_path(self, journal: Journal) -> Path:
        """The journal's file, if this process holds the journal (``JournalBusy`` if not)."""
        path = self._path(journal.kind, journal.key)
        if FileMutex(_beside(path, "take")).depth == 0:
            raise not_held(journal)
        return path

    def mark_done(self, journal: Journal, step: str) -> Journal:
        check_step(journal, step)
        path = self._held_path(journal)
        with writing(self.root, "a journal"), holding(_beside(path, "lock")):
            current = self._journal(path)
            if current is None:
                raise LostRace(f"the {journal.name} journal is finished already")
            if step not in current.done:
                current = current._replace(done=(*current.done, step))
                self._save(path, current)
        return current

    def finish(self, journal: Journal) -> None:
        path = self._held_path(journal)
        with writing(self.root, "a journal"), holding(_beside(path, "lock"), remove=True):
            self._remove(path)

    def pending(self, kind: str | None = None) -> list[Journal]:
        folder = self.root if kind is None else self.root / check_kind(kind)
        found = [j for path in _walk(folder) if (j := self._journal(path)) is not None]
        return sorted(found, key=lambda j: (j.begun, j.kind, j.key))

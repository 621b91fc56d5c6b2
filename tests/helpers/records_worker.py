"""Records and journals from another process, for the store contract's races.

argv: SPEC COMMAND ...; SPEC is ``folder:<queue dir>`` or ``postgres:<dsn>`` (``open_store``).

- ``update KEY COUNT GO``: say ``ready``; once GO exists, add 1 to the record's ``n``
  COUNT times.
- ``sweep LOG GO``: say ``ready``; once GO exists, run every pending ``test`` journal's
  steps until none is left, each step logged to LOG as ``start|end <journal> <step> <pid>``.
- ``hold KEY``: take the ``test`` journal KEY, mark its first step done, say ``ready``, and
  wait to be killed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from orchestrator.model.exceptions import JournalBusy
from orchestrator.queue.store import FolderStore, QueueStore


def open_store(spec: str) -> QueueStore:
    """The store a spec names, initialised."""
    kind, _, where = spec.partition(":")
    if kind == "folder":
        store: QueueStore = FolderStore(Path(where))
    else:
        from orchestrator.pg.database import Database
        from orchestrator.queue.store.postgres import PostgresStore

        store = PostgresStore(Database(where))
    store.initialize()
    return store


def _wait_for(go: Path) -> None:
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.005)


def update(store: QueueStore, key: str, count: int, go: Path) -> None:
    _wait_for(go)
    for _ in range(count):
        store.records.update(key, lambda v: {"n": (v or {"n": 0})["n"] + 1})


def _log(log: Path, line: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def sweep(store: QueueStore, log: Path, go: Path) -> None:
    _wait_for(go)
    journals = store.journals
    while pending := journals.pending("test"):
        for found in pending:
            try:
                with journals.take("test", found.key) as journal:
                    for step in journal.left if journal else ():
                        _log(log, f"start {journal.key} {step}")
                        time.sleep(0.002)  # a step takes a moment: a second runner would overlap
                        _log(log, f"end {journal.key} {step}")
                        journal = journals.mark_done(journal, step)
                    if journal is not None:
                        journals.finish(journal)
            except JournalBusy:
                time.sleep(0.001)


def hold(store: QueueStore, key: str) -> None:
    with store.journals.take("test", key) as journal:
        store.journals.mark_done(journal, journal.steps[0])
        print("ready", flush=True)
        time.sleep(600)


if __name__ == "__main__":
    spec, command, *args = sys.argv[1:]
    store = open_store(spec)
    if command == "update":
        update(store, args[0], int(args[1]), Path(args[2]))
    elif command == "sweep":
        sweep(store, Path(args[0]), Path(args[1]))
    else:
        hold(store, args[0])

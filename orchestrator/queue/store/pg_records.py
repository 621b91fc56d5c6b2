"""Records and journals of the PostgreSQL store: rows of ``octopoid.records`` and
``octopoid.journals`` (migration 5), shared by every machine of the team; how they are
written is docs/scale-out.md's ("A record", "A journal").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ...model.exceptions import LostRace
from ...model.tasks import format_time
from ...pg.database import Database
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
    not_held,
    taken,
)

_JOURNAL = "kind, key, steps, done, data, begun"
_ONE = f"SELECT {_JOURNAL} FROM octopoid.journals WHERE kind = %s AND key = %s"


def _lock_name(kind: str, key: str) -> str:
    return f"octopoid:journal:{kind}/{key}"


def _journal(row: tuple) -> Journal:
    kind, key, steps, done, data, begun = row
    return Journal(kind, key, tuple(steps), tuple(done), data, format_time(begun))


class PostgresRecords(Records):
    def __init__(self, db: Database, channel: str) -> None:
        self.db, self.channel = db, channel

    def read(self, key: str) -> Record | None:
        row = self.db.one(
            "SELECT value, version FROM octopoid.records WHERE key = %s", (check_key(key),)
        )
        return None if row is None else Record(*row)

    def write(self, key: str, value: Value, expected_version: int | None) -> int:
        check_key(key)
        if expected_version is None:
            wrote = (
                "INSERT INTO octopoid.records (key, value, version) VALUES "
                "(%s, %s::jsonb, nextval('octopoid.record_versions')) "
                "ON CONFLICT (key) DO NOTHING RETURNING version"
            )
            args: tuple = (key, encode(value))
        else:
            wrote = (
                "UPDATE octopoid.records SET value = %s::jsonb, "
                "version = nextval('octopoid.record_versions'), written = clock_timestamp() "
                "WHERE key = %s AND version = %s RETURNING version"
            )
            args = (encode(value), key, expected_version)
        row = self._announced(wrote, args)
        if row is None:
            raise changed(key, expected_version, self._version(key))
        return row[0]

    def delete(self, key: str, expected_version: int | None = None) -> bool:
        row = self._announced(
            "DELETE FROM octopoid.records WHERE key = %s "
            "AND (%s::bigint IS NULL OR version = %s) RETURNING version",
            (check_key(key), expected_version, expected_version),
        )
        if row is None and expected_version is not None:
            raise changed(key, expected_version, self._version(key))
        return row is not None

    def _announced(self, statement: str, args: tuple) -> Any:
        """Run a write (``... RETURNING version``) that NOTIFYs the channel if it wrote:
        one statement, one round trip."""
        return self.db.one(
            f"WITH w AS ({statement}) SELECT w.version, pg_notify(%s, 'record') FROM w",
            (*args, self.channel),
        )

    def _version(self, key: str) -> int | None:
        found = self.read(key)
        return None if found is None else found.version

    def list(self, prefix: str = "") -> dict[str, Record]:
        if prefix:
            check_key(prefix)
        # "0" follows "/": the keys beneath the prefix are one range of the primary key
        rows = self.db.fetch(
            "SELECT key, value, version FROM octopoid.records WHERE %s = '' OR key = %s "
            "OR (key >= %s AND key < %s) ORDER BY key",
            (prefix, prefix, f"{prefix}/", f"{prefix}0"),
        )
        return {key: Record(value, version) for key, value, version in rows}


class PostgresJournals(Journals):
    def __init__(self, db: Database) -> None:
        self.db = db

    def begin(
        self, kind: str, key: str, steps: Iterable[str], data: Value | None = None
    ) -> Journal:
        steps = check_journal(kind, key, steps)
        with self.db.tx() as cur:
            while True:  # a journal finished between the two statements: write ours after all
                cur.execute(
                    f"INSERT INTO octopoid.journals ({_JOURNAL}) VALUES "
                    "(%s, %s, %s, '{}', %s::jsonb, clock_timestamp()) "
                    f"ON CONFLICT (kind, key) DO NOTHING RETURNING {_JOURNAL}",
                    (kind, key, list(steps), encode(data or {})),
                )
                row = cur.fetchone()
                if row is None:  # open already: read in a new snapshot (read committed)
                    cur.execute(_ONE, (kind, key))
                    row = cur.fetchone()
                if row is not None:
                    return _journal(row)

    def get(self, kind: str, key: str) -> Journal | None:
        check_journal(kind, key)
        row = self.db.one(_ONE, (kind, key))
        return None if row is None else _journal(row)

    @contextmanager
    def take(self, kind: str, key: str) -> Iterator[Journal | None]:
        check_journal(kind, key)
        with self.db.session_lock(_lock_name(kind, key), lambda _: taken(kind, key)):
            yield self.get(kind, key)

    def _on_holder(self, journal: Journal, statement: str, args: tuple) -> Any:
        """Run ``statement`` on the connection holding the journal (``JournalBusy`` if
        this thread holds none): if its session is gone, the lock is too, and so is this."""
        conn = self.db.holder(_lock_name(journal.kind, journal.key))
        if conn is None:
            raise not_held(journal)
        with self.db.errors():
            return conn.execute(statement, args).fetchone()

    def mark_done(self, journal: Journal, step: str) -> Journal:
        check_step(journal, step)
        row = self._on_holder(
            journal,
            "UPDATE octopoid.journals SET done = CASE WHEN %s = ANY(done) THEN done "
            "ELSE array_append(done, %s) END WHERE kind = %s AND key = %s "
            f"RETURNING {_JOURNAL}",
            (step, step, journal.kind, journal.key),
        )
        if row is None:
            raise LostRace(f"the {journal.name} journal is finished already")
        return _journal(row)

    def finish(self, journal: Journal) -> None:
        self._on_holder(
            journal,
            "DELETE FROM octopoid.journals WHERE kind = %s AND key = %s RETURNING 1",
            (journal.kind, journal.key),
        )

    def pending(self, kind: str | None = None) -> list[Journal]:
        if kind is not None:
            check_kind(kind)
        rows = self.db.fetch(
            f"SELECT {_JOURNAL} FROM octopoid.journals WHERE %s::text IS NULL OR kind = %s "
            "ORDER BY begun, kind, key",
            (kind, kind),
        )
        return [_journal(row) for row in rows]

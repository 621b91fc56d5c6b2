"""Long-term memory in PostgreSQL, for a queue kept there: what an attempt on one machine
learned is found by an attempt on another.

The same notes, fields and rules as ``MemoryStore`` (SQLite), in ``octopoid.memory``
(migrations 3, 4 and 6 of ``pg/schema.py``), on the connection pool it shares with the
queue (``pg/database.py``), with the same term index (``index.py``:
``octopoid.memory_terms``, ``memory_vocab``, ``memory_totals``) and the same ranking
(``ranking.py``): a query finds and orders the same notes on both.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..model.exceptions import InvalidMemoryInput, MemoryStoreError
from ..pg.database import Database
from . import index, ranking
from .store import (
    REINFORCE_STEP,
    _indexed,
    _row,
    _tags,
    content_hash,
    filters,
    note_changes,
    project_scope,
)

NOTE = ", ".join(index.POSTGRES_COLUMNS)  # a note's columns, as ``_rows`` reads them
ROW = [*index.POSTGRES_COLUMNS, "score", "path_score"]
INDEXED = "SELECT content, topic, tags, length FROM octopoid.memory WHERE id = %s FOR UPDATE"
_INDEXED_DSNS: set[str] = set()  # databases whose older notes this process has indexed


class PostgresMemoryStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        if db.dsn not in _INDEXED_DSNS:
            self.index_pending()
            _INDEXED_DSNS.add(db.dsn)

    def index_pending(self) -> int:
        """Index the notes not indexed yet (a store made before the index, a bulk load), a
        batch per transaction; concurrent indexers skip each other's batches."""
        done = 0
        while True:
            with self.db.tx() as cur:
                batch = index.pending(cur, index.POSTGRES, "FOR UPDATE SKIP LOCKED")
                index.change(cur, index.POSTGRES, batch)
            if not batch:
                return done
            done += len(batch)

    def close(self) -> None:
        """Nothing to close: the connections are the process's pool, shared with the queue."""

    def write_note(
        self,
        content: str,
        *,
        section: str | None = None,
        topic: str | None = None,
        tags: Any = (),
        agent: str = "octopoid",
        scope: str | None = None,
        task_id: str | None = None,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float = 0.5,
        pinned: bool = False,
    ) -> int:
        """Store a note; the same content in the same scope reinforces the existing one.
        Writers of one note are serialised by an advisory lock on (scope, content)."""
        content = content.strip()
        if not content:
            raise InvalidMemoryInput("an empty note cannot be stored")
        scope = scope or project_scope(agent)
        digest, now = content_hash(content), time.time()
        with self.db.tx() as cur:
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"octopoid:memory:{scope}:{digest}",),
            )
            cur.execute(
                "SELECT id, tags, topic, length FROM octopoid.memory "
                "WHERE scope = %s AND content_hash = %s",
                (scope, digest),
            )
            row = cur.fetchone()
            if row is not None:
                merged = _tags([*row[1].split(), *([tags] if isinstance(tags, str) else tags)])
                cur.execute(
                    "UPDATE octopoid.memory SET importance = least(1.0, importance + %s), "
                    "updated = %s, tags = %s, pinned = greatest(pinned, %s) WHERE id = %s",
                    (REINFORCE_STEP, now, merged, int(pinned), row[0]),
                )
                if merged != row[1] and row[3] is not None:
                    old = index.indexed_text(content, row[2], row[1])
                    new = index.indexed_text(content, row[2], merged)
                    index.change(cur, index.POSTGRES, {row[0]: (old, new)})
                return int(row[0])
            cur.execute(
                "INSERT INTO octopoid.memory (content, section, topic, tags, agent, scope, "
                "task_id, session_id, metadata, created, updated, content_hash, importance, "
                "pinned) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) RETURNING id",
                (content, section, topic, _tags(tags), agent, scope, task_id, session_id,
                 json.dumps(metadata or {}), now, now, digest, importance, int(pinned)),
            )  # fmt: skip
            note_id = int(cur.fetchone()[0])
            new = index.indexed_text(content, topic, _tags(tags))
            index.change(cur, index.POSTGRES, {note_id: (None, new)})
            return note_id

    def search_notes(
        self,
        query: str,
        *,
        agent: str | None = None,
        scope: str | None = None,
        tags: Any = None,
        topic: str | None = None,
        session_id: str | None = None,
        limit: int = 10,
    ) -> list[dict[str, Any]]:
        """Notes matching ``query``, best first (``score``: higher is better; ``ranking``)."""
        where, args = filters("%s", "strpos", agent, scope, tags, topic, session_id)
        return ranking.search(self, query, where, args, limit)

    def frequencies(self, terms: list[str]) -> tuple[dict[str, int], int, float]:
        return index.frequencies(self.db.fetch, index.POSTGRES, terms)

    def best(
        self, weights: list[tuple[str, float, bool]], c1: float, c2: float, among: int,
        where: str, args: list[Any], limit: int,
    ) -> list[dict[str, Any]]:  # fmt: skip
        sql, first = index.best_sql(index.POSTGRES, weights, c1, c2, among)
        return self._rows(sql.format(where=where), [*first, *args, limit])

    def get_recent_notes(self, *, limit: int = 10, **given: Any) -> list[dict[str, Any]]:
        where, args = filters("%s", "strpos", **given)
        return self._rows(
            f"SELECT {NOTE} FROM octopoid.memory notes WHERE true {where} "
            "ORDER BY updated DESC, id DESC LIMIT %s",
            [*args, limit],
        )

    def find_note(self, content: str, scope: str) -> int | None:
        row = self.db.one(
            "SELECT id FROM octopoid.memory WHERE scope = %s AND content_hash = %s",
            (scope, content_hash(content)),
        )
        return int(row[0]) if row else None

    def get_note(self, note_id: int) -> dict[str, Any] | None:
        rows = self._rows(f"SELECT {NOTE} FROM octopoid.memory WHERE id = %s", [note_id])
        return rows[0] if rows else None

    def pinned_notes(self, scope: str | None = None) -> list[dict[str, Any]]:
        where, args = filters("%s", "strpos", scope=scope)
        return self._rows(
            f"SELECT {NOTE} FROM octopoid.memory notes WHERE pinned = 1 {where} "
            "ORDER BY importance DESC, updated DESC",
            args,
        )

    def delete_note(self, note_id: int) -> bool:
        with self.db.tx() as cur:
            cur.execute(INDEXED, (note_id,))
            old = _indexed(cur.fetchone())
            if old is not None:
                index.change(cur, index.POSTGRES, {note_id: (old, None)})
            cur.execute("DELETE FROM octopoid.memory WHERE id = %s", (note_id,))
            return cur.rowcount > 0

    def update_note(
        self,
        note_id: int,
        *,
        content: str | None = None,
        tags: Any = None,
    ) -> bool:
        import psycopg

        changes = note_changes(content, tags)
        if not changes:
            return self.get_note(note_id) is not None
        sets = ", ".join(f"{key} = %s" for key in changes)
        with self.db.tx() as cur:
            cur.execute(INDEXED, (note_id,))
            old = _indexed(cur.fetchone())
            try:
                cur.execute(
                    f"UPDATE octopoid.memory SET {sets} WHERE id = %s",
                    [*changes.values(), note_id],
                )
            except psycopg.errors.UniqueViolation:
                raise MemoryStoreError("the same note already exists in that scope") from None
            found = cur.rowcount > 0
            cur.execute(INDEXED, (note_id,))
            new = _indexed(cur.fetchone())
            if old is not None and old != new:
                index.change(cur, index.POSTGRES, {note_id: (old, new)})
            return found

    def record_access(self, note_ids: list[int]) -> None:
        """Count an injection into a prompt (only notes actually injected)."""
        if note_ids:
            self.db.fetch(
                "UPDATE octopoid.memory SET access_count = access_count + 1 WHERE id = ANY(%s)",
                (list(note_ids),),
            )

    def count(self) -> int:
        with self.db.tx() as cur:
            cur.execute("SELECT count(*) FROM octopoid.memory")
            return int(cur.fetchone()[0])

    def integrity_check(self) -> None:
        """Raise ``MemoryStoreError`` if the term index disagrees with the notes."""
        with self.db.tx() as cur:
            problems = index.consistent(cur, index.POSTGRES)
        if problems:
            raise MemoryStoreError(f"memory's index disagrees: {'; '.join(problems[:5])}")

    def _rows(self, sql: str, args: list[Any]) -> list[dict[str, Any]]:
        """A read of notes (``NOTE``'s columns, then a search's ``score`` and ``path_score``)
        in one round trip: one statement on its own, no BEGIN and COMMIT around it."""
        rows = self.db.fetch(sql, tuple(args))
        return [_row(dict(zip(ROW, row, strict=False))) for row in rows]

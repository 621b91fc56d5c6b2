"""Long-term memory in PostgreSQL, for a queue kept there: what an attempt on one machine
learned is found by an attempt on another.

The same notes, fields and rules as ``MemoryStore`` (SQLite), in ``octopoid.memory``
(migrations 3, 4 and 6 of ``pg/schema.py``), on the connection pool it shares with the
queue (``pg/database.py``), with the same term index (``index.py``:
``octopoid.memory_terms``, ``memory_vocab``, ``memory_totals``) and the same ranking
(``ranking.py``): a query finds and orders the same notes on both.
"""

from __future__ import annotations

from typing import Any

from ..pg.database import Database
from . import index
from .store import NoteStore, _row

ROW = [*index.COLUMNS, "score", "path_score"]
_INDEXED_DSNS: set[str] = set()  # databases whose older notes this process has indexed


class PostgresMemoryStore(NoteStore):
    d = index.POSTGRES
    LOCK = " FOR UPDATE"
    PENDING_LOCK = "FOR UPDATE SKIP LOCKED"  # concurrent indexers skip each other's batches

    def __init__(self, db: Database) -> None:
        self.db = db
        if db.dsn not in _INDEXED_DSNS:
            self.index_pending()
            _INDEXED_DSNS.add(db.dsn)

    def _tx(self) -> Any:
        return self.db.tx()

    def _fetch(self, sql: str, args: list[Any]) -> list[Any]:
        return self.db.fetch(sql, tuple(args))

    def _rows(self, sql: str, args: list[Any]) -> list[dict[str, Any]]:
        """A read of notes (``NOTE``'s columns, then a search's ``score`` and ``path_score``)
        in one round trip: one statement on its own, no BEGIN and COMMIT around it."""
        return [_row(dict(zip(ROW, row, strict=False))) for row in self._fetch(sql, args)]

    def _duplicate(self) -> type[Exception]:
        import psycopg

        return psycopg.errors.UniqueViolation

    def _lock_note(self, cur: Any, key: str) -> None:
        """Writers of one note are serialised by an advisory lock on (scope, content)."""
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))

    def record_access(self, note_ids: list[int]) -> None:
        """Count an injection into a prompt (only notes actually injected)."""
        if note_ids:
            self.db.fetch(
                "UPDATE octopoid.memory SET access_count = access_count + 1 WHERE id = ANY(%s)",
                (list(note_ids),),
            )

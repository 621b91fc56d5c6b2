"""Long-term memory in PostgreSQL, for a queue kept there: what an attempt on one machine
learned is found by an attempt on another.

The same notes, fields and rules as ``MemoryStore`` (SQLite + FTS5), in ``octopoid.memory``
(migration 3 of ``store/postgres.py``), on the queue's connection pool. Search is a
``tsvector`` over content, topic and tags, kept by a generated column and a GIN index, in
the ``english`` configuration: a Snowball stemmer, as FTS5's ``porter`` tokenizer stems.
Unlike FTS5 it drops English stop words, so a query of stop words alone ("don't", "it")
finds nothing, as a query for them should. A query matches a note having any of its
words, as ``fts_query`` makes FTS5 do, and ranks like BM25 (``SEARCH_SQL``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..exceptions import InvalidMemoryInput, MemoryStoreError
from ..store.postgres import PostgresStore
from .store import (
    REINFORCE_STEP,
    WORD_RE,
    _row,
    _tags,
    content_hash,
    filters,
    note_changes,
    project_scope,
)

MAX_QUERY_WORDS = 64  # a task's text can be long; its first distinct words are plenty


def query_words(text: str) -> list[str]:
    """The distinct words of free text that have something to search for."""
    words = [word for word in text.split() if WORD_RE.search(word)]
    return list(dict.fromkeys(words))[:MAX_QUERY_WORDS]


# Each query word as a tsquery parsed exactly as a note's text is (so ``auth.py`` or
# ``token-refresh`` match themselves; the words are parameters, never query syntax),
# weighted by BM25's idf over all notes; a note scores the sum, over the words it has, of
# idf x ts_rank (term frequency, normalised by the note's length). Plain ts_rank has no
# idf: "the" would weigh as much as "webhook".
SEARCH_SQL = """
WITH words AS (
    SELECT DISTINCT q FROM unnest(%s::text[]) AS t(w),
        LATERAL (SELECT plainto_tsquery('english', w) AS q) x
    WHERE numnode(q) > 0
), total AS (
    SELECT count(*)::float AS n FROM octopoid.memory
), weighted AS (
    SELECT words.q, ln(1 + (total.n - d.df + 0.5) / (d.df + 0.5)) AS idf
    FROM words, total,
        LATERAL (SELECT count(*) AS df FROM octopoid.memory m WHERE m.search @@ words.q) d
)
SELECT notes.*, sum(weighted.idf * ts_rank(notes.search, weighted.q, 1)) AS score
FROM octopoid.memory notes JOIN weighted ON notes.search @@ weighted.q
WHERE true {where}
GROUP BY notes.id
ORDER BY score DESC, notes.id
LIMIT %s
"""


class PostgresMemoryStore:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def close(self) -> None:
        """Nothing to close: the connections are the queue's pool."""

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
        with self.store._tx() as cur:
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"octopoid:memory:{scope}:{digest}",),
            )
            cur.execute(
                "SELECT id, tags FROM octopoid.memory WHERE scope = %s AND content_hash = %s",
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
                return int(row[0])
            cur.execute(
                "INSERT INTO octopoid.memory (content, section, topic, tags, agent, scope, "
                "task_id, session_id, metadata, created, updated, content_hash, importance, "
                "pinned) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) RETURNING id",
                (content, section, topic, _tags(tags), agent, scope, task_id, session_id,
                 json.dumps(metadata or {}), now, now, digest, importance, int(pinned)),
            )  # fmt: skip
            return int(cur.fetchone()[0])

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
        """Notes matching ``query``, best first (``score``: higher is better)."""
        words = query_words(query)
        if not words:
            return []
        where, args = filters("%s", "strpos", agent, scope, tags, topic, session_id)
        return self._rows(SEARCH_SQL.format(where=where), [words, *args, limit])

    def get_recent_notes(self, *, limit: int = 10, **given: Any) -> list[dict[str, Any]]:
        where, args = filters("%s", "strpos", **given)
        return self._rows(
            f"SELECT * FROM octopoid.memory notes WHERE true {where} "
            "ORDER BY updated DESC, id DESC LIMIT %s",
            [*args, limit],
        )

    def find_note(self, content: str, scope: str) -> int | None:
        rows = self._rows(
            "SELECT id FROM octopoid.memory WHERE scope = %s AND content_hash = %s",
            [scope, content_hash(content)],
            raw=True,
        )
        return rows[0]["id"] if rows else None

    def get_note(self, note_id: int) -> dict[str, Any] | None:
        rows = self._rows("SELECT * FROM octopoid.memory WHERE id = %s", [note_id])
        return rows[0] if rows else None

    def pinned_notes(self, scope: str | None = None) -> list[dict[str, Any]]:
        where, args = filters("%s", "strpos", scope=scope)
        return self._rows(
            f"SELECT * FROM octopoid.memory notes WHERE pinned = 1 {where} "
            "ORDER BY importance DESC, updated DESC",
            args,
        )

    def delete_note(self, note_id: int) -> bool:
        with self.store._tx() as cur:
            cur.execute("DELETE FROM octopoid.memory WHERE id = %s", (note_id,))
            return cur.rowcount > 0

    def update_note(
        self,
        note_id: int,
        *,
        content: str | None = None,
        tags: Any = None,
        topic: str | None = None,
        importance: float | None = None,
        pinned: bool | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        import psycopg

        changes = note_changes(content, tags, topic, importance, pinned, metadata)
        if not changes:
            return self.get_note(note_id) is not None
        sets = ", ".join(f"{key} = %s" for key in changes)
        with self.store._tx() as cur:
            try:
                cur.execute(
                    f"UPDATE octopoid.memory SET {sets} WHERE id = %s",
                    [*changes.values(), note_id],
                )
            except psycopg.errors.UniqueViolation:
                raise MemoryStoreError("the same note already exists in that scope") from None
            return cur.rowcount > 0

    def record_access(self, note_ids: list[int]) -> None:
        """Count an injection into a prompt (only notes actually injected)."""
        if note_ids:
            with self.store._tx() as cur:
                cur.execute(
                    "UPDATE octopoid.memory SET access_count = access_count + 1 WHERE id = ANY(%s)",
                    (list(note_ids),),
                )

    def count(self) -> int:
        with self.store._tx() as cur:
            cur.execute("SELECT count(*) FROM octopoid.memory")
            return int(cur.fetchone()[0])

    def _rows(self, sql: str, args: list[Any], raw: bool = False) -> list[dict[str, Any]]:
        with self.store._tx() as cur:
            cur.execute(sql, args)
            names = [d.name for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        for row in rows:
            row.pop("search", None)
        return rows if raw else [_row(row) for row in rows]

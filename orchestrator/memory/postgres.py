"""Long-term memory in PostgreSQL, for a queue kept there: what an attempt on one machine
learned is found by an attempt on another.

The same notes, fields and rules as ``MemoryStore`` (SQLite + FTS5), in ``octopoid.memory``
(migration 3 of ``store/postgres.py``), on the queue's connection pool. Search is a
``tsvector`` over content, topic and tags, kept by a generated column and a GIN index, in
the ``english`` configuration: a Snowball stemmer, as FTS5's ``porter`` tokenizer stems.
Unlike FTS5 it drops English stop words, so a query of stop words alone ("don't", "it")
finds nothing, as a query for them should. A query matches a note having any of its
``selective`` words and is ranked as ``ranking`` ranks the SQLite store's.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..exceptions import InvalidMemoryInput, MemoryStoreError
from ..store.postgres import PostgresStore
from . import ranking
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


def query_words(text: str) -> list[str]:
    """The distinct words of free text that have something to search for."""
    words = [word for word in text.split() if WORD_RE.search(word)]
    return list(dict.fromkeys(words))[: ranking.MAX_QUERY_WORDS]


# Each distinct query word as a tsquery parsed exactly as a note's text is (so ``auth.py`` or
# ``token-refresh`` match themselves; the words are parameters, never query syntax), its
# parts in a row as FTS5's phrases (``token_refresh`` is not "token" and "refresh" anywhere)
TERMS_SQL = """
SELECT DISTINCT ON (q::text) q::text, numnode(q) = 1
FROM unnest(%s::text[]) AS t(w), LATERAL (SELECT phraseto_tsquery('english', w) AS q) x
WHERE numnode(q) > 0
"""
# ANALYZE's most common lexemes, with the share of notes having each: the count of a common
# word without visiting its notes (autovacuum keeps them; a store never analyzed has none)
STATS_SQL = """
SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs, c.reltuples
FROM pg_stats s JOIN pg_class c ON c.oid = 'octopoid.memory'::regclass
WHERE s.schemaname = 'octopoid' AND s.tablename = 'memory' AND s.attname = 'search'
"""
COUNT_SQL = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM octopoid.memory m WHERE m.search @@ t.q::tsquery
    LIMIT %s) x)
FROM unnest(%s::text[]) WITH ORDINALITY AS t(q, n) ORDER BY n
"""
# Every note having a chosen term, through the filters, by summed idf; the leaders' rows
# with the idfs of their terms (``ranking.rerank``)
SEARCH_SQL = """
WITH hits AS (
    SELECT notes.id, {score} AS score, array_agg(t.w) AS weights
    FROM unnest(%s::tsquery[], %s::float8[]) AS t(q, w)
    JOIN octopoid.memory notes ON notes.search @@ t.q
    WHERE true {where}
    GROUP BY notes.id
    ORDER BY score DESC, notes.id
    LIMIT %s
)
SELECT m.*, hits.weights FROM hits JOIN octopoid.memory m ON m.id = hits.id
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
        """Notes matching ``query``, best first (``score``: higher is better, BM25 over the
        ``ranking`` leaders of its ``selective`` words)."""
        words = query_words(query)
        if not words:
            return []
        counts, size = self._counts(words)
        chosen = ranking.selective(counts)
        if not chosen:
            return []
        where, args = filters("%s", "strpos", agent, scope, tags, topic, session_id)
        idfs = [ranking.idf(size, counts[q]) for q in chosen]
        # every word common: summed idf ties across their notes (the oldest would win), so
        # the leaders are those with the words most often (ts_rank), as SQLite's BM25 does
        common = all(counts[q] >= ranking.COMMON_CAP for q in chosen)
        score = "sum(t.w * ts_rank(notes.search, t.q, 1))" if common else "sum(t.w)"
        rows = self._rows(
            SEARCH_SQL.format(where=where, score=score),
            [chosen, idfs, *args, max(ranking.RERANK, limit)],
        )
        weights = {row["id"]: row.pop("weights") for row in rows}
        return ranking.rerank(rows, weights)[:limit]

    def _counts(self, words: list[str]) -> tuple[dict[str, int], int]:
        """How many notes have each word's tsquery (up to ``COMMON_CAP``), and how many notes
        there are: a one-lexeme word from ANALYZE's common lexemes if it is one, any other
        word counted (it is rarer than those, or several lexemes in a row)."""
        with self.store._tx() as cur:
            cur.execute(TERMS_SQL, (words,))
            terms = cur.fetchall()
            cur.execute(STATS_SQL)
            stats = cur.fetchone()
            cur.execute("SELECT coalesce(max(id), 0) FROM octopoid.memory")
            size = int(cur.fetchone()[0])
            common = {}
            if stats and stats[0]:  # quoted as a one-lexeme tsquery prints (else counted);
                # the frequencies end with three summary numbers, which zip leaves out
                common = {
                    "'" + e.replace("'", "''") + "'": f * max(stats[2], 0)
                    for e, f in zip(stats[0], stats[1], strict=False)
                }
            counts = {
                q: min(ranking.COMMON_CAP, round(common[q]))
                for q, single in terms
                if single and q in common
            }
            rest = [q for q, _ in terms if q not in counts]
            cur.execute(COUNT_SQL, (ranking.COMMON_CAP, rest))
            counts.update(zip(rest, (int(n) for (n,) in cur.fetchall()), strict=True))
        return counts, size

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

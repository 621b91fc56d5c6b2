"""Long-term memory: notes in one SQLite database, searched through the term index
(``index.py``) and ranked by BM25 (``ranking.py``). ``NoteStore`` is all a memory does, in
its database's dialect: the PostgreSQL memory (``postgres.py``) is one too. A note's
fields and rules are docs/memory.md's.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from .. import config
from ..model.exceptions import InvalidMemoryInput, MemoryStoreError
from . import index, ranking
from .notes import normalize_item

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY,
    content TEXT NOT NULL,
    section TEXT,
    topic TEXT,
    tags TEXT NOT NULL DEFAULT '',
    agent TEXT NOT NULL,
    scope TEXT NOT NULL,
    task_id TEXT,
    session_id TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    content_hash TEXT NOT NULL,
    importance REAL NOT NULL DEFAULT 0.5,
    pinned INTEGER NOT NULL DEFAULT 0,
    access_count INTEGER NOT NULL DEFAULT 0,
    length INTEGER,
    UNIQUE (scope, content_hash)
);
CREATE INDEX IF NOT EXISTS notes_pinned ON notes (scope, importance DESC, updated DESC)
    WHERE pinned = 1;
CREATE INDEX IF NOT EXISTS notes_unindexed ON notes (id) WHERE length IS NULL;
CREATE TABLE IF NOT EXISTS memory_terms (
    term TEXT NOT NULL, note INTEGER NOT NULL, tf INTEGER NOT NULL, len INTEGER NOT NULL,
    PRIMARY KEY (term, note)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memory_terms_note ON memory_terms (note);
CREATE TABLE IF NOT EXISTS memory_vocab (term TEXT PRIMARY KEY, df INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memory_totals (
    one INTEGER PRIMARY KEY CHECK (one = 1), notes INTEGER NOT NULL, length INTEGER NOT NULL
);
INSERT OR IGNORE INTO memory_totals VALUES (1, 0, 0);
DROP TRIGGER IF EXISTS notes_ai;
DROP TRIGGER IF EXISTS notes_ad;
DROP TRIGGER IF EXISTS notes_au;
DROP TABLE IF EXISTS notes_fts;
"""
# 1: the pinned notes' partial index (every prompt reads them: a scan of every note before)
# 2: the term index (``index.py``) instead of FTS5, its notes indexed when the file is opened
SCHEMA_VERSION = 2  # PRAGMA user_version; a store of an older version gets _SCHEMA again
REINFORCE_STEP = 0.1  # importance gained when the same note is written again
NOTE = ", ".join(index.COLUMNS)  # a note's columns, as ``_row`` reads them


def content_hash(content: str) -> str:
    import hashlib  # OpenSSL's load, ~7 ms: a search hashes only notes.md's items, if any

    return hashlib.sha256(normalize_item(content).encode()).hexdigest()


def project_scope(agent: str = "octopoid") -> str:
    """``notes:<agent>:<project>``: the project is the root folder's name, or with the queue
    in PostgreSQL (clones on several machines, named as each likes) the database's name."""
    backend, dsn = config.store_choice()
    if backend == "postgres" and dsn:
        from psycopg.conninfo import conninfo_to_dict

        return f"notes:{agent}:{conninfo_to_dict(dsn).get('dbname') or 'postgres'}"
    return f"notes:{agent}:{config.find_project_root().name}"


def _tags(tags: Any) -> str:
    items = [tags] if isinstance(tags, str) else list(tags or ())
    return " ".join(dict.fromkeys(t.strip() for t in items if t and t.strip()))


class NoteStore:
    """What both memories do alike, in their ``Dialect``: a store gives ``_tx`` (a cursor
    in one write transaction), ``_fetch`` (one statement's rows), ``_rows`` (a read of
    notes) and the exception its database raises for a second note of the same content
    (``_duplicate``)."""

    d: index.Dialect
    LOCK = ""  # what locks the row a write reads
    PENDING_LOCK = ""  # what keeps two indexers off one batch of notes
    _tx: Callable[[], AbstractContextManager[Any]]
    _fetch: Callable[[str, list[Any]], list[Any]]
    _rows: Callable[[str, list[Any]], list[dict[str, Any]]]
    _duplicate: Callable[[], type[Exception]]

    def _lock_note(self, cur: Any, key: str) -> None:
        """Serialise the writers of one note (SQLite's ``BEGIN IMMEDIATE`` does already)."""

    def close(self) -> None:
        """Nothing to close unless the store holds its own connection."""

    def index_pending(self) -> int:
        """Index the notes not indexed yet (a store made before the index, a bulk load), a
        batch per transaction; return how many."""
        done = 0
        while True:
            with self._tx() as cur:
                batch = index.pending(cur, self.d, self.PENDING_LOCK)
                index.change(cur, self.d, batch)
            if not batch:
                return done
            done += len(batch)

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
        """Store a note; the same content in the same scope reinforces the existing one."""
        content = content.strip()
        if not content:
            raise InvalidMemoryInput("an empty note cannot be stored")
        scope = scope or project_scope(agent)
        digest, now = content_hash(content), time.time()
        m, notes, sqlite = self.d.mark, self.d.notes, self.d is index.SQLITE
        with self._tx() as cur:
            self._lock_note(cur, f"octopoid:memory:{scope}:{digest}")
            row = cur.execute(
                f"SELECT id, tags, topic, length FROM {notes} "
                f"WHERE scope = {m} AND content_hash = {m}",
                (scope, digest),
            ).fetchone()
            if row is not None:
                merged = _tags([*row[1].split(), *([tags] if isinstance(tags, str) else tags)])
                least, greatest = ("min", "max") if sqlite else ("least", "greatest")
                cur.execute(
                    f"UPDATE {notes} SET importance = {least}(1.0, importance + {m}), "
                    f"updated = {m}, tags = {m}, pinned = {greatest}(pinned, {m}) WHERE id = {m}",
                    (REINFORCE_STEP, now, merged, int(pinned), row[0]),
                )
                if merged != row[1] and row[3] is not None:
                    old = index.indexed_text(content, row[2], row[1])
                    new = index.indexed_text(content, row[2], merged)
                    index.change(cur, self.d, {row[0]: (old, new)})
                return int(row[0])
            note_id = cur.execute(
                f"INSERT INTO {notes} (content, section, topic, tags, agent, scope, task_id, "
                "session_id, metadata, created, updated, content_hash, importance, pinned) "
                f"VALUES ({', '.join([m] * 14)}) RETURNING id",
                (content, section, topic, _tags(tags), agent, scope, task_id, session_id,
                 json.dumps(metadata or {}), now, now, digest, importance, int(pinned)),
            ).fetchone()[0]  # fmt: skip
            new = index.indexed_text(content, topic, _tags(tags))
            index.change(cur, self.d, {note_id: (None, new)})
        return int(note_id)

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
        where, args = filters(self.d, agent, scope, tags, topic, session_id)
        return ranking.search(self, query, where, args, limit)

    def frequencies(self, terms: list[str]) -> tuple[dict[str, int], int, float]:
        return index.frequencies(self._fetch, self.d, terms)

    def best(
        self, weights: list[tuple[str, float, bool]], c1: float, c2: float, among: int,
        where: str, args: list[Any], limit: int,
    ) -> list[dict[str, Any]]:  # fmt: skip
        sql, first = index.best_sql(self.d, weights, c1, c2, among)
        return self._rows(sql.format(where=where), [*first, *args, limit])

    def get_recent_notes(self, *, limit: int = 10, **given: Any) -> list[dict[str, Any]]:
        """Newest first; ``filters`` as for ``search_notes`` (agent, scope, tags, topic,
        session_id)."""
        where, args = filters(self.d, **given)
        return self._rows(
            f"SELECT {NOTE} FROM {self.d.notes} notes WHERE true {where} "
            f"ORDER BY updated DESC, id DESC LIMIT {self.d.mark}",
            [*args, limit],
        )

    def find_note(self, content: str, scope: str) -> int | None:
        """The id of the note with this content (normalised) in ``scope``, if any."""
        m = self.d.mark
        rows = self._fetch(
            f"SELECT id FROM {self.d.notes} WHERE scope = {m} AND content_hash = {m}",
            [scope, content_hash(content)],
        )
        return int(rows[0][0]) if rows else None

    def get_note(self, note_id: int) -> dict[str, Any] | None:
        sql = f"SELECT {NOTE} FROM {self.d.notes} WHERE id = {self.d.mark}"
        rows = self._rows(sql, [note_id])
        return rows[0] if rows else None

    def pinned_notes(self, scope: str | None = None) -> list[dict[str, Any]]:
        where, args = filters(self.d, scope=scope)
        return self._rows(
            f"SELECT {NOTE} FROM {self.d.notes} notes WHERE pinned = 1 {where} "
            "ORDER BY importance DESC, updated DESC",
            args,
        )

    def delete_note(self, note_id: int) -> bool:
        with self._tx() as cur:
            old = self._indexed(cur, note_id)
            if old is not None:
                index.change(cur, self.d, {note_id: (old, None)})
            cur.execute(f"DELETE FROM {self.d.notes} WHERE id = {self.d.mark}", (note_id,))
            return cur.rowcount > 0

    def update_note(
        self,
        note_id: int,
        *,
        content: str | None = None,
        tags: Any = None,
    ) -> bool:
        changes: dict[str, Any] = {}
        if content is not None:
            changes.update(content=content.strip(), content_hash=content_hash(content))
        if tags is not None:
            changes["tags"] = _tags(tags)
        if not changes:
            return self.get_note(note_id) is not None
        changes["updated"] = time.time()
        m = self.d.mark
        sets = ", ".join(f"{key} = {m}" for key in changes)
        with self._tx() as cur:
            old = self._indexed(cur, note_id)
            try:
                cur.execute(
                    f"UPDATE {self.d.notes} SET {sets} WHERE id = {m}",
                    [*changes.values(), note_id],
                )
            except self._duplicate():
                raise MemoryStoreError("the same note already exists in that scope") from None
            found = cur.rowcount > 0
            new = self._indexed(cur, note_id)
            if old is not None and old != new:
                index.change(cur, self.d, {note_id: (old, new)})
            return found

    def _indexed(self, cur: Any, note_id: int) -> str | None:
        """The text a note is indexed by; None: no note, or not indexed yet."""
        row = cur.execute(
            f"SELECT content, topic, tags, length FROM {self.d.notes} "
            f"WHERE id = {self.d.mark}{self.LOCK}",
            (note_id,),
        ).fetchone()
        if row is None or row[3] is None:
            return None
        return index.indexed_text(row[0], row[1], row[2])

    def count(self) -> int:
        return int(self._fetch(f"SELECT count(*) FROM {self.d.notes}", [])[0][0])

    def integrity_check(self) -> None:
        """Raise ``MemoryStoreError`` if the term index disagrees with the notes."""
        with self._tx() as cur:
            problems = index.consistent(cur, self.d)
        if problems:
            raise MemoryStoreError(f"memory's index disagrees: {'; '.join(problems[:5])}")


class MemoryStore(NoteStore):
    d = index.SQLITE

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or config.get_memory_dir() / "memory.db"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA busy_timeout=30000")
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL: safe against crashes of ours
        if self._version() < SCHEMA_VERSION:
            self._migrate()
        elif self.db.execute("SELECT 1 FROM notes WHERE length IS NULL LIMIT 1").fetchone():
            self.index_pending()  # a migration's indexing cut short (a crash), a bulk load

    def _version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        """Bring the file to ``SCHEMA_VERSION`` (one migrator at a time: the others find it
        done), then index its notes."""
        with self._tx() as cur:
            if self._version() >= SCHEMA_VERSION:
                return
            columns = {row[1] for row in cur.execute("PRAGMA table_info(notes)")}
            if columns and "length" not in columns:
                cur.execute("ALTER TABLE notes ADD COLUMN length INTEGER")
            for statement in _SCHEMA.split(";\n"):
                if statement.strip():
                    cur.execute(statement)
            cur.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self.index_pending()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        """A cursor in one write transaction (``BEGIN IMMEDIATE``: writers queue up)."""
        cur = self.db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")

    def _fetch(self, sql: str, args: list[Any]) -> list[Any]:
        return self.db.execute(sql, args).fetchall()

    def _rows(self, sql: str, args: list[Any]) -> list[dict[str, Any]]:
        return [_row(dict(r)) for r in self.db.execute(sql, args)]

    def _duplicate(self) -> type[Exception]:
        return sqlite3.IntegrityError

    def close(self) -> None:
        self.db.close()

    def record_access(self, note_ids: list[int]) -> None:
        """Count an injection into a prompt (only notes actually injected)."""
        self.db.execute(  # one statement, one transaction: not a commit per note
            "UPDATE notes SET access_count = access_count + 1 "
            "WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(note_ids),),
        )


def filters(
    d: index.Dialect,
    agent: str | None = None,
    scope: str | None = None,
    tags: Any = None,
    topic: str | None = None,
    session_id: str | None = None,
) -> tuple[str, list[Any]]:
    """``AND ...`` clauses and their arguments for the search filters, in ``d``'s
    placeholder and substring function (SQLite's ``instr``, PostgreSQL's ``strpos``)."""
    mark, find = d.mark, "instr" if d is index.SQLITE else "strpos"
    clauses, args = [], []
    given = {"agent": agent, "scope": scope, "topic": topic, "session_id": session_id}
    for column, value in given.items():
        if value is not None:
            clauses.append(f"AND notes.{column} = {mark}")
            args.append(value)
    for tag in _tags(tags).split():
        clauses.append(f"AND {find}(' ' || notes.tags || ' ', {mark}) > 0")
        args.append(f" {tag} ")
    return " ".join(clauses), args


def _row(out: dict[str, Any]) -> dict[str, Any]:
    out["tags"] = out["tags"].split()
    out["metadata"] = json.loads(out["metadata"] or "{}")
    out["pinned"] = bool(out["pinned"])
    out.pop("content_hash", None)
    return out
